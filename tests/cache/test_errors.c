/*
 * test_errors.c - every public call of ember_cache.h, given bad input or called in
 * the wrong state, returns the documented code and never crashes; and the
 * documented edge cases of good input work (empty batches, duplicates, a part of
 * zero ids, the window's limit, READONLY, initialisation of absent rows, fp16
 * conversion, statistics).
 */
#include "cache/slot_store.h"
#include "ember.h"
#include "ember_cache.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static char dir[256];
static ember_db *db;

static ember_cache_table tabs[2] = {
	{.rows = 1000, .dim = 8},
	{.rows = 10, .dim = 3, .storage = EMBER_CACHE_STORE_FP16},
};

static void base_opts(ember_cache_options *o)
{
	ember_cache_options_default(o);
	o->tables = tabs;
	o->ntables = 2;
	o->capacity = 16;
	o->window = 4;
}

static ember_cache *open_ok(const ember_cache_options *o)
{
	ember_cache *c = NULL;
	CHECK_OK(ember_cache_open(db, o, &c));
	CHECK(c != NULL, "no handle");
	return c;
}

static int push1(ember_cache *c, uint32_t table, const uint64_t *rows, uint32_t n)
{
	ember_cache_part p = {.table = table, .n = n, .rows = rows};
	ember_cache_batch b = {.nparts = 1, .parts = &p};
	return ember_cache_push(c, &b);
}

static void test_open(void)
{
	ember_cache_options o;
	ember_cache *c = (ember_cache *)(uintptr_t)1;
	ember_cache_options_default(NULL); /* must not crash */
	base_opts(&o);
	CHECK_RC(ember_cache_open(db, &o, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_open(NULL, &o, &c), EMBER_EINVAL);
	CHECK(c == NULL, "*cache not cleared on failure");
	CHECK_RC(ember_cache_open(db, NULL, &c), EMBER_EINVAL);

	ember_cache_table bad[1];
	struct {
		const char *what;
		ember_cache_table t;
	} badt[] = {
		{"rows 0", {.rows = 0, .dim = 4}},
		{"dim 0", {.rows = 10, .dim = 0}},
		{"dim too big", {.rows = 10, .dim = EMBER_CACHE_MAX_DIM + 1}},
		{"rows too many", {.rows = EMBER_CACHE_MAX_ROWS + 1, .dim = 4}},
		{"unknown storage", {.rows = 10, .dim = 4, .storage = 2}},
	};
	for (size_t i = 0; i < sizeof(badt) / sizeof(badt[0]); i++) {
		base_opts(&o);
		bad[0] = badt[i].t;
		o.tables = bad;
		o.ntables = 1;
		int rc = ember_cache_open(db, &o, &c);
		CHECK(rc == EMBER_EINVAL, "%s: got %d", badt[i].what, rc);
	}
	base_opts(&o);
	o.tables = NULL;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.ntables = 0;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.init = 2;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.slots = EMBER_CACHE_SLOTS_HOST;
	o.gpu_backend = EMBER_GPU_BACKEND_HOST; /* device options need device slots */
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu_device = -1; /* more in test_gpu_slots.c */
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.slots = 7;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.init_scale = NAN;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	o.init_scale = -1;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.prefetch_batches = 5; /* > window 4 */
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.capacity = 1ull << 33;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	CHECK(c == NULL, "*cache set on failure");
	base_opts(&o);
	o.capacity = EMBER_CACHE_MAX_CAPACITY + 1; /* the oracle's queues index 2x it */
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.window = EMBER_CACHE_MAX_WINDOW + 1; /* refused before any of it is allocated */
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);

	/* all defaults (capacity 1% -> at least 1024 -> all 1010 rows) */
	ember_cache_options_default(&o);
	o.tables = tabs;
	o.ntables = 2;
	c = open_ok(&o);
	ember_cache_stats st;
	CHECK_OK(ember_cache_stats_get(c, &st));
	CHECK(st.capacity == 1010, "default capacity %llu", (unsigned long long)st.capacity);
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_cache_close(NULL));
}

static void test_push(void)
{
	ember_cache_options o;
	base_opts(&o);
	ember_cache *c = open_ok(&o);
	ember_cache_view v;
	uint64_t rows[32];
	for (int i = 0; i < 32; i++)
		rows[i] = (uint64_t)i;

	/* acquire without push */
	CHECK_RC(ember_cache_acquire(c, &v), EMBER_ESTATE);
	CHECK_RC(ember_cache_try_acquire(c, &v), EMBER_ESTATE);
	CHECK_RC(ember_cache_acquire(c, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_acquire(NULL, &v), EMBER_EINVAL);
	CHECK_RC(ember_cache_try_acquire(NULL, &v), EMBER_EINVAL);

	/* bad batches: nothing is pushed */
	ember_cache_batch b = {.nparts = 1, .parts = NULL};
	CHECK_RC(ember_cache_push(c, &b), EMBER_EINVAL);
	CHECK_RC(ember_cache_push(c, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_push(NULL, &b), EMBER_EINVAL);
	CHECK_RC(push1(c, 2, rows, 1), EMBER_EINVAL);          /* unknown table */
	CHECK_RC(push1(c, UINT32_MAX, rows, 1), EMBER_EINVAL); /* unknown table */
	CHECK_RC(push1(c, 0, NULL, 3), EMBER_EINVAL);          /* rows NULL */
	uint64_t out_of_range[2] = {3, 10};
	CHECK_RC(push1(c, 1, out_of_range, 2), EMBER_EINVAL); /* row 10 of 10 rows */
	uint64_t huge[1] = {UINT64_MAX};
	CHECK_RC(push1(c, 0, huge, 1), EMBER_EINVAL);
	CHECK_RC(push1(c, 0, rows, 17), EMBER_ETOOBIG); /* 17 distinct > capacity 16 */
	CHECK_RC(ember_cache_acquire(c, &v), EMBER_ESTATE); /* still nothing pushed */

	/* 40 lookups of 16 distinct rows fit */
	uint64_t dup[40];
	for (int i = 0; i < 40; i++)
		dup[i] = (uint64_t)(i % 16) * 7;
	CHECK_OK(push1(c, 0, dup, 40));
	/* an empty batch, and a part of zero ids with NULL rows */
	ember_cache_batch empty = {.nparts = 0, .parts = NULL};
	CHECK_OK(ember_cache_push(c, &empty));
	CHECK_OK(push1(c, 1, NULL, 0));
	CHECK_OK(push1(c, 1, rows, 10));
	/* window full */
	CHECK_RC(push1(c, 0, rows, 1), EMBER_EAGAIN);

	/* release of a batch not acquired */
	memset(&v, 0, sizeof(v));
	CHECK_RC(ember_cache_release(c, &v), EMBER_ESTATE);
	CHECK_RC(ember_cache_release(c, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_release(NULL, &v), EMBER_EINVAL);

	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.batch == 0 && v.nparts == 1 && v.parts[0].n == 40, "view of batch 0");
	for (int i = 0; i < 40; i++) {
		CHECK(v.parts[0].rows[i] == dup[i], "ids copied");
		CHECK(v.slots[0][i] == v.slots[0][i % 16], "duplicates share a slot");
		CHECK(v.slots[0][i] < 16, "slot in range");
	}
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < i; j++)
			CHECK(v.slots[0][i] != v.slots[0][j], "distinct rows, distinct slots");
	ember_cache_view v2;
	CHECK_RC(ember_cache_acquire(c, &v2), EMBER_ESTATE);     /* one at a time */
	CHECK_RC(ember_cache_try_acquire(c, &v2), EMBER_ESTATE);
	CHECK_RC(ember_cache_flush(c), EMBER_ESTATE);            /* a batch is acquired */
	ember_cache_view stale = v;
	stale.batch = 1;
	CHECK_RC(ember_cache_release(c, &stale), EMBER_ESTATE);
	for (int i = 0; i < 16; i++)
		ember_cache_row(&v, 0, (uint32_t)i)[0] = 5.0f;
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_RC(ember_cache_release(c, &v), EMBER_ESTATE); /* twice */
	CHECK_RC(ember_cache_release(c, &stale), EMBER_ESTATE);

	CHECK_OK(push1(c, 0, rows, 1)); /* room again */
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.batch == 1 && v.nparts == 0, "the empty batch");
	/* a view of another cache is not this cache's batch */
	ember_cache *c2 = open_ok(&o);
	CHECK_OK(push1(c2, 0, rows, 2));
	CHECK_OK(ember_cache_acquire(c2, &v2));
	CHECK_RC(ember_cache_release(c, &v2), EMBER_ESTATE);
	CHECK_RC(ember_cache_release(c2, &v), EMBER_ESTATE);
	CHECK_OK(ember_cache_release(c2, &v2));
	CHECK_OK(ember_cache_close(c2));
	CHECK_OK(ember_cache_release(c, &v));

	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.batch == 2 && v.nparts == 1 && v.parts[0].n == 0, "the zero-id part");
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.batch == 3 && v.parts[0].table == 1 && v.parts[0].n == 10, "batch 3");
	v.flags = EMBER_CACHE_VIEW_READONLY;
	CHECK_OK(ember_cache_release(c, &v));

	CHECK_OK(ember_cache_flush(c));
	CHECK_RC(ember_cache_flush(NULL), EMBER_EINVAL);
	ember_cache_stats st;
	CHECK_RC(ember_cache_stats_get(NULL, &st), EMBER_EINVAL);
	CHECK_RC(ember_cache_stats_get(c, NULL), EMBER_EINVAL);
	CHECK_OK(ember_cache_stats_get(c, &st));
	CHECK(st.batches_pushed == 5 && st.lookups == 40 + 0 + 0 + 10 + 1, "pushed %llu lookups %llu",
	      (unsigned long long)st.batches_pushed, (unsigned long long)st.lookups);
	CHECK(st.unique_rows == 16 + 10 + 1, "unique %llu", (unsigned long long)st.unique_rows);
	CHECK(st.rows_written_back == 16, "flush wrote %llu rows (16 dirty, 10 read-only)",
	      (unsigned long long)st.rows_written_back);
	CHECK(st.rows_absent == st.rows_fetched, "an empty store holds no row");

	/* the written rows are in the store: 5.0 at element 0 */
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t key[8];
	float val[8];
	size_t vlen = 0;
	uint64_t k = 0ull << 48 | 7;
	memcpy(key, &k, 8);
	CHECK_OK(ember_get(s, key, 8, val, sizeof(val), &vlen));
	CHECK(vlen == 32 && val[0] == 5.0f && val[1] == 0.0f, "row 7 in the store");
	k = 1ull << 48 | 3; /* read-only: never written */
	memcpy(key, &k, 8);
	CHECK_RC(ember_get(s, key, 8, val, sizeof(val), &vlen), EMBER_ENOTFOUND);
	CHECK_OK(ember_session_close(s));

	/* close while holding a batch: allowed, frees everything */
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK_OK(ember_cache_close(c));
}

/* Absent rows: zero, or uniform from the seed, the same in every cache. */
static void read_rows(uint32_t init, uint64_t seed, uint64_t capacity, float out[4][8])
{
	ember_cache_options o;
	base_opts(&o);
	o.capacity = capacity;
	o.init = init;
	o.init_seed = seed;
	o.init_scale = 0.5f;
	ember_cache *c = open_ok(&o);
	uint64_t rows[4] = {900, 1, 901, 2};
	CHECK_OK(push1(c, 0, rows, 4));
	ember_cache_view v;
	CHECK_OK(ember_cache_acquire(c, &v));
	for (uint32_t i = 0; i < 4; i++)
		memcpy(out[i], ember_cache_row(&v, 0, i), 8 * sizeof(float));
	v.flags = EMBER_CACHE_VIEW_READONLY;
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_close(c));
}

static void test_init(void)
{
	float a[4][8], b[4][8], z[4][8];
	read_rows(EMBER_CACHE_INIT_UNIFORM, 7, 4, a);
	read_rows(EMBER_CACHE_INIT_UNIFORM, 7, 64, b);
	CHECK(memcmp(a, b, sizeof(a)) == 0, "same seed, same rows");
	int differs = 0;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 8; j++) {
			CHECK(a[i][j] >= -0.5f && a[i][j] < 0.5f, "uniform in [-scale, scale): %g",
			      a[i][j]);
			differs |= a[i][j] != a[0][0];
		}
	CHECK(differs, "the elements are not all equal");
	read_rows(EMBER_CACHE_INIT_UNIFORM, 8, 4, b);
	CHECK(memcmp(a, b, sizeof(a)) != 0, "another seed, other rows");
	read_rows(EMBER_CACHE_INIT_ZERO, 7, 4, z);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 8; j++)
			CHECK(z[i][j] == 0.0f, "zero init");
}

static void test_fp16(void)
{
	static const float exact[] = {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f,
				      5.9604645e-08f /* smallest subnormal */, 1024.0f, -0.1875f};
	for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
		float back = slot_f16_to_f32(slot_f32_to_f16(exact[i]));
		CHECK(back == exact[i], "fp16 round trip of %g gave %g", exact[i], back);
	}
	CHECK(slot_f32_to_f16(1.0f) == 0x3c00, "1.0");
	CHECK(slot_f32_to_f16(-2.0f) == 0xc000, "-2.0");
	CHECK(slot_f32_to_f16(1e6f) == 0x7c00, "overflow to inf");
	CHECK(slot_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "ties to even (down)");
	CHECK(slot_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02, "ties to even (up)");
	CHECK(isinf(slot_f16_to_f32(0x7c00)) && isnan(slot_f16_to_f32(0x7e00)), "inf, nan");
	/* every integer up to 2048 is exact */
	for (int i = 0; i <= 2048; i++)
		CHECK(slot_f16_to_f32(slot_f32_to_f16((float)i)) == (float)i, "%d", i);
}

/* Batches whose distinct rows jump far past the last batch's (push sizes its arrays
 * from the last batch and links again when that was too little): the plan is the
 * same as ever, and a batch over the capacity is still refused whole. */
static void test_sizes(void)
{
	ember_cache_options o;
	base_opts(&o);
	o.capacity = 600;
	ember_cache *c = open_ok(&o);
	static uint64_t rows[700];
	for (int i = 0; i < 500; i++)
		rows[i] = 7;
	CHECK_OK(push1(c, 0, rows, 500)); /* batch 0: one distinct row */
	for (int i = 0; i < 500; i++)
		rows[i] = (uint64_t)(i < 400 ? i : 3 * (i - 400));
	CHECK_OK(push1(c, 0, rows, 500)); /* batch 1: 400 distinct rows */
	uint64_t one = 7;
	CHECK_OK(push1(c, 0, &one, 1)); /* batch 2 */
	for (int i = 0; i < 700; i++)
		rows[i] = (uint64_t)i;
	CHECK_RC(push1(c, 0, rows, 700), EMBER_ETOOBIG); /* over the capacity: not pushed */

	ember_cache_view v;
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.batch == 0 && v.nparts == 1 && v.parts[0].n == 500, "batch 0's view");
	for (uint32_t i = 0; i < 500; i++)
		CHECK(v.slots[0][i] == v.slots[0][0], "batch 0: one row, one slot");
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.batch == 1 && v.parts[0].n == 500, "batch 1's view");
	static uint32_t slot_of[1000];
	static uint8_t slot_used[600];
	memset(slot_of, 0xff, sizeof(slot_of));
	for (uint32_t i = 0; i < 500; i++) {
		uint64_t r = v.parts[0].rows[i];
		uint32_t s = v.slots[0][i];
		CHECK(r == (i < 400 ? i : 3 * (i - 400)) && s < 600, "batch 1: lookup %u", i);
		if (slot_of[r] == UINT32_MAX) {
			CHECK(!slot_used[s], "batch 1: two rows in slot %u", s);
			slot_used[s] = 1;
			slot_of[r] = s;
			ember_cache_row(&v, 0, i)[0] = (float)r + 1000.0f;
		}
		CHECK(slot_of[r] == s, "batch 1: row %llu in two slots", (unsigned long long)r);
	}
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.batch == 2 && v.parts[0].rows[0] == 7 && ember_cache_row(&v, 0, 0)[0] == 1007.0f,
	      "batch 2 sees batch 1's write");
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_close(c));
}

/* A value of another size under a row's key (docs/cache.md: the key is the 8 bytes
 * of table << 48 | row, little-endian): the acquire that needs the row reports
 * EMBER_ECORRUPT, longer (it passed on the store's EMBER_ERANGE) or shorter. */
static void test_wrong_size(void)
{
	for (int longer = 0; longer < 2; longer++) {
		uint64_t row = 900 + (uint64_t)longer;
		uint8_t key[8];
		for (int i = 0; i < 8; i++)
			key[i] = (uint8_t)(row >> (8 * i)); /* table 0 */
		uint8_t val[64] = {0};
		ember_session *s;
		CHECK_OK(ember_session_open(db, &s));
		/* table 0's rows are 8 fp32: 32 bytes */
		CHECK_OK(ember_put(s, key, sizeof(key), val, longer ? 48 : 16));
		CHECK_OK(ember_session_close(s));
		ember_cache_options o;
		base_opts(&o);
		ember_cache *c = open_ok(&o);
		CHECK_OK(push1(c, 0, &row, 1));
		ember_cache_view v;
		int rc = ember_cache_acquire(c, &v);
		CHECK(rc == EMBER_ECORRUPT, "a %s value: acquire %d (%s)", longer ? "longer" : "shorter",
		      rc, ember_strerror(rc));
		CHECK(ember_cache_close(c) == EMBER_ECORRUPT, "close reports the failure");
		CHECK_OK(ember_session_open(db, &s));
		CHECK_OK(ember_delete(s, key, sizeof(key))); /* the other tests read every row */
		CHECK_OK(ember_session_close(s));
	}
}

int main(int argc, char **argv)
{
	tu_init("cache_errors", argc, argv);
	CHECK(tu_tmpdir_make("cache-errors", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options so;
	ember_options_default(&so);
	so.log_memory = 8u << 20;
	so.page_size = 64u << 10;
	so.index_buckets = 1024;
	so.flags = EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &so, &db));
	test_fp16();
	test_open();
	test_wrong_size();
	test_push();
	test_init();
	test_sizes();
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("cache_errors: ok\n");
	return 0;
}
