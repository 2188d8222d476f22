/*
 * cuda_runtime.cu - the CUDA backend's devices, streams, events, memory and copies:
 * thin wrappers over the CUDA runtime that speak Ember's return codes (backend.h).
 *
 * Every call that touches the device runs inside an egc_scope (cuda_int.h): the
 * device's primary context is pushed for the call when the caller's thread has
 * another one (or none) current, and popped again, so the caller's current device
 * is never changed. Streams are created non-blocking (no implicit ordering with
 * the legacy default stream). Events record no timestamps unless created for
 * elapsed_ms (cudaEventDisableTiming otherwise), and those the host waits on may
 * be created blocking (cudaEventBlockingSync: the waiting thread sleeps instead of
 * spinning). Pinned memory is allocated mapped and portable, so kernels can read
 * staging buffers directly (unified addressing: the host pointer is also the
 * device pointer). Stream-ordered scratch comes from a memory pool of Ember's own
 * (cudaMemPoolCreate), never from the device's default pool, which other
 * libraries in the process (PyTorch's async allocator) share and configure.
 */
#include "cuda_int.h"

#include <mutex>
#include <stdio.h>

/* ---- driver entry points ---------------------------------------------------------- */

namespace {

struct driver_calls {
	PFN_cuDeviceGet_v2000 device_get;
	PFN_cuDevicePrimaryCtxRetain_v7000 primary_retain;
	PFN_cuCtxGetCurrent_v4000 get_current;
	PFN_cuCtxPushCurrent_v4000 push;
	PFN_cuCtxPopCurrent_v4000 pop;
	PFN_cuGetErrorName_v6000 error_name;
};

driver_calls drv;
std::once_flag drv_once;
int drv_rc; /* the loading's result, written once under drv_once */

cudaError_t entry_point(const char *sym, void **fn)
{
	cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
#if CUDART_VERSION >= 12050
	cudaError_t e = cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, &q);
#else
	cudaError_t e = cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, &q);
#endif
	if (e == cudaSuccess && (q != cudaDriverEntryPointSuccess || !*fn))
		e = cudaErrorSymbolNotFound;
	return e;
}

void load_driver(void)
{
	struct {
		const char *sym;
		void **fn;
	} want[] = {
		{"cuDeviceGet", (void **)&drv.device_get},
		{"cuDevicePrimaryCtxRetain", (void **)&drv.primary_retain},
		{"cuCtxGetCurrent", (void **)&drv.get_current},
		{"cuCtxPushCurrent", (void **)&drv.push},
		{"cuCtxPopCurrent", (void **)&drv.pop},
		{"cuGetErrorName", (void **)&drv.error_name},
	};
	for (auto &w : want) {
		cudaError_t e = entry_point(w.sym, w.fn);
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			char what[96];
			snprintf(what, sizeof(what), "cudaGetDriverEntryPoint(%s)", w.sym);
			drv_rc = egc_fail(e, what);
			return;
		}
	}
}

/* A failed driver call: EMBER_EIO (ENOMEM, EINVAL where they fit) with its name. */
int cu_fail(CUresult r, const char *what)
{
	const char *name = nullptr;
	char num[32];
	if (!drv.error_name || drv.error_name(r, &name) != CUDA_SUCCESS || !name) {
		snprintf(num, sizeof(num), "CUresult %d", (int)r);
		name = num;
	}
	eg_detail_set(what, name, "driver API call failed");
	switch (r) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return EMBER_ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_DEVICE:
		return EMBER_EINVAL;
	default:
		return EMBER_EIO;
	}
}

/* Primary contexts retained by Ember, one per device, kept until the process exits
 * (as the runtime keeps its own): releasing the last reference would reset the
 * context under any library that uses it without having retained it. */
std::mutex primary_mu;
constexpr int kMaxDevices = 64;
CUcontext primary[kMaxDevices];

int primary_context(int ordinal, CUcontext *out)
{
	if (ordinal < 0 || ordinal >= kMaxDevices) {
		eg_detail_set("device ordinal", "cudaErrorInvalidDevice",
			      "Ember handles device ordinals 0..63");
		return EMBER_EINVAL;
	}
	std::lock_guard<std::mutex> lock(primary_mu);
	if (!primary[ordinal]) {
		CUdevice dev;
		CUresult r = drv.device_get(&dev, ordinal);
		if (r != CUDA_SUCCESS)
			return cu_fail(r, "cuDeviceGet");
		if ((r = drv.primary_retain(&primary[ordinal], dev)) != CUDA_SUCCESS) {
			primary[ordinal] = nullptr;
			return cu_fail(r, "cuDevicePrimaryCtxRetain");
		}
	}
	*out = primary[ordinal];
	return 0;
}

} /* namespace */

egc_scope::egc_scope(const eg_dev *d)
{
	CUcontext cur = nullptr;
	CUresult r = drv.get_current(&cur);
	if (r != CUDA_SUCCESS) {
		rc_ = cu_fail(r, "cuCtxGetCurrent");
		return;
	}
	if (cur == (CUcontext)d->ctx)
		return; /* the caller is on Ember's device already: nothing to undo */
	if ((r = drv.push((CUcontext)d->ctx)) != CUDA_SUCCESS) {
		rc_ = cu_fail(r, "cuCtxPushCurrent");
		return;
	}
	pushed_ = true;
}

egc_scope::~egc_scope()
{
	if (pushed_) {
		CUcontext popped;
		(void)drv.pop(&popped); /* ours: the call pushed and popped in pairs */
	}
}

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

int egc_fail(cudaError_t e, const char *what)
{
	if (e != cudaSuccess && e != cudaErrorNotReady) /* NotReady: an answer, not a failure */
		eg_detail_set(what, cudaGetErrorName(e), cudaGetErrorString(e));
	return egc_map_error(e);
}

extern "C" {

int egc_device_count(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e == cudaSuccess)
		return n > 0 ? n : 0;
	(void)cudaGetLastError(); /* reset the last-error state (see EGC_TRY) */
	if (e == cudaErrorNoDevice)
		return 0;
	/* No driver installed at all (the runtime reports that as an insufficient
	 * driver, and the driver version as 0): a machine without a GPU. A driver
	 * that is there but too old, a stub library, a broken install: errors. */
	int version = -1;
	if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&version) == cudaSuccess &&
	    version == 0)
		return 0;
	return egc_fail(e, "cudaGetDeviceCount");
}

static int init_in_scope(eg_dev *d)
{
	EGC_ENTER(d);
	EGC_TRY(cudaFree(0)); /* the runtime's state for the context, now */
	int pools = 0;
	EGC_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, d->ordinal));
	if (pools) {
		cudaMemPoolProps props = {};
		props.allocType = cudaMemAllocationTypePinned;
		props.handleTypes = cudaMemHandleTypeNone;
		props.location.type = cudaMemLocationTypeDevice;
		props.location.id = d->ordinal;
		cudaMemPool_t pool;
		EGC_TRY(cudaMemPoolCreate(&pool, &props));
		d->pool = pool;
		/* scratch freed at the end of one scatter-apply is reused by the next
		 * instead of being unmapped at every synchronization; the pool is
		 * Ember's own, so this keeps at most Ember's peak scratch, and
		 * ember_gpu_close gives it back (cudaMemPoolDestroy) */
		uint64_t keep = UINT64_MAX;
		EGC_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
	}
	cudaStream_t s;
	EGC_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	d->setup = s;
	return 0;
}

static int fini_in_scope(eg_dev *d)
{
	EGC_ENTER(d);
	int rc = 0;
	if (d->setup) {
		cudaError_t e = cudaStreamSynchronize((cudaStream_t)d->setup);
		cudaError_t f = cudaStreamDestroy((cudaStream_t)d->setup);
		if (e == cudaSuccess)
			e = f;
		if (e != cudaSuccess)
			rc = egc_fail(e, "cudaStreamDestroy(set-up stream)");
		d->setup = nullptr;
	}
	if (d->pool) {
		/* memory still handed out (a free not yet run) goes back when it is
		 * freed: the runtime defers the pool's release until then */
		cudaError_t e = cudaMemPoolDestroy((cudaMemPool_t)d->pool);
		if (e != cudaSuccess && rc == 0)
			rc = egc_fail(e, "cudaMemPoolDestroy");
		d->pool = nullptr;
	}
	(void)cudaGetLastError();
	return rc;
}

int egc_init(eg_dev *d, int ordinal)
{
	*d = eg_dev{};
	d->ordinal = ordinal;
	std::call_once(drv_once, load_driver);
	if (drv_rc < 0)
		return drv_rc;
	CUcontext ctx;
	int rc = primary_context(ordinal, &ctx);
	if (rc < 0)
		return rc;
	d->ctx = ctx;
	if ((rc = init_in_scope(d)) < 0)
		(void)fini_in_scope(d);
	return rc;
}

int egc_fini(eg_dev *d)
{
	return fini_in_scope(d);
}

int egc_stream_create(const eg_dev *d, void **out)
{
	EGC_ENTER(d);
	cudaStream_t s;
	EGC_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	*out = s;
	return 0;
}

int egc_stream_destroy(const eg_dev *d, void *s)
{
	EGC_ENTER(d);
	EGC_TRY(cudaStreamDestroy((cudaStream_t)s));
	return 0;
}

int egc_stream_synchronize(const eg_dev *d, void *s)
{
	EGC_ENTER(d);
	EGC_TRY(cudaStreamSynchronize((cudaStream_t)s));
	return 0;
}

int egc_stream_wait_event(const eg_dev *d, void *s, void *e)
{
	EGC_ENTER(d);
	EGC_TRY(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0));
	return 0;
}

int egc_stream_host_func(const eg_dev *d, void *s, void (*fn)(void *), void *arg)
{
	EGC_ENTER(d);
	EGC_TRY(cudaLaunchHostFunc((cudaStream_t)s, fn, arg));
	return 0;
}

int egc_event_create(const eg_dev *d, void **out, int timing, int blocking)
{
	EGC_ENTER(d);
	cudaEvent_t e;
	unsigned flags = (timing ? 0u : cudaEventDisableTiming) | (blocking ? cudaEventBlockingSync : 0u);
	EGC_TRY(cudaEventCreateWithFlags(&e, flags));
	*out = e;
	return 0;
}

int egc_event_destroy(const eg_dev *d, void *e)
{
	EGC_ENTER(d);
	EGC_TRY(cudaEventDestroy((cudaEvent_t)e));
	return 0;
}

int egc_event_record(const eg_dev *d, void *e, void *s)
{
	EGC_ENTER(d);
	EGC_TRY(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
	return 0;
}

int egc_event_query(const eg_dev *d, void *e)
{
	EGC_ENTER(d);
	EGC_TRY(cudaEventQuery((cudaEvent_t)e)); /* cudaErrorNotReady -> EMBER_EAGAIN */
	return 0;
}

int egc_event_synchronize(const eg_dev *d, void *e)
{
	EGC_ENTER(d);
	EGC_TRY(cudaEventSynchronize((cudaEvent_t)e));
	return 0;
}

int egc_event_elapsed_ms(const eg_dev *d, void *start, void *end, float *ms)
{
	EGC_ENTER(d);
	/* Both must have completed: asked first, so a pending event is EMBER_EAGAIN
	 * without a failing cudaEventElapsedTime (which compute-sanitizer reports as an
	 * API error, and which would leave the thread's last-error state set). */
	EGC_TRY(cudaEventQuery((cudaEvent_t)start));
	EGC_TRY(cudaEventQuery((cudaEvent_t)end));
	EGC_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
	return 0;
}

int egc_mem_alloc(const eg_dev *d, size_t bytes, void **out)
{
	EGC_ENTER(d);
	EGC_TRY(cudaMalloc(out, bytes)); /* never managed memory */
	return 0;
}

int egc_mem_free(const eg_dev *d, void *p)
{
	EGC_ENTER(d);
	EGC_TRY(cudaFree(p));
	return 0;
}

int egc_host_alloc(const eg_dev *d, size_t bytes, void **out)
{
	EGC_ENTER(d);
	EGC_TRY(cudaHostAlloc(out, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
	return 0;
}

int egc_host_free(const eg_dev *d, void *p)
{
	EGC_ENTER(d);
	EGC_TRY(cudaFreeHost(p));
	return 0;
}

int egc_memset_sync(const eg_dev *d, void *p, size_t bytes)
{
	EGC_ENTER(d);
	/* Ember's own set-up stream, non-blocking: neither the legacy default stream
	 * (which would wait for every blocking stream of the process, the trainer's
	 * included) nor a stream anyone else enqueues on, so the wait below is for
	 * this memset only */
	EGC_TRY(cudaMemsetAsync(p, 0, bytes, (cudaStream_t)d->setup));
	EGC_TRY(cudaStreamSynchronize((cudaStream_t)d->setup));
	return 0;
}

int egc_copy(const eg_dev *d, void *s, void *dst, const void *src, size_t bytes, int kind)
{
	static const cudaMemcpyKind kinds[] = { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
						cudaMemcpyDeviceToDevice };
	EGC_ENTER(d);
	EGC_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], (cudaStream_t)s));
	return 0;
}

int egc_memset(const eg_dev *d, void *s, void *dst, int value, size_t bytes)
{
	EGC_ENTER(d);
	EGC_TRY(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)s));
	return 0;
}

} /* extern "C" */
