/*
 * oracle.h - the embedding cache's planner: Belady's eviction rule over a
 * lookahead window of batches (see oracle.c for the design notes).
 *
 * The oracle is a plain single-threaded data structure: one thread (the cache's
 * prefetcher, or the simulator) links and plans batches in order. It knows nothing
 * of the store, of slots' memory or of threads; it decides which row occupies which
 * slot when each batch is trained, and which row each admission evicts.
 *
 * Use, for batches numbered 0, 1, 2, ... in order:
 *   oracle_link(o, b)  as soon as batch b is known (it records b's rows as the next
 *                      use of their earlier occurrences): at most `ring` batches
 *                      may be linked and not yet planned.
 *   oracle_plan(o, b)  once, in order, after linking b (and as many later batches
 *                      as the caller wants the plan to know): fills b->slot and
 *                      b->miss.
 * The struct obatch stays owned by the caller and must stay valid (and unmoved)
 * from oracle_link until oracle_plan of that batch returns.
 */
#ifndef EMBER_CACHE_ORACLE_H
#define EMBER_CACHE_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#define ORACLE_NONE UINT32_MAX /* no slot, no next use, no victim */
/* Batches are numbered 0 .. ORACLE_MAX_BATCHES-1. */
#define ORACLE_MAX_BATCHES (UINT32_MAX - 2u)

/* One distinct row of a batch. */
struct urow {
	uint32_t table;
	uint32_t pad_;
	uint64_t row;
};

/* One admission of a planned batch: row uniq[uidx] goes into slot, evicting
 * (vtable, vrow) whose last use was batch vlast (vlast == ORACLE_NONE: the slot
 * was never used, there is no victim). */
struct omiss {
	uint32_t uidx;
	uint32_t slot;
	uint32_t vtable;
	uint32_t vlast;
	uint64_t vrow;
};

struct obatch {
	uint32_t seq;            /* the batch's number */
	uint32_t nuniq;          /* distinct rows (<= the oracle's capacity) */
	const struct urow *uniq; /* [nuniq], each (table, row) once */
	uint32_t *next;          /* [nuniq] OUT of linking: next use of uniq[k] (a batch
				    number) or ORACLE_NONE while unknown */
	uint32_t *slot;          /* [nuniq] OUT of planning: the slot of uniq[k] */
	struct omiss *miss;      /* [nuniq] OUT of planning: the admissions */
	uint32_t nmiss;          /* OUT of planning */
};

struct oracle;

/*
 * ntables tables of rows[t] rows each; capacity slots (1 .. 2^32-2); ring: the
 * most batches linked and not yet planned (1 .. 2^31). Returns 0, EMBER_EINVAL or
 * EMBER_ENOMEM. Per-row state is allocated zeroed and touched lazily (12 bytes a
 * row in all).
 */
int oracle_create(struct oracle **out, uint32_t ntables, const uint64_t *rows,
		  uint64_t capacity, uint32_t ring);
void oracle_destroy(struct oracle *o);

/* Record batch b (b->seq must be the next to link). */
void oracle_link(struct oracle *o, struct obatch *b);

/*
 * Plan batch b (b->seq must be the next to plan, and linked). pinned: rows whose
 * last use is batch `pinned` or later are still in use by the trainer (not
 * released), so evicting one makes its admission wait; among victims of equal
 * standing the plan prefers rows that are not pinned (see oracle.c, "Pinned
 * rows"). ORACLE_NONE: nothing is pinned (the simulator): pure Belady.
 */
void oracle_plan(struct oracle *o, struct obatch *b, uint32_t pinned);

/* Touch every page of the per-row state (it is allocated zeroed and mapped lazily,
 * so first touches otherwise cost a page fault each, inside link and plan). */
void oracle_prefault(struct oracle *o);

/* Rows held in slots now (by the plan). */
uint64_t oracle_resident(const struct oracle *o);

/* The next batch number to plan, and to link. */
uint32_t oracle_planned(const struct oracle *o);
uint32_t oracle_linked(const struct oracle *o);

/*
 * Check the oracle's internal invariants (slow: O(capacity + rows touched)). For
 * tests. Returns 0 or a negative line number of the check that failed.
 */
int oracle_check(const struct oracle *o);

#endif
