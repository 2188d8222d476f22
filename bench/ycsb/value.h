/*
 * value.h - self-checking values for ember-ycsb --verify.
 *
 * Without --verify a value is random bytes with a stamp in its first 8 bytes
 * (nothing is checked). With --verify every value written says which key it
 * belongs to and which write produced it, so a read can tell a right value from a
 * wrong one (another key's), a torn one (bytes of two writes) or a truncated one:
 *
 *   offset  size      meaning
 *   0       8         version: the key's write counter. 0 when written by the load
 *                     or an insert; an update writes the key's last version + 1,
 *                     and a read-modify-write adds 1 (ycsb_value_modify() counts
 *                     in these bytes, the same code for every engine)
 *   8       8         key number
 *   16      8         generation: a number drawn afresh by each load / insert /
 *                     update write (read-modify-writes keep it)
 *   24      n - 24    pattern: ycsb_value_pattern(key, generation), 8 bytes at a
 *                     time, the last word cut to fit
 *
 * All fields are little-endian. A value must be exactly the configured size, so
 * --verify needs --value-size >= YCSB_VERIFY_MIN_VALUE.
 *
 * Exact versions (run.c): under --verify every key has one writer for updates and
 * read-modify-writes, the run thread key % threads, so its versions go 0, 1, 2, ...
 * with no gaps. The owner publishes each version (an atomic store) after the write
 * returns; a read loads the published version before it begins and after it ends
 * and checks the version it got with ycsb_version_check(): never older than the
 * one published before it began (a stale read), exactly that one when the reader
 * is the key's owner, and never past one above the one published when it ended (a
 * version never written). The final read-back wants exactly the last version.
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

/* Write a value of `size` (>= YCSB_VERIFY_MIN_VALUE) bytes for key, its version
 * `version` and generation gen. */
static inline void ycsb_value_fill(unsigned char *v, size_t size, uint64_t key, uint64_t gen,
				   uint64_t version)
{
	ycsb_put_le64(v, version);
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

/*
 * Check the version `got` a read returned (bytes 0..7 of a value that passed
 * ycsb_value_check) against the key's published versions: `before`, loaded before
 * the read began, and `after`, loaded after it returned; own: the reader is the
 * key's owning writer (nothing else writes the key), and `before` is then the
 * version of its last write of the key -- with --inflight possibly still in
 * flight, which the read must see (one thread's operations on a key take effect
 * in the order started: engine.h).
 * 0, or -1 with a one-line reason in why.
 */
static inline int ycsb_version_check(uint64_t got, uint64_t before, uint64_t after, int own,
				     char *why, size_t cap)
{
	if (got < before) {
		snprintf(why, cap, "stale read: version %llu, but version %llu had been "
			 "written (its write returned) before the read began",
			 (unsigned long long)got, (unsigned long long)before);
		return -1;
	}
	if (own && got != before) {
		snprintf(why, cap, "the owning writer read version %llu of its key, want "
			 "exactly %llu, that of its own last write started", (unsigned long long)got,
			 (unsigned long long)before);
		return -1;
	}
	if (got > after + 1) {
		snprintf(why, cap, "version %llu was never written (the key's writer had "
			 "reached %llu when the read ended, one more at most in flight)",
			 (unsigned long long)got, (unsigned long long)after);
		return -1;
	}
	return 0;
}

#endif /* YCSB_VALUE_H */
