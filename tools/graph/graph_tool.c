/*
 * graph_tool.c - ember-graph: command-line front end of the partition buffer.
 *
 *   ember-graph import --store DIR --name NAME --edges FILE --partitions P --dim D
 *                      [--binary [--fields 3]] [--num-nodes N] [--seed S]
 *                      [--init uniform|zero|file] [--scale X] [--node-data FILE]
 *                      [--train FILE] [--tmp DIR] [--sort-memory BYTES]
 *                      [--chunk BYTES] [--log-memory BYTES] [--truncate] [--quiet]
 *       Import an edge list into a store (created if missing); prints progress on
 *       stderr and, for malformed input, the file and line.
 *   ember-graph rmat --scale S [--edge-factor E] [--seed X] [--a A --b B --c C]
 *                    [--binary] --out FILE
 *       Write a Graph500-style R-MAT edge list: 2^S nodes, E x 2^S edges (default
 *       16), quadrant probabilities a, b, c, d = 1 - a - b - c (defaults 0.57, 0.19,
 *       0.19), each edge drawn bit by bit from the seeded generator.
 *   ember-graph info --store DIR --name NAME
 *       Print a graph's metadata and its bucket size spread.
 *
 * Sizes accept K, M and G suffixes (powers of 1024). Exit status 0 on success,
 * 1 on a failure (with its message), 2 on bad usage.
 */
#include <ember.h>
#include <ember_graph.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(void)
{
	fprintf(stderr,
		"usage: ember-graph import --store DIR --name NAME --edges FILE --partitions P --dim D\n"
		"                          [--binary [--fields 3]] [--num-nodes N] [--seed S]\n"
		"                          [--init uniform|zero|file] [--scale X] [--node-data FILE]\n"
		"                          [--train FILE] [--tmp DIR] [--sort-memory BYTES]\n"
		"                          [--chunk BYTES] [--log-memory BYTES] [--truncate] [--quiet]\n"
		"       ember-graph rmat --scale S [--edge-factor E] [--seed X] [--a A --b B --c C]\n"
		"                        [--binary] --out FILE\n"
		"       ember-graph info --store DIR --name NAME\n");
	exit(2);
}

/* A decimal integer with an optional K, M or G suffix; -1 for anything else,
 * including a sign, leading blanks (strtoull would take " -1" as 2^64 - 1) and a
 * value that overflows once the suffix is applied. */
static int parse_u64(const char *s, uint64_t *out)
{
	char *end = NULL;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
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
	if (*end || (uint64_t)v > UINT64_MAX / mul)
		return -1;
	*out = (uint64_t)v * mul;
	return 0;
}

static uint64_t need_u64(const char *opt, const char *v)
{
	uint64_t x;
	if (!v || parse_u64(v, &x) < 0) {
		fprintf(stderr, "ember-graph: %s wants a non-negative integer\n", opt);
		exit(2);
	}
	return x;
}

/* An option stored in a uint32_t field: out of range is a usage error, not a value
 * silently cut to its low 32 bits (--partitions 4294967298 would import p = 2). */
static uint32_t need_u32(const char *opt, const char *v)
{
	uint64_t x = need_u64(opt, v);
	if (x > UINT32_MAX) {
		fprintf(stderr, "ember-graph: %s is out of range (at most %u)\n", opt, UINT32_MAX);
		exit(2);
	}
	return (uint32_t)x;
}

/* A number that is the whole argument ("0.1x" or "abc" is a usage error, not 0). */
static double need_double(const char *opt, const char *v)
{
	char *end = NULL;
	double x = v ? strtod(v, &end) : 0;
	if (!v || end == v || *end) {
		fprintf(stderr, "ember-graph: %s wants a number\n", opt);
		exit(2);
	}
	return x;
}

static void on_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	(void)arg;
	fprintf(stderr, "\r%-6s %12llu / %-12llu (%5.1f%%)", phase, (unsigned long long)done,
		(unsigned long long)total, total ? 100.0 * (double)done / (double)total : 100.0);
	if (done == total)
		fputc('\n', stderr);
}

static int open_store(const char *dir, uint64_t log_memory, int truncate, ember_db **db)
{
	ember_options o;
	ember_options_default(&o);
	if (log_memory)
		o.log_memory = log_memory;
	if (truncate)
		o.flags |= EMBER_OPEN_TRUNCATE;
	int rc = ember_open(dir, &o, db);
	if (rc < 0)
		fprintf(stderr, "ember-graph: cannot open store %s: %s\n", dir, ember_strerror(rc));
	return rc;
}

static int cmd_import(int argc, char **argv)
{
	const char *store = NULL, *name = NULL, *edges = NULL;
	uint64_t log_memory = 0;
	int truncate = 0, quiet = 0;
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--store") && v)
			store = argv[++i];
		else if (!strcmp(a, "--name") && v)
			name = argv[++i];
		else if (!strcmp(a, "--edges") && v)
			edges = argv[++i];
		else if (!strcmp(a, "--partitions"))
			o.partitions = need_u32(a, v), i++;
		else if (!strcmp(a, "--dim"))
			o.dim = need_u32(a, v), i++;
		else if (!strcmp(a, "--binary"))
			o.format = EMBER_GRAPH_BINARY;
		else if (!strcmp(a, "--fields"))
			o.binary_fields = need_u32(a, v), i++;
		else if (!strcmp(a, "--num-nodes"))
			o.num_nodes = need_u64(a, v), i++;
		else if (!strcmp(a, "--seed"))
			o.seed = need_u64(a, v), i++;
		else if (!strcmp(a, "--init") && v) {
			i++;
			if (!strcmp(v, "uniform"))
				o.init = EMBER_GRAPH_INIT_UNIFORM;
			else if (!strcmp(v, "zero"))
				o.init = EMBER_GRAPH_INIT_ZERO;
			else if (!strcmp(v, "file"))
				o.init = EMBER_GRAPH_INIT_FILE;
			else
				usage();
		} else if (!strcmp(a, "--scale"))
			o.init_scale = (float)need_double(a, v), i++;
		else if (!strcmp(a, "--node-data") && v)
			o.node_data_path = argv[++i];
		else if (!strcmp(a, "--train") && v)
			o.train_nodes_path = argv[++i];
		else if (!strcmp(a, "--tmp") && v)
			o.tmp_dir = argv[++i];
		else if (!strcmp(a, "--sort-memory"))
			o.memory_budget = need_u64(a, v), i++;
		else if (!strcmp(a, "--chunk"))
			o.chunk_bytes = need_u32(a, v), i++;
		else if (!strcmp(a, "--log-memory"))
			log_memory = need_u64(a, v), i++;
		else if (!strcmp(a, "--truncate"))
			truncate = 1;
		else if (!strcmp(a, "--quiet"))
			quiet = 1;
		else
			usage();
	}
	if (!store || !name || !edges || !o.partitions || !o.dim)
		usage();
	if (o.node_data_path && o.init != EMBER_GRAPH_INIT_FILE)
		o.init = EMBER_GRAPH_INIT_FILE;
	if (!quiet)
		o.progress = on_progress;
	ember_db *db = NULL;
	if (open_store(store, log_memory, truncate, &db) < 0)
		return 1;
	ember_graph_import_result res;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = ember_graph_import(db, name, edges, &o, &res);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	if (rc < 0) {
		if (res.error_line)
			fprintf(stderr, "ember-graph: %s file: %s\n", res.error_file, res.error);
		else
			fprintf(stderr, "ember-graph: import failed: %s (%s)\n", ember_strerror(rc),
				res.error);
	} else {
		printf("imported %s: %llu nodes, %llu edges, %u partitions, %u runs, %u merges, "
		       "%.1f MiB stored, %.2f s\n",
		       name, (unsigned long long)res.num_nodes, (unsigned long long)res.num_edges,
		       o.partitions, res.runs, res.merge_passes,
		       (double)res.bytes_stored / (1 << 20), secs);
	}
	int crc = ember_close(db);
	return rc < 0 || crc < 0 ? 1 : 0;
}

/* ---- R-MAT ---------------------------------------------------------------------- */

static uint64_t rm_state[4];

static uint64_t rm_next(void)
{
	uint64_t *s = rm_state;
	uint64_t r = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = s[3] << 45 | s[3] >> 19;
	return r;
}

static double rm_unit(void)
{
	return (double)(rm_next() >> 11) * (1.0 / 9007199254740992.0);
}

static int cmd_rmat(int argc, char **argv)
{
	uint64_t scale = 0, ef = 16, seed = 1;
	double a = 0.57, b = 0.19, c = 0.19;
	int binary = 0;
	const char *out = NULL;
	for (int i = 0; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(o, "--scale"))
			scale = need_u64(o, v), i++;
		else if (!strcmp(o, "--edge-factor"))
			ef = need_u64(o, v), i++;
		else if (!strcmp(o, "--seed"))
			seed = need_u64(o, v), i++;
		else if (!strcmp(o, "--a"))
			a = need_double(o, v), i++;
		else if (!strcmp(o, "--b"))
			b = need_double(o, v), i++;
		else if (!strcmp(o, "--c"))
			c = need_double(o, v), i++;
		else if (!strcmp(o, "--binary"))
			binary = 1;
		else if (!strcmp(o, "--out") && v)
			out = argv[++i];
		else
			usage();
	}
	if (!out || scale == 0 || scale > 40 || ef == 0 || a <= 0 || b < 0 || c < 0 ||
	    a + b + c >= 1.0)
		usage();
	uint64_t x = seed;
	for (int i = 0; i < 4; i++) {
		uint64_t z = (x += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		rm_state[i] = z ^ (z >> 31);
	}
	FILE *f = fopen(out, binary ? "wb" : "w");
	if (!f) {
		fprintf(stderr, "ember-graph: cannot create %s: %s\n", out, strerror(errno));
		return 1;
	}
	static char buf[1 << 20];
	setvbuf(f, buf, _IOFBF, sizeof(buf));
	uint64_t m = ef << scale;
	double pab = a + b, pabc = a + b + c;
	int err = 0;
	for (uint64_t e = 0; e < m && !err; e++) {
		uint64_t src = 0, dst = 0;
		for (uint64_t bit = 0; bit < scale; bit++) {
			double r = rm_unit();
			/* quadrants: a = (0,0), b = (0,1), c = (1,0), d = (1,1) */
			int sbit = r >= pab, dbit = (r >= a && r < pab) || r >= pabc;
			src = src << 1 | (uint64_t)sbit;
			dst = dst << 1 | (uint64_t)dbit;
		}
		if (binary) {
			uint64_t v[2] = {src, dst};
			err = fwrite(v, 8, 2, f) != 2;
		} else {
			err = fprintf(f, "%llu %llu\n", (unsigned long long)src,
				      (unsigned long long)dst) < 0;
		}
	}
	if (fclose(f) != 0 || err) {
		fprintf(stderr, "ember-graph: writing %s failed\n", out);
		return 1;
	}
	printf("wrote %s: R-MAT scale %llu, %llu nodes, %llu edges (a=%.2f b=%.2f c=%.2f)\n", out,
	       (unsigned long long)scale, (unsigned long long)(1ull << scale),
	       (unsigned long long)m, a, b, c);
	return 0;
}

static int cmd_info(int argc, char **argv)
{
	const char *store = NULL, *name = NULL;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--store") && i + 1 < argc)
			store = argv[++i];
		else if (!strcmp(argv[i], "--name") && i + 1 < argc)
			name = argv[++i];
		else
			usage();
	}
	if (!store || !name)
		usage();
	ember_db *db = NULL;
	if (open_store(store, 0, 0, &db) < 0)
		return 1;
	ember_graph *g = NULL;
	int rc = ember_graph_open(db, name, &g);
	if (rc < 0) {
		fprintf(stderr, "ember-graph: cannot open graph %s: %s\n", name, ember_strerror(rc));
		ember_close(db);
		return 1;
	}
	ember_graph_info gi;
	ember_graph_info_get(g, &gi);
	uint64_t mn = UINT64_MAX, mx = 0;
	for (uint32_t i = 0; i < gi.partitions; i++)
		for (uint32_t j = 0; j < gi.partitions; j++) {
			uint64_t s;
			ember_graph_bucket_size(g, i, j, &s);
			mn = s < mn ? s : mn;
			mx = s > mx ? s : mx;
		}
	printf("graph %s: %llu nodes, %llu edges, %u relations, %u partitions of %llu nodes, "
	       "dim %u, %u-byte chunks, %llu training nodes; bucket sizes %llu .. %llu\n",
	       name, (unsigned long long)gi.num_nodes, (unsigned long long)gi.num_edges,
	       gi.relations, gi.partitions, (unsigned long long)gi.partition_size, gi.dim,
	       gi.chunk_bytes, (unsigned long long)gi.train_nodes, (unsigned long long)mn,
	       (unsigned long long)mx);
	ember_graph_close(g);
	return ember_close(db) < 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "import"))
		return cmd_import(argc - 2, argv + 2);
	if (!strcmp(argv[1], "rmat"))
		return cmd_rmat(argc - 2, argv + 2);
	if (!strcmp(argv[1], "info"))
		return cmd_info(argc - 2, argv + 2);
	usage();
	return 2;
}
