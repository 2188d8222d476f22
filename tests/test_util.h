/*
 * test_util.h - the small harness every Ember test program shares.
 *
 *   - A seeded PRNG (xoshiro256**, seeded through splitmix64). tu_init() takes the
 *     seed from $EMBER_TEST_SEED, or else from the clock, and always prints it
 *     ("seed=N") so that any failure can be replayed with EMBER_TEST_SEED=N.
 *   - $EMBER_TEST_SCALE (a double, default 1.0) scales operation counts: sanitizer
 *     builds run with 0.15-0.25. tu_scaled(n) applies it (never below 1).
 *   - CHECK(cond, fmt, ...) prints file:line, the condition, the message and the
 *     seed, removes the temporary directories the test made (unless
 *     $EMBER_TEST_KEEP is set) and exits 1. CHECK_RC(expr, want) does the same for
 *     an Ember return code and names both codes (needs ember.h).
 *   - tu_tmpdir_make()/tu_tmpdir_remove(): a fresh directory under $TMPDIR (or
 *     /tmp), removed recursively at the end.
 *   - tu_map: a reference map from byte string to byte string (open addressing,
 *     linear probing, tombstones) for differential testing.
 *
 * Thread-safety: tu_init() runs once, before any thread starts. A tu_rng belongs to
 * one thread. A tu_map is not thread-safe. CHECK may be called from any thread (the
 * first failure wins; the process exits).
 *
 * This file does not depend on the Ember library, so tests of internals can use it
 * too. Exit code 77 means "skipped" to meson (TU_SKIP).
 */
#ifndef EMBER_TEST_UTIL_H
#define EMBER_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TU_SKIP 77

/* ---- seed, scale, failure ------------------------------------------------ */

/*
 * Read $EMBER_TEST_SEED and $EMBER_TEST_SCALE, print "<name>: seed=N scale=S",
 * make stdout line-buffered, and seed the global PRNG. If argv holds "--soak",
 * the scale is multiplied by 10 (the 'soak' suite's longer variants).
 */
void tu_init(const char *name, int argc, char **argv);

/* The seed printed by tu_init(). */
uint64_t tu_seed(void);

/* $EMBER_TEST_SCALE (times 10 with --soak). */
double tu_scale(void);

/* n * scale, rounded, at least 1 (for n >= 1). */
uint64_t tu_scaled(uint64_t n);

/* Monotonic clock in seconds. */
double tu_now(void);

__attribute__((noreturn, format(printf, 4, 5))) void
tu_fail(const char *file, int line, const char *cond, const char *fmt, ...);

#define CHECK(cond, ...)                                                            \
	do {                                                                        \
		if (__builtin_expect(!(cond), 0))                                   \
			tu_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);            \
	} while (0)

/* expr must return want (Ember return codes; needs ember.h for ember_strerror). */
#define CHECK_RC(expr, want)                                                        \
	do {                                                                        \
		int tu_rc_ = (expr);                                                \
		int tu_want_ = (want);                                              \
		if (__builtin_expect(tu_rc_ != tu_want_, 0))                        \
			tu_fail(__FILE__, __LINE__, #expr " == " #want,             \
				"got %d (%s), want %d (%s)", tu_rc_,                \
				ember_strerror(tu_rc_), tu_want_,                   \
				ember_strerror(tu_want_));                          \
	} while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

/* ---- PRNG ------------------------------------------------------------------- */

typedef struct tu_rng {
	uint64_t s[4];
} tu_rng;

/* The library's generator (core/rng.h): the same sequences as before, one copy. */
static inline uint64_t tu_splitmix64(uint64_t *x) { return em_splitmix64(x); }

/* A stateless hash of one 64-bit value (one splitmix64 step from it). */
static inline uint64_t tu_mix64(uint64_t x) { return em_splitmix64(&x); }

static inline void tu_rng_seed(tu_rng *r, uint64_t seed) { em_rng_seed(r->s, seed); }

/* xoshiro256** */
static inline uint64_t tu_rng_next(tu_rng *r) { return em_rng_next(r->s); }

/* Uniform in [0, n); n > 0. (Lemire's multiply; the bias is negligible here.) */
static inline uint64_t tu_rng_below(tu_rng *r, uint64_t n) { return em_rng_below(r->s, n); }

/* Uniform in [lo, hi]. */
static inline uint64_t tu_rng_range(tu_rng *r, uint64_t lo, uint64_t hi)
{
	return lo + tu_rng_below(r, hi - lo + 1);
}

/* True with probability num/den. */
static inline bool tu_rng_chance(tu_rng *r, uint64_t num, uint64_t den)
{
	return tu_rng_below(r, den) < num;
}

/* Fill buf with n random bytes. */
void tu_rng_fill(tu_rng *r, void *buf, size_t n);

/* The global PRNG that tu_init() seeded (for single-threaded tests). */
tu_rng *tu_rng_global(void);

/*
 * A per-thread PRNG derived from the test seed and a stream number, so that each
 * worker thread of a concurrent test has its own reproducible stream.
 */
void tu_rng_stream(tu_rng *r, uint64_t stream);

/* ---- temporary directories --------------------------------------------------- */

/*
 * Make a fresh directory "$TMPDIR/ember-<tag>-XXXXXX" (TMPDIR defaults to /tmp) and
 * write its path to out (cap bytes). It is registered so that a failing CHECK also
 * removes it. Returns 0 or -errno.
 */
int tu_tmpdir_make(const char *tag, char *out, size_t cap);

/* Remove path and everything under it (a missing path is fine). Returns 0 or -errno. */
int tu_tmpdir_remove(const char *path);

/* out = dir + "/" + name. Returns 0, or -ENAMETOOLONG if it does not fit in cap. */
int tu_path_join(char *out, size_t cap, const char *dir, const char *name);

/* The inode of the file name, or 0 if it does not exist. */
unsigned long tu_file_ino(const char *name);

/* The inode of the file name, which must then be exactly size bytes with every block
 * allocated (a CHECK), or 0 if it does not exist. */
unsigned long tu_whole_file(const char *name, uint64_t size);

/* ---- reference map --------------------------------------------------------------- */

typedef struct tu_map_entry {
	uint64_t hash;  /* 0: empty slot; 1: tombstone; else the key's hash | 2 */
	uint8_t *bytes; /* key bytes then value bytes, one allocation */
	uint32_t klen;
	uint32_t vlen;
} tu_map_entry;

typedef struct tu_map {
	tu_map_entry *slots;
	size_t cap;   /* a power of two */
	size_t count; /* live entries */
	size_t used;  /* live + tombstones */
	size_t bytes; /* sum of klen + vlen of live entries */
} tu_map;

void tu_map_init(tu_map *m);
void tu_map_free(tu_map *m);

/* Insert or replace. Aborts the test (CHECK) on out of memory. */
void tu_map_put(tu_map *m, const void *key, size_t klen, const void *val, size_t vlen);

/* The live entry for key, or NULL. Valid until the next put/del on m. */
const tu_map_entry *tu_map_get(const tu_map *m, const void *key, size_t klen);

/* Remove key. Returns true if it was present. */
bool tu_map_del(tu_map *m, const void *key, size_t klen);

static inline const uint8_t *tu_map_key(const tu_map_entry *e)
{
	return e->bytes;
}

static inline const uint8_t *tu_map_val(const tu_map_entry *e)
{
	return e->bytes + e->klen;
}

/*
 * Iterate: start with *pos = 0; each call returns the next live entry, or NULL at
 * the end. The map must not change during the iteration.
 */
const tu_map_entry *tu_map_next(const tu_map *m, size_t *pos);

/* A 64-bit hash of a byte string (for keys and checksums; not cryptographic). */
uint64_t tu_hash_bytes(const void *p, size_t n, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_TEST_UTIL_H */
