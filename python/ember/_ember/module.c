/*
 * module.c - the extension module ember._ember: its init, the error bridge to
 * ember.errors, the array readers and the View type that ember_py.h declares.
 */
#include "ember_py.h"

#include <ember_gpu.h>

#include <stdio.h>
#include <string.h>

/* ---- errors -------------------------------------------------------------------- */

PyObject *ember_py_raise_detail(int rc, const char *detail)
{
	PyObject *errors = NULL, *exc = NULL;
	if (!detail)
		detail = ember_strerror(rc);
	errors = PyImport_ImportModule("ember.errors");
	if (!errors)
		return NULL;
	exc = PyObject_CallMethod(errors, "from_code", "is", rc, detail);
	Py_DECREF(errors);
	if (!exc)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

PyObject *ember_py_raise(int rc, ember_db *db)
{
	char buf[512];
	if (db && (rc == EMBER_ECORRUPT || rc == EMBER_EIO) &&
	    ember_error_detail(db, buf, sizeof buf) == 0)
		return ember_py_raise_detail(rc, buf);
	return ember_py_raise_detail(rc, NULL);
}

PyObject *ember_py_closed(const char *what)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%s is closed", what);
	return ember_py_raise_detail(EMBER_ESTATE, buf);
}

/* ---- arrays in ----------------------------------------------------------------- */

/* The element type of a struct-module format: kind 'i', 'u', 'f' (or 0 when not a
 * plain number) and size. Native ('@', '=') and little-endian ('<') only. */
static char format_kind(const char *fmt, Py_ssize_t *size)
{
	if (!fmt)
		fmt = "B";
	if (*fmt == '@' || *fmt == '=' || *fmt == '<')
		fmt++;
	if (fmt[0] == '\0' || fmt[1] != '\0')
		return 0;
	switch (fmt[0]) {
	case 'b': *size = 1; return 'i';
	case 'B': *size = 1; return 'u';
	case 'h': *size = 2; return 'i';
	case 'H': *size = 2; return 'u';
	case 'i': *size = sizeof(int); return 'i';
	case 'I': *size = sizeof(int); return 'u';
	case 'l': *size = sizeof(long); return 'i';
	case 'L': *size = sizeof(long); return 'u';
	case 'q': *size = 8; return 'i';
	case 'Q': *size = 8; return 'u';
	case 'n': *size = sizeof(Py_ssize_t); return 'i';
	case 'N': *size = sizeof(size_t); return 'u';
	case 'e': *size = 2; return 'f';
	case 'f': *size = 4; return 'f';
	case 'd': *size = 8; return 'f';
	case '?': *size = 1; return 'b';
	default: return 0;
	}
}

static const char *kind_name(char kind, Py_ssize_t size, char *buf, size_t cap)
{
	const char *k = kind == 'i' ? "int" : kind == 'u' ? "uint" : kind == 'f' ? "float"
		      : kind == 'b' ? "bool" : NULL;
	if (!k)
		return "an unsupported type";
	if (kind == 'b')
		return "bool";
	snprintf(buf, cap, "%s%zd", k, size * 8);
	return buf;
}

static int shape_text(const Py_buffer *v, char *buf, size_t cap)
{
	size_t used = 0;
	used += (size_t)snprintf(buf, cap, "(");
	for (int d = 0; d < v->ndim && used < cap; d++)
		used += (size_t)snprintf(buf + used, cap - used, d ? ", %zd" : "%zd",
					 v->shape ? v->shape[d] : v->len / v->itemsize);
	if (used < cap)
		snprintf(buf + used, cap - used, v->ndim == 1 ? ",)" : ")");
	return 0;
}

/* numpy.asarray(obj) for objects with __array__ (torch tensors); NULL with a
 * ValueError naming argname when the conversion fails (a CUDA tensor). */
static PyObject *as_numpy(PyObject *obj, const char *argname)
{
	PyObject *np = PyImport_ImportModule("numpy"), *arr;
	if (!np)
		return NULL;
	arr = PyObject_CallMethod(np, "asarray", "O", obj);
	Py_DECREF(np);
	if (!arr && PyErr_ExceptionMatches(PyExc_Exception)) {
		PyObject *type, *value, *tb;
		PyErr_Fetch(&type, &value, &tb);
		PyErr_NormalizeException(&type, &value, &tb);
		PyErr_Format(PyExc_ValueError, "%s: cannot be read as a host array (%S)",
			     argname, value ? value : Py_None);
		Py_XDECREF(type);
		Py_XDECREF(value);
		Py_XDECREF(tb);
	}
	return arr;
}

/* Take a contiguous buffer of obj (or of numpy.asarray(obj) when obj has __array__
 * and no buffer), checking kind/itemsize/ndim/writable. *holder gets the converted
 * array to release after the view, if any. */
static int take_buffer(PyObject *obj, const char *argname, char kind, Py_ssize_t itemsize,
		       int ndim, int writable, Py_buffer *view, PyObject **holder)
{
	char tbuf[32], sbuf[160];
	Py_ssize_t size = 0;
	char got;
	int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);

	*holder = NULL;
	memset(view, 0, sizeof *view);
	if (!PyObject_CheckBuffer(obj)) {
		if (!PyObject_HasAttrString(obj, "__array__")) {
			PyErr_Format(PyExc_TypeError,
				     "%s: expected an array (numpy, torch) or a buffer, got %.80s",
				     argname, Py_TYPE(obj)->tp_name);
			return -1;
		}
		*holder = as_numpy(obj, argname);
		if (!*holder)
			return -1;
		obj = *holder;
	}
	if (PyObject_GetBuffer(obj, view, flags) < 0) {
		PyObject *type, *value, *tb;
		PyErr_Fetch(&type, &value, &tb);
		PyErr_NormalizeException(&type, &value, &tb);
		PyErr_Format(PyExc_ValueError, "%s: %s (%S)", argname,
			     writable ? "must be a writable, C-contiguous array"
				      : "must be a C-contiguous array",
			     value ? value : Py_None);
		Py_XDECREF(type);
		Py_XDECREF(value);
		Py_XDECREF(tb);
		goto fail;
	}
	got = format_kind(view->format, &size);
	if (got != kind || size != itemsize || view->itemsize != itemsize) {
		char want[32];
		PyErr_Format(PyExc_ValueError, "%s: dtype must be %s, got %s (format '%s')",
			     argname, kind_name(kind, itemsize, want, sizeof want),
			     kind_name(got, size, tbuf, sizeof tbuf),
			     view->format ? view->format : "B");
		goto fail_view;
	}
	if (ndim >= 0 && view->ndim != ndim) {
		shape_text(view, sbuf, sizeof sbuf);
		PyErr_Format(PyExc_ValueError, "%s: must be %d-D, got shape %s", argname, ndim,
			     sbuf);
		goto fail_view;
	}
	return 0;
fail_view:
	PyBuffer_Release(view);
fail:
	Py_CLEAR(*holder);
	memset(view, 0, sizeof *view);
	return -1;
}

int ember_py_buffer_get(PyObject *obj, const char *argname, char kind, Py_ssize_t itemsize,
			int ndim, int writable, Py_buffer *view)
{
	PyObject *holder = NULL;
	if (take_buffer(obj, argname, kind, itemsize, ndim, writable, view, &holder) < 0)
		return -1;
	/* the view keeps the converted array alive through view->obj; drop ours */
	Py_XDECREF(holder);
	return 0;
}

void ember_py_buffer_release(Py_buffer *view)
{
	if (view && view->obj)
		PyBuffer_Release(view);
}

/* A sequence of ints, copied. */
static int ids_from_sequence(PyObject *obj, const char *argname, ember_py_ids *out)
{
	PyObject *seq = PySequence_Fast(obj, "");
	Py_ssize_t n;
	if (!seq) {
		PyErr_Format(PyExc_TypeError,
			     "%s: expected int64 ids (numpy array, torch tensor or sequence "
			     "of ints), got %.80s",
			     argname, Py_TYPE(obj)->tp_name);
		return -1;
	}
	n = PySequence_Fast_GET_SIZE(seq);
	out->copy = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
	if (!out->copy) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *idx;
		int overflow = 0;
		long long v;
		if (PyBool_Check(item) || !(idx = PyNumber_Index(item))) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "%s[%zd]: expected an int, got %.80s",
				     argname, i, Py_TYPE(item)->tp_name);
			goto fail;
		}
		v = PyLong_AsLongLongAndOverflow(idx, &overflow);
		Py_DECREF(idx);
		if (overflow) {
			PyErr_Format(PyExc_ValueError, "%s[%zd]: does not fit int64", argname, i);
			goto fail;
		}
		out->copy[i] = (int64_t)v;
	}
	Py_DECREF(seq);
	out->ids = out->copy;
	out->n = n;
	return 0;
fail:
	Py_DECREF(seq);
	PyMem_Free(out->copy);
	out->copy = NULL;
	return -1;
}

int ember_py_ids_get(PyObject *obj, const char *argname, ember_py_ids *out)
{
	memset(out, 0, sizeof *out);
	if (PyObject_CheckBuffer(obj) || PyObject_HasAttrString(obj, "__array__")) {
		if (PyBytes_Check(obj) || PyByteArray_Check(obj)) {
			PyErr_Format(PyExc_TypeError, "%s: expected int64 ids, got %.80s", argname,
				     Py_TYPE(obj)->tp_name);
			return -1;
		}
		if (take_buffer(obj, argname, 'i', 8, 1, 0, &out->view, &out->array) < 0)
			return -1;
		out->ids = out->view.buf;
		out->n = out->view.len / 8;
		return 0;
	}
	if (PyUnicode_Check(obj) || PyDict_Check(obj) || PyAnySet_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "%s: expected int64 ids, got %.80s", argname,
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	return ids_from_sequence(obj, argname, out);
}

void ember_py_ids_release(ember_py_ids *ids)
{
	if (!ids)
		return;
	if (ids->view.obj)
		PyBuffer_Release(&ids->view);
	Py_CLEAR(ids->array);
	PyMem_Free(ids->copy);
	ids->copy = NULL;
	ids->ids = NULL;
	ids->n = 0;
}

int ember_py_ids_check_range(const ember_py_ids *ids, const char *argname, int64_t lo,
			     int64_t hi)
{
	for (Py_ssize_t i = 0; i < ids->n; i++) {
		if (ids->ids[i] < lo || ids->ids[i] >= hi) {
			PyErr_Format(PyExc_ValueError, "%s[%zd]: %lld is out of range [%lld, %lld)",
				     argname, i, (long long)ids->ids[i], (long long)lo,
				     (long long)hi);
			return -1;
		}
	}
	return 0;
}

/* ---- zero-copy views out: _ember.View ------------------------------------------ */

typedef struct {
	PyObject_HEAD
	PyObject *owner;     /* strong reference; NULL once released */
	Py_ssize_t *live;    /* the owner's counter of live views */
	void *ptr;
	char format[8];
	Py_ssize_t itemsize;
	int ndim;
	int readonly;
	Py_ssize_t shape[4];
	Py_ssize_t strides[4];
	Py_ssize_t len;
	Py_ssize_t exports; /* buffers taken from this view and not released yet */
} view_object;

static void view_drop(view_object *v)
{
	if (!v->owner)
		return;
	(*v->live)--; /* GIL held: the counter is only touched under it */
	v->live = NULL;
	v->ptr = NULL;
	Py_CLEAR(v->owner);
}

static int view_getbuffer(PyObject *self, Py_buffer *b, int flags)
{
	view_object *v = (view_object *)self;
	if (!v->owner) {
		PyErr_SetString(PyExc_BufferError, "the view was released");
		b->obj = NULL;
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && v->readonly) {
		PyErr_SetString(PyExc_BufferError, "the view is read-only");
		b->obj = NULL;
		return -1;
	}
	b->buf = v->ptr;
	b->obj = Py_NewRef(self);
	b->len = v->len;
	b->readonly = v->readonly;
	b->itemsize = v->itemsize;
	b->format = (flags & PyBUF_FORMAT) ? v->format : NULL;
	b->ndim = v->ndim;
	b->shape = (flags & PyBUF_ND) ? v->shape : NULL;
	b->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? v->strides : NULL;
	b->suboffsets = NULL;
	b->internal = NULL;
	v->exports++;
	return 0;
}

static void view_releasebuffer(PyObject *self, Py_buffer *b)
{
	((view_object *)self)->exports--;
}

static PyObject *view_release(PyObject *self, PyObject *unused)
{
	view_object *v = (view_object *)self;
	if (v->exports > 0) {
		PyErr_Format(PyExc_BufferError, "the view has %zd buffers exported (arrays over it)",
			     v->exports);
		return NULL;
	}
	view_drop(v);
	Py_RETURN_NONE;
}

static PyObject *view_released(PyObject *self, void *closure)
{
	return PyBool_FromLong(((view_object *)self)->owner == NULL);
}

static void view_dealloc(PyObject *self)
{
	view_drop((view_object *)self);
	Py_TYPE(self)->tp_free(self);
}

static PyMethodDef view_methods[] = {
	{"release", view_release, METH_NOARGS,
	 "Give up the view: later exports raise BufferError; raises BufferError while an "
	 "array over it exists."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef view_getset[] = {
	{"released", view_released, NULL, "True once released (or its owner is gone).", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyBufferProcs view_as_buffer = {view_getbuffer, view_releasebuffer};

static PyTypeObject view_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ember._ember.View",
	.tp_basicsize = sizeof(view_object),
	.tp_dealloc = view_dealloc,
	.tp_as_buffer = &view_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A zero-copy view of Ember memory (buffer protocol); keeps its owner alive.",
	.tp_methods = view_methods,
	.tp_getset = view_getset,
};

PyObject *ember_py_view_new(PyObject *owner, Py_ssize_t *live, void *ptr,
			    const char *format, Py_ssize_t itemsize, int ndim,
			    const Py_ssize_t *shape, int readonly)
{
	view_object *v;
	Py_ssize_t len = itemsize;
	if (ndim < 0 || ndim > 4 || itemsize <= 0 || strlen(format) >= sizeof v->format) {
		PyErr_SetString(PyExc_SystemError, "ember_py_view_new: bad shape or format");
		return NULL;
	}
	v = PyObject_New(view_object, &view_type);
	if (!v)
		return NULL;
	for (int d = ndim - 1; d >= 0; d--) {
		v->shape[d] = shape[d];
		v->strides[d] = len;
		len *= shape[d];
	}
	v->owner = Py_NewRef(owner);
	v->live = live;
	(*live)++; /* GIL held */
	v->ptr = ptr;
	strcpy(v->format, format);
	v->itemsize = itemsize;
	v->ndim = ndim;
	v->readonly = readonly;
	v->len = len;
	v->exports = 0;
	return (PyObject *)v;
}

int ember_py_views_busy(const Py_ssize_t *live, const char *what)
{
	char buf[160];
	if (*live == 0)
		return 0;
	snprintf(buf, sizeof buf, "%s has %zd live views of its memory", what, *live);
	ember_py_raise_detail(EMBER_EBUSY, buf);
	return -1;
}

/* ---- the module ---------------------------------------------------------------- */

static PyObject *mod_version(PyObject *self, PyObject *unused)
{
	return PyUnicode_FromString(ember_version());
}

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
	int overflow = 0;
	long code = PyLong_AsLongAndOverflow(arg, &overflow);
	if (code == -1 && PyErr_Occurred())
		return NULL;
	if (overflow || code < INT32_MIN || code > INT32_MAX)
		return PyUnicode_FromString("unknown error code");
	return PyUnicode_FromString(ember_strerror((int)code));
}

static PyObject *mod_have_cuda(PyObject *self, PyObject *unused)
{
	return PyBool_FromLong(ember_gpu_have_cuda());
}

static PyMethodDef module_methods[] = {
	{"have_cuda", mod_have_cuda, METH_NOARGS,
	 "True when libember was built with ember_gpu's CUDA backend."},
	{"version", mod_version, METH_NOARGS, "The library's version string."},
	{"strerror", mod_strerror, METH_O, "ember_strerror(code)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "ember._ember",
	.m_doc = "Ember's C extension: thin types over the public C API (see ember.Store).",
	.m_size = -1,
	.m_methods = module_methods,
};

static int add_constants(PyObject *m)
{
	static const struct {
		const char *name;
		long long value;
	} c[] = {
		{"EINVAL", EMBER_EINVAL}, {"ENOTFOUND", EMBER_ENOTFOUND},
		{"ERANGE", EMBER_ERANGE}, {"ETOOBIG", EMBER_ETOOBIG},
		{"ENOMEM", EMBER_ENOMEM}, {"EIO", EMBER_EIO},
		{"ECORRUPT", EMBER_ECORRUPT}, {"ENOTEMBER", EMBER_ENOTEMBER},
		{"EVERSION", EMBER_EVERSION}, {"EEXIST", EMBER_EEXIST},
		{"EBUSY", EMBER_EBUSY}, {"ESTATE", EMBER_ESTATE},
		{"EAGAIN", EMBER_EAGAIN}, {"ENOSPC", EMBER_ENOSPC},
		{"EREADONLY", EMBER_EREADONLY},
		{"MAX_KEY_LEN", EMBER_MAX_KEY_LEN}, {"MAX_VALUE_LEN", EMBER_MAX_VALUE_LEN},
		{"MAX_SESSIONS", EMBER_MAX_SESSIONS},
		{"OPEN_TRUNCATE", EMBER_OPEN_TRUNCATE}, {"OPEN_READONLY", EMBER_OPEN_READONLY},
		{"OPEN_PREWRITE_LOG", EMBER_OPEN_PREWRITE_LOG},
		{"OPEN_NO_CLOSE_CHECKPOINT", EMBER_OPEN_NO_CLOSE_CHECKPOINT},
		{"READ_CACHE_ADMIT_FIRST", EMBER_READ_CACHE_ADMIT_FIRST},
		{"READ_CACHE_ADMIT_SECOND", EMBER_READ_CACHE_ADMIT_SECOND},
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
		if (PyModule_AddObject(m, c[i].name, PyLong_FromLongLong(c[i].value)) < 0)
			return -1;
	return PyModule_AddObject(m, "COLD_CACHE_OFF",
				  PyLong_FromUnsignedLongLong(EMBER_COLD_CACHE_OFF));
}

PyMODINIT_FUNC PyInit__ember(void)
{
	PyObject *m;
	if (PyType_Ready(&view_type) < 0)
		return NULL;
	m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	Py_INCREF(&view_type);
	if (PyModule_AddObject(m, "View", (PyObject *)&view_type) < 0) {
		Py_DECREF(&view_type);
		goto fail;
	}
	if (add_constants(m) < 0 || emb_store_init(m) < 0 || emb_cache_init(m) < 0 ||
	    emb_graph_init(m) < 0)
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
