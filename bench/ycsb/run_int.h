/*
 * run_int.h - what the YCSB run phase's files share: a worker thread's state and
 * the per-operation helpers of run.c (the one-at-a-time and batched loops) and
 * run_inflight.c (--inflight: K operations in flight per thread).
 */
#ifndef YCSB_RUN_INT_H
#define YCSB_RUN_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "run.h"
#include "stats.h"

#define READ_SLACK 64 /* read buffers hold value_size + this */

typedef struct ycsb_inflight ycsb_inflight;

static inline void fill_random(unsigned char *p, size_t n, uint64_t seed)
{
	ycsb_rng rng;

	ycsb_rng_seed(&rng, seed);
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)ycsb_rng_next(&rng);
}

typedef struct worker {
	const ycsb_run_spec *spec;
	unsigned idx;
	pthread_barrier_t *barrier;
	pthread_t tid;

	/* buffers, owned by the worker */
	uint64_t *ops;
	uint64_t nops;
	unsigned char *key_mem;   /* batch keys of key_size bytes */
	unsigned char *ukey;      /* the key of an update run inside a read batch */
	uint64_t usamples;        /* such updates, for 1-in-64 latency sampling */
	unsigned char *val;       /* value_size bytes, written by updates and inserts */
	unsigned char *read_mem;  /* batch read buffers of value_size + READ_SLACK */
	const void **keys;
	size_t *klens;
	void **bufs;
	size_t *caps;
	size_t *vlens;
	int *status;

	/* results */
	int rc;
	int fail_kind;            /* the first failed operation: its kind (-1: none) ... */
	uint64_t fail_key;        /* ... its key number, */
	uint64_t fail_index;      /* ... and how many operations this thread had done */
	uint64_t gen_ns;
	uint64_t t_start, t_end;
	uint64_t done[YCSB_OP_KINDS];
	uint64_t notfound, errors, wraps;
	uint64_t pending;         /* --inflight: operations whose start went pending */
	uint64_t verified;        /* values checked (--verify) */
	uint64_t gen_state;       /* draws the generations of this thread's writes */
	uint64_t *before;         /* verify: published versions of a batch's keys */
	uint64_t stale_at;        /* EMBER_YCSB_STALE_READ: 0 none, else 1 + N */
	ycsb_hist hist[YCSB_LAT_CLASSES];
	ycsb_inflight *inflight;  /* --inflight: slots and their buffers (run_inflight.c) */
} worker;

static inline void stamp_value(unsigned char *val, size_t value_size, uint64_t stamp)
{
	size_t n = value_size < 8 ? value_size : 8;

	for (size_t i = 0; i < n; i++)
		val[i] = (unsigned char)(stamp >> (8 * i));
}

/* The key number an operation names: "latest" draws count back from the newest
 * key every thread's inserts have reached (see keyseq.h). */
static inline uint64_t op_key(uint64_t op, ycsb_keyseq *inserts)
{
	if (op & YCSB_OP_LATEST)
		return ycsb_op_key(op, ycsb_keyseq_latest(inserts));
	return ycsb_op_key(op, 0);
}

/* Record one result code of a `kind` operation on key number `key`. Returns
 * nonzero when the thread must stop. */
static inline int note_rc(worker *w, int rc, unsigned kind, uint64_t key)
{
	if (rc == 0)
		return 0;
	if (rc == YCSB_NOTFOUND) {
		w->notfound++;
		return 0;
	}
	if (w->errors++ == 0) {
		w->rc = rc;
		w->fail_kind = (int)kind;
		w->fail_key = key;
		w->fail_index = w->done[0] + w->done[1] + w->done[2] + w->done[3];
	}
	return 1;
}

/* verify: the published version of keyno (0 past the table: not tracked). */
static inline uint64_t version_of(const ycsb_run_spec *s, uint64_t keyno)
{
	if (!s->verify || keyno >= s->nversions)
		return 0;
	/* acquire: pairs with the owner's release after its write returned */
	return atomic_load_explicit(&s->versions[keyno], memory_order_acquire);
}

/* verify: a write of keyno (made by its owner) returned with version v. */
static inline void version_publish(const ycsb_run_spec *s, uint64_t keyno, uint64_t v)
{
	if (s->verify && keyno < s->nversions)
		/* release: a read that loads v began after the write of v returned */
		atomic_store_explicit(&s->versions[keyno], v, memory_order_release);
}

/* verify: the key an update or read-modify-write drawn as keyno goes to: the
 * nearest key at or below keyno that thread idx owns (k % threads == idx), or idx
 * itself (keys 0 .. threads-1 are loaded: options.c checks records >= threads). */
static inline uint64_t own_key(const worker *w, uint64_t keyno)
{
	const ycsb_run_spec *s = w->spec;
	uint64_t t = s->threads, k;

	if (!s->verify)
		return keyno;
	k = keyno - keyno % t + w->idx;
	if (k > keyno)
		k = keyno >= t ? k - t : w->idx;
	return k;
}

/*
 * --verify: turn one read's result into a verdict, given the version published
 * before it began (before) -- or, for the key's owner, exactly the version it
 * must see. Returns 0, YCSB_EVERIFY, or rc when rc is an engine error.
 */
int ycsb_verify_read(worker *w, int rc, const unsigned char *buf, size_t vlen,
		     uint64_t keyno, uint64_t before);

/* The read-back's check of key k's result (ycsb_verify_all): 0, YCSB_EVERIFY
 * (reported on stderr) or the engine's error; *checked counts values read. */
int ycsb_readback_check(const ycsb_engine *e, uint64_t k, int rc, const unsigned char *buf,
			size_t vlen, size_t value_size, const _Atomic uint64_t *versions,
			uint64_t nversions, uint64_t *checked);
/* ycsb_verify_all with K reads in flight through start() / poll(). */
int ycsb_verify_all_inflight(const ycsb_engine *e, void *db, uint64_t keys, size_t key_size,
			     const _Atomic uint64_t *versions, uint64_t nversions,
			     size_t value_size, unsigned k, uint64_t *checked);

/* --inflight (run_inflight.c): allocate w->inflight before the start barrier
 * (0 or -ENOMEM), run the timed loop, free. */
int ycsb_inflight_init(worker *w);
void ycsb_run_inflight(worker *w, void *ctx);
void ycsb_inflight_free(worker *w);

#endif /* YCSB_RUN_INT_H */
