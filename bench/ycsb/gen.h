/*
 * gen.h - YCSB key choosers: a fast PRNG, uniform, Zipfian (Gray et al.), YCSB's
 * scrambled Zipfian, and "latest".
 *
 * Everything here is deterministic given a seed, allocation-free and single-threaded:
 * give every thread its own ycsb_rng and its own chooser. The choosers are used by
 * the YCSB driver to pre-generate operation arrays before timing starts, and are
 * meant to be reusable by tests (distribution checks) as they are.
 *
 * The Zipfian algorithm is the one from Gray et al., "Quickly generating
 * billion-record synthetic databases" (SIGMOD 1994), as YCSB's ZipfianGenerator
 * implements it: zeta(n, theta) is computed once at init (and incrementally when
 * the item count grows), each draw then costs one uniform double and one pow().
 * Valid constants are 0 < theta < 1 (the formula divides by 1 - theta).
 */
#ifndef YCSB_GEN_H
#define YCSB_GEN_H

#include <math.h>
#include <stdint.h>

#include "core/rng.h"

/* xoshiro256** (Blackman and Vigna), seeded through splitmix64. */
typedef struct ycsb_rng {
	uint64_t s[4];
} ycsb_rng;

/* Seed r from one 64-bit value (any value, 0 included, gives a valid state). */
void ycsb_rng_seed(ycsb_rng *r, uint64_t seed);

/* splitmix64 step: also a good 64-bit mixer for deriving per-thread seeds. */
uint64_t ycsb_splitmix64(uint64_t *state);

/* xoshiro256**: the library's generator (core/rng.h), the same sequences. */
static inline uint64_t ycsb_rng_next(ycsb_rng *r) { return em_rng_next(r->s); }

/* Uniform double in [0, 1), 53 random bits. */
static inline double ycsb_rng_double(ycsb_rng *r)
{
	return (double)(ycsb_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n >= 1, unbiased (Lemire's multiply-and-reject). */
static inline uint64_t ycsb_rng_below(ycsb_rng *r, uint64_t n)
{
	__uint128_t m = (__uint128_t)ycsb_rng_next(r) * n;
	uint64_t low = (uint64_t)m;

	if (low < n) {
		uint64_t threshold = -n % n;

		while (low < threshold) {
			m = (__uint128_t)ycsb_rng_next(r) * n;
			low = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/*
 * YCSB's Utils.fnvhash64(): FNV-1a over the 8 bytes of v, least significant first,
 * then Java's Math.abs() of the signed result. Used to scramble Zipfian ranks.
 */
uint64_t ycsb_fnv64(uint64_t v);

/*
 * zeta(n, theta) = sum_{i=1..n} i^-theta. Exact summation for the first 2^16 terms,
 * Euler-Maclaurin (three correction terms) for the rest, so any n costs at most
 * ~65k pow() calls. zeta(1e10, 0.99) agrees with YCSB's precomputed constant
 * 26.46902820178302 to 1.2e-12 relative (the constant itself carries the rounding of
 * a 10^10-term summation).
 */
double ycsb_zeta(uint64_t n, double theta);

/* sum_{i=from+1..to} i^-theta, 0 when to <= from (the incremental step). */
double ycsb_zeta_delta(uint64_t from, uint64_t to, double theta);

/* Zipfian ranks over [0, items): rank 0 is the most popular. */
typedef struct ycsb_zipf {
	uint64_t items;
	double theta;
	double alpha;      /* 1 / (1 - theta) */
	double zetan;      /* zeta(items, theta) */
	double zeta2;      /* zeta(2, theta) */
	double eta;        /* (1 - (2/items)^(1-theta)) / (1 - zeta2 / zetan) */
	double half_pow;   /* 1 + 0.5^theta: the cumulative weight of ranks 0 and 1 */
} ycsb_zipf;

/* 0, or -1 if items == 0 or theta is outside (0, 1). */
int ycsb_zipf_init(ycsb_zipf *z, uint64_t items, double theta);

/* As ycsb_zipf_init() with zeta(items, theta) supplied (YCSB's precomputed ZETAN). */
int ycsb_zipf_init_zetan(ycsb_zipf *z, uint64_t items, double theta, double zetan);

/* Grow the item count to items (>= the current one), updating zeta incrementally. */
void ycsb_zipf_grow(ycsb_zipf *z, uint64_t items);

/* Gray et al.'s draw, exactly as YCSB's ZipfianGenerator.nextValue() does it. */
static inline uint64_t ycsb_zipf_next(const ycsb_zipf *z, ycsb_rng *r)
{
	double u = ycsb_rng_double(r);
	double uz = u * z->zetan;
	uint64_t rank;

	if (uz < 1.0)
		return 0;
	if (uz < z->half_pow)
		return 1;
	rank = (uint64_t)((double)z->items * pow(z->eta * u - z->eta + 1.0, z->alpha));
	/* u < 1 keeps the power below 1, but rounding at the top must not escape. */
	return rank < z->items ? rank : z->items - 1;
}

/* YCSB's ScrambledZipfianGenerator: ranks over a fixed space of 10^10 items, then
 * fnv64(rank) % items. Popular keys are spread over the key space instead of
 * clustering at the low keys. */
#define YCSB_SCRAMBLE_SPACE 10000000000ull
#define YCSB_SCRAMBLE_ZETAN_099 26.46902820178302 /* YCSB's zeta(10^10, 0.99) */

typedef struct ycsb_scrambled {
	ycsb_zipf zipf; /* over YCSB_SCRAMBLE_SPACE ranks */
	uint64_t items; /* keys [0, items) */
} ycsb_scrambled;

int ycsb_scrambled_init(ycsb_scrambled *g, uint64_t items, double theta);

static inline uint64_t ycsb_scrambled_next(const ycsb_scrambled *g, ycsb_rng *r)
{
	return ycsb_fnv64(ycsb_zipf_next(&g->zipf, r)) % g->items;
}

/* The key choosers the driver offers. */
typedef enum ycsb_dist {
	YCSB_DIST_ZIPFIAN, /* scrambled Zipfian */
	YCSB_DIST_UNIFORM,
	YCSB_DIST_LATEST,  /* Zipfian over the distance back from the newest key */
} ycsb_dist;

const char *ycsb_dist_name(ycsb_dist d);
/* 0 and *d set, or -1 for an unknown name. */
int ycsb_dist_parse(const char *name, ycsb_dist *d);

/*
 * One chooser over keys [0, items). For YCSB_DIST_LATEST, ycsb_chooser_next()
 * returns a distance back from the newest key (0 = the newest) rather than a key:
 * the newest key is only known while the workload runs. ycsb_chooser_grow() tells a
 * latest chooser that items grew (an insert); the other choosers ignore it, as
 * YCSB's do.
 */
typedef struct ycsb_chooser {
	ycsb_dist dist;
	uint64_t items;
	union {
		ycsb_scrambled scrambled;
		ycsb_zipf zipf;
	} u;
} ycsb_chooser;

int ycsb_chooser_init(ycsb_chooser *c, ycsb_dist dist, uint64_t items, double theta);
void ycsb_chooser_grow(ycsb_chooser *c, uint64_t items);

static inline uint64_t ycsb_chooser_next(const ycsb_chooser *c, ycsb_rng *r)
{
	switch (c->dist) {
	case YCSB_DIST_ZIPFIAN:
		return ycsb_scrambled_next(&c->u.scrambled, r);
	case YCSB_DIST_UNIFORM:
		return ycsb_rng_below(r, c->items);
	case YCSB_DIST_LATEST:
		return ycsb_zipf_next(&c->u.zipf, r);
	}
	return 0;
}

#endif /* YCSB_GEN_H */
