/*
 * oracle.h - the embedding cache's planner: Belady's eviction rule over a
 * lookahead window of batches (see oracle.c for the design notes).
 *
 * The oracle is a plain single-threaded data structure: calls on one oracle must
 * not overlap (the cache links on the trainer's thread in push and plans on its
 * prefetcher thread, under one lock). It knows nothing of the store, of slots'
 * memory or of threads; it decides which row occupies which slot when each batch
 * is trained, and which row each admission evicts.
 *
 * Use, for batches numbered 0, 1, 2, ... in order:
 *   link batch b as soon as it is known (it records b's rows as the next use of
 *   their earlier occurrences), either
 *     oracle_link(o, b)          b->uniq already holds distinct rows, or
 *     oracle_link_begin(o, b, uniq, max_uniq), then oracle_link_part(...) for each
 *       run of ids of one table (duplicates allowed: the dedupe happens here, in
 *       the same pass over the per-row state), then oracle_link_end(o, b), or
 *       oracle_link_abort(o, b) after a part failed (EMBER_EINVAL: a row out of
 *       range; EMBER_ETOOBIG: more than max_uniq distinct rows): the abort leaves
 *       the oracle exactly as before the begin.
 *   At most `ring` batches may be linked and not yet planned.
 *   oracle_plan(o, b)  once, in order, after linking b (and as many later batches
 *                      as the caller wants the plan to know): fills b->slot and
 *                      b->miss.
 * The struct obatch and its arrays stay owned by the caller and must stay valid
 * (and unmoved) from the link until oracle_plan of that batch returns: linking
 * and planning other batches write into them (next, slot).
 */
#ifndef EMBER_CACHE_ORACLE_H
#define EMBER_CACHE_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#define ORACLE_NONE UINT32_MAX /* no slot, no next use, no victim */
/* Batches are numbered 0 .. ORACLE_MAX_BATCHES-1. */
#define ORACLE_MAX_BATCHES (UINT32_MAX - 2u)
/* Slots at most: the queue of rows with no next use holds up to twice the capacity
 * between compactions, indexed in 32 bits. */
#define ORACLE_MAX_CAPACITY (UINT32_MAX / 2u)

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

/* The next occurrence of a batch's row: batch seq (ORACLE_NONE: none known), at
 * index pos of its uniq[]. */
struct onext {
	uint32_t seq;
	uint32_t pos;
};

/* Every array has room for nuniq entries (for oracle_link_begin: max_uniq). */
struct obatch {
	uint32_t seq;            /* the batch's number */
	uint32_t nuniq;          /* distinct rows (<= the oracle's capacity); IN of
				    oracle_link, OUT of oracle_link_part */
	const struct urow *uniq; /* each (table, row) once; IN of oracle_link, OUT
				    of oracle_link_begin/part (the array given there) */
	struct onext *next;      /* OUT of linking, written by later links: the next
				    occurrence of uniq[k] within the linked batches */
	uint32_t *slot;          /* OUT of planning: the slot of uniq[k] (until then
				    the oracle's: the slot the row will be found in) */
	struct omiss *miss;      /* OUT of planning: the admissions (until then the
				    oracle's scratch: linking keeps 8 bytes a row there) */
	uint32_t nmiss;          /* OUT of planning */
};

struct oracle;

/*
 * ntables tables (1 .. 65,535) of rows[t] rows each (1 .. 2^48); capacity slots
 * (1 .. 2^32-2); ring: the most batches linked and not yet planned (1 .. 2^31).
 * Returns 0, EMBER_EINVAL or EMBER_ENOMEM.
 * Per-row state is allocated zeroed and touched lazily (8 bytes a row); per slot
 * 36 bytes, and 32 bytes of scratch for sorting the rows a link moves out of
 * "never".
 */
int oracle_create(struct oracle **out, uint32_t ntables, const uint64_t *rows,
		  uint64_t capacity, uint32_t ring);
void oracle_destroy(struct oracle *o);

/* Record batch b (b->seq must be the next to link; b->uniq distinct rows). */
void oracle_link(struct oracle *o, struct obatch *b);

/* Link batch b (b->seq the next to link; b->next, slot, miss set) from runs of
 * ids: begin with no rows, uniq[] (max_uniq entries) to receive them. */
void oracle_link_begin(struct oracle *o, struct obatch *b, struct urow *uniq,
		       uint32_t max_uniq);
/*
 * n ids rows[] of table `table` (< the oracle's ntables: the caller checks): each
 * distinct row not yet in b is appended to uniq[]; luidx[i] = the index in uniq[]
 * of rows[i]; ids (NULL: none) gets a copy of rows[]. Returns 0, EMBER_EINVAL (an
 * id out of range) or EMBER_ETOOBIG (more than max_uniq distinct rows); after an
 * error only oracle_link_abort may follow.
 */
int oracle_link_part(struct oracle *o, struct obatch *b, uint32_t table, size_t n,
		     const uint64_t *rows, uint32_t *luidx, uint64_t *ids);
void oracle_link_end(struct oracle *o, struct obatch *b);
void oracle_link_abort(struct oracle *o, struct obatch *b);

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
 * Check the oracle's internal invariants (slow: O(capacity + rows + linked
 * batches' rows); allocates). For tests. Returns 0 or a negative line number of
 * the check that failed.
 */
int oracle_check(const struct oracle *o);

#endif
