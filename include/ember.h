/*
 * ember.h - public interface of the Ember key-value store.
 *
 * Ember is an embedded, F2-style key-value store: a hybrid log (mutable in memory,
 * read-only in memory, then on disk) indexed by a latch-free hash index, with
 * epoch protection and io_uring for all disk I/O. Keys and values are byte strings
 * of variable length.
 *
 * Objects and threads
 * -------------------
 *   ember_db       One open store (one directory). Thread-safe: any thread may open
 *                  sessions on it. ember_close() must not race with any other call
 *                  on the same db or its sessions.
 *   ember_session  A thread's handle for data operations. A session belongs to the
 *                  thread that uses it: one thread at a time, no concurrent calls on
 *                  the same session. Open one session per worker thread. A session
 *                  never blocks other sessions while it sits idle between calls.
 *
 * Return values
 * -------------
 * Every call returns 0 on success or a negative error code: one of the EMBER_E*
 * codes below, or a negated errno value (-EACCES, -ENOSPC, ...) for failures the
 * operating system reported. ember_strerror() explains either kind.
 *
 * Ownership
 * ---------
 * The library never keeps or frees a buffer the caller supplied; keys and values
 * are copied in and out during the call. Pointers returned by the library (handles)
 * stay valid until the matching close call.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_VERSION_MAJOR 0
#define EMBER_VERSION_MINOR 1
#define EMBER_VERSION_PATCH 0
#define EMBER_VERSION_STRING "0.1.0"
/* One number that grows with every release: major * 10000 + minor * 100 + patch. */
#define EMBER_VERSION_NUMBER                                                        \
	(EMBER_VERSION_MAJOR * 10000 + EMBER_VERSION_MINOR * 100 + EMBER_VERSION_PATCH)

/* The library's version at run time (compare with EMBER_VERSION_STRING). */
const char *ember_version(void);

/*
 * Error codes. They live in a range of their own far below errno values, so a
 * negated errno and an Ember code never collide.
 */
enum {
	EMBER_OK = 0,
	EMBER_EINVAL = -30000,   /* an argument is NULL, zero, or out of range */
	EMBER_ENOTFOUND = -30001,/* the key is absent (never written, or deleted) */
	EMBER_ERANGE = -30002,   /* the caller's buffer is too small; the needed size is returned */
	EMBER_ETOOBIG = -30003,  /* a key or value is larger than the store accepts */
	EMBER_ENOMEM = -30004,   /* out of memory */
	EMBER_EIO = -30005,      /* an I/O request failed or returned short */
	EMBER_ECORRUPT = -30006, /* a checksum or structure check failed on data read back */
	EMBER_ENOTEMBER = -30007,/* the directory holds a file that is not an Ember file */
	EMBER_EVERSION = -30008, /* an Ember file of a format version this library cannot read */
	EMBER_EEXIST = -30009,   /* a store already exists and the options forbid using it */
	EMBER_EBUSY = -30010,    /* the store is in use (locked by another process, or sessions open) */
	EMBER_ESTATE = -30011,   /* the call is not valid in the object's state (e.g. a closed session) */
	EMBER_EAGAIN = -30012,   /* try again later */
	EMBER_ENOSPC = -30013,   /* a configured limit is exhausted: sessions, or the disk
				    budgets (live data fills them: compaction cannot make room) */
	EMBER_EREADONLY = -30014,/* the store was opened read-only (EMBER_OPEN_READONLY) */
	EMBER_EPENDING = -30015, /* an asynchronous operation was started and completes
				    later (ember_session_poll / ember_session_wait) */
};

/* A static, human-readable explanation of any return code (Ember's or -errno). */
const char *ember_strerror(int code);

/* Limits. */
#define EMBER_MAX_KEY_LEN (64u * 1024u)          /* keys: 1 .. 64 KiB */
#define EMBER_MAX_VALUE_LEN (16u * 1024u * 1024u) /* values: 0 .. 16 MiB (see below) */
#define EMBER_MAX_SESSIONS 256u                   /* sessions open at once per db */

/* ember_options.flags */
#define EMBER_OPEN_TRUNCATE 0x1u /* discard the Ember store the directory holds (even a
				    damaged one or one of another format version); a
				    superblock that is not Ember's is never overwritten */
#define EMBER_OPEN_READONLY 0x2u /* open an existing store for reading only: recover its
				    newest complete checkpoint without changing any file;
				    writes, compaction and checkpoints return
				    EMBER_EREADONLY. Several read-only opens may share a
				    store; a writer excludes them (EMBER_EBUSY). */
#define EMBER_OPEN_PREWRITE_LOG 0x4u /* give the hot log its disk ahead of time:
				    the open writes spare segment files full of zeros
				    until the log's segments and spares span
				    hot_disk_budget (at most 64 spares), and close
				    keeps them for the next open that asks, so the
				    log's first pass over its budget overwrites blocks
				    written before instead of appending (see
				    log_segment_bytes). Costs up to hot_disk_budget
				    bytes of writes, paid once while the spares stay
				    (an open without the flag removes them), and that
				    much disk. Needs log_segment_bytes (the options'
				    or the store's own) and a writable open:
				    EMBER_EINVAL otherwise. */
#define EMBER_OPEN_NO_CLOSE_CHECKPOINT 0x8u /* ember_close takes no final
				    checkpoint: the next open recovers the newest
				    checkpoint taken with ember_checkpoint (or in the
				    background), and writes made after it are dropped,
				    as after a crash. For stores whose checkpoints must
				    stay in step with other state (the shards of a
				    sharded embedding collection: docs/sharding.md). */

/*
 * Options for ember_open(). Zero the struct (or call ember_options_default()) and
 * set what you need: every field left at zero takes its default.
 *
 * The struct grows at its end in later releases (docs/abi.md): struct_size says how
 * much of it the caller knows. ember_options_default() sets it; a zeroed struct
 * (struct_size 0) is read as this release's struct. Fields past struct_size take
 * their defaults, so a program built against an older, smaller ember_options works
 * with a newer library unchanged.
 */
typedef struct ember_options {
	/* Bytes of this struct the caller's header declares: sizeof(ember_options) as
	 * the caller was compiled, set by ember_options_default(); 0: this release's. */
	size_t struct_size;
	/* Bytes of memory for the hot log: the mutable and read-only in-memory regions.
	 * Rounded down to a multiple of page_size; at least 8 pages. Default 256 MiB.
	 * The largest value the store accepts is the smaller of EMBER_MAX_VALUE_LEN and
	 * half of the smaller of log_memory and cold_log_memory, minus the record
	 * header and key. */
	uint64_t log_memory;
	/* Fraction of log_memory that is mutable (updated in place); the rest is
	 * read-only in memory (an update copies the record to the tail). 0 < f <= 1.
	 * Default 0.9. */
	double mutable_fraction;
	/* Buckets in the hash index (64 bytes each, 7 entries). Rounded up to a power of
	 * two. About one bucket per 4-6 keys keeps chains short. Default 2^18. */
	uint64_t index_buckets;
	/* Log page size in bytes: the unit of flushing and eviction. A power of two
	 * between 64 KiB and 64 MiB. Default 1 MiB. Records may span pages. */
	uint32_t page_size;
	/* Depth of each session's io_uring queue: how many disk reads one session keeps
	 * in flight at most. Between 1 and 4096. Default 128. */
	uint32_t io_queue_depth;
	/* EMBER_OPEN_* flags. */
	uint32_t flags;
	/* Keep each log on disk as a series of files of this many bytes ("hot.log.<n>",
	 * docs/format.md 7.3.1) instead of one file: a power of two from 32 MiB to
	 * 1 TiB; 0 (the default): one file per log. Fixed when the store is created (a
	 * reopen keeps the store's own). On ext4 a direct write that appends to a file
	 * locks it and waits for every read of it in flight; with segments only reads
	 * of the newest segment share a file with the appends. The hot log keeps the
	 * files of segments it releases (up to its disk budget's worth, at most 64)
	 * and reuses them as its next segments, so its writes overwrite blocks
	 * written before instead of appending: its files may then hold up to twice
	 * hot_disk_budget. Measured: a little faster on YCSB A and B larger than
	 * memory; on the partition buffer, no gain in a first epoch but epochs
	 * 0.95-1.18x the I/O floor instead of 1.16-1.69x once compaction releases
	 * space (docs/graph.md). EMBER_OPEN_PREWRITE_LOG gives a new log such files
	 * from the start (a first epoch at 0.97 s against 1.02 s in one file).
	 * Released log space goes back by removing
	 * whole segment files, also where the filesystem cannot punch holes. Each
	 * segment holding log data stays open: a log takes about (its disk use /
	 * log_segment_bytes) + 17 file descriptors. */
	uint64_t log_segment_bytes;

	/* ---- F2 tiering: hot and cold logs (see docs/compaction.md) ---- */

	/* One memory budget for the whole store, in bytes: hot log memory + hash index
	 * + cold index table + chunk log memory + cold log memory. When set, the hot
	 * log gets what the others leave (log_memory is ignored) and the open fails
	 * with EMBER_EINVAL if that is under 8 pages. The read cache, when on, counts
	 * too. 0: no overall budget. */
	uint64_t memory_budget;
	/* Disk budget of the hot log (bytes between its begin and tail). Hot->cold
	 * compaction starts at 80% of it and brings it back to 60%; writers help at
	 * 100%. At least 2 x the hot log memory. Default 16 x the hot log memory. */
	uint64_t hot_disk_budget;
	/* Disk budget of the cold log, likewise for cold->cold compaction. At least
	 * 2 x cold_log_memory. Default 4 x hot_disk_budget. */
	uint64_t cold_disk_budget;
	/* Memory of the cold log's tail (compaction appends there). The largest value
	 * the store accepts is also bounded by half of it. Default 64 MiB (less when a
	 * small memory_budget is set: an eighth of it, at least 8 pages). */
	uint64_t cold_log_memory;
	/* Hash chunks of the cold index (a power of two). Each covers
	 * cold_chunk_bytes / 8 chains; aim for about one cold key per chain, i.e.
	 * cold keys / (cold_chunk_bytes / 8) chunks. Default 2^16. */
	uint64_t cold_index_chunks;
	/* Bytes per hash chunk: a power of two from 64 to 4096. Default 256. */
	uint32_t cold_chunk_bytes;
	/* Memory of the read cache: recently read cold records, kept in memory and
	 * reached from the hot index, evicted second-chance style (a record read again
	 * since it was cached moves to the cache's tail instead). Writes of a key drop
	 * its cached copy. At least 8 pages when set (of the store's page size on a
	 * reopen: EMBER_EINVAL otherwise). Default 0: off. */
	uint64_t read_cache_memory;
	/* Memory of the cold index's chunk cache: copies of hash chunks that left the
	 * chunk log's memory (24 + 3 * cold_chunk_bytes / 4 bytes each, at most one
	 * per chunk: cold_index_chunks * (24 + 3 * cold_chunk_bytes / 4) holds them
	 * all; 24 + cold_chunk_bytes / 2 in a store made before format version 4,
	 * docs/format.md 6.3), filled
	 * as chunks are evicted from the chunk log and as reads fetch them from disk,
	 * so that a cold read costs one disk read (the record) instead of two (chunk,
	 * record). A chunk rewritten by a write or by compaction is never served from
	 * an older copy. Counts in memory_budget. Default 0: a quarter of
	 * memory_budget (a 32nd of log_memory when no budget is set), less if the
	 * budget leaves no room; EMBER_COLD_CACHE_OFF: none. */
	uint64_t cold_cache_memory;

	/* ---- durability (see docs/checkpoint.md) ---- */

	/* Take a checkpoint in the background every this many milliseconds (as
	 * ember_checkpoint() would). 0: only when ember_checkpoint() is called. */
	uint32_t checkpoint_interval_ms;
	/* Called with one line of text for each notable event of recovery (a checkpoint
	 * skipped as partial or damaged, and why) and for corruption found later (where).
	 * May be called from any of the store's threads; must not call into Ember.
	 * NULL: such lines go to stderr. */
	void (*log_fn)(void *log_arg, const char *line);
	void *log_arg;

	/* ---- appended after 0.1.0 (docs/abi.md, section 4) ---- */

	/* Which disk reads the read cache copies (read_cache_memory set):
	 * EMBER_READ_CACHE_ADMIT_FIRST (0): every one (0.1.0 had no other way);
	 * EMBER_READ_CACHE_ADMIT_SECOND: once the cache is full, a record's second
	 * disk read within a recent window, so that keys read once (the long tail of
	 * a skewed workload) do not push out keys read often. It remembers a 4-byte
	 * fingerprint of the keys read lately, one per 256 bytes of read_cache_memory
	 * rounded down to a power of two (at most a 64th of it, kept beside it:
	 * counted in memory_budget and in ember_stats.read_cache_bytes). Other values:
	 * EMBER_EINVAL. */
	uint32_t read_cache_admit;
} ember_options;

/* ember_options.read_cache_admit */
#define EMBER_READ_CACHE_ADMIT_FIRST 0
#define EMBER_READ_CACHE_ADMIT_SECOND 1

/* ember_options.cold_cache_memory: no chunk cache. */
#define EMBER_COLD_CACHE_OFF UINT64_MAX

/*
 * Fill *opts with the defaults and set opts->struct_size. opts must not be NULL.
 * The macro passes the size of the caller's struct, so that a newer library
 * writes no more than an older caller declared; the function of the same name
 * (for dlsym) fills the first release's struct (0.1.0's, which ends at log_arg:
 * docs/abi.md), leaving fields appended since alone.
 */
void ember_options_default_sized(ember_options *opts, size_t size);
void(ember_options_default)(ember_options *opts);
#define ember_options_default(opts) ember_options_default_sized((opts), sizeof(*(opts)))

typedef struct ember_db ember_db;
typedef struct ember_session ember_session;

/* Per-tier figures of ember_stats_get(). Nested in ember_stats, so it does not grow
 * (docs/abi.md): a new per-tier figure is a new field at the end of ember_stats. */
typedef struct ember_tier_stats {
	uint64_t records;        /* records in the log (live or not: ember_iterate
				    counts live keys) not yet compacted away; kept in
				    each checkpoint, so a reopen starts from the count
				    of the checkpoint it recovers */
	uint64_t bytes_memory;   /* memory the tier's log holds */
	uint64_t bytes_disk;     /* log bytes between its begin and tail */
	uint64_t reads_memory;   /* user reads answered from this tier's memory */
	uint64_t reads_disk;     /* user reads answered from this tier's disk */
	uint64_t compactions;    /* compaction passes over this log */
	uint64_t compaction_bytes_written; /* bytes compaction appended from this log */
} ember_tier_stats;

/* A snapshot of a store's statistics (counters since open, except the tiers'
 * records). It grows at its end in later releases (docs/abi.md). */
typedef struct ember_stats {
	ember_tier_stats hot, cold;
	uint64_t read_cache_hits;      /* user reads answered by the read cache */
	uint64_t read_cache_bytes;     /* read cache memory (0 when off) */
	uint64_t cold_cache_hits;      /* chunk reads the cold index's chunk cache saved */
	uint64_t cold_cache_bytes;     /* its memory (0 when off) */
	uint64_t index_bytes;          /* hot hash index memory */
	uint64_t cold_index_bytes;     /* cold index table + chunk log memory + entry cache */
	uint64_t chunk_log_bytes_disk; /* the cold index's chunks on disk */
	uint64_t user_reads;           /* keys read by get / get_batch */
	uint64_t user_writes;          /* records appended by put / delete / rmw */
	uint64_t user_bytes_written;   /* bytes of those records */
	uint64_t disk_reads;           /* disk reads issued for user lookups */
	uint64_t disk_bytes_read;      /* bytes those reads fetched */
	uint64_t compaction_disk_reads; /* disk reads of compaction (scans, liveness) */
	uint64_t compaction_bytes_read;
	uint64_t compaction_bytes_written; /* all compaction output, chunks included */
	uint64_t tombstones_dropped;   /* by cold->cold compaction */
	uint64_t compaction_assists;   /* passes run by writers at a hard limit */
	double write_amplification;    /* (user + compaction bytes written) / user bytes */
	double read_amplification;     /* disk bytes read per user read (user lookups only) */
	double cold_index_bytes_per_key; /* cold_index_bytes / cold.records */
	/* Disk reads per cold lookup (user reads only): */
	uint64_t cold_lookups;         /* lookups that reached a written chunk of the cold index */
	uint64_t cold_chunk_reads;     /* disk reads of hash chunks */
	uint64_t cold_record_reads;    /* disk reads of cold-log records (chain hops included) */
	double disk_reads_per_cold_lookup; /* (chunk + record reads) / cold_lookups */
} ember_stats;

/*
 * Fill *out. Safe to call while other threads work (figures may lag slightly).
 * The macro passes the size of the caller's struct: the library writes that many
 * bytes, no more, and zeroes what it does not know of a larger one; size 0 is
 * EMBER_EINVAL. The function of the same name (for dlsym) fills the first
 * release's struct (0.1.0's, which ends at cold_index_bytes_per_key: docs/abi.md).
 */
int ember_stats_get_sized(ember_db *db, ember_stats *out, size_t size);
int(ember_stats_get)(ember_db *db, ember_stats *out);
#define ember_stats_get(db, out) ember_stats_get_sized((db), (out), sizeof(*(out)))

/*
 * Run compaction now, on the calling thread, instead of waiting for the background
 * thread: every log that has anything on disk is compacted as far as its head
 * (force), or only logs past their trigger (!force). Returns 0 or an error.
 */
int ember_compact(ember_db *db, int force);

/*
 * Open (creating if needed) the store in directory dir. opts may be NULL for
 * defaults. On success *db is set; on failure *db is left NULL.
 *
 * A directory that already holds an Ember store is recovered: the newest complete
 * checkpoint is loaded, and the store holds exactly what that checkpoint covers
 * (everything written before ember_checkpoint() was called; writes after it may be
 * lost). A store never checkpointed recovers empty. A newer checkpoint that is
 * partial or damaged is skipped (opts->log_fn says which and why) and removed; if
 * the only complete checkpoint is damaged the open fails with EMBER_ECORRUPT
 * (ember_error_detail() is not available without a handle: log_fn says where).
 * Any other error reading the newest checkpoint (an I/O error, memory,
 * permissions) fails the open and removes nothing: it never falls back to an older
 * checkpoint for that.
 * The store's geometry is fixed when it is created: page_size, index_buckets,
 * cold_index_chunks, cold_chunk_bytes and the memory of each log (log_memory /
 * memory_budget, cold_log_memory) are taken from the store on reopen and the
 * options' values for them are ignored; budgets, read cache, queue depth and the
 * rest apply anew. With EMBER_OPEN_TRUNCATE the store is discarded instead.
 * opts->struct_size past this release's struct with a nonzero byte beyond it (a
 * newer caller's option this library lacks) returns EMBER_EINVAL. A directory
 * whose superblock is not Ember's returns EMBER_ENOTEMBER; one of
 * another format version EMBER_EVERSION. A directory locked by another open store
 * returns EMBER_EBUSY. A directory that cannot be created returns -errno.
 */
int ember_open(const char *dir, const ember_options *opts, ember_db **db);

/*
 * Close the store and free everything. Returns EMBER_EBUSY (and closes nothing) if
 * sessions are still open. Accepts NULL (returns 0).
 */
int ember_close(ember_db *db);

/*
 * Open a session for the calling thread. At most EMBER_MAX_SESSIONS at once
 * (EMBER_ENOSPC past that).
 */
int ember_session_open(ember_db *db, ember_session **s);

/*
 * Close a session. Accepts NULL. Returns EMBER_EBUSY (and closes nothing) while
 * asynchronous operations of the session are in flight (ember_session_wait with
 * EMBER_WAIT_ALL first), and EMBER_ESTATE when called from one of its completion
 * callbacks. The handle's memory is kept for reuse: a later
 * call with the closed handle returns EMBER_ESTATE rather than touching freed
 * memory, until EMBER_MAX_SESSIONS more sessions have been closed; after that
 * ember_session_open may hand the same memory out again, so a closed handle must
 * not be used. A program that opens and closes sessions holds at most
 * 2 x EMBER_MAX_SESSIONS handles (about 600 bytes each, while closed) however many
 * it opens over time; one session per thread stays the cheaper pattern.
 */
int ember_session_close(ember_session *s);

/*
 * Insert or replace key -> value. klen 1..EMBER_MAX_KEY_LEN; vlen may be 0
 * (val may then be NULL). Writes (put, delete, rmw) return EMBER_ENOSPC when the hot
 * or cold log is past its disk budget and compaction cannot bring it back because
 * the data is live; nothing was written then.
 */
int ember_put(ember_session *s, const void *key, size_t klen, const void *val,
	      size_t vlen);

/*
 * Read key's value into buf (capacity cap). On success *vlen is the value's length.
 * Returns EMBER_ENOTFOUND if absent; EMBER_ERANGE if cap < the value's length, with
 * *vlen set to the length needed (buf may be NULL when cap is 0, to ask the size).
 * After any other error buf's bytes are unspecified: a large value is checked while
 * it is copied, so one that fails its checksum (EMBER_ECORRUPT) may be partly there.
 */
int ember_get(ember_session *s, const void *key, size_t klen, void *buf, size_t cap,
	      size_t *vlen);

/* Delete key. Returns 0 whether or not the key existed. */
int ember_delete(ember_session *s, const void *key, size_t klen);

/*
 * Read-modify-write callback. old is the current value (old_len bytes), or NULL
 * with old_len 0 when the key is absent. Write the new value to out (capacity
 * out_cap bytes; out never overlaps old) and its length to *out_len, then return 0.
 *
 *  - If out_cap is too small, set *out_len to the size needed, write nothing, and
 *    return EMBER_ERANGE: you will be called again with room for it.
 *  - Any other negative return aborts the update; ember_rmw() returns that code and
 *    the stored value is unchanged.
 *  - The callback may run more than once per ember_rmw() (a retry after a
 *    concurrent change); only the last run's output is stored, so it must compute
 *    its result from old and arg alone.
 *  - When the key's record is in the mutable region, the callback runs while that
 *    record is latched against other writers (the new value is then written in
 *    place if it fits): keep it short, and never call back into Ember from it.
 */
typedef int (*ember_rmw_fn)(void *arg, const void *old, size_t old_len, void *out,
			    size_t out_cap, size_t *out_len);

/* Atomically replace key's value by fn(old). See ember_rmw_fn. */
int ember_rmw(ember_session *s, const void *key, size_t klen, ember_rmw_fn fn,
	      void *arg);

/*
 * Many gets at once: for i in [0, n), read keys[i] (klens[i] bytes) into bufs[i]
 * (capacity caps[i]), storing the length in vlens[i] and the per-key result (as
 * ember_get() would return it) in status[i]. All disk reads the batch needs are in
 * flight together (up to the session's io_queue_depth at a time), and in-memory
 * lookups overlap their cache misses. Returns 0 when every key was looked up (check
 * status[]), or an error code for invalid arguments (then status[] is untouched).
 * n may be 0. bufs[i] may be NULL when caps[i] is 0.
 */
int ember_get_batch(ember_session *s, size_t n, const void *const keys[],
		    const size_t klens[], void *const bufs[], const size_t caps[],
		    size_t vlens[], int status[]);

/*
 * Many puts at once: for i in [0, n), store keys[i] (klens[i] bytes) -> vals[i]
 * (vlens[i] bytes), in order (a key given twice ends with its later value), with
 * the per-key result (as ember_put() would return it) in status[i]. Every pair is
 * checked before anything is written: an invalid argument returns its error code
 * and writes nothing (status[] untouched). Otherwise returns 0 (check status[]; a
 * write can still fail alone, e.g. EMBER_ENOSPC). n may be 0. vals[i] may be NULL
 * when vlens[i] is 0. Each put is atomic on its own; the batch is not a transaction.
 */
int ember_put_batch(ember_session *s, size_t n, const void *const keys[],
		    const size_t klens[], const void *const vals[], const size_t vlens[],
		    int status[]);

/* ---- asynchronous operations (docs/async.md) ------------------------------------ */

/*
 * Operations that may complete later, so that one thread keeps many disk reads in
 * flight: a start call either completes the operation at once, or returns
 * EMBER_EPENDING and completes it later inside ember_session_poll() or
 * ember_session_wait() of the same session.
 *
 * The record. The caller owns an ember_op per operation in flight: zero it before
 * its first use, set done and user if wanted, and pass it to a start call. The
 * record must stay at its address, untouched except for reading status, until
 * the operation completes; then it may be reused (or freed) at once, even from its
 * own done callback.
 *
 * Completion. A start call that completes the operation at once returns its result
 * (0 or an error, as the synchronous call would return it) and sets status to the
 * same value; done is not called. A start call that returns EMBER_EPENDING sets
 * status to EMBER_EPENDING; when the operation completes, inside poll or wait,
 * status (and vlen) get the result and then done(op) is called if set. Arguments
 * are checked at the start: an invalid one returns its code at once (status set
 * to it), except that a NULL op returns EMBER_EINVAL and an op still in flight
 * returns EMBER_EBUSY without touching the record.
 *
 * Ownership. Keys and put values are copied during the start call: their buffers
 * may be reused when it returns. A get's buf and an rmw's arg must stay valid
 * until the operation completes. An rmw's callback runs during the start call or,
 * for a pending rmw, inside poll or wait.
 *
 * Order (docs/async.md, invariants 1-4). Within a session, operations on the same
 * key take effect in the order they were started: a get started after a put,
 * delete or rmw of the key sees its result even while that write is pending, and
 * a write started while an rmw of the key is pending is applied after the rmw, so
 * the rmw never overwrites it. An operation on a key with operations in flight is
 * queued behind them (EMBER_EPENDING). Operations on different keys complete in no
 * particular order. Across sessions each operation takes effect at one moment
 * between its start and its completion.
 *
 * When an operation goes pending. A get whose record is not in memory (hot log on
 * disk, cold tier); an rmw whose old value is not in memory; any operation on a key
 * with operations in flight. Puts and deletes of other keys complete at once. A
 * start may block as the synchronous calls do (waiting for log space, helping
 * compaction at a disk budget's hard limit).
 *
 * Limits. At most EMBER_MAX_INFLIGHT operations per session are in flight
 * (started and not yet delivered): a start that would go pending past that
 * returns EMBER_EAGAIN (status set; nothing done): poll or wait, then start it
 * again. Up to io_queue_depth of them read the disk at once; the others wait for a
 * slot of the session's ring.
 *
 * Threads. The calls of this section belong to the session's thread, like every
 * call on a session. Pending operations progress only inside ember_session_poll()
 * and ember_session_wait(). While any is in flight the session's synchronous data
 * calls (ember_get, ember_put, ember_delete, ember_rmw, ember_get_batch,
 * ember_put_batch) return EMBER_EBUSY, and ember_session_close() returns
 * EMBER_EBUSY. A done callback may start new operations on the session (and use
 * other sessions' synchronous calls), but not call ember_session_poll,
 * ember_session_wait or ember_session_close on it (EMBER_ESTATE).
 */
#define EMBER_MAX_INFLIGHT 1024u

enum ember_op_kind {
	EMBER_OP_GET = 1,
	EMBER_OP_PUT = 2,
	EMBER_OP_DELETE = 3,
	EMBER_OP_RMW = 4,
};

typedef struct ember_op ember_op;
/* Called once when a pending operation completes, on the session's thread inside
 * ember_session_poll() or ember_session_wait(), after op->status is set. */
typedef void (*ember_op_fn)(ember_op *op);

struct ember_op {
	/* set by the caller before the start call (zero: none) */
	ember_op_fn done;  /* completion callback of a pending operation */
	void *user;        /* the caller's; never read by the library */
	/* set by the library */
	int kind;          /* enum ember_op_kind, by the start call */
	int status;        /* EMBER_EPENDING while in flight, then the result */
	size_t vlen;       /* a get's value length (result 0, or EMBER_ERANGE: needed) */
	/* the library's; zero before first use, never written by the caller after */
	uint64_t reserved[2];
};

/*
 * Start a get of key into buf (capacity cap; buf may be NULL when cap is 0). The
 * result and op->vlen are ember_get()'s; buf must stay valid until completion.
 */
int ember_get_async(ember_session *s, ember_op *op, const void *key, size_t klen, void *buf,
		    size_t cap);
/* Start a put (as ember_put); key and val are copied. */
int ember_put_async(ember_session *s, ember_op *op, const void *key, size_t klen,
		    const void *val, size_t vlen);
/* Start a delete (as ember_delete); key is copied. */
int ember_delete_async(ember_session *s, ember_op *op, const void *key, size_t klen);
/* Start a read-modify-write (as ember_rmw); fn and arg are used until completion. */
int ember_rmw_async(ember_session *s, ember_op *op, const void *key, size_t klen,
		    ember_rmw_fn fn, void *arg);

/*
 * Progress the session's pending operations without blocking: submit and reap its
 * disk reads, run the steps that follow them, and deliver every operation that
 * completed (status, then done). Returns how many were delivered (0 or more), or
 * EMBER_EINVAL / EMBER_ESTATE (NULL, closed session, or called from a done
 * callback of the session).
 */
int ember_session_poll(ember_session *s);

/* ember_session_wait flags */
#define EMBER_WAIT_ALL 0x1u /* wait until no operation of the session is in flight */

/*
 * Like ember_session_poll, but blocks until at least one operation was delivered
 * (flags 0) or until none is in flight (EMBER_WAIT_ALL; operations started by done
 * callbacks meanwhile are waited for too). Returns at once when nothing is in
 * flight. Returns how many were delivered, or an error as poll does (an unknown
 * flag: EMBER_EINVAL).
 */
int ember_session_wait(ember_session *s, unsigned flags);

/* Operations of the session in flight (started, not yet delivered), or
 * EMBER_EINVAL / EMBER_ESTATE. */
int ember_session_inflight(ember_session *s);

/* ---- durability (docs/checkpoint.md) ------------------------------------------- */

/*
 * Take a checkpoint: when it returns 0, every write that returned before the call
 * began is durable, and a crash at any later moment recovers at least that state.
 * Writes made while it runs may or may not be covered. User threads keep working
 * meanwhile (compaction pauses). Checkpoints are numbered 1, 2, ... in the order
 * they complete; *id (may be NULL) gets this one's. Once it is complete the older
 * checkpoints are removed and then the log space compaction released since the last
 * checkpoint is given back to the file system (kept, with a log_fn line, while an
 * older checkpoint cannot be removed). One checkpoint runs at a time: a
 * second caller waits for the first. EMBER_EREADONLY on a read-only store; an I/O
 * error leaves the previous checkpoint in place and returns the error.
 * Any thread may call it, but not from inside an rmw callback.
 */
int ember_checkpoint(ember_db *db, uint64_t *id);

/* One complete checkpoint of a store. */
typedef struct ember_checkpoint_info {
	uint64_t id;
	uint64_t time_unix;     /* seconds since the epoch, when it completed */
	uint64_t hot_begin;     /* the logs' extents it covers (log addresses) */
	uint64_t hot_end;
	uint64_t cold_begin;
	uint64_t cold_end;
	uint64_t index_entries; /* hot index entries it saved */
} ember_checkpoint_info;

/* The complete checkpoints, newest first: up to cap in out[], their number in *n
 * (those recovery would consider: a directory whose meta names another id, a copy,
 * is not one). Returns 0 (or EMBER_ERANGE when there are more than cap: *n says how
 * many), or the error of a meta that cannot be read (an I/O error, memory). */
int ember_checkpoint_list(ember_db *db, ember_checkpoint_info *out, size_t cap, size_t *n);

/* What ember_open recovered. */
typedef struct ember_recovery_info {
	uint64_t checkpoint_id;    /* 0: the store was new or had no complete checkpoint */
	uint64_t records_replayed; /* log records re-indexed past the saved index */
	uint32_t checkpoints_skipped; /* partial or damaged newer ones */
	char detail[256];          /* why the last one was skipped ("" if none) */
} ember_recovery_info;

int ember_recovery_info_get(ember_db *db, ember_recovery_info *out);

/*
 * The detail of the last EMBER_ECORRUPT (or EMBER_EIO) the store met: which file,
 * at what offset, and what failed, as one line in buf (cap bytes, NUL-terminated,
 * truncated if needed). Returns 0, or EMBER_ENOTFOUND when there was none.
 */
int ember_error_detail(ember_db *db, char *buf, size_t cap);

/*
 * Read every live key of the store (newest value of each key that is not deleted),
 * calling fn(arg, key, klen, val, vlen) for each; the pointers are valid during the
 * call only. fn returns 0 to go on; any other value stops the walk and is returned.
 * Keys come in no particular order. The walk sees a state at least as new as the
 * moment it began for keys not written meanwhile; keys written meanwhile may be
 * seen with their old or new value (or, rarely, twice). It runs on the calling
 * thread (no session needed) and may read the whole store from disk. Compaction
 * pauses while the walk runs: fn must not call ember_compact, ember_checkpoint,
 * ember_checkpoint_list or ember_close on the same store (they would wait for the
 * walk; the list, for a background checkpoint waiting for it); ember_iterate on the
 * same store from fn returns EMBER_ESTATE.
 */
typedef int (*ember_iter_fn)(void *arg, const void *key, size_t klen, const void *val,
			     size_t vlen);
int ember_iterate(ember_db *db, ember_iter_fn fn, void *arg);

/* What ember_verify() checked. */
typedef struct ember_verify_report {
	uint64_t records;       /* records read and checked, every log */
	uint64_t bytes;         /* log bytes read */
	uint64_t chunks;        /* cold index chunks checked */
	uint64_t errors;        /* checksum or structure failures */
	char first_error[256];  /* where the first one was ("" if none) */
} ember_verify_report;

/*
 * Read every record of every log and every cold-index chunk back from disk (or
 * memory) and check its checksum and structure. Returns 0 when all is well,
 * EMBER_ECORRUPT when anything failed (report filled in either case), or an I/O
 * error. May run while other threads work (it checks what was there when it began).
 */
int ember_verify(ember_db *db, ember_verify_report *report);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_H */
