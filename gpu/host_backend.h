/*
 * host_backend.h - the host backend: streams as worker threads, events as
 * completion objects (host_stream.c), and the kernels as functions those workers
 * run (host_kernels.c). Semantics are the CUDA ones listed in ember_gpu.h; how they
 * are kept is written at the top of host_stream.c.
 */
#ifndef EMBER_GPU_HOST_BACKEND_H
#define EMBER_GPU_HOST_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct hs_stream hs_stream;
typedef struct hs_event hs_event;

/* An operation: run(args) on the stream's worker; args is a copy of what the
 * enqueuer passed (at most HS_ARGS_MAX bytes). */
typedef void (*hs_run_fn)(void *args);
#define HS_ARGS_MAX 128u

int hs_stream_create(hs_stream **out);
/* Runs what is queued, stops the worker, frees. Accepts NULL. */
void hs_stream_destroy(hs_stream *s);
/* EMBER_ENOMEM if the operation cannot be queued (nothing is queued then). */
int hs_enqueue(hs_stream *s, hs_run_fn run, const void *args, size_t size);
void hs_stream_synchronize(hs_stream *s);
int hs_stream_wait_event(hs_stream *s, hs_event *e);

int hs_event_create(hs_event **out);
/* Drops the caller's reference; queued operations naming e keep it alive. */
void hs_event_destroy(hs_event *e);
int hs_event_record(hs_event *e, hs_stream *s);
int hs_event_query(hs_event *e);
void hs_event_synchronize(hs_event *e);
int hs_event_elapsed_ms(hs_event *start, hs_event *end, float *ms);

/* Kernels (host_kernels.c): validate nothing (gpu.c did), enqueue on s. */
int hk_copy(hs_stream *s, void *dst, const void *src, size_t bytes);
int hk_memset(hs_stream *s, void *dst, int value, size_t bytes);
int hk_host_func(hs_stream *s, void (*fn)(void *), void *arg);
int hk_gather(hs_stream *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
	      float *out, uint32_t flags);
int hk_install(hs_stream *s, const eg_arena_view *v, const uint32_t *slots, uint32_t n,
	       const float *rows, uint32_t flags, float state_init);
/* The scratch hk_scatter_apply takes (malloc at enqueue): n sort keys, one row. */
size_t hk_scatter_scratch(const eg_arena_view *v, uint32_t n);
int hk_scatter_apply(hs_stream *s, const eg_arena_view *v, const uint32_t *slots,
		     uint32_t n, const float *grads, const eg_update *u);
int hk_scatter_apply_grouped(hs_stream *s, const eg_arena_view *v, const uint32_t *gslots,
			     const uint32_t *goff, uint32_t ngroups, const uint32_t *order,
			     uint32_t n, uint32_t max_row, const float *grads, const eg_update *u);

#endif
