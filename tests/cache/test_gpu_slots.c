/*
 * test_gpu_slots.c - the embedding cache with its slots in an ember_gpu arena
 * (EMBER_CACHE_SLOTS_GPU): every read through the cache still sees every earlier
 * update, with the trainer working on the device asynchronously.
 *
 * argv[1]: the ember_gpu backend, "host" (suite unit: plain memory and worker
 * threads, what CI runs) or "cuda" (suite gpu: exits 77 when built without CUDA or
 * when no device is present). argv[2] "stress": the trainer loop 4 times over.
 *
 * The trainer loop of test_consistency.c, done with ember_gpu calls only, on the
 * trainer's own stream:
 *   - wait on the view's `ready` event (the stream, not the host);
 *   - gather the batch tensor from the view's device slot array (lookup order,
 *     duplicates included), copy it to the host and check every lookup's row
 *     against the count of earlier updates (the padding beyond a narrower table's
 *     dim must be zero);
 *   - add 1 to every distinct row of the batch with scatter-apply SGD (lr 1,
 *     gradient -1 on the first lookup of each row, 0 on its duplicates: so
 *     duplicate summing is exercised too), sometimes behind a host function
 *     that sleeps (the update is then still pending when the batch is released);
 *   - release with the stream's `done` event (most batches: the cache must order
 *     its evictions and refills after it), or synchronize and release with NULL.
 * Capacity far below the distinct rows, so rows are evicted dirty (copied back
 * on the D2H stream), written back and fetched again many times; some batches are
 * READONLY; flushes in the middle check the store; halfway the cache is closed
 * and reopened with a context of its own (gpu = NULL) instead of the caller's;
 * at the end every row in the store equals its count (fp32 and fp16 tables).
 * Also checked: the device slot array equals the host slots[][] of the view; on
 * the host backend, ember_cache_row() points at the row the gather returned.
 *
 * Before it: the bad inputs of the GPU options and of release's `done`; and the
 * same rows (stored fp32 and fp16 values, absent rows initialised at random)
 * fetched through host slots and through GPU slots must be bit-identical.
 */
#include "cache/slot_store.h"
#include "ember.h"
#include "ember_cache.h"
#include "ember_gpu.h"
#include "test_util.h"
#include "trace.h"
#include "../gpu/gpu_test.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consistency_fixture.h"

#define NL (NT * BATCH) /* lookups per batch */

/* The trainer's device objects, bound to one context (the slots'). */
struct trainer {
	ember_gpu *g;
	ember_gpu_stream *s;
	ember_gpu_event *done;
	float *dev_out, *dev_grads;
	uint32_t *dev_idx;
	float *h_out, *h_grads; /* pinned */
	uint32_t *h_idx;        /* pinned */
	uint32_t *h_groups;     /* pinned: the view's groups (slots, offsets, order) */
};

static void trainer_bind(struct trainer *tr, ember_gpu *g)
{
	if (tr->g == g)
		return;
	CHECK(tr->g == NULL, "trainer bound to another context");
	tr->g = g;
	CHECK_OK(ember_gpu_stream_create(g, &tr->s));
	CHECK_OK(ember_gpu_event_create(g, &tr->done));
	size_t rows = (size_t)NL * MAXDIM * sizeof(float);
	CHECK_OK(ember_gpu_mem_alloc(g, rows, (void **)&tr->dev_out));
	CHECK_OK(ember_gpu_mem_alloc(g, rows, (void **)&tr->dev_grads));
	CHECK_OK(ember_gpu_mem_alloc(g, NL * sizeof(uint32_t), (void **)&tr->dev_idx));
	CHECK_OK(ember_gpu_host_alloc(g, rows, (void **)&tr->h_out));
	CHECK_OK(ember_gpu_host_alloc(g, rows, (void **)&tr->h_grads));
	CHECK_OK(ember_gpu_host_alloc(g, NL * sizeof(uint32_t), (void **)&tr->h_idx));
	CHECK_OK(ember_gpu_host_alloc(g, (3 * (size_t)NL + 1) * sizeof(uint32_t),
				      (void **)&tr->h_groups));
}

static void trainer_unbind(struct trainer *tr)
{
	if (!tr->g)
		return;
	CHECK_OK(ember_gpu_stream_synchronize(tr->s));
	CHECK_OK(ember_gpu_stream_destroy(tr->s));
	CHECK_OK(ember_gpu_event_destroy(tr->done));
	CHECK_OK(ember_gpu_mem_free(tr->g, tr->dev_out));
	CHECK_OK(ember_gpu_mem_free(tr->g, tr->dev_grads));
	CHECK_OK(ember_gpu_mem_free(tr->g, tr->dev_idx));
	CHECK_OK(ember_gpu_host_free(tr->g, tr->h_out));
	CHECK_OK(ember_gpu_host_free(tr->g, tr->h_grads));
	CHECK_OK(ember_gpu_host_free(tr->g, tr->h_idx));
	CHECK_OK(ember_gpu_host_free(tr->g, tr->h_groups));
	memset(tr, 0, sizeof(*tr));
}

static void nap(void *arg)
{
	(void)arg;
	struct timespec ts = {0, 300000}; /* the update stays pending past the release */
	nanosleep(&ts, NULL);
}

static ember_cache_table g_tabs[NT];

static void base_opts(ember_cache_options *o)
{
	for (int t = 0; t < NT; t++)
		g_tabs[t] = (ember_cache_table){.rows = ROWS[t], .dim = DIM[t], .storage = STORAGE[t]};
	ember_cache_options_default(o);
	o->tables = g_tabs;
	o->ntables = NT;
	o->capacity = CAPACITY;
	o->window = WINDOW;
	o->prefetch_batches = 4;
}

/* One batch of the trainer. Returns 1 if it updated the rows. */
static int train_batch(struct trainer *tr, ember_cache_view *v, const struct trace *trc,
		       uint32_t b, int backend, tu_rng *rng, uint32_t *slot_stamp)
{
	CHECK(v->gpu && v->arena && v->ready && v->dev_slots, "GPU fields of the view");
	CHECK(v->nlookups == NL && v->nparts == NT, "nlookups %llu", (unsigned long long)v->nlookups);
	ember_gpu_arena_info ai;
	CHECK_OK(ember_gpu_arena_query(v->arena, &ai));
	CHECK(v->slot_memory == ai.base && v->slot_stride == ai.stride && ai.dim == MAXDIM &&
		      ai.slots == CAPACITY,
	      "slot memory is the arena");
	trainer_bind(tr, v->gpu);
	size_t rowb = MAXDIM * sizeof(float);

	/* read: the stream waits on ready, gathers, copies out */
	CHECK_OK(ember_gpu_stream_wait_event(tr->s, v->ready));
	CHECK_OK(ember_gpu_gather(tr->s, v->arena, v->dev_slots, NL, tr->dev_out, 0));
	CHECK_OK(ember_gpu_copy_d2h(tr->s, tr->h_out, tr->dev_out, NL * rowb));
	int check_idx = b % 8 == 0;
	uint32_t ng = v->ngroups;
	CHECK(ng >= 1 && ng <= NL && v->dev_group_slots && v->dev_group_offsets &&
		      v->dev_group_order,
	      "the view's groups");
	uint32_t *gs = tr->h_groups, *goff = gs + ng, *order = goff + ng + 1;
	if (check_idx) {
		CHECK_OK(ember_gpu_copy_d2h(tr->s, tr->h_idx, v->dev_slots, NL * sizeof(uint32_t)));
		CHECK_OK(ember_gpu_copy_d2h(tr->s, gs, v->dev_group_slots, ng * sizeof(uint32_t)));
		CHECK_OK(ember_gpu_copy_d2h(tr->s, goff, v->dev_group_offsets,
					    (ng + 1) * sizeof(uint32_t)));
		CHECK_OK(ember_gpu_copy_d2h(tr->s, order, v->dev_group_order, NL * sizeof(uint32_t)));
	}
	CHECK_OK(ember_gpu_stream_synchronize(tr->s));
	if (check_idx) {
		/* the groups partition the lookups by slot, each in increasing lookup order,
		 * and name distinct slots */
		static uint32_t seen[CAPACITY];
		static uint32_t stamp;
		stamp++;
		CHECK(goff[0] == 0 && goff[ng] == NL, "group offsets 0 .. %u", goff[ng]);
		for (uint32_t g = 0; g < ng; g++) {
			CHECK(goff[g] < goff[g + 1], "group %u empty or offsets decreasing", g);
			CHECK(gs[g] < CAPACITY && seen[gs[g]] != stamp, "group %u slot %u repeated", g,
			      gs[g]);
			seen[gs[g]] = stamp;
			for (uint32_t q = goff[g]; q < goff[g + 1]; q++) {
				CHECK(order[q] < NL && tr->h_idx[order[q]] == gs[g],
				      "group %u lists lookup %u of another slot", g, order[q]);
				CHECK(q == goff[g] || order[q - 1] < order[q],
				      "group %u not in lookup order", g);
			}
		}
		uint32_t distinct = 0;
		stamp++;
		for (uint32_t i = 0; i < NL; i++)
			if (seen[tr->h_idx[i]] != stamp) {
				seen[tr->h_idx[i]] = stamp;
				distinct++;
			}
		CHECK(distinct == ng, "%u groups for %u distinct slots", ng, distinct);
	}

	int readonly = tu_rng_chance(rng, 1, 10);
	memset(tr->h_grads, 0, NL * rowb);
	uint32_t at = 0;
	for (uint32_t p = 0; p < v->nparts; p++) {
		uint32_t t = v->parts[p].table;
		const uint32_t *src = trace_ids(trc, b, t);
		CHECK(v->parts[p].n == BATCH, "part size");
		for (uint32_t i = 0; i < BATCH; i++, at++) {
			uint64_t row = v->parts[p].rows[i];
			CHECK(row == src[i], "the view's ids are the pushed ids");
			uint32_t s = v->slots[p][i];
			CHECK(s < CAPACITY, "slot %u out of range", s);
			if (check_idx)
				CHECK(tr->h_idx[at] == s, "dev_slots[%u] = %u, slots[%u][%u] = %u", at,
				      tr->h_idx[at], p, i, s);
			const float *x = tr->h_out + (size_t)at * MAXDIM;
			/* every lookup (duplicates too) gathered the same, current row */
			for (uint32_t j = 0; j < DIM[t]; j++)
				CHECK(x[j] == (float)ref[t][row],
				      "batch %u table %u row %llu elem %u: read %g, want %u", b, t,
				      (unsigned long long)row, j, x[j], ref[t][row]);
			for (uint32_t j = DIM[t]; j < MAXDIM; j++)
				CHECK(x[j] == 0.0f, "padding of table %u row %llu elem %u = %g", t,
				      (unsigned long long)row, j, x[j]);
			if (backend == EMBER_GPU_BACKEND_HOST && i == 0)
				CHECK(ember_cache_row(v, p, i)[0] == x[0], "ember_cache_row");
		}
	}
	/* the gradients: -1 on each distinct row's first lookup */
	at = 0;
	for (uint32_t p = 0; p < v->nparts; p++) {
		uint32_t t = v->parts[p].table;
		for (uint32_t i = 0; i < BATCH; i++, at++) {
			uint32_t s = v->slots[p][i];
			if (slot_stamp[s] == b + 1)
				continue; /* a duplicate: gradient 0 */
			slot_stamp[s] = b + 1;
			if (readonly)
				continue;
			for (uint32_t j = 0; j < DIM[t]; j++)
				tr->h_grads[(size_t)at * MAXDIM + j] = -1.0f;
			ref[t][v->parts[p].rows[i]]++;
		}
	}
	if (readonly) {
		v->flags |= EMBER_CACHE_VIEW_READONLY;
		return 0;
	}
	/* write: gradients up, scatter-apply SGD with lr 1 (w -= -1) */
	ember_gpu_update upd = {.optimizer = EMBER_GPU_OPT_SGD, .lr = 1.0f};
	CHECK_OK(ember_gpu_copy_h2d(tr->s, tr->dev_grads, tr->h_grads, NL * rowb));
	if (tu_rng_chance(rng, 1, 6))
		CHECK_OK(ember_gpu_stream_host_func(tr->s, nap, NULL));
	if (b % 2) /* the grouped form on odd batches: the same rows, no device sort */
		CHECK_OK(ember_gpu_scatter_apply_grouped(tr->s, v->arena, v->dev_group_slots,
							 v->dev_group_offsets, v->ngroups,
							 v->dev_group_order, NL, NL,
							 tr->dev_grads, &upd));
	else
		CHECK_OK(ember_gpu_scatter_apply(tr->s, v->arena, v->dev_slots, NL, tr->dev_grads,
						 &upd));
	if (tu_rng_chance(rng, 1, 5)) {
		CHECK_OK(ember_gpu_stream_synchronize(tr->s));
		v->done = NULL; /* the work is complete */
	} else {
		CHECK_OK(ember_gpu_event_record(tr->done, tr->s));
		v->done = tr->done; /* still pending, maybe: the cache waits on it */
	}
	return 1;
}

static void consistency(int backend)
{
	tu_rng *rng = tu_rng_global();
	uint32_t nbatches = (uint32_t)tu_scaled(1500);
	if (nbatches < 200)
		nbatches = 200;
	struct trace_params tp;
	struct trace trc;
	trace_params_default(&tp);
	tp.ntables = NT;
	tp.rows = ROWS;
	tp.batch_size = BATCH;
	tp.nbatches = nbatches;
	tp.skew = 0.9;
	static uint64_t round_no; /* each round its own trace */
	tp.seed = tu_seed() + round_no++;
	CHECK(trace_generate(&tp, &trc) == 0, "trace_generate");

	char dir[256];
	CHECK(tu_tmpdir_make("cache-gpu-slots", dir, sizeof(dir)) == 0, "tmpdir");
	ember_db *db = NULL;
	ember_session *vs = NULL;
	open_store(dir, &db);
	CHECK_OK(ember_session_open(db, &vs));
	for (int t = 0; t < NT; t++) {
		ref[t] = calloc(ROWS[t], sizeof(uint32_t));
		CHECK(ref[t], "calloc");
	}
	uint32_t *slot_stamp = calloc(CAPACITY, sizeof(uint32_t));
	CHECK(slot_stamp, "calloc");

	/* first half: the caller's context (borrowed) */
	ember_gpu *g0 = gt_open(backend);
	ember_cache_options o;
	base_opts(&o);
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu = g0;
	o.prefetch_depth = 32;
	ember_cache *c = NULL;
	CHECK_OK(ember_cache_open(db, &o, &c));
	CHECK_RC(ember_gpu_close(g0), EMBER_EBUSY); /* the cache's arena lives in it */

	struct trainer tr = {0};
	uint64_t ids[NT][BATCH];
	ember_cache_part parts[NT];
	uint32_t pushed = 0, base = 0, updated = 0, spins = 0;
	ember_cache_stats st0 = {0};
	for (uint32_t b = 0; b < nbatches; b++) {
		while (pushed < nbatches) {
			for (int t = 0; t < NT; t++) {
				const uint32_t *src = trace_ids(&trc, pushed, t);
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
				struct timespec ts = {0, 20000};
				spins++;
				nanosleep(&ts, NULL);
			}
			CHECK_OK(rc);
		}
		CHECK(v.batch == b - base, "acquired batch %llu, want %u", (unsigned long long)v.batch,
		      b - base);
		CHECK(v.done == NULL, "acquire clears done");
		updated += (uint32_t)train_batch(&tr, &v, &trc, b, backend, rng, slot_stamp);
		CHECK_OK(ember_cache_release(c, &v));

		if (b % 97 == 96) {
			CHECK_OK(ember_cache_flush(c));
			for (int k = 0; k < 200; k++) {
				uint32_t t = (uint32_t)tu_rng_below(rng, NT);
				check_store_row(vs, t, tu_rng_below(rng, ROWS[t]), "after flush");
			}
		}
		if (b == nbatches / 2) {
			CHECK_OK(ember_cache_stats_get(c, &st0));
			CHECK(st0.rows_evicted > 0 && st0.rows_written_back > 0,
			      "evicted %llu written back %llu", (unsigned long long)st0.rows_evicted,
			      (unsigned long long)st0.rows_written_back);
			/* the trainer's objects outlive nothing of the cache's: unbind */
			trainer_unbind(&tr);
			CHECK_OK(ember_cache_close(c));
			CHECK_OK(ember_gpu_close(g0)); /* the caller closes what it lent */
			/* second half: the cache's own context */
			base_opts(&o);
			o.slots = EMBER_CACHE_SLOTS_GPU;
			o.gpu_backend = backend;
			o.prefetch_depth = 7;
			CHECK_OK(ember_cache_open(db, &o, &c));
			pushed = b + 1;
			base = b + 1;
			memset(slot_stamp, 0, CAPACITY * sizeof(uint32_t));
		}
	}
	ember_cache_stats st;
	CHECK_OK(ember_cache_stats_get(c, &st));
	CHECK(st.rows_evicted > 0 && st.rows_written_back > 0, "second cache evicted nothing");
	trainer_unbind(&tr); /* before close: the cache closes its own context */
	CHECK_OK(ember_cache_close(c));

	uint64_t touched = 0;
	for (uint32_t t = 0; t < NT; t++)
		for (uint64_t r = 0; r < ROWS[t]; r++) {
			check_store_row(vs, t, r, "at the end");
			touched += ref[t][r] != 0;
		}
	printf("cache_gpu_slots (%s): %u batches (%u updated, %u try_acquire spins), %llu rows "
	       "updated; first cache: fetched %llu, evicted %llu, written back %llu; second: "
	       "fetched %llu, evicted %llu, written back %llu\n",
	       backend == EMBER_GPU_BACKEND_CUDA ? "cuda" : "host", nbatches, updated, spins,
	       (unsigned long long)touched, (unsigned long long)st0.rows_fetched,
	       (unsigned long long)st0.rows_evicted, (unsigned long long)st0.rows_written_back,
	       (unsigned long long)st.rows_fetched, (unsigned long long)st.rows_evicted,
	       (unsigned long long)st.rows_written_back);
	CHECK_OK(ember_session_close(vs));
	CHECK_OK(ember_close(db));
	for (int t = 0; t < NT; t++)
		free(ref[t]);
	free(slot_stamp);
	trace_free(&trc);
	tu_tmpdir_remove(dir);
}

static int push_rows(ember_cache *c, uint32_t table, const uint64_t *rows, uint32_t n)
{
	ember_cache_part p = {.table = table, .n = n, .rows = rows};
	ember_cache_batch b = {.nparts = 1, .parts = &p};
	return ember_cache_push(c, &b);
}

static void bad_inputs(int backend)
{
	char dir[256];
	CHECK(tu_tmpdir_make("cache-gpu-errors", dir, sizeof(dir)) == 0, "tmpdir");
	ember_db *db = NULL;
	open_store(dir, &db);
	ember_gpu *g = gt_open(backend);
	ember_gpu *other = gt_open(EMBER_GPU_BACKEND_HOST);
	ember_cache *c = NULL;
	ember_cache_options o;

	/* device options with host slots */
	base_opts(&o);
	o.gpu = g;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.gpu_backend = EMBER_GPU_BACKEND_HOST;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	base_opts(&o);
	o.gpu_device = 1;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	/* a context and a backend/device to open one: which? */
	base_opts(&o);
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu = g;
	o.gpu_backend = backend;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	o.gpu_backend = 0;
	o.gpu_device = 2;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	/* unknown backend, negative device */
	base_opts(&o);
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu_backend = 3;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	o.gpu_backend = -1;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	o.gpu_backend = 0;
	o.gpu_device = -1;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	/* CUDA asked for where it cannot run (not built, or no such device) */
	o.gpu_device = ember_gpu_device_count(); /* one past the last device */
	o.gpu_backend = EMBER_GPU_BACKEND_CUDA;
	CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
	CHECK(c == NULL, "*cache set on failure");

	/* host slots: the GPU fields of the view are empty */
	base_opts(&o);
	CHECK_OK(ember_cache_open(db, &o, &c));
	uint64_t rows[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	CHECK_OK(push_rows(c, 0, rows, 8));
	ember_cache_view v;
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(!v.gpu && !v.arena && !v.dev_slots && !v.ready && v.nlookups == 8,
	      "host slots: no device fields");
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_close(c));

	/* GPU slots, the caller's context */
	base_opts(&o);
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu = g;
	CHECK_OK(ember_cache_open(db, &o, &c));
	/* more lookups than the kernels take: refused before the ids are read */
	ember_cache_part huge = {.table = 0, .n = 0x80000000u, .rows = rows};
	ember_cache_batch hb = {.nparts = 1, .parts = &huge};
	CHECK_RC(ember_cache_push(c, &hb), EMBER_ETOOBIG);
	CHECK_OK(push_rows(c, 0, rows, 8));
	CHECK_OK(push_rows(c, 3, rows, 4));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.gpu == g && v.arena && v.dev_slots && v.ready && v.nlookups == 8, "GPU view");
	/* done from another context: refused, the batch stays acquired */
	ember_gpu_event *foreign = NULL, *mine = NULL;
	CHECK_OK(ember_gpu_event_create(other, &foreign));
	v.done = foreign;
	CHECK_RC(ember_cache_release(c, &v), EMBER_EINVAL);
	CHECK_RC(ember_cache_flush(c), EMBER_ESTATE); /* still acquired */
	/* a never-recorded event is complete (rule 3): fine */
	CHECK_OK(ember_gpu_event_create(g, &mine));
	v.done = mine;
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_RC(ember_cache_release(c, &v), EMBER_ESTATE);
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.nlookups == 4 && v.done == NULL, "second batch");
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_flush(c));
	CHECK_RC(ember_gpu_close(g), EMBER_EBUSY);
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_gpu_event_destroy(mine));
	CHECK_OK(ember_gpu_event_destroy(foreign));

	/* the cache's own context, closed with it */
	base_opts(&o);
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu_backend = backend;
	CHECK_OK(ember_cache_open(db, &o, &c));
	CHECK_OK(push_rows(c, 1, rows, 8));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK(v.gpu && v.gpu != g && ember_gpu_backend(v.gpu) == backend, "own context");
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_close(c));

	CHECK_OK(ember_gpu_close(other));
	CHECK_OK(ember_gpu_close(g));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

/*
 * The same rows through host slots and through GPU slots: rows in the store (fp32
 * and fp16 values) and absent rows initialised uniformly at random must arrive
 * bit-identical, the padding beyond a narrower table's dim zero.
 */
static void same_as_host(int backend)
{
	char dir[256];
	CHECK(tu_tmpdir_make("cache-gpu-same", dir, sizeof(dir)) == 0, "tmpdir");
	ember_db *db = NULL;
	ember_session *s = NULL;
	open_store(dir, &db);
	CHECK_OK(ember_session_open(db, &s));
	tu_rng *rng = tu_rng_global();
	/* every table: rows 0..29 requested, the even ones stored with random values */
	enum { R = 30 };
	uint64_t rows[R];
	for (uint32_t i = 0; i < R; i++)
		rows[i] = i;
	for (uint32_t t = 0; t < NT; t++)
		for (uint32_t r = 0; r < R; r += 2) {
			uint8_t key[8], val[64];
			uint64_t k = (uint64_t)t << 48 | r;
			for (int i = 0; i < 8; i++)
				key[i] = (uint8_t)(k >> (8 * i));
			for (uint32_t j = 0; j < DIM[t]; j++) {
				float f = (float)tu_rng_below(rng, 1u << 20) / 1024.0f - 512.0f;
				if (STORAGE[t] == EMBER_CACHE_STORE_FP16) {
					uint16_t h = slot_f32_to_f16(f);
					memcpy(val + 2 * j, &h, 2);
				} else {
					memcpy(val + 4 * j, &f, 4);
				}
			}
			CHECK_OK(ember_put(s, key, 8, val, slot_row_bytes(DIM[t], STORAGE[t])));
		}
	ember_cache_part parts[NT];
	for (uint32_t t = 0; t < NT; t++)
		parts[t] = (ember_cache_part){.table = t, .n = R, .rows = rows};
	ember_cache_batch batch = {.nparts = NT, .parts = parts};
	static float host_rows[NT * R][MAXDIM], dev_rows[NT * R][MAXDIM];

	for (int gpu = 0; gpu < 2; gpu++) {
		ember_cache_options o;
		base_opts(&o);
		o.init = EMBER_CACHE_INIT_UNIFORM;
		o.init_scale = 3.0f;
		o.init_seed = tu_seed();
		o.prefetch_depth = 13; /* several rounds */
		if (gpu) {
			o.slots = EMBER_CACHE_SLOTS_GPU;
			o.gpu_backend = backend;
		}
		ember_cache *c = NULL;
		CHECK_OK(ember_cache_open(db, &o, &c));
		CHECK_OK(ember_cache_push(c, &batch));
		ember_cache_view v;
		CHECK_OK(ember_cache_acquire(c, &v));
		if (!gpu) {
			for (uint32_t p = 0, at = 0; p < NT; p++)
				for (uint32_t i = 0; i < R; i++, at++)
					memcpy(host_rows[at], ember_cache_row(&v, p, i),
					       DIM[p] * sizeof(float));
		} else {
			struct trainer tr = {0};
			trainer_bind(&tr, v.gpu);
			CHECK(v.nlookups == NT * R, "nlookups");
			CHECK_OK(ember_gpu_stream_wait_event(tr.s, v.ready));
			CHECK_OK(ember_gpu_memset(tr.s, tr.dev_out, 0xff, NT * R * MAXDIM * 4));
			CHECK_OK(ember_gpu_gather(tr.s, v.arena, v.dev_slots, NT * R, tr.dev_out, 0));
			CHECK_OK(ember_gpu_copy_d2h(tr.s, dev_rows, tr.dev_out, sizeof(dev_rows)));
			CHECK_OK(ember_gpu_stream_synchronize(tr.s));
			trainer_unbind(&tr);
		}
		v.flags |= EMBER_CACHE_VIEW_READONLY;
		CHECK_OK(ember_cache_release(c, &v));
		CHECK_OK(ember_cache_close(c));
	}
	uint32_t nonzero = 0;
	for (uint32_t p = 0, at = 0; p < NT; p++)
		for (uint32_t i = 0; i < R; i++, at++) {
			CHECK(memcmp(host_rows[at], dev_rows[at], DIM[p] * sizeof(float)) == 0,
			      "table %u row %u differs between host and GPU slots (%g vs %g)", p, i,
			      host_rows[at][0], dev_rows[at][0]);
			for (uint32_t j = DIM[p]; j < MAXDIM; j++)
				CHECK(dev_rows[at][j] == 0.0f, "padding table %u row %u", p, i);
			nonzero += host_rows[at][0] != 0.0f;
		}
	CHECK(nonzero > NT * R / 2, "the rows are not all zero (%u)", nonzero);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

int main(int argc, char **argv)
{
	tu_init("cache_gpu_slots", argc, argv);
	int backend = gt_backend(argc, argv, "cache_gpu_slots");
	bad_inputs(backend);
	same_as_host(backend);
	/* "stress" (suite stress): the loop 4 times over. Not longer traces: the fp16
	 * table's hottest rows would pass 2048 updates, beyond exact integers. */
	uint64_t rounds = gt_stress(argc, argv) / 2;
	if (rounds == 0)
		rounds = 1;
	for (uint64_t r = 0; r < rounds; r++)
		consistency(backend);
	printf("cache_gpu_slots: ok\n");
	return 0;
}
