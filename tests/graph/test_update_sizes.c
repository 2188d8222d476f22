/*
 * test_update_sizes.c - buffer updates given counts whose arrays cannot exist.
 *
 * ember_graph_buffer_update_async keeps n row pointers (n x 8 bytes); an n near
 * 2^61 made that size wrap, so a 32-byte array was allocated and the check loop
 * wrote a pointer per valid node past it (a heap overflow, seen under ASan; in a
 * release build the buffer's memory_bytes grew by the wrapped size). Now:
 *   - n x dim x 4 (the rows) overflowing size_t is EMBER_EINVAL, for update and
 *     update_async, with nothing written and nothing allocated;
 *   - n x 8 (the row pointers) overflowing size_t is EMBER_ENOMEM (dim 1, where
 *     the rows' n x 4 still fit);
 * and the buffer still takes a normal update afterwards. nodes[] holds 8 valid
 * nodes and then one past the graph, so no call reads past it.
 */
#include "test_graph_util.h"

static char g_dir[512];

int main(int argc, char **argv)
{
	tu_init("graph_update_sizes", argc, argv);
	ember_db *db = tg_open_store(g_dir, sizeof(g_dir), "graph-update-sizes");
	ember_graph *g = tg_small_graph(db, g_dir, "0 1\n1 2\n2 3\n3 0\n", 1, 16);
	ember_graph_buffer *b = tg_whole_buffer(g, 0);

	uint64_t nodes[9] = {0, 1, 2, 3, 4, 5, 6, 7, 16 /* past the graph */};
	float rows[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, before[8], after[8];
	CHECK_OK(ember_graph_buffer_gather(b, 8, nodes, before));
	ember_graph_buffer_stats s0, s1;
	CHECK_OK(ember_graph_buffer_stats_get(b, &s0));

	/* rows of n x 4 bytes overflow size_t */
	size_t huge_rows = ((size_t)1 << 62) + 4;
	/* rows fit (2^63 + 16 bytes), row pointers (n x 8) wrap to 32 bytes */
	size_t huge_ptrs = ((size_t)1 << 61) + 4;
	for (int mode = 0; mode < 2; mode++) {
		CHECK_RC(ember_graph_buffer_update_async(b, huge_rows, nodes, rows, mode),
			 EMBER_EINVAL);
		CHECK_RC(ember_graph_buffer_update(b, huge_rows, nodes, rows, mode), EMBER_EINVAL);
		CHECK_RC(ember_graph_buffer_update_async(b, huge_ptrs, nodes, rows, mode),
			 EMBER_ENOMEM);
		CHECK_RC(ember_graph_buffer_update_async(b, SIZE_MAX, nodes, rows, mode),
			 EMBER_EINVAL);
	}
	CHECK_OK(ember_graph_buffer_update_sync(b));
	CHECK_OK(ember_graph_buffer_stats_get(b, &s1));
	CHECK(s1.memory_bytes == s0.memory_bytes, "memory_bytes %llu -> %llu: row pointers "
	      "allocated for a refused update", (unsigned long long)s0.memory_bytes,
	      (unsigned long long)s1.memory_bytes);
	CHECK(s1.updates_async == s0.updates_async, "a refused update was handed over");
	CHECK_OK(ember_graph_buffer_gather(b, 8, nodes, after));
	CHECK(!memcmp(before, after, sizeof(before)), "a refused update wrote rows");

	/* the buffer still works */
	CHECK_OK(ember_graph_buffer_update_async(b, 8, nodes, rows, EMBER_GRAPH_UPDATE_ADD));
	CHECK_OK(ember_graph_buffer_gather(b, 8, nodes, after));
	for (int i = 0; i < 8; i++)
		CHECK(after[i] == before[i] + 1.0f, "row %d: %g, want %g", i, after[i],
		      before[i] + 1.0f);

	CHECK_OK(ember_graph_buffer_close(b));
	CHECK_OK(ember_graph_close(g));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(g_dir);
	printf("graph_update_sizes: ok\n");
	return 0;
}
