/*
 * keyseq.h - the insert key sequence shared by all threads of a run: hands out
 * new key numbers and tracks the newest key known to be inserted, as YCSB's
 * AcknowledgedCounterGenerator does.
 *
 * How it works
 * ------------
 * ycsb_keyseq_next() hands out key numbers in order (one atomic add). A thread
 * that has inserted key k calls ycsb_keyseq_ack(k): that sets k's flag in a ring
 * of flags and, if the scan lock is free, advances `limit` over every flagged key
 * that follows it. `limit` is thus always a key number such that every key below
 * it has been inserted, and "latest" reads (workload D) draw back from limit - 1:
 * they never name a key whose insert is still in flight, however the threads
 * interleave -- which matters for LMDB, whose serialised writers can leave a key
 * handed out but not yet written for a long while.
 *
 * Lag: a flag set while another thread holds the scan lock (trylock failed) is
 * consumed at the next ack, so limit trails the true frontier by at most the keys
 * in flight plus those acked since the last successful scan. The ring must be
 * larger than that distance: YCSB_KEYSEQ_WINDOW (2^20) is far beyond any thread
 * count here; ycsb_keyseq_next() reports overflow instead of corrupting flags.
 */
#ifndef YCSB_KEYSEQ_H
#define YCSB_KEYSEQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define YCSB_KEYSEQ_WINDOW (1u << 20)

typedef struct ycsb_keyseq {
	_Atomic uint64_t next;   /* the next key number to hand out */
	_Atomic uint64_t limit;  /* every key below it is inserted */
	pthread_mutex_t scan;    /* one thread advances limit at a time */
	_Atomic unsigned char *acked; /* YCSB_KEYSEQ_WINDOW flags, indexed by key % window */
} ycsb_keyseq;

/* Start with keys [0, first) present. 0, or -ENOMEM. */
int ycsb_keyseq_init(ycsb_keyseq *q, uint64_t first);
void ycsb_keyseq_destroy(ycsb_keyseq *q);

/* A fresh key number, or UINT64_MAX if that would overrun the ack window. */
uint64_t ycsb_keyseq_next(ycsb_keyseq *q);

/* Key k (from ycsb_keyseq_next()) is now inserted (or failed for good: a failed
 * insert must be acked too, or limit stops advancing). */
void ycsb_keyseq_ack(ycsb_keyseq *q, uint64_t k);

/* Consume every flag left behind (call when no thread acks any more, e.g. after
 * the run's threads are joined). */
void ycsb_keyseq_settle(ycsb_keyseq *q);

/* The newest key number below which every key is present (>= first - 1). */
static inline uint64_t ycsb_keyseq_latest(ycsb_keyseq *q)
{
	/* acquire: pairs with the release store in ycsb_keyseq_ack(), so the inserts
	 * below limit happened before this read names them */
	return atomic_load_explicit(&q->limit, memory_order_acquire) - 1;
}

/* Keys handed out so far (all inserted once the run's threads are joined). */
static inline uint64_t ycsb_keyseq_count(ycsb_keyseq *q)
{
	return atomic_load_explicit(&q->next, memory_order_relaxed);
}

#endif /* YCSB_KEYSEQ_H */
