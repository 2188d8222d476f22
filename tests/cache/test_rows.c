/*
 * test_rows.c - rows and their optimizer state through the cache:
 *   - state survives eviction, write-back, flush, close and reopen of the store
 *     (a shadow of every row, values compared; fp16 rows rounded when they
 *     travel through the store, state always exact);
 *   - ember_cache_read_rows sees dirty rows, clean rows, rows never cached (their
 *     init) and rows written by ember_cache_write_rows; write_rows is seen by
 *     batches already planned and fetched and by later ones, with and without
 *     state_in; duplicates; fp16 rounding on write; a value of the wrong length;
 *     every bad input and ESTATE while a batch is acquired;
 *   - per-table init differs per table and reads the same every time;
 *   - GPU slots (the host backend) with Adagrad: state written, read back,
 *     through the arena, a flush and a reopen.
 */
#include "cache/slot_store.h"
#include "ember.h"
#include "ember_cache.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];
static ember_db *db;

static void open_db(int truncate)
{
	ember_options so;
	ember_options_default(&so);
	so.log_memory = 8u << 20;
	so.page_size = 64u << 10;
	so.index_buckets = 1024;
	so.flags = truncate ? EMBER_OPEN_TRUNCATE : 0;
	CHECK_OK(ember_open(dir, &so, &db));
}

static float f16r(float x) { return slot_f16_to_f32(slot_f32_to_f16(x)); }

/* ---- state through eviction, flush, close, reopen ---------------------------------- */

#define NT 3
#define ROWS 40
static const uint32_t DIM[NT] = {6, 3, 4};
static ember_cache_table ptabs[NT] = {
	{.rows = ROWS, .dim = 6, .optimizer = EMBER_CACHE_OPT_ADAGRAD},
	{.rows = ROWS, .dim = 3, .storage = EMBER_CACHE_STORE_FP16,
	 .optimizer = EMBER_CACHE_OPT_ROWWISE_ADAGRAD},
	{.rows = ROWS, .dim = 4, .init = EMBER_CACHE_TABLE_INIT_UNIFORM, .init_scale = 2,
	 .init_seed = 7},
};
static const uint32_t SF[NT] = {6, 1, 0};

static void popen_cache(ember_cache **c, uint64_t capacity)
{
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = ptabs;
	o.ntables = NT;
	o.capacity = capacity;
	o.window = 6;
	o.init = EMBER_CACHE_INIT_UNIFORM;
	o.init_seed = tu_seed();
	CHECK_OK(ember_cache_open(db, &o, c));
}

/* shadow[t][row]: dim floats then state */
static float shadow[NT][ROWS][12];

/* x (what the cache shows) must be the shadow: exactly, or for fp16 rows the
 * shadow rounded (the row went through the store); the state always exactly. */
static void check_row(uint32_t t, uint64_t row, const float *x, const float *st, const char *where)
{
	const float *s = shadow[t][row];
	for (uint32_t j = 0; j < DIM[t]; j++)
		CHECK(x[j] == s[j] || (t == 1 && x[j] == f16r(s[j])),
		      "%s: table %u row %llu element %u: %.9g, want %.9g", where, t,
		      (unsigned long long)row, j, x[j], s[j]);
	for (uint32_t j = 0; j < SF[t]; j++)
		CHECK(st[j] == s[DIM[t] + j], "%s: table %u row %llu state %u: %.9g, want %.9g",
		      where, t, (unsigned long long)row, j, st[j], s[DIM[t] + j]);
}

static void check_all_read(ember_cache *c, const char *where, int rounded)
{
	uint64_t rows[ROWS];
	float out[ROWS * 6], st[ROWS * 6];
	for (uint64_t r = 0; r < ROWS; r++)
		rows[r] = ROWS - 1 - r;
	for (uint32_t t = 0; t < NT; t++) {
		CHECK_OK(ember_cache_read_rows(c, t, ROWS, rows, out, st));
		for (uint64_t k = 0; k < ROWS; k++) {
			check_row(t, rows[k], out + k * DIM[t], st + k * SF[t], where);
			if (rounded && t == 1)
				for (uint32_t j = 0; j < DIM[t]; j++)
					shadow[t][rows[k]][j] = f16r(shadow[t][rows[k]][j]);
		}
	}
}

/* After a flush the store holds every row's value: row (fp16 rounded), then state. */
static void check_store(void)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	for (uint32_t t = 0; t < NT; t++)
		for (uint64_t r = 0; r < ROWS; r++) {
			uint64_t key = (uint64_t)t << 48 | r;
			uint8_t buf[64];
			size_t len;
			int rc = ember_get(s, &key, 8, buf, sizeof(buf), &len);
			if (rc == EMBER_ENOTFOUND)
				continue; /* never written back: still its init (checked by reads) */
			CHECK_OK(rc);
			size_t rb = DIM[t] * (t == 1 ? 2 : 4);
			CHECK(len == rb + 4 * SF[t], "table %u value length %zu", t, len);
			float x[8], st[8];
			slot_row_to_f32(x, buf, DIM[t], t == 1 ? EMBER_CACHE_STORE_FP16 : 0);
			memcpy(st, buf + rb, 4 * SF[t]);
			check_row(t, r, x, st, "store after flush");
		}
	CHECK_OK(ember_session_close(s));
}

static void test_state_persists(void)
{
	open_db(1);
	ember_cache *c;
	popen_cache(&c, 12);
	/* every row's init, read twice: the same; tables 0 and 2 differ */
	uint64_t rows[ROWS];
	for (uint64_t r = 0; r < ROWS; r++)
		rows[r] = r;
	for (uint32_t t = 0; t < NT; t++) {
		float a[ROWS * 6], b[ROWS * 6], st[ROWS * 6];
		CHECK_OK(ember_cache_read_rows(c, t, ROWS, rows, a, st));
		CHECK_OK(ember_cache_read_rows(c, t, ROWS, rows, b, NULL));
		CHECK(memcmp(a, b, ROWS * DIM[t] * 4) == 0, "table %u init differs between reads", t);
		for (uint64_t r = 0; r < ROWS; r++) {
			memcpy(shadow[t][r], a + r * DIM[t], DIM[t] * 4);
			for (uint32_t j = 0; j < SF[t]; j++)
				CHECK(st[r * SF[t] + j] == 0, "init state not zero");
			memset(shadow[t][r] + DIM[t], 0, SF[t] * 4);
		}
	}
	int big = 0;
	for (uint64_t r = 0; r < ROWS; r++)
		for (uint32_t j = 0; j < 4; j++) {
			CHECK(shadow[2][r][j] != shadow[0][r][j], "per-table init equals the cache's");
			CHECK(fabsf(shadow[2][r][j]) < 2 && fabsf(shadow[0][r][j]) < 0.01f, "init range");
			big |= fabsf(shadow[2][r][j]) > 0.5f;
		}
	CHECK(big, "table 2's init_scale 2 not used");

	tu_rng rg;
	tu_rng_seed(&rg, tu_seed() ^ 0x57a7e);
	uint64_t nb = tu_scaled(200);
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t ids[NT][5];
		ember_cache_part parts[NT];
		for (uint32_t t = 0; t < NT; t++) {
			uint32_t n = (uint32_t)tu_rng_below(&rg, 4);
			for (uint32_t i = 0; i < n; i++)
				ids[t][i] = tu_rng_below(&rg, ROWS);
			parts[t] = (ember_cache_part){.table = t, .n = n, .rows = ids[t]};
		}
		ember_cache_batch bt = {.nparts = NT, .parts = parts};
		CHECK_OK(ember_cache_push(c, &bt));
		ember_cache_view v;
		CHECK_OK(ember_cache_acquire(c, &v));
		for (uint32_t t = 0; t < NT; t++) {
			float g[5 * 6];
			for (uint32_t i = 0; i < parts[t].n; i++) {
				const float *x = ember_cache_row(&v, t, i);
				check_row(t, ids[t][i], x, x + DIM[t], "acquired batch");
				for (uint32_t j = 0; j < DIM[t]; j++)
					g[i * DIM[t] + j] = (float)(tu_rng_below(&rg, 200)) / 100.0f - 1.0f;
			}
			ember_cache_update u = {.lr = 0.1f, .weight_decay = 0.01f};
			CHECK_OK(ember_cache_apply(c, &v, t, g, 0, &u));
			for (uint32_t i = 0; i < parts[t].n; i++)
				memcpy(shadow[t][ids[t][i]], ember_cache_row(&v, t, i),
				       (DIM[t] + SF[t]) * 4);
		}
		CHECK_OK(ember_cache_release(c, &v));
		if (b % 40 == 39) {
			check_all_read(c, "read_rows", 0);
			CHECK_OK(ember_cache_flush(c));
			check_store();
		}
	}
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_close(db));
	open_db(0);
	popen_cache(&c, 12);
	check_all_read(c, "after reopen", 0);
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_close(db));
	printf("  state persists: %llu batches ok\n", (unsigned long long)nb);
}

/* ---- read_rows and write_rows ------------------------------------------------------ */

static ember_cache_table rtabs[2] = {
	{.rows = 100, .dim = 4, .optimizer = EMBER_CACHE_OPT_ADAGRAD},
	{.rows = 50, .dim = 3, .storage = EMBER_CACHE_STORE_FP16},
};

static void push_ids(ember_cache *c, uint32_t t, const uint64_t *ids, uint32_t n)
{
	ember_cache_part p = {.table = t, .n = n, .rows = ids};
	ember_cache_batch b = {.nparts = 1, .parts = &p};
	CHECK_OK(ember_cache_push(c, &b));
}

static void test_read_write(void)
{
	open_db(1);
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = rtabs;
	o.ntables = 2;
	o.capacity = 8;
	o.window = 8;
	o.prefetch_batches = 8;
	o.init = EMBER_CACHE_INIT_UNIFORM;
	o.init_seed = 99;
	ember_cache *c;
	CHECK_OK(ember_cache_open(db, &o, &c));
	float out[8 * 4], st[8 * 4], in[8 * 4], sin[8 * 4], init40[4];
	uint64_t r40 = 40;
	CHECK_OK(ember_cache_read_rows(c, 0, 1, &r40, init40, st));
	CHECK(init40[0] != 0 && st[0] == 0 && st[3] == 0, "init of a row never cached");

	/* dirty rows: a batch sets rows 1, 2, 3 and adds state, released */
	uint64_t b0[3] = {1, 2, 3};
	push_ids(c, 0, b0, 3);
	ember_cache_view v;
	CHECK_OK(ember_cache_acquire(c, &v));
	/* ESTATE while acquired */
	CHECK_RC(ember_cache_read_rows(c, 0, 1, b0, out, NULL), EMBER_ESTATE);
	CHECK_RC(ember_cache_write_rows(c, 0, 1, b0, in, NULL), EMBER_ESTATE);
	for (uint32_t i = 0; i < 3; i++) {
		float *x = ember_cache_row(&v, 0, i);
		for (uint32_t j = 0; j < 8; j++)
			x[j] = (float)(100 * b0[i] + j); /* row, then its 4 state floats */
	}
	CHECK_OK(ember_cache_release(c, &v));
	uint64_t q[5] = {1, 2, 3, 40, 1};
	for (int pass = 0; pass < 2; pass++) { /* dirty, then clean after a flush */
		CHECK_OK(ember_cache_read_rows(c, 0, 5, q, out, st));
		for (uint32_t i = 0; i < 5; i++)
			for (uint32_t j = 0; j < 4; j++) {
				float want = q[i] == 40 ? init40[j] : (float)(100 * q[i] + j);
				float wst = q[i] == 40 ? 0 : (float)(100 * q[i] + 4 + j);
				CHECK(out[i * 4 + j] == want && st[i * 4 + j] == wst,
				      "pass %d: row %llu element %u: %g state %g", pass,
				      (unsigned long long)q[i], j, out[i * 4 + j], st[i * 4 + j]);
			}
		CHECK_OK(ember_cache_flush(c));
	}

	/* write_rows with duplicates (the later wins) and state; read back */
	uint64_t w[3] = {2, 40, 2};
	for (uint32_t i = 0; i < 12; i++) {
		in[i] = 1000.0f + (float)i;
		sin[i] = 2000.0f + (float)i;
	}
	CHECK_OK(ember_cache_write_rows(c, 0, 3, w, in, sin));
	uint64_t q2[2] = {2, 40};
	CHECK_OK(ember_cache_read_rows(c, 0, 2, q2, out, st));
	for (uint32_t j = 0; j < 4; j++) {
		CHECK(out[j] == in[8 + j] && st[j] == sin[8 + j], "row 2 after write: %g", out[j]);
		CHECK(out[4 + j] == in[4 + j] && st[4 + j] == sin[4 + j], "row 40 after write");
	}
	/* without state_in the state stays (row 1: cached, its state from the batch;
	 * row 40: not cached, its state from the last write) */
	uint64_t w2[2] = {1, 40};
	CHECK_OK(ember_cache_write_rows(c, 0, 2, w2, in, NULL));
	CHECK_OK(ember_cache_read_rows(c, 0, 2, w2, out, st));
	for (uint32_t j = 0; j < 4; j++) {
		CHECK(out[j] == in[j] && st[j] == (float)(100 + 4 + j), "row 1 state kept");
		CHECK(out[4 + j] == in[4 + j] && st[4 + j] == sin[4 + j], "row 40 state kept");
	}

	/* batches pushed (planned, maybe fetched) before a write see it, and later ones */
	uint64_t b1[4] = {1, 2, 40, 5}, b2[2] = {2, 7};
	push_ids(c, 0, b1, 4);
	push_ids(c, 0, b2, 2);
	ember_cache_stats sts;
	for (int i = 0; i < 2000; i++) { /* let the prefetcher fetch b1 (not required) */
		CHECK_OK(ember_cache_stats_get(c, &sts));
		if (sts.batches_planned == 3)
			break;
	}
	uint64_t w3[4] = {2, 40, 5, 7};
	for (uint32_t i = 0; i < 16; i++)
		in[i] = -5.0f - (float)i;
	CHECK_OK(ember_cache_write_rows(c, 0, 4, w3, in, sin));
	CHECK_OK(ember_cache_acquire(c, &v));
	for (uint32_t i = 1; i < 4; i++) /* 2, 40, 5: w3[i - 1] */
		for (uint32_t j = 0; j < 8; j++)
			CHECK(ember_cache_row(&v, 0, i)[j] == (j < 4 ? in : sin)[(i - 1) * 4 + j % 4],
			      "planned batch: row %llu element %u: %g", (unsigned long long)b1[i], j,
			      ember_cache_row(&v, 0, i)[j]);
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(ember_cache_row(&v, 0, 0)[0] == in[0] && ember_cache_row(&v, 0, 1)[0] == in[12],
	      "second planned batch");
	v.flags = EMBER_CACHE_VIEW_READONLY;
	CHECK_OK(ember_cache_release(c, &v));
	for (uint64_t r = 10; r < 30; r++) /* evict everything, then come back */
	{
		push_ids(c, 0, &r, 1);
		CHECK_OK(ember_cache_acquire(c, &v));
		CHECK_OK(ember_cache_release(c, &v));
	}
	push_ids(c, 0, w3, 4);
	CHECK_OK(ember_cache_acquire(c, &v));
	for (uint32_t i = 0; i < 4; i++)
		CHECK(ember_cache_row(&v, 0, i)[0] == in[i * 4] && ember_cache_row(&v, 0, i)[4] == sin[i * 4],
		      "later batch row %llu", (unsigned long long)w3[i]);
	CHECK_OK(ember_cache_release(c, &v));

	/* fp16 storage: rounded on write, in the cached copy too */
	uint64_t h[2] = {3, 4};
	push_ids(c, 1, h, 1);
	float hv[6] = {0.1f, 1.0f / 3, 70000.0f, 2.0f, -0.2f, 1e-8f};
	CHECK_OK(ember_cache_write_rows(c, 1, 2, h, hv, NULL));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(ember_cache_row(&v, 0, 0)[0] == f16r(0.1f) && isinf(ember_cache_row(&v, 0, 0)[2]),
	      "fp16 cached copy: %g", ember_cache_row(&v, 0, 0)[0]);
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_read_rows(c, 1, 2, h, out, NULL));
	for (int j = 0; j < 6; j++)
		CHECK(out[j] == f16r(hv[j]) || (isinf(out[j]) && j == 2), "fp16 element %d: %g", j, out[j]);

	/* bad inputs */
	CHECK_RC(ember_cache_read_rows(NULL, 0, 1, q, out, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_read_rows(c, 0, 1, NULL, out, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_read_rows(c, 0, 1, q, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_read_rows(c, 2, 1, q, out, NULL), EMBER_EINVAL);
	uint64_t far = 50; /* table 1 has 50 rows */
	CHECK_RC(ember_cache_read_rows(c, 1, 1, &far, out, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_write_rows(NULL, 0, 1, q, in, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_write_rows(c, 0, 1, NULL, in, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_write_rows(c, 0, 1, q, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_write_rows(c, 5, 1, q, in, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_write_rows(c, 1, 1, &far, in, NULL), EMBER_EINVAL);
	CHECK_OK(ember_cache_read_rows(c, 0, 0, NULL, NULL, NULL));
	CHECK_OK(ember_cache_write_rows(c, 0, 0, NULL, NULL, NULL));

	/* a value of the wrong length (a row without its state) */
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	uint64_t key = 77;
	float raw[4] = {1, 2, 3, 4};
	CHECK_OK(ember_put(s, &key, 8, raw, sizeof(raw)));
	CHECK_OK(ember_session_close(s));
	CHECK_RC(ember_cache_read_rows(c, 0, 1, &key, out, st), EMBER_ECORRUPT);
	CHECK_OK(ember_cache_read_rows(c, 0, 1, q, out, st)); /* the cache goes on */
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_close(db));
	printf("  read_rows / write_rows ok\n");
}

/* ---- GPU slots (host backend): Adagrad state in the arena ------------------------- */

static void test_gpu_state(void)
{
	open_db(1);
	ember_cache_table gt[2] = {{.rows = 30, .dim = 4, .optimizer = EMBER_CACHE_OPT_ADAGRAD},
				   {.rows = 30, .dim = 2, .storage = EMBER_CACHE_STORE_FP16,
				    .optimizer = EMBER_CACHE_OPT_ADAGRAD}};
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = gt;
	o.ntables = 2;
	o.capacity = 6;
	o.window = 4;
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu_backend = EMBER_GPU_BACKEND_HOST;
	ember_cache *c;
	CHECK_OK(ember_cache_open(db, &o, &c));
	uint64_t rows[30];
	float in[30 * 4], sin[30 * 4], out[30 * 4], st[30 * 4];
	for (uint32_t i = 0; i < 30; i++) {
		rows[i] = i;
		for (uint32_t j = 0; j < 4; j++) {
			in[i * 4 + j] = (float)(i * 10 + j) + 0.5f;
			sin[i * 4 + j] = (float)(i * 10 + j) + 0.25f;
		}
	}
	for (uint32_t round = 0; round < 2; round++) {
		/* some rows cached before the write, the rest not */
		ember_cache_view v;
		uint64_t few[3] = {1, 2, 3};
		push_ids(c, 0, few, 3);
		CHECK_OK(ember_cache_acquire(c, &v));
		CHECK_OK(ember_gpu_event_synchronize(v.ready));
		v.flags = EMBER_CACHE_VIEW_READONLY;
		CHECK_OK(ember_cache_release(c, &v));
		CHECK_OK(ember_cache_write_rows(c, 0, 30, rows, in, sin));
		CHECK_OK(ember_cache_read_rows(c, 0, 30, rows, out, st));
		CHECK(memcmp(out, in, sizeof(in)) == 0 && memcmp(st, sin, sizeof(sin)) == 0,
		      "GPU: read after write");
		push_ids(c, 0, few, 3);
		CHECK_OK(ember_cache_acquire(c, &v));
		CHECK_OK(ember_gpu_event_synchronize(v.ready));
		for (uint32_t i = 0; i < 3; i++) { /* host backend: plain memory */
			const float *x = ember_cache_row(&v, 0, i);
			CHECK(x[0] == in[few[i] * 4] && x[4] == sin[few[i] * 4], "GPU arena row %u", i);
		}
		v.flags = EMBER_CACHE_VIEW_READONLY;
		CHECK_OK(ember_cache_release(c, &v));
		for (uint64_t r = 10; r < 20; r++) /* evictions (clean) */
		{
			push_ids(c, 0, &r, 1);
			CHECK_OK(ember_cache_acquire(c, &v));
			CHECK_OK(ember_cache_release(c, &v));
		}
		CHECK_OK(ember_cache_flush(c));
		CHECK_OK(ember_cache_read_rows(c, 0, 30, rows, out, st));
		CHECK(memcmp(out, in, sizeof(in)) == 0 && memcmp(st, sin, sizeof(sin)) == 0,
		      "GPU: read after evictions");
		CHECK_OK(ember_cache_write_rows(c, 1, 30, rows, in, sin)); /* dim 2, fp16 */
		CHECK_OK(ember_cache_read_rows(c, 1, 30, rows, out, st));
		for (uint32_t i = 0; i < 60; i++)
			CHECK(out[i] == f16r(in[i]) && st[i] == sin[i], "GPU fp16 table %u", i);
		CHECK_OK(ember_cache_close(c));
		CHECK_OK(ember_cache_open(db, &o, &c)); /* the store has it all */
	}
	CHECK_OK(ember_cache_read_rows(c, 0, 30, rows, out, st));
	CHECK(memcmp(out, in, sizeof(in)) == 0 && memcmp(st, sin, sizeof(sin)) == 0, "GPU reopen");
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_close(db));
	printf("  GPU slots state ok\n");
}

int main(int argc, char **argv)
{
	tu_init("cache_rows", argc, argv);
	CHECK(tu_tmpdir_make("cache-rows", dir, sizeof(dir)) == 0, "tmpdir");
	test_read_write();
	test_gpu_state();
	test_state_persists();
	tu_tmpdir_remove(dir);
	printf("cache_rows: ok\n");
	return 0;
}
