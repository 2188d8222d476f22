/*
 * ordering.c - the ordering object: argument checks, create/destroy, the calls that
 * read it, BETA's swap formula and the lower bound, and the assignment of edge
 * buckets to states.
 *
 * How buckets are assigned
 * ------------------------
 * Partitions a and b are co-resident over a union of intervals of states: an
 * interval opens when the second of the two arrives (state 0 opens every pair of
 * the first fill, including a partition with itself) and closes when either leaves.
 * Because consecutive states differ in one slot, one pass over the states sees every
 * interval open and close at O(c) cost per swap:
 *
 *   FIRST  (BETA, SEQUENTIAL): a bucket takes the state where its pair's first
 *          interval opens: the first state in which both ends are resident.
 *   RANDOM (COMET): a weighted reservoir per bucket over its pair's intervals: when
 *          an interval of length len closes, seen += len, and with probability
 *          len/seen the bucket takes a state drawn uniformly from that interval.
 *          After the last interval the bucket's state is uniform over all the
 *          states where its ends are co-resident. Buckets (a, b) and (b, a) draw
 *          independently.
 *
 * Invariant: a bucket is given a state only inside one of its pair's intervals, so
 * both of its partitions are resident in that state. Buckets whose pair never meets
 * keep EMBER_GRAPH_ORDERING_NO_STATE (SEQUENTIAL only; BETA and COMET cover every
 * pair).
 *
 * Per-pair scratch (start of the open interval, length seen) is indexed by the
 * unordered pair, a <= b: b*(b+1)/2 + a.
 */
#include "graph/ordering_int.h"

#include "core/alloc.h"

#include <string.h>

void ember_graph_ordering_options_default(ember_graph_ordering_options *opts)
{
	if (opts)
		memset(opts, 0, sizeof(*opts));
}

/* ---- formulas -------------------------------------------------------------------- */

static bool pc_ok(uint32_t p, uint32_t c)
{
	return c >= 2 && c <= p && p <= (1u << 31);
}

int ember_graph_ordering_beta_swaps(uint32_t p, uint32_t c, uint64_t *out)
{
	if (!out || !pc_ok(p, c))
		return EMBER_EINVAL;
	uint64_t n = p - c, d = c - 1, x = n / d;
	/* (x+1)[n - x d / 2] = (x+1) n - d x (x+1) / 2; x (x+1) is even. */
	*out = n + (x + 1) * n - d * (x * (x + 1) / 2);
	return 0;
}

int ember_graph_ordering_lower_bound(uint32_t p, uint32_t c, uint64_t *out)
{
	if (!out || !pc_ok(p, c))
		return EMBER_EINVAL;
	uint64_t pairs = (uint64_t)p * (p - 1) / 2 - (uint64_t)c * (c - 1) / 2;
	uint64_t d = c - 1;
	*out = (pairs + d - 1) / d;
	return 0;
}

/* ---- bucket assignment ------------------------------------------------------------ */

static inline size_t tri(uint32_t a, uint32_t b)
{
	if (a > b) {
		uint32_t t = a;
		a = b;
		b = t;
	}
	return (size_t)b * (b + 1) / 2 + a;
}

typedef struct assign_ctx {
	ember_graph_ordering *ord;
	bool random;
	ord_rng rng;
	uint32_t *start; /* per unordered pair: first state of the open interval */
	uint32_t *seen;  /* RANDOM: states of the closed intervals so far */
} assign_ctx;

static void pair_open(assign_ctx *x, uint32_t a, uint32_t b, uint32_t s)
{
	uint32_t p = x->ord->p, *bs = x->ord->bucket_state;
	if (x->random) {
		x->start[tri(a, b)] = s;
		return;
	}
	if (bs[(size_t)a * p + b] == EMBER_GRAPH_ORDERING_NO_STATE)
		bs[(size_t)a * p + b] = s;
	if (bs[(size_t)b * p + a] == EMBER_GRAPH_ORDERING_NO_STATE)
		bs[(size_t)b * p + a] = s;
}

/* RANDOM only: the interval [start, end] of pair (a, b) closes. */
static void pair_close(assign_ctx *x, uint32_t a, uint32_t b, uint32_t end)
{
	uint32_t p = x->ord->p, *bs = x->ord->bucket_state;
	size_t t = tri(a, b);
	uint32_t st = x->start[t];
	uint64_t len = (uint64_t)end - st + 1;
	x->seen[t] += (uint32_t)len;
	size_t b1 = (size_t)a * p + b, b2 = (size_t)b * p + a;
	if (ord_rng_below(&x->rng, x->seen[t]) < len)
		bs[b1] = st + (uint32_t)ord_rng_below(&x->rng, len);
	if (b2 != b1 && ord_rng_below(&x->rng, x->seen[t]) < len)
		bs[b2] = st + (uint32_t)ord_rng_below(&x->rng, len);
}

/* Index of the one slot where states s-1 and s differ, or c if none. */
static uint32_t changed_slot(const ember_graph_ordering *ord, uint32_t s)
{
	const uint32_t *a = ord->slots + (size_t)(s - 1) * ord->c;
	const uint32_t *b = a + ord->c;
	for (uint32_t k = 0; k < ord->c; k++)
		if (a[k] != b[k])
			return k;
	return ord->c;
}

static void assign_walk(assign_ctx *x)
{
	ember_graph_ordering *ord = x->ord;
	uint32_t c = ord->c, S = ord->nstates;
	const uint32_t *st = ord->slots;
	for (uint32_t i = 0; i < c; i++)
		for (uint32_t j = i; j < c; j++)
			pair_open(x, st[i], st[j], 0);
	for (uint32_t s = 1; s < S; s++) {
		uint32_t k = changed_slot(ord, s);
		if (k == c)
			continue; /* no change (generators never do this) */
		const uint32_t *prev = st + (size_t)(s - 1) * c, *cur = prev + c;
		uint32_t ev = prev[k], ld = cur[k];
		if (x->random)
			for (uint32_t y = 0; y < c; y++)
				pair_close(x, ev, prev[y], s - 1);
		for (uint32_t y = 0; y < c; y++)
			pair_open(x, ld, cur[y], s);
	}
	if (x->random) {
		const uint32_t *last = st + (size_t)(S - 1) * c;
		for (uint32_t i = 0; i < c; i++)
			for (uint32_t j = i; j < c; j++)
				pair_close(x, last[i], last[j], S - 1);
	}
}

/* Fill bucket_state, then the per-state lists (CSR). */
static int assign_buckets(ember_graph_ordering *ord, bool random, uint64_t seed,
			  uint64_t epoch)
{
	int rc = 0;
	uint32_t p = ord->p, S = ord->nstates;
	size_t nb = (size_t)p * p, np = (size_t)p * (p + 1) / 2;
	assign_ctx x = {.ord = ord, .random = random};
	ord->bucket_state = em_alloc(nb * sizeof(uint32_t));
	ord->state_off = em_zalloc(((size_t)S + 1) * sizeof(uint32_t));
	if (!ord->bucket_state || !ord->state_off)
		return EMBER_ENOMEM; /* destroy frees what was allocated */
	memset(ord->bucket_state, 0xff, nb * sizeof(uint32_t)); /* NO_STATE */
	if (random) {
		ord_rng_seed(&x.rng, seed, epoch, ORD_STREAM_BUCKETS);
		x.start = em_alloc(np * sizeof(uint32_t));
		x.seen = em_zalloc(np * sizeof(uint32_t));
		if (!x.start || !x.seen) {
			rc = EMBER_ENOMEM;
			goto undo_scratch;
		}
	}
	assign_walk(&x);

	uint64_t assigned = 0;
	for (size_t b = 0; b < nb; b++)
		if (ord->bucket_state[b] != EMBER_GRAPH_ORDERING_NO_STATE) {
			ord->state_off[ord->bucket_state[b] + 1]++;
			assigned++;
		}
	for (uint32_t s = 0; s < S; s++)
		ord->state_off[s + 1] += ord->state_off[s];
	ord->assigned = assigned;
	ord->state_buckets = em_alloc((assigned ? assigned : 1) * sizeof(uint32_t));
	if (!ord->state_buckets) {
		rc = EMBER_ENOMEM;
		goto undo_scratch;
	}
	/* Fill in ascending bucket order: each state's list comes out sorted. Uses
	 * state_off[s] as the cursor, then shifts back. */
	for (size_t b = 0; b < nb; b++) {
		uint32_t s = ord->bucket_state[b];
		if (s != EMBER_GRAPH_ORDERING_NO_STATE)
			ord->state_buckets[ord->state_off[s]++] = (uint32_t)b;
	}
	for (uint32_t s = S; s > 0; s--)
		ord->state_off[s] = ord->state_off[s - 1];
	ord->state_off[0] = 0;
undo_scratch:
	em_free(x.seen, x.seen ? np * sizeof(uint32_t) : 0);
	em_free(x.start, x.start ? np * sizeof(uint32_t) : 0);
	return rc;
}

/* ---- create / destroy ------------------------------------------------------------ */

static int check_train(uint32_t p, uint32_t c, const uint32_t *train, uint32_t t)
{
	if (!train || t == 0 || t > c)
		return EMBER_EINVAL;
	/* Distinct and < p: sort-free check with a bitmap of p bits. */
	uint64_t *seen = em_zalloc(((size_t)p + 63) / 64 * sizeof(uint64_t));
	if (!seen)
		return EMBER_ENOMEM;
	int rc = 0;
	for (uint32_t i = 0; i < t && rc == 0; i++) {
		uint32_t v = train[i];
		if (v >= p || (seen[v / 64] >> (v % 64) & 1))
			rc = EMBER_EINVAL;
		else
			seen[v / 64] |= 1ull << (v % 64);
	}
	em_free(seen, 0);
	return rc;
}

int ember_graph_ordering_create(uint32_t p, uint32_t c, int kind,
				const ember_graph_ordering_options *opts,
				ember_graph_ordering **out)
{
	int rc;
	ember_graph_ordering_options def;
	if (!out)
		return EMBER_EINVAL;
	*out = NULL;
	if (!opts) {
		ember_graph_ordering_options_default(&def);
		opts = &def;
	}
	if (c < 2 || c > p || p > EMBER_GRAPH_ORDERING_MAX_PARTITIONS)
		return EMBER_EINVAL;
	uint32_t group = 1;
	switch (kind) {
	case EMBER_GRAPH_ORDERING_BETA:
		break;
	case EMBER_GRAPH_ORDERING_COMET:
		group = opts->comet_group ? opts->comet_group : ord_comet_default_group(p, c);
		if (p % group != 0 || c % group != 0 || c / group < 2)
			return EMBER_EINVAL;
		break;
	case EMBER_GRAPH_ORDERING_SEQUENTIAL:
		if ((rc = check_train(p, c, opts->train, opts->n_train)) < 0)
			return rc;
		break;
	default:
		return EMBER_EINVAL;
	}

	ember_graph_ordering *ord = em_zalloc(sizeof(*ord));
	if (!ord)
		return EMBER_ENOMEM;
	ord->p = p;
	ord->c = c;
	ord->kind = kind;
	ord->group = group;
	switch (kind) {
	case EMBER_GRAPH_ORDERING_BETA:
		rc = ord_gen_beta(ord, opts->seed, opts->epoch);
		break;
	case EMBER_GRAPH_ORDERING_COMET:
		rc = ord_gen_comet(ord, opts->seed, opts->epoch);
		break;
	default:
		rc = ord_gen_sequential(ord, opts->seed, opts->epoch, opts->train,
					opts->n_train);
		break;
	}
	if (rc < 0)
		goto undo_ord;
	rc = assign_buckets(ord, kind == EMBER_GRAPH_ORDERING_COMET, opts->seed,
			    opts->epoch);
	if (rc < 0)
		goto undo_ord;
	*out = ord;
	return 0;

undo_ord:
	ember_graph_ordering_destroy(ord);
	return rc;
}

void ember_graph_ordering_destroy(ember_graph_ordering *ord)
{
	if (!ord)
		return;
	size_t nb = (size_t)ord->p * ord->p;
	em_free(ord->state_buckets, 0);
	em_free(ord->state_off, ((size_t)ord->nstates + 1) * sizeof(uint32_t));
	em_free(ord->bucket_state, nb * sizeof(uint32_t));
	em_free(ord->slots, ord->slots_cap * ord->c * sizeof(uint32_t));
	em_free(ord, sizeof(*ord));
}

/* ---- reading --------------------------------------------------------------------- */

int ember_graph_ordering_info_get(const ember_graph_ordering *ord,
				  ember_graph_ordering_info *out)
{
	if (!ord || !out)
		return EMBER_EINVAL;
	memset(out, 0, sizeof(*out));
	out->partitions = ord->p;
	out->capacity = ord->c;
	out->kind = ord->kind;
	out->comet_group = ord->group;
	out->states = ord->nstates;
	out->swaps = ord->nstates - 1;
	ember_graph_ordering_lower_bound(ord->p, ord->c, &out->lower_bound);
	out->assigned = ord->assigned;
	return 0;
}

int ember_graph_ordering_state(const ember_graph_ordering *ord, uint32_t s,
			       const uint32_t **slots)
{
	if (!ord || !slots || s >= ord->nstates)
		return EMBER_EINVAL;
	*slots = ord->slots + (size_t)s * ord->c;
	return 0;
}

int ember_graph_ordering_swap(const ember_graph_ordering *ord, uint32_t s,
			      ember_graph_swap *out)
{
	if (!ord || !out || s == 0 || s >= ord->nstates)
		return EMBER_EINVAL;
	uint32_t k = changed_slot(ord, s);
	if (k == ord->c)
		return EMBER_EINVAL; /* unreachable: invariant 2 */
	out->slot = k;
	out->evicted = ord->slots[(size_t)(s - 1) * ord->c + k];
	out->loaded = ord->slots[(size_t)s * ord->c + k];
	return 0;
}

int ember_graph_ordering_bucket_state(const ember_graph_ordering *ord, uint32_t src,
				      uint32_t dst, uint32_t *state)
{
	if (!ord || !state || src >= ord->p || dst >= ord->p)
		return EMBER_EINVAL;
	*state = ord->bucket_state[(size_t)src * ord->p + dst];
	return 0;
}

int ember_graph_ordering_state_buckets(const ember_graph_ordering *ord, uint32_t s,
				       const uint32_t **buckets, uint32_t *n)
{
	if (!ord || !buckets || !n || s >= ord->nstates)
		return EMBER_EINVAL;
	uint32_t a = ord->state_off[s], b = ord->state_off[s + 1];
	*n = b - a;
	*buckets = b > a ? ord->state_buckets + a : NULL;
	return 0;
}
