/*
 * cuda_runtime.cu - the CUDA backend's devices, streams, events, memory and copies:
 * thin wrappers over the CUDA runtime that speak Ember's return codes (backend.h).
 *
 * Every call makes `dev` current first: the runtime keeps the current device per
 * host thread, and any thread may call into a context. Streams are created
 * non-blocking (no implicit ordering with the legacy default stream); events keep
 * timing (ember_gpu_event_elapsed_ms). Pinned memory is allocated mapped and
 * portable, so kernels can read staging buffers directly (unified addressing: the
 * host pointer is also the device pointer).
 */
#include <cuda_runtime.h>

#include <ember.h>

#include "backend.h"

int egc_map_error(cudaError_t e);

int egc_map_error(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return EMBER_ENOMEM;
	case cudaErrorNotReady:
		return EMBER_EAGAIN;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevice:
	case cudaErrorInvalidDevicePointer:
	case cudaErrorInvalidResourceHandle:
		return EMBER_EINVAL;
	default:
		return EMBER_EIO;
	}
}

/* On failure: reset the thread's last-error state too (a non-sticky error, e.g. a
 * failed cudaMalloc, would otherwise be reported again by the next launch's
 * cudaGetLastError), then return the mapped code. */
#define EGC_TRY(expr)                                                               \
	do {                                                                        \
		cudaError_t egc_e_ = (expr);                                        \
		if (egc_e_ != cudaSuccess) {                                        \
			(void)cudaGetLastError();                                   \
			return egc_map_error(egc_e_);                               \
		}                                                                   \
	} while (0)

extern "C" {

int egc_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError(); /* reset the last-error state (see EGC_TRY) */
		return 0;
	}
	return n > 0 ? n : 0;
}

int egc_init(int dev)
{
	cudaMemPool_t pool;
	uint64_t keep = UINT64_MAX;
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaFree(0)); /* create the primary context now, not at the first call */
	/* scatter-apply's scratch comes from cudaMallocAsync: let the default pool keep
	 * freed memory instead of unmapping it at every synchronization. */
	int pools = 0;
	EGC_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev));
	if (pools) {
		EGC_TRY(cudaDeviceGetDefaultMemPool(&pool, dev));
		EGC_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
	}
	return 0;
}

int egc_stream_create(int dev, void **out)
{
	cudaStream_t s;
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	*out = s;
	return 0;
}

int egc_stream_destroy(int dev, void *s)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaStreamDestroy((cudaStream_t)s));
	return 0;
}

int egc_stream_synchronize(int dev, void *s)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaStreamSynchronize((cudaStream_t)s));
	return 0;
}

int egc_stream_wait_event(int dev, void *s, void *e)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0));
	return 0;
}

int egc_stream_host_func(int dev, void *s, void (*fn)(void *), void *arg)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaLaunchHostFunc((cudaStream_t)s, fn, arg));
	return 0;
}

int egc_event_create(int dev, void **out)
{
	cudaEvent_t e;
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaEventCreate(&e));
	*out = e;
	return 0;
}

int egc_event_destroy(int dev, void *e)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaEventDestroy((cudaEvent_t)e));
	return 0;
}

int egc_event_record(int dev, void *e, void *s)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
	return 0;
}

int egc_event_query(int dev, void *e)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaEventQuery((cudaEvent_t)e)); /* cudaErrorNotReady -> EMBER_EAGAIN */
	return 0;
}

int egc_event_synchronize(int dev, void *e)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaEventSynchronize((cudaEvent_t)e));
	return 0;
}

int egc_event_elapsed_ms(int dev, void *start, void *end, float *ms)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
	return 0;
}

int egc_mem_alloc(int dev, size_t bytes, void **out)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaMalloc(out, bytes)); /* never managed memory */
	return 0;
}

int egc_mem_free(int dev, void *p)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaFree(p));
	return 0;
}

int egc_host_alloc(int dev, size_t bytes, void **out)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaHostAlloc(out, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
	return 0;
}

int egc_host_free(int dev, void *p)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaFreeHost(p));
	return 0;
}

int egc_memset_sync(int dev, void *p, size_t bytes)
{
	EGC_TRY(cudaSetDevice(dev));
	/* The legacy default stream: our streams are non-blocking, so this waits
	 * for the memset only, not for other streams' work. */
	EGC_TRY(cudaMemsetAsync(p, 0, bytes, 0));
	EGC_TRY(cudaStreamSynchronize(0));
	return 0;
}

int egc_copy(int dev, void *s, void *dst, const void *src, size_t bytes, int kind)
{
	static const cudaMemcpyKind kinds[] = { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
						cudaMemcpyDeviceToDevice };
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], (cudaStream_t)s));
	return 0;
}

int egc_memset(int dev, void *s, void *dst, int value, size_t bytes)
{
	EGC_TRY(cudaSetDevice(dev));
	EGC_TRY(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)s));
	return 0;
}

} /* extern "C" */
