/*
 * keyseq.c - the shared insert key sequence (see keyseq.h for how it works).
 */
#include "keyseq.h"

#include <errno.h>
#include <stdlib.h>

int ycsb_keyseq_init(ycsb_keyseq *q, uint64_t first)
{
	q->acked = calloc(YCSB_KEYSEQ_WINDOW, sizeof(*q->acked));
	if (q->acked == NULL)
		return -ENOMEM;
	atomic_init(&q->next, first);
	atomic_init(&q->limit, first);
	pthread_mutex_init(&q->scan, NULL);
	return 0;
}

void ycsb_keyseq_destroy(ycsb_keyseq *q)
{
	pthread_mutex_destroy(&q->scan);
	free((void *)q->acked);
	q->acked = NULL;
}

uint64_t ycsb_keyseq_next(ycsb_keyseq *q)
{
	/* relaxed: only uniqueness matters; ordering comes from ack/limit */
	uint64_t k = atomic_fetch_add_explicit(&q->next, 1, memory_order_relaxed);

	/* relaxed: a stale limit only makes this check stricter */
	if (k - atomic_load_explicit(&q->limit, memory_order_relaxed) >= YCSB_KEYSEQ_WINDOW)
		return UINT64_MAX;
	return k;
}

/* Advance limit over the acked keys that follow it. Caller holds q->scan. */
static void keyseq_scan(ycsb_keyseq *q)
{
	uint64_t limit;

	limit = atomic_load_explicit(&q->limit, memory_order_relaxed); /* only we write it */
	/* acquire: pairs with the release store of each flag we consume */
	while (atomic_load_explicit(&q->acked[limit % YCSB_KEYSEQ_WINDOW],
				    memory_order_acquire)) {
		/* relaxed: the slot is reused only a full window later, after limit
		 * passed it, and the store of limit below publishes this clear */
		atomic_store_explicit(&q->acked[limit % YCSB_KEYSEQ_WINDOW], 0,
				      memory_order_relaxed);
		limit++;
	}
	/* release: readers of limit see every insert below it */
	atomic_store_explicit(&q->limit, limit, memory_order_release);
}

void ycsb_keyseq_ack(ycsb_keyseq *q, uint64_t k)
{
	/* release: the scanner that sees this flag also sees the insert before it */
	atomic_store_explicit(&q->acked[k % YCSB_KEYSEQ_WINDOW], 1, memory_order_release);
	if (pthread_mutex_trylock(&q->scan) != 0)
		return; /* the holder, or the next ack, consumes our flag */
	keyseq_scan(q);
	pthread_mutex_unlock(&q->scan);
}

void ycsb_keyseq_settle(ycsb_keyseq *q)
{
	pthread_mutex_lock(&q->scan);
	keyseq_scan(q);
	pthread_mutex_unlock(&q->scan);
}
