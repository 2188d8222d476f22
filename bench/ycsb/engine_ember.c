/*
 * engine_ember.c - the YCSB engine interface over Ember's public API (ember.h).
 *
 * One ember_session per worker thread; reads copy into the driver's buffer; F's
 * read-modify-write is one ember_rmw() call (atomic against other writers);
 * batched reads go through ember_get_batch(). --inflight K: each thread keeps
 * K ember_op records (one per slot) for ember_get_async / ember_put_async /
 * ember_rmw_async, completed through ember_session_poll / ember_session_wait;
 * a record's done callback hands its slot's result to the driver.
 *
 * Memory. In memory (the budget holds the data), the budget is the hot log's
 * memory (log_memory) and the hash index gets one bucket per 4 records, outside
 * it, as before tiering. Larger than memory (p->bounded), the budget bounds the
 * whole store (memory_budget: hot log + hash index + cold index table + chunk log
 * + cold log memory), so the comparison with RocksDB's block cache + memtables is
 * not flattered by memory Ember keeps on the side:
 *  - page size: budget / 256 within [64 KiB, 1 MiB], so that small budgets still
 *    fit the three in-memory log tails (8 pages each at least);
 *  - hash index: a quarter of the budget. It only covers the keys of the hot log
 *    (compaction clears the entries of keys it moves to the cold log), so the
 *    hot log's disk budget is sized to about 4 keys per bucket (its 7 slots then
 *    never overflow into buckets allocated beside the budget);
 *  - cold index: about one chain per cold key (records / 32 chunks of 256 bytes,
 *    a power of two; the chunks live in the chunk log, on disk beyond its memory);
 *  - cold log disk budget: four times the loaded data in log format, so that
 *    cold->cold compaction (which stops at 60% of the budget) always has room
 *    (Ember's default, 4 x the hot log's, is not tied to the data size).
 * With --ember-memory hot-log (p->hot_log_only), larger than memory keeps the
 * in-memory setup instead: the budget is the hot log's memory, the index and the
 * cold tier's memory are beside it and the disk budgets are Ember's defaults
 * (16 x the hot log's memory before any compaction): the hot log spills to its
 * file, the path a store takes before compaction starts.
 * --index-buckets overrides the hash index size either way.
 */
#include "engine.h"
#include "options.h"

#include <ember.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t pow2_floor(uint64_t v)
{
	uint64_t p = 1;

	while (p <= v / 2)
		p <<= 1;
	return p;
}

static uint64_t pow2_ceil(uint64_t v)
{
	uint64_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/* The store and what every thread's context is sized by. */
typedef struct ember_engine_db {
	ember_db *db;
	unsigned max_inflight;
} ember_engine_db;

typedef void (*ee_complete_fn)(void *arg, unsigned tag, int rc, size_t vlen);

typedef struct ember_engine_thread {
	ember_session *session;
	/* --inflight: one record per slot, and each slot's rmw argument (the fresh
	 * value's length, read by ee_rmw_fn until the rmw completes) */
	ember_op *ops;
	size_t *rmw_len;
	unsigned nops;
	ee_complete_fn fn; /* set while ee_poll runs; NULL: completions dropped */
	void *fn_arg;
} ember_engine_thread;

/* Larger than memory, the default sizes of the caches (and cold_log_memory; o
 * has the rest of the options). What the store needs besides the caches comes
 * first (docs/compaction.md 4.5: the index, the cold table, the cold and chunk
 * rings and 8 hot pages); what it leaves goes to the chunk cache, up to what holds
 * every chunk, and the rest to the read cache. At 2M x 100 B in 24 MiB that is
 * every chunk (13.5 MiB, tagged) and a 3 MiB read cache: no chunk reads, and the
 * read cache still takes some of the Zipfian head; two thirds for the chunks (9
 * MiB, 5 MiB of read cache) left 0.25 chunk reads per cold lookup
 * (bench/results/2026-11-27-cold-reads.md). */
static void split_budget(const ycsb_engine_params *p, ember_options *o, uint64_t *rc_mem,
			 uint64_t *cc_mem)
{
	uint64_t page = o->page_size;
	/* the cold ring: Ember's default (an eighth of the budget, at least 8
	 * pages), but at most 16 pages. It only holds what compaction appended
	 * last, which reads seldom ask for (0.7% of YCSB C's reads at 3 MiB in 24
	 * MiB); the read cache makes more of that memory (C 0.014 -> 0.022 M
	 * ops/s one at a time, bench/results/2026-11-27-cold-reads.md) */
	uint64_t cold = p->mem_budget / 8 / page * page, chunk = p->mem_budget / 16 / page * page;
	cold = cold > 16 * page ? 16 * page : cold < 8 * page ? 8 * page : cold;
	o->cold_log_memory = cold;
	uint64_t need = pow2_ceil(o->index_buckets) * 64 + o->cold_index_chunks * 8 + cold +
			(chunk > 8 * page ? chunk : 8 * page) + 8 * page;
	uint64_t left = p->mem_budget > need ? p->mem_budget - need : 0;
	/* docs/format.md 6.3: 24 + 3 * cold_chunk_bytes / 4 bytes a chunk (the
	 * driver makes new stores: tagged) */
	uint64_t all = o->cold_index_chunks * (24 + 3 * (uint64_t)o->cold_chunk_bytes / 4);
	*cc_mem = left < all ? left : all;
	left -= *cc_mem;
	/* the read cache, and beside it its admission filter: at most a 64th of
	 * it (ember.h, read_cache_admit) */
	*rc_mem = left / page * page;
	while (*rc_mem && o->read_cache_admit && *rc_mem + *rc_mem / 64 > left)
		*rc_mem -= page;
	if (*rc_mem < 8 * page)
		*rc_mem = 0; /* too small for the cache's 8 pages: off */
}

static int ee_open(const ycsb_engine_params *p, void **db, char *settings, size_t cap)
{
	ember_options opts;
	ember_engine_db *ed = calloc(1, sizeof(*ed));
	ember_db *edb = NULL;
	char hot[32], cold[32];
	int rc;

	if (ed == NULL)
		return EMBER_ENOMEM;
	ed->max_inflight = p->max_inflight;

	ember_options_default(&opts);
	if (p->bounded && !p->hot_log_only) {
		/* bytes of one record in a log: header, key and value, 8-aligned */
		uint64_t rec = 32 + ((p->key_size + 7) & ~(size_t)7) +
			       ((p->value_size + 7) & ~(size_t)7);
		uint64_t page = pow2_floor(p->mem_budget / 256);

		opts.page_size = (uint32_t)(page < (64u << 10)  ? 64u << 10
					    : page > (1u << 20) ? 1u << 20
								: page);
		opts.memory_budget = p->mem_budget;
		opts.index_buckets = p->index_buckets != 0 ? p->index_buckets
							   : pow2_floor(p->mem_budget / 4 / 64);
		opts.hot_disk_budget = pow2_ceil(opts.index_buckets) * 4 * rec;
		opts.cold_disk_budget = 4 * p->records * rec;
		opts.cold_index_chunks = p->cold_chunks ? p->cold_chunks
						       : pow2_ceil(p->records / 32 > 0 ? p->records / 32 : 1);
	} else {
		if (p->mem_budget != 0)
			opts.log_memory = p->mem_budget;
		opts.index_buckets = p->index_buckets != 0
					     ? p->index_buckets
					     : pow2_ceil(p->records / 4 > 0 ? p->records / 4 : 1);
	}
	/* the caches: what was asked, else split_budget's */
	uint64_t rc_mem = 0, cc_mem = 0;
	opts.read_cache_admit = p->rc_admit_first ? EMBER_READ_CACHE_ADMIT_FIRST
						  : EMBER_READ_CACHE_ADMIT_SECOND;
	if (p->bounded && !p->hot_log_only)
		split_budget(p, &opts, &rc_mem, &cc_mem);
	opts.read_cache_memory = p->read_cache == UINT64_MAX ? 0 : p->read_cache ? p->read_cache : rc_mem;
	/* UINT64_MAX is EMBER_COLD_CACHE_OFF; 0 leaves Ember's own default */
	opts.cold_cache_memory = p->cold_cache ? p->cold_cache : cc_mem;
	opts.log_segment_bytes = p->segment_bytes;
	opts.flags |= EMBER_OPEN_TRUNCATE; /* the driver hands us a fresh directory */
	rc = ember_open(p->dir, &opts, &edb);
	if (rc < 0) {
		free(ed);
		return rc;
	}
	char rc_text[96] = "no read cache";
	if (opts.read_cache_memory)
		snprintf(rc_text, sizeof(rc_text), "read cache %" PRIu64 " KiB copying on the %s disk read",
			 opts.read_cache_memory >> 10,
			 opts.read_cache_admit == EMBER_READ_CACHE_ADMIT_SECOND ? "second" : "first");
	if (p->bounded && !p->hot_log_only)
		snprintf(settings, cap,
			 "ember %s: larger than memory: memory_budget=%" PRIu64 " MiB for the "
			 "whole store (hot log, hash index of %" PRIu64 " buckets = %" PRIu64
			 " MiB, cold index table of %" PRIu64 " chunks, chunk and cold log "
			 "memory, %s, cold chunk cache %" PRIu64 " MiB); "
			 "hot and cold logs with compaction, disk budgets hot %s, "
			 "cold %s (at least twice the log's memory); page_size=%" PRIu32 " KiB "
			 "io_queue_depth=%" PRIu32 "; rmw=ember_rmw (atomic); "
			 "batch reads=ember_get_batch",
			 ember_version(), opts.memory_budget >> 20, opts.index_buckets,
			 opts.index_buckets * 64 >> 20, opts.cold_index_chunks,
			 rc_text, opts.cold_cache_memory == UINT64_MAX ? 0 : opts.cold_cache_memory >> 20,
			 ycsb_fmt_bytes(opts.hot_disk_budget, hot, sizeof(hot)),
			 ycsb_fmt_bytes(opts.cold_disk_budget, cold, sizeof(cold)),
			 opts.page_size >> 10, opts.io_queue_depth);
	else
		snprintf(settings, cap,
			 "ember %s: %slog_memory=%" PRIu64 " MiB mutable_fraction=%.2f "
			 "index_buckets=%" PRIu64 " (%" PRIu64 " MiB, outside log_memory) "
			 "page_size=%" PRIu32 " KiB io_queue_depth=%" PRIu32
			 "; rmw=ember_rmw (atomic); batch reads=ember_get_batch%s",
			 ember_version(), p->bounded ? "larger than memory, budget = hot log only "
						       "(--ember-memory hot-log): " : "",
			 opts.log_memory >> 20, opts.mutable_fraction,
			 opts.index_buckets, opts.index_buckets * 64 >> 20, opts.page_size >> 10,
			 opts.io_queue_depth,
			 p->bounded ? "; cold tier memory and disk budgets: Ember's defaults" : "");
	size_t used = strlen(settings);
	if (opts.log_segment_bytes && used < cap)
		snprintf(settings + used, cap - used, "; log_segment_bytes=%" PRIu64 " MiB",
			 opts.log_segment_bytes >> 20);
	used = strlen(settings);
	if (p->max_inflight > 0 && used < cap)
		snprintf(settings + used, cap - used, "; --inflight %u: ember_*_async, "
			 "ember_session_poll/wait", p->max_inflight);
	ed->db = edb;
	*db = ed;
	return 0;
}

static int ee_thread_init(void *db, void **thread)
{
	ember_engine_db *ed = db;
	ember_engine_thread *t = calloc(1, sizeof(*t));
	int rc = EMBER_ENOMEM;

	if (t == NULL)
		return EMBER_ENOMEM;
	if (ed->max_inflight > 0) {
		t->nops = ed->max_inflight;
		t->ops = calloc(t->nops, sizeof(*t->ops)); /* zeroed before first use */
		t->rmw_len = calloc(t->nops, sizeof(*t->rmw_len));
		if (t->ops == NULL || t->rmw_len == NULL)
			goto undo_alloc;
		for (unsigned i = 0; i < t->nops; i++)
			t->ops[i].user = t;
	}
	rc = ember_session_open(ed->db, &t->session);
	if (rc < 0)
		goto undo_alloc;
	*thread = t;
	return 0;
undo_alloc:
	free(t->ops);
	free(t->rmw_len);
	free(t);
	return rc;
}

static void ee_thread_fini(void *thread)
{
	ember_engine_thread *t = thread;

	if (t == NULL)
		return;
	if (t->ops != NULL) {
		/* a thread that stopped on an error may leave operations pending:
		 * complete them (nobody to deliver to) so that the session closes */
		t->fn = NULL;
		ember_session_wait(t->session, EMBER_WAIT_ALL);
	}
	ember_session_close(t->session);
	free(t->ops);
	free(t->rmw_len);
	free(t);
}

static int ee_read(void *thread, const void *key, size_t klen, void *buf, size_t cap,
		   size_t *vlen)
{
	ember_engine_thread *t = thread;
	int rc = ember_get(t->session, key, klen, buf, cap, vlen);

	return rc == EMBER_ENOTFOUND ? YCSB_NOTFOUND : rc;
}

static int ee_put(void *thread, const void *key, size_t klen, const void *val,
		  size_t vlen)
{
	ember_engine_thread *t = thread;

	return ember_put(t->session, key, klen, val, vlen);
}

/* ember_rmw_fn: computes only from old and arg (the fresh-value length), as the
 * callback contract requires for retries. */
static int ee_rmw_fn(void *arg, const void *old, size_t old_len, void *out,
		     size_t out_cap, size_t *out_len)
{
	size_t need = old != NULL ? old_len : *(const size_t *)arg;

	*out_len = need;
	if (out_cap < need)
		return EMBER_ERANGE;
	ycsb_value_modify(old, old_len, out, need);
	return 0;
}

static int ee_rmw(void *thread, const void *key, size_t klen, size_t vlen)
{
	ember_engine_thread *t = thread;

	return ember_rmw(t->session, key, klen, ee_rmw_fn, &vlen);
}

static int ee_read_batch(void *thread, size_t n, const void *const keys[],
			 const size_t klens[], void *const bufs[], const size_t caps[],
			 size_t vlens[], int status[])
{
	ember_engine_thread *t = thread;
	int rc = ember_get_batch(t->session, n, keys, klens, bufs, caps, vlens, status);

	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (status[i] == EMBER_ENOTFOUND)
			status[i] = YCSB_NOTFOUND;
	return 0;
}

/* ember_op_fn of a pending slot: hand its result to the driver (inside ee_poll). */
static void ee_op_done(ember_op *op)
{
	ember_engine_thread *t = op->user;
	int rc = op->status == EMBER_ENOTFOUND ? YCSB_NOTFOUND : op->status;

	if (t->fn != NULL)
		t->fn(t->fn_arg, (unsigned)(op - t->ops), rc, op->vlen);
}

static int ee_start(void *thread, unsigned tag, unsigned kind, const void *key, size_t klen,
		    const void *val, void *buf, size_t len, size_t *vlen)
{
	ember_engine_thread *t = thread;
	ember_op *op;
	int rc;

	if (tag >= t->nops)
		return EMBER_EINVAL;
	op = &t->ops[tag];
	op->done = ee_op_done;
	switch (kind) {
	case YCSB_OP_READ:
		rc = ember_get_async(t->session, op, key, klen, buf, len);
		if (rc == 0)
			*vlen = op->vlen;
		break;
	case YCSB_OP_UPDATE:
	case YCSB_OP_INSERT:
		rc = ember_put_async(t->session, op, key, klen, val, len);
		break;
	case YCSB_OP_RMW:
		t->rmw_len[tag] = len;
		rc = ember_rmw_async(t->session, op, key, klen, ee_rmw_fn, &t->rmw_len[tag]);
		break;
	default:
		return EMBER_EINVAL;
	}
	return rc == EMBER_EPENDING ? YCSB_PENDING : rc == EMBER_ENOTFOUND ? YCSB_NOTFOUND : rc;
}

static int ee_poll(void *thread, int block, ee_complete_fn fn, void *arg)
{
	ember_engine_thread *t = thread;
	int rc;

	t->fn = fn;
	t->fn_arg = arg;
	rc = block ? ember_session_wait(t->session, 0) : ember_session_poll(t->session);
	t->fn = NULL;
	return rc;
}

static int ee_close(void *db)
{
	ember_engine_db *ed = db;
	int rc = ember_close(ed->db);

	free(ed);
	return rc;
}

static void ee_stats(void *db, char *out, size_t cap)
{
	ember_engine_db *ed = db;
	ember_stats s;

	if (ember_stats_get(ed->db, &s) < 0) {
		snprintf(out, cap, "ember_stats_get failed");
		return;
	}
	snprintf(out, cap,
		 "hot log %" PRIu64 " records (%" PRIu64 " MiB on disk), cold log %" PRIu64
		 " records (%" PRIu64 " MiB on disk); user reads from hot memory %" PRIu64
		 ", hot disk %" PRIu64 ", cold memory %" PRIu64 ", cold disk %" PRIu64
		 ", read cache %" PRIu64 " (%" PRIu64 " MiB); cold lookups %" PRIu64
		 ": chunk reads %" PRIu64 ", record reads %" PRIu64 ", chunk cache hits %" PRIu64
		 " (%" PRIu64 " MiB), %.3f disk reads per cold lookup"
		 "; disk reads %" PRIu64 " (%.0f B per user read); compactions %" PRIu64
		 " hot, %" PRIu64 " cold; write amplification %.2f; hash index %" PRIu64
		 " MiB, cold index %" PRIu64 " MiB",
		 s.hot.records, s.hot.bytes_disk >> 20, s.cold.records, s.cold.bytes_disk >> 20,
		 s.hot.reads_memory, s.hot.reads_disk, s.cold.reads_memory, s.cold.reads_disk,
		 s.read_cache_hits, s.read_cache_bytes >> 20, s.cold_lookups, s.cold_chunk_reads,
		 s.cold_record_reads, s.cold_cache_hits, s.cold_cache_bytes >> 20,
		 s.disk_reads_per_cold_lookup, s.disk_reads, s.read_amplification, s.hot.compactions, s.cold.compactions,
		 s.write_amplification, s.index_bytes >> 20, s.cold_index_bytes >> 20);
}

const ycsb_engine ycsb_engine_ember = {
	.name = "ember",
	.open = ee_open,
	.thread_init = ee_thread_init,
	.thread_fini = ee_thread_fini,
	.read = ee_read,
	.update = ee_put,
	.insert = ee_put,
	.rmw = ee_rmw,
	.read_batch = ee_read_batch,
	.close = ee_close,
	.strerror = ember_strerror,
	.stats = ee_stats,
	.start = ee_start,
	.poll = ee_poll,
};
