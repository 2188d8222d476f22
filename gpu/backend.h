/*
 * backend.h - the calls gpu.c dispatches to: the CUDA backend (cuda_*.cu, built by
 * nvcc, declared here as egc_*) and the arena view both backends' kernels take.
 * Plain C types only, so that nvcc's C++ and the C files read the same header.
 *
 * Every egc_* call first makes `dev` the calling thread's current device (the CUDA
 * runtime keeps the current device per thread) and returns 0 or an EMBER_E* code:
 * cudaErrorMemoryAllocation -> EMBER_ENOMEM, cudaErrorNotReady -> EMBER_EAGAIN,
 * invalid value/device -> EMBER_EINVAL, anything else -> EMBER_EIO.
 */
#ifndef EMBER_GPU_BACKEND_H
#define EMBER_GPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An arena as the kernels see it (ember_gpu_arena_info plus the error flag). */
typedef struct eg_arena_view {
	float *base;           /* device memory: slot i at base + i * stride */
	uint64_t slots;
	uint32_t dim;
	uint32_t state_floats; /* 0 or dim */
	uint32_t stride;
	int *err;              /* device-visible word: a kernel ORs 1 in on a bad slot */
} eg_arena_view;

/* Normalised update: opt is EMBER_GPU_OPT_*, eps already defaulted. */
typedef struct eg_update {
	int opt;
	float lr;
	float eps;
} eg_update;

/* copy kinds */
enum { EG_H2D = 0, EG_D2H = 1, EG_D2D = 2 };

/* ---- CUDA backend (gpu/cuda_runtime.cu, gpu/cuda_kernels.cu) ---- */
int egc_device_count(void);
int egc_init(int dev);
int egc_stream_create(int dev, void **out);
int egc_stream_destroy(int dev, void *s);
int egc_stream_synchronize(int dev, void *s);
int egc_stream_wait_event(int dev, void *s, void *e);
int egc_stream_host_func(int dev, void *s, void (*fn)(void *), void *arg);
int egc_event_create(int dev, void **out);
int egc_event_destroy(int dev, void *e);
int egc_event_record(int dev, void *e, void *s);
int egc_event_query(int dev, void *e);
int egc_event_synchronize(int dev, void *e);
int egc_event_elapsed_ms(int dev, void *start, void *end, float *ms);
int egc_mem_alloc(int dev, size_t bytes, void **out);
int egc_mem_free(int dev, void *p);
int egc_host_alloc(int dev, size_t bytes, void **out);
int egc_host_free(int dev, void *p);
int egc_memset_sync(int dev, void *p, size_t bytes);
int egc_copy(int dev, void *s, void *dst, const void *src, size_t bytes, int kind);
int egc_memset(int dev, void *s, void *dst, int value, size_t bytes);
int egc_gather(int dev, void *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
	       float *out, uint32_t flags);
int egc_install(int dev, void *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
		const float *rows, uint32_t flags, float state_init);
int egc_scatter_apply(int dev, void *s, const eg_arena_view *v, const uint32_t *slots,
		      uint32_t n, const float *grads, const eg_update *u);
int egc_scatter_apply_grouped(int dev, void *s, const eg_arena_view *v,
			      const uint32_t *gslots, const uint32_t *goff, uint32_t ngroups,
			      const uint32_t *order, uint32_t n, uint32_t max_row,
			      const float *grads, const eg_update *u);

#ifdef __cplusplus
}
#endif

#endif
