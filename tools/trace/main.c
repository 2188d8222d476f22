/*
 * main.c - ember-trace: generate synthetic recommendation traces and replay them
 * through cache policies.
 *
 *   ember-trace gen -o FILE [--batches N] [--batch-size B] [--tables N] [--scale F]
 *                   [--skew S] [--mode zipf|reuse] [--reuse-prob P] [--history H]
 *                   [--seed S]
 *   ember-trace info FILE
 *   ember-trace sim FILE [--capacity N | --capacity-frac F] [--window W]
 *                   [--policies oracle,lru,lfu,min]
 *
 * `sim` replays the trace through the oracle (the embedding cache's planner, with
 * the given lookahead window), LRU, LFU and Belady's MIN with full knowledge, all
 * with the same capacity, and prints rows fetched and hit rate for each (hits over
 * distinct rows per batch), plus fetched relative to MIN. The file format is in
 * docs/cache.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/sim.h"
#include "ember.h"
#include "trace.h"

static void usage(void)
{
	fprintf(stderr,
		"usage:\n"
		"  ember-trace gen -o FILE [--batches N] [--batch-size B] [--tables N]\n"
		"                  [--scale F] [--skew S] [--mode zipf|reuse] [--reuse-prob P]\n"
		"                  [--history H] [--seed S]\n"
		"  ember-trace info FILE\n"
		"  ember-trace sim FILE [--capacity N | --capacity-frac F] [--window W]\n"
		"                  [--policies oracle,lru,lfu,min]\n");
}

static int arg_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

static int arg_f64(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end)
		return -1;
	*out = v;
	return 0;
}

static int cmd_gen(int argc, char **argv)
{
	struct trace_params p;
	const char *out = NULL;
	trace_params_default(&p);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t u = 0;
		double f = 0;
		int bad = 0;
		if (!v) {
			bad = 1;
		} else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
			out = v;
		} else if (!strcmp(a, "--batches")) {
			bad = arg_u64(v, &u) || u > UINT32_MAX;
			p.nbatches = (uint32_t)u;
		} else if (!strcmp(a, "--batch-size")) {
			bad = arg_u64(v, &u) || u == 0 || u > UINT32_MAX;
			p.batch_size = (uint32_t)u;
		} else if (!strcmp(a, "--tables")) {
			bad = arg_u64(v, &u) || u == 0 || u > TRACE_CRITEO_TABLES;
			p.ntables = (uint32_t)u;
		} else if (!strcmp(a, "--scale")) {
			bad = arg_f64(v, &p.scale) || !(p.scale > 0);
		} else if (!strcmp(a, "--skew")) {
			bad = arg_f64(v, &p.skew) || !(p.skew > 0);
		} else if (!strcmp(a, "--mode")) {
			if (!strcmp(v, "zipf"))
				p.mode = TRACE_ZIPF;
			else if (!strcmp(v, "reuse"))
				p.mode = TRACE_REUSE;
			else
				bad = 1;
		} else if (!strcmp(a, "--reuse-prob")) {
			bad = arg_f64(v, &f) || f < 0 || f > 1;
			p.reuse_prob = f;
		} else if (!strcmp(a, "--history")) {
			bad = arg_u64(v, &u) || u == 0 || u > UINT32_MAX;
			p.history = (uint32_t)u;
		} else if (!strcmp(a, "--seed")) {
			bad = arg_u64(v, &p.seed);
		} else {
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "ember-trace gen: bad argument %s%s%s\n", a, v ? " " : "",
				v ? v : "");
			return 2;
		}
		i++;
	}
	if (!out) {
		usage();
		return 2;
	}
	struct trace t;
	int rc = trace_generate(&p, &t);
	if (rc == 0)
		rc = trace_write(&t, out);
	if (rc < 0) {
		fprintf(stderr, "ember-trace gen: %s\n", strerror(-rc));
		trace_free(&t);
		return 1;
	}
	uint64_t rows = 0;
	for (uint32_t i = 0; i < t.ntables; i++)
		rows += t.rows[i];
	printf("%s: %" PRIu32 " batches x %" PRIu32 " samples x %" PRIu32
	       " tables, %" PRIu64 " rows, mode %s, skew %.3f, seed %" PRIu64 "\n",
	       out, t.nbatches, t.batch_size, t.ntables, rows,
	       t.mode == TRACE_ZIPF ? "zipf" : "reuse", t.skew, t.seed);
	trace_free(&t);
	return 0;
}

static int load(const char *path, struct trace *t, struct sim_trace *st)
{
	int rc = trace_read(path, t);
	if (rc < 0) {
		fprintf(stderr, "ember-trace: %s: %s\n", path,
			rc == -EBADMSG ? "not a valid trace file" : strerror(-rc));
		return -1;
	}
	rc = sim_trace_build(st, t->ntables, t->rows, t->nbatches, t->batch_size, t->ids);
	if (rc < 0) {
		fprintf(stderr, "ember-trace: %s: %s\n", path, ember_strerror(rc));
		trace_free(t);
		return -1;
	}
	return 0;
}

static int cmd_info(int argc, char **argv)
{
	if (argc != 1) {
		usage();
		return 2;
	}
	struct trace t;
	struct sim_trace st;
	if (load(argv[0], &t, &st) < 0)
		return 1;
	printf("trace %s: %" PRIu32 " batches x %" PRIu32 " samples x %" PRIu32
	       " tables, mode %s, skew %.3f, reuse_prob %.3f, seed %" PRIu64 "\n",
	       argv[0], t.nbatches, t.batch_size, t.ntables,
	       t.mode == TRACE_ZIPF ? "zipf" : "reuse", t.skew, t.reuse_prob, t.seed);
	printf("rows: %" PRIu64 " in all; per table:", st.total_rows);
	for (uint32_t i = 0; i < t.ntables; i++)
		printf(" %" PRIu64, t.rows[i]);
	printf("\nlookups %" PRIu64 ", distinct per batch: mean %.0f, max %" PRIu32 "\n", st.lookups,
	       t.nbatches ? (double)st.off[t.nbatches] / t.nbatches : 0.0, st.max_uniq);
	sim_trace_free(&st);
	trace_free(&t);
	return 0;
}

static int cmd_sim(int argc, char **argv)
{
	if (argc < 1) {
		usage();
		return 2;
	}
	const char *path = argv[0];
	uint64_t capacity = 0, window = 100;
	double frac = 0.05;
	const char *policies = "oracle,lru,lfu,min";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = !v;
		if (bad)
			;
		else if (!strcmp(a, "--capacity"))
			bad = arg_u64(v, &capacity) || capacity == 0;
		else if (!strcmp(a, "--capacity-frac"))
			bad = arg_f64(v, &frac) || !(frac > 0) || frac > 1;
		else if (!strcmp(a, "--window"))
			bad = arg_u64(v, &window) || window == 0 || window > UINT32_MAX;
		else if (!strcmp(a, "--policies"))
			policies = v;
		else
			bad = 1;
		if (bad) {
			fprintf(stderr, "ember-trace sim: bad argument %s\n", a);
			return 2;
		}
		i++;
	}
	struct trace t;
	struct sim_trace st;
	if (load(path, &t, &st) < 0)
		return 1;
	if (!capacity)
		capacity = (uint64_t)((double)st.total_rows * frac);
	if (capacity < st.max_uniq) {
		fprintf(stderr,
			"ember-trace sim: capacity %" PRIu64 " is below the largest batch's %" PRIu32
			" distinct rows\n",
			capacity, st.max_uniq);
		sim_trace_free(&st);
		trace_free(&t);
		return 1;
	}
	printf("trace %s: %" PRIu32 " batches, %" PRIu64 " rows, %" PRIu64
	       " distinct rows per batch summed; capacity %" PRIu64 " rows (%.2f%%), window %" PRIu64
	       "\n",
	       path, st.nbatches, st.total_rows, st.off[st.nbatches], capacity,
	       100.0 * (double)capacity / (double)st.total_rows, window);
	printf("%-8s %14s %9s %9s %12s\n", "policy", "rows_fetched", "hit_rate", "vs_MIN", "plan_ms/b");
	struct sim_result min = {0};
	int have_min = 0;
	if (strstr(policies, "min")) {
		if (sim_min(&st, capacity, &min) == 0)
			have_min = 1;
	}
	static const char *names[] = {"oracle", "lru", "lfu", "min"};
	int rc = 0;
	for (int k = 0; k < 4; k++) {
		if (!strstr(policies, names[k]))
			continue;
		struct sim_result r;
		int e = k == 0   ? sim_oracle(&st, capacity, (uint32_t)window, &r)
			: k == 1 ? sim_lru(&st, capacity, &r)
			: k == 2 ? sim_lfu(&st, capacity, &r)
				 : (r = min, have_min ? 0 : EMBER_ENOMEM);
		if (e < 0) {
			fprintf(stderr, "ember-trace sim: %s: %s\n", names[k], ember_strerror(e));
			rc = 1;
			continue;
		}
		double total = (double)(r.hits + r.fetched);
		printf("%-8s %14" PRIu64 " %9.4f %9.3f", names[k], r.fetched,
		       total > 0 ? (double)r.hits / total : 0.0,
		       have_min && min.fetched ? (double)r.fetched / (double)min.fetched : 0.0);
		if (k == 0)
			printf(" %12.3f", st.nbatches ? r.plan_ns / 1e6 / st.nbatches : 0.0);
		printf("\n");
	}
	sim_trace_free(&st);
	trace_free(&t);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage();
		return 2;
	}
	if (!strcmp(argv[1], "gen"))
		return cmd_gen(argc - 2, argv + 2);
	if (!strcmp(argv[1], "info"))
		return cmd_info(argc - 2, argv + 2);
	if (!strcmp(argv[1], "sim"))
		return cmd_sim(argc - 2, argv + 2);
	usage();
	return 2;
}
