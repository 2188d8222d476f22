/*
 * bench_cuda.cu - what ember-gpu-bench needs from CUDA itself, outside ember_gpu:
 * the synthetic "compute" kernel that stands for a training step, and the plain
 * pinned cudaMemcpyAsync baseline the staging pipeline is compared with (its own
 * buffers, stream and events: nothing of Ember's on that path).
 * Every call returns 0 or -1 (the CUDA error is printed).
 */
#include <cuda_runtime.h>

#include <stdio.h>

#include "bench_cuda.h"

static int ok(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "ember-gpu-bench: %s: %s\n", what, cudaGetErrorString(e));
	return -1;
}

/* Every thread spins until `cycles` SM clock cycles have passed. */
__global__ void k_spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

extern "C" {

int bench_cuda_describe(int dev, char *name, size_t cap, int *sms)
{
	cudaDeviceProp p;
	if (ok(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties"))
		return -1;
	snprintf(name, cap, "%s (cc %d.%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor,
		 p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30));
	*sms = p.multiProcessorCount;
	return 0;
}

int bench_cuda_spin(void *stream, long long cycles, int blocks)
{
	(void)cudaGetLastError(); /* the check below then sees only this launch */
	k_spin<<<blocks, 128, 0, (cudaStream_t)stream>>>(cycles);
	return ok(cudaGetLastError(), "k_spin launch");
}

int bench_cuda_plain_h2d(int dev, size_t bytes, int reps, float *ms)
{
	void *src = NULL, *dst = NULL;
	cudaStream_t s = NULL;
	cudaEvent_t t0 = NULL, t1 = NULL;
	int rc = -1;

	if (ok(cudaSetDevice(dev), "cudaSetDevice") ||
	    ok(cudaHostAlloc(&src, bytes, cudaHostAllocDefault), "cudaHostAlloc") ||
	    ok(cudaMalloc(&dst, bytes), "cudaMalloc") ||
	    ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ||
	    ok(cudaEventCreate(&t0), "cudaEventCreate") || ok(cudaEventCreate(&t1), "cudaEventCreate"))
		goto out;
	/* one warm-up copy, then the timed ones */
	if (ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync") ||
	    ok(cudaEventRecord(t0, s), "cudaEventRecord"))
		goto out;
	for (int i = 0; i < reps; i++)
		if (ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync"))
			goto out;
	if (ok(cudaEventRecord(t1, s), "cudaEventRecord") ||
	    ok(cudaEventSynchronize(t1), "cudaEventSynchronize") ||
	    ok(cudaEventElapsedTime(ms, t0, t1), "cudaEventElapsedTime"))
		goto out;
	rc = 0;
out:
	if (t1)
		cudaEventDestroy(t1);
	if (t0)
		cudaEventDestroy(t0);
	if (s)
		cudaStreamDestroy(s);
	if (dst)
		cudaFree(dst);
	if (src)
		cudaFreeHost(src);
	return rc;
}

} /* extern "C" */
