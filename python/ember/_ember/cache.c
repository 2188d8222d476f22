/*
 * cache.c - the cache layer's types of ember._ember: Cache (an ember_cache over a
 * store's _ember.Db) and CacheBatch (an acquired batch). Thin: ids are checked and
 * copied, calls are made with the GIL released; policy lives in ember/cache.py.
 *
 * Roles and threads (include/ember_cache.h)
 * -----------------------------------------
 * The C cache lets one loader thread push while one trainer thread acquires,
 * applies, releases, flushes, reads and writes rows. With the GIL released during
 * those calls, two Python threads could otherwise enter one role together, so each
 * role has a flag (`pushing`, `training`), set and cleared with the GIL held: a
 * second call into a busy role raises ember.BusyError instead of breaking the C
 * contract. close() refuses (BusyError) while either role runs or while a zero-copy
 * view of the slots is alive, and takes the handle out of the object (cache = NULL)
 * before releasing the GIL, so stats() from another thread sees it closed.
 *
 * Waiting in acquire
 * ------------------
 * ember_cache_acquire blocks on a condition variable that a signal does not end, so
 * Ctrl-C could not stop a trainer waiting for a slow prefetcher. acquire(wait=True)
 * polls ember_cache_try_acquire instead, sleeping between tries (2 us doubling to
 * 200 us) with the GIL released, and every 10 ms takes the GIL to run
 * PyErr_CheckSignals: KeyboardInterrupt leaves the batch not acquired (the next
 * acquire returns it). The time spent so is added to stats()['wait_ns'].
 */
#include "ember_py.h"

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL ember_cache_ARRAY_API
#include <numpy/arrayobject.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <ember_cache.h>

typedef struct {
	PyObject_HEAD
	ember_cache *cache;  /* NULL once closed */
	PyObject *db;        /* the _ember.Db (strong: the store outlives its cache) */
	ember_db *edb;       /* its handle, for error details while the cache is open */
	uint32_t ntables;
	uint64_t *rows;      /* per table */
	uint32_t *dims;      /* per table */
	uint32_t *nstate;    /* per table: optimizer state floats after a row */
	PyObject *names;     /* tuple of str, per table (error messages) */
	uint64_t pushed;     /* batches pushed: the next batch's number */
	int pushing;         /* the loader role is in a call (GIL held to change) */
	int training;        /* the trainer role is in a call (GIL held to change) */
	Py_ssize_t live;     /* zero-copy views of the slots (ember_py_view_new) */
	float *slot_memory;  /* known after the first acquire (host slots: fixed) */
	size_t stride;
	uint64_t nslots;
	PyObject *held;      /* the CacheBatch acquired now (borrowed) or NULL */
	uint64_t wait_ns;    /* time acquire(wait=True) spent polling */
	PyObject *weakrefs;  /* a store may keep its caches in a WeakSet */
	/* GPU slots (slots = EMBER_CACHE_SLOTS_GPU); the rest known after the first
	 * acquire, from its view: */
	int gpu_slots;
	ember_gpu *gpu;          /* the slots' context (the cache's own: borrowed) */
	int backend;             /* EMBER_GPU_BACKEND_HOST or _CUDA */
	ember_gpu_arena_info ai; /* the arena: dim, state floats, stride, slots */
	ember_gpu_event *done_ev; /* recorded on the trainer's stream at release (CUDA);
				     destroyed before the cache closes its context */
} cache_object;

typedef struct {
	PyObject_HEAD
	cache_object *owner; /* strong */
	ember_cache_view view;
	int held;            /* acquired and not released */
	PyObject *slots;     /* int64 (nlookups,) numpy array */
	PyObject *offsets;   /* int64 (nparts + 1,) numpy array */
	PyObject *tables;    /* tuple of int */
} batch_object;

static PyTypeObject cache_type;
static PyTypeObject batch_type;

/* ---- helpers ----------------------------------------------------------------- */

static PyObject *busy(const char *what)
{
	char buf[160];
	snprintf(buf, sizeof buf, "another thread is in the cache's %s call", what);
	return ember_py_raise_detail(EMBER_EBUSY, buf);
}

/* Enter the trainer role: 0, or -1 with StateError (closed) / BusyError raised. */
static int enter_trainer(cache_object *c)
{
	if (!c->cache) {
		ember_py_closed("the cache");
		return -1;
	}
	if (c->training) {
		busy("trainer");
		return -1;
	}
	c->training = 1;
	return 0;
}

static const char *table_name(cache_object *c, uint32_t t)
{
	PyObject *s = PyTuple_GET_ITEM(c->names, t);
	const char *u = PyUnicode_AsUTF8(s);
	if (!u) {
		PyErr_Clear();
		return "?";
	}
	return u;
}

static int table_arg(cache_object *c, PyObject *obj, uint32_t *out)
{
	long long t = PyLong_AsLongLong(obj);
	if (t == -1 && PyErr_Occurred())
		return -1;
	if (t < 0 || (unsigned long long)t >= c->ntables) {
		PyErr_Format(PyExc_ValueError, "table %lld out of range (the cache has %u)", t,
			     c->ntables);
		return -1;
	}
	*out = (uint32_t)t;
	return 0;
}

/* ids of table t, checked against its rows and copied into uint64 (PyMem_Malloc'd,
 * at least one element). argname names the ids in messages. */
static int ids_of_table(cache_object *c, uint32_t t, PyObject *obj, const char *argname,
			uint64_t **out, Py_ssize_t *n)
{
	ember_py_ids ids;
	if (ember_py_ids_get(obj, argname, &ids) < 0)
		return -1;
	if (ember_py_ids_check_range(&ids, argname, 0, (int64_t)c->rows[t]) < 0)
		goto fail;
	*out = PyMem_Malloc((size_t)(ids.n ? ids.n : 1) * sizeof(uint64_t));
	if (!*out) {
		PyErr_NoMemory();
		goto fail;
	}
	for (Py_ssize_t i = 0; i < ids.n; i++)
		(*out)[i] = (uint64_t)ids.ids[i];
	*n = ids.n;
	ember_py_ids_release(&ids);
	return 0;
fail:
	ember_py_ids_release(&ids);
	return -1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- Cache(db, tables, *, names, capacity, ...) ------------------------------ */

/* One table spec: (rows, dim, storage, optimizer, init, init_scale, init_seed). */
static int table_spec(PyObject *spec, Py_ssize_t i, ember_cache_table *t)
{
	unsigned long long rows, dim, storage, opt, init, seed;
	double scale;
	if (!PyTuple_Check(spec) ||
	    !PyArg_ParseTuple(spec, "KKKKKdK", &rows, &dim, &storage, &opt, &init, &scale, &seed)) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "tables[%zd]: expected (rows, dim, storage, optimizer, init, "
			     "init_scale, init_seed)", i);
		return -1;
	}
	if (rows == 0 || rows > EMBER_CACHE_MAX_ROWS || dim == 0 || dim > EMBER_CACHE_MAX_DIM ||
	    storage > 1 || opt > 2 || init > 2 || !isfinite(scale) || scale < 0) {
		PyErr_Format(PyExc_ValueError,
			     "tables[%zd]: rows must be 1..2^48, dim 1..%u, storage/optimizer/"
			     "init known, init_scale finite and >= 0", i, EMBER_CACHE_MAX_DIM);
		return -1;
	}
	memset(t, 0, sizeof *t);
	t->rows = rows;
	t->dim = (uint32_t)dim;
	t->storage = (uint32_t)storage;
	t->optimizer = (uint32_t)opt;
	t->init = (uint32_t)init;
	t->init_scale = (float)scale;
	t->init_seed = seed;
	return 0;
}

static int cache_parse_tables(cache_object *self, PyObject *tables, PyObject *names,
			      ember_cache_table **out)
{
	PyObject *seq = PySequence_Fast(tables, "tables must be a sequence");
	Py_ssize_t n;
	ember_cache_table *t = NULL;
	if (!seq)
		return -1;
	n = PySequence_Fast_GET_SIZE(seq);
	if (n < 1 || n > EMBER_CACHE_MAX_TABLES) {
		PyErr_Format(PyExc_ValueError, "a cache needs 1..%u tables, got %zd",
			     EMBER_CACHE_MAX_TABLES, n);
		goto fail;
	}
	t = PyMem_Calloc((size_t)n, sizeof *t);
	self->rows = PyMem_Calloc((size_t)n, sizeof *self->rows);
	self->dims = PyMem_Calloc((size_t)n, sizeof *self->dims);
	self->nstate = PyMem_Calloc((size_t)n, sizeof *self->nstate);
	if (!t || !self->rows || !self->dims || !self->nstate) {
		PyErr_NoMemory();
		goto fail;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		if (table_spec(PySequence_Fast_GET_ITEM(seq, i), i, &t[i]) < 0)
			goto fail;
		self->rows[i] = t[i].rows;
		self->dims[i] = t[i].dim;
	}
	self->ntables = (uint32_t)n;
	if (names == NULL || names == Py_None) {
		self->names = PyTuple_New(n);
		if (!self->names)
			goto fail;
		for (Py_ssize_t i = 0; i < n; i++) {
			PyObject *s = PyUnicode_FromFormat("table %zd", i);
			if (!s)
				goto fail;
			PyTuple_SET_ITEM(self->names, i, s);
		}
	} else {
		self->names = PySequence_Tuple(names);
		if (!self->names)
			goto fail;
		if (PyTuple_GET_SIZE(self->names) != n) {
			PyErr_SetString(PyExc_ValueError, "names: one per table");
			goto fail;
		}
		for (Py_ssize_t i = 0; i < n; i++)
			if (!PyUnicode_Check(PyTuple_GET_ITEM(self->names, i))) {
				PyErr_SetString(PyExc_TypeError, "names: must be str");
				goto fail;
			}
	}
	Py_DECREF(seq);
	*out = t;
	return 0;
fail:
	Py_DECREF(seq);
	PyMem_Free(t);
	return -1;
}

static int cache_init(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"db", "tables", "names", "capacity", "window",
				 "prefetch_batches", "prefetch_depth", "init", "init_scale",
				 "init_seed", "slots", "gpu_backend", "gpu_device", NULL};
	cache_object *self = (cache_object *)op;
	PyObject *db, *tables, *names = NULL;
	unsigned long long capacity = 0, seed = 0;
	unsigned int window = 0, pbatches = 0, depth = 0, init = 0;
	double scale = 0;
	int slots = 0, gpu_backend = 0, gpu_device = 0;
	ember_cache_table *t = NULL;
	ember_cache_options o;
	ember_db *edb;
	ember_cache *cache = NULL;
	int rc;

	if (self->cache || self->db) {
		PyErr_SetString(PyExc_TypeError, "Cache.__init__ called twice");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OKIIIIdKiii", kwlist, &db, &tables,
					 &names, &capacity, &window, &pbatches, &depth, &init,
					 &scale, &seed, &slots, &gpu_backend, &gpu_device))
		return -1;
	if (slots != EMBER_CACHE_SLOTS_HOST && slots != EMBER_CACHE_SLOTS_GPU) {
		PyErr_SetString(PyExc_ValueError, "slots must be 0 (host) or 1 (GPU)");
		return -1;
	}
	if (gpu_backend < EMBER_GPU_BACKEND_AUTO || gpu_backend > EMBER_GPU_BACKEND_CUDA ||
	    gpu_device < 0 || (slots == EMBER_CACHE_SLOTS_HOST && (gpu_backend || gpu_device))) {
		PyErr_SetString(PyExc_ValueError, "gpu_backend must be 0..2 and gpu_device >= 0, "
				"both 0 with host slots");
		return -1;
	}
	if (init > 1 || !isfinite(scale) || scale < 0) {
		PyErr_SetString(PyExc_ValueError, "init must be 0 or 1, init_scale finite and >= 0");
		return -1;
	}
	edb = emb_store_db(db);
	if (!edb)
		return -1;
	if (cache_parse_tables(self, tables, names, &t) < 0)
		return -1;
	ember_cache_options_default(&o);
	o.tables = t;
	o.ntables = self->ntables;
	o.capacity = capacity;
	o.window = window;
	o.prefetch_batches = pbatches;
	o.prefetch_depth = depth;
	o.init = init;
	o.init_scale = (float)scale;
	o.init_seed = seed;
	o.slots = (uint32_t)slots;
	o.gpu_backend = gpu_backend;
	o.gpu_device = gpu_device;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_cache_open(edb, &o, &cache);
	Py_END_ALLOW_THREADS
	if (rc == 0)
		for (uint32_t i = 0; i < self->ntables; i++)
			self->nstate[i] = ember_cache_state_floats(cache, i);
	PyMem_Free(t);
	if (rc < 0) {
		ember_py_raise(rc, edb);
		return -1;
	}
	self->cache = cache;
	self->gpu_slots = slots == EMBER_CACHE_SLOTS_GPU;
	self->db = Py_NewRef(db);
	self->edb = edb;
	return 0;
}

/* Close the C cache (GIL released); the handle leaves the object first. */
static int cache_do_close(cache_object *self)
{
	ember_cache *cache = self->cache;
	int rc;
	self->cache = NULL;
	if (self->held) {
		((batch_object *)self->held)->held = 0; /* the C close drops it */
		self->held = NULL;
	}
	ember_gpu_event *ev = self->done_ev;
	self->done_ev = NULL;
	Py_BEGIN_ALLOW_THREADS
	(void)ember_gpu_event_destroy(ev); /* before the cache closes its own context */
	rc = ember_cache_close(cache);
	Py_END_ALLOW_THREADS
	self->slot_memory = NULL;
	self->gpu = NULL;
	return rc;
}

static PyObject *cache_close(PyObject *op, PyObject *unused)
{
	cache_object *self = (cache_object *)op;
	int rc;
	if (!self->cache)
		Py_RETURN_NONE;
	if (self->pushing || self->training)
		return busy(self->pushing ? "push" : "trainer");
	if (ember_py_views_busy(&self->live, "the cache") < 0)
		return NULL;
	rc = cache_do_close(self);
	if (rc < 0)
		return ember_py_raise(rc, self->edb);
	Py_RETURN_NONE;
}

static void cache_dealloc(PyObject *op)
{
	cache_object *self = (cache_object *)op;
	if (self->cache) /* no views, no batch (they hold references), no call running */
		(void)cache_do_close(self);
	if (self->weakrefs)
		PyObject_ClearWeakRefs(op);
	Py_CLEAR(self->db);
	Py_CLEAR(self->names);
	PyMem_Free(self->rows);
	PyMem_Free(self->dims);
	PyMem_Free(self->nstate);
	Py_TYPE(op)->tp_free(op);
}

/* ---- push -------------------------------------------------------------------- */

/* Parse parts [(table, ids[, label]), ...] into parts[]. The ids are read in place
 * where they are an int64 buffer (ids[p] holds them until ember_py_ids_release) and
 * range-checked here; they are not copied: ember_cache_push copies them, and checks
 * them again (EMBER_EINVAL), so a buffer changed by another thread while the GIL is
 * released cannot push an id out of range. A checked int64 id is its uint64. */
static int push_parse(cache_object *self, PyObject *seq, ember_cache_part *parts,
		      ember_py_ids *ids)
{
	Py_ssize_t np = PySequence_Fast_GET_SIZE(seq);
	char argname[160];
	for (Py_ssize_t p = 0; p < np; p++) {
		PyObject *item = PySequence_Fast_GET_ITEM(seq, p), *label = NULL;
		uint32_t t;
		if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2 ||
		    PyTuple_GET_SIZE(item) > 3) {
			PyErr_Format(PyExc_TypeError, "part %zd: expected (table, ids[, name])", p);
			return -1;
		}
		if (table_arg(self, PyTuple_GET_ITEM(item, 0), &t) < 0)
			return -1;
		if (PyTuple_GET_SIZE(item) == 3)
			label = PyTuple_GET_ITEM(item, 2);
		if (label && PyUnicode_Check(label))
			snprintf(argname, sizeof argname, "feature '%s' (table '%s', part %zd) ids",
				 PyUnicode_AsUTF8(label), table_name(self, t), p);
		else
			snprintf(argname, sizeof argname, "table '%s' (part %zd) ids",
				 table_name(self, t), p);
		if (ember_py_ids_get(PyTuple_GET_ITEM(item, 1), argname, &ids[p]) < 0)
			return -1;
		if (ember_py_ids_check_range(&ids[p], argname, 0, (int64_t)self->rows[t]) < 0)
			return -1;
		if ((uint64_t)ids[p].n > UINT32_MAX) {
			PyErr_Format(PyExc_ValueError, "%s: %zd lookups, more than 2^32 - 1", argname,
				     ids[p].n);
			return -1;
		}
		parts[p].table = t;
		parts[p].n = (uint32_t)ids[p].n;
		parts[p].rows = (const uint64_t *)ids[p].ids;
	}
	return 0;
}

static PyObject *cache_push(PyObject *op, PyObject *arg)
{
	cache_object *self = (cache_object *)op;
	PyObject *seq, *ret = NULL;
	Py_ssize_t np;
	ember_cache_part *parts = NULL;
	ember_py_ids *ids = NULL;
	ember_cache_batch b;
	int rc;

	if (!self->cache)
		return ember_py_closed("the cache");
	if (self->pushing)
		return busy("push");
	seq = PySequence_Fast(arg, "push: parts must be a sequence of (table, ids)");
	if (!seq)
		return NULL;
	np = PySequence_Fast_GET_SIZE(seq);
	if ((uint64_t)np > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "push: too many parts");
		goto out;
	}
	parts = PyMem_Calloc((size_t)(np ? np : 1), sizeof *parts);
	ids = PyMem_Calloc((size_t)(np ? np : 1), sizeof *ids);
	if (!parts || !ids) {
		PyErr_NoMemory();
		goto out;
	}
	if (push_parse(self, seq, parts, ids) < 0)
		goto out;
	b.nparts = (uint32_t)np;
	b.parts = parts;
	self->pushing = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_cache_push(self->cache, &b);
	Py_END_ALLOW_THREADS
	self->pushing = 0;
	if (rc < 0) {
		ember_py_raise(rc, NULL);
		goto out;
	}
	ret = PyLong_FromUnsignedLongLong(self->pushed++);
out:
	if (ids)
		for (Py_ssize_t p = 0; p < np; p++)
			ember_py_ids_release(&ids[p]);
	PyMem_Free(ids);
	PyMem_Free(parts);
	Py_DECREF(seq);
	return ret;
}

/* ---- acquire ----------------------------------------------------------------- */

/* try_acquire until it answers other than EAGAIN or about 10 ms have passed; the
 * GIL is released by the caller. *wait_t0 (0: not waiting yet) gets the time of the
 * first EAGAIN, so that the caller counts every wait from there, the first 10 ms
 * included. */
static int poll_acquire(ember_cache *cache, ember_cache_view *v, uint64_t *wait_t0)
{
	int rc = ember_cache_try_acquire(cache, v);
	if (rc != EMBER_EAGAIN)
		return rc;
	uint64_t t0 = now_ns();
	if (!*wait_t0)
		*wait_t0 = t0;
	long sleep_ns = 2000;
	do {
		struct timespec ts = {0, sleep_ns};
		nanosleep(&ts, NULL);
		if (sleep_ns < 200000)
			sleep_ns *= 2;
		rc = ember_cache_try_acquire(cache, v);
	} while (rc == EMBER_EAGAIN && now_ns() - t0 <= 10000000ull);
	return rc;
}

/* The CacheBatch of an acquired view: slot indices as int64, part offsets. */
static PyObject *batch_new(cache_object *self, const ember_cache_view *v)
{
	batch_object *b = PyObject_New(batch_object, &batch_type);
	npy_intp n = 0, np1 = (npy_intp)v->nparts + 1;
	if (!b)
		return NULL;
	b->owner = (cache_object *)Py_NewRef((PyObject *)self);
	b->view = *v;
	b->held = 1;
	b->slots = b->offsets = b->tables = NULL;
	for (uint32_t p = 0; p < v->nparts; p++)
		n += v->parts[p].n;
	b->slots = PyArray_SimpleNew(1, &n, NPY_INT64);
	b->offsets = PyArray_SimpleNew(1, &np1, NPY_INT64);
	b->tables = PyTuple_New(v->nparts);
	if (!b->slots || !b->offsets || !b->tables)
		goto fail;
	int64_t *s = PyArray_DATA((PyArrayObject *)b->slots);
	int64_t *o = PyArray_DATA((PyArrayObject *)b->offsets);
	npy_intp k = 0;
	for (uint32_t p = 0; p < v->nparts; p++) {
		PyObject *t = PyLong_FromUnsignedLong(v->parts[p].table);
		if (!t)
			goto fail;
		PyTuple_SET_ITEM(b->tables, p, t);
		o[p] = k;
		for (uint32_t i = 0; i < v->parts[p].n; i++)
			s[k++] = v->slots[p][i];
	}
	o[v->nparts] = k;
	return (PyObject *)b;
fail:
	Py_DECREF(b); /* batch_dealloc releases the view (held) */
	return NULL;
}

static PyObject *cache_acquire(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"wait", NULL};
	cache_object *self = (cache_object *)op;
	int wait = 1, rc;
	ember_cache_view v;
	uint64_t t0 = 0;
	PyObject *b;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &wait))
		return NULL;
	if (enter_trainer(self) < 0)
		return NULL;
	memset(&v, 0, sizeof v);
	for (;;) {
		Py_BEGIN_ALLOW_THREADS
		rc = wait ? poll_acquire(self->cache, &v, &t0)
			  : ember_cache_try_acquire(self->cache, &v);
		Py_END_ALLOW_THREADS
		if (rc != EMBER_EAGAIN || !wait)
			break;
		if (PyErr_CheckSignals() < 0) { /* KeyboardInterrupt: nothing acquired */
			self->wait_ns += now_ns() - t0;
			self->training = 0;
			return NULL;
		}
	}
	if (t0)
		self->wait_ns += now_ns() - t0;
	self->training = 0;
	if (rc == EMBER_EAGAIN)
		Py_RETURN_NONE;
	if (rc < 0)
		return ember_py_raise(rc, self->edb);
	if (!self->slot_memory) {
		self->slot_memory = v.slot_memory;
		self->stride = v.slot_stride;
		self->nslots = v.nslots;
		if (v.gpu) {
			self->gpu = v.gpu;
			self->backend = ember_gpu_backend(v.gpu);
			(void)ember_gpu_arena_query(v.arena, &self->ai);
		}
	}
	b = batch_new(self, &v);
	if (!b)
		return NULL;
	self->held = b;
	return b;
}

/* ---- the acquired batch's calls ------------------------------------------------ */

static batch_object *held_batch(cache_object *self, PyObject *obj)
{
	if (!PyObject_TypeCheck(obj, &batch_type)) {
		PyErr_Format(PyExc_TypeError, "expected a CacheBatch, got %.80s",
			     Py_TYPE(obj)->tp_name);
		return NULL;
	}
	batch_object *b = (batch_object *)obj;
	if (b->owner != self) {
		PyErr_SetString(PyExc_ValueError, "the batch belongs to another cache");
		return NULL;
	}
	if (!b->held) {
		char buf[96];
		snprintf(buf, sizeof buf, "batch %llu was released",
			 (unsigned long long)b->view.batch);
		ember_py_raise_detail(EMBER_ESTATE, buf);
		return NULL;
	}
	return b;
}

static int finite_arg(double x, const char *name, int nonneg)
{
	if (!isfinite(x) || (nonneg && x < 0)) {
		PyErr_Format(PyExc_ValueError, "%s must be finite%s", name, nonneg ? " and >= 0" : "");
		return -1;
	}
	return 0;
}

static PyObject *cache_apply(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"batch", "part", "grads", "lr", "eps", "weight_decay", NULL};
	cache_object *self = (cache_object *)op;
	PyObject *bobj, *gobj;
	unsigned int part;
	double lr, eps = 0, wd = 0;
	Py_buffer g;
	batch_object *b;
	ember_cache_update upd;
	uint32_t dim, n;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OIOd|dd", kwlist, &bobj, &part, &gobj, &lr,
					 &eps, &wd))
		return NULL;
	if (!self->cache)
		return ember_py_closed("the cache");
	if (!(b = held_batch(self, bobj)))
		return NULL;
	if (part >= b->view.nparts) {
		PyErr_Format(PyExc_ValueError, "part %u out of range (the batch has %u)", part,
			     b->view.nparts);
		return NULL;
	}
	if (finite_arg(lr, "lr", 0) < 0 || finite_arg(eps, "eps", 1) < 0 ||
	    finite_arg(wd, "weight_decay", 1) < 0)
		return NULL;
	n = b->view.parts[part].n;
	dim = self->dims[b->view.parts[part].table];
	if (ember_py_buffer_get(gobj, "grads", 'f', 4, 2, 0, &g) < 0)
		return NULL;
	if (g.shape[0] != (Py_ssize_t)n || g.shape[1] != (Py_ssize_t)dim) {
		PyErr_Format(PyExc_ValueError, "grads: shape must be (%u, %u) for part %u, got "
			     "(%zd, %zd)", n, dim, part, g.shape[0], g.shape[1]);
		ember_py_buffer_release(&g);
		return NULL;
	}
	if (enter_trainer(self) < 0) {
		ember_py_buffer_release(&g);
		return NULL;
	}
	memset(&upd, 0, sizeof upd);
	upd.lr = (float)lr;
	upd.eps = (float)eps;
	upd.weight_decay = (float)wd;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_cache_apply(self->cache, &b->view, part, g.buf, dim, &upd);
	Py_END_ALLOW_THREADS
	self->training = 0;
	ember_py_buffer_release(&g);
	if (rc < 0)
		return ember_py_raise(rc, NULL);
	Py_RETURN_NONE;
}

/* ---- GPU slots: streams ------------------------------------------------------- */

/*
 * The trainer's streams are passed as raw handles (a cudaStream_t as an int, as
 * torch.cuda.Stream.cuda_stream gives it; 0 is the legacy default stream). Each
 * call wraps the handle for its own duration (ember_gpu_stream_wrap: the wrapper
 * is freed at the end of the call, the stream is the caller's). The host backend
 * has no foreign streams: its calls run on the context's compute stream and wait
 * for it, so nothing of Ember's is in flight when they return.
 */

/* A stream handle argument: None (*has = 0) or a non-negative int. */
static int stream_arg(PyObject *obj, const char *name, void **h, int *has)
{
	*has = 0;
	*h = NULL;
	if (obj == NULL || obj == Py_None)
		return 0;
	if (!PyLong_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "%s must be a stream handle (int) or None, got %.80s",
			     name, Py_TYPE(obj)->tp_name);
		return -1;
	}
	unsigned long long v = PyLong_AsUnsignedLongLong(obj);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s: not a stream handle", name);
		return -1;
	}
	*h = (void *)(uintptr_t)v;
	*has = 1;
	return 0;
}

/* The host backend's and the stream-less CUDA calls' stream: the context's own. */
static ember_gpu_stream *compute_stream(cache_object *c)
{
	ember_gpu_stream *s = NULL;
	(void)ember_gpu_stream_get(c->gpu, EMBER_GPU_STREAM_COMPUTE, 0, &s);
	return s;
}

/* With no stream given (or on the host backend): wait until Ember's compute
 * stream and, on CUDA, the legacy default stream (PyTorch's default) have run what
 * they were given. GIL released by the caller. */
static int settle(cache_object *c)
{
	int rc = ember_gpu_stream_synchronize(compute_stream(c));
	if (rc == 0 && c->backend == EMBER_GPU_BACKEND_CUDA) {
		ember_gpu_stream *w = NULL;
		rc = ember_gpu_stream_wrap(c->gpu, NULL, &w);
		if (rc == 0) {
			rc = ember_gpu_stream_synchronize(w);
			int rc2 = ember_gpu_stream_destroy(w);
			rc = rc < 0 ? rc : rc2;
		}
	}
	return rc;
}

/* The event of the trainer's last work, for release: recorded on the given stream
 * (CUDA), or NULL after settle(). GIL released by the caller. */
static int done_event(cache_object *c, int has, void *h, ember_gpu_event **done)
{
	int rc;
	*done = NULL;
	if (!has || c->backend != EMBER_GPU_BACKEND_CUDA)
		return settle(c);
	if (!c->done_ev && (rc = ember_gpu_event_create(c->gpu, &c->done_ev)) < 0)
		return rc;
	ember_gpu_stream *w = NULL;
	if ((rc = ember_gpu_stream_wrap(c->gpu, h, &w)) < 0)
		return rc;
	rc = ember_gpu_event_record(c->done_ev, w);
	int rc2 = ember_gpu_stream_destroy(w);
	if (rc == 0 && rc2 == 0)
		*done = c->done_ev;
	return rc < 0 ? rc : rc2;
}

/* Release b (trainer role entered by the caller). GPU slots: the trainer's last
 * work on the batch is the stream `h` (has) or, without one, settled first. */
static int batch_release(cache_object *self, batch_object *b, int dirty, int has, void *h)
{
	int rc = 0;
	b->view.flags = dirty ? 0 : EMBER_CACHE_VIEW_READONLY;
	Py_BEGIN_ALLOW_THREADS
	if (self->gpu_slots && self->gpu)
		rc = done_event(self, has, h, &b->view.done);
	if (rc == 0)
		rc = ember_cache_release(self->cache, &b->view);
	Py_END_ALLOW_THREADS
	if (rc == 0) {
		b->held = 0;
		if (self->held == (PyObject *)b)
			self->held = NULL;
	}
	return rc;
}

/* The acquired batch of a cache with GPU slots; NULL with an exception set. */
static batch_object *gpu_batch(cache_object *self, PyObject *obj)
{
	batch_object *b;
	if (!self->cache)
		return (batch_object *)ember_py_closed("the cache");
	if (!(b = held_batch(self, obj)))
		return NULL;
	if (!self->gpu_slots || !self->gpu) {
		PyErr_SetString(PyExc_ValueError, "the cache's slots are in host memory "
				"(open it with slots='gpu' for device calls)");
		return NULL;
	}
	return b;
}

static PyObject *cache_wait(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"batch", "stream", NULL};
	cache_object *self = (cache_object *)op;
	PyObject *bobj, *sobj = Py_None;
	batch_object *b;
	void *h;
	int has, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &bobj, &sobj))
		return NULL;
	if (!(b = gpu_batch(self, bobj)) || stream_arg(sobj, "stream", &h, &has) < 0)
		return NULL;
	if (enter_trainer(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	if (has && self->backend == EMBER_GPU_BACKEND_CUDA) {
		ember_gpu_stream *w = NULL;
		rc = ember_gpu_stream_wrap(self->gpu, h, &w);
		if (rc == 0) {
			rc = ember_gpu_stream_wait_event(w, b->view.ready);
			int rc2 = ember_gpu_stream_destroy(w);
			rc = rc < 0 ? rc : rc2;
		}
	} else {
		rc = ember_gpu_event_synchronize(b->view.ready);
	}
	Py_END_ALLOW_THREADS
	self->training = 0;
	if (rc < 0)
		return ember_py_raise(rc, NULL);
	Py_RETURN_NONE;
}

/* Scatter-apply of the batch's grouped lookups on stream s (after `ready`). GIL
 * released by the caller. */
static int apply_grouped(cache_object *c, batch_object *b, ember_gpu_stream *s,
			 const float *grads, const ember_gpu_update *u)
{
	const ember_cache_view *v = &b->view;
	int rc = ember_gpu_stream_wait_event(s, v->ready);
	if (rc == 0)
		rc = ember_gpu_scatter_apply_grouped(s, v->arena, v->dev_group_slots,
						     v->dev_group_offsets, v->ngroups,
						     v->dev_group_order, (uint32_t)v->nlookups,
						     (uint32_t)v->nlookups, grads, u);
	return rc;
}

static PyObject *cache_apply_device(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"batch", "grads", "lr", "eps", "optimizer", "stream", NULL};
	cache_object *self = (cache_object *)op;
	PyObject *bobj, *sobj = Py_None;
	unsigned long long ptr;
	double lr, eps = 0;
	int opt = 0, has, rc;
	void *h;
	batch_object *b;
	ember_gpu_update u;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OKd|diO", kwlist, &bobj, &ptr, &lr, &eps, &opt,
					 &sobj))
		return NULL;
	if (!(b = gpu_batch(self, bobj)) || stream_arg(sobj, "stream", &h, &has) < 0)
		return NULL;
	int adagrad = self->ai.state_floats != 0;
	if (opt == 0)
		opt = adagrad ? EMBER_GPU_OPT_ADAGRAD : EMBER_GPU_OPT_SGD;
	if (opt != EMBER_GPU_OPT_SGD && opt != EMBER_GPU_OPT_ADAGRAD) {
		PyErr_Format(PyExc_ValueError, "optimizer must be 1 (SGD) or 2 (Adagrad), got %d",
			     opt);
		return NULL;
	}
	if ((opt == EMBER_GPU_OPT_ADAGRAD) != adagrad) {
		PyErr_Format(PyExc_ValueError, "optimizer %s: the cache's tables keep %s",
			     opt == EMBER_GPU_OPT_ADAGRAD ? "adagrad" : "sgd",
			     adagrad ? "Adagrad state (use 'adagrad')" : "no optimizer state "
			     "(use 'sgd')");
		return NULL;
	}
	if (!isfinite(lr) || lr <= 0 || !isfinite((float)lr) || (float)lr <= 0) {
		PyErr_SetString(PyExc_ValueError, "lr must be finite and > 0 on the device");
		return NULL;
	}
	if (finite_arg(eps, "eps", 1) < 0)
		return NULL;
	if (b->view.nlookups && !ptr) {
		PyErr_SetString(PyExc_ValueError, "grads: NULL device pointer");
		return NULL;
	}
	if (enter_trainer(self) < 0)
		return NULL;
	memset(&u, 0, sizeof u);
	u.optimizer = opt;
	u.lr = (float)lr;
	u.eps = (float)eps;
	const float *grads = (const float *)(uintptr_t)ptr;
	Py_BEGIN_ALLOW_THREADS
	if (b->view.nlookups == 0) {
		rc = 0;
	} else if (has && self->backend == EMBER_GPU_BACKEND_CUDA) {
		ember_gpu_stream *w = NULL;
		rc = ember_gpu_stream_wrap(self->gpu, h, &w);
		if (rc == 0) {
			rc = apply_grouped(self, b, w, grads, &u);
			int rc2 = ember_gpu_stream_destroy(w);
			rc = rc < 0 ? rc : rc2;
		}
	} else {
		/* no stream (or the host backend): after the default stream's work (the
		 * gradients' producer), done when the call returns */
		ember_gpu_stream *s = compute_stream(self);
		rc = settle(self);
		if (rc == 0)
			rc = apply_grouped(self, b, s, grads, &u);
		if (rc == 0)
			rc = ember_gpu_stream_synchronize(s);
		if (rc == 0)
			rc = ember_gpu_arena_check(b->view.arena);
	}
	Py_END_ALLOW_THREADS
	self->training = 0;
	if (rc < 0)
		return ember_py_raise(rc, NULL);
	Py_RETURN_NONE;
}

static PyObject *devmem_new(cache_object *c, batch_object *b);

static PyObject *cache_device_memory(PyObject *op, PyObject *bobj)
{
	cache_object *self = (cache_object *)op;
	batch_object *b = gpu_batch(self, bobj);
	if (!b)
		return NULL;
	return devmem_new(self, b);
}

static PyObject *cache_gpu_info(PyObject *op, PyObject *unused)
{
	cache_object *self = (cache_object *)op;
	if (!self->cache)
		return ember_py_closed("the cache");
	if (!self->gpu_slots) {
		PyErr_SetString(PyExc_ValueError, "the cache's slots are in host memory");
		return NULL;
	}
	if (!self->gpu)
		return ember_py_raise_detail(EMBER_ESTATE, "the slots are known after the first "
						       "acquire");
	return Py_BuildValue("{sssIsIsIsKsK}", "backend",
			     self->backend == EMBER_GPU_BACKEND_CUDA ? "cuda" : "host", "dim",
			     self->ai.dim, "state_floats", self->ai.state_floats, "stride",
			     self->ai.stride, "nslots", (unsigned long long)self->ai.slots, "ptr",
			     (unsigned long long)(uintptr_t)self->ai.base);
}

static PyObject *cache_release(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"batch", "dirty", "done_stream", NULL};
	cache_object *self = (cache_object *)op;
	PyObject *bobj, *sobj = Py_None;
	int dirty = 1, rc, has;
	void *h;
	batch_object *b;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pO", kwlist, &bobj, &dirty, &sobj))
		return NULL;
	if (!self->cache)
		return ember_py_closed("the cache");
	if (!(b = held_batch(self, bobj)))
		return NULL;
	if (stream_arg(sobj, "done_stream", &h, &has) < 0)
		return NULL;
	if (has && !self->gpu_slots) {
		PyErr_SetString(PyExc_ValueError, "done_stream: the cache's slots are in host "
				"memory");
		return NULL;
	}
	if (enter_trainer(self) < 0)
		return NULL;
	rc = batch_release(self, b, dirty, has, h);
	self->training = 0;
	if (rc < 0)
		return ember_py_raise(rc, NULL);
	Py_RETURN_NONE;
}

/* ---- flush, rows, stats, memory ---------------------------------------------- */

static PyObject *cache_flush(PyObject *op, PyObject *unused)
{
	cache_object *self = (cache_object *)op;
	int rc;
	if (enter_trainer(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_cache_flush(self->cache);
	Py_END_ALLOW_THREADS
	self->training = 0;
	if (rc < 0)
		return ember_py_raise(rc, self->edb);
	Py_RETURN_NONE;
}

static PyObject *cache_read_rows(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"table", "ids", "state", NULL};
	cache_object *self = (cache_object *)op;
	PyObject *tobj, *iobj, *out = NULL, *st = Py_None, *ret = NULL;
	int want_state = 0, rc;
	uint32_t t;
	uint64_t *ids = NULL;
	Py_ssize_t n = 0;
	char argname[128];

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|p", kwlist, &tobj, &iobj, &want_state))
		return NULL;
	if (!self->cache)
		return ember_py_closed("the cache");
	if (table_arg(self, tobj, &t) < 0)
		return NULL;
	snprintf(argname, sizeof argname, "table '%s' ids", table_name(self, t));
	if (ids_of_table(self, t, iobj, argname, &ids, &n) < 0)
		return NULL;
	npy_intp shape[2] = {n, self->dims[t]};
	npy_intp sshape[2] = {n, self->nstate[t]};
	out = PyArray_SimpleNew(2, shape, NPY_FLOAT32);
	if (!out)
		goto done;
	if (want_state && !(st = PyArray_SimpleNew(2, sshape, NPY_FLOAT32)))
		goto done;
	if (enter_trainer(self) < 0)
		goto done;
	float *o = PyArray_DATA((PyArrayObject *)out);
	float *s = st == Py_None || !self->nstate[t] ? NULL : PyArray_DATA((PyArrayObject *)st);
	Py_BEGIN_ALLOW_THREADS
	rc = ember_cache_read_rows(self->cache, t, (size_t)n, ids, o, s);
	Py_END_ALLOW_THREADS
	self->training = 0;
	if (rc < 0) {
		ember_py_raise(rc, self->edb);
		goto done;
	}
	ret = PyTuple_Pack(2, out, st);
done:
	PyMem_Free(ids);
	Py_XDECREF(out);
	if (st != Py_None)
		Py_XDECREF(st);
	return ret;
}

/* A float32 (n, cols) C-contiguous buffer; -1 with ValueError otherwise. */
static int rows_buffer(PyObject *obj, const char *name, Py_ssize_t n, uint32_t cols,
		       Py_buffer *v)
{
	if (ember_py_buffer_get(obj, name, 'f', 4, 2, 0, v) < 0)
		return -1;
	if (v->shape[0] != n || v->shape[1] != (Py_ssize_t)cols) {
		PyErr_Format(PyExc_ValueError, "%s: shape must be (%zd, %u), got (%zd, %zd)", name,
			     n, cols, v->shape[0], v->shape[1]);
		ember_py_buffer_release(v);
		return -1;
	}
	return 0;
}

static PyObject *cache_write_rows(PyObject *op, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"table", "ids", "rows", "state", NULL};
	cache_object *self = (cache_object *)op;
	PyObject *tobj, *iobj, *robj, *sobj = Py_None, *ret = NULL;
	uint32_t t;
	uint64_t *ids = NULL;
	Py_ssize_t n = 0;
	Py_buffer r = {0}, s = {0};
	char argname[128];
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O", kwlist, &tobj, &iobj, &robj, &sobj))
		return NULL;
	if (!self->cache)
		return ember_py_closed("the cache");
	if (table_arg(self, tobj, &t) < 0)
		return NULL;
	snprintf(argname, sizeof argname, "table '%s' ids", table_name(self, t));
	if (ids_of_table(self, t, iobj, argname, &ids, &n) < 0)
		return NULL;
	if (rows_buffer(robj, "rows", n, self->dims[t], &r) < 0)
		goto done;
	if (sobj != Py_None) {
		if (!self->nstate[t]) {
			PyErr_Format(PyExc_ValueError, "state: table '%s' keeps no optimizer state",
				     table_name(self, t));
			goto done;
		}
		if (rows_buffer(sobj, "state", n, self->nstate[t], &s) < 0)
			goto done;
	}
	if (enter_trainer(self) < 0)
		goto done;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_cache_write_rows(self->cache, t, (size_t)n, ids, r.buf,
				    s.obj ? s.buf : NULL);
	Py_END_ALLOW_THREADS
	self->training = 0;
	if (rc < 0) {
		ember_py_raise(rc, self->edb);
		goto done;
	}
	ret = Py_NewRef(Py_None);
done:
	ember_py_buffer_release(&r);
	ember_py_buffer_release(&s);
	PyMem_Free(ids);
	return ret;
}

static PyObject *cache_stats(PyObject *op, PyObject *unused)
{
	cache_object *self = (cache_object *)op;
	ember_cache_stats st;
	int rc;
	if (!self->cache)
		return ember_py_closed("the cache");
	rc = ember_cache_stats_get(self->cache, &st);
	if (rc < 0)
		return ember_py_raise(rc, NULL);
	return Py_BuildValue(
		"{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsK}",
		"batches_pushed", st.batches_pushed, "batches_planned", st.batches_planned,
		"batches_released", st.batches_released, "lookups", st.lookups,
		"unique_rows", st.unique_rows, "hits", st.hits, "rows_fetched", st.rows_fetched,
		"rows_absent", st.rows_absent, "rows_evicted", st.rows_evicted,
		"rows_written_back", st.rows_written_back, "bytes_fetched", st.bytes_fetched,
		"bytes_written_back", st.bytes_written_back,
		"wait_ns", st.wait_ns + self->wait_ns,
		"prefetch_idle_ns", st.prefetch_idle_ns, "prefetch_busy_ns", st.prefetch_busy_ns,
		"plan_ns", st.plan_ns, "fetch_rounds", st.fetch_rounds, "resident", st.resident,
		"capacity", st.capacity);
}

static PyObject *cache_memory(PyObject *op, PyObject *unused)
{
	cache_object *self = (cache_object *)op;
	if (!self->cache)
		return ember_py_closed("the cache");
	if (self->gpu_slots) {
		PyErr_SetString(PyExc_ValueError, "the slots are GPU slots: use "
				"device_memory(batch)");
		return NULL;
	}
	if (!self->slot_memory)
		return ember_py_raise_detail(EMBER_ESTATE, "the slots are known after the first "
						       "acquire");
	Py_ssize_t shape[2] = {(Py_ssize_t)self->nslots, (Py_ssize_t)self->stride};
	return ember_py_view_new(op, &self->live, self->slot_memory, "f", 4, 2, shape, 0);
}

static PyObject *cache_get_closed(PyObject *op, void *closure)
{
	return PyBool_FromLong(((cache_object *)op)->cache == NULL);
}

static PyObject *cache_get_pushed(PyObject *op, void *closure)
{
	return PyLong_FromUnsignedLongLong(((cache_object *)op)->pushed);
}

static PyObject *cache_state_floats(PyObject *op, PyObject *arg)
{
	cache_object *self = (cache_object *)op;
	uint32_t t;
	if (!self->cache)
		return ember_py_closed("the cache");
	if (table_arg(self, arg, &t) < 0)
		return NULL;
	return PyLong_FromUnsignedLong(self->nstate[t]);
}

static PyMethodDef cache_methods[] = {
	{"push", cache_push, METH_O,
	 "push(parts): parts = [(table, int64 ids[, feature name]), ...]; returns the batch "
	 "number. ValueError naming the feature and position on a bad id (nothing pushed)."},
	{"acquire", (PyCFunction)(void (*)(void))cache_acquire, METH_VARARGS | METH_KEYWORDS,
	 "acquire(wait=True) -> CacheBatch, or None (wait=False, not resident yet)."},
	{"apply", (PyCFunction)(void (*)(void))cache_apply, METH_VARARGS | METH_KEYWORDS,
	 "apply(batch, part, grads float32 (n, dim), lr, eps=0, weight_decay=0)."},
	{"release", (PyCFunction)(void (*)(void))cache_release, METH_VARARGS | METH_KEYWORDS,
	 "release(batch, dirty=True, done_stream=None): GPU slots: the trainer's last work on "
	 "the batch was enqueued on done_stream (CUDA: an event is recorded there), or has "
	 "completed once Ember's and the default stream are synchronized (None)."},
	{"wait", (PyCFunction)(void (*)(void))cache_wait, METH_VARARGS | METH_KEYWORDS,
	 "wait(batch, stream=None): GPU slots: the stream (a cudaStream_t as int; CUDA) waits "
	 "on the batch's `ready`; without one (or on the host backend) the host waits."},
	{"apply_device", (PyCFunction)(void (*)(void))cache_apply_device,
	 METH_VARARGS | METH_KEYWORDS,
	 "apply_device(batch, grads_ptr, lr, eps=0, optimizer=0, stream=None): GPU slots: "
	 "ember_gpu_scatter_apply_grouped of float32 (nlookups, arena dim) gradients at "
	 "grads_ptr (device memory) on the stream (or Ember's, waited for)."},
	{"device_memory", cache_device_memory, METH_O,
	 "device_memory(batch): GPU slots: a DeviceMemory over the arena (valid until the "
	 "batch's release; the cache refuses to close while one lives)."},
	{"gpu_info", cache_gpu_info, METH_NOARGS,
	 "GPU slots, after the first acquire: {backend, dim, state_floats, stride, nslots, "
	 "ptr} of the arena."},
	{"flush", cache_flush, METH_NOARGS, "Write every updated row back to the store."},
	{"read_rows", (PyCFunction)(void (*)(void))cache_read_rows, METH_VARARGS | METH_KEYWORDS,
	 "read_rows(table, ids, state=False) -> (float32 (n, dim), state (n, k) or None)."},
	{"write_rows", (PyCFunction)(void (*)(void))cache_write_rows,
	 METH_VARARGS | METH_KEYWORDS,
	 "write_rows(table, ids, rows float32 (n, dim), state=None)."},
	{"stats", cache_stats, METH_NOARGS, "The cache's counters (a dict)."},
	{"memory", cache_memory, METH_NOARGS,
	 "A zero-copy float32 (nslots, stride) View of the slots (after the first acquire)."},
	{"state_floats", cache_state_floats, METH_O, "Optimizer state floats per row of a table."},
	{"close", cache_close, METH_NOARGS,
	 "Flush and close. BusyError while views of the slots live or a call runs."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef cache_getset[] = {
	{"closed", cache_get_closed, NULL, "True once closed.", NULL},
	{"pushed", cache_get_pushed, NULL, "Batches pushed (the next batch's number).", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject cache_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ember._ember.Cache",
	.tp_basicsize = sizeof(cache_object),
	.tp_weaklistoffset = offsetof(cache_object, weakrefs),
	.tp_dealloc = cache_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Cache(db, tables, *, names=None, capacity=0, window=0, prefetch_batches=0, "
		  "prefetch_depth=0, init=0, init_scale=0.0, init_seed=0, slots=0, "
		  "gpu_backend=0, gpu_device=0): an ember_cache. "
		  "tables: [(rows, dim, storage, optimizer, init, init_scale, init_seed)].",
	.tp_methods = cache_methods,
	.tp_getset = cache_getset,
	.tp_init = cache_init,
	.tp_new = PyType_GenericNew,
};

/* ---- CacheBatch ---------------------------------------------------------------- */

static void batch_dealloc(PyObject *op)
{
	batch_object *b = (batch_object *)op;
	cache_object *c = b->owner;
	/* Dropped while acquired: hand it back, dirty (the rows may have been written). */
	if (b->held && c && c->cache && !c->training) {
		c->training = 1;
		(void)batch_release(c, b, 1, 0, NULL);
		c->training = 0;
	}
	if (c && c->held == op)
		c->held = NULL;
	Py_CLEAR(b->slots);
	Py_CLEAR(b->offsets);
	Py_CLEAR(b->tables);
	Py_CLEAR(b->owner);
	PyObject_Free(op);
}

static PyObject *batch_get(batch_object *b, PyObject *what)
{
	return Py_NewRef(what);
}

static PyObject *batch_get_batch(PyObject *op, void *c)
{
	return PyLong_FromUnsignedLongLong(((batch_object *)op)->view.batch);
}

static PyObject *batch_get_slots(PyObject *op, void *c)
{
	return batch_get((batch_object *)op, ((batch_object *)op)->slots);
}

static PyObject *batch_get_offsets(PyObject *op, void *c)
{
	return batch_get((batch_object *)op, ((batch_object *)op)->offsets);
}

static PyObject *batch_get_tables(PyObject *op, void *c)
{
	return batch_get((batch_object *)op, ((batch_object *)op)->tables);
}

static PyObject *batch_get_held(PyObject *op, void *c)
{
	return PyBool_FromLong(((batch_object *)op)->held);
}

static PyGetSetDef batch_getset[] = {
	{"batch", batch_get_batch, NULL, "The batch's number (0 for the first pushed).", NULL},
	{"slots", batch_get_slots, NULL, "int64 (nlookups,): every lookup's slot, part after "
					 "part.", NULL},
	{"offsets", batch_get_offsets, NULL, "int64 (nparts + 1,): part p's lookups are "
					     "slots[offsets[p]:offsets[p + 1]].", NULL},
	{"tables", batch_get_tables, NULL, "The table of each part.", NULL},
	{"held", batch_get_held, NULL, "True until released.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject batch_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ember._ember.CacheBatch",
	.tp_basicsize = sizeof(batch_object),
	.tp_dealloc = batch_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "An acquired batch of a Cache (release it with Cache.release).",
	.tp_getset = batch_getset,
};

/* ---- DeviceMemory --------------------------------------------------------------- */

/*
 * The arena of GPU slots as an array interface: __cuda_array_interface__ (v3) on
 * the CUDA backend, __array_interface__ on the host backend (whose "device"
 * memory is host memory), float32 (nslots, stride), data (arena base, writable),
 * stream None (the consumer orders itself with Cache.wait). The object holds its
 * batch (and so the cache) and counts itself in the cache's live views, so the
 * cache refuses to close while one exists; after the batch's release its
 * interfaces raise StateError (an array already made from it keeps the pointer:
 * using it then is the caller's error, as writing host slots after release is).
 */
typedef struct {
	PyObject_HEAD
	batch_object *batch; /* strong */
	Py_ssize_t *live;    /* the cache's counter */
	uintptr_t ptr;
	unsigned long long rows, cols;
	int cuda;
} devmem_object;

static PyTypeObject devmem_type;

static PyObject *devmem_new(cache_object *c, batch_object *b)
{
	devmem_object *d = PyObject_New(devmem_object, &devmem_type);
	if (!d)
		return NULL;
	d->batch = (batch_object *)Py_NewRef((PyObject *)b);
	d->live = &c->live;
	(*d->live)++; /* GIL held */
	d->ptr = (uintptr_t)c->ai.base;
	d->rows = (unsigned long long)c->ai.slots;
	d->cols = c->ai.stride;
	d->cuda = c->backend == EMBER_GPU_BACKEND_CUDA;
	return (PyObject *)d;
}

static void devmem_dealloc(PyObject *op)
{
	devmem_object *d = (devmem_object *)op;
	(*d->live)--;
	Py_CLEAR(d->batch);
	PyObject_Free(op);
}

static PyObject *devmem_interface(devmem_object *d, int cuda)
{
	if (d->cuda != cuda) {
		PyErr_SetString(PyExc_AttributeError, cuda ? "__cuda_array_interface__: the slots "
				"are host memory (host backend)" : "__array_interface__: the slots "
				"are device memory (CUDA backend)");
		return NULL;
	}
	if (!d->batch->held) {
		char buf[96];
		snprintf(buf, sizeof buf, "batch %llu was released: its device memory view "
			 "ended", (unsigned long long)d->batch->view.batch);
		return ember_py_raise_detail(EMBER_ESTATE, buf);
	}
	if (cuda)
		return Py_BuildValue("{s(KK)s(KO)sssOsOsi}", "shape", d->rows, d->cols, "data",
				     (unsigned long long)d->ptr, Py_False, "typestr", "<f4",
				     "strides", Py_None, "stream", Py_None, "version", 3);
	return Py_BuildValue("{s(KK)s(KO)sssOsi}", "shape", d->rows, d->cols, "data",
			     (unsigned long long)d->ptr, Py_False, "typestr", "<f4", "strides",
			     Py_None, "version", 3);
}

static PyObject *devmem_cai(PyObject *op, void *c)
{
	return devmem_interface((devmem_object *)op, 1);
}

static PyObject *devmem_ai(PyObject *op, void *c)
{
	return devmem_interface((devmem_object *)op, 0);
}

static PyObject *devmem_ptr(PyObject *op, void *c)
{
	return PyLong_FromUnsignedLongLong((unsigned long long)((devmem_object *)op)->ptr);
}

static PyObject *devmem_shape(PyObject *op, void *c)
{
	devmem_object *d = (devmem_object *)op;
	return Py_BuildValue("(KK)", d->rows, d->cols);
}

static PyObject *devmem_is_cuda(PyObject *op, void *c)
{
	return PyBool_FromLong(((devmem_object *)op)->cuda);
}

static PyGetSetDef devmem_getset[] = {
	{"__cuda_array_interface__", devmem_cai, NULL, "CUDA backend: the arena (v3).", NULL},
	{"__array_interface__", devmem_ai, NULL, "Host backend: the arena (v3).", NULL},
	{"ptr", devmem_ptr, NULL, "The arena's base address.", NULL},
	{"shape", devmem_shape, NULL, "(nslots, stride).", NULL},
	{"is_cuda", devmem_is_cuda, NULL, "True on the CUDA backend.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject devmem_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ember._ember.DeviceMemory",
	.tp_basicsize = sizeof(devmem_object),
	.tp_dealloc = devmem_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "The GPU slots' arena as __cuda_array_interface__ (CUDA) or "
		  "__array_interface__ (host backend), float32 (nslots, stride).",
	.tp_getset = devmem_getset,
};

int emb_cache_init(PyObject *module)
{
	import_array1(-1);
	if (PyType_Ready(&cache_type) < 0 || PyType_Ready(&batch_type) < 0 ||
	    PyType_Ready(&devmem_type) < 0)
		return -1;
	Py_INCREF(&cache_type);
	if (PyModule_AddObject(module, "Cache", (PyObject *)&cache_type) < 0) {
		Py_DECREF(&cache_type);
		return -1;
	}
	Py_INCREF(&batch_type);
	if (PyModule_AddObject(module, "CacheBatch", (PyObject *)&batch_type) < 0) {
		Py_DECREF(&batch_type);
		return -1;
	}
	return 0;
}
