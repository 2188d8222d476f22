/*
 * checkpoint.h - checkpoints and recovery (private to the store; protocol in
 * checkpoint.c, recovery.c and docs/checkpoint.md).
 */
#ifndef EMBER_STORE_CHECKPOINT_H
#define EMBER_STORE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

struct ember_db;
struct em_ring;

#define CKPT_META_SIZE 4096u
#define CKPT_DIR "checkpoints"

/* The store's geometry: fixed when it is created (superblock and every checkpoint). */
struct store_geometry {
	uint64_t page_size;
	uint64_t hot_mem, cold_mem, chunk_mem; /* each log's ring */
	uint64_t index_buckets;
	uint64_t cold_index_chunks;
	uint64_t cold_chunk_bytes;
	uint64_t log_segment_bytes; /* 0: each log one file */
	/* the cold index's entries carry tags (cold_index.h note 10): 1 in a store of
	 * format version 4, 0 in versions 2 and 3. The superblock's alone: checkpoints
	 * do not record it (ck_geometry_equal does not compare it) */
	uint64_t cold_tags;
};

/* A checkpoint's metadata (the "meta" file; layout in docs/format.md). */
struct ckpt_meta {
	uint64_t id;
	uint64_t time_unix;
	struct store_geometry geo;
	uint64_t hot_begin, hot_replay, hot_end; /* replay [hot_replay, hot_end) */
	uint64_t cold_begin, cold_end;
	uint64_t chunk_begin, chunk_end;
	uint64_t index_entries, index_sum; /* hot.index: entries x 16 bytes, XXH3 */
	uint64_t table_bytes, table_sum;   /* cold.table */
	/* the tiers' record counts (ember_tier_stats.records) at hot_end; valid when
	 * has_counts (metas written before the counts existed have none) */
	uint64_t has_counts, hot_records, cold_records;
};

/* Encode m into buf (CKPT_META_SIZE bytes, checksummed). */
void ckpt_meta_encode(const struct ckpt_meta *m, uint8_t *buf);
/* Decode and check a meta file's bytes: 0, EMBER_ENOTEMBER (magic),
 * EMBER_EVERSION, or EMBER_ECORRUPT (size, checksum, or fields out of range). */
int ckpt_meta_parse(const uint8_t *buf, size_t len, struct ckpt_meta *m);

/* Allocate the checkpoint state of db (at open, before recovery). */
int ckpt_init(struct ember_db *db);
/* Stop the background thread and free the state (at close). */
void ckpt_free(struct ember_db *db);

/*
 * Recovery, step 1 (before the logs are opened): find the newest complete
 * checkpoint whose files check out (skipping and reporting the others), load its
 * index and table into memory. *found = 0 when there is none (a new store).
 * Returns 0 or an error (EMBER_ECORRUPT when checkpoints exist but none is usable).
 */
int ckpt_find(struct ember_db *db, const struct store_geometry *geo, struct ckpt_meta *m,
	      int *found);
/* Recovery, step 2 (logs, index and cold index set up at m's extents): load the
 * saved index and cold table, replay the hot log's tail, remove newer partial
 * checkpoints. Returns 0 or an error. */
int ckpt_apply(struct ember_db *db, const struct ckpt_meta *m);
/* Start the background checkpoint thread (when checkpoint_interval_ms is set). */
int ckpt_start(struct ember_db *db);
/* Stop it (ember_close, before the final checkpoint). */
void ckpt_stop(struct ember_db *db);

/* Take a checkpoint (ember_checkpoint). */
int ckpt_take(struct ember_db *db, uint64_t *id);
/* Remove every checkpoint directory (a store being created over an old one), and
 * fsync checkpoints/ so the removal is durable. Returns 0 or the first error. */
int ckpt_remove_all(struct ember_db *db);
/* Has the store changed since the last complete checkpoint? */
int ckpt_dirty(struct ember_db *db);
/* Is a checkpoint running now? (compaction assists wait for it, not failing) */
int ckpt_active(struct ember_db *db);

/*
 * Compaction moved log kind's begin to a: give back the file space below it that
 * no complete checkpoint still needs (the rest is given back when the next
 * checkpoint completes). Caller holds the compactor's pass_mu; ring: its own.
 * Returns 0 or an error.
 */
int ckpt_release(struct ember_db *db, int kind, uint64_t a, struct em_ring *ring);


#endif
