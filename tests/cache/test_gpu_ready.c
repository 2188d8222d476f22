/*
 * test_gpu_ready.c - with GPU slots, waiting on a batch's `ready` event is enough to
 * see every earlier batch's updates, also when the trainer alternates streams
 * (cache.c, G5).
 *
 * Every batch looks up the same rows, so after the first fetch the rows stay in
 * their slots and nothing is installed between batches. Batch i is read and
 * updated on stream A (i even) or B (i odd): the stream waits on `ready`, gathers
 * the rows and copies them to the host, then sleeps in a host function (so the
 * update is still pending when the batch is released), adds 1 to every row with
 * scatter-apply and records `done`; the host sleeps a little before the release,
 * so the prefetcher has published batch i+1 (recorded its `ready`) before batch
 * i's release made the H2D stream wait on `done`. Batch i+1's reads, on the other
 * stream, must then see batch i's update: a `ready` recorded at publish time
 * only (before the release) lets them run during the sleep and read the rows
 * without it.
 *
 *   test_cache_gpu_ready host | cuda   (cuda: suite gpu, 77 without CUDA/device)
 */
#include "ember.h"
#include "ember_cache.h"
#include "ember_gpu.h"
#include "test_util.h"
#include "../gpu/gpu_test.h"

#include <time.h>

#define ROWS 16         /* looked up by every batch */
#define TABLE_ROWS 1024 /* the capacity is at most the tables' rows */
#define DIM 8

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void pending_update(void *arg)
{
	(void)arg;
	nap_ms(30); /* the trainer's slow kernel */
}

int main(int argc, char **argv)
{
	tu_init("test_cache_gpu_ready", argc, argv);
	int backend = gt_backend(argc, argv, "cache_gpu_ready");
	uint32_t nbatches = (uint32_t)tu_scaled(40);
	if (nbatches < 8)
		nbatches = 8;

	char dir[256];
	CHECK(tu_tmpdir_make("cache-gpu-ready", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options so;
	ember_options_default(&so);
	so.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &so, &db));
	ember_gpu *g = gt_open(backend);

	ember_cache_table tab = { .rows = TABLE_ROWS, .dim = DIM, .storage = EMBER_CACHE_STORE_FP32 };
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = &tab;
	o.ntables = 1;
	o.capacity = 16 * ROWS; /* room to plan batches ahead (inflight_fits) */
	o.window = 8;
	o.prefetch_batches = 4;
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu = g;
	ember_cache *c = NULL;
	CHECK_OK(ember_cache_open(db, &o, &c));

	ember_gpu_stream *st[2];
	ember_gpu_event *done[2];
	float *dev_out = NULL, *dev_grads = NULL, *h_out = NULL, *h_grads = NULL;
	size_t bytes = (size_t)ROWS * DIM * sizeof(float);
	for (int k = 0; k < 2; k++) {
		CHECK_OK(ember_gpu_stream_create(g, &st[k]));
		CHECK_OK(ember_gpu_event_create(g, &done[k]));
	}
	CHECK_OK(ember_gpu_mem_alloc(g, bytes, (void **)&dev_out));
	CHECK_OK(ember_gpu_mem_alloc(g, bytes, (void **)&dev_grads));
	CHECK_OK(ember_gpu_host_alloc(g, bytes, (void **)&h_out));
	CHECK_OK(ember_gpu_host_alloc(g, bytes, (void **)&h_grads));
	for (size_t j = 0; j < (size_t)ROWS * DIM; j++)
		h_grads[j] = -1.0f; /* SGD with lr 1: +1 */
	CHECK_OK(ember_gpu_copy_h2d(st[0], dev_grads, h_grads, bytes));
	CHECK_OK(ember_gpu_stream_synchronize(st[0]));

	uint64_t ids[ROWS];
	for (uint32_t i = 0; i < ROWS; i++)
		ids[i] = i;
	ember_cache_part part = { .table = 0, .n = ROWS, .rows = ids };
	ember_cache_batch batch = { .nparts = 1, .parts = &part };
	uint32_t pushed = 0;
	ember_gpu_update upd = { .optimizer = EMBER_GPU_OPT_SGD, .lr = 1.0f };
	for (uint32_t b = 0; b < nbatches; b++) {
		while (pushed < nbatches && pushed < b + o.window) {
			int rc = ember_cache_push(c, &batch);
			if (rc == EMBER_EAGAIN)
				break;
			CHECK_OK(rc);
			pushed++;
		}
		ember_cache_view v;
		CHECK_OK(ember_cache_acquire(c, &v));
		ember_gpu_stream *s = st[b % 2];
		/* read: ready is all this stream waits on */
		CHECK_OK(ember_gpu_stream_wait_event(s, v.ready));
		CHECK_OK(ember_gpu_gather(s, v.arena, v.dev_slots, ROWS, dev_out, 0));
		CHECK_OK(ember_gpu_copy_d2h(s, h_out, dev_out, bytes));
		CHECK_OK(ember_gpu_stream_synchronize(s));
		for (uint32_t i = 0; i < ROWS; i++)
			for (uint32_t j = 0; j < DIM; j++)
				CHECK(h_out[i * DIM + j] == (float)b,
				      "batch %u (stream %c) row %u elem %u: read %g, want %u: the "
				      "previous batch's update on the other stream was not "
				      "waited for",
				      b, "AB"[b % 2], i, j, (double)h_out[i * DIM + j], b);
		/* write: slow, still pending at the release */
		CHECK_OK(ember_gpu_stream_host_func(s, pending_update, NULL));
		CHECK_OK(ember_gpu_scatter_apply(s, v.arena, v.dev_slots, ROWS, dev_grads, &upd));
		CHECK_OK(ember_gpu_event_record(done[b % 2], s));
		v.done = done[b % 2];
		nap_ms(5); /* the prefetcher publishes batch b+1 meanwhile (it plans ahead) */
		CHECK_OK(ember_cache_release(c, &v));
	}
	for (int k = 0; k < 2; k++)
		CHECK_OK(ember_gpu_stream_synchronize(st[k]));
	CHECK_OK(ember_cache_flush(c));
	CHECK_OK(ember_cache_close(c));

	/* the store holds every update */
	ember_session *sess = NULL;
	CHECK_OK(ember_session_open(db, &sess));
	for (uint32_t i = 0; i < ROWS; i++) {
		uint8_t key[8];
		float val[DIM];
		size_t vlen = 0;
		uint64_t k = i; /* table 0 */
		for (int x = 0; x < 8; x++)
			key[x] = (uint8_t)(k >> (8 * x));
		CHECK_OK(ember_get(sess, key, 8, val, sizeof(val), &vlen));
		CHECK(vlen == sizeof(val), "row %u: %zu bytes", i, vlen);
		for (uint32_t j = 0; j < DIM; j++)
			CHECK(val[j] == (float)nbatches, "stored row %u elem %u: %g, want %u", i, j,
			      (double)val[j], nbatches);
	}
	CHECK_OK(ember_session_close(sess));

	for (int k = 0; k < 2; k++) {
		CHECK_OK(ember_gpu_event_destroy(done[k]));
		CHECK_OK(ember_gpu_stream_destroy(st[k]));
	}
	CHECK_OK(ember_gpu_mem_free(g, dev_out));
	CHECK_OK(ember_gpu_mem_free(g, dev_grads));
	CHECK_OK(ember_gpu_host_free(g, h_out));
	CHECK_OK(ember_gpu_host_free(g, h_grads));
	CHECK_OK(ember_gpu_close(g));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("cache_gpu_ready (%s): %u batches on alternating streams, each saw the one "
	       "before\n", backend == EMBER_GPU_BACKEND_CUDA ? "cuda" : "host", nbatches);
	return 0;
}
