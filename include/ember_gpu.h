/*
 * ember_gpu.h - GPU streaming for Ember's upper layers: a device context, a ring of
 * pinned host staging buffers, copy streams per direction and events, a device
 * arena of fixed-width row slots, asynchronous copies, and the kernels that move
 * rows between the arena and batch tensors (gather, scatter-apply with SGD or
 * Adagrad, install of staged rows).
 *
 * Two backends implement every call (docs/gpu.md):
 *   CUDA  streams are cudaStream_t, events cudaEvent_t, staging buffers come from
 *         cudaHostAlloc (pinned and mapped), device memory from cudaMalloc (never
 *         managed memory), kernels run on the device. Built when the library was
 *         compiled with nvcc (meson option `cuda`). Every call runs on the
 *         device's primary context (the one the CUDA runtime and PyTorch use) and
 *         leaves the calling thread's current device and context as it found
 *         them: the trainer's own allocations and launches are not redirected to
 *         Ember's device, and a thread that never used CUDA gets no context
 *         from Ember.
 *   HOST  "device" memory is plain host memory; each stream is a worker thread
 *         running its operations in order; an event is a completion object. The
 *         ordering rules below hold exactly as on CUDA, so everything written
 *         against this API runs, and is tested, on machines with no GPU.
 *
 * The pipeline the layers build from these calls (docs/gpu.md has the picture):
 *   rows land in a staging buffer (ember_gpu_staging_acquire) -> an H2D copy on a
 *   copy stream, or the install kernel reading the staging buffer directly ->
 *   event -> the consumer's stream waits on the event (never the host) -> gather /
 *   scatter-apply on that stream -> D2H copies of evicted rows into staging on the
 *   D2H stream -> event -> write-back to the store.
 *
 * Streams and events (both backends)
 * ----------------------------------
 *   1. Operations enqueued on one stream run in the order they were enqueued; each
 *      starts after the previous one finished.
 *   2. Operations on different streams are unordered unless an event links them.
 *   3. ember_gpu_event_record(e, s) makes e stand for "everything enqueued on s so
 *      far". Recording again replaces what e stands for. A never-recorded event is
 *      complete.
 *   4. ember_gpu_stream_wait_event(s, e): operations enqueued on s after the call
 *      start only after what e stood for AT THE TIME OF THE CALL completed. The
 *      host does not block.
 *   5. ember_gpu_event_synchronize(e) blocks the calling thread likewise;
 *      ember_gpu_event_query(e) returns 0 when complete, EMBER_EAGAIN if not.
 *   6. Asynchronous calls return once the operation is enqueued: the memory they
 *      name (device and host pointers, index and gradient arrays) must stay valid
 *      and unchanged until the operation has run (wait on an event recorded after
 *      it, or synchronize the stream).
 *
 * Objects and threads
 * -------------------
 *   ember_gpu          A context on one device. Any thread may call anything on it
 *                      concurrently except ember_gpu_close(), which must not race
 *                      with any other call on the context or its objects.
 *   ember_gpu_stream   Thread-safe: any thread may enqueue; operations from several
 *                      threads are ordered by the order their enqueue calls took
 *                      effect. The context owns its copy and compute streams
 *                      (ember_gpu_stream_get); ember_gpu_stream_create makes more.
 *   ember_gpu_event    Thread-safe, but recording the same event from two threads at
 *                      once leaves it standing for either one of the two.
 *   ember_gpu_staging  Thread-safe: acquire and release from any threads; a
 *                      buffer belongs to the thread that acquired it until it
 *                      releases it.
 *   ember_gpu_arena    Thread-safe for enqueueing kernels; the kernels themselves
 *                      must be ordered by the caller when they touch the same slots
 *                      (same stream, or events between streams).
 * Every object belongs to the context it was created from and must be destroyed
 * before the context is closed (ember_gpu_close returns EMBER_EBUSY otherwise).
 * Objects of two contexts never mix (EMBER_EINVAL).
 *
 * After a device fault (an illegal address in a kernel: the CUDA context is then
 * unusable for the rest of the process) every call returns EMBER_EIO. The
 * destroy calls still free the object and count it out (returning the error), so
 * the context can be closed: destroy everything (release staging buffers with
 * s == NULL), then ember_gpu_close.
 *
 * Return values
 * -------------
 * 0 or a negative EMBER_E* code (ember_strerror explains it). EMBER_EINVAL: an
 * argument is NULL, zero where zero makes no sense, out of range, or belongs to
 * another context. EMBER_ENOMEM: host or device memory ran out. EMBER_EIO: the CUDA
 * runtime reported a device failure (a failed launch, a lost device, a driver too
 * old for the runtime); ember_gpu_error_detail says which call and what CUDA said.
 * Destructors accept NULL. Counts of zero (n == 0 lookups, bytes == 0) are valid
 * and enqueue nothing.
 *
 * Data layout
 * -----------
 * Rows are `dim` fp32 values. An arena slot holds a row, then (with
 * EMBER_GPU_STATE_ADAGRAD) `dim` fp32 values of optimizer state beside it; slots are
 * `stride` floats apart (dim + state floats, rounded up to a multiple of 4 = 16
 * bytes). Slot indices are uint32_t. A "packed" row buffer (batch tensors, staged
 * rows) holds rows back to back: dim floats each, or dim + state floats each with
 * EMBER_GPU_WITH_STATE.
 */
#ifndef EMBER_GPU_H
#define EMBER_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ember.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_gpu ember_gpu;
typedef struct ember_gpu_stream ember_gpu_stream;
typedef struct ember_gpu_event ember_gpu_event;
typedef struct ember_gpu_staging ember_gpu_staging;
typedef struct ember_gpu_arena ember_gpu_arena;

/* ==== context ================================================================== */

/* ember_gpu_options.backend */
enum {
	EMBER_GPU_BACKEND_AUTO = 0, /* CUDA when built with it and a device exists, host when
				       there is no device; EMBER_EIO when the CUDA runtime
				       fails (ember_gpu_device_count) */
	EMBER_GPU_BACKEND_HOST = 1, /* plain memory and worker threads */
	EMBER_GPU_BACKEND_CUDA = 2, /* EMBER_EINVAL when built without CUDA or no such device,
				       EMBER_EIO when the CUDA runtime fails */
};

#define EMBER_GPU_MAX_COPY_STREAMS 8u

typedef struct ember_gpu_options {
	/* EMBER_GPU_BACKEND_*. Default AUTO. */
	int backend;
	/* CUDA device ordinal (0 .. ember_gpu_device_count() - 1). Default 0. Ignored
	 * by the host backend. */
	int device;
	/* Copy streams host->device and device->host the context owns, each
	 * 1 .. EMBER_GPU_MAX_COPY_STREAMS. Default 1 each. */
	uint32_t h2d_streams;
	uint32_t d2h_streams;
} ember_gpu_options;

/* Fill *opts with the defaults. opts must not be NULL. */
void ember_gpu_options_default(ember_gpu_options *opts);

/*
 * CUDA devices usable now (>= 0), or EMBER_EIO. 0 means there is no device: the
 * library was built without CUDA, cudaGetDeviceCount reports cudaErrorNoDevice,
 * or no CUDA driver is installed at all (the runtime reports a driver version of
 * 0). Any other failure of the runtime (a driver older than the runtime, a stub
 * libcuda, a broken install) is EMBER_EIO, with CUDA's error in
 * ember_gpu_error_detail: it is not taken for "no device".
 */
int ember_gpu_device_count(void);

/* 1 when this library was built with the CUDA backend, else 0. */
int ember_gpu_have_cuda(void);

/*
 * The calling thread's last CUDA failure behind an EMBER_EIO (or ENOMEM, EINVAL)
 * of an ember_gpu call, as one line in buf (cap bytes, NUL-terminated, truncated
 * if needed): the call, CUDA's error text and name, e.g. "cudaGetDeviceCount: CUDA
 * driver version is insufficient for CUDA runtime version
 * (cudaErrorInsufficientDriver)". Returns 0, EMBER_ENOTFOUND when this thread met
 * none, EMBER_EINVAL for a NULL buf or cap 0. Argument errors found by Ember
 * itself leave no detail.
 */
int ember_gpu_error_detail(char *buf, size_t cap);

/*
 * Open a context. opts may be NULL (defaults). On success *out is the context
 * (close it with ember_gpu_close); on failure *out is left unchanged. With
 * EMBER_GPU_BACKEND_AUTO or _CUDA, a failing CUDA runtime (ember_gpu_device_count
 * < 0) is EMBER_EIO: AUTO falls back to the host backend only when there is no
 * device.
 *
 * CUDA: the context owns a stream of its own for set-up work (arena zeroing) and
 * a memory pool of its own (cudaMemPoolCreate) for scatter-apply's scratch; the
 * device's default pool, which PyTorch's cudaMallocAsync allocator shares, is not
 * touched.
 */
int ember_gpu_open(const ember_gpu_options *opts, ember_gpu **out);

/*
 * Wait for the context's own streams, then free it and its memory pool.
 * EMBER_EBUSY (and nothing is closed) while streams, events, staging rings,
 * arenas or device/pinned buffers created from it are alive. Any other result
 * means the context is freed: 0, or the first device error met while waiting
 * (EMBER_EIO after a device fault). Accepts NULL.
 */
int ember_gpu_close(ember_gpu *g);

/* The backend the context runs on: EMBER_GPU_BACKEND_HOST or _CUDA (never AUTO),
 * or EMBER_EINVAL for NULL. */
int ember_gpu_backend(const ember_gpu *g);

/* ==== streams ================================================================== */

/* ember_gpu_stream_get kinds */
enum {
	EMBER_GPU_STREAM_H2D = 0,     /* index < options.h2d_streams */
	EMBER_GPU_STREAM_D2H = 1,     /* index < options.d2h_streams */
	EMBER_GPU_STREAM_COMPUTE = 2, /* index 0: the context's stream for kernels */
};

/* One of the context's own streams (kind, index). The stream lives as long as the
 * context; do not destroy it (ember_gpu_stream_destroy returns EMBER_EINVAL). */
int ember_gpu_stream_get(ember_gpu *g, int kind, uint32_t index, ember_gpu_stream **out);

/* A new stream, owned by the caller (ember_gpu_stream_destroy). */
int ember_gpu_stream_create(ember_gpu *g, ember_gpu_stream **out);

/*
 * CUDA backend: a stream object around a cudaStream_t the caller owns (handle; NULL
 * is the legacy default stream, cudaStreamPerThread the per-thread one), e.g.
 * PyTorch's torch.cuda.current_stream().cuda_stream, so that Ember's calls
 * (stream_wait_event, event_record, gather, scatter-apply, copies, host functions,
 * synchronize) enqueue on the trainer's own stream. The handle must be a stream of
 * the context's device (its primary context, where PyTorch's streams live);
 * Ember does not check it, and a stream of another device fails in the CUDA
 * runtime (EMBER_EINVAL or EMBER_EIO) when used. NON-OWNING: the caller keeps the
 * foreign stream alive while the wrapper is used; ember_gpu_stream_destroy frees
 * the wrapper only (it neither waits for nor destroys the foreign stream). The
 * wrapper counts as an object of the context (ember_gpu_close is EMBER_EBUSY until
 * it is destroyed). Host backend: EMBER_EINVAL (it has no foreign streams).
 */
int ember_gpu_stream_wrap(ember_gpu *g, void *handle, ember_gpu_stream **out);

/* Let the stream's enqueued work finish (host backend: waits; CUDA: the device
 * finishes it in the background), then free it. Accepts NULL. The stream is freed
 * even when the device reports an error (returned). A wrapped stream
 * (ember_gpu_stream_wrap): only the wrapper is freed, the foreign stream is left
 * as it is. The context's own streams: EMBER_EINVAL. */
int ember_gpu_stream_destroy(ember_gpu_stream *s);

/* Block until everything enqueued on s so far has run. */
int ember_gpu_stream_synchronize(ember_gpu_stream *s);

/* Make later work on s wait for what e stands for now (rule 4). Does not block. */
int ember_gpu_stream_wait_event(ember_gpu_stream *s, ember_gpu_event *e);

/*
 * Enqueue a host function: fn(arg) runs on a library thread when the stream reaches
 * it, and the stream's later work waits for it to return (cudaLaunchHostFunc on
 * CUDA). fn must not call any ember_gpu function.
 */
int ember_gpu_stream_host_func(ember_gpu_stream *s, void (*fn)(void *arg), void *arg);

/* CUDA backend: *out = the cudaStream_t (for interoperation with a trainer's own
 * kernels). Host backend: EMBER_EINVAL. */
int ember_gpu_stream_handle(ember_gpu_stream *s, void **out);

/* ==== events =================================================================== */

/* flags of ember_gpu_event_create_flags */
#define EMBER_GPU_EVENT_TIMING 0x1u   /* records a time: ember_gpu_event_elapsed_ms may
					 be used on it (CUDA: without it the event is
					 created with cudaEventDisableTiming, cheaper to
					 record and to wait on) */
#define EMBER_GPU_EVENT_BLOCKING 0x2u /* a host thread waiting on it
					 (ember_gpu_event_synchronize) sleeps instead of
					 spinning a core (cudaEventBlockingSync); for
					 events the host waits on, at the cost of some
					 microseconds of wake-up. Stream waits are not
					 affected. */

/* An event without timing, host waits spinning or yielding as the device's
 * schedule says: ember_gpu_event_create_flags(g, 0, out). */
int ember_gpu_event_create(ember_gpu *g, ember_gpu_event **out);
/* flags: EMBER_GPU_EVENT_* or 0; unknown bits are EMBER_EINVAL. */
int ember_gpu_event_create_flags(ember_gpu *g, uint32_t flags, ember_gpu_event **out);
/* Frees the event; work that waits on it still waits correctly. Accepts NULL. The
 * event is freed even when the device reports an error (returned). */
int ember_gpu_event_destroy(ember_gpu_event *e);
/* e stands for everything enqueued on s so far (rule 3). */
int ember_gpu_event_record(ember_gpu_event *e, ember_gpu_stream *s);
/* 0 when complete, EMBER_EAGAIN if not yet. */
int ember_gpu_event_query(ember_gpu_event *e);
/* Block until complete. */
int ember_gpu_event_synchronize(ember_gpu_event *e);
/*
 * Milliseconds between the completions of two recorded, completed events (start
 * then end), both created with EMBER_GPU_EVENT_TIMING (EMBER_EINVAL otherwise).
 * EMBER_ESTATE if either was never recorded, EMBER_EAGAIN if either is not
 * complete yet.
 */
int ember_gpu_event_elapsed_ms(ember_gpu_event *start, ember_gpu_event *end, float *ms);
/* CUDA backend: *out = the cudaEvent_t. Host backend: EMBER_EINVAL. */
int ember_gpu_event_handle(ember_gpu_event *e, void **out);

/* ==== memory and copies ======================================================== */

/* Device memory (cudaMalloc; host: 64-byte aligned host memory), bytes >= 1.
 * Freed with ember_gpu_mem_free; the memory must be idle (no operation pending
 * on it) when freed. The free calls count the buffer out of the context even
 * when the device reports an error (returned). */
int ember_gpu_mem_alloc(ember_gpu *g, size_t bytes, void **out);
int ember_gpu_mem_free(ember_gpu *g, void *ptr); /* ptr may be NULL */

/* Pinned host memory, mapped for the device (cudaHostAlloc; host: aligned host
 * memory). The device may read it directly (the install kernel does). */
int ember_gpu_host_alloc(ember_gpu *g, size_t bytes, void **out);
int ember_gpu_host_free(ember_gpu *g, void *ptr); /* ptr may be NULL */

/* Asynchronous copies on stream s (rule 6). The regions must not overlap. Host
 * pointers should be pinned (staging buffers, ember_gpu_host_alloc) for the copy
 * to be asynchronous on CUDA. */
int ember_gpu_copy_h2d(ember_gpu_stream *s, void *dst_dev, const void *src_host, size_t bytes);
int ember_gpu_copy_d2h(ember_gpu_stream *s, void *dst_host, const void *src_dev, size_t bytes);
int ember_gpu_copy_d2d(ember_gpu_stream *s, void *dst_dev, const void *src_dev, size_t bytes);
/* Set bytes of device memory to the byte value (0..255). */
int ember_gpu_memset(ember_gpu_stream *s, void *dst_dev, int value, size_t bytes);

/* ==== staging ring ============================================================= */

/*
 * A fixed ring of `buffers` pinned host buffers of `buffer_bytes` each. A buffer is
 * FREE or HELD:
 *   FREE -> HELD   ember_gpu_staging_acquire / _try_acquire: the FREE buffer that
 *                  was released longest ago; if it was released with a stream, the
 *                  call first waits (on the host) until that stream got past the
 *                  release point, so nothing still reads or writes it.
 *   HELD -> FREE   ember_gpu_staging_release(index, s): s == NULL frees it now;
 *                  otherwise it becomes reusable once the work enqueued on s so far
 *                  has run (the copy or kernel reading it).
 * ember_gpu_staging_upload and _download combine a copy, an event and the release.
 */
typedef struct ember_gpu_staging_options {
	size_t buffer_bytes; /* bytes per buffer, >= 1. Default 4 MiB. */
	uint32_t buffers;    /* buffers in the ring, 1 .. 1024. Default 4. */
} ember_gpu_staging_options;

void ember_gpu_staging_options_default(ember_gpu_staging_options *opts);

/* opts may be NULL (defaults). */
int ember_gpu_staging_create(ember_gpu *g, const ember_gpu_staging_options *opts,
			     ember_gpu_staging **out);
/* Waits for pending releases, then frees the buffers. EMBER_EBUSY (nothing freed)
 * while a buffer is HELD. Must not race with other calls on the ring. Accepts
 * NULL. */
int ember_gpu_staging_destroy(ember_gpu_staging *st);

/* Block until a buffer is FREE and idle; *index and *ptr (buffer_bytes of pinned
 * memory, 64-byte aligned) describe it. */
int ember_gpu_staging_acquire(ember_gpu_staging *st, uint32_t *index, void **ptr);
/* The same, but EMBER_EAGAIN instead of blocking when every buffer is HELD. It may
 * still wait for the device to finish with the oldest FREE buffer. */
int ember_gpu_staging_try_acquire(ember_gpu_staging *st, uint32_t *index, void **ptr);
/* HELD -> FREE (see above); s may be NULL. EMBER_ESTATE if the buffer is not HELD. */
int ember_gpu_staging_release(ember_gpu_staging *st, uint32_t index, ember_gpu_stream *s);

/*
 * The partition buffer's and the cache's upload path: copy the first `bytes` of
 * HELD buffer `index` to dst_dev on s, record `done` (may be NULL) on s after the
 * copy, and release the buffer against s. The consumer makes its stream wait on
 * `done`. On error the buffer stays HELD: release it against s (a copy may
 * already be enqueued).
 */
int ember_gpu_staging_upload(ember_gpu_staging *st, uint32_t index, ember_gpu_stream *s,
			     void *dst_dev, size_t bytes, ember_gpu_event *done);

/*
 * Write-back path: copy `bytes` from src_dev into HELD buffer `index` on s (a D2H
 * stream) and record `done` (not NULL) after it. The buffer stays HELD: wait on
 * `done`, read it, then release it with s == NULL.
 */
int ember_gpu_staging_download(ember_gpu_staging *st, uint32_t index, ember_gpu_stream *s,
			       const void *src_dev, size_t bytes, ember_gpu_event *done);

/* ==== arena of row slots ======================================================= */

/* ember_gpu_arena_options.state */
enum {
	EMBER_GPU_STATE_NONE = 0,    /* rows only (SGD needs no state) */
	EMBER_GPU_STATE_ADAGRAD = 1, /* dim floats of squared-gradient sums beside each row */
};

typedef struct ember_gpu_arena_options {
	uint32_t dim;   /* floats per row, 1 .. 65536. Required. */
	uint64_t slots; /* slots, 1 .. 2^32 - 2, and the arena must fit size_t. Required. */
	int state;      /* EMBER_GPU_STATE_*. Default NONE. */
} ember_gpu_arena_options;

/* What a cache needs to address slots itself. base is a device pointer. */
typedef struct ember_gpu_arena_info {
	float *base;           /* slot i's row starts at base + i * stride */
	uint64_t slots;
	uint32_t dim;
	uint32_t state_floats; /* optimizer state floats after the row: 0 or dim */
	uint32_t stride;       /* floats between consecutive slots (multiple of 4) */
} ember_gpu_arena_info;

/* Device memory for opts->slots slots, zero-filled (cudaMalloc, then a memset on
 * the context's own set-up stream, which the call waits for: no other stream,
 * the trainer's included, is waited on; host: zeroed host memory). The zeroing is
 * complete when the call returns. */
int ember_gpu_arena_create(ember_gpu *g, const ember_gpu_arena_options *opts,
			   ember_gpu_arena **out);
/* The arena must be idle (no kernel pending on it). Accepts NULL. Freed even when
 * the device reports an error (returned). */
int ember_gpu_arena_destroy(ember_gpu_arena *a);
int ember_gpu_arena_query(const ember_gpu_arena *a, ember_gpu_arena_info *out);
/* Device pointer of slot's row (its state follows at + dim). */
int ember_gpu_arena_row(const ember_gpu_arena *a, uint64_t slot, float **out);
/*
 * Slot indices are read by the kernels as they run, so a bad one (>= slots) cannot
 * be reported by the enqueueing call: the kernel skips that lookup (gather writes
 * zeros to its output row) and sets a sticky flag in the arena. This call returns
 * EMBER_EINVAL and clears the flag if a completed kernel saw a bad index since the
 * last check, else 0. Synchronize the kernels' streams first.
 */
int ember_gpu_arena_check(ember_gpu_arena *a);

/* ==== kernels ================================================================== */

/* flags of gather and install */
#define EMBER_GPU_WITH_STATE 0x1u /* packed rows carry the optimizer state: dim +
				     state_floats floats per row */

/*
 * Gather: out row i = slot slots[i]'s row, for i < n, in lookup order (a slot that
 * appears twice is copied twice). slots (n uint32_t) and out (n packed rows) are
 * device memory (on the host backend any memory). With EMBER_GPU_WITH_STATE the
 * optimizer state is copied too (the write-back path).
 */
int ember_gpu_gather(ember_gpu_stream *s, ember_gpu_arena *a, const uint32_t *slots,
		     uint32_t n, float *out, uint32_t flags);

/*
 * Install: slot slots[i] := packed row i of `rows`, for i < n. Without
 * EMBER_GPU_WITH_STATE the slot's optimizer state (if any) is set to state_init
 * (Adagrad's initial accumulator, e.g. 0 or 0.1; must be finite); with it, rows
 * carry the state and state_init is ignored. rows may be device memory OR a staging buffer / pinned
 * buffer (the kernel then reads host memory over the bus: copy and install in one
 * pass). slots must hold n distinct indices (a repeated slot gets one of its rows,
 * unspecified which).
 */
int ember_gpu_install(ember_gpu_stream *s, ember_gpu_arena *a, const uint32_t *slots,
		      uint32_t n, const float *rows, uint32_t flags, float state_init);

/* ember_gpu_update.optimizer */
enum {
	EMBER_GPU_OPT_SGD = 1,     /* w -= lr * g */
	EMBER_GPU_OPT_ADAGRAD = 2, /* h += g*g; w -= lr * g / (sqrt(h) + eps); needs
				      an arena with EMBER_GPU_STATE_ADAGRAD */
};

typedef struct ember_gpu_update {
	int optimizer; /* EMBER_GPU_OPT_*. Required. */
	float lr;      /* learning rate, finite and > 0. Required. */
	float eps;     /* Adagrad's epsilon, finite and >= 0; 0 means 1e-10. */
} ember_gpu_update;

/*
 * Scatter-apply: grads holds n packed gradient rows (dim floats), row i for lookup
 * slots[i]; n <= 2^31 - 1. For every distinct slot, the gradients of all its lookups are summed
 * (in lookup order, so the result is deterministic) and the optimizer is applied
 * ONCE to the row with that sum. slots and grads are device memory. Lookups with a
 * bad slot index are skipped (ember_gpu_arena_check).
 *
 * Scratch, taken for the duration of the kernels (ember_gpu_scatter_scratch gives
 * the exact figure for an arena and n):
 *   CUDA  16 * n bytes (sort keys, lookup numbers, and the radix sort's second
 *         buffer of each; each of the four arrays rounded up to 256 bytes) plus
 *         the sort's own counters (CUB's temporary storage in its double-buffer
 *         form: digit histograms and per-tile counters, a few KiB plus at most
 *         n / 4 bytes), stream-ordered from the context's own memory pool
 *         (cudaMallocFromPoolAsync, freed with cudaFreeAsync after the kernels;
 *         the pool keeps freed memory for the next call until ember_gpu_close).
 *   HOST  8 * n + 4 * dim bytes of host memory, malloc'ed at enqueue time.
 */
int ember_gpu_scatter_apply(ember_gpu_stream *s, ember_gpu_arena *a, const uint32_t *slots,
			    uint32_t n, const float *grads, const ember_gpu_update *upd);

/* *bytes = the scratch ember_gpu_scatter_apply takes for n lookups into a (0 for
 * n == 0). EMBER_EINVAL for NULL arguments or n > 2^31 - 1. */
int ember_gpu_scatter_scratch(const ember_gpu_arena *a, uint32_t n, size_t *bytes);
/*
 * Scatter-apply with the duplicates already grouped by the caller (the embedding
 * cache groups each batch's lookups by distinct row when it is pushed, on the host,
 * so the device needs no sort): group g names the slot group_slots[g] and the
 * lookups order[group_offsets[g] .. group_offsets[g+1] - 1], whose gradient rows
 * (grads + order[q] * dim) are summed in that order before the optimizer is applied
 * once to the slot's row. ngroups groups, n entries in order (n = group_offsets
 * [ngroups]; n <= 2^31 - 1); group_slots, group_offsets (ngroups + 1 entries) and
 * order are device memory, and grads holds max_row gradient rows. The same
 * result, bit for bit, as ember_gpu_scatter_apply over the lookups when each group
 * lists every lookup of its slot in lookup order.
 * The groups' slots must be distinct (the caller's promise: two groups naming one
 * slot race on its row). A group with a bad slot, a decreasing or out-of-range
 * offset, or an order entry >= max_row is skipped and sets the arena's error
 * flag (ember_gpu_arena_check). No scratch memory.
 * EMBER_EINVAL: NULL arguments (order and grads may be NULL only when n is 0),
 * ngroups > n, n > 2^31 - 1, objects of another context, a bad update (as
 * ember_gpu_scatter_apply).
 */
int ember_gpu_scatter_apply_grouped(ember_gpu_stream *s, ember_gpu_arena *a,
				    const uint32_t *group_slots, const uint32_t *group_offsets,
				    uint32_t ngroups, const uint32_t *order, uint32_t n,
				    uint32_t max_row, const float *grads,
				    const ember_gpu_update *upd);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_GPU_H */
