/*
 * host_kernels.c - the host backend's copies and kernels: each call packs its
 * arguments into an operation and enqueues it on a host stream (host_stream.c);
 * the stream's worker runs it in order. The arithmetic is the CUDA backend's,
 * operation for operation (see cuda_kernels.cu), so the two agree to rounding:
 *   gather         out[i] = row(slots[i])                      (lookup order)
 *   install        row(slots[i]) = rows[i]; state = state_init (or copied)
 *   scatter-apply  per distinct slot k: g = sum of grads[i] with slots[i] == k,
 *                  in increasing i; then SGD  w -= lr * g
 *                                  or Adagrad h += g * g; w -= lr * g / (sqrt(h) + eps)
 * A bad slot index (>= slots) skips its lookup (gather writes a zero row) and sets
 * the arena's error flag (ember_gpu_arena_check).
 */
#include "host_backend.h"

#include <ember.h>
#include <ember_gpu.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

static void flag_bad_slot(const eg_arena_view *v)
{
	/* relaxed: ember_gpu_arena_check's caller synchronized with this stream first,
	 * and that handshake (the stream's mutex) orders the store before the read. */
	__atomic_store_n(v->err, 1, __ATOMIC_RELAXED);
}

static uint32_t packed_width(const eg_arena_view *v, uint32_t flags)
{
	return v->dim + ((flags & EMBER_GPU_WITH_STATE) ? v->state_floats : 0);
}

/* ---- copies, memset, host functions ------------------------------------------ */

struct copy_args {
	void *dst;
	const void *src;
	size_t bytes;
};

static void run_copy(void *p)
{
	struct copy_args *a = p;
	memcpy(a->dst, a->src, a->bytes);
}

int hk_copy(hs_stream *s, void *dst, const void *src, size_t bytes)
{
	struct copy_args a = { dst, src, bytes };
	return hs_enqueue(s, run_copy, &a, sizeof(a));
}

struct memset_args {
	void *dst;
	int value;
	size_t bytes;
};

static void run_memset(void *p)
{
	struct memset_args *a = p;
	memset(a->dst, a->value, a->bytes);
}

int hk_memset(hs_stream *s, void *dst, int value, size_t bytes)
{
	struct memset_args a = { dst, value, bytes };
	return hs_enqueue(s, run_memset, &a, sizeof(a));
}

struct func_args {
	void (*fn)(void *);
	void *arg;
};

static void run_func(void *p)
{
	struct func_args *a = p;
	a->fn(a->arg);
}

int hk_host_func(hs_stream *s, void (*fn)(void *), void *arg)
{
	struct func_args a = { fn, arg };
	return hs_enqueue(s, run_func, &a, sizeof(a));
}

/* ---- gather and install ------------------------------------------------------- */

struct rows_args {
	eg_arena_view v;
	const uint32_t *slots;
	uint32_t n;
	uint32_t flags;
	float state_init;
	float *rows; /* gather: output; install: input */
};
_Static_assert(sizeof(struct rows_args) <= HS_ARGS_MAX, "rows_args too large");

static void run_gather(void *p)
{
	struct rows_args *a = p;
	const eg_arena_view *v = &a->v;
	size_t w = packed_width(v, a->flags);

	for (uint32_t i = 0; i < a->n; i++) {
		uint32_t slot = a->slots[i];
		float *dst = a->rows + (size_t)i * w;
		if (slot >= v->slots) {
			flag_bad_slot(v);
			memset(dst, 0, w * sizeof(float));
			continue;
		}
		memcpy(dst, v->base + (size_t)slot * v->stride, w * sizeof(float));
	}
}

int hk_gather(hs_stream *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
	      float *out, uint32_t flags)
{
	struct rows_args a = { .v = *v, .slots = slots, .n = n, .flags = flags, .rows = out };
	return hs_enqueue(s, run_gather, &a, sizeof(a));
}

static void run_install(void *p)
{
	struct rows_args *a = p;
	const eg_arena_view *v = &a->v;
	size_t w = packed_width(v, a->flags);

	for (uint32_t i = 0; i < a->n; i++) {
		uint32_t slot = a->slots[i];
		if (slot >= v->slots) {
			flag_bad_slot(v);
			continue;
		}
		float *dst = v->base + (size_t)slot * v->stride;
		memcpy(dst, a->rows + (size_t)i * w, w * sizeof(float));
		if (!(a->flags & EMBER_GPU_WITH_STATE))
			for (uint32_t j = 0; j < v->state_floats; j++)
				dst[v->dim + j] = a->state_init;
	}
}

int hk_install(hs_stream *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
	       const float *rows, uint32_t flags, float state_init)
{
	struct rows_args a = { .v = *v, .slots = slots, .n = n, .flags = flags,
			       .state_init = state_init, .rows = (float *)rows };
	return hs_enqueue(s, run_install, &a, sizeof(a));
}

/* ---- scatter-apply -------------------------------------------------------------- */

struct scatter_args {
	eg_arena_view v;
	const uint32_t *slots;
	const float *grads;
	uint64_t *keys; /* scratch: n sort keys (slot << 32 | lookup), then dim floats */
	size_t scratch_bytes;
	uint32_t n;
	eg_update u;
};
_Static_assert(sizeof(struct scatter_args) <= HS_ARGS_MAX, "scatter_args too large");

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

static void apply_row(const eg_arena_view *v, const eg_update *u, uint32_t slot,
		      const float *g)
{
	float *w = v->base + (size_t)slot * v->stride;

	if (u->opt == EMBER_GPU_OPT_SGD) {
		for (uint32_t j = 0; j < v->dim; j++)
			w[j] = w[j] - u->lr * g[j];
		return;
	}
	float *h = w + v->dim; /* Adagrad: the accumulator beside the row */
	for (uint32_t j = 0; j < v->dim; j++) {
		h[j] = h[j] + g[j] * g[j];
		w[j] = w[j] - u->lr * g[j] / (sqrtf(h[j]) + u->eps);
	}
}

static void run_scatter(void *p)
{
	struct scatter_args *a = p;
	const eg_arena_view *v = &a->v;
	uint64_t *keys = a->keys;
	float *acc = (float *)(keys + a->n);
	uint32_t m = 0;

	/* Sort (slot, lookup) pairs: equal slots become adjacent, in lookup order. */
	for (uint32_t i = 0; i < a->n; i++) {
		uint32_t slot = a->slots[i];
		if (slot >= v->slots) {
			flag_bad_slot(v);
			continue;
		}
		keys[m++] = (uint64_t)slot << 32 | i;
	}
	qsort(keys, m, sizeof(*keys), cmp_u64);

	for (uint32_t b = 0; b < m;) {
		uint32_t slot = (uint32_t)(keys[b] >> 32);
		uint32_t e = b;
		memset(acc, 0, (size_t)v->dim * sizeof(float));
		for (; e < m && (uint32_t)(keys[e] >> 32) == slot; e++) {
			const float *g = a->grads + (size_t)(uint32_t)keys[e] * v->dim;
			for (uint32_t j = 0; j < v->dim; j++)
				acc[j] = acc[j] + g[j];
		}
		apply_row(v, &a->u, slot, acc);
		b = e;
	}
	em_free(a->keys, a->scratch_bytes);
}

size_t hk_scatter_scratch(const eg_arena_view *v, uint32_t n)
{
	return (size_t)n * sizeof(uint64_t) + (size_t)v->dim * sizeof(float);
}

int hk_scatter_apply(hs_stream *s, const eg_arena_view *v, const uint32_t *slots,
		     uint32_t n, const float *grads, const eg_update *u)
{
	struct scatter_args a = { .v = *v, .slots = slots, .grads = grads, .n = n, .u = *u };

	a.scratch_bytes = hk_scatter_scratch(v, n);
	a.keys = em_alloc(a.scratch_bytes);
	if (!a.keys)
		return EMBER_ENOMEM;
	int rc = hs_enqueue(s, run_scatter, &a, sizeof(a));
	if (rc < 0)
		em_free(a.keys, a.scratch_bytes);
	return rc;
}

struct grouped_args {
	eg_arena_view v;
	const uint32_t *gslots, *goff, *order;
	const float *grads;
	uint32_t ngroups, n, max_row;
	eg_update u;
	float *acc;
	size_t acc_bytes;
};
_Static_assert(sizeof(struct grouped_args) <= HS_ARGS_MAX, "grouped_args fit an hs_op");

/* Skips (and flags) a group whose slot, offsets or order entries are out of range. */
static void run_grouped(void *p)
{
	struct grouped_args *a = p;
	const eg_arena_view *v = &a->v;
	for (uint32_t g = 0; g < a->ngroups; g++) {
		uint32_t slot = a->gslots[g], b = a->goff[g], e = a->goff[g + 1];
		int bad = slot >= v->slots || e < b || e > a->n;
		for (uint32_t q = b; !bad && q < e; q++)
			bad = a->order[q] >= a->max_row;
		if (bad) {
			flag_bad_slot(v);
			continue;
		}
		memset(a->acc, 0, (size_t)v->dim * sizeof(float));
		for (uint32_t q = b; q < e; q++) {
			const float *gr = a->grads + (size_t)a->order[q] * v->dim;
			for (uint32_t j = 0; j < v->dim; j++)
				a->acc[j] = a->acc[j] + gr[j];
		}
		apply_row(v, &a->u, slot, a->acc);
	}
	em_free(a->acc, a->acc_bytes);
}

int hk_scatter_apply_grouped(hs_stream *s, const eg_arena_view *v, const uint32_t *gslots,
			     const uint32_t *goff, uint32_t ngroups, const uint32_t *order,
			     uint32_t n, uint32_t max_row, const float *grads, const eg_update *u)
{
	struct grouped_args a = { .v = *v, .gslots = gslots, .goff = goff, .order = order,
				  .grads = grads, .ngroups = ngroups, .n = n,
				  .max_row = max_row, .u = *u };
	a.acc_bytes = (size_t)v->dim * sizeof(float);
	a.acc = em_alloc(a.acc_bytes);
	if (!a.acc)
		return EMBER_ENOMEM;
	int rc = hs_enqueue(s, run_grouped, &a, sizeof(a));
	if (rc < 0)
		em_free(a.acc, a.acc_bytes);
	return rc;
}
