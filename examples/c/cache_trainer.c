/*
 * cache_trainer.c - train embedding rows through Ember's embedding cache.
 *
 * One table of 20,000 rows of 16 floats in a store, a cache of 2,000 rows in front
 * of it, and a trainer that fits the rows it names (5,000) to target vectors: for each batch of
 * 256 random row ids it pushes batches ahead (the cache's lookahead), acquires
 * the batch (its rows are then resident), computes the loss 0.5 * |w - target|^2
 * and its gradient w - target, updates the rows with ember_cache_apply (SGD) and
 * releases the batch. Rows evicted while dirty go back to the store; the flush at
 * the end writes back the rest. It prints the loss of each tenth of the run, then
 * reads rows back through the store and checks that they moved to their targets.
 *
 *   cache_trainer [DIR]     (default: a new directory under /tmp; removed after)
 *
 * Exits 0 when the loss fell at least tenfold and the stored rows match.
 */
#include <ember.h>
#include <ember_cache.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROWS 20000u
#define DIM 16u
#define BATCH 256u
#define BATCHES 400u
#define WINDOW 16u
#define HOT 1500u  /* rows most lookups name */
#define WARM 5000u /* rows the rest name: more than the cache holds */

/* The value row r should learn: a fixed function of (r, j). */
static float target(uint64_t r, uint32_t j)
{
	return (float)((r * 7 + j * 3) % 11) / 10.0f - 0.5f;
}

/* The row ids of batch b: a fixed pseudo-random choice, three in four from the
 * HOT first rows, the rest from the WARM first (the other rows stay untouched). */
static void batch_rows(uint32_t b, uint64_t *rows)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (b + 1);
	for (uint32_t i = 0; i < BATCH; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		rows[i] = (x % 4) ? (x >> 8) % HOT : (x >> 8) % WARM;
	}
}

static int push(ember_cache *cache, uint32_t b)
{
	uint64_t rows[BATCH];
	batch_rows(b, rows);
	ember_cache_part part = { .table = 0, .n = BATCH, .rows = rows };
	ember_cache_batch batch = { .nparts = 1, .parts = &part };
	return ember_cache_push(cache, &batch); /* copies the ids */
}

/* Acquire batch b, apply one SGD step to its rows, release it; adds its loss. */
static int train_one(ember_cache *cache, double *loss)
{
	static float grads[BATCH * DIM];
	ember_cache_view v;
	int rc = ember_cache_acquire(cache, &v);
	if (rc < 0)
		return rc;
	const ember_cache_part *p = &v.parts[0];
	for (uint32_t i = 0; i < p->n; i++) {
		const float *w = ember_cache_row(&v, 0, i);
		for (uint32_t j = 0; j < DIM; j++) {
			float d = w[j] - target(p->rows[i], j);
			grads[i * DIM + j] = d;
			*loss += 0.5 * d * d;
		}
	}
	/* duplicates in the batch: their gradients are summed, each row updated once */
	ember_cache_update upd = { .lr = 0.3f };
	rc = ember_cache_apply(cache, &v, 0, grads, DIM, &upd);
	int rrc = ember_cache_release(cache, &v);
	return rc < 0 ? rc : rrc;
}

static int train(ember_cache *cache, double *first, double *last)
{
	uint32_t pushed = 0;
	double loss = 0;
	for (uint32_t b = 0; b < BATCHES; b++) {
		while (pushed < BATCHES && pushed < b + WINDOW) {
			int rc = push(cache, pushed);
			if (rc < 0)
				return rc;
			pushed++;
		}
		int rc = train_one(cache, &loss);
		if (rc < 0)
			return rc;
		if ((b + 1) % (BATCHES / 10) == 0) {
			double mean = loss / ((double)(BATCHES / 10) * BATCH);
			printf("batches %4u: loss %.6f\n", b + 1, mean);
			if (b + 1 == BATCHES / 10)
				*first = mean;
			*last = mean;
			loss = 0;
		}
	}
	return 0;
}

/* The hot rows, read back through a fresh cache after the flush: near their
 * targets (each was updated dozens of times). */
static int check_rows(ember_cache *cache)
{
	uint64_t rows[64];
	float out[64 * DIM];
	for (uint32_t i = 0; i < 64; i++)
		rows[i] = i * 23 % HOT;
	int rc = ember_cache_read_rows(cache, 0, 64, rows, out, NULL);
	if (rc < 0)
		return rc;
	double worst = 0;
	for (uint32_t i = 0; i < 64; i++)
		for (uint32_t j = 0; j < DIM; j++) {
			double d = fabs(out[i * DIM + j] - target(rows[i], j));
			worst = d > worst ? d : worst;
		}
	printf("largest distance of a hot row from its target: %.6f\n", worst);
	return worst < 0.05 ? 0 : 1;
}

static int open_cache(ember_db *db, ember_cache **cache)
{
	ember_cache_table table = { .rows = ROWS, .dim = DIM };
	ember_cache_options co;
	ember_cache_options_default(&co);
	co.tables = &table;
	co.ntables = 1;
	co.capacity = 2000;
	co.window = WINDOW;
	return ember_cache_open(db, &co, cache);
}

int main(int argc, char **argv)
{
	char tmp[] = "/tmp/ember-trainer-XXXXXX";
	const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
	if (!dir) {
		perror("mkdtemp");
		return 1;
	}
	ember_options opts;
	ember_options_default(&opts);
	opts.log_memory = 16u << 20;
	opts.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	ember_cache *cache = NULL;
	double first = 0, last = 0;
	int bad = 1;
	int rc = ember_open(dir, &opts, &db);
	if (rc == 0)
		rc = open_cache(db, &cache);
	if (rc == 0)
		rc = train(cache, &first, &last);
	if (rc == 0)
		rc = ember_cache_flush(cache); /* every update in the store */
	if (rc == 0) {
		ember_cache_stats st;
		ember_cache_stats_get(cache, &st);
		printf("rows fetched %llu, written back %llu, hits %llu of %llu\n",
		       (unsigned long long)st.rows_fetched, (unsigned long long)st.rows_written_back,
		       (unsigned long long)st.hits, (unsigned long long)st.unique_rows);
		int crc = ember_cache_close(cache);
		cache = NULL;
		rc = crc < 0 ? crc : open_cache(db, &cache);
	}
	if (rc == 0) {
		bad = check_rows(cache);
		if (bad < 0) {
			rc = bad;
			bad = 1;
		}
	}
	if (rc < 0)
		fprintf(stderr, "cache_trainer: %s\n", ember_strerror(rc));
	else if (!(last * 10 < first))
		fprintf(stderr, "cache_trainer: loss fell only from %f to %f\n", first, last);
	else if (bad)
		fprintf(stderr, "cache_trainer: the stored rows are not near their targets\n");
	int crc = ember_cache_close(cache); /* accepts NULL */
	if (ember_close(db) < 0 || crc < 0)
		rc = -1;
	if (argc <= 1) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cache_trainer: could not remove %s\n", dir);
	}
	return rc < 0 || bad || !(last * 10 < first) ? 1 : 0;
}
