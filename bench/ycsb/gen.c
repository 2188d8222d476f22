/*
 * gen.c - seeding, hashing and zeta for the YCSB key choosers (see gen.h).
 */
#include "gen.h"

#include <math.h>
#include <string.h>
#include <strings.h>

uint64_t ycsb_splitmix64(uint64_t *state) { return em_splitmix64(state); }

void ycsb_rng_seed(ycsb_rng *r, uint64_t seed) { em_rng_seed(r->s, seed); }

uint64_t ycsb_fnv64(uint64_t v)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 0; i < 8; i++) {
		h ^= v & 0xff;
		h *= 1099511628211ull;
		v >>= 8;
	}
	/* Java's Math.abs(long); Long.MIN_VALUE has no positive twin and Java leaves
	 * it negative, which YCSB then reduces with a negative remainder. We take the
	 * magnitude instead: one hash value in 2^64 differs from YCSB. */
	return (int64_t)h < 0 ? (uint64_t)0 - h : h;
}

/* Terms summed exactly before switching to Euler-Maclaurin. */
#define ZETA_EXACT_TERMS 65536ull

/*
 * sum_{i=m..n} i^-theta for m >= ZETA_EXACT_TERMS by Euler-Maclaurin:
 *   integral_m^n f + (f(m) + f(n)) / 2 + (f'(n) - f'(m)) / 12
 *   - (f'''(n) - f'''(m)) / 720,  f(x) = x^-theta.
 * The next term is O(m^-(theta+5)) ~ 1e-24 at m = 2^16: far below double rounding.
 */
static double zeta_tail(uint64_t m, uint64_t n, double theta)
{
	double dm = (double)m, dn = (double)n;
	double f_m = pow(dm, -theta), f_n = pow(dn, -theta);
	double integral = theta == 1.0 ? log(dn / dm)
				       : (pow(dn, 1.0 - theta) - pow(dm, 1.0 - theta)) /
						 (1.0 - theta);
	double d1_m = -theta * f_m / dm, d1_n = -theta * f_n / dn;
	double c3 = -theta * (theta + 1.0) * (theta + 2.0);
	double d3_m = c3 * f_m / (dm * dm * dm), d3_n = c3 * f_n / (dn * dn * dn);

	return integral + (f_m + f_n) / 2.0 + (d1_n - d1_m) / 12.0 - (d3_n - d3_m) / 720.0;
}

double ycsb_zeta_delta(uint64_t from, uint64_t to, double theta)
{
	double sum = 0.0;
	uint64_t i = from + 1;

	if (to <= from)
		return 0.0;
	/* Exact up to ZETA_EXACT_TERMS (or all of a short range: growing by a few
	 * items at a time must stay exact, not pay for an approximation). */
	for (; i <= to && (i < ZETA_EXACT_TERMS || to - i < 64); i++)
		sum += pow((double)i, -theta);
	if (i <= to)
		sum += zeta_tail(i, to, theta);
	return sum;
}

double ycsb_zeta(uint64_t n, double theta)
{
	return ycsb_zeta_delta(0, n, theta);
}

static void zipf_derive(ycsb_zipf *z)
{
	z->eta = (1.0 - pow(2.0 / (double)z->items, 1.0 - z->theta)) /
		 (1.0 - z->zeta2 / z->zetan);
}

int ycsb_zipf_init_zetan(ycsb_zipf *z, uint64_t items, double theta, double zetan)
{
	if (items == 0 || !(theta > 0.0 && theta < 1.0))
		return -1;
	memset(z, 0, sizeof(*z));
	z->items = items;
	z->theta = theta;
	z->alpha = 1.0 / (1.0 - theta);
	z->zetan = zetan;
	z->zeta2 = 1.0 + pow(0.5, theta);
	z->half_pow = 1.0 + pow(0.5, theta);
	zipf_derive(z);
	return 0;
}

int ycsb_zipf_init(ycsb_zipf *z, uint64_t items, double theta)
{
	if (items == 0 || !(theta > 0.0 && theta < 1.0))
		return -1;
	return ycsb_zipf_init_zetan(z, items, theta, ycsb_zeta(items, theta));
}

void ycsb_zipf_grow(ycsb_zipf *z, uint64_t items)
{
	if (items <= z->items)
		return;
	z->zetan += ycsb_zeta_delta(z->items, items, z->theta);
	z->items = items;
	zipf_derive(z);
}

int ycsb_scrambled_init(ycsb_scrambled *g, uint64_t items, double theta)
{
	int rc;

	if (items == 0)
		return -1;
	g->items = items;
	/* YCSB uses its precomputed constant only for theta 0.99 and computes zeta
	 * otherwise; ycsb_zeta() agrees with the constant, so this is only speed. */
	if (theta == 0.99)
		rc = ycsb_zipf_init_zetan(&g->zipf, YCSB_SCRAMBLE_SPACE, theta,
					  YCSB_SCRAMBLE_ZETAN_099);
	else
		rc = ycsb_zipf_init(&g->zipf, YCSB_SCRAMBLE_SPACE, theta);
	return rc;
}

const char *ycsb_dist_name(ycsb_dist d)
{
	switch (d) {
	case YCSB_DIST_ZIPFIAN:
		return "zipfian";
	case YCSB_DIST_UNIFORM:
		return "uniform";
	case YCSB_DIST_LATEST:
		return "latest";
	}
	return "?";
}

int ycsb_dist_parse(const char *name, ycsb_dist *d)
{
	if (strcasecmp(name, "zipfian") == 0 || strcasecmp(name, "zipf") == 0)
		*d = YCSB_DIST_ZIPFIAN;
	else if (strcasecmp(name, "uniform") == 0)
		*d = YCSB_DIST_UNIFORM;
	else if (strcasecmp(name, "latest") == 0)
		*d = YCSB_DIST_LATEST;
	else
		return -1;
	return 0;
}

int ycsb_chooser_init(ycsb_chooser *c, ycsb_dist dist, uint64_t items, double theta)
{
	if (items == 0)
		return -1;
	memset(c, 0, sizeof(*c));
	c->dist = dist;
	c->items = items;
	switch (dist) {
	case YCSB_DIST_ZIPFIAN:
		return ycsb_scrambled_init(&c->u.scrambled, items, theta);
	case YCSB_DIST_UNIFORM:
		return 0;
	case YCSB_DIST_LATEST:
		return ycsb_zipf_init(&c->u.zipf, items, theta);
	}
	return -1;
}

void ycsb_chooser_grow(ycsb_chooser *c, uint64_t items)
{
	/* Only "latest" follows the inserts. Uniform and Zipfian keep to the keys
	 * that existed at the start, so they never name a key not yet inserted (YCSB
	 * gets the same by redrawing keys beyond its acknowledged insert count). */
	if (c->dist != YCSB_DIST_LATEST || items <= c->items)
		return;
	c->items = items;
	ycsb_zipf_grow(&c->u.zipf, items);
}
