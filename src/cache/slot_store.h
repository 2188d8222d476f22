/*
 * slot_store.h - where the cache's slots live, and the one place that moves row
 * bytes into and out of them.
 *
 * The cache never touches slot memory except through these calls (and the
 * trainer, through the pointer a view hands out). Rows cross this interface in
 * the store's format (fp32 or fp16, little-endian, `dim` elements); slots always
 * hold fp32. Today slots are host memory; when ember_gpu lands, a device backend
 * implements the same three calls (staging on the host side, copies to device
 * slots) and slot_store_base() returns the device pointer.
 *
 * Threads: a slot_store has no lock. The cache's protocol (cache.c, invariants
 * C3-C5) guarantees that a slot is written or read here only while no trainer
 * batch uses it.
 */
#ifndef EMBER_CACHE_SLOT_STORE_H
#define EMBER_CACHE_SLOT_STORE_H

#include <stddef.h>
#include <stdint.h>

struct slot_store {
	uint32_t where;       /* EMBER_CACHE_SLOTS_* */
	uint32_t nslots;
	size_t stride;        /* floats per slot */
	size_t bytes;         /* mapping size */
	float *mem;
};

/* One row moving: slot <-> buf (store format: storage EMBER_CACHE_STORE_*). */
struct slot_move {
	uint32_t slot;
	uint32_t dim;
	uint32_t storage;
	uint32_t pad_;
	void *buf;
};

/* Bytes of one row of dim elements in the store's format. */
size_t slot_row_bytes(uint32_t dim, uint32_t storage);

/* where: EMBER_CACHE_SLOTS_HOST (else EMBER_EINVAL). max_dim: the widest row.
 * Returns 0, EMBER_EINVAL or EMBER_ENOMEM. */
int slot_store_open(struct slot_store *ss, uint32_t where, uint32_t nslots, uint32_t max_dim);
void slot_store_close(struct slot_store *ss);

/* The first slot's row, as the trainer addresses it (host memory today). */
static inline float *slot_store_base(const struct slot_store *ss)
{
	return ss->mem;
}

/* Fill each m[i].slot from m[i].buf (store format -> fp32). */
void slot_store_write(struct slot_store *ss, size_t n, const struct slot_move *m);
/* Copy each m[i].slot into m[i].buf (fp32 -> store format). */
void slot_store_read(const struct slot_store *ss, size_t n, const struct slot_move *m);

/* fp16 <-> fp32 (IEEE binary16, round to nearest even). */
uint16_t slot_f32_to_f16(float f);
float slot_f16_to_f32(uint16_t h);

#endif
