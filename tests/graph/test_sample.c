/*
 * test_sample.c - neighbourhood sampling over the buffer's in-memory graph.
 *
 * For several states of an epoch (c = p/4, every in-buffer bucket held), an oracle
 * built from the store (every edge between two resident partitions) checks each
 * sample: roots first and unique; every node appears once; every sampled edge is a
 * real in-buffer edge in the sampled direction; a node of hop l gets exactly
 * min(fan-out, in-buffer degree) sampled edges at layer l (all of them for fan-out
 * 0) and none at any other layer (no node is sampled twice); new neighbours form
 * hop l + 1; the gathered rows equal the buffer's. Directions IN, OUT and BOTH.
 * Then four threads sample the same state at once (run under TSan), and bad
 * arguments are refused.
 */
#include "test_graph_util.h"

#include <pthread.h>

static char g_dir[512];

struct oracle {
	uint64_t n;
	uint64_t *pairs;  /* (src << 32 | dst) of in-buffer edges, sorted (ids < 2^32) */
	size_t npairs;
	uint64_t *indeg, *outdeg;
	int32_t *pos;     /* partition -> in state? */
	uint64_t ps;
};

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void oracle_build(struct oracle *o, ember_graph *g, const ember_graph_state *st)
{
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(g, &gi));
	o->n = gi.num_nodes;
	o->ps = gi.partition_size;
	o->indeg = calloc(o->n, 8);
	o->outdeg = calloc(o->n, 8);
	o->pos = malloc(gi.partitions * 4);
	for (uint32_t i = 0; i < gi.partitions; i++)
		o->pos[i] = -1;
	for (uint32_t i = 0; i < st->capacity; i++)
		o->pos[st->partitions[i]] = (int32_t)i;
	size_t total = 0;
	for (uint32_t a = 0; a < st->capacity; a++)
		for (uint32_t b = 0; b < st->capacity; b++) {
			uint64_t sz;
			CHECK_OK(ember_graph_bucket_size(g, st->partitions[a], st->partitions[b], &sz));
			total += sz;
		}
	o->pairs = malloc(total * 8 + 8);
	ember_graph_edge *buf = malloc(total * sizeof(*buf) + sizeof(*buf));
	o->npairs = 0;
	for (uint32_t a = 0; a < st->capacity; a++)
		for (uint32_t b = 0; b < st->capacity; b++) {
			size_t n;
			CHECK_OK(ember_graph_read_bucket(g, st->partitions[a], st->partitions[b], buf,
							 total, &n));
			for (size_t e = 0; e < n; e++) {
				o->pairs[o->npairs++] = buf[e].src << 32 | buf[e].dst;
				o->outdeg[buf[e].src]++;
				o->indeg[buf[e].dst]++;
			}
		}
	qsort(o->pairs, o->npairs, 8, u64cmp);
	free(buf);
}

static void oracle_free(struct oracle *o)
{
	free(o->pairs);
	free(o->indeg);
	free(o->outdeg);
	free(o->pos);
}

static int has_edge(const struct oracle *o, uint64_t src, uint64_t dst)
{
	uint64_t k = src << 32 | dst;
	return bsearch(&k, o->pairs, o->npairs, 8, u64cmp) != NULL;
}

static void check_sample(const struct oracle *o, const ember_graph_sample *sm, const uint64_t *roots,
			 size_t nroots, const ember_graph_sampler_options *so)
{
	/* roots first, unique, in order */
	size_t r = 0;
	for (size_t i = 0; i < nroots; i++) {
		int dup = 0;
		for (size_t j = 0; j < i; j++)
			dup |= roots[j] == roots[i];
		if (!dup) {
			CHECK(r < sm->hop_offsets[1] && sm->nodes[r] == roots[i], "root order");
			r++;
		}
	}
	CHECK(sm->hop_offsets[0] == 0 && sm->hop_offsets[1] == r, "hop 0 is the roots");
	CHECK(sm->hop_offsets[sm->layers + 1] == sm->num_nodes, "hops cover the nodes");
	/* unique nodes, all resident */
	uint64_t *sorted = malloc(sm->num_nodes * 8 + 8);
	memcpy(sorted, sm->nodes, sm->num_nodes * 8);
	qsort(sorted, sm->num_nodes, 8, u64cmp);
	for (size_t i = 0; i < sm->num_nodes; i++) {
		CHECK(i == 0 || sorted[i] != sorted[i - 1], "node %llu twice",
		      (unsigned long long)sorted[i]);
		CHECK(o->pos[sorted[i] / o->ps] >= 0, "node outside the buffer");
	}
	free(sorted);
	/* per-node sampled counts: only at the node's own hop */
	uint32_t *cnt = calloc(sm->num_nodes + 1, 4);
	for (uint32_t l = 0; l < sm->layers; l++) {
		CHECK(sm->edge_offsets[l] <= sm->edge_offsets[l + 1], "edge offsets");
		for (size_t e = sm->edge_offsets[l]; e < sm->edge_offsets[l + 1]; e++) {
			uint32_t d = sm->edge_dst[e], s = sm->edge_src[e];
			CHECK(d >= sm->hop_offsets[l] && d < sm->hop_offsets[l + 1],
			      "layer %u edge from a node of another hop (node sampled twice?)", l);
			CHECK(s < sm->hop_offsets[l + 2], "neighbour past hop l+1");
			uint64_t v = sm->nodes[d], u = sm->nodes[s];
			int ok = 0;
			if (so->direction != EMBER_GRAPH_SAMPLE_OUT)
				ok |= has_edge(o, u, v);
			if (so->direction != EMBER_GRAPH_SAMPLE_IN)
				ok |= has_edge(o, v, u);
			CHECK(ok, "sampled neighbour %llu of %llu is not an in-buffer neighbour",
			      (unsigned long long)u, (unsigned long long)v);
			cnt[d]++;
		}
		/* every node of hop l+1 was reached at layer l */
		for (size_t x = sm->hop_offsets[l + 1]; x < sm->hop_offsets[l + 2]; x++) {
			int found = 0;
			for (size_t e = sm->edge_offsets[l]; e < sm->edge_offsets[l + 1] && !found; e++)
				found = sm->edge_src[e] == x;
			CHECK(found, "hop %u node not reached at layer %u", l + 1, l);
		}
	}
	for (uint32_t l = 0; l < sm->layers; l++)
		for (size_t x = sm->hop_offsets[l]; x < sm->hop_offsets[l + 1]; x++) {
			uint64_t v = sm->nodes[x], deg = 0;
			if (so->direction != EMBER_GRAPH_SAMPLE_OUT)
				deg += o->indeg[v];
			if (so->direction != EMBER_GRAPH_SAMPLE_IN)
				deg += o->outdeg[v];
			uint64_t want = so->fanouts[l] && so->fanouts[l] < deg ? so->fanouts[l] : deg;
			CHECK(cnt[x] == want, "node at hop %u: %u sampled, want %llu (deg %llu fan %u)",
			      l, cnt[x], (unsigned long long)want, (unsigned long long)deg,
			      so->fanouts[l]);
		}
	/* nodes of the last hop are not sampled */
	free(cnt);
}

static void random_roots(const ember_graph_state *st, uint64_t ps, uint64_t n, tu_rng *r,
			 uint64_t *roots, size_t k)
{
	for (size_t i = 0; i < k; i++) {
		for (;;) {
			uint64_t v = (uint64_t)st->partitions[tu_rng_below(r, st->capacity)] * ps +
				     tu_rng_below(r, ps);
			if (v < n) {
				roots[i] = v;
				break;
			}
		}
		if (i && tu_rng_chance(r, 1, 10))
			roots[i] = roots[tu_rng_below(r, i)]; /* repeats are allowed */
	}
}

struct worker {
	ember_graph_buffer *b;
	const struct oracle *o;
	const ember_graph_state *st;
	uint64_t ps, n, stream;
	int runs;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	tu_rng r;
	tu_rng_stream(&r, w->stream);
	ember_graph_sampler_options so;
	ember_graph_sampler_options_default(&so);
	so.seed = w->stream;
	so.direction = (uint32_t)(w->stream % 3);
	ember_graph_sampler *s = NULL;
	CHECK_OK(ember_graph_sampler_open(w->b, &so, &s));
	uint64_t roots[64];
	float *staging = malloc(64 * 200 * 8 * 4);
	for (int i = 0; i < w->runs; i++) {
		random_roots(w->st, w->ps, w->n, &r, roots, 64);
		ember_graph_sample sm;
		CHECK_OK(ember_graph_sampler_run(s, 64, roots, &sm));
		check_sample(w->o, &sm, roots, 64, &so);
		if (sm.num_nodes <= 64 * 200)
			CHECK_OK(ember_graph_sampler_gather(s, staging, 64 * 200));
	}
	free(staging);
	ember_graph_sampler_close(s);
	return NULL;
}

int main(int argc, char **argv)
{
	tu_init("graph_sample", argc, argv);
	tu_rng *r = tu_rng_global();
	ember_db *db = tg_open_store(g_dir, sizeof(g_dir), "graph-sample");
	const uint32_t p = 16, c = 4, dim = 8;
	uint64_t n = tu_scaled(20000);
	size_t m = (size_t)tu_scaled(200000);
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

	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = c;
	ember_graph_buffer *plain = NULL;
	CHECK_OK(ember_graph_buffer_open(g, &bo, &plain));
	ember_graph_sampler_options so;
	ember_graph_sampler_options_default(&so);
	ember_graph_sampler *s = NULL;
	CHECK_RC(ember_graph_sampler_open(plain, &so, &s), EMBER_EINVAL); /* no ALL_EDGES */
	CHECK_OK(ember_graph_buffer_close(plain));

	bo.flags = EMBER_GRAPH_BUFFER_ALL_EDGES;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(g, &bo, &b));
	CHECK_OK(ember_graph_sampler_open(b, &so, &s));
	uint64_t roots[300];
	ember_graph_sample sm;
	CHECK_RC(ember_graph_sampler_run(s, 1, roots, &sm), EMBER_ESTATE); /* no state yet */
	ember_graph_sampler_close(s);

	tg_plan tp;
	tg_plan_make(&tp, p, c, r);
	CHECK_OK(ember_graph_buffer_set_plan(b, &tp.plan));
	ember_graph_sampler_options cases[4];
	for (int i = 0; i < 4; i++)
		ember_graph_sampler_options_default(&cases[i]);
	cases[1].direction = EMBER_GRAPH_SAMPLE_OUT;
	cases[1].layers = 3;
	cases[1].fanouts[0] = 5;
	cases[1].fanouts[1] = 3;
	cases[1].fanouts[2] = 40;
	cases[2].direction = EMBER_GRAPH_SAMPLE_BOTH;
	cases[2].layers = 1;
	cases[2].fanouts[0] = 0; /* all */
	cases[3].fanouts[0] = 0;
	cases[3].fanouts[1] = 50; /* past Floyd: the partial shuffle */
	float *staging = malloc(200000 * dim * 4), *direct = malloc(200000 * dim * 4);
	ember_graph_state st;
	int states = 0, rc;
	uint64_t sampled = 0;
	double t0 = tu_now();
	while ((rc = ember_graph_buffer_next_state(b, &st)) == 0) {
		if (states++ % 5)
			continue; /* every fifth state is checked in full */
		struct oracle o;
		oracle_build(&o, g, &st);
		for (int k = 0; k < 4; k++) {
			cases[k].seed = tu_rng_next(r);
			CHECK_OK(ember_graph_sampler_open(b, &cases[k], &s));
			for (int rep = 0; rep < 5; rep++) {
				size_t nr = 1 + (size_t)tu_rng_below(r, 100);
				random_roots(&st, gi.partition_size, n, r, roots, nr);
				CHECK_OK(ember_graph_sampler_run(s, nr, roots, &sm));
				check_sample(&o, &sm, roots, nr, &cases[k]);
				sampled += sm.num_nodes;
				if (sm.num_nodes > 200000)
					continue;
				CHECK_RC(ember_graph_sampler_gather(s, staging, sm.num_nodes - 1),
					 sm.num_nodes ? EMBER_ERANGE : 0);
				CHECK_OK(ember_graph_sampler_gather(s, staging, 200000));
				CHECK_OK(ember_graph_buffer_gather(b, sm.num_nodes, sm.nodes, direct));
				CHECK(!memcmp(staging, direct, sm.num_nodes * dim * 4), "gather rows");
			}
			/* a root outside the state */
			uint64_t out = UINT64_MAX;
			for (uint32_t q = 0; q < p && out == UINT64_MAX; q++)
				if (o.pos[q] < 0)
					out = (uint64_t)q * gi.partition_size;
			CHECK_RC(ember_graph_sampler_run(s, 1, &out, &sm), EMBER_EINVAL);
			CHECK_RC(ember_graph_sampler_run(s, 1, NULL, &sm), EMBER_EINVAL);
			CHECK_RC(ember_graph_sampler_run(s, 1, roots, NULL), EMBER_EINVAL);
			CHECK_OK(ember_graph_sampler_run(s, 0, roots, &sm));
			CHECK(sm.num_nodes == 0, "no roots, no nodes");
			ember_graph_sampler_close(s);
		}
		/* four threads sampling one state at once */
		pthread_t th[4];
		struct worker w[4];
		for (int t = 0; t < 4; t++) {
			w[t] = (struct worker){b, &o, &st, gi.partition_size, n, (uint64_t)states * 10 + t,
					       (int)tu_scaled(20)};
			CHECK(pthread_create(&th[t], NULL, worker_main, &w[t]) == 0, "thread");
		}
		for (int t = 0; t < 4; t++)
			pthread_join(th[t], NULL);
		oracle_free(&o);
	}
	CHECK_RC(rc, EMBER_ENOTFOUND);
	printf("  %d states, %llu nodes sampled in checked runs, %.2f s\n", states,
	       (unsigned long long)sampled, tu_now() - t0);
	/* bad options */
	ember_graph_sampler_options bad = so;
	bad.layers = 0;
	CHECK_RC(ember_graph_sampler_open(b, &bad, &s), EMBER_EINVAL);
	bad.layers = EMBER_GRAPH_MAX_LAYERS + 1;
	CHECK_RC(ember_graph_sampler_open(b, &bad, &s), EMBER_EINVAL);
	bad = so;
	bad.direction = 3;
	CHECK_RC(ember_graph_sampler_open(b, &bad, &s), EMBER_EINVAL);
	CHECK_RC(ember_graph_sampler_open(NULL, &so, &s), EMBER_EINVAL);
	CHECK_RC(ember_graph_sampler_open(b, NULL, &s), EMBER_EINVAL);
	CHECK_RC(ember_graph_sampler_open(b, &so, NULL), EMBER_EINVAL);
	CHECK_OK(ember_graph_sampler_open(b, &so, &s));
	CHECK_RC(ember_graph_sampler_gather(NULL, staging, 1), EMBER_EINVAL);
	CHECK_RC(ember_graph_sampler_gather(s, NULL, 1), EMBER_EINVAL);
	ember_graph_sampler_close(s);
	ember_graph_sampler_close(NULL);
	free(staging);
	free(direct);
	tg_plan_free(&tp);
	CHECK_OK(ember_graph_buffer_close(b));
	CHECK_OK(ember_graph_close(g));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(g_dir);
	printf("graph_sample: ok\n");
	return 0;
}
