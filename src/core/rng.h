/*
 * rng.h - the library's one small pseudo-random generator, for seeded, repeatable
 * choices (graph permutations, orderings, shuffles, sampling; initial embedding rows):
 *
 *   em_mix64       splitmix64's finaliser: a stateless 64-bit mixer
 *   em_splitmix64  splitmix64: one step of a counter through em_mix64 (seeding)
 *   em_rng_*       xoshiro256** over a caller-owned state of four words
 *
 * The same seed gives the same sequence on every machine. Not for secrets.
 * Threads: a state belongs to one thread at a time.
 */
#ifndef EMBER_CORE_RNG_H
#define EMBER_CORE_RNG_H

#include <stdint.h>

#define EM_GOLDEN_GAMMA 0x9e3779b97f4a7c15ull /* splitmix64's counter step */

static inline uint64_t em_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t em_splitmix64(uint64_t *x) { return em_mix64(*x += EM_GOLDEN_GAMMA); }

/* Four splitmix64 steps from x0: a xoshiro state. */
static inline void em_rng_seed(uint64_t s[4], uint64_t x0)
{
	for (int i = 0; i < 4; i++)
		s[i] = em_splitmix64(&x0);
}

static inline uint64_t em_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** */
static inline uint64_t em_rng_next(uint64_t s[4])
{
	uint64_t result = em_rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = em_rotl64(s[3], 45);
	return result;
}

/* Uniform in [0, n), n > 0 (Lemire's multiply; bias below 2^-32 for n < 2^32). */
static inline uint64_t em_rng_below(uint64_t s[4], uint64_t n)
{
	return (uint64_t)(((unsigned __int128)em_rng_next(s) * n) >> 64);
}

#endif
