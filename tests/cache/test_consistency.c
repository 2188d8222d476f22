/*
 * test_consistency.c - every read through the cache sees every earlier update.
 *
 * A trainer loop over a Zipf trace adds 1 to every element of every distinct row
 * of each batch (once per batch, however often the batch names the row), with a
 * capacity far below the number of distinct rows, so rows are evicted dirty,
 * written back and fetched again many times. The store runs under a small memory
 * budget, so its compaction moves the written-back rows between its logs all
 * along. Checked:
 *   - before each increment, the row holds exactly the number of earlier batches
 *     that updated it (the cache served the latest write, C4);
 *   - some batches are released READONLY: they must not count, nor be written;
 *   - flushes in the middle: the store then holds every released update;
 *   - the cache is closed and reopened halfway (close writes everything back);
 *   - acquire and try_acquire alternate (try_acquire spinning on EMBER_EAGAIN);
 *   - at the end, every row in the store equals its count (fp32 and fp16 tables);
 *   - meanwhile another thread reads the statistics (any thread may), and its
 *     counters never go backwards.
 * The prefetcher thread runs beside the trainer (the main thread): run under TSan
 * too (EMBER_TEST_SCALE shrinks the batch count).
 */
#include "cache/slot_store.h"
#include "ember.h"
#include "ember_cache.h"
#include "test_util.h"
#include "trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "consistency_fixture.h"

/* The statistics reader: runs while the first cache is open. */
static atomic_int stats_stop; /* tells the reader to finish (it reads nothing else) */
static uint64_t stats_reads;

static void *stats_main(void *arg)
{
	ember_cache *c = arg;
	ember_cache_stats last = {0}, now;
	while (!atomic_load(&stats_stop)) {
		CHECK_OK(ember_cache_stats_get(c, &now));
		CHECK(now.rows_fetched >= last.rows_fetched && now.batches_pushed >= last.batches_pushed &&
			      now.rows_written_back >= last.rows_written_back &&
			      now.resident <= now.capacity,
		      "statistics went backwards");
		last = now;
		stats_reads++;
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void open_cache(ember_db *db, ember_cache **c, uint32_t depth)
{
	ember_cache_table tabs[NT];
	for (int t = 0; t < NT; t++)
		tabs[t] = (ember_cache_table){.rows = ROWS[t], .dim = DIM[t], .storage = STORAGE[t]};
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = tabs;
	o.ntables = NT;
	o.capacity = CAPACITY;
	o.window = WINDOW;
	o.prefetch_batches = 4;
	o.prefetch_depth = depth;
	CHECK_OK(ember_cache_open(db, &o, c));
}

int main(int argc, char **argv)
{
	tu_init("cache_consistency", argc, argv);
	tu_rng *rng = tu_rng_global();
	/* at least enough batches for the store's compaction to run (sanitizer scales) */
	uint32_t nbatches = (uint32_t)tu_scaled(2000);
	if (nbatches < 700)
		nbatches = 700;

	/* the trace: Zipf ids, several lookups of the same row per batch */
	struct trace_params tp;
	struct trace tr;
	trace_params_default(&tp);
	tp.ntables = NT;
	tp.rows = ROWS;
	tp.batch_size = BATCH;
	tp.nbatches = nbatches;
	tp.skew = 0.9;
	tp.seed = tu_seed();
	CHECK(trace_generate(&tp, &tr) == 0, "trace_generate");

	char dir[256];
	CHECK(tu_tmpdir_make("cache-consistency", dir, sizeof(dir)) == 0, "tmpdir");
	ember_db *db = NULL;
	ember_session *vs = NULL;
	ember_cache *c = NULL;
	open_store(dir, &db);
	CHECK_OK(ember_session_open(db, &vs));
	for (int t = 0; t < NT; t++) {
		ref[t] = calloc(ROWS[t], sizeof(uint32_t));
		CHECK(ref[t], "calloc");
	}
	uint32_t *slot_stamp = calloc(CAPACITY, sizeof(uint32_t));
	CHECK(slot_stamp, "calloc");
	open_cache(db, &c, 32);
	pthread_t stats_thread;
	CHECK(pthread_create(&stats_thread, NULL, stats_main, c) == 0, "pthread_create");

	uint64_t ids[NT][BATCH];
	ember_cache_part parts[NT];
	uint32_t pushed = 0, readonly_batches = 0, spins = 0, reopened = 0;
	uint32_t base = 0; /* the batch number the current cache calls 0 */
	for (uint32_t b = 0; b < nbatches; b++) {
		/* keep the window full */
		while (pushed < nbatches) {
			for (int t = 0; t < NT; t++) {
				const uint32_t *src = trace_ids(&tr, pushed, t);
				for (int i = 0; i < BATCH; i++)
					ids[t][i] = src[i];
				parts[t] = (ember_cache_part){.table = (uint32_t)t, .n = BATCH,
							      .rows = ids[t]};
			}
			ember_cache_batch batch = {.nparts = NT, .parts = parts};
			int rc = ember_cache_push(c, &batch);
			if (rc == EMBER_EAGAIN)
				break;
			CHECK_OK(rc);
			pushed++;
		}
		ember_cache_view v;
		if (b % 2) {
			CHECK_OK(ember_cache_acquire(c, &v));
		} else {
			int rc;
			while ((rc = ember_cache_try_acquire(c, &v)) == EMBER_EAGAIN) {
				struct timespec ts = {0, 20000}; /* do not starve the prefetcher */
				spins++;
				nanosleep(&ts, NULL);
			}
			CHECK_OK(rc);
		}
		CHECK(v.batch == b - base, "acquired batch %llu, want %u",
		      (unsigned long long)v.batch, b - base);
		CHECK(v.nparts == NT, "nparts %u", v.nparts);
		int readonly = tu_rng_chance(rng, 1, 10);
		for (uint32_t p = 0; p < v.nparts; p++) {
			uint32_t t = v.parts[p].table;
			const uint32_t *src = trace_ids(&tr, b, t);
			CHECK(v.parts[p].n == BATCH, "part size");
			for (uint32_t i = 0; i < v.parts[p].n; i++) {
				uint64_t row = v.parts[p].rows[i];
				CHECK(row == src[i], "the view's ids are the pushed ids");
				uint32_t s = v.slots[p][i];
				CHECK(s < CAPACITY, "slot %u out of range", s);
				float *x = ember_cache_row(&v, p, i);
				if (slot_stamp[s] == b + 1)
					continue; /* this batch already saw the row */
				slot_stamp[s] = b + 1;
				for (uint32_t j = 0; j < DIM[t]; j++) {
					CHECK(x[j] == (float)ref[t][row],
					      "batch %u table %u row %llu elem %u: read %g, want %u", b,
					      t, (unsigned long long)row, j, x[j], ref[t][row]);
					if (!readonly)
						x[j] += 1.0f;
				}
				if (!readonly)
					ref[t][row]++;
			}
		}
		if (readonly) {
			v.flags |= EMBER_CACHE_VIEW_READONLY;
			readonly_batches++;
		}
		CHECK_OK(ember_cache_release(c, &v));

		if (b % 97 == 96) {
			/* a checkpoint: the store must now hold every released update */
			CHECK_OK(ember_cache_flush(c));
			for (int k = 0; k < 200; k++) {
				uint32_t t = (uint32_t)tu_rng_below(rng, NT);
				check_store_row(vs, t, tu_rng_below(rng, ROWS[t]), "after flush");
			}
		}
		if (b == nbatches / 2) {
			/* close (writes back, drops the pushed batches) and start again */
			ember_cache_stats st;
			CHECK_OK(ember_cache_stats_get(c, &st));
			CHECK(st.rows_evicted > 0 && st.rows_written_back > 0,
			      "evicted %llu written back %llu", (unsigned long long)st.rows_evicted,
			      (unsigned long long)st.rows_written_back);
			atomic_store(&stats_stop, 1);
			CHECK(pthread_join(stats_thread, NULL) == 0, "pthread_join");
			CHECK(stats_reads > 0, "the statistics reader never ran");
			CHECK_OK(ember_cache_close(c));
			c = NULL;
			open_cache(db, &c, 7);
			pushed = b + 1;
			base = b + 1;
			reopened = 1;
			memset(slot_stamp, 0, CAPACITY * sizeof(uint32_t));
		}
	}
	ember_cache_stats st;
	CHECK_OK(ember_cache_stats_get(c, &st));
	CHECK(st.resident <= CAPACITY, "resident %llu", (unsigned long long)st.resident);
	CHECK_OK(ember_cache_close(c));

	/* every row in the store equals the number of batches that updated it */
	uint64_t touched = 0;
	for (uint32_t t = 0; t < NT; t++)
		for (uint64_t r = 0; r < ROWS[t]; r++) {
			check_store_row(vs, t, r, "at the end");
			touched += ref[t][r] != 0;
		}
	ember_stats ss;
	CHECK_OK(ember_stats_get(db, &ss));
	printf("cache_consistency: %u batches (%u read-only, %u try_acquire spins, reopened %u), "
	       "%llu rows updated; last cache: fetched %llu, evicted %llu, written back %llu, "
	       "hits %llu, wait %.2f s, prefetcher busy %.2f s idle %.2f s; store: %llu hot + %llu cold compactions, %llu cold reads from disk\n",
	       nbatches, readonly_batches, spins, reopened, (unsigned long long)touched,
	       (unsigned long long)st.rows_fetched, (unsigned long long)st.rows_evicted,
	       (unsigned long long)st.rows_written_back, (unsigned long long)st.hits, st.wait_ns / 1e9, st.prefetch_busy_ns / 1e9,
	       st.prefetch_idle_ns / 1e9,
	       (unsigned long long)ss.hot.compactions, (unsigned long long)ss.cold.compactions,
	       (unsigned long long)ss.cold.reads_disk);
	CHECK(ss.hot.compactions > 0, "the store's compaction never ran");
	CHECK_OK(ember_session_close(vs));
	CHECK_OK(ember_close(db));
	for (int t = 0; t < NT; t++)
		free(ref[t]);
	free(slot_stamp);
	trace_free(&tr);
	tu_tmpdir_remove(dir);
	return 0;
}
