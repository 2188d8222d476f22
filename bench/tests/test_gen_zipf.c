/*
 * test_gen_zipf.c - the Zipfian rank chooser (gen.h) draws the distribution of Gray
 * et al.'s method: a chi-square goodness-of-fit test on the top 100 ranks plus a
 * tail bucket, for small and large item counts, two theta values, a chooser grown
 * item by item (workload D's path) and YCSB's scrambled space of 10^10 ranks with
 * its published zeta constant. Also: zeta itself against plain summation.
 *
 * The reference distribution is computed in gen_stats.h from first principles, not
 * from the chooser's fields, so a wrong constant in gen.c shows up as a misfit.
 * Fails when a p-value is below 1e-9 (see gen_stats.h). Seed: fixed default,
 * printed; EMBER_TEST_SEED=N replays another.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gen.h"
#include "gen_stats.h"
#include "test_util.h"

#define TOP 100 /* ranks with a bucket of their own; the rest share the tail */

/* Draw `draws` ranks from z and test them against ref. */
static void fit(const char *what, const ycsb_zipf *z, const gs_gray *ref, uint64_t draws,
		uint64_t stream)
{
	uint64_t obs[TOP + 1] = { 0 };
	double prob[TOP + 1];
	ycsb_rng rng;
	double p;

	ycsb_rng_seed(&rng, tu_seed() ^ tu_mix64(stream));
	for (uint64_t i = 0; i < draws; i++) {
		uint64_t r = ycsb_zipf_next(z, &rng);

		CHECK(r < z->items, "%s: rank %llu out of [0, %llu)", what,
		      (unsigned long long)r, (unsigned long long)z->items);
		obs[r < TOP ? r : TOP]++;
	}
	gs_gray_buckets(ref, TOP, prob);
	p = gs_chi2_test(what, obs, prob, TOP + 1, draws);
	CHECK(p >= GS_P_FAIL, "%s: frequencies do not fit Gray's Zipfian (p = %.3g < %g)", what,
	      p, GS_P_FAIL);
}

static void check_zeta(uint64_t n, double theta)
{
	double got = ycsb_zeta(n, theta), want = gs_zeta_exact(n, theta);

	printf("  zeta(%llu, %.2f) = %.15g, plain sum %.15g\n", (unsigned long long)n, theta, got,
	       want);
	CHECK(fabs(got - want) <= 1e-11 * want, "zeta(%llu, %g) = %.17g, want %.17g",
	      (unsigned long long)n, theta, got, want);
}

int main(int argc, char **argv)
{
	uint64_t draws;
	ycsb_zipf z;
	ycsb_scrambled sc;
	gs_gray ref;

	gs_init("ycsb_gen_zipf", argc, argv);
	draws = tu_scaled(4000000);
	printf("%llu draws per fit, top %d ranks + tail, fail below p = %g\n",
	       (unsigned long long)draws, TOP, GS_P_FAIL);

	check_zeta(1000, 0.99);
	check_zeta(3000000, 0.99);
	check_zeta(3000000, 0.5);

	/* Small item count: the tail bucket holds 900 ranks. */
	CHECK(ycsb_zipf_init(&z, 1000, 0.99) == 0, "init");
	gs_gray_init(&ref, 1000, 0.99, gs_zeta_exact(1000, 0.99));
	gs_gray_vs_zipf(&ref);
	fit("zipf n=1000 theta=0.99", &z, &ref, draws, 1);

	/* Large item count (zeta through Euler-Maclaurin), and another theta. */
	CHECK(ycsb_zipf_init(&z, 3000000, 0.99) == 0, "init");
	gs_gray_init(&ref, 3000000, 0.99, gs_zeta_exact(3000000, 0.99));
	fit("zipf n=3000000 theta=0.99", &z, &ref, draws, 2);
	CHECK(ycsb_zipf_init(&z, 3000000, 0.5) == 0, "init");
	gs_gray_init(&ref, 3000000, 0.5, gs_zeta_exact(3000000, 0.5));
	fit("zipf n=3000000 theta=0.5", &z, &ref, draws, 3);

	/* Grown one item at a time (the "latest" chooser as inserts arrive): the same
	 * zeta as computed afresh, and the same distribution. */
	CHECK(ycsb_zipf_init(&z, 1000, 0.99) == 0, "init");
	for (uint64_t n = 1001; n <= 5000; n++)
		ycsb_zipf_grow(&z, n);
	{
		ycsb_zipf fresh;

		CHECK(ycsb_zipf_init(&fresh, 5000, 0.99) == 0, "init");
		CHECK(fabs(z.zetan - fresh.zetan) <= 1e-12 * fresh.zetan &&
			      fabs(z.eta - fresh.eta) <= 1e-12 * fresh.eta,
		      "grown zeta %.17g eta %.17g, fresh %.17g %.17g", z.zetan, z.eta,
		      fresh.zetan, fresh.eta);
	}
	gs_gray_init(&ref, 5000, 0.99, gs_zeta_exact(5000, 0.99));
	fit("zipf grown 1000 -> 5000 theta=0.99", &z, &ref, draws, 4);

	/* YCSB's scrambled chooser draws ranks over 10^10 items with YCSB's own
	 * zeta(10^10, 0.99) constant: its ranks must fit that distribution too. */
	CHECK(ycsb_scrambled_init(&sc, 1000000, 0.99) == 0, "init");
	gs_gray_init(&ref, YCSB_SCRAMBLE_SPACE, 0.99, 26.46902820178302);
	fit("scrambled ranks n=10^10 theta=0.99", &sc.zipf, &ref, draws, 5);

	printf("ycsb_gen_zipf: OK\n");
	return 0;
}
