/*
 * test_async.c - the asynchronous operations of include/ember.h (docs/async.md):
 *
 *   errors    every bad input: NULL and closed sessions, NULL records, a record
 *             started again while in flight, synchronous calls, close, poll and
 *             wait while operations are in flight or from a done callback, bad
 *             keys and buffers, a read-only store, EMBER_MAX_INFLIGHT.
 *   basic     immediate and pending gets, puts, deletes and rmws of values in
 *             memory, on the hot log's disk and in the cold tier; EMBER_ERANGE of
 *             a pending get; many reads in flight at once.
 *   order     invariants 1-4: per key, issue order (a get after a pending write
 *             sees it; a put started while an rmw of the key is pending is not
 *             overwritten by it; a delete after a pending rmw), callbacks in issue
 *             order per key, and the values after a reopen.
 *
 * Values are pushed out of memory by a 1 MiB hot log (and into the cold tier by
 * ember_compact), so that the operations must go pending; each mode checks that
 * enough did.
 */
#include <ember.h>

#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define VAL 1500

static char dir[512];

static void small_options(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->log_memory = 1 << 20; /* 16 pages of 64 KiB */
	o->page_size = 64 << 10;
	o->index_buckets = 1 << 12;
	o->hot_disk_budget = 64 << 20;
	o->cold_log_memory = 512 << 10;
	o->io_queue_depth = 32;
	o->flags = flags;
}

static size_t value_of(uint64_t k, uint64_t ver, uint8_t *buf)
{
	size_t n = 16 + (tu_mix64(k * 7 + ver) % VAL);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(tu_mix64(k * 1000003 + ver * 31 + i / 8) >> (8 * (i % 8)));
	memcpy(buf, &k, 8);
	memcpy(buf + 8, &ver, 8);
	return n;
}

static void key_of(uint64_t k, char *key, size_t *klen)
{
	*klen = (size_t)snprintf(key, 32, "key-%08llu", (unsigned long long)k);
}

/* Fill keys [0, n) with version 0, so that the early ones leave memory. */
static void fill(ember_session *s, uint64_t n)
{
	uint8_t v[VAL + 16];
	for (uint64_t k = 0; k < n; k++) {
		char key[32];
		size_t kl;
		key_of(k, key, &kl);
		size_t vl = value_of(k, 0, v);
		CHECK_OK(ember_put(s, key, kl, v, vl));
	}
}

/* rmw: append the byte *arg; a missing value starts empty */
static int rmw_append(void *arg, const void *old, size_t old_len, void *out, size_t cap,
		      size_t *out_len)
{
	size_t n = (old ? old_len : 0) + 1;
	*out_len = n;
	if (cap < n)
		return EMBER_ERANGE;
	if (old)
		memcpy(out, old, n - 1);
	((uint8_t *)out)[n - 1] = *(const uint8_t *)arg;
	return 0;
}

static int rmw_fail(void *arg, const void *old, size_t old_len, void *out, size_t cap,
		    size_t *out_len)
{
	(void)arg, (void)old, (void)old_len, (void)out, (void)cap, (void)out_len;
	return -12345;
}

/* ---- errors ---- */

struct cb_ctx {
	ember_session *s;
	int poll_rc, wait_rc, close_rc, started;
	char buf[VAL + 16];
};

static void cb_misuse(ember_op *op)
{
	struct cb_ctx *c = op->user;
	CHECK(op->status != EMBER_EPENDING, "status set before done");
	c->poll_rc = ember_session_poll(c->s);
	c->wait_rc = ember_session_wait(c->s, 0);
	c->close_rc = ember_session_close(c->s);
	/* starting from a callback is allowed, and the record may be reused at once
	 * (once: the reused record calls back here again) */
	if (c->started++ == 0) {
		int rc = ember_get_async(c->s, op, "key-00000000", 12, c->buf, sizeof(c->buf));
		CHECK_RC(rc, EMBER_EPENDING);
	}
}

static void errors_mode(void)
{
	ember_options o;
	small_options(&o, EMBER_OPEN_TRUNCATE);
	ember_db *db;
	ember_session *s, *closed;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_session_open(db, &closed));
	CHECK_OK(ember_session_close(closed));
	char buf[VAL + 16];
	uint8_t want[VAL + 16];
	ember_op op = {0};

	CHECK(strcmp(ember_strerror(EMBER_EPENDING), "unknown error code") != 0, "EPENDING explained");
	/* NULL session, closed session */
	CHECK_RC(ember_get_async(NULL, &op, "a", 1, buf, sizeof(buf)), EMBER_EINVAL);
	CHECK(op.status == EMBER_EINVAL && op.kind == EMBER_OP_GET, "status of a refused start");
	CHECK_RC(ember_put_async(closed, &op, "a", 1, "v", 1), EMBER_ESTATE);
	CHECK(op.status == EMBER_ESTATE, "status on a closed session");
	CHECK_RC(ember_delete_async(closed, &op, "a", 1), EMBER_ESTATE);
	CHECK_RC(ember_rmw_async(closed, &op, "a", 1, rmw_append, buf), EMBER_ESTATE);
	CHECK_RC(ember_session_poll(NULL), EMBER_EINVAL);
	CHECK_RC(ember_session_wait(NULL, 0), EMBER_EINVAL);
	CHECK_RC(ember_session_inflight(NULL), EMBER_EINVAL);
	CHECK_RC(ember_session_poll(closed), EMBER_ESTATE);
	CHECK_RC(ember_session_wait(closed, EMBER_WAIT_ALL), EMBER_ESTATE);
	CHECK_RC(ember_session_inflight(closed), EMBER_ESTATE);
	/* NULL records */
	CHECK_RC(ember_get_async(s, NULL, "a", 1, buf, sizeof(buf)), EMBER_EINVAL);
	CHECK_RC(ember_put_async(s, NULL, "a", 1, "v", 1), EMBER_EINVAL);
	CHECK_RC(ember_delete_async(s, NULL, "a", 1), EMBER_EINVAL);
	CHECK_RC(ember_rmw_async(s, NULL, "a", 1, rmw_append, buf), EMBER_EINVAL);
	/* bad keys, buffers, callbacks, flags */
	CHECK_RC(ember_get_async(s, &op, NULL, 1, buf, sizeof(buf)), EMBER_EINVAL);
	CHECK_RC(ember_get_async(s, &op, "a", 0, buf, sizeof(buf)), EMBER_EINVAL);
	CHECK_RC(ember_get_async(s, &op, "a", EMBER_MAX_KEY_LEN + 1, buf, sizeof(buf)), EMBER_ETOOBIG);
	CHECK_RC(ember_get_async(s, &op, "a", 1, NULL, 5), EMBER_EINVAL);
	CHECK_RC(ember_put_async(s, &op, "a", 1, NULL, 5), EMBER_EINVAL);
	CHECK_RC(ember_put_async(s, &op, "a", 1, buf, EMBER_MAX_VALUE_LEN + 1), EMBER_ETOOBIG);
	CHECK_RC(ember_rmw_async(s, &op, "a", 1, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_session_wait(s, 0x80), EMBER_EINVAL);
	/* nothing in flight: poll and wait return at once */
	CHECK_RC(ember_session_poll(s), 0);
	CHECK_RC(ember_session_wait(s, 0), 0);
	CHECK_RC(ember_session_wait(s, EMBER_WAIT_ALL), 0);
	/* an absent key with nothing anywhere: at once */
	CHECK_RC(ember_get_async(s, &op, "nothing", 7, buf, sizeof(buf)), EMBER_ENOTFOUND);
	CHECK(op.status == EMBER_ENOTFOUND, "status of an immediate get");

	/* a pending operation: fill so that key 0 is on disk */
	fill(s, 3000);
	char key[32];
	size_t kl;
	key_of(0, key, &kl);
	int rc = ember_get_async(s, &op, key, kl, buf, sizeof(buf));
	CHECK_RC(rc, EMBER_EPENDING);
	CHECK(op.status == EMBER_EPENDING, "status while pending");
	CHECK_RC(ember_session_inflight(s), 1);
	/* the record in flight, started again: refused, untouched */
	CHECK_RC(ember_get_async(s, &op, key, kl, buf, sizeof(buf)), EMBER_EBUSY);
	CHECK_RC(ember_put_async(s, &op, key, kl, "x", 1), EMBER_EBUSY);
	CHECK_RC(ember_delete_async(s, &op, key, kl), EMBER_EBUSY);
	CHECK_RC(ember_rmw_async(s, &op, key, kl, rmw_append, buf), EMBER_EBUSY);
	CHECK(op.status == EMBER_EPENDING && op.kind == EMBER_OP_GET, "record untouched");
	/* synchronous calls and close while in flight */
	size_t vl;
	CHECK_RC(ember_get(s, key, kl, buf, sizeof(buf), &vl), EMBER_EBUSY);
	CHECK_RC(ember_put(s, "b", 1, "v", 1), EMBER_EBUSY);
	CHECK_RC(ember_delete(s, "b", 1), EMBER_EBUSY);
	CHECK_RC(ember_rmw(s, "b", 1, rmw_append, buf), EMBER_EBUSY);
	const void *ks[1] = {key};
	size_t kls[1] = {kl}, caps[1] = {sizeof(buf)}, vls[1];
	void *bufs[1] = {buf};
	const void *vals[1] = {"v"};
	size_t vlens[1] = {1};
	int st[1];
	CHECK_RC(ember_get_batch(s, 1, ks, kls, bufs, caps, vls, st), EMBER_EBUSY);
	CHECK_RC(ember_put_batch(s, 1, ks, kls, vals, vlens, st), EMBER_EBUSY);
	CHECK_RC(ember_session_close(s), EMBER_EBUSY);
	CHECK_RC(ember_close(db), EMBER_EBUSY);
	/* the operation still completes */
	CHECK_RC(ember_session_wait(s, EMBER_WAIT_ALL), 1);
	CHECK(op.status == 0 && op.kind == EMBER_OP_GET, "completed: %d", op.status);
	size_t wl = value_of(0, 0, want);
	CHECK(op.vlen == wl && memcmp(buf, want, wl) == 0, "value after a pending get");
	CHECK_RC(ember_session_inflight(s), 0);
	CHECK_OK(ember_get(s, key, kl, buf, sizeof(buf), &vl)); /* allowed again */
	/* an rmw callback's error, pending and at once */
	key_of(1, key, &kl);
	CHECK_RC(ember_rmw_async(s, &op, key, kl, rmw_fail, NULL), EMBER_EPENDING);
	CHECK_RC(ember_session_wait(s, 0), 1);
	CHECK_RC(op.status, -12345);
	CHECK_RC(ember_rmw_async(s, &op, "mem", 3, rmw_fail, NULL), -12345);

	/* poll, wait and close from a done callback: EMBER_ESTATE; a start there works */
	struct cb_ctx c = {.s = s};
	key_of(2, key, &kl);
	op = (ember_op){.done = cb_misuse, .user = &c};
	CHECK_RC(ember_get_async(s, &op, key, kl, c.buf, sizeof(c.buf)), EMBER_EPENDING);
	CHECK_RC(ember_session_wait(s, EMBER_WAIT_ALL), 2);
	CHECK(c.started == 2, "the callback ran for both");
	CHECK(op.status == 0 && op.vlen == value_of(0, 0, want), "the get started from done");
	CHECK_RC(c.poll_rc, EMBER_ESTATE);
	CHECK_RC(c.wait_rc, EMBER_ESTATE);
	CHECK_RC(c.close_rc, EMBER_ESTATE);
	CHECK_RC(ember_session_inflight(s), 0);

	/* EMBER_MAX_INFLIGHT: one more pending start returns EMBER_EAGAIN */
	ember_op *ops = calloc(EMBER_MAX_INFLIGHT + 1, sizeof(*ops));
	CHECK(ops, "calloc");
	char qk[32];
	size_t qkl;
	key_of(3, qk, &qkl);
	/* the same on-disk key over and over: each queues behind the first */
	for (uint32_t i = 0; i < EMBER_MAX_INFLIGHT; i++)
		CHECK_RC(ember_get_async(s, &ops[i], qk, qkl, NULL, 0), EMBER_EPENDING);
	CHECK_RC(ember_session_inflight(s), (int)EMBER_MAX_INFLIGHT);
	CHECK_RC(ember_get_async(s, &ops[EMBER_MAX_INFLIGHT], qk, qkl, NULL, 0), EMBER_EAGAIN);
	CHECK_RC(ops[EMBER_MAX_INFLIGHT].status, EMBER_EAGAIN);
	/* an operation that completes at once is not limited */
	CHECK_OK(ember_put_async(s, &ops[EMBER_MAX_INFLIGHT], "other", 5, "v", 1));
	CHECK_RC(ember_session_wait(s, EMBER_WAIT_ALL), (int)EMBER_MAX_INFLIGHT);
	for (uint32_t i = 0; i < EMBER_MAX_INFLIGHT; i++)
		CHECK(ops[i].status == EMBER_ERANGE && ops[i].vlen == value_of(3, 0, want),
		      "queued get %u: %d", i, ops[i].status);
	free(ops);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));

	/* a read-only store: writes refused at the start */
	small_options(&o, EMBER_OPEN_READONLY);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	CHECK_RC(ember_put_async(s, &op, "a", 1, "v", 1), EMBER_EREADONLY);
	CHECK_RC(ember_delete_async(s, &op, "a", 1), EMBER_EREADONLY);
	CHECK_RC(ember_rmw_async(s, &op, "a", 1, rmw_append, buf), EMBER_EREADONLY);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
}

/* ---- basic ---- */

struct get_op {
	ember_op op;
	uint64_t k;
	uint8_t buf[VAL + 16];
	int delivered;
	int pending;
};

static void get_done(ember_op *op)
{
	struct get_op *g = op->user;
	g->delivered++;
}

/* A new store and a session, keys 0 .. n - 1 written. */
static void open_filled(uint64_t n, ember_db **db, ember_session **s)
{
	ember_options o;
	small_options(&o, EMBER_OPEN_TRUNCATE);
	CHECK_OK(ember_open(dir, &o, db));
	CHECK_OK(ember_session_open(*db, s));
	fill(*s, n);
}

static void basic_mode(void)
{
	ember_db *db;
	ember_session *s;
	uint64_t n = 4000; /* ~3 MiB: the first two thirds leave the 1 MiB log's memory */
	open_filled(n, &db, &s);
	uint8_t want[VAL + 16];
	/* every key, 200 at a time in flight */
	const uint64_t K = 200;
	struct get_op *g = calloc(K, sizeof(*g));
	CHECK(g, "calloc");
	uint64_t pend = 0, now = 0, peak = 0;
	for (uint64_t base = 0; base < n; base += K) {
		for (uint64_t i = 0; i < K && base + i < n; i++) {
			char key[32];
			size_t kl;
			g[i].k = base + i;
			g[i].delivered = 0;
			g[i].op = (ember_op){.done = get_done, .user = &g[i]};
			key_of(g[i].k, key, &kl);
			int rc = ember_get_async(s, &g[i].op, key, kl, g[i].buf, sizeof(g[i].buf));
			CHECK(rc == 0 || rc == EMBER_EPENDING, "get %llu: %d", (unsigned long long)g[i].k, rc);
			g[i].pending = rc == EMBER_EPENDING;
			pend += rc == EMBER_EPENDING;
			now += rc == 0;
		}
		int infl = ember_session_inflight(s);
		if ((uint64_t)infl > peak)
			peak = (uint64_t)infl;
		CHECK(ember_session_wait(s, EMBER_WAIT_ALL) >= 0, "wait");
		for (uint64_t i = 0; i < K && base + i < n; i++) {
			size_t wl = value_of(g[i].k, 0, want);
			CHECK(g[i].op.status == 0 && g[i].op.vlen == wl && memcmp(g[i].buf, want, wl) == 0,
			      "key %llu: status %d vlen %zu want %zu", (unsigned long long)g[i].k,
			      g[i].op.status, g[i].op.vlen, wl);
			CHECK(g[i].delivered == g[i].pending, "key %llu: delivered %d times, pending %d",
			      (unsigned long long)g[i].k, g[i].delivered, g[i].pending);
		}
	}
	printf("basic: %llu pending, %llu at once, peak in flight %llu\n", (unsigned long long)pend,
	       (unsigned long long)now, (unsigned long long)peak);
	CHECK(pend >= n / 3, "gets that went pending: %llu", (unsigned long long)pend);
	CHECK(now >= n / 10, "gets from memory: %llu", (unsigned long long)now);
	CHECK(peak >= K / 2, "operations in flight together: %llu", (unsigned long long)peak);

	/* ERANGE of a pending get: the length needed */
	char key[32];
	size_t kl;
	key_of(5, key, &kl);
	ember_op op = {0};
	uint8_t small[4];
	CHECK_RC(ember_get_async(s, &op, key, kl, small, sizeof(small)), EMBER_EPENDING);
	CHECK_RC(ember_session_wait(s, 0), 1);
	CHECK(op.status == EMBER_ERANGE && op.vlen == value_of(5, 0, want), "ERANGE: %d", op.status);

	/* the cold tier: compact everything, then pending rmw, delete, put and gets */
	CHECK_OK(ember_compact(db, 1));
	uint64_t rmw_pend = 0;
	for (uint64_t k = 0; k < 300; k++) {
		key_of(k, key, &kl);
		uint8_t b = (uint8_t)k;
		int rc;
		if (k % 3 == 0)
			rc = ember_rmw_async(s, &op, key, kl, rmw_append, &b);
		else if (k % 3 == 1)
			rc = ember_delete_async(s, &op, key, kl);
		else
			rc = ember_put_async(s, &op, key, kl, &b, 1);
		CHECK(rc == 0 || rc == EMBER_EPENDING, "write %llu: %d", (unsigned long long)k, rc);
		rmw_pend += rc == EMBER_EPENDING;
		CHECK(k % 3 != 1 || rc == 0, "a delete of a key with nothing in flight is at once");
		CHECK(ember_session_wait(s, EMBER_WAIT_ALL) >= 0, "wait");
		CHECK_OK(op.status);
	}
	CHECK(rmw_pend >= 50, "rmws that went pending: %llu", (unsigned long long)rmw_pend);
	for (uint64_t k = 0; k < 300; k++) {
		key_of(k, key, &kl);
		size_t vl = 0, wl = value_of(k, 0, want);
		uint8_t buf[VAL + 16];
		int rc = ember_get(s, key, kl, buf, sizeof(buf), &vl);
		if (k % 3 == 0) {
			want[wl] = (uint8_t)k;
			CHECK(rc == 0 && vl == wl + 1 && memcmp(buf, want, vl) == 0, "rmw'd key %llu",
			      (unsigned long long)k);
		} else if (k % 3 == 1) {
			CHECK_RC(rc, EMBER_ENOTFOUND);
		} else {
			CHECK(rc == 0 && vl == 1 && buf[0] == (uint8_t)k, "put key %llu", (unsigned long long)k);
		}
	}
	free(g);
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	CHECK(st.cold.reads_disk + st.cold.reads_memory > 0, "the cold tier served the rmws");
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
}

/* ---- order ---- */

#define SEQ_MAX 64
struct seq_log {
	int n;
	int seen[SEQ_MAX];
};
struct ord_op {
	ember_op op;
	int seq;
	struct seq_log *log;
	uint8_t buf[VAL + 16];
};

static void ord_done(ember_op *op)
{
	struct ord_op *o = op->user;
	CHECK(o->log->n < SEQ_MAX, "log room");
	o->log->seen[o->log->n++] = o->seq;
}

static void ord_init(struct ord_op *o, int seq, struct seq_log *log)
{
	memset(o, 0, sizeof(*o));
	o->op.done = ord_done;
	o->op.user = o;
	o->seq = seq;
	o->log = log;
}

/* Key k through one sequence of operations, the first of which must go pending:
 * get, put v1, get, rmw +a, get, put v2 (while nothing else), rmw +b, put v3, get,
 * delete, get, rmw +c, get. The expected result of each is known at issue. */
static void order_key(ember_session *s, uint64_t k, uint64_t *pending)
{
	char key[32];
	size_t kl;
	key_of(k, key, &kl);
	struct ord_op o[16];
	struct seq_log log = {0};
	uint8_t v0[VAL + 16], v1[VAL + 16], v3[VAL + 16], exp[VAL + 16];
	size_t l0 = value_of(k, 0, v0), l1 = value_of(k, 1, v1), l3 = value_of(k, 3, v3);
	uint8_t ba = 'a', bb = 'b', bc = 'c';
	int i = 0, rc, immediate[16] = {0};
#define START(call)                                                                           \
	do {                                                                                  \
		ord_init(&o[i], i, &log);                                                     \
		rc = (call);                                                                  \
		CHECK(rc == 0 || rc == EMBER_EPENDING || rc == EMBER_ENOTFOUND,               \
		      "key %llu op %d: %d", (unsigned long long)k, i, rc);                    \
		immediate[i] = rc != EMBER_EPENDING;                                          \
		*pending += rc == EMBER_EPENDING;                                             \
		i++;                                                                          \
	} while (0)
	START(ember_get_async(s, &o[i].op, key, kl, o[i].buf, sizeof(o[i].buf)));        /* 0: v0 */
	CHECK(!immediate[0], "key %llu: the first get must go pending (on disk)", (unsigned long long)k);
	START(ember_put_async(s, &o[i].op, key, kl, v1, l1));                             /* 1 */
	CHECK(!immediate[1], "a put behind a pending get is queued");
	START(ember_get_async(s, &o[i].op, key, kl, o[i].buf, sizeof(o[i].buf)));        /* 2: v1 */
	START(ember_rmw_async(s, &o[i].op, key, kl, rmw_append, &ba));                    /* 3 */
	START(ember_get_async(s, &o[i].op, key, kl, o[i].buf, sizeof(o[i].buf)));        /* 4: v1a */
	START(ember_rmw_async(s, &o[i].op, key, kl, rmw_append, &bb));                    /* 5 */
	START(ember_put_async(s, &o[i].op, key, kl, v3, l3));                             /* 6 */
	START(ember_get_async(s, &o[i].op, key, kl, o[i].buf, sizeof(o[i].buf)));        /* 7: v3 */
	START(ember_delete_async(s, &o[i].op, key, kl));                                  /* 8 */
	START(ember_get_async(s, &o[i].op, key, kl, o[i].buf, sizeof(o[i].buf)));        /* 9: absent */
	START(ember_rmw_async(s, &o[i].op, key, kl, rmw_append, &bc));                    /* 10 */
	START(ember_get_async(s, &o[i].op, key, kl, o[i].buf, sizeof(o[i].buf)));        /* 11: "c" */
#undef START
	int n = i;
	for (int j = 1; j < n; j++)
		CHECK(!immediate[j], "key %llu op %d: queued behind the pending ones", (unsigned long long)k, j);
	CHECK(ember_session_wait(s, EMBER_WAIT_ALL) == n, "all delivered");
	CHECK(log.n == n, "delivered %d of %d", log.n, n);
	for (int j = 0; j < n; j++) {
		CHECK(log.seen[j] == j, "key %llu: delivery %d was op %d (issue order)", (unsigned long long)k, j,
		      log.seen[j]);
		CHECK(o[j].op.status == 0 || (j == 9 && o[j].op.status == EMBER_ENOTFOUND),
		      "key %llu op %d status %d", (unsigned long long)k, j, o[j].op.status);
	}
	CHECK(o[0].op.vlen == l0 && memcmp(o[0].buf, v0, l0) == 0, "op 0 read the old value");
	CHECK(o[2].op.vlen == l1 && memcmp(o[2].buf, v1, l1) == 0, "op 2 read the put before it");
	memcpy(exp, v1, l1);
	exp[l1] = 'a';
	CHECK(o[4].op.vlen == l1 + 1 && memcmp(o[4].buf, exp, l1 + 1) == 0, "op 4 read the rmw before it");
	CHECK(o[7].op.vlen == l3 && memcmp(o[7].buf, v3, l3) == 0,
	      "op 7: the put after a pending rmw was not overwritten by it");
	CHECK_RC(o[9].op.status, EMBER_ENOTFOUND);
	CHECK(o[11].op.vlen == 1 && o[11].buf[0] == 'c', "op 11: an rmw of a deleted key");
}

static void order_mode(void)
{
	ember_db *db;
	ember_session *s;
	open_filled(4000, &db, &s);
	uint64_t pending = 0;
	/* hot log on disk: keys 0..199 */
	for (uint64_t k = 0; k < 200; k++)
		order_key(s, k, &pending);
	/* the cold tier: keys 1000..1199 after a full compaction */
	CHECK_OK(ember_compact(db, 1));
	for (uint64_t k = 1000; k < 1200; k++)
		order_key(s, k, &pending);
	/* many keys interleaved: a pending rmw per key, then a put, then a get, with
	 * other keys' operations in between */
	enum { M = 100 };
	static struct ord_op r[M], p[M], g[M];
	static struct seq_log logs[M];
	uint8_t b = 'z';
	uint8_t v[VAL + 16];
	for (int j = 0; j < M; j++) {
		char key[32];
		size_t kl;
		key_of(2000 + (uint64_t)j, key, &kl);
		ord_init(&r[j], 0, &logs[j]);
		ord_init(&p[j], 1, &logs[j]);
		ord_init(&g[j], 2, &logs[j]);
		CHECK_RC(ember_rmw_async(s, &r[j].op, key, kl, rmw_append, &b), EMBER_EPENDING);
		size_t vl = value_of(2000 + (uint64_t)j, 7, v);
		CHECK_RC(ember_put_async(s, &p[j].op, key, kl, v, vl), EMBER_EPENDING);
		CHECK_RC(ember_get_async(s, &g[j].op, key, kl, g[j].buf, sizeof(g[j].buf)), EMBER_EPENDING);
		pending += 3;
		/* earlier keys' operations progress meanwhile */
		if (j % 10 == 0)
			CHECK(ember_session_poll(s) >= 0, "poll");
	}
	CHECK(ember_session_wait(s, EMBER_WAIT_ALL) >= 0, "wait");
	for (int j = 0; j < M; j++) {
		size_t vl = value_of(2000 + (uint64_t)j, 7, v);
		CHECK(logs[j].n == 3 && logs[j].seen[0] == 0 && logs[j].seen[1] == 1 && logs[j].seen[2] == 2,
		      "key %d: delivery order", j);
		CHECK(g[j].op.status == 0 && g[j].op.vlen == vl && memcmp(g[j].buf, v, vl) == 0,
		      "key %d: the get after the put after a pending rmw", j);
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	/* what the operations left survives a reopen */
	ember_options o;
	small_options(&o, 0);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	for (int j = 0; j < M; j++) {
		char key[32];
		size_t kl, vl = 0, wl = value_of(2000 + (uint64_t)j, 7, v);
		uint8_t buf[VAL + 16];
		key_of(2000 + (uint64_t)j, key, &kl);
		CHECK_OK(ember_get(s, key, kl, buf, sizeof(buf), &vl));
		CHECK(vl == wl && memcmp(buf, v, wl) == 0, "key %d after reopen", j);
	}
	for (uint64_t k = 0; k < 200; k++) {
		char key[32];
		size_t kl, vl = 0;
		uint8_t buf[8];
		key_of(k, key, &kl);
		CHECK_OK(ember_get(s, key, kl, buf, sizeof(buf), &vl));
		CHECK(vl == 1 && buf[0] == 'c', "key %llu after reopen", (unsigned long long)k);
	}
	printf("order: %llu operations went pending\n", (unsigned long long)pending);
	CHECK(pending >= 400 * 12 + 3 * M, "pending operations: %llu", (unsigned long long)pending);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
}

int main(int argc, char **argv)
{
	tu_init("async", argc, argv);
	const char *mode = argc > 1 ? argv[1] : "errors";
	CHECK(tu_tmpdir_make("async", dir, sizeof(dir)) == 0, "tmpdir");
	if (strcmp(mode, "errors") == 0)
		errors_mode();
	else if (strcmp(mode, "basic") == 0)
		basic_mode();
	else if (strcmp(mode, "order") == 0)
		order_mode();
	else
		CHECK(0, "unknown mode %s", mode);
	tu_tmpdir_remove(dir);
	printf("async %s: ok\n", mode);
	return 0;
}
