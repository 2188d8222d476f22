/*
 * test_sample_close.c - a buffer is not closed under its samplers.
 *
 * A sampler keeps its buffer and reads the buffer's current state in every run, so
 * ember_graph_buffer_close with a sampler still open freed memory the sampler went
 * on reading (a use after free under ASan). It now answers EMBER_EBUSY and leaves
 * the buffer as it was, as ember_graph_close does for a graph with open buffers:
 * the samplers keep working, and once the last one is closed the buffer closes.
 */
#include "test_graph_util.h"

static char g_dir[512];

int main(int argc, char **argv)
{
	tu_init("graph_sample_close", argc, argv);
	ember_db *db = tg_open_store(g_dir, sizeof(g_dir), "graph-sample-close");
	ember_graph *g = tg_small_graph(db, g_dir, "0 1\n1 2\n2 3\n3 0\n0 2\n", 4, 0);
	ember_graph_buffer *b = tg_whole_buffer(g, EMBER_GRAPH_BUFFER_ALL_EDGES);

	ember_graph_sampler_options so;
	ember_graph_sampler_options_default(&so);
	so.fanouts[0] = so.fanouts[1] = 0;
	so.direction = EMBER_GRAPH_SAMPLE_BOTH;
	ember_graph_sampler *s1 = NULL, *s2 = NULL;
	CHECK_OK(ember_graph_sampler_open(b, &so, &s1));
	CHECK_OK(ember_graph_sampler_open(b, &so, &s2));
	uint64_t roots[4] = {0, 1, 2, 3};
	ember_graph_sample sm;
	CHECK_OK(ember_graph_sampler_run(s1, 4, roots, &sm));
	size_t nodes = sm.num_nodes, edges = sm.edge_offsets[sm.layers];
	CHECK(nodes == 4 && edges == 10, "sample of the whole graph: %zu nodes, %zu edges",
	      nodes, edges);

	CHECK_RC(ember_graph_buffer_close(b), EMBER_EBUSY);
	CHECK_RC(ember_graph_close(g), EMBER_EBUSY); /* the buffer is still open */
	/* the buffer is untouched: the sampler runs and gathers as before */
	float rows[4 * 4];
	CHECK_OK(ember_graph_sampler_run(s1, 4, roots, &sm));
	CHECK(sm.num_nodes == nodes && sm.edge_offsets[sm.layers] == edges, "sample changed");
	CHECK_OK(ember_graph_sampler_gather(s1, rows, 4));
	ember_graph_sampler_close(s1);
	CHECK_RC(ember_graph_buffer_close(b), EMBER_EBUSY); /* s2 is still open */
	CHECK_OK(ember_graph_sampler_run(s2, 4, roots, &sm));
	ember_graph_sampler_close(s2);
	CHECK_OK(ember_graph_buffer_close(b));
	CHECK_OK(ember_graph_close(g));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(g_dir);
	printf("graph_sample_close: ok\n");
	return 0;
}
