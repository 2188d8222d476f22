/*
 * test_sim.c - the simulator's policies against each other on random traces.
 *
 * Traces come from the trace generator (random table sizes, batch sizes, skews,
 * zipf and reuse-distance modes); capacities range from the largest batch's
 * distinct rows to all rows. For each:
 *   - Belady's MIN equals an independent optimum: greedy interval admission in
 *     order of right end (each reuse of a row is a hit iff the row can stay in the
 *     cache over the batches in between: at most capacity - (that batch's own
 *     rows) other rows there), the optimal rule for unit-size caching;
 *   - the oracle with a window as long as the trace fetches exactly MIN's rows;
 *   - the oracle with a window of one batch is LRU, exactly;
 *   - a window covering the trace's longest reuse distance (every next use is in
 *     the window) is as good as full knowledge: exactly MIN, so never more than
 *     LRU or LFU;
 *   - for every window, the oracle never fetches fewer rows than MIN;
 *   - for every window, on every trace, it fetches no more rows than LRU: a
 *     theorem (docs/cache.md, "The oracle against LRU and LFU": every row LRU
 *     finds resident, the oracle does too, because its ties go least recently
 *     used first), so one trace the other way fails the test;
 *   - against LFU there is no such theorem for windows shorter than the reuse
 *     distances (a one-batch window is LRU, and LRU loses to LFU on some traces;
 *     the docs give a 7-batch trace that window 3 loses): the fixed
 *     counterexample is checked as documented, and with a window of at least
 *     max(16 batches, a quarter of the trace), summed over all the traces, the
 *     oracle must fetch no more rows than LFU; the test prints how many single
 *     traces LFU wins;
 *   - hits + fetched = the distinct rows of all batches, for every policy.
 */
#include "cache/sim.h"
#include "ember.h"
#include "test_util.h"
#include "trace.h"

#include <stdlib.h>
#include <string.h>

/* The optimum by interval admission (independent of sim.c's MIN). */
static uint64_t optimum_fetched(const struct sim_trace *t, uint64_t cap)
{
	uint32_t nb = t->nbatches;
	uint64_t *occ = calloc(nb + 1, sizeof(uint64_t)); /* rows held at each batch */
	uint32_t *last = malloc(t->total_rows * sizeof(uint32_t));
	CHECK(occ && last, "alloc");
	memset(last, 0xff, t->total_rows * sizeof(uint32_t));
	for (uint32_t b = 0; b < nb; b++)
		occ[b] = t->off[b + 1] - t->off[b];
	uint64_t fetched = 0;
	for (uint32_t b = 0; b < nb; b++)
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = t->base[t->uniq[k].table] + t->uniq[k].row;
			uint32_t a = last[g];
			last[g] = b;
			if (a == UINT32_MAX) {
				fetched++;
				continue;
			}
			int fits = 1;
			for (uint32_t x = a + 1; x < b && fits; x++)
				fits = occ[x] < cap;
			if (!fits) {
				fetched++;
				continue;
			}
			for (uint32_t x = a + 1; x < b; x++)
				occ[x]++;
		}
	free(occ);
	free(last);
	return fetched;
}

/* The longest distance, in batches, between two uses of a row. */
static uint32_t max_reuse(const struct sim_trace *t)
{
	uint32_t *last = malloc(t->total_rows * sizeof(uint32_t)), best = 0;
	CHECK(last, "alloc");
	memset(last, 0xff, t->total_rows * sizeof(uint32_t));
	for (uint32_t b = 0; b < t->nbatches; b++)
		for (uint64_t k = t->off[b]; k < t->off[b + 1]; k++) {
			uint64_t g = t->base[t->uniq[k].table] + t->uniq[k].row;
			if (last[g] != UINT32_MAX && b - last[g] > best)
				best = b - last[g];
			last[g] = b;
		}
	free(last);
	return best;
}

int main(int argc, char **argv)
{
	tu_init("cache_sim", argc, argv);
	tu_rng *rng = tu_rng_global();
	uint64_t rounds = tu_scaled(200), checks = 0;
	/* long windows that do not cover every reuse: totals, and traces lost */
	uint64_t sum_orc = 0, sum_lru = 0, sum_lfu = 0, over_lfu = 0, long_runs = 0, lru_checks = 0;
	for (uint64_t round = 0; round < rounds; round++) {
		struct trace_params p;
		uint64_t rows[8];
		trace_params_default(&p);
		p.ntables = (uint32_t)tu_rng_range(rng, 1, 8);
		for (uint32_t i = 0; i < p.ntables; i++)
			rows[i] = tu_rng_range(rng, 1, tu_rng_chance(rng, 1, 2) ? 50 : 3000);
		p.rows = rows;
		p.batch_size = (uint32_t)tu_rng_range(rng, 1, 128);
		p.nbatches = (uint32_t)tu_rng_range(rng, 1, 150);
		p.skew = 0.2 + (double)tu_rng_below(rng, 1000) / 700.0;
		p.mode = tu_rng_chance(rng, 1, 3) ? TRACE_REUSE : TRACE_ZIPF;
		p.reuse_prob = (double)tu_rng_below(rng, 1000) / 1000.0;
		p.history = (uint32_t)tu_rng_range(rng, 1, 5000);
		p.seed = tu_rng_next(rng);
		struct trace tr;
		struct sim_trace st;
		CHECK(trace_generate(&p, &tr) == 0, "trace_generate");
		CHECK_OK(sim_trace_build(&st, tr.ntables, tr.rows, tr.nbatches, tr.batch_size, tr.ids));
		uint64_t distinct = st.off[st.nbatches];
		uint64_t lo = st.max_uniq ? st.max_uniq : 1;
		uint64_t cap = lo + tu_rng_below(rng, tu_rng_chance(rng, 3, 4)
							 ? (st.total_rows - lo) / 5 + 1
							 : st.total_rows - lo + 1);

		struct sim_result lru, lfu, min, orc;
		CHECK_OK(sim_lru(&st, cap, &lru));
		CHECK_OK(sim_lfu(&st, cap, &lfu));
		CHECK_OK(sim_min(&st, cap, &min));
		CHECK(lru.hits + lru.fetched == distinct && lfu.hits + lfu.fetched == distinct &&
			      min.hits + min.fetched == distinct,
		      "hits + fetched != distinct rows");
		uint64_t opt = optimum_fetched(&st, cap);
		CHECK(min.fetched == opt, "round %llu: MIN fetched %llu, the optimum is %llu",
		      (unsigned long long)round, (unsigned long long)min.fetched,
		      (unsigned long long)opt);
		CHECK(min.fetched <= lru.fetched && min.fetched <= lfu.fetched, "MIN beaten");

		uint32_t q4 = st.nbatches / 4 + 1, big = q4 > 16 ? q4 : 16;
		uint32_t reach = max_reuse(&st) + 1; /* every next use within the window */
		uint32_t windows[7] = {1, 2, (uint32_t)tu_rng_range(rng, 1, 10), big,
				       (uint32_t)tu_rng_range(rng, big, big + st.nbatches), reach,
				       st.nbatches + 5};
		for (int w = 0; w < 7; w++) {
			CHECK_OK(sim_oracle(&st, cap, windows[w], &orc));
			checks++;
			CHECK(orc.hits + orc.fetched == distinct, "oracle hits + fetched");
			CHECK(orc.fetched >= min.fetched,
			      "round %llu window %u: the oracle fetched %llu < MIN %llu",
			      (unsigned long long)round, windows[w], (unsigned long long)orc.fetched,
			      (unsigned long long)min.fetched);
			if (windows[w] >= reach) {
				CHECK(orc.fetched == min.fetched,
				      "round %llu window %u >= longest reuse %u: fetched %llu, MIN %llu",
				      (unsigned long long)round, windows[w], reach - 1,
				      (unsigned long long)orc.fetched, (unsigned long long)min.fetched);
				CHECK(orc.fetched <= lru.fetched && orc.fetched <= lfu.fetched,
				      "full knowledge beaten");
			}
			CHECK(orc.fetched <= lru.fetched,
			      "round %llu window %u: the oracle fetched %llu > LRU %llu",
			      (unsigned long long)round, windows[w], (unsigned long long)orc.fetched,
			      (unsigned long long)lru.fetched);
			lru_checks++;
			if (windows[w] >= big && windows[w] < reach) {
				sum_orc += orc.fetched;
				sum_lru += lru.fetched;
				sum_lfu += lfu.fetched;
				over_lfu += orc.fetched > lfu.fetched;
				long_runs++;
			}
			if (windows[w] == 1)
				CHECK(orc.fetched == lru.fetched, "window 1: oracle %llu != LRU %llu",
				      (unsigned long long)orc.fetched, (unsigned long long)lru.fetched);
			if (windows[w] >= st.nbatches)
				CHECK(orc.fetched == min.fetched,
				      "round %llu: whole-trace window fetched %llu, MIN %llu",
				      (unsigned long long)round, (unsigned long long)orc.fetched,
				      (unsigned long long)min.fetched);
		}
		sim_trace_free(&st);
		trace_free(&tr);
	}
	/* bad input */
	struct sim_trace st;
	uint64_t rows1[1] = {4};
	uint32_t ids[4] = {0, 1, 2, 3};
	CHECK_RC(sim_trace_build(&st, 1, rows1, 1, 4, ids), 0);
	struct sim_result r;
	CHECK_RC(sim_lru(&st, 3, &r), EMBER_ETOOBIG);
	CHECK_RC(sim_lfu(&st, 3, &r), EMBER_ETOOBIG);
	CHECK_RC(sim_min(&st, 3, &r), EMBER_ETOOBIG);
	CHECK_RC(sim_oracle(&st, 3, 1, &r), EMBER_ETOOBIG);
	CHECK_RC(sim_oracle(&st, 4, 0, &r), EMBER_EINVAL);
	sim_trace_free(&st);
	ids[2] = 4;
	CHECK_RC(sim_trace_build(&st, 1, rows1, 1, 4, ids), EMBER_EINVAL);
	/* the documented counterexample: capacity 2, one row a batch, c c a d d d c;
	 * window 3 cannot see c's reuse when d comes, and drops the least recently
	 * used of c and a (c, used twice, which LFU keeps) */
	uint64_t rows3[1] = {4};
	uint32_t ce[7] = {2, 2, 0, 3, 3, 3, 2};
	CHECK_OK(sim_trace_build(&st, 1, rows3, 7, 1, ce));
	struct sim_result ro, rl, rf, rm;
	CHECK_OK(sim_oracle(&st, 2, 3, &ro));
	CHECK_OK(sim_lru(&st, 2, &rl));
	CHECK_OK(sim_lfu(&st, 2, &rf));
	CHECK_OK(sim_min(&st, 2, &rm));
	CHECK(ro.fetched == 4 && rl.fetched == 4 && rf.fetched == 3 && rm.fetched == 3,
	      "counterexample: oracle %llu LRU %llu LFU %llu MIN %llu (docs say 4 4 3 3)",
	      (unsigned long long)ro.fetched, (unsigned long long)rl.fetched,
	      (unsigned long long)rf.fetched, (unsigned long long)rm.fetched);
	CHECK_OK(sim_oracle(&st, 2, 4, &ro)); /* a window reaching c's reuse: MIN */
	CHECK(ro.fetched == 3, "counterexample, window 4: oracle %llu", (unsigned long long)ro.fetched);
	sim_trace_free(&st);
	CHECK(sum_orc <= sum_lfu,
	      "long windows: the oracle fetched %llu rows in all, LFU %llu",
	      (unsigned long long)sum_orc, (unsigned long long)sum_lfu);
	printf("cache_sim: %llu rounds, %llu oracle runs, each no worse than LRU (%llu checked); "
	       "long windows short of the longest reuse (%llu runs): oracle %llu rows, LRU %llu "
	       "(%.3fx), LFU %llu (%.3fx); runs where the oracle fetched more than LFU: %llu\n",
	       (unsigned long long)rounds, (unsigned long long)checks,
	       (unsigned long long)lru_checks, (unsigned long long)long_runs,
	       (unsigned long long)sum_orc, (unsigned long long)sum_lru,
	       sum_orc ? (double)sum_lru / sum_orc : 0.0, (unsigned long long)sum_lfu,
	       sum_orc ? (double)sum_lfu / sum_orc : 0.0, (unsigned long long)over_lfu);
	return 0;
}
