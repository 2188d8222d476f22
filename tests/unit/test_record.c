/*
 * test_record.c - record layout, checksum coverage, value copy and the
 * sequence lock's seal.
 */
#include <ember.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "log/record.h"
#include "test_util.h"

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
	printf("ok\n");
	return 0;
}
