/*
 * engine_rocksdb.c - the YCSB engine interface over RocksDB's C API (rocksdb/c.h),
 * built only when meson finds RocksDB (HAVE_ROCKSDB).
 *
 * Settings (printed by open(), so every table states what it measured):
 *  - block-based table, full-filter Bloom filter at 10 bits/key, LRU block cache of
 *    the memory budget (default 256 MiB), index and filter blocks outside the cache
 *    (RocksDB's default: they stay pinned in table readers);
 *  - no compression (the driver's values are synthetic; compressing them would
 *    measure the generator, not the store);
 *  - WAL on, no fsync per write (WriteOptions.sync = false): the same durability
 *    class as Ember's and LMDB's runs here, none of which syncs per operation;
 *  - default memtable (64 MiB write buffer), 2 background jobs (this host's cores);
 *  - reads with default ReadOptions (checksums verified);
 *  - batched reads through MultiGet (rocksdb_batched_multi_get_cf);
 *  - no operations kept in flight: the C API of Debian's RocksDB 7.8 has no
 *    asynchronous call (rocksdb/c.h offers rocksdb_multi_get, _cf and
 *    rocksdb_batched_multi_get_cf, all blocking, and no setter for ReadOptions'
 *    async_io or optimize_multiget_for_io), so --inflight K runs reads as
 *    MultiGet batches of up to K, past updates of other keys (inflight_batches);
 *  - F's read-modify-write is Get then Put, as YCSB's client does it: not atomic
 *    across threads (a merge operator would be, but is not what YCSB measures).
 *
 * Larger than memory (p->bounded: the raw data exceeds the budget), RocksDB is
 * held to the budget as Ember is to its log memory: the block cache gets half of
 * it and the memtables the other half (two write buffers of a quarter each), and
 * reads use O_DIRECT (use_direct_reads), since otherwise the OS page cache would
 * keep the whole data set in memory beside the budget and the run would measure
 * RAM. Flushes and compactions still write through the page cache. Index and
 * filter blocks stay outside the cache, as in the default setup (Ember's hash
 * index is outside its budget too).
 */
#include "engine.h"

#include <errno.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RDB_DEFAULT_CACHE (256ull << 20)

typedef struct rdb_engine {
	rocksdb_t *db;
	rocksdb_options_t *options;
	rocksdb_block_based_table_options_t *table;
	rocksdb_cache_t *cache;
	rocksdb_column_family_handle_t *cf;
	rocksdb_readoptions_t *ropts;
	rocksdb_writeoptions_t *wopts;
	unsigned max_batch;
	size_t value_size;
} rdb_engine;

typedef struct rdb_thread {
	rdb_engine *e;
	const char **keys;              /* max_batch */
	rocksdb_pinnableslice_t **vals; /* max_batch */
	char **errs;                    /* max_batch */
	char *rmw_buf;                  /* value_size */
} rdb_thread;

/* RocksDB reports errors as malloc'ed strings; print the first few and map them
 * all to -EIO (the driver counts errors and stops the thread on the first). */
static int rdb_error(const char *what, char *err)
{
	static _Atomic int reported;

	if (reported++ < 5)
		fprintf(stderr, "rocksdb: %s: %s\n", what, err);
	rocksdb_free(err);
	return -EIO;
}

static void rdb_destroy(rdb_engine *e)
{
	if (e->cf != NULL)
		rocksdb_column_family_handle_destroy(e->cf);
	if (e->db != NULL)
		rocksdb_close(e->db);
	if (e->ropts != NULL)
		rocksdb_readoptions_destroy(e->ropts);
	if (e->wopts != NULL)
		rocksdb_writeoptions_destroy(e->wopts);
	if (e->options != NULL)
		rocksdb_options_destroy(e->options);
	if (e->table != NULL)
		rocksdb_block_based_options_destroy(e->table);
	if (e->cache != NULL)
		rocksdb_cache_destroy(e->cache);
	free(e);
}

static int rdb_open(const ycsb_engine_params *p, void **db, char *settings, size_t cap)
{
	rdb_engine *e = calloc(1, sizeof(*e));
	uint64_t budget = p->mem_budget != 0 ? p->mem_budget : RDB_DEFAULT_CACHE;
	uint64_t cache_bytes = p->bounded ? budget / 2 : budget;
	uint64_t write_buffer = p->bounded ? budget / 4 : 64ull << 20;
	char bounded_note[160] = "";
	const char *cf_names[1] = { "default" };
	const rocksdb_options_t *cf_opts[1];
	char *err = NULL;

	if (e == NULL)
		return -ENOMEM;
	e->max_batch = p->max_batch;
	e->value_size = p->value_size;
	e->options = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(e->options, 1);
	rocksdb_options_set_create_missing_column_families(e->options, 1);
	rocksdb_options_set_compression(e->options, rocksdb_no_compression);
	rocksdb_options_set_max_background_jobs(e->options, 2);
	if (p->bounded) {
		if (write_buffer < (1u << 20))
			write_buffer = 1u << 20;
		rocksdb_options_set_write_buffer_size(e->options, write_buffer);
		rocksdb_options_set_max_write_buffer_number(e->options, 2);
		rocksdb_options_set_use_direct_reads(e->options, 1);
		snprintf(bounded_note, sizeof(bounded_note),
			 "larger than memory: O_DIRECT reads, 2 write buffers of %llu MiB, ",
			 (unsigned long long)(write_buffer >> 20));
	}

	e->table = rocksdb_block_based_options_create();
	/* The table options take ownership of the filter policy. */
	rocksdb_block_based_options_set_filter_policy(e->table,
						      rocksdb_filterpolicy_create_bloom_full(10));
	e->cache = rocksdb_cache_create_lru(cache_bytes);
	rocksdb_block_based_options_set_block_cache(e->table, e->cache);
	rocksdb_options_set_block_based_table_factory(e->options, e->table);

	e->ropts = rocksdb_readoptions_create();
	e->wopts = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(e->wopts, 0);
	rocksdb_writeoptions_disable_WAL(e->wopts, 0);

	/* Open with the default column family named, to get the handle MultiGet
	 * needs (this RocksDB's C API has no other way to obtain it). */
	cf_opts[0] = e->options;
	e->db = rocksdb_open_column_families(e->options, p->dir, 1, cf_names, cf_opts,
					     &e->cf, &err);
	if (err != NULL) {
		e->db = NULL;
		e->cf = NULL;
		rdb_destroy(e);
		return rdb_error("open", err);
	}
	snprintf(settings, cap,
		 "rocksdb: block cache LRU %llu MiB, bloom full 10 bits/key, no compression, "
		 "WAL on, no fsync per write, %s%s"
		 "max_background_jobs=2; rmw=Get+Put (not atomic, as YCSB); "
		 "batch reads=MultiGet",
		 (unsigned long long)(cache_bytes >> 20), bounded_note,
		 p->bounded ? "" : "write buffer 64 MiB (default), ");
	size_t used = strlen(settings);
	if (p->max_inflight > 0 && used < cap)
		snprintf(settings + used, cap - used,
			 "; --inflight %u: the C API has no asynchronous call "
			 "(rocksdb_multi_get, rocksdb_batched_multi_get_cf block; no setter "
			 "for ReadOptions async_io), so reads run as MultiGet batches of up "
			 "to %u past updates of other keys (as --batch %u --batch-over-updates)",
			 p->max_inflight, p->max_inflight, p->max_inflight);
	*db = e;
	return 0;
}

static int rdb_thread_init(void *db, void **thread)
{
	rdb_engine *e = db;
	rdb_thread *t = calloc(1, sizeof(*t));
	unsigned n = e->max_batch > 0 ? e->max_batch : 1;

	if (t == NULL)
		return -ENOMEM;
	t->e = e;
	t->keys = calloc(n, sizeof(*t->keys));
	t->vals = calloc(n, sizeof(*t->vals));
	t->errs = calloc(n, sizeof(*t->errs));
	t->rmw_buf = malloc(e->value_size > 0 ? e->value_size : 1);
	if (t->keys == NULL || t->vals == NULL || t->errs == NULL || t->rmw_buf == NULL) {
		free(t->keys);
		free(t->vals);
		free(t->errs);
		free(t->rmw_buf);
		free(t);
		return -ENOMEM;
	}
	*thread = t;
	return 0;
}

static void rdb_thread_fini(void *thread)
{
	rdb_thread *t = thread;

	if (t == NULL)
		return;
	free(t->keys);
	free(t->vals);
	free(t->errs);
	free(t->rmw_buf);
	free(t);
}

/* Copy a pinned value out and release it; YCSB_NOTFOUND for a NULL slice. */
static int rdb_take(rocksdb_pinnableslice_t *ps, void *buf, size_t cap, size_t *vlen)
{
	const char *v;
	size_t len;

	if (ps == NULL)
		return YCSB_NOTFOUND;
	v = rocksdb_pinnableslice_value(ps, &len);
	memcpy(buf, v, len < cap ? len : cap);
	*vlen = len;
	rocksdb_pinnableslice_destroy(ps);
	return 0;
}

static int rdb_read(void *thread, const void *key, size_t klen, void *buf, size_t cap,
		    size_t *vlen)
{
	rdb_thread *t = thread;
	char *err = NULL;
	rocksdb_pinnableslice_t *ps =
		rocksdb_get_pinned(t->e->db, t->e->ropts, key, klen, &err);

	if (err != NULL)
		return rdb_error("get", err);
	return rdb_take(ps, buf, cap, vlen);
}

static int rdb_put(void *thread, const void *key, size_t klen, const void *val,
		   size_t vlen)
{
	rdb_thread *t = thread;
	char *err = NULL;

	rocksdb_put(t->e->db, t->e->wopts, key, klen, val, vlen, &err);
	return err != NULL ? rdb_error("put", err) : 0;
}

static int rdb_rmw(void *thread, const void *key, size_t klen, size_t vlen)
{
	rdb_thread *t = thread;
	char *err = NULL;
	rocksdb_pinnableslice_t *ps =
		rocksdb_get_pinned(t->e->db, t->e->ropts, key, klen, &err);
	const char *old = NULL;
	size_t old_len = 0;

	if (err != NULL)
		return rdb_error("get", err);
	if (ps != NULL)
		old = rocksdb_pinnableslice_value(ps, &old_len);
	if (vlen > t->e->value_size)
		vlen = t->e->value_size;
	ycsb_value_modify(old, old_len, t->rmw_buf, vlen);
	if (ps != NULL)
		rocksdb_pinnableslice_destroy(ps);
	return rdb_put(thread, key, klen, t->rmw_buf, vlen);
}

static int rdb_read_batch(void *thread, size_t n, const void *const keys[],
			  const size_t klens[], void *const bufs[], const size_t caps[],
			  size_t vlens[], int status[])
{
	rdb_thread *t = thread;

	if (n > t->e->max_batch)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		t->keys[i] = keys[i];
		t->errs[i] = NULL;
	}
	rocksdb_batched_multi_get_cf(t->e->db, t->e->ropts, t->e->cf, n, t->keys, klens,
				     t->vals, t->errs, 0);
	for (size_t i = 0; i < n; i++) {
		if (t->errs[i] != NULL) {
			if (t->vals[i] != NULL)
				rocksdb_pinnableslice_destroy(t->vals[i]);
			status[i] = rdb_error("multiget", t->errs[i]);
			continue;
		}
		status[i] = rdb_take(t->vals[i], bufs[i], caps[i], &vlens[i]);
	}
	return 0;
}

static int rdb_close(void *db)
{
	rdb_destroy(db);
	return 0;
}

static const char *rdb_strerror(int rc)
{
	return rc == -EIO ? "RocksDB returned an error (printed above)" : strerror(-rc);
}

const ycsb_engine ycsb_engine_rocksdb = {
	.name = "rocksdb",
	.open = rdb_open,
	.thread_init = rdb_thread_init,
	.thread_fini = rdb_thread_fini,
	.read = rdb_read,
	.update = rdb_put,
	.insert = rdb_put,
	.rmw = rdb_rmw,
	.read_batch = rdb_read_batch,
	.close = rdb_close,
	.strerror = rdb_strerror,
	.inflight_batches = 1,
};
