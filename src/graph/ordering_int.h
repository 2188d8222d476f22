/*
 * ordering_int.h - what the orderings' files share (src/graph/ordering*.c): the
 * ordering object, the state builder, a seeded PRNG, and the generators.
 *
 * Layout of an ember_graph_ordering (all arrays owned by it):
 *   slots          nstates * c partition ids; state s is slots[s*c .. s*c+c)
 *   bucket_state   p * p entries: the state bucket (i, j) = i*p + j is trained in,
 *                  or EMBER_GRAPH_ORDERING_NO_STATE
 *   state_off      nstates + 1 offsets into state_buckets (CSR by state)
 *   state_buckets  the assigned bucket ids grouped by state, ascending in a state
 *
 * Invariants (checked by tests/graph/test_ordering.c):
 *   1. every state holds c distinct partitions in [0, p);
 *   2. state s >= 1 differs from state s-1 in exactly one slot;
 *   3. bucket_state[i*p+j] = s != NO_STATE implies i and j are resident in s, and the
 *      bucket is listed under s (and only there) in state_buckets.
 */
#ifndef EMBER_GRAPH_ORDERING_INT_H
#define EMBER_GRAPH_ORDERING_INT_H

#include "ember_graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

struct ember_graph_ordering {
	uint32_t p;
	uint32_t c;
	int kind;
	uint32_t group;      /* COMET physical partitions per logical one; else 1 */
	uint32_t nstates;
	uint32_t *slots;     /* nstates * c */
	size_t slots_cap;    /* states the slots array has room for (while building) */
	uint32_t *bucket_state;
	uint32_t *state_off;
	uint32_t *state_buckets;
	uint64_t assigned;   /* entries of state_buckets */
};

/* ---- PRNG: core/rng.h's xoshiro256**, one stream per purpose ------------------- */

typedef struct ord_rng {
	uint64_t s[4];
} ord_rng;

/*
 * Seed a stream: one per purpose (labels, groups, buckets, fill) so that changing
 * how one purpose draws leaves the others' draws alone.
 */
static inline void ord_rng_seed(ord_rng *r, uint64_t seed, uint64_t epoch,
				uint64_t stream)
{
	uint64_t x = seed;
	uint64_t a = em_splitmix64(&x);
	x = a ^ (epoch * 0xd1b54a32d192ed03ull);
	uint64_t b = em_splitmix64(&x);
	x = b ^ (stream * 0x8cb92ba72f3d8dd7ull);
	for (int i = 0; i < 4; i++)
		r->s[i] = em_splitmix64(&x);
}

static inline uint64_t ord_rng_next(ord_rng *r) { return em_rng_next(r->s); }

/* Uniform in [0, n), n > 0. */
static inline uint64_t ord_rng_below(ord_rng *r, uint64_t n) { return em_rng_below(r->s, n); }

enum { ORD_STREAM_LABELS = 1, ORD_STREAM_GROUPS = 2, ORD_STREAM_BUCKETS = 3,
       ORD_STREAM_FILL = 4, ORD_STREAM_LOGICAL = 5 };

/* Fill a[0..n) with a uniformly random permutation of 0..n-1 (Fisher-Yates). */
void ord_shuffle_identity(uint32_t *a, uint32_t n, ord_rng *r);

/* ---- a BETA walk over abstract labels -------------------------------------------- */

/*
 * A walk: the first fill init[0..c) and then nmoves one-slot moves (slot, part).
 * ord_beta_walk() builds BETA's walk over labels 0..p-1 (labels drawn from r);
 * COMET expands a walk over logical partitions into physical moves.
 */
typedef struct ord_walk {
	uint32_t *init;  /* c entries */
	uint32_t *moves; /* 2 * nmoves entries: slot, partition */
	size_t nmoves;
	size_t cap;      /* moves the array has room for */
} ord_walk;

int ord_beta_walk(uint32_t p, uint32_t c, ord_rng *r, ord_walk *w);
void ord_walk_free(ord_walk *w, uint32_t c);

/* ---- building the states of an ordering ------------------------------------------ */

/* Append a state (c ids) to ord->slots, growing it. 0 or EMBER_ENOMEM / EINVAL. */
int ord_push_state(ember_graph_ordering *ord, const uint32_t *state);

/* The generators: fill ord->slots / nstates (ord->p, c, kind already set). */
int ord_gen_beta(ember_graph_ordering *ord, uint64_t seed, uint64_t epoch);
int ord_gen_comet(ember_graph_ordering *ord, uint64_t seed, uint64_t epoch);
int ord_gen_sequential(ember_graph_ordering *ord, uint64_t seed, uint64_t epoch,
		       const uint32_t *train, uint32_t n_train);

/* The default COMET group for (p, c) (see ember_graph_ordering_options). */
uint32_t ord_comet_default_group(uint32_t p, uint32_t c);

#endif
