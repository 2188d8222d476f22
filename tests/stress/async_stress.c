/*
 * async_stress.c - the asynchronous operations (docs/async.md) against reference
 * maps, with many operations of each session in flight while compaction moves data
 * between the tiers.
 *
 * THREADS threads, each with its own session, own the keys k with k % THREADS ==
 * their id and keep up to INFLIGHT operations in flight: random gets, puts,
 * deletes and rmws (append a byte), several often on the same key. Since one
 * session's operations on a key take effect in issue order (invariant 1), the
 * result each must deliver is known when it is started: the thread updates its
 * reference map at the start and keeps the expected result beside the record,
 * then compares when the operation completes, at once or in its done callback.
 * At the end every owned key is read back synchronously.
 *
 *   diff      a 1 MiB hot log with a 4 MiB disk budget: most reads are on the hot
 *             log's disk or in the cold tier, hot->cold compaction runs often.
 *   tiering   budgets so small that hot->cold and cold->cold compaction both run
 *             many times, the read cache on, the cold index mostly on disk.
 *
 * Each run must have seen enough operations go pending and both kinds of
 * completion, and compaction must have run (floors below).
 */
#include <ember.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define THREADS 3
#define INFLIGHT 48
#define VMAX 6000
#define RMW_MAX 3000

static int tiering;
static ember_db *db;
static uint64_t keyspace; /* keys of all threads */
static _Atomic uint64_t total_ops, total_pending, total_delivered;

static void options(ember_options *o)
{
	ember_options_default(o);
	o->page_size = 64 << 10;
	o->log_memory = 1 << 20;
	o->index_buckets = 1 << 10;
	o->io_queue_depth = 32;
	o->flags = EMBER_OPEN_TRUNCATE;
	if (!tiering) {
		o->hot_disk_budget = 4 << 20;
		o->cold_log_memory = 1 << 20;
		return;
	}
	o->hot_disk_budget = 2 << 20;
	o->cold_log_memory = 512 << 10;
	o->cold_disk_budget = 8 << 20; /* twice the ~3.6 MiB live set */
	o->cold_index_chunks = 1 << 13;
	o->cold_chunk_bytes = 128;
	o->read_cache_memory = 512 << 10;
}

static void make_key(uint64_t k, uint8_t *key, size_t *klen)
{
	*klen = 8 + (k % 9); /* 8..16 bytes */
	memset(key, (int)(k & 0xff), *klen);
	memcpy(key, &k, 8);
}

static int rmw_append(void *arg, const void *old, size_t old_len, void *out, size_t cap,
		      size_t *out_len)
{
	uint8_t b = *(const uint8_t *)arg;
	size_t n = old ? old_len + 1 : 1;
	if (n > RMW_MAX)
		n = 1;
	*out_len = n;
	if (cap < n)
		return EMBER_ERANGE;
	if (n > 1)
		memcpy(out, old, n - 1);
	((uint8_t *)out)[n - 1] = b;
	return 0;
}

struct slot {
	ember_op op;
	struct worker *w;
	int busy;
	uint64_t k;
	uint8_t arg;         /* the rmw's byte */
	int want;            /* the expected status */
	size_t wlen;         /* ... and value (gets) */
	uint8_t wval[VMAX];
	uint8_t buf[VMAX];
};

struct worker {
	uint64_t id;
	ember_session *s;
	tu_rng rng;
	tu_map ref;
	struct slot slots[INFLIGHT];
	uint64_t ops, pending, delivered, immediate;
	uint64_t by_kind_pending[5];
};

static void check_slot(struct slot *sl, int pending)
{
	ember_op *op = &sl->op;
	CHECK(op->status == sl->want, "thread %llu key %llu kind %d (%s): status %d (%s), want %d",
	      (unsigned long long)sl->w->id, (unsigned long long)sl->k, op->kind,
	      pending ? "pending" : "at once", op->status, ember_strerror(op->status), sl->want);
	if (op->kind == EMBER_OP_GET && sl->want == 0)
		CHECK(op->vlen == sl->wlen && memcmp(sl->buf, sl->wval, sl->wlen) == 0,
		      "thread %llu key %llu: get (%s) read %zu bytes, want %zu", (unsigned long long)sl->w->id,
		      (unsigned long long)sl->k, pending ? "pending" : "at once", op->vlen, sl->wlen);
}

static void slot_done(ember_op *op)
{
	struct slot *sl = op->user;
	check_slot(sl, 1);
	sl->busy = 0;
	sl->w->delivered++;
}

/* Start one random operation on slot sl, the expected result taken from ref. */
static void start_one(struct worker *w, struct slot *sl)
{
	uint64_t per = keyspace / THREADS;
	/* a small hot set makes operations queue behind each other on a key */
	uint64_t k = (tu_rng_chance(&w->rng, 1, 5) ? tu_rng_below(&w->rng, 16)
						     : tu_rng_below(&w->rng, per)) * THREADS + w->id;
	uint8_t key[16];
	size_t klen;
	make_key(k, key, &klen);
	const tu_map_entry *e = tu_map_get(&w->ref, key, klen);
	uint64_t d = tu_rng_below(&w->rng, 100);
	sl->op = (ember_op){.done = slot_done, .user = sl};
	sl->k = k;
	sl->want = 0;
	int rc;
	if (d < 40) {
		sl->want = e ? 0 : EMBER_ENOTFOUND;
		sl->wlen = e ? e->vlen : 0;
		if (e)
			memcpy(sl->wval, tu_map_val(e), e->vlen);
		rc = ember_get_async(w->s, &sl->op, key, klen, sl->buf, sizeof(sl->buf));
	} else if (d < 68) {
		size_t n = tu_rng_chance(&w->rng, 1, 40) ? tu_rng_range(&w->rng, 1000, VMAX)
							 : tu_rng_below(&w->rng, 1200);
		uint8_t val[VMAX];
		tu_rng_fill(&w->rng, val, n);
		tu_map_put(&w->ref, key, klen, val, n);
		rc = ember_put_async(w->s, &sl->op, key, klen, val, n);
		memset(val, 0xee, n); /* the library copied it */
	} else if (d < 76) {
		tu_map_del(&w->ref, key, klen);
		rc = ember_delete_async(w->s, &sl->op, key, klen);
	} else {
		sl->arg = (uint8_t)tu_rng_next(&w->rng);
		size_t n = e ? e->vlen + 1 : 1;
		if (n > RMW_MAX)
			n = 1;
		uint8_t val[RMW_MAX];
		if (n > 1)
			memcpy(val, tu_map_val(e), n - 1);
		val[n - 1] = sl->arg;
		tu_map_put(&w->ref, key, klen, val, n);
		rc = ember_rmw_async(w->s, &sl->op, key, klen, rmw_append, &sl->arg);
	}
	w->ops++;
	if (rc == EMBER_EPENDING) {
		CHECK(sl->op.status == EMBER_EPENDING, "status of a pending start");
		sl->busy = 1;
		w->pending++;
		w->by_kind_pending[sl->op.kind]++;
		return;
	}
	CHECK(rc == sl->op.status, "a start's result is its status");
	check_slot(sl, 0);
	w->immediate++;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	tu_rng_stream(&w->rng, w->id + 1);
	tu_map_init(&w->ref);
	CHECK_OK(ember_session_open(db, &w->s));
	/* at least 30000: enough turnover for cold->cold passes at sanitizer scales */
	uint64_t ops = tu_scaled(tiering ? 60000 : 100000);
	if (ops < 30000)
		ops = 30000;
	while (w->ops < ops) {
		struct slot *free_slot = NULL;
		for (int i = 0; i < INFLIGHT && !free_slot; i++)
			if (!w->slots[(w->ops + (uint64_t)i) % INFLIGHT].busy)
				free_slot = &w->slots[(w->ops + (uint64_t)i) % INFLIGHT];
		if (free_slot) {
			start_one(w, free_slot);
			if (tu_rng_chance(&w->rng, 1, 8))
				CHECK(ember_session_poll(w->s) >= 0, "poll");
			continue;
		}
		int n = ember_session_wait(w->s, tu_rng_chance(&w->rng, 1, 50) ? EMBER_WAIT_ALL : 0);
		CHECK(n > 0, "wait with every slot in flight delivered %d", n);
	}
	CHECK(ember_session_wait(w->s, EMBER_WAIT_ALL) >= 0, "final wait");
	CHECK_RC(ember_session_inflight(w->s), 0);
	for (int i = 0; i < INFLIGHT; i++)
		CHECK(!w->slots[i].busy, "slot %d never delivered", i);
	CHECK(w->delivered == w->pending, "delivered %llu of %llu pending",
	      (unsigned long long)w->delivered, (unsigned long long)w->pending);
	/* every owned key, synchronously */
	static _Thread_local uint8_t buf[VMAX];
	for (uint64_t k = w->id; k < keyspace; k += THREADS) {
		uint8_t key[16];
		size_t klen, vl = 0;
		make_key(k, key, &klen);
		const tu_map_entry *e = tu_map_get(&w->ref, key, klen);
		int rc = ember_get(w->s, key, klen, buf, sizeof(buf), &vl);
		if (!e)
			CHECK(rc == EMBER_ENOTFOUND, "final: key %llu absent, rc %d", (unsigned long long)k, rc);
		else
			CHECK(rc == 0 && vl == e->vlen && memcmp(buf, tu_map_val(e), vl) == 0,
			      "final: key %llu rc %d vlen %zu want %u", (unsigned long long)k, rc, vl, e->vlen);
	}
	CHECK_OK(ember_session_close(w->s));
	atomic_fetch_add(&total_ops, w->ops);
	atomic_fetch_add(&total_pending, w->pending);
	atomic_fetch_add(&total_delivered, w->delivered);
	printf("thread %llu: %llu ops, %llu pending (get %llu put %llu delete %llu rmw %llu), %llu at once\n",
	       (unsigned long long)w->id, (unsigned long long)w->ops, (unsigned long long)w->pending,
	       (unsigned long long)w->by_kind_pending[EMBER_OP_GET],
	       (unsigned long long)w->by_kind_pending[EMBER_OP_PUT],
	       (unsigned long long)w->by_kind_pending[EMBER_OP_DELETE],
	       (unsigned long long)w->by_kind_pending[EMBER_OP_RMW], (unsigned long long)w->immediate);
	CHECK(w->by_kind_pending[EMBER_OP_GET] > 0 && w->by_kind_pending[EMBER_OP_RMW] > 0 &&
		      w->by_kind_pending[EMBER_OP_PUT] > 0 && w->by_kind_pending[EMBER_OP_DELETE] > 0,
	      "thread %llu: every kind went pending", (unsigned long long)w->id);
	tu_map_free(&w->ref);
	return NULL;
}

int main(int argc, char **argv)
{
	tu_init("async_stress", argc, argv);
	tiering = argc > 1 && strcmp(argv[1], "tiering") == 0;
	keyspace = 6000;
	char dir[512];
	CHECK(tu_tmpdir_make("async-stress", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	options(&o);
	CHECK_OK(ember_open(dir, &o, &db));
	double t0 = tu_now();
	static struct worker w[THREADS];
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i].id = (uint64_t)i;
		for (int j = 0; j < INFLIGHT; j++)
			w[i].slots[j].w = &w[i];
		CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0, "thread");
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	uint64_t ops = atomic_load(&total_ops), pend = atomic_load(&total_pending);
	printf("%s: %llu ops in %.1f s, %llu pending; hot passes %llu, cold passes %llu, cold reads "
	       "%llu+%llu, hot disk reads %llu, read cache hits %llu\n",
	       tiering ? "tiering" : "diff", (unsigned long long)ops, tu_now() - t0,
	       (unsigned long long)pend, (unsigned long long)st.hot.compactions,
	       (unsigned long long)st.cold.compactions, (unsigned long long)st.cold.reads_memory,
	       (unsigned long long)st.cold.reads_disk, (unsigned long long)st.hot.reads_disk,
	       (unsigned long long)st.read_cache_hits);
	CHECK(pend >= ops / 10, "operations that went pending: %llu of %llu", (unsigned long long)pend,
	      (unsigned long long)ops);
	CHECK(atomic_load(&total_delivered) == pend, "every pending operation delivered");
	CHECK(st.hot.compactions >= 2, "hot->cold compaction ran %llu times",
	      (unsigned long long)st.hot.compactions);
	CHECK(st.cold.reads_disk > 0, "the cold tier's disk served reads");
	if (tiering) {
		CHECK(st.cold.compactions >= 1, "cold->cold compaction ran %llu times",
		      (unsigned long long)st.cold.compactions);
		CHECK(st.read_cache_hits > 0, "the read cache served reads");
	}
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("async_stress %s: ok\n", tiering ? "tiering" : "diff");
	return 0;
}
