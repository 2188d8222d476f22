/*
 * gpu_bench.c - ember-gpu-bench: the speed measurements of GPU streaming,
 * each against a baseline measured in the same run:
 *
 *   staging   host->device throughput of the staging pipeline (ring of pinned
 *             buffers, acquire / fill / upload / release against the H2D stream)
 *             vs a plain pinned cudaMemcpyAsync of the same bytes, batches of
 *             --min-mb .. --max-mb (powers of two). Target: >= 90%.
 *   overlap   batches through a double-buffered pipeline: the copy of batch i+1
 *             (staging -> H2D stream -> event) runs while the synthetic compute
 *             kernel works on batch i. Compute-only time per batch vs pipeline
 *             time per batch (target: within 5%), and per-batch event timelines.
 *   kernels   gather and scatter-apply (SGD, Adagrad) bandwidth, bytes read plus
 *             written, vs a device-to-device copy's bandwidth. Target: >= 80%.
 *
 * --backend cuda (default) needs the CUDA backend and a device: without them the
 * driver says so and exits 77. --backend host runs the same driver logic on the
 * host backend (copies are memcpy on worker threads, the "compute kernel" a host
 * function that spins): its figures describe this machine's memory, not a GPU; it
 * is there so the driver itself is exercised (and tested) where no GPU exists.
 * Every run checks its data (tags written into staged chunks are read back from
 * the device; kernels' outputs are spot-checked), so a fast wrong pipeline fails.
 *
 * Output: a table per part on stdout; --json FILE writes every figure.
 */
#include <ember.h>
#include <ember_gpu.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BENCH_HAVE_CUDA
#include "bench_cuda.h"
#endif

#define MB (1024.0 * 1024.0)

typedef struct cfg {
	int backend;
	int device;
	bool quick;
	size_t min_mb, max_mb, chunk_mb;
	uint32_t buffers;
	uint32_t batches;
	double compute_factor; /* compute time per batch / copy time per batch */
	uint32_t dim;
	uint64_t slots;
	uint32_t lookups;
	bool run_staging, run_overlap, run_kernels;
	const char *json;
} cfg;

static FILE *json_f;
static bool json_first = true;

#define DIE(...)                                                                    \
	do {                                                                        \
		fprintf(stderr, "ember-gpu-bench: " __VA_ARGS__);                   \
		fputc('\n', stderr);                                                \
		exit(1);                                                            \
	} while (0)

#define TRY(expr)                                                                   \
	do {                                                                        \
		int rc_ = (expr);                                                   \
		if (rc_ < 0)                                                        \
			DIE("%s:%d: %s: %s", __FILE__, __LINE__, #expr,             \
			    ember_strerror(rc_));                                   \
	} while (0)

static void json_rec(const char *part, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#include <stdarg.h>

/* One JSON object per measurement: {"part": ..., <fields>}. */
static void json_rec(const char *part, const char *fmt, ...)
{
	if (!json_f)
		return;
	va_list ap;
	fprintf(json_f, "%s\n  {\"part\": \"%s\", ", json_first ? "" : ",", part);
	json_first = false;
	va_start(ap, fmt);
	vfprintf(json_f, fmt, ap);
	va_end(ap);
	fputc('}', json_f);
}

static float elapsed(ember_gpu_event *a, ember_gpu_event *b)
{
	float ms = 0;
	TRY(ember_gpu_event_synchronize(b));
	TRY(ember_gpu_event_elapsed_ms(a, b, &ms));
	return ms;
}

/* ---- the synthetic compute step -------------------------------------------------- */

typedef struct compute {
	ember_gpu *g;
	bool cuda;
	int sms;
	long long cycles; /* CUDA: clocks per step */
	double seconds;   /* host: seconds per step */
} compute;

/* The host backend's stand-in for a kernel: it sleeps rather than spins, because a
 * kernel occupies the GPU, not a CPU (spinning would starve the copy worker and the
 * driver on a small machine and measure the scheduler instead). */
static void host_compute(void *arg)
{
	double sec = *(double *)arg;
	struct timespec ts = { (time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9) };
	nanosleep(&ts, NULL);
}

static void compute_step(compute *c, ember_gpu_stream *s)
{
#ifdef BENCH_HAVE_CUDA
	if (c->cuda) {
		void *h = NULL;
		TRY(ember_gpu_stream_handle(s, &h));
		if (bench_cuda_spin(h, c->cycles, c->sms) < 0)
			exit(1);
		return;
	}
#endif
	TRY(ember_gpu_stream_host_func(s, host_compute, &c->seconds));
}

/* Time n steps back to back on s: ms per step. */
static double compute_only(compute *c, ember_gpu_stream *s, uint32_t n)
{
	ember_gpu_event *t0, *t1;
	TRY(ember_gpu_event_create_flags(c->g, EMBER_GPU_EVENT_TIMING, &t0));
	TRY(ember_gpu_event_create_flags(c->g, EMBER_GPU_EVENT_TIMING, &t1));
	TRY(ember_gpu_event_record(t0, s));
	for (uint32_t i = 0; i < n; i++)
		compute_step(c, s);
	TRY(ember_gpu_event_record(t1, s));
	double ms = elapsed(t0, t1) / n;
	TRY(ember_gpu_event_destroy(t1));
	TRY(ember_gpu_event_destroy(t0));
	return ms;
}

/* Make one step last about target_ms. */
static void compute_calibrate(compute *c, ember_gpu_stream *s, double target_ms)
{
	if (!c->cuda) {
		c->seconds = target_ms * 1e-3;
		return;
	}
	c->cycles = 1000000;
	for (int round = 0; round < 4; round++) {
		double ms = compute_only(c, s, 3);
		c->cycles = (long long)((double)c->cycles * target_ms / (ms > 1e-3 ? ms : 1e-3));
		if (c->cycles < 1000)
			c->cycles = 1000;
	}
}

/* ---- staging pipeline vs plain pinned copies --------------------------------------- */

/* Tag the first bytes of a staged chunk, to be read back from the device. */
static void tag_chunk(void *buf, uint64_t tag)
{
	memcpy(buf, &tag, sizeof(tag));
}

static void check_tags(ember_gpu *g, const char *dev, size_t bytes, size_t chunk, uint64_t rep)
{
	ember_gpu_stream *s;
	uint64_t got;
	TRY(ember_gpu_stream_get(g, EMBER_GPU_STREAM_COMPUTE, 0, &s));
	for (size_t off = 0; off < bytes; off += chunk) {
		TRY(ember_gpu_copy_d2h(s, &got, dev + off, sizeof(got)));
		TRY(ember_gpu_stream_synchronize(s));
		uint64_t want = rep << 32 | (off / chunk);
		if (got != want)
			DIE("staging check: chunk at %zu holds tag %llx, want %llx", off,
			    (unsigned long long)got, (unsigned long long)want);
	}
}

static double plain_h2d_ms(ember_gpu *g, const cfg *c, size_t bytes, int reps)
{
#ifdef BENCH_HAVE_CUDA
	if (c->backend == EMBER_GPU_BACKEND_CUDA) {
		float ms;
		if (bench_cuda_plain_h2d(c->device, bytes, reps, &ms) < 0)
			exit(1);
		return ms;
	}
#endif
	/* host backend: the same copies through its H2D stream from one buffer */
	(void)c;
	ember_gpu_stream *s;
	ember_gpu_event *t0, *t1;
	void *src, *dst;
	TRY(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 0, &s));
	TRY(ember_gpu_host_alloc(g, bytes, &src));
	TRY(ember_gpu_mem_alloc(g, bytes, &dst));
	memset(src, 1, bytes);
	TRY(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &t0));
	TRY(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &t1));
	TRY(ember_gpu_copy_h2d(s, dst, src, bytes));
	TRY(ember_gpu_event_record(t0, s));
	for (int i = 0; i < reps; i++)
		TRY(ember_gpu_copy_h2d(s, dst, src, bytes));
	TRY(ember_gpu_event_record(t1, s));
	double ms = elapsed(t0, t1);
	TRY(ember_gpu_event_destroy(t1));
	TRY(ember_gpu_event_destroy(t0));
	TRY(ember_gpu_mem_free(g, dst));
	TRY(ember_gpu_host_free(g, src));
	return ms;
}

static double staging_ms(ember_gpu *g, const cfg *c, size_t bytes, int reps)
{
	size_t chunk = c->chunk_mb << 20;
	if (chunk > bytes)
		chunk = bytes;
	ember_gpu_staging_options so = { .buffer_bytes = chunk, .buffers = c->buffers };
	ember_gpu_staging *st;
	ember_gpu_stream *s;
	ember_gpu_event *t0, *t1;
	char *dst;
	TRY(ember_gpu_staging_create(g, &so, &st));
	TRY(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 0, &s));
	TRY(ember_gpu_mem_alloc(g, bytes, (void **)&dst));
	TRY(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &t0));
	TRY(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &t1));

	double ms = 0;
	for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up (touches every buffer) */
		if (rep == 0)
			TRY(ember_gpu_event_record(t0, s));
		for (size_t off = 0; off < bytes; off += chunk) {
			size_t len = bytes - off < chunk ? bytes - off : chunk;
			uint32_t k;
			void *buf;
			TRY(ember_gpu_staging_acquire(st, &k, &buf));
			if (rep < 0)
				memset(buf, 0, len);
			tag_chunk(buf, (uint64_t)(rep + 1) << 32 | (off / chunk));
			TRY(ember_gpu_staging_upload(st, k, s, dst + off, len, NULL));
		}
	}
	TRY(ember_gpu_event_record(t1, s));
	ms = elapsed(t0, t1);
	check_tags(g, dst, bytes, chunk, (uint64_t)reps);
	TRY(ember_gpu_event_destroy(t1));
	TRY(ember_gpu_event_destroy(t0));
	TRY(ember_gpu_mem_free(g, dst));
	TRY(ember_gpu_staging_destroy(st));
	return ms;
}

static void bench_staging(ember_gpu *g, const cfg *c)
{
	printf("\n== staging pipeline H2D vs plain pinned cudaMemcpyAsync ==\n");
	printf("   chunk %zu MiB, %u staging buffers; GB/s = 1e9 bytes/s\n", c->chunk_mb,
	       c->buffers);
	printf("%10s %6s %12s %12s %8s\n", "batch", "reps", "plain GB/s", "staged GB/s", "ratio");
	for (size_t mb = c->min_mb; mb <= c->max_mb; mb *= 2) {
		size_t bytes = mb << 20;
		double total = c->quick ? 64 * MB : 2048 * MB; /* bytes per measurement */
		int reps = (int)(total / (double)bytes);
		if (reps < 3)
			reps = 3;
		double plain = plain_h2d_ms(g, c, bytes, reps);
		double staged = staging_ms(g, c, bytes, reps);
		double pg = (double)bytes * reps / (plain * 1e-3) / 1e9;
		double sg = (double)bytes * reps / (staged * 1e-3) / 1e9;
		printf("%7zu MiB %6d %12.2f %12.2f %7.1f%%\n", mb, reps, pg, sg, 100.0 * sg / pg);
		json_rec("staging", "\"batch_mib\": %zu, \"reps\": %d, \"plain_gbps\": %.4f, "
			 "\"staged_gbps\": %.4f, \"ratio\": %.4f", mb, reps, pg, sg, sg / pg);
	}
}

/* ---- overlap of copies with compute ---------------------------------------------------- */

static void bench_overlap(ember_gpu *g, const cfg *c, compute *comp)
{
	size_t bytes = (c->quick ? 4 : 64) << 20;
	uint32_t n = c->batches;
	ember_gpu_stream *h2d, *cs;
	ember_gpu_staging *st;
	ember_gpu_staging_options so = { .buffer_bytes = bytes, .buffers = 3 };
	char *dev[2];
	ember_gpu_event **ev = calloc((size_t)4 * n, sizeof(*ev)); /* per batch: copy start/end,
								     compute start/end */
	ember_gpu_event *consumed[2];
	if (!ev)
		DIE("out of memory");
	TRY(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 0, &h2d));
	TRY(ember_gpu_stream_get(g, EMBER_GPU_STREAM_COMPUTE, 0, &cs));
	TRY(ember_gpu_staging_create(g, &so, &st));
	for (int i = 0; i < 2; i++) {
		TRY(ember_gpu_mem_alloc(g, bytes, (void **)&dev[i]));
		TRY(ember_gpu_event_create(g, &consumed[i]));
	}
	for (uint32_t i = 0; i < 4 * n; i++)
		TRY(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &ev[i]));

	/* Copy time of one batch, then a compute step compute_factor times longer. */
	double copy_ms = staging_ms(g, c, bytes, 4) / 4;
	compute_calibrate(comp, cs, copy_ms * c->compute_factor);
	double comp_ms = compute_only(comp, cs, n);

	/* The pipeline: batch i goes to dev[i % 2]; its copy waits until compute i-2
	 * released that buffer; compute i waits for copy i. */
	for (uint32_t i = 0; i < n; i++) {
		ember_gpu_event **e = &ev[4 * i];
		uint32_t k;
		void *buf;
		TRY(ember_gpu_staging_acquire(st, &k, &buf));
		tag_chunk(buf, (uint64_t)i << 32);
		TRY(ember_gpu_stream_wait_event(h2d, consumed[i % 2]));
		TRY(ember_gpu_event_record(e[0], h2d));
		TRY(ember_gpu_staging_upload(st, k, h2d, dev[i % 2], bytes, e[1]));
		TRY(ember_gpu_stream_wait_event(cs, e[1]));
		TRY(ember_gpu_event_record(e[2], cs));
		compute_step(comp, cs);
		TRY(ember_gpu_event_record(e[3], cs));
		TRY(ember_gpu_event_record(consumed[i % 2], cs));
	}
	TRY(ember_gpu_stream_synchronize(cs));
	check_tags(g, dev[(n - 1) % 2], sizeof(uint64_t), bytes, (uint64_t)(n - 1));

	double total = elapsed(ev[0], ev[4 * (n - 1) + 3]);
	double steady = elapsed(ev[4 * 1 + 2], ev[4 * (n - 1) + 3]) / (n - 1);
	double overlapped = 0, copies = 0;
	printf("\n== overlap: copy of batch i+1 vs compute of batch i (%zu MiB batches, %u "
	       "batches) ==\n", bytes >> 20, n);
	printf("   copy %.3f ms/batch, compute-only %.3f ms/batch\n", copy_ms, comp_ms);
	printf("%6s %10s %10s %10s %10s  (ms from the first copy's start)\n", "batch",
	       "copy beg", "copy end", "comp beg", "comp end");
	for (uint32_t i = 0; i < n; i++) {
		float t[4];
		for (int j = 0; j < 4; j++)
			t[j] = elapsed(ev[0], ev[4 * i + j]);
		if (i < 6 || i == n - 1)
			printf("%6u %10.3f %10.3f %10.3f %10.3f\n", i, t[0], t[1], t[2], t[3]);
		if (i >= 1) { /* how much of copy i ran during compute i-1 */
			float pb = elapsed(ev[0], ev[4 * (i - 1) + 2]);
			float pe = elapsed(ev[0], ev[4 * (i - 1) + 3]);
			float lo = t[0] > pb ? t[0] : pb, hi = t[1] < pe ? t[1] : pe;
			overlapped += hi > lo ? hi - lo : 0;
			copies += t[1] - t[0];
		}
	}
	double per_batch = total / n;
	printf("   pipeline %.3f ms/batch over all %u batches (%.1f%% of compute-only), "
	       "steady state %.3f ms/batch (%.1f%%)\n", per_batch, n, 100.0 * per_batch / comp_ms,
	       steady, 100.0 * steady / comp_ms);
	printf("   copies 1..%u ran %.1f%% of their time under the previous batch's compute\n",
	       n - 1, copies > 0 ? 100.0 * overlapped / copies : 0.0);
	json_rec("overlap", "\"batch_mib\": %zu, \"batches\": %u, \"copy_ms\": %.4f, "
		 "\"compute_only_ms\": %.4f, \"pipeline_ms\": %.4f, \"steady_ms\": %.4f, "
		 "\"copy_overlap\": %.4f", bytes >> 20, n, copy_ms, comp_ms, per_batch, steady,
		 copies > 0 ? overlapped / copies : 0.0);

	for (uint32_t i = 0; i < 4 * n; i++)
		TRY(ember_gpu_event_destroy(ev[i]));
	for (int i = 0; i < 2; i++) {
		TRY(ember_gpu_event_destroy(consumed[i]));
		TRY(ember_gpu_mem_free(g, dev[i]));
	}
	TRY(ember_gpu_staging_destroy(st));
	free(ev);
}

/* ---- kernels vs device copy bandwidth ----------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void *upload(ember_gpu *g, const void *host, size_t bytes)
{
	ember_gpu_stream *s;
	void *d;
	TRY(ember_gpu_stream_get(g, EMBER_GPU_STREAM_COMPUTE, 0, &s));
	TRY(ember_gpu_mem_alloc(g, bytes, &d));
	TRY(ember_gpu_copy_h2d(s, d, host, bytes));
	TRY(ember_gpu_stream_synchronize(s));
	return d;
}

typedef struct kernel_run {
	const char *name;
	double bytes; /* read + written per run */
	double ms;    /* per run */
} kernel_run;

static void report_kernel(const kernel_run *k, double copy_gbps)
{
	double gbps = k->bytes / (k->ms * 1e-3) / 1e9;
	printf("%-22s %10.3f %12.1f %10.2f %7.1f%%\n", k->name, k->ms, k->bytes / MB, gbps,
	       100.0 * gbps / copy_gbps);
	json_rec("kernels", "\"kernel\": \"%s\", \"ms\": %.5f, \"bytes\": %.0f, \"gbps\": %.4f, "
		 "\"copy_gbps\": %.4f, \"ratio\": %.4f", k->name, k->ms, k->bytes, gbps, copy_gbps,
		 gbps / copy_gbps);
}

static void bench_kernels(ember_gpu *g, const cfg *c)
{
	ember_gpu_stream *s;
	ember_gpu_event *t0, *t1;
	const int reps = c->quick ? 3 : 10;
	const uint32_t dim = c->dim, n = c->lookups;
	const uint64_t slots = c->slots;
	TRY(ember_gpu_stream_get(g, EMBER_GPU_STREAM_COMPUTE, 0, &s));
	TRY(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &t0));
	TRY(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &t1));

	/* Device copy bandwidth: the arena's size, read once and written once. */
	size_t cbytes = (size_t)slots * dim * sizeof(float);
	void *ca, *cb;
	TRY(ember_gpu_mem_alloc(g, cbytes, &ca));
	TRY(ember_gpu_mem_alloc(g, cbytes, &cb));
	TRY(ember_gpu_memset(s, ca, 0, cbytes));
	TRY(ember_gpu_copy_d2d(s, cb, ca, cbytes));
	TRY(ember_gpu_event_record(t0, s));
	for (int i = 0; i < reps; i++)
		TRY(ember_gpu_copy_d2d(s, cb, ca, cbytes));
	TRY(ember_gpu_event_record(t1, s));
	double copy_ms = elapsed(t0, t1) / reps;
	double copy_gbps = 2.0 * cbytes / (copy_ms * 1e-3) / 1e9;
	TRY(ember_gpu_mem_free(g, cb));
	TRY(ember_gpu_mem_free(g, ca));

	/* Lookups: uniform over the slots (duplicates as they fall); distinct count. */
	uint32_t *look = malloc((size_t)n * sizeof(uint32_t));
	float *grads = malloc((size_t)n * dim * sizeof(float));
	uint8_t *seen = calloc(slots, 1);
	if (!look || !grads || !seen)
		DIE("out of memory");
	uint64_t distinct = 0;
	for (uint32_t i = 0; i < n; i++) {
		look[i] = (uint32_t)(rng_next() % slots);
		distinct += !seen[look[i]];
		seen[look[i]] = 1;
	}
	for (size_t i = 0; i < (size_t)n * dim; i++)
		grads[i] = (float)((rng_next() >> 40) & 0xffff) / 65536.0f - 0.5f;
	uint32_t *look_d = upload(g, look, (size_t)n * sizeof(uint32_t));
	float *grads_d = upload(g, grads, (size_t)n * dim * sizeof(float));
	float *out_d;
	TRY(ember_gpu_mem_alloc(g, (size_t)n * dim * sizeof(float), (void **)&out_d));

	printf("\n== kernels: dim %u, %llu slots, %u lookups (%llu distinct) ==\n", dim,
	       (unsigned long long)slots, n, (unsigned long long)distinct);
	printf("   device copy (d2d) %.2f GB/s (%.1f MiB read + written in %.3f ms)\n", copy_gbps,
	       2.0 * cbytes / MB, copy_ms);
	printf("%-22s %10s %12s %10s %8s\n", "kernel", "ms", "MiB r+w", "GB/s", "of copy");
	json_rec("device_copy", "\"gbps\": %.4f, \"bytes\": %zu", copy_gbps, 2 * cbytes);

	/* The lookups grouped by slot on the host (a stable counting sort), as the
	 * embedding cache groups a batch's lookups when it is pushed: the input of
	 * ember_gpu_scatter_apply_grouped, built outside the timed region. */
	uint32_t *gcount = calloc(slots + 1, sizeof(uint32_t));
	uint32_t *gorder = malloc((size_t)n * sizeof(uint32_t));
	uint32_t *gslots = malloc(((size_t)distinct + 1) * sizeof(uint32_t));
	uint32_t *goff = malloc(((size_t)distinct + 1) * sizeof(uint32_t));
	if (!gcount || !gorder || !gslots || !goff)
		DIE("out of memory");
	for (uint32_t i = 0; i < n; i++)
		gcount[look[i] + 1]++;
	uint32_t ng = 0;
	for (uint64_t k = 0; k < slots; k++) {
		if (gcount[k + 1]) {
			gslots[ng] = (uint32_t)k;
			goff[ng++] = gcount[k];
		}
		gcount[k + 1] += gcount[k];
	}
	goff[ng] = n;
	for (uint32_t i = 0; i < n; i++)
		gorder[gcount[look[i]]++] = i;
	uint32_t *gslots_d = upload(g, gslots, ((size_t)ng + 1) * sizeof(uint32_t));
	uint32_t *goff_d = upload(g, goff, ((size_t)ng + 1) * sizeof(uint32_t));
	uint32_t *gorder_d = upload(g, gorder, (size_t)n * sizeof(uint32_t));

	const double row = (double)dim * sizeof(float);
	for (int run = 0; run < 4; run++) {
		const int with_state = run & 1, grouped = run >> 1;
		ember_gpu_arena_options ao = { .dim = dim, .slots = slots,
					       .state = with_state ? EMBER_GPU_STATE_ADAGRAD
								   : EMBER_GPU_STATE_NONE };
		ember_gpu_arena *a;
		TRY(ember_gpu_arena_create(g, &ao, &a));
		kernel_run k;

		if (run == 0) {
			TRY(ember_gpu_gather(s, a, look_d, n, out_d, 0));
			TRY(ember_gpu_event_record(t0, s));
			for (int i = 0; i < reps; i++)
				TRY(ember_gpu_gather(s, a, look_d, n, out_d, 0));
			TRY(ember_gpu_event_record(t1, s));
			k = (kernel_run){ "gather", n * (2 * row + 4), elapsed(t0, t1) / reps };
			report_kernel(&k, copy_gbps);
		}
		ember_gpu_update u = { .optimizer = with_state ? EMBER_GPU_OPT_ADAGRAD
							       : EMBER_GPU_OPT_SGD, .lr = 0.01f };
		for (int i = 0; i < reps + 1; i++) {
			if (i == 1)
				TRY(ember_gpu_event_record(t0, s)); /* the first one warms up */
			if (grouped)
				TRY(ember_gpu_scatter_apply_grouped(s, a, gslots_d, goff_d, ng,
								    gorder_d, n, n, grads_d, &u));
			else
				TRY(ember_gpu_scatter_apply(s, a, look_d, n, grads_d, &u));
		}
		TRY(ember_gpu_event_record(t1, s));
		/* useful bytes: gradients and indices read, each distinct row (and its
		 * state) read and written once; the sort's traffic (ungrouped) and the
		 * group arrays (grouped) are not counted */
		static const char *const names[4] = { "scatter-apply sgd", "scatter-apply adagrad",
						      "grouped sgd", "grouped adagrad" };
		k = (kernel_run){ names[run],
				  n * (row + 4) + distinct * row * 2 * (with_state ? 2 : 1),
				  elapsed(t0, t1) / reps };
		report_kernel(&k, copy_gbps);

		/* Spot check: gather the first lookup's row and compare with the host
		 * arithmetic of (reps + 1) SGD steps from zero for its slot. */
		if (!with_state) {
			float got = 0, want = 0;
			uint32_t slot = look[0];
			float sum = 0;
			for (uint32_t i = 0; i < n; i++)
				if (look[i] == slot)
					sum += grads[(size_t)i * dim];
			for (int r = 0; r < reps + 1; r++)
				want -= 0.01f * sum;
			TRY(ember_gpu_gather(s, a, look_d, 1, out_d, 0));
			TRY(ember_gpu_copy_d2h(s, &got, out_d, sizeof(got)));
			TRY(ember_gpu_stream_synchronize(s));
			if (got != want && (got - want > 1e-4f || want - got > 1e-4f))
				DIE("%s check: slot %u col 0 is %g, want %g", names[run], slot,
				    (double)got, (double)want);
		}
		TRY(ember_gpu_stream_synchronize(s));
		TRY(ember_gpu_arena_check(a));
		TRY(ember_gpu_arena_destroy(a));
	}
	TRY(ember_gpu_mem_free(g, gorder_d));
	TRY(ember_gpu_mem_free(g, goff_d));
	TRY(ember_gpu_mem_free(g, gslots_d));
	free(goff);
	free(gslots);
	free(gorder);
	free(gcount);
	TRY(ember_gpu_mem_free(g, out_d));
	TRY(ember_gpu_mem_free(g, grads_d));
	TRY(ember_gpu_mem_free(g, look_d));
	TRY(ember_gpu_event_destroy(t1));
	TRY(ember_gpu_event_destroy(t0));
	free(seen);
	free(grads);
	free(look);
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage(void)
{
	printf("usage: ember-gpu-bench [options]\n"
	       "  --backend cuda|host  (cuda) host: the driver's logic on the host backend\n"
	       "  --device N           CUDA device (0)\n"
	       "  --only staging|overlap|kernels   run one part (default: all)\n"
	       "  --min-mb N --max-mb N  staging batch sizes, powers of two (1 .. 256)\n"
	       "  --chunk-mb N         staging buffer size (8); --buffers N ring size (4)\n"
	       "  --batches N          overlap: batches (32)\n"
	       "  --compute-factor F   overlap: compute time / copy time per batch (1.25)\n"
	       "  --dim N --slots N --lookups N   kernels (128, 4194304, 1048576)\n"
	       "  --quick              small sizes (the default with --backend host)\n"
	       "  --json FILE          write every figure as JSON\n");
}

static unsigned long long num(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || end == s)
		DIE("not a number: %s", s);
	return v;
}

int main(int argc, char **argv)
{
	cfg c = { .backend = EMBER_GPU_BACKEND_CUDA, .min_mb = 1, .max_mb = 256, .chunk_mb = 8,
		  .buffers = 4, .batches = 32, .compute_factor = 1.25, .dim = 128,
		  .slots = 4u << 20, .lookups = 1u << 20, .run_staging = true,
		  .run_overlap = true, .run_kernels = true };
	bool sizes_set = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool has = v != NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			return 0;
		} else if (!strcmp(a, "--quick")) {
			c.quick = true;
			continue;
		}
		if (!has)
			DIE("%s needs a value (--help)", a);
		i++;
		if (!strcmp(a, "--backend")) {
			if (!strcmp(v, "cuda"))
				c.backend = EMBER_GPU_BACKEND_CUDA;
			else if (!strcmp(v, "host"))
				c.backend = EMBER_GPU_BACKEND_HOST;
			else
				DIE("--backend cuda|host");
		} else if (!strcmp(a, "--device")) {
			c.device = (int)num(v);
		} else if (!strcmp(a, "--only")) {
			c.run_staging = !strcmp(v, "staging");
			c.run_overlap = !strcmp(v, "overlap");
			c.run_kernels = !strcmp(v, "kernels");
			if (!c.run_staging && !c.run_overlap && !c.run_kernels)
				DIE("--only staging|overlap|kernels");
		} else if (!strcmp(a, "--min-mb")) {
			c.min_mb = num(v);
			sizes_set = true;
		} else if (!strcmp(a, "--max-mb")) {
			c.max_mb = num(v);
			sizes_set = true;
		} else if (!strcmp(a, "--chunk-mb")) {
			c.chunk_mb = num(v);
		} else if (!strcmp(a, "--buffers")) {
			c.buffers = (uint32_t)num(v);
		} else if (!strcmp(a, "--batches")) {
			c.batches = (uint32_t)num(v);
		} else if (!strcmp(a, "--compute-factor")) {
			c.compute_factor = strtod(v, NULL);
		} else if (!strcmp(a, "--dim")) {
			c.dim = (uint32_t)num(v);
		} else if (!strcmp(a, "--slots")) {
			c.slots = num(v);
		} else if (!strcmp(a, "--lookups")) {
			c.lookups = (uint32_t)num(v);
		} else if (!strcmp(a, "--json")) {
			c.json = v;
		} else {
			DIE("unknown option %s (--help)", a);
		}
	}
	if (c.backend == EMBER_GPU_BACKEND_HOST)
		c.quick = true;
	if (c.quick && !sizes_set) {
		c.min_mb = 1;
		c.max_mb = 16;
	}
	if (c.quick) {
		c.slots = c.slots > (1u << 16) ? 1u << 16 : c.slots;
		c.lookups = c.lookups > (1u << 16) ? 1u << 16 : c.lookups;
		c.batches = c.batches > 8 ? 8 : c.batches;
	}
	if (c.min_mb < 1 || c.max_mb < c.min_mb || c.chunk_mb < 1 || c.buffers < 1 ||
	    c.batches < 2 || c.compute_factor <= 0 || c.dim < 1 || c.slots < 1 || c.lookups < 1)
		DIE("bad sizes (--help)");

	if (c.backend == EMBER_GPU_BACKEND_CUDA) {
		if (!ember_gpu_have_cuda()) {
			printf("ember-gpu-bench: this build has no CUDA backend (configure with "
			       "-Dcuda=enabled and nvcc on PATH); nothing to measure. "
			       "--backend host runs the driver on the host backend.\n");
			return 77;
		}
		int ndev = ember_gpu_device_count();
		if (ndev < 0) { /* a failing runtime is an error, not "no device" */
			char why[256] = "";
			ember_gpu_error_detail(why, sizeof(why));
			fprintf(stderr, "ember-gpu-bench: the CUDA runtime fails: %s\n", why);
			return 1;
		}
		if (ndev == 0) {
			printf("ember-gpu-bench: no CUDA device here (no driver, or "
			       "cudaErrorNoDevice); nothing to measure.\n");
			return 77;
		}
		if (ndev <= c.device)
			DIE("--device %d: only %d CUDA devices", c.device, ndev);
	}

	ember_gpu_options o;
	ember_gpu *g;
	ember_gpu_options_default(&o);
	o.backend = c.backend;
	o.device = c.device;
	TRY(ember_gpu_open(&o, &g));
	compute comp = { .g = g, .cuda = c.backend == EMBER_GPU_BACKEND_CUDA };
	char what[256] = "host backend (memcpy on worker threads; not a GPU)";
#ifdef BENCH_HAVE_CUDA
	if (comp.cuda && bench_cuda_describe(c.device, what, sizeof(what), &comp.sms) < 0)
		return 1;
#endif
	printf("ember-gpu-bench %s: %s\n", ember_version(), what);
	if (c.json) {
		json_f = fopen(c.json, "w");
		if (!json_f)
			DIE("cannot write %s: %s", c.json, strerror(errno));
		fprintf(json_f, "{\"device\": \"%s\", \"records\": [", what);
	}

	if (c.run_staging)
		bench_staging(g, &c);
	if (c.run_overlap)
		bench_overlap(g, &c, &comp);
	if (c.run_kernels)
		bench_kernels(g, &c);

	if (json_f) {
		fprintf(json_f, "\n]}\n");
		fclose(json_f);
	}
	TRY(ember_gpu_close(g));
	return 0;
}
