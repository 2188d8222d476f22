/*
 * test_gen_latest.c - the "latest" chooser (workload D) follows inserts: after new
 * keys arrive, the most frequently chosen keys are the newest ones.
 *
 * Part 1, the chooser alone: start with 10000 keys, insert 2000 more one at a time
 * (ycsb_chooser_grow), then draw. Resolved the way the driver resolves them
 * (ycsb_op_key against the newest key), the ten most frequent keys must be
 * exactly the ten newest, the newest key the most frequent, and the distances back
 * from the newest key must fit Gray's Zipfian over all 12000 keys (chi-square,
 * p >= 1e-9).
 *
 * Part 2, workload D end to end on one thread: pre-generate operations with
 * ycsb_pregen_fill() (95% reads, 5% inserts) and play them against the shared
 * insert sequence (keyseq.h) as the driver does. Every read must name a key
 * already inserted; the distance of each read from the newest key at that moment
 * must fit Gray's Zipfian over the number of keys present at that moment (the
 * expected counts are summed read by read, as the store grows); and most reads
 * must land on keys inserted during the run rather than on the loaded ones.
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
#include "keyseq.h"
#include "test_util.h"
#include "workload.h"

#define TOP 100

static void part_chooser(uint64_t draws)
{
	const uint64_t first = 10000, added = 2000, n = first + added, newest = n - 1;
	uint64_t *count = calloc(n, sizeof(*count));
	uint64_t obs[TOP + 1] = { 0 }, on_new = 0;
	double prob[TOP + 1], p, p_new = 0, sd;
	ycsb_chooser c;
	ycsb_rng rng;
	gs_gray ref;

	CHECK(count != NULL, "out of memory");
	CHECK(ycsb_chooser_init(&c, YCSB_DIST_LATEST, first, 0.99) == 0, "init");
	for (uint64_t items = first + 1; items <= n; items++)
		ycsb_chooser_grow(&c, items);
	CHECK(c.items == n, "chooser has %llu items after the inserts, want %llu",
	      (unsigned long long)c.items, (unsigned long long)n);

	ycsb_rng_seed(&rng, tu_seed() ^ tu_mix64(1));
	for (uint64_t i = 0; i < draws; i++) {
		uint64_t d = ycsb_chooser_next(&c, &rng);
		uint64_t key = ycsb_op_key(d | YCSB_OP_LATEST, newest);

		CHECK(key <= newest, "key %llu beyond the newest %llu", (unsigned long long)key,
		      (unsigned long long)newest);
		count[key]++;
		obs[newest - key < TOP ? newest - key : TOP]++;
		on_new += key >= first;
	}

	/* The ten most frequent keys are the ten newest, newest first. */
	for (unsigned i = 0; i < 10; i++) {
		uint64_t best = 0;

		for (uint64_t k = 1; k < n; k++)
			if (count[k] > count[best])
				best = k;
		printf("  %s%llu (%llu)", i == 0 ? "most chosen keys (draws):" : "",
		       (unsigned long long)best, (unsigned long long)count[best]);
		CHECK(best == newest - i,
		      "the %u-th most chosen key is %llu, want the %u-th newest, %llu", i + 1,
		      (unsigned long long)best, i + 1, (unsigned long long)(newest - i));
		count[best] = 0;
	}
	printf("\n");

	gs_gray_init(&ref, n, 0.99, gs_zeta_exact(n, 0.99));
	gs_gray_buckets(&ref, TOP, prob);
	p = gs_chi2_test("distance from newest, 10000 + 2000 keys", obs, prob, TOP + 1, draws);
	CHECK(p >= GS_P_FAIL, "distances do not fit Gray's Zipfian over %llu keys (p = %.3g)",
	      (unsigned long long)n, p);

	for (uint64_t d = 0; d < added; d++)
		p_new += gs_gray_pmf(&ref, d);
	sd = sqrt(p_new * (1 - p_new) / (double)draws);
	printf("  draws on the %llu inserted keys: %.4f, expected %.4f +- %.4f\n",
	       (unsigned long long)added, (double)on_new / (double)draws, p_new, sd);
	CHECK(fabs((double)on_new / (double)draws - p_new) <= 6 * sd,
	      "share of draws on inserted keys %.4f, want %.4f", (double)on_new / (double)draws,
	      p_new);
	free(count);
}

/*
 * Add the expected bucket counts of `reads` draws over `present` keys to exp_cnt.
 * Called with present growing (by one key per insert): zeta is grown along.
 */
static void expect_reads(double *exp_cnt, uint64_t present, uint64_t reads)
{
	static double zeta, zcomp; /* zeta(zeta_n, 0.99), Kahan-summed as gs_zeta_exact */
	static uint64_t zeta_n;
	double prob[TOP + 1];
	gs_gray ref;

	if (reads == 0)
		return;
	CHECK(present >= zeta_n, "the store shrank");
	while (zeta_n < present) {
		double y = pow((double)++zeta_n, -0.99) - zcomp, t = zeta + y;

		zcomp = (t - zeta) - y;
		zeta = t;
	}
	gs_gray_init(&ref, present, 0.99, zeta);
	gs_gray_buckets(&ref, TOP, prob);
	for (unsigned b = 0; b <= TOP; b++)
		exp_cnt[b] += (double)reads * prob[b];
}

static void part_workload_d(uint64_t nops)
{
	const uint64_t loaded = 1000;
	const ycsb_workload *wl = ycsb_workload_find('D');
	uint64_t *ops = malloc(nops * sizeof(*ops));
	uint64_t obs[TOP + 1] = { 0 }, reads = 0, on_loaded = 0;
	double exp_cnt[TOP + 1] = { 0 }, prob[TOP + 1];
	uint64_t cur_present = 0, cur_reads = 0; /* reads since the store last grew */
	ycsb_keyseq seq;
	double p;

	CHECK(ops != NULL && wl != NULL, "setup");
	CHECK(wl->default_dist == YCSB_DIST_LATEST, "workload D must default to latest");
	ycsb_pregen pg = { wl, YCSB_DIST_LATEST, 0.99, loaded, 1, tu_seed() ^ tu_mix64(2) };
	CHECK(ycsb_pregen_fill(&pg, ops, nops) == 0, "pregen");
	CHECK(ycsb_keyseq_init(&seq, loaded) == 0, "keyseq");

	for (uint64_t i = 0; i < nops; i++) {
		uint64_t op = ops[i];

		if (ycsb_op_kind(op) == YCSB_OP_INSERT) {
			uint64_t k = ycsb_keyseq_next(&seq);

			CHECK(k != UINT64_MAX, "keyseq overflow");
			ycsb_keyseq_ack(&seq, k); /* one thread: inserted at once */
			continue;
		}
		CHECK(ycsb_op_kind(op) == YCSB_OP_READ, "D has reads and inserts only");
		CHECK(op & YCSB_OP_LATEST, "a D read without the latest flag");

		uint64_t latest = ycsb_keyseq_latest(&seq);
		uint64_t present = latest + 1;
		uint64_t key = ycsb_op_key(op, latest);

		CHECK(key < ycsb_keyseq_count(&seq), "read of key %llu, not inserted yet",
		      (unsigned long long)key);
		/* The pre-generator saw the same store size: one thread inserts. */
		CHECK((op & YCSB_OP_KEY_MASK) < present, "distance %llu beyond %llu keys",
		      (unsigned long long)(op & YCSB_OP_KEY_MASK), (unsigned long long)present);
		obs[latest - key < TOP ? latest - key : TOP]++;
		on_loaded += key < loaded;
		reads++;
		if (present != cur_present) {
			expect_reads(exp_cnt, cur_present, cur_reads);
			cur_present = present;
			cur_reads = 0;
		}
		cur_reads++;
	}
	expect_reads(exp_cnt, cur_present, cur_reads);
	printf("  workload D: %llu reads, %llu inserts; %llu keys at the end; %.1f%% of the "
	       "reads on the %llu loaded keys\n", (unsigned long long)reads,
	       (unsigned long long)(ycsb_keyseq_count(&seq) - loaded),
	       (unsigned long long)ycsb_keyseq_count(&seq),
	       100.0 * (double)on_loaded / (double)reads, (unsigned long long)loaded);
	for (unsigned b = 0; b <= TOP; b++)
		prob[b] = exp_cnt[b] / (double)reads;
	p = gs_chi2_test("D: distance from newest, as the store grows", obs, prob, TOP + 1,
			 reads);
	CHECK(p >= GS_P_FAIL, "D's reads do not follow the inserts (p = %.3g)", p);
	CHECK(on_loaded * 4 < reads, "%llu of %llu reads on loaded keys: reads do not follow "
	      "the inserts", (unsigned long long)on_loaded, (unsigned long long)reads);
	ycsb_keyseq_destroy(&seq);
	free(ops);
}

int main(int argc, char **argv)
{
	gs_init("ycsb_gen_latest", argc, argv);
	part_chooser(tu_scaled(4000000));
	part_workload_d(tu_scaled(1000000));
	printf("ycsb_gen_latest: OK\n");
	return 0;
}
