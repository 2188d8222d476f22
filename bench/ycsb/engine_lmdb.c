/*
 * engine_lmdb.c - the YCSB engine interface over LMDB (lmdb.h), built only when
 * meson finds it (HAVE_LMDB).
 *
 * Settings (printed by open()):
 *  - map size 64 GiB (address space; the file is sparse);
 *  - env flags MDB_NOSYNC | MDB_NOMETASYNC | MDB_WRITEMAP | MDB_NOTLS | MDB_NORDAHEAD:
 *    no fsync at commit (the same durability class as the other engines here),
 *    writes straight into the map, read txns not tied to thread-local slots (the
 *    driver creates fresh threads per run), no readahead on random reads;
 *  - one write transaction per update / insert / read-modify-write, as YCSB's LMDB
 *    binding does: LMDB serialises writers, so write-heavy mixes do not scale with
 *    threads by design;
 *  - each thread keeps one read-only txn, renewed per read (mdb_txn_renew /
 *    mdb_txn_reset: the documented cheap path); a batch of reads shares one renew;
 *  - keys compared as plain bytes (no MDB_INTEGERKEY), like every other engine;
 *  - no operations in flight: a read is a page fault of the map, so LMDB has no
 *    asynchronous call and no multi-key read to stand in for one (its read
 *    batches are a loop of mdb_get in one txn); --inflight is refused for it.
 *
 * LMDB has no memory budget: its data is a memory map, cached by the OS page cache
 * as far as the machine's RAM allows. Larger than the budget (p->bounded), the
 * settings line says so: its numbers there are not bounded by the budget.
 */
#include "engine.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>

#define LMDB_MAP_SIZE (64ull << 30)

typedef struct lmdb_engine {
	MDB_env *env;
	MDB_dbi dbi;
	size_t value_size;
} lmdb_engine;

typedef struct lmdb_thread {
	lmdb_engine *e;
	MDB_txn *rtxn; /* reset between reads */
	char *rmw_buf;
} lmdb_thread;

static int lm_open(const ycsb_engine_params *p, void **db, char *settings, size_t cap)
{
	lmdb_engine *e = calloc(1, sizeof(*e));
	unsigned flags = MDB_NOSYNC | MDB_NOMETASYNC | MDB_WRITEMAP | MDB_NOTLS |
			 MDB_NORDAHEAD;
	MDB_txn *txn = NULL;
	int rc;

	if (e == NULL)
		return -ENOMEM;
	e->value_size = p->value_size;
	rc = mdb_env_create(&e->env);
	if (rc != 0)
		goto undo_alloc;
	rc = mdb_env_set_mapsize(e->env, LMDB_MAP_SIZE);
	if (rc == 0)
		rc = mdb_env_set_maxreaders(e->env, p->max_threads + 126);
	if (rc == 0)
		rc = mdb_env_open(e->env, p->dir, flags, 0644);
	if (rc != 0)
		goto undo_env;
	if (p->key_size > (size_t)mdb_env_get_maxkeysize(e->env)) {
		rc = EINVAL;
		fprintf(stderr, "lmdb: key size %zu exceeds LMDB's maximum %d\n", p->key_size,
			mdb_env_get_maxkeysize(e->env));
		goto undo_env;
	}
	rc = mdb_txn_begin(e->env, NULL, 0, &txn);
	if (rc != 0)
		goto undo_env;
	rc = mdb_dbi_open(txn, NULL, 0, &e->dbi);
	if (rc != 0) {
		mdb_txn_abort(txn);
		goto undo_env;
	}
	rc = mdb_txn_commit(txn);
	if (rc != 0)
		goto undo_env;
	snprintf(settings, cap,
		 "lmdb %d.%d.%d: map 64 GiB, MDB_NOSYNC|MDB_NOMETASYNC|MDB_WRITEMAP|MDB_NOTLS|"
		 "MDB_NORDAHEAD, one write txn per update/insert/rmw (writers serialised); "
		 "rmw=get+put in one write txn (atomic); batch reads=one read txn per batch%s",
		 MDB_VERSION_MAJOR, MDB_VERSION_MINOR, MDB_VERSION_PATCH,
		 p->bounded ? "; NOT bounded by the memory budget (mmap: the OS page cache "
			      "holds what RAM allows)" : "");
	*db = e;
	return 0;

undo_env:
	mdb_env_close(e->env);
undo_alloc:
	free(e);
	return rc > 0 ? -rc : rc; /* LMDB codes are negative, errno values positive */
}

static int lm_thread_init(void *db, void **thread)
{
	lmdb_engine *e = db;
	lmdb_thread *t = calloc(1, sizeof(*t));
	int rc;

	if (t == NULL)
		return -ENOMEM;
	t->e = e;
	t->rmw_buf = malloc(e->value_size > 0 ? e->value_size : 1);
	if (t->rmw_buf == NULL) {
		rc = ENOMEM;
		goto undo_alloc;
	}
	rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &t->rtxn);
	if (rc != 0)
		goto undo_buf;
	mdb_txn_reset(t->rtxn);
	*thread = t;
	return 0;

undo_buf:
	free(t->rmw_buf);
undo_alloc:
	free(t);
	return rc > 0 ? -rc : rc;
}

static void lm_thread_fini(void *thread)
{
	lmdb_thread *t = thread;

	if (t == NULL)
		return;
	mdb_txn_abort(t->rtxn);
	free(t->rmw_buf);
	free(t);
}

static int lm_code(int rc)
{
	if (rc == MDB_NOTFOUND)
		return YCSB_NOTFOUND;
	return rc > 0 ? -rc : rc;
}

/* One get inside an already renewed read txn. */
static int lm_get(lmdb_thread *t, const void *key, size_t klen, void *buf, size_t cap,
		  size_t *vlen)
{
	MDB_val k = { .mv_size = klen, .mv_data = (void *)key };
	MDB_val v;
	int rc = mdb_get(t->rtxn, t->e->dbi, &k, &v);

	if (rc != 0)
		return lm_code(rc);
	memcpy(buf, v.mv_data, v.mv_size < cap ? v.mv_size : cap);
	*vlen = v.mv_size;
	return 0;
}

static int lm_read(void *thread, const void *key, size_t klen, void *buf, size_t cap,
		   size_t *vlen)
{
	lmdb_thread *t = thread;
	int rc = mdb_txn_renew(t->rtxn);

	if (rc != 0)
		return lm_code(rc);
	rc = lm_get(t, key, klen, buf, cap, vlen);
	mdb_txn_reset(t->rtxn);
	return rc;
}

static int lm_read_batch(void *thread, size_t n, const void *const keys[],
			 const size_t klens[], void *const bufs[], const size_t caps[],
			 size_t vlens[], int status[])
{
	lmdb_thread *t = thread;
	int rc = mdb_txn_renew(t->rtxn);

	if (rc != 0)
		return lm_code(rc);
	for (size_t i = 0; i < n; i++)
		status[i] = lm_get(t, keys[i], klens[i], bufs[i], caps[i], &vlens[i]);
	mdb_txn_reset(t->rtxn);
	return 0;
}

static int lm_put(void *thread, const void *key, size_t klen, const void *val,
		  size_t vlen)
{
	lmdb_thread *t = thread;
	MDB_val k = { .mv_size = klen, .mv_data = (void *)key };
	MDB_val v = { .mv_size = vlen, .mv_data = (void *)val };
	MDB_txn *txn;
	int rc = mdb_txn_begin(t->e->env, NULL, 0, &txn);

	if (rc != 0)
		return lm_code(rc);
	rc = mdb_put(txn, t->e->dbi, &k, &v, 0);
	if (rc != 0) {
		mdb_txn_abort(txn);
		return lm_code(rc);
	}
	return lm_code(mdb_txn_commit(txn));
}

static int lm_rmw(void *thread, const void *key, size_t klen, size_t vlen)
{
	lmdb_thread *t = thread;
	MDB_val k = { .mv_size = klen, .mv_data = (void *)key };
	MDB_val v;
	MDB_txn *txn;
	int rc = mdb_txn_begin(t->e->env, NULL, 0, &txn);

	if (rc != 0)
		return lm_code(rc);
	rc = mdb_get(txn, t->e->dbi, &k, &v);
	if (rc != 0 && rc != MDB_NOTFOUND)
		goto undo_txn;
	if (vlen > t->e->value_size)
		vlen = t->e->value_size;
	if (rc == 0)
		ycsb_value_modify(v.mv_data, v.mv_size, t->rmw_buf, vlen);
	else
		ycsb_value_modify(NULL, 0, t->rmw_buf, vlen);
	v.mv_size = vlen;
	v.mv_data = t->rmw_buf;
	rc = mdb_put(txn, t->e->dbi, &k, &v, 0);
	if (rc != 0)
		goto undo_txn;
	return lm_code(mdb_txn_commit(txn));

undo_txn:
	mdb_txn_abort(txn);
	return lm_code(rc);
}

static int lm_close(void *db)
{
	lmdb_engine *e = db;

	mdb_dbi_close(e->env, e->dbi);
	mdb_env_close(e->env);
	free(e);
	return 0;
}

static const char *lm_strerror(int rc)
{
	/* mdb_strerror() covers both LMDB's own (negative) codes and errno values. */
	return mdb_strerror(rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE ? rc : -rc);
}

const ycsb_engine ycsb_engine_lmdb = {
	.name = "lmdb",
	.open = lm_open,
	.thread_init = lm_thread_init,
	.thread_fini = lm_thread_fini,
	.read = lm_read,
	.update = lm_put,
	.insert = lm_put,
	.rmw = lm_rmw,
	.read_batch = lm_read_batch,
	.close = lm_close,
	.strerror = lm_strerror,
	.inflight_refusal = "LMDB has no asynchronous reads (a read is a page fault of its "
			    "map) and no multi-key read to stand in for them; use --batch K",
};
