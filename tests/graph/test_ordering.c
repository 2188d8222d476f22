/*
 * test_ordering.c - the orderings keep their promises (include/ember_graph.h):
 *
 *   every kind: each state holds c distinct partitions in [0, p); consecutive states
 *     differ in exactly one slot, as ember_graph_ordering_swap says, so the slots
 *     that differ over the epoch add up to the swap count; every bucket is listed
 *     under at most one state, the one bucket_state names, and both its partitions
 *     are resident there; the same options give the same ordering.
 *   BETA: for every 2 <= c <= p <= 24 and some larger (p, c): the swap count equals
 *     (p-c) + (x+1)[(p-c) - x(c-1)/2] (computed here, not by the library), is at
 *     least the lower bound; every pair (and every partition with itself) is
 *     co-resident; every bucket is assigned, to the first state where both of its
 *     partitions are resident.
 *   COMET: over physical partitions, for several seeds and every valid group size:
 *     every pair co-resident, every bucket assigned; swaps = g * BETA(p/g, c/g); the
 *     state a bucket gets is spread over its co-resident states (not the first).
 *   SEQUENTIAL: training partitions in slots 0..t-1 of every state; every partition
 *     resident somewhere (t < c); p - c swaps; buckets assigned exactly where the
 *     two ends meet; non-training partitions within c-t of each other in the walk
 *     are co-resident.
 *   Any number of threads may read one ordering at once, and create is reentrant
 *   (4 threads; run it under TSan too).
 */
#include "ember_graph.h"
#include "test_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* BETA's swap count, from the formula as written: 2S = 2(p-c) + (x+1)(2(p-c) - x(c-1)). */
static uint64_t formula(uint64_t p, uint64_t c)
{
	uint64_t n = p - c, x = n / (c - 1);
	uint64_t twice = 2 * n + (x + 1) * (2 * n - x * (c - 1));
	CHECK(twice % 2 == 0, "formula odd for p=%lu c=%lu", (unsigned long)p,
	      (unsigned long)c);
	return twice / 2;
}

static uint64_t lower_bound(uint64_t p, uint64_t c)
{
	uint64_t pairs = p * (p - 1) / 2 - c * (c - 1) / 2;
	return (pairs + c - 2) / (c - 1);
}

/* What the generic check learned, for the kind-specific checks. */
typedef struct seen {
	uint32_t p, c, states;
	uint32_t *first;   /* p*p: first state where i and j are co-resident, or UINT32_MAX */
	uint32_t *count;   /* p*p: number of states where both are resident */
	uint32_t *firstseen; /* p: first state where partition i is resident */
} seen;

static void seen_free(seen *s)
{
	free(s->first);
	free(s->count);
	free(s->firstseen);
}

static bool in_state(const uint32_t *st, uint32_t c, uint32_t x)
{
	for (uint32_t k = 0; k < c; k++)
		if (st[k] == x)
			return true;
	return false;
}

/* The invariants every kind keeps; fills *sn. */
static void check_generic(const ember_graph_ordering *ord, uint32_t p, uint32_t c, int kind,
			  seen *sn)
{
	ember_graph_ordering_info info;
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	CHECK(info.partitions == p && info.capacity == c && info.kind == kind,
	      "info p=%u c=%u kind=%d", info.partitions, info.capacity, info.kind);
	CHECK(info.states >= 1 && info.swaps == info.states - 1, "states %u swaps %lu",
	      info.states, (unsigned long)info.swaps);
	CHECK(info.lower_bound == lower_bound(p, c), "lower bound %lu", (unsigned long)info.lower_bound);
	uint32_t S = info.states;
	sn->p = p;
	sn->c = c;
	sn->states = S;
	sn->first = malloc((size_t)p * p * sizeof(uint32_t));
	sn->count = calloc((size_t)p * p, sizeof(uint32_t));
	sn->firstseen = malloc((size_t)p * sizeof(uint32_t));
	uint8_t *mark = calloc(p, 1);
	CHECK(sn->first && sn->count && sn->firstseen && mark, "out of memory");
	memset(sn->first, 0xff, (size_t)p * p * sizeof(uint32_t));
	memset(sn->firstseen, 0xff, (size_t)p * sizeof(uint32_t));

	uint64_t differing = 0;
	const uint32_t *prev = NULL;
	for (uint32_t s = 0; s < S; s++) {
		const uint32_t *st = NULL;
		CHECK_OK(ember_graph_ordering_state(ord, s, &st));
		CHECK(st != NULL, "state %u NULL", s);
		for (uint32_t k = 0; k < c; k++) {
			CHECK(st[k] < p, "state %u slot %u holds %u >= p", s, k, st[k]);
			CHECK(!mark[st[k]], "state %u holds %u twice", s, st[k]);
			mark[st[k]] = 1;
			if (sn->firstseen[st[k]] == UINT32_MAX)
				sn->firstseen[st[k]] = s;
		}
		for (uint32_t k = 0; k < c; k++)
			mark[st[k]] = 0;
		for (uint32_t a = 0; a < c; a++)
			for (uint32_t b = 0; b < c; b++) {
				size_t i = (size_t)st[a] * p + st[b];
				if (sn->first[i] == UINT32_MAX)
					sn->first[i] = s;
				sn->count[i]++;
			}
		if (prev) {
			uint32_t nd = 0, slot = 0;
			for (uint32_t k = 0; k < c; k++)
				if (prev[k] != st[k]) {
					nd++;
					slot = k;
				}
			CHECK(nd == 1, "states %u and %u differ in %u slots", s - 1, s, nd);
			differing += nd;
			ember_graph_swap sw;
			CHECK_OK(ember_graph_ordering_swap(ord, s, &sw));
			CHECK(sw.slot == slot && sw.evicted == prev[slot] && sw.loaded == st[slot],
			      "swap %u: slot %u %u->%u, want slot %u %u->%u", s, sw.slot,
			      sw.evicted, sw.loaded, slot, prev[slot], st[slot]);
		}
		prev = st;
	}
	CHECK(differing == info.swaps, "slots changed %lu != swaps %lu",
	      (unsigned long)differing, (unsigned long)info.swaps);

	/* Buckets: bucket_state agrees with the per-state lists; both ends resident. */
	uint64_t assigned = 0;
	for (uint32_t i = 0; i < p; i++)
		for (uint32_t j = 0; j < p; j++) {
			uint32_t s;
			CHECK_OK(ember_graph_ordering_bucket_state(ord, i, j, &s));
			if (s == EMBER_GRAPH_ORDERING_NO_STATE) {
				CHECK(kind == EMBER_GRAPH_ORDERING_SEQUENTIAL,
				      "bucket (%u,%u) unassigned", i, j);
				continue;
			}
			CHECK(s < S, "bucket (%u,%u) state %u >= %u", i, j, s, S);
			const uint32_t *st;
			CHECK_OK(ember_graph_ordering_state(ord, s, &st));
			CHECK(in_state(st, c, i) && in_state(st, c, j),
			      "bucket (%u,%u) assigned to state %u without both ends", i, j, s);
			assigned++;
		}
	CHECK(assigned == info.assigned, "assigned %lu != info %lu", (unsigned long)assigned,
	      (unsigned long)info.assigned);
	uint64_t listed = 0;
	for (uint32_t s = 0; s < S; s++) {
		const uint32_t *b;
		uint32_t n;
		CHECK_OK(ember_graph_ordering_state_buckets(ord, s, &b, &n));
		for (uint32_t k = 0; k < n; k++) {
			CHECK(b[k] < p * p, "state %u lists bucket %u", s, b[k]);
			CHECK(k == 0 || b[k - 1] < b[k], "state %u list not ascending", s);
			uint32_t bs;
			CHECK_OK(ember_graph_ordering_bucket_state(ord, b[k] / p, b[k] % p, &bs));
			CHECK(bs == s, "bucket %u listed under %u but assigned %u", b[k], s, bs);
		}
		listed += n;
	}
	/* Each listed bucket names its own state and lists are strictly ascending, so
	 * no bucket is listed twice; with listed == assigned every assigned bucket is
	 * listed exactly once. */
	CHECK(listed == assigned, "listed %lu != assigned %lu", (unsigned long)listed,
	      (unsigned long)assigned);
	free(mark);
}

static void check_all_pairs(const seen *sn)
{
	for (uint32_t i = 0; i < sn->p; i++)
		for (uint32_t j = 0; j < sn->p; j++)
			CHECK(sn->first[(size_t)i * sn->p + j] != UINT32_MAX,
			      "p=%u c=%u: partitions %u and %u never co-resident", sn->p, sn->c,
			      i, j);
}

static void check_beta(uint32_t p, uint32_t c, uint64_t seed, uint64_t epoch)
{
	ember_graph_ordering_options o;
	ember_graph_ordering_options_default(&o);
	o.seed = seed;
	o.epoch = epoch;
	ember_graph_ordering *ord = NULL;
	CHECK_OK(ember_graph_ordering_create(p, c, EMBER_GRAPH_ORDERING_BETA, &o, &ord));
	seen sn;
	check_generic(ord, p, c, EMBER_GRAPH_ORDERING_BETA, &sn);
	check_all_pairs(&sn);
	ember_graph_ordering_info info;
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	uint64_t want = formula(p, c), lib = 0;
	CHECK(info.swaps == want, "BETA p=%u c=%u: %lu swaps, formula %lu", p, c,
	      (unsigned long)info.swaps, (unsigned long)want);
	CHECK_OK(ember_graph_ordering_beta_swaps(p, c, &lib));
	CHECK(lib == want, "beta_swaps(%u,%u) = %lu, want %lu", p, c, (unsigned long)lib,
	      (unsigned long)want);
	CHECK(info.swaps >= lower_bound(p, c), "BETA p=%u c=%u below the lower bound", p, c);
	CHECK(info.assigned == (uint64_t)p * p, "BETA assigned %lu", (unsigned long)info.assigned);
	for (uint32_t i = 0; i < p; i++)
		for (uint32_t j = 0; j < p; j++) {
			uint32_t s;
			CHECK_OK(ember_graph_ordering_bucket_state(ord, i, j, &s));
			CHECK(s == sn.first[(size_t)i * p + j],
			      "BETA bucket (%u,%u) in state %u, first co-resident %u", i, j, s,
			      sn.first[(size_t)i * p + j]);
		}
	seen_free(&sn);
	ember_graph_ordering_destroy(ord);
}

/*
 * COMET over physical partitions. Returns, through *rank_sum / *rank_n, the
 * normalised rank of each bucket's state among its co-resident states (for buckets
 * with at least 2), whose mean is 1/2 when the choice is uniform.
 */
static void check_comet(uint32_t p, uint32_t c, uint32_t g, uint64_t seed,
			double *rank_sum, uint64_t *rank_n)
{
	ember_graph_ordering_options o;
	ember_graph_ordering_options_default(&o);
	o.seed = seed;
	o.comet_group = g;
	ember_graph_ordering *ord = NULL;
	CHECK_OK(ember_graph_ordering_create(p, c, EMBER_GRAPH_ORDERING_COMET, &o, &ord));
	seen sn;
	check_generic(ord, p, c, EMBER_GRAPH_ORDERING_COMET, &sn);
	check_all_pairs(&sn);
	ember_graph_ordering_info info;
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	uint32_t gg = info.comet_group;
	CHECK(g == 0 || gg == g, "group %u, asked %u", gg, g);
	CHECK(gg >= 1 && p % gg == 0 && c % gg == 0 && c / gg >= 2, "bad group %u", gg);
	uint64_t want = (uint64_t)gg * formula(p / gg, c / gg);
	CHECK(info.swaps == want, "COMET p=%u c=%u g=%u: %lu swaps, want %lu", p, c, gg,
	      (unsigned long)info.swaps, (unsigned long)want);
	CHECK(info.assigned == (uint64_t)p * p, "COMET assigned %lu", (unsigned long)info.assigned);
	uint8_t *res = calloc((size_t)info.states * p, 1); /* res[s*p + x]: x resident in s */
	CHECK(res, "oom");
	for (uint32_t s = 0; s < info.states; s++) {
		const uint32_t *st;
		CHECK_OK(ember_graph_ordering_state(ord, s, &st));
		for (uint32_t k = 0; k < c; k++)
			res[(size_t)s * p + st[k]] = 1;
	}
	for (uint32_t i = 0; i < p; i++)
		for (uint32_t j = 0; j < p; j++) {
			uint32_t s, k = sn.count[(size_t)i * p + j];
			CHECK_OK(ember_graph_ordering_bucket_state(ord, i, j, &s));
			if (k < 2)
				continue;
			/* rank of s among the states where i and j are both resident */
			uint32_t r = 0;
			for (uint32_t t = sn.first[(size_t)i * p + j]; t < s; t++)
				r += res[(size_t)t * p + i] & res[(size_t)t * p + j];
			*rank_sum += (r + 0.5) / k;
			(*rank_n)++;
		}
	free(res);
	seen_free(&sn);
	ember_graph_ordering_destroy(ord);
}

/*
 * SEQUENTIAL: the place of non-training partition x in the walk: the fill of state 0
 * takes places 0..c-t-1 in slot order; the partition loaded into state s >= 1 takes
 * place s + c-t-1.
 */
static int64_t walk_index(const ember_graph_ordering *ord, uint32_t c, uint32_t t,
			  const seen *sn, uint32_t x)
{
	uint32_t s = sn->firstseen[x];
	if (s > 0)
		return (int64_t)s + (c - t) - 1;
	const uint32_t *st;
	CHECK_OK(ember_graph_ordering_state(ord, 0, &st));
	for (uint32_t k = t; k < c; k++)
		if (st[k] == x)
			return k - t;
	CHECK(0, "partition %u first seen in state 0 but not there", x);
	return -1;
}

static void check_sequential(uint32_t p, uint32_t c, uint32_t t, tu_rng *rng)
{
	uint32_t *all = malloc(p * sizeof(uint32_t));
	CHECK(all, "oom");
	for (uint32_t i = 0; i < p; i++)
		all[i] = i;
	for (uint32_t i = p; i > 1; i--) {
		uint32_t j = (uint32_t)tu_rng_below(rng, i), x = all[i - 1];
		all[i - 1] = all[j];
		all[j] = x;
	}
	ember_graph_ordering_options o;
	ember_graph_ordering_options_default(&o);
	o.seed = tu_rng_next(rng);
	o.train = all; /* the first t of a random permutation */
	o.n_train = t;
	ember_graph_ordering *ord = NULL;
	CHECK_OK(ember_graph_ordering_create(p, c, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, &ord));
	seen sn;
	check_generic(ord, p, c, EMBER_GRAPH_ORDERING_SEQUENTIAL, &sn);
	ember_graph_ordering_info info;
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	CHECK(info.swaps == (t < c ? p - c : 0), "SEQUENTIAL p=%u c=%u t=%u: %lu swaps", p,
	      c, t, (unsigned long)info.swaps);
	bool *is_train = calloc(p, sizeof(bool));
	CHECK(is_train, "oom");
	for (uint32_t i = 0; i < t; i++)
		is_train[all[i]] = true;
	for (uint32_t s = 0; s < info.states; s++) {
		const uint32_t *st;
		CHECK_OK(ember_graph_ordering_state(ord, s, &st));
		for (uint32_t k = 0; k < t; k++)
			CHECK(st[k] == all[k], "state %u slot %u: %u, want training %u", s, k,
			      st[k], all[k]);
	}
	uint64_t want_assigned = 0;
	for (uint32_t i = 0; i < p; i++) {
		if (t < c)
			CHECK(sn.firstseen[i] != UINT32_MAX, "partition %u never resident", i);
		for (uint32_t j = 0; j < p; j++) {
			uint32_t s, f = sn.first[(size_t)i * p + j];
			CHECK_OK(ember_graph_ordering_bucket_state(ord, i, j, &s));
			CHECK(s == f, "SEQUENTIAL bucket (%u,%u): state %u, first co-resident %u",
			      i, j, s, f);
			want_assigned += f != UINT32_MAX;
			if (t < c && (is_train[i] || is_train[j]))
				CHECK(f != UINT32_MAX, "bucket (%u,%u) with a training end unassigned",
				      i, j);
			/* The walk: non-training partitions are co-resident iff their places
			 * in the walk differ by less than c-t. */
			if (t < c && !is_train[i] && !is_train[j]) {
				int64_t d = walk_index(ord, c, t, &sn, i) - walk_index(ord, c, t, &sn, j);
				bool near = d > -(int64_t)(c - t) && d < (int64_t)(c - t);
				CHECK(near == (f != UINT32_MAX),
				      "walk places of %u, %u differ by %ld; co-resident %d", i, j,
				      (long)d, f != UINT32_MAX);
			}
		}
	}
	CHECK(info.assigned == want_assigned, "SEQUENTIAL assigned %lu want %lu",
	      (unsigned long)info.assigned, (unsigned long)want_assigned);
	free(is_train);
	seen_free(&sn);
	ember_graph_ordering_destroy(ord);
	free(all);
}

/* Same options, same ordering; another epoch, (almost surely) other labels. */
static void check_determinism(void)
{
	for (int kind = 0; kind <= 1; kind++) {
		ember_graph_ordering_options o;
		ember_graph_ordering_options_default(&o);
		o.seed = 42;
		ember_graph_ordering *a, *b, *d;
		CHECK_OK(ember_graph_ordering_create(32, 8, kind, &o, &a));
		CHECK_OK(ember_graph_ordering_create(32, 8, kind, &o, &b));
		o.epoch = 1;
		CHECK_OK(ember_graph_ordering_create(32, 8, kind, &o, &d));
		ember_graph_ordering_info ia, id;
		CHECK_OK(ember_graph_ordering_info_get(a, &ia));
		CHECK_OK(ember_graph_ordering_info_get(d, &id));
		CHECK(ia.states == id.states, "epochs differ in state count");
		bool other = false;
		for (uint32_t s = 0; s < ia.states; s++) {
			const uint32_t *x, *y, *z;
			CHECK_OK(ember_graph_ordering_state(a, s, &x));
			CHECK_OK(ember_graph_ordering_state(b, s, &y));
			CHECK_OK(ember_graph_ordering_state(d, s, &z));
			CHECK(memcmp(x, y, 8 * sizeof(uint32_t)) == 0, "same options, state %u differs", s);
			other |= memcmp(x, z, 8 * sizeof(uint32_t)) != 0;
		}
		for (uint32_t i = 0; i < 32; i++)
			for (uint32_t j = 0; j < 32; j++) {
				uint32_t sa, sb;
				CHECK_OK(ember_graph_ordering_bucket_state(a, i, j, &sa));
				CHECK_OK(ember_graph_ordering_bucket_state(b, i, j, &sb));
				CHECK(sa == sb, "same options, bucket (%u,%u) differs", i, j);
			}
		CHECK(other, "kind %d: epoch 1 has the same states as epoch 0", kind);
		ember_graph_ordering_destroy(a);
		ember_graph_ordering_destroy(b);
		ember_graph_ordering_destroy(d);
	}
}

/*
 * Concurrent readers: an ordering is immutable, so threads may read it at once, and
 * create is reentrant. Each thread sums every state and bucket of a shared ordering
 * and of one it builds itself with the same options; all sums must agree.
 */
typedef struct reader_arg {
	const ember_graph_ordering *shared;
	uint64_t sum_shared, sum_own;
} reader_arg;

static uint64_t ordering_digest(const ember_graph_ordering *ord)
{
	ember_graph_ordering_info info;
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	uint64_t h = 0;
	for (uint32_t s = 0; s < info.states; s++) {
		const uint32_t *st, *b;
		uint32_t n;
		CHECK_OK(ember_graph_ordering_state(ord, s, &st));
		CHECK_OK(ember_graph_ordering_state_buckets(ord, s, &b, &n));
		for (uint32_t k = 0; k < info.capacity; k++)
			h = h * 1000003 + st[k];
		for (uint32_t k = 0; k < n; k++)
			h = h * 31 + b[k] + s;
	}
	return h;
}

static void *reader_main(void *p)
{
	reader_arg *a = p;
	a->sum_shared = ordering_digest(a->shared);
	ember_graph_ordering_options o;
	ember_graph_ordering_options_default(&o);
	o.seed = 7;
	o.comet_group = 2;
	ember_graph_ordering *own;
	CHECK_OK(ember_graph_ordering_create(48, 8, EMBER_GRAPH_ORDERING_COMET, &o, &own));
	a->sum_own = ordering_digest(own);
	ember_graph_ordering_destroy(own);
	return NULL;
}

static void check_concurrent_readers(void)
{
	ember_graph_ordering_options o;
	ember_graph_ordering_options_default(&o);
	o.seed = 7;
	o.comet_group = 2;
	ember_graph_ordering *ord;
	CHECK_OK(ember_graph_ordering_create(48, 8, EMBER_GRAPH_ORDERING_COMET, &o, &ord));
	uint64_t want = ordering_digest(ord);
	enum { NT = 4 };
	pthread_t th[NT];
	reader_arg args[NT];
	for (int i = 0; i < NT; i++) {
		args[i] = (reader_arg){.shared = ord};
		CHECK(pthread_create(&th[i], NULL, reader_main, &args[i]) == 0, "pthread_create");
	}
	for (int i = 0; i < NT; i++) {
		CHECK(pthread_join(th[i], NULL) == 0, "pthread_join");
		CHECK(args[i].sum_shared == want && args[i].sum_own == want,
		      "thread %d read a different ordering", i);
	}
	ember_graph_ordering_destroy(ord);
}

int main(int argc, char **argv)
{
	tu_init("test_ordering", argc, argv);
	tu_rng *rng = tu_rng_global();

	/* BETA: every 2 <= c <= p <= 24, then larger ones. */
	uint64_t n_beta = 0;
	for (uint32_t p = 2; p <= 24; p++)
		for (uint32_t c = 2; c <= p; c++) {
			check_beta(p, c, tu_rng_next(rng), tu_rng_below(rng, 100));
			n_beta++;
		}
	static const uint32_t big[][2] = {
		{32, 5},  {50, 2},  {64, 8},  {100, 7}, {128, 16}, {129, 16},
		{200, 3}, {255, 2}, {256, 32}, {300, 25}, {512, 64}, {1000, 40},
	};
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		check_beta(big[i][0], big[i][1], tu_rng_next(rng), 0);
		n_beta++;
	}
	/* The formula for sizes too large to build, against the bound. */
	for (uint32_t p = 2; p <= 5000; p += 1 + p / 7)
		for (uint32_t c = 2; c <= p; c += 1 + c / 3) {
			uint64_t s, lb;
			CHECK_OK(ember_graph_ordering_beta_swaps(p, c, &s));
			CHECK_OK(ember_graph_ordering_lower_bound(p, c, &lb));
			CHECK(s == formula(p, c) && lb == lower_bound(p, c) && s >= lb,
			      "p=%u c=%u formula %lu bound %lu", p, c, (unsigned long)s,
			      (unsigned long)lb);
		}
	printf("BETA: %lu (p, c) checked\n", (unsigned long)n_beta);

	/* COMET: every valid group (0 = default) of every 2 <= c <= p <= 24, several seeds. */
	double rank_sum = 0;
	uint64_t rank_n = 0, n_comet = 0;
	uint32_t seeds = (uint32_t)tu_scaled(3);
	for (uint32_t p = 2; p <= 24; p++)
		for (uint32_t c = 2; c <= p; c++)
			for (uint32_t g = 0; g <= c / 2; g++) {
				if (g && (p % g || c % g))
					continue;
				for (uint32_t k = 0; k < seeds; k++) {
					check_comet(p, c, g, tu_rng_next(rng), &rank_sum, &rank_n);
					n_comet++;
				}
			}
	check_comet(64, 16, 4, tu_rng_next(rng), &rank_sum, &rank_n);
	check_comet(96, 12, 3, tu_rng_next(rng), &rank_sum, &rank_n);
	check_comet(128, 8, 0, tu_rng_next(rng), &rank_sum, &rank_n);
	double mean = rank_sum / (double)rank_n;
	printf("COMET: %lu orderings; mean normalised rank of a bucket's state %.3f over %lu buckets\n",
	       (unsigned long)n_comet, mean, (unsigned long)rank_n);
	/* Uniform choice: 0.5 (first state would give about 1/(2k), under 0.25). */
	CHECK(rank_n > 10000 && mean > 0.45 && mean < 0.55, "COMET bucket states not uniform: %.3f",
	      mean);

	/* SEQUENTIAL: every 1 <= t <= c <= p <= 20, and some larger. */
	uint64_t n_seq = 0;
	for (uint32_t p = 2; p <= 20; p++)
		for (uint32_t c = 2; c <= p; c++)
			for (uint32_t t = 1; t <= c; t++) {
				check_sequential(p, c, t, rng);
				n_seq++;
			}
	check_sequential(256, 16, 5, rng);
	check_sequential(300, 40, 39, rng);
	printf("SEQUENTIAL: %lu (p, c, t) checked\n", (unsigned long)n_seq + 2);

	check_determinism();
	check_concurrent_readers();
	printf("ok\n");
	return 0;
}
