/*
 * run_inflight.c - the run phase's timed loop with --inflight K: each worker
 * thread keeps up to K operations of its array in flight, as K clients would,
 * through the engine's start() and poll() (engine.h).
 *
 * How it works
 * ------------
 * A thread has K slots (its clients), each with its own key, value and read
 * buffer. The loop starts the array's next operations, in order, in free slots
 * until none is free; an operation that completes inside start() is accounted at
 * once and frees its slot again. While some are pending it polls without blocking
 * every POLL_EVERY starts, and blocks in poll() when no slot is free, when the
 * next operation must wait (below) or when nothing is left to start. A completion
 * (complete()) checks and counts the operation and frees its slot. The run ends
 * at the op count or the deadline (checked every 256 starts): nothing more starts
 * and the thread waits for what is in flight; the end timestamp follows the last
 * completion.
 *
 * Latency: 1 operation in 64 (by start order) is timed from just before start()
 * to its completion: the moment start() returns it or poll() delivers it.
 *
 * --verify with operations in flight. The exact-version rules of run.c hold with
 * these additions:
 *  1. a thread never has two writes (update, rmw) of one key in flight: a write
 *     of a key in the write set (wset_*: the keys of the thread's writes in
 *     flight) waits for the earlier one to complete, so every write's version,
 *     published + 1, is known when it starts, and is published when it completes;
 *  2. a read of a key by its owner expects exactly the version of the owner's
 *     write of it in flight, if any (engine.h: one thread's operations on a key
 *     take effect in the order started), else the published one;
 *  3. any other read is checked against the version published before it started
 *     and the one published when it completed (ycsb_verify_read);
 *  4. an insert's key is acknowledged (ycsb_keyseq_ack) when it completes, so no
 *     thread names it before then.
 * Without --verify, nothing waits: writes of one key may be in flight together.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "run_int.h"

#define POLL_EVERY 16 /* starts between polls that do not block, while any is pending */

typedef struct slot {
	uint64_t keyno;
	uint64_t version; /* verify: a write's version; a read's `before` (rule 2, 3) */
	uint64_t t0;      /* the start time of a timed operation */
	unsigned kind;    /* YCSB_OP_* */
	int timed;
	int busy;         /* started and not yet completed */
} slot;

struct ycsb_inflight {
	unsigned k;
	slot *slots;
	unsigned *free_tags; /* a stack of the free slots */
	unsigned nfree;
	unsigned pending;    /* slots whose start() returned YCSB_PENDING */
	int stop;            /* an operation failed: start nothing more */
	uint64_t timed;      /* operations started, for 1-in-64 sampling */
	/* verify: the write set, open addressing on key numbers; an entry is a slot's
	 * tag + 1 (0: empty), its key the slot's keyno */
	uint32_t *wset;
	uint32_t wmask;
	unsigned char *keys; /* K keys of key_size bytes */
	unsigned char *vals; /* K values of value_size bytes */
	unsigned char *bufs; /* K read buffers of value_size + READ_SLACK bytes */
	size_t cap;
};

int ycsb_inflight_init(worker *w)
{
	const ycsb_run_spec *s = w->spec;
	ycsb_inflight *f = calloc(1, sizeof(*f));
	size_t vs = s->value_size > 0 ? s->value_size : 1;
	uint32_t wsize = 2;

	if (f == NULL)
		return -ENOMEM;
	w->inflight = f;
	f->k = s->inflight;
	f->cap = s->value_size + READ_SLACK;
	while (wsize < 2 * f->k)
		wsize <<= 1;
	f->wmask = wsize - 1;
	f->slots = calloc(f->k, sizeof(*f->slots));
	f->free_tags = calloc(f->k, sizeof(*f->free_tags));
	f->wset = calloc(wsize, sizeof(*f->wset));
	f->keys = calloc(f->k, s->key_size); /* zero: the padding after the 8 bytes */
	f->vals = malloc(f->k * vs);
	f->bufs = calloc(f->k, f->cap);      /* zeroed: pages faulted in before timing */
	if (f->slots == NULL || f->free_tags == NULL || f->wset == NULL || f->keys == NULL ||
	    f->vals == NULL || f->bufs == NULL)
		return -ENOMEM; /* ycsb_inflight_free() undoes the rest */
	for (unsigned i = 0; i < f->k; i++) {
		f->free_tags[i] = f->k - 1 - i; /* slot 0 on top */
		fill_random(f->vals + (size_t)i * vs, s->value_size, s->seed ^ (0x51075ull + i));
	}
	f->nfree = f->k;
	return 0;
}

void ycsb_inflight_free(worker *w)
{
	ycsb_inflight *f = w->inflight;

	if (f == NULL)
		return;
	free(f->slots);
	free(f->free_tags);
	free(f->wset);
	free(f->keys);
	free(f->vals);
	free(f->bufs);
	free(f);
	w->inflight = NULL;
}

/* ---- verify: the write set ---- */

static inline uint32_t wset_home(const ycsb_inflight *f, uint64_t keyno)
{
	return (uint32_t)((keyno * 0x9e3779b97f4a7c15ull) >> 32) & f->wmask;
}

/* The slot of the write of keyno in flight, or -1. */
static int wset_find(const ycsb_inflight *f, uint64_t keyno)
{
	for (uint32_t i = wset_home(f, keyno); f->wset[i] != 0; i = (i + 1) & f->wmask)
		if (f->slots[f->wset[i] - 1].keyno == keyno)
			return (int)f->wset[i] - 1;
	return -1;
}

/* Slot tag (a write, its keyno set) enters the set; at most K entries in 2K+. */
static void wset_add(ycsb_inflight *f, unsigned tag)
{
	uint32_t i = wset_home(f, f->slots[tag].keyno);

	while (f->wset[i] != 0)
		i = (i + 1) & f->wmask;
	f->wset[i] = tag + 1;
}

/* Slot tag leaves the set; the entries after it in its run move back, so every
 * entry stays reachable from its home without tombstones. */
static void wset_del(ycsb_inflight *f, unsigned tag)
{
	uint32_t i = wset_home(f, f->slots[tag].keyno), j;

	while (f->wset[i] != tag + 1)
		i = (i + 1) & f->wmask;
	f->wset[i] = 0;
	for (j = (i + 1) & f->wmask; f->wset[j] != 0; j = (j + 1) & f->wmask) {
		uint32_t h = wset_home(f, f->slots[f->wset[j] - 1].keyno);

		/* the entry at j may move to the hole at i unless its home lies
		 * cyclically in (i, j] */
		if (i <= j ? (h > i && h <= j) : (h > i || h <= j))
			continue;
		f->wset[i] = f->wset[j];
		f->wset[j] = 0;
		i = j;
	}
}

/* ---- one operation ---- */

/* Account a completed operation (rc as the engine's synchronous call returns it)
 * and free its slot. */
static void complete(worker *w, unsigned tag, int rc, size_t vlen)
{
	const ycsb_run_spec *s = w->spec;
	ycsb_inflight *f = w->inflight;
	slot *sl = &f->slots[tag];

	if (sl->timed)
		ycsb_hist_add(&w->hist[sl->kind], ycsb_now_ns() - sl->t0);
	switch (sl->kind) {
	case YCSB_OP_READ:
		if (s->verify)
			rc = ycsb_verify_read(w, rc, f->bufs + (size_t)tag * f->cap, vlen,
					      sl->keyno, sl->version);
		break;
	case YCSB_OP_UPDATE:
	case YCSB_OP_RMW:
		if (rc == 0)
			version_publish(s, sl->keyno, sl->version); /* rule 1 */
		if (s->verify)
			wset_del(f, tag);
		break;
	default: /* insert: a failed one is acknowledged too (keyseq.h) */
		ycsb_keyseq_ack(s->inserts, sl->keyno);
		break;
	}
	if (note_rc(w, rc, sl->kind, sl->keyno))
		f->stop = 1;
	w->done[sl->kind]++;
	sl->busy = 0;
	f->free_tags[f->nfree++] = tag;
}

/* poll()'s delivery: a pending operation completed. */
static void on_complete(void *arg, unsigned tag, int rc, size_t vlen)
{
	worker *w = arg;
	ycsb_inflight *f = w->inflight;

	if (tag >= f->k || !f->slots[tag].busy || f->pending == 0) {
		/* the engine delivered a slot that was not pending: a bug to report,
		 * not to count as this slot's result */
		if (note_rc(w, -EPROTO, YCSB_FAIL_POLL, tag))
			f->stop = 1;
		return;
	}
	f->pending--;
	complete(w, tag, rc, vlen);
}

/*
 * Start operation op (the thread's seq-th) in a free slot. Returns 1 when it was
 * started (and maybe completed), 0 when it must wait for a write of its key in
 * flight (verify, rule 1), -1 when the thread must stop.
 */
static int start_one(worker *w, void *ctx, uint64_t op, uint64_t seq)
{
	const ycsb_run_spec *s = w->spec;
	ycsb_inflight *f = w->inflight;
	unsigned kind = ycsb_op_kind(op), tag;
	uint64_t keyno;
	unsigned char *key, *val, *buf;
	size_t len = s->value_size, vlen = 0;
	slot *sl;
	int rc;

	if (kind == YCSB_OP_INSERT) {
		keyno = ycsb_keyseq_next(s->inserts);
		if (keyno == UINT64_MAX) {
			note_rc(w, -EOVERFLOW, kind, 0);
			f->stop = 1;
			return -1;
		}
	} else {
		keyno = op_key(op, s->inserts);
		if (kind != YCSB_OP_READ)
			keyno = own_key(w, keyno);
		if (s->verify && kind != YCSB_OP_READ && wset_find(f, keyno) >= 0)
			return 0;
	}
	tag = f->free_tags[--f->nfree];
	sl = &f->slots[tag];
	key = f->keys + (size_t)tag * s->key_size;
	val = f->vals + (size_t)tag * (s->value_size > 0 ? s->value_size : 1);
	buf = f->bufs + (size_t)tag * f->cap;
	sl->keyno = keyno;
	sl->kind = kind;
	sl->busy = 1;
	ycsb_key_format(key, keyno);
	switch (kind) {
	case YCSB_OP_READ: {
		int wr = s->verify && keyno % s->threads == w->idx ? wset_find(f, keyno) : -1;

		sl->version = wr >= 0 ? f->slots[wr].version : version_of(s, keyno); /* rule 2 */
		len = f->cap;
		break;
	}
	case YCSB_OP_UPDATE:
		sl->version = version_of(s, keyno) + 1;
		if (s->verify)
			ycsb_value_fill(val, s->value_size, keyno, ycsb_splitmix64(&w->gen_state),
					sl->version);
		else
			stamp_value(val, s->value_size, seq);
		break;
	case YCSB_OP_INSERT:
		if (s->verify) /* a new key: version 0 */
			ycsb_value_fill(val, s->value_size, keyno, ycsb_splitmix64(&w->gen_state), 0);
		else
			stamp_value(val, s->value_size, keyno);
		break;
	default: /* rmw: the owner's rmw adds 1 to its own last version */
		sl->version = version_of(s, keyno) + 1;
		break;
	}
	if (s->verify && (kind == YCSB_OP_UPDATE || kind == YCSB_OP_RMW))
		wset_add(f, tag);
	sl->timed = (f->timed++ & (YCSB_SAMPLE_EVERY - 1)) == 0;
	if (sl->timed)
		sl->t0 = ycsb_now_ns();
	rc = s->engine->start(ctx, tag, kind, key, s->key_size, val, buf, len, &vlen);
	if (rc == YCSB_PENDING) {
		f->pending++;
		w->pending++;
		return 1;
	}
	complete(w, tag, rc, vlen);
	return f->stop ? -1 : 1;
}

/* The timed loop with K operations in flight. */
void ycsb_run_inflight(worker *w, void *ctx)
{
	const ycsb_run_spec *s = w->spec;
	ycsb_inflight *f = w->inflight;
	uint64_t limit = s->ops != 0 ? w->nops : UINT64_MAX;
	uint64_t started = 0, pos = 0, next_check = 0, deadline;

	w->t_start = ycsb_now_ns();
	deadline = s->seconds > 0 ? w->t_start + (uint64_t)(s->seconds * 1e9) : UINT64_MAX;
	for (;;) {
		unsigned burst = 0;
		int waits = 0, rc;

		while (!f->stop && f->nfree > 0 && started < limit) {
			if (started >= next_check) {
				if (deadline != UINT64_MAX && ycsb_now_ns() >= deadline) {
					limit = started; /* start nothing more */
					break;
				}
				next_check = started + 256;
			}
			if (pos == w->nops) {
				pos = 0;
				w->wraps++;
			}
			rc = start_one(w, ctx, w->ops[pos], started);
			if (rc == 0) {
				waits = 1;
				break;
			}
			if (rc < 0)
				break;
			started++;
			pos++;
			if (f->pending > 0 && ++burst == POLL_EVERY)
				break;
		}
		if (f->pending == 0) {
			/* a waiting write's predecessor is pending: it is in the write
			 * set from its start until complete() */
			if (waits)
				note_rc(w, -EDEADLK, YCSB_FAIL_POLL, 0);
			if (f->stop || started >= limit || waits)
				break;
			continue;
		}
		rc = s->engine->poll(ctx, waits || f->nfree == 0 || f->stop || started >= limit,
				     on_complete, w);
		if (rc < 0) {
			/* the engine failed: what is in flight is left to thread_fini */
			note_rc(w, rc, YCSB_FAIL_POLL, 0);
			break;
		}
	}
	w->t_end = ycsb_now_ns();
}

/* ---- --verify's read-back with K reads in flight ---- */

typedef struct readback {
	const ycsb_engine *e;
	size_t value_size, cap;
	const _Atomic uint64_t *versions;
	uint64_t nversions;
	uint64_t *keyno;     /* per slot */
	unsigned char *bufs; /* per slot */
	unsigned *free_tags;
	unsigned nfree, pending;
	uint64_t *checked;
	int rc;              /* the first failure */
} readback;

static void readback_done(readback *r, unsigned tag, int rc, size_t vlen)
{
	rc = ycsb_readback_check(r->e, r->keyno[tag], rc, r->bufs + (size_t)tag * r->cap, vlen,
				 r->value_size, r->versions, r->nversions, r->checked);
	if (rc < 0 && r->rc == 0)
		r->rc = rc;
	r->free_tags[r->nfree++] = tag;
}

static void readback_delivered(void *arg, unsigned tag, int rc, size_t vlen)
{
	readback *r = arg;

	r->pending--;
	readback_done(r, tag, rc, vlen);
}

int ycsb_verify_all_inflight(const ycsb_engine *e, void *db, uint64_t keys, size_t key_size,
			     const _Atomic uint64_t *versions, uint64_t nversions,
			     size_t value_size, unsigned k, uint64_t *checked)
{
	readback r = { .e = e, .value_size = value_size, .cap = value_size + READ_SLACK,
		       .versions = versions, .nversions = nversions, .checked = checked };
	unsigned char *keys_mem = calloc(k, key_size); /* zero: the padding */
	void *ctx = NULL;
	uint64_t next = 0;

	r.keyno = calloc(k, sizeof(*r.keyno));
	r.bufs = malloc(k * r.cap);
	r.free_tags = calloc(k, sizeof(*r.free_tags));
	r.rc = keys_mem == NULL || r.keyno == NULL || r.bufs == NULL || r.free_tags == NULL
		       ? -ENOMEM : e->thread_init(db, &ctx);
	for (unsigned i = 0; i < k; i++)
		r.free_tags[i] = i;
	r.nfree = k;
	while (r.rc == 0) {
		while (r.rc == 0 && r.nfree > 0 && next < keys) {
			unsigned tag = r.free_tags[--r.nfree];
			unsigned char *key = keys_mem + (size_t)tag * key_size;
			size_t vlen = 0;
			int rc;

			r.keyno[tag] = next;
			ycsb_key_format(key, next++);
			rc = e->start(ctx, tag, YCSB_OP_READ, key, key_size, NULL,
				      r.bufs + (size_t)tag * r.cap, r.cap, &vlen);
			if (rc == YCSB_PENDING)
				r.pending++;
			else
				readback_done(&r, tag, rc, vlen);
		}
		if (r.pending == 0)
			break; /* every key read, or a failure */
		int rc = e->poll(ctx, 1, readback_delivered, &r);

		if (rc < 0 && r.rc == 0)
			r.rc = rc;
	}
	if (ctx != NULL)
		e->thread_fini(ctx); /* waits for what a failure left in flight */
	free(keys_mem);
	free(r.keyno);
	free(r.bufs);
	free(r.free_tags);
	return r.rc;
}
