/*
 * test_scan_iterate.c - ember_iterate, one behaviour per mode:
 *
 *   tiers       a store with keys in the hot log (memory and disk), in the cold log
 *               (forced and budget-driven compaction), deleted keys whose
 *               tombstones shadow cold records, deleted-then-written keys, empty
 *               and large values: after each phase the walk emits exactly the
 *               reference map, each key once. With "rc", the read cache is on and
 *               cold keys are read before each walk (read-cache entries in the hot
 *               index must not hide or duplicate anything).
 *   stop        fn's non-zero return stops the walk and is returned, after
 *               exactly that many calls
 *   concurrent  (stress) walks, and ember_verify, while writer threads update,
 *               delete and create keys, compaction runs and a thread takes
 *               checkpoints (which give file space back below each log's begin): every key nobody writes
 *               is emitted exactly once with its value; a key being written is
 *               emitted at most once, with a value some writer wrote; verify finds
 *               no error
 *   errors      bad inputs: NULL db, NULL fn; an empty store
 */
#include <ember.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

static void opts_tiny(ember_options *o, int rc)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 512u << 10; /* 8 pages: most of the hot log is on disk */
	o->cold_log_memory = 512u << 10;
	o->hot_disk_budget = 2u << 20;
	o->cold_disk_budget = 16u << 20;
	o->index_buckets = 1u << 11;
	o->cold_index_chunks = 1u << 9;
	o->cold_chunk_bytes = 64;
	o->io_queue_depth = 32;
	o->read_cache_memory = rc ? 512u << 10 : 0;
	o->flags = EMBER_OPEN_TRUNCATE;
}

/* Keys of varied length: "k<id>" padded with '.' up to 4..70 bytes. */
static size_t key_of(uint64_t id, char *buf)
{
	int n = snprintf(buf, 96, "k%llu", (unsigned long long)id);
	size_t len = 4 + tu_mix64(id) % 67;
	if (len < (size_t)n)
		len = (size_t)n;
	memset(buf + n, '.', len - (size_t)n);
	return len;
}

/* A random value: mostly small, sometimes empty, rarely large (up to 120 KiB,
 * several pages, so records cross page and window boundaries). */
static size_t val_make(tu_rng *r, uint8_t *buf)
{
	uint64_t p = tu_rng_below(r, 1000);
	size_t len = p < 50 ? 0 : p < 990 ? tu_rng_range(r, 1, 300) : tu_rng_range(r, 20000, 120000);
	tu_rng_fill(r, buf, len);
	return len;
}

struct check_ctx {
	const tu_map *ref;
	tu_map seen;
	uint64_t calls;
};

static int check_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	struct check_ctx *c = arg;
	c->calls++;
	CHECK(k && kl > 0, "empty key emitted");
	CHECK(!tu_map_get(&c->seen, k, kl), "key %.*s emitted twice", (int)kl, (const char *)k);
	const tu_map_entry *e = tu_map_get(c->ref, k, kl);
	CHECK(e, "key %.*s emitted but not live", (int)kl, (const char *)k);
	CHECK(e->vlen == vl && (vl == 0 || memcmp(tu_map_val(e), v, vl) == 0),
	      "key %.*s: value of %zu bytes differs from the reference (%u bytes)", (int)kl,
	      (const char *)k, vl, e->vlen);
	tu_map_put(&c->seen, k, kl, NULL, 0);
	return 0;
}

static void iterate_check(ember_db *db, const tu_map *ref, const char *phase)
{
	struct check_ctx c = {.ref = ref};
	tu_map_init(&c.seen);
	double t0 = tu_now();
	CHECK_OK(ember_iterate(db, check_fn, &c));
	CHECK(c.seen.count == ref->count, "%s: %zu keys emitted, %zu live", phase, c.seen.count,
	      ref->count);
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	printf("  %s: %zu keys in %.3f s (hot %llu B on disk, %llu B in memory; cold %llu records)\n",
	       phase, c.seen.count, tu_now() - t0, (unsigned long long)st.hot.bytes_disk,
	       (unsigned long long)st.hot.bytes_memory, (unsigned long long)st.cold.records);
	tu_map_free(&c.seen);
}

/* Put a random value; a store whose budgets are full of live data gets a forced
 * compaction pass and the put is retried. */
static void put_ref(ember_db *db, ember_session *s, tu_map *ref, uint64_t id, tu_rng *r, uint8_t *vbuf)
{
	char k[96];
	size_t kl = key_of(id, k);
	size_t vl = val_make(r, vbuf);
	int rc;
	while ((rc = ember_put(s, k, kl, vbuf, vl)) == EMBER_ENOSPC)
		CHECK_OK(ember_compact(db, 1));
	CHECK_OK(rc);
	tu_map_put(ref, k, kl, vbuf, vl);
}

static void del_ref(ember_session *s, tu_map *ref, uint64_t id)
{
	char k[96];
	size_t kl = key_of(id, k);
	CHECK_OK(ember_delete(s, k, kl));
	tu_map_del(ref, k, kl);
}

/* Read some keys (live or not) so that cold hits fill the read cache. */
static void read_some(ember_session *s, uint64_t nkeys, tu_rng *r, uint8_t *vbuf)
{
	for (uint64_t i = 0; i < nkeys / 4; i++) {
		char k[96];
		size_t kl = key_of(tu_rng_below(r, nkeys), k), vl;
		int rc = ember_get(s, k, kl, vbuf, 200000, &vl);
		CHECK(rc == 0 || rc == EMBER_ENOTFOUND, "get: %s", ember_strerror(rc));
	}
}

static void test_tiers(int rc_on)
{
	char dir[256];
	CHECK_OK(tu_tmpdir_make("scan-tiers", dir, sizeof(dir)));
	ember_options o;
	opts_tiny(&o, rc_on);
	ember_db *db = NULL;
	ember_session *s = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	tu_rng *r = tu_rng_global();
	uint8_t *vbuf = malloc(200000);
	CHECK(vbuf, "malloc");
	tu_map ref;
	tu_map_init(&ref);
	uint64_t nkeys = tu_scaled(8000);

	/* 1: every key written once; the oldest part of the hot log is on disk */
	for (uint64_t i = 0; i < nkeys; i++)
		put_ref(db, s, &ref, i, r, vbuf);
	iterate_check(db, &ref, "loaded");

	/* 2: everything on disk moves to the cold log; then overwrite some keys (hot
	 * shadows cold), delete some (tombstones shadow cold), and write back some
	 * deleted ones */
	CHECK_OK(ember_compact(db, 1));
	for (uint64_t i = 0; i < nkeys; i++) {
		uint64_t p = tu_rng_below(r, 100);
		if (p < 25)
			put_ref(db, s, &ref, i, r, vbuf);
		else if (p < 45)
			del_ref(s, &ref, i);
	}
	for (uint64_t i = 0; i < nkeys; i += 7)
		if (!tu_rng_below(r, 3))
			put_ref(db, s, &ref, i, r, vbuf);
	if (rc_on)
		read_some(s, nkeys, r, vbuf);
	iterate_check(db, &ref, "updated");

	/* 3: churn through the budgets (background passes and writers' assists), a
	 * forced pass, and more churn so every tier holds something */
	for (int round = 0; round < 3; round++) {
		for (uint64_t j = 0; j < nkeys; j++) {
			uint64_t id = tu_rng_below(r, nkeys + nkeys / 4);
			if (tu_rng_below(r, 100) < 80)
				put_ref(db, s, &ref, id, r, vbuf);
			else
				del_ref(s, &ref, id);
		}
		if (round == 1)
			CHECK_OK(ember_compact(db, 1));
		if (rc_on)
			read_some(s, nkeys, r, vbuf);
		iterate_check(db, &ref, round == 0 ? "churn 1" : round == 1 ? "churn 2" : "churn 3");
	}
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	CHECK(st.cold.records > 0, "the test never reached the cold tier");
	CHECK(st.hot.bytes_disk > st.hot.bytes_memory, "the hot log never reached the disk");
	CHECK(st.hot.compactions > 0, "no compaction ran");
	if (rc_on)
		CHECK(st.read_cache_hits > 0 || st.cold.reads_disk > 0, "no cold reads");

	/* 4: delete everything: the walk emits nothing */
	size_t pos = 0;
	tu_map all;
	tu_map_init(&all);
	for (const tu_map_entry *e; (e = tu_map_next(&ref, &pos));)
		tu_map_put(&all, tu_map_key(e), e->klen, NULL, 0);
	pos = 0;
	for (const tu_map_entry *e; (e = tu_map_next(&all, &pos));) {
		CHECK_OK(ember_delete(s, tu_map_key(e), e->klen));
		tu_map_del(&ref, tu_map_key(e), e->klen);
	}
	tu_map_free(&all);
	iterate_check(db, &ref, "all deleted");

	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_map_free(&ref);
	free(vbuf);
	tu_tmpdir_remove(dir);
}

static int stop_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	uint64_t *left = arg;
	return --*left == 0 ? 7 : 0;
}

static int count_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	(*(uint64_t *)arg)++;
	return 0;
}

/* Calls back into the store from fn: verify works, a nested walk is refused. */
static int nested_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	ember_db *db = arg;
	uint64_t n = 0;
	CHECK_RC(ember_iterate(db, count_fn, &n), EMBER_ESTATE);
	CHECK(n == 0, "a refused walk called fn");
	ember_verify_report rep;
	CHECK_OK(ember_verify(db, &rep));
	return 5;
}

static void test_stop(void)
{
	char dir[256];
	CHECK_OK(tu_tmpdir_make("scan-stop", dir, sizeof(dir)));
	ember_options o;
	opts_tiny(&o, 0);
	ember_db *db = NULL;
	ember_session *s = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	for (uint64_t i = 0; i < 3000; i++) {
		char k[96];
		size_t kl = key_of(i, k);
		CHECK_OK(ember_put(s, k, kl, k, kl));
	}
	CHECK_OK(ember_compact(db, 1));
	uint64_t total = 0;
	CHECK_OK(ember_iterate(db, count_fn, &total));
	CHECK(total == 3000, "%llu keys", (unsigned long long)total);
	uint64_t stops[] = {1, 2, 255, 256, 257, 2999, 3000};
	for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
		uint64_t left = stops[i];
		CHECK_RC(ember_iterate(db, stop_fn, &left), 7);
		CHECK(left == 0, "stopped late or early");
	}
	CHECK_RC(ember_iterate(db, nested_fn, db), 5);
	/* a walk that stopped early left the store working: writes, compaction, walks */
	CHECK_OK(ember_put(s, "after", 5, "x", 1));
	CHECK_OK(ember_compact(db, 1));
	total = 0;
	CHECK_OK(ember_iterate(db, count_fn, &total));
	CHECK(total == 3001, "%llu keys", (unsigned long long)total);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

static void test_errors(void)
{
	char dir[256];
	CHECK_OK(tu_tmpdir_make("scan-errors", dir, sizeof(dir)));
	ember_options o;
	opts_tiny(&o, 0);
	ember_db *db = NULL;
	uint64_t n = 0;
	ember_verify_report rep;
	CHECK_RC(ember_iterate(NULL, count_fn, &n), EMBER_EINVAL);
	CHECK_RC(ember_verify(NULL, &rep), EMBER_EINVAL);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_RC(ember_iterate(db, NULL, &n), EMBER_EINVAL);
	CHECK_RC(ember_verify(db, NULL), EMBER_EINVAL);
	/* an empty store: nothing to emit, nothing wrong */
	CHECK_OK(ember_iterate(db, count_fn, &n));
	CHECK(n == 0, "an empty store emitted %llu keys", (unsigned long long)n);
	memset(&rep, 0xff, sizeof(rep));
	CHECK_OK(ember_verify(db, &rep));
	CHECK(rep.records == 0 && rep.errors == 0 && rep.chunks == 0 && rep.first_error[0] == 0,
	      "empty store: %llu records, %llu errors", (unsigned long long)rep.records,
	      (unsigned long long)rep.errors);
	/* arg may be NULL: it is only passed through */
	CHECK_OK(ember_iterate(db, count_fn, &n));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

/* ---- concurrent ------------------------------------------------------------------ */

/* Self-describing values of the keys writers change: id, version, length, then
 * bytes derived from them, so any emitted value can be checked on its own. */
static size_t wval_make(uint64_t id, uint64_t ver, uint8_t *buf)
{
	size_t len = 24 + tu_mix64(id * 31 + ver) % 200;
	memcpy(buf, &id, 8);
	memcpy(buf + 8, &ver, 8);
	uint64_t l = len;
	memcpy(buf + 16, &l, 8);
	for (size_t i = 24; i < len; i++)
		buf[i] = (uint8_t)tu_mix64(id ^ (ver << 20) ^ i);
	return len;
}

static int wval_ok(uint64_t id, const uint8_t *v, size_t vl)
{
	uint64_t vid, ver, l;
	if (vl < 24)
		return 0;
	memcpy(&vid, v, 8);
	memcpy(&ver, v + 8, 8);
	memcpy(&l, v + 16, 8);
	if (vid != id || l != vl)
		return 0;
	for (size_t i = 24; i < vl; i++)
		if (v[i] != (uint8_t)tu_mix64(id ^ (ver << 20) ^ i))
			return 0;
	return 1;
}

struct conc {
	ember_db *db;
	uint64_t stable, churn;  /* key ids [0, stable) never change; writers own the rest */
	_Atomic int stop;
	_Atomic uint64_t writes;
	tu_map *ref;             /* the stable keys' values */
};

struct writer_arg {
	struct conc *c;
	int id;
};

static void *writer_main(void *p)
{
	struct writer_arg *wa = p;
	struct conc *c = wa->c;
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(c->db, &s));
	tu_rng r;
	tu_rng_stream(&r, 100 + (uint64_t)wa->id);
	uint8_t buf[256];
	uint64_t ver = 0;
	while (!atomic_load(&c->stop)) {
		/* writer w owns the churn ids congruent to w mod 2 */
		uint64_t id = c->stable + 2 * tu_rng_below(&r, c->churn / 2) + (uint64_t)wa->id;
		char k[96];
		size_t kl = key_of(id, k);
		int rc;
		if (tu_rng_below(&r, 10) < 8) {
			size_t vl = wval_make(id, ++ver, buf);
			rc = ember_put(s, k, kl, buf, vl);
		} else {
			rc = ember_delete(s, k, kl);
		}
		if (rc == EMBER_ENOSPC) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
			continue;
		}
		CHECK_OK(rc);
		atomic_fetch_add(&c->writes, 1);
	}
	CHECK_OK(ember_session_close(s));
	return NULL;
}

static void *checkpointer_main(void *p)
{
	struct conc *c = p;
	uint64_t n = 0;
	while (!atomic_load(&c->stop)) {
		CHECK_OK(ember_checkpoint(c->db, NULL));
		n++;
		struct timespec ts = {0, 20000000};
		nanosleep(&ts, NULL);
	}
	printf("  %llu checkpoints during writes\n", (unsigned long long)n);
	return NULL;
}

static void *verifier_main(void *p)
{
	struct conc *c = p;
	uint64_t runs = 0;
	while (!atomic_load(&c->stop)) {
		ember_verify_report rep;
		int rc = ember_verify(c->db, &rep);
		CHECK(rc == 0, "verify during writes: %s (%llu errors; %s)", ember_strerror(rc),
		      (unsigned long long)rep.errors, rep.first_error);
		CHECK(rep.records > 0, "verify read nothing");
		runs++;
	}
	printf("  %llu verify runs during writes\n", (unsigned long long)runs);
	return NULL;
}

struct conc_check {
	struct conc *c;
	tu_map seen;
	uint64_t stable_seen, churn_seen;
};

static int conc_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	struct conc_check *cc = arg;
	CHECK(!tu_map_get(&cc->seen, k, kl), "key %.*s emitted twice", (int)kl, (const char *)k);
	tu_map_put(&cc->seen, k, kl, NULL, 0);
	char kz[96];
	CHECK(kl < sizeof(kz), "key of %zu bytes", kl);
	memcpy(kz, k, kl);
	kz[kl] = 0; /* the key is not NUL-terminated */
	uint64_t id = strtoull(kz + 1, NULL, 10);
	if (id < cc->c->stable) {
		const tu_map_entry *e = tu_map_get(cc->c->ref, k, kl);
		CHECK(e && e->vlen == vl && memcmp(tu_map_val(e), v, vl) == 0,
		      "stable key %.*s: wrong value", (int)kl, (const char *)k);
		cc->stable_seen++;
	} else {
		CHECK(wval_ok(id, v, vl), "key %.*s: a value no writer wrote", (int)kl, (const char *)k);
		cc->churn_seen++;
	}
	return 0;
}

static void test_concurrent(void)
{
	char dir[256];
	CHECK_OK(tu_tmpdir_make("scan-conc", dir, sizeof(dir)));
	ember_options o;
	opts_tiny(&o, 1);
	o.hot_disk_budget = 4u << 20;
	struct conc c = {.stable = tu_scaled(6000), .churn = tu_scaled(4000) + 2};
	tu_map ref;
	tu_map_init(&ref);
	c.ref = &ref;
	CHECK_OK(ember_open(dir, &o, &c.db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(c.db, &s));
	tu_rng *r = tu_rng_global();
	uint8_t *vbuf = malloc(200000);
	CHECK(vbuf, "malloc");
	for (uint64_t i = 0; i < c.stable; i++)
		put_ref(c.db, s, &ref, i, r, vbuf);
	CHECK_OK(ember_compact(c.db, 1)); /* the stable keys go cold */
	for (uint64_t i = 0; i < c.stable; i += 3)
		put_ref(c.db, s, &ref, i, r, vbuf); /* a third of them hot again */
	CHECK_OK(ember_session_close(s));

	pthread_t w[2], v, ck;
	struct writer_arg wa[2] = {{&c, 0}, {&c, 1}};
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&w[i], NULL, writer_main, &wa[i]) == 0, "pthread_create");
	CHECK(pthread_create(&v, NULL, verifier_main, &c) == 0, "pthread_create");
	CHECK(pthread_create(&ck, NULL, checkpointer_main, &c) == 0, "pthread_create");
	/* tu_scaled(30) walks, or as many as fit in 8 s (at least 3) */
	uint64_t walks = tu_scaled(30);
	double t_end = tu_now() + 8;
	for (uint64_t i = 0; i < walks; i++) {
		if (i >= 3 && tu_now() > t_end) {
			walks = i;
			break;
		}
		struct conc_check cc = {.c = &c};
		tu_map_init(&cc.seen);
		CHECK_OK(ember_iterate(c.db, conc_fn, &cc));
		CHECK(cc.stable_seen == c.stable, "walk %llu: %llu of %llu stable keys",
		      (unsigned long long)i, (unsigned long long)cc.stable_seen,
		      (unsigned long long)c.stable);
		tu_map_free(&cc.seen);
		struct timespec ts = {0, 5000000}; /* let compaction run between walks */
		nanosleep(&ts, NULL);
	}
	atomic_store(&c.stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(w[i], NULL);
	pthread_join(v, NULL);
	pthread_join(ck, NULL);
	ember_stats st;
	CHECK_OK(ember_stats_get(c.db, &st));
	printf("  %llu walks, %llu writes, %llu hot and %llu cold passes\n",
	       (unsigned long long)walks, (unsigned long long)atomic_load(&c.writes),
	       (unsigned long long)st.hot.compactions, (unsigned long long)st.cold.compactions);
	CHECK(st.hot.compactions > 0, "no compaction ran during the walks");
	ember_verify_report rep;
	CHECK_OK(ember_verify(c.db, &rep));
	CHECK_OK(ember_close(c.db));
	tu_map_free(&ref);
	free(vbuf);
	tu_tmpdir_remove(dir);
}

int main(int argc, char **argv)
{
	tu_init("scan_iterate", argc, argv);
	const char *mode = argc > 1 ? argv[1] : "tiers";
	if (!strcmp(mode, "tiers"))
		test_tiers(argc > 2 && !strcmp(argv[2], "rc"));
	else if (!strcmp(mode, "stop"))
		test_stop();
	else if (!strcmp(mode, "concurrent"))
		test_concurrent();
	else if (!strcmp(mode, "errors"))
		test_errors();
	else
		CHECK(0, "unknown mode %s", mode);
	printf("scan_iterate %s: ok\n", mode);
	return 0;
}
