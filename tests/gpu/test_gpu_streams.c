/*
 * test_gpu_streams.c - the stream and event rules of ember_gpu.h, under threads:
 *
 *   1. order: 4 threads enqueue host functions on ONE stream at once; each
 *      thread's operations run in its enqueue order, all of them run, one at a time.
 *   2. handoff: 4 threads, each with a producer and a consumer stream; per item the
 *      producer writes a value (after a random short delay), records an event, the
 *      consumer waits on the event and checks the value is there (rule 4).
 *   3. capture: a wait captures what the event stood for AT THE CALL; recording the
 *      event again elsewhere does not release the waiter early (rule 4); query and
 *      elapsed_ms report EAGAIN while pending; destroying an event that a queued
 *      wait names is safe.
 *   4. elapsed_ms: ESTATE before any record; covers a 10 ms host function.
 *   5. host backend: destroying a stream runs what it had queued.
 *   6. CUDA: Ember leaves the caller's current context as it found it: a thread
 *      that never used CUDA has no context after Ember calls; a thread with a
 *      context of its own (a second context on the same device, standing for a
 *      trainer on another device) still has it; with two devices, the runtime's
 *      current device of a thread on device 0 stays 0 while Ember works on 1.
 *   7. wrap: a non-owning stream around a foreign cudaStream_t (the handle of an
 *      Ember stream) waits on another stream's event, runs install and gather,
 *      and its destroy leaves the stream usable; the legacy default stream (NULL)
 *      wraps too. Host backend: EMBER_EINVAL.
 *
 *   test_gpu_streams host | cuda [stress]   (cuda: suite gpu, exits 77 without a
 *                                            device; stress: 8x the loops)
 * Counts scale with EMBER_TEST_SCALE; run it under TSan too (the tsan build).
 */
#include "gpu_test.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define THREADS 4

static uint64_t stress = 1; /* gt_stress */

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	nanosleep(&ts, NULL);
}

/* ---- 1. order on one stream ------------------------------------------------------ */

typedef struct order_log {
	uint32_t *entries; /* written only by the stream's callbacks, one at a time */
	uint32_t len, cap;
	atomic_int running; /* callbacks inside at once: must stay <= 1 */
	atomic_int overlap;
} order_log;

typedef struct order_item {
	order_log *log;
	uint32_t value; /* thread << 24 | sequence */
} order_item;

static void order_cb(void *arg)
{
	order_item *it = arg;
	order_log *log = it->log;
	/* relaxed: only counts callbacks that overlap in time; any overlap is a bug. */
	if (atomic_fetch_add_explicit(&log->running, 1, memory_order_relaxed) != 0)
		atomic_store_explicit(&log->overlap, 1, memory_order_relaxed);
	if (log->len < log->cap)
		log->entries[log->len++] = it->value;
	atomic_fetch_sub_explicit(&log->running, 1, memory_order_relaxed);
}

typedef struct order_arg {
	ember_gpu_stream *s;
	order_item *items;
	uint32_t n;
} order_arg;

static void *order_thread(void *p)
{
	order_arg *a = p;
	for (uint32_t i = 0; i < a->n; i++)
		CHECK_OK(ember_gpu_stream_host_func(a->s, order_cb, &a->items[i]));
	return NULL;
}

static void test_order(ember_gpu *g)
{
	uint32_t per = (uint32_t)tu_scaled(3000 * stress);
	order_log log = { .cap = per * THREADS };
	log.entries = gt_malloc((size_t)log.cap * sizeof(uint32_t));
	atomic_init(&log.running, 0);
	atomic_init(&log.overlap, 0);
	ember_gpu_stream *s = NULL;
	CHECK_OK(ember_gpu_stream_create(g, &s));

	pthread_t th[THREADS];
	order_arg args[THREADS];
	for (uint32_t t = 0; t < THREADS; t++) {
		args[t].s = s;
		args[t].n = per;
		args[t].items = gt_malloc((size_t)per * sizeof(order_item));
		for (uint32_t i = 0; i < per; i++)
			args[t].items[i] = (order_item){ &log, t << 24 | i };
		CHECK(pthread_create(&th[t], NULL, order_thread, &args[t]) == 0, "pthread_create");
	}
	for (uint32_t t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	CHECK_OK(ember_gpu_stream_synchronize(s));

	CHECK(log.len == log.cap, "%u of %u callbacks ran", log.len, log.cap);
	CHECK(atomic_load(&log.overlap) == 0, "two callbacks of one stream overlapped");
	uint32_t next[THREADS] = { 0 };
	for (uint32_t i = 0; i < log.len; i++) {
		uint32_t t = log.entries[i] >> 24, seq = log.entries[i] & 0xffffff;
		CHECK(t < THREADS && seq == next[t], "entry %u: thread %u seq %u, want %u", i, t,
		      seq, next[t]);
		next[t]++;
	}
	CHECK_OK(ember_gpu_stream_destroy(s));
	for (uint32_t t = 0; t < THREADS; t++)
		free(args[t].items);
	free(log.entries);
	printf("order: %u callbacks from %d threads in order\n", log.len, THREADS);
}

/* ---- 2. producer/consumer handoff through events ---------------------------------- */

typedef struct handoff {
	uint32_t *values;   /* values[i] = i + 1 once the producer wrote item i */
	uint32_t i;
	long delay_us;
	atomic_int *errors;
} handoff;

static void produce_cb(void *p)
{
	handoff *h = p;
	if (h->delay_us)
		sleep_us(h->delay_us);
	h->values[h->i] = h->i + 1;
}

static void consume_cb(void *p)
{
	handoff *h = p;
	if (h->values[h->i] != h->i + 1) /* relaxed: a count of failures */
		atomic_fetch_add_explicit(h->errors, 1, memory_order_relaxed);
}

typedef struct handoff_arg {
	ember_gpu *g;
	uint32_t n;
	uint64_t stream;
	atomic_int *errors;
} handoff_arg;

static void *handoff_thread(void *p)
{
	handoff_arg *a = p;
	tu_rng r;
	tu_rng_stream(&r, a->stream);
	ember_gpu_stream *prod = NULL, *cons = NULL;
	ember_gpu_event *ev[4];
	CHECK_OK(ember_gpu_stream_create(a->g, &prod));
	CHECK_OK(ember_gpu_stream_create(a->g, &cons));
	for (int k = 0; k < 4; k++)
		CHECK_OK(ember_gpu_event_create(a->g, &ev[k]));
	uint32_t *values = calloc(a->n, sizeof(uint32_t));
	handoff *items = gt_malloc((size_t)a->n * sizeof(handoff));
	CHECK(values != NULL, "calloc");
	for (uint32_t i = 0; i < a->n; i++) {
		items[i] = (handoff){ values, i, tu_rng_chance(&r, 1, 16) ? (long)tu_rng_below(&r, 200) : 0,
				      a->errors };
		/* Events are reused round-robin: re-recording one is fine (rule 3). */
		ember_gpu_event *e = ev[i % 4];
		CHECK_OK(ember_gpu_stream_host_func(prod, produce_cb, &items[i]));
		CHECK_OK(ember_gpu_event_record(e, prod));
		CHECK_OK(ember_gpu_stream_wait_event(cons, e));
		CHECK_OK(ember_gpu_stream_host_func(cons, consume_cb, &items[i]));
	}
	CHECK_OK(ember_gpu_stream_synchronize(cons));
	CHECK_OK(ember_gpu_stream_synchronize(prod));
	for (int k = 0; k < 4; k++)
		CHECK_OK(ember_gpu_event_destroy(ev[k]));
	CHECK_OK(ember_gpu_stream_destroy(cons));
	CHECK_OK(ember_gpu_stream_destroy(prod));
	free(items);
	free(values);
	return NULL;
}

static void test_handoff(ember_gpu *g)
{
	atomic_int errors;
	atomic_init(&errors, 0);
	pthread_t th[THREADS];
	handoff_arg args[THREADS];
	uint32_t n = (uint32_t)tu_scaled(2000 * stress);
	for (int t = 0; t < THREADS; t++) {
		args[t] = (handoff_arg){ g, n, (uint64_t)t + 100, &errors };
		CHECK(pthread_create(&th[t], NULL, handoff_thread, &args[t]) == 0, "pthread_create");
	}
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	CHECK(atomic_load(&errors) == 0, "%d consumers ran before their producer",
	      atomic_load(&errors));
	printf("handoff: %d threads x %u items through events\n", THREADS, n);
}

/* ---- 3. capture at the call; pending queries; destroy while waited on -------------- */

typedef struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool open;
} gate;

static void gate_wait_cb(void *p)
{
	gate *gt = p;
	pthread_mutex_lock(&gt->mu);
	while (!gt->open)
		pthread_cond_wait(&gt->cv, &gt->mu);
	pthread_mutex_unlock(&gt->mu);
}

static void gate_open(gate *gt)
{
	pthread_mutex_lock(&gt->mu);
	gt->open = true;
	pthread_cond_broadcast(&gt->cv);
	pthread_mutex_unlock(&gt->mu);
}

static void flag_cb(void *p)
{
	/* seq_cst: the main thread reads the flag without other synchronization */
	atomic_store((atomic_int *)p, 1);
}

static void test_capture(ember_gpu *g)
{
	gate gt = { .open = false };
	pthread_mutex_init(&gt.mu, NULL);
	pthread_cond_init(&gt.cv, NULL);
	atomic_int flag, flag2;
	atomic_init(&flag, 0);
	atomic_init(&flag2, 0);
	ember_gpu_stream *a = NULL, *b = NULL, *s = NULL, *s2 = NULL;
	ember_gpu_event *e = NULL, *e2 = NULL, *e3 = NULL;
	CHECK_OK(ember_gpu_stream_create(g, &a));
	CHECK_OK(ember_gpu_stream_create(g, &b));
	CHECK_OK(ember_gpu_stream_create(g, &s));
	CHECK_OK(ember_gpu_stream_create(g, &s2));
	CHECK_OK(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &e));
	CHECK_OK(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &e2));
	CHECK_OK(ember_gpu_event_create(g, &e3));

	CHECK_OK(ember_gpu_event_query(e)); /* never recorded: complete */
	CHECK_OK(ember_gpu_event_synchronize(e));
	CHECK_OK(ember_gpu_stream_host_func(a, gate_wait_cb, &gt));
	CHECK_OK(ember_gpu_event_record(e, a));
	CHECK_OK(ember_gpu_event_record(e2, a));
	CHECK_OK(ember_gpu_event_record(e3, a));
	CHECK_OK(ember_gpu_stream_wait_event(s, e));  /* captures e = "a, gated" */
	CHECK_OK(ember_gpu_stream_wait_event(s2, e3));
	CHECK_OK(ember_gpu_event_destroy(e3));       /* the queued wait keeps working */
	e3 = NULL;
	CHECK_OK(ember_gpu_event_record(e, b));      /* e now stands for b: done soon */
	CHECK_OK(ember_gpu_stream_host_func(s, flag_cb, &flag));
	CHECK_OK(ember_gpu_stream_host_func(s2, flag_cb, &flag2));
	CHECK_OK(ember_gpu_event_synchronize(e));    /* waits for b only */
	CHECK_OK(ember_gpu_event_query(e));
	sleep_us(20000);
	CHECK(atomic_load(&flag) == 0, "a wait was released by a later record of its event");
	CHECK(atomic_load(&flag2) == 0, "a wait on a destroyed event did not wait");
	CHECK_RC(ember_gpu_event_query(e2), EMBER_EAGAIN);
	float ms;
	CHECK_RC(ember_gpu_event_elapsed_ms(e, e2, &ms), EMBER_EAGAIN);
	gate_open(&gt);
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_OK(ember_gpu_stream_synchronize(s2));
	CHECK(atomic_load(&flag) == 1 && atomic_load(&flag2) == 1, "waiters did not run");
	CHECK_OK(ember_gpu_event_synchronize(e2));
	CHECK_OK(ember_gpu_event_query(e2));

	CHECK_OK(ember_gpu_event_destroy(e2));
	CHECK_OK(ember_gpu_event_destroy(e));
	CHECK_OK(ember_gpu_stream_destroy(s2));
	CHECK_OK(ember_gpu_stream_destroy(s));
	CHECK_OK(ember_gpu_stream_destroy(b));
	CHECK_OK(ember_gpu_stream_destroy(a));
	pthread_cond_destroy(&gt.cv);
	pthread_mutex_destroy(&gt.mu);
	printf("capture: waits hold what the event stood for at the call\n");
}

/* ---- 4. elapsed time ----------------------------------------------------------------- */

static void sleep10_cb(void *p)
{
	(void)p;
	sleep_us(10000);
}

static void test_elapsed(ember_gpu *g)
{
	ember_gpu_stream *s = gt_compute(g);
	ember_gpu_event *t0 = NULL, *t1 = NULL;
	float ms = -1;
	CHECK_OK(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING, &t0));
	CHECK_OK(ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_TIMING | EMBER_GPU_EVENT_BLOCKING, &t1));
	CHECK_RC(ember_gpu_event_elapsed_ms(t0, t1, &ms), EMBER_ESTATE);
	CHECK_OK(ember_gpu_event_record(t0, s));
	CHECK_OK(ember_gpu_stream_host_func(s, sleep10_cb, NULL));
	CHECK_OK(ember_gpu_event_record(t1, s));
	CHECK_OK(ember_gpu_event_synchronize(t1));
	CHECK_OK(ember_gpu_event_elapsed_ms(t0, t1, &ms));
	/* Not a speed check: the events bracket a 10 ms sleep, so they must be at
	 * least that far apart (5 ms allows for clock granularity). */
	CHECK(ms >= 5.0f, "elapsed %.3f ms around a 10 ms sleep", (double)ms);
	CHECK_OK(ember_gpu_event_destroy(t1));
	CHECK_OK(ember_gpu_event_destroy(t0));
	printf("elapsed: %.3f ms around a 10 ms host function\n", (double)ms);
}

/* ---- 7. foreign streams (ember_gpu_stream_wrap) ------------------------------------- */

/* A wrapper around the cudaStream_t of an Ember stream (standing for PyTorch's current
 * stream): it waits on an event of another stream, runs a gather, records an event;
 * destroying it leaves the stream itself working. Host backend: EMBER_EINVAL. */
static void test_wrap(ember_gpu *g, int backend)
{
	ember_gpu_stream *w = NULL, *own = NULL, *a = NULL;
	void *h = (void *)1;
	CHECK_RC(ember_gpu_stream_wrap(NULL, NULL, &w), EMBER_EINVAL);
	CHECK_RC(ember_gpu_stream_wrap(g, NULL, NULL), EMBER_EINVAL);
	if (backend == EMBER_GPU_BACKEND_HOST) {
		CHECK_RC(ember_gpu_stream_wrap(g, NULL, &w), EMBER_EINVAL);
		CHECK_RC(ember_gpu_stream_wrap(g, (void *)0x1234, &w), EMBER_EINVAL);
		CHECK(w == NULL, "a failed wrap set *out");
		printf("wrap: EINVAL on the host backend\n");
		return;
	}
	CHECK_OK(ember_gpu_stream_create(g, &own));
	CHECK_OK(ember_gpu_stream_create(g, &a));
	CHECK_OK(ember_gpu_stream_handle(own, &h));
	CHECK_OK(ember_gpu_stream_wrap(g, h, &w));
	void *hw = NULL;
	CHECK_OK(ember_gpu_stream_handle(w, &hw));
	CHECK(hw == h, "the wrapper's handle %p is not the stream %p", hw, h);
	CHECK_RC(ember_gpu_close(g), EMBER_EBUSY); /* the wrapper is an object of g */

	/* ordering through an event of another stream (rule 4) */
	gate gt = { .open = false };
	pthread_mutex_init(&gt.mu, NULL);
	pthread_cond_init(&gt.cv, NULL);
	atomic_int flag;
	atomic_init(&flag, 0);
	ember_gpu_event *e = NULL, *done = NULL;
	CHECK_OK(ember_gpu_event_create(g, &e));
	CHECK_OK(ember_gpu_event_create(g, &done));
	CHECK_OK(ember_gpu_stream_host_func(a, gate_wait_cb, &gt));
	CHECK_OK(ember_gpu_event_record(e, a));
	CHECK_OK(ember_gpu_stream_wait_event(w, e));
	CHECK_OK(ember_gpu_stream_host_func(w, flag_cb, &flag));
	sleep_us(20000);
	CHECK(atomic_load(&flag) == 0, "the wrapped stream did not wait on the event");
	gate_open(&gt);
	CHECK_OK(ember_gpu_stream_synchronize(w));
	CHECK(atomic_load(&flag) == 1, "the wrapped stream's host function did not run");

	/* a kernel pair on the wrapper: install then gather, read back */
	enum { SLOTS = 16, DIM = 8, N = 5 };
	ember_gpu_arena_options ao = { .dim = DIM, .slots = SLOTS };
	ember_gpu_arena *ar = NULL;
	CHECK_OK(ember_gpu_arena_create(g, &ao, &ar));
	uint32_t slots[N] = { 3, 0, 15, 7, 3 };
	uint32_t islots[N - 1] = { 3, 0, 15, 7 };
	float rows[(N - 1) * DIM], out[N * DIM];
	for (int i = 0; i < (N - 1) * DIM; i++)
		rows[i] = (float)i * 0.5f - 3.0f;
	uint32_t *dsl = gt_upload(g, slots, sizeof slots);
	uint32_t *disl = gt_upload(g, islots, sizeof islots);
	float *drows = gt_upload(g, rows, sizeof rows);
	float *dout = NULL;
	CHECK_OK(ember_gpu_mem_alloc(g, sizeof out, (void **)&dout));
	CHECK_OK(ember_gpu_install(w, ar, disl, N - 1, drows, 0, 0.0f));
	CHECK_OK(ember_gpu_gather(w, ar, dsl, N, dout, 0));
	CHECK_OK(ember_gpu_event_record(done, w));
	CHECK_OK(ember_gpu_stream_wait_event(gt_compute(g), done));
	gt_download(g, out, dout, sizeof out);
	const int src[N] = { 0, 1, 2, 3, 0 };
	for (int i = 0; i < N; i++)
		for (int k = 0; k < DIM; k++)
			CHECK(out[i * DIM + k] == rows[src[i] * DIM + k],
			      "wrapped gather: lookup %d element %d is %g", i, k,
			      (double)out[i * DIM + k]);

	/* destroying the wrapper leaves the stream alive and usable */
	CHECK_OK(ember_gpu_stream_destroy(w));
	atomic_store(&flag, 0);
	CHECK_OK(ember_gpu_stream_host_func(own, flag_cb, &flag));
	CHECK_OK(ember_gpu_stream_synchronize(own));
	CHECK(atomic_load(&flag) == 1, "the stream stopped working when its wrapper went");

	/* the legacy default stream (handle NULL) */
	CHECK_OK(ember_gpu_stream_wrap(g, NULL, &w));
	atomic_store(&flag, 0);
	CHECK_OK(ember_gpu_stream_host_func(w, flag_cb, &flag));
	CHECK_OK(ember_gpu_stream_synchronize(w));
	CHECK(atomic_load(&flag) == 1, "the default stream's host function did not run");
	CHECK_OK(ember_gpu_stream_destroy(w));

	CHECK_OK(ember_gpu_mem_free(g, dout));
	CHECK_OK(ember_gpu_mem_free(g, drows));
	CHECK_OK(ember_gpu_mem_free(g, disl));
	CHECK_OK(ember_gpu_mem_free(g, dsl));
	CHECK_OK(ember_gpu_arena_destroy(ar));
	CHECK_OK(ember_gpu_event_destroy(done));
	CHECK_OK(ember_gpu_event_destroy(e));
	CHECK_OK(ember_gpu_stream_destroy(a));
	CHECK_OK(ember_gpu_stream_destroy(own));
	pthread_cond_destroy(&gt.cv);
	pthread_mutex_destroy(&gt.mu);
	printf("wrap: a foreign stream waits, runs kernels, and outlives its wrapper\n");
}

/* ---- 5. destroy drains (host backend) ------------------------------------------------ */

static void count_cb(void *p)
{
	/* seq_cst: read by the main thread after the stream is destroyed */
	atomic_fetch_add((atomic_int *)p, 1);
}

static void test_destroy_drains(ember_gpu *g)
{
	atomic_int count;
	atomic_init(&count, 0);
	ember_gpu_stream *s = NULL;
	CHECK_OK(ember_gpu_stream_create(g, &s));
	CHECK_OK(ember_gpu_stream_host_func(s, sleep10_cb, NULL));
	for (int i = 0; i < 100; i++)
		CHECK_OK(ember_gpu_stream_host_func(s, count_cb, &count));
	CHECK_OK(ember_gpu_stream_destroy(s));
	CHECK(atomic_load(&count) == 100, "destroy ran %d of 100 queued operations",
	      atomic_load(&count));
}

/* The driver's and runtime's calls, found in the libraries libember loaded (no
 * CUDA headers in the tests): CUresult/cudaError_t are ints, CUcontext a pointer. */
typedef int (*ctx_get_fn)(void **ctx);
typedef int (*ctx_create_fn)(void **ctx, unsigned flags, int dev);
typedef int (*ctx_pop_fn)(void **ctx);
typedef int (*ctx_destroy_fn)(void *ctx);
typedef int (*dev_fn)(int *dev);
typedef int (*set_dev_fn)(int dev);

static void *cuda_sym(const char *lib, const char *name)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD); /* already loaded by libember */
	CHECK(h != NULL, "%s is not loaded: %s", lib, dlerror());
	void *f = dlsym(h, name);
	CHECK(f != NULL, "%s: no %s", lib, name);
	return f;
}

/* Every kind of call: stream, event, memory, kernel, arena set-up. */
static void ember_calls(ember_gpu *g)
{
	ember_gpu_stream *s = gt_compute(g);
	ember_gpu_event *e = NULL;
	ember_gpu_arena *a = NULL;
	ember_gpu_arena_options ao = { .dim = 4, .slots = 8 };
	void *d = NULL;
	CHECK_OK(ember_gpu_event_create(g, &e));
	CHECK_OK(ember_gpu_mem_alloc(g, 64, &d));
	CHECK_OK(ember_gpu_memset(s, d, 0, 64));
	CHECK_OK(ember_gpu_arena_create(g, &ao, &a));
	CHECK_OK(ember_gpu_gather(s, a, d, 2, (float *)d + 4, 0));
	CHECK_OK(ember_gpu_event_record(e, s));
	CHECK_OK(ember_gpu_event_synchronize(e));
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_OK(ember_gpu_arena_destroy(a));
	CHECK_OK(ember_gpu_mem_free(g, d));
	CHECK_OK(ember_gpu_event_destroy(e));
}

static void *fresh_thread(void *arg)
{
	ember_gpu *g = arg;
	ctx_get_fn get = (ctx_get_fn)cuda_sym("libcuda.so.1", "cuCtxGetCurrent");
	void *ctx = (void *)1;
	CHECK(get(&ctx) == 0 && ctx == NULL, "a new thread has a context before Ember: %p", ctx);
	ember_calls(g);
	CHECK(get(&ctx) == 0, "cuCtxGetCurrent");
	CHECK(ctx == NULL, "Ember left a context (%p) current on a thread that never used CUDA",
	      ctx);
	return NULL;
}

static void test_current_device(ember_gpu *g)
{
	pthread_t t;
	CHECK(pthread_create(&t, NULL, fresh_thread, g) == 0, "pthread_create");
	CHECK(pthread_join(t, NULL) == 0, "pthread_join");

	/* a context of the caller's own, current: still current after Ember's calls */
	ctx_get_fn get = (ctx_get_fn)cuda_sym("libcuda.so.1", "cuCtxGetCurrent");
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	ctx_create_fn create = h ? (ctx_create_fn)dlsym(h, "cuCtxCreate_v2") : NULL;
	if (create) {
		ctx_pop_fn pop = (ctx_pop_fn)cuda_sym("libcuda.so.1", "cuCtxPopCurrent_v2");
		ctx_destroy_fn destroy = (ctx_destroy_fn)cuda_sym("libcuda.so.1", "cuCtxDestroy_v2");
		void *mine = NULL, *cur = NULL;
		CHECK(create(&mine, 0, 0) == 0 && mine, "cuCtxCreate");
		ember_calls(g);
		CHECK(get(&cur) == 0 && cur == mine, "Ember replaced the caller's context %p by %p",
		      mine, cur);
		CHECK(pop(&cur) == 0 && cur == mine, "the caller's context stack changed");
		CHECK(destroy(mine) == 0, "cuCtxDestroy");
	} else {
		printf("current device: this driver exports no cuCtxCreate_v2: the caller's-own-"
		       "context check is not run\n");
	}

	/* two devices: the runtime's current device of the caller stays 0 */
	if (ember_gpu_device_count() >= 2) {
		set_dev_fn set = (set_dev_fn)cuda_sym("libcudart.so.13", "cudaSetDevice");
		dev_fn getdev = (dev_fn)cuda_sym("libcudart.so.13", "cudaGetDevice");
		ember_gpu_options o;
		ember_gpu *g1 = NULL;
		ember_gpu_options_default(&o);
		o.backend = EMBER_GPU_BACKEND_CUDA;
		o.device = 1;
		CHECK(set(0) == 0, "cudaSetDevice(0)");
		CHECK_OK(ember_gpu_open(&o, &g1));
		ember_calls(g1);
		int dev = -1;
		CHECK(getdev(&dev) == 0 && dev == 0, "the caller's device became %d", dev);
		CHECK_OK(ember_gpu_close(g1));
		CHECK(getdev(&dev) == 0 && dev == 0, "after close: device %d", dev);
		printf("current device: kept across a context on device 1\n");
	}
	printf("current device: a fresh thread keeps no context, a caller's own context stays\n");
}

int main(int argc, char **argv)
{
	tu_init("test_gpu_streams", argc, argv);
	int backend = gt_backend(argc, argv, "test_gpu_streams");
	stress = gt_stress(argc, argv);
	ember_gpu *g = gt_open(backend);

	test_order(g);
	test_handoff(g);
	test_capture(g);
	test_elapsed(g);
	test_wrap(g, backend);
	if (backend == EMBER_GPU_BACKEND_HOST)
		test_destroy_drains(g);
	else
		test_current_device(g);
	CHECK_OK(ember_gpu_close(g));
	printf("test_gpu_streams: ok\n");
	return 0;
}
