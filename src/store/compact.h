/*
 * compact.h - lookup-based compaction of the hot, cold and chunk logs, and the
 * background thread that runs it (private to the store).
 */
#ifndef EMBER_STORE_COMPACT_H
#define EMBER_STORE_COMPACT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct ember_db;
struct ember_session;

struct compact_stats {
	_Atomic uint64_t passes[3];        /* hot->cold, cold->cold, chunk log */
	_Atomic uint64_t records_scanned[3];
	_Atomic uint64_t records_moved[3]; /* copied to the cold tail (or chunk tail) */
	_Atomic uint64_t bytes_scanned[3];
	_Atomic uint64_t bytes_written[3];
	_Atomic uint64_t tombstones_dropped;
	_Atomic uint64_t assists;          /* passes run by user threads at a hard limit */
};

enum { COMPACT_HOT = 0, COMPACT_COLD = 1, COMPACT_CHUNKS = 2 };

struct compactor {
	struct ember_db *db;
	struct ember_session *s; /* the background thread's own session */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, kicked, started;
	pthread_mutex_t pass_mu; /* one pass at a time, by whichever thread */
	uint8_t *buf;            /* scan window, guarded by pass_mu */
	size_t cap;
	uint8_t *rbuf;           /* a live large record read whole, guarded by pass_mu */
	size_t rcap;
	_Atomic int error;       /* first error a pass hit (sticky) */
	/* per log: the used size after a pass that freed almost nothing (live data
	 * fills the log); passes wait until it grows past that. Guarded by pass_mu. */
	uint64_t stuck_used[3];
	struct compact_stats st;
};

int compactor_start(struct ember_db *db);
void compactor_stop(struct ember_db *db);
/* Run one pass of whatever log is over its trigger, on the caller's session (the
 * caller must not be protected). kind < 0: any. Returns 1 if a pass ran. */
int compact_run(struct ember_db *db, struct ember_session *s, int kind, int force);
/* A user thread found a log past its hard limit: help until it is back under.
 * Returns EMBER_ENOSPC when compaction cannot bring it back (live data fills the
 * budgets). */
int compact_assist(struct ember_session *s);

/* Is the hot (or cold) log past its hard disk budget? */
int compact_over_hard_limit(struct ember_db *db);

#endif
