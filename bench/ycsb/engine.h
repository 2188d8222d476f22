/*
 * engine.h - the storage engines the YCSB driver can measure, behind one table of
 * function pointers.
 *
 * Threads: open() and close() run on the driver's main thread with no worker alive.
 * thread_init() is called by each worker thread for itself and returns that
 * thread's context; every data call then gets the calling thread's own context, so
 * an engine may keep per-thread state (an Ember session, an LMDB read txn) there
 * without locks. thread_fini() is called by the same thread.
 *
 * Returns: 0 on success, YCSB_NOTFOUND (positive) from reads of an absent key, or a
 * negative engine-specific code that the engine's strerror() explains.
 */
#ifndef YCSB_ENGINE_H
#define YCSB_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "workload.h"

#define YCSB_NOTFOUND 1
#define YCSB_PENDING 2 /* start(): the operation completes later, through poll() */
#define YCSB_MAX_INFLIGHT 1024 /* --inflight K at most (Ember's EMBER_MAX_INFLIGHT) */

typedef struct ycsb_engine_params {
	const char *dir;         /* IN: an empty directory the engine may fill */
	uint64_t mem_budget;     /* IN: bytes of memory for the engine's data; 0 = its default */
	uint64_t read_cache;     /* IN: Ember's read cache bytes (0: default, UINT64_MAX: off) */
	int rc_admit_first;      /* IN: Ember's read cache copies every disk read (else the second) */
	uint64_t cold_cache;     /* IN: Ember's cold chunk cache bytes (0: default, UINT64_MAX: off) */
	uint64_t cold_chunks;    /* IN: Ember's cold_index_chunks (0: the driver's choice) */
	uint64_t segment_bytes;  /* IN: Ember's log_segment_bytes (0: one file per log) */
	uint64_t index_buckets;  /* IN: Ember's hash index size; 0 = the engine's choice;
				    others ignore it */
	uint64_t records;        /* IN: keys the load phase will insert */
	size_t key_size;         /* IN: bytes per key */
	size_t value_size;       /* IN: bytes per value */
	unsigned max_threads;    /* IN: worker threads alive at once, at most */
	unsigned max_batch;      /* IN: largest n read_batch() will be given */
	unsigned max_inflight;   /* IN: --inflight K: operations each thread keeps in
				    flight through start() (0: none); tags are < K */
	/* IN: the raw data is larger than mem_budget. An engine then keeps to the
	 * budget where it can, so that a larger-than-memory run measures its disk
	 * path and not the OS page cache (RocksDB: O_DIRECT reads, memtables inside
	 * the budget); one that cannot (LMDB: mmap) says so in its settings line. */
	int bounded;
	/* IN, Ember only: bounded, the budget is the hot log's memory alone (the
	 * hash index and the cold tier's memory beside it) instead of the store's. */
	int hot_log_only;
} ycsb_engine_params;

typedef struct ycsb_engine {
	const char *name;
	/* Open a store in p->dir. On success *db is set and settings (capacity cap)
	 * holds one line stating every setting that matters for a comparison. */
	int (*open)(const ycsb_engine_params *p, void **db, char *settings, size_t cap);
	int (*thread_init)(void *db, void **thread);
	void (*thread_fini)(void *thread);
	/* Copy key's value into buf (capacity cap, at least the value size). */
	int (*read)(void *thread, const void *key, size_t klen, void *buf, size_t cap,
		    size_t *vlen);
	int (*update)(void *thread, const void *key, size_t klen, const void *val,
		      size_t vlen);
	int (*insert)(void *thread, const void *key, size_t klen, const void *val,
		      size_t vlen);
	/* Read-modify-write of key: new value = ycsb_value_modify(old value); an
	 * absent key gets a fresh value of vlen bytes. Atomic or not as the engine's
	 * settings line says. */
	int (*rmw)(void *thread, const void *key, size_t klen, size_t vlen);
	/* n reads at once, per-key result (0 / YCSB_NOTFOUND / < 0) in status[];
	 * returns < 0 only when the batch as a whole failed. NULL: the driver issues
	 * n read() calls instead. */
	int (*read_batch)(void *thread, size_t n, const void *const keys[],
			  const size_t klens[], void *const bufs[], const size_t caps[],
			  size_t vlens[], int status[]);
	int (*close)(void *db);
	const char *(*strerror)(int rc);
	/* Optional (NULL: none): one line of the engine's own statistics since open,
	 * printed after an engine's last run. Called on the main thread. */
	void (*stats)(void *db, char *out, size_t cap);

	/*
	 * Optional operations kept in flight (--inflight K; start == NULL: none, and
	 * then inflight_batches says what --inflight does). A thread has K slots,
	 * tags 0 .. max_inflight-1, sized by thread_init() from p->max_inflight; a
	 * slot is the engine's from a start() that returns YCSB_PENDING until poll()
	 * delivers it.
	 *
	 * start(): begin a `kind` operation (YCSB_OP_READ / _UPDATE / _INSERT /
	 * _RMW, workload.h) of key in slot tag. A read copies into buf (capacity
	 * len); an update or insert stores val (len bytes); an rmw is rmw() with
	 * len as the fresh value's length. key, val and buf stay valid and
	 * untouched until the operation completes. Returns the result the
	 * synchronous call would (0, YCSB_NOTFOUND or < 0; *vlen set by a read that
	 * returns 0) when the operation completed inside the call, or YCSB_PENDING.
	 * Order: one thread's operations on one key take effect in the order they
	 * were started (a read started while a write of the key is pending sees
	 * that write), as --verify checks.
	 *
	 * poll(): deliver pending operations that completed, each through
	 * fn(arg, tag, rc, vlen), rc and vlen as start() would have returned them.
	 * With block set, wait until at least one was delivered (returns at once
	 * when none is pending). Returns how many were delivered, or < 0 (the
	 * thread stops). fn may not call poll(). thread_fini() may be called with
	 * operations pending: it waits for them without delivering them.
	 */
	int (*start)(void *thread, unsigned tag, unsigned kind, const void *key, size_t klen,
		     const void *val, void *buf, size_t len, size_t *vlen);
	int (*poll)(void *thread, int block,
		    void (*fn)(void *arg, unsigned tag, int rc, size_t vlen), void *arg);
	/* Without start(): 1 when --inflight K runs the engine's reads as read
	 * batches of up to K consecutive reads reaching past updates of other keys
	 * (as --batch K --batch-over-updates: its best equivalent, stated in its
	 * settings line); 0 when --inflight is refused for it. */
	int inflight_batches;
	/* Why --inflight is refused (inflight_batches 0, start NULL); NULL: generic. */
	const char *inflight_refusal;
} ycsb_engine;

/*
 * The YCSB F modification, the same for every engine: the value with its first
 * (up to) 8 bytes read as a little-endian counter and incremented; an absent old
 * value (old == NULL) counts as all zeros. out may equal old (an in-place update):
 * then only the counter bytes are written.
 */
static inline void ycsb_value_modify(const void *old, size_t old_len, void *out,
				     size_t len)
{
	const unsigned char *in = old;
	unsigned char *o = out;
	size_t head = len < 8 ? len : 8;
	uint64_t counter = 0;

	for (size_t i = 0; i < head && i < old_len; i++)
		counter |= (uint64_t)in[i] << (8 * i);
	if (old != out && len > head) {
		size_t keep = in == NULL || old_len <= head ? 0
			      : (old_len < len ? old_len : len) - head;

		if (keep > 0)
			memcpy(o + head, in + head, keep);
		memset(o + head + keep, 0, len - head - keep);
	}
	counter++;
	for (size_t i = 0; i < head; i++)
		o[i] = (unsigned char)(counter >> (8 * i));
}

/* The engines compiled into this binary, NULL-terminated, Ember first. */
extern const ycsb_engine *const ycsb_engines[];

/* The engine called name, or NULL if it was not compiled in. */
const ycsb_engine *ycsb_engine_find(const char *name);

extern const ycsb_engine ycsb_engine_ember;
#ifdef HAVE_ROCKSDB
extern const ycsb_engine ycsb_engine_rocksdb;
#endif
#ifdef HAVE_LMDB
extern const ycsb_engine ycsb_engine_lmdb;
#endif

#endif /* YCSB_ENGINE_H */
