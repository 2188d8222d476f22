/*
 * gpu_int.h - what ember_gpu's C files share: the objects behind the public
 * handles and the dispatch helpers. Each object carries its context; its
 * backend-specific part is either a host-backend object (hs_*) or a CUDA handle
 * (void *: cudaStream_t, cudaEvent_t), never both.
 *
 * EMBER_HAVE_CUDA is defined (to 1) only when the CUDA backend is linked in
 * (gpu/meson.build); without it every object is a host-backend object.
 */
#ifndef EMBER_GPU_INT_H
#define EMBER_GPU_INT_H

#include <ember.h>
#include <ember_gpu.h>

#include <stdatomic.h>
#include <stdbool.h>

#include "backend.h"
#include "host_backend.h"

#ifdef EMBER_HAVE_CUDA
#define EG_CUDA(g) ((g)->backend == EMBER_GPU_BACKEND_CUDA)
#else
#define EG_CUDA(g) 0
#endif

struct ember_gpu_stream {
	ember_gpu *g;
	bool builtin;  /* one of the context's own streams */
	bool foreign;  /* CUDA: wraps a stream Ember does not own (ember_gpu_stream_wrap):
			  destroy frees the wrapper, never cs */
	hs_stream *hs; /* host backend */
	void *cs;      /* CUDA: cudaStream_t */
};

struct ember_gpu {
	int backend; /* EMBER_GPU_BACKEND_HOST or _CUDA */
	eg_dev dev;  /* CUDA: device ordinal, primary context, pool, set-up stream */
	/* Objects created from the context and not yet destroyed (streams, events,
	 * staging rings, arenas, device and pinned buffers). */
	atomic_long live;
	uint32_t n_h2d, n_d2h;
	ember_gpu_stream h2d[EMBER_GPU_MAX_COPY_STREAMS];
	ember_gpu_stream d2h[EMBER_GPU_MAX_COPY_STREAMS];
	ember_gpu_stream compute;
};

struct ember_gpu_event {
	ember_gpu *g;
	hs_event *he;         /* host backend */
	void *ce;             /* CUDA: cudaEvent_t */
	uint32_t flags;       /* EMBER_GPU_EVENT_* it was created with */
	atomic_bool recorded; /* CUDA: elapsed_ms on a never-recorded event is ESTATE */
};

struct ember_gpu_arena {
	ember_gpu *g;
	eg_arena_view v;
	size_t bytes;
	int *err_mem; /* CUDA: pinned, mapped word (v.err); host: &err_word */
	int err_word;
};

/* Count an object in or out of g->live. */
void eg_live_add(ember_gpu *g, long d);

#endif
