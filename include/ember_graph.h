/*
 * ember_graph.h - Ember's out-of-core graph partition buffer (Marius++ style):
 * import of edge lists into partitions stored through the Ember store, partition
 * orderings (BETA, COMET, sequential) and their simulator, a bounded buffer of
 * partitions with background prefetch and write-back, training examples, and
 * multi-hop neighbourhood sampling.
 *
 * (Being written: the orderings section and the buffer section below are filled in
 * by separate changes.)
 */
#ifndef EMBER_GRAPH_H
#define EMBER_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== orderings ================================================================ */

/*
 * Partition orderings: which c of the p node partitions the buffer holds, state by
 * state, during one epoch, and in which state each edge bucket (i, j) is trained.
 * docs/graph_orderings.md explains the constructions and why they are correct.
 *
 * A state is the list of the c resident partition ids in slot order. State 0 is the
 * buffer's first fill (c loads); state s >= 1 differs from state s-1 in exactly one
 * slot: one partition evicted, one loaded (a "swap"). So an epoch has states - 1
 * swaps, and the buffer can prefetch the partitions of the next states one by one.
 *
 *   EMBER_GRAPH_ORDERING_BETA        (Marius): every pair of partitions (and every
 *       partition with itself) is resident together in at least one state; exactly
 *       (p-c) + (x+1)[(p-c) - x(c-1)/2] swaps, x = floor((p-c)/(c-1)); partition
 *       labels are shuffled per (seed, epoch). Bucket (i, j) is assigned to the
 *       FIRST state in which i and j are both resident (the state whose swap made
 *       the pair meet: work spreads evenly over the swaps, and the randomness comes
 *       from the labels, as in Marius).
 *   EMBER_GRAPH_ORDERING_COMET       (MariusGNN): physical partitions are grouped at
 *       random (per seed, epoch) into logical partitions of `comet_group` physical
 *       ones; BETA runs over the logical partitions with a buffer of c/comet_group
 *       logical slots, and each logical swap is carried out as comet_group physical
 *       swaps (slot by slot). Bucket (i, j) is assigned to a state drawn uniformly at
 *       random among ALL states in which both i and j are resident.
 *   EMBER_GRAPH_ORDERING_SEQUENTIAL  (node classification): the t training-node
 *       partitions (options.train, 1 <= t <= c) stay resident in slots 0..t-1 of
 *       every state; the other c-t slots start with a random fill and then walk the
 *       remaining partitions in a random order, evicting the oldest. Guarantees:
 *       every state holds every training partition; if t < c every partition is
 *       resident in at least one state (p-c swaps), so every bucket with a training
 *       partition at one end is co-resident somewhere; two non-training partitions
 *       are co-resident only if they lie within c-t of each other in the walk. A
 *       bucket is assigned to the first state where both ends are resident, or to
 *       EMBER_GRAPH_ORDERING_NO_STATE when there is none. If t == c there is one
 *       state and the other partitions are never resident.
 *
 * Thread-safety: an ember_graph_ordering never changes after create, so any number
 * of threads may read it at once. Destroy it once, after every reader is done.
 * Pointers it returns stay valid until destroy. All calls are pure functions of
 * their arguments: the same (p, c, kind, options) give the same ordering.
 */

/* The largest p accepted (an ordering keeps p*p bucket entries). */
#define EMBER_GRAPH_ORDERING_MAX_PARTITIONS 4096u
/* bucket_state of a bucket never trained in this epoch (SEQUENTIAL only). */
#define EMBER_GRAPH_ORDERING_NO_STATE UINT32_MAX

typedef enum ember_graph_ordering_kind {
	EMBER_GRAPH_ORDERING_BETA = 0,
	EMBER_GRAPH_ORDERING_COMET = 1,
	EMBER_GRAPH_ORDERING_SEQUENTIAL = 2,
} ember_graph_ordering_kind;

typedef struct ember_graph_ordering_options {
	/* Random seed; the ordering is a function of (seed, epoch). Default 0. */
	uint64_t seed;
	/* Epoch number: a new epoch draws new labels, groups and bucket states. */
	uint64_t epoch;
	/*
	 * COMET: physical partitions per logical partition. It must divide p and c,
	 * with c/comet_group >= 2. 0 = the largest divisor g of gcd(p, c) with
	 * c/g >= 4 (1 when c < 8 or none fits; g == 1 is BETA over physical
	 * partitions with random bucket states). Ignored by the other kinds.
	 */
	uint32_t comet_group;
	/*
	 * SEQUENTIAL: the partitions holding training nodes, n_train of them
	 * (1 <= n_train <= c, distinct, each < p), kept in slots 0..n_train-1 in this
	 * order. Copied by create; the caller keeps its array. Ignored by BETA, COMET.
	 */
	const uint32_t *train;
	uint32_t n_train;
} ember_graph_ordering_options;

/* Fill *opts with the defaults (all zero). */
void ember_graph_ordering_options_default(ember_graph_ordering_options *opts);

typedef struct ember_graph_ordering ember_graph_ordering;

/*
 * Build the ordering of one epoch for p partitions and a buffer of c of them
 * (2 <= c <= p <= EMBER_GRAPH_ORDERING_MAX_PARTITIONS; c == p gives one state).
 * kind is an ember_graph_ordering_kind; opts may be NULL (defaults). Returns
 * EMBER_EINVAL for out == NULL, p, c or kind out of range, a bad comet_group or
 * train array; EMBER_ENOMEM. On failure *out is NULL. Cost: O(states * c + p*p)
 * time and memory.
 */
int ember_graph_ordering_create(uint32_t p, uint32_t c, int kind,
				const ember_graph_ordering_options *opts,
				ember_graph_ordering **out);

/* Free the ordering (NULL is fine). */
void ember_graph_ordering_destroy(ember_graph_ordering *ord);

typedef struct ember_graph_ordering_info {
	uint32_t partitions;   /* p */
	uint32_t capacity;     /* c */
	int kind;              /* ember_graph_ordering_kind */
	uint32_t comet_group;  /* COMET: physical partitions per logical one; else 1 */
	uint32_t states;       /* number of states, >= 1 */
	uint64_t swaps;        /* states - 1 */
	uint64_t lower_bound;  /* ceil((p(p-1)/2 - c(c-1)/2) / (c-1)): any all-pairs ordering */
	uint64_t assigned;     /* buckets assigned to a state (p*p but for SEQUENTIAL) */
} ember_graph_ordering_info;

/* Describe the ordering. EMBER_EINVAL if ord or out is NULL. */
int ember_graph_ordering_info_get(const ember_graph_ordering *ord,
				  ember_graph_ordering_info *out);

/*
 * *slots = the c partition ids resident in state s, in slot order (valid until
 * destroy). EMBER_EINVAL if ord or slots is NULL or s >= states.
 */
int ember_graph_ordering_state(const ember_graph_ordering *ord, uint32_t s,
			       const uint32_t **slots);

/* The swap that turns state s-1 into state s. */
typedef struct ember_graph_swap {
	uint32_t slot;    /* the slot that changes */
	uint32_t evicted; /* partition leaving (resident in state s-1) */
	uint32_t loaded;  /* partition arriving (resident in state s) */
} ember_graph_swap;

/* *out = the swap into state s, 1 <= s < states; else EMBER_EINVAL. */
int ember_graph_ordering_swap(const ember_graph_ordering *ord, uint32_t s,
			      ember_graph_swap *out);

/*
 * *state = the state edge bucket (src, dst) is trained in (both partitions are
 * resident there), or EMBER_GRAPH_ORDERING_NO_STATE (SEQUENTIAL only). EMBER_EINVAL
 * if src or dst >= p or a pointer is NULL.
 */
int ember_graph_ordering_bucket_state(const ember_graph_ordering *ord, uint32_t src,
				      uint32_t dst, uint32_t *state);

/*
 * The buckets assigned to state s: *buckets points to *n bucket ids
 * (src * p + dst), ascending, valid until destroy (*buckets may be NULL when *n is
 * 0). Every bucket id appears under at most one state. EMBER_EINVAL if a pointer
 * is NULL or s >= states.
 */
int ember_graph_ordering_state_buckets(const ember_graph_ordering *ord, uint32_t s,
				       const uint32_t **buckets, uint32_t *n);

/*
 * *out = BETA's swap count (p-c) + (x+1)[(p-c) - x(c-1)/2], x = floor((p-c)/(c-1)),
 * for 2 <= c <= p (p may exceed EMBER_GRAPH_ORDERING_MAX_PARTITIONS here, up to
 * 2^31); else EMBER_EINVAL.
 */
int ember_graph_ordering_beta_swaps(uint32_t p, uint32_t c, uint64_t *out);

/*
 * *out = ceil((p(p-1)/2 - c(c-1)/2) / (c-1)): no ordering that makes every pair
 * co-resident needs fewer swaps (the first fill covers c(c-1)/2 pairs, each swap at
 * most c-1 new ones). Same ranges as ember_graph_ordering_beta_swaps.
 */
int ember_graph_ordering_lower_bound(uint32_t p, uint32_t c, uint64_t *out);

/*
 * The ordering simulator: the I/O an ordering costs, epoch by epoch.
 *
 * Model (docs/graph_orderings.md): epoch e uses the ordering with options.epoch =
 * opts.epoch + e. The buffer starts empty; at an epoch's start it loads the
 * partitions of state 0 that are not already resident (evicting as many), then makes
 * the ordering's swaps. Partitions read = those loads + swaps. With
 * features_only == 0 (learnable embeddings) every evicted partition is dirty and
 * written, and so is every resident one after the last epoch; with features_only
 * nothing is written. Buckets read: bucket_reads == 0 counts each assigned bucket
 * once (link prediction examples); 1 counts every bucket when its two partitions
 * become co-resident (an in-buffer graph for sampling, rebuilt at each swap).
 */
typedef struct ember_graph_sim_options {
	uint32_t epochs;          /* 0 = 1 */
	uint64_t partition_bytes; /* size of one node partition */
	uint64_t bucket_bytes;    /* size of one edge bucket */
	int features_only;        /* 1: node data is read-only, nothing written */
	int bucket_reads;         /* 0: assigned buckets once; 1: in-buffer graph */
} ember_graph_sim_options;

void ember_graph_sim_options_default(ember_graph_sim_options *opts);

typedef struct ember_graph_sim_epoch {
	uint64_t swaps;              /* the ordering's swaps (states - 1) */
	uint64_t lower_bound;        /* ember_graph_ordering_lower_bound(p, c) */
	uint64_t first_loads;        /* loads of state 0 (c in the first epoch) */
	uint64_t partitions_read;    /* first_loads + swaps */
	uint64_t partitions_written; /* dirty evictions (+ final flush) */
	uint64_t buckets_read;
	uint64_t bytes_read;         /* partitions_read * partition_bytes + buckets_read * bucket_bytes */
	uint64_t bytes_written;      /* partitions_written * partition_bytes */
} ember_graph_sim_epoch;

/*
 * Simulate sim->epochs epochs of the ordering (p, c, kind, ord_opts) and write one
 * ember_graph_sim_epoch per epoch to out[0 .. epochs-1]. ord_opts and sim may be
 * NULL (defaults). EMBER_EINVAL for what create rejects, out == NULL or
 * out_len < epochs; EMBER_ENOMEM.
 */
int ember_graph_ordering_simulate(uint32_t p, uint32_t c, int kind,
				  const ember_graph_ordering_options *ord_opts,
				  const ember_graph_sim_options *sim,
				  ember_graph_sim_epoch *out, uint32_t out_len);


/* ==== end of orderings ========================================================= */

/* ==== import, buffer, examples, sampling ======================================= */

/* ==== end of import, buffer, examples, sampling ================================ */

#ifdef __cplusplus
}
#endif

#endif /* EMBER_GRAPH_H */
