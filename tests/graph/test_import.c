/*
 * test_import.c - ember_graph_import round trips and rejects bad input.
 *
 *   roundtrip   text (pairs, and triples with relations) and binary edge lists,
 *               sorted in memory and through run files with merge passes: every
 *               input edge is in the store exactly once, in the bucket of its new
 *               ids' partitions, mapped through the permutation; buckets sorted.
 *   fd limit    merges under a tight RLIMIT_NOFILE: the fan-in fits the limit.
 *   permutation a bijection, and to_original inverts to_new.
 *   node data   zero, uniform (in range, deterministic) and file initialisers.
 *   train nodes the stored set equals the file's (repeats once); repeats cost no
 *               memory (the peak resident size, where it can be reset).
 *   malformed   each kind of bad line is rejected with its line number.
 *   bad args    NULL, zero, oversize, an existing graph, a missing graph or file.
 */
#include "test_graph_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/resource.h>

static char g_dir[512];

static int edge_cmp(const void *a, const void *b)
{
	const tg_edge *x = a, *y = b;
	if (x->src != y->src)
		return x->src < y->src ? -1 : 1;
	if (x->dst != y->dst)
		return x->dst < y->dst ? -1 : 1;
	return x->rel < y->rel ? -1 : x->rel > y->rel;
}

struct prog {
	int phases[8];
	uint64_t last_done;
};

static void on_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct prog *p = arg;
	const char *names[] = {"scan", "sort", "merge", "nodes", "train"};
	for (int i = 0; i < 5; i++)
		if (!strcmp(phase, names[i]))
			p->phases[i]++;
	CHECK(done <= total || total == 0, "progress %s %llu of %llu", phase,
	      (unsigned long long)done, (unsigned long long)total);
}

/* Every input edge once in the store, in the right bucket, mapped through the
 * permutation; buckets sorted by (src, dst). */
static void check_roundtrip(ember_graph *g, const tg_edge *in, size_t m, uint64_t n)
{
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(g, &gi));
	CHECK(gi.num_edges == m, "edges %llu want %zu", (unsigned long long)gi.num_edges, m);
	CHECK(gi.num_nodes == n, "nodes %llu want %llu", (unsigned long long)gi.num_nodes,
	      (unsigned long long)n);
	tg_edge *got = malloc(m * sizeof(*got));
	ember_graph_edge *buf = malloc(m * sizeof(*buf) + 1);
	CHECK(got && buf, "malloc");
	size_t k = 0;
	for (uint32_t i = 0; i < gi.partitions; i++)
		for (uint32_t j = 0; j < gi.partitions; j++) {
			uint64_t sz = 0;
			size_t nb = 0;
			CHECK_OK(ember_graph_bucket_size(g, i, j, &sz));
			CHECK_OK(ember_graph_read_bucket(g, i, j, buf, m, &nb));
			CHECK(nb == sz, "bucket size");
			CHECK(k + nb <= m, "too many edges");
			for (size_t e = 0; e < nb; e++) {
				CHECK(buf[e].src / gi.partition_size == i &&
					      buf[e].dst / gi.partition_size == j,
				      "edge in the wrong bucket");
				if (e)
					CHECK(buf[e - 1].src < buf[e].src ||
						      (buf[e - 1].src == buf[e].src &&
						       buf[e - 1].dst <= buf[e].dst),
					      "bucket %u,%u not sorted", i, j);
				uint64_t os, od;
				CHECK_OK(ember_graph_node_to_original(g, buf[e].src, &os));
				CHECK_OK(ember_graph_node_to_original(g, buf[e].dst, &od));
				got[k++] = (tg_edge){os, buf[e].rel, od};
			}
		}
	CHECK(k == m, "read %zu edges, want %zu", k, m);
	tg_edge *want = malloc(m * sizeof(*want));
	CHECK(want, "malloc");
	memcpy(want, in, m * sizeof(*want));
	qsort(want, m, sizeof(*want), edge_cmp);
	qsort(got, m, sizeof(*got), edge_cmp);
	for (size_t i = 0; i < m; i++)
		CHECK(!edge_cmp(&want[i], &got[i]), "edge %zu differs after import", i);
	free(want);
	free(got);
	free(buf);
}

static void roundtrip(ember_db *db, const char *name, int binary, int rels, uint64_t n,
		      size_t m, uint32_t p, uint64_t budget, int want_merges)
{
	tu_rng *r = tu_rng_global();
	tg_edge *e = tg_random_edges(r, n, m, rels ? 5 : 1);
	e[0].src = n - 1; /* so that the scan finds n nodes */
	char path[600];
	CHECK(tu_path_join(path, sizeof(path), g_dir, name) == 0, "path");
	if (binary)
		tg_write_binary(path, e, m, rels ? 3 : 2);
	else
		tg_write_text(path, e, m, rels, r);
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = p;
	o.dim = 4;
	o.chunk_bytes = 64u << 10;
	o.memory_budget = budget;
	o.format = binary ? EMBER_GRAPH_BINARY : EMBER_GRAPH_TEXT;
	o.binary_fields = rels ? 3 : 2;
	o.seed = tu_rng_next(r);
	o.tmp_dir = g_dir;
	struct prog pr = {0};
	o.progress = on_progress;
	o.progress_arg = &pr;
	ember_graph_import_result res;
	double t0 = tu_now();
	int rc = ember_graph_import(db, name, path, &o, &res);
	CHECK(rc == 0, "import %s: %s (%s line %llu)", name, ember_strerror(rc), res.error,
	      (unsigned long long)res.error_line);
	printf("  %s: %zu edges, p=%u, %u runs, %u merges, %.2f s\n", name, m, p, res.runs,
	       res.merge_passes, tu_now() - t0);
	CHECK(pr.phases[0] > 0 && pr.phases[1] > 0 && pr.phases[2] > 0 && pr.phases[3] > 0,
	      "progress phases %d %d %d %d", pr.phases[0], pr.phases[1], pr.phases[2],
	      pr.phases[3]);
	if (want_merges)
		CHECK(res.runs > 1 && res.merge_passes > 0, "wanted merge passes (runs %u)",
		      res.runs);
	ember_graph *g = NULL;
	CHECK_OK(ember_graph_open(db, name, &g));
	check_roundtrip(g, e, m, n);
	CHECK_OK(ember_graph_close(g));
	free(e);
}

static void test_permutation(ember_db *db)
{
	/* a small graph whose every node is checked */
	char path[600];
	CHECK(tu_path_join(path, sizeof(path), g_dir, "perm.txt") == 0, "path");
	tg_write_file(path, "0 1\n999 5\n");
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = 7;
	o.dim = 3;
	o.init = EMBER_GRAPH_INIT_UNIFORM;
	o.init_scale = 0.5f;
	o.seed = 42;
	o.chunk_bytes = 64u << 10;
	CHECK_OK(ember_graph_import(db, "perm", path, &o, NULL));
	ember_graph *g = NULL;
	CHECK_OK(ember_graph_open(db, "perm", &g));
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(g, &gi));
	CHECK(gi.num_nodes == 1000 && gi.partition_size == 143 && gi.relations == 1,
	      "info %llu %llu", (unsigned long long)gi.num_nodes,
	      (unsigned long long)gi.partition_size);
	unsigned char seen[1000] = {0};
	uint64_t fixed = 0;
	for (uint64_t i = 0; i < 1000; i++) {
		uint64_t y, x;
		CHECK_OK(ember_graph_node_to_new(g, i, &y));
		CHECK(y < 1000 && !seen[y], "not a bijection at %llu", (unsigned long long)i);
		seen[y] = 1;
		CHECK_OK(ember_graph_node_to_original(g, y, &x));
		CHECK(x == i, "inverse");
		fixed += y == i;
	}
	CHECK(fixed < 20, "%llu fixed points: hardly a random permutation",
	      (unsigned long long)fixed);
	uint64_t y;
	CHECK_RC(ember_graph_node_to_new(g, 1000, &y), EMBER_EINVAL);
	CHECK_RC(ember_graph_node_to_original(g, 1000, &y), EMBER_EINVAL);
	CHECK_RC(ember_graph_node_to_new(NULL, 0, &y), EMBER_EINVAL);
	CHECK_RC(ember_graph_node_to_new(g, 0, NULL), EMBER_EINVAL);
	/* uniform node data in [-0.5, 0.5], not constant */
	float *rows = malloc(1000 * 3 * sizeof(float));
	CHECK(rows, "malloc");
	CHECK_OK(ember_graph_read_nodes(g, 0, 1000, rows));
	double sum = 0, sq = 0;
	for (int i = 0; i < 3000; i++) {
		CHECK(rows[i] >= -0.5f && rows[i] <= 0.5f, "uniform out of range");
		sum += rows[i];
		sq += rows[i] * rows[i];
	}
	CHECK(fabs(sum / 3000) < 0.05 && fabs(sq / 3000 - 1.0 / 12) < 0.02,
	      "mean %f var %f", sum / 3000, sq / 3000);
	/* a range that spans partitions and chunks equals single reads */
	float one[3];
	CHECK_OK(ember_graph_read_nodes(g, 500, 1, one));
	CHECK(!memcmp(one, rows + 1500, sizeof(one)), "read_nodes ranges disagree");
	CHECK_RC(ember_graph_read_nodes(g, 999, 2, rows), EMBER_EINVAL);
	CHECK_RC(ember_graph_read_nodes(g, 0, 1, NULL), EMBER_EINVAL);
	free(rows);
	CHECK_OK(ember_graph_close(g));
}

static void test_node_file_and_train(ember_db *db)
{
	const uint64_t n = 5000;
	const uint32_t dim = 8;
	char ep[600], np[600], tp[600];
	CHECK(tu_path_join(ep, sizeof(ep), g_dir, "nf.txt") == 0, "path");
	CHECK(tu_path_join(np, sizeof(np), g_dir, "nf.bin") == 0, "path");
	CHECK(tu_path_join(tp, sizeof(tp), g_dir, "nf.train") == 0, "path");
	tu_rng *r = tu_rng_global();
	tg_edge *e = tg_random_edges(r, n, 3000, 1);
	e[0].dst = n - 1;
	tg_write_text(ep, e, 3000, 0, r);
	free(e);
	FILE *f = fopen(np, "wb");
	CHECK(f, "fopen");
	for (uint64_t i = 0; i < n; i++)
		for (uint32_t d = 0; d < dim; d++) {
			float v = (float)(i * 10 + d);
			fwrite(&v, 4, 1, f);
		}
	fclose(f);
	f = fopen(tp, "w");
	CHECK(f, "fopen");
	unsigned char *train = calloc(n, 1);
	fprintf(f, "# training nodes\n");
	for (int i = 0; i < 700; i++) {
		uint64_t v = tu_rng_below(r, n);
		train[v] = 1;
		fprintf(f, "%llu\n", (unsigned long long)v);
	}
	fprintf(f, "\n  17  \n");
	train[17] = 1;
	fclose(f);
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = 16;
	o.dim = dim;
	o.init = EMBER_GRAPH_INIT_FILE;
	o.node_data_path = np;
	o.train_nodes_path = tp;
	o.chunk_bytes = 64u << 10;
	o.num_nodes = n;
	ember_graph_import_result res;
	int rc = ember_graph_import(db, "nodefile", ep, &o, &res);
	CHECK(rc == 0, "import: %s %s", ember_strerror(rc), res.error);
	ember_graph *g = NULL;
	CHECK_OK(ember_graph_open(db, "nodefile", &g));
	float *rows = malloc(n * dim * sizeof(float));
	CHECK_OK(ember_graph_read_nodes(g, 0, n, rows));
	uint64_t ntrain = 0;
	for (uint64_t i = 0; i < n; i++)
		ntrain += train[i];
	for (uint64_t y = 0; y < n; y++) {
		uint64_t x;
		CHECK_OK(ember_graph_node_to_original(g, y, &x));
		for (uint32_t d = 0; d < dim; d++)
			CHECK(rows[y * dim + d] == (float)(x * 10 + d), "node %llu row differs",
			      (unsigned long long)y);
	}
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(g, &gi));
	CHECK(gi.train_nodes == ntrain, "train nodes %llu want %llu",
	      (unsigned long long)gi.train_nodes, (unsigned long long)ntrain);
	/* the buffer's node classification mode yields exactly the training nodes */
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = 4;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(g, &bo, &b));
	tg_plan plan;
	tg_plan_make(&plan, 16, 4, r);
	CHECK_OK(ember_graph_buffer_set_plan(b, &plan.plan));
	unsigned char *got = calloc(n, 1);
	uint64_t ids[100], yielded = 0;
	ember_graph_state st;
	int rc2;
	while ((rc2 = ember_graph_buffer_next_state(b, &st)) == 0) {
		size_t k;
		do {
			CHECK_OK(ember_graph_buffer_next_nodes(b, ids, 100, &k));
			for (size_t i = 0; i < k; i++) {
				uint64_t x;
				CHECK_OK(ember_graph_node_to_original(g, ids[i], &x));
				CHECK(train[x] && !got[x], "node %llu is not a training node, or twice",
				      (unsigned long long)x);
				got[x] = 1;
			}
			yielded += k;
		} while (k);
	}
	CHECK_RC(rc2, EMBER_ENOTFOUND);
	CHECK(yielded == ntrain, "yielded %llu training nodes of %llu", (unsigned long long)yielded,
	      (unsigned long long)ntrain);
	free(got);
	tg_plan_free(&plan);
	CHECK_OK(ember_graph_buffer_close(b));
	free(rows);
	free(train);
	CHECK_OK(ember_graph_close(g));
}

/* Import text; want EMBER_ECORRUPT at line `line` (0: want success). */
static void expect_line(ember_db *db, const char *text, uint64_t line, uint64_t num_nodes)
{
	static int k;
	char path[600], name[32];
	snprintf(name, sizeof(name), "bad%d", k++);
	CHECK(tu_path_join(path, sizeof(path), g_dir, name) == 0, "path");
	tg_write_file(path, text);
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = 2;
	o.dim = 2;
	o.num_nodes = num_nodes;
	o.chunk_bytes = 64u << 10;
	ember_graph_import_result res;
	int rc = ember_graph_import(db, name, path, &o, &res);
	if (line == 0) {
		CHECK(rc == 0, "import of %s: %s", name, ember_strerror(rc));
		return;
	}
	CHECK(rc == EMBER_ECORRUPT, "%s: rc %d (%s)", name, rc, ember_strerror(rc));
	CHECK(res.error_line == line, "%s: error_line %llu, want %llu (%s)", name,
	      (unsigned long long)res.error_line, (unsigned long long)line, res.error);
	CHECK(!strcmp(res.error_file, "edges"), "error_file %s", res.error_file);
	ember_graph *g = (ember_graph *)1;
	CHECK_RC(ember_graph_open(db, name, &g), EMBER_ENOTFOUND);
	CHECK(g == NULL, "open failure leaves *g NULL");
}

static void test_malformed(ember_db *db)
{
	expect_line(db, "1 2\n3 x\n", 2, 0);
	expect_line(db, "# c\n\n1 2\n3 4 5\n", 4, 0);       /* field count changes */
	expect_line(db, "1 2 3\n4 5\n", 2, 0);
	expect_line(db, "1 2\n\n\n7\n", 4, 0);              /* one field */
	expect_line(db, "1 2\n3 4 5 6\n", 2, 0) ;           /* four fields */
	expect_line(db, "1 -2\n", 1, 0);
	expect_line(db, "1 2\n3 4\n5 99999999999999999999\n", 3, 0); /* overflow */
	expect_line(db, "1 2\n3 4x\n", 2, 0);
	expect_line(db, "1 2\n3 4\n1 9\n", 3, 5);           /* id past num_nodes */
}

/* An edge line "1 2" padded with blanks to `len` bytes, then '\n' unless last. */
static char *pad_line(char *at, size_t len, int newline)
{
	memset(at, ' ', len);
	memcpy(at, "1 2", 3);
	at += len;
	if (newline)
		*at++ = '\n';
	*at = 0;
	return at;
}

/* Lines longer than 4096 bytes are malformed wherever they lie in the file: whole
 * in the reader's 1 MiB buffer, last without a '\n', or cut by the buffer's end;
 * lines of 4096 bytes are fine in each place. */
static void test_long_lines(ember_db *db)
{
	const size_t mib = 1u << 20;
	char *t = malloc(2 * mib + 3 * 8192);
	CHECK(t, "malloc");
	char *at = pad_line(t, 3, 1);
	pad_line(at, 5000, 1);
	expect_line(db, t, 2, 0); /* whole in the buffer */
	pad_line(at, 5000, 0);
	expect_line(db, t, 2, 0); /* last, without '\n' */
	pad_line(at, 4097, 1);
	expect_line(db, t, 2, 0);
	pad_line(at, 4096, 1);
	expect_line(db, t, 0, 0);
	pad_line(at, 4096, 0);
	expect_line(db, t, 0, 0);
	/* 10485 lines end 100 bytes before the buffer's end; line 10486 is cut by it */
	at = t;
	for (int i = 0; i < 10484; i++)
		at = pad_line(at, 99, 1);
	at = pad_line(at, mib - 100 - (size_t)(at - t) - 1, 1);
	CHECK((size_t)(at - t) == mib - 100, "prefix %zu", (size_t)(at - t));
	char *end = pad_line(at, 4096, 1);
	pad_line(end, 3, 1);
	expect_line(db, t, 0, 0);
	end = pad_line(at, 4097, 1);
	pad_line(end, 3, 1);
	expect_line(db, t, 10486, 0);
	end = pad_line(at, 5000, 1);
	pad_line(end, 3, 1);
	expect_line(db, t, 10486, 0);
	free(t);
}

static void test_bad_args(ember_db *db)
{
	char path[600], bin[600];
	CHECK(tu_path_join(path, sizeof(path), g_dir, "ok.txt") == 0, "path");
	CHECK(tu_path_join(bin, sizeof(bin), g_dir, "cut.bin") == 0, "path");
	tg_write_file(path, "1 2\n2 3\n");
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = 2;
	o.dim = 2;
	ember_graph_import_result res;
	CHECK_RC(ember_graph_import(NULL, "x", path, &o, &res), EMBER_EINVAL);
	CHECK_RC(ember_graph_import(db, NULL, path, &o, &res), EMBER_EINVAL);
	CHECK_RC(ember_graph_import(db, "", path, &o, &res), EMBER_EINVAL);
	char longname[100];
	memset(longname, 'a', 99);
	longname[99] = 0;
	CHECK_RC(ember_graph_import(db, longname, path, &o, &res), EMBER_EINVAL);
	CHECK_RC(ember_graph_import(db, "x", NULL, &o, &res), EMBER_EINVAL);
	CHECK_RC(ember_graph_import(db, "x", path, NULL, &res), EMBER_EINVAL);
	ember_graph_import_options b = o;
	b.partitions = 0;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b.partitions = EMBER_GRAPH_MAX_PARTITIONS + 1;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b = o;
	b.dim = 0;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b = o;
	b.chunk_bytes = 1000;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b.chunk_bytes = EMBER_MAX_VALUE_LEN + 1;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b = o;
	b.format = 7;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b = o;
	b.binary_fields = 4;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b = o;
	b.init = EMBER_GRAPH_INIT_FILE; /* no path */
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b = o;
	b.memory_budget = 1000;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	b = o;
	b.init_scale = -1.0f;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_EINVAL);
	/* ids near 2^64: ceil(num_nodes / p) must not wrap to a partition size of 0 */
	char hp[600];
	CHECK(tu_path_join(hp, sizeof(hp), g_dir, "huge.txt") == 0, "path");
	tg_write_file(hp, "0 18446744073709551613\n"); /* scan: num_nodes = 2^64 - 2 */
	b = o;
	b.partitions = 4;
	CHECK_RC(ember_graph_import(db, "x", hp, &b, &res), EMBER_EINVAL);
	b.partitions = 2;
	b.num_nodes = UINT64_MAX;
	CHECK_RC(ember_graph_import(db, "x", hp, &b, &res), EMBER_EINVAL);
	b.partitions = EMBER_GRAPH_MAX_PARTITIONS;
	CHECK_RC(ember_graph_import(db, "x", hp, &b, &res), EMBER_EINVAL);
	/* missing files */
	CHECK_RC(ember_graph_import(db, "x", "/nonexistent/edges", &o, &res), -ENOENT);
	b = o;
	b.init = EMBER_GRAPH_INIT_FILE;
	b.node_data_path = "/nonexistent/nodes";
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), -ENOENT);
	/* a node data file of the wrong size */
	b.node_data_path = path;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_ECORRUPT);
	CHECK(!strcmp(res.error_file, "node data"), "error_file %s", res.error_file);
	/* a bad training node line */
	char tp[600];
	CHECK(tu_path_join(tp, sizeof(tp), g_dir, "bad.train") == 0, "path");
	tg_write_file(tp, "1\n2\n# c\n3 4\n");
	b = o;
	b.train_nodes_path = tp;
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_ECORRUPT);
	CHECK(res.error_line == 4 && !strcmp(res.error_file, "train nodes"), "train line %llu",
	      (unsigned long long)res.error_line);
	/* a training file that names no node: not "every node trains" (train_nodes 0) */
	tg_write_file(tp, "# none of them\n\n");
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_ECORRUPT);
	CHECK(!strcmp(res.error_file, "train nodes"), "error_file %s", res.error_file);
	tg_write_file(tp, "1\n4\n");
	CHECK_RC(ember_graph_import(db, "x", path, &b, &res), EMBER_ECORRUPT); /* 4 >= n */
	CHECK(res.error_line == 2, "train line %llu", (unsigned long long)res.error_line);
	/* no edges at all */
	char ep[600];
	CHECK(tu_path_join(ep, sizeof(ep), g_dir, "empty.txt") == 0, "path");
	tg_write_file(ep, "# nothing\n\n");
	CHECK_RC(ember_graph_import(db, "x", ep, &o, &res), EMBER_ECORRUPT);
	/* a binary file cut inside record 3 */
	uint64_t v[5] = {1, 2, 3, 4, 5};
	FILE *f = fopen(bin, "wb");
	fwrite(v, 8, 5, f);
	fclose(f);
	b = o;
	b.format = EMBER_GRAPH_BINARY;
	CHECK_RC(ember_graph_import(db, "x", bin, &b, &res), EMBER_ECORRUPT);
	CHECK(res.error_line == 3, "binary record %llu", (unsigned long long)res.error_line);
	/* a value larger than the store takes: 16 MiB chunks on a 64 MiB log are fine,
	 * so this one imports; the graph exists afterwards and a second import of the
	 * same name is refused */
	CHECK_OK(ember_graph_import(db, "x", path, &o, &res));
	CHECK_RC(ember_graph_import(db, "x", path, &o, &res), EMBER_EEXIST);
	/* open / close / readers */
	ember_graph *g = NULL;
	CHECK_RC(ember_graph_open(db, "missing", &g), EMBER_ENOTFOUND);
	CHECK_RC(ember_graph_open(NULL, "x", &g), EMBER_EINVAL);
	CHECK_RC(ember_graph_open(db, NULL, &g), EMBER_EINVAL);
	CHECK_RC(ember_graph_open(db, "x", NULL), EMBER_EINVAL);
	CHECK_OK(ember_graph_open(db, "x", &g));
	ember_graph_info gi;
	CHECK_RC(ember_graph_info_get(NULL, &gi), EMBER_EINVAL);
	CHECK_RC(ember_graph_info_get(g, NULL), EMBER_EINVAL);
	uint64_t sz;
	CHECK_RC(ember_graph_bucket_size(g, 2, 0, &sz), EMBER_EINVAL);
	CHECK_RC(ember_graph_bucket_size(g, 0, 0, NULL), EMBER_EINVAL);
	size_t n = 0;
	ember_graph_edge eb[4];
	CHECK_RC(ember_graph_read_bucket(g, 0, 2, eb, 4, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_read_bucket(g, 0, 0, NULL, 4, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_read_bucket(g, 0, 0, eb, 4, NULL), EMBER_EINVAL);
	/* ERANGE with the size when cap is short */
	uint64_t total = 0;
	for (uint32_t i = 0; i < 2; i++)
		for (uint32_t j = 0; j < 2; j++) {
			CHECK_OK(ember_graph_bucket_size(g, i, j, &sz));
			total += sz;
			if (sz) {
				CHECK_RC(ember_graph_read_bucket(g, i, j, NULL, 0, &n), EMBER_ERANGE);
				CHECK(n == sz, "needed size");
			}
		}
	CHECK(total == 2, "two edges");
	CHECK_OK(ember_graph_close(g));
	CHECK_OK(ember_graph_close(NULL));
}

/* A field of /proc/self/status in KiB (VmRSS, VmHWM), -1 if missing. reset_peak()
 * sets the peak (VmHWM) to the resident size now, which it keeps in g_rss0; -1
 * where /proc/self/clear_refs cannot (the peak checks are then skipped). */
static long status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t fl = strlen(field);
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, fl))
			v = atol(line + fl);
	if (f)
		fclose(f);
	return v;
}

static long g_rss0;

static int reset_peak(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (!f)
		return -1;
	int ok = fputs("5", f) >= 0;
	ok &= fclose(f) == 0;
	g_rss0 = status_kib("VmRSS:");
	return ok && g_rss0 >= 0 && status_kib("VmHWM:") >= 0 ? 0 : -1;
}

/* Import a small graph with training file tp as `name`; the growth of the resident
 * peak in KiB (-1 where it cannot be measured). */
static long train_import_peak(ember_db *db, const char *name, const char *ep, const char *tp,
			      uint64_t want_train)
{
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = 4;
	o.dim = 2;
	o.chunk_bytes = 64u << 10;
	o.memory_budget = 1u << 20;
	o.train_nodes_path = tp;
	int peak = reset_peak() == 0;
	ember_graph_import_result res;
	int rc = ember_graph_import(db, name, ep, &o, &res);
	CHECK(rc == 0, "import: %s (%s)", ember_strerror(rc), res.error);
	long grew = peak ? status_kib("VmHWM:") - g_rss0 : -1;
	if (peak && grew < 0)
		grew = 0; /* the kernel's counters lag a little: no growth */
	ember_graph *g = NULL;
	CHECK_OK(ember_graph_open(db, name, &g));
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(g, &gi));
	CHECK(gi.train_nodes == want_train, "train nodes %llu", (unsigned long long)gi.train_nodes);
	CHECK_OK(ember_graph_close(g));
	return grew;
}

/* A training file that names few nodes on many lines: the repeats must not be held
 * in memory (8 bytes per line was 32 MiB here, grown by doubling). The peak is
 * compared with that of the same import from a 3-line file (sanitizers add their
 * own). */
static void test_train_repeats(ember_db *db)
{
	char ep[600], tp[600], sp[600];
	CHECK(tu_path_join(ep, sizeof(ep), g_dir, "rep.txt") == 0, "path");
	CHECK(tu_path_join(tp, sizeof(tp), g_dir, "rep.train") == 0, "path");
	CHECK(tu_path_join(sp, sizeof(sp), g_dir, "few.train") == 0, "path");
	tg_write_file(ep, "0 1\n1 99\n");
	tg_write_file(sp, "7\n42\n3\n");
	FILE *f = fopen(tp, "w");
	CHECK(f, "fopen");
	for (int i = 0; i < 4 << 20; i++)
		fputs(i % 1000 ? "7\n" : "42\n", f);
	fputs("3\n", f);
	CHECK(fclose(f) == 0, "fclose");
	long few = train_import_peak(db, "few", ep, sp, 3);
	long many = train_import_peak(db, "repeats", ep, tp, 3);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* ASan quarantines freed memory, and glibc's qsort mallocs its scratch: the
	 * sorts that drop repeats hold 8 KiB each until the quarantine is full; TSan's
	 * own memory grew 5.4 MiB here, too near the margin */
	few = many = -1;
#endif
	if (few >= 0 && many >= 0) {
		printf("  training file of 3 lines: peak +%ld KiB; of 4 Mi lines: +%ld KiB\n", few,
		       many);
		/* the lines' ids held were 66-69 MiB */
		CHECK(many < few + (24 << 10), "4 Mi lines naming 3 nodes cost %ld KiB more",
		      many - few);
	} else {
		printf("  (no /proc/self/clear_refs, or a sanitizer: peak memory not checked)\n");
	}
}

static int open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 4096; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* A merge holds one descriptor per run: under a tight RLIMIT_NOFILE the fan-in
 * shrinks to what can be opened (1 MiB of sort memory alone allows 15 runs at once,
 * here 17 runs and 12 spare descriptors), and the import succeeds. */
static void test_fd_limit(ember_db *db)
{
	struct rlimit old, tight;
	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
	tight = old;
	tight.rlim_cur = (rlim_t)open_fds() + 12;
	CHECK(setrlimit(RLIMIT_NOFILE, &tight) == 0, "setrlimit");
	roundtrip(db, "fds", 1, 0, 1u << 16, 16 * 65536 + 99, 4, 1u << 20, 1);
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit");
}

int main(int argc, char **argv)
{
	tu_init("graph_import", argc, argv);
	ember_db *db = tg_open_store(g_dir, sizeof(g_dir), "graph-import");
	size_t m = (size_t)tu_scaled(60000);
	roundtrip(db, "text2", 0, 0, 20000, 2 * m, 8, 1u << 20, 0);
	roundtrip(db, "text3", 0, 1, 3000, m, 5, 64u << 20, 0);
	roundtrip(db, "bin2", 1, 0, 100000, m, 16, 64u << 20, 0);
	roundtrip(db, "bin3", 1, 1, 777, m / 4 + 1, 3, 64u << 20, 0);
	/* larger than the sort memory: 1 MiB holds 65536 records and merges 15 runs at
	 * once, so 20 runs need merge passes */
	if (tu_scale() >= 0.5) /* release (CI runs it at 0.5); the sanitizers less */
		roundtrip(db, "runs", 1, 0, 1u << 20, 20 * 65536 + 777, 32, 1u << 20, 1);
	else
		roundtrip(db, "runs", 1, 0, 1u << 20, 3 * 65536 + 777, 32, 1u << 20, 0);
	test_fd_limit(db);
	test_train_repeats(db);
	test_permutation(db);
	test_node_file_and_train(db);
	test_malformed(db);
	test_long_lines(db);
	test_bad_args(db);
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(g_dir);
	printf("graph_import: ok\n");
	return 0;
}
