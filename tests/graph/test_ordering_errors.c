/*
 * test_ordering_errors.c - every public ordering call, given bad input (NULL, zero,
 * out of range, unknown kind, bad COMET group or training set), returns EMBER_EINVAL
 * and never crashes; create leaves *out NULL on failure; the edge cases of good
 * input (c == p, c == 2, the largest p, n_train == c) work.
 */
#include "ember_graph.h"
#include "test_util.h"

#include <stdint.h>
#include <string.h>

#define POISON ((ember_graph_ordering *)(uintptr_t)0x5a5a5a5a)

static void expect_create_einval(uint32_t p, uint32_t c, int kind,
				 const ember_graph_ordering_options *o, const char *what)
{
	ember_graph_ordering *ord = POISON;
	int rc = ember_graph_ordering_create(p, c, kind, o, &ord);
	CHECK(rc == EMBER_EINVAL, "%s: create(p=%u, c=%u, kind=%d) = %d (%s)", what, p, c,
	      kind, rc, ember_strerror(rc));
	CHECK(ord == NULL, "%s: *out not NULL after a failed create", what);
}

static void test_create(void)
{
	ember_graph_ordering_options o;
	ember_graph_ordering_options_default(&o);
	CHECK_RC(ember_graph_ordering_create(8, 4, EMBER_GRAPH_ORDERING_BETA, &o, NULL),
		 EMBER_EINVAL);
	expect_create_einval(0, 0, EMBER_GRAPH_ORDERING_BETA, &o, "p == 0");
	expect_create_einval(0, 2, EMBER_GRAPH_ORDERING_BETA, &o, "p == 0, c == 2");
	expect_create_einval(1, 1, EMBER_GRAPH_ORDERING_BETA, &o, "c == 1");
	expect_create_einval(8, 0, EMBER_GRAPH_ORDERING_BETA, &o, "c == 0");
	expect_create_einval(8, 1, EMBER_GRAPH_ORDERING_COMET, &o, "c == 1");
	expect_create_einval(8, 9, EMBER_GRAPH_ORDERING_BETA, &o, "c > p");
	expect_create_einval(8, UINT32_MAX, EMBER_GRAPH_ORDERING_BETA, &o, "c huge");
	expect_create_einval(EMBER_GRAPH_ORDERING_MAX_PARTITIONS + 1, 4,
			     EMBER_GRAPH_ORDERING_BETA, &o, "p over the limit");
	expect_create_einval(UINT32_MAX, 4, EMBER_GRAPH_ORDERING_BETA, &o, "p huge");
	expect_create_einval(8, 4, -1, &o, "kind -1");
	expect_create_einval(8, 4, 3, &o, "kind 3");
	expect_create_einval(8, 4, 1000, &o, "kind 1000");

	/* COMET groups: must divide p and c, with c/g >= 2. */
	o.comet_group = 3;
	expect_create_einval(12, 4, EMBER_GRAPH_ORDERING_COMET, &o, "group not dividing c");
	expect_create_einval(8, 6, EMBER_GRAPH_ORDERING_COMET, &o, "group not dividing p");
	o.comet_group = 4;
	expect_create_einval(16, 4, EMBER_GRAPH_ORDERING_COMET, &o, "c/g == 1");
	o.comet_group = UINT32_MAX;
	expect_create_einval(16, 4, EMBER_GRAPH_ORDERING_COMET, &o, "group huge");
	ember_graph_ordering_options_default(&o);

	/* SEQUENTIAL training sets. */
	uint32_t train[6] = {1, 3, 5, 7, 2, 4};
	expect_create_einval(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, "train NULL");
	o.train = train;
	o.n_train = 0;
	expect_create_einval(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, "n_train 0");
	o.n_train = 5;
	expect_create_einval(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, "n_train > c");
	uint32_t dup[3] = {1, 2, 1};
	o.train = dup;
	o.n_train = 3;
	expect_create_einval(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, "duplicate");
	uint32_t big[2] = {1, 8};
	o.train = big;
	o.n_train = 2;
	expect_create_einval(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, "train id >= p");
	o.train = NULL;
	o.n_train = 2;
	expect_create_einval(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, "NULL with n");

	/* Good edge cases. */
	ember_graph_ordering *ord = NULL;
	ember_graph_ordering_info info;
	CHECK_OK(ember_graph_ordering_create(2, 2, EMBER_GRAPH_ORDERING_BETA, NULL, &ord));
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	CHECK(info.states == 1 && info.swaps == 0 && info.assigned == 4, "c == p: %u states",
	      info.states);
	ember_graph_ordering_destroy(ord);
	CHECK_OK(ember_graph_ordering_create(9, 9, EMBER_GRAPH_ORDERING_COMET, NULL, &ord));
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	CHECK(info.states == 1 && info.assigned == 81, "COMET c == p: %u states", info.states);
	ember_graph_ordering_destroy(ord);
	o.train = train;
	o.n_train = 4;
	CHECK_OK(ember_graph_ordering_create(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, &o, &ord));
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	CHECK(info.states == 1, "n_train == c: %u states", info.states);
	ember_graph_ordering_destroy(ord);
	/* The largest p, with a large buffer (few states). */
	CHECK_OK(ember_graph_ordering_create(EMBER_GRAPH_ORDERING_MAX_PARTITIONS,
					     EMBER_GRAPH_ORDERING_MAX_PARTITIONS / 2,
					     EMBER_GRAPH_ORDERING_BETA, NULL, &ord));
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	uint64_t want;
	CHECK_OK(ember_graph_ordering_beta_swaps(EMBER_GRAPH_ORDERING_MAX_PARTITIONS,
						 EMBER_GRAPH_ORDERING_MAX_PARTITIONS / 2, &want));
	CHECK(info.swaps == want, "max p: %lu swaps, want %lu", (unsigned long)info.swaps,
	      (unsigned long)want);
	ember_graph_ordering_destroy(ord);
	ember_graph_ordering_destroy(NULL);
	ember_graph_ordering_options_default(NULL);
	ember_graph_sim_options_default(NULL);
}

static void test_readers(void)
{
	ember_graph_ordering *ord = NULL;
	CHECK_OK(ember_graph_ordering_create(8, 3, EMBER_GRAPH_ORDERING_BETA, NULL, &ord));
	ember_graph_ordering_info info;
	CHECK_RC(ember_graph_ordering_info_get(NULL, &info), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_info_get(ord, NULL), EMBER_EINVAL);
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));

	const uint32_t *slots = NULL;
	CHECK_RC(ember_graph_ordering_state(NULL, 0, &slots), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_state(ord, 0, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_state(ord, info.states, &slots), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_state(ord, UINT32_MAX, &slots), EMBER_EINVAL);
	CHECK_OK(ember_graph_ordering_state(ord, info.states - 1, &slots));

	ember_graph_swap sw;
	CHECK_RC(ember_graph_ordering_swap(NULL, 1, &sw), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_swap(ord, 1, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_swap(ord, 0, &sw), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_swap(ord, info.states, &sw), EMBER_EINVAL);
	CHECK_OK(ember_graph_ordering_swap(ord, info.states - 1, &sw));

	uint32_t st;
	CHECK_RC(ember_graph_ordering_bucket_state(NULL, 0, 0, &st), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_bucket_state(ord, 0, 0, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_bucket_state(ord, 8, 0, &st), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_bucket_state(ord, 0, 8, &st), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_bucket_state(ord, UINT32_MAX, 0, &st), EMBER_EINVAL);
	CHECK_OK(ember_graph_ordering_bucket_state(ord, 7, 7, &st));

	const uint32_t *b;
	uint32_t n;
	CHECK_RC(ember_graph_ordering_state_buckets(NULL, 0, &b, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_state_buckets(ord, 0, NULL, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_state_buckets(ord, 0, &b, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_state_buckets(ord, info.states, &b, &n), EMBER_EINVAL);
	CHECK_OK(ember_graph_ordering_state_buckets(ord, 0, &b, &n));
	CHECK(n == 9 && b != NULL, "state 0 of BETA(8,3) trains the 3x3 buckets, got %u", n);
	ember_graph_ordering_destroy(ord);

	uint64_t v;
	CHECK_RC(ember_graph_ordering_beta_swaps(8, 4, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_beta_swaps(0, 0, &v), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_beta_swaps(8, 1, &v), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_beta_swaps(8, 9, &v), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_beta_swaps(UINT32_MAX, 4, &v), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_lower_bound(8, 4, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_lower_bound(0, 0, &v), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_lower_bound(8, 1, &v), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_lower_bound(8, 9, &v), EMBER_EINVAL);
	/* The largest accepted p: 2^31, no overflow. */
	CHECK_OK(ember_graph_ordering_beta_swaps(1u << 31, 2, &v));
	uint64_t p = 1ull << 31;
	CHECK(v == (p - 2) + (p - 1) * (p - 2) / 2, "beta_swaps(2^31, 2) = %lu", (unsigned long)v);
	CHECK_OK(ember_graph_ordering_lower_bound(1u << 31, 2, &v));
	CHECK(v == p * (p - 1) / 2 - 1, "lower_bound(2^31, 2) = %lu", (unsigned long)v);
}

static void test_simulate(void)
{
	ember_graph_sim_epoch ep[4];
	ember_graph_sim_options so;
	ember_graph_sim_options_default(&so);
	so.epochs = 3;
	CHECK_RC(ember_graph_ordering_simulate(8, 4, 0, NULL, &so, NULL, 3), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_simulate(8, 4, 0, NULL, &so, ep, 2), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_simulate(8, 4, 0, NULL, NULL, ep, 0), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_simulate(0, 0, 0, NULL, &so, ep, 3), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_simulate(8, 1, 0, NULL, &so, ep, 3), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_simulate(8, 9, 0, NULL, &so, ep, 3), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_simulate(8, 4, 7, NULL, &so, ep, 3), EMBER_EINVAL);
	CHECK_RC(ember_graph_ordering_simulate(8, 4, EMBER_GRAPH_ORDERING_SEQUENTIAL, NULL,
					       &so, ep, 3), EMBER_EINVAL);
	so.bucket_reads = 2;
	CHECK_RC(ember_graph_ordering_simulate(8, 4, 0, NULL, &so, ep, 3), EMBER_EINVAL);
	so.bucket_reads = 0;
	CHECK_OK(ember_graph_ordering_simulate(8, 4, 0, NULL, &so, ep, 4));
	CHECK_OK(ember_graph_ordering_simulate(8, 4, 0, NULL, NULL, ep, 1));
}

int main(int argc, char **argv)
{
	tu_init("test_ordering_errors", argc, argv);
	test_create();
	test_readers();
	test_simulate();
	printf("ok\n");
	return 0;
}
