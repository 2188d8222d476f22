/*
 * ember_cache.h - Ember's embedding cache: a bounded set of embedding rows in memory,
 * kept ahead of a trainer by an oracle that knows the trainer's future batches
 * (Bagpipe's lookahead cache), backed by an Ember store.
 *
 * How a trainer uses it
 * ---------------------
 *   1. Open a store (ember_open) and a cache over it (ember_cache_open) naming the
 *      tables (rows, dim), the capacity in rows, and the lookahead window.
 *   2. Push future batches (ember_cache_push) as soon as the data loader has them,
 *      up to `window` batches ahead of the one being trained.
 *   3. For each batch, in push order: ember_cache_acquire() returns it once every
 *      row it names is resident: a slot per lookup and a pointer to the slots'
 *      memory. Read the rows, update them in place, ember_cache_release().
 *   4. ember_cache_flush() writes every updated row back to the store (before a
 *      checkpoint); ember_cache_close() flushes too.
 *   With slots in GPU memory (slots = EMBER_CACHE_SLOTS_GPU), step 3 happens on
 *   the device: the view also carries the slots' arena, the lookups' slot indices
 *   in device memory and an event `ready` to make the trainer's stream wait on;
 *   release takes the event of the trainer's last work on the batch (`done`).
 *
 * Behind the calls, one prefetcher thread per cache plans each pushed batch (which
 * rows to admit, which to evict: the one whose next use in the window is farthest),
 * writes evicted updated rows back to the store with ember_put_batch and reads the
 * admitted rows with ember_get_batch (many reads in flight), while the trainer
 * computes. Every read sees every earlier update: exactly as if the trainer read
 * and wrote the store directly, in batch order. docs/cache.md has the design.
 *
 * Rows in the store
 * -----------------
 * Row `row` of table `t` is stored under the 8-byte key
 * (uint64_t)t << 48 | row, little-endian (so tables < 65536 and rows < 2^48), and
 * its value is `dim` elements in the table's storage format (fp32, or fp16 with
 * EMBER_CACHE_STORE_FP16), little-endian, followed by the table's optimizer state
 * (ember_cache_state_floats fp32 values, little-endian; none by default). A row the
 * store does not hold is initialised as its table's init, or else
 * ember_cache_options.init, says (zero, or uniform random from a seed, the same for
 * a given seed, table and row whenever it is first read), with zero state.
 *
 * Objects and threads
 * -------------------
 *   ember_cache  One cache over one ember_db. It opens its own sessions on the db
 *                (one for the prefetcher, one for flush/close) and holds them until
 *                ember_cache_close(); close the cache before the db.
 *                Two roles may run concurrently: the loader, which calls
 *                ember_cache_push (one thread at a time), and the trainer, which
 *                calls acquire, try_acquire, apply, release, flush, read_rows and
 *                write_rows (one thread at a time; they may be different threads,
 *                one after another). So a data-loader thread keeps the lookahead
 *                full while the trainer computes. ember_cache_close is called by
 *                one thread once both roles are done.
 *                ember_cache_stats() may be called from any thread at any time.
 *   ember_cache_view  What acquire returns: valid until the matching release.
 *
 * Return values: 0 or a negative EMBER_E* code (ember_strerror() explains it).
 *
 * Ownership: the library copies what the caller passes (batches, options, tables)
 * and never keeps or frees a caller's buffer; the one object it keeps is the
 * ember_gpu context of GPU slots when the caller passes one (borrowed, see
 * ember_cache_options.gpu). The arrays a view points to belong to
 * the cache and stay valid until ember_cache_release() of that view.
 */
#ifndef EMBER_CACHE_H
#define EMBER_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ember.h"
#include "ember_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits. */
#define EMBER_CACHE_MAX_TABLES 65535u           /* tables per cache */
#define EMBER_CACHE_MAX_ROWS (1ull << 48)       /* rows per table */
#define EMBER_CACHE_MAX_DIM 65536u              /* elements per row */
#define EMBER_CACHE_MAX_CAPACITY 0x7fffffffull   /* slots (2^31 - 1: the oracle's
						    * queues index twice that) */
#define EMBER_CACHE_MAX_WINDOW (1u << 20)         /* batches of lookahead */

/* ember_cache_table.storage: how a row's elements are kept in the store. Slots
 * always hold fp32. */
enum {
	EMBER_CACHE_STORE_FP32 = 0, /* default: 4 bytes per element */
	EMBER_CACHE_STORE_FP16 = 1, /* IEEE half, 2 bytes per element (rounded to
				       nearest even on write-back; values beyond the
				       half range become +-inf) */
};

/* ember_cache_options.init: the value of a row the store does not hold. */
enum {
	EMBER_CACHE_INIT_ZERO = 0,    /* default: all elements 0 */
	EMBER_CACHE_INIT_UNIFORM = 1, /* each element uniform in [-init_scale, init_scale),
					 a function of (init_seed, table, row, element) */
};

/* ember_cache_options.slots: where the slots (the cached rows) live. */
enum {
	EMBER_CACHE_SLOTS_HOST = 0, /* default: host memory */
	EMBER_CACHE_SLOTS_GPU = 1,  /* an ember_gpu arena (device memory on the CUDA
				       backend, plain memory on the host backend): see
				       "GPU slots" below and docs/cache.md */
};

/* ember_cache_table.optimizer: the optimizer state kept beside each row. The state
 * is fp32 whatever the row's storage, stored in the same value as the row (after
 * its elements), fetched, evicted and written back with it, and 0 for a row the
 * store does not hold. */
enum {
	EMBER_CACHE_OPT_NONE = 0,            /* default: no state (SGD) */
	EMBER_CACHE_OPT_ADAGRAD = 1,         /* dim accumulators (sum of squared gradients) */
	EMBER_CACHE_OPT_ROWWISE_ADAGRAD = 2, /* one accumulator per row (sum of the mean
						squared gradient), as FBGEMM's row-wise
						Adagrad */
};

/* ember_cache_table.init: a table's own init, overriding ember_cache_options.init. */
enum {
	EMBER_CACHE_TABLE_INIT_CACHE = 0,   /* default: as ember_cache_options says */
	EMBER_CACHE_TABLE_INIT_ZERO = 1,    /* all elements 0 */
	EMBER_CACHE_TABLE_INIT_UNIFORM = 2, /* uniform in [-init_scale, init_scale) of this
					       table (init_scale 0: 0.01), from init_seed of
					       this table */
};

/* One embedding table. */
typedef struct ember_cache_table {
	uint64_t rows;      /* required: row ids are 0 .. rows-1 (at most EMBER_CACHE_MAX_ROWS) */
	uint32_t dim;       /* required: elements per row, 1 .. EMBER_CACHE_MAX_DIM */
	uint32_t storage;   /* EMBER_CACHE_STORE_*; 0: fp32 */
	uint32_t optimizer; /* EMBER_CACHE_OPT_*; 0: no state */
	uint32_t init;      /* EMBER_CACHE_TABLE_INIT_*; 0: the cache's init */
	float init_scale;   /* with EMBER_CACHE_TABLE_INIT_UNIFORM; finite, >= 0; 0: 0.01 */
	uint32_t reserved_; /* must be 0 */
	uint64_t init_seed; /* with EMBER_CACHE_TABLE_INIT_UNIFORM */
} ember_cache_table;

/*
 * Options for ember_cache_open(). Zero the struct (or call
 * ember_cache_options_default()) and set the required fields; every optional field
 * left at zero takes its default.
 */
typedef struct ember_cache_options {
	/* ---- required ---- */
	const ember_cache_table *tables; /* ntables entries; copied */
	uint32_t ntables;                /* 1 .. EMBER_CACHE_MAX_TABLES */

	/* ---- optional ---- */

	/* Rows the cache holds at most, over all tables together. One batch may not
	 * name more distinct rows than this (push returns EMBER_ETOOBIG). Memory:
	 * capacity x slot size (the largest row, fp32, rounded up to 16 bytes).
	 * Default: 1% of all rows, at least 1024 (and at most all rows). */
	uint64_t capacity;
	/* Lookahead window: how many batches may be pushed and not yet released.
	 * The oracle plans each batch knowing the batches pushed after it in the
	 * window, so a longer window gives better evictions and costs the pushed
	 * batches' memory: per batch about 12 bytes a lookup and 60 bytes a
	 * distinct row (a 16,384 x 26 Criteo-like batch: about 10 MB). Default
	 * 100. */
	uint32_t window;
	/* How many batches ahead of the oldest unreleased one the prefetcher plans
	 * and fetches at most. Planning later means knowing more of the future (the
	 * oracle plans batch b when b is within prefetch_batches of the trainer,
	 * seeing the batches pushed up to then); planning earlier means more time to
	 * fetch. The prefetcher also stops planning ahead while the distinct rows of
	 * the planned, unreleased batches would fill more than half the capacity.
	 * 1 .. window. Default: window / 4, at least 1, at most 8. */
	uint32_t prefetch_batches;
	/* Prefetch parallelism: keys per ember_get_batch / ember_put_batch call
	 * (their disk reads are in flight together, up to the store's
	 * io_queue_depth). Default 1024. */
	uint32_t prefetch_depth;
	/* Where slots live: EMBER_CACHE_SLOTS_*. Default host. */
	uint32_t slots;
	/* Rows absent from the store: EMBER_CACHE_INIT_*. Default zero. */
	uint32_t init;
	/* EMBER_CACHE_INIT_UNIFORM's bound. Default 0.01. Must be finite and >= 0. */
	float init_scale;
	/* EMBER_CACHE_INIT_UNIFORM's seed (0 is a seed like any other). */
	uint64_t init_seed;

	/* ---- GPU slots: only with slots = EMBER_CACHE_SLOTS_GPU (all three must
	 * stay zero with host slots: EMBER_EINVAL otherwise) ---- */

	/* The ember_gpu context whose arena holds the slots. BORROWED: the caller
	 * opened it, keeps it open until ember_cache_close() has returned, and closes
	 * it afterwards (ember_gpu_close returns EMBER_EBUSY while the cache's arena,
	 * staging ring and events are alive). The cache uses the context's H2D and
	 * D2H copy streams 0 (ember_gpu_stream_get); other users of those streams are
	 * merely serialised with it. NULL: the cache opens its own context from
	 * gpu_backend and gpu_device, OWNS it and closes it in ember_cache_close(). */
	ember_gpu *gpu;
	/* With gpu == NULL: EMBER_GPU_BACKEND_* of the cache's own context. Default
	 * AUTO (CUDA when built with it and device gpu_device exists, else host).
	 * Must be 0 when gpu is given. */
	int gpu_backend;
	/* With gpu == NULL: the CUDA device ordinal (device = cuda:N), >= 0. Default
	 * 0. Must be 0 when gpu is given. */
	int gpu_device;
} ember_cache_options;

/* Fill *opts with zero (defaults) and no tables. opts must not be NULL. */
void ember_cache_options_default(ember_cache_options *opts);

typedef struct ember_cache ember_cache;

/*
 * Lookups of one table in a batch: rows[0..n-1] (duplicates allowed). A table may
 * appear in several parts of one batch.
 */
typedef struct ember_cache_part {
	uint32_t table;
	uint32_t n;
	const uint64_t *rows; /* may be NULL when n is 0 */
} ember_cache_part;

/* A batch: nparts parts (nparts may be 0: an empty batch). */
typedef struct ember_cache_batch {
	uint32_t nparts;
	const ember_cache_part *parts;
} ember_cache_batch;

/* ember_cache_view.flags, set by the trainer before release. */
#define EMBER_CACHE_VIEW_READONLY 0x1u /* the trainer did not change the batch's rows:
					  release marks none of them dirty */

/*
 * An acquired batch. slots[p][i] is the slot of the i-th lookup of the batch's
 * part p (in the order pushed); its row is the `dim` floats at
 *     slot_memory + (size_t)slots[p][i] * slot_stride
 * (ember_cache_row() computes it). Every lookup of the same (table, row) in the
 * batch has the same slot. The trainer may read and write the rows of the batch
 * in place until release; writing any other slot is undefined.
 *
 * GPU slots (EMBER_CACHE_SLOTS_GPU)
 * ---------------------------------
 * slot_memory is then the arena's base, a DEVICE pointer on the CUDA backend (the
 * host must not dereference it, nor ember_cache_row()'s result); cache slot s is
 * arena slot s (ember_gpu_arena_row(arena, s)); every slot holds the widest table's
 * dim floats, a narrower table's row followed by zeros (keep them zero: only the
 * table's dim elements are written back). The batch's rows and dev_slots are
 * ready only once `ready` has completed: before any device work on the batch, make
 * the stream doing it wait (ember_gpu_stream_wait_event(s, view.ready); the host
 * never blocks), or ember_gpu_event_synchronize(view.ready) before touching the
 * rows from the host (host backend). With them a trainer typically
 *   - gathers the batch tensor: ember_gpu_gather(s, arena, dev_slots, nlookups,
 *     out, 0) (lookup order, parts one after another, duplicates included);
 *   - updates the rows: ember_gpu_scatter_apply(s, arena, dev_slots, nlookups,
 *     grads, &upd) (duplicates summed), or its own kernels on slot_memory;
 *   - records an event after its last work on the batch's rows and hands it to
 *     release in `done`. The cache orders everything it later does to those slots
 *     (refilling them, copying evicted dirty rows back) after that event, without
 *     blocking. done == NULL tells the cache that all such work has already
 *     completed (the trainer synchronized, or worked on the host).
 * `ready` and dev_slots belong to the cache and stay valid until the release.
 */
typedef struct ember_cache_view {
	uint64_t batch;               /* OUT: the batch's number (0 for the first pushed) */
	uint32_t nparts;              /* OUT: as pushed */
	const ember_cache_part *parts;/* OUT: the batch's parts (the cache's copy of the ids) */
	const uint32_t *const *slots; /* OUT: slots[p][i] */
	float *slot_memory;           /* OUT: slot 0's row (host memory; with GPU slots
					 the arena's base: a device pointer on CUDA) */
	size_t slot_stride;           /* OUT: floats from one slot to the next */
	uint32_t flags;               /* IN (before release): EMBER_CACHE_VIEW_* */
	uint32_t reserved_;
	/* GPU slots only (NULL with host slots; nlookups is set for both): */
	ember_gpu *gpu;               /* OUT: the slots' context (the caller's, or the
					 cache's own: streams and events the trainer
					 creates from it must be destroyed before
					 ember_cache_close) */
	ember_gpu_arena *arena;       /* OUT: the slots' arena (for gather, scatter-apply) */
	const uint32_t *dev_slots;    /* OUT: device memory, nlookups slot indices: the
					 parts' slots[p][i] one part after another */
	uint64_t nlookups;            /* OUT: lookups of the batch (sum of parts' n) */
	ember_gpu_event *ready;       /* OUT: wait on it before device work on the batch */
	ember_gpu_event *done;        /* IN (before release): the trainer's event recorded
					 after its last device work on the batch's rows, or
					 NULL when that work has completed. Set to NULL by
					 acquire. */
	void *internal_;              /* the cache's own; do not touch */
	uint64_t nslots;              /* OUT: slots in slot_memory (the capacity): slot
					 indices are < nslots, and slot_memory spans
					 nslots * slot_stride floats */
} ember_cache_view;

/* The row of lookup i of part p of an acquired view (its optimizer state, if the
 * table has one, follows at + dim). */
float *ember_cache_row(const ember_cache_view *v, uint32_t p, uint32_t i);

/* Floats of optimizer state after a row of the table: 0 (EMBER_CACHE_OPT_NONE), dim
 * (EMBER_CACHE_OPT_ADAGRAD) or 1 (EMBER_CACHE_OPT_ROWWISE_ADAGRAD); 0 for a bad table
 * or NULL cache. */
uint32_t ember_cache_state_floats(const ember_cache *cache, uint32_t table);

/* Fused optimizer update: ember_cache_apply's hyper-parameters. */
typedef struct ember_cache_update {
	float lr;           /* learning rate, finite (may be 0 or negative) */
	float eps;          /* Adagrad's epsilon, finite, >= 0; 0: 1e-10 (torch's
			       default). Unused by tables without state. */
	float weight_decay; /* L2 penalty added to the gradient (g + wd * w), finite, >= 0 */
	uint32_t reserved_; /* must be 0 */
} ember_cache_update;

/*
 * Apply gradients to the rows of part `part` of an acquired view with the table's
 * optimizer: grads holds one row of dim floats per lookup of the part, in lookup
 * order (row i at grads + i * grad_stride floats; grad_stride >= dim, 0: dim).
 * The gradients of lookups naming the same row are summed first (in lookup order),
 * then each distinct row is updated once:
 *   EMBER_CACHE_OPT_NONE (SGD):         w -= lr * g
 *   EMBER_CACHE_OPT_ADAGRAD:            s += g * g;        w -= lr * g / (sqrt(s) + eps)
 *   EMBER_CACHE_OPT_ROWWISE_ADAGRAD:    s += mean(g * g);  w -= lr * g / (sqrt(s) + eps)
 * (g with weight decay: g + weight_decay * w), exactly as torch.optim.SGD and
 * torch.optim.Adagrad (lr_decay 0, initial accumulator 0) update a dense table
 * whose gradient is the same sum. Host slots only (GPU slots: ember_gpu_scatter_apply
 * on the view's arena). The cache's calls on one view are the trainer's (one thread).
 * EMBER_EINVAL: NULL arguments, part out of range, grad_stride < dim, a bad update,
 * GPU slots. EMBER_ESTATE: view is not the batch now acquired. EMBER_ENOMEM.
 */
int ember_cache_apply(ember_cache *cache, ember_cache_view *view, uint32_t part,
		      const float *grads, size_t grad_stride, const ember_cache_update *upd);

/*
 * Read rows through the cache: out[i * dim ..] = row rows[i] of `table` as the next
 * batch acquired would see it (every update of every released batch, rows still
 * dirty in the cache included; a row nobody wrote is its init). state_out, if not
 * NULL, gets the rows' optimizer state (ember_cache_state_floats floats each).
 * Does not change what is cached, nor the cache's statistics of batches.
 * Write rows through the cache: the store and every cached copy take the given
 * rows (and state: state_in NULL keeps each row's state as it is), as if a
 * released batch had written them: every batch acquired afterwards sees them.
 * Both may be called while batches are pushed (from the loader thread) but not
 * while a batch is acquired; like flush, they run on the prefetcher between its
 * rounds and wait for it. Rows in fp16 storage are rounded on write (to nearest
 * even). Duplicates in rows: read gives each its value; write applies them in order.
 * EMBER_EINVAL: NULL arguments with n > 0, table out of range, a row id >= the
 * table's rows. EMBER_ESTATE: a batch is acquired, or the prefetcher failed.
 * EMBER_ENOMEM; store errors pass through.
 */
int ember_cache_read_rows(ember_cache *cache, uint32_t table, size_t n, const uint64_t *rows,
			  float *out, float *state_out);
int ember_cache_write_rows(ember_cache *cache, uint32_t table, size_t n, const uint64_t *rows,
			   const float *in, const float *state_in);

/* A snapshot of a cache's counters (since open). */
typedef struct ember_cache_stats {
	uint64_t batches_pushed;
	uint64_t batches_planned;
	uint64_t batches_released;
	uint64_t lookups;            /* ids pushed, duplicates included */
	uint64_t unique_rows;        /* distinct (table, row) per batch, summed over batches */
	uint64_t hits;               /* distinct rows of planned batches already resident */
	uint64_t rows_fetched;       /* rows read into slots (misses) */
	uint64_t rows_absent;        /* of those, rows the store did not hold (initialised) */
	uint64_t rows_evicted;       /* rows whose slot was given to another row */
	uint64_t rows_written_back;  /* dirty rows written to the store (evicted or flushed) */
	uint64_t bytes_fetched;      /* value bytes read from the store */
	uint64_t bytes_written_back; /* value bytes written to the store */
	uint64_t wait_ns;            /* time the trainer spent blocked in acquire */
	uint64_t prefetch_idle_ns;   /* time the prefetcher had nothing to do */
	uint64_t prefetch_busy_ns;   /* time the prefetcher spent fetching and writing back */
	uint64_t plan_ns;            /* time the oracle spent linking and planning batches */
	uint64_t fetch_rounds;       /* ember_get_batch calls of the prefetcher */
	uint64_t resident;           /* rows in slots now */
	uint64_t capacity;           /* slots */
} ember_cache_stats;

/*
 * Open a cache over db. On success *cache is set and the prefetcher thread runs;
 * on failure *cache is left NULL. EMBER_EINVAL: NULL arguments, no tables, a table
 * with rows or dim of 0 or out of range, an unknown storage/optimizer/init/slots
 * value, a table's init_scale not finite or < 0 or its reserved_ not 0,
 * prefetch_batches > window, capacity > EMBER_CACHE_MAX_CAPACITY, window >
 * EMBER_CACHE_MAX_WINDOW; with host slots,
 * gpu, gpu_backend or gpu_device set; with GPU slots, tables of different
 * optimizers or EMBER_CACHE_OPT_ROWWISE_ADAGRAD (not supported there yet: the
 * arena holds Adagrad's state or none), gpu given together with
 * gpu_backend or gpu_device, an unknown gpu_backend, gpu_device < 0, or a context
 * ember_gpu_open refuses (CUDA asked for but not built, no such device).
 * EMBER_ENOMEM: out of memory (host, pinned or device). Errors of
 * ember_session_open and of ember_gpu pass through (EMBER_EIO: a device failure).
 */
int ember_cache_open(ember_db *db, const ember_cache_options *opts, ember_cache **cache);

/*
 * Stop the prefetcher, write every dirty row back (as ember_cache_flush) and free
 * everything. Batches pushed and not released are dropped; updates made to a batch
 * acquired and not released may or may not reach the store (release it first).
 * Returns 0, or the first error of the final write-back or of the prefetcher (the
 * cache is freed either way). Accepts NULL.
 */
int ember_cache_close(ember_cache *cache);

/*
 * Hand over a future batch (copied). Never blocks on I/O.
 * EMBER_EAGAIN: `window` batches are pushed and not released; release one first.
 * EMBER_EINVAL: NULL cache or batch, parts NULL with nparts > 0, rows NULL with
 *   n > 0, an unknown table, or a row id >= the table's rows. Nothing is pushed.
 * EMBER_ETOOBIG: the batch names more distinct rows than the capacity, or (GPU
 *   slots) more than 2^31 - 1 lookups (the kernels' limit).
 * EMBER_ENOSPC: 2^32 - 3 batches were pushed in the cache's life (reopen it).
 * EMBER_ENOMEM, and EMBER_ESTATE after a prefetcher failure (see acquire).
 */
int ember_cache_push(ember_cache *cache, const ember_cache_batch *batch);

/*
 * Acquire the oldest pushed batch that is not yet acquired, waiting until every
 * row it names is resident. At most one batch is acquired at a time.
 * EMBER_EINVAL: NULL arguments. EMBER_ESTATE: a batch is already acquired, or no
 * batch is pushed (nothing to wait for). A failure of the prefetcher (a store
 * error while reading or writing back rows) is returned by this call and every
 * later one (the cache is then only good for ember_cache_close).
 */
int ember_cache_acquire(ember_cache *cache, ember_cache_view *view);

/* As ember_cache_acquire, but returns EMBER_EAGAIN instead of waiting. */
int ember_cache_try_acquire(ember_cache *cache, ember_cache_view *view);

/*
 * Release the acquired batch: its rows become dirty (unless view->flags has
 * EMBER_CACHE_VIEW_READONLY) and may be evicted as the plan says. With GPU slots,
 * view->done (if not NULL) orders the cache's later device work on the batch's
 * slots after it (the host does not block). EMBER_EINVAL: NULL arguments, or a
 * done event of another ember_gpu context (the batch stays acquired).
 * EMBER_ESTATE: view is not the batch now acquired (never acquired, already
 * released, or from another cache).
 */
int ember_cache_release(ember_cache *cache, ember_cache_view *view);

/*
 * Write every dirty row back to the store and wait until the writes are done, so
 * that the store holds every update of every released batch (for a checkpoint).
 * Rows stay resident and clean. EMBER_ESTATE: a batch is acquired (release it
 * first), or the prefetcher failed earlier.
 */
int ember_cache_flush(ember_cache *cache);

/* Fill *out (from any thread; figures may lag slightly). EMBER_EINVAL on NULL. */
int ember_cache_stats_get(ember_cache *cache, ember_cache_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_CACHE_H */
