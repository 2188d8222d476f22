/*
 * test_rc_admit.c - which disk reads the read cache copies
 * (ember_options.read_cache_admit; read_cache.c, note 5).
 *
 *  1. On a reopened store (nothing of its logs in memory), while the cache has
 *     room (it has never evicted) a key's first get reads the disk and its second
 *     is a read-cache hit, whatever the rule. Once it is full (other keys read
 *     once each have pushed its head on), the same holds with
 *     EMBER_READ_CACHE_ADMIT_FIRST, while with EMBER_READ_CACHE_ADMIT_SECOND the
 *     second get reads the disk again and the third is the hit. Every get returns
 *     the key's value (as written, then after an overwrite, which drops the cached
 *     copy: the next gets answer the new value from the hot log's memory; after a
 *     reopen the rules again).
 *  2. The admission filter's memory: ember_stats.read_cache_bytes is the cache's
 *     memory plus rc_filter_bytes (a power of two, at most a 64th), and it counts
 *     in memory_budget: the smallest budget a new store opens with grows by
 *     exactly the filter's bytes from ADMIT_FIRST to ADMIT_SECOND.
 *  3. Other values of read_cache_admit are EMBER_EINVAL.
 */
#include <ember.h>
#include <string.h>

#include "store/store_int.h" /* rc_filter_bytes */
#include "test_util.h"

#define KEYS 4000u
#define TESTED 1000u /* keys below are the ones checked; the others fill the cache */
#define VAL 200u
#define RC_MEM (512u << 10) /* 8 pages */
#define PAGE (64u << 10)

static void opts_make(ember_options *o, uint32_t admit)
{
	ember_options_default(o);
	o->log_memory = 1u << 20;
	o->page_size = PAGE;
	o->index_buckets = 1u << 10;
	o->read_cache_memory = RC_MEM;
	o->read_cache_admit = admit;
}

static void value_of(uint64_t k, uint64_t gen, uint8_t *v)
{
	for (unsigned i = 0; i < VAL; i++)
		v[i] = (uint8_t)(k * 31 + gen * 7 + i);
}

static void put_all(ember_db *db, uint64_t gen)
{
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t v[VAL];
	for (uint64_t k = 0; k < KEYS; k++) {
		value_of(k, gen, v);
		CHECK_OK(ember_put(s, &k, sizeof(k), v, sizeof(v)));
	}
	CHECK_OK(ember_session_close(s));
}

/* Where one get of k was answered: 'd' the disk, 'c' the read cache, 'm' the hot
 * log's memory. The value must be generation gen's. */
static char get_one(ember_db *db, ember_session *s, uint64_t k, uint64_t gen)
{
	ember_stats a, b;
	CHECK_OK(ember_stats_get(db, &a));
	uint8_t v[VAL], want[VAL];
	size_t vl = 0;
	CHECK_OK(ember_get(s, &k, sizeof(k), v, sizeof(v), &vl));
	value_of(k, gen, want);
	CHECK(vl == VAL && memcmp(v, want, VAL) == 0, "key %llu: wrong value",
	      (unsigned long long)k);
	CHECK_OK(ember_stats_get(db, &b));
	uint64_t disk = (b.hot.reads_disk - a.hot.reads_disk) + (b.cold.reads_disk - a.cold.reads_disk);
	uint64_t cache = b.read_cache_hits - a.read_cache_hits;
	uint64_t mem = (b.hot.reads_memory - a.hot.reads_memory) +
		       (b.cold.reads_memory - a.cold.reads_memory);
	CHECK(disk + cache + mem == 1, "key %llu: %llu disk, %llu cache, %llu memory reads",
	      (unsigned long long)k, (unsigned long long)disk, (unsigned long long)cache,
	      (unsigned long long)mem);
	return disk ? 'd' : cache ? 'c' : 'm';
}

/* The pattern of where gets of k are answered, as a string ("dc", "ddc"). */
static void expect(ember_db *db, ember_session *s, uint64_t k, uint64_t gen, const char *want)
{
	char got[8] = "";
	size_t n = strlen(want);
	for (size_t i = 0; i < n; i++)
		got[i] = get_one(db, s, k, gen);
	CHECK(strcmp(got, want) == 0, "key %llu: gets answered \"%s\", want \"%s\"",
	      (unsigned long long)k, got, want);
}

/* Read every key from TESTED on once: the cache fills and starts to evict. */
static void fill(ember_db *db, ember_session *s)
{
	for (uint64_t k = TESTED; k < KEYS; k++)
		(void)get_one(db, s, k, 1);
	CHECK(hlog_load(&db->rc->head) > EM_LOG_START, "the read cache never evicted: enlarge KEYS");
}

/* 1. */
static void test_rule(const char *dir, uint32_t admit)
{
	ember_options o;
	opts_make(&o, admit);
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	put_all(db, 1);
	CHECK_OK(ember_close(db)); /* checkpoints: the reopen starts with nothing in memory */
	o.flags = 0;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	const char *rule = admit == EMBER_READ_CACHE_ADMIT_SECOND ? "ddcc" : "dccc";
	expect(db, s, 1, 1, "dccc"); /* room in the cache: either rule copies at once */
	fill(db, s);
	for (uint64_t k = 0; k < TESTED; k += 7)
		expect(db, s, k, 1, rule);
	/* an overwrite drops the copy; the new record is in the hot log's memory */
	uint8_t v[VAL];
	for (uint64_t k = 0; k < TESTED; k += 7) {
		value_of(k, 2, v);
		CHECK_OK(ember_put(s, &k, sizeof(k), v, sizeof(v)));
		expect(db, s, k, 2, "mm");
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	/* after a reopen the new values are on disk: the rule again */
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	fill(db, s);
	for (uint64_t k = 0; k < TESTED; k += 7)
		expect(db, s, k, 2, rule);
	for (uint64_t k = 2; k < TESTED; k += 7)
		expect(db, s, k, 1, rule);
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	uint64_t filter = rc_filter_bytes(RC_MEM, admit);
	CHECK(st.read_cache_bytes == RC_MEM + filter, "read_cache_bytes %llu, want %u + %llu",
	      (unsigned long long)st.read_cache_bytes, RC_MEM, (unsigned long long)filter);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	printf("admit %u: gets answered \"%s\", filter %llu bytes\n", admit, rule,
	       (unsigned long long)filter);
}

/* 2. The smallest memory_budget with which a new store opens. */
static uint64_t smallest_budget(const char *dir, uint32_t admit)
{
	ember_options o;
	opts_make(&o, admit);
	o.flags = EMBER_OPEN_TRUNCATE;
	o.cold_cache_memory = EMBER_COLD_CACHE_OFF; /* else it yields to the budget */
	uint64_t lo = 0, hi = 64u << 20; /* fails at lo, opens at hi */
	o.memory_budget = hi;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_close(db));
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		o.memory_budget = mid;
		int rc = ember_open(dir, &o, &db);
		CHECK(rc == 0 || rc == EMBER_EINVAL, "budget %llu: %d", (unsigned long long)mid, rc);
		if (rc == 0) {
			CHECK_OK(ember_close(db));
			hi = mid;
		} else {
			lo = mid;
		}
	}
	return hi;
}

static void test_budget(const char *dir)
{
	uint64_t f = rc_filter_bytes(RC_MEM, EMBER_READ_CACHE_ADMIT_SECOND);
	CHECK(f && !(f & (f - 1)) && f <= RC_MEM / 64, "filter %llu bytes for a %u-byte cache",
	      (unsigned long long)f, RC_MEM);
	CHECK(rc_filter_bytes(RC_MEM, EMBER_READ_CACHE_ADMIT_FIRST) == 0, "no filter when FIRST");
	uint64_t b1 = smallest_budget(dir, EMBER_READ_CACHE_ADMIT_FIRST);
	uint64_t b2 = smallest_budget(dir, EMBER_READ_CACHE_ADMIT_SECOND);
	CHECK(b2 == b1 + f, "smallest budget %llu with the filter, %llu without: want %llu more",
	      (unsigned long long)b2, (unsigned long long)b1, (unsigned long long)f);
	printf("smallest budget %llu, with the filter %llu\n", (unsigned long long)b1,
	       (unsigned long long)b2);
}

/* 3. */
static void test_bad(const char *dir)
{
	const uint32_t bad[] = {2, 3, 0x80000000u, UINT32_MAX};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ember_options o;
		opts_make(&o, bad[i]);
		o.flags = EMBER_OPEN_TRUNCATE;
		ember_db *db = (ember_db *)&o; /* must come back NULL */
		CHECK_RC(ember_open(dir, &o, &db), EMBER_EINVAL);
		CHECK(db == NULL, "a refused open left *db set");
	}
}

int main(int argc, char **argv)
{
	tu_init("test_rc_admit", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("rc-admit", dir, sizeof(dir)) == 0, "mkdtemp");
	test_rule(dir, EMBER_READ_CACHE_ADMIT_FIRST);
	test_rule(dir, EMBER_READ_CACHE_ADMIT_SECOND);
	test_budget(dir);
	test_bad(dir);
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
