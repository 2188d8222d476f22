/*
 * store_int.h - what the store's own files share: the db and session objects and
 * the disk lookup machinery.
 *
 * Object lifetimes
 *  - ember_db owns the epoch table, the hash index, the hot log and its file.
 *  - A session is allocated by ember_session_open and freed only by ember_close;
 *    ember_session_close releases its ring and buffers, folds its counters into
 *    the db's and marks it closed, so a stale handle is detected (EMBER_ESTATE)
 *    instead of touching freed memory. Closed handles wait in a FIFO; once
 *    SESSIONS_KEPT_CLOSED of them wait, ember_session_open reuses the oldest, so a
 *    program that opens and closes sessions holds at most EMBER_MAX_SESSIONS +
 *    SESSIONS_KEPT_CLOSED handles.
 */
#ifndef EMBER_STORE_INT_H
#define EMBER_STORE_INT_H

#include <ember.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/epoch.h"
#include "index/cold_index.h"
#include "index/hash_index.h"
#include "io/file.h"
#include "log/hlog.h"
#include "log/record_reader.h"

#define SESSION_MAGIC 0x454d5353u /* "EMSS" */
#define DB_MAGIC 0x454d4442u      /* "EMDB" */
/* Closed session handles kept (still answering EMBER_ESTATE) before the oldest is
 * reused by ember_session_open. */
#define SESSIONS_KEPT_CLOSED EMBER_MAX_SESSIONS
#define IO_BUF_SIZE 8192u         /* a disk read of a small record fits here */
#define FIRST_READ_MIN 512u       /* bytes of a record asked for by the first read */

struct io_slot {
	uint8_t *buf;     /* IO_BUF_SIZE bytes, EM_IO_ALIGN aligned */
	uint8_t *big;     /* larger buffer for big records, freed after use */
	uint32_t big_cap;
	uint8_t *cur;     /* the buffer the read in flight fills: buf or big */
	int busy;         /* a read is in flight for this slot */
	struct lookup *lk; /* the lookup being served */
	uint64_t off;     /* file offset of buf[0] */
	uint32_t len;     /* bytes requested */
};

/*
 * One key being looked up across the tiers (lookup.c). Phases, in read order:
 *   LK_HOT    reading a hot-log record at addr (the hot chain, on disk)
 *   LK_CHUNK  reading the key's hash chunk at addr (the chunk log, on disk)
 *   LK_COLD   reading a cold-log record at addr (the cold chain, on disk)
 * Memory steps between reads (index, chains above head, chunks in memory) happen
 * under epoch protection inside lookup.c.
 */
enum { LK_HOT = 0, LK_CHUNK = 1, LK_COLD = 2 };
#define LK_HOT_ONLY 0x1  /* stop where the hot chain ends (compaction liveness) */
#define LK_COLD_ONLY 0x2 /* start at the cold index (cold compaction liveness) */
#define LK_FILL_RC 0x4   /* a user read: fill the read cache */
#define LK_CHUNK_ONLY 0x8 /* read the chunk at addr and stop (compaction prefetch) */
#define LK_BIG_CAP 0x10  /* the caller's buffer is large: its record sizes feed want_hint */
#define LK_COPIED 0x20   /* found on disk: its value is already in dst (rec_checksum_copy) */
#define LK_KEY_ONLY 0x40 /* compaction liveness: the key's record is known by its head */
#define LK_COLD_SEEN 0x80 /* counted once as a cold lookup (sess_stats.cold_lookups) */
#define LK_FROM_INDEX UINT64_MAX /* addr sentinel: start at the phase's index */

struct lookup {
	const void *key;
	uint32_t klen;
	uint8_t phase;
	uint8_t flags;
	uint64_t hash;
	uint64_t addr;  /* next record to read, or LK_FROM_INDEX */
	uint32_t want;  /* bytes to read from addr's block (0: the default first read) */
	uint32_t hint;  /* a record's first read when want is 0 (lookup_want_hint; 0: none) */
	uint32_t full;  /* LK_BIG_CAP: the size of a record that fills the caller's buffer */
	void *dst;      /* the caller's buffer (dcap bytes; NULL: none): a record found on
			   disk is copied there while its checksum is checked when its value
			   is large enough (REC_COPY_MIN, lookup.c note 7) */
	size_t dcap;
	uint64_t found; /* where the record was found (in the phase's log) */
	uint64_t entry; /* the cold-index entry the cold walk started from */
	uint64_t hot_entry; /* the hot index entry seen when the lookup began (LK_FILL_RC) */
	uint64_t hot_tail;  /* the hot log's tail before that (rc_insert's ABA check) */
	uint32_t restarts;  /* cold chains that ended below begin and were retried */
	uint64_t chunk_addr; /* the chunk copy entry was read from */
	size_t user;    /* the caller's index for this lookup */
};

/* Called exactly once per lookup as it ends. status 0: rec is the newest record of
 * the key (a tombstone is possible), valid only during the call; in_memory says it
 * lives in a log's ring (read its value with rec_read_value) rather than in a
 * private I/O buffer. Otherwise rec is NULL and status is EMBER_ENOTFOUND or an
 * error. */
typedef void (*lookup_done_fn)(void *ctx, struct lookup *l, int status, struct record *rec,
			       int in_memory);

/* Statistics a session counts without atomics' cost (owner-only relaxed stores). */
struct sess_stats {
	_Atomic uint64_t reads[5];   /* served by: hot memory, hot disk, cold memory, cold disk, read cache */
	_Atomic uint64_t ios;        /* disk reads issued */
	_Atomic uint64_t io_bytes;   /* bytes those reads fetched */
	_Atomic uint64_t user_reads; /* get / get_batch keys */
	_Atomic uint64_t user_bytes; /* record bytes appended by user writes */
	_Atomic uint64_t user_records;
	_Atomic uint64_t ci_hits;    /* chunk reads saved by the cold index's chunk cache */
	_Atomic uint64_t cold_lookups; /* lookups that reached a written chunk of the cold index */
	_Atomic uint64_t chunk_reads;  /* disk reads of hash chunks */
	_Atomic uint64_t cold_rec_reads; /* disk reads of cold-log records */
};
enum { TIER_HOT_MEM, TIER_HOT_DISK, TIER_COLD_MEM, TIER_COLD_DISK, TIER_RC };


static inline void stat_add(_Atomic uint64_t *c, uint64_t n)
{
	/* relaxed load + store: only the owning thread writes, readers tolerate lag */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/*
 * A ring with its I/O slots: where lookups_run and the asynchronous operations
 * (async.c) keep their reads. Each session has one for its synchronous calls
 * (pool) and, once it starts an asynchronous operation, a second one for those
 * (async.c, note 2).
 */
struct io_pool {
	struct em_ring ring;
	int broken;       /* the ring failed: its state is unknown, no more disk reads */
	struct io_slot *io;
	uint32_t io_n;
	uint32_t *io_free;
	uint32_t io_free_n;
};

struct async_state;

struct ember_session {
	uint32_t magic;
	int open;
	struct ember_db *db;
	int slot; /* epoch slot */
	struct io_pool pool; /* the synchronous calls' ring and slots */
	struct async_state *as; /* asynchronous operations (async.c); NULL until the first */
	uint32_t async_n;       /* asynchronous operations in flight (not yet delivered) */
	int delivering;         /* inside ember_session_poll/wait's completion callbacks */
	uint32_t want_hint; /* size of the last record a large-buffer read found (0: none) */
	int want_fill;      /* ... and it filled the caller's buffer (lookup_want_hint) */
	uint8_t *scratch; /* rmw output */
	size_t scratch_cap;
	uint8_t *oldbuf; /* rmw input read from disk */
	size_t oldbuf_cap;
	uint8_t *rbuf; /* read_record_sync: EM_IO_ALIGN-aligned */
	size_t rbuf_cap;
	uint64_t rchunk; /* chunk-log address of the chunk copy rbuf holds (0: none) */
	size_t rchunk_off; /* ... at this offset of rbuf */
	uint64_t *bhash; /* get_batch: per-key hash and address */
	uint64_t *baddr;
	struct lookup *blk;
	size_t bcap;
	struct sess_stats st;      /* user operations */
	struct sess_stats comp_st; /* compaction run on this session (assists, internal) */
	struct sess_stats *cur;    /* where lookups count: st, or comp_st during a pass */
	int internal; /* the compactor's own session: not counted as open */
	struct ember_session *next_all;
	struct ember_session *next_closed; /* db->closed FIFO, under sess_mu */
};

/*
 * The first read of a user lookup whose buffer is large (over IO_BUF_SIZE), from
 * what this session's last such read found:
 *  - its record filled the caller's buffer (want_fill): a record that fills this
 *    buffer, at most WANT_FILL_MAX. Callers that size buffers to their values (the
 *    graph buffer's partition chunks and edge buckets, read in one batch) pay one
 *    disk read per value whatever the mix of sizes;
 *  - else as large as that record (want_hint), at most a record that fills the
 *    buffer: a caller with large buffers and small values teaches the session a
 *    small size at its first read and wastes nothing after;
 *  - no such read yet: 0, the default first read.
 * A wrong guess costs bytes, never correctness: a record larger than the first read
 * is read again whole (lookup.c, on_read); a smaller one wastes at most the buffer's
 * size, or WANT_FILL_MAX, once (the session then learns the small size).
 */
#define WANT_FILL_MAX (8u << 20)

static inline uint32_t lookup_full(size_t klen, size_t cap)
{
	if (cap <= IO_BUF_SIZE || cap > (UINT32_MAX >> 2))
		return 0;
	return (uint32_t)(REC_HDR_SIZE + ((klen + 7) & ~(size_t)7) + ((cap + 7) & ~(size_t)7));
}

static inline uint32_t lookup_want_hint(const struct ember_session *s, size_t klen, size_t cap)
{
	uint32_t full = lookup_full(klen, cap);
	if (!full || !s->want_hint)
		return 0;
	if (s->want_fill)
		return full < WANT_FILL_MAX ? full : WANT_FILL_MAX;
	return s->want_hint < full ? s->want_hint : full;
}

static inline uint8_t lookup_cap_flag(size_t cap) { return cap > IO_BUF_SIZE ? LK_BIG_CAP : 0; }

struct compactor;
struct ckpt;

struct ember_db {
	uint32_t magic;
	char *dir;
	ember_options opts;
	int lock_fd;
	struct epoch *ep;
	struct hash_index index;
	struct em_file hot_file;
	struct hlog *hot;
	struct em_file cold_file;
	struct hlog *cold;
	struct em_file chunk_file;
	struct hlog *chunks;
	struct hlog *rc; /* the read cache (memory only), NULL when off */
	uint64_t rc_cursor; /* rc_evict: records below are done (its worker only) */
	_Atomic uint32_t *rc_seen; /* admission fingerprints (read_cache.c, note 5), or NULL */
	uint64_t rc_seen_mask;     /* slots - 1 */
	uint64_t chunk_cursor; /* chunk_evict: likewise for the chunk log (UINT64_MAX: off) */
	struct cold_index cidx;
	uint64_t max_record;      /* largest record the hot log accepts */
	uint64_t cold_max_record; /* and the cold log */
	uint64_t hot_budget;      /* disk budgets (bytes of log between begin and tail) */
	uint64_t cold_budget;
	uint64_t chunk_budget;
	struct compactor *comp;
	pthread_mutex_t sess_mu;
	struct ember_session *sessions; /* every session allocated: open, or closed */
	/* under sess_mu: closed user sessions, oldest first, for reuse (session.c) */
	struct ember_session *closed_head, *closed_tail;
	uint32_t closed_n;
	/* records of the hot and cold tiers when the store was opened (from the
	 * checkpoint recovered; ember_stats adds this open's appends and compactions) */
	uint64_t base_records[2];
	/* under sess_mu: the counters of user sessions already closed */
	struct sess_stats gone_st;
	/* under sess_mu: compaction reads of internal sessions already freed
	 * (ember_compact's, a checkpoint's), so ember_stats keeps counting them */
	uint64_t gone_comp_ios, gone_comp_bytes;
	uint32_t open_sessions;
	int readonly;     /* EMBER_OPEN_READONLY: no writes, compaction or checkpoints */
	struct ckpt *ck;  /* checkpoints and recovery (checkpoint_int.h) */
	ember_recovery_info recovery;
	pthread_mutex_t err_mu; /* guards err_detail, has_err */
	char err_detail[256];
	int has_err;
};

/* Record an error's detail (file, offset, what) for ember_error_detail and send it
 * to the log function (report.c). */
void db_report(struct ember_db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The file name of one of db's logs (for error details). */
static inline const char *log_file_name(struct ember_db *db, struct hlog *l)
{
	return l == db->hot ? "hot.log" : l == db->cold ? "cold.log" : "cold.idx";
}

/* The largest value capacity a record of one of db's logs may have (R3 of
 * log/record_reader.h). */
static inline uint64_t log_max_record(const struct ember_db *db, const struct hlog *l)
{
	return l == db->cold ? db->cold_max_record : db->max_record;
}

/* Validate a session handle for a data call: EMBER_EINVAL or EMBER_ESTATE. */
static inline int session_check(ember_session *s)
{
	if (!s || s->magic != SESSION_MAGIC)
		return EMBER_EINVAL;
	if (!s->open)
		return EMBER_ESTATE;
	return 0;
}

static inline int key_check(const void *key, size_t klen)
{
	if (!key || klen == 0)
		return EMBER_EINVAL;
	if (klen > EMBER_MAX_KEY_LEN)
		return EMBER_ETOOBIG;
	return 0;
}

/* The checks every single-key call starts with: the session, then the key. */
static inline int op_check(ember_session *s, const void *key, size_t klen)
{
	int rc = session_check(s);
	return rc < 0 ? rc : key_check(key, klen);
}

/* A synchronous data call: also refused while asynchronous operations of the
 * session are in flight (their order with it would be undefined; async.c note 5). */
static inline int sync_check(ember_session *s)
{
	int rc = session_check(s);
	if (rc == 0 && s->async_n)
		rc = EMBER_EBUSY;
	return rc;
}

static inline int sync_op_check(ember_session *s, const void *key, size_t klen)
{
	int rc = sync_check(s);
	return rc < 0 ? rc : key_check(key, klen);
}

/* Walk the chain from addr while it is in memory. Returns the record holding key
 * (its address in *at), or NULL with *at = the first address below head (or an
 * address below EM_LOG_START: the chain ended). Caller is protected. */
static inline struct record *trace_mem(struct hlog *l, uint64_t addr, const void *key,
				       uint32_t klen, uint64_t *at)
{
	uint64_t head = hlog_load(&l->head);
	while (addr >= head && addr >= EM_LOG_START) {
		struct record *r = hlog_rec(l, addr);
		if (rec_key_eq(r, key, klen)) {
			*at = addr;
			return r;
		}
		addr = rec_prev(r);
	}
	*at = addr;
	return NULL;
}

/*
 * The read cache (read_cache.c). A hot index entry with HI_READCACHE points to a
 * record of the read-cache log: a copy of a cold record, whose previous address is
 * the hot chain the entry held before. While the entry points to it, no newer
 * record of its tag exists in the hot log (any write replaces the entry), so its
 * value is current.
 */
static inline struct record *rc_rec(struct ember_db *db, uint64_t e)
{
	return hlog_rec(db->rc, hi_entry_addr(e));
}

/* Where the hot chain of entry e starts (past a read-cache record). Protected. */
static inline uint64_t hot_chain(struct ember_db *db, uint64_t e)
{
	return (e & HI_READCACHE) ? rec_prev(rc_rec(db, e)) : hi_entry_addr(e);
}

/* The read-cache record of entry e if it holds key (marking the hit), else NULL.
 * Protected. */
static inline struct record *rc_hit(struct ember_db *db, uint64_t e, const void *key,
				    uint32_t klen)
{
	if (!(e & HI_READCACHE))
		return NULL;
	struct record *x = rc_rec(db, e);
	if (!rec_key_eq(x, key, klen))
		return NULL;
	if (!(rec_header(x) & REC_RC_HIT))
		/* relaxed: a hint for the second chance at eviction */
		atomic_fetch_or_explicit(&x->header, REC_RC_HIT, memory_order_relaxed);
	return x;
}

/*
 * The in-memory front of every lookup (ember_get, ember_get_batch, ember_rmw and
 * the lookup state machine): from the hot index entry e of key's hash (0: none),
 * the read-cache record when e names one holding key (use_rc), else the hot chain
 * while it is in memory. Returns the record, with *tier TIER_RC or TIER_HOT_MEM
 * and *at its address (0 for the read cache); or NULL with *at where the hot chain
 * leaves memory (below head; below EM_LOG_START: it ended there). Protected.
 */
static inline struct record *front_find(struct ember_db *db, uint64_t e, const void *key,
					uint32_t klen, int use_rc, uint64_t *at, int *tier)
{
	*tier = TIER_HOT_MEM;
	if (!e) { /* no entry: no chain (trace_mem of 0 says the same) */
		*at = 0;
		return NULL;
	}
	struct record *x = use_rc ? rc_hit(db, e, key, klen) : NULL;
	if (x) {
		*at = 0;
		*tier = TIER_RC;
		return x;
	}
	return trace_mem(db->hot, hot_chain(db, e), key, klen, at);
}

/* Bytes of the admission filter that a read cache of mem bytes with admit keeps
 * beside its log (note 5 of read_cache.c; 0 for EMBER_READ_CACHE_ADMIT_FIRST). */
uint64_t rc_filter_bytes(uint64_t mem, uint32_t admit);
int rc_open(struct ember_db *db, uint64_t mem);
void rc_close(struct ember_db *db);
/* Copy a cold hit into the read cache, linked only if the hot entry is still
 * hot_entry. Best effort: skipped when the cache is full. Protected. */
void rc_insert(ember_session *s, uint64_t hash, uint64_t hot_entry, uint64_t hot_tail,
	       struct record *rec);

/* Copy a record's value out under its sequence lock (get semantics). */
int rec_read_value(struct record *r, void *buf, size_t cap, size_t *vlen);

/*
 * Run n lookups to the end, with as many reads in flight as the ring allows (all
 * tiers together). Each lookup starts at its phase and addr (LK_HOT with
 * LK_FROM_INDEX: from the hot index). The caller must not be protected. done is
 * called exactly once per lookup. Returns 0, or a ring error: then every unfinished
 * lookup got that error and the session answers EMBER_EIO for later disk reads.
 * Uses the session's pool (s->pool), which is idle between calls.
 */
int lookups_run(ember_session *s, struct lookup *lk, size_t n, lookup_done_fn done, void *ctx);

/*
 * The resumable form (async.c): lookups that begin at different times share one
 * pool, each ending with run->done. lookup_begin resolves l in memory and, when it
 * needs the disk, issues its first read on a free slot of run->pool (the caller
 * checks pool->io_free_n > 0 first). Returns 1 with a read queued (not yet
 * submitted), or 0 when l already ended (done was called). lookups_progress
 * submits what is queued and reaps completions (waiting for one when wait is set
 * and reads are in flight), continuing each lookup on its slot; done runs inside
 * it. Returns the completions reaped, or a ring error: every lookup in flight then
 * ended with that error, and the pool's later lookups end with EMBER_EIO. The
 * caller must not be protected.
 */
struct lookup_run {
	ember_session *s;
	struct io_pool *pool;
	lookup_done_fn done;
	void *ctx;
};
int lookup_begin(struct lookup_run *run, struct lookup *l);
int lookups_progress(struct lookup_run *run, int wait);

/* A pool of depth slots: its ring and its slot table (buffers come with use). */
int io_pool_init(struct io_pool *p, uint32_t depth);
/* Release it: the ring first, so that no read in flight writes into a freed buffer. */
void io_pool_release(struct io_pool *p);

/* Copy a found record's value (get semantics: tombstone -> EMBER_ENOTFOUND). */
static inline int lookup_copy_value(const struct lookup *l, struct record *rec, int in_memory,
				    void *buf, size_t cap, size_t *vlen)
{
	if (in_memory)
		return rec_read_value(rec, buf, cap, vlen);
	if (rec_header(rec) & REC_TOMBSTONE)
		return EMBER_ENOTFOUND;
	uint32_t n = atomic_load_explicit(&rec->val_len, memory_order_relaxed); /* private */
	*vlen = n;
	if (n > cap)
		return EMBER_ERANGE;
	if (n && !(l->flags & LK_COPIED && l->dst == buf))
		memcpy(buf, rec_value(rec), n);
	return 0;
}

/* ---- single-key operations (ops.c), in steps async.c shares ---- */

/* Put (tomb 0) or delete (tomb 1), arguments checked. Returns 0 or an error. */
int blind_write(ember_session *s, const void *key, uint32_t klen, const void *val,
		uint32_t vlen, int tomb);
/* EMBER_ETOOBIG when a klen-byte key with a vlen-byte value does not fit (inline:
 * every put pays it). */
static inline int size_check(ember_session *s, size_t klen, size_t vlen)
{
	if (vlen > EMBER_MAX_VALUE_LEN ||
	    rec_size((uint32_t)klen, rec_cap_for(vlen)) > s->db->max_record)
		return EMBER_ETOOBIG;
	return 0;
}

#define GET_NEED_READ 2
/* A get's memory part: the read cache and the hot chain in memory. Returns the
 * result (0, EMBER_ENOTFOUND, EMBER_ERANGE, as ember_get) when the record is in
 * memory; else GET_NEED_READ with *lk set to run the rest (LK_FILL_RC, dst buf). */
int get_front(ember_session *s, const void *key, uint32_t klen, uint64_t hash, void *buf,
	      size_t cap, size_t *vlen, struct lookup *lk);

/* A read-modify-write's old value when it is not in memory: what rmw_apply saw
 * before asking for it, and what the caller fetched. */
struct rmw_fetch {
	int have;        /* old / present hold the value read for e / slot / t0 */
	int present;     /* the key had a value (else absent or deleted) */
	int rc;          /* the fetch's error (rmw_fetch_done) */
	int slot;        /* an index entry existed when rmw_apply looked */
	uint64_t e;      /* ... and held e */
	uint64_t t0;     /* the hot tail before that look */
	uint64_t at;     /* where to start the lookup: where the chain left memory */
	uint8_t *old;    /* the value (caller-owned buffer, grown as needed) */
	size_t old_cap;
	size_t old_len;
};
#define RMW_NEED_READ 2
/* One try of key's read-modify-write (ops.c, notes 3-5): returns 0 or an error
 * when done, or RMW_NEED_READ when the old value is not in memory and f holds no
 * fetch for the chain there now: the caller then looks the key up from f->at
 * (LK_HOT, unprotected), stores the result with rmw_fetch_done, and calls again.
 * The CAS on the entry f->e fails if anything was linked since, so a value
 * fetched for a chain that has changed is never used. Caller unprotected. */
int rmw_apply(ember_session *s, const void *key, uint32_t klen, uint64_t hash, ember_rmw_fn fn,
	      void *arg, struct rmw_fetch *f);
/* Store a lookup's result in f (a lookup_done_fn's body). */
void rmw_fetch_done(struct rmw_fetch *f, struct lookup *l, int status, struct record *rec,
		    int in_memory);

/* Free a session's asynchronous state (async.c); nothing may be in flight. */
void async_release(ember_session *s);

/* One read through the session's ring (s->pool, idle outside lookups_run). Returns the
 * bytes read or an error. */
int session_read_sync(ember_session *s, struct em_file *f, void *buf, uint32_t len,
		      uint64_t off);

/* Read the record at addr of log (file f) into s->rbuf and check it (rec_check;
 * key: the key it must hold, or NULL). Caller unprotected. Returns 0 with *out,
 * EMBER_EAGAIN when addr fell below the log's begin meanwhile (the record moved),
 * EMBER_ECORRUPT (reported), or -errno. */
int read_record_sync(ember_session *s, struct hlog *log, struct em_file *f, uint64_t addr,
		     const void *key, uint32_t klen, struct record **out);

/* A file read through a session's ring, as a rec_read_fn context. */
struct sync_src {
	ember_session *s;
	struct em_file *f;
};
int session_read_fn(void *ctx, void *buf, uint32_t len, uint64_t off);
/* The cold-index entry for hash (0: empty). Caller protected; may leave and
 * re-enter the epoch to read a chunk from disk. */
int cold_entry_get(ember_session *s, uint64_t hash, uint64_t *entry);

/* Compare-and-swap the cold-index entry for hash. Caller protected (may leave and
 * re-enter the epoch). Returns 0, 1 on a mismatch (*actual = the current value),
 * or an error. */
int cold_chunk_cas(ember_session *s, uint64_t hash, uint64_t expected, uint64_t desired,
		   uint64_t *actual);

#define COLD_ANY UINT64_MAX
/* Append a copy of src (key, value, tombstone) to the cold log as the newest record
 * of its chain. expected == COLD_ANY: link it whatever the chain holds (retrying
 * on races). Otherwise only if the chain's entry still equals expected: returns 1,
 * nothing linked, when it changed. Caller protected. Returns 0, 1, or an error. */
int cold_insert(ember_session *s, uint64_t hash, struct record *src, uint64_t expected);
/* Is hash's chunk in the chunk log's fuzzy region [safe_read_only, read_only),
 * where an insert must wait for it to settle (cold_index.h, note 3)? A hint only:
 * the boundaries move on. Reads no log memory: callable unprotected. */
int cold_chunk_fuzzy(ember_session *s, uint64_t hash);

/* The hot and cold tiers' record counts, as ember_stats_get reports them. */
void stats_tier_records(ember_db *db, uint64_t *hot, uint64_t *cold);

/* Hook the chunk cache's fill to the chunk log's eviction (cold_index.h, note 6a).
 * At open, after ci_cache_init and before anything is written. */
void chunk_cache_attach(struct ember_db *db);

/* Create a session (internal: the library's own, not counted as open). */
int session_create(ember_db *db, int internal, ember_session **out);
/* Unlink and free an internal session made for one call (ember_compact). */
void session_free_internal(ember_session *s);
/* Release a session's resources and mark it closed (stays allocated). */
void session_destroy(ember_session *s);
/* Free every session of db (at ember_close). */
void sessions_free(ember_db *db);

/* Grow a session buffer to at least need bytes (content not kept). */
int session_buf_reserve(uint8_t **buf, size_t *cap, size_t need);

#endif
