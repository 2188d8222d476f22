/*
 * test_loader.c - push from a loader thread while the trainer thread acquires,
 * applies, releases, and every few batches reads rows, writes rows and flushes.
 *
 * The loader pushes a seeded sequence of batches (retrying on EMBER_EAGAIN). The
 * trainer keeps a shadow of every row (and its Adagrad state) and checks every
 * row value it sees against it: in each acquired batch (every lookup), in each
 * read_rows, so every read sees every earlier update, write_rows included.
 * Updates go through ember_cache_apply (SGD on table 0, Adagrad on table 1); the
 * shadow repeats the same float arithmetic (this file is built with
 * -ffp-contract=off, like apply.c), so values match bit for bit. The capacity is
 * small against the rows, so rows are evicted, written back and fetched again
 * all the time. Suite stress; run it under ThreadSanitizer too.
 */
#include "ember.h"
#include "ember_cache.h"
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define NT 2
static const uint64_t ROWS[NT] = {3000, 600};
static const uint32_t DIM[NT] = {4, 3};
static const uint32_t SF[NT] = {0, 3};
#define MAXN 40

static char dir[256];
static ember_db *db;
static ember_cache *cache;
static uint64_t nbatches;
static float *shadow[NT]; /* row r: dim floats, then state */

static void gen_batch(uint64_t b, uint64_t ids[NT][MAXN], ember_cache_part parts[NT])
{
	tu_rng r;
	tu_rng_seed(&r, tu_seed() * 31 + b);
	for (uint32_t t = 0; t < NT; t++) {
		uint32_t n = (uint32_t)tu_rng_below(&r, MAXN + 1);
		for (uint32_t i = 0; i < n; i++) {
			/* skewed: half the lookups among the first 50 rows */
			ids[t][i] = tu_rng_below(&r, 2) ? tu_rng_below(&r, 50) : tu_rng_below(&r, ROWS[t]);
		}
		parts[t] = (ember_cache_part){.table = t, .n = n, .rows = ids[t]};
	}
}

static void *loader_main(void *arg)
{
	(void)arg;
	uint64_t ids[NT][MAXN];
	ember_cache_part parts[NT];
	for (uint64_t b = 0; b < nbatches; b++) {
		gen_batch(b, ids, parts);
		ember_cache_batch bt = {.nparts = NT, .parts = parts};
		int rc;
		while ((rc = ember_cache_push(cache, &bt)) == EMBER_EAGAIN)
			sched_yield();
		CHECK(rc == 0, "push %llu: %s", (unsigned long long)b, ember_strerror(rc));
	}
	return NULL;
}

static float *sh(uint32_t t, uint64_t row) { return shadow[t] + row * (DIM[t] + SF[t]); }

static void check_vals(uint32_t t, uint64_t row, const float *x, const float *st, const char *what,
		       uint64_t b)
{
	const float *s = sh(t, row);
	CHECK(memcmp(x, s, DIM[t] * 4) == 0, "%s (batch %llu): table %u row %llu: %.9g, want %.9g",
	      what, (unsigned long long)b, t, (unsigned long long)row, x[0], s[0]);
	CHECK(!st || memcmp(st, s + DIM[t], SF[t] * 4) == 0, "%s: table %u row %llu state", what, t,
	      (unsigned long long)row);
}

/* The shadow's update of one row: the gradient summed over its lookups. */
static void shadow_apply(uint32_t t, uint64_t row, const float *g, float lr)
{
	float *w = sh(t, row), *s = w + DIM[t];
	for (uint32_t j = 0; j < DIM[t]; j++) {
		if (SF[t]) {
			s[j] = s[j] + g[j] * g[j];
			w[j] = w[j] + (-lr) * (g[j] / (sqrtf(s[j]) + 1e-10f));
		} else {
			w[j] = w[j] + (-lr) * g[j];
		}
	}
}

static void train_batch(uint64_t b, tu_rng *r)
{
	ember_cache_view v;
	int rc;
	while ((rc = ember_cache_acquire(cache, &v)) == EMBER_ESTATE)
		sched_yield(); /* nothing pushed yet: the loader is behind */
	CHECK(rc == 0, "acquire %llu: %s", (unsigned long long)b, ember_strerror(rc));
	CHECK(v.batch == b, "batch %llu, want %llu", (unsigned long long)v.batch,
	      (unsigned long long)b);
	float g[MAXN * 4], sum[MAXN * 4];
	for (uint32_t p = 0; p < v.nparts; p++) {
		const ember_cache_part *pt = &v.parts[p];
		uint32_t t = pt->table, d = DIM[t];
		for (uint32_t i = 0; i < pt->n; i++) {
			const float *x = ember_cache_row(&v, p, i);
			check_vals(t, pt->rows[i], x, x + d, "acquired", b);
			for (uint32_t j = 0; j < d; j++)
				g[i * d + j] = (float)((int)tu_rng_below(r, 7) - 3) * 0.125f;
		}
		ember_cache_update u = {.lr = 0.25f};
		CHECK_OK(ember_cache_apply(cache, &v, p, g, 0, &u));
		/* the shadow: sums in lookup order, one update per distinct row */
		for (uint32_t i = 0; i < pt->n; i++) {
			uint32_t f = i;
			for (uint32_t k = 0; k < i && f == i; k++)
				if (pt->rows[k] == pt->rows[i])
					f = k;
			if (f != i)
				continue;
			memcpy(sum, g + i * d, d * 4);
			for (uint32_t k = i + 1; k < pt->n; k++)
				if (pt->rows[k] == pt->rows[i])
					for (uint32_t j = 0; j < d; j++)
						sum[j] = sum[j] + g[k * d + j];
			shadow_apply(t, pt->rows[i], sum, u.lr);
		}
		for (uint32_t i = 0; i < pt->n; i++) {
			const float *x = ember_cache_row(&v, p, i);
			check_vals(t, pt->rows[i], x, x + d, "after apply", b);
		}
	}
	CHECK_OK(ember_cache_release(cache, &v));
}

static void read_some(uint64_t b, tu_rng *r)
{
	uint64_t rows[64];
	float out[64 * 4], st[64 * 4];
	uint32_t t = (uint32_t)tu_rng_below(r, NT);
	for (uint32_t i = 0; i < 64; i++)
		rows[i] = tu_rng_below(r, 2) ? tu_rng_below(r, 50) : tu_rng_below(r, ROWS[t]);
	CHECK_OK(ember_cache_read_rows(cache, t, 64, rows, out, st));
	for (uint32_t i = 0; i < 64; i++)
		check_vals(t, rows[i], out + i * DIM[t], st + i * SF[t], "read_rows", b);
}

static void write_some(uint64_t b, tu_rng *r)
{
	uint64_t rows[16];
	float in[16 * 4], st[16 * 4];
	uint32_t t = (uint32_t)tu_rng_below(r, NT);
	int with_state = (int)tu_rng_below(r, 2);
	for (uint32_t i = 0; i < 16; i++) {
		rows[i] = tu_rng_below(r, 2) ? tu_rng_below(r, 50) : tu_rng_below(r, ROWS[t]);
		for (uint32_t j = 0; j < DIM[t]; j++)
			in[i * DIM[t] + j] = (float)tu_rng_below(r, 1000) / 64.0f;
		for (uint32_t j = 0; j < SF[t]; j++)
			st[i * SF[t] + j] = (float)tu_rng_below(r, 100) / 8.0f;
	}
	CHECK_OK(ember_cache_write_rows(cache, t, 16, rows, in, with_state ? st : NULL));
	for (uint32_t i = 0; i < 16; i++) { /* in order: a repeated row ends with its later value */
		memcpy(sh(t, rows[i]), in + i * DIM[t], DIM[t] * 4);
		if (with_state)
			memcpy(sh(t, rows[i]) + DIM[t], st + i * SF[t], SF[t] * 4);
	}
}

int main(int argc, char **argv)
{
	tu_init("cache_loader", argc, argv);
	CHECK(tu_tmpdir_make("cache-loader", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options so;
	ember_options_default(&so);
	so.log_memory = 8u << 20;
	so.page_size = 64u << 10;
	so.index_buckets = 4096;
	so.flags = EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &so, &db));
	ember_cache_table tabs[NT] = {
		{.rows = ROWS[0], .dim = DIM[0]},
		{.rows = ROWS[1], .dim = DIM[1], .optimizer = EMBER_CACHE_OPT_ADAGRAD},
	};
	for (uint32_t t = 0; t < NT; t++)
		CHECK((shadow[t] = calloc(ROWS[t] * (DIM[t] + SF[t]), sizeof(float))) != NULL, "calloc");
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = tabs;
	o.ntables = NT;
	o.capacity = 160;
	o.window = 8;
	o.prefetch_depth = 16;
	CHECK_OK(ember_cache_open(db, &o, &cache));
	nbatches = tu_scaled(3000);
	tu_rng r;
	tu_rng_seed(&r, tu_seed() ^ 0x10ad);

	/* acquire before any push: nothing to wait for */
	ember_cache_view v;
	CHECK_RC(ember_cache_acquire(cache, &v), EMBER_ESTATE);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, loader_main, NULL) == 0, "pthread_create");
	uint64_t reads = 0, writes = 0, flushes = 0;
	for (uint64_t b = 0; b < nbatches; b++) {
		train_batch(b, &r);
		if (b % 5 == 2) {
			read_some(b, &r);
			reads++;
		}
		if (b % 7 == 3) {
			write_some(b, &r);
			writes++;
		}
		if (b % 23 == 11) {
			CHECK_OK(ember_cache_flush(cache));
			flushes++;
		}
	}
	CHECK(pthread_join(th, NULL) == 0, "join");
	CHECK_RC(ember_cache_acquire(cache, &v), EMBER_ESTATE); /* all consumed */
	ember_cache_stats st;
	CHECK_OK(ember_cache_stats_get(cache, &st));
	CHECK(st.batches_released == nbatches && st.rows_evicted > 0, "released %llu evicted %llu",
	      (unsigned long long)st.batches_released, (unsigned long long)st.rows_evicted);
	CHECK_OK(ember_cache_close(cache));

	/* the store holds the shadow: a fresh cache reads every row back */
	CHECK_OK(ember_cache_open(db, &o, &cache));
	for (uint32_t t = 0; t < NT; t++) {
		uint64_t *rows = malloc(ROWS[t] * sizeof(uint64_t));
		float *out = malloc(ROWS[t] * DIM[t] * 4), *sto = malloc(ROWS[t] * 4 * 4);
		CHECK(rows && out && sto, "malloc");
		for (uint64_t i = 0; i < ROWS[t]; i++)
			rows[i] = i;
		CHECK_OK(ember_cache_read_rows(cache, t, ROWS[t], rows, out, sto));
		for (uint64_t i = 0; i < ROWS[t]; i++)
			check_vals(t, i, out + i * DIM[t], sto + i * SF[t], "after reopen", nbatches);
		free(rows);
		free(out);
		free(sto);
	}
	CHECK_OK(ember_cache_close(cache));
	CHECK_OK(ember_close(db));
	for (uint32_t t = 0; t < NT; t++)
		free(shadow[t]);
	tu_tmpdir_remove(dir);
	printf("cache_loader: %llu batches, %llu reads, %llu writes, %llu flushes, %llu evictions: ok\n",
	       (unsigned long long)nbatches, (unsigned long long)reads, (unsigned long long)writes,
	       (unsigned long long)flushes, (unsigned long long)st.rows_evicted);
	return 0;
}
