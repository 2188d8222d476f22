/*
 * test_buffer.c - the partition buffer through whole epochs.
 *
 *   degree     a trainer adds 1 to the row of both ends of every edge it is given;
 *              after E epochs (a new random plan each) and a flush, every node's
 *              stored row equals E x its degree. Buffer of c = p/4 partitions with
 *              write-back on; run with 0, 1 and 3 prefetch slots (with 3, buckets
 *              are read 3 states ahead), and with every in-buffer bucket held
 *              (ALL_EDGES).
 *   budget     at the smallest memory budget set_plan accepts (bisection), an
 *              epoch with 2 prefetch slots stays within it.
 *   examples   each epoch returns every edge exactly once, from a state that holds
 *              both its partitions and is the state its bucket is assigned to.
 *   read-only  updates are dropped: the store keeps its rows, and nothing is written.
 *   nodes      node classification mode returns every node once per epoch.
 *   errors     bad arguments and wrong states give their codes.
 */
#include "test_graph_util.h"

static char g_dir[512];

struct graph_fixture {
	ember_db *db;
	ember_graph *g;
	tg_edge *edges;
	size_t m;
	uint64_t n;
	uint32_t p;
	uint64_t *degree; /* by new id */
};

static void fixture_make(struct graph_fixture *fx, const char *name, uint64_t n, size_t m,
			 uint32_t p, uint32_t dim)
{
	tu_rng *r = tu_rng_global();
	fx->n = n;
	fx->m = m;
	fx->p = p;
	fx->edges = tg_random_edges(r, n, m, 1);
	fx->edges[0].src = n - 1;
	char path[600];
	CHECK(tu_path_join(path, sizeof(path), g_dir, name) == 0, "path");
	tg_write_binary(path, fx->edges, m, 2);
	ember_graph_import_options o;
	ember_graph_import_options_default(&o);
	o.partitions = p;
	o.dim = dim;
	o.format = EMBER_GRAPH_BINARY;
	o.init = EMBER_GRAPH_INIT_ZERO;
	o.chunk_bytes = 64u << 10;
	o.seed = tu_rng_next(r);
	ember_graph_import_result res;
	int rc = ember_graph_import(fx->db, name, path, &o, &res);
	CHECK(rc == 0, "import: %s (%s)", ember_strerror(rc), res.error);
	CHECK_OK(ember_graph_open(fx->db, name, &fx->g));
	fx->degree = calloc(n, 8);
	CHECK(fx->degree, "calloc");
	for (size_t i = 0; i < m; i++) {
		uint64_t a, b;
		CHECK_OK(ember_graph_node_to_new(fx->g, fx->edges[i].src, &a));
		CHECK_OK(ember_graph_node_to_new(fx->g, fx->edges[i].dst, &b));
		fx->degree[a]++;
		fx->degree[b]++;
	}
}

static void fixture_free(struct graph_fixture *fx)
{
	CHECK_OK(ember_graph_close(fx->g));
	free(fx->edges);
	free(fx->degree);
}

/* update: 0 none, 1 ember_graph_buffer_update, 2 ember_graph_buffer_update_async;
 * | WAIT_AHEAD: after entering each state (but the last) wait until the updater
 * thread has built the next state's examples, so that they come from it */
enum { UPD_NONE = 0, UPD_SYNC = 1, UPD_ASYNC = 2, WAIT_AHEAD = 4 };

/* One epoch: every batch's edges add 1 to both ends. Checks the examples. */
static void run_epoch_ord(struct graph_fixture *fx, ember_graph_buffer *b, const tg_plan *tp,
			  uint32_t dim, int update, const ember_graph_ordering *ord)
{
	uint32_t p = fx->p, c = tp->plan.capacity;
	uint64_t *seen = calloc((size_t)p * p, 8);
	ember_graph_edge batch[700];
	uint64_t *nodes = malloc(2 * 700 * 8);
	float *ones = malloc(2 * 700 * (size_t)dim * 4);
	CHECK(seen && nodes && ones, "malloc");
	for (size_t i = 0; i < 2 * 700 * (size_t)dim; i++)
		ones[i] = 1.0f;
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(fx->g, &gi));
	if (ord)
		CHECK_OK(ember_graph_buffer_set_ordering(b, ord));
	else
		CHECK_OK(ember_graph_buffer_set_plan(b, &tp->plan));
	uint64_t total = 0;
	int wait_ahead = update & WAIT_AHEAD;
	update &= ~WAIT_AHEAD;
	ember_graph_buffer_stats bs0;
	CHECK_OK(ember_graph_buffer_stats_get(b, &bs0));
	for (uint32_t k = 0;; k++) {
		ember_graph_state st;
		int rc = ember_graph_buffer_next_state(b, &st);
		if (rc == EMBER_ENOTFOUND) {
			CHECK(k == tp->plan.num_states, "ended after %u of %u states", k,
			      tp->plan.num_states);
			break;
		}
		CHECK_OK(rc);
		if (wait_ahead && k + 1 < tp->plan.num_states) {
			ember_graph_buffer_stats bs;
			double t0 = tu_now();
			do {
				CHECK(tu_now() - t0 < 30, "state %u: the next state's examples were "
				      "never built ahead", k);
				CHECK_OK(ember_graph_buffer_stats_get(b, &bs));
			} while (bs.states_prepared < bs0.states_prepared + k + 1);
			CHECK(bs.states_prepared == bs0.states_prepared + k + 1, "built ahead twice");
		}
		CHECK(st.index == k && st.capacity == c, "state index %u", st.index);
		for (uint32_t i = 0; i < c; i++)
			CHECK(st.partitions[i] == tp->states[(size_t)k * c + i], "state partitions");
		uint64_t in_state = 0;
		for (;;) {
			size_t n = 0;
			size_t cap = 1 + (size_t)tu_rng_below(tu_rng_global(), 700);
			CHECK_OK(ember_graph_buffer_next_batch(b, batch, cap, &n));
			if (n == 0)
				break;
			CHECK(n <= cap, "batch size");
			for (size_t i = 0; i < n; i++) {
				uint32_t sp = (uint32_t)(batch[i].src / gi.partition_size),
					 dp = (uint32_t)(batch[i].dst / gi.partition_size);
				CHECK(sp < p && dp < p, "edge ids");
				CHECK(tp->bucket_state[sp * p + dp] == k,
				      "bucket %u,%u trained in state %u, assigned %u", sp, dp, k,
				      tp->bucket_state[sp * p + dp]);
				seen[sp * p + dp]++;
				nodes[2 * i] = batch[i].src;
				nodes[2 * i + 1] = batch[i].dst;
			}
			/* nodes[] is refilled at once: update_async does not read it after
			 * the call; ones[] never changes */
			if (update == UPD_SYNC)
				CHECK_OK(ember_graph_buffer_update(b, 2 * n, nodes, ones,
								   EMBER_GRAPH_UPDATE_ADD));
			else if (update == UPD_ASYNC)
				CHECK_OK(ember_graph_buffer_update_async(b, 2 * n, nodes, ones,
									 EMBER_GRAPH_UPDATE_ADD));
			in_state += n;
		}
		CHECK(in_state == st.edges, "state yielded %llu of %llu examples",
		      (unsigned long long)in_state, (unsigned long long)st.edges);
		total += in_state;
	}
	/* an asynchronous update may still read ones[]: wait for it before the free */
	CHECK_OK(ember_graph_buffer_update_sync(b));
	CHECK(total == fx->m, "epoch gave %llu edges, want %zu", (unsigned long long)total, fx->m);
	for (uint32_t i = 0; i < p; i++)
		for (uint32_t j = 0; j < p; j++) {
			uint64_t want;
			CHECK_OK(ember_graph_bucket_size(fx->g, i, j, &want));
			CHECK(seen[i * p + j] == want, "bucket %u,%u trained %llu of %llu edges", i,
			      j, (unsigned long long)seen[i * p + j], (unsigned long long)want);
		}
	free(seen);
	free(nodes);
	free(ones);
}

static void check_rows(struct graph_fixture *fx, uint32_t dim, uint64_t times);

static void run_epoch(struct graph_fixture *fx, ember_graph_buffer *b, const tg_plan *tp,
		      uint32_t dim, int update)
{
	run_epoch_ord(fx, b, tp, dim, update, NULL);
}

/* A tg_plan holding a copy of an ordering's states and bucket states. */
static void plan_of_ordering(tg_plan *tp, const ember_graph_ordering *ord)
{
	ember_graph_ordering_info oi;
	CHECK_OK(ember_graph_ordering_info_get(ord, &oi));
	uint32_t p = oi.partitions, c = oi.capacity;
	tp->states = malloc((size_t)oi.states * c * 4);
	tp->bucket_state = malloc((size_t)p * p * 4);
	CHECK(tp->states && tp->bucket_state, "malloc");
	for (uint32_t k = 0; k < oi.states; k++) {
		const uint32_t *sl;
		CHECK_OK(ember_graph_ordering_state(ord, k, &sl));
		memcpy(tp->states + (size_t)k * c, sl, (size_t)c * 4);
	}
	for (uint32_t i = 0; i < p; i++)
		for (uint32_t j = 0; j < p; j++)
			CHECK_OK(ember_graph_ordering_bucket_state(ord, i, j,
								   &tp->bucket_state[i * p + j]));
	tp->plan = (ember_graph_plan){.partitions = p, .capacity = c, .num_states = oi.states,
				      .states = tp->states, .bucket_state = tp->bucket_state};
}

/* The degree epoch driven by BETA and COMET orderings (set_ordering). */
static void test_orderings(struct graph_fixture *fx, uint64_t times_before)
{
	const uint32_t dim = 8, c = fx->p / 4;
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = c;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	int kinds[2] = {EMBER_GRAPH_ORDERING_BETA, EMBER_GRAPH_ORDERING_COMET};
	for (int e = 0; e < 2; e++) {
		ember_graph_ordering_options oo;
		ember_graph_ordering_options_default(&oo);
		oo.seed = tu_rng_next(tu_rng_global());
		oo.epoch = (uint64_t)e;
		if (kinds[e] == EMBER_GRAPH_ORDERING_COMET)
			oo.comet_group = 2;
		ember_graph_ordering *ord = NULL;
		CHECK_OK(ember_graph_ordering_create(fx->p, c, kinds[e], &oo, &ord));
		tg_plan tp;
		plan_of_ordering(&tp, ord);
		run_epoch_ord(fx, b, &tp, dim, e == 0 ? UPD_SYNC : UPD_ASYNC | WAIT_AHEAD, ord);
		ember_graph_ordering_destroy(ord);
		tg_plan_free(&tp);
	}
	CHECK_RC(ember_graph_buffer_set_ordering(b, NULL), EMBER_EINVAL);
	ember_graph_ordering *wrong = NULL;
	CHECK_OK(ember_graph_ordering_create(fx->p, c + 1, EMBER_GRAPH_ORDERING_BETA, NULL, &wrong));
	CHECK_RC(ember_graph_buffer_set_ordering(b, wrong), EMBER_EINVAL);
	ember_graph_ordering_destroy(wrong);
	ember_graph_buffer_stats st;
	CHECK_OK(ember_graph_buffer_stats_get(b, &st));
	printf("  orderings BETA + COMET: states %llu read %llu written %llu\n",
	       (unsigned long long)st.states, (unsigned long long)st.partitions_read,
	       (unsigned long long)st.partitions_written);
	CHECK_OK(ember_graph_buffer_close(b));
	check_rows(fx, dim, times_before + 2);
}

static void check_rows(struct graph_fixture *fx, uint32_t dim, uint64_t times)
{
	float *rows = malloc(fx->n * dim * 4);
	CHECK(rows, "malloc");
	CHECK_OK(ember_graph_read_nodes(fx->g, 0, fx->n, rows));
	for (uint64_t v = 0; v < fx->n; v++)
		for (uint32_t d = 0; d < dim; d++)
			CHECK(rows[v * dim + d] == (float)(fx->degree[v] * times),
			      "node %llu dim %u: %g, want %llu", (unsigned long long)v, d,
			      rows[v * dim + d], (unsigned long long)(fx->degree[v] * times));
	free(rows);
}

static void test_degree(struct graph_fixture *fx, uint32_t prefetch, uint32_t flags,
			int update, uint32_t epochs, uint64_t times_before)
{
	const uint32_t dim = 8, c = fx->p / 4;
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = c;
	bo.prefetch_slots = prefetch;
	bo.flags = flags;
	bo.seed = tu_rng_next(tu_rng_global());
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(fx->g, &gi));
	/* a budget: the slots plus 4 MiB, which this graph's buckets fit */
	uint32_t slots = c + (prefetch == EMBER_GRAPH_BUFFER_NO_PREFETCH ? 0 : prefetch);
	bo.memory_budget = gi.partition_size * gi.dim * 4 * slots + (4u << 20);
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	double t0 = tu_now();
	for (uint32_t e = 0; e < epochs; e++) {
		tg_plan tp;
		tg_plan_make(&tp, fx->p, c, tu_rng_global());
		run_epoch(fx, b, &tp, dim, update);
		tg_plan_free(&tp);
	}
	ember_graph_buffer_stats st;
	CHECK_OK(ember_graph_buffer_stats_get(b, &st));
	CHECK_OK(ember_graph_buffer_close(b));
	printf("  prefetch %u flags %u %s: %u epochs %.2f s; states %llu loaded %llu read %llu "
	       "reclaimed %llu written %llu clean %llu after-write %llu wait %.3f s peak %llu\n",
	       prefetch, flags, update == UPD_ASYNC ? "async" : "sync", epochs, tu_now() - t0,
	       (unsigned long long)st.states,
	       (unsigned long long)st.partitions_loaded, (unsigned long long)st.partitions_read,
	       (unsigned long long)st.partitions_reclaimed,
	       (unsigned long long)st.partitions_written, (unsigned long long)st.clean_evictions,
	       (unsigned long long)st.reads_after_write, st.wait_seconds,
	       (unsigned long long)st.memory_peak);
	CHECK(st.partitions_loaded == st.partitions_read + st.partitions_reclaimed, "loads add up");
	CHECK(update == UPD_ASYNC ? st.updates_async > 0 : st.updates_async == 0,
	      "updates applied in the background: %llu", (unsigned long long)st.updates_async);
	CHECK(st.slots == slots, "slots %u want %u", st.slots, slots);
	CHECK(st.memory_peak <= bo.memory_budget, "memory peak %llu over the budget %llu",
	      (unsigned long long)st.memory_peak, (unsigned long long)bo.memory_budget);
	CHECK(st.partitions_written > 0 && st.clean_evictions == 0,
	      "every eviction was dirty here (written %llu, clean %llu)",
	      (unsigned long long)st.partitions_written, (unsigned long long)st.clean_evictions);
	check_rows(fx, dim, times_before + epochs);
}

/* The smallest memory budget (above the slots) that set_plan accepts, found by
 * bisection, holds an epoch with 2 prefetch slots in training mode: the buckets read
 * ahead for later states must not push the peak over it (at this budget only the
 * next state's buckets fit beside the current ones). */
static void test_tight_budget(struct graph_fixture *fx, uint64_t times_before)
{
	const uint32_t dim = 8, c = fx->p / 4, prefetch = 2;
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(fx->g, &gi));
	uint64_t slot_total = gi.partition_size * gi.dim * 4 * (c + prefetch);
	tg_plan tp;
	tg_plan_make(&tp, fx->p, c, tu_rng_global());
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = c;
	bo.prefetch_slots = prefetch;
	bo.seed = tu_rng_next(tu_rng_global());
	uint64_t lo = 0, hi = 64u << 20; /* set_plan refuses slot_total + lo, accepts + hi */
	for (int first = 1; lo + 1 < hi; first = 0) {
		uint64_t mid = first ? hi : lo + (hi - lo) / 2;
		ember_graph_buffer *b = NULL;
		bo.memory_budget = slot_total + mid;
		CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
		int rc = ember_graph_buffer_set_plan(b, &tp.plan);
		CHECK_OK(ember_graph_buffer_close(b));
		if (first) {
			CHECK(rc == 0, "set_plan with %llu bytes over the slots: %s",
			      (unsigned long long)mid, ember_strerror(rc));
			hi = mid;
			continue;
		}
		CHECK(rc == 0 || rc == EMBER_ENOSPC, "set_plan: %s", ember_strerror(rc));
		if (rc == 0)
			hi = mid;
		else
			lo = mid;
	}
	bo.memory_budget = slot_total + hi;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	run_epoch(fx, b, &tp, dim, UPD_ASYNC);
	ember_graph_buffer_stats st;
	CHECK_OK(ember_graph_buffer_stats_get(b, &st));
	CHECK_OK(ember_graph_buffer_close(b));
	printf("  tightest budget: slots + %llu bytes, peak %llu of %llu\n", (unsigned long long)hi,
	       (unsigned long long)st.memory_peak, (unsigned long long)bo.memory_budget);
	CHECK(st.slots == c + prefetch, "slots %u", st.slots);
	CHECK(st.memory_peak <= bo.memory_budget, "memory peak %llu over the budget %llu",
	      (unsigned long long)st.memory_peak, (unsigned long long)bo.memory_budget);
	tg_plan_free(&tp);
	check_rows(fx, dim, times_before + 1);
}

static void test_read_only(struct graph_fixture *fx, uint64_t times)
{
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = fx->p / 4;
	bo.flags = EMBER_GRAPH_BUFFER_READ_ONLY;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	tg_plan tp;
	for (int e = 0; e < 2; e++) { /* updates dropped, applied in the call or not */
		tg_plan_make(&tp, fx->p, bo.capacity, tu_rng_global());
		run_epoch(fx, b, &tp, 8, e == 0 ? UPD_SYNC : UPD_ASYNC);
		tg_plan_free(&tp);
	}
	ember_graph_buffer_stats st;
	CHECK_OK(ember_graph_buffer_stats_get(b, &st));
	CHECK(st.partitions_written == 0 && st.bytes_written == 0, "read-only wrote");
	CHECK_OK(ember_graph_buffer_close(b));
	check_rows(fx, 8, times);
}

/* Node classification mode: every node once per epoch; no updates: clean evictions. */
static void test_nodes(struct graph_fixture *fx)
{
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = fx->p / 4;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	unsigned char *seen = calloc(fx->n, 1);
	uint64_t out[333];
	for (int e = 0; e < 2; e++) {
		tg_plan tp;
		tg_plan_make(&tp, fx->p, bo.capacity, tu_rng_global());
		CHECK_OK(ember_graph_buffer_set_plan(b, &tp.plan));
		memset(seen, 0, fx->n);
		uint64_t total = 0, in_state = 0;
		ember_graph_state st;
		int rc;
		while ((rc = ember_graph_buffer_next_state(b, &st)) == 0) {
			size_t n;
			do {
				CHECK_OK(ember_graph_buffer_next_nodes(b, out, 333, &n));
				for (size_t i = 0; i < n; i++) {
					CHECK(out[i] < fx->n && !seen[out[i]], "node twice or bad");
					seen[out[i]] = 1;
					float row[8];
					CHECK_OK(ember_graph_buffer_gather(b, 1, &out[i], row));
				}
				total += n;
				in_state += n;
			} while (n);
			CHECK(in_state == st.nodes, "state yielded %llu of %llu nodes",
			      (unsigned long long)in_state, (unsigned long long)st.nodes);
			in_state = 0;
		}
		CHECK_RC(rc, EMBER_ENOTFOUND);
		CHECK(total == fx->n, "nodes per epoch %llu want %llu", (unsigned long long)total,
		      (unsigned long long)fx->n);
		tg_plan_free(&tp);
	}
	ember_graph_buffer_stats st;
	CHECK_OK(ember_graph_buffer_stats_get(b, &st));
	CHECK(st.partitions_written == 0 && st.clean_evictions > 0, "clean evictions wrote");
	CHECK_OK(ember_graph_buffer_close(b));
	free(seen);
}

static void test_errors(struct graph_fixture *fx)
{
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	ember_graph_buffer *b = (ember_graph_buffer *)1;
	CHECK_RC(ember_graph_buffer_open(fx->g, &bo, &b), EMBER_EINVAL); /* capacity 0 */
	CHECK(b == NULL, "failed open leaves *b NULL");
	bo.capacity = fx->p + 1;
	CHECK_RC(ember_graph_buffer_open(fx->g, &bo, &b), EMBER_EINVAL);
	bo.capacity = 4;
	CHECK_RC(ember_graph_buffer_open(NULL, &bo, &b), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_open(fx->g, NULL, &b), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_open(fx->g, &bo, NULL), EMBER_EINVAL);
	bo.flags = 0x80;
	CHECK_RC(ember_graph_buffer_open(fx->g, &bo, &b), EMBER_EINVAL);
	bo.flags = 0;
	bo.memory_budget = 1000; /* not even c slots */
	CHECK_RC(ember_graph_buffer_open(fx->g, &bo, &b), EMBER_ENOSPC);
	bo.memory_budget = 0;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	CHECK_RC(ember_graph_close(fx->g), EMBER_EBUSY);
	ember_graph_state st;
	CHECK_RC(ember_graph_buffer_next_state(b, &st), EMBER_ESTATE);
	ember_graph_edge eb[4];
	size_t n;
	CHECK_RC(ember_graph_buffer_next_batch(b, eb, 4, &n), EMBER_ESTATE);
	CHECK_RC(ember_graph_buffer_next_batch(b, NULL, 4, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_next_batch(b, eb, 0, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_next_batch(b, eb, 4, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_next_batch(NULL, eb, 4, &n), EMBER_EINVAL);
	uint64_t nb[4];
	CHECK_RC(ember_graph_buffer_next_nodes(b, nb, 4, &n), EMBER_ESTATE);
	CHECK_RC(ember_graph_buffer_next_nodes(b, NULL, 4, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_next_nodes(b, nb, 0, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_next_nodes(b, nb, 4, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_next_nodes(NULL, nb, 4, &n), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_gather(b, 1, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_gather(NULL, 0, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_set_plan(NULL, NULL), EMBER_EINVAL);
	ember_graph_buffer_options_default(NULL);   /* accepted, does nothing */
	ember_graph_import_options_default(NULL);
	ember_graph_sampler_options_default(NULL);
	uint64_t node = 0;
	float row[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	CHECK_RC(ember_graph_buffer_update(b, 1, &node, row, EMBER_GRAPH_UPDATE_ADD), EMBER_ESTATE);
	CHECK_RC(ember_graph_buffer_update_async(b, 1, &node, row, EMBER_GRAPH_UPDATE_ADD),
		 EMBER_ESTATE);
	CHECK_RC(ember_graph_buffer_update_async(b, 0, NULL, NULL, EMBER_GRAPH_UPDATE_ADD),
		 EMBER_ESTATE);
	CHECK_RC(ember_graph_buffer_update_sync(NULL), EMBER_EINVAL);
	CHECK_OK(ember_graph_buffer_update_sync(b)); /* nothing outstanding */
	tg_plan tp;
	tg_plan_make(&tp, fx->p, 4, tu_rng_global());
	ember_graph_plan bad = tp.plan;
	CHECK_RC(ember_graph_buffer_set_plan(b, NULL), EMBER_EINVAL);
	bad.capacity = 2;
	CHECK_RC(ember_graph_buffer_set_plan(b, &bad), EMBER_EINVAL);
	bad = tp.plan;
	bad.partitions = fx->p + 1;
	CHECK_RC(ember_graph_buffer_set_plan(b, &bad), EMBER_EINVAL);
	bad = tp.plan;
	bad.num_states = 0;
	CHECK_RC(ember_graph_buffer_set_plan(b, &bad), EMBER_EINVAL);
	/* a repeated partition in a state */
	uint32_t keep = tp.states[1];
	tp.states[1] = tp.states[0];
	CHECK_RC(ember_graph_buffer_set_plan(b, &tp.plan), EMBER_EINVAL);
	tp.states[1] = fx->p;
	CHECK_RC(ember_graph_buffer_set_plan(b, &tp.plan), EMBER_EINVAL);
	tp.states[1] = keep;
	/* a bucket assigned to a state that lacks one of its partitions */
	uint32_t k0 = tp.bucket_state[0], other = UINT32_MAX;
	for (uint32_t k = 0; k < tp.plan.num_states && other == UINT32_MAX; k++) {
		int has = 0;
		for (uint32_t i = 0; i < 4; i++)
			has |= tp.states[k * 4 + i] == 0;
		if (!has)
			other = k;
	}
	tp.bucket_state[0] = other;
	CHECK_RC(ember_graph_buffer_set_plan(b, &tp.plan), EMBER_EINVAL);
	tp.bucket_state[0] = tp.plan.num_states;
	CHECK_RC(ember_graph_buffer_set_plan(b, &tp.plan), EMBER_EINVAL);
	tp.bucket_state[0] = k0;
	CHECK_OK(ember_graph_buffer_set_plan(b, &tp.plan));
	CHECK_RC(ember_graph_buffer_set_plan(b, &tp.plan), EMBER_ESTATE);
	CHECK_OK(ember_graph_buffer_next_state(b, &st));
	/* a node outside the state: nothing written */
	uint64_t out_node = UINT64_MAX;
	for (uint64_t v = 0; v < fx->n && out_node == UINT64_MAX; v++) {
		ember_graph_info gi;
		CHECK_OK(ember_graph_info_get(fx->g, &gi));
		uint32_t part = (uint32_t)(v / gi.partition_size);
		int has = 0;
		for (uint32_t i = 0; i < 4; i++)
			has |= st.partitions[i] == part;
		if (!has)
			out_node = v;
	}
	CHECK_RC(ember_graph_buffer_update(b, 1, &out_node, row, EMBER_GRAPH_UPDATE_ADD),
		 EMBER_EINVAL);
	/* asynchronous: a bad node anywhere in the batch, and nothing is written */
	{
		ember_graph_info gi0;
		CHECK_OK(ember_graph_info_get(fx->g, &gi0));
		uint64_t in_node = (uint64_t)st.partitions[0] * gi0.partition_size;
		float before[8], after[8], two[16];
		for (int i = 0; i < 16; i++)
			two[i] = 2.0f;
		CHECK_OK(ember_graph_buffer_gather(b, 1, &in_node, before));
		uint64_t pair[2] = {in_node, out_node};
		CHECK_RC(ember_graph_buffer_update_async(b, 2, pair, two, EMBER_GRAPH_UPDATE_ADD),
			 EMBER_EINVAL);
		uint64_t pair_past[2] = {in_node, fx->n};
		CHECK_RC(ember_graph_buffer_update_async(b, 2, pair_past, two, EMBER_GRAPH_UPDATE_ADD),
			 EMBER_EINVAL);
		CHECK_RC(ember_graph_buffer_update_async(b, 1, &in_node, two, 7), EMBER_EINVAL);
		CHECK_RC(ember_graph_buffer_update_async(b, 1, NULL, two, 0), EMBER_EINVAL);
		CHECK_RC(ember_graph_buffer_update_async(b, 1, &in_node, NULL, 0), EMBER_EINVAL);
		CHECK_RC(ember_graph_buffer_update_async(NULL, 1, &in_node, two, 0), EMBER_EINVAL);
		CHECK_OK(ember_graph_buffer_update_async(b, 0, NULL, NULL, EMBER_GRAPH_UPDATE_ADD));
		CHECK_OK(ember_graph_buffer_gather(b, 1, &in_node, after));
		CHECK(!memcmp(before, after, sizeof(before)), "a rejected update wrote");
		/* then a good one, its result seen by gather (which waits for it), and a
		 * SET after an ADD lands last */
		CHECK_OK(ember_graph_buffer_update_async(b, 1, &in_node, two, EMBER_GRAPH_UPDATE_ADD));
		CHECK_OK(ember_graph_buffer_gather(b, 1, &in_node, after));
		for (int d = 0; d < 8; d++)
			CHECK(after[d] == before[d] + 2.0f, "async add: %g want %g", after[d],
			      before[d] + 2.0f);
		CHECK_OK(ember_graph_buffer_update_async(b, 1, &in_node, two, EMBER_GRAPH_UPDATE_ADD));
		CHECK_OK(ember_graph_buffer_update_async(b, 1, &in_node, before, EMBER_GRAPH_UPDATE_SET));
		CHECK_OK(ember_graph_buffer_update_sync(b));
		CHECK_OK(ember_graph_buffer_gather(b, 1, &in_node, after));
		CHECK(!memcmp(before, after, sizeof(before)), "SET after ADD did not land last");
	}
	CHECK_RC(ember_graph_buffer_gather(b, 1, &out_node, row), EMBER_EINVAL);
	uint64_t past = fx->n;
	CHECK_RC(ember_graph_buffer_gather(b, 1, &past, row), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_update(b, 1, &node, row, 7), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_update(b, 1, NULL, row, 0), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_stats_get(b, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_stats_get(NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_next_state(NULL, &st), EMBER_EINVAL);
	CHECK_RC(ember_graph_buffer_flush(NULL), EMBER_EINVAL);
	CHECK_OK(ember_graph_buffer_flush(b));
	CHECK_OK(ember_graph_buffer_close(b)); /* mid-plan */
	CHECK_OK(ember_graph_buffer_close(NULL));
	/* a budget with room for the slots but not the plan's edges */
	ember_graph_info gi;
	CHECK_OK(ember_graph_info_get(fx->g, &gi));
	bo.memory_budget = gi.partition_size * gi.dim * 4 * 5 + 64;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	CHECK_RC(ember_graph_buffer_set_plan(b, &tp.plan), EMBER_ENOSPC);
	CHECK_OK(ember_graph_buffer_close(b));
	tg_plan_free(&tp);
}

/* A key of the stored layout (docs/graph.md): "eg", name length, name, kind, a, b,
 * chunk (big-endian u32s). */
static size_t layout_key(uint8_t *k, const char *name, char kind, uint32_t a, uint32_t b,
			 uint32_t chunk)
{
	size_t l = strlen(name), o = 0;
	k[o++] = 'e';
	k[o++] = 'g';
	k[o++] = (uint8_t)l;
	memcpy(k + o, name, l);
	o += l;
	k[o++] = (uint8_t)kind;
	uint32_t v[3] = {a, b, chunk};
	for (int i = 0; i < 3; i++) {
		k[o++] = (uint8_t)(v[i] >> 24);
		k[o++] = (uint8_t)(v[i] >> 16);
		k[o++] = (uint8_t)(v[i] >> 8);
		k[o++] = (uint8_t)v[i];
	}
	return o;
}

/* Damage: a missing node chunk reaches the trainer as EMBER_ECORRUPT from
 * next_state (a background read's error), sticky, and close reports it; a damaged
 * metadata record fails open. Runs last: it deletes part of the graph. */
static void test_damage(struct graph_fixture *fx)
{
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(fx->db, &s));
	uint8_t key[128];
	size_t kl = layout_key(key, "g", 'n', 5, 0, 0); /* partition 5, its first chunk */
	CHECK_OK(ember_delete(s, key, kl));
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = fx->p / 4;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(fx->g, &bo, &b));
	tg_plan tp;
	tg_plan_make(&tp, fx->p, bo.capacity, tu_rng_global());
	CHECK_OK(ember_graph_buffer_set_plan(b, &tp.plan));
	ember_graph_state st;
	int rc;
	while ((rc = ember_graph_buffer_next_state(b, &st)) == 0)
		;
	CHECK_RC(rc, EMBER_ECORRUPT);
	CHECK_RC(ember_graph_buffer_next_state(b, &st), EMBER_ECORRUPT);
	CHECK_RC(ember_graph_buffer_close(b), EMBER_ECORRUPT);
	tg_plan_free(&tp);
	float row[8];
	CHECK_RC(ember_graph_read_nodes(fx->g, 5 * ((fx->n + fx->p - 1) / fx->p), 1, row),
		 EMBER_ECORRUPT);
	CHECK_OK(ember_graph_read_nodes(fx->g, 0, 1, row)); /* partition 0 is intact */
	/* a metadata record with a flipped byte */
	kl = layout_key(key, "g", 'm', 0, 0, 0);
	uint8_t meta[128];
	size_t ml = 0;
	CHECK_OK(ember_get(s, key, kl, meta, sizeof(meta), &ml));
	CHECK(ml == 128, "metadata is 128 bytes");
	meta[20] ^= 1;
	CHECK_OK(ember_put(s, key, kl, meta, ml));
	ember_graph *g2 = NULL;
	CHECK_RC(ember_graph_open(fx->db, "g", &g2), EMBER_ECORRUPT);
	CHECK_OK(ember_put(s, key, kl, meta, 100)); /* short */
	CHECK_RC(ember_graph_open(fx->db, "g", &g2), EMBER_ECORRUPT);
	CHECK_OK(ember_session_close(s));
}

int main(int argc, char **argv)
{
	tu_init("graph_buffer", argc, argv);
	struct graph_fixture fx = {0};
	fx.db = tg_open_store(g_dir, sizeof(g_dir), "graph-buffer");
	fixture_make(&fx, "g", tu_scaled(40000), (size_t)tu_scaled(150000), 16, 8);
	uint64_t times = 0;
	test_degree(&fx, 1, 0, UPD_SYNC, 2, times);
	times += 2;
	test_degree(&fx, 1, 0, UPD_ASYNC, 2, times);
	times += 2;
	test_degree(&fx, EMBER_GRAPH_BUFFER_NO_PREFETCH, 0, UPD_ASYNC, 1, times);
	times += 1;
	test_degree(&fx, 3, 0, UPD_ASYNC, 1, times); /* buckets read 3 states ahead */
	times += 1;
	test_tight_budget(&fx, times);
	times += 1;
	test_degree(&fx, 3, EMBER_GRAPH_BUFFER_ALL_EDGES, UPD_SYNC, 1, times);
	times += 1;
	test_degree(&fx, 2, EMBER_GRAPH_BUFFER_ALL_EDGES, UPD_ASYNC, 1, times);
	times += 1;
	test_orderings(&fx, times);
	times += 2;
	test_read_only(&fx, times);
	test_nodes(&fx);
	test_errors(&fx);
	test_damage(&fx);
	fixture_free(&fx);
	CHECK_OK(ember_close(fx.db));
	tu_tmpdir_remove(g_dir);
	printf("graph_buffer: ok\n");
	return 0;
}
