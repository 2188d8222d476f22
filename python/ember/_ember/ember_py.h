/*
 * ember_py.h - what the extension's C files (module.c, store.c, cache.c, graph.c)
 * share: the layers' init functions, errors as exceptions, reading id and number
 * arrays from Python objects, and zero-copy views of Ember memory.
 *
 * The extension uses Ember's public headers only. Every function here is called
 * with the GIL held, and none of them releases it.
 *
 * Conventions of the extension (docs/python.md):
 *  - a call that can wait or touch the disk runs between Py_BEGIN_ALLOW_THREADS and
 *    Py_END_ALLOW_THREADS, holding references to the objects whose memory it uses,
 *    and touches no Python object while the GIL is released;
 *  - bad input raises TypeError / ValueError before any C call;
 *  - a closed object raises ember.StateError from every method (ember_py_closed).
 */
#ifndef EMBER_PY_H
#define EMBER_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include <ember.h>

/* ---- the layers ---------------------------------------------------------------- */

/* Each registers its types and constants on the module _ember; 0, or -1 with an
 * exception set. Called once, in this order, by PyInit__ember (module.c). */
int emb_store_init(PyObject *module);
int emb_cache_init(PyObject *module);
int emb_graph_init(PyObject *module);

/* ---- the store, for the layers above it (store.c) ------------------------------ */

/*
 * The store under a _ember.Db: 0 with *db set, or -1 with TypeError (not a Db)
 * or ember.StateError (closed) raised. The caller keeps a reference to obj while
 * it uses *db.
 */
int ember_py_db_get(PyObject *obj, ember_db **db);

/*
 * Count a long-lived holder of obj's store (an open graph: +1 at open, -1 at
 * close), as a call in flight counts: Db.close raises ember.BusyError while any
 * is counted, so the store is never closed under a holder.
 */
void ember_py_db_hold(PyObject *obj, int delta);
/* The handle of an open _ember.Db (store.c), for the layers that open their objects
 * over a store (a cache, a graph buffer): borrowed, valid while the Db is open and
 * referenced; NULL with TypeError (not a Db) or ember.StateError (closed) raised. */
ember_db *emb_store_db(PyObject *db);

/* ---- errors -------------------------------------------------------------------- */

/*
 * Raise the ember.errors exception for the return code rc (an EMBER_E* code or a
 * negative errno), built by ember.errors.from_code(rc, detail). detail is the
 * store's ember_error_detail() when db is not NULL and rc is EMBER_ECORRUPT or
 * EMBER_EIO and the store has one, else ember_strerror(rc). Always returns NULL,
 * so that `return ember_py_raise(rc, db);` ends a method.
 */
PyObject *ember_py_raise(int rc, ember_db *db);

/* As ember_py_raise, with the detail text given (NULL: ember_strerror(rc)). */
PyObject *ember_py_raise_detail(int rc, const char *detail);

/* Raise ember.StateError (EMBER_ESTATE) saying "<what> is closed"; returns NULL. */
PyObject *ember_py_closed(const char *what);

/* ---- arrays in ----------------------------------------------------------------- */

/*
 * A read-only, C-contiguous run of int64 ids taken from a Python object:
 *  - any object with the buffer protocol (numpy arrays, memoryview, array('q')):
 *    1-D, C-contiguous, of a signed 8-byte integer format; read in place;
 *  - a torch tensor (or any object with __array__): converted by numpy.asarray,
 *    which shares a CPU tensor's memory, then as above (a CUDA tensor is a
 *    ValueError);
 *  - any other sequence of ints (list, tuple, range): copied.
 * A 0-length input is fine (n == 0).
 */
typedef struct ember_py_ids {
	const int64_t *ids; /* n ids, valid until ember_py_ids_release */
	Py_ssize_t n;
	/* private */
	Py_buffer view;   /* held when read in place (view.obj != NULL) */
	PyObject *array;  /* the numpy array made from __array__, or NULL */
	int64_t *copy;    /* PyMem_Malloc'd copy of a sequence, or NULL */
} ember_py_ids;

/*
 * Fill *out from obj. argname names the argument in error messages ("ids",
 * "offsets[feature 'user']": whatever tells the caller where to look). Returns 0, or
 * -1 with an exception set and *out needing no release:
 *  - TypeError: obj is neither a buffer, an array-like nor a sequence;
 *  - ValueError: wrong dtype ("ids: dtype must be int64, got float32"), not 1-D
 *    ("ids: must be 1-D, got shape (2, 3)"), not contiguous, or an element of a
 *    sequence that is not an int or does not fit int64 ("ids[4]: ...").
 */
int ember_py_ids_get(PyObject *obj, const char *argname, ember_py_ids *out);

/* Release what ember_py_ids_get holds. Safe on a zeroed struct and twice. */
void ember_py_ids_release(ember_py_ids *ids);

/* Check lo <= ids[i] < hi for every i: 0, or -1 with a ValueError naming the first
 * position out of range ("ids[7]: 1000 is out of range [0, 1000)"). */
int ember_py_ids_check_range(const ember_py_ids *ids, const char *argname, int64_t lo,
			     int64_t hi);

/*
 * A C-contiguous buffer of one element type, of any dimension up to 8, from any
 * object with the buffer protocol or __array__ (torch CPU tensors: shared, not
 * copied). kind is 'i' (signed int), 'u' (unsigned int) or 'f' (float), itemsize
 * its size in bytes (int64: 'i', 8; float32: 'f', 4; bytes: 'u', 1). ndim is the
 * dimension required, or -1 for any. writable asks for a writable buffer (a
 * read-only one is a ValueError). Returns 0 with *view filled (release it with
 * ember_py_buffer_release), or -1 with a TypeError / ValueError naming argname.
 */
int ember_py_buffer_get(PyObject *obj, const char *argname, char kind, Py_ssize_t itemsize,
			int ndim, int writable, Py_buffer *view);
void ember_py_buffer_release(Py_buffer *view);

/* ---- zero-copy views out ------------------------------------------------------- */

/*
 * A new _ember.View exporting Ember memory (ptr, a C-contiguous array of ndim <= 4
 * dimensions, shape[], elements of struct format `format` ("f", "q", "B") and
 * itemsize bytes) through the buffer protocol, so numpy.asarray(view) and
 * torch.frombuffer(view) read and write it in place.
 *
 * The view holds a reference to owner (the object whose memory it is), so the owner
 * outlives it, and counts itself in *live (a counter inside owner's struct, changed
 * only with the GIL held: +1 here, -1 when the view is released or deallocated).
 * An owner must not free or reuse the memory while *live > 0: its close raises
 * ember.BusyError then (ember_py_views_busy).
 *
 * view.release() drops the view's claim early; it raises BufferError while a buffer
 * taken from it (a numpy array over it) still exists. A released view exports
 * nothing (BufferError), so its memory can never be read after release.
 * Returns the new reference, or NULL with an exception set.
 */
PyObject *ember_py_view_new(PyObject *owner, Py_ssize_t *live, void *ptr,
			    const char *format, Py_ssize_t itemsize, int ndim,
			    const Py_ssize_t *shape, int readonly);

/* For an owner's close: 0 when *live is 0, else -1 with ember.BusyError raised
 * ("<what> has N live views"). */
int ember_py_views_busy(const Py_ssize_t *live, const char *what);

#endif
