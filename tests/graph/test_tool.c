/*
 * test_tool.c - the ember-graph command (path given as argv[1]).
 *
 *   rmat    writes 2^S nodes' worth of ids and E x 2^S edges; the R-MAT skew shows
 *           in the top bits: P(src top bit = 0) = a + b = 0.76 and P(dst top bit =
 *           0) = a + c = 0.76; the same seed gives the same file.
 *   import  the R-MAT file imports into a store and `info` describes it; a
 *           malformed file exits 1 naming its line; bad usage exits 2, and so do
 *           numbers too large for their option (never cut to 32 bits or wrapped).
 */
#include "test_graph_util.h"

#include <stdarg.h>
#include <sys/wait.h>

static char g_dir[512];
static const char *g_tool;

/* Run the tool with a shell command line; return its exit status; output in out. */
static int run(char *out, size_t cap, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", g_tool, args);
	FILE *p = popen(cmd, "r");
	CHECK(p, "popen");
	size_t n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv)
{
	tu_init("graph_tool", argc, argv);
	if (argc < 2) {
		printf("usage: test_graph_tool PATH-TO-ember-graph\n");
		return TU_SKIP;
	}
	g_tool = argv[1];
	CHECK(tu_tmpdir_make("graph-tool", g_dir, sizeof(g_dir)) == 0, "tmpdir");
	char out[8192], f1[600], f2[600], bad[600], st[600];
	CHECK(tu_path_join(f1, sizeof(f1), g_dir, "r1.txt") == 0, "path");
	CHECK(tu_path_join(f2, sizeof(f2), g_dir, "r2.txt") == 0, "path");
	CHECK(tu_path_join(bad, sizeof(bad), g_dir, "bad.txt") == 0, "path");
	CHECK(tu_path_join(st, sizeof(st), g_dir, "store") == 0, "path");
	const unsigned scale = 12, ef = 8;
	CHECK(run(out, sizeof(out), "rmat --scale %u --edge-factor %u --seed 7 --out '%s'", scale, ef,
		  f1) == 0, "rmat: %s", out);
	CHECK(run(out, sizeof(out), "rmat --scale %u --edge-factor %u --seed 7 --out '%s'", scale, ef,
		  f2) == 0, "rmat: %s", out);
	FILE *a = fopen(f1, "r"), *b = fopen(f2, "r");
	CHECK(a && b, "open outputs");
	unsigned long long s, d, s2, d2, n = 0, src_low = 0, dst_low = 0;
	const unsigned long long half = 1ull << (scale - 1);
	while (fscanf(a, "%llu %llu", &s, &d) == 2) {
		CHECK(fscanf(b, "%llu %llu", &s2, &d2) == 2 && s == s2 && d == d2,
		      "same seed, different edge %llu", n);
		CHECK(s < (1ull << scale) && d < (1ull << scale), "id out of range");
		src_low += s < half;
		dst_low += d < half;
		n++;
	}
	fclose(a);
	fclose(b);
	CHECK(n == (unsigned long long)ef << scale, "%llu edges", n);
	double ps = (double)src_low / (double)n, pd = (double)dst_low / (double)n;
	CHECK(ps > 0.74 && ps < 0.78 && pd > 0.74 && pd < 0.78, "top-bit skew %.3f %.3f", ps, pd);

	CHECK(run(out, sizeof(out),
		  "import --store '%s' --name r --edges '%s' --partitions 4 --dim 8 --truncate "
		  "--chunk 64K --log-memory 16M",
		  st, f1) == 0,
	      "import: %s", out);
	CHECK(strstr(out, "imported r:") && strstr(out, "32768 edges"), "import output: %s", out);
	CHECK(run(out, sizeof(out), "info --store '%s' --name r", st) == 0, "info: %s", out);
	CHECK(strstr(out, "32768 edges") && strstr(out, "4 partitions") && strstr(out, "dim 8"),
	      "info output: %s", out);
	tg_write_file(bad, "1 2\n# ok\n3 4 5\n");
	CHECK(run(out, sizeof(out),
		  "import --store '%s' --name bad --edges '%s' --partitions 2 --dim 2 --quiet", st,
		  bad) == 1,
	      "malformed import: %s", out);
	CHECK(strstr(out, "line 3"), "malformed output names the line: %s", out);
	CHECK(run(out, sizeof(out), "info --store '%s' --name bad", st) == 1, "no graph: %s", out);
	CHECK(run(out, sizeof(out), "import --store '%s' --name x", st) == 2, "usage: %s", out);
	/* numbers that do not fit their option are usage errors, not cut or wrapped
	 * values: 2^32 + 2 partitions is not 2, 2^32 chunk bytes not the default, and
	 * 2^34 G of sort memory (2^64 bytes) not 0 (the default) */
	static const char *const wrong[] = {
		"--partitions 4294967298 --dim 2", "--partitions 2 --dim 4294967297",
		"--partitions 2 --dim 2 --chunk 4294967296", "--partitions 2 --dim 2 --chunk 4G",
		"--partitions 2 --dim 2 --sort-memory 17179869184G",
		"--partitions 2 --dim 2 --num-nodes ' -1'", "--partitions 2 --dim 2 --scale abc",
		"--partitions 2 --dim 2 --scale 0.5x"};
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		CHECK(run(out, sizeof(out), "import --store '%s' --name w --edges '%s' %s --quiet",
			  st, f1, wrong[i]) == 2,
		      "%s: %s", wrong[i], out);
		CHECK(run(out, sizeof(out), "info --store '%s' --name w", st) == 1,
		      "%s made a graph: %s", wrong[i], out);
	}
	CHECK(run(out, sizeof(out), "rmat --scale 0 --out '%s'", f2) == 2, "usage: %s", out);
	CHECK(run(out, sizeof(out), "rmat --scale 8 --a 0.9 --b 0.1 --c 0.1 --out '%s'", f2) == 2,
	      "a+b+c >= 1: %s", out);
	CHECK(run(out, sizeof(out), "frobnicate") == 2, "unknown command: %s", out);
	tu_tmpdir_remove(g_dir);
	printf("graph_tool: ok\n");
	return 0;
}
