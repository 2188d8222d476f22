/*
 * test_gpu_errors.c - bad inputs of every ember_gpu call: NULL, zero, out of range,
 * oversize, objects of another context, wrong state. Each must return its code and
 * leave everything usable; destructors accept NULL; a context with live objects
 * refuses to close. Also: ember_gpu_error_detail's inputs and, on CUDA, the text
 * a failed allocation leaves there; the scratch query of scatter-apply.
 *
 *   test_gpu_errors host | cuda   (cuda: suite gpu, exits 77 without a device)
 */
#include "gpu_test.h"

#include <math.h>

static void test_context(int backend)
{
	ember_gpu_options o;
	ember_gpu *g = NULL;

	ember_gpu_options_default(NULL); /* no crash */
	ember_gpu_options_default(&o);
	CHECK(o.backend == EMBER_GPU_BACKEND_AUTO && o.h2d_streams == 1 && o.d2h_streams == 1,
	      "defaults");
	CHECK_RC(ember_gpu_open(&o, NULL), EMBER_EINVAL);
	o.backend = 3;
	CHECK_RC(ember_gpu_open(&o, &g), EMBER_EINVAL);
	o.backend = -1;
	CHECK_RC(ember_gpu_open(&o, &g), EMBER_EINVAL);
	ember_gpu_options_default(&o);
	o.device = -1;
	CHECK_RC(ember_gpu_open(&o, &g), EMBER_EINVAL);
	ember_gpu_options_default(&o);
	o.h2d_streams = EMBER_GPU_MAX_COPY_STREAMS + 1;
	CHECK_RC(ember_gpu_open(&o, &g), EMBER_EINVAL);
	ember_gpu_options_default(&o);
	o.d2h_streams = EMBER_GPU_MAX_COPY_STREAMS + 1;
	CHECK_RC(ember_gpu_open(&o, &g), EMBER_EINVAL);
	ember_gpu_options_default(&o);
	o.backend = EMBER_GPU_BACKEND_CUDA;
	int ndev = ember_gpu_device_count();
	CHECK(ndev >= 0, "gt_backend let a failing device count through: %d", ndev);
	o.device = ndev; /* one past the last device */
	CHECK_RC(ember_gpu_open(&o, &g), EMBER_EINVAL);
	CHECK(g == NULL, "a failed open wrote *out");
	if (!ember_gpu_have_cuda()) {
		o.device = 0;
		CHECK_RC(ember_gpu_open(&o, &g), EMBER_EINVAL);
		/* auto falls back to the host backend */
		CHECK_OK(ember_gpu_open(NULL, &g));
		CHECK(ember_gpu_backend(g) == EMBER_GPU_BACKEND_HOST, "auto without CUDA");
		CHECK_OK(ember_gpu_close(g));
		g = NULL;
	}
	CHECK_RC(ember_gpu_backend(NULL), EMBER_EINVAL);
	CHECK_OK(ember_gpu_close(NULL));

	/* Several copy streams; stream_get's ranges. */
	ember_gpu_options_default(&o);
	o.backend = backend;
	o.h2d_streams = 3;
	o.d2h_streams = 2;
	CHECK_OK(ember_gpu_open(&o, &g));
	ember_gpu_stream *s = NULL;
	CHECK_OK(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 2, &s));
	CHECK_RC(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 3, &s), EMBER_EINVAL);
	CHECK_OK(ember_gpu_stream_get(g, EMBER_GPU_STREAM_D2H, 1, &s));
	CHECK_RC(ember_gpu_stream_get(g, EMBER_GPU_STREAM_D2H, 2, &s), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_get(g, EMBER_GPU_STREAM_COMPUTE, 1, &s), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_get(g, 7, 0, &s), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_get(NULL, EMBER_GPU_STREAM_H2D, 0, &s), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 0, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_destroy(s), EMBER_EINVAL); /* the context's own */
	CHECK_OK(ember_gpu_close(g));
}

static void test_streams_events(ember_gpu *g, ember_gpu *other)
{
	ember_gpu_stream *s = NULL, *os = NULL;
	ember_gpu_event *e = NULL, *oe = NULL;
	void *h = NULL;
	float ms;

	CHECK_RC(ember_gpu_stream_create(NULL, &s), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_create(g, NULL), EMBER_EINVAL);
	CHECK_OK(ember_gpu_stream_create(g, &s));
	CHECK_OK(ember_gpu_stream_create(other, &os));
	CHECK_RC(ember_gpu_event_create(NULL, &e), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_create(g, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_create_flags(NULL, 0, &e), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_create_flags(g, 0, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_create_flags(g, 0x4, &e), EMBER_EINVAL);
	CHECK(e == NULL, "a failed create wrote *out");
	CHECK_OK(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &e));
	CHECK_OK(ember_gpu_event_create_flags(other, EMBER_GPU_EVENT_TIMING, &oe));
	/* events without timing refuse elapsed_ms, recorded and complete or not */
	ember_gpu_event *plain = NULL, *blocking = NULL;
	CHECK_OK(ember_gpu_event_create(g, &plain));
	CHECK_OK(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_BLOCKING, &blocking));
	CHECK_OK(ember_gpu_event_record(plain, s));
	CHECK_OK(ember_gpu_event_record(blocking, s));
	CHECK_OK(ember_gpu_event_synchronize(blocking));
	CHECK_OK(ember_gpu_event_synchronize(plain));

	CHECK_RC(ember_gpu_stream_synchronize(NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_wait_event(NULL, e), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_wait_event(s, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_wait_event(s, oe), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_host_func(NULL, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_host_func(s, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_record(NULL, s), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_record(e, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_record(e, os), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_query(NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_synchronize(NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_elapsed_ms(NULL, e, &ms), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_elapsed_ms(e, NULL, &ms), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_elapsed_ms(e, e, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_elapsed_ms(e, oe, &ms), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_elapsed_ms(e, e, &ms), EMBER_ESTATE); /* never recorded */
	CHECK_OK(ember_gpu_event_record(e, s));
	CHECK_OK(ember_gpu_event_synchronize(e));
	CHECK_OK(ember_gpu_event_elapsed_ms(e, e, &ms));
	CHECK(ms == 0.0f, "an event minus itself: %g ms", (double)ms);
	CHECK_RC(ember_gpu_event_elapsed_ms(plain, e, &ms), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_elapsed_ms(e, plain, &ms), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_elapsed_ms(blocking, blocking, &ms), EMBER_EINVAL);
	CHECK_OK(ember_gpu_event_destroy(blocking));
	CHECK_OK(ember_gpu_event_destroy(plain));

	if (ember_gpu_backend(g) == EMBER_GPU_BACKEND_HOST) {
		CHECK_RC(ember_gpu_stream_handle(s, &h), EMBER_EINVAL);
		CHECK_RC(ember_gpu_event_handle(e, &h), EMBER_EINVAL);
	} else {
		CHECK_OK(ember_gpu_stream_handle(s, &h));
		CHECK(h != NULL, "stream handle");
		CHECK_OK(ember_gpu_event_handle(e, &h));
		CHECK(h != NULL, "event handle");
	}
	CHECK_RC(ember_gpu_stream_handle(NULL, &h), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_handle(s, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_handle(NULL, &h), EMBER_EINVAL);
	CHECK_RC(ember_gpu_event_handle(e, NULL), EMBER_EINVAL);

	/* A context with live objects refuses to close, then closes once they go. */
	CHECK_RC(ember_gpu_close(other), EMBER_EBUSY);
	CHECK_OK(ember_gpu_event_destroy(oe));
	CHECK_RC(ember_gpu_close(other), EMBER_EBUSY);
	CHECK_OK(ember_gpu_stream_destroy(os));

	CHECK_OK(ember_gpu_event_destroy(NULL));
	CHECK_OK(ember_gpu_stream_destroy(NULL));
	CHECK_OK(ember_gpu_event_destroy(e));
	CHECK_OK(ember_gpu_stream_destroy(s));
}

static void test_memory(ember_gpu *g, ember_gpu *other)
{
	ember_gpu_stream *s = gt_compute(g);
	void *d = NULL, *d2 = NULL, *p = NULL;
	char host[64] = { 0 };

	CHECK_RC(ember_gpu_mem_alloc(NULL, 16, &d), EMBER_EINVAL);
	CHECK_RC(ember_gpu_mem_alloc(g, 0, &d), EMBER_EINVAL);
	CHECK_RC(ember_gpu_mem_alloc(g, 16, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_host_alloc(g, 0, &p), EMBER_EINVAL);
	CHECK_RC(ember_gpu_host_alloc(NULL, 16, &p), EMBER_EINVAL);
	if (ember_gpu_backend(g) == EMBER_GPU_BACKEND_CUDA) {
		/* More device memory than any GPU has: the detail names the call. */
		CHECK_RC(ember_gpu_mem_alloc(g, (size_t)1 << 50, &d), EMBER_ENOMEM);
		char why[256];
		CHECK_OK(ember_gpu_error_detail(why, sizeof(why)));
		CHECK(strstr(why, "cudaMalloc") && strstr(why, "cudaErrorMemoryAllocation"),
		      "detail of a failed cudaMalloc: '%s'", why);
		printf("detail of a failed allocation: %s\n", why);
	}
	CHECK_OK(ember_gpu_mem_alloc(g, 64, &d));
	CHECK_OK(ember_gpu_mem_alloc(g, 64, &d2));
	CHECK_OK(ember_gpu_host_alloc(g, 64, &p));
	CHECK_RC(ember_gpu_close(g), EMBER_EBUSY);

	CHECK_RC(ember_gpu_copy_h2d(NULL, d, host, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_copy_h2d(s, NULL, host, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_copy_h2d(s, d, NULL, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_copy_d2h(s, NULL, d, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_copy_d2h(s, host, NULL, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_copy_d2d(s, d, (char *)d + 4, 8), EMBER_EINVAL); /* overlap */
	CHECK_RC(ember_gpu_memset(NULL, d, 0, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_memset(s, NULL, 0, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_memset(s, d, 256, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_memset(s, d, -1, 8), EMBER_EINVAL);
	/* Zero bytes: valid, nothing enqueued (even with NULL pointers). */
	CHECK_OK(ember_gpu_copy_h2d(s, NULL, NULL, 0));
	CHECK_OK(ember_gpu_copy_d2h(s, NULL, NULL, 0));
	CHECK_OK(ember_gpu_memset(s, NULL, 0, 0));

	/* Still usable after all that: a round trip. */
	for (int i = 0; i < 64; i++)
		host[i] = (char)i;
	CHECK_OK(ember_gpu_copy_h2d(s, d, host, 64));
	CHECK_OK(ember_gpu_copy_d2d(s, d2, d, 64));
	CHECK_OK(ember_gpu_copy_d2h(s, p, d2, 64));
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK(memcmp(p, host, 64) == 0, "round trip");

	CHECK_RC(ember_gpu_mem_free(NULL, d), EMBER_EINVAL);
	CHECK_OK(ember_gpu_mem_free(g, NULL));
	CHECK_OK(ember_gpu_host_free(g, NULL));
	CHECK_OK(ember_gpu_mem_free(g, d2));
	CHECK_OK(ember_gpu_mem_free(g, d));
	CHECK_OK(ember_gpu_host_free(g, p));
	(void)other;
}

static void test_staging(ember_gpu *g, ember_gpu *other)
{
	ember_gpu_staging_options o;
	ember_gpu_staging *st = NULL;
	ember_gpu_stream *s = gt_compute(g), *os = gt_compute(other);
	ember_gpu_event *oe = NULL;
	uint32_t k;
	void *p, *d = NULL;

	ember_gpu_staging_options_default(NULL);
	ember_gpu_staging_options_default(&o);
	CHECK(o.buffer_bytes == 4u << 20 && o.buffers == 4, "staging defaults");
	CHECK_RC(ember_gpu_staging_create(NULL, &o, &st), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_create(g, &o, NULL), EMBER_EINVAL);
	o.buffers = 1025;
	CHECK_RC(ember_gpu_staging_create(g, &o, &st), EMBER_EINVAL);
	o.buffers = 2;
	o.buffer_bytes = SIZE_MAX / 2;
	CHECK_RC(ember_gpu_staging_create(g, &o, &st), EMBER_EINVAL);
	o.buffer_bytes = 256;
	CHECK_OK(ember_gpu_staging_create(g, &o, &st));

	CHECK_RC(ember_gpu_staging_acquire(NULL, &k, &p), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_acquire(st, NULL, &p), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_try_acquire(st, &k, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_release(NULL, 0, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_release(st, 0, NULL), EMBER_ESTATE); /* FREE */
	CHECK_OK(ember_gpu_staging_acquire(st, &k, &p));
	CHECK_RC(ember_gpu_staging_release(st, k, os), EMBER_EINVAL); /* other context */
	CHECK_OK(ember_gpu_mem_alloc(g, 256, &d));
	CHECK_OK(ember_gpu_event_create(other, &oe));
	CHECK_RC(ember_gpu_staging_upload(NULL, k, s, d, 8, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_upload(st, k, NULL, d, 8, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_upload(st, k, s, NULL, 8, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_upload(st, k, s, d, 0, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_upload(st, k, s, d, 257, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_upload(st, k, s, d, 8, oe), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_upload(st, 2, s, d, 8, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_upload(st, k, os, d, 8, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_download(st, k, s, d, 8, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_download(st, k, s, d, 257, oe), EMBER_EINVAL);
	CHECK_RC(ember_gpu_staging_destroy(st), EMBER_EBUSY);
	CHECK_OK(ember_gpu_staging_release(st, k, s));
	CHECK_OK(ember_gpu_staging_destroy(NULL));
	CHECK_OK(ember_gpu_staging_destroy(st));
	CHECK_OK(ember_gpu_event_destroy(oe));
	CHECK_OK(ember_gpu_mem_free(g, d));
}

static void test_arena_kernels(ember_gpu *g, ember_gpu *other)
{
	ember_gpu_arena_options ao = { .dim = 8, .slots = 16 };
	ember_gpu_arena *a = NULL, *sa = NULL;
	ember_gpu_stream *s = gt_compute(g), *os = gt_compute(other);
	ember_gpu_arena_info info;
	float *row = NULL;

	CHECK_RC(ember_gpu_arena_create(NULL, &ao, &a), EMBER_EINVAL);
	CHECK_RC(ember_gpu_arena_create(g, NULL, &a), EMBER_EINVAL);
	CHECK_RC(ember_gpu_arena_create(g, &ao, NULL), EMBER_EINVAL);
	ao.dim = 0;
	CHECK_RC(ember_gpu_arena_create(g, &ao, &a), EMBER_EINVAL);
	ao.dim = 65537;
	CHECK_RC(ember_gpu_arena_create(g, &ao, &a), EMBER_EINVAL);
	ao.dim = 8;
	ao.slots = 0;
	CHECK_RC(ember_gpu_arena_create(g, &ao, &a), EMBER_EINVAL);
	ao.slots = UINT64_C(0xffffffff); /* indices are uint32 with one value spare */
	CHECK_RC(ember_gpu_arena_create(g, &ao, &a), EMBER_EINVAL);
	ao.slots = 16;
	ao.state = 2;
	CHECK_RC(ember_gpu_arena_create(g, &ao, &a), EMBER_EINVAL);
	ao.state = EMBER_GPU_STATE_NONE;
	CHECK_OK(ember_gpu_arena_create(g, &ao, &a));
	ao.state = EMBER_GPU_STATE_ADAGRAD;
	ao.dim = 5;
	CHECK_OK(ember_gpu_arena_create(g, &ao, &sa));

	CHECK_RC(ember_gpu_arena_query(NULL, &info), EMBER_EINVAL);
	CHECK_RC(ember_gpu_arena_query(a, NULL), EMBER_EINVAL);
	CHECK_OK(ember_gpu_arena_query(sa, &info));
	CHECK(info.dim == 5 && info.state_floats == 5 && info.stride == 12 && info.slots == 16,
	      "adagrad arena layout: stride %u", info.stride);
	CHECK_RC(ember_gpu_arena_row(a, 16, &row), EMBER_EINVAL);
	CHECK_RC(ember_gpu_arena_row(NULL, 0, &row), EMBER_EINVAL);
	CHECK_RC(ember_gpu_arena_row(a, 0, NULL), EMBER_EINVAL);
	CHECK_OK(ember_gpu_arena_row(sa, 3, &row));
	CHECK(row == info.base + 3 * 12, "row pointer");
	CHECK_RC(ember_gpu_arena_check(NULL), EMBER_EINVAL);
	CHECK_OK(ember_gpu_arena_check(a));
	size_t scratch = 1;
	CHECK_RC(ember_gpu_scatter_scratch(NULL, 4, &scratch), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_scratch(a, 4, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_scratch(a, 0x80000000u, &scratch), EMBER_EINVAL);
	CHECK_OK(ember_gpu_scatter_scratch(a, 0, &scratch));
	CHECK(scratch == 0, "scratch of an empty batch: %zu", scratch);
	CHECK_OK(ember_gpu_scatter_scratch(a, 4, &scratch));
	CHECK(scratch >= 4 * 4 * sizeof(uint32_t), "scratch of 4 lookups: %zu", scratch);

	uint32_t slots[2] = { 0, 1 };
	uint32_t *slots_d = gt_upload(g, slots, sizeof(slots));
	void *buf = NULL;
	CHECK_OK(ember_gpu_mem_alloc(g, 2 * 16 * sizeof(float), &buf));
	CHECK_OK(ember_gpu_memset(s, buf, 0, 2 * 16 * sizeof(float)));

	/* gather */
	CHECK_RC(ember_gpu_gather(NULL, a, slots_d, 2, buf, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_gather(s, NULL, slots_d, 2, buf, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_gather(s, a, NULL, 2, buf, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_gather(s, a, slots_d, 2, NULL, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_gather(s, a, slots_d, 2, buf, 0x2), EMBER_EINVAL);
	CHECK_RC(ember_gpu_gather(os, a, slots_d, 2, buf, 0), EMBER_EINVAL);
	CHECK_OK(ember_gpu_gather(s, a, NULL, 0, NULL, 0)); /* empty batch */
	/* install */
	CHECK_RC(ember_gpu_install(NULL, a, slots_d, 2, buf, 0, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_install(s, NULL, slots_d, 2, buf, 0, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_install(s, a, NULL, 2, buf, 0, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_install(s, a, slots_d, 2, NULL, 0, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_install(s, a, slots_d, 2, buf, 0x4, 0), EMBER_EINVAL);
	CHECK_RC(ember_gpu_install(s, a, slots_d, 2, buf, 0, NAN), EMBER_EINVAL);
	CHECK_RC(ember_gpu_install(os, a, slots_d, 2, buf, 0, 0), EMBER_EINVAL);
	CHECK_OK(ember_gpu_install(s, a, NULL, 0, NULL, 0, 0));
	/* scatter-apply */
	ember_gpu_update u = { .optimizer = EMBER_GPU_OPT_SGD, .lr = 0.1f };
	CHECK_RC(ember_gpu_scatter_apply(NULL, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply(s, NULL, slots_d, 2, buf, &u), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply(s, a, NULL, 2, buf, &u), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, NULL, &u), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, NULL), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply(os, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 0x80000000u, buf, &u), EMBER_EINVAL);
	u.lr = 0.0f;
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	u.lr = -1.0f;
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	u.lr = INFINITY;
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	u.lr = NAN;
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	u.lr = 0.1f;
	u.eps = -1.0f;
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	u.eps = 0.0f;
	u.optimizer = 0;
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	u.optimizer = 3;
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	u.optimizer = EMBER_GPU_OPT_ADAGRAD; /* the arena has no state */
	CHECK_RC(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u), EMBER_EINVAL);
	CHECK_OK(ember_gpu_scatter_apply(s, sa, slots_d, 2, buf, &u));
	/* An empty batch is valid, but the update is still checked against the arena. */
	CHECK_RC(ember_gpu_scatter_apply(s, a, NULL, 0, NULL, &u), EMBER_EINVAL);
	CHECK_OK(ember_gpu_scatter_apply(s, sa, NULL, 0, NULL, &u));
	u.optimizer = EMBER_GPU_OPT_SGD;
	CHECK_OK(ember_gpu_scatter_apply(s, a, slots_d, 2, buf, &u));
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_OK(ember_gpu_arena_check(a));
	CHECK_OK(ember_gpu_arena_check(sa));
	/* grouped scatter-apply: two groups of one lookup each */
	const uint32_t goff[3] = { 0, 1, 2 }, order[2] = { 1, 0 };
	uint32_t *goff_d = gt_upload(g, goff, sizeof(goff));
	uint32_t *order_d = gt_upload(g, order, sizeof(order));
	CHECK_RC(ember_gpu_scatter_apply_grouped(NULL, a, slots_d, goff_d, 2, order_d, 2, 2, buf, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, NULL, slots_d, goff_d, 2, order_d, 2, 2, buf, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, NULL, goff_d, 2, order_d, 2, 2, buf, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, NULL, 2, order_d, 2, 2, buf, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 2, NULL, 2, 2, buf, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 2, order_d, 2, 2, NULL, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 2, order_d, 2, 2, buf, NULL),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(os, a, slots_d, goff_d, 2, order_d, 2, 2, buf, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 3, order_d, 2, 2, buf, &u),
		 EMBER_EINVAL); /* more groups than entries */
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 2, order_d, 0x80000000u, 2,
						 buf, &u),
		 EMBER_EINVAL);
	u.optimizer = EMBER_GPU_OPT_ADAGRAD; /* the arena has no state */
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 2, order_d, 2, 2, buf, &u),
		 EMBER_EINVAL);
	CHECK_RC(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 0, NULL, 0, 0, NULL, &u),
		 EMBER_EINVAL); /* empty, but the update is still checked */
	u.optimizer = EMBER_GPU_OPT_SGD;
	CHECK_OK(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 0, NULL, 0, 0, NULL, &u));
	CHECK_OK(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 2, order_d, 2, 2, buf, &u));
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_OK(ember_gpu_arena_check(a));
	/* an order entry past max_row is flagged, not read */
	CHECK_OK(ember_gpu_scatter_apply_grouped(s, a, slots_d, goff_d, 2, order_d, 2, 1, buf, &u));
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_RC(ember_gpu_arena_check(a), EMBER_EINVAL);
	CHECK_OK(ember_gpu_mem_free(g, order_d));
	CHECK_OK(ember_gpu_mem_free(g, goff_d));

	CHECK_OK(ember_gpu_mem_free(g, buf));
	CHECK_OK(ember_gpu_mem_free(g, slots_d));
	CHECK_OK(ember_gpu_arena_destroy(NULL));
	CHECK_OK(ember_gpu_arena_destroy(sa));
	CHECK_OK(ember_gpu_arena_destroy(a));
}

static void test_detail(void)
{
	char buf[8];
	CHECK_RC(ember_gpu_error_detail(NULL, 8), EMBER_EINVAL);
	CHECK_RC(ember_gpu_error_detail(buf, 0), EMBER_EINVAL);
	int rc = ember_gpu_error_detail(buf, sizeof(buf));
	/* this thread has met no CUDA failure yet, unless the device count failed,
	 * which gt_backend turned into a failure of the test already */
	CHECK(rc == EMBER_ENOTFOUND, "detail before any failure: %d", rc);
}

int main(int argc, char **argv)
{
	tu_init("test_gpu_errors", argc, argv);
	test_detail();
	int backend = gt_backend(argc, argv, "test_gpu_errors");
	test_context(backend);
	ember_gpu *g = gt_open(backend);
	ember_gpu *other = gt_open(backend);
	test_streams_events(g, other);
	test_memory(g, other);
	test_staging(g, other);
	test_arena_kernels(g, other);
	CHECK_OK(ember_gpu_close(other));
	CHECK_OK(ember_gpu_close(g));
	printf("test_gpu_errors: ok\n");
	return 0;
}
