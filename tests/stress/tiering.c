/*
 * tiering.c - the store with budgets so small that compaction runs hundreds of
 * times (hot->cold and cold->cold), in three modes:
 *
 *   diff        random put/get/delete/rmw/get_batch against a reference map, keys
 *               deleted and reinserted, tombstones crossing tiers; every read
 *               compared; the stats must show both compactions many times, cold
 *               reads, and dropped tombstones.
 *   concurrent  4 threads: rmw counters (no lost update, never a decreasing read)
 *               and owner-written versioned values (never older than already seen)
 *               while compaction runs in the background and in writers (assists).
 *   concurrent_cold  the same over 16000 owned keys, each read twice: the cold
 *               tier and most chunks live on disk, so reads go through the cold
 *               chunk cache (and fill it) while compaction moves chunks; the cache
 *               must have served some (the repeats make that near certain).
 *   enospc      live data larger than the budgets: writes end with EMBER_ENOSPC (not
 *               a hang) and what was written stays readable.
 *   bounded     an update-only load of many times the disk budgets: the hot and cold
 *               logs never exceed their budgets (plus one pass of slack), and the
 *               files' allocated blocks stay bounded too (space is released).
 *   recycle     4 threads put and read back versioned values of 1-16 KiB (every
 *               byte checked, never older than already seen) while the hot log, in
 *               32 MiB segment files with a 64 MiB budget and its spares written
 *               ahead (EMBER_OPEN_PREWRITE_LOG), turns over several times: its
 *               released segments' files come back as new segments (segment.c
 *               invariants 5 and 6) under readers that may still read through the
 *               old descriptors (lookup.c note 2); ember_verify runs in a loop
 *               meanwhile and must find nothing wrong (verify.c note 11).
 *
 * Extra arguments: "rc" turns the read cache on; "seg" keeps the logs in segment
 * files of 32 MiB (ember_options.log_segment_bytes): released space goes back by
 * removing segment files (bounded checks that at most 3 remain per log).
 */
#include <dirent.h>
#include <ember.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_util.h"

static int with_read_cache;
static uint32_t rc_admit; /* read_cache_admit: either rule, as the seed picks */
static int with_segments; /* logs as segment files of the smallest size, 32 MiB */
static uint64_t seg_files_max; /* bounded: the most segment files one log had */

static void tiny_options(ember_options *o)
{
	ember_options_default(o);
	o->log_memory = 1 << 20; /* 16 pages of 64 KiB */
	o->page_size = 64 << 10;
	o->index_buckets = 1 << 10;
	o->hot_disk_budget = 2 << 20;
	o->cold_log_memory = 512 << 10;
	o->cold_disk_budget = 8 << 20; /* well above the ~3.5 MiB live set, or cold->cold thrashes */
	o->cold_index_chunks = 1 << 13; /* 1.3 MiB of chunks, a 512 KiB chunk ring: most on disk */
	o->cold_chunk_bytes = 128;
	o->flags = EMBER_OPEN_TRUNCATE;
	if (with_read_cache)
		o->read_cache_memory = 512 << 10; /* 8 pages: evicts constantly */
	o->read_cache_admit = rc_admit;
	if (with_segments)
		o->log_segment_bytes = 32 << 20;
}

/* ---- diff -------------------------------------------------------------------------- */

static int rmw_append(void *arg, const void *old, size_t old_len, void *out, size_t cap,
		      size_t *out_len)
{
	uint8_t b = *(uint8_t *)arg;
	size_t n = old ? old_len + 1 : 1;
	if (n > 4000)
		n = 1; /* keep values bounded: restart */
	*out_len = n;
	if (cap < n)
		return EMBER_ERANGE;
	if (old && n > 1)
		memcpy(out, old, n - 1);
	((uint8_t *)out)[n - 1] = b;
	return 0;
}

static void make_key(uint64_t k, uint8_t *key, size_t *klen)
{
	*klen = 8 + (k % 9); /* 8..16 bytes, derived from k */
	memset(key, (int)(k & 0xff), *klen);
	memcpy(key, &k, 8);
}

static void diff_run(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("tier-diff", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	tiny_options(&o);
	ember_db *db;
	ember_session *s;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	tu_rng *rng = tu_rng_global();
	tu_map ref;
	tu_map_init(&ref);
	/* writes average ~600 bytes so the 2 MiB hot budget turns over every few
	 * hundred ops; most reads go to disk, so the op count stays modest */
	uint64_t ops = tu_scaled(200000), keyspace = 5000;
	static uint8_t val[8192], buf[8192];
	for (uint64_t op = 0; op < ops; op++) {
		uint64_t k = tu_rng_below(rng, keyspace);
		uint8_t key[16];
		size_t klen, vl = 0;
		make_key(k, key, &klen);
		uint64_t dice = tu_rng_below(rng, 100);
		const tu_map_entry *e = tu_map_get(&ref, key, klen);
		if (dice < 40) {
			size_t n = tu_rng_chance(rng, 1, 50) ? tu_rng_range(rng, 1000, sizeof(val))
							    : tu_rng_below(rng, 1200);
			tu_rng_fill(rng, val, n);
			CHECK_OK(ember_put(s, key, klen, val, n));
			tu_map_put(&ref, key, klen, val, n);
		} else if (dice < 50) {
			CHECK_OK(ember_delete(s, key, klen));
			tu_map_del(&ref, key, klen);
		} else if (dice < 60) {
			uint8_t b = (uint8_t)op;
			CHECK_OK(ember_rmw(s, key, klen, rmw_append, &b));
			size_t n = e ? e->vlen + 1 : 1;
			if (n > 4000)
				n = 1;
			if (e && n > 1)
				memcpy(val, tu_map_val(e), n - 1);
			val[n - 1] = b;
			tu_map_put(&ref, key, klen, val, n);
		} else if (dice < 62) {
			/* a batch of 64 keys, some absent */
			const void *ks[64];
			size_t kls[64], caps[64], vls[64];
			void *bufs[64];
			int st[64];
			static uint8_t kb[64][16], vb[64][8192];
			for (int i = 0; i < 64; i++) {
				make_key(tu_rng_below(rng, keyspace + 1000), kb[i], &kls[i]);
				ks[i] = kb[i];
				bufs[i] = vb[i];
				caps[i] = sizeof(vb[i]);
			}
			CHECK_OK(ember_get_batch(s, 64, ks, kls, bufs, caps, vls, st));
			for (int i = 0; i < 64; i++) {
				const tu_map_entry *x = tu_map_get(&ref, kb[i], kls[i]);
				if (!x) {
					CHECK(st[i] == EMBER_ENOTFOUND, "op %llu batch[%d]: absent key, status %d",
					      (unsigned long long)op, i, st[i]);
				} else {
					CHECK(st[i] == 0 && vls[i] == x->vlen &&
						      memcmp(vb[i], tu_map_val(x), x->vlen) == 0,
					      "op %llu batch[%d]: status %d vlen %zu want %u", (unsigned long long)op,
					      i, st[i], vls[i], x->vlen);
				}
			}
		} else {
			int rc = ember_get(s, key, klen, buf, sizeof(buf), &vl);
			if (!e)
				CHECK(rc == EMBER_ENOTFOUND, "op %llu: absent key: rc %d (%s)",
				      (unsigned long long)op, rc, ember_strerror(rc));
			else
				CHECK(rc == 0 && vl == e->vlen && memcmp(buf, tu_map_val(e), vl) == 0,
				      "op %llu: get rc %d (%s) vlen %zu want %u", (unsigned long long)op, rc,
				      ember_strerror(rc), vl, e->vlen);
		}
		if (op % 40000 == 0 && op)
			printf("  %llu ops\n", (unsigned long long)op);
	}
	/* everything, once more, and once more after forcing every log to compact */
	for (int round = 0; round < 2; round++) {
		size_t pos = 0;
		const tu_map_entry *e;
		while ((e = tu_map_next(&ref, &pos))) {
			size_t vl = 0;
			int rc = ember_get(s, tu_map_key(e), e->klen, buf, sizeof(buf), &vl);
			CHECK(rc == 0 && vl == e->vlen && memcmp(buf, tu_map_val(e), vl) == 0,
			      "final round %d: rc %d vlen %zu want %u", round, rc, vl, e->vlen);
		}
		for (uint64_t k = 0; k < keyspace; k++) {
			uint8_t key[16];
			size_t klen, vl;
			make_key(k, key, &klen);
			if (!tu_map_get(&ref, key, klen))
				CHECK(ember_get(s, key, klen, buf, sizeof(buf), &vl) == EMBER_ENOTFOUND,
				      "final round %d: deleted key found", round);
		}
		CHECK_OK(ember_compact(db, 1));
	}
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	printf("hot passes %llu, cold passes %llu, cold reads %llu+%llu, tombstones dropped %llu, "
	       "assists %llu, write amp %.2f\n",
	       (unsigned long long)st.hot.compactions, (unsigned long long)st.cold.compactions,
	       (unsigned long long)st.cold.reads_memory, (unsigned long long)st.cold.reads_disk,
	       (unsigned long long)st.tombstones_dropped, (unsigned long long)st.compaction_assists,
	       st.write_amplification);
	uint64_t want = tu_scale() >= 1 ? 50 : tu_scale() >= 0.5 ? 32 : 3; /* 0.5: CI's release */
	CHECK(st.hot.compactions >= want, "hot->cold ran %llu times", (unsigned long long)st.hot.compactions);
	CHECK(st.cold.compactions >= want / 4, "cold->cold ran %llu times",
	      (unsigned long long)st.cold.compactions);
	CHECK(st.hot.compactions + st.cold.compactions >= 2 * want, "compaction ran %llu times",
	      (unsigned long long)(st.hot.compactions + st.cold.compactions));
	CHECK(st.cold.reads_memory + st.cold.reads_disk > 0, "the cold tier served reads");
	CHECK(st.tombstones_dropped > 0, "tombstones died in cold->cold");
	if (with_read_cache)
		CHECK(st.read_cache_hits > 0, "the read cache served reads");
	/* the default chunk cache (a 32nd of log_memory) is on: repeated cold reads
	 * must have found their chunk there */
	CHECK(st.cold_cache_bytes > 0 && st.cold_cache_hits > 0, "the cold chunk cache saved reads");
	printf("read cache hits %llu, cold chunk cache hits %llu (%llu KiB)\n",
	       (unsigned long long)st.read_cache_hits, (unsigned long long)st.cold_cache_hits,
	       (unsigned long long)(st.cold_cache_bytes >> 10));
	tu_map_free(&ref);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

/* ---- concurrent -------------------------------------------------------------------- */

#define THREADS 4
#define COUNTERS 64
#define OWNED_MAX 16000
#define PAD_MAX 600 /* owned values: the header and up to this much padding */
static uint64_t owned = 2000; /* keys owned by the threads; concurrent_cold: 16000 */

static ember_db *cdb;
static _Atomic long increments[COUNTERS];

static int inc64(void *arg, const void *old, size_t old_len, void *out, size_t cap, size_t *out_len)
{
	(void)arg;
	uint64_t v = 0;
	if (old && old_len == 8)
		memcpy(&v, old, 8);
	*out_len = 8;
	if (cap < 8)
		return EMBER_ERANGE;
	v++;
	memcpy(out, &v, 8);
	return 0;
}

struct owned_val {
	uint64_t owner, key, seq, check;
};

/* Read owned key k and check it: whole, its owner's, and no older than *seen (the
 * newest sequence this thread has read of it), which it then advances. */
static void read_owned(ember_session *s, uint64_t k, uint64_t *seen)
{
	char key[24];
	snprintf(key, sizeof(key), "own%llu", (unsigned long long)k);
	uint8_t buf[sizeof(struct owned_val) + PAD_MAX];
	size_t vl;
	int rc = ember_get(s, key, strlen(key), buf, sizeof(buf), &vl);
	CHECK(rc == 0 || rc == EMBER_ENOTFOUND, "owned get rc %d (%s)", rc, ember_strerror(rc));
	if (rc != 0)
		return;
	struct owned_val ov;
	CHECK(vl >= sizeof(ov), "short value");
	memcpy(&ov, buf, sizeof(ov));
	CHECK(ov.key == k && ov.owner == k % THREADS &&
		      ov.check == ov.owner * 31 + ov.key * 17 + ov.seq,
	      "torn or foreign value for key %llu", (unsigned long long)k);
	CHECK(ov.seq >= *seen, "key %llu went back: seq %llu < %llu", (unsigned long long)k,
	      (unsigned long long)ov.seq, (unsigned long long)*seen);
	*seen = ov.seq;
}

static void *worker(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	tu_rng rng;
	tu_rng_stream(&rng, id);
	ember_session *s;
	CHECK_OK(ember_session_open(cdb, &s));
	uint64_t seen_counter[COUNTERS] = {0};
	static _Thread_local uint64_t seen_seq[OWNED_MAX];
	static _Thread_local uint64_t my_seq[OWNED_MAX];
	uint64_t ops = tu_scaled(60000);
	uint8_t pad[PAD_MAX];
	memset(pad, (int)id, sizeof(pad));
	for (uint64_t op = 0; op < ops; op++) {
		uint64_t d = tu_rng_below(&rng, 100);
		if (d < 25) {
			uint64_t c = tu_rng_below(&rng, COUNTERS);
			char key[16];
			snprintf(key, sizeof(key), "ctr%llu", (unsigned long long)c);
			CHECK_OK(ember_rmw(s, key, strlen(key), inc64, NULL));
			atomic_fetch_add(&increments[c], 1);
		} else if (d < 40) {
			uint64_t c = tu_rng_below(&rng, COUNTERS);
			char key[16];
			snprintf(key, sizeof(key), "ctr%llu", (unsigned long long)c);
			uint64_t v = 0;
			size_t vl;
			int rc = ember_get(s, key, strlen(key), &v, sizeof(v), &vl);
			CHECK(rc == 0 || rc == EMBER_ENOTFOUND, "counter get rc %d", rc);
			if (rc == 0) {
				CHECK(vl == 8 && v >= seen_counter[c], "counter %llu went back: %llu < %llu",
				      (unsigned long long)c, (unsigned long long)v,
				      (unsigned long long)seen_counter[c]);
				seen_counter[c] = v;
			}
		} else if (d < 70) {
			/* my own keys: key k belongs to thread k % THREADS */
			uint64_t k = tu_rng_below(&rng, owned / THREADS) * THREADS + id;
			uint8_t buf[sizeof(struct owned_val) + sizeof(pad)];
			struct owned_val ov = {id, k, ++my_seq[k], 0};
			ov.check = ov.owner * 31 + ov.key * 17 + ov.seq;
			size_t n = sizeof(ov) + tu_rng_below(&rng, sizeof(pad));
			memcpy(buf, &ov, sizeof(ov));
			memcpy(buf + sizeof(ov), pad, n - sizeof(ov));
			char key[24];
			snprintf(key, sizeof(key), "own%llu", (unsigned long long)k);
			CHECK_OK(ember_put(s, key, strlen(key), buf, n));
		} else {
			/* concurrent_cold reads the key twice: random reads over 16000 keys
			 * rarely repeat, and a repeat is what the entry cache serves (read once,
			 * the tsan scale's runs found it 0 to 13 times) */
			uint64_t k = tu_rng_below(&rng, owned);
			read_owned(s, k, &seen_seq[k]);
			if (owned > 2000)
				read_owned(s, k, &seen_seq[k]);
		}
	}
	CHECK_OK(ember_session_close(s));
	return NULL;
}

static void concurrent_run(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("tier-conc", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	tiny_options(&o);
	CHECK_OK(ember_open(dir, &o, &cdb));
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	ember_session *s;
	CHECK_OK(ember_session_open(cdb, &s));
	for (int c = 0; c < COUNTERS; c++) {
		char key[16];
		snprintf(key, sizeof(key), "ctr%d", c);
		uint64_t v = 0;
		size_t vl;
		int rc = ember_get(s, key, strlen(key), &v, 8, &vl);
		long want = atomic_load(&increments[c]);
		CHECK((rc == 0 && (long)v == want) || (rc == EMBER_ENOTFOUND && want == 0),
		      "counter %d: %llu, want %ld (lost update)", c, (unsigned long long)v, want);
	}
	ember_stats st;
	CHECK_OK(ember_stats_get(cdb, &st));
	printf("hot passes %llu, cold passes %llu, assists %llu, cold reads %llu+%llu, "
	       "entry cache hits %llu, read cache hits %llu\n",
	       (unsigned long long)st.hot.compactions, (unsigned long long)st.cold.compactions,
	       (unsigned long long)st.compaction_assists, (unsigned long long)st.cold.reads_memory,
	       (unsigned long long)st.cold.reads_disk, (unsigned long long)st.cold_cache_hits,
	       (unsigned long long)st.read_cache_hits);
	CHECK(st.hot.compactions > 0, "compaction ran during the test");
	if (owned > 2000)
		/* most cold keys live on disk: reads went through the entry cache */
		CHECK(st.cold.reads_disk > 0 && st.cold_cache_hits > 0,
		      "cold disk reads %llu, entry cache hits %llu", (unsigned long long)st.cold.reads_disk,
		      (unsigned long long)st.cold_cache_hits);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(cdb));
	tu_tmpdir_remove(dir);
}

/* ---- recycle ------------------------------------------------------------------------ */

#define RC_KEYS 512
#define RC_VAL_MAX (16u << 10)
static _Atomic uint64_t rc_written; /* bytes put, all threads */
static uint64_t rc_target;

/* Byte i of key k's value of sequence seq (after its owned_val header). */
static uint8_t rc_byte(uint64_t k, uint64_t seq, size_t i)
{
	return (uint8_t)(k * 131 + seq * 29 + i * 7 + (i >> 8));
}

static void *rc_worker(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	tu_rng rng;
	tu_rng_stream(&rng, 100 + id);
	ember_session *s;
	CHECK_OK(ember_session_open(cdb, &s));
	uint64_t *seen = calloc(RC_KEYS, 8), *mine = calloc(RC_KEYS, 8);
	uint8_t *buf = malloc(RC_VAL_MAX);
	CHECK(seen && mine && buf, "memory");
	/* relaxed: a running total, read only to stop */
	while (atomic_load_explicit(&rc_written, memory_order_relaxed) < rc_target) {
		char key[24];
		if (tu_rng_below(&rng, 2) == 0) {
			uint64_t k = tu_rng_below(&rng, RC_KEYS / THREADS) * THREADS + id;
			struct owned_val ov = {id, k, ++mine[k], 0};
			ov.check = ov.owner * 31 + ov.key * 17 + ov.seq;
			size_t n = tu_rng_range(&rng, sizeof(ov) + 1024, RC_VAL_MAX);
			memcpy(buf, &ov, sizeof(ov));
			for (size_t i = sizeof(ov); i < n; i++)
				buf[i] = rc_byte(k, ov.seq, i);
			snprintf(key, sizeof(key), "rc%llu", (unsigned long long)k);
			CHECK_OK(ember_put(s, key, strlen(key), buf, n));
			/* relaxed: a running total (above) */
			atomic_fetch_add_explicit(&rc_written, n, memory_order_relaxed);
		} else {
			uint64_t k = tu_rng_below(&rng, RC_KEYS);
			snprintf(key, sizeof(key), "rc%llu", (unsigned long long)k);
			size_t vl = 0;
			int rc = ember_get(s, key, strlen(key), buf, RC_VAL_MAX, &vl);
			CHECK(rc == 0 || rc == EMBER_ENOTFOUND, "get rc%llu: %d (%s)", (unsigned long long)k,
			      rc, ember_strerror(rc));
			if (rc != 0)
				continue;
			struct owned_val ov;
			CHECK(vl > sizeof(ov), "short value");
			memcpy(&ov, buf, sizeof(ov));
			CHECK(ov.key == k && ov.owner == k % THREADS &&
				      ov.check == ov.owner * 31 + ov.key * 17 + ov.seq,
			      "torn or foreign value for rc%llu", (unsigned long long)k);
			CHECK(ov.seq >= seen[k], "rc%llu went back: seq %llu < %llu", (unsigned long long)k,
			      (unsigned long long)ov.seq, (unsigned long long)seen[k]);
			seen[k] = ov.seq;
			for (size_t i = sizeof(ov); i < vl; i++)
				CHECK(buf[i] == rc_byte(k, ov.seq, i), "rc%llu seq %llu: byte %zu of %zu wrong",
				      (unsigned long long)k, (unsigned long long)ov.seq, i, vl);
		}
	}
	free(seen);
	free(mine);
	free(buf);
	CHECK_OK(ember_session_close(s));
	return NULL;
}

/* Segment files of the hot log in dir: how many, and the highest number. */
static unsigned hot_files(const char *dir, const char *prefix, uint64_t *highest)
{
	DIR *d = opendir(dir);
	CHECK(d != NULL, "opendir");
	unsigned n = 0;
	size_t pl = strlen(prefix);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, pl) != 0 || e->d_name[pl] < '0' || e->d_name[pl] > '9')
			continue;
		n++;
		uint64_t v = strtoull(e->d_name + pl, NULL, 10);
		if (highest && v > *highest)
			*highest = v;
	}
	closedir(d);
	return n;
}

/* ember_verify in a loop while the workers write and compaction releases and
 * recycles segments: every pass must find nothing wrong (verify.c note 11: a window
 * read while its space was released may hold a newer segment's records). */
static _Atomic int rc_done; /* relaxed: a flag alone */
static unsigned rc_verifies;

static void *rc_verifier(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&rc_done, memory_order_relaxed)) {
		ember_verify_report rep;
		int rc = ember_verify(cdb, &rep);
		CHECK(rc == 0 && rep.errors == 0, "verify during recycling: %d, %llu errors, first: %s",
		      rc, (unsigned long long)rep.errors, rep.first_error);
		rc_verifies++;
	}
	return NULL;
}

static void recycle_run(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("tier-recycle", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	tiny_options(&o);
	o.log_segment_bytes = 32 << 20;
	o.hot_disk_budget = 64 << 20; /* 2 spares */
	o.cold_disk_budget = 32 << 20; /* the live set is about 4 MiB */
	o.flags |= EMBER_OPEN_PREWRITE_LOG;
	/* the log must turn over whatever the scale: 4 budgets' worth */
	rc_target = 4 * o.hot_disk_budget;
	CHECK_OK(ember_open(dir, &o, &cdb));
	CHECK(hot_files(dir, "hot.log.spare.", NULL) == 2, "spares written ahead");
	pthread_t th[THREADS], vt;
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, rc_worker, (void *)(uintptr_t)i);
	pthread_create(&vt, NULL, rc_verifier, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	atomic_store_explicit(&rc_done, 1, memory_order_relaxed);
	pthread_join(vt, NULL);
	ember_stats st;
	CHECK_OK(ember_stats_get(cdb, &st));
	uint64_t highest = 0;
	unsigned segs = hot_files(dir, "hot.log.", &highest);
	unsigned spares = hot_files(dir, "hot.log.spare.", NULL);
	printf("wrote %llu MiB; hot passes %llu; hot segments %u (highest %llu), spares %u; "
	       "%u verify passes meanwhile\n",
	       (unsigned long long)(atomic_load(&rc_written) >> 20), (unsigned long long)st.hot.compactions,
	       segs, (unsigned long long)highest, spares, rc_verifies);
	CHECK(st.hot.compactions > 0 && highest >= 6, "the hot log did not turn over");
	/* the files reused: never more than the budget's segments, spares and the
	 * two partial ends */
	CHECK(segs + spares <= 2 + 2 + 2, "%u segment files and %u spares", segs, spares);
	CHECK_OK(ember_close(cdb));
	/* every key's newest value, after a reopen */
	o.flags = 0;
	CHECK_OK(ember_open(dir, &o, &cdb));
	CHECK(hot_files(dir, "hot.log.spare.", NULL) == 0, "spares after an open without the flag");
	ember_session *s;
	CHECK_OK(ember_session_open(cdb, &s));
	uint8_t *buf = malloc(RC_VAL_MAX);
	unsigned found = 0;
	for (uint64_t k = 0; k < RC_KEYS; k++) {
		char key[24];
		snprintf(key, sizeof(key), "rc%llu", (unsigned long long)k);
		size_t vl = 0;
		int rc = ember_get(s, key, strlen(key), buf, RC_VAL_MAX, &vl);
		CHECK(rc == 0 || rc == EMBER_ENOTFOUND, "get after reopen: %d", rc);
		if (rc != 0)
			continue;
		struct owned_val ov;
		memcpy(&ov, buf, sizeof(ov));
		CHECK(ov.key == k && ov.check == ov.owner * 31 + ov.key * 17 + ov.seq, "rc%llu after reopen",
		      (unsigned long long)k);
		for (size_t i = sizeof(ov); i < vl; i++)
			CHECK(buf[i] == rc_byte(k, ov.seq, i), "rc%llu after reopen: byte %zu",
			      (unsigned long long)k, i);
		found++;
	}
	CHECK(found > RC_KEYS / 2, "only %u keys found", found);
	free(buf);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(cdb));
	tu_tmpdir_remove(dir);
}

/* ---- bounded ------------------------------------------------------------------------ */

/* Bytes allocated to a log: its file, or its segment files "<name>.<n>". */
static uint64_t allocated(const char *dir, const char *name)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	struct stat st;
	uint64_t bytes = stat(p, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0, files = 0;
	for (unsigned n = 0; n < 4096; n++) {
		snprintf(p, sizeof(p), "%s/%s.%06u", dir, name, n);
		if (stat(p, &st) == 0) {
			bytes += (uint64_t)st.st_blocks * 512;
			files++;
		}
	}
	if (files > seg_files_max)
		seg_files_max = files;
	return bytes;
}

static void bounded_run(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("tier-bound", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	tiny_options(&o);
	ember_db *db;
	ember_session *s;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	tu_rng *rng = tu_rng_global();
	uint64_t keys = 5000, written = 0, target = (uint64_t)(tu_scale() * 60.0 * (double)o.cold_disk_budget);
	uint8_t val[300];
	uint64_t slack = 1 << 20; /* the page-granular part a pass cannot reach */
	uint64_t max_hot = 0, max_cold = 0;
	for (uint64_t op = 0; written < target; op++) {
		uint64_t k = tu_rng_below(rng, keys);
		tu_rng_fill(rng, val, sizeof(val));
		CHECK_OK(ember_put(s, &k, sizeof(k), val, 100 + k % 200));
		written += 150 + k % 200;
		if (op % 1000 == 0) {
			ember_stats st;
			CHECK_OK(ember_stats_get(db, &st));
			if (st.hot.bytes_disk > max_hot)
				max_hot = st.hot.bytes_disk;
			if (st.cold.bytes_disk > max_cold)
				max_cold = st.cold.bytes_disk;
			CHECK(st.hot.bytes_disk <= o.hot_disk_budget + slack, "hot log %llu over budget %llu",
			      (unsigned long long)st.hot.bytes_disk, (unsigned long long)o.hot_disk_budget);
			CHECK(st.cold.bytes_disk <= o.cold_disk_budget + slack, "cold log %llu over budget %llu",
			      (unsigned long long)st.cold.bytes_disk, (unsigned long long)o.cold_disk_budget);
		}
	}
	uint64_t hot_alloc = allocated(dir, "hot.log"), cold_alloc = allocated(dir, "cold.log");
	printf("wrote %llu MiB; max hot %llu KiB (budget %llu), max cold %llu KiB (budget %llu); "
	       "allocated hot %llu KiB, cold %llu KiB\n",
	       (unsigned long long)(written >> 20), (unsigned long long)(max_hot >> 10),
	       (unsigned long long)(o.hot_disk_budget >> 10), (unsigned long long)(max_cold >> 10),
	       (unsigned long long)(o.cold_disk_budget >> 10), (unsigned long long)(hot_alloc >> 10),
	       (unsigned long long)(cold_alloc >> 10));
	/* released space: the files hold about their budgets, not what was written */
	CHECK(hot_alloc <= 2 * (o.hot_disk_budget + slack), "hot.log holds %llu bytes",
	      (unsigned long long)hot_alloc);
	CHECK(cold_alloc <= 2 * (o.cold_disk_budget + slack), "cold.log holds %llu bytes",
	      (unsigned long long)cold_alloc);
	if (with_segments) {
		/* released segments are removed: a log keeps the segments its budget spans */
		printf("segment files: at most %llu per log\n", (unsigned long long)seg_files_max);
		CHECK(seg_files_max >= 1 && seg_files_max <= 3, "%llu segment files in one log",
		      (unsigned long long)seg_files_max);
		CHECK(target < 4 * o.log_segment_bytes || written > 4 * o.log_segment_bytes,
		      "the logs passed several segments");
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

/* ---- enospc: live data larger than the budgets -------------------------------------- */

static void enospc_run(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("tier-nospc", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	tiny_options(&o);
	ember_db *db;
	ember_session *s;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	static uint8_t v[1000], g[1000];
	uint64_t i, limit = 4 * (o.hot_disk_budget + o.cold_disk_budget) / sizeof(v);
	int rc = 0;
	double t0 = tu_now();
	for (i = 0; i < limit; i++) {
		memset(v, (int)i, sizeof(v));
		rc = ember_put(s, &i, sizeof(i), v, sizeof(v));
		if (rc)
			break;
	}
	printf("ENOSPC after %llu distinct keys (%.1f s)\n", (unsigned long long)i, tu_now() - t0);
	CHECK(rc == EMBER_ENOSPC, "a full store answers EMBER_ENOSPC, got %d (%s)", rc, ember_strerror(rc));
	/* what was written before stays readable, and reads still work */
	for (uint64_t k = 0; k < i; k += 7) {
		size_t vl;
		CHECK_OK(ember_get(s, &k, sizeof(k), g, sizeof(g), &vl));
		CHECK(vl == sizeof(g) && g[0] == (uint8_t)k && g[999] == (uint8_t)k, "key %llu", (unsigned long long)k);
	}
	/* deletes still work at the limit, and once compaction has dropped what they
	 * deleted, the store takes writes again */
	uint64_t n = i;
	for (uint64_t k = 0; k < n; k++)
		if (k % 4)
			CHECK_OK(ember_delete(s, &k, sizeof(k)));
	for (int round = 0; round < 4; round++) {
		CHECK_OK(ember_compact(db, 1));
		ember_stats st;
		CHECK_OK(ember_stats_get(db, &st));
		printf("  after deletes, pass %d: hot %llu KiB, cold %llu KiB (budgets %llu, %llu)\n", round,
		       (unsigned long long)(st.hot.bytes_disk >> 10), (unsigned long long)(st.cold.bytes_disk >> 10),
		       (unsigned long long)(o.hot_disk_budget >> 10), (unsigned long long)(o.cold_disk_budget >> 10));
	}
	for (uint64_t k = n; k < n + n / 4; k++) {
		memset(v, (int)k, sizeof(v));
		rc = ember_put(s, &k, sizeof(k), v, sizeof(v));
		CHECK(rc == 0, "put %llu after deletes: %d (%s)", (unsigned long long)k, rc, ember_strerror(rc));
	}
	for (uint64_t k = 0; k < n + n / 4; k++) {
		size_t vl;
		rc = ember_get(s, &k, sizeof(k), g, sizeof(g), &vl);
		if (k < n && k % 4) {
			CHECK(rc == EMBER_ENOTFOUND, "deleted key %llu: rc %d", (unsigned long long)k, rc);
		} else {
			CHECK(rc == 0 && vl == sizeof(g) && g[0] == (uint8_t)k, "key %llu: rc %d",
			      (unsigned long long)k, rc);
		}
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

int main(int argc, char **argv)
{
	tu_init("tiering", argc, argv);
	const char *mode = argc > 1 ? argv[1] : "diff";
	for (int i = 2; i < argc; i++) {
		with_read_cache |= !strcmp(argv[i], "rc");
		with_segments |= !strcmp(argv[i], "seg");
	}
	rc_admit = (uint32_t)(tu_seed() >> 3) & 1; /* the seed replays it */
	if (with_read_cache)
		printf("read cache admits a record on its %s disk read\n", rc_admit ? "second" : "first");
	if (!strcmp(mode, "diff"))
		diff_run();
	else if (!strcmp(mode, "concurrent"))
		concurrent_run();
	else if (!strcmp(mode, "concurrent_cold")) {
		owned = OWNED_MAX; /* ~5 MiB of values: the cold tier lives mostly on disk */
		concurrent_run();
	}
	else if (!strcmp(mode, "bounded"))
		bounded_run();
	else if (!strcmp(mode, "enospc"))
		enospc_run();
	else if (!strcmp(mode, "recycle"))
		recycle_run();
	else
		CHECK(0, "unknown mode %s", mode);
	printf("tiering %s%s%s: OK\n", mode,
	       !with_read_cache ? "" : rc_admit ? " (read cache, second read)" : " (read cache)",
	       with_segments ? " (segment files)" : "");
	return 0;
}
