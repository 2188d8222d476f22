/*
 * test_pinned.c - a slot whose row an unreleased batch uses is not refilled until
 * that batch is released (cache.c C3), even when the plan had to pick it.
 *
 * The plan's victim search gives up looking for an unpinned row after PIN_SCAN
 * entries per distinct row of the batch, plus 64 (oracle.c, "Pinned rows"), and
 * then takes a pinned one. This lays the cache out so that it must:
 *   F      the 156 rows U0..U155, acquired and released: they fill 156 of the 256
 *          slots;
 *   P      100 new rows P0..P99, into the free slots: the cache is full. The
 *          trainer acquires P and keeps it: its rows are pinned;
 *   B      one new row X. Planning it while P is held (P's 100 rows plus X's one
 *          are within half the capacity) needs a victim: every U is used next by
 *          N (the nearest bucket), every P next by its own batch Z_i after N (100
 *          buckets further out, each headed by a pinned row), nothing is in
 *          "never": the walk from the highest bucket down meets 100 pinned rows
 *          and gives up after 72, and the victim is a P row;
 *   N, Z0..Z99  pushed before P is acquired, so the plan knows them.
 * While P is held, B's admission must wait: the rows of P the trainer sees stay
 * as they were (and nothing is fetched). After P's release, B is fetched and
 * acquired, and the P row it evicted was written back with the trainer's update.
 */
#include "ember.h"
#include "ember_cache.h"
#include "test_util.h"

#include <string.h>
#include <time.h>

#define CAP 256u
#define NU 156u
#define NP 100u
#define DIM 4u
#define ROWS 1000u

static void push_rows(ember_cache *c, const uint64_t *rows, uint32_t n)
{
	ember_cache_part part = {.table = 0, .n = n, .rows = rows};
	ember_cache_batch b = {.nparts = 1, .parts = &part};
	CHECK_OK(ember_cache_push(c, &b));
}

static uint64_t fetched(ember_cache *c)
{
	ember_cache_stats st;
	CHECK_OK(ember_cache_stats_get(c, &st));
	return st.rows_fetched;
}

int main(int argc, char **argv)
{
	tu_init("cache_pinned", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("cache-pinned", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_options so;
	ember_options_default(&so);
	so.log_memory = 1u << 20;
	so.page_size = 64u << 10;
	so.index_buckets = 1u << 10;
	so.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &so, &db));

	ember_cache_table tab = {.rows = ROWS, .dim = DIM};
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = &tab;
	o.ntables = 1;
	o.capacity = CAP;
	o.window = 128;
	o.prefetch_batches = 4;
	o.init = EMBER_CACHE_INIT_UNIFORM;
	o.init_scale = 1.0f;
	o.init_seed = tu_seed();
	ember_cache *c = NULL;
	CHECK_OK(ember_cache_open(db, &o, &c));

	uint64_t u[NU], p[NP], x = ROWS - 1;
	for (uint32_t i = 0; i < NU; i++)
		u[i] = i;
	for (uint32_t i = 0; i < NP; i++)
		p[i] = NU + i;
	push_rows(c, u, NU);     /* F */
	push_rows(c, p, NP);     /* P */
	push_rows(c, &x, 1);     /* B */
	push_rows(c, u, NU);     /* N */
	for (uint32_t i = 0; i < NP; i++)
		push_rows(c, &p[i], 1); /* Z_i */

	ember_cache_view v;
	CHECK_OK(ember_cache_acquire(c, &v)); /* F */
	CHECK(v.batch == 0, "batch %llu, want F", (unsigned long long)v.batch);
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_acquire(c, &v)); /* P, held */
	CHECK(v.batch == 1 && v.parts[0].n == NP, "batch %llu, want P", (unsigned long long)v.batch);
	static float before[NP][DIM];
	for (uint32_t i = 0; i < NP; i++)
		memcpy(before[i], ember_cache_row(&v, 0, i), sizeof(before[i]));
	uint64_t f0 = fetched(c);
	CHECK(f0 == NU + NP, "%llu rows fetched for F and P, want %u (X must wait for P's "
	      "release)", (unsigned long long)f0, NU + NP);
	/* give the prefetcher time to plan B and (wrongly) fetch X into a P slot */
	double t0 = tu_now();
	while (tu_now() - t0 < 0.2 && fetched(c) == f0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	CHECK(fetched(c) == f0, "a row was fetched while P holds every slot it could go to "
	      "(%llu fetched): a pinned slot was refilled", (unsigned long long)fetched(c));
	for (uint32_t i = 0; i < NP; i++) {
		float *row = ember_cache_row(&v, 0, i);
		CHECK(memcmp(row, before[i], sizeof(before[i])) == 0,
		      "row %llu of the acquired batch changed under the trainer",
		      (unsigned long long)p[i]);
		for (uint32_t j = 0; j < DIM; j++)
			row[j] = (float)(p[i] * 10 + j); /* the trainer's update */
	}
	CHECK_OK(ember_cache_release(c, &v));

	CHECK_OK(ember_cache_acquire(c, &v)); /* B: X admitted, a P row evicted */
	CHECK(v.batch == 2 && fetched(c) == f0 + 1, "batch %llu, %llu fetched",
	      (unsigned long long)v.batch, (unsigned long long)fetched(c));
	CHECK_OK(ember_cache_release(c, &v));
	/* every P row, evicted or not, holds the trainer's update */
	float got[NP][DIM];
	CHECK_OK(ember_cache_read_rows(c, 0, NP, p, &got[0][0], NULL));
	for (uint32_t i = 0; i < NP; i++)
		for (uint32_t j = 0; j < DIM; j++)
			CHECK(got[i][j] == (float)(p[i] * 10 + j), "row %llu lost its update",
			      (unsigned long long)p[i]);
	/* the rest of the pushed batches drain */
	for (uint32_t b = 0; b < 1 + NP; b++) {
		CHECK_OK(ember_cache_acquire(c, &v));
		v.flags = EMBER_CACHE_VIEW_READONLY;
		CHECK_OK(ember_cache_release(c, &v));
	}
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_close(db));
	CHECK(tu_tmpdir_remove(dir) == 0, "rmdir");
	printf("cache_pinned: OK\n");
	return 0;
}
