/*
 * ordering_gen.c - the state sequences of the orderings: BETA, COMET, SEQUENTIAL.
 *
 * How BETA works (Marius's buffer-aware edge traversal)
 * -----------------------------------------------------
 * The buffer has c slots; slots 0..c-2 hold a "fixed" set F, slot c-1 is the "free"
 * slot. R is the set of partitions not fixed so far (at first, all of them).
 *
 *   round 0: fill F with c-1 partitions and the free slot with one more; then load
 *            every other partition of R \ F into the free slot, one at a time.
 *            Every pair with an end in F is now covered; R := R \ F.
 *   round k: the free slot holds one member f of R. If |R| <= c, load the |R|-1
 *            others into the fixed slots: every pair of R is covered; done.
 *            Else replace the fixed slots, one by one, with c-1 members of
 *            R \ {f} (the new F), then load the rest of R \ F \ {f} into the free
 *            slot one at a time; R := R \ F (f stays in R: it met F but not the
 *            partitions cycled after it).
 *
 * Invariants: (1) at the start of a round no two members of R have been resident
 * together (only one of them was ever resident at a time, in the free slot), and
 * every pair with an end outside R has been; (2) a round loads every member of R
 * except the one already resident exactly once, so it costs |R| - 1 swaps and
 * covers every pair with an end in the new F. Round 0 costs p - c; round k >= 1
 * starts with |R| = p - k(c-1) and costs p - k(c-1) - 1 = (p-c) - (k-1)(c-1). The
 * rounds stop after the one that starts with |R| <= c, which gives the total
 * (p-c) + sum_{k=0..x} [(p-c) - k(c-1)] = (p-c) + (x+1)[(p-c) - x(c-1)/2] with
 * x = floor((p-c)/(c-1)) (the last term is 0 when c-1 divides p-c).
 *
 * The labels: BETA runs over positions 0..p-1 and position i is partition
 * label[i], a random permutation drawn per (seed, epoch), so which partitions are
 * fixed together changes every epoch.
 *
 * COMET expands a BETA walk over logical partitions (groups of g physical ones,
 * drawn at random per epoch) into physical moves: logical slot k is physical slots
 * k*g .. k*g+g-1, and a logical move becomes g physical moves, member by member.
 *
 * SEQUENTIAL keeps the training partitions in slots 0..t-1 and walks the others,
 * in a random order, through slots t..c-1, evicting the oldest (round robin).
 */
#include "graph/ordering_int.h"

#include "core/alloc.h"

#include <string.h>

void ord_shuffle_identity(uint32_t *a, uint32_t n, ord_rng *r)
{
	for (uint32_t i = 0; i < n; i++)
		a[i] = i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)ord_rng_below(r, i);
		uint32_t t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
}

/* ---- walks ---------------------------------------------------------------------- */

void ord_walk_free(ord_walk *w, uint32_t c)
{
	if (!w)
		return;
	em_free(w->init, w->init ? (size_t)c * sizeof(uint32_t) : 0);
	em_free(w->moves, w->moves ? w->cap * 2 * sizeof(uint32_t) : 0);
	memset(w, 0, sizeof(*w));
}

static int walk_move(ord_walk *w, uint32_t slot, uint32_t part)
{
	if (w->nmoves == w->cap) {
		size_t ncap = w->cap ? w->cap * 2 : 64;
		uint32_t *nm = em_alloc(ncap * 2 * sizeof(uint32_t));
		if (!nm)
			return EMBER_ENOMEM;
		if (w->moves) {
			memcpy(nm, w->moves, w->nmoves * 2 * sizeof(uint32_t));
			em_free(w->moves, w->cap * 2 * sizeof(uint32_t));
		}
		w->moves = nm;
		w->cap = ncap;
	}
	w->moves[2 * w->nmoves] = slot;
	w->moves[2 * w->nmoves + 1] = part;
	w->nmoves++;
	return 0;
}

/*
 * Rounds 1, 2, ... of BETA (the file comment): R = positions c-1..p-1 after round 0,
 * with the free slot (c-1) holding label[p-1]. rest and next are scratch arrays of p.
 */
static int beta_rounds(ord_walk *w, uint32_t p, uint32_t c, const uint32_t *label,
		       uint32_t *rest, uint32_t *next)
{
	int rc;
	uint32_t free_part = label[p - 1];
	uint32_t n = 0; /* |R| - 1: the members of R not resident */
	for (uint32_t q = c - 1; q + 1 < p; q++)
		rest[n++] = label[q];
	while (n >= 1) {
		if (n + 1 <= c) {
			/* Last round: all of R fits; load the n others into fixed slots. */
			for (uint32_t i = 0; i < n; i++)
				if ((rc = walk_move(w, i, rest[i])) < 0)
					return rc;
			break;
		}
		/* New fixed set: rest[0..c-2], slot by slot. */
		for (uint32_t i = 0; i + 1 < c; i++)
			if ((rc = walk_move(w, i, rest[i])) < 0)
				return rc;
		/* The free slot cycles through rest[c-1..n-1]; the old free partition
		 * leaves the buffer but stays in R (it has not met those). */
		for (uint32_t i = c - 1; i < n; i++)
			if ((rc = walk_move(w, c - 1, rest[i])) < 0)
				return rc;
		uint32_t m = 0;
		next[m++] = free_part;
		for (uint32_t i = c - 1; i + 1 < n; i++)
			next[m++] = rest[i];
		free_part = rest[n - 1];
		memcpy(rest, next, (size_t)m * sizeof(uint32_t));
		n = m;
	}
	return 0;
}

int ord_beta_walk(uint32_t p, uint32_t c, ord_rng *r, ord_walk *w)
{
	int rc = 0;
	uint64_t want = 0;
	memset(w, 0, sizeof(*w));
	uint32_t *label = em_alloc((size_t)p * sizeof(uint32_t));
	uint32_t *rest = em_alloc((size_t)p * sizeof(uint32_t)); /* R minus the free one */
	uint32_t *next = em_alloc((size_t)p * sizeof(uint32_t));
	w->init = em_alloc((size_t)c * sizeof(uint32_t));
	if (!label || !rest || !next || !w->init) {
		rc = EMBER_ENOMEM;
		goto undo_alloc;
	}
	/* Room for exactly the swaps BETA makes (the loop still grows if needed). */
	if (ember_graph_ordering_beta_swaps(p, c, &want) == 0 && want > 0) {
		w->moves = em_alloc((size_t)want * 2 * sizeof(uint32_t));
		if (!w->moves) {
			rc = EMBER_ENOMEM;
			goto undo_alloc;
		}
		w->cap = (size_t)want;
	}
	ord_shuffle_identity(label, p, r);

	/* Round 0: F = positions 0..c-2, the free slot cycles through c-1..p-1. */
	for (uint32_t i = 0; i < c; i++)
		w->init[i] = label[i];
	for (uint32_t q = c; q < p; q++)
		if ((rc = walk_move(w, c - 1, label[q])) < 0)
			goto undo_alloc;
	if (c < p && (rc = beta_rounds(w, p, c, label, rest, next)) < 0)
		goto undo_alloc;
	em_free(next, (size_t)p * sizeof(uint32_t));
	em_free(rest, (size_t)p * sizeof(uint32_t));
	em_free(label, (size_t)p * sizeof(uint32_t));
	return 0;

undo_alloc:
	ord_walk_free(w, c);
	em_free(next, next ? (size_t)p * sizeof(uint32_t) : 0);
	em_free(rest, rest ? (size_t)p * sizeof(uint32_t) : 0);
	em_free(label, label ? (size_t)p * sizeof(uint32_t) : 0);
	return rc;
}

/* ---- states ---------------------------------------------------------------------- */

int ord_push_state(ember_graph_ordering *ord, const uint32_t *state)
{
	size_t c = ord->c;
	if (ord->nstates >= UINT32_MAX - 1)
		return EMBER_EINVAL; /* cannot be numbered (far beyond the p limit) */
	if (ord->nstates == ord->slots_cap) {
		size_t ncap = ord->slots_cap ? ord->slots_cap * 2 : 16;
		uint32_t *ns = em_alloc(ncap * c * sizeof(uint32_t));
		if (!ns)
			return EMBER_ENOMEM;
		if (ord->slots) {
			memcpy(ns, ord->slots, (size_t)ord->nstates * c * sizeof(uint32_t));
			em_free(ord->slots, ord->slots_cap * c * sizeof(uint32_t));
		}
		ord->slots = ns;
		ord->slots_cap = ncap;
	}
	memcpy(ord->slots + (size_t)ord->nstates * c, state, c * sizeof(uint32_t));
	ord->nstates++;
	return 0;
}

/* Size the slots array for `states` states up front (a hint; pushing still grows). */
static int reserve_states(ember_graph_ordering *ord, uint64_t states)
{
	if (ord->slots || states == 0 || states >= UINT32_MAX)
		return 0;
	ord->slots = em_alloc((size_t)states * ord->c * sizeof(uint32_t));
	if (!ord->slots)
		return EMBER_ENOMEM;
	ord->slots_cap = (size_t)states;
	return 0;
}

/* Push the walk's states: init, then one state per move. */
static int push_walk(ember_graph_ordering *ord, const ord_walk *w)
{
	int rc;
	uint32_t *cur = em_alloc((size_t)ord->c * sizeof(uint32_t));
	if (!cur)
		return EMBER_ENOMEM;
	memcpy(cur, w->init, (size_t)ord->c * sizeof(uint32_t));
	if ((rc = reserve_states(ord, (uint64_t)w->nmoves + 1)) < 0)
		goto undo_cur;
	if ((rc = ord_push_state(ord, cur)) < 0)
		goto undo_cur;
	for (size_t i = 0; i < w->nmoves; i++) {
		cur[w->moves[2 * i]] = w->moves[2 * i + 1];
		if ((rc = ord_push_state(ord, cur)) < 0)
			goto undo_cur;
	}
undo_cur:
	em_free(cur, (size_t)ord->c * sizeof(uint32_t));
	return rc;
}

int ord_gen_beta(ember_graph_ordering *ord, uint64_t seed, uint64_t epoch)
{
	ord_rng r;
	ord_walk w;
	ord_rng_seed(&r, seed, epoch, ORD_STREAM_LABELS);
	int rc = ord_beta_walk(ord->p, ord->c, &r, &w);
	if (rc < 0)
		return rc;
	rc = push_walk(ord, &w);
	ord_walk_free(&w, ord->c);
	return rc;
}

uint32_t ord_comet_default_group(uint32_t p, uint32_t c)
{
	uint32_t a = p, b = c;
	while (b) {
		uint32_t t = a % b;
		a = b;
		b = t;
	}
	/* a = gcd(p, c); the largest divisor g of a with c/g >= 4. */
	for (uint32_t g = a; g > 1; g--)
		if (a % g == 0 && c / g >= 4)
			return g;
	return 1;
}

int ord_gen_comet(ember_graph_ordering *ord, uint64_t seed, uint64_t epoch)
{
	int rc;
	uint32_t g = ord->group, p = ord->p, c = ord->c;
	uint32_t pl = p / g, cl = c / g;
	ord_rng rg, rl;
	ord_walk w;
	uint32_t *groups = em_alloc((size_t)p * sizeof(uint32_t));
	uint32_t *cur = em_alloc((size_t)c * sizeof(uint32_t));
	if (!groups || !cur) {
		rc = EMBER_ENOMEM;
		goto undo_alloc;
	}
	/* Logical partition L = physical groups[L*g .. L*g+g). */
	ord_rng_seed(&rg, seed, epoch, ORD_STREAM_GROUPS);
	ord_shuffle_identity(groups, p, &rg);
	ord_rng_seed(&rl, seed, epoch, ORD_STREAM_LOGICAL);
	if ((rc = ord_beta_walk(pl, cl, &rl, &w)) < 0)
		goto undo_alloc;
	if ((rc = reserve_states(ord, (uint64_t)w.nmoves * g + 1)) < 0)
		goto undo_walk;
	for (uint32_t k = 0; k < cl; k++)
		for (uint32_t m = 0; m < g; m++)
			cur[k * g + m] = groups[(size_t)w.init[k] * g + m];
	if ((rc = ord_push_state(ord, cur)) < 0)
		goto undo_walk;
	for (size_t i = 0; i < w.nmoves; i++) {
		uint32_t k = w.moves[2 * i], lp = w.moves[2 * i + 1];
		for (uint32_t m = 0; m < g; m++) {
			cur[k * g + m] = groups[(size_t)lp * g + m];
			if ((rc = ord_push_state(ord, cur)) < 0)
				goto undo_walk;
		}
	}
undo_walk:
	ord_walk_free(&w, cl);
undo_alloc:
	em_free(cur, cur ? (size_t)c * sizeof(uint32_t) : 0);
	em_free(groups, groups ? (size_t)p * sizeof(uint32_t) : 0);
	return rc;
}

int ord_gen_sequential(ember_graph_ordering *ord, uint64_t seed, uint64_t epoch,
		       const uint32_t *train, uint32_t t)
{
	int rc = 0;
	uint32_t p = ord->p, c = ord->c, f = c - t;
	ord_rng r;
	uint32_t *others = em_alloc((size_t)p * sizeof(uint32_t));
	uint32_t *cur = em_alloc((size_t)c * sizeof(uint32_t));
	bool *is_train = em_zalloc((size_t)p * sizeof(bool));
	if (!others || !cur || !is_train) {
		rc = EMBER_ENOMEM;
		goto undo_alloc;
	}
	for (uint32_t i = 0; i < t; i++)
		is_train[train[i]] = true;
	/* The others in a random order: a shuffle of all partitions, filtered. */
	ord_rng_seed(&r, seed, epoch, ORD_STREAM_FILL);
	ord_shuffle_identity(others, p, &r);
	uint32_t o = 0;
	for (uint32_t i = 0; i < p; i++)
		if (!is_train[others[i]])
			others[o++] = others[i];
	/* o == p - t; the first f fill slots t..c-1, then the walk. */
	if ((rc = reserve_states(ord, f ? (uint64_t)(o - f) + 1 : 1)) < 0)
		goto undo_alloc;
	memcpy(cur, train, (size_t)t * sizeof(uint32_t));
	for (uint32_t i = 0; i < f; i++)
		cur[t + i] = others[i];
	if ((rc = ord_push_state(ord, cur)) < 0)
		goto undo_alloc;
	for (uint32_t q = f; f > 0 && q < o; q++) {
		/* others[q] replaces others[q-f], the oldest, in slot t + (q-f) % f. */
		cur[t + (q - f) % f] = others[q];
		if ((rc = ord_push_state(ord, cur)) < 0)
			goto undo_alloc;
	}
undo_alloc:
	em_free(is_train, is_train ? (size_t)p * sizeof(bool) : 0);
	em_free(cur, cur ? (size_t)c * sizeof(uint32_t) : 0);
	em_free(others, others ? (size_t)p * sizeof(uint32_t) : 0);
	return rc;
}
