/*
 * test_sample_device.c - sampled batches to a device through ember_gpu's staging
 * pipeline (ember_graph_device_send), and updated rows back (ember_graph_device_update).
 *
 * argv[1] picks the ember_gpu backend: "host" (suite unit, what CI runs) or "cuda"
 * (suite gpu; exits 77 when built without CUDA or no device is present); "stress"
 * as argv[2] (suite stress) runs 8x the batches.
 *
 * What it checks:
 *   - Round trip: samples of a buffer state go to device blocks; a consumer stream
 *     waits on each send's `ready` event (never the host), copies the block back, and
 *     the whole image (rows, nodes, hop and edge offsets, edges, zero padding) must
 *     equal the one built here from the header's layout table, byte for byte, with
 *     rows from ember_graph_sampler_gather. Blocks are poisoned (0xA5) before each
 *     send, so a byte the copies missed shows. Several blocks are in flight at once
 *     and the staging ring is smaller than that (1..3 buffers, staging buffers from
 *     a few hundred bytes, so rows and sections straddle buffers, to 1 MiB), so
 *     buffers are reused while earlier copies are pending. Two threads, each with its
 *     own copy and consumer streams, share one sender. Two states of the epoch.
 *   - The way back: device rows are added / set into the buffer (repeated nodes
 *     included), against ember_graph_buffer_update on a copy of the same rows.
 *   - Bad inputs of every call.
 */
#include "test_graph_util.h"

#include "../gpu/gpu_test.h"

#include <pthread.h>

static char g_dir[512];
/* the buffer's current state, set by main between phases (workers only read it) */
static ember_graph_info g_info;
static const uint32_t *g_parts;
static uint32_t g_c;

#define MAX_ROOTS 24u
#define FAN0 8u
#define FAN1 4u
#define INFLIGHT 5u /* device blocks per worker */

static size_t al64(size_t x)
{
	return (x + 63) / 64 * 64;
}

/* The header's layout, built independently: returns the image's size. */
static size_t build_image(const ember_graph_sample *sm, const float *rows, uint32_t dim,
			  unsigned char *img, size_t cap, size_t off[6])
{
	size_t n = sm->num_nodes, ne = sm->edge_offsets[sm->layers];
	off[0] = 0;
	off[1] = al64(n * dim * 4);
	off[2] = al64(off[1] + n * 8);
	off[3] = al64(off[2] + (sm->layers + 2) * 8);
	off[4] = al64(off[3] + (sm->layers + 1) * 8);
	off[5] = al64(off[4] + ne * 4);
	size_t total = off[5] + ne * 4;
	CHECK(total <= cap, "image %zu > %zu", total, cap);
	memset(img, 0, total);
	if (n) { /* an empty sample's arrays may be NULL */
		memcpy(img + off[0], rows, n * dim * 4);
		memcpy(img + off[1], sm->nodes, n * 8);
	}
	for (uint32_t h = 0; h < sm->layers + 2; h++) {
		uint64_t v = sm->hop_offsets[h];
		memcpy(img + off[2] + h * 8, &v, 8);
	}
	for (uint32_t l = 0; l < sm->layers + 1; l++) {
		uint64_t v = sm->edge_offsets[l];
		memcpy(img + off[3] + l * 8, &v, 8);
	}
	if (ne) {
		memcpy(img + off[4], sm->edge_dst, ne * 4);
		memcpy(img + off[5], sm->edge_src, ne * 4);
	}
	return total;
}

/* A node of one of the current state's partitions. */
static uint64_t random_resident(tu_rng *r)
{
	for (;;) {
		uint64_t first = (uint64_t)g_parts[tu_rng_below(r, g_c)] * g_info.partition_size;
		if (first >= g_info.num_nodes)
			continue; /* an empty last partition */
		uint64_t cnt = g_info.num_nodes - first;
		if (cnt > g_info.partition_size)
			cnt = g_info.partition_size;
		return first + tu_rng_below(r, cnt);
	}
}

struct slot {
	void *dev;               /* the device block */
	unsigned char *back;     /* what the consumer copied back */
	unsigned char *want;     /* the expected image */
	size_t bytes;
	ember_gpu_event *ready;  /* recorded by the send */
	ember_gpu_event *done;   /* recorded by the consumer after its copy */
	int used;
};

struct worker {
	ember_gpu *gpu;
	ember_graph_device *dev;
	ember_graph_buffer *b;
	ember_gpu_stream *h2d, *consumer; /* NULL: make own */
	uint64_t seed;
	uint64_t batches;
	uint32_t dim;
	uint64_t nodes_sent, bytes_sent;
};

static size_t block_cap(uint32_t dim)
{
	size_t nmax = MAX_ROOTS * (1 + FAN0 + FAN0 * FAN1), emax = nmax;
	return nmax * ((size_t)dim * 4 + 8) + emax * 8 + 8 * 64 + 256;
}

static void slot_check(struct slot *sl)
{
	CHECK_OK(ember_gpu_event_synchronize(sl->done));
	for (size_t i = 0; i < sl->bytes; i++)
		CHECK(sl->back[i] == sl->want[i], "image byte %zu of %zu: got %02x want %02x", i,
		      sl->bytes, sl->back[i], sl->want[i]);
	sl->used = 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	ember_gpu_stream *h2d = w->h2d, *cons = w->consumer;
	int own = h2d == NULL;
	if (own) {
		CHECK_OK(ember_gpu_stream_create(w->gpu, &h2d));
		CHECK_OK(ember_gpu_stream_create(w->gpu, &cons));
	}
	ember_graph_sampler_options so;
	ember_graph_sampler_options_default(&so);
	so.layers = 2;
	so.fanouts[0] = FAN0;
	so.fanouts[1] = FAN1;
	so.direction = (uint32_t)(w->seed % 3);
	so.seed = w->seed;
	ember_graph_sampler *s = NULL;
	CHECK_OK(ember_graph_sampler_open(w->b, &so, &s));
	tu_rng r;
	tu_rng_seed(&r, w->seed);

	size_t cap = block_cap(w->dim);
	struct slot sl[INFLIGHT];
	for (uint32_t k = 0; k < INFLIGHT; k++) {
		sl[k] = (struct slot){.back = gt_malloc(cap), .want = gt_malloc(cap)};
		CHECK_OK(ember_gpu_mem_alloc(w->gpu, cap, &sl[k].dev));
		CHECK_OK(ember_gpu_event_create(w->gpu, &sl[k].ready));
		CHECK_OK(ember_gpu_event_create(w->gpu, &sl[k].done));
	}
	float *rows = gt_malloc(cap);
	uint64_t roots[MAX_ROOTS];
	for (uint64_t i = 0; i < w->batches; i++) {
		struct slot *x = &sl[i % INFLIGHT];
		if (x->used)
			slot_check(x); /* the consumer of the batch INFLIGHT ago */
		/* the copies must not overwrite the block before its consumer is done */
		CHECK_OK(ember_gpu_stream_wait_event(h2d, x->done));
		ember_graph_sample sm;
		uint32_t nr = (uint32_t)tu_rng_below(&r, MAX_ROOTS + 1); /* 0: an empty sample */
		for (uint32_t q = 0; q < nr; q++)
			roots[q] = random_resident(&r);
		CHECK_OK(ember_graph_sampler_run(s, nr, roots, &sm));
		CHECK_OK(ember_graph_sampler_gather(s, rows, cap / (w->dim * 4)));
		size_t off[6];
		x->bytes = build_image(&sm, rows, w->dim, x->want, cap, off);
		size_t need = 0;
		CHECK_OK(ember_graph_sample_device_bytes(&sm, w->dim, &need));
		CHECK(need == x->bytes, "device_bytes %zu, layout %zu", need, x->bytes);
		CHECK_OK(ember_gpu_memset(h2d, x->dev, 0xA5, cap)); /* poison */
		ember_graph_device_sample ds;
		CHECK_OK(ember_graph_device_send(w->dev, w->b, &sm, h2d, x->dev, cap, x->ready, &ds));
		unsigned char *base = x->dev;
		CHECK((unsigned char *)ds.rows == base + off[0] &&
			      (unsigned char *)ds.nodes == base + off[1] &&
			      (unsigned char *)ds.hop_offsets == base + off[2] &&
			      (unsigned char *)ds.edge_offsets == base + off[3] &&
			      (unsigned char *)ds.edge_dst == base + off[4] &&
			      (unsigned char *)ds.edge_src == base + off[5],
		      "device pointers");
		CHECK(ds.num_nodes == sm.num_nodes && ds.num_edges == sm.edge_offsets[2] &&
			      ds.layers == 2 && ds.dim == w->dim && ds.bytes == x->bytes,
		      "device sample header");
		/* the sample's arrays may be reused once send returned: sample again
		 * before the consumer copies (the image must not change) */
		if (tu_rng_chance(&r, 1, 2)) {
			roots[0] = random_resident(&r);
			CHECK_OK(ember_graph_sampler_run(s, 1, roots, &sm));
		}
		/* the consumer: waits on the event, never the host */
		CHECK_OK(ember_gpu_stream_wait_event(cons, x->ready));
		CHECK_OK(ember_gpu_copy_d2h(cons, x->back, x->dev, x->bytes));
		CHECK_OK(ember_gpu_event_record(x->done, cons));
		x->used = 1;
		w->nodes_sent += sm.num_nodes;
		w->bytes_sent += x->bytes;
	}
	for (uint32_t k = 0; k < INFLIGHT; k++) {
		if (sl[k].used)
			slot_check(&sl[k]);
		CHECK_OK(ember_gpu_stream_synchronize(h2d));
		CHECK_OK(ember_gpu_mem_free(w->gpu, sl[k].dev));
		CHECK_OK(ember_gpu_event_destroy(sl[k].ready));
		CHECK_OK(ember_gpu_event_destroy(sl[k].done));
		free(sl[k].back);
		free(sl[k].want);
	}
	free(rows);
	ember_graph_sampler_close(s);
	if (own) {
		CHECK_OK(ember_gpu_stream_destroy(h2d));
		CHECK_OK(ember_gpu_stream_destroy(cons));
	}
	return NULL;
}


static void run_workers(ember_gpu *gpu, ember_graph_buffer *b, uint32_t dim, size_t staging_bytes,
			uint32_t buffers, int threads, uint64_t batches, tu_rng *r)
{
	ember_graph_device_options o;
	ember_graph_device_options_default(&o);
	o.staging_bytes = staging_bytes;
	o.staging_buffers = buffers;
	ember_graph_device *d = NULL;
	CHECK_OK(ember_graph_device_open(gpu, &o, &d));
	struct worker w[2];
	pthread_t th[2];
	for (int t = 0; t < threads; t++) {
		w[t] = (struct worker){.gpu = gpu, .dev = d, .b = b, .seed = tu_rng_next(r),
				       .batches = batches, .dim = dim};
		if (threads == 1) { /* the context's own streams */
			CHECK_OK(ember_gpu_stream_get(gpu, EMBER_GPU_STREAM_H2D, 0, &w[t].h2d));
			CHECK_OK(ember_gpu_stream_get(gpu, EMBER_GPU_STREAM_COMPUTE, 0, &w[t].consumer));
			worker_main(&w[t]);
		} else {
			CHECK(pthread_create(&th[t], NULL, worker_main, &w[t]) == 0, "thread");
		}
	}
	uint64_t nodes = 0, bytes = 0;
	for (int t = 0; t < threads; t++) {
		if (threads > 1)
			CHECK(pthread_join(th[t], NULL) == 0, "join");
		nodes += w[t].nodes_sent;
		bytes += w[t].bytes_sent;
	}
	CHECK_OK(ember_graph_device_close(d));
	printf("  staging %zu B x %u, %d thread(s): %llu batches each, %llu nodes, %llu bytes: ok\n",
	       staging_bytes, buffers, threads, (unsigned long long)batches,
	       (unsigned long long)nodes, (unsigned long long)bytes);
}

/* Index of the first occurrence of nodes[i]. */
static size_t first_of(const uint64_t *nodes, size_t i)
{
	size_t j = 0;
	while (nodes[j] != nodes[i])
		j++;
	return j;
}

static void update_test(ember_gpu *gpu, ember_graph_buffer *b, ember_graph_buffer *nostate,
			uint32_t dim, tu_rng *r)
{
	ember_graph_device_options o;
	ember_graph_device_options_default(&o);
	o.staging_bytes = (size_t)dim * 4 * 3 + 7; /* 3 rows a copy, and a ragged end */
	o.staging_buffers = 2;
	ember_graph_device *d = NULL;
	CHECK_OK(ember_graph_device_open(gpu, &o, &d));
	ember_gpu_stream *d2h = NULL;
	CHECK_OK(ember_gpu_stream_get(gpu, EMBER_GPU_STREAM_D2H, 0, &d2h));
	size_t n = (size_t)tu_scaled(400);
	uint64_t *nodes = gt_malloc(n * 8);
	float *rows = gt_malloc(n * dim * 4), *work = gt_malloc(n * dim * 4),
	      *got = gt_malloc(n * dim * 4);
	for (int mode = EMBER_GRAPH_UPDATE_ADD; mode <= EMBER_GRAPH_UPDATE_SET; mode++) {
		for (size_t i = 0; i < n; i++) {
			nodes[i] = i && tu_rng_chance(r, 1, 4) ? nodes[tu_rng_below(r, i)]
							      : random_resident(r);
			for (uint32_t k = 0; k < dim; k++)
				rows[i * dim + k] = gt_randf(r);
		}
		/* the expected rows: each node's current row, then the updates in order */
		CHECK_OK(ember_graph_buffer_gather(b, n, nodes, work));
		for (size_t i = 0; i < n; i++) {
			float *dst = work + first_of(nodes, i) * dim;
			for (uint32_t k = 0; k < dim; k++)
				dst[k] = mode == EMBER_GRAPH_UPDATE_ADD ? dst[k] + rows[i * dim + k]
									: rows[i * dim + k];
		}
		void *dev = gt_upload(gpu, rows, n * dim * 4);
		CHECK_OK(ember_graph_device_update(d, b, d2h, n, nodes, dev, mode));
		CHECK_OK(ember_graph_buffer_gather(b, n, nodes, got));
		for (size_t i = 0; i < n; i++)
			CHECK(memcmp(got + i * dim, work + first_of(nodes, i) * dim, dim * 4) == 0,
			      "mode %d: row %zu (node %llu)", mode, i, (unsigned long long)nodes[i]);

		/* bad inputs, nothing written */
		uint64_t keep = nodes[n - 1];
		nodes[n - 1] = g_info.num_nodes;
		CHECK_RC(ember_graph_device_update(d, b, d2h, n, nodes, dev, mode), EMBER_EINVAL);
		for (uint32_t q = 0; q < g_info.partitions; q++) {
			int resident = 0;
			for (uint32_t k = 0; k < g_c; k++)
				resident |= g_parts[k] == q;
			if (!resident && (uint64_t)q * g_info.partition_size < g_info.num_nodes) {
				nodes[n - 1] = (uint64_t)q * g_info.partition_size;
				break;
			}
		}
		CHECK_RC(ember_graph_device_update(d, b, d2h, n, nodes, dev, mode), EMBER_EINVAL);
		nodes[n - 1] = keep;
		CHECK_OK(ember_graph_buffer_gather(b, n, nodes, rows));
		CHECK(memcmp(rows, got, n * dim * 4) == 0, "a refused update wrote");
		CHECK_OK(ember_gpu_mem_free(gpu, dev));
	}
	void *dev = gt_upload(gpu, rows, dim * 4);
	CHECK_RC(ember_graph_device_update(NULL, b, d2h, 1, nodes, dev, 0), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_update(d, NULL, d2h, 1, nodes, dev, 0), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_update(d, b, NULL, 1, nodes, dev, 0), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_update(d, b, d2h, 1, NULL, dev, 0), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_update(d, b, d2h, 1, nodes, NULL, 0), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_update(d, b, d2h, 1, nodes, dev, 2), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_update(d, b, d2h, 1, nodes, dev, -1), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_update(d, nostate, d2h, 1, nodes, dev, 0), EMBER_ESTATE);
	CHECK_OK(ember_graph_device_update(d, b, d2h, 0, NULL, NULL, 0)); /* nothing */
	ember_gpu *other = gt_open(EMBER_GPU_BACKEND_HOST);
	ember_gpu_stream *os = gt_compute(other);
	CHECK_RC(ember_graph_device_update(d, b, os, 1, nodes, dev, 0), EMBER_EINVAL);
	CHECK_OK(ember_graph_device_close(d)); /* no buffer left HELD */
	o.staging_bytes = (size_t)dim * 4 - 1; /* smaller than a row */
	CHECK_OK(ember_graph_device_open(gpu, &o, &d));
	CHECK_RC(ember_graph_device_update(d, b, d2h, 1, nodes, dev, 0), EMBER_ERANGE);
	CHECK_OK(ember_graph_device_close(d));
	CHECK_OK(ember_gpu_close(other));
	CHECK_OK(ember_gpu_mem_free(gpu, dev));
	free(nodes);
	free(rows);
	free(work);
	free(got);
	printf("  update from device (add, set, repeats, bad inputs): ok\n");
}

static void bad_inputs(ember_gpu *gpu, ember_graph_buffer *b, ember_graph_buffer *nostate,
		       uint32_t dim, tu_rng *r)
{
	ember_graph_device_options o;
	ember_graph_device *d = NULL;
	ember_graph_device_options_default(&o);
	CHECK_RC(ember_graph_device_open(NULL, &o, &d), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_open(gpu, &o, NULL), EMBER_EINVAL);
	o.reserved = 1;
	CHECK_RC(ember_graph_device_open(gpu, &o, &d), EMBER_EINVAL);
	CHECK(d == NULL, "out set on failure");
	ember_graph_device_options_default(&o);
	o.staging_buffers = 1025;
	CHECK_RC(ember_graph_device_open(gpu, &o, &d), EMBER_EINVAL);
	ember_graph_device_options_default(NULL);
	CHECK_OK(ember_graph_device_close(NULL));
	ember_graph_device_options_default(&o);
	o.staging_bytes = 512;
	o.staging_buffers = 1;
	CHECK_OK(ember_graph_device_open(gpu, NULL, &d)); /* defaults */
	CHECK_OK(ember_graph_device_close(d));
	CHECK_OK(ember_graph_device_open(gpu, &o, &d));

	ember_graph_sampler_options so;
	ember_graph_sampler_options_default(&so);
	ember_graph_sampler *s = NULL;
	CHECK_OK(ember_graph_sampler_open(b, &so, &s));
	uint64_t roots[4];
	for (int i = 0; i < 4; i++)
		roots[i] = random_resident(r);
	ember_graph_sample sm;
	CHECK_OK(ember_graph_sampler_run(s, 4, roots, &sm));
	size_t need = 0;
	CHECK_OK(ember_graph_sample_device_bytes(&sm, dim, &need));
	void *dev = NULL;
	CHECK_OK(ember_gpu_mem_alloc(gpu, need, &dev));
	ember_gpu_stream *h2d = NULL;
	CHECK_OK(ember_gpu_stream_get(gpu, EMBER_GPU_STREAM_H2D, 0, &h2d));
	ember_gpu_event *ev = NULL;
	CHECK_OK(ember_gpu_event_create(gpu, &ev));

	size_t bytes;
	CHECK_RC(ember_graph_sample_device_bytes(NULL, dim, &bytes), EMBER_EINVAL);
	CHECK_RC(ember_graph_sample_device_bytes(&sm, dim, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_sample_device_bytes(&sm, 0, &bytes), EMBER_EINVAL);
	CHECK_RC(ember_graph_sample_device_bytes(&sm, EMBER_GRAPH_MAX_DIM + 1, &bytes), EMBER_EINVAL);

	CHECK_RC(ember_graph_device_send(NULL, b, &sm, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_send(d, NULL, &sm, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_send(d, b, NULL, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_send(d, b, &sm, NULL, dev, need, ev, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_send(d, b, &sm, h2d, NULL, need, ev, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_send(d, b, &sm, h2d, dev, need, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_device_send(d, b, &sm, h2d, dev, need - 1, ev, NULL), EMBER_ERANGE);
	CHECK_RC(ember_graph_device_send(d, b, &sm, h2d, dev, 0, ev, NULL), EMBER_ERANGE);
	CHECK_RC(ember_graph_device_send(d, nostate, &sm, h2d, dev, need, ev, NULL), EMBER_ESTATE);

	/* malformed samples (copies of the real one with one thing wrong) */
	ember_graph_sample bad = sm;
	bad.layers = 0;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	CHECK_RC(ember_graph_sample_device_bytes(&bad, dim, &bytes), EMBER_EINVAL);
	bad.layers = EMBER_GRAPH_MAX_LAYERS + 1;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	bad = sm;
	bad.hop_offsets = NULL;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	bad = sm;
	bad.edge_offsets = NULL;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	bad = sm;
	bad.nodes = NULL;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	size_t hop[4], eoff[3];
	memcpy(hop, sm.hop_offsets, sizeof(hop));
	memcpy(eoff, sm.edge_offsets, sizeof(eoff));
	bad = sm;
	bad.hop_offsets = hop;
	hop[0] = 1;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	hop[0] = 0;
	hop[3] = sm.num_nodes + 1;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	hop[3] = sm.num_nodes;
	hop[1] = hop[2] + 1; /* not ascending */
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	bad = sm;
	bad.edge_offsets = eoff;
	eoff[0] = 1;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	eoff[0] = 0;
	eoff[1] = eoff[2] + 1;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	size_t ne = sm.edge_offsets[2];
	CHECK(ne > 0 && sm.num_nodes > 1, "the sample has edges (%zu) and nodes", ne);
	uint32_t *edst = gt_malloc(ne * 4), *esrc = gt_malloc(ne * 4);
	memcpy(edst, sm.edge_dst, ne * 4);
	memcpy(esrc, sm.edge_src, ne * 4);
	bad = sm;
	bad.edge_dst = edst;
	bad.edge_src = esrc;
	edst[ne - 1] = (uint32_t)sm.num_nodes; /* a local id past the nodes */
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	edst[ne - 1] = sm.edge_dst[ne - 1];
	esrc[0] = UINT32_MAX;
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	uint64_t *nodes = gt_malloc(sm.num_nodes * 8);
	memcpy(nodes, sm.nodes, sm.num_nodes * 8);
	bad = sm;
	bad.nodes = nodes;
	nodes[sm.num_nodes - 1] = g_info.num_nodes; /* past the graph */
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_EINVAL);
	for (uint32_t q = 0; q < g_info.partitions; q++) {
		int resident = 0;
		for (uint32_t k = 0; k < g_c; k++)
			resident |= g_parts[k] == q;
		if (!resident && (uint64_t)q * g_info.partition_size < g_info.num_nodes) {
			nodes[sm.num_nodes - 1] = (uint64_t)q * g_info.partition_size;
			break;
		}
	}
	CHECK_RC(ember_graph_device_send(d, b, &bad, h2d, dev, need, ev, NULL), EMBER_ESTATE);

	/* objects of another context: refused, and the sender keeps no buffer HELD */
	ember_gpu *other = gt_open(EMBER_GPU_BACKEND_HOST);
	ember_gpu_event *oev = NULL;
	CHECK_OK(ember_gpu_event_create(other, &oev));
	CHECK_RC(ember_graph_device_send(d, b, &sm, gt_compute(other), dev, need, ev, NULL),
		 EMBER_EINVAL);
	CHECK_RC(ember_graph_device_send(d, b, &sm, h2d, dev, need, oev, NULL), EMBER_EINVAL);
	/* and it still works: the real sample, with a staging ring of one 512-byte buffer */
	ember_graph_device_sample ds;
	CHECK_OK(ember_graph_device_send(d, b, &sm, h2d, dev, need, ev, &ds));
	CHECK_OK(ember_gpu_event_synchronize(ev));
	CHECK(ds.bytes == need && ds.num_nodes == sm.num_nodes, "sent");
	CHECK_OK(ember_graph_device_close(d)); /* 0, not EBUSY */
	CHECK_OK(ember_gpu_event_destroy(oev));
	CHECK_OK(ember_gpu_close(other));
	CHECK_OK(ember_gpu_stream_synchronize(h2d));
	CHECK_OK(ember_gpu_event_destroy(ev));
	CHECK_OK(ember_gpu_mem_free(gpu, dev));
	ember_graph_sampler_close(s);
	free(edst);
	free(esrc);
	free(nodes);
	printf("  bad inputs: ok\n");
}

int main(int argc, char **argv)
{
	tu_init("graph_sample_device", argc, argv);
	int backend = gt_backend(argc, argv, "graph_sample_device");
	tu_rng *r = tu_rng_global();
	ember_db *db = tg_open_store(g_dir, sizeof(g_dir), "graph-sample-device");
	const uint32_t p = 8, c = 4, dim = 13; /* 52-byte rows: they straddle buffers */
	uint64_t n = tu_scaled(8000);
	size_t m = (size_t)tu_scaled(80000);
	tg_edge *e = tg_random_edges(r, n, m, 1);
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
	CHECK_OK(ember_graph_info_get(g, &g_info));

	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = c;
	bo.flags = EMBER_GRAPH_BUFFER_ALL_EDGES;
	ember_graph_buffer *b = NULL, *nostate = NULL;
	CHECK_OK(ember_graph_buffer_open(g, &bo, &b));
	CHECK_OK(ember_graph_buffer_open(g, &bo, &nostate)); /* never given a plan */
	tg_plan tp;
	tg_plan_make(&tp, p, c, r);
	CHECK_OK(ember_graph_buffer_set_plan(b, &tp.plan));
	ember_gpu *gpu = gt_open(backend);

	uint64_t batches = tu_scaled(120) * gt_stress(argc, argv); /* "stress": x8 */
	ember_graph_state st;
	for (int k = 0; k < 2; k++) {
		CHECK_OK(ember_graph_buffer_next_state(b, &st));
		g_parts = st.partitions;
		g_c = st.capacity;
		printf("state %u:\n", st.index);
		if (k == 0) {
			run_workers(gpu, b, dim, 333, 1, 1, batches, r);
			run_workers(gpu, b, dim, 4096 + 8, 3, 1, batches, r);
			run_workers(gpu, b, dim, 1u << 20, 2, 1, batches, r);
			run_workers(gpu, b, dim, 1000, 2, 2, 2 * batches, r);
			run_workers(gpu, b, dim, 777, 1, 2, batches, r);
		} else {
			run_workers(gpu, b, dim, 4096 + 8, 3, 2, 2 * batches, r);
			bad_inputs(gpu, b, nostate, dim, r);
			update_test(gpu, b, nostate, dim, r);
		}
	}

	CHECK_OK(ember_gpu_close(gpu));
	tg_plan_free(&tp);
	CHECK_OK(ember_graph_buffer_close(nostate));
	CHECK_OK(ember_graph_buffer_close(b));
	CHECK_OK(ember_graph_close(g));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(g_dir);
	printf("graph_sample_device: ok\n");
	return 0;
}
