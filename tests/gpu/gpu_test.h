/*
 * gpu_test.h - what the ember_gpu test programs share: choosing the backend from
 * argv[1] ("host", the default, or "cuda"), skipping (exit 77) when the CUDA backend
 * is wanted but not built or no device is present (a failing CUDA runtime is a
 * test failure, not a skip), and blocking copies between
 * test memory and "device" memory (which, on CUDA, the host cannot touch).
 *
 * "stress" as argv[2] multiplies the threaded loops by 8 (gt_stress).
 *
 * Every helper CHECKs its calls, so a failure names the line of the helper and the
 * code; the seed is printed by tu_init as usual.
 */
#ifndef EMBER_GPU_TEST_H
#define EMBER_GPU_TEST_H

#include <ember.h>
#include <ember_gpu.h>

#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/*
 * The backend named by argv[1]. For "cuda": exits 77 (skipped) only when the
 * CUDA backend is not built or there is no device (ember_gpu_device_count() == 0:
 * cudaErrorNoDevice, or no driver installed); a runtime that fails otherwise (a
 * driver too old for it, a broken install) fails the test, with CUDA's words.
 */
static inline int gt_backend(int argc, char **argv, const char *name)
{
	const char *mode = argc > 1 ? argv[1] : "host";
	if (strcmp(mode, "cuda") == 0) {
		if (!ember_gpu_have_cuda()) {
			printf("%s: built without CUDA: skipped\n", name);
			exit(TU_SKIP);
		}
		int n = ember_gpu_device_count();
		if (n == 0) {
			printf("%s: no CUDA device (no driver, or cudaErrorNoDevice): skipped\n",
			       name);
			exit(TU_SKIP);
		}
		if (n < 0) {
			char why[256] = "";
			ember_gpu_error_detail(why, sizeof(why));
			CHECK(0, "%s: the CUDA runtime fails (%s): %s", name, ember_strerror(n), why);
		}
		return EMBER_GPU_BACKEND_CUDA;
	}
	CHECK(strcmp(mode, "host") == 0, "unknown backend '%s' (host or cuda)", mode);
	return EMBER_GPU_BACKEND_HOST;
}

/* argv[2] == "stress" (the suite-stress registrations): 8x the threaded loops. */
static inline uint64_t gt_stress(int argc, char **argv)
{
	return argc > 2 && strcmp(argv[2], "stress") == 0 ? 8 : 1;
}

static inline ember_gpu *gt_open(int backend)
{
	ember_gpu_options o;
	ember_gpu *g = NULL;
	ember_gpu_options_default(&o);
	o.backend = backend;
	CHECK_OK(ember_gpu_open(&o, &g));
	CHECK(ember_gpu_backend(g) == backend, "backend %d", ember_gpu_backend(g));
	return g;
}

static inline ember_gpu_stream *gt_compute(ember_gpu *g)
{
	ember_gpu_stream *s = NULL;
	CHECK_OK(ember_gpu_stream_get(g, EMBER_GPU_STREAM_COMPUTE, 0, &s));
	return s;
}

/* Device copy of bytes of host memory (blocking). Free with ember_gpu_mem_free. */
static inline void *gt_upload(ember_gpu *g, const void *host, size_t bytes)
{
	void *d = NULL;
	ember_gpu_stream *s = gt_compute(g);
	CHECK_OK(ember_gpu_mem_alloc(g, bytes, &d));
	CHECK_OK(ember_gpu_copy_h2d(s, d, host, bytes));
	CHECK_OK(ember_gpu_stream_synchronize(s));
	return d;
}

/* Blocking copy of device memory into host memory, after the compute stream's work. */
static inline void gt_download(ember_gpu *g, void *host, const void *dev, size_t bytes)
{
	ember_gpu_stream *s = gt_compute(g);
	CHECK_OK(ember_gpu_copy_d2h(s, host, dev, bytes));
	CHECK_OK(ember_gpu_stream_synchronize(s));
}

static inline void *gt_malloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	CHECK(p != NULL, "malloc(%zu)", bytes);
	return p;
}

/* A random float in [-1, 1), never the poison pattern. */
static inline float gt_randf(tu_rng *r)
{
	return (float)((double)(tu_rng_next(r) >> 11) * 0x1.0p-52 - 1.0);
}

#endif
