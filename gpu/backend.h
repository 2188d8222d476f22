/*
 * backend.h - the calls gpu.c dispatches to: the CUDA backend (cuda_*.cu, built by
 * nvcc, declared here as egc_*) and the arena view both backends' kernels take.
 * Plain C types only, so that nvcc's C++ and the C files read the same header.
 *
 * Every egc_* call runs with the device's primary context current on the calling
 * thread and puts back whatever context the caller had (none included) before it
 * returns (cuda_int.h, egc_scope): the trainer's current device is never changed.
 * It returns 0 or an EMBER_E* code: cudaErrorMemoryAllocation -> EMBER_ENOMEM,
 * cudaErrorNotReady -> EMBER_EAGAIN, invalid value/device -> EMBER_EINVAL,
 * anything else -> EMBER_EIO; every failure but EAGAIN also leaves its text in the
 * thread's error detail (eg_detail_set, ember_gpu_error_detail).
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

/* The CUDA side of a context (filled by egc_init, emptied by egc_fini). */
typedef struct eg_dev {
	int ordinal;       /* CUDA device ordinal */
	void *ctx;         /* CUcontext: the device's primary context */
	void *pool;        /* cudaMemPool_t: Ember's own pool for stream-ordered scratch
			      (NULL where the device has no memory pools) */
	void *setup;       /* cudaStream_t: Ember's own stream for blocking set-up work
			      (arena zeroing), non-blocking, used by nothing else */
} eg_dev;

/* Record the calling thread's error detail: what failed (an expression or call),
 * the code's name and its text. Defined in gpu.c. */
void eg_detail_set(const char *what, const char *name, const char *text);

/* copy kinds */
enum { EG_H2D = 0, EG_D2H = 1, EG_D2D = 2 };

/* ---- CUDA backend (gpu/cuda_runtime.cu, gpu/cuda_kernels.cu) ---- */
/* Usable devices: >= 0, or EMBER_EIO when the runtime fails for another reason
 * than "no device" (cudaErrorNoDevice, or no driver installed at all). */
int egc_device_count(void);
int egc_init(eg_dev *d, int ordinal);
/* Destroys the pool and the set-up stream; returns the first error, frees all. */
int egc_fini(eg_dev *d);
int egc_stream_create(const eg_dev *d, void **out);
int egc_stream_destroy(const eg_dev *d, void *s);
int egc_stream_synchronize(const eg_dev *d, void *s);
int egc_stream_wait_event(const eg_dev *d, void *s, void *e);
int egc_stream_host_func(const eg_dev *d, void *s, void (*fn)(void *), void *arg);
int egc_event_create(const eg_dev *d, void **out, int timing, int blocking);
int egc_event_destroy(const eg_dev *d, void *e);
int egc_event_record(const eg_dev *d, void *e, void *s);
int egc_event_query(const eg_dev *d, void *e);
int egc_event_synchronize(const eg_dev *d, void *e);
int egc_event_elapsed_ms(const eg_dev *d, void *start, void *end, float *ms);
int egc_mem_alloc(const eg_dev *d, size_t bytes, void **out);
int egc_mem_free(const eg_dev *d, void *p);
int egc_host_alloc(const eg_dev *d, size_t bytes, void **out);
int egc_host_free(const eg_dev *d, void *p);
/* Zero bytes at p on d->setup and wait for that stream only. */
int egc_memset_sync(const eg_dev *d, void *p, size_t bytes);
int egc_copy(const eg_dev *d, void *s, void *dst, const void *src, size_t bytes, int kind);
int egc_memset(const eg_dev *d, void *s, void *dst, int value, size_t bytes);
int egc_gather(const eg_dev *d, void *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
	       float *out, uint32_t flags);
int egc_install(const eg_dev *d, void *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
		const float *rows, uint32_t flags, float state_init);
int egc_scatter_apply(const eg_dev *d, void *s, const eg_arena_view *v, const uint32_t *slots,
		      uint32_t n, const float *grads, const eg_update *u);
/* The device scratch egc_scatter_apply takes for n lookups into v. */
int egc_scatter_scratch(const eg_dev *d, const eg_arena_view *v, uint32_t n, size_t *bytes);
int egc_scatter_apply_grouped(const eg_dev *d, void *s, const eg_arena_view *v,
			      const uint32_t *gslots, const uint32_t *goff, uint32_t ngroups,
			      const uint32_t *order, uint32_t n, uint32_t max_row,
			      const float *grads, const eg_update *u);

#ifdef __cplusplus
}
#endif

#endif
