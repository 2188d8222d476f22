/*
 * store.c - the store's types of ember._ember: Db (an open store), Session (one
 * thread's session on it) and Walk (ember_iterate on a thread of its own, handing
 * records over in chunks). ember.Store (store.py) is the Python face over them.
 *
 * Lifetimes: a Session and a Walk hold a reference to their Db, so a Db is
 * deallocated only after them; each closes itself when deallocated unclosed.
 * Db.active counts the calls in flight with the GIL released and the walks
 * running, changed only with the GIL held: Db.close raises ember.BusyError while it
 * is not 0, and Session.close likewise while its session is in a call, instead of
 * freeing what another thread is using.
 */
#include "ember_py.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- Db ------------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	ember_db *db;      /* NULL once closed */
	Py_ssize_t active; /* calls in flight and walks running (GIL held) */
	Py_ssize_t walks;  /* walks open: 0 or 1 (GIL held) */
	int readonly;
} db_object;

#define DB_OPEN(d)                                                                  \
	do {                                                                        \
		if (!(d)->db)                                                       \
			return ember_py_closed("the store");                        \
	} while (0)

/* ember_checkpoint, ember_compact, ember_checkpoint_list and ember_close wait for a
 * walk to end, and an open Walk's thread waits for its consumer: from the consumer's
 * thread that would never end. They raise BusyError while a walk is open instead. */
#define DB_NO_WALK(d)                                                               \
	do {                                                                        \
		if ((d)->walks > 0)                                                 \
			return ember_py_raise_detail(EMBER_EBUSY,                   \
				"an iteration of the store is open: finish or close it"); \
	} while (0)

static PyTypeObject db_type, session_type, walk_type;

/* One ember_options field that Db() takes as a keyword. */
static const struct opt_field {
	const char *name;
	size_t offset;
	char type; /* 'Q' uint64, 'I' uint32, 'd' double */
} opt_fields[] = {
#define F(n, t) {#n, offsetof(ember_options, n), t}
	F(log_memory, 'Q'),        F(mutable_fraction, 'd'), F(index_buckets, 'Q'),
	F(page_size, 'I'),         F(io_queue_depth, 'I'),   F(flags, 'I'),
	F(log_segment_bytes, 'Q'), F(memory_budget, 'Q'),    F(hot_disk_budget, 'Q'),
	F(cold_disk_budget, 'Q'),  F(cold_log_memory, 'Q'),  F(cold_index_chunks, 'Q'),
	F(cold_chunk_bytes, 'I'),  F(read_cache_memory, 'Q'), F(cold_cache_memory, 'Q'),
	F(checkpoint_interval_ms, 'I'), F(read_cache_admit, 'I'),
#undef F
};

static PyObject *opt_names(PyObject *cls, PyObject *unused)
{
	size_t n = sizeof opt_fields / sizeof opt_fields[0];
	PyObject *t = PyTuple_New((Py_ssize_t)n);
	for (size_t i = 0; t && i < n; i++) {
		PyObject *s = PyUnicode_FromString(opt_fields[i].name);
		if (!s) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
	}
	return t;
}

/* Set one option from a Python value: TypeError for a wrong type, InvalidArgument
 * for a value out of the field's range. */
static int opt_set(ember_options *o, const struct opt_field *f, PyObject *v)
{
	char *p = (char *)o + f->offset;
	char msg[160];
	if (f->type == 'd') {
		double d;
		if (PyBool_Check(v) || !PyNumber_Check(v) || PyComplex_Check(v)) {
			PyErr_Format(PyExc_TypeError, "option %s: expected a number, got %.80s",
				     f->name, Py_TYPE(v)->tp_name);
			return -1;
		}
		d = PyFloat_AsDouble(v);
		if (d == -1.0 && PyErr_Occurred())
			return -1;
		if (!(d >= 0.0 && d <= 1.0)) {
			snprintf(msg, sizeof msg, "option %s: %g is not in (0, 1]", f->name, d);
			ember_py_raise_detail(EMBER_EINVAL, msg);
			return -1;
		}
		memcpy(p, &d, sizeof d);
		return 0;
	}
	if (PyBool_Check(v) || !PyLong_Check(v)) {
		PyErr_Format(PyExc_TypeError, "option %s: expected an int, got %.80s", f->name,
			     Py_TYPE(v)->tp_name);
		return -1;
	}
	unsigned long long u = PyLong_AsUnsignedLongLong(v);
	if (u == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		snprintf(msg, sizeof msg, "option %s: must be an int in [0, 2^%d)", f->name,
			 f->type == 'I' ? 32 : 64);
		ember_py_raise_detail(EMBER_EINVAL, msg);
		return -1;
	}
	if (f->type == 'I') {
		uint32_t x = (uint32_t)u;
		if (u > UINT32_MAX) {
			snprintf(msg, sizeof msg, "option %s: %llu does not fit 32 bits", f->name, u);
			ember_py_raise_detail(EMBER_EINVAL, msg);
			return -1;
		}
		memcpy(p, &x, sizeof x);
	} else {
		uint64_t x = u;
		memcpy(p, &x, sizeof x);
	}
	return 0;
}

static int db_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
	db_object *d = (db_object *)self;
	PyObject *path_obj = NULL, *key, *value;
	ember_options o;
	ember_db *db = NULL;
	Py_ssize_t pos = 0;
	const char *path;
	int rc;

	if (d->db) {
		PyErr_SetString(PyExc_TypeError, "Db is already open");
		return -1;
	}
	if (!PyArg_ParseTuple(args, "O&:Db", PyUnicode_FSConverter, &path_obj))
		return -1;
	memset(&o, 0, sizeof o);
	o.struct_size = sizeof o; /* zero means the first release's struct (docs/abi.md) */
	while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
		const struct opt_field *f = NULL;
		for (size_t i = 0; i < sizeof opt_fields / sizeof opt_fields[0]; i++)
			if (PyUnicode_CompareWithASCIIString(key, opt_fields[i].name) == 0)
				f = &opt_fields[i];
		if (!f) {
			PyErr_Format(PyExc_TypeError, "Db() got an unexpected option %R", key);
			goto fail;
		}
		if (opt_set(&o, f, value) < 0)
			goto fail;
	}
	path = PyBytes_AS_STRING(path_obj);
	if (path[0] == '\0') {
		ember_py_raise_detail(EMBER_EINVAL, "path is empty");
		goto fail;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = ember_open(path, &o, &db);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		ember_py_raise(rc, NULL);
		goto fail;
	}
	Py_DECREF(path_obj);
	d->db = db;
	d->readonly = (o.flags & EMBER_OPEN_READONLY) != 0;
	return 0;
fail:
	Py_DECREF(path_obj);
	return -1;
}

/* ember_close with the GIL released; 0 or an Ember code. */
static int db_close_now(db_object *d)
{
	ember_db *db = d->db;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_close(db);
	Py_END_ALLOW_THREADS
	if (rc == 0)
		d->db = NULL;
	return rc;
}

static PyObject *db_close(PyObject *self, PyObject *unused)
{
	db_object *d = (db_object *)self;
	int rc;
	if (!d->db)
		Py_RETURN_NONE;
	DB_NO_WALK(d);
	if (d->active > 0) {
		char msg[128];
		snprintf(msg, sizeof msg, "the store has %zd calls or walks in progress", d->active);
		return ember_py_raise_detail(EMBER_EBUSY, msg);
	}
	rc = db_close_now(d);
	if (rc < 0)
		return ember_py_raise(rc, NULL);
	Py_RETURN_NONE;
}

static void db_dealloc(PyObject *self)
{
	db_object *d = (db_object *)self;
	/* sessions and walks hold references to the Db: none is left here */
	if (d->db && db_close_now(d) < 0)
		PyErr_WarnEx(PyExc_ResourceWarning, "ember: closing an unreferenced store failed", 1);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *db_checkpoint(PyObject *self, PyObject *unused)
{
	db_object *d = (db_object *)self;
	uint64_t id = 0;
	int rc;
	DB_OPEN(d);
	DB_NO_WALK(d);
	d->active++;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_checkpoint(d->db, &id);
	Py_END_ALLOW_THREADS
	d->active--;
	if (rc < 0)
		return ember_py_raise(rc, d->db);
	return PyLong_FromUnsignedLongLong(id);
}

static PyObject *db_compact(PyObject *self, PyObject *args)
{
	db_object *d = (db_object *)self;
	int force = 1, rc;
	if (!PyArg_ParseTuple(args, "|p:compact", &force))
		return NULL;
	DB_OPEN(d);
	DB_NO_WALK(d);
	d->active++;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_compact(d->db, force);
	Py_END_ALLOW_THREADS
	d->active--;
	if (rc < 0)
		return ember_py_raise(rc, d->db);
	Py_RETURN_NONE;
}

/* A list of (id, time_unix, hot_begin, hot_end, cold_begin, cold_end, index_entries). */
static PyObject *db_checkpoints(PyObject *self, PyObject *unused)
{
	db_object *d = (db_object *)self;
	ember_checkpoint_info *info = NULL;
	size_t cap = 16, n = 0;
	PyObject *list;
	int rc;
	DB_OPEN(d);
	DB_NO_WALK(d);
	for (;;) {
		ember_checkpoint_info *grown = PyMem_Realloc(info, cap * sizeof *info);
		if (!grown) {
			PyMem_Free(info);
			return PyErr_NoMemory();
		}
		info = grown;
		d->active++;
		Py_BEGIN_ALLOW_THREADS
		rc = ember_checkpoint_list(d->db, info, cap, &n);
		Py_END_ALLOW_THREADS
		d->active--;
		if (rc != EMBER_ERANGE)
			break;
		cap = n + 16;
	}
	if (rc < 0) {
		PyMem_Free(info);
		return ember_py_raise(rc, d->db);
	}
	list = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; list && i < n; i++) {
		PyObject *t = Py_BuildValue("(KKKKKKK)", info[i].id, info[i].time_unix,
					    info[i].hot_begin, info[i].hot_end, info[i].cold_begin,
					    info[i].cold_end, info[i].index_entries);
		if (!t) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, t);
	}
	PyMem_Free(info);
	return list;
}

/* (records, bytes, chunks, errors, first_error); EMBER_ECORRUPT is a report with
 * errors > 0, not an exception. */
static PyObject *db_verify(PyObject *self, PyObject *unused)
{
	db_object *d = (db_object *)self;
	ember_verify_report r;
	int rc;
	DB_OPEN(d);
	memset(&r, 0, sizeof r);
	d->active++;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_verify(d->db, &r);
	Py_END_ALLOW_THREADS
	d->active--;
	if (rc < 0 && rc != EMBER_ECORRUPT)
		return ember_py_raise(rc, d->db);
	r.first_error[sizeof r.first_error - 1] = '\0';
	return Py_BuildValue("(KKKKs)", r.records, r.bytes, r.chunks, r.errors, r.first_error);
}

static int dict_put_u64(PyObject *dict, const char *name, uint64_t v)
{
	PyObject *o = PyLong_FromUnsignedLongLong(v);
	int rc = o ? PyDict_SetItemString(dict, name, o) : -1;
	Py_XDECREF(o);
	return rc;
}

static PyObject *tier_dict(const ember_tier_stats *t)
{
	PyObject *d = PyDict_New();
	if (!d || dict_put_u64(d, "records", t->records) < 0 ||
	    dict_put_u64(d, "bytes_memory", t->bytes_memory) < 0 ||
	    dict_put_u64(d, "bytes_disk", t->bytes_disk) < 0 ||
	    dict_put_u64(d, "reads_memory", t->reads_memory) < 0 ||
	    dict_put_u64(d, "reads_disk", t->reads_disk) < 0 ||
	    dict_put_u64(d, "compactions", t->compactions) < 0 ||
	    dict_put_u64(d, "compaction_bytes_written", t->compaction_bytes_written) < 0)
		Py_CLEAR(d);
	return d;
}

/* A dict of ember_stats' fields (hot and cold: dicts of ember_tier_stats). */
static PyObject *db_stats(PyObject *self, PyObject *unused)
{
	db_object *d = (db_object *)self;
	ember_stats s;
	PyObject *out, *hot = NULL, *cold = NULL;
	int rc;
	DB_OPEN(d);
	rc = ember_stats_get(d->db, &s); /* memory only: no wait */
	if (rc < 0)
		return ember_py_raise(rc, d->db);
	hot = tier_dict(&s.hot);
	cold = tier_dict(&s.cold);
	out = Py_BuildValue(
		"{sNsNsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsdsdsdsKsKsKsd}", "hot", hot, "cold", cold,
		"read_cache_hits", s.read_cache_hits, "read_cache_bytes", s.read_cache_bytes,
		"cold_cache_hits", s.cold_cache_hits, "cold_cache_bytes", s.cold_cache_bytes,
		"index_bytes", s.index_bytes, "cold_index_bytes", s.cold_index_bytes,
		"chunk_log_bytes_disk", s.chunk_log_bytes_disk, "user_reads", s.user_reads,
		"user_writes", s.user_writes, "user_bytes_written", s.user_bytes_written,
		"disk_reads", s.disk_reads, "disk_bytes_read", s.disk_bytes_read,
		"compaction_disk_reads", s.compaction_disk_reads, "compaction_bytes_read",
		s.compaction_bytes_read, "compaction_bytes_written", s.compaction_bytes_written,
		"tombstones_dropped", s.tombstones_dropped, "compaction_assists",
		s.compaction_assists, "write_amplification", s.write_amplification,
		"read_amplification", s.read_amplification, "cold_index_bytes_per_key",
		s.cold_index_bytes_per_key, "cold_lookups", s.cold_lookups, "cold_chunk_reads",
		s.cold_chunk_reads, "cold_record_reads", s.cold_record_reads,
		"disk_reads_per_cold_lookup", s.disk_reads_per_cold_lookup);
	return out;
}

/* (checkpoint_id, records_replayed, checkpoints_skipped, detail) */
static PyObject *db_recovery(PyObject *self, PyObject *unused)
{
	db_object *d = (db_object *)self;
	ember_recovery_info r;
	int rc;
	DB_OPEN(d);
	rc = ember_recovery_info_get(d->db, &r);
	if (rc < 0)
		return ember_py_raise(rc, d->db);
	r.detail[sizeof r.detail - 1] = '\0';
	return Py_BuildValue("(KKIs)", r.checkpoint_id, r.records_replayed,
			     r.checkpoints_skipped, r.detail);
}

static PyObject *db_closed(PyObject *self, void *closure)
{
	return PyBool_FromLong(((db_object *)self)->db == NULL);
}

static PyObject *db_get_readonly(PyObject *self, void *closure)
{
	return PyBool_FromLong(((db_object *)self)->readonly);
}

static PyMethodDef db_methods[] = {
	{"close", db_close, METH_NOARGS, "Close the store (BusyError while calls run)."},
	{"checkpoint", db_checkpoint, METH_NOARGS, "Take a checkpoint; returns its id."},
	{"compact", db_compact, METH_VARARGS, "compact(force=True)"},
	{"checkpoints", db_checkpoints, METH_NOARGS, "The complete checkpoints, newest first."},
	{"verify", db_verify, METH_NOARGS, "(records, bytes, chunks, errors, first_error)"},
	{"stats", db_stats, METH_NOARGS, "ember_stats as a dict."},
	{"recovery", db_recovery, METH_NOARGS, "What the open recovered."},
	{"option_names", opt_names, METH_NOARGS | METH_CLASS, "The keyword options."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef db_getset[] = {
	{"closed", db_closed, NULL, "True once closed.", NULL},
	{"readonly", db_get_readonly, NULL, "Opened with OPEN_READONLY.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject db_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ember._ember.Db",
	.tp_basicsize = sizeof(db_object),
	.tp_dealloc = db_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Db(path, **options): an open Ember store (ember_open).",
	.tp_methods = db_methods,
	.tp_getset = db_getset,
	.tp_init = db_init,
	.tp_new = PyType_GenericNew,
};

ember_db *emb_store_db(PyObject *obj)
{
	ember_db *db = NULL;
	return ember_py_db_get(obj, &db) < 0 ? NULL : db;
}

/* ---- Session ------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	db_object *db;    /* strong reference: the store outlives its sessions */
	ember_session *s; /* NULL once closed */
	int busy;         /* a call is in flight on it (GIL held) */
	PyObject *weakrefs;
} session_object;

static int session_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
	session_object *so = (session_object *)self;
	PyObject *dbo;
	ember_session *s = NULL;
	ember_db *db;
	int rc;
	static char *kw[] = {"db", NULL};
	if (so->db) {
		PyErr_SetString(PyExc_TypeError, "Session is already open");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:Session", kw, &db_type, &dbo))
		return -1;
	db = ((db_object *)dbo)->db;
	if (!db) {
		ember_py_closed("the store");
		return -1;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = ember_session_open(db, &s);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		ember_py_raise(rc, db);
		return -1;
	}
	so->db = (db_object *)Py_NewRef(dbo);
	so->s = s;
	return 0;
}

static void session_close_now(session_object *so)
{
	ember_session *s = so->s;
	so->s = NULL;
	Py_BEGIN_ALLOW_THREADS
	(void)ember_session_close(s); /* 0, or EMBER_ESTATE for a closed one */
	Py_END_ALLOW_THREADS
}

static PyObject *session_close(PyObject *self, PyObject *unused)
{
	session_object *so = (session_object *)self;
	if (so->busy)
		return ember_py_raise_detail(EMBER_EBUSY, "the session is in a call on another thread");
	if (so->s)
		session_close_now(so);
	Py_RETURN_NONE;
}

static void session_dealloc(PyObject *self)
{
	session_object *so = (session_object *)self;
	if (so->weakrefs)
		PyObject_ClearWeakRefs(self);
	if (so->s)
		session_close_now(so);
	Py_CLEAR(so->db);
	Py_TYPE(self)->tp_free(self);
}

/* Start a call on the session: checks it and its store are open and it is not in a
 * call already; counts the call in the store's active. -1 with an exception. */
static int session_enter(session_object *so)
{
	if (!so->s || !so->db || !so->db->db) {
		ember_py_closed(so->s ? "the store" : "the session");
		return -1;
	}
	if (so->busy) {
		ember_py_raise_detail(EMBER_EBUSY, "the session is in a call on another thread");
		return -1;
	}
	so->busy = 1;
	so->db->active++;
	return 0;
}

static void session_leave(session_object *so)
{
	so->busy = 0;
	so->db->active--;
}

/* A bytes-like argument: bytes, bytearray, memoryview, a contiguous array. */
static int bytes_arg(PyObject *obj, const char *argname, Py_buffer *view)
{
	if (PyUnicode_Check(obj) || !PyObject_CheckBuffer(obj)) {
		PyErr_Format(PyExc_TypeError, "%s: expected a bytes-like object, got %.80s",
			     argname, Py_TYPE(obj)->tp_name);
		return -1;
	}
	if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s: must be C-contiguous", argname);
		return -1;
	}
	return 0;
}

static PyObject *session_put(PyObject *self, PyObject *args)
{
	session_object *so = (session_object *)self;
	PyObject *ko, *vo;
	Py_buffer k, v;
	int rc;
	if (!PyArg_ParseTuple(args, "OO:put", &ko, &vo))
		return NULL;
	if (bytes_arg(ko, "key", &k) < 0)
		return NULL;
	if (bytes_arg(vo, "value", &v) < 0) {
		PyBuffer_Release(&k);
		return NULL;
	}
	if (session_enter(so) < 0) {
		PyBuffer_Release(&k);
		PyBuffer_Release(&v);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = ember_put(so->s, k.buf, (size_t)k.len, v.buf, (size_t)v.len);
	Py_END_ALLOW_THREADS
	session_leave(so);
	PyBuffer_Release(&k);
	PyBuffer_Release(&v);
	if (rc < 0)
		return ember_py_raise(rc, so->db->db);
	Py_RETURN_NONE;
}

static PyObject *session_delete(PyObject *self, PyObject *arg)
{
	session_object *so = (session_object *)self;
	Py_buffer k;
	int rc;
	if (bytes_arg(arg, "key", &k) < 0)
		return NULL;
	if (session_enter(so) < 0) {
		PyBuffer_Release(&k);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = ember_delete(so->s, k.buf, (size_t)k.len);
	Py_END_ALLOW_THREADS
	session_leave(so);
	PyBuffer_Release(&k);
	if (rc < 0)
		return ember_py_raise(rc, so->db->db);
	Py_RETURN_NONE;
}

/* get(key) -> bytes; NotFound (a KeyError) when absent. The value is read into a
 * small buffer first, then, when it is larger, into a bytes object of its size. */
static PyObject *session_get(PyObject *self, PyObject *arg)
{
	session_object *so = (session_object *)self;
	char small[512];
	PyObject *out = NULL;
	Py_buffer k;
	size_t len = 0, cap = sizeof small;
	char *buf = small;
	int rc;
	if (bytes_arg(arg, "key", &k) < 0)
		return NULL;
	if (session_enter(so) < 0) {
		PyBuffer_Release(&k);
		return NULL;
	}
	for (;;) {
		Py_BEGIN_ALLOW_THREADS
		rc = ember_get(so->s, k.buf, (size_t)k.len, buf, cap, &len);
		Py_END_ALLOW_THREADS
		if (rc != EMBER_ERANGE)
			break;
		/* larger than buf: read into a bytes object of the size asked (the value
		 * may change meanwhile: then again) */
		Py_CLEAR(out);
		out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
		if (!out)
			break;
		buf = PyBytes_AS_STRING(out);
		cap = len;
	}
	session_leave(so);
	PyBuffer_Release(&k);
	if (rc < 0 || (!out && PyErr_Occurred())) {
		Py_XDECREF(out);
		return rc < 0 ? ember_py_raise(rc, so->db->db) : NULL;
	}
	if (!out)
		return PyBytes_FromStringAndSize(small, (Py_ssize_t)len);
	if ((size_t)PyBytes_GET_SIZE(out) != len)
		_PyBytes_Resize(&out, (Py_ssize_t)len);
	return out;
}

/* ---- batches ---- */

/* n byte strings from a Python argument: a 2-D (n, k) array or any C-contiguous
 * buffer with a first dimension n (k bytes per element: a uint8 (n, k) array, an
 * int64 (n,) array of 8-byte keys, an 'S16' array), or a sequence of bytes-likes. */
struct byteset {
	Py_ssize_t n;
	const void **ptrs;
	size_t *lens;
	Py_buffer whole;  /* the array, when one (whole.obj != NULL) */
	Py_buffer *views; /* one per element of a sequence */
	Py_ssize_t nviews;
};

static void byteset_release(struct byteset *b)
{
	if (b->whole.obj)
		PyBuffer_Release(&b->whole);
	for (Py_ssize_t i = 0; i < b->nviews; i++)
		PyBuffer_Release(&b->views[i]);
	PyMem_Free(b->views);
	PyMem_Free(b->ptrs);
	PyMem_Free(b->lens);
	memset(b, 0, sizeof *b);
}

static int byteset_alloc(struct byteset *b, Py_ssize_t n)
{
	b->n = n;
	b->ptrs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *b->ptrs);
	b->lens = PyMem_Calloc((size_t)(n ? n : 1), sizeof *b->lens);
	if (!b->ptrs || !b->lens) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

static int byteset_get(PyObject *obj, const char *argname, struct byteset *b)
{
	memset(b, 0, sizeof *b);
	if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) && !PyByteArray_Check(obj)) {
		Py_ssize_t each;
		if (PyObject_GetBuffer(obj, &b->whole, PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "%s: an array must be C-contiguous", argname);
			return -1;
		}
		if (b->whole.ndim < 1 || b->whole.ndim > 2) {
			PyErr_Format(PyExc_ValueError,
				     "%s: an array must be 1-D (one fixed-size key per element) "
				     "or 2-D uint8 (n, k), got %d dimensions",
				     argname, b->whole.ndim);
			goto fail;
		}
		if (byteset_alloc(b, b->whole.shape[0]) < 0)
			goto fail;
		each = b->n ? b->whole.len / b->n : 0;
		for (Py_ssize_t i = 0; i < b->n; i++) {
			b->ptrs[i] = (const char *)b->whole.buf + i * each;
			b->lens[i] = (size_t)each;
		}
		return 0;
	}
	if (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyByteArray_Check(obj) ||
	    !PySequence_Check(obj)) {
		PyErr_Format(PyExc_TypeError,
			     "%s: expected a sequence of bytes-like objects or an array, got %.80s",
			     argname, Py_TYPE(obj)->tp_name);
		return -1;
	}
	PyObject *seq = PySequence_Fast(obj, "");
	if (!seq)
		return -1;
	if (byteset_alloc(b, PySequence_Fast_GET_SIZE(seq)) < 0)
		goto fail_seq;
	b->views = PyMem_Calloc((size_t)(b->n ? b->n : 1), sizeof *b->views);
	if (!b->views) {
		PyErr_NoMemory();
		goto fail_seq;
	}
	for (Py_ssize_t i = 0; i < b->n; i++) {
		PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
		char name[64];
		snprintf(name, sizeof name, "%s[%zd]", argname, i);
		if (bytes_arg(item, name, &b->views[i]) < 0)
			goto fail_seq;
		b->nviews = i + 1;
		b->ptrs[i] = b->views[i].buf;
		b->lens[i] = (size_t)b->views[i].len;
	}
	Py_DECREF(seq);
	return 0;
fail_seq:
	Py_DECREF(seq);
fail:
	byteset_release(b);
	return -1;
}

/* The first failed status as an exception; 0 when all are 0. */
static int raise_first_status(const int *status, Py_ssize_t n, ember_db *db)
{
	for (Py_ssize_t i = 0; i < n; i++) {
		if (status[i] < 0) {
			ember_py_raise(status[i], db);
			return -1;
		}
	}
	return 0;
}

static PyObject *session_put_batch(PyObject *self, PyObject *args)
{
	session_object *so = (session_object *)self;
	PyObject *ko, *vo;
	struct byteset k, v;
	int *status = NULL, rc;
	if (!PyArg_ParseTuple(args, "OO:put_batch", &ko, &vo))
		return NULL;
	if (byteset_get(ko, "keys", &k) < 0)
		return NULL;
	if (byteset_get(vo, "values", &v) < 0)
		goto out_k;
	if (k.n != v.n) {
		PyErr_Format(PyExc_ValueError, "put_batch: %zd keys but %zd values", k.n, v.n);
		goto out_v;
	}
	status = PyMem_Calloc((size_t)(k.n ? k.n : 1), sizeof *status);
	if (!status) {
		PyErr_NoMemory();
		goto out_v;
	}
	if (session_enter(so) < 0)
		goto out_v;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_put_batch(so->s, (size_t)k.n, k.ptrs, k.lens, v.ptrs, v.lens, status);
	Py_END_ALLOW_THREADS
	session_leave(so);
	if (rc < 0)
		ember_py_raise(rc, so->db->db);
	else
		(void)raise_first_status(status, k.n, so->db->db);
out_v:
	PyMem_Free(status);
	byteset_release(&v);
out_k:
	byteset_release(&k);
	if (PyErr_Occurred())
		return NULL;
	Py_RETURN_NONE;
}

/* ember_get_batch over the keys idx[0..m) of k with the GIL released. */
static int run_get_batch(session_object *so, const struct byteset *k, size_t m,
			 const Py_ssize_t *idx, const void **kp, size_t *kl, void **bufs,
			 size_t *caps, size_t *vlens, int *status)
{
	int rc;
	for (size_t j = 0; j < m; j++) {
		kp[j] = k->ptrs[idx[j]];
		kl[j] = k->lens[idx[j]];
	}
	Py_BEGIN_ALLOW_THREADS
	rc = ember_get_batch(so->s, m, kp, kl, (void *const *)bufs, caps, vlens, status);
	Py_END_ALLOW_THREADS
	return rc;
}

#define GET_BATCH_GUESS 256 /* bytes per value of the first pass */

/* get_batch(keys) -> list of bytes (None where absent). One batch reads every value
 * up to GET_BATCH_GUESS bytes; larger ones are read again, in one batch, into bytes
 * objects of their size. */
static PyObject *session_get_batch(PyObject *self, PyObject *arg)
{
	session_object *so = (session_object *)self;
	struct byteset k;
	PyObject *list = NULL;
	char *arena = NULL;
	void *block = NULL;
	Py_ssize_t n, *idx;
	size_t m, *kl, *caps, *vlens;
	const void **kp;
	void **bufs;
	int *status, rc = 0;

	if (byteset_get(arg, "keys", &k) < 0)
		return NULL;
	n = k.n;
	block = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_ssize_t) + 4 * sizeof(size_t) +
						  2 * sizeof(void *) + sizeof(int));
	arena = PyMem_Malloc((size_t)(n ? n : 1) * GET_BATCH_GUESS);
	list = PyList_New(n);
	if (!block || !arena || !list) {
		if (!PyErr_Occurred())
			PyErr_NoMemory();
		goto fail;
	}
	idx = block;
	kl = (size_t *)(idx + n);
	caps = kl + n;
	vlens = caps + n;
	kp = (const void **)(vlens + n);
	bufs = (void **)(kp + n);
	status = (int *)(bufs + n);
	for (Py_ssize_t i = 0; i < n; i++) {
		idx[i] = i;
		bufs[i] = arena + (size_t)i * GET_BATCH_GUESS;
		caps[i] = GET_BATCH_GUESS;
		Py_INCREF(Py_None);
		PyList_SET_ITEM(list, i, Py_None);
	}
	if (session_enter(so) < 0)
		goto fail;
	m = (size_t)n;
	rc = run_get_batch(so, &k, m, idx, kp, kl, bufs, caps, vlens, status);
	while (rc == 0 && m > 0) {
		size_t again = 0;
		for (size_t j = 0; j < m && rc == 0; j++) {
			Py_ssize_t i = idx[j];
			PyObject *v = NULL;
			if (status[j] == EMBER_ENOTFOUND)
				continue;
			if (status[j] < 0 && status[j] != EMBER_ERANGE) {
				rc = status[j];
				break;
			}
			if (status[j] == EMBER_ERANGE) {
				/* into a bytes object of the size asked, in the next pass */
				v = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)vlens[j]);
				if (!v) {
					rc = EMBER_ENOMEM;
					break;
				}
				PyList_SetItem(list, i, v);
				idx[again] = i;
				bufs[again] = PyBytes_AS_STRING(v);
				caps[again] = vlens[j];
				again++;
				continue;
			}
			if (PyBytes_Check(PyList_GET_ITEM(list, i))) { /* read into its own */
				v = PyList_GET_ITEM(list, i);
				if ((size_t)PyBytes_GET_SIZE(v) != vlens[j]) {
					Py_INCREF(v);
					if (_PyBytes_Resize(&v, (Py_ssize_t)vlens[j]) < 0) {
						rc = EMBER_ENOMEM;
						break;
					}
					PyList_SetItem(list, i, v);
				}
				continue;
			}
			v = PyBytes_FromStringAndSize(bufs[j], (Py_ssize_t)vlens[j]);
			if (!v) {
				rc = EMBER_ENOMEM;
				break;
			}
			PyList_SetItem(list, i, v);
		}
		m = again;
		if (rc == 0 && m > 0)
			rc = run_get_batch(so, &k, m, idx, kp, kl, bufs, caps, vlens, status);
	}
	session_leave(so);
	if (rc < 0) {
		if (!PyErr_Occurred())
			ember_py_raise(rc, so->db->db);
		goto fail;
	}
	PyMem_Free(arena);
	PyMem_Free(block);
	byteset_release(&k);
	return list;
fail:
	Py_XDECREF(list);
	PyMem_Free(arena);
	PyMem_Free(block);
	byteset_release(&k);
	return NULL;
}

static PyObject *session_closed(PyObject *self, void *closure)
{
	session_object *so = (session_object *)self;
	return PyBool_FromLong(!so->s || !so->db || !so->db->db);
}

static PyMethodDef session_methods[] = {
	{"close", session_close, METH_NOARGS, "Close the session; twice is fine."},
	{"get", session_get, METH_O, "get(key) -> bytes; NotFound when absent."},
	{"put", session_put, METH_VARARGS, "put(key, value)"},
	{"delete", session_delete, METH_O, "delete(key); absent keys are fine."},
	{"get_batch", session_get_batch, METH_O, "get_batch(keys) -> [bytes or None]"},
	{"put_batch", session_put_batch, METH_VARARGS, "put_batch(keys, values)"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef session_getset[] = {
	{"closed", session_closed, NULL, "True once it or its store is closed.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject session_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ember._ember.Session",
	.tp_basicsize = sizeof(session_object),
	.tp_weaklistoffset = offsetof(session_object, weakrefs),
	.tp_dealloc = session_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Session(db): one thread's session on a Db (ember_session_open).",
	.tp_methods = session_methods,
	.tp_getset = session_getset,
	.tp_init = session_init,
	.tp_new = PyType_GenericNew,
};

/* ---- Walk ---------------------------------------------------------------------- */

/*
 * ember_iterate runs on a thread of the Walk's own and hands records to the Python
 * thread in chunks: the walk thread fills `fill`; when it is full it waits until
 * `ready` is empty, moves it there and goes on with a fresh chunk; next_chunk()
 * waits (GIL released) for `ready`, takes it and turns it into bytes. A closed or
 * deallocated Walk sets `stop`, which ends the walk at its next record, and joins
 * the thread. mu guards ready, done, rc and stop.
 */
#define WALK_CHUNK_RECORDS 1024
#define WALK_CHUNK_BYTES (1u << 20)

struct walk_chunk {
	char *data; /* records: u32 klen, u32 vlen, key, value */
	size_t used, cap, count;
};

typedef struct {
	PyObject_HEAD
	db_object *db;
	pthread_t thread;
	int running; /* thread started and not joined */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct walk_chunk *fill, *ready;
	int done, stop, rc;
	int busy; /* next_chunk in progress (GIL held) */
	int closed; /* closed before its end: next_chunk raises StateError */
	PyObject *weakrefs;
} walk_object;

static void chunk_free(struct walk_chunk *c)
{
	if (c) {
		free(c->data);
		free(c);
	}
}

/* Hand `fill` over (waiting for `ready` to empty); 1 when stopped. */
static int walk_hand_over(walk_object *w, int last, int rc)
{
	int stop;
	pthread_mutex_lock(&w->mu);
	while (w->ready && !w->stop)
		pthread_cond_wait(&w->cv, &w->mu);
	stop = w->stop;
	if (!stop && w->fill && w->fill->count > 0) {
		w->ready = w->fill;
		w->fill = NULL;
	}
	if (last) {
		w->done = 1;
		w->rc = rc;
	}
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	return stop;
}

static int walk_record(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	walk_object *w = arg;
	struct walk_chunk *c = w->fill;
	size_t need = 8 + klen + vlen;
	if (!c) {
		c = w->fill = calloc(1, sizeof *c);
		if (!c)
			return EMBER_ENOMEM;
	}
	if (c->used + need > c->cap) {
		size_t cap = c->cap ? c->cap : 64 * 1024;
		while (cap < c->used + need)
			cap *= 2;
		char *grown = realloc(c->data, cap);
		if (!grown)
			return EMBER_ENOMEM;
		c->data = grown;
		c->cap = cap;
	}
	uint32_t kl = (uint32_t)klen, vl = (uint32_t)vlen;
	memcpy(c->data + c->used, &kl, 4);
	memcpy(c->data + c->used + 4, &vl, 4);
	memcpy(c->data + c->used + 8, key, klen);
	if (vlen)
		memcpy(c->data + c->used + 8 + klen, val, vlen);
	c->used += need;
	c->count++;
	if (c->count >= WALK_CHUNK_RECORDS || c->used >= WALK_CHUNK_BYTES)
		return walk_hand_over(w, 0, 0) ? 1 : 0; /* 1: stopped, ends the walk */
	return 0;
}

static void *walk_main(void *arg)
{
	walk_object *w = arg;
	int rc = ember_iterate(w->db->db, walk_record, w);
	walk_hand_over(w, 1, rc == 1 ? 0 : rc); /* 1: walk_record saw stop */
	return NULL;
}

static int walk_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
	walk_object *w = (walk_object *)self;
	PyObject *dbo;
	db_object *d;
	static char *kw[] = {"db", NULL};
	if (w->db) {
		PyErr_SetString(PyExc_TypeError, "Walk is already started");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:Walk", kw, &db_type, &dbo))
		return -1;
	d = (db_object *)dbo;
	if (!d->db) {
		ember_py_closed("the store");
		return -1;
	}
	if (d->walks > 0) {
		ember_py_raise_detail(EMBER_EBUSY, "another iteration of the store is open");
		return -1;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->db = (db_object *)Py_NewRef(dbo);
	if (pthread_create(&w->thread, NULL, walk_main, w) != 0) {
		Py_CLEAR(w->db);
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		PyErr_SetString(PyExc_RuntimeError, "cannot start the walk's thread");
		return -1;
	}
	w->running = 1;
	d->walks++;
	d->active++;
	return 0;
}

static void walk_close_now(walk_object *w)
{
	if (!w->running)
		return;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	Py_END_ALLOW_THREADS
	w->running = 0;
	chunk_free(w->fill);
	chunk_free(w->ready);
	w->fill = w->ready = NULL;
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	w->db->walks--;
	w->db->active--;
}

static PyObject *walk_close(PyObject *self, PyObject *unused)
{
	walk_object *w = (walk_object *)self;
	if (w->busy)
		return ember_py_raise_detail(EMBER_EBUSY, "the walk is in a call on another thread");
	if (w->running)
		w->closed = 1;
	walk_close_now(w);
	Py_RETURN_NONE;
}

static void walk_dealloc(PyObject *self)
{
	walk_object *w = (walk_object *)self;
	if (w->weakrefs)
		PyObject_ClearWeakRefs(self);
	walk_close_now(w);
	Py_CLEAR(w->db);
	Py_TYPE(self)->tp_free(self);
}

/* The next chunk of (key, value) bytes pairs; [] at the end (then the walk is
 * closed); the walk's error as an exception. */
static PyObject *walk_next_chunk(PyObject *self, PyObject *unused)
{
	walk_object *w = (walk_object *)self;
	struct walk_chunk *c = NULL;
	PyObject *list;
	int done = 0, rc = 0;
	if (w->closed)
		return ember_py_closed("the iteration");
	if (!w->running)
		return PyList_New(0);
	if (w->busy)
		return ember_py_raise_detail(EMBER_EBUSY, "the walk is in a call on another thread");
	w->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&w->mu);
	while (!w->ready && !w->done)
		pthread_cond_wait(&w->cv, &w->mu);
	c = w->ready;
	w->ready = NULL;
	done = w->done;
	rc = w->rc;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	Py_END_ALLOW_THREADS
	w->busy = 0;
	if (!c) { /* done, and nothing left */
		ember_db *db = w->db->db;
		walk_close_now(w);
		if (done && rc < 0)
			return ember_py_raise(rc, db);
		return PyList_New(0);
	}
	list = PyList_New((Py_ssize_t)c->count);
	for (size_t i = 0, off = 0; list && i < c->count; i++) {
		uint32_t kl, vl;
		memcpy(&kl, c->data + off, 4);
		memcpy(&vl, c->data + off + 4, 4);
		PyObject *t = Py_BuildValue("(y#y#)", c->data + off + 8, (Py_ssize_t)kl,
					    c->data + off + 8 + kl, (Py_ssize_t)vl);
		if (!t)
			Py_CLEAR(list);
		else
			PyList_SET_ITEM(list, (Py_ssize_t)i, t);
		off += 8 + (size_t)kl + vl;
	}
	chunk_free(c);
	return list;
}

static PyObject *walk_closed(PyObject *self, void *closure)
{
	return PyBool_FromLong(((walk_object *)self)->closed);
}

static PyGetSetDef walk_getset[] = {
	{"closed", walk_closed, NULL, "True once closed before its end.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef walk_methods[] = {
	{"next_chunk", walk_next_chunk, METH_NOARGS,
	 "The next records as [(key, value)]; [] at the end."},
	{"close", walk_close, METH_NOARGS, "Stop the walk; twice is fine."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject walk_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ember._ember.Walk",
	.tp_basicsize = sizeof(walk_object),
	.tp_weaklistoffset = offsetof(walk_object, weakrefs),
	.tp_dealloc = walk_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Walk(db): ember_iterate on a thread of its own, read in chunks.",
	.tp_methods = walk_methods,
	.tp_getset = walk_getset,
	.tp_init = walk_init,
	.tp_new = PyType_GenericNew,
};

/* ---- for the layers above the store ------------------------------------------- */

int ember_py_db_get(PyObject *obj, ember_db **db)
{
	if (!PyObject_TypeCheck(obj, &db_type)) {
		PyErr_Format(PyExc_TypeError, "expected an ember store, got %.80s",
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	if (!((db_object *)obj)->db) {
		ember_py_closed("the store");
		return -1;
	}
	*db = ((db_object *)obj)->db;
	return 0;
}

void ember_py_db_hold(PyObject *obj, int delta)
{
	((db_object *)obj)->active += delta;
}

int emb_store_init(PyObject *module)
{
	static PyTypeObject *types[] = {&db_type, &session_type, &walk_type};
	static const char *names[] = {"Db", "Session", "Walk"};
	for (int i = 0; i < 3; i++) {
		if (PyType_Ready(types[i]) < 0)
			return -1;
		Py_INCREF(types[i]);
		if (PyModule_AddObject(module, names[i], (PyObject *)types[i]) < 0) {
			Py_DECREF(types[i]);
			return -1;
		}
	}
	return 0;
}
