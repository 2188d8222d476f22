/*
 * record.h - the layout of a record in a log, in memory and on disk.
 *
 *  offset size field
 *  0      8    header: bits 0-47 previous address in the hash chain, bit 48
 *              tombstone, bit 49 invalid (never linked; skipped by scans), bit 50
 *              filler (key length 0: padding up to the end of a memory lap, see
 *              hlog.h), bit 51 read-cache hit (memory only: a read-cache record
 *              read since it was inserted; never on disk), bits 52-63 reserved
 *  8      4    seq: in memory only, a sequence lock for in-place updates (even =
 *              stable, odd = a writer holds it; bit 31 = sealed: the record was
 *              copied to the tail and must not be updated in place any more)
 *  12     4    checksum: 32 bits of XXH3 over header, lengths, key and value;
 *              written when the record's page is flushed, checked on disk reads
 *  16     4    key length (1 .. 64 KiB)
 *  20     4    value length (0 .. value capacity)
 *  24     4    value capacity (a multiple of 8)
 *  28     4    reserved (zero)
 *  32     k    key, padded with zeros to a multiple of 8
 *  32+k'  c    value, capacity c bytes
 *
 * Record size = 32 + align8(key length) + value capacity; records are 8-aligned
 * and dense in the log. Key, key length and capacity never change after the
 * record is published; value, value length and the tombstone bit change only under
 * the sequence lock and only while the record is in the mutable region.
 *
 * Concurrency: value words are read and written with relaxed 8-byte atomics so
 * that the sequence-lock readers are race-free by the C11 model (and under TSan).
 */
#ifndef EMBER_LOG_RECORD_H
#define EMBER_LOG_RECORD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/address.h"
#include "core/cpu.h"
#include "core/hash.h"

#define REC_HDR_SIZE 32u
#define REC_TOMBSTONE (UINT64_C(1) << 48)
#define REC_INVALID (UINT64_C(1) << 49)
#define REC_FILLER (UINT64_C(1) << 50)
#define REC_RC_HIT (UINT64_C(1) << 51) /* read cache: hit since it was (re)inserted */
#define REC_FLAGS_MASK (~EM_ADDR_MASK)
#define REC_SEQ_SEALED (UINT32_C(1) << 31)
#define REC_SEQ_COUNT (REC_SEQ_SEALED - 1)

struct record {
	_Atomic uint64_t header;
	_Atomic uint32_t seq;
	uint32_t checksum;
	uint32_t key_len;
	_Atomic uint32_t val_len;
	uint32_t val_cap;
	uint32_t reserved;
};

_Static_assert(sizeof(struct record) == REC_HDR_SIZE, "record header is 32 bytes");

static inline uint64_t rec_size(uint32_t klen, uint32_t vcap)
{
	return REC_HDR_SIZE + em_align_up(klen, 8) + vcap;
}

static inline uint32_t rec_cap_for(uint64_t vlen) { return (uint32_t)em_align_up(vlen, 8); }

static inline uint8_t *rec_key(struct record *r) { return (uint8_t *)(r + 1); }

static inline uint8_t *rec_value(struct record *r)
{
	return rec_key(r) + em_align_up(r->key_len, 8);
}

static inline uint64_t rec_total_size(const struct record *r) { return rec_size(r->key_len, r->val_cap); }
static inline uint64_t rec_header(struct record *r)
{
	/* relaxed: prev is immutable; flags are re-validated by the seq lock */
	return atomic_load_explicit(&r->header, memory_order_relaxed);
}

static inline uint64_t rec_prev(struct record *r) { return rec_header(r) & EM_ADDR_MASK; }
/* Header flag bits that are never set on disk (REC_RC_HIT and bits 52-63). */
#define REC_RESERVED_BITS (~(EM_ADDR_MASK | REC_TOMBSTONE | REC_INVALID | REC_FILLER))
/* Bytes of a record up to the end of its key (its head). */
static inline uint64_t rec_head_size(const struct record *r)
{
	return REC_HDR_SIZE + em_align_up(r->key_len, 8);
}
static inline int rec_key_eq(struct record *r, const void *key, uint32_t klen)
{
	if (r->key_len != klen)
		return 0;
	if (klen == 8) { /* the common fixed-size key: one compare, no call */
		uint64_t a, b;
		memcpy(&a, rec_key(r), 8);
		memcpy(&b, key, 8);
		return a == b;
	}
	return memcmp(rec_key(r), key, klen) == 0;
}

/* The checksum's hash of everything but the value: the seed of the value's hash. */
static inline uint64_t rec_checksum_seed(struct record *r, uint32_t vlen)
{
	uint64_t hdr = rec_header(r); /* final: flags are set before the page is flushed */
	uint64_t fields[3] = {hdr, ((uint64_t)r->key_len << 32) | vlen, r->val_cap};
	return XXH3_64bits_withSeed(rec_key(r), r->key_len, XXH3_64bits(fields, sizeof(fields)));
}

/* Checksum of a record that nobody writes any more (being flushed, or read back). */
static inline uint32_t rec_checksum(struct record *r)
{
	uint32_t vlen = atomic_load_explicit(&r->val_len, memory_order_relaxed); /* stable */
	uint64_t h = XXH3_64bits_withSeed(rec_value(r), vlen, rec_checksum_seed(r, vlen));
	return (uint32_t)(h ^ (h >> 32));
}

/*
 * rec_checksum() checked against the stored checksum, with the value copied to dst
 * on the way when it is at least REC_COPY_MIN bytes and fits in cap: each block is
 * copied and then hashed while it is still in the cache, one pass over the value
 * instead of two (4 MiB: 0.70 ms against 1.01 ms for a hash, then a copy).
 * Streaming XXH3 gives the one-shot result. Returns -1 (checksum wrong: dst may
 * hold part of the value), 0 (right, nothing copied) or 1 (right, value in dst).
 */
#define REC_COPY_MIN (16u << 10)
#define REC_COPY_BLOCK (16u << 10)

static inline int rec_checksum_copy(struct record *r, void *dst, size_t cap)
{
	uint32_t vlen = atomic_load_explicit(&r->val_len, memory_order_relaxed); /* stable */
	if (vlen < REC_COPY_MIN || vlen > cap || (rec_header(r) & REC_TOMBSTONE))
		return rec_checksum(r) == r->checksum ? 0 : -1;
	XXH3_state_t st;
	/* a state on the stack must be cleared first: reset_withSeed keeps the old
	 * secret when the stale seed field happens to equal the new seed (it did, for
	 * the same record read twice in one batch, with the secret overwritten) */
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset_withSeed(&st, rec_checksum_seed(r, vlen));
	const uint8_t *v = rec_value(r);
	uint8_t *d = dst;
	for (uint32_t o = 0; o < vlen; o += REC_COPY_BLOCK) {
		uint32_t n = vlen - o < REC_COPY_BLOCK ? vlen - o : REC_COPY_BLOCK;
		memcpy(d + o, v + o, n);
		XXH3_64bits_update(&st, v + o, n);
	}
	uint64_t h = XXH3_64bits_digest(&st);
	return (uint32_t)(h ^ (h >> 32)) == r->checksum ? 1 : -1;
}

/* Fill a freshly allocated, unpublished record (plain stores: nobody sees it yet). */
static inline void rec_init(struct record *r, uint64_t prev, uint64_t flags, const void *key,
			    uint32_t klen, const void *val, uint32_t vlen, uint32_t vcap)
{
	atomic_init(&r->header, (prev & EM_ADDR_MASK) | flags);
	atomic_init(&r->seq, 0);
	r->checksum = 0;
	r->key_len = klen;
	atomic_init(&r->val_len, vlen);
	r->val_cap = vcap;
	r->reserved = 0;
	uint8_t *k = rec_key(r);
	memcpy(k, key, klen);
	memset(k + klen, 0, em_align_up(klen, 8) - klen);
	uint8_t *v = k + em_align_up(klen, 8);
	if (vlen)
		memcpy(v, val, vlen);
	memset(v + vlen, 0, vcap - vlen);
}

/* Copy n value bytes out of a record that may be written concurrently (seq lock). */
static inline void rec_value_load(struct record *r, void *dst, uint32_t n)
{
	_Atomic uint64_t *w = (_Atomic uint64_t *)(void *)rec_value(r);
	uint8_t *d = dst;
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		/* relaxed: validated by the sequence lock re-check */
		uint64_t x = atomic_load_explicit(&w[i / 8], memory_order_relaxed);
		memcpy(d + i, &x, 8);
	}
	if (i < n) {
		uint64_t x = atomic_load_explicit(&w[i / 8], memory_order_relaxed); /* as above */
		memcpy(d + i, &x, n - i);
	}
}

/* Write n value bytes into a record under its sequence lock. */
static inline void rec_value_store(struct record *r, const void *src, uint32_t n)
{
	_Atomic uint64_t *w = (_Atomic uint64_t *)(void *)rec_value(r);
	const uint8_t *s = src;
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t x;
		memcpy(&x, s + i, 8);
		/* relaxed: published by the release that unlocks the sequence lock */
		atomic_store_explicit(&w[i / 8], x, memory_order_relaxed);
	}
	if (i < n) {
		uint64_t x = 0;
		memcpy(&x, s + i, n - i);
		atomic_store_explicit(&w[i / 8], x, memory_order_relaxed); /* as above */
	}
}

/* Replace a live value in place (caller holds the record's lock; vlen <= val_cap). */
static inline void rec_write_in_place(struct record *r, const void *val, uint32_t vlen)
{
	rec_value_store(r, val, vlen);
	/* relaxed: ordered by the unlock's release */
	atomic_store_explicit(&r->val_len, vlen, memory_order_relaxed);
	if (atomic_load_explicit(&r->header, memory_order_relaxed) & REC_TOMBSTONE)
		/* rare (a deleted key written again): skip the locked op otherwise */
		atomic_fetch_and_explicit(&r->header, ~REC_TOMBSTONE, memory_order_relaxed);
}

/* Take the record's writer lock. Returns 0, or -1 if the record is sealed. */
static inline int rec_lock(struct record *r)
{
	for (;;) {
		/* relaxed: the CAS below re-validates */
		uint32_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);
		if (s & REC_SEQ_SEALED)
			return -1;
		if (s & 1) {
			cpu_relax();
			continue;
		}
		/* acquire: our writes to the record cannot move before taking the lock */
		if (atomic_compare_exchange_weak_explicit(&r->seq, &s, s + 1, memory_order_acquire,
							  memory_order_relaxed)) {
			/* release fence: a reader that sees any of our value stores also
			 * sees the odd seq (Boehm's seqlock argument; free on x86) */
			atomic_thread_fence(memory_order_release);
			return 0;
		}
	}
}

static inline void rec_unlock(struct record *r, int seal)
{
	uint32_t s = atomic_load_explicit(&r->seq, memory_order_relaxed); /* we own it */
	uint32_t next = ((s + 1) & REC_SEQ_COUNT) | (seal ? REC_SEQ_SEALED : 0);
	/* release: the record's new contents are visible before the lock reads free */
	atomic_store_explicit(&r->seq, next, memory_order_release);
}

#endif
