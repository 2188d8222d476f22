/*
 * value.h - self-checking values for ember-ycsb --verify.
 *
 * Without --verify a value is random bytes with a stamp in its first 8 bytes
 * (nothing is checked). With --verify every value written says which key it
 * belongs to and which write produced it, so a read can tell a right value from a
 * wrong one (another key's), a torn one (bytes of two writes) or a truncated one:
 *
 *   offset  size      meaning
 *   0       8         version: 0 when written by the load, an insert or an update;
 *                     each read-modify-write adds 1 (ycsb_value_modify() counts in
 *                     these bytes, the same code for every engine)
 *   8       8         key number
 *   16      8         generation: a number drawn afresh by each load / insert /
 *                     update write (read-modify-writes keep it)
 *   24      n - 24    pattern: ycsb_value_pattern(key, generation), 8 bytes at a
 *                     time, the last word cut to fit
 *
 * All fields are little-endian. A value must be exactly the configured size, so
 * --verify needs --value-size >= YCSB_VERIFY_MIN_VALUE.
 *
 * A torn value is caught when the tear separates bytes 16..23 from any later
 * byte (the pattern then belongs to another generation), or the key bytes from the
 * rest (another key's write). A tear inside the first 8 bytes alone (two versions
 * of one counter) is not detectable this way; nothing here claims it is.
 */
#ifndef YCSB_VALUE_H
#define YCSB_VALUE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gen.h"

#define YCSB_VERIFY_MIN_VALUE 24

/* A read's value failed its check (see run.c); -EBADMSG, Linux's "Bad message". */
#define YCSB_EVERIFY (-74)

static inline void ycsb_put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t ycsb_get_le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Word i (0-based, counted from offset 24) of key's pattern for generation gen. */
static inline uint64_t ycsb_value_pattern(uint64_t key, uint64_t gen, uint64_t i)
{
	uint64_t x = key * 0x9e3779b97f4a7c15ull ^ gen ^ (i << 56 | i);

	return ycsb_splitmix64(&x);
}

/* Write a version-0 value of `size` (>= YCSB_VERIFY_MIN_VALUE) bytes for key. */
static inline void ycsb_value_fill(unsigned char *v, size_t size, uint64_t key, uint64_t gen)
{
	ycsb_put_le64(v, 0);
	ycsb_put_le64(v + 8, key);
	ycsb_put_le64(v + 16, gen);
	for (size_t off = 24, i = 0; off < size; off += 8, i++) {
		unsigned char w[8];
		size_t n = size - off < 8 ? size - off : 8;

		ycsb_put_le64(w, ycsb_value_pattern(key, gen, i));
		for (size_t j = 0; j < n; j++)
			v[off + j] = w[j];
	}
}

/*
 * Check a value read back for key: 0 when it is whole and key's, else -1 with a
 * one-line reason in why (capacity cap).
 */
static inline int ycsb_value_check(const unsigned char *v, size_t vlen, size_t size,
				   uint64_t key, char *why, size_t cap)
{
	uint64_t got_key, gen;

	if (vlen != size) {
		snprintf(why, cap, "length %zu, want %zu", vlen, size);
		return -1;
	}
	got_key = ycsb_get_le64(v + 8);
	if (got_key != key) {
		snprintf(why, cap, "bytes 8..15 name key %llu (another key's value)",
			 (unsigned long long)got_key);
		return -1;
	}
	gen = ycsb_get_le64(v + 16);
	for (size_t off = 24, i = 0; off < size; off += 8, i++) {
		unsigned char w[8];
		size_t n = size - off < 8 ? size - off : 8;

		ycsb_put_le64(w, ycsb_value_pattern(key, gen, i));
		for (size_t j = 0; j < n; j++) {
			if (v[off + j] != w[j]) {
				snprintf(why, cap,
					 "byte %zu is 0x%02x, want 0x%02x for generation "
					 "0x%016llx (torn or corrupt)",
					 off + j, v[off + j], w[j], (unsigned long long)gen);
				return -1;
			}
		}
	}
	return 0;
}

#endif /* YCSB_VALUE_H */
