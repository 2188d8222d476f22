/*
 * sampler.c - multi-hop neighbourhood sampling over the buffer's current state.
 *
 * How it works
 * ------------
 * The buffer holds, for every pair of resident partitions (i, j), bucket (i, j)
 * with two views built when it was read (buffer.c, bucket_views): CSR (edges
 * sorted by source, csr_off per source) and CSC (sources grouped by destination,
 * csc_off per destination). The views are per bucket, so a swap builds only the
 * views of the buckets it brings in (incremental) and drops those it evicts.
 *
 * A node v of resident partition P has its in-buffer neighbours spread over c
 * segments: for SAMPLE_IN, the CSC run of v in each bucket (Q, P), Q resident; for
 * SAMPLE_OUT the CSR run of v in each bucket (P, Q). Its degree is the sum of the
 * runs' lengths. A fan-out k < degree picks k distinct positions in [0, degree)
 * (Floyd's algorithm for small k, a partial Fisher-Yates over the positions
 * otherwise) and maps each to its segment.
 *
 * Layer l samples only the nodes of hop l. Every neighbour found goes through a
 * hash table (node -> local id, cleared in O(1) per run by a generation stamp): a
 * new node is appended (hop l + 1), a known one keeps its local id and is never
 * sampled again. So every node is sampled at most once per run and its sample
 * serves every deeper layer.
 *
 * Cost per run: O(sum over sampled nodes of (2c + fan-out)) plus the hash table.
 * Thread-safety: a sampler is one thread's; it only reads the buffer's current
 * state, which the trainer does not change while samplers run (ember_graph.h).
 */
#include "graph/graph_int.h"

#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"

struct seg {
	const uint32_t *ids; /* neighbour local ids, `stride` apart */
	uint32_t stride;
	uint32_t len;
	uint64_t base;       /* the neighbours' partition's first id */
};

struct ember_graph_sampler {
	ember_graph_buffer *b;
	ember_graph_sampler_options o;
	uint64_t rng[4];
	uint64_t *nodes;
	size_t num_nodes, nodes_cap;
	size_t hop_off[EMBER_GRAPH_MAX_LAYERS + 2];
	size_t edge_off[EMBER_GRAPH_MAX_LAYERS + 1];
	uint32_t *edst, *esrc;
	size_t nedges, edges_cap;
	/* node -> local id; a slot is live when its stamp equals gen */
	uint64_t *hkey;
	uint32_t *hval, *hgen;
	size_t hcap;
	uint32_t gen;
	struct seg *segs; /* 2c */
	uint32_t *pick, *perm;
	size_t pick_cap, perm_cap;
};

static uint32_t s_below(uint64_t *s, uint32_t n) { return (uint32_t)em_rng_below(s, n); }

void ember_graph_sampler_options_default(ember_graph_sampler_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->layers = 2;
	o->fanouts[0] = 10;
	o->fanouts[1] = 10;
}

int ember_graph_sampler_open(ember_graph_buffer *b, const ember_graph_sampler_options *opts,
			     ember_graph_sampler **out)
{
	if (out)
		*out = NULL;
	if (!b || !opts || !out || !b->all_edges || opts->layers == 0 ||
	    opts->layers > EMBER_GRAPH_MAX_LAYERS || opts->direction > EMBER_GRAPH_SAMPLE_BOTH ||
	    opts->reserved)
		return EMBER_EINVAL;
	ember_graph_sampler *s = em_zalloc(sizeof(*s));
	if (!s)
		return EMBER_ENOMEM;
	s->b = b;
	s->o = *opts;
	s->segs = em_alloc(2 * (size_t)b->c * sizeof(*s->segs));
	if (!s->segs) {
		em_free(s, sizeof(*s));
		return EMBER_ENOMEM;
	}
	em_rng_seed(s->rng, opts->seed ^ 0x452821e638d01377ull);
	atomic_fetch_add_explicit(&b->samplers, 1, memory_order_relaxed); /* relaxed: a use count */
	*out = s;
	return 0;
}

void ember_graph_sampler_close(ember_graph_sampler *s)
{
	if (!s)
		return;
	atomic_fetch_sub_explicit(&s->b->samplers, 1, memory_order_relaxed); /* relaxed: a use count */
	em_free(s->nodes, 0);
	em_free(s->edst, 0);
	em_free(s->esrc, 0);
	em_free(s->hkey, 0);
	em_free(s->hval, 0);
	em_free(s->hgen, 0);
	em_free(s->segs, 0);
	em_free(s->pick, 0);
	em_free(s->perm, 0);
	em_free(s, sizeof(*s));
}

/* Grow *arr (elem bytes each) to hold at least need. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	void *a = em_alloc(n * elem);
	if (!a)
		return EMBER_ENOMEM;
	if (*arr)
		memcpy(a, *arr, *cap * elem);
	em_free(*arr, 0);
	*arr = a;
	*cap = n;
	return 0;
}

static size_t h_slot(uint64_t key, size_t mask)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key & mask;
}

/* Room for `n` nodes at load <= 1/2 (rehashes the live nodes when it grows). */
static int h_reserve(ember_graph_sampler *s, size_t n)
{
	if (2 * n <= s->hcap)
		return 0;
	size_t cap = s->hcap ? s->hcap : 1024;
	while (cap < 2 * n)
		cap *= 2;
	uint64_t *k = em_alloc(cap * 8);
	uint32_t *v = em_alloc(cap * 4), *g = em_zalloc(cap * 4);
	if (!k || !v || !g) {
		em_free(k, 0);
		em_free(v, 0);
		em_free(g, 0);
		return EMBER_ENOMEM;
	}
	em_free(s->hkey, 0);
	em_free(s->hval, 0);
	em_free(s->hgen, 0);
	s->hkey = k;
	s->hval = v;
	s->hgen = g;
	s->hcap = cap;
	s->gen = 1;
	for (size_t i = 0; i < s->num_nodes; i++) {
		size_t h = h_slot(s->nodes[i], cap - 1);
		while (s->hgen[h] == s->gen)
			h = (h + 1) & (cap - 1);
		s->hgen[h] = s->gen;
		s->hkey[h] = s->nodes[i];
		s->hval[h] = (uint32_t)i;
	}
	return 0;
}

/* The local id of node v, appending it when new. */
static int h_local(ember_graph_sampler *s, uint64_t v, uint32_t *local)
{
	int rc = h_reserve(s, s->num_nodes + 1);
	if (rc == 0)
		rc = grow((void **)&s->nodes, &s->nodes_cap, s->num_nodes + 1, 8);
	if (rc < 0)
		return rc;
	size_t mask = s->hcap - 1, h = h_slot(v, mask);
	while (s->hgen[h] == s->gen) {
		if (s->hkey[h] == v) {
			*local = s->hval[h];
			return 0;
		}
		h = (h + 1) & mask;
	}
	s->hgen[h] = s->gen;
	s->hkey[h] = v;
	s->hval[h] = (uint32_t)s->num_nodes;
	*local = (uint32_t)s->num_nodes;
	s->nodes[s->num_nodes++] = v;
	return 0;
}

/* Collect v's neighbour segments; returns its in-buffer degree. */
static uint64_t segments(ember_graph_sampler *s, uint64_t v, uint32_t *nseg)
{
	const ember_graph_buffer *b = s->b;
	uint32_t part = (uint32_t)(v / b->ps), i = (uint32_t)b->part_pos[part], c = b->c, n = 0;
	uint32_t lv = (uint32_t)(v - (uint64_t)part * b->ps);
	uint64_t deg = 0;
	int dir = (int)s->o.direction;
	for (uint32_t j = 0; j < c; j++) {
		uint64_t base = (uint64_t)b->cur_parts[j] * b->ps;
		if (dir != EMBER_GRAPH_SAMPLE_OUT) {
			const struct bucket_ent *e = b->cur_bk[(size_t)j * c + i]; /* (cur[j], P) */
			if (e && e->csc_off[lv + 1] > e->csc_off[lv]) {
				s->segs[n++] = (struct seg){e->csc_src + e->csc_off[lv], 1,
							    e->csc_off[lv + 1] - e->csc_off[lv], base};
				deg += s->segs[n - 1].len;
			}
		}
		if (dir != EMBER_GRAPH_SAMPLE_IN) {
			const struct bucket_ent *e = b->cur_bk[(size_t)i * c + j]; /* (P, cur[j]) */
			if (e && e->csr_off[lv + 1] > e->csr_off[lv]) {
				s->segs[n++] = (struct seg){e->edges + 3 * (size_t)e->csr_off[lv] + 2, 3,
							    e->csr_off[lv + 1] - e->csr_off[lv], base};
				deg += s->segs[n - 1].len;
			}
		}
	}
	*nseg = n;
	return deg;
}

static uint64_t seg_at(const ember_graph_sampler *s, uint32_t nseg, uint64_t idx)
{
	for (uint32_t k = 0; k < nseg; k++) {
		if (idx < s->segs[k].len)
			return s->segs[k].base + s->segs[k].ids[idx * s->segs[k].stride];
		idx -= s->segs[k].len;
	}
	return UINT64_MAX; /* not reached: idx < degree */
}

/* Pick k distinct positions of [0, deg) into s->pick. */
static int pick_positions(ember_graph_sampler *s, uint32_t deg, uint32_t k)
{
	int rc = grow((void **)&s->pick, &s->pick_cap, k, 4);
	if (rc < 0)
		return rc;
	if (k <= 32) {
		/* Floyd: for t in [deg-k, deg): draw r in [0, t]; take t if r was taken */
		uint32_t n = 0;
		for (uint32_t t = deg - k; t < deg; t++) {
			uint32_t r = s_below(s->rng, t + 1), x = r;
			for (uint32_t q = 0; q < n; q++)
				if (s->pick[q] == r) {
					x = t;
					break;
				}
			s->pick[n++] = x;
		}
		return 0;
	}
	rc = grow((void **)&s->perm, &s->perm_cap, deg, 4);
	if (rc < 0)
		return rc;
	for (uint32_t q = 0; q < deg; q++)
		s->perm[q] = q;
	for (uint32_t q = 0; q < k; q++) {
		uint32_t r = q + s_below(s->rng, deg - q), t = s->perm[q];
		s->perm[q] = s->perm[r];
		s->perm[r] = t;
		s->pick[q] = s->perm[q];
	}
	return 0;
}

static int add_edge(ember_graph_sampler *s, uint32_t dst, uint32_t src)
{
	if (s->nedges == s->edges_cap) {
		size_t cap = s->edges_cap;
		int rc = grow((void **)&s->edst, &cap, s->nedges + 1, 4);
		if (rc == 0)
			rc = grow((void **)&s->esrc, &s->edges_cap, s->nedges + 1, 4);
		if (rc < 0)
			return rc;
	}
	s->edst[s->nedges] = dst;
	s->esrc[s->nedges++] = src;
	return 0;
}

int ember_graph_sampler_run(ember_graph_sampler *s, size_t n, const uint64_t *roots,
			    ember_graph_sample *out)
{
	if (!s || !out || (n && !roots))
		return EMBER_EINVAL;
	ember_graph_buffer *b = s->b;
	if (!b->have_state)
		return EMBER_ESTATE;
	for (size_t i = 0; i < n; i++)
		if (roots[i] >= b->g->meta.num_nodes || b->part_pos[roots[i] / b->ps] < 0)
			return EMBER_EINVAL;
	s->num_nodes = 0;
	s->nedges = 0;
	if (s->hcap && ++s->gen == 0) { /* the stamps wrapped: clear them */
		memset(s->hgen, 0, s->hcap * 4);
		s->gen = 1;
	}
	int rc = 0;
	uint32_t local;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = h_local(s, roots[i], &local);
	s->hop_off[0] = 0;
	s->hop_off[1] = s->num_nodes;
	for (uint32_t l = 0; l < s->o.layers && rc == 0; l++) {
		s->edge_off[l] = s->nedges;
		uint32_t fan = s->o.fanouts[l];
		for (size_t x = s->hop_off[l]; x < s->hop_off[l + 1] && rc == 0; x++) {
			uint32_t nseg;
			uint64_t deg = segments(s, s->nodes[x], &nseg);
			if (deg == 0)
				continue;
			if (fan == 0 || deg <= fan) {
				for (uint64_t q = 0; q < deg && rc == 0; q++) {
					rc = h_local(s, seg_at(s, nseg, q), &local);
					if (rc == 0)
						rc = add_edge(s, (uint32_t)x, local);
				}
				continue;
			}
			if (deg > UINT32_MAX)
				deg = UINT32_MAX; /* positions past 2^32 are not drawn */
			rc = pick_positions(s, (uint32_t)deg, fan);
			for (uint32_t q = 0; q < fan && rc == 0; q++) {
				rc = h_local(s, seg_at(s, nseg, s->pick[q]), &local);
				if (rc == 0)
					rc = add_edge(s, (uint32_t)x, local);
			}
		}
		s->hop_off[l + 2] = s->num_nodes;
	}
	if (rc < 0)
		return rc;
	s->edge_off[s->o.layers] = s->nedges;
	*out = (ember_graph_sample){.num_nodes = s->num_nodes,
				    .nodes = s->nodes,
				    .hop_offsets = s->hop_off,
				    .edge_offsets = s->edge_off,
				    .edge_dst = s->edst,
				    .edge_src = s->esrc,
				    .layers = s->o.layers};
	return 0;
}

int ember_graph_sampler_gather(ember_graph_sampler *s, float *staging, size_t cap_rows)
{
	if (!s || (!staging && cap_rows))
		return EMBER_EINVAL;
	ember_graph_buffer *b = s->b;
	if (!b->have_state)
		return EMBER_ESTATE;
	if (cap_rows < s->num_nodes)
		return EMBER_ERANGE;
	graph_upd_drain(b); /* queued updates land first (update.c invariant 3) */
	uint32_t dim = b->dim;
	for (size_t i = 0; i < s->num_nodes; i++) {
		uint64_t v = s->nodes[i], part = v / b->ps;
		int32_t pos = b->part_pos[part];
		if (pos < 0)
			return EMBER_ESTATE; /* the buffer moved on since the run */
		memcpy(staging + i * dim, b->cur_data[pos] + (v - part * b->ps) * dim,
		       (size_t)dim * 4);
	}
	return 0;
}
