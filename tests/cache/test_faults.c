/*
 * test_faults.c - failures under the cache surface as error codes (needs
 * -Dfault_injection=true; registered only then).
 *
 *   - allocation failures at every allocation of ember_cache_open: it returns
 *     EMBER_ENOMEM (or the session's error) and leaks nothing (ASan), and opens
 *     once the failures stop;
 *   - disk reads failing while the prefetcher fetches rows from the store's disk:
 *     acquire returns the error (it does not hang), later pushes, acquires and
 *     flushes report the failed state, close returns the error and frees all;
 *     the store stays usable;
 *   - a write-back of an updated row the store refuses once (store_put): the
 *     failure is reported, and close writes the row all the same.
 */
#include "core/fault.h"
#include "ember.h"
#include "ember_cache.h"
#include "test_util.h"

#include <string.h>

#define ROWS 20000
#define DIM 16

static ember_cache_table tab = {.rows = ROWS, .dim = DIM};

static int open_cache(ember_db *db, ember_cache **c)
{
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = &tab;
	o.ntables = 1;
	o.capacity = 512;
	o.window = 8;
	return ember_cache_open(db, &o, c);
}

int main(int argc, char **argv)
{
	tu_init("cache_faults", argc, argv);
	char dir[256];
	CHECK(tu_tmpdir_make("cache-faults", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options so;
	ember_options_default(&so);
	so.log_memory = 512u << 10; /* most rows end up on the log's disk part */
	so.page_size = 64u << 10;
	so.index_buckets = 4096;
	so.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &so, &db));

	/* every row in the store */
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	for (uint64_t r = 0; r < ROWS; r++) {
		float v[DIM];
		for (int j = 0; j < DIM; j++)
			v[j] = (float)r;
		uint8_t key[8];
		memcpy(key, &r, 8); /* table 0: the key is the row, little-endian */
		CHECK_OK(ember_put(s, key, 8, v, sizeof(v)));
	}

	/* allocation failures while opening */
	int opened = 0, enomem = 0;
	for (uint64_t n = 1; n < 200 && !opened; n++) {
		struct em_fault_spec spec = {.countdown = n};
		CHECK(em_fault_arm(EM_FAULT_ALLOC, &spec) == 0, "arm");
		ember_cache *c = (ember_cache *)(uintptr_t)1;
		int rc = open_cache(db, &c);
		int fired = em_fault_fired(EM_FAULT_ALLOC) > 0;
		em_fault_disarm(EM_FAULT_ALLOC);
		if (rc == 0) {
			CHECK(c != NULL, "no handle");
			CHECK_OK(ember_cache_close(c));
			opened = !fired; /* the n-th allocation came after the open */
			continue;
		}
		CHECK(c == NULL, "*cache set on failure");
		CHECK(rc == EMBER_ENOMEM || rc < 0, "open: %d", rc);
		enomem += rc == EMBER_ENOMEM;
	}
	CHECK(opened && enomem > 0, "open never failed cleanly (%d) or never succeeded", enomem);

	/* disk reads failing under the prefetcher */
	ember_cache *c = NULL;
	CHECK_OK(open_cache(db, &c));
	uint64_t rows[256];
	ember_cache_part part = {.table = 0, .n = 256, .rows = rows};
	ember_cache_batch batch = {.nparts = 1, .parts = &part};
	struct em_fault_spec spec = {.countdown = 1, .persistent = true};
	CHECK(em_fault_arm(EM_FAULT_IO_READ, &spec) == 0, "arm");
	int pushes = 0;
	for (int b = 0; b < 4; b++) {
		for (int i = 0; i < 256; i++)
			rows[i] = tu_rng_below(tu_rng_global(), ROWS / 2); /* old rows: on disk */
		int rc = ember_cache_push(c, &batch);
		CHECK(rc == 0 || rc == EMBER_ESTATE, "push: %d", rc);
		pushes += rc == 0;
	}
	ember_cache_view v;
	int rc = ember_cache_acquire(c, &v);
	uint64_t fired = em_fault_fired(EM_FAULT_IO_READ);
	em_fault_disarm(EM_FAULT_IO_READ);
	CHECK(fired > 0, "no disk read was failed (the rows were in memory?)");
	CHECK(rc < 0, "acquire succeeded although the reads failed");
	printf("cache_faults: acquire returned %d (%s) after %llu failed reads\n", rc,
	       ember_strerror(rc), (unsigned long long)fired);
	CHECK_RC(ember_cache_acquire(c, &v), rc);
	CHECK_RC(ember_cache_try_acquire(c, &v), rc);
	CHECK_RC(ember_cache_push(c, &batch), EMBER_ESTATE);
	CHECK_RC(ember_cache_flush(c), EMBER_ESTATE);
	ember_cache_stats st;
	CHECK_OK(ember_cache_stats_get(c, &st));
	CHECK(ember_cache_close(c) < 0, "close hides the failure");

	/* the store is fine: a new cache reads the rows */
	CHECK_OK(open_cache(db, &c));
	rows[0] = 7;
	part.n = 1;
	CHECK_OK(ember_cache_push(c, &batch));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(ember_cache_row(&v, 0, 0)[0] == 7.0f, "row 7 reads %g", ember_cache_row(&v, 0, 0)[0]);
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_close(c));

	/* a write-back the store refuses once: the row stays dirty, and close writes
	 * it (it used to be marked clean before the put, and the update was lost) */
	CHECK_OK(open_cache(db, &c));
	rows[0] = 11;
	part.n = 1;
	CHECK_OK(ember_cache_push(c, &batch));
	CHECK_OK(ember_cache_acquire(c, &v));
	ember_cache_row(&v, 0, 0)[0] = 4242.0f;
	CHECK_OK(ember_cache_release(c, &v));
	struct em_fault_spec once = {.countdown = 1, .limit = 1};
	CHECK(em_fault_arm(EM_FAULT_STORE_PUT, &once) == 0, "arm");
	/* rows the capacity (512) cannot hold beside row 11: it is evicted, its
	 * write-back refused */
	int failed = 0;
	for (int b = 0; b < 8 && !failed; b++) {
		part.n = 256;
		for (int i = 0; i < 256; i++)
			rows[i] = 1000 + (uint64_t)b * 256 + (uint64_t)i;
		rc = ember_cache_push(c, &batch);
		if (rc == EMBER_ESTATE) {
			failed = 1;
			break;
		}
		CHECK_OK(rc);
		rc = ember_cache_acquire(c, &v);
		if (rc < 0) {
			failed = 1;
			break;
		}
		CHECK_OK(ember_cache_release(c, &v));
	}
	CHECK(em_fault_fired(EM_FAULT_STORE_PUT) == 1, "the write-back was not refused");
	em_fault_disarm(EM_FAULT_STORE_PUT);
	CHECK(failed, "the refused write-back went unreported");
	CHECK(ember_cache_close(c) < 0, "close hides the refused write-back");
	size_t vl = 0;
	float back[DIM];
	uint8_t key11[8];
	uint64_t r11 = 11;
	memcpy(key11, &r11, 8);
	CHECK_OK(ember_get(s, key11, 8, back, sizeof(back), &vl));
	CHECK(vl == sizeof(back) && back[0] == 4242.0f, "row 11 after close: %g, want 4242",
	      back[0]);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("cache_faults: ok (%d failed opens returned EMBER_ENOMEM; %d batches pushed before "
	       "the failure)\n",
	       enomem, pushes);
	return 0;
}
