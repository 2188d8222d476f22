/*
 * sim.c - trace replay through the oracle, LRU, LFU and Belady's MIN (sim.h has
 * the shared semantics).
 *
 * Every policy walks a batch in three passes, mirroring the oracle: (1) find the
 * hits, (2) admit the misses, evicting only rows the batch does not name, (3)
 * update the hit and admitted rows' ranks. Rows are indexed globally (table base +
 * row) into dense arrays; the simulator is for traces that fit in memory.
 *
 *   LRU  a doubly linked recency list; pass 3 moves the batch's rows to the
 *        most-recent end in the batch's order (so that the oracle with a window of
 *        one batch, whose "never" queue is this same order, matches it exactly).
 *   LFU  "perfect" LFU: a use count per row kept across evictions; a min-heap of
 *        resident rows keyed (count, last use); the batch's rows leave the heap
 *        while it admits and come back with their new keys.
 *   MIN  next uses computed by one backward pass over the trace; a max-heap of
 *        resident rows keyed by next use (rows of the current batch have the
 *        smallest key, so they are never the maximum while others remain).
 */
#include "cache/sim.h"

#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "ember.h"

#define NIL UINT32_MAX

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int sim_trace_build(struct sim_trace *t, uint32_t ntables, const uint64_t *rows,
		    uint32_t nbatches, uint32_t batch_size, const uint32_t *ids)
{
	int rc = EMBER_ENOMEM;
	uint32_t *stamp = NULL;
	memset(t, 0, sizeof(*t));
	if (ntables == 0 || !rows || (nbatches && batch_size && !ids))
		return EMBER_EINVAL;
	t->ntables = ntables;
	t->nbatches = nbatches;
	t->rows = em_alloc(ntables * sizeof(uint64_t));
	t->base = em_alloc(ntables * sizeof(uint64_t));
	t->off = em_alloc(((size_t)nbatches + 1) * sizeof(uint64_t));
	if (!t->rows || !t->base || !t->off)
		goto undo_trace;
	for (uint32_t i = 0; i < ntables; i++) {
		t->rows[i] = rows[i];
		t->base[i] = t->total_rows;
		t->total_rows += rows[i];
	}
	stamp = em_zalloc(t->total_rows * sizeof(uint32_t));
	size_t n_ids = (size_t)nbatches * ntables * batch_size;
	t->uniq = em_alloc((n_ids ? n_ids : 1) * sizeof(struct urow));
	if (!stamp || !t->uniq)
		goto undo_trace;
	uint64_t nu = 0;
	for (uint32_t b = 0; b < nbatches; b++) {
		t->off[b] = nu;
		for (uint32_t tb = 0; tb < ntables; tb++) {
			const uint32_t *p = ids + ((size_t)b * ntables + tb) * batch_size;
			for (uint32_t i = 0; i < batch_size; i++) {
				if (p[i] >= rows[tb]) {
					rc = EMBER_EINVAL;
					goto undo_trace;
				}
				uint64_t g = t->base[tb] + p[i];
				if (stamp[g] == b + 1)
					continue;
				stamp[g] = b + 1;
				t->uniq[nu].table = tb;
				t->uniq[nu].pad_ = 0;
				t->uniq[nu].row = p[i];
				nu++;
			}
		}
		if (nu - t->off[b] > t->max_uniq)
			t->max_uniq = (uint32_t)(nu - t->off[b]);
	}
	t->off[nbatches] = nu;
	t->lookups = n_ids;
	em_free(stamp, 0);
	return 0;

undo_trace:
	em_free(stamp, 0);
	sim_trace_free(t);
	return rc;
}

void sim_trace_free(struct sim_trace *t)
{
	if (!t)
		return;
	em_free(t->rows, 0);
	em_free(t->base, 0);
	em_free(t->off, 0);
	em_free(t->uniq, 0);
	memset(t, 0, sizeof(*t));
}

static inline uint64_t gidx(const struct sim_trace *t, const struct urow *u)
{
	return t->base[u->table] + u->row;
}

/* ---- LRU ------------------------------------------------------------------------ */

int sim_lru(const struct sim_trace *t, uint64_t capacity, struct sim_result *r)
{
	memset(r, 0, sizeof(*r));
	if (t->max_uniq > capacity)
		return EMBER_ETOOBIG;
	/* per global row: resident flag and list links (head = least recent) */
	uint32_t *prev = em_alloc(t->total_rows * sizeof(uint32_t));
	uint32_t *next = em_alloc(t->total_rows * sizeof(uint32_t));
	uint8_t *in = em_zalloc(t->total_rows);
	uint32_t *stamp = em_zalloc(t->total_rows * sizeof(uint32_t));
	int rc = EMBER_ENOMEM;
	if (!prev || !next || !in || !stamp)
		goto out;
	if (t->total_rows >= NIL) {
		rc = EMBER_EINVAL;
		goto out;
	}
	uint32_t head = NIL, tail = NIL;
	uint64_t resident = 0;
#define LRU_UNLINK(g)                                                                   \
	do {                                                                            \
		if (prev[g] != NIL) next[prev[g]] = next[g]; else head = next[g];       \
		if (next[g] != NIL) prev[next[g]] = prev[g]; else tail = prev[g];       \
	} while (0)
#define LRU_APPEND(g)                                                                   \
	do {                                                                            \
		prev[g] = tail; next[g] = NIL;                                          \
		if (tail != NIL) next[tail] = (uint32_t)(g); else head = (uint32_t)(g); \
		tail = (uint32_t)(g);                                                   \
	} while (0)
	for (uint32_t b = 0; b < t->nbatches; b++) {
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++)
			stamp[gidx(t, &t->uniq[k])] = b + 1;
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = gidx(t, &t->uniq[k]);
			if (in[g]) {
				r->hits++;
				continue;
			}
			r->fetched++;
			if (resident == capacity) {
				uint32_t v = head;
				while (stamp[v] == b + 1) /* the batch's own rows stay */
					v = next[v];
				LRU_UNLINK(v);
				in[v] = 0;
				resident--;
			}
			in[g] = 1;
			resident++;
			LRU_APPEND(g);
		}
		/* pass 3: the batch's rows become the most recent, in batch order */
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = gidx(t, &t->uniq[k]);
			LRU_UNLINK(g);
			LRU_APPEND(g);
		}
	}
#undef LRU_UNLINK
#undef LRU_APPEND
	rc = 0;
out:
	em_free(prev, 0);
	em_free(next, 0);
	em_free(in, 0);
	em_free(stamp, 0);
	return rc;
}

/* ---- a binary heap of global rows with a position index -------------------------- */

struct heap {
	uint32_t *h;   /* heap array of global rows */
	uint32_t *pos; /* [total_rows] position in h, or NIL */
	uint32_t n;
	const uint64_t *key; /* [total_rows]; lower keys rise to the top */
};

static inline void heap_set(struct heap *hp, uint32_t i, uint32_t g)
{
	hp->h[i] = g;
	hp->pos[g] = i;
}

static void heap_up(struct heap *hp, uint32_t i)
{
	uint32_t g = hp->h[i];
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (hp->key[hp->h[p]] <= hp->key[g])
			break;
		heap_set(hp, i, hp->h[p]);
		i = p;
	}
	heap_set(hp, i, g);
}

static void heap_down(struct heap *hp, uint32_t i)
{
	uint32_t g = hp->h[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= hp->n)
			break;
		if (c + 1 < hp->n && hp->key[hp->h[c + 1]] < hp->key[hp->h[c]])
			c++;
		if (hp->key[hp->h[c]] >= hp->key[g])
			break;
		heap_set(hp, i, hp->h[c]);
		i = c;
	}
	heap_set(hp, i, g);
}

static void heap_push(struct heap *hp, uint32_t g)
{
	heap_set(hp, hp->n++, g);
	heap_up(hp, hp->n - 1);
}

static uint32_t heap_pop(struct heap *hp)
{
	uint32_t g = hp->h[0];
	hp->pos[g] = NIL;
	hp->n--;
	if (hp->n > 0) {
		heap_set(hp, 0, hp->h[hp->n]);
		heap_down(hp, 0);
	}
	return g;
}

/* Take g (in the heap) out. */
static void heap_remove(struct heap *hp, uint32_t g)
{
	uint32_t i = hp->pos[g];
	hp->pos[g] = NIL;
	hp->n--;
	if (i < hp->n) {
		uint32_t m = hp->h[hp->n];
		heap_set(hp, i, m);
		heap_up(hp, i);
		heap_down(hp, hp->pos[m]);
	}
}

/* key[g] changed: restore the heap. */
static void heap_fix(struct heap *hp, uint32_t g)
{
	uint32_t i = hp->pos[g];
	heap_up(hp, i);
	heap_down(hp, hp->pos[g]);
}

static int heap_init(struct heap *hp, uint64_t total, uint64_t capacity, const uint64_t *key)
{
	hp->h = em_alloc((capacity + 1) * sizeof(uint32_t));
	hp->pos = em_alloc(total * sizeof(uint32_t));
	hp->n = 0;
	hp->key = key;
	if (!hp->h || !hp->pos)
		return EMBER_ENOMEM;
	memset(hp->pos, 0xff, total * sizeof(uint32_t));
	return 0;
}

static void heap_free(struct heap *hp)
{
	em_free(hp->h, 0);
	em_free(hp->pos, 0);
}

/* ---- LFU ------------------------------------------------------------------------ */

int sim_lfu(const struct sim_trace *t, uint64_t capacity, struct sim_result *r)
{
	memset(r, 0, sizeof(*r));
	if (t->max_uniq > capacity)
		return EMBER_ETOOBIG;
	if (t->total_rows >= NIL || capacity >= NIL)
		return EMBER_EINVAL;
	/* key: use count << 32 | last use batch: the least used, then the least
	 * recently used, is at the top */
	uint64_t *key = em_zalloc(t->total_rows * sizeof(uint64_t));
	uint32_t *aside = em_alloc((t->max_uniq + 1) * sizeof(uint32_t));
	uint32_t *mark = em_zalloc(t->total_rows * sizeof(uint32_t));
	struct heap hp = {0};
	int rc = EMBER_ENOMEM;
	if (!key || !aside || !mark || heap_init(&hp, t->total_rows, capacity, key) < 0)
		goto out;
	for (uint32_t b = 0; b < t->nbatches; b++) {
		/* the batch's rows leave the heap while it is admitting (they may not be
		 * evicted) and return with their new counts in pass 3 */
		uint32_t naside = 0;
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = gidx(t, &t->uniq[k]);
			if (hp.pos[g] == NIL)
				continue;
			r->hits++;
			heap_remove(&hp, (uint32_t)g);
			aside[naside++] = (uint32_t)g;
			mark[g] = b + 1;
		}
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = gidx(t, &t->uniq[k]);
			if (mark[g] == b + 1)
				continue; /* a hit, set aside above */
			r->fetched++;
			if (hp.n + naside == capacity)
				heap_pop(&hp);
			aside[naside++] = (uint32_t)g;
		}
		for (uint32_t i = 0; i < naside; i++) {
			uint32_t g = aside[i];
			key[g] = ((key[g] >> 32) + 1) << 32 | (b + 1);
			heap_push(&hp, g);
		}
	}
	rc = 0;
out:
	heap_free(&hp);
	em_free(key, 0);
	em_free(aside, 0);
	em_free(mark, 0);
	return rc;
}

/* ---- Belady's MIN ----------------------------------------------------------------- */

int sim_min(const struct sim_trace *t, uint64_t capacity, struct sim_result *r)
{
	memset(r, 0, sizeof(*r));
	if (t->max_uniq > capacity)
		return EMBER_ETOOBIG;
	if (t->total_rows >= NIL || capacity >= NIL)
		return EMBER_EINVAL;
	uint64_t nu = t->off[t->nbatches];
	uint32_t *nextuse = em_alloc((nu ? nu : 1) * sizeof(uint32_t));
	uint32_t *later = em_alloc(t->total_rows * sizeof(uint32_t));
	uint64_t *key = em_alloc(t->total_rows * sizeof(uint64_t));
	struct heap hp = {0};
	int rc = EMBER_ENOMEM;
	if (!nextuse || !later || !key || heap_init(&hp, t->total_rows, capacity, key) < 0)
		goto out;
	/* backward pass: the next batch naming each occurrence's row */
	memset(later, 0xff, t->total_rows * sizeof(uint32_t));
	for (uint32_t b = t->nbatches; b-- > 0;)
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = gidx(t, &t->uniq[k]);
			nextuse[k] = later[g];
			later[g] = b;
		}
	/* keys are negated next uses, so the farthest is at the top of the min-heap */
	for (uint32_t b = 0; b < t->nbatches; b++) {
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = gidx(t, &t->uniq[k]);
			if (hp.pos[g] != NIL) {
				r->hits++;
				continue;
			}
			r->fetched++;
			if (hp.n == capacity)
				heap_pop(&hp); /* never one of b's rows: theirs is the farthest-
						  from-top key UINT64_MAX - b */
			key[g] = UINT64_MAX - b;
			heap_push(&hp, (uint32_t)g);
		}
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = gidx(t, &t->uniq[k]);
			key[g] = UINT64_MAX - (uint64_t)nextuse[k]; /* NIL: never, key smallest */
			heap_fix(&hp, (uint32_t)g);
		}
	}
	rc = 0;
out:
	heap_free(&hp);
	em_free(nextuse, 0);
	em_free(later, 0);
	em_free(key, 0);
	return rc;
}

/* ---- the oracle -------------------------------------------------------------------- */

int sim_oracle(const struct sim_trace *t, uint64_t capacity, uint32_t window,
	       struct sim_result *r)
{
	memset(r, 0, sizeof(*r));
	if (window == 0 || t->nbatches >= ORACLE_MAX_BATCHES)
		return EMBER_EINVAL;
	if (t->max_uniq > capacity)
		return EMBER_ETOOBIG;
	if (window > t->nbatches)
		window = t->nbatches ? t->nbatches : 1;
	struct oracle *o = NULL;
	struct obatch *ob = em_zalloc(window * sizeof(*ob));
	int rc = EMBER_ENOMEM;
	if (!ob)
		goto out;
	for (uint32_t i = 0; i < window; i++) {
		size_t n = t->max_uniq ? t->max_uniq : 1;
		ob[i].next = em_alloc(n * sizeof(struct onext));
		ob[i].slot = em_alloc(n * sizeof(uint32_t));
		ob[i].miss = em_alloc(n * sizeof(struct omiss));
		if (!ob[i].next || !ob[i].slot || !ob[i].miss)
			goto out;
	}
	rc = oracle_create(&o, t->ntables, t->rows, capacity, window);
	if (rc < 0)
		goto out;
	oracle_prefault(o); /* time the planning, not the first touches of its memory */
	double t0 = now_ns(), t_half = t0;
	uint32_t linked = 0, half = t->nbatches / 2;
	for (uint32_t p = 0; p < t->nbatches; p++) {
		if (p == half)
			t_half = now_ns();
		while (linked < t->nbatches && linked < p + window) {
			struct obatch *b = &ob[linked % window];
			b->seq = linked;
			b->nuniq = (uint32_t)(t->off[linked + 1] - t->off[linked]);
			b->uniq = t->uniq + t->off[linked];
			oracle_link(o, b);
			linked++;
		}
		struct obatch *b = &ob[p % window];
		oracle_plan(o, b, ORACLE_NONE);
		r->fetched += b->nmiss;
		r->hits += b->nuniq - b->nmiss;
	}
	double t1 = now_ns();
	r->plan_ns = t1 - t0;
	r->plan_ns_second_half = t1 - t_half;
	r->uniq_second_half = t->off[t->nbatches] - t->off[half];
	rc = 0;
out:
	oracle_destroy(o);
	if (ob)
		for (uint32_t i = 0; i < window; i++) {
			em_free(ob[i].next, 0);
			em_free(ob[i].slot, 0);
			em_free(ob[i].miss, 0);
		}
	em_free(ob, 0);
	return rc;
}
