/*
 * consistency_fixture.h - what the two "every read sees every earlier update"
 * tests of the cache share (test_consistency.c on host slots, test_gpu_slots.c on
 * ember_gpu slots): the tables, the cache's size and window, the reference count
 * of updates per row, a store small enough that compaction runs, and reading a
 * row back from the store to check it against its count.
 *
 * Included by exactly one translation unit per test program (it defines static
 * state).
 */
#ifndef EMBER_TESTS_CACHE_CONSISTENCY_FIXTURE_H
#define EMBER_TESTS_CACHE_CONSISTENCY_FIXTURE_H

#include <ember.h>
#include <ember_cache.h>
#include <string.h>

#include "cache/slot_store.h"
#include "test_util.h"

#define NT 4
static const uint64_t ROWS[NT] = {20000, 5000, 800, 50};
static const uint32_t DIM[NT] = {16, 8, 4, 12};
static const uint32_t STORAGE[NT] = {EMBER_CACHE_STORE_FP32, EMBER_CACHE_STORE_FP16,
				     EMBER_CACHE_STORE_FP32, EMBER_CACHE_STORE_FP32};
#define BATCH 64
#define CAPACITY 400
#define WINDOW 16
#define MAXDIM 16 /* the largest of DIM */

static uint32_t *ref[NT]; /* updates per row so far */

static void open_store(const char *dir, ember_db **db)
{
	ember_options o;
	ember_options_default(&o);
	uint64_t rec = 32 + 8 + 64; /* header, key, the largest value */
	uint64_t rows = 0;
	for (int t = 0; t < NT; t++)
		rows += ROWS[t];
	o.memory_budget = 2u << 20;
	o.page_size = 64u << 10;
	o.index_buckets = 1024;
	o.hot_disk_budget = 1024 * 4 * rec;
	o.cold_disk_budget = 8 * rows * rec;
	o.cold_index_chunks = 1024;
	o.flags = EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &o, db));
}

/* The store's value of (t, row), as floats; 0 when absent. */
static void store_row(ember_session *s, uint32_t t, uint64_t row, float *out)
{
	uint8_t key[8], val[64];
	uint64_t k = (uint64_t)t << 48 | row;
	for (int i = 0; i < 8; i++)
		key[i] = (uint8_t)(k >> (8 * i));
	size_t vlen = 0, want = slot_row_bytes(DIM[t], STORAGE[t]);
	int rc = ember_get(s, key, 8, val, sizeof(val), &vlen);
	if (rc == EMBER_ENOTFOUND) {
		memset(out, 0, DIM[t] * sizeof(float));
		return;
	}
	CHECK_OK(rc);
	CHECK(vlen == want, "table %u row %llu: value of %zu bytes, want %zu", t,
	      (unsigned long long)row, vlen, want);
	for (uint32_t j = 0; j < DIM[t]; j++) {
		if (STORAGE[t] == EMBER_CACHE_STORE_FP16) {
			uint16_t h;
			memcpy(&h, val + 2 * j, 2);
			out[j] = slot_f16_to_f32(h);
		} else {
			memcpy(&out[j], val + 4 * j, 4);
		}
	}
}

static void check_store_row(ember_session *s, uint32_t t, uint64_t row, const char *when)
{
	float v[MAXDIM];
	store_row(s, t, row, v);
	for (uint32_t j = 0; j < DIM[t]; j++)
		CHECK(v[j] == (float)ref[t][row], "%s: store table %u row %llu elem %u = %g, want %u",
		      when, t, (unsigned long long)row, j, v[j], ref[t][row]);
}

#endif
