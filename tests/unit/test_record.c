/*
 * test_record.c - record layout, checksum coverage, value copy, the copy checked
 * on the way out (rec_checksum_copy) and the sequence lock's seal.
 */
#include <ember.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "log/record.h"
#include "test_util.h"

/* Called at one stack depth, one after another, as lookup.c's completions are. */
static __attribute__((noinline)) int copy_check(struct record *r, void *dst, size_t cap)
{
	return rec_checksum_copy(r, dst, cap);
}

/* Scribbles 128 bytes over the stack where copy_check's frame was, n bytes below
 * this frame's top: a sweep of n overwrites a hash state left there one window at
 * a time (some windows hit its secret and spare its seed field, the case xxHash's
 * reset_withSeed gets wrong on a state that was not cleared). */
static __attribute__((noinline)) void scribble(size_t n)
{
	volatile uint8_t junk[n];
	for (size_t i = 0; i < 128 && i < n; i++)
		junk[i] = (uint8_t)(0xa5 ^ i);
	(void)junk;
}

/* rec_checksum_copy: the same verdict as rec_checksum for every size around its
 * threshold, the value copied exactly when it is large and fits, damage found in
 * the copying path too, and no state carried from one call to the next (the same
 * record checked again after the stack was scribbled over). */
static void test_checksum_copy(tu_rng *rng)
{
	const uint32_t sizes[] = {0, 100, REC_COPY_MIN - 1, REC_COPY_MIN, REC_COPY_MIN + 1,
				  2 * REC_COPY_BLOCK, 2 * REC_COPY_BLOCK + 7, 39839, 200u << 10};
	size_t cap = (256u << 10) + 4096;
	uint8_t *mem = em_alloc_aligned(64, cap);
	uint8_t *val = malloc(cap), *dst = malloc(cap);
	CHECK(mem && val && dst, "alloc");
	for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
		uint32_t vlen = sizes[t], klen = (uint32_t)tu_rng_range(rng, 1, 60);
		uint8_t key[60];
		tu_rng_fill(rng, key, klen);
		tu_rng_fill(rng, val, vlen);
		/* at an offset a disk read leaves it at: 8-aligned, not 64 */
		struct record *r = (struct record *)(void *)(mem + 8 * tu_rng_below(rng, 8));
		rec_init(r, 4096, 0, key, klen, val, vlen, rec_cap_for(vlen));
		r->checksum = rec_checksum(r);
		int big = vlen >= REC_COPY_MIN;
		for (size_t n = 128; n <= 4096; n += 32) {
			memset(dst, 0xee, cap);
			CHECK(copy_check(r, dst, cap) == big, "size %u: verdict (after %zu)", vlen, n);
			CHECK(!big || memcmp(dst, val, vlen) == 0, "size %u: copy", vlen);
			scribble(n);
		}
		memset(dst, 0xee, cap);
		CHECK(copy_check(r, dst, vlen ? vlen - 1 : 0) == 0 && dst[0] == 0xee,
		      "size %u: too small a buffer: checked, nothing copied", vlen);
		if (vlen) {
			uint32_t off = (uint32_t)tu_rng_below(rng, vlen);
			rec_value(r)[off] ^= 0x20;
			CHECK(copy_check(r, dst, cap) == -1, "size %u: flip at %u not found", vlen,
			      off);
			rec_value(r)[off] ^= 0x20;
		}
		atomic_fetch_or(&r->header, REC_TOMBSTONE);
		r->checksum = rec_checksum(r);
		memset(dst, 0xee, cap);
		CHECK(copy_check(r, dst, cap) == 0 && dst[0] == 0xee, "size %u: tombstone", vlen);
	}
	free(val);
	free(dst);
	em_free(mem, cap);
}

int main(int argc, char **argv)
{
	tu_init("test_record", argc, argv);
	tu_rng rng;
	tu_rng_seed(&rng, tu_seed());
	CHECK(rec_size(1, 0) == 40 && rec_size(8, 8) == 48 && rec_size(9, 16) == 64, "sizes");
	CHECK(rec_cap_for(0) == 0 && rec_cap_for(1) == 8 && rec_cap_for(100) == 104, "caps");

	uint8_t *mem = em_alloc_aligned(64, 1 << 16);
	CHECK(mem != NULL, "alloc");
	for (int iter = 0; iter < 200; iter++) {
		uint32_t klen = (uint32_t)tu_rng_range(&rng, 1, 300);
		uint32_t vlen = (uint32_t)tu_rng_range(&rng, 0, 2000);
		uint8_t key[300], val[2000];
		tu_rng_fill(&rng, key, klen);
		tu_rng_fill(&rng, val, vlen);
		struct record *r = (struct record *)(void *)mem;
		rec_init(r, 12345 * 8, 0, key, klen, val, vlen, rec_cap_for(vlen));
		CHECK(rec_prev(r) == 12345 * 8 && rec_key_eq(r, key, klen), "header/key");
		CHECK(rec_total_size(r) == rec_size(klen, rec_cap_for(vlen)), "size");
		CHECK(((uintptr_t)rec_value(r) & 7) == 0, "value aligned");
		uint8_t out[2000];
		rec_value_load(r, out, vlen);
		CHECK(memcmp(out, val, vlen) == 0, "value load");
		/* every byte of header, key and value is covered by the checksum */
		uint32_t sum = rec_checksum(r);
		uint64_t covered = REC_HDR_SIZE + em_align_up(klen, 8) + vlen;
		for (int flips = 0; flips < 20; flips++) {
			uint64_t off = tu_rng_below(&rng, covered);
			if (off >= 8 && off < 16)
				continue; /* seq and the checksum itself */
			if (off >= REC_HDR_SIZE + klen && off < REC_HDR_SIZE + em_align_up(klen, 8))
				continue; /* key padding */
			if (off >= 16 && off < 32)
				continue; /* lengths (checked below) and reserved */
			uint8_t bit = (uint8_t)(1u << tu_rng_below(&rng, 8));
			mem[off] ^= bit;
			CHECK(rec_checksum(r) != sum, "flip at %llu not detected", (unsigned long long)off);
			mem[off] ^= bit;
		}
		CHECK(rec_checksum(r) == sum, "checksum is a pure function");
		if (vlen > 0) {
			atomic_store(&r->val_len, vlen - 1);
			CHECK(rec_checksum(r) != sum, "value length covered");
			atomic_store(&r->val_len, vlen);
		}
		r->val_cap += 8;
		CHECK(rec_checksum(r) != sum, "capacity covered");
		r->val_cap -= 8;
		/* in-place store of a shorter value */
		uint32_t n2 = (uint32_t)tu_rng_below(&rng, vlen + 1);
		rec_value_store(r, val + (vlen - n2), n2);
		rec_value_load(r, out, n2);
		CHECK(memcmp(out, val + (vlen - n2), n2) == 0, "value store");
	}
	/* sequence lock: lock/unlock keeps it even; seal makes later locks fail */
	struct record *r = (struct record *)(void *)mem;
	uint8_t k = 1;
	rec_init(r, 0, 0, &k, 1, NULL, 0, 0);
	CHECK(rec_lock(r) == 0 && (atomic_load(&r->seq) & 1), "locked is odd");
	rec_unlock(r, 0);
	CHECK(!(atomic_load(&r->seq) & 1), "unlocked is even");
	CHECK(rec_lock(r) == 0, "relock");
	rec_unlock(r, 1);
	CHECK(rec_lock(r) == -1, "sealed record refuses the lock");
	/* the counter wraps without setting the seal bit */
	atomic_store(&r->seq, REC_SEQ_COUNT - 1);
	CHECK(rec_lock(r) == 0, "lock near wrap");
	rec_unlock(r, 0);
	CHECK(!(atomic_load(&r->seq) & REC_SEQ_SEALED) && atomic_load(&r->seq) == 0, "wrap");
	em_free(mem, 1 << 16);
	test_checksum_copy(&rng);
	printf("ok\n");
	return 0;
}
