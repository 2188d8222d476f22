/*
 * gen_stats.h - what the generator tests share: the fixed default seed, Pearson's
 * chi-square test with its p-value, and the exact distribution of Gray et al.'s
 * Zipfian method, computed here independently of gen.c.
 *
 * Gray's method is exact Zipf for ranks 0 and 1 only. For rank k >= 2 it inverts
 * the continuous approximation of the cumulative weight,
 *
 *   P(k) = ((k+1)^a - k^a) / (n^a * eta),   a = 1 - theta,
 *   eta  = (1 - (2/n)^a) / (1 - zeta(2)/zeta(n)),
 *
 * which puts weight ~ (k + 1/2)^-theta on rank k where Zipf puts (k + 1)^-theta
 * (20% more on rank 2 at theta 0.99, under 1% past rank 50). YCSB's generator is
 * this method, so the tests hold gen.c to this distribution, the one it claims to
 * implement; gray_vs_zipf() reports how far that is from exact Zipf.
 *
 * Threshold: a test fails when the chi-square p-value is below GS_P_FAIL (1e-9).
 * A correct generator fails one run in a billion; every seed is printed, and the
 * default seed is fixed (gs_init), so a run is reproducible either way.
 */
#ifndef BENCH_TESTS_GEN_STATS_H
#define BENCH_TESTS_GEN_STATS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

#define GS_P_FAIL 1e-9
#define GS_DEFAULT_SEED "20240611"

/* tu_init() with a fixed default seed: $EMBER_TEST_SEED still overrides it. */
static inline void gs_init(const char *name, int argc, char **argv)
{
	setenv("EMBER_TEST_SEED", GS_DEFAULT_SEED, 0);
	tu_init(name, argc, argv);
}

/* ---- chi-square ---------------------------------------------------------------- */

/* Regularised lower incomplete gamma P(a, x) by its series (x < a + 1). */
static inline double gs_gamma_p_series(double a, double x)
{
	double sum = 1.0 / a, term = sum;

	for (int n = 1; n < 100000; n++) {
		term *= x / (a + n);
		sum += term;
		if (fabs(term) < fabs(sum) * 1e-16)
			break;
	}
	return sum * exp(-x + a * log(x) - lgamma(a));
}

/* Regularised upper incomplete gamma Q(a, x) by Lentz's continued fraction
 * (x >= a + 1). */
static inline double gs_gamma_q_fraction(double a, double x)
{
	const double tiny = 1e-300;
	double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;

	for (int i = 1; i < 100000; i++) {
		double an = -i * (i - a), delta;

		b += 2.0;
		d = an * d + b;
		if (fabs(d) < tiny)
			d = tiny;
		c = b + an / c;
		if (fabs(c) < tiny)
			c = tiny;
		d = 1.0 / d;
		delta = d * c;
		h *= delta;
		if (fabs(delta - 1.0) < 1e-16)
			break;
	}
	return exp(-x + a * log(x) - lgamma(a)) * h;
}

/* P(X >= chi2) for X ~ chi-square with df degrees of freedom. */
static inline double gs_chi2_pvalue(double chi2, unsigned df)
{
	double a = df / 2.0, x = chi2 / 2.0;

	if (chi2 <= 0)
		return 1.0;
	return x < a + 1.0 ? 1.0 - gs_gamma_p_series(a, x) : gs_gamma_q_fraction(a, x);
}

/*
 * Pearson's statistic of observed counts obs[0..nb) against probabilities
 * prob[0..nb) (summing to 1) over `total` draws; prints one line under `what` and
 * returns the p-value (df = nb - 1). Every bucket must expect at least 5 draws.
 */
static inline double gs_chi2_test(const char *what, const uint64_t *obs, const double *prob,
				  unsigned nb, uint64_t total)
{
	double chi2 = 0, psum = 0, p;
	unsigned worst = 0;
	double worst_term = -1;

	for (unsigned i = 0; i < nb; i++) {
		double e = prob[i] * (double)total, d = (double)obs[i] - e;

		CHECK(e >= 5.0, "%s: bucket %u expects %.2f draws (< 5): sample too small",
		      what, i, e);
		chi2 += d * d / e;
		psum += prob[i];
		if (d * d / e > worst_term) {
			worst_term = d * d / e;
			worst = i;
		}
	}
	CHECK(fabs(psum - 1.0) < 1e-9, "%s: probabilities sum to %.12f", what, psum);
	p = gs_chi2_pvalue(chi2, nb - 1);
	printf("  %-44s chi2 %10.2f  df %3u  p %.3g  (largest term: bucket %u, "
	       "observed %llu, expected %.1f)\n", what, chi2, nb - 1, p, worst,
	       (unsigned long long)obs[worst], prob[worst] * (double)total);
	return p;
}

/* ---- Gray et al.'s Zipfian, from first principles ------------------------------------ */

typedef struct gs_gray {
	double n, theta, a, zetan, eta;
} gs_gray;

/* zetan: zeta(n, theta), supplied by the caller (exact sum or a published value). */
static inline void gs_gray_init(gs_gray *g, uint64_t n, double theta, double zetan)
{
	double zeta2 = 1.0 + pow(0.5, theta);

	g->n = (double)n;
	g->theta = theta;
	g->a = 1.0 - theta;
	g->zetan = zetan;
	g->eta = (1.0 - pow(2.0 / g->n, g->a)) / (1.0 - zeta2 / zetan);
}

/* The probability that Gray's method draws rank k (0-based) of n. */
static inline double gs_gray_pmf(const gs_gray *g, uint64_t k)
{
	double dk = (double)k;

	if (k == 0)
		return 1.0 / g->zetan;
	if (k == 1)
		return pow(0.5, g->theta) / g->zetan;
	/* ((k+1)/n)^a - (k/n)^a without the cancellation: (k/n)^a * expm1(a*log1p(1/k)) */
	return pow(dk / g->n, g->a) * expm1(g->a * log1p(1.0 / dk)) / g->eta;
}

/* zeta(n, theta) by plain (Kahan-compensated) summation, smallest terms first:
 * accurate to a few units in the last place; n up to a few million. */
static inline double gs_zeta_exact(uint64_t n, double theta)
{
	double sum = 0, comp = 0;

	for (uint64_t i = n; i >= 1; i--) {
		double y = pow((double)i, -theta) - comp, t = sum + y;

		comp = (t - sum) - y;
		sum = t;
	}
	return sum;
}

/* Probabilities of ranks 0..k-1 and of the tail (>= k) into prob[0..k]. */
static inline void gs_gray_buckets(const gs_gray *g, unsigned k, double *prob)
{
	double head = 0;

	for (unsigned i = 0; i < k; i++) {
		prob[i] = gs_gray_pmf(g, i);
		head += prob[i];
	}
	prob[k] = 1.0 - head;
}

/* Print how far Gray's rank-k weight is from exact Zipf's, for a few ranks. */
static inline void gs_gray_vs_zipf(const gs_gray *g)
{
	printf("  Gray's method / exact Zipf weight at ranks 2, 10, 50: %.3f %.3f %.3f "
	       "(the method's known approximation; tested against the method)\n",
	       gs_gray_pmf(g, 2) * g->zetan / pow(3.0, -g->theta),
	       gs_gray_pmf(g, 10) * g->zetan / pow(11.0, -g->theta),
	       gs_gray_pmf(g, 50) * g->zetan / pow(51.0, -g->theta));
}

#endif /* BENCH_TESTS_GEN_STATS_H */
