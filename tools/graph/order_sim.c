/*
 * order_sim.c - ember-order-sim: what an ordering of the partition buffer costs.
 *
 *   ember-order-sim --p 16 --c 4 [--kind beta|comet|sequential] [--epochs 3]
 *                   [--partition-bytes N] [--bucket-bytes N] [--seed S]
 *                   [--group G] [--train 0,1,2] [--features-only]
 *                   [--bucket-reads assigned|resident] [--states]
 *
 * Prints one row per epoch (swaps, the lower bound, partitions and buckets read,
 * partitions written, bytes read and written) and the totals, from
 * ember_graph_ordering_simulate(). --states also prints epoch 0's states, one per
 * line, with the number of buckets assigned to each. Sizes accept K, M, G suffixes
 * (powers of 1024). Exit status: 0, 2 for a usage error, 1 when the library
 * refuses the arguments.
 */
#include "ember_graph.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ember-order-sim --p P --c C [--kind beta|comet|sequential]\n"
		"         [--epochs E] [--partition-bytes N] [--bucket-bytes N] [--seed S]\n"
		"         [--group G] [--train i,j,...] [--features-only]\n"
		"         [--bucket-reads assigned|resident] [--states]\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -1;
	uint64_t mul = 1;
	if (*end == 'K' || *end == 'k')
		mul = 1ull << 10;
	else if (*end == 'M' || *end == 'm')
		mul = 1ull << 20;
	else if (*end == 'G' || *end == 'g')
		mul = 1ull << 30;
	if (mul != 1)
		end++;
	if (*end != '\0' || (v && mul > UINT64_MAX / v))
		return -1;
	*out = (uint64_t)v * mul;
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;
	if (parse_u64(s, &v) < 0 || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* "1,5,7" -> a malloc'd array. */
static int parse_list(const char *s, uint32_t **out, uint32_t *n)
{
	uint32_t cap = 1;
	for (const char *q = s; *q; q++)
		cap += *q == ',';
	uint32_t *a = malloc(cap * sizeof(uint32_t));
	if (!a)
		return -1;
	char *copy = strdup(s), *save = NULL;
	if (!copy) {
		free(a);
		return -1;
	}
	uint32_t k = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (k == cap || parse_u32(tok, &a[k++]) < 0) {
			free(copy);
			free(a);
			return -1;
		}
	free(copy);
	*out = a;
	*n = k;
	return 0;
}

static const char *kind_name(int kind)
{
	switch (kind) {
	case EMBER_GRAPH_ORDERING_BETA: return "beta";
	case EMBER_GRAPH_ORDERING_COMET: return "comet";
	case EMBER_GRAPH_ORDERING_SEQUENTIAL: return "sequential";
	default: return "?";
	}
}

static void print_states(uint32_t p, uint32_t c, int kind, const ember_graph_ordering_options *oo)
{
	ember_graph_ordering *ord;
	ember_graph_ordering_info info;
	if (ember_graph_ordering_create(p, c, kind, oo, &ord) < 0)
		return;
	ember_graph_ordering_info_get(ord, &info);
	printf("states of epoch %" PRIu64 " (slot order; buckets assigned):\n", oo->epoch);
	for (uint32_t s = 0; s < info.states; s++) {
		const uint32_t *st, *b;
		uint32_t n;
		ember_graph_ordering_state(ord, s, &st);
		ember_graph_ordering_state_buckets(ord, s, &b, &n);
		printf("  %6u [", s);
		for (uint32_t k = 0; k < c; k++)
			printf("%s%u", k ? " " : "", st[k]);
		printf("]  %u\n", n);
	}
	ember_graph_ordering_destroy(ord);
}

int main(int argc, char **argv)
{
	uint32_t p = 0, c = 0, *train = NULL, ntrain = 0;
	int kind = EMBER_GRAPH_ORDERING_BETA, show_states = 0;
	ember_graph_ordering_options oo;
	ember_graph_sim_options so;
	ember_graph_ordering_options_default(&oo);
	ember_graph_sim_options_default(&so);
	so.epochs = 1;
	static const struct option longopts[] = {
		{"p", required_argument, 0, 'p'},
		{"c", required_argument, 0, 'c'},
		{"kind", required_argument, 0, 'k'},
		{"epochs", required_argument, 0, 'e'},
		{"partition-bytes", required_argument, 0, 'P'},
		{"bucket-bytes", required_argument, 0, 'B'},
		{"seed", required_argument, 0, 's'},
		{"group", required_argument, 0, 'g'},
		{"train", required_argument, 0, 't'},
		{"features-only", no_argument, 0, 'f'},
		{"bucket-reads", required_argument, 0, 'r'},
		{"states", no_argument, 0, 'S'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	int opt;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		int bad = 0;
		switch (opt) {
		case 'p': bad = parse_u32(optarg, &p); break;
		case 'c': bad = parse_u32(optarg, &c); break;
		case 'e': bad = parse_u32(optarg, &so.epochs); break;
		case 'P': bad = parse_u64(optarg, &so.partition_bytes); break;
		case 'B': bad = parse_u64(optarg, &so.bucket_bytes); break;
		case 's': bad = parse_u64(optarg, &oo.seed); break;
		case 'g': bad = parse_u32(optarg, &oo.comet_group); break;
		case 't':
			free(train);
			bad = parse_list(optarg, &train, &ntrain);
			break;
		case 'f': so.features_only = 1; break;
		case 'S': show_states = 1; break;
		case 'k':
			if (!strcmp(optarg, "beta"))
				kind = EMBER_GRAPH_ORDERING_BETA;
			else if (!strcmp(optarg, "comet"))
				kind = EMBER_GRAPH_ORDERING_COMET;
			else if (!strcmp(optarg, "sequential"))
				kind = EMBER_GRAPH_ORDERING_SEQUENTIAL;
			else
				bad = -1;
			break;
		case 'r':
			if (!strcmp(optarg, "assigned"))
				so.bucket_reads = 0;
			else if (!strcmp(optarg, "resident"))
				so.bucket_reads = 1;
			else
				bad = -1;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (bad) {
			fprintf(stderr, "ember-order-sim: bad value: %s\n", optarg);
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || p == 0 || c == 0 || so.epochs == 0) {
		usage(stderr);
		return 2;
	}
	oo.train = train;
	oo.n_train = ntrain;

	ember_graph_sim_epoch *ep = calloc(so.epochs, sizeof(*ep));
	if (!ep) {
		fprintf(stderr, "ember-order-sim: out of memory\n");
		return 1;
	}
	int rc = ember_graph_ordering_simulate(p, c, kind, &oo, &so, ep, so.epochs);
	if (rc < 0) {
		fprintf(stderr, "ember-order-sim: %s\n", ember_strerror(rc));
		free(ep);
		free(train);
		return 1;
	}
	uint64_t beta = 0, lb = 0;
	ember_graph_ordering_beta_swaps(p, c, &beta);
	ember_graph_ordering_lower_bound(p, c, &lb);
	ember_graph_ordering *ord;
	ember_graph_ordering_info info = {0};
	if (ember_graph_ordering_create(p, c, kind, &oo, &ord) == 0) {
		ember_graph_ordering_info_get(ord, &info);
		ember_graph_ordering_destroy(ord);
	}
	printf("ordering %s  p=%u c=%u  group=%u  seed=%" PRIu64 "  states/epoch=%u\n",
	       kind_name(kind), p, c, info.comet_group, oo.seed, info.states);
	printf("BETA formula %" PRIu64 " swaps; lower bound %" PRIu64 " swaps; "
	       "partition %" PRIu64 " B, bucket %" PRIu64 " B; %s; buckets %s\n",
	       beta, lb, so.partition_bytes, so.bucket_bytes,
	       so.features_only ? "features only (no writes)" : "embeddings (dirty evictions written)",
	       so.bucket_reads ? "read when co-resident" : "read once when assigned");
	printf("%6s %10s %8s %10s %10s %10s %12s %16s %16s\n", "epoch", "swaps", "/bound",
	       "first", "p.read", "p.written", "b.read", "bytes.read", "bytes.written");
	ember_graph_sim_epoch t = {0};
	for (uint32_t e = 0; e < so.epochs; e++) {
		printf("%6u %10" PRIu64 " %8.3f %10" PRIu64 " %10" PRIu64 " %10" PRIu64
		       " %12" PRIu64 " %16" PRIu64 " %16" PRIu64 "\n",
		       e, ep[e].swaps, lb ? (double)ep[e].swaps / (double)lb : 1.0,
		       ep[e].first_loads, ep[e].partitions_read, ep[e].partitions_written,
		       ep[e].buckets_read, ep[e].bytes_read, ep[e].bytes_written);
		t.swaps += ep[e].swaps;
		t.first_loads += ep[e].first_loads;
		t.partitions_read += ep[e].partitions_read;
		t.partitions_written += ep[e].partitions_written;
		t.buckets_read += ep[e].buckets_read;
		t.bytes_read += ep[e].bytes_read;
		t.bytes_written += ep[e].bytes_written;
	}
	printf("%6s %10" PRIu64 " %8s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %12" PRIu64
	       " %16" PRIu64 " %16" PRIu64 "\n",
	       "total", t.swaps, "", t.first_loads, t.partitions_read, t.partitions_written,
	       t.buckets_read, t.bytes_read, t.bytes_written);
	if (show_states)
		print_states(p, c, kind, &oo);
	free(ep);
	free(train);
	return 0;
}
