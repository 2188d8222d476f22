/*
 * engine_ember.c - the YCSB engine interface over Ember's public API (ember.h).
 *
 * One ember_session per worker thread; reads copy into the driver's buffer; F's
 * read-modify-write is one ember_rmw() call (atomic against other writers);
 * batched reads go through ember_get_batch().
 */
#include "engine.h"

#include <ember.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ember_engine_thread {
	ember_session *session;
} ember_engine_thread;

static int ee_open(const ycsb_engine_params *p, void **db, char *settings, size_t cap)
{
	ember_options opts;
	ember_db *edb = NULL;
	int rc;

	ember_options_default(&opts);
	if (p->mem_budget != 0)
		opts.log_memory = p->mem_budget;
	if (p->index_buckets != 0)
		opts.index_buckets = p->index_buckets;
	opts.flags |= EMBER_OPEN_TRUNCATE; /* the driver hands us a fresh directory */
	rc = ember_open(p->dir, &opts, &edb);
	if (rc < 0)
		return rc;
	snprintf(settings, cap,
		 "ember %s: log_memory=%" PRIu64 " MiB mutable_fraction=%.2f "
		 "index_buckets=%" PRIu64 " page_size=%" PRIu32 " KiB io_queue_depth=%" PRIu32
		 "; rmw=ember_rmw (atomic); batch reads=ember_get_batch",
		 ember_version(), opts.log_memory >> 20, opts.mutable_fraction,
		 opts.index_buckets, opts.page_size >> 10, opts.io_queue_depth);
	*db = edb;
	return 0;
}

static int ee_thread_init(void *db, void **thread)
{
	ember_engine_thread *t = calloc(1, sizeof(*t));
	int rc;

	if (t == NULL)
		return EMBER_ENOMEM;
	rc = ember_session_open(db, &t->session);
	if (rc < 0) {
		free(t);
		return rc;
	}
	*thread = t;
	return 0;
}

static void ee_thread_fini(void *thread)
{
	ember_engine_thread *t = thread;

	if (t == NULL)
		return;
	ember_session_close(t->session);
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

static int ee_close(void *db)
{
	return ember_close(db);
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
};
