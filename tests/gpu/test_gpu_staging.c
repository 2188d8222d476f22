/*
 * test_gpu_staging.c - the pinned staging ring:
 *
 *   1. states: FIFO reuse (the buffer released longest ago comes back first),
 *      try_acquire's EAGAIN when all are HELD, ESTATE for a double release or an
 *      upload from a FREE buffer, EBUSY for destroying a ring with a HELD buffer,
 *      the same pointer for the same index every time.
 *   2. reuse under threads: 4 threads share a 3-buffer ring and the context's H2D
 *      stream. Each fills a buffer with its own pattern, delays the stream a little
 *      (so the copy is still pending when the buffer is released), uploads it to
 *      its device buffer with an event, then reads the device buffer back and
 *      checks the pattern. If the ring ever handed out a buffer before the copy
 *      reading it had run, another thread's pattern would land in the copy.
 *   3. download (write-back) path: device -> HELD buffer on the D2H stream, event,
 *      then read the buffer.
 *
 *   test_gpu_staging host | cuda [stress]   (cuda: suite gpu, exits 77 without a
 *                                            device; stress: 8x the loops)
 */
#include "gpu_test.h"

#include <pthread.h>
#include <time.h>

#define THREADS 4
#define BUFFERS 3
#define BYTES 4096u

static uint64_t stress = 1; /* gt_stress */

static void test_states(ember_gpu *g)
{
	ember_gpu_staging_options o = { .buffer_bytes = 1000, .buffers = BUFFERS };
	ember_gpu_staging *st = NULL;
	uint32_t idx[BUFFERS + 1];
	void *ptr[BUFFERS + 1];
	void *seen[BUFFERS] = { 0 };
	ember_gpu_stream *s = gt_compute(g);

	CHECK_OK(ember_gpu_staging_create(g, &o, &st));
	for (int i = 0; i < BUFFERS; i++) {
		CHECK_OK(ember_gpu_staging_acquire(st, &idx[i], &ptr[i]));
		CHECK(idx[i] < BUFFERS && seen[idx[i]] == NULL, "index %u twice", idx[i]);
		CHECK(((uintptr_t)ptr[i] & 63) == 0, "buffer not 64-byte aligned");
		seen[idx[i]] = ptr[i];
	}
	CHECK_RC(ember_gpu_staging_try_acquire(st, &idx[BUFFERS], &ptr[BUFFERS]), EMBER_EAGAIN);
	CHECK_RC(ember_gpu_staging_destroy(st), EMBER_EBUSY);

	/* Release 2, then 0 (against a stream), then 1: they come back in that order. */
	CHECK_OK(ember_gpu_staging_release(st, idx[2], NULL));
	CHECK_RC(ember_gpu_staging_release(st, idx[2], NULL), EMBER_ESTATE);
	CHECK_OK(ember_gpu_staging_release(st, idx[0], s));
	CHECK_OK(ember_gpu_staging_release(st, idx[1], NULL));
	CHECK_RC(ember_gpu_staging_release(st, BUFFERS, NULL), EMBER_EINVAL);
	void *dev = NULL;
	CHECK_OK(ember_gpu_mem_alloc(g, 1000, &dev));
	CHECK_RC(ember_gpu_staging_upload(st, idx[1], s, dev, 10, NULL), EMBER_ESTATE);
	uint32_t want[BUFFERS] = { idx[2], idx[0], idx[1] };
	for (int i = 0; i < BUFFERS; i++) {
		uint32_t k;
		void *p;
		CHECK_OK(ember_gpu_staging_try_acquire(st, &k, &p));
		CHECK(k == want[i], "acquire %d got buffer %u, want %u (release order)", i, k,
		      want[i]);
		CHECK(p == seen[k], "buffer %u moved", k);
		CHECK_RC(ember_gpu_staging_upload(st, k, s, dev, 1001, NULL), EMBER_EINVAL);
		CHECK_OK(ember_gpu_staging_upload(st, k, s, dev, 1000, NULL));
	}
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_OK(ember_gpu_mem_free(g, dev));
	CHECK_OK(ember_gpu_staging_destroy(st));
	printf("states: fifo reuse, EAGAIN, ESTATE, EBUSY ok\n");
}

typedef struct reuse_arg {
	ember_gpu *g;
	ember_gpu_staging *st;
	ember_gpu_stream *h2d;
	uint32_t iters;
	uint32_t thread;
	void *seen[BUFFERS]; /* pointer per index as this thread saw it */
} reuse_arg;

static void delay_cb(void *p)
{
	long us = (long)(intptr_t)p;
	struct timespec ts = { 0, us * 1000 };
	nanosleep(&ts, NULL);
}

static void *reuse_thread(void *p)
{
	reuse_arg *a = p;
	tu_rng r;
	tu_rng_stream(&r, a->thread + 1);
	ember_gpu_stream *own = NULL;
	ember_gpu_event *done = NULL;
	void *dev = NULL;
	uint32_t *check = gt_malloc(BYTES);
	CHECK_OK(ember_gpu_stream_create(a->g, &own));
	CHECK_OK(ember_gpu_event_create(a->g, &done));
	CHECK_OK(ember_gpu_mem_alloc(a->g, BYTES, &dev));

	for (uint32_t i = 0; i < a->iters; i++) {
		uint32_t k;
		void *buf;
		if (tu_rng_chance(&r, 1, 2)) {
			int rc;
			while ((rc = ember_gpu_staging_try_acquire(a->st, &k, &buf)) == EMBER_EAGAIN)
				sched_yield();
			CHECK_OK(rc);
		} else {
			CHECK_OK(ember_gpu_staging_acquire(a->st, &k, &buf));
		}
		CHECK(k < BUFFERS, "index %u", k);
		CHECK(a->seen[k] == NULL || a->seen[k] == buf, "buffer %u moved", k);
		a->seen[k] = buf;
		uint32_t tag = a->thread << 24 | (i & 0xffffff);
		uint32_t words = BYTES / 4;
		for (uint32_t w = 0; w < words; w++)
			((uint32_t *)buf)[w] = tag ^ w;
		if (tu_rng_chance(&r, 1, 4)) /* keep the copy pending for a while */
			CHECK_OK(ember_gpu_stream_host_func(a->h2d, delay_cb,
							    (void *)(intptr_t)tu_rng_below(&r, 300)));
		CHECK_OK(ember_gpu_staging_upload(a->st, k, a->h2d, dev, BYTES, done));
		/* Read back on this thread's stream after the upload's event. */
		CHECK_OK(ember_gpu_stream_wait_event(own, done));
		CHECK_OK(ember_gpu_copy_d2h(own, check, dev, BYTES));
		CHECK_OK(ember_gpu_stream_synchronize(own));
		for (uint32_t w = 0; w < words; w++)
			CHECK(check[w] == (tag ^ w),
			      "thread %u iter %u word %u: %08x, want %08x (buffer reused early)",
			      a->thread, i, w, check[w], tag ^ w);
	}
	CHECK_OK(ember_gpu_mem_free(a->g, dev));
	CHECK_OK(ember_gpu_event_destroy(done));
	CHECK_OK(ember_gpu_stream_destroy(own));
	free(check);
	return NULL;
}

static void test_reuse(ember_gpu *g)
{
	ember_gpu_staging_options o = { .buffer_bytes = BYTES, .buffers = BUFFERS };
	ember_gpu_staging *st = NULL;
	ember_gpu_stream *h2d = NULL;
	pthread_t th[THREADS];
	reuse_arg args[THREADS];
	uint32_t iters = (uint32_t)tu_scaled(1500 * stress);

	CHECK_OK(ember_gpu_staging_create(g, &o, &st));
	CHECK_OK(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 0, &h2d));
	for (uint32_t t = 0; t < THREADS; t++) {
		args[t] = (reuse_arg){ .g = g, .st = st, .h2d = h2d, .iters = iters, .thread = t };
		CHECK(pthread_create(&th[t], NULL, reuse_thread, &args[t]) == 0, "pthread_create");
	}
	for (uint32_t t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	CHECK_OK(ember_gpu_staging_destroy(st));
	printf("reuse: %d threads x %u uploads through %d buffers ok\n", THREADS, iters, BUFFERS);
}

static void test_download(ember_gpu *g)
{
	ember_gpu_staging *st = NULL;
	ember_gpu_stream *d2h = NULL;
	ember_gpu_event *done = NULL;
	uint32_t src[256];
	for (uint32_t i = 0; i < 256; i++)
		src[i] = i * 2654435761u;
	void *dev = gt_upload(g, src, sizeof(src));
	CHECK_OK(ember_gpu_staging_create(g, NULL, &st));
	CHECK_OK(ember_gpu_stream_get(g, EMBER_GPU_STREAM_D2H, 0, &d2h));
	CHECK_OK(ember_gpu_event_create(g, &done));
	uint32_t k;
	void *buf;
	CHECK_OK(ember_gpu_staging_acquire(st, &k, &buf));
	CHECK_RC(ember_gpu_staging_download(st, k, d2h, dev, sizeof(src), NULL), EMBER_EINVAL);
	CHECK_OK(ember_gpu_staging_download(st, k, d2h, dev, sizeof(src), done));
	CHECK_OK(ember_gpu_event_synchronize(done));
	CHECK(memcmp(buf, src, sizeof(src)) == 0, "downloaded rows differ");
	CHECK_OK(ember_gpu_staging_release(st, k, NULL));
	CHECK_OK(ember_gpu_event_destroy(done));
	CHECK_OK(ember_gpu_staging_destroy(st));
	CHECK_OK(ember_gpu_mem_free(g, dev));
	printf("download: write-back path ok\n");
}

int main(int argc, char **argv)
{
	tu_init("test_gpu_staging", argc, argv);
	int backend = gt_backend(argc, argv, "test_gpu_staging");
	stress = gt_stress(argc, argv);
	ember_gpu *g = gt_open(backend);
	test_states(g);
	test_reuse(g);
	test_download(g);
	CHECK_OK(ember_gpu_close(g));
	printf("test_gpu_staging: ok\n");
	return 0;
}
