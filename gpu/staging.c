/*
 * staging.c - the ring of pinned host staging buffers (ember_gpu_staging_*),
 * written once over the public stream/event calls, so it is the same on both
 * backends.
 *
 * Design notes
 * ------------
 * Buffers are one pinned allocation cut into `n` pieces of `bsize` bytes (the
 * requested size rounded up to 64). Each buffer has an event marking the point of
 * the stream it was released against.
 *
 * States of buffer i, and the calls that move it:
 *   FREE      in the fifo, not held. pending[i] says whether ev[i] marks work
 *             that may still use it.
 *   HELD      acquired by one thread (staging_get): FREE -> HELD takes the fifo's
 *             head (the buffer released longest ago: its work is the most likely
 *             to be done), then waits on ev[i] if pending, outside the lock.
 *   RELEASING ember_gpu_staging_release: HELD -> RELEASING under the lock (so a
 *             second release of the same buffer sees ESTATE), records ev[i] on
 *             the stream outside it, then RELEASING -> FREE (pushed to the fifo).
 *
 * Invariants
 *   R1. A buffer is in the fifo iff it is FREE; count == number of FREE buffers.
 *   R2. Only the thread holding a buffer (HELD or RELEASING) touches ev[i] and
 *       pending[i] outside the lock; the lock hands both over with the buffer.
 *   R3. acquire returns a buffer only after every operation enqueued (before its
 *       release) on the stream it was released against has run: ev[i] recorded
 *       there, and waited on before the buffer is handed out.
 */
#include "gpu_int.h"

#include <pthread.h>
#include <string.h>

#include "core/alloc.h"

enum { BUF_FREE = 0, BUF_HELD = 1, BUF_RELEASING = 2 };

struct ember_gpu_staging {
	ember_gpu *g;
	size_t buffer_bytes; /* as requested */
	size_t bsize;        /* distance between buffers (multiple of 64) */
	uint32_t n;
	unsigned char *mem;  /* n * bsize bytes of pinned memory */
	ember_gpu_event **ev;
	uint8_t *state;      /* BUF_* */
	uint8_t *pending;
	uint32_t *fifo;      /* FREE buffers in release order (R1) */
	uint32_t head, count;
	pthread_mutex_t mu;
	pthread_cond_t freed; /* signalled: a buffer became FREE */
};

#define STAGING_MAX_BUFFERS 1024u

void ember_gpu_staging_options_default(ember_gpu_staging_options *opts)
{
	if (!opts)
		return;
	memset(opts, 0, sizeof(*opts));
	opts->buffer_bytes = 4u << 20;
	opts->buffers = 4;
}

int ember_gpu_staging_create(ember_gpu *g, const ember_gpu_staging_options *opts,
			     ember_gpu_staging **out)
{
	ember_gpu_staging_options o;
	int rc;
	uint32_t made = 0;

	if (!g || !out)
		return EMBER_EINVAL;
	ember_gpu_staging_options_default(&o);
	if (opts) {
		if (opts->buffer_bytes)
			o.buffer_bytes = opts->buffer_bytes;
		if (opts->buffers)
			o.buffers = opts->buffers;
	}
	if (o.buffers > STAGING_MAX_BUFFERS || o.buffer_bytes > SIZE_MAX / 2)
		return EMBER_EINVAL;
	size_t bsize = (o.buffer_bytes + 63u) & ~(size_t)63u;
	if (bsize > SIZE_MAX / o.buffers)
		return EMBER_EINVAL;

	ember_gpu_staging *st = em_zalloc(sizeof(*st));
	if (!st)
		return EMBER_ENOMEM;
	st->g = g;
	st->buffer_bytes = o.buffer_bytes;
	st->bsize = bsize;
	st->n = o.buffers;
	st->ev = em_zalloc(st->n * sizeof(*st->ev));
	st->state = em_zalloc(st->n);
	st->pending = em_zalloc(st->n);
	st->fifo = em_zalloc(st->n * sizeof(*st->fifo));
	if (!st->ev || !st->state || !st->pending || !st->fifo) {
		rc = EMBER_ENOMEM;
		goto undo_arrays;
	}
	void *mem = NULL;
	if ((rc = ember_gpu_host_alloc(g, bsize * st->n, &mem)) < 0)
		goto undo_arrays;
	st->mem = mem;
	for (; made < st->n; made++)
		/* blocking: acquire waits on these from the host, and a thread asleep
		 * in the kernel is better than one spinning a core for a copy */
		if ((rc = ember_gpu_event_create_flags(g, EMBER_GPU_EVENT_BLOCKING, &st->ev[made])) < 0)
			goto undo_events;
	for (uint32_t i = 0; i < st->n; i++)
		st->fifo[i] = i;
	st->count = st->n;
	pthread_mutex_init(&st->mu, NULL);
	pthread_cond_init(&st->freed, NULL);
	eg_live_add(g, 1);
	*out = st;
	return 0;

undo_events:
	while (made-- > 0)
		ember_gpu_event_destroy(st->ev[made]);
	ember_gpu_host_free(g, st->mem);
undo_arrays:
	em_free(st->fifo, 0);
	em_free(st->pending, 0);
	em_free(st->state, 0);
	em_free(st->ev, 0);
	em_free(st, sizeof(*st));
	return rc;
}

int ember_gpu_staging_destroy(ember_gpu_staging *st)
{
	if (!st)
		return 0;
	pthread_mutex_lock(&st->mu);
	bool busy = st->count != st->n;
	pthread_mutex_unlock(&st->mu);
	if (busy)
		return EMBER_EBUSY;
	for (uint32_t i = 0; i < st->n; i++) {
		if (st->pending[i])
			ember_gpu_event_synchronize(st->ev[i]);
		ember_gpu_event_destroy(st->ev[i]);
	}
	ember_gpu_host_free(st->g, st->mem);
	pthread_cond_destroy(&st->freed);
	pthread_mutex_destroy(&st->mu);
	eg_live_add(st->g, -1);
	em_free(st->fifo, 0);
	em_free(st->pending, 0);
	em_free(st->state, 0);
	em_free(st->ev, 0);
	em_free(st, sizeof(*st));
	return 0;
}

static int staging_get(ember_gpu_staging *st, uint32_t *index, void **ptr, bool block)
{
	if (!st || !index || !ptr)
		return EMBER_EINVAL;
	pthread_mutex_lock(&st->mu);
	while (st->count == 0) {
		if (!block) {
			pthread_mutex_unlock(&st->mu);
			return EMBER_EAGAIN;
		}
		pthread_cond_wait(&st->freed, &st->mu);
	}
	uint32_t i = st->fifo[st->head];
	st->head = (st->head + 1) % st->n;
	st->count--;
	st->state[i] = BUF_HELD;
	bool pending = st->pending[i];
	st->pending[i] = 0;
	pthread_mutex_unlock(&st->mu);

	if (pending) { /* R3 */
		int rc = ember_gpu_event_synchronize(st->ev[i]);
		if (rc < 0) { /* device failure: hand the buffer back untouched */
			pthread_mutex_lock(&st->mu);
			st->pending[i] = 1;
			st->state[i] = BUF_FREE;
			st->fifo[(st->head + st->count) % st->n] = i;
			st->count++;
			pthread_cond_signal(&st->freed);
			pthread_mutex_unlock(&st->mu);
			return rc;
		}
	}
	*index = i;
	*ptr = st->mem + (size_t)i * st->bsize;
	return 0;
}

int ember_gpu_staging_acquire(ember_gpu_staging *st, uint32_t *index, void **ptr)
{
	return staging_get(st, index, ptr, true);
}

int ember_gpu_staging_try_acquire(ember_gpu_staging *st, uint32_t *index, void **ptr)
{
	return staging_get(st, index, ptr, false);
}

int ember_gpu_staging_release(ember_gpu_staging *st, uint32_t index, ember_gpu_stream *s)
{
	if (!st || index >= st->n || (s && s->g != st->g))
		return EMBER_EINVAL;
	pthread_mutex_lock(&st->mu);
	if (st->state[index] != BUF_HELD) {
		pthread_mutex_unlock(&st->mu);
		return EMBER_ESTATE;
	}
	st->state[index] = BUF_RELEASING;
	pthread_mutex_unlock(&st->mu);

	if (s) {
		int rc = ember_gpu_event_record(st->ev[index], s); /* R3 */
		if (rc < 0) {
			pthread_mutex_lock(&st->mu);
			st->state[index] = BUF_HELD;
			pthread_mutex_unlock(&st->mu);
			return rc;
		}
	}

	pthread_mutex_lock(&st->mu);
	st->pending[index] = s != NULL;
	st->state[index] = BUF_FREE;
	st->fifo[(st->head + st->count) % st->n] = index;
	st->count++;
	pthread_cond_signal(&st->freed);
	pthread_mutex_unlock(&st->mu);
	return 0;
}

/* Common checks of upload and download: a HELD buffer of this ring, bytes fit. */
static int transfer_check(ember_gpu_staging *st, uint32_t index, ember_gpu_stream *s,
			  const void *dev, size_t bytes, ember_gpu_event *done)
{
	if (!st || !s || s->g != st->g || index >= st->n || !dev || bytes == 0 ||
	    bytes > st->buffer_bytes || (done && done->g != st->g))
		return EMBER_EINVAL;
	pthread_mutex_lock(&st->mu);
	bool held = st->state[index] == BUF_HELD;
	pthread_mutex_unlock(&st->mu);
	return held ? 0 : EMBER_ESTATE;
}

int ember_gpu_staging_upload(ember_gpu_staging *st, uint32_t index, ember_gpu_stream *s,
			     void *dst_dev, size_t bytes, ember_gpu_event *done)
{
	int rc = transfer_check(st, index, s, dst_dev, bytes, done);
	if (rc < 0)
		return rc;
	if ((rc = ember_gpu_copy_h2d(s, dst_dev, st->mem + (size_t)index * st->bsize, bytes)) < 0)
		return rc;
	if (done && (rc = ember_gpu_event_record(done, s)) < 0)
		return rc;
	return ember_gpu_staging_release(st, index, s);
}

int ember_gpu_staging_download(ember_gpu_staging *st, uint32_t index, ember_gpu_stream *s,
			       const void *src_dev, size_t bytes, ember_gpu_event *done)
{
	if (!done)
		return EMBER_EINVAL;
	int rc = transfer_check(st, index, s, src_dev, bytes, done);
	if (rc < 0)
		return rc;
	if ((rc = ember_gpu_copy_d2h(s, st->mem + (size_t)index * st->bsize, src_dev, bytes)) < 0)
		return rc;
	return ember_gpu_event_record(done, s);
}
