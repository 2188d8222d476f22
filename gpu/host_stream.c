/*
 * host_stream.c - the host backend's streams and events: the CUDA ordering rules of
 * ember_gpu.h kept with one worker thread per stream and completion objects.
 *
 * Design notes
 * ------------
 * A stream is a FIFO of operations and one worker thread that runs them one at a
 * time, in enqueue order. An event is a completion object with generations.
 *
 * Invariants
 *   S1. Operations of one stream run in the order hs_enqueue appended them, each
 *       after the previous one returned (one worker, FIFO under s->mu).
 *   S2. s->completed counts operations that have finished; s->enqueued those
 *       appended. hs_stream_synchronize waits for completed >= the enqueued value it
 *       read, so it waits exactly for what was enqueued before it was called.
 *   E1. Each hs_event_record gives the event a new generation g = ++e->last and
 *       adds g to e->pending, then appends a RECORD(g) operation. "e stands for g"
 *       means: e->last == g.
 *   E2. RECORD(g) runs after everything enqueued before it on that stream (S1)
 *       and removes g from e->pending. So generation g is complete iff
 *       g <= e->last and g is not in e->pending.
 *   E3. hs_event_synchronize and WAIT(g) (hs_stream_wait_event) capture
 *       g = e->last when called and wait until g is complete: later records (to
 *       any stream) neither satisfy nor extend the wait, as on CUDA. g = 0 (never
 *       recorded) is complete at once.
 *   E4. e->t is the completion time of generation e->t_gen, the largest completed
 *       generation; elapsed time is defined once e->last is complete (then
 *       t_gen == last).
 *   E5. An event is freed when its reference count drops to 0: one reference for
 *       the creator (dropped by hs_event_destroy) and one per queued RECORD/WAIT
 *       operation naming it (dropped when the operation has run).
 *
 * State transitions of an operation: queued (hs_enqueue) -> running (worker pops
 * it, worker_main) -> done (worker frees it and counts it in s->completed).
 * Stream shutdown: hs_stream_destroy sets stop; the worker drains the queue, then
 * exits; destroy joins it.
 */
#include "host_backend.h"

#include <ember.h>

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"

struct hs_op {
	struct hs_op *next;
	hs_run_fn run;
	alignas(16) unsigned char args[HS_ARGS_MAX];
};

struct hs_stream {
	pthread_mutex_t mu;
	pthread_cond_t work; /* signalled: an operation was appended, or stop */
	pthread_cond_t idle; /* broadcast: completed grew */
	struct hs_op *head, *tail;
	uint64_t enqueued, completed;
	bool stop;
	pthread_t thread;
};

struct hs_event {
	pthread_mutex_t mu;
	pthread_cond_t done; /* broadcast: a generation completed */
	atomic_uint refs;    /* E5 */
	uint64_t last;       /* E1: latest generation; 0 = never recorded */
	uint64_t *pending;   /* recorded, not yet complete generations */
	uint32_t npending, cap;
	uint64_t t_gen;      /* E4 */
	double t;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- streams ------------------------------------------------------------------ */

static void *worker_main(void *arg)
{
	hs_stream *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->work, &s->mu);
		struct hs_op *op = s->head;
		if (!op)
			break; /* stop, and the queue is drained */
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		pthread_mutex_unlock(&s->mu);

		op->run(op->args);
		em_free(op, sizeof(*op));

		pthread_mutex_lock(&s->mu);
		s->completed++;
		pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int hs_stream_create(hs_stream **out)
{
	hs_stream *s = em_zalloc(sizeof(*s));
	if (!s)
		return EMBER_ENOMEM;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->idle, NULL);
	if (pthread_create(&s->thread, NULL, worker_main, s) != 0)
		goto undo_sync;
	*out = s;
	return 0;

undo_sync:
	pthread_cond_destroy(&s->idle);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->mu);
	em_free(s, sizeof(*s));
	return EMBER_ENOMEM;
}

void hs_stream_destroy(hs_stream *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->idle);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->mu);
	em_free(s, sizeof(*s));
}

int hs_enqueue(hs_stream *s, hs_run_fn run, const void *args, size_t size)
{
	if (size > HS_ARGS_MAX)
		return EMBER_EINVAL;
	struct hs_op *op = em_alloc(sizeof(*op));
	if (!op)
		return EMBER_ENOMEM;
	op->next = NULL;
	op->run = run;
	memcpy(op->args, args, size);

	pthread_mutex_lock(&s->mu);
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	s->enqueued++;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void hs_stream_synchronize(hs_stream *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t target = s->enqueued; /* S2 */
	while (s->completed < target)
		pthread_cond_wait(&s->idle, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

/* ---- events ------------------------------------------------------------------- */

static void event_unref(hs_event *e)
{
	/* acq_rel: the thread that frees must see every other holder's writes. */
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_cond_destroy(&e->done);
	pthread_mutex_destroy(&e->mu);
	em_free(e->pending, (size_t)e->cap * sizeof(uint64_t));
	em_free(e, sizeof(*e));
}

static void event_ref(hs_event *e)
{
	/* relaxed: the caller already holds a reference, so e cannot be freed now. */
	atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

/* E2: generation g is complete. Called with e->mu held. */
static bool gen_complete(const hs_event *e, uint64_t g)
{
	for (uint32_t i = 0; i < e->npending; i++)
		if (e->pending[i] == g)
			return false;
	return true;
}

int hs_event_create(hs_event **out)
{
	hs_event *e = em_zalloc(sizeof(*e));
	if (!e)
		return EMBER_ENOMEM;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->done, NULL);
	atomic_init(&e->refs, 1);
	*out = e;
	return 0;
}

void hs_event_destroy(hs_event *e)
{
	if (e)
		event_unref(e);
}

struct record_args {
	hs_event *e;
	uint64_t gen;
};

static void run_record(void *p)
{
	struct record_args *a = p;
	hs_event *e = a->e;
	double t = now_s();

	pthread_mutex_lock(&e->mu);
	for (uint32_t i = 0; i < e->npending; i++) {
		if (e->pending[i] == a->gen) {
			e->pending[i] = e->pending[--e->npending];
			break;
		}
	}
	if (a->gen > e->t_gen) { /* E4 */
		e->t_gen = a->gen;
		e->t = t;
	}
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->mu);
	event_unref(e);
}

int hs_event_record(hs_event *e, hs_stream *s)
{
	struct record_args a = { .e = e };

	pthread_mutex_lock(&e->mu);
	if (e->npending == e->cap) {
		uint32_t cap = e->cap ? e->cap * 2 : 4;
		uint64_t *p = em_alloc((size_t)cap * sizeof(uint64_t));
		if (!p) {
			pthread_mutex_unlock(&e->mu);
			return EMBER_ENOMEM;
		}
		if (e->npending)
			memcpy(p, e->pending, (size_t)e->npending * sizeof(uint64_t));
		em_free(e->pending, (size_t)e->cap * sizeof(uint64_t));
		e->pending = p;
		e->cap = cap;
	}
	a.gen = ++e->last; /* E1 */
	e->pending[e->npending++] = a.gen;
	event_ref(e);
	/* Enqueue while holding e->mu: two records of e racing onto one stream then
	 * queue in generation order, so the stream completes them in that order. */
	int rc = hs_enqueue(s, run_record, &a, sizeof(a));
	if (rc < 0) {
		e->npending--;
		e->last--;
		pthread_mutex_unlock(&e->mu);
		event_unref(e);
		return rc;
	}
	pthread_mutex_unlock(&e->mu);
	return 0;
}

int hs_event_query(hs_event *e)
{
	pthread_mutex_lock(&e->mu);
	bool done = gen_complete(e, e->last);
	pthread_mutex_unlock(&e->mu);
	return done ? 0 : EMBER_EAGAIN;
}

static void wait_gen(hs_event *e, uint64_t g)
{
	pthread_mutex_lock(&e->mu);
	while (!gen_complete(e, g))
		pthread_cond_wait(&e->done, &e->mu);
	pthread_mutex_unlock(&e->mu);
}

void hs_event_synchronize(hs_event *e)
{
	pthread_mutex_lock(&e->mu);
	uint64_t g = e->last; /* E3 */
	pthread_mutex_unlock(&e->mu);
	wait_gen(e, g);
}

int hs_event_elapsed_ms(hs_event *start, hs_event *end, float *ms)
{
	hs_event *ev[2] = { start, end };
	double t[2];

	for (int i = 0; i < 2; i++) {
		pthread_mutex_lock(&ev[i]->mu);
		uint64_t last = ev[i]->last;
		bool done = gen_complete(ev[i], last);
		t[i] = ev[i]->t;
		pthread_mutex_unlock(&ev[i]->mu);
		if (last == 0)
			return EMBER_ESTATE;
		if (!done)
			return EMBER_EAGAIN;
	}
	*ms = (float)((t[1] - t[0]) * 1e3);
	return 0;
}

struct wait_args {
	hs_event *e;
	uint64_t gen;
};

static void run_wait(void *p)
{
	struct wait_args *a = p;
	wait_gen(a->e, a->gen);
	event_unref(a->e);
}

int hs_stream_wait_event(hs_stream *s, hs_event *e)
{
	struct wait_args a = { .e = e };

	pthread_mutex_lock(&e->mu);
	a.gen = e->last; /* E3 */
	pthread_mutex_unlock(&e->mu);
	if (a.gen == 0)
		return 0; /* never recorded: nothing to wait for */
	event_ref(e);
	int rc = hs_enqueue(s, run_wait, &a, sizeof(a));
	if (rc < 0)
		event_unref(e);
	return rc;
}
