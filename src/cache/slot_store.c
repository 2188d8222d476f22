/*
 * slot_store.c - host-memory slots, the row format conversions (fp32 and fp16
 * in the store, fp32 in slots), and the dispatch to GPU slots (slot_store_gpu.c).
 * See slot_store.h.
 *
 * Host slot memory is one anonymous mapping (zero pages until touched), each slot
 * `stride` floats: the widest table's row and optimizer state, rounded up to 16
 * bytes so rows stay 16-byte aligned. A row's state follows it at + dim.
 */
#include "cache/slot_store.h"

#include <string.h>
#include <sys/mman.h>

#include "ember.h"
#include "ember_cache.h"

size_t slot_row_bytes(uint32_t dim, uint32_t storage)
{
	return (size_t)dim * (storage == EMBER_CACHE_STORE_FP16 ? 2 : 4);
}

int slot_store_open(struct slot_store *ss, uint32_t where, uint32_t nslots, uint32_t max_dim,
		    uint32_t max_floats, int gpu_state, uint32_t depth,
		    const struct slot_gpu_config *gpu)
{
	memset(ss, 0, sizeof(*ss));
	if (nslots == 0 || max_dim == 0 || depth == 0 || max_floats < max_dim ||
	    (where == EMBER_CACHE_SLOTS_GPU && !gpu) ||
	    (where != EMBER_CACHE_SLOTS_HOST && where != EMBER_CACHE_SLOTS_GPU))
		return EMBER_EINVAL;
	ss->where = where;
	ss->nslots = nslots;
	ss->max_dim = max_dim;
	ss->depth = depth;
	if (where == EMBER_CACHE_SLOTS_GPU) {
		int rc = slot_gpu_open(ss, gpu, gpu_state);
		if (rc < 0)
			memset(ss, 0, sizeof(*ss));
		return rc;
	}
	ss->buf_floats = max_floats;
	ss->stride = ((size_t)max_floats + 3) & ~(size_t)3;
	ss->bytes = (size_t)nslots * ss->stride * sizeof(float);
	void *p = mmap(NULL, ss->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		memset(ss, 0, sizeof(*ss));
		return EMBER_ENOMEM;
	}
	ss->mem = p;
	return 0;
}

int slot_store_close(struct slot_store *ss)
{
	if (!ss || !ss->mem)
		return 0;
	int rc = 0;
	if (ss->where == EMBER_CACHE_SLOTS_GPU)
		rc = slot_gpu_close(ss);
	else
		munmap(ss->mem, ss->bytes);
	memset(ss, 0, sizeof(*ss));
	return rc;
}

uint16_t slot_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t exp = (x >> 23) & 0xffu;
	uint32_t man = x & 0x7fffffu;
	if (exp == 0xff) /* inf, nan (keep a quiet nan) */
		return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
	int32_t e = (int32_t)exp - 127 + 15;
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)sign; /* below half the smallest subnormal */
		man |= 0x800000u;
		uint32_t shift = (uint32_t)(14 - e);
		uint32_t h = man >> shift;
		uint32_t rem = man & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
	uint32_t h = ((uint32_t)e << 10) | (man >> 13);
	uint32_t rem = man & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; /* may carry into the exponent: correct, up to inf */
	return (uint16_t)(sign | h);
}

float slot_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	uint32_t x;
	if (exp == 0) {
		if (man == 0) {
			x = sign;
		} else { /* subnormal: normalise */
			int e = -1;
			do {
				man <<= 1;
				e++;
			} while (!(man & 0x400u));
			x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
		}
	} else if (exp == 0x1f) {
		x = sign | 0x7f800000u | (man << 13);
	} else {
		x = sign | ((exp - 15 + 127) << 23) | (man << 13);
	}
	float f;
	memcpy(&f, &x, 4);
	return f;
}

void slot_row_to_f32(float *dst, const void *src, uint32_t dim, uint32_t storage)
{
	if (storage == EMBER_CACHE_STORE_FP16) {
		/* descending, so that dst may be src (in place: element j's 4 bytes
		 * overwrite fp16 elements 2j and 2j+1, which are >= j, already read) */
		const uint16_t *h = src;
		for (uint32_t j = dim; j-- > 0;) {
			uint16_t x = h[j];
			dst[j] = slot_f16_to_f32(x);
		}
	} else if ((const void *)dst != src) {
		memcpy(dst, src, (size_t)dim * sizeof(float));
	}
}

void slot_row_from_f32(void *dst, const float *src, uint32_t dim, uint32_t storage)
{
	if (storage == EMBER_CACHE_STORE_FP16) {
		uint16_t *h = dst;
		for (uint32_t j = 0; j < dim; j++)
			h[j] = slot_f32_to_f16(src[j]);
	} else {
		memcpy(dst, src, (size_t)dim * sizeof(float));
	}
}

int slot_store_stage(struct slot_store *ss, size_t n, uint8_t *host_stage, void **bufs)
{
	if (n == 0 || n > ss->depth)
		return EMBER_EINVAL;
	if (ss->where == EMBER_CACHE_SLOTS_GPU)
		return slot_gpu_stage(ss, n, bufs);
	for (size_t j = 0; j < n; j++)
		bufs[j] = host_stage + j * (size_t)ss->buf_floats * sizeof(float);
	return 0;
}

void slot_store_unstage(struct slot_store *ss)
{
	if (ss->where == EMBER_CACHE_SLOTS_GPU)
		slot_gpu_unstage(ss);
}

int slot_store_write(struct slot_store *ss, size_t n, const struct slot_move *m)
{
	if (ss->where == EMBER_CACHE_SLOTS_GPU)
		return slot_gpu_write(ss, n, m);
	for (size_t i = 0; i < n; i++) {
		float *s = ss->mem + (size_t)m[i].slot * ss->stride;
		slot_row_to_f32(s, m[i].buf, m[i].dim, m[i].storage);
		memcpy(s + m[i].dim, (const uint8_t *)m[i].buf + slot_row_bytes(m[i].dim, m[i].storage),
		       (size_t)m[i].state * sizeof(float));
	}
	return 0;
}

int slot_store_read(struct slot_store *ss, size_t n, const struct slot_move *m)
{
	if (ss->where == EMBER_CACHE_SLOTS_GPU)
		return slot_gpu_read(ss, n, m);
	for (size_t i = 0; i < n; i++) {
		const float *s = ss->mem + (size_t)m[i].slot * ss->stride;
		slot_row_from_f32(m[i].buf, s, m[i].dim, m[i].storage);
		memcpy((uint8_t *)m[i].buf + slot_row_bytes(m[i].dim, m[i].storage), s + m[i].dim,
		       (size_t)m[i].state * sizeof(float));
	}
	return 0;
}
