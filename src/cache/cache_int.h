/*
 * cache_int.h - what the embedding cache's own files share: the cache and batch
 * structs, the request the trainer hands the prefetcher (flush, read_rows,
 * write_rows), and small helpers. Not for other layers (they use ember_cache.h).
 *
 *   cache.c  open/close, push, acquire/release, the prefetcher's plan and fetch
 *            rounds, write-back, flush (the design notes, C1-C10, G1-G4)
 *   rows.c   read_rows / write_rows (served by the prefetcher between rounds),
 *            ember_cache_row, ember_cache_state_floats, per-table init
 *   apply.c  ember_cache_apply (compiled without floating-point contraction)
 */
#ifndef EMBER_CACHE_INT_H
#define EMBER_CACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "ember_cache.h"
#include "cache/oracle.h"
#include "cache/slot_store.h"

#define KEY_LEN 8

struct cbatch {
	uint32_t nparts, parts_cap;
	ember_cache_part *parts;
	const uint32_t **pslots; /* [nparts] into lslots */
	size_t nids, ids_cap;
	uint64_t *ids;    /* the lookups, copied */
	uint32_t *lslots; /* [nids] lookup -> uniq index (push), then -> slot (plan_one) */
	uint32_t uniq_cap;
	struct urow *uniq;
	struct onext *next;
	uint32_t *uslot;
	struct omiss *miss;
	struct obatch ob;
	uint32_t mdone; /* admissions done (prefetcher) */
	int applied;    /* ember_cache_apply wrote its rows (trainer, while acquired) */
	struct slot_batch_dev dev; /* GPU slots: device slot array and `ready` (G1, G3) */
};

/* A table as the cache keeps it: the caller's fields, resolved. */
struct ctable {
	uint64_t rows;
	uint32_t dim;
	uint32_t storage;
	uint32_t state;  /* optimizer state floats after the row: 0, 1 or dim */
	uint32_t init;   /* EMBER_CACHE_INIT_* after the table's override */
	float scale;     /* EMBER_CACHE_INIT_UNIFORM's bound */
	uint64_t seed;   /* EMBER_CACHE_INIT_UNIFORM's seed */
	size_t vbytes;   /* bytes of a value in the store (row, then state) */
};

/* What the trainer asks the prefetcher to do between its rounds (C8). */
enum { REQ_FLUSH = 1, REQ_READ = 2, REQ_WRITE = 3 };
struct cache_req {
	int kind;
	uint32_t table;
	size_t n;
	const uint64_t *rows;
	float *out, *state_out;         /* REQ_READ */
	const float *in, *state_in;     /* REQ_WRITE */
	int rc;                         /* OUT */
	int fatal;                      /* OUT: the slots may be inconsistent: fail the cache */
};

struct ember_cache {
	ember_db *db;
	ember_session *sess; /* the prefetcher's; the closing thread's after the join */
	uint32_t ntables;
	struct ctable *tables;
	uint64_t capacity;
	uint32_t window, pf_batches, depth;
	size_t max_row_bytes; /* bytes of one staged row (ss.buf_floats floats) */
	struct slot_store ss;
	struct oracle *oracle;
	struct cbatch *ring;
	uint8_t *dirty;      /* [capacity] C5 */
	struct urow *owner;  /* [capacity] physical owner (prefetcher) */

	/* prefetcher I/O buffers, `depth` entries each */
	uint8_t *kbuf;
	const void **kptr;
	size_t *klen, *vcap, *vlen;
	void **vptr;
	int *st;
	uint8_t *stage;
	uint8_t *rwbuf; /* write_rows' values (depth staged rows) */
	struct slot_move *mv;

	pthread_mutex_t mu;
	pthread_mutex_t omu; /* the oracle: push links, the prefetcher plans (C7) */
	pthread_cond_t pf_cv; /* wakes the prefetcher: push, release, request, stop */
	pthread_cond_t tr_cv; /* wakes the trainer: resident, request done, failure */
	pthread_t thread;
	int thread_started;
	/* shared under mu */
	uint32_t pushed, resident, released;
	int stop, failed;
	struct cache_req *req; /* the trainer's request, NULL when none (C8) */
	uint64_t req_gen;      /* requests served */
	/* trainer only */
	uint32_t acquired;
	int holding;
	uint32_t *ap_map;  /* apply: slot -> index of its summed gradient (ORACLE_NONE) */
	uint32_t *ap_slot; /* apply: the part's distinct slots */
	float *ap_acc;     /* apply: their summed gradients */
	size_t ap_cap;     /* entries of ap_slot; ap_acc holds ap_cap * ap_dim */
	uint32_t ap_dim;
	/* loader only (push) */
	uint32_t last_nuniq; /* distinct rows of the last batch pushed (sizes the next) */
	/* prefetcher only */
	uint32_t planned;

	/* statistics: relaxed atomics, each counter on its own (snapshots may lag) */
	_Atomic uint64_t st_pushed, st_planned, st_released, st_lookups, st_unique, st_hits,
		st_fetched, st_absent, st_evicted, st_wb, st_bytes_fetched, st_bytes_wb,
		st_wait_ns, st_idle_ns, st_busy_ns, st_plan_ns, st_resident, st_rounds;
};

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* statistics are independent counters: relaxed ordering is enough */
static inline void stat_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline void key_encode(uint8_t *k, uint32_t table, uint64_t row)
{
	uint64_t v = (uint64_t)table << 48 | row;
	for (int i = 0; i < KEY_LEN; i++)
		k[i] = (uint8_t)(v >> (8 * i));
}

/* The batch now acquired, if v is its view (else NULL). Trainer only. */
static inline struct cbatch *cache_acquired_batch(struct ember_cache *c, const ember_cache_view *v)
{
	struct cbatch *b = &c->ring[(c->acquired - 1) % c->window];
	if (!c->holding || v->batch != (uint64_t)c->acquired - 1 || v->internal_ != b)
		return NULL;
	return b;
}

/* rows.c: the value of a row the store does not hold (store format, zero state). */
void cache_init_row(const struct ember_cache *c, uint32_t table, uint64_t row, void *buf);
/* rows.c: resolve the tables of opts into c->tables (checked by cache.c). */
int cache_tables_init(struct ember_cache *c, const ember_cache_options *opts);
/* rows.c: serve a REQ_READ or REQ_WRITE (the prefetcher, between rounds). */
void cache_rows_serve(struct ember_cache *c, struct cache_req *r);
/* cache.c: hand r to the prefetcher and wait until it is served (the trainer). */
int cache_request(struct ember_cache *c, struct cache_req *r);
/* cache.c: write n slots' rows (owners ow[]) to the store; cleans them. */
int cache_writeback(struct ember_cache *c, size_t n, const uint32_t *sl, const struct urow *ow);

#endif
