/*
 * async.c - asynchronous operations: gets, puts, deletes and read-modify-writes
 * that complete later, many of one session's disk reads in flight at once
 * (docs/async.md).
 *
 * A start call does the operation's memory part at once (ops.c: blind_write,
 * get_front, rmw_apply). When that needs the disk the operation takes an entry
 * (struct aop) and runs its lookup through lookup.c's resumable form
 * (lookup_begin, lookups_progress) on the session's second pool; poll and wait
 * reap the reads, run what follows them and deliver the completed operations.
 *
 * Design notes
 *  1. Key groups. Every key with operations in flight has one group: a FIFO of its
 *     entries, found through a hash table of heads (hash, then key compare). Only
 *     the head runs; the others wait (AOP_QUEUED). An operation on a key that has
 *     a group joins its tail and is pending; the head's completion makes the next
 *     entry the head and runs it (aop_drive). So the operations of one key take
 *     effect, and are delivered, in the order they were started.
 *  2. A second ring. The session's synchronous reads (compaction's assists from a
 *     write, session_read_sync, lookups_run) use s->pool and wait for their own
 *     completions only; asynchronous lookups use as->pool, so the two never reap
 *     each other's completions.
 *  3. Reaping never runs an operation's next step. A lookup's done callback
 *     (async_lookup_done) copies what it found (a get's value into the caller's
 *     buffer, an rmw's old value into its entry) and queues the entry (ready);
 *     async_progress runs the ready entries after the reap, so nothing writes to
 *     the log or enters the ring while completions are being reaped.
 *  4. A pending rmw whose old value was fetched from disk applies it only while
 *     the key's hot index entry is the one it saw before the read (rmw_apply: the
 *     CAS on that entry); otherwise it reads again. A write of the same key by
 *     this session cannot intervene (note 1); another session's can, and wins the
 *     race as it would against ember_rmw.
 *  5. While operations are in flight, the session's synchronous data calls return
 *     EMBER_EBUSY (store_int.h, sync_check), ember_session_close returns
 *     EMBER_EBUSY, and a record in flight started again returns EMBER_EBUSY.
 *  6. Delivery: an entry is freed and its record's status written before done is
 *     called, and the record is not touched after: done may reuse or free it.
 *     Start calls never deliver; poll, wait and close refuse to run inside done
 *     (s->delivering).
 *
 * Entry states and their transitions:
 *   (none) -> QUEUED      start, behind a group (async_start)
 *   (none) -> WAIT | READING  start, as a new head that needs the disk (aop_run)
 *   QUEUED -> (running)   its predecessor completed (aop_drive, group_advance)
 *   WAIT -> (running)     a slot of the pool freed (async_progress)
 *   READING -> READY      its lookup ended (async_lookup_done)
 *   READY -> (running)    async_progress (aop_run: done, or reads again)
 *   (running) -> DONE     aop_run completed it; deliver() frees it
 */
#include "store/store_int.h"

#include <stddef.h>
#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"

#define AOP_NONE UINT32_MAX
#define AOP_CHUNK 64u
#define AOP_CHUNKS (EMBER_MAX_INFLIGHT / AOP_CHUNK)
#define AOP_KEY_INLINE 48u
#define KEY_BUCKETS (2u * EMBER_MAX_INFLIGHT)
#define OLD_KEEP (64u << 10) /* an rmw's old-value buffer kept across reuse up to this */
#define OP_TAG 0x454d4f50ull /* "EMOP": reserved[0]'s high half while in flight */

_Static_assert((KEY_BUCKETS & (KEY_BUCKETS - 1)) == 0, "key buckets: a power of two");
_Static_assert(EMBER_MAX_INFLIGHT % AOP_CHUNK == 0, "whole chunks of entries");

enum { AOP_FREE, AOP_QUEUED, AOP_WAIT, AOP_BEGIN, AOP_READING, AOP_READY, AOP_DONE };

struct aop {
	ember_op *op;
	uint8_t kind;
	uint8_t state;
	uint32_t idx;
	uint32_t knext;  /* the next entry of its key group (AOP_NONE: last) */
	uint32_t ktail;  /* a group's head: its last entry */
	uint32_t bnext;  /* a group's head: the next head in its bucket */
	uint32_t lnext;  /* the list it is on: free, wait, ready or done */
	uint64_t hash;
	uint8_t *key;    /* kin, or allocated */
	uint32_t klen;
	uint8_t kin[AOP_KEY_INLINE];
	uint8_t *val;    /* a put's copy of its value (NULL when vlen is 0) */
	size_t vlen;
	void *buf;       /* a get's buffer (the caller's) */
	size_t cap;
	ember_rmw_fn fn;
	void *arg;
	int result;
	size_t len;      /* a get's value length */
	struct lookup lk;
	struct rmw_fetch f;
};

struct aop_list {
	uint32_t head, tail;
};

struct async_state {
	struct io_pool pool;
	struct lookup_run run;
	struct aop *chunks[AOP_CHUNKS];
	uint32_t nchunks;
	struct aop_list free, wait, ready, done;
	uint32_t bucket[KEY_BUCKETS]; /* heads of key groups, chained by bnext */
};

static struct aop *aop_at(struct async_state *as, uint32_t i)
{
	return i == AOP_NONE ? NULL : &as->chunks[i / AOP_CHUNK][i % AOP_CHUNK];
}

static void list_push(struct async_state *as, struct aop_list *l, struct aop *a)
{
	a->lnext = AOP_NONE;
	if (l->tail == AOP_NONE)
		l->head = a->idx;
	else
		aop_at(as, l->tail)->lnext = a->idx;
	l->tail = a->idx;
}

static struct aop *list_pop(struct async_state *as, struct aop_list *l)
{
	struct aop *a = aop_at(as, l->head);
	if (a) {
		l->head = a->lnext;
		if (l->head == AOP_NONE)
			l->tail = AOP_NONE;
	}
	return a;
}

static void async_lookup_done(void *ctx, struct lookup *l, int status, struct record *rec,
			      int in_memory);

static int async_state_get(ember_session *s, struct async_state **out)
{
	if (s->as) {
		*out = s->as;
		return 0;
	}
	struct async_state *as = em_zalloc(sizeof(*as));
	if (!as)
		return EMBER_ENOMEM;
	int rc = io_pool_init(&as->pool, s->db->opts.io_queue_depth);
	if (rc < 0) {
		em_free(as, sizeof(*as));
		return rc;
	}
	as->run = (struct lookup_run){s, &as->pool, async_lookup_done, as};
	as->free = as->wait = as->ready = as->done = (struct aop_list){AOP_NONE, AOP_NONE};
	for (uint32_t i = 0; i < KEY_BUCKETS; i++)
		as->bucket[i] = AOP_NONE;
	s->as = as;
	*out = as;
	return 0;
}

void async_release(ember_session *s)
{
	struct async_state *as = s->as;
	if (!as)
		return;
	io_pool_release(&as->pool); /* first: no read in flight writes into an entry */
	for (uint32_t c = 0; c < as->nchunks; c++) {
		for (uint32_t i = 0; i < AOP_CHUNK; i++) {
			struct aop *a = &as->chunks[c][i];
			if (a->key != a->kin)
				em_free(a->key, a->klen);
			em_free(a->val, a->vlen);
			em_free(a->f.old, a->f.old_cap);
		}
		em_free(as->chunks[c], AOP_CHUNK * sizeof(struct aop));
	}
	em_free(as, sizeof(*as));
	s->as = NULL;
	s->async_n = 0;
}

/* A free entry (NULL: out of memory). */
static struct aop *aop_alloc(struct async_state *as)
{
	if (as->free.head == AOP_NONE) {
		if (as->nchunks == AOP_CHUNKS)
			return NULL; /* not reached: s->async_n is checked first */
		struct aop *c = em_zalloc(AOP_CHUNK * sizeof(*c));
		if (!c)
			return NULL;
		uint32_t base = as->nchunks * AOP_CHUNK;
		as->chunks[as->nchunks++] = c;
		for (uint32_t i = 0; i < AOP_CHUNK; i++) {
			c[i].idx = base + i;
			c[i].key = c[i].kin;
			list_push(as, &as->free, &c[i]);
		}
	}
	return list_pop(as, &as->free);
}

static void aop_free(ember_session *s, struct aop *a)
{
	if (a->key != a->kin)
		em_free(a->key, a->klen);
	em_free(a->val, a->vlen);
	a->key = a->kin;
	a->val = NULL;
	a->vlen = 0;
	uint8_t *old = a->f.old;
	size_t old_cap = a->f.old_cap;
	if (old_cap > OLD_KEEP) {
		em_free(old, old_cap);
		old = NULL;
		old_cap = 0;
	}
	a->f = (struct rmw_fetch){.old = old, .old_cap = old_cap};
	a->op = NULL;
	a->state = AOP_FREE;
	list_push(s->as, &s->as->free, a);
	s->async_n--;
}

/* ---- key groups (note 1) ---- */

static uint32_t *bucket_of(struct async_state *as, uint64_t hash)
{
	return &as->bucket[hash & (KEY_BUCKETS - 1)];
}

static struct aop *group_find(struct async_state *as, uint64_t hash, const void *key,
			      uint32_t klen)
{
	for (struct aop *h = aop_at(as, *bucket_of(as, hash)); h; h = aop_at(as, h->bnext))
		if (h->hash == hash && h->klen == klen && memcmp(h->key, key, klen) == 0)
			return h;
	return NULL;
}

/* a joins the group head (a queued entry), or starts a group of its own. */
static void group_join(struct async_state *as, struct aop *head, struct aop *a)
{
	a->knext = AOP_NONE;
	if (head) {
		aop_at(as, head->ktail)->knext = a->idx;
		head->ktail = a->idx;
		a->state = AOP_QUEUED;
		return;
	}
	uint32_t *b = bucket_of(as, a->hash);
	a->ktail = a->idx;
	a->bnext = *b;
	*b = a->idx;
}

/* The head a completed: its successor becomes the head (returned), or the group
 * ends (NULL). */
static struct aop *group_advance(struct async_state *as, struct aop *a)
{
	uint32_t *p = bucket_of(as, a->hash);
	while (*p != a->idx)
		p = &aop_at(as, *p)->bnext;
	struct aop *next = aop_at(as, a->knext);
	if (next) {
		next->ktail = a->ktail;
		next->bnext = a->bnext;
		*p = next->idx;
	} else {
		*p = a->bnext;
	}
	return next;
}

/* ---- running entries ---- */

static int aop_complete(struct aop *a, int rc)
{
	a->result = rc;
	a->state = AOP_DONE;
	return 1;
}

static struct aop *aop_of(struct lookup *l)
{
	return (struct aop *)(void *)((char *)l - offsetof(struct aop, lk));
}

/* A lookup ended, inside lookups_progress or lookup_begin: keep what it found and
 * queue the entry (note 3). */
static void async_lookup_done(void *ctx, struct lookup *l, int status, struct record *rec,
			      int in_memory)
{
	struct async_state *as = ctx;
	struct aop *a = aop_of(l);
	if (a->kind == EMBER_OP_GET)
		a->result = status == 0 ? lookup_copy_value(l, rec, in_memory, a->buf, a->cap, &a->len)
					: status;
	else
		rmw_fetch_done(&a->f, l, status, rec, in_memory);
	int reading = a->state == AOP_READING; /* else inside lookup_begin: aop_run goes on */
	a->state = AOP_READY;
	if (reading)
		list_push(as, &as->ready, a);
}

/*
 * Run the head a as far as it goes: returns 1 when it completed (AOP_DONE, result
 * set), 0 when it waits for a read (AOP_READING) or a slot (AOP_WAIT).
 */
static int aop_run(ember_session *s, struct async_state *as, struct aop *a)
{
	for (;;) {
		int rc;
		switch (a->kind) {
		case EMBER_OP_PUT:
		case EMBER_OP_DELETE:
			rc = blind_write(s, a->key, a->klen, a->val, (uint32_t)a->vlen,
					 a->kind == EMBER_OP_DELETE);
			return aop_complete(a, rc);
		case EMBER_OP_GET:
			if (a->state == AOP_READY)
				return aop_complete(a, a->result);
			rc = get_front(s, a->key, a->klen, a->hash, a->buf, a->cap, &a->len, &a->lk);
			if (rc != GET_NEED_READ)
				return aop_complete(a, rc);
			break;
		default: /* EMBER_OP_RMW */
			if (a->state == AOP_READY && a->f.rc < 0)
				return aop_complete(a, a->f.rc);
			rc = rmw_apply(s, a->key, a->klen, a->hash, a->fn, a->arg, &a->f);
			if (rc != RMW_NEED_READ)
				return aop_complete(a, rc);
			a->lk = (struct lookup){.key = a->key, .klen = a->klen, .phase = LK_HOT,
						.hash = a->hash, .addr = a->f.at};
			break;
		}
		/* the disk (or the cold tier) next */
		if (as->pool.broken)
			return aop_complete(a, EMBER_EIO);
		if (as->pool.io_free_n == 0) {
			a->state = AOP_WAIT;
			list_push(as, &as->wait, a);
			return 0;
		}
		a->state = AOP_BEGIN;
		if (lookup_begin(&as->run, &a->lk)) {
			a->state = AOP_READING;
			return 0;
		}
		/* ended in memory (async_lookup_done set AOP_READY): go on */
	}
}

/* Run a and, each time the head completes, its group's next entry (note 1). */
static void aop_drive(ember_session *s, struct async_state *as, struct aop *a)
{
	while (a && aop_run(s, as, a)) {
		struct aop *next = group_advance(as, a);
		list_push(as, &as->done, a);
		a = next;
	}
}

/* Reap (waiting for one read when wait), then run every entry that can go on.
 * Returns whether anything happened. */
static int async_progress(ember_session *s, struct async_state *as, int wait)
{
	int any = 0;
	for (int first = 1;; first = 0) {
		int worked = 0;
		if (!as->pool.broken && as->pool.ring.inflight) {
			/* a ring error ends every lookup in flight with it (lookup.c) */
			int n = lookups_progress(&as->run, wait && first);
			worked = n != 0;
		}
		struct aop *a;
		while ((a = list_pop(as, &as->ready))) {
			aop_drive(s, as, a);
			worked = 1;
		}
		while ((as->pool.io_free_n || as->pool.broken) && (a = list_pop(as, &as->wait))) {
			aop_drive(s, as, a);
			worked = 1;
		}
		if (!worked)
			return any;
		any = 1;
	}
}

/* Deliver the completed entries (note 6). */
static int deliver(ember_session *s, struct async_state *as)
{
	int n = 0;
	struct aop *a;
	s->delivering = 1;
	while ((a = list_pop(as, &as->done))) {
		ember_op *op = a->op;
		int rc = a->result;
		size_t len = a->len;
		aop_free(s, a);
		op->vlen = len;
		op->reserved[0] = op->reserved[1] = 0;
		op->status = rc;
		n++;
		if (op->done)
			op->done(op);
	}
	s->delivering = 0;
	return n;
}

/* ---- start calls ---- */

static int op_in_flight(const ember_op *op)
{
	return op->status == EMBER_EPENDING && (op->reserved[0] >> 32) == OP_TAG;
}

/* A start's result at once: the record says so. */
static int op_now(ember_op *op, int rc, size_t len)
{
	op->vlen = len;
	op->reserved[0] = op->reserved[1] = 0;
	op->status = rc;
	return rc;
}

struct start {
	int kind;
	const void *key;
	uint32_t klen;
	uint64_t hash;
	const void *val;
	size_t vlen;
	void *buf;
	size_t cap;
	ember_rmw_fn fn;
	void *arg;
};

/* The operation goes pending: take an entry, copy what it needs, queue it behind
 * its key's group or start it as a new head. */
static int async_pending(ember_session *s, struct async_state *as, ember_op *op,
			 const struct start *st, struct aop *head)
{
	if (s->async_n >= EMBER_MAX_INFLIGHT)
		return op_now(op, EMBER_EAGAIN, 0);
	struct aop *a = aop_alloc(as);
	if (!a)
		return op_now(op, EMBER_ENOMEM, 0);
	s->async_n++;
	a->op = op;
	a->kind = (uint8_t)st->kind;
	a->state = AOP_QUEUED;
	a->hash = st->hash;
	a->klen = st->klen;
	a->result = 0;
	a->len = 0;
	a->buf = st->buf;
	a->cap = st->cap;
	a->fn = st->fn;
	a->arg = st->arg;
	a->f.have = 0;
	a->f.rc = 0;
	if (st->klen > AOP_KEY_INLINE)
		a->key = em_alloc(st->klen);
	if (st->vlen)
		a->val = em_alloc(st->vlen);
	if (!a->key || (st->vlen && !a->val)) {
		if (!a->key)
			a->key = a->kin;
		aop_free(s, a);
		return op_now(op, EMBER_ENOMEM, 0);
	}
	memcpy(a->key, st->key, st->klen);
	if (st->vlen) {
		memcpy(a->val, st->val, st->vlen);
		a->vlen = st->vlen;
	}
	group_join(as, head, a);
	if (!head && aop_run(s, as, a)) {
		/* ended without waiting after all (a lookup resolved in memory) */
		int rc = a->result;
		size_t len = a->len;
		(void)group_advance(as, a); /* a new head: nothing queued behind it yet */
		aop_free(s, a);
		return op_now(op, rc, len);
	}
	if (a->state == AOP_READING)
		/* the disk starts now, while the caller goes on; a failure here shows again
		 * at the next poll's submit, which ends the lookups in flight with it */
		(void)em_ring_submit(&as->pool.ring);
	op->vlen = 0;
	op->reserved[0] = (OP_TAG << 32) | a->idx;
	op->reserved[1] = (uint64_t)(uintptr_t)s;
	op->status = EMBER_EPENDING;
	return EMBER_EPENDING;
}

static int async_start(ember_session *s, ember_op *op, struct start *st)
{
	struct async_state *as;
	int rc = async_state_get(s, &as);
	if (rc < 0)
		return op_now(op, rc, 0);
	st->hash = em_hash(st->key, st->klen);
	struct aop *head = group_find(as, st->hash, st->key, st->klen);
	if (head)
		return async_pending(s, as, op, st, head);
	/* nothing of this key in flight: try at once */
	size_t len = 0;
	switch (st->kind) {
	case EMBER_OP_PUT:
	case EMBER_OP_DELETE:
		rc = blind_write(s, st->key, st->klen, st->val, (uint32_t)st->vlen,
				 st->kind == EMBER_OP_DELETE);
		return op_now(op, rc, 0);
	case EMBER_OP_GET: {
		struct lookup lk;
		rc = get_front(s, st->key, st->klen, st->hash, st->buf, st->cap, &len, &lk);
		if (rc != GET_NEED_READ)
			return op_now(op, rc, len);
		break;
	}
	default: { /* EMBER_OP_RMW */
		struct rmw_fetch f = {0};
		rc = rmw_apply(s, st->key, st->klen, st->hash, st->fn, st->arg, &f);
		if (rc != RMW_NEED_READ)
			return op_now(op, rc, 0);
		break;
	}
	}
	return async_pending(s, as, op, st, NULL);
}

/* The checks of every start call; 1: op may not be touched (rc says why). */
static int start_check(ember_session *s, ember_op *op, int kind, const void *key, size_t klen,
		       int write, int *rc)
{
	if (!op) {
		*rc = EMBER_EINVAL;
		return 1;
	}
	if (op_in_flight(op)) {
		*rc = EMBER_EBUSY;
		return 1;
	}
	op->kind = kind;
	*rc = op_check(s, key, klen);
	if (*rc == 0 && write && s->db->readonly)
		*rc = EMBER_EREADONLY;
	return 0;
}

int ember_get_async(ember_session *s, ember_op *op, const void *key, size_t klen, void *buf,
		    size_t cap)
{
	int rc;
	if (start_check(s, op, EMBER_OP_GET, key, klen, 0, &rc))
		return rc;
	if (rc == 0 && !buf && cap)
		rc = EMBER_EINVAL;
	if (rc < 0)
		return op_now(op, rc, 0);
	stat_add(&s->st.user_reads, 1);
	struct start st = {.kind = EMBER_OP_GET, .key = key, .klen = (uint32_t)klen, .buf = buf,
			   .cap = cap};
	return async_start(s, op, &st);
}

int ember_put_async(ember_session *s, ember_op *op, const void *key, size_t klen,
		    const void *val, size_t vlen)
{
	int rc;
	if (start_check(s, op, EMBER_OP_PUT, key, klen, 1, &rc))
		return rc;
	if (rc == 0 && !val && vlen)
		rc = EMBER_EINVAL;
	if (rc == 0)
		rc = size_check(s, klen, vlen);
	if (rc < 0)
		return op_now(op, rc, 0);
	struct start st = {.kind = EMBER_OP_PUT, .key = key, .klen = (uint32_t)klen, .val = val,
			   .vlen = vlen};
	return async_start(s, op, &st);
}

int ember_delete_async(ember_session *s, ember_op *op, const void *key, size_t klen)
{
	int rc;
	if (start_check(s, op, EMBER_OP_DELETE, key, klen, 1, &rc))
		return rc;
	if (rc < 0)
		return op_now(op, rc, 0);
	struct start st = {.kind = EMBER_OP_DELETE, .key = key, .klen = (uint32_t)klen};
	return async_start(s, op, &st);
}

int ember_rmw_async(ember_session *s, ember_op *op, const void *key, size_t klen,
		    ember_rmw_fn fn, void *arg)
{
	int rc;
	if (start_check(s, op, EMBER_OP_RMW, key, klen, 1, &rc))
		return rc;
	if (rc == 0 && !fn)
		rc = EMBER_EINVAL;
	if (rc < 0)
		return op_now(op, rc, 0);
	struct start st = {.kind = EMBER_OP_RMW, .key = key, .klen = (uint32_t)klen, .fn = fn,
			   .arg = arg};
	return async_start(s, op, &st);
}

/* ---- poll, wait ---- */

static int poll_check(ember_session *s)
{
	int rc = session_check(s);
	if (rc == 0 && s->delivering)
		rc = EMBER_ESTATE; /* from a done callback (note 6) */
	return rc;
}

int ember_session_poll(ember_session *s)
{
	int rc = poll_check(s);
	if (rc < 0)
		return rc;
	if (!s->async_n)
		return 0;
	(void)async_progress(s, s->as, 0);
	return deliver(s, s->as);
}

int ember_session_wait(ember_session *s, unsigned flags)
{
	int rc = poll_check(s);
	if (rc < 0)
		return rc;
	if (flags & ~EMBER_WAIT_ALL)
		return EMBER_EINVAL;
	int total = 0;
	for (int block = 0; s->async_n; block = 1) {
		struct async_state *as = s->as;
		int any = async_progress(s, as, block);
		total += deliver(s, as);
		if (total > 0 && !(flags & EMBER_WAIT_ALL))
			break;
		if (!any && s->async_n && as->done.head == AOP_NONE && !as->pool.ring.inflight) {
			/* nothing in flight to wait for, yet entries wait: not reached (each
			 * waits on a read, a slot held by a read, or its group's head) */
			db_report(s->db, "asynchronous operations: %u in flight with no read to wait for",
				  s->async_n);
			return EMBER_EIO;
		}
	}
	return total;
}

int ember_session_inflight(ember_session *s)
{
	int rc = session_check(s);
	return rc < 0 ? rc : (int)s->async_n;
}
