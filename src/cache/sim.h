/*
 * sim.h - replaying a trace of batches through cache policies: the oracle (the
 * cache's own planner, oracle.c), LRU, LFU and Belady's MIN with full knowledge.
 * Used by `ember-trace sim`, the simulator test and the cache benchmark.
 *
 * Semantics shared by every policy (so their counts compare):
 *   - time is the batch; a batch's distinct (table, row) pairs must all be in the
 *     cache together while it trains, so a policy never evicts a row of the batch
 *     it is admitting rows for;
 *   - a row named by a batch and not in the cache is fetched (one row fetched);
 *     one that is in the cache is a hit; duplicates within a batch count once;
 *   - the cache holds at most `capacity` rows, and starts empty.
 * The policies are independent implementations (MIN: next uses computed by a
 * backward pass and a max-heap; the oracle: incremental links and buckets), so a
 * test comparing them checks one against the other.
 *
 * Not thread-safe: one thread per sim_trace / call.
 */
#ifndef EMBER_CACHE_SIM_H
#define EMBER_CACHE_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "cache/oracle.h"

/* A trace reduced to the distinct rows of each batch. */
struct sim_trace {
	uint32_t ntables;
	uint64_t *rows;      /* [ntables] rows per table */
	uint64_t *base;      /* [ntables] first global index of each table */
	uint64_t total_rows; /* sum of rows */
	uint32_t nbatches;
	uint64_t *off;       /* [nbatches + 1]: batch b is uniq[off[b] .. off[b+1]) */
	struct urow *uniq;
	uint64_t lookups;    /* ids in the trace, duplicates included */
	uint32_t max_uniq;   /* the largest batch's distinct rows */
};

struct sim_result {
	uint64_t fetched; /* rows fetched (misses) */
	uint64_t hits;    /* distinct rows of batches found in the cache */
	double plan_ns;   /* oracle only: link + plan time, all batches */
	double plan_ns_second_half; /* oracle only: the same for batches nbatches/2 .. end
				       (per-row state already touched: the steady state) */
	uint64_t uniq_second_half;  /* distinct rows of those batches */
};

/*
 * Build a sim_trace from batches of ids laid out table-major: batch b, table t,
 * sample i is ids[((size_t)b * ntables + t) * batch_size + i]. Every id must be
 * < rows[t]. Returns 0, EMBER_EINVAL (an id out of range) or EMBER_ENOMEM.
 */
int sim_trace_build(struct sim_trace *t, uint32_t ntables, const uint64_t *rows,
		    uint32_t nbatches, uint32_t batch_size, const uint32_t *ids);
void sim_trace_free(struct sim_trace *t);

/* Each returns 0, or EMBER_ETOOBIG when a batch has more distinct rows than
 * capacity, or EMBER_ENOMEM. */
int sim_lru(const struct sim_trace *t, uint64_t capacity, struct sim_result *r);
int sim_lfu(const struct sim_trace *t, uint64_t capacity, struct sim_result *r);
int sim_min(const struct sim_trace *t, uint64_t capacity, struct sim_result *r);
/* The oracle planning batch p knowing batches p .. p+window-1 (window >= 1; a
 * window of nbatches or more knows the whole trace). */
int sim_oracle(const struct sim_trace *t, uint64_t capacity, uint32_t window,
	       struct sim_result *r);

#endif
