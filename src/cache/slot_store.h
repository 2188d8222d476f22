/*
 * slot_store.h - where the cache's slots live, and the one place that moves row
 * bytes into and out of them.
 *
 * The cache never touches slot memory except through these calls (and the
 * trainer, through the pointer a view hands out). Rows cross this interface in
 * the store's format (fp32 or fp16, little-endian, `dim` elements, then the
 * row's `state` fp32 optimizer values); slots always hold fp32, the state after
 * the row (host slots: at + dim; GPU slots: at + max_dim, the arena's layout).
 * Two kinds of slots:
 *   HOST  one anonymous mapping (slot_store.c): writes and reads are memcpy /
 *         conversions on the calling thread, complete when the call returns.
 *   GPU   an ember_gpu arena (slot_store_gpu.c, docs/cache.md "GPU slots"): rows
 *         are read from the store straight into pinned staging buffers, installed
 *         by the install kernel on the context's H2D stream (asynchronous: the
 *         batch's `ready` event, recorded by slot_store_publish, covers them);
 *         evicted rows are gathered and copied back on the D2H stream, and
 *         slot_store_read returns once they are in host memory.
 *
 * A fetch round is: slot_store_stage (buffers for n rows) -> the store reads into
 * them -> slot_store_write (or slot_store_unstage on an error).
 *
 * Threads: a slot_store has no lock. The cache's protocol (cache.c, invariants
 * C3-C5, G1-G4) guarantees that a slot is written or read here only while no
 * trainer batch uses it. stage/write/unstage/read/publish are the prefetcher's
 * (or, after it was joined, the closing thread's); slot_store_order is the
 * trainer's (release); the ember_gpu streams are thread-safe.
 */
#ifndef EMBER_CACHE_SLOT_STORE_H
#define EMBER_CACHE_SLOT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "ember_gpu.h"

struct slot_store {
	uint32_t where;       /* EMBER_CACHE_SLOTS_* */
	uint32_t nslots;
	size_t stride;        /* floats per slot */
	size_t bytes;         /* mapping size (host) */
	float *mem;           /* host: the mapping; GPU: the arena's base */
	uint32_t max_dim;     /* floats per slot's row (the widest table) */
	uint32_t depth;       /* rows per stage/write/read call at most */
	uint32_t buf_floats;  /* room of one staged row, in floats: host, the widest
				 dim + state; GPU, max_dim + state_floats */
	uint32_t state_floats;/* GPU: the arena's state floats after max_dim (0 or
				 max_dim); host: 0 (the state follows each row) */

	/* GPU slots only */
	ember_gpu *g;
	int own_g;                 /* the cache opened g and closes it */
	ember_gpu_arena *arena;
	ember_gpu_stream *h2d, *d2h; /* the context's copy streams 0 (not owned) */
	ember_gpu_staging *ring;
	ember_gpu_event *installed;  /* recorded on h2d after each install round */
	ember_gpu_event *downloaded; /* recorded on d2h after each eviction copy */
	size_t rows_off;             /* bytes from a staging buffer to its rows */
	uint32_t *dev_idx_in;        /* depth slot indices of the install round (device) */
	uint32_t *dev_idx_out;       /* depth slot indices of the eviction round (device) */
	float *dev_rows_out;         /* depth packed rows gathered for eviction (device) */
	int staged;                  /* a staging buffer is held by stage */
	uint32_t stage_idx;
	uint8_t *stage_buf;
};

/* How to reach the device, for where == EMBER_CACHE_SLOTS_GPU. */
struct slot_gpu_config {
	ember_gpu *gpu;  /* borrowed context, or NULL: open one from backend, device */
	int backend;     /* EMBER_GPU_BACKEND_* */
	int device;
};

/* A batch's device-side state (GPU slots): its lookups' slot indices in device
 * memory and the event that says they and its rows are in place. */
struct slot_batch_dev {
	uint32_t *dev_slots;
	size_t cap;               /* uint32_t entries dev_slots holds */
	ember_gpu_event *ready;
};

/* One row moving: slot <-> buf (store format: storage EMBER_CACHE_STORE_*, then
 * `state` fp32 values of optimizer state). */
struct slot_move {
	uint32_t slot;
	uint32_t dim;
	uint32_t storage;
	uint32_t state; /* floats of optimizer state after the row (0: none) */
	void *buf;
};

/* Bytes of one row of dim elements in the store's format. */
size_t slot_row_bytes(uint32_t dim, uint32_t storage);

/* Bytes of one row of dim elements and `state` floats of state in the store. */
static inline size_t slot_value_bytes(uint32_t dim, uint32_t storage, uint32_t state)
{
	return slot_row_bytes(dim, storage) + (size_t)state * sizeof(float);
}

/* where: EMBER_CACHE_SLOTS_HOST or _GPU (gpu must then be given; ignored for
 * host). max_dim: the widest row. max_floats: the most floats of a row and its
 * state (host slots' width; >= max_dim). gpu_state: EMBER_GPU_STATE_* of the
 * arena (GPU slots; 0 for host). depth: rows per call at most (>= 1).
 * Returns 0, EMBER_EINVAL, EMBER_ENOMEM, or an ember_gpu error. On failure *ss is
 * zeroed (slot_store_close on it is a no-op). */
int slot_store_open(struct slot_store *ss, uint32_t where, uint32_t nslots, uint32_t max_dim,
		    uint32_t max_floats, int gpu_state, uint32_t depth,
		    const struct slot_gpu_config *gpu);
/* Waits for the device work on the slots, frees everything. Accepts a zeroed ss.
 * Returns 0 or the first ember_gpu error (everything is freed either way). */
int slot_store_close(struct slot_store *ss);

/* The first slot's row, as the trainer addresses it (host memory, or the arena's
 * base: a device pointer on CUDA). */
static inline float *slot_store_base(const struct slot_store *ss)
{
	return ss->mem;
}

/*
 * Buffers for the next n (1..depth) rows read from the store: bufs[j], each room
 * for buf_floats fp32 values. host_stage (n * buf_floats * 4 bytes, the cache's) serves
 * host slots; GPU slots hand out rows of a pinned staging buffer (the store reads
 * land there directly), held until slot_store_write or slot_store_unstage.
 */
int slot_store_stage(struct slot_store *ss, size_t n, uint8_t *host_stage, void **bufs);
/* Give back what stage holds without writing (an error between the two). */
void slot_store_unstage(struct slot_store *ss);
/* Fill each m[i].slot from m[i].buf (store format -> fp32). With GPU slots, the
 * bufs must be the ones stage handed out, in order (m[i].buf == bufs[i]); the
 * install is enqueued on the H2D stream and the staging buffer released against
 * it. Returns 0 or an ember_gpu error. */
int slot_store_write(struct slot_store *ss, size_t n, const struct slot_move *m);
/* Copy each m[i].slot into m[i].buf (fp32 -> store format), n <= depth; the rows
 * are in m[].buf when it returns. Returns 0 or an ember_gpu error. */
int slot_store_read(struct slot_store *ss, size_t n, const struct slot_move *m);

/* GPU slots: create / free a batch's device state (ring entry). */
int slot_batch_dev_init(struct slot_store *ss, struct slot_batch_dev *d);
void slot_batch_dev_free(struct slot_store *ss, struct slot_batch_dev *d);
/* GPU slots: upload the batch's n lookup slots (host array) to d->dev_slots on the
 * H2D stream (through staging, growing dev_slots if needed) and record d->ready on
 * that stream after it: ready then covers every install enqueued so far. */
int slot_store_publish(struct slot_store *ss, struct slot_batch_dev *d, const uint32_t *slots,
		       size_t n);
/* GPU slots (the trainer's release): order the cache's later device work on the
 * slots (installs on H2D, eviction copies on D2H) after the trainer's event. */
int slot_store_order(struct slot_store *ss, ember_gpu_event *done);

/* fp16 <-> fp32 (IEEE binary16, round to nearest even). */
uint16_t slot_f32_to_f16(float f);
float slot_f16_to_f32(uint16_t h);

/* Row conversions shared by both kinds (dst/src in store format, dim elements). */
void slot_row_to_f32(float *dst, const void *src, uint32_t dim, uint32_t storage);
void slot_row_from_f32(void *dst, const float *src, uint32_t dim, uint32_t storage);

/* slot_store_gpu.c: the GPU kind (called by slot_store.c's dispatch). */
int slot_gpu_open(struct slot_store *ss, const struct slot_gpu_config *gpu, int state);
int slot_gpu_close(struct slot_store *ss);
int slot_gpu_stage(struct slot_store *ss, size_t n, void **bufs);
void slot_gpu_unstage(struct slot_store *ss);
int slot_gpu_write(struct slot_store *ss, size_t n, const struct slot_move *m);
int slot_gpu_read(struct slot_store *ss, size_t n, const struct slot_move *m);

#endif
