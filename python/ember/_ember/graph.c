/*
 * graph.c - ember._ember's types over include/ember_graph.h: Graph (an imported
 * graph), Ordering, Buffer (the partition buffer) and Sampler, and the functions
 * graph_import, ordering_beta_swaps and ordering_lower_bound. ember/graph.py builds
 * the typed API on them.
 *
 * Design notes
 * ------------
 * The C objects have thread rules (ember_graph.h): a graph is read by any number of
 * threads but closed once; a buffer has one trainer thread at a time; samplers run
 * beside each other but never during the trainer's calls; a sampler belongs to one
 * thread. Python threads call in any order with the GIL released, so each object
 * carries a lock that turns those rules into waits:
 *
 *   L1. Graph.lock (rwlock): its readers (info, maps, bucket and node reads, buffer
 *       open and close) hold it shared; Graph.close holds it exclusive.
 *   L2. Buffer.lock (rwlock): the trainer's calls (set_plan, set_ordering,
 *       next_state, next_batch, next_nodes, update, gather, flush, stats, sampler
 *       open and close, close) hold it exclusive; Sampler.run and .gather shared.
 *   L3. Sampler.mu (mutex): one call on a sampler at a time.
 *   L4. Ordering.lock (rwlock): Buffer.set_ordering holds it shared; close exclusive.
 *   L5. Order: Sampler.mu, Buffer.lock, Ordering.lock, Graph.lock.
 *   L6. A lock is waited for only with the GIL released (tp_dealloc included).
 *       The GIL may be taken back while a lock is held (to build the answer's
 *       arrays): whoever waits for that lock has released the GIL, so the two never
 *       deadlock.
 *
 * A closed object has its C pointer NULL, set under its exclusive lock; every call
 * checks the pointer under the lock and raises ember.StateError when it is NULL.
 * A child holds a reference to its parent (Sampler -> Buffer -> Graph -> store
 * object), so a parent's C object outlives its children's unless closed
 * explicitly, which the C library refuses with EMBER_EBUSY (ember.BusyError) while
 * children are open. Arguments are checked (TypeError / ValueError) before any C
 * call, and no lock is taken until they are.
 */
#include "ember_py.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ember_graph.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A new bytearray of n bytes (its memory in *data), or NULL with MemoryError. */
static PyObject *gp_bytes(size_t n, void **data)
{
	*data = NULL;
	if (n > PY_SSIZE_T_MAX)
		return PyErr_NoMemory();
	PyObject *b = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
	if (b)
		*data = PyByteArray_AS_STRING(b);
	return b;
}

/* Ids in [0, limit) from obj (int64 arrays, CPU tensors, sequences); ValueError
 * naming `what` and the position otherwise. */
static int gp_ids(PyObject *obj, const char *what, uint64_t limit, ember_py_ids *ids)
{
	if (ember_py_ids_get(obj, what, ids) < 0)
		return -1;
	if (ember_py_ids_check_range(ids, what, 0,
				     limit > INT64_MAX ? INT64_MAX : (int64_t)limit) < 0) {
		ember_py_ids_release(ids);
		return -1;
	}
	return 0;
}

/* uint32_t from a Python int in [lo, hi]; -1 with ValueError / TypeError set. */
static int gp_u32(PyObject *o, const char *what, uint64_t lo, uint64_t hi, uint32_t *out)
{
	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int, got %.80s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	int overflow = 0;
	long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
	if (v == -1 && PyErr_Occurred())
		return -1;
	if (overflow || v < (long long)lo || (unsigned long long)v > hi) {
		PyErr_Format(PyExc_ValueError, "%s = %S must be in [%llu, %llu]", what, o,
			     (unsigned long long)lo, (unsigned long long)hi);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static PyObject *gp_raise(int rc, const char *detail)
{
	return ember_py_raise_detail(rc, detail);
}

static PyObject *gp_state_error(const char *what)
{
	return ember_py_closed(what);
}

/* ---- Graph -------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	ember_graph *g;          /* NULL once closed (under lock, exclusive) */
	PyObject *store;         /* the _ember.Db; keeps the store open */
	ember_db *db;
	ember_graph_info info;   /* immutable after open */
	pthread_rwlock_t lock;   /* L1 */
} GraphObject;

static PyTypeObject Graph_Type;

/* Close under the exclusive lock; *closed = 1 when this call closed it. */
static void graph_close_c(GraphObject *self, int *rc, int *closed)
{
	pthread_rwlock_wrlock(&self->lock);
	*rc = 0;
	*closed = 0;
	if (self->g) {
		*rc = ember_graph_close(self->g);
		if (*rc == 0) {
			self->g = NULL;
			*closed = 1;
		}
	}
	pthread_rwlock_unlock(&self->lock);
}

static int Graph_init(GraphObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"store", "name", NULL};
	PyObject *store;
	const char *name;
	Py_ssize_t name_len;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "Os#", kwlist, &store, &name, &name_len))
		return -1;
	if (self->g || self->store) {
		PyErr_SetString(PyExc_TypeError, "Graph.__init__ called twice");
		return -1;
	}
	if (name_len < 1 || name_len > EMBER_GRAPH_MAX_NAME ||
	    strlen(name) != (size_t)name_len) {
		PyErr_Format(PyExc_ValueError, "graph name must be 1..%u bytes without NUL",
			     EMBER_GRAPH_MAX_NAME);
		return -1;
	}
	ember_db *db;
	if (ember_py_db_get(store, &db) < 0)
		return -1;
	ember_graph *g = NULL;
	int rc;
	Py_INCREF(store); /* held through the call: another thread may drop its own */
	Py_BEGIN_ALLOW_THREADS
	rc = ember_graph_open(db, name, &g);
	Py_END_ALLOW_THREADS
	if (rc == 0)
		rc = ember_graph_info_get(g, &self->info);
	if (rc < 0) {
		ember_graph_close(g);
		Py_DECREF(store);
		ember_py_raise(rc, db);
		return -1;
	}
	self->g = g;
	self->db = db;
	self->store = store; /* the reference taken above */
	ember_py_db_hold(store, +1);
	return 0;
}

static void Graph_dealloc(GraphObject *self)
{
	int rc, closed = 0;
	if (self->g) {
		Py_BEGIN_ALLOW_THREADS
		graph_close_c(self, &rc, &closed);
		Py_END_ALLOW_THREADS
	}
	if (closed)
		ember_py_db_hold(self->store, -1);
	pthread_rwlock_destroy(&self->lock);
	Py_XDECREF(self->store);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Graph_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	GraphObject *self = (GraphObject *)type->tp_alloc(type, 0);
	if (self && pthread_rwlock_init(&self->lock, NULL) != 0) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	return (PyObject *)self;
}

static PyObject *Graph_close(GraphObject *self, PyObject *unused)
{
	int rc, closed;
	Py_BEGIN_ALLOW_THREADS
	graph_close_c(self, &rc, &closed);
	Py_END_ALLOW_THREADS
	if (closed)
		ember_py_db_hold(self->store, -1);
	if (rc < 0)
		return gp_raise(rc, "close the graph's buffers first");
	Py_RETURN_NONE;
}

#define GRAPH_OPEN_OR_RAISE(self)                                                      \
	do {                                                                           \
		if (!(self)->g)                                                        \
			return gp_state_error("the graph");                 \
	} while (0)

static PyObject *Graph_info(GraphObject *self, PyObject *unused)
{
	GRAPH_OPEN_OR_RAISE(self);
	const ember_graph_info *i = &self->info;
	return Py_BuildValue("{sKsKsKsKsIsIsIsI}", "num_nodes", (unsigned long long)i->num_nodes,
			     "num_edges", (unsigned long long)i->num_edges, "partition_size",
			     (unsigned long long)i->partition_size, "train_nodes",
			     (unsigned long long)i->train_nodes, "partitions", i->partitions,
			     "dim", i->dim, "relations", i->relations, "chunk_bytes",
			     i->chunk_bytes);
}

/* map(ids, to_new): the permutation, elementwise, into a new int64 array. */
static PyObject *Graph_map(GraphObject *self, PyObject *args)
{
	PyObject *obj;
	int to_new;
	if (!PyArg_ParseTuple(args, "Op", &obj, &to_new))
		return NULL;
	GRAPH_OPEN_OR_RAISE(self);
	ember_py_ids ids;
	if (gp_ids(obj, "ids", self->info.num_nodes, &ids) < 0)
		return NULL;
	uint64_t *o;
	PyObject *out = gp_bytes((size_t)ids.n * 8, (void **)&o);
	if (!out) {
		ember_py_ids_release(&ids);
		return NULL;
	}
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_rdlock(&self->lock);
	if (!self->g)
		rc = EMBER_ESTATE;
	for (Py_ssize_t i = 0; rc == 0 && i < ids.n; i++)
		rc = to_new ? ember_graph_node_to_new(self->g, (uint64_t)ids.ids[i], &o[i])
			    : ember_graph_node_to_original(self->g, (uint64_t)ids.ids[i], &o[i]);
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	ember_py_ids_release(&ids);
	if (rc < 0) {
		Py_DECREF(out);
		return rc == EMBER_ESTATE ? gp_state_error("the graph") : gp_raise(rc, NULL);
	}
	return out;
}

static int gp_bucket_args(GraphObject *self, PyObject *args, uint32_t *i, uint32_t *j)
{
	PyObject *oi, *oj;
	if (!PyArg_ParseTuple(args, "OO", &oi, &oj))
		return -1;
	if (!self->g) {
		gp_state_error("the graph");
		return -1;
	}
	uint32_t p = self->info.partitions;
	if (gp_u32(oi, "i", 0, p - 1, i) < 0 || gp_u32(oj, "j", 0, p - 1, j) < 0)
		return -1;
	return 0;
}

static PyObject *Graph_bucket_size(GraphObject *self, PyObject *args)
{
	uint32_t i, j;
	if (gp_bucket_args(self, args, &i, &j) < 0)
		return NULL;
	uint64_t n = 0;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_rdlock(&self->lock);
	rc = self->g ? ember_graph_bucket_size(self->g, i, j, &n) : EMBER_ESTATE;
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return rc == EMBER_ESTATE ? gp_state_error("the graph") : ember_py_raise(rc, self->db);
	return PyLong_FromUnsignedLongLong(n);
}

/* read_bucket(i, j) -> int64 array (n, 3): src, dst, rel (new ids). */
static PyObject *Graph_read_bucket(GraphObject *self, PyObject *args)
{
	uint32_t i, j;
	if (gp_bucket_args(self, args, &i, &j) < 0)
		return NULL;
	ember_graph_edge *e = NULL;
	size_t n = 0;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_rdlock(&self->lock);
	uint64_t size = 0;
	rc = self->g ? ember_graph_bucket_size(self->g, i, j, &size) : EMBER_ESTATE;
	if (rc == 0 && size > SIZE_MAX / sizeof(*e))
		rc = EMBER_ENOMEM;
	if (rc == 0) {
		e = malloc(size ? size * sizeof(*e) : 1);
		rc = e ? ember_graph_read_bucket(self->g, i, j, e, size, &n) : EMBER_ENOMEM;
	}
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		free(e);
		return rc == EMBER_ESTATE ? gp_state_error("the graph") : ember_py_raise(rc, self->db);
	}
	int64_t *o;
	PyObject *out = gp_bytes(n * 24, (void **)&o);
	if (out) {
		for (size_t k = 0; k < n; k++) {
			o[3 * k] = (int64_t)e[k].src;
			o[3 * k + 1] = (int64_t)e[k].dst;
			o[3 * k + 2] = (int64_t)e[k].rel;
		}
	}
	free(e);
	return out;
}

/* read_nodes(first, count) -> float32 (count, dim): stored node data (new ids). */
static PyObject *Graph_read_nodes(GraphObject *self, PyObject *args)
{
	unsigned long long first, count;
	if (!PyArg_ParseTuple(args, "KK", &first, &count))
		return NULL;
	GRAPH_OPEN_OR_RAISE(self);
	uint64_t nn = self->info.num_nodes;
	if (first > nn || count > nn - first) {
		PyErr_Format(PyExc_ValueError, "nodes [%llu, %llu + %llu) are outside [0, %llu)",
			     first, first, count, (unsigned long long)nn);
		return NULL;
	}
	if (count > SIZE_MAX / 4 / self->info.dim)
		return PyErr_NoMemory();
	float *o;
	PyObject *out = gp_bytes((size_t)count * self->info.dim * 4, (void **)&o);
	if (!out)
		return NULL;
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_rdlock(&self->lock);
	if (count)
		rc = self->g ? ember_graph_read_nodes(self->g, first, count, o) : EMBER_ESTATE;
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		Py_DECREF(out);
		return rc == EMBER_ESTATE ? gp_state_error("the graph") : ember_py_raise(rc, self->db);
	}
	return out;
}

static PyObject *Graph_closed(GraphObject *self, void *unused)
{
	return PyBool_FromLong(self->g == NULL);
}

static PyMethodDef Graph_methods[] = {
	{"close", (PyCFunction)Graph_close, METH_NOARGS,
	 "Close the graph (BusyError while a buffer on it is open)."},
	{"info", (PyCFunction)Graph_info, METH_NOARGS, "The graph's description, a dict."},
	{"map", (PyCFunction)Graph_map, METH_VARARGS,
	 "map(ids, to_new) -> int64 array: original -> new ids (to_new) or back."},
	{"bucket_size", (PyCFunction)Graph_bucket_size, METH_VARARGS,
	 "bucket_size(i, j) -> edges from partition i to partition j."},
	{"read_bucket", (PyCFunction)Graph_read_bucket, METH_VARARGS,
	 "read_bucket(i, j) -> int64 (n, 3) array of (src, dst, rel), new ids."},
	{"read_nodes", (PyCFunction)Graph_read_nodes, METH_VARARGS,
	 "read_nodes(first, count) -> float32 (count, dim): stored rows of new ids."},
	{NULL}};

static PyGetSetDef Graph_getset[] = {{"closed", (getter)Graph_closed, NULL, NULL, NULL},
				     {NULL}};

static PyTypeObject Graph_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.Graph",
	.tp_basicsize = sizeof(GraphObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Graph(store, name): an imported graph, opened from a store.",
	.tp_new = Graph_new,
	.tp_init = (initproc)Graph_init,
	.tp_dealloc = (destructor)Graph_dealloc,
	.tp_methods = Graph_methods,
	.tp_getset = Graph_getset,
};

/* ---- graph_import ------------------------------------------------------------- */

static PyObject *gp_import(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"store", "name", "path", "partitions", "dim", "format",
				 "binary_fields", "num_nodes", "seed", "init", "init_scale",
				 "node_data_path", "train_nodes_path", "tmp_dir",
				 "memory_budget", "chunk_bytes", NULL};
	PyObject *store;
	const char *name, *path, *node_data = NULL, *train = NULL, *tmp_dir = NULL;
	Py_ssize_t name_len;
	unsigned int partitions, dim, format = 0, fields = 2, init = 0, chunk = 0;
	unsigned long long num_nodes = 0, seed = 0, budget = 0;
	float scale = 0.1f;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "Os#sII|$IIKKIfzzzKI", kwlist, &store,
					 &name, &name_len, &path, &partitions, &dim, &format,
					 &fields, &num_nodes, &seed, &init, &scale, &node_data,
					 &train, &tmp_dir, &budget, &chunk))
		return NULL;
	if (name_len < 1 || name_len > EMBER_GRAPH_MAX_NAME ||
	    strlen(name) != (size_t)name_len)
		return PyErr_Format(PyExc_ValueError,
				    "graph name must be 1..%u bytes without NUL",
				    EMBER_GRAPH_MAX_NAME);
	if (partitions < 1 || partitions > EMBER_GRAPH_MAX_PARTITIONS)
		return PyErr_Format(PyExc_ValueError, "partitions = %u must be in [1, %u]",
				    partitions, EMBER_GRAPH_MAX_PARTITIONS);
	if (dim < 1 || dim > EMBER_GRAPH_MAX_DIM)
		return PyErr_Format(PyExc_ValueError, "dim = %u must be in [1, %u]", dim,
				    EMBER_GRAPH_MAX_DIM);
	if (format > EMBER_GRAPH_BINARY || (fields != 2 && fields != 3) ||
	    init > EMBER_GRAPH_INIT_FILE)
		return PyErr_Format(PyExc_ValueError, "bad format, binary_fields or init");
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = partitions;
	o.dim = dim;
	o.format = format;
	o.binary_fields = fields;
	o.num_nodes = num_nodes;
	o.seed = seed;
	o.init = init;
	o.init_scale = scale;
	o.node_data_path = node_data;
	o.train_nodes_path = train;
	o.tmp_dir = tmp_dir;
	o.memory_budget = budget;
	o.chunk_bytes = chunk;
	ember_db *db;
	if (ember_py_db_get(store, &db) < 0)
		return NULL;
	ember_graph_import_result res;
	memset(&res, 0, sizeof(res));
	int rc;
	Py_INCREF(store);
	Py_BEGIN_ALLOW_THREADS
	rc = ember_graph_import(db, name, path, &o, &res);
	Py_END_ALLOW_THREADS
	Py_DECREF(store);
	if (rc < 0) {
		char detail[256];
		if (res.error_line)
			snprintf(detail, sizeof(detail), "%s line %llu: %s", res.error_file,
				 (unsigned long long)res.error_line, res.error);
		else
			snprintf(detail, sizeof(detail), "%s",
				 res.error[0] ? res.error : ember_strerror(rc));
		return gp_raise(rc, detail);
	}
	return Py_BuildValue("{sKsKsIsIsK}", "num_nodes", (unsigned long long)res.num_nodes,
			     "num_edges", (unsigned long long)res.num_edges, "runs", res.runs,
			     "merge_passes", res.merge_passes, "bytes_stored",
			     (unsigned long long)res.bytes_stored);
}

/* ---- Ordering ----------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	ember_graph_ordering *ord; /* NULL once closed */
	ember_graph_ordering_info info;
	pthread_rwlock_t lock;     /* L4 */
} OrderingObject;

static PyTypeObject Ordering_Type;

static PyObject *Ordering_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	OrderingObject *self = (OrderingObject *)type->tp_alloc(type, 0);
	if (self && pthread_rwlock_init(&self->lock, NULL) != 0) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	return (PyObject *)self;
}

/* Ordering(p, c, kind, seed=0, epoch=0, comet_group=0, train=None) */
static int Ordering_init(OrderingObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"p", "c", "kind", "seed", "epoch", "comet_group", "train",
				 NULL};
	PyObject *op, *oc, *train = Py_None;
	int kind;
	unsigned long long seed = 0, epoch = 0;
	unsigned int group = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOi|KKIO", kwlist, &op, &oc, &kind, &seed,
					 &epoch, &group, &train))
		return -1;
	if (self->ord) {
		PyErr_SetString(PyExc_TypeError, "Ordering.__init__ called twice");
		return -1;
	}
	uint32_t p, c;
	if (gp_u32(op, "p", 2, EMBER_GRAPH_ORDERING_MAX_PARTITIONS, &p) < 0 ||
	    gp_u32(oc, "c", 2, p, &c) < 0)
		return -1;
	if (kind < EMBER_GRAPH_ORDERING_BETA || kind > EMBER_GRAPH_ORDERING_SEQUENTIAL) {
		PyErr_Format(PyExc_ValueError, "kind = %d is not an ordering kind", kind);
		return -1;
	}
	ember_graph_ordering_options o;
	ember_graph_ordering_options_default(&o);
	o.seed = seed;
	o.epoch = epoch;
	o.comet_group = group;
	uint32_t *t32 = NULL;
	if (train != Py_None) {
		ember_py_ids tr;
		if (gp_ids(train, "train", p, &tr) < 0)
			return -1;
		if (tr.n < 1 || tr.n > (Py_ssize_t)c) {
			PyErr_Format(PyExc_ValueError, "train must name 1..c = %u partitions", c);
			ember_py_ids_release(&tr);
			return -1;
		}
		if (!(t32 = malloc((size_t)tr.n * sizeof(*t32)))) {
			ember_py_ids_release(&tr);
			PyErr_NoMemory();
			return -1;
		}
		for (Py_ssize_t i = 0; i < tr.n; i++)
			t32[i] = (uint32_t)tr.ids[i];
		o.train = t32;
		o.n_train = (uint32_t)tr.n;
		ember_py_ids_release(&tr);
	}
	ember_graph_ordering *ord = NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = ember_graph_ordering_create(p, c, kind, &o, &ord);
	Py_END_ALLOW_THREADS
	free(t32);
	if (rc == 0)
		rc = ember_graph_ordering_info_get(ord, &self->info);
	if (rc < 0) {
		ember_graph_ordering_destroy(ord);
		gp_raise(rc, rc == EMBER_EINVAL ? "bad ordering options (comet_group, train)"
						: NULL);
		return -1;
	}
	self->ord = ord;
	return 0;
}

static void ordering_close_c(OrderingObject *self)
{
	pthread_rwlock_wrlock(&self->lock);
	ember_graph_ordering_destroy(self->ord);
	self->ord = NULL;
	pthread_rwlock_unlock(&self->lock);
}

static void Ordering_dealloc(OrderingObject *self)
{
	if (self->ord) {
		Py_BEGIN_ALLOW_THREADS
		ordering_close_c(self);
		Py_END_ALLOW_THREADS
	}
	pthread_rwlock_destroy(&self->lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Ordering_close(OrderingObject *self, PyObject *unused)
{
	Py_BEGIN_ALLOW_THREADS
	ordering_close_c(self);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

/*
 * The ordering's readers are pure functions of an immutable object: they run with
 * the GIL held (so no close can run beside them) and need no lock.
 */
#define ORD_OPEN_OR_RAISE(self)                                                        \
	do {                                                                           \
		if (!(self)->ord)                                                      \
			return gp_state_error("the ordering");              \
	} while (0)

static PyObject *Ordering_info(OrderingObject *self, PyObject *unused)
{
	ORD_OPEN_OR_RAISE(self);
	const ember_graph_ordering_info *i = &self->info;
	return Py_BuildValue("{sIsIsisIsIsKsKsK}", "partitions", i->partitions, "capacity",
			     i->capacity, "kind", i->kind, "comet_group", i->comet_group,
			     "states", i->states, "swaps", (unsigned long long)i->swaps,
			     "lower_bound", (unsigned long long)i->lower_bound, "assigned",
			     (unsigned long long)i->assigned);
}

/* states() -> int64 (states, c): every state's partitions in slot order. */
static PyObject *Ordering_states(OrderingObject *self, PyObject *unused)
{
	ORD_OPEN_OR_RAISE(self);
	int64_t *o;
	PyObject *out = gp_bytes((size_t)self->info.states * self->info.capacity * 8, (void **)&o);
	if (!out)
		return NULL;
	for (uint32_t s = 0; s < self->info.states; s++) {
		const uint32_t *slots;
		int rc = ember_graph_ordering_state(self->ord, s, &slots);
		if (rc < 0) {
			Py_DECREF(out);
			return gp_raise(rc, NULL);
		}
		for (uint32_t k = 0; k < self->info.capacity; k++)
			o[(size_t)s * self->info.capacity + k] = slots[k];
	}
	return out;
}

/* swaps() -> int64 (states - 1, 3): (slot, evicted, loaded) into states 1.. */
static PyObject *Ordering_swaps(OrderingObject *self, PyObject *unused)
{
	ORD_OPEN_OR_RAISE(self);
	int64_t *o;
	PyObject *out = gp_bytes((size_t)(self->info.states - 1) * 24, (void **)&o);
	if (!out)
		return NULL;
	for (uint32_t s = 1; s < self->info.states; s++) {
		ember_graph_swap sw;
		int rc = ember_graph_ordering_swap(self->ord, s, &sw);
		if (rc < 0) {
			Py_DECREF(out);
			return gp_raise(rc, NULL);
		}
		o[3 * (s - 1)] = sw.slot;
		o[3 * (s - 1) + 1] = sw.evicted;
		o[3 * (s - 1) + 2] = sw.loaded;
	}
	return out;
}

/* bucket_states() -> int64 (p, p): the state of bucket (i, j), -1 for none. */
static PyObject *Ordering_bucket_states(OrderingObject *self, PyObject *unused)
{
	ORD_OPEN_OR_RAISE(self);
	uint32_t p = self->info.partitions;
	int64_t *o;
	PyObject *out = gp_bytes((size_t)p * p * 8, (void **)&o);
	if (!out)
		return NULL;
	for (uint32_t i = 0; i < p; i++)
		for (uint32_t j = 0; j < p; j++) {
			uint32_t st;
			int rc = ember_graph_ordering_bucket_state(self->ord, i, j, &st);
			if (rc < 0) {
				Py_DECREF(out);
				return gp_raise(rc, NULL);
			}
			o[(size_t)i * p + j] =
				st == EMBER_GRAPH_ORDERING_NO_STATE ? -1 : (int64_t)st;
		}
	return out;
}

static PyObject *Ordering_closed(OrderingObject *self, void *unused)
{
	return PyBool_FromLong(self->ord == NULL);
}

static PyMethodDef Ordering_methods[] = {
	{"close", (PyCFunction)Ordering_close, METH_NOARGS, "Free the ordering."},
	{"info", (PyCFunction)Ordering_info, METH_NOARGS, "The ordering's description."},
	{"states", (PyCFunction)Ordering_states, METH_NOARGS,
	 "states() -> int64 (states, c): each state's partitions in slot order."},
	{"swaps", (PyCFunction)Ordering_swaps, METH_NOARGS,
	 "swaps() -> int64 (states - 1, 3): (slot, evicted, loaded) into state 1, 2, ..."},
	{"bucket_states", (PyCFunction)Ordering_bucket_states, METH_NOARGS,
	 "bucket_states() -> int64 (p, p): the state that trains bucket (i, j), or -1."},
	{NULL}};

static PyGetSetDef Ordering_getset[] = {
	{"closed", (getter)Ordering_closed, NULL, NULL, NULL}, {NULL}};

static PyTypeObject Ordering_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.Ordering",
	.tp_basicsize = sizeof(OrderingObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Ordering(p, c, kind, seed=0, epoch=0, comet_group=0, train=None)",
	.tp_new = Ordering_new,
	.tp_init = (initproc)Ordering_init,
	.tp_dealloc = (destructor)Ordering_dealloc,
	.tp_methods = Ordering_methods,
	.tp_getset = Ordering_getset,
};

static PyObject *gp_ordering_count(PyObject *args, int lower)
{
	PyObject *op, *oc;
	if (!PyArg_ParseTuple(args, "OO", &op, &oc))
		return NULL;
	uint32_t p, c;
	if (gp_u32(op, "p", 2, INT32_MAX, &p) < 0 || gp_u32(oc, "c", 2, p, &c) < 0)
		return NULL;
	uint64_t v;
	int rc = lower ? ember_graph_ordering_lower_bound(p, c, &v)
		       : ember_graph_ordering_beta_swaps(p, c, &v);
	if (rc < 0)
		return gp_raise(rc, NULL);
	return PyLong_FromUnsignedLongLong(v);
}

static PyObject *gp_beta_swaps(PyObject *mod, PyObject *args)
{
	return gp_ordering_count(args, 0);
}

static PyObject *gp_lower_bound(PyObject *mod, PyObject *args)
{
	return gp_ordering_count(args, 1);
}

/* ---- Buffer ------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	ember_graph_buffer *b;  /* NULL once closed (under lock, exclusive) */
	GraphObject *graph;     /* keeps the graph (and its store) open */
	uint32_t capacity;
	uint32_t dim;
	uint64_t num_nodes;
	uint32_t partitions;
	int all_edges;
	uint64_t state_edges;   /* of the current state (caps next_batch's array) */
	uint64_t state_nodes;
	pthread_rwlock_t lock;  /* L2 */
} BufferObject;

static PyTypeObject Buffer_Type;

static PyObject *Buffer_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	BufferObject *self = (BufferObject *)type->tp_alloc(type, 0);
	if (self && pthread_rwlock_init(&self->lock, NULL) != 0) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	return (PyObject *)self;
}

/* Buffer(graph, capacity, prefetch_slots=None, flags=0, memory_budget=0, seed=0) */
static int Buffer_init(BufferObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"graph", "capacity", "prefetch_slots", "flags",
				 "memory_budget", "seed", NULL};
	PyObject *graph, *ocap, *opre = Py_None;
	unsigned int flags = 0;
	unsigned long long budget = 0, seed = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|OIKK", kwlist, &Graph_Type, &graph,
					 &ocap, &opre, &flags, &budget, &seed))
		return -1;
	GraphObject *g = (GraphObject *)graph;
	if (self->b || self->graph) {
		PyErr_SetString(PyExc_TypeError, "Buffer.__init__ called twice");
		return -1;
	}
	if (!g->g) {
		gp_state_error("the graph");
		return -1;
	}
	ember_graph_buffer_options o;
	ember_graph_buffer_options_default(&o);
	if (gp_u32(ocap, "capacity", 1, g->info.partitions, &o.capacity) < 0)
		return -1;
	if (opre != Py_None) {
		uint32_t pre;
		if (gp_u32(opre, "prefetch_slots", 0, EMBER_GRAPH_MAX_PARTITIONS, &pre) < 0)
			return -1;
		o.prefetch_slots = pre ? pre : EMBER_GRAPH_BUFFER_NO_PREFETCH;
	}
	if (flags & ~(EMBER_GRAPH_BUFFER_READ_ONLY | EMBER_GRAPH_BUFFER_ALL_EDGES)) {
		PyErr_Format(PyExc_ValueError, "flags = %#x has unknown bits", flags);
		return -1;
	}
	o.flags = flags;
	o.memory_budget = budget;
	o.seed = seed;
	ember_graph_buffer *b = NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_rdlock(&g->lock);
	rc = g->g ? ember_graph_buffer_open(g->g, &o, &b) : EMBER_ESTATE;
	pthread_rwlock_unlock(&g->lock);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		if (rc == EMBER_ESTATE)
			gp_state_error("the graph");
		else
			ember_py_raise(rc, g->db);
		return -1;
	}
	self->b = b;
	Py_INCREF(g);
	self->graph = g;
	self->capacity = o.capacity;
	self->dim = g->info.dim;
	self->num_nodes = g->info.num_nodes;
	self->partitions = g->info.partitions;
	self->all_edges = (flags & EMBER_GRAPH_BUFFER_ALL_EDGES) != 0;
	return 0;
}

/* Close under the exclusive lock; EMBER_EBUSY (samplers open) keeps the buffer. */
static int buffer_close_c(BufferObject *self)
{
	int rc = 0;
	pthread_rwlock_wrlock(&self->lock);
	if (self->b) {
		pthread_rwlock_rdlock(&self->graph->lock);
		rc = ember_graph_buffer_close(self->b);
		pthread_rwlock_unlock(&self->graph->lock);
		if (rc != EMBER_EBUSY)
			self->b = NULL;
	}
	pthread_rwlock_unlock(&self->lock);
	return rc;
}

static void Buffer_dealloc(BufferObject *self)
{
	if (self->b) {
		Py_BEGIN_ALLOW_THREADS
		buffer_close_c(self);
		Py_END_ALLOW_THREADS
	}
	pthread_rwlock_destroy(&self->lock);
	Py_XDECREF(self->graph);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *buffer_raise(BufferObject *self, int rc)
{
	if (rc == EMBER_ESTATE && !self->b)
		return gp_state_error("the buffer");
	return ember_py_raise(rc, self->graph ? self->graph->db : NULL);
}

#define BUFFER_OPEN_OR_RAISE(self)                                                     \
	do {                                                                           \
		if (!(self)->b)                                                        \
			return gp_state_error("the buffer");                          \
	} while (0)

/* Run `call` (a statement setting rc) with the GIL released, under the buffer's
 * exclusive lock, with rc = EMBER_ESTATE when the buffer is closed. */
#define BUFFER_CALL(self, call)                                                        \
	do {                                                                           \
		Py_BEGIN_ALLOW_THREADS                                                 \
		pthread_rwlock_wrlock(&(self)->lock);                                  \
		if ((self)->b) {                                                       \
			call;                                                          \
		} else {                                                               \
			rc = EMBER_ESTATE;                                             \
		}                                                                      \
		pthread_rwlock_unlock(&(self)->lock);                                  \
		Py_END_ALLOW_THREADS                                                   \
	} while (0)

static PyObject *Buffer_close(BufferObject *self, PyObject *unused)
{
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = buffer_close_c(self);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return rc == EMBER_EBUSY ? gp_raise(rc, "close the buffer's samplers first")
					 : ember_py_raise(rc, self->graph->db);
	Py_RETURN_NONE;
}

static PyObject *Buffer_set_ordering(BufferObject *self, PyObject *arg)
{
	if (!PyObject_TypeCheck(arg, &Ordering_Type))
		return PyErr_Format(PyExc_TypeError, "expected an Ordering, got %.80s",
				    Py_TYPE(arg)->tp_name);
	OrderingObject *ord = (OrderingObject *)arg;
	BUFFER_OPEN_OR_RAISE(self);
	if (!ord->ord)
		return gp_state_error("the ordering");
	if (ord->info.partitions != self->partitions || ord->info.capacity != self->capacity)
		return PyErr_Format(PyExc_ValueError,
				    "the ordering is for p = %u, c = %u; the buffer has p = %u, "
				    "c = %u",
				    ord->info.partitions, ord->info.capacity, self->partitions,
				    self->capacity);
	int rc = 0;
	BUFFER_CALL(self, {
		pthread_rwlock_rdlock(&ord->lock);
		rc = ord->ord ? ember_graph_buffer_set_ordering(self->b, ord->ord) : EMBER_EINVAL;
		pthread_rwlock_unlock(&ord->lock);
	});
	if (rc < 0)
		return rc == EMBER_EINVAL && !ord->ord ? gp_state_error("the ordering")
						      : buffer_raise(self, rc);
	Py_RETURN_NONE;
}

/* set_plan(states, bucket_state): states int64 (S, c); bucket_state int64 (p * p),
 * -1 for a bucket no state trains. */
static PyObject *Buffer_set_plan(BufferObject *self, PyObject *args)
{
	PyObject *ostates, *obuckets;
	if (!PyArg_ParseTuple(args, "OO", &ostates, &obuckets))
		return NULL;
	BUFFER_OPEN_OR_RAISE(self);
	Py_buffer sv, bv;
	if (ember_py_buffer_get(ostates, "states", 'i', 8, 2, 0, &sv) < 0)
		return NULL;
	if (ember_py_buffer_get(obuckets, "bucket_state", 'i', 8, 1, 0, &bv) < 0) {
		ember_py_buffer_release(&sv);
		return NULL;
	}
	PyObject *ret = NULL;
	uint32_t *st = NULL, *bs = NULL;
	uint32_t p = self->partitions;
	Py_ssize_t ns = sv.shape[0];
	if (sv.shape[1] != (Py_ssize_t)self->capacity || ns < 1 || ns > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError, "states: must have shape (S >= 1, %u)",
			     self->capacity);
		goto out;
	}
	if (bv.shape[0] != (Py_ssize_t)p * p) {
		PyErr_Format(PyExc_ValueError, "bucket_state: must have %u entries (p * p)",
			     p * p);
		goto out;
	}
	st = malloc((size_t)ns * self->capacity * 4);
	bs = malloc((size_t)p * p * 4);
	if (!st || !bs) {
		PyErr_NoMemory();
		goto out;
	}
	const int64_t *s64 = sv.buf, *b64 = bv.buf;
	for (Py_ssize_t i = 0; i < ns * (Py_ssize_t)self->capacity; i++) {
		if (s64[i] < 0 || s64[i] >= p) {
			PyErr_Format(PyExc_ValueError, "states[%zd][%zd] = %lld is not a partition",
				     i / self->capacity, i % self->capacity, (long long)s64[i]);
			goto out;
		}
		st[i] = (uint32_t)s64[i];
	}
	for (size_t i = 0; i < (size_t)p * p; i++) {
		if (b64[i] < -1 || b64[i] >= ns) {
			PyErr_Format(PyExc_ValueError, "bucket_state[%zu] = %lld is not a state or -1",
				     i, (long long)b64[i]);
			goto out;
		}
		bs[i] = b64[i] < 0 ? EMBER_GRAPH_NO_STATE : (uint32_t)b64[i];
	}
	ember_graph_plan plan = {p, self->capacity, (uint32_t)ns, st, bs};
	int rc = 0;
	BUFFER_CALL(self, rc = ember_graph_buffer_set_plan(self->b, &plan));
	if (rc < 0) {
		buffer_raise(self, rc);
		goto out;
	}
	ret = Py_None;
	Py_INCREF(ret);
out:
	free(st);
	free(bs);
	ember_py_buffer_release(&sv);
	ember_py_buffer_release(&bv);
	return ret;
}

/* next_state() -> None when the plan has run out, else (index, partitions as
 * int64 bytes, edges, nodes). */
static PyObject *Buffer_next_state(BufferObject *self, PyObject *unused)
{
	BUFFER_OPEN_OR_RAISE(self);
	int64_t *parts;
	PyObject *pb = gp_bytes((size_t)self->capacity * 8, (void **)&parts);
	if (!pb)
		return NULL;
	ember_graph_state st;
	int rc = 0;
	BUFFER_CALL(self, {
		rc = ember_graph_buffer_next_state(self->b, &st);
		if (rc == 0)
			for (uint32_t k = 0; k < self->capacity; k++)
				parts[k] = st.partitions[k];
	});
	if (rc == EMBER_ENOTFOUND) {
		Py_DECREF(pb);
		self->state_edges = self->state_nodes = 0;
		Py_RETURN_NONE;
	}
	if (rc < 0) {
		Py_DECREF(pb);
		return buffer_raise(self, rc);
	}
	self->state_edges = st.edges;
	self->state_nodes = st.nodes;
	return Py_BuildValue("(INKK)", st.index, pb, (unsigned long long)st.edges,
			     (unsigned long long)st.nodes);
}

static int gp_cap(PyObject *args, uint64_t most, size_t *cap)
{
	unsigned long long c;
	if (!PyArg_ParseTuple(args, "K", &c))
		return -1;
	if (c < 1) {
		PyErr_SetString(PyExc_ValueError, "cap must be at least 1");
		return -1;
	}
	*cap = (size_t)(c < most ? c : most);
	if (*cap == 0)
		*cap = 1;
	return 0;
}

/* next_batch(cap) -> bytes of n int64 (src, dst, rel) triples; empty when the
 * state has no more examples. */
static PyObject *Buffer_next_batch(BufferObject *self, PyObject *args)
{
	size_t cap, n = 0;
	if (gp_cap(args, self->state_edges, &cap) < 0)
		return NULL;
	BUFFER_OPEN_OR_RAISE(self);
	ember_graph_edge *e = malloc(cap * sizeof(*e));
	if (!e)
		return PyErr_NoMemory();
	int rc = 0;
	BUFFER_CALL(self, rc = ember_graph_buffer_next_batch(self->b, e, cap, &n));
	if (rc < 0) {
		free(e);
		return buffer_raise(self, rc);
	}
	int64_t *o;
	PyObject *out = gp_bytes(n * 24, (void **)&o);
	for (size_t k = 0; out && k < n; k++) {
		o[3 * k] = (int64_t)e[k].src;
		o[3 * k + 1] = (int64_t)e[k].dst;
		o[3 * k + 2] = (int64_t)e[k].rel;
	}
	free(e);
	return out;
}

/* next_nodes(cap) -> bytes of n int64 training nodes; empty when done. */
static PyObject *Buffer_next_nodes(BufferObject *self, PyObject *args)
{
	size_t cap, n = 0;
	if (gp_cap(args, self->state_nodes, &cap) < 0)
		return NULL;
	BUFFER_OPEN_OR_RAISE(self);
	uint64_t *v;
	PyObject *out = gp_bytes(cap * 8, (void **)&v);
	if (!out)
		return NULL;
	int rc = 0;
	BUFFER_CALL(self, rc = ember_graph_buffer_next_nodes(self->b, v, cap, &n));
	if (rc < 0) {
		Py_DECREF(out);
		return buffer_raise(self, rc);
	}
	if (n < cap && PyByteArray_Resize(out, (Py_ssize_t)n * 8) < 0) {
		Py_DECREF(out);
		return NULL;
	}
	return out;
}

/* gather(nodes) -> bytes of n x dim float32: the rows of nodes of the state. */
static PyObject *Buffer_gather(BufferObject *self, PyObject *arg)
{
	BUFFER_OPEN_OR_RAISE(self);
	ember_py_ids ids;
	if (gp_ids(arg, "nodes", self->num_nodes, &ids) < 0)
		return NULL;
	float *rows;
	PyObject *out = gp_bytes((size_t)ids.n * self->dim * 4, (void **)&rows);
	int rc = 0;
	if (out)
		BUFFER_CALL(self, rc = ember_graph_buffer_gather(self->b, (size_t)ids.n,
								 (const uint64_t *)ids.ids, rows));
	ember_py_ids_release(&ids);
	if (rc < 0) {
		Py_DECREF(out);
		return buffer_raise(self, rc);
	}
	return out;
}

/* update(nodes, rows, mode): rows float32 (n, dim), C-contiguous. */
static PyObject *Buffer_update(BufferObject *self, PyObject *args)
{
	PyObject *onodes, *orows;
	int mode;
	if (!PyArg_ParseTuple(args, "OOi", &onodes, &orows, &mode))
		return NULL;
	BUFFER_OPEN_OR_RAISE(self);
	if (mode != EMBER_GRAPH_UPDATE_ADD && mode != EMBER_GRAPH_UPDATE_SET)
		return PyErr_Format(PyExc_ValueError, "mode = %d is neither ADD nor SET", mode);
	ember_py_ids ids;
	if (gp_ids(onodes, "nodes", self->num_nodes, &ids) < 0)
		return NULL;
	Py_buffer rv;
	if (ember_py_buffer_get(orows, "rows", 'f', 4, 2, 0, &rv) < 0) {
		ember_py_ids_release(&ids);
		return NULL;
	}
	PyObject *ret = NULL;
	if (rv.shape[0] != ids.n || rv.shape[1] != (Py_ssize_t)self->dim) {
		PyErr_Format(PyExc_ValueError, "rows: must have shape (%zd, %u), got (%zd, %zd)",
			     ids.n, self->dim, rv.shape[0], rv.shape[1]);
		goto out;
	}
	int rc = 0;
	BUFFER_CALL(self, rc = ember_graph_buffer_update(self->b, (size_t)ids.n,
							 (const uint64_t *)ids.ids, rv.buf, mode));
	if (rc < 0) {
		buffer_raise(self, rc);
		goto out;
	}
	ret = Py_None;
	Py_INCREF(ret);
out:
	ember_py_buffer_release(&rv);
	ember_py_ids_release(&ids);
	return ret;
}

static PyObject *Buffer_flush(BufferObject *self, PyObject *unused)
{
	BUFFER_OPEN_OR_RAISE(self);
	int rc = 0;
	BUFFER_CALL(self, rc = ember_graph_buffer_flush(self->b));
	if (rc < 0)
		return buffer_raise(self, rc);
	Py_RETURN_NONE;
}

static PyObject *Buffer_stats(BufferObject *self, PyObject *unused)
{
	BUFFER_OPEN_OR_RAISE(self);
	ember_graph_buffer_stats s;
	int rc = 0;
	BUFFER_CALL(self, rc = ember_graph_buffer_stats_get(self->b, &s));
	if (rc < 0)
		return buffer_raise(self, rc);
	return Py_BuildValue(
		"{sKsKsKsKsKsKsKsKsKsKsKsKsIsdsdsdsdsdsKsK}", "states",
		(unsigned long long)s.states, "partitions_loaded",
		(unsigned long long)s.partitions_loaded, "partitions_read",
		(unsigned long long)s.partitions_read, "partitions_reclaimed",
		(unsigned long long)s.partitions_reclaimed, "partitions_written",
		(unsigned long long)s.partitions_written, "clean_evictions",
		(unsigned long long)s.clean_evictions, "reads_after_write",
		(unsigned long long)s.reads_after_write, "buckets_read",
		(unsigned long long)s.buckets_read, "bytes_read", (unsigned long long)s.bytes_read,
		"bytes_written", (unsigned long long)s.bytes_written, "memory_bytes",
		(unsigned long long)s.memory_bytes, "memory_peak", (unsigned long long)s.memory_peak,
		"slots", s.slots, "wait_seconds", s.wait_seconds, "read_seconds", s.read_seconds,
		"write_seconds", s.write_seconds, "update_seconds", s.update_seconds,
		"update_wait_seconds", s.update_wait_seconds, "updates_async",
		(unsigned long long)s.updates_async, "states_prepared",
		(unsigned long long)s.states_prepared);
}

static PyObject *Buffer_closed(BufferObject *self, void *unused)
{
	return PyBool_FromLong(self->b == NULL);
}

static PyMethodDef Buffer_methods[] = {
	{"close", (PyCFunction)Buffer_close, METH_NOARGS,
	 "Write back dirty partitions and free the buffer (BusyError while samplers are "
	 "open)."},
	{"set_ordering", (PyCFunction)Buffer_set_ordering, METH_O,
	 "set_ordering(ordering): the next epoch's plan from an Ordering."},
	{"set_plan", (PyCFunction)Buffer_set_plan, METH_VARARGS,
	 "set_plan(states int64 (S, c), bucket_state int64 (p*p), -1 = none)."},
	{"next_state", (PyCFunction)Buffer_next_state, METH_NOARGS,
	 "next_state() -> None at the plan's end, else (index, partitions bytes, edges, "
	 "nodes)."},
	{"next_batch", (PyCFunction)Buffer_next_batch, METH_VARARGS,
	 "next_batch(cap) -> bytearray of int64 (src, dst, rel) triples."},
	{"next_nodes", (PyCFunction)Buffer_next_nodes, METH_VARARGS,
	 "next_nodes(cap) -> bytearray of int64 training nodes."},
	{"gather", (PyCFunction)Buffer_gather, METH_O,
	 "gather(nodes) -> bytearray of float32 rows (n x dim)."},
	{"update", (PyCFunction)Buffer_update, METH_VARARGS,
	 "update(nodes, rows float32 (n, dim), mode): write rows back (ADD or SET)."},
	{"flush", (PyCFunction)Buffer_flush, METH_NOARGS,
	 "Write back every dirty resident partition."},
	{"stats", (PyCFunction)Buffer_stats, METH_NOARGS, "Counters since open, a dict."},
	{NULL}};

static PyGetSetDef Buffer_getset[] = {{"closed", (getter)Buffer_closed, NULL, NULL, NULL},
				      {NULL}};

static PyTypeObject Buffer_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.Buffer",
	.tp_basicsize = sizeof(BufferObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Buffer(graph, capacity, prefetch_slots=None, flags=0, memory_budget=0, "
		  "seed=0): the partition buffer.",
	.tp_new = Buffer_new,
	.tp_init = (initproc)Buffer_init,
	.tp_dealloc = (destructor)Buffer_dealloc,
	.tp_methods = Buffer_methods,
	.tp_getset = Buffer_getset,
};

/* ---- Sampler ------------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD
	ember_graph_sampler *s; /* NULL once closed (under mu) */
	BufferObject *buffer;   /* keeps the buffer open */
	size_t last_nodes;      /* num_nodes of the last run (gather's row count) */
	int ran;
	pthread_mutex_t mu;     /* L3 */
} SamplerObject;

static PyTypeObject Sampler_Type;

static PyObject *Sampler_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	SamplerObject *self = (SamplerObject *)type->tp_alloc(type, 0);
	if (self && pthread_mutex_init(&self->mu, NULL) != 0) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	return (PyObject *)self;
}

/* Sampler(buffer, fanouts, direction=0, seed=0) */
static int Sampler_init(SamplerObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"buffer", "fanouts", "direction", "seed", NULL};
	PyObject *buffer, *ofan;
	unsigned int direction = 0;
	unsigned long long seed = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|IK", kwlist, &Buffer_Type, &buffer,
					 &ofan, &direction, &seed))
		return -1;
	BufferObject *b = (BufferObject *)buffer;
	if (self->s || self->buffer) {
		PyErr_SetString(PyExc_TypeError, "Sampler.__init__ called twice");
		return -1;
	}
	if (!b->b) {
		gp_state_error("the buffer");
		return -1;
	}
	if (!b->all_edges) {
		PyErr_SetString(PyExc_ValueError,
				"sampling needs a buffer opened with all_edges (flag "
				"GRAPH_BUFFER_ALL_EDGES)");
		return -1;
	}
	if (direction > EMBER_GRAPH_SAMPLE_BOTH) {
		PyErr_Format(PyExc_ValueError, "direction = %u is not IN, OUT or BOTH",
			     direction);
		return -1;
	}
	ember_graph_sampler_options o;
	ember_graph_sampler_options_default(&o);
	PyObject *fast = PySequence_Fast(ofan, "fanouts must be a sequence of ints");
	if (!fast)
		return -1;
	Py_ssize_t nl = PySequence_Fast_GET_SIZE(fast);
	if (nl < 1 || nl > EMBER_GRAPH_MAX_LAYERS) {
		Py_DECREF(fast);
		PyErr_Format(PyExc_ValueError, "fanouts must have 1..%u layers",
			     EMBER_GRAPH_MAX_LAYERS);
		return -1;
	}
	o.layers = (uint32_t)nl;
	for (Py_ssize_t i = 0; i < nl; i++) {
		if (gp_u32(PySequence_Fast_GET_ITEM(fast, i), "fanouts[i]", 0, UINT32_MAX,
			   &o.fanouts[i]) < 0) {
			Py_DECREF(fast);
			return -1;
		}
	}
	Py_DECREF(fast);
	o.direction = direction;
	o.seed = seed;
	ember_graph_sampler *s = NULL;
	int rc = 0;
	BUFFER_CALL(b, rc = ember_graph_sampler_open(b->b, &o, &s));
	if (rc < 0) {
		buffer_raise(b, rc);
		return -1;
	}
	self->s = s;
	Py_INCREF(b);
	self->buffer = b;
	return 0;
}

static void sampler_close_c(SamplerObject *self)
{
	pthread_mutex_lock(&self->mu);
	if (self->s) {
		/* the buffer counts its samplers: closed under its exclusive lock, so
		 * no trainer call or buffer close sees it half done */
		pthread_rwlock_wrlock(&self->buffer->lock);
		ember_graph_sampler_close(self->s);
		self->s = NULL;
		pthread_rwlock_unlock(&self->buffer->lock);
	}
	pthread_mutex_unlock(&self->mu);
}

static void Sampler_dealloc(SamplerObject *self)
{
	if (self->s) {
		Py_BEGIN_ALLOW_THREADS
		sampler_close_c(self);
		Py_END_ALLOW_THREADS
	}
	pthread_mutex_destroy(&self->mu);
	Py_XDECREF(self->buffer);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Sampler_close(SamplerObject *self, PyObject *unused)
{
	Py_BEGIN_ALLOW_THREADS
	sampler_close_c(self);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

/* The sample's arrays as int64 bytearrays: nodes, hop_offsets, edge_offsets,
 * edge_dst, edge_src. Called with the GIL, under the sampler's lock. */
static PyObject *sample_arrays(const ember_graph_sample *sm)
{
	size_t ne = sm->edge_offsets[sm->layers];
	int64_t *nodes, *hops, *eoff, *dst, *src;
	PyObject *a = gp_bytes(sm->num_nodes * 8, (void **)&nodes);
	PyObject *b = gp_bytes(((size_t)sm->layers + 2) * 8, (void **)&hops);
	PyObject *c = gp_bytes(((size_t)sm->layers + 1) * 8, (void **)&eoff);
	PyObject *d = gp_bytes(ne * 8, (void **)&dst);
	PyObject *e = gp_bytes(ne * 8, (void **)&src);
	if (!a || !b || !c || !d || !e) {
		Py_XDECREF(a);
		Py_XDECREF(b);
		Py_XDECREF(c);
		Py_XDECREF(d);
		Py_XDECREF(e);
		return NULL;
	}
	for (size_t i = 0; i < sm->num_nodes; i++)
		nodes[i] = (int64_t)sm->nodes[i];
	for (uint32_t i = 0; i < sm->layers + 2; i++)
		hops[i] = (int64_t)sm->hop_offsets[i];
	for (uint32_t i = 0; i < sm->layers + 1; i++)
		eoff[i] = (int64_t)sm->edge_offsets[i];
	for (size_t i = 0; i < ne; i++) {
		dst[i] = sm->edge_dst[i];
		src[i] = sm->edge_src[i];
	}
	return Py_BuildValue("(NNNNN)", a, b, c, d, e);
}

/* run(roots) -> (nodes, hop_offsets, edge_offsets, edge_dst, edge_src), int64
 * bytearrays; edge ends are local ids (indices into nodes). */
static PyObject *Sampler_run(SamplerObject *self, PyObject *arg)
{
	if (!self->s)
		return gp_state_error("the sampler");
	ember_py_ids ids;
	if (gp_ids(arg, "roots", self->buffer->num_nodes, &ids) < 0)
		return NULL;
	ember_graph_sample sm;
	int rc = 0;
	PyObject *out = NULL;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	pthread_rwlock_rdlock(&self->buffer->lock);
	if (self->s && self->buffer->b)
		rc = ember_graph_sampler_run(self->s, (size_t)ids.n, (const uint64_t *)ids.ids,
					     &sm);
	else
		rc = EMBER_ESTATE;
	pthread_rwlock_unlock(&self->buffer->lock);
	Py_END_ALLOW_THREADS
	/* the GIL is back; the sample's arrays are the sampler's until its next run,
	 * which the held mutex keeps out (L6) */
	if (rc == 0) {
		out = sample_arrays(&sm);
		self->last_nodes = sm.num_nodes;
		self->ran = 1;
	}
	int closed = !self->s;
	pthread_mutex_unlock(&self->mu);
	ember_py_ids_release(&ids);
	if (rc < 0)
		return closed ? gp_state_error("the sampler") : buffer_raise(self->buffer, rc);
	return out;
}

/* gather() -> bytes of num_nodes x dim float32: the last sample's rows. */
static PyObject *Sampler_gather(SamplerObject *self, PyObject *unused)
{
	if (!self->s)
		return gp_state_error("the sampler");
	if (!self->ran)
		return gp_raise(EMBER_ESTATE, "the sampler has not run");
	float *rows;
	size_t n = self->last_nodes;
	PyObject *out = gp_bytes(n * self->buffer->dim * 4, (void **)&rows);
	if (!out)
		return NULL;
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	pthread_rwlock_rdlock(&self->buffer->lock);
	if (self->s && self->buffer->b && self->last_nodes == n)
		rc = ember_graph_sampler_gather(self->s, rows, n);
	else
		rc = EMBER_ESTATE;
	pthread_rwlock_unlock(&self->buffer->lock);
	pthread_mutex_unlock(&self->mu);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		Py_DECREF(out);
		return self->s ? buffer_raise(self->buffer, rc) : gp_state_error("the sampler");
	}
	return out;
}

static PyObject *Sampler_closed(SamplerObject *self, void *unused)
{
	return PyBool_FromLong(self->s == NULL);
}

static PyMethodDef Sampler_methods[] = {
	{"close", (PyCFunction)Sampler_close, METH_NOARGS, "Close the sampler."},
	{"run", (PyCFunction)Sampler_run, METH_O,
	 "run(roots) -> (nodes, hop_offsets, edge_offsets, edge_dst, edge_src) int64 "
	 "bytearrays."},
	{"gather", (PyCFunction)Sampler_gather, METH_NOARGS,
	 "gather() -> bytearray of float32 rows of the last sample's nodes."},
	{NULL}};

static PyGetSetDef Sampler_getset[] = {
	{"closed", (getter)Sampler_closed, NULL, NULL, NULL}, {NULL}};

static PyTypeObject Sampler_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.Sampler",
	.tp_basicsize = sizeof(SamplerObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Sampler(buffer, fanouts, direction=0, seed=0): multi-hop sampling over "
		  "the buffer's current state.",
	.tp_new = Sampler_new,
	.tp_init = (initproc)Sampler_init,
	.tp_dealloc = (destructor)Sampler_dealloc,
	.tp_methods = Sampler_methods,
	.tp_getset = Sampler_getset,
};

static PyMethodDef gp_functions[] = {
	{"graph_import", (PyCFunction)(void (*)(void))gp_import, METH_VARARGS | METH_KEYWORDS,
	 "graph_import(store, name, path, partitions, dim, *, format=0, binary_fields=2, "
	 "num_nodes=0, seed=0, init=0, init_scale=0.1, node_data_path=None, "
	 "train_nodes_path=None, tmp_dir=None, memory_budget=0, chunk_bytes=0) -> dict"},
	{"ordering_beta_swaps", gp_beta_swaps, METH_VARARGS,
	 "ordering_beta_swaps(p, c) -> BETA's swap count."},
	{"ordering_lower_bound", gp_lower_bound, METH_VARARGS,
	 "ordering_lower_bound(p, c) -> the fewest swaps of any all-pairs ordering."},
	{NULL}};

static int gp_add_int(PyObject *m, const char *name, long long v)
{
	return PyModule_AddObject(m, name, PyLong_FromLongLong(v));
}

int emb_graph_init(PyObject *m)
{
	PyTypeObject *types[] = {&Graph_Type, &Ordering_Type, &Buffer_Type, &Sampler_Type};
	const char *names[] = {"Graph", "Ordering", "Buffer", "Sampler"};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (PyType_Ready(types[i]) < 0)
			return -1;
		Py_INCREF(types[i]);
		if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
			Py_DECREF(types[i]);
			return -1;
		}
	}
	if (PyModule_AddFunctions(m, gp_functions) < 0)
		return -1;
	struct {
		const char *name;
		long long v;
	} consts[] = {
		{"GRAPH_ORDERING_BETA", EMBER_GRAPH_ORDERING_BETA},
		{"GRAPH_ORDERING_COMET", EMBER_GRAPH_ORDERING_COMET},
		{"GRAPH_ORDERING_SEQUENTIAL", EMBER_GRAPH_ORDERING_SEQUENTIAL},
		{"GRAPH_TEXT", EMBER_GRAPH_TEXT},
		{"GRAPH_BINARY", EMBER_GRAPH_BINARY},
		{"GRAPH_INIT_UNIFORM", EMBER_GRAPH_INIT_UNIFORM},
		{"GRAPH_INIT_ZERO", EMBER_GRAPH_INIT_ZERO},
		{"GRAPH_INIT_FILE", EMBER_GRAPH_INIT_FILE},
		{"GRAPH_BUFFER_READ_ONLY", EMBER_GRAPH_BUFFER_READ_ONLY},
		{"GRAPH_BUFFER_ALL_EDGES", EMBER_GRAPH_BUFFER_ALL_EDGES},
		{"GRAPH_UPDATE_ADD", EMBER_GRAPH_UPDATE_ADD},
		{"GRAPH_UPDATE_SET", EMBER_GRAPH_UPDATE_SET},
		{"GRAPH_SAMPLE_IN", EMBER_GRAPH_SAMPLE_IN},
		{"GRAPH_SAMPLE_OUT", EMBER_GRAPH_SAMPLE_OUT},
		{"GRAPH_SAMPLE_BOTH", EMBER_GRAPH_SAMPLE_BOTH},
		{"GRAPH_MAX_PARTITIONS", EMBER_GRAPH_MAX_PARTITIONS},
		{"GRAPH_MAX_LAYERS", EMBER_GRAPH_MAX_LAYERS},
		{"GRAPH_MAX_DIM", EMBER_GRAPH_MAX_DIM},
	};
	for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
		if (gp_add_int(m, consts[i].name, consts[i].v) < 0)
			return -1;
	return 0;
}
