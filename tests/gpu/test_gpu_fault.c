/*
 * test_gpu_fault.c - after a device fault every ember_gpu call fails, yet every
 * object can still be destroyed and the context closed (nothing stays counted
 * live, so ember_gpu_close does not return EMBER_EBUSY for ever), and the error
 * detail says what CUDA reported.
 *
 * The fault: a gather whose output pointer is a bogus device address (gpu.c checks
 * only for NULL; the kernel's store faults), which leaves the CUDA context in a
 * sticky error state for the rest of the process. So this program runs on CUDA
 * only, does nothing after the fault but tear down, and is not run under
 * compute-sanitizer (which would report the fault it provokes on purpose).
 *
 *   test_gpu_fault cuda   (suite gpu, exits 77 without the CUDA backend or a device)
 */
#include "gpu_test.h"

int main(int argc, char **argv)
{
	tu_init("test_gpu_fault", argc, argv);
	CHECK(argc > 1 && strcmp(argv[1], "cuda") == 0,
	      "test_gpu_fault provokes a device fault: CUDA only (argument 'cuda')");
	int backend = gt_backend(argc, argv, "test_gpu_fault");
	ember_gpu *g = gt_open(backend);
	ember_gpu_stream *s = gt_compute(g), *mine = NULL;
	ember_gpu_event *e = NULL;
	ember_gpu_arena *a = NULL;
	ember_gpu_staging *st = NULL;
	ember_gpu_arena_options ao = { .dim = 64, .slots = 1024 };
	uint32_t held;
	void *p = NULL, *d = NULL, *pinned = NULL;

	CHECK_OK(ember_gpu_stream_create(g, &mine));
	CHECK_OK(ember_gpu_event_create(g, &e));
	CHECK_OK(ember_gpu_arena_create(g, &ao, &a));
	CHECK_OK(ember_gpu_staging_create(g, NULL, &st));
	CHECK_OK(ember_gpu_mem_alloc(g, 4096, &d));
	CHECK_OK(ember_gpu_host_alloc(g, 4096, &pinned));
	CHECK_OK(ember_gpu_memset(s, d, 0, 4096)); /* slots 0, 0, ... */
	CHECK_OK(ember_gpu_staging_acquire(st, &held, &p));

	/* the fault: 16 rows gathered to an address no allocation covers */
	float *bogus = (float *)(uintptr_t)0x10000;
	CHECK_OK(ember_gpu_gather(s, a, d, 16, bogus, 0));
	int rc = ember_gpu_stream_synchronize(s);
	CHECK(rc == EMBER_EIO, "a faulting kernel: synchronize returned %d", rc);
	char why[256];
	CHECK_OK(ember_gpu_error_detail(why, sizeof(why)));
	printf("after the fault: %s\n", why);
	CHECK(strstr(why, "cudaErrorIllegalAddress") || strstr(why, "cudaErrorLaunchFailure"),
	      "detail: %s", why);
	/* sticky: other calls fail too */
	CHECK_RC(ember_gpu_event_record(e, mine), EMBER_EIO);
	CHECK_RC(ember_gpu_close(g), EMBER_EBUSY); /* objects are still alive */

	/* tear down: each destroy may report the fault, but frees and counts out */
	CHECK_RC(ember_gpu_staging_release(st, held, s), EMBER_EIO); /* needs the device */
	CHECK_OK(ember_gpu_staging_release(st, held, NULL));       /* never does */
	rc = ember_gpu_staging_destroy(st);
	CHECK(rc == 0 || rc == EMBER_EIO, "staging_destroy after a fault: %d", rc);
	rc = ember_gpu_host_free(g, pinned);
	CHECK(rc == 0 || rc == EMBER_EIO, "host_free after a fault: %d", rc);
	rc = ember_gpu_mem_free(g, d);
	CHECK(rc == 0 || rc == EMBER_EIO, "mem_free after a fault: %d", rc);
	rc = ember_gpu_arena_destroy(a);
	CHECK(rc == 0 || rc == EMBER_EIO, "arena_destroy after a fault: %d", rc);
	rc = ember_gpu_event_destroy(e);
	CHECK(rc == 0 || rc == EMBER_EIO, "event_destroy after a fault: %d", rc);
	rc = ember_gpu_stream_destroy(mine);
	CHECK(rc == 0 || rc == EMBER_EIO, "stream_destroy after a fault: %d", rc);
	rc = ember_gpu_close(g);
	CHECK(rc == 0 || rc == EMBER_EIO, "close after a fault and every destroy: %d", rc);
	printf("test_gpu_fault: every object destroyed, the context closed (%s)\n",
	       rc == 0 ? "0" : ember_strerror(rc));
	return 0;
}
