/*
 * bench_cuda.h - CUDA-only helpers of ember-gpu-bench (bench_cuda.cu), compiled in
 * when the library has the CUDA backend (BENCH_HAVE_CUDA).
 */
#ifndef EMBER_BENCH_CUDA_H
#define EMBER_BENCH_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "name (cc X.Y, N SMs, M GiB)" and the SM count of device dev. */
int bench_cuda_describe(int dev, char *name, size_t cap, int *sms);
/* Enqueue the synthetic compute kernel: `blocks` blocks spinning `cycles` clocks. */
int bench_cuda_spin(void *stream, long long cycles, int blocks);
/* The baseline: `reps` cudaMemcpyAsync H2D of `bytes` from one cudaHostAlloc
 * buffer on a fresh stream, timed with events; *ms for all reps. */
int bench_cuda_plain_h2d(int dev, size_t bytes, int reps, float *ms);

#ifdef __cplusplus
}
#endif

#endif
