/*
 * gpu.c - ember_gpu's public calls: argument checks, then dispatch to the context's
 * backend (host_*.c, or the CUDA backend's egc_* calls when built with it).
 *
 * The checks live here, once, so both backends see only valid arguments and
 * return the same codes for the same mistakes. What cannot be checked when a call
 * is enqueued (slot indices are read by the kernels as they run) is reported
 * through the arena's error flag (ember_gpu_arena_check).
 *
 * Context lifetime: ember_gpu_open creates the context's copy and compute streams;
 * every other object counts itself in g->live (eg_live_add) while it exists, and
 * ember_gpu_close refuses (EMBER_EBUSY) while live != 0. A destroy call always
 * frees Ember's side of its object and counts it out, even when the device call
 * under it fails (after a device fault every CUDA call fails): it returns that
 * error, but the object is gone, so the context can still be closed.
 *
 * Error detail: the CUDA backend records the text of every failure in a
 * thread-local buffer (eg_detail_set), which ember_gpu_error_detail reads.
 */
#include "gpu_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

#define EG_ALIGN 64u

void eg_live_add(ember_gpu *g, long d)
{
	/* relaxed: only a count; ember_gpu_close must not race with these calls
	 * (header contract), so the caller's own ordering makes it exact there. */
	atomic_fetch_add_explicit(&g->live, d, memory_order_relaxed);
}

/* The calling thread's last failure: each thread sees its own calls' only. */
static _Thread_local char eg_detail[256];

void eg_detail_set(const char *what, const char *name, const char *text)
{
	snprintf(eg_detail, sizeof(eg_detail), "%s: %s (%s)", what ? what : "?",
		 text ? text : "?", name ? name : "?");
}

int ember_gpu_error_detail(char *buf, size_t cap)
{
	if (!buf || cap == 0)
		return EMBER_EINVAL;
	if (!eg_detail[0])
		return EMBER_ENOTFOUND;
	snprintf(buf, cap, "%s", eg_detail);
	return 0;
}

int ember_gpu_have_cuda(void)
{
#ifdef EMBER_HAVE_CUDA
	return 1;
#else
	return 0;
#endif
}

int ember_gpu_device_count(void)
{
#ifdef EMBER_HAVE_CUDA
	return egc_device_count();
#else
	return 0;
#endif
}

void ember_gpu_options_default(ember_gpu_options *opts)
{
	if (!opts)
		return;
	memset(opts, 0, sizeof(*opts));
	opts->backend = EMBER_GPU_BACKEND_AUTO;
	opts->h2d_streams = 1;
	opts->d2h_streams = 1;
}

/* ---- context --------------------------------------------------------------------- */

static int stream_init(ember_gpu *g, ember_gpu_stream *s, bool builtin)
{
	s->g = g;
	s->builtin = builtin;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g))
		return egc_stream_create(&g->dev, &s->cs);
#endif
	return hs_stream_create(&s->hs);
}

/* Waits for the stream, then destroys it; returns the first device error. */
static int stream_fini(ember_gpu_stream *s)
{
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g)) {
		int rc = egc_stream_synchronize(&s->g->dev, s->cs);
		int rc2 = egc_stream_destroy(&s->g->dev, s->cs);
		return rc < 0 ? rc : rc2;
	}
#endif
	hs_stream_destroy(s->hs); /* runs what is queued first */
	return 0;
}

static int builtin_fini(ember_gpu *g, uint32_t n_h2d, uint32_t n_d2h, bool compute)
{
	int rc = 0, rc2;
	if (compute && (rc2 = stream_fini(&g->compute)) < 0 && rc == 0)
		rc = rc2;
	for (uint32_t i = n_d2h; i-- > 0;)
		if ((rc2 = stream_fini(&g->d2h[i])) < 0 && rc == 0)
			rc = rc2;
	for (uint32_t i = n_h2d; i-- > 0;)
		if ((rc2 = stream_fini(&g->h2d[i])) < 0 && rc == 0)
			rc = rc2;
	return rc;
}

int ember_gpu_open(const ember_gpu_options *opts, ember_gpu **out)
{
	ember_gpu_options o;
	int rc;

	if (!out)
		return EMBER_EINVAL;
	ember_gpu_options_default(&o);
	if (opts) {
		o = *opts;
		if (!o.h2d_streams)
			o.h2d_streams = 1;
		if (!o.d2h_streams)
			o.d2h_streams = 1;
	}
	if (o.backend < EMBER_GPU_BACKEND_AUTO || o.backend > EMBER_GPU_BACKEND_CUDA ||
	    o.device < 0 || o.h2d_streams > EMBER_GPU_MAX_COPY_STREAMS ||
	    o.d2h_streams > EMBER_GPU_MAX_COPY_STREAMS)
		return EMBER_EINVAL;
	if (o.backend != EMBER_GPU_BACKEND_HOST) {
		/* a runtime that fails (a driver too old for it, a broken install) is an
		 * error, also for AUTO: running on host memory instead would hide it */
		int ndev = ember_gpu_device_count();
		if (ndev < 0)
			return ndev;
		if (o.backend == EMBER_GPU_BACKEND_AUTO)
			o.backend = o.device < ndev ? EMBER_GPU_BACKEND_CUDA : EMBER_GPU_BACKEND_HOST;
		if (o.backend == EMBER_GPU_BACKEND_CUDA && o.device >= ndev)
			return EMBER_EINVAL; /* built without CUDA, or no such device */
	}

	ember_gpu *g = em_zalloc(sizeof(*g));
	if (!g)
		return EMBER_ENOMEM;
	g->backend = o.backend;
	g->dev.ordinal = o.backend == EMBER_GPU_BACKEND_CUDA ? o.device : 0;
	atomic_init(&g->live, 0);
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g) && (rc = egc_init(&g->dev, o.device)) < 0)
		goto undo_alloc;
#endif
	for (; g->n_h2d < o.h2d_streams; g->n_h2d++)
		if ((rc = stream_init(g, &g->h2d[g->n_h2d], true)) < 0)
			goto undo_streams;
	for (; g->n_d2h < o.d2h_streams; g->n_d2h++)
		if ((rc = stream_init(g, &g->d2h[g->n_d2h], true)) < 0)
			goto undo_streams;
	if ((rc = stream_init(g, &g->compute, true)) < 0)
		goto undo_streams;
	*out = g;
	return 0;

undo_streams:
	builtin_fini(g, g->n_h2d, g->n_d2h, false);
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g))
		egc_fini(&g->dev);
undo_alloc:
#endif
	em_free(g, sizeof(*g));
	return rc;
}

int ember_gpu_close(ember_gpu *g)
{
	if (!g)
		return 0;
	/* relaxed: close must not race with the calls that count (eg_live_add). */
	if (atomic_load_explicit(&g->live, memory_order_relaxed) != 0)
		return EMBER_EBUSY;
	/* from here on everything is freed, whatever the device says */
	int rc = builtin_fini(g, g->n_h2d, g->n_d2h, true);
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g)) {
		int rc2 = egc_fini(&g->dev);
		if (rc == 0)
			rc = rc2;
	}
#endif
	em_free(g, sizeof(*g));
	return rc;
}

int ember_gpu_backend(const ember_gpu *g)
{
	return g ? g->backend : EMBER_EINVAL;
}

/* ---- streams ------------------------------------------------------------------------ */

int ember_gpu_stream_get(ember_gpu *g, int kind, uint32_t index, ember_gpu_stream **out)
{
	if (!g || !out)
		return EMBER_EINVAL;
	switch (kind) {
	case EMBER_GPU_STREAM_H2D:
		if (index >= g->n_h2d)
			return EMBER_EINVAL;
		*out = &g->h2d[index];
		return 0;
	case EMBER_GPU_STREAM_D2H:
		if (index >= g->n_d2h)
			return EMBER_EINVAL;
		*out = &g->d2h[index];
		return 0;
	case EMBER_GPU_STREAM_COMPUTE:
		if (index != 0)
			return EMBER_EINVAL;
		*out = &g->compute;
		return 0;
	default:
		return EMBER_EINVAL;
	}
}

int ember_gpu_stream_create(ember_gpu *g, ember_gpu_stream **out)
{
	if (!g || !out)
		return EMBER_EINVAL;
	ember_gpu_stream *s = em_zalloc(sizeof(*s));
	if (!s)
		return EMBER_ENOMEM;
	int rc = stream_init(g, s, false);
	if (rc < 0) {
		em_free(s, sizeof(*s));
		return rc;
	}
	eg_live_add(g, 1);
	*out = s;
	return 0;
}

int ember_gpu_stream_wrap(ember_gpu *g, void *handle, ember_gpu_stream **out)
{
	if (!g || !out || !EG_CUDA(g))
		return EMBER_EINVAL;
	ember_gpu_stream *s = em_zalloc(sizeof(*s));
	if (!s)
		return EMBER_ENOMEM;
	s->g = g;
	s->foreign = true;
	s->cs = handle; /* NULL: the legacy default stream */
	eg_live_add(g, 1);
	*out = s;
	return 0;
}

int ember_gpu_stream_destroy(ember_gpu_stream *s)
{
	if (!s)
		return 0;
	if (s->builtin)
		return EMBER_EINVAL;
	ember_gpu *g = s->g;
	int rc = 0;
	if (!s->foreign) { /* a wrapped stream is the caller's: only the wrapper goes */
#ifdef EMBER_HAVE_CUDA
		if (EG_CUDA(g))
			rc = egc_stream_destroy(&g->dev, s->cs); /* lets queued work finish */
		else
#endif
			hs_stream_destroy(s->hs);
	}
	/* freed and counted out even if the device failed (see the top of the file) */
	em_free(s, sizeof(*s));
	eg_live_add(g, -1);
	return rc;
}

int ember_gpu_stream_synchronize(ember_gpu_stream *s)
{
	if (!s)
		return EMBER_EINVAL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_stream_synchronize(&s->g->dev, s->cs);
#endif
	hs_stream_synchronize(s->hs);
	return 0;
}

int ember_gpu_stream_wait_event(ember_gpu_stream *s, ember_gpu_event *e)
{
	if (!s || !e || s->g != e->g)
		return EMBER_EINVAL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_stream_wait_event(&s->g->dev, s->cs, e->ce);
#endif
	return hs_stream_wait_event(s->hs, e->he);
}

int ember_gpu_stream_host_func(ember_gpu_stream *s, void (*fn)(void *arg), void *arg)
{
	if (!s || !fn)
		return EMBER_EINVAL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_stream_host_func(&s->g->dev, s->cs, fn, arg);
#endif
	return hk_host_func(s->hs, fn, arg);
}

int ember_gpu_stream_handle(ember_gpu_stream *s, void **out)
{
	if (!s || !out || !EG_CUDA(s->g))
		return EMBER_EINVAL;
	*out = s->cs;
	return 0;
}

/* ---- events --------------------------------------------------------------------------- */

int ember_gpu_event_create(ember_gpu *g, ember_gpu_event **out)
{
	return ember_gpu_event_create_flags(g, 0, out);
}

int ember_gpu_event_create_flags(ember_gpu *g, uint32_t flags, ember_gpu_event **out)
{
	if (!g || !out || (flags & ~(EMBER_GPU_EVENT_TIMING | EMBER_GPU_EVENT_BLOCKING)))
		return EMBER_EINVAL;
	ember_gpu_event *e = em_zalloc(sizeof(*e));
	if (!e)
		return EMBER_ENOMEM;
	e->g = g;
	e->flags = flags;
	atomic_init(&e->recorded, false);
	int rc;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g))
		rc = egc_event_create(&g->dev, &e->ce, !!(flags & EMBER_GPU_EVENT_TIMING),
				      !!(flags & EMBER_GPU_EVENT_BLOCKING));
	else
#endif
		rc = hs_event_create(&e->he);
	if (rc < 0) {
		em_free(e, sizeof(*e));
		return rc;
	}
	eg_live_add(g, 1);
	*out = e;
	return 0;
}

int ember_gpu_event_destroy(ember_gpu_event *e)
{
	if (!e)
		return 0;
	ember_gpu *g = e->g;
	int rc = 0;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g))
		rc = egc_event_destroy(&g->dev, e->ce); /* CUDA keeps pending waits valid */
	else
#endif
		hs_event_destroy(e->he); /* queued operations hold their own references */
	em_free(e, sizeof(*e));
	eg_live_add(g, -1);
	return rc;
}

int ember_gpu_event_record(ember_gpu_event *e, ember_gpu_stream *s)
{
	if (!e || !s || e->g != s->g)
		return EMBER_EINVAL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g)) {
		int rc = egc_event_record(&s->g->dev, e->ce, s->cs);
		if (rc == 0) /* relaxed: a flag for elapsed_ms, read after a sync */
			atomic_store_explicit(&e->recorded, true, memory_order_relaxed);
		return rc;
	}
#endif
	return hs_event_record(e->he, s->hs);
}

int ember_gpu_event_query(ember_gpu_event *e)
{
	if (!e)
		return EMBER_EINVAL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(e->g))
		return egc_event_query(&e->g->dev, e->ce);
#endif
	return hs_event_query(e->he);
}

int ember_gpu_event_synchronize(ember_gpu_event *e)
{
	if (!e)
		return EMBER_EINVAL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(e->g))
		return egc_event_synchronize(&e->g->dev, e->ce);
#endif
	hs_event_synchronize(e->he);
	return 0;
}

int ember_gpu_event_elapsed_ms(ember_gpu_event *start, ember_gpu_event *end, float *ms)
{
	if (!start || !end || !ms || start->g != end->g ||
	    !(start->flags & end->flags & EMBER_GPU_EVENT_TIMING))
		return EMBER_EINVAL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(start->g)) {
		/* relaxed: see ember_gpu_event_record */
		if (!atomic_load_explicit(&start->recorded, memory_order_relaxed) ||
		    !atomic_load_explicit(&end->recorded, memory_order_relaxed))
			return EMBER_ESTATE;
		return egc_event_elapsed_ms(&start->g->dev, start->ce, end->ce, ms);
	}
#endif
	return hs_event_elapsed_ms(start->he, end->he, ms);
}

int ember_gpu_event_handle(ember_gpu_event *e, void **out)
{
	if (!e || !out || !EG_CUDA(e->g))
		return EMBER_EINVAL;
	*out = e->ce;
	return 0;
}

/* ---- memory and copies --------------------------------------------------------------- */

static int mem_alloc(ember_gpu *g, size_t bytes, void **out, bool pinned)
{
	if (!g || !out || bytes == 0)
		return EMBER_EINVAL;
	void *p = NULL;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g)) {
		int rc = pinned ? egc_host_alloc(&g->dev, bytes, &p)
				: egc_mem_alloc(&g->dev, bytes, &p);
		if (rc < 0)
			return rc;
		goto done;
	}
#endif
	(void)pinned;
	p = em_alloc_aligned(EG_ALIGN, bytes);
	if (!p)
		return EMBER_ENOMEM;
#ifdef EMBER_HAVE_CUDA
done:
#endif
	eg_live_add(g, 1);
	*out = p;
	return 0;
}

static int mem_free(ember_gpu *g, void *ptr, bool pinned)
{
	if (!g)
		return EMBER_EINVAL;
	if (!ptr)
		return 0;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g)) {
		int rc = pinned ? egc_host_free(&g->dev, ptr) : egc_mem_free(&g->dev, ptr);
		/* counted out even if the device failed: after a fault the memory is
		 * the driver's to reclaim, and close must not stay EBUSY */
		eg_live_add(g, -1);
		return rc;
	}
#endif
	(void)pinned;
	em_free(ptr, 0);
	eg_live_add(g, -1);
	return 0;
}

int ember_gpu_mem_alloc(ember_gpu *g, size_t bytes, void **out)
{
	return mem_alloc(g, bytes, out, false);
}

int ember_gpu_mem_free(ember_gpu *g, void *ptr)
{
	return mem_free(g, ptr, false);
}

int ember_gpu_host_alloc(ember_gpu *g, size_t bytes, void **out)
{
	return mem_alloc(g, bytes, out, true);
}

int ember_gpu_host_free(ember_gpu *g, void *ptr)
{
	return mem_free(g, ptr, true);
}

static int copy(ember_gpu_stream *s, void *dst, const void *src, size_t bytes, int kind)
{
	if (!s || ((!dst || !src) && bytes))
		return EMBER_EINVAL;
	if (bytes == 0)
		return 0;
	uintptr_t d = (uintptr_t)dst, r = (uintptr_t)src;
	if (d < r + bytes && r < d + bytes)
		return EMBER_EINVAL; /* overlapping (one address space on both backends:
					CUDA's unified addressing, or the host's) */
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_copy(&s->g->dev, s->cs, dst, src, bytes, kind);
#endif
	(void)kind;
	return hk_copy(s->hs, dst, src, bytes);
}

int ember_gpu_copy_h2d(ember_gpu_stream *s, void *dst_dev, const void *src_host, size_t bytes)
{
	return copy(s, dst_dev, src_host, bytes, EG_H2D);
}

int ember_gpu_copy_d2h(ember_gpu_stream *s, void *dst_host, const void *src_dev, size_t bytes)
{
	return copy(s, dst_host, src_dev, bytes, EG_D2H);
}

int ember_gpu_copy_d2d(ember_gpu_stream *s, void *dst_dev, const void *src_dev, size_t bytes)
{
	return copy(s, dst_dev, src_dev, bytes, EG_D2D);
}

int ember_gpu_memset(ember_gpu_stream *s, void *dst_dev, int value, size_t bytes)
{
	if (!s || (!dst_dev && bytes) || value < 0 || value > 255)
		return EMBER_EINVAL;
	if (bytes == 0)
		return 0;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_memset(&s->g->dev, s->cs, dst_dev, value, bytes);
#endif
	return hk_memset(s->hs, dst_dev, value, bytes);
}

/* ---- arena ------------------------------------------------------------------------------ */

#define EG_MAX_DIM 65536u
#define EG_MAX_SLOTS (UINT64_C(0xffffffff) - 1) /* uint32 indices; one value spare */
#define EG_MAX_SCATTER 0x7fffffffu

int ember_gpu_arena_create(ember_gpu *g, const ember_gpu_arena_options *opts,
			   ember_gpu_arena **out)
{
	int rc;

	if (!g || !opts || !out || opts->dim == 0 || opts->dim > EG_MAX_DIM ||
	    opts->slots == 0 || opts->slots > EG_MAX_SLOTS ||
	    (opts->state != EMBER_GPU_STATE_NONE && opts->state != EMBER_GPU_STATE_ADAGRAD))
		return EMBER_EINVAL;
	uint32_t state_floats = opts->state == EMBER_GPU_STATE_ADAGRAD ? opts->dim : 0;
	uint32_t stride = (opts->dim + state_floats + 3u) & ~3u;
	if (opts->slots > SIZE_MAX / sizeof(float) / stride)
		return EMBER_EINVAL; /* does not fit the address space */

	ember_gpu_arena *a = em_zalloc(sizeof(*a));
	if (!a)
		return EMBER_ENOMEM;
	a->g = g;
	a->bytes = (size_t)opts->slots * stride * sizeof(float);
	a->v.slots = opts->slots;
	a->v.dim = opts->dim;
	a->v.state_floats = state_floats;
	a->v.stride = stride;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g)) {
		void *p = NULL;
		if ((rc = egc_mem_alloc(&g->dev, a->bytes, &p)) < 0)
			goto undo_arena;
		a->v.base = p;
		if ((rc = egc_memset_sync(&g->dev, p, a->bytes)) < 0)
			goto undo_base;
		/* The error word: pinned and mapped, so kernels store to it and the
		 * host reads it without a copy. */
		if ((rc = egc_host_alloc(&g->dev, sizeof(int), &p)) < 0)
			goto undo_base;
		a->err_mem = p;
		*a->err_mem = 0;
		a->v.err = a->err_mem;
		goto done;
	}
#endif
	a->v.base = em_alloc_aligned(EG_ALIGN, a->bytes);
	if (!a->v.base) {
		rc = EMBER_ENOMEM;
		goto undo_arena;
	}
	memset(a->v.base, 0, a->bytes);
	a->err_mem = &a->err_word;
	a->v.err = a->err_mem;
#ifdef EMBER_HAVE_CUDA
done:
#endif
	eg_live_add(g, 1);
	*out = a;
	return 0;

#ifdef EMBER_HAVE_CUDA
undo_base:
	egc_mem_free(&g->dev, a->v.base);
#endif
undo_arena:
	em_free(a, sizeof(*a));
	return rc;
}

int ember_gpu_arena_destroy(ember_gpu_arena *a)
{
	if (!a)
		return 0;
	ember_gpu *g = a->g;
	int rc = 0;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(g)) {
		rc = egc_host_free(&g->dev, a->err_mem);
		int rc2 = egc_mem_free(&g->dev, a->v.base);
		if (rc == 0)
			rc = rc2;
	} else
#endif
		em_free(a->v.base, a->bytes);
	em_free(a, sizeof(*a));
	eg_live_add(g, -1); /* even if the device failed (see the top of the file) */
	return rc;
}

int ember_gpu_arena_query(const ember_gpu_arena *a, ember_gpu_arena_info *out)
{
	if (!a || !out)
		return EMBER_EINVAL;
	out->base = a->v.base;
	out->slots = a->v.slots;
	out->dim = a->v.dim;
	out->state_floats = a->v.state_floats;
	out->stride = a->v.stride;
	return 0;
}

int ember_gpu_arena_row(const ember_gpu_arena *a, uint64_t slot, float **out)
{
	if (!a || !out || slot >= a->v.slots)
		return EMBER_EINVAL;
	*out = a->v.base + (size_t)slot * a->v.stride;
	return 0;
}

int ember_gpu_arena_check(ember_gpu_arena *a)
{
	if (!a)
		return EMBER_EINVAL;
	/* relaxed: the caller synchronized with the kernels' streams (header), which
	 * orders their stores before this exchange. */
	int bad = __atomic_exchange_n(a->err_mem, 0, __ATOMIC_RELAXED);
	return bad ? EMBER_EINVAL : 0;
}

/* ---- kernels ---------------------------------------------------------------------------- */

static int kernel_check(ember_gpu_stream *s, ember_gpu_arena *a, const uint32_t *slots,
			uint32_t n, const void *rows, uint32_t flags)
{
	if (!s || !a || s->g != a->g || (flags & ~EMBER_GPU_WITH_STATE))
		return EMBER_EINVAL;
	if (n && (!slots || !rows))
		return EMBER_EINVAL;
	return 0;
}

int ember_gpu_gather(ember_gpu_stream *s, ember_gpu_arena *a, const uint32_t *slots,
		     uint32_t n, float *out, uint32_t flags)
{
	int rc = kernel_check(s, a, slots, n, out, flags);
	if (rc < 0 || n == 0)
		return rc;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_gather(&s->g->dev, s->cs, &a->v, slots, n, out, flags);
#endif
	return hk_gather(s->hs, &a->v, slots, n, out, flags);
}

int ember_gpu_install(ember_gpu_stream *s, ember_gpu_arena *a, const uint32_t *slots,
		      uint32_t n, const float *rows, uint32_t flags, float state_init)
{
	int rc = kernel_check(s, a, slots, n, rows, flags);
	if (rc < 0)
		return rc;
	if (!isfinite(state_init))
		return EMBER_EINVAL;
	if (n == 0)
		return 0;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_install(&s->g->dev, s->cs, &a->v, slots, n, rows, flags, state_init);
#endif
	return hk_install(s->hs, &a->v, slots, n, rows, flags, state_init);
}

/* The update of a scatter-apply: EMBER_EINVAL for a bad one (a must be valid). */
static int update_check(const ember_gpu_arena *a, const ember_gpu_update *upd, eg_update *u)
{
	if (!upd || !isfinite(upd->lr) || !(upd->lr > 0.0f) || !isfinite(upd->eps) ||
	    upd->eps < 0.0f)
		return EMBER_EINVAL;
	if (upd->optimizer != EMBER_GPU_OPT_SGD &&
	    !(upd->optimizer == EMBER_GPU_OPT_ADAGRAD && a->v.state_floats == a->v.dim))
		return EMBER_EINVAL; /* unknown optimizer, or Adagrad without its state */
	*u = (eg_update){ .opt = upd->optimizer, .lr = upd->lr,
			  .eps = upd->eps > 0.0f ? upd->eps : 1e-10f };
	return 0;
}

int ember_gpu_scatter_apply(ember_gpu_stream *s, ember_gpu_arena *a, const uint32_t *slots,
			    uint32_t n, const float *grads, const ember_gpu_update *upd)
{
	int rc = kernel_check(s, a, slots, n, grads, 0);
	if (rc < 0)
		return rc;
	if (n > EG_MAX_SCATTER)
		return EMBER_EINVAL; /* the device sort counts items in an int */
	eg_update u;
	rc = update_check(a, upd, &u);
	if (rc < 0 || n == 0)
		return rc;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_scatter_apply(&s->g->dev, s->cs, &a->v, slots, n, grads, &u);
#endif
	return hk_scatter_apply(s->hs, &a->v, slots, n, grads, &u);
}

int ember_gpu_scatter_scratch(const ember_gpu_arena *a, uint32_t n, size_t *bytes)
{
	if (!a || !bytes || n > EG_MAX_SCATTER)
		return EMBER_EINVAL;
	if (n == 0) {
		*bytes = 0;
		return 0;
	}
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(a->g))
		return egc_scatter_scratch(&a->g->dev, &a->v, n, bytes);
#endif
	*bytes = hk_scatter_scratch(&a->v, n);
	return 0;
}

int ember_gpu_scatter_apply_grouped(ember_gpu_stream *s, ember_gpu_arena *a,
				    const uint32_t *group_slots, const uint32_t *group_offsets,
				    uint32_t ngroups, const uint32_t *order, uint32_t n,
				    uint32_t max_row, const float *grads,
				    const ember_gpu_update *upd)
{
	int rc = kernel_check(s, a, order, n, grads, 0);
	if (rc < 0)
		return rc;
	if (!group_slots || !group_offsets || ngroups > n || n > EG_MAX_SCATTER)
		return EMBER_EINVAL;
	eg_update u;
	rc = update_check(a, upd, &u);
	if (rc < 0 || ngroups == 0)
		return rc;
#ifdef EMBER_HAVE_CUDA
	if (EG_CUDA(s->g))
		return egc_scatter_apply_grouped(&s->g->dev, s->cs, &a->v, group_slots,
						 group_offsets, ngroups, order, n, max_row,
						 grads, &u);
#endif
	return hk_scatter_apply_grouped(s->hs, &a->v, group_slots, group_offsets, ngroups, order,
					n, max_row, grads, &u);
}
