/*
 * test_buffer_stress.c - the buffer under many random epochs, against a reference.
 *
 * Each round picks a buffer shape (c, prefetch slots, ALL_EDGES or not) and runs a
 * few epochs with random plans or orderings (BETA, COMET). In every state the
 * trainer applies one to three random ADD and SET updates to nodes of the state
 * (the ends of its example edges), each applied in the call or handed to the
 * updater thread (update_async, two row arrays in turn), mirroring each on a
 * reference copy of all rows in the same order; then, when edges are held, four
 * sampler threads sample and gather the state at once (their gathers wait for an
 * outstanding asynchronous update) while the reader and writer threads work on the
 * next state in the background; the state may end with an asynchronous update
 * still being applied. Now and then a flush; after every epoch, every stored row (read back
 * through the store after a flush) must equal the reference bit for bit. Tiny
 * 64 KiB chunks make every partition many chunks. Meant for TSan as well.
 */
#include "test_graph_util.h"

#include <pthread.h>

static char g_dir[512];

struct sampler_job {
	ember_graph_buffer *b;
	const ember_graph_state *st;
	uint64_t ps, n, stream;
};

static void *sampler_main(void *arg)
{
	struct sampler_job *j = arg;
	tu_rng r;
	tu_rng_stream(&r, j->stream);
	ember_graph_sampler_options so;
	ember_graph_sampler_options_default(&so);
	so.seed = j->stream;
	so.direction = (uint32_t)(j->stream % 3);
	ember_graph_sampler *s = NULL;
	CHECK_OK(ember_graph_sampler_open(j->b, &so, &s));
	uint64_t roots[32];
	float *staging = NULL;
	size_t cap = 0;
	for (int k = 0; k < 4; k++) {
		for (int i = 0; i < 32; i++) {
			uint64_t v;
			do
				v = (uint64_t)j->st->partitions[tu_rng_below(&r, j->st->capacity)] * j->ps +
				    tu_rng_below(&r, j->ps);
			while (v >= j->n);
			roots[i] = v;
		}
		ember_graph_sample sm;
		CHECK_OK(ember_graph_sampler_run(s, 32, roots, &sm));
		if (sm.num_nodes > cap) {
			free(staging);
			cap = sm.num_nodes;
			staging = malloc(cap * 8 * 4);
			CHECK(staging, "malloc");
		}
		CHECK_OK(ember_graph_sampler_gather(s, staging, cap));
	}
	free(staging);
	ember_graph_sampler_close(s);
	return NULL;
}

int main(int argc, char **argv)
{
	tu_init("graph_buffer_stress", argc, argv);
	tu_rng *r = tu_rng_global();
	ember_db *db = tg_open_store(g_dir, sizeof(g_dir), "graph-stress");
	const uint32_t p = 16, dim = 8;
	uint64_t n = tu_scaled(30000);
	size_t m = (size_t)tu_scaled(120000);
	tg_edge *e = tg_random_edges(r, n, m, 1);
	e[0].src = n - 1;
	char path[600];
	CHECK(tu_path_join(path, sizeof(path), g_dir, "edges.bin") == 0, "path");
	tg_write_binary(path, e, m, 2);
	free(e);
	ember_graph_import_options io;
	ember_graph_import_options_default(&io);
	io.partitions = p;
	io.dim = dim;
	io.format = EMBER_GRAPH_BINARY;
	io.chunk_bytes = 64u << 10;
	io.seed = tu_rng_next(r);
	CHECK_OK(ember_graph_import(db, "g", path, &io, NULL));
	ember_graph *g = NULL;
	CHECK_OK(ember_graph_open(db, "g", &g));
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(g, &gi));
	float *ref = malloc(n * dim * 4), *got = malloc(n * dim * 4);
	CHECK(ref && got, "malloc");
	CHECK_OK(ember_graph_read_nodes(g, 0, n, ref));

	ember_graph_edge batch[512];
	uint64_t nodes[1024];
	static float rows_buf[2][1024 * 8];
	uint32_t turn = 0;
	uint64_t async_updates = 0;
	int rounds = (int)tu_scaled(12);
	uint64_t states_total = 0, updates = 0, samples = 0;
	double t0 = tu_now();
	for (int round = 0; round < rounds; round++) {
		uint32_t cs[3] = {2, 4, 8};
		uint32_t c = cs[tu_rng_below(r, 3)];
		ember_graph_buffer_options bo;
		ember_graph_buffer_options_default(&bo);
		bo.capacity = c;
		bo.prefetch_slots = tu_rng_chance(r, 1, 4) ? EMBER_GRAPH_BUFFER_NO_PREFETCH
							  : (uint32_t)tu_rng_range(r, 1, 4);
		bo.flags = tu_rng_chance(r, 1, 2) ? EMBER_GRAPH_BUFFER_ALL_EDGES : 0;
		bo.seed = tu_rng_next(r);
		ember_graph_buffer *b = NULL;
		CHECK_OK(ember_graph_buffer_open(g, &bo, &b));
		for (int epoch = 0; epoch < 3; epoch++) {
			int how = (int)tu_rng_below(r, 3);
			ember_graph_ordering *ord = NULL;
			tg_plan tp = {0};
			if (how == 0 || c < 4) {
				tg_plan_make(&tp, p, c, r);
				CHECK_OK(ember_graph_buffer_set_plan(b, &tp.plan));
			} else {
				ember_graph_ordering_options oo;
				ember_graph_ordering_options_default(&oo);
				oo.seed = tu_rng_next(r);
				oo.epoch = (uint64_t)epoch;
				if (how == 2)
					oo.comet_group = 2;
				CHECK_OK(ember_graph_ordering_create(p, c, how == 1 ? EMBER_GRAPH_ORDERING_BETA
										  : EMBER_GRAPH_ORDERING_COMET,
								     &oo, &ord));
				CHECK_OK(ember_graph_buffer_set_ordering(b, ord));
			}
			ember_graph_state st;
			int rc;
			while ((rc = ember_graph_buffer_next_state(b, &st)) == 0) {
				states_total++;
				/* updates: example edges' ends, ADD or SET, in the call or
				 * asynchronously, mirrored on ref */
				int nupd = 1 + (int)tu_rng_below(r, 3);
				for (int u = 0; u < nupd; u++) {
					size_t nb;
					CHECK_OK(ember_graph_buffer_next_batch(b, batch, 512, &nb));
					size_t k = 0;
					for (size_t i = 0; i < nb; i++) {
						nodes[k++] = batch[i].src;
						nodes[k++] = batch[i].dst;
					}
					int mode = tu_rng_chance(r, 1, 4) ? EMBER_GRAPH_UPDATE_SET
									  : EMBER_GRAPH_UPDATE_ADD;
					/* an outstanding asynchronous update reads its rows until the
					 * next update call returns: fill the other array */
					float *rows = rows_buf[turn];
					turn ^= 1;
					for (size_t i = 0; i < k * dim; i++)
						rows[i] = (float)(int)tu_rng_below(r, 100) / 8.0f;
					if (tu_rng_chance(r, 1, 2)) {
						CHECK_OK(ember_graph_buffer_update_async(b, k, nodes, rows, mode));
						async_updates++;
						memset(nodes, 0xff, sizeof(nodes)); /* not read after the call */
						for (size_t i = 0; i < nb; i++) {
							nodes[2 * i] = batch[i].src;
							nodes[2 * i + 1] = batch[i].dst;
						}
					} else {
						CHECK_OK(ember_graph_buffer_update(b, k, nodes, rows, mode));
					}
					for (size_t i = 0; i < k; i++)
						for (uint32_t d = 0; d < dim; d++) {
							float *x = &ref[nodes[i] * dim + d];
							*x = mode == EMBER_GRAPH_UPDATE_SET ? rows[i * dim + d]
											    : *x + rows[i * dim + d];
						}
					updates += k;
					/* gathered rows agree with the reference (now and then, so
					 * that an update is often still outstanding below) */
					if (k && tu_rng_chance(r, 1, 3)) {
						float chk[8];
						size_t i = (size_t)tu_rng_below(r, k);
						CHECK_OK(ember_graph_buffer_gather(b, 1, &nodes[i], chk));
						CHECK(!memcmp(chk, &ref[nodes[i] * dim], sizeof(chk)),
						      "gathered row differs");
					}
				}
				if (bo.flags & EMBER_GRAPH_BUFFER_ALL_EDGES) {
					pthread_t th[4];
					struct sampler_job jobs[4];
					for (int t = 0; t < 4; t++) {
						jobs[t] = (struct sampler_job){b, &st, gi.partition_size, n,
									      tu_rng_next(r)};
						CHECK(pthread_create(&th[t], NULL, sampler_main, &jobs[t]) == 0,
						      "thread");
					}
					for (int t = 0; t < 4; t++)
						pthread_join(th[t], NULL);
					samples += 16;
				}
				if (tu_rng_chance(r, 1, 20))
					CHECK_OK(ember_graph_buffer_flush(b));
			}
			CHECK_RC(rc, EMBER_ENOTFOUND);
			CHECK_OK(ember_graph_buffer_flush(b));
			CHECK_OK(ember_graph_read_nodes(g, 0, n, got));
			for (uint64_t v = 0; v < n * dim; v++)
				CHECK(got[v] == ref[v], "round %d epoch %d: node %llu differs (%g vs %g)",
				      round, epoch, (unsigned long long)(v / dim), got[v], ref[v]);
			ember_graph_ordering_destroy(ord);
			if (tp.states)
				tg_plan_free(&tp);
		}
		CHECK_OK(ember_graph_buffer_close(b));
	}
	printf("  %d rounds, %llu states, %llu row updates (%llu asynchronous calls), %llu samples, "
	       "%.2f s\n", rounds, (unsigned long long)states_total, (unsigned long long)updates,
	       (unsigned long long)async_updates,
	       (unsigned long long)samples, tu_now() - t0);
	free(ref);
	free(got);
	CHECK_OK(ember_graph_close(g));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(g_dir);
	printf("graph_buffer_stress: ok\n");
	return 0;
}
