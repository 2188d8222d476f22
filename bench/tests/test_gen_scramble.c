/*
 * test_gen_scramble.c - the scrambled Zipfian chooser (the driver's "zipfian")
 * spreads its hot keys over the key space instead of clustering them at the low
 * key numbers, and keeps them hot.
 *
 * For a key space of n keys, draw a sample, take the 100 most frequent keys, and
 * require:
 *   1. every key drawn is in [0, n);
 *   2. the hottest key is rank 0's image, fnv64(0) % n, drawn with rank 0's
 *      probability 1/zeta(10^10, 0.99) (within 6 standard deviations);
 *   3. no window of 1% of the key space (any start, wrapping around) holds more
 *      than 10 of the 100 hottest keys: 100 positions spread at random would put
 *      11 or more in one such window with probability about 1e-6;
 *   4. the hottest keys reach across at least half of the key space.
 * As a control, the same spread check runs on the unscrambled Zipfian chooser
 * (hot keys 0, 1, 2, ...) and must flag it: the check can fail.
 *
 * Seed: fixed default, printed; EMBER_TEST_SEED=N replays another.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "gen_stats.h"
#include "test_util.h"

#define HOT 100
#define WINDOW_PCT 1      /* window width: this percentage of the key space */
#define WINDOW_MAX 10     /* hot keys allowed in one window */

/* The HOT most frequent keys of counts[0..n), hottest first, into hot[]. */
static void hottest(const uint32_t *counts, uint64_t n, uint64_t *hot)
{
	uint32_t hc[HOT] = { 0 };
	unsigned have = 0;

	for (uint64_t k = 0; k < n; k++) {
		uint32_t c = counts[k];
		unsigned i;

		if (c == 0 || (have == HOT && c <= hc[HOT - 1]))
			continue;
		i = have < HOT ? have++ : HOT - 1;
		while (i > 0 && hc[i - 1] < c) { /* insertion, hottest first */
			hc[i] = hc[i - 1];
			hot[i] = hot[i - 1];
			i--;
		}
		hc[i] = c;
		hot[i] = k;
	}
	CHECK(have == HOT, "only %u distinct keys drawn", have);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The most hot keys any window of width n * WINDOW_PCT / 100 holds (windows wrap
 * around the end of the key space), and the span of the hot keys (largest minus
 * smallest key), for HOT keys.
 */
static unsigned densest_window(const uint64_t *hot_in, uint64_t n, uint64_t *span)
{
	uint64_t pos[2 * HOT], width = n * WINDOW_PCT / 100;
	unsigned best = 0, j = 0;

	if (width == 0)
		width = 1;
	memcpy(pos, hot_in, HOT * sizeof(*pos));
	qsort(pos, HOT, sizeof(*pos), cmp_u64);
	*span = pos[HOT - 1] - pos[0];
	for (unsigned i = 0; i < HOT; i++)
		pos[HOT + i] = pos[i] + n; /* a second lap, for windows that wrap */
	for (unsigned i = 0; i < HOT; i++) {
		if (j < i)
			j = i;
		while (j < 2 * HOT && pos[j] < pos[i] + width)
			j++;
		if (j - i > best)
			best = j - i;
	}
	return best;
}

/* Draw `draws` keys from chooser c (over n keys) into counts, then find the hot
 * keys. Returns the densest window's count; *span as densest_window(). */
static unsigned sample_hot(const ycsb_chooser *c, uint64_t n, uint64_t draws, uint64_t stream,
			   uint32_t *counts, uint64_t *hot, uint64_t *span)
{
	ycsb_rng rng;

	memset(counts, 0, n * sizeof(*counts));
	ycsb_rng_seed(&rng, tu_seed() ^ tu_mix64(stream));
	for (uint64_t i = 0; i < draws; i++) {
		uint64_t k = ycsb_chooser_next(c, &rng);

		CHECK(k < n, "key %llu out of [0, %llu)", (unsigned long long)k,
		      (unsigned long long)n);
		counts[k]++;
	}
	hottest(counts, n, hot);
	return densest_window(hot, n, span);
}

static void check_space(uint64_t n, uint64_t draws, uint64_t stream)
{
	uint32_t *counts = calloc(n, sizeof(*counts));
	uint64_t hot[HOT], span;
	ycsb_chooser c;
	unsigned dense;
	double p0 = 1.0 / 26.46902820178302, sd, got;

	CHECK(counts != NULL, "out of memory");
	CHECK(ycsb_chooser_init(&c, YCSB_DIST_ZIPFIAN, n, 0.99) == 0, "init");
	dense = sample_hot(&c, n, draws, stream, counts, hot, &span);
	got = (double)counts[hot[0]] / (double)draws;
	sd = sqrt(p0 * (1 - p0) / (double)draws);
	printf("  n=%-9llu hottest key %llu (%.4f of draws, rank 0 alone %.4f +- %.4f); "
	       "densest %d%% window holds %u of the %d hottest; they span %.0f%% of the "
	       "keys\n", (unsigned long long)n, (unsigned long long)hot[0], got, p0, sd,
	       WINDOW_PCT, dense, HOT, 100.0 * (double)span / (double)n);
	CHECK(hot[0] == ycsb_fnv64(0) % n, "hottest key %llu, want rank 0's image %llu",
	      (unsigned long long)hot[0], (unsigned long long)(ycsb_fnv64(0) % n));
	/* The key also collects tail ranks that hash to it: about (1 - p0) / n. */
	CHECK(fabs(got - p0 - (1 - p0) / (double)n) <= 6 * sd,
	      "hottest key drawn %.5f of the time, want %.5f +- %.5f", got, p0, 6 * sd);
	CHECK(dense <= WINDOW_MAX,
	      "n=%llu: %u of the %d hottest keys lie in one window of %d%% of the key space "
	      "(at most %d allowed): scrambling does not spread them",
	      (unsigned long long)n, dense, HOT, WINDOW_PCT, WINDOW_MAX);
	CHECK(span >= n / 2, "the hottest keys span only %llu of %llu keys",
	      (unsigned long long)span, (unsigned long long)n);
	free(counts);
}

/* The control: plain Zipf puts its hot keys at 0..99, and the check must see it. */
static void check_control(uint64_t n, uint64_t draws)
{
	uint32_t *counts = calloc(n, sizeof(*counts));
	uint64_t hot[HOT], span;
	ycsb_chooser c;
	unsigned dense;

	CHECK(counts != NULL, "out of memory");
	CHECK(ycsb_chooser_init(&c, YCSB_DIST_LATEST, n, 0.99) == 0, "init"); /* plain ranks */
	dense = sample_hot(&c, n, draws, 99, counts, hot, &span);
	printf("  control (unscrambled Zipf, n=%llu): densest %d%% window holds %u of the %d "
	       "hottest keys: flagged as clustered, as it must be\n", (unsigned long long)n,
	       WINDOW_PCT, dense, HOT);
	CHECK(dense > WINDOW_MAX, "the spread check failed to flag clustered hot keys (%u)",
	      dense);
	free(counts);
}

int main(int argc, char **argv)
{
	uint64_t draws;

	gs_init("ycsb_gen_scramble", argc, argv);
	draws = tu_scaled(4000000);
	printf("%llu draws per key space; the %d hottest keys must not crowd into any %d%% "
	       "window (at most %d there)\n", (unsigned long long)draws, HOT, WINDOW_PCT,
	       WINDOW_MAX);
	check_control(1000000, draws);
	check_space(1000000, draws, 1);
	check_space(123457, draws, 2);
	check_space(10000000, draws, 3);
	printf("ycsb_gen_scramble: OK\n");
	return 0;
}
