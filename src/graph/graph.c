/*
 * graph.c - a stored graph: keys, the metadata record, the node permutation, and
 * the readers of ember_graph (open, info, buckets, node data).
 *
 * The metadata record is written last by import (import.c), so a graph exists
 * exactly when its record does; open reads and checks it (magic, version,
 * checksum, and that its sizes agree with each other), then reads the bucket
 * counts and the per-partition training node counts.
 */
#include "graph/graph_int.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "core/rng.h"

double graph_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

size_t graph_key(uint8_t *out, const char *name, size_t name_len, int kind, uint32_t a,
		 uint32_t b, uint32_t chunk)
{
	out[0] = 'e';
	out[1] = 'g';
	out[2] = (uint8_t)name_len;
	memcpy(out + 3, name, name_len);
	size_t o = 3 + name_len;
	out[o++] = (uint8_t)kind;
	put_be32(out + o, a);
	put_be32(out + o + 4, b);
	put_be32(out + o + 8, chunk);
	return o + 12;
}

/* ---- the permutation ---------------------------------------------------------- */

void graph_perm_init(struct graph_perm *pm, uint64_t n, uint64_t seed)
{
	uint32_t bits = 2;
	while (bits < 64 && (1ull << bits) < n)
		bits += 2;
	pm->n = n;
	pm->half = bits / 2;
	pm->mask = (1ull << pm->half) - 1;
	uint64_t x = seed ^ 0x6a09e667f3bcc909ull;
	for (int r = 0; r < 4; r++)
		pm->keys[r] = em_splitmix64(&x);
}

/* One pass through the 4-round network over [0, 2^(2*half)). */
static uint64_t feistel(const struct graph_perm *pm, uint64_t x)
{
	uint64_t l = x >> pm->half, r = x & pm->mask;
	for (int k = 0; k < 4; k++) {
		uint64_t t = l ^ (em_mix64(r ^ pm->keys[k]) & pm->mask);
		l = r;
		r = t;
	}
	return (l << pm->half) | r;
}

static uint64_t feistel_inv(const struct graph_perm *pm, uint64_t y)
{
	uint64_t l = y >> pm->half, r = y & pm->mask;
	for (int k = 3; k >= 0; k--) {
		uint64_t t = r ^ (em_mix64(l ^ pm->keys[k]) & pm->mask);
		r = l;
		l = t;
	}
	return (l << pm->half) | r;
}

/* Cycle walking: apply the network until the value lands in [0, n). The domain is
 * under 4n, so the expected number of steps is under 4. */
uint64_t graph_perm_fwd(const struct graph_perm *pm, uint64_t x)
{
	do
		x = feistel(pm, x);
	while (x >= pm->n);
	return x;
}

uint64_t graph_perm_inv(const struct graph_perm *pm, uint64_t y)
{
	do
		y = feistel_inv(pm, y);
	while (y >= pm->n);
	return y;
}

float graph_init_value(uint64_t seed, uint64_t node, uint32_t d, float scale)
{
	uint64_t h = em_mix64(seed ^ em_mix64(node * 0x100000001b3ull + d + 1));
	double u = (double)(h >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
	return (float)((2.0 * u - 1.0) * scale);
}

/* ---- metadata ------------------------------------------------------------------- */

void graph_meta_seal(struct graph_meta *m)
{
	m->checksum = XXH3_64bits(m, offsetof(struct graph_meta, checksum));
}

uint64_t graph_part_rows(const struct graph_meta *m, uint32_t part)
{
	uint64_t first = (uint64_t)part * m->partition_size;
	if (first >= m->num_nodes)
		return 0;
	uint64_t left = m->num_nodes - first;
	return left < m->partition_size ? left : m->partition_size;
}

uint32_t graph_chunks(uint64_t items, uint32_t per_chunk)
{
	return (uint32_t)((items + per_chunk - 1) / per_chunk);
}

int graph_meta_check(const struct graph_meta *m)
{
	if (m->magic != GRAPH_META_MAGIC)
		return EMBER_ECORRUPT;
	if (m->checksum != XXH3_64bits(m, offsetof(struct graph_meta, checksum)))
		return EMBER_ECORRUPT;
	if (m->version != GRAPH_META_VERSION)
		return EMBER_EVERSION;
	if (!m->partitions || m->partitions > EMBER_GRAPH_MAX_PARTITIONS || !m->dim ||
	    m->dim > EMBER_GRAPH_MAX_DIM || !m->num_nodes || !m->partition_size ||
	    m->partition_size > UINT32_MAX || !m->relations || !m->rows_per_chunk ||
	    !m->edges_per_chunk || !m->counts_per_chunk || !m->train_per_chunk ||
	    m->partition_size * m->partitions < m->num_nodes ||
	    (uint64_t)m->rows_per_chunk * m->dim * 4 > m->chunk_bytes ||
	    (uint64_t)m->edges_per_chunk * GRAPH_EDGE_BYTES > m->chunk_bytes ||
	    (uint64_t)m->counts_per_chunk * 8 > m->chunk_bytes ||
	    (uint64_t)m->train_per_chunk * 4 > m->chunk_bytes ||
	    m->chunk_bytes > EMBER_MAX_VALUE_LEN)
		return EMBER_ECORRUPT;
	return 0;
}

/* ---- chunked reads ---------------------------------------------------------------- */

int graph_read_chunks(ember_graph *g, ember_session *s, int kind, uint32_t a, uint32_t b,
		      void *dst, uint64_t bytes, uint32_t chunk_cap)
{
	if (bytes == 0)
		return 0;
	uint32_t n = (uint32_t)((bytes + chunk_cap - 1) / chunk_cap);
	int rc = 0;
	size_t arr = (size_t)n * (2 * sizeof(void *) + 3 * sizeof(size_t) + sizeof(int));
	uint8_t *mem = em_alloc(arr + (size_t)n * GRAPH_KEY_MAX);
	if (!mem)
		return EMBER_ENOMEM;
	const void **keys = (const void **)mem;
	void **bufs = (void **)(keys + n);
	size_t *klens = (size_t *)(bufs + n);
	size_t *caps = klens + n;
	size_t *vlens = caps + n;
	int *status = (int *)(vlens + n);
	uint8_t *kb = mem + arr;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *k = kb + (size_t)i * GRAPH_KEY_MAX;
		klens[i] = graph_key(k, g->name, g->name_len, kind, a, b, i);
		keys[i] = k;
		bufs[i] = (uint8_t *)dst + (uint64_t)i * chunk_cap;
		uint64_t left = bytes - (uint64_t)i * chunk_cap;
		caps[i] = left < chunk_cap ? left : chunk_cap;
	}
	rc = ember_get_batch(s, n, (const void *const *)keys, klens, (void *const *)bufs, caps,
			     vlens, status);
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		if (status[i] == EMBER_ENOTFOUND || status[i] == EMBER_ERANGE)
			rc = EMBER_ECORRUPT; /* a chunk missing or longer than the layout says */
		else if (status[i] < 0)
			rc = status[i];
		else if (vlens[i] != caps[i])
			rc = EMBER_ECORRUPT;
	}
	em_free(mem, 0);
	return rc;
}

/* ---- open / close / readers ----------------------------------------------------- */

static int name_check(const char *name, size_t *len)
{
	if (!name)
		return EMBER_EINVAL;
	size_t n = strnlen(name, EMBER_GRAPH_MAX_NAME + 1);
	if (n == 0 || n > EMBER_GRAPH_MAX_NAME)
		return EMBER_EINVAL;
	*len = n;
	return 0;
}

int ember_graph_open(ember_db *db, const char *name, ember_graph **out)
{
	size_t nlen = 0;
	if (out)
		*out = NULL;
	if (!db || !out || name_check(name, &nlen) < 0)
		return EMBER_EINVAL;
	ember_graph *g = em_zalloc(sizeof(*g));
	if (!g)
		return EMBER_ENOMEM;
	g->db = db;
	memcpy(g->name, name, nlen);
	g->name_len = nlen;
	ember_session *s = NULL;
	int rc = ember_session_open(db, &s);
	if (rc < 0)
		goto undo_graph;
	uint8_t key[GRAPH_KEY_MAX];
	size_t klen = graph_key(key, name, nlen, GK_META, 0, 0, 0), vlen = 0;
	rc = ember_get(s, key, klen, &g->meta, sizeof(g->meta), &vlen);
	if (rc == EMBER_ERANGE || (rc == 0 && vlen != sizeof(g->meta)))
		rc = EMBER_ECORRUPT;
	if (rc < 0)
		goto undo_session;
	rc = graph_meta_check(&g->meta);
	if (rc < 0)
		goto undo_session;
	const struct graph_meta *m = &g->meta;
	graph_perm_init(&g->perm, m->num_nodes, m->perm_seed);
	uint64_t pp = (uint64_t)m->partitions * m->partitions;
	g->counts = em_alloc(pp * 8);
	g->train_counts = em_zalloc((size_t)m->partitions * 8);
	if (!g->counts || !g->train_counts) {
		rc = EMBER_ENOMEM;
		goto undo_session;
	}
	rc = graph_read_chunks(g, s, GK_COUNTS, 0, 0, g->counts, pp * 8,
			       m->counts_per_chunk * 8);
	if (rc < 0)
		goto undo_session;
	uint64_t total = 0;
	for (uint64_t i = 0; i < pp; i++)
		total += g->counts[i];
	if (total != m->num_edges) {
		rc = EMBER_ECORRUPT;
		goto undo_session;
	}
	if (m->train_nodes) {
		/* The per-partition training counts: the 'c' value with a = 1
		 * (p u64s), written by import. */
		klen = graph_key(key, name, nlen, GK_COUNTS, 1, 0, 0);
		rc = ember_get(s, key, klen, g->train_counts, (size_t)m->partitions * 8, &vlen);
		if (rc == EMBER_ENOTFOUND || rc == EMBER_ERANGE ||
		    (rc == 0 && vlen != (size_t)m->partitions * 8))
			rc = EMBER_ECORRUPT;
		if (rc < 0)
			goto undo_session;
		uint64_t t = 0;
		for (uint32_t i = 0; i < m->partitions; i++) {
			if (g->train_counts[i] > graph_part_rows(m, i))
				rc = EMBER_ECORRUPT;
			t += g->train_counts[i];
		}
		if (rc == 0 && t != m->train_nodes)
			rc = EMBER_ECORRUPT;
		if (rc < 0)
			goto undo_session;
	}
	ember_session_close(s);
	*out = g;
	return 0;

undo_session:
	ember_session_close(s);
undo_graph:
	em_free(g->counts, 0);
	em_free(g->train_counts, 0);
	em_free(g, sizeof(*g));
	return rc;
}

int ember_graph_close(ember_graph *g)
{
	if (!g)
		return 0;
	if (atomic_load_explicit(&g->buffers, memory_order_relaxed) > 0) /* relaxed: caller-ordered */
		return EMBER_EBUSY;
	em_free(g->counts, 0);
	em_free(g->train_counts, 0);
	em_free(g, sizeof(*g));
	return 0;
}

int ember_graph_info_get(const ember_graph *g, ember_graph_info *out)
{
	if (!g || !out)
		return EMBER_EINVAL;
	const struct graph_meta *m = &g->meta;
	*out = (ember_graph_info){.num_nodes = m->num_nodes,
				  .num_edges = m->num_edges,
				  .partition_size = m->partition_size,
				  .train_nodes = m->train_nodes,
				  .partitions = m->partitions,
				  .dim = m->dim,
				  .relations = m->relations,
				  .chunk_bytes = m->chunk_bytes};
	return 0;
}

int ember_graph_node_to_new(const ember_graph *g, uint64_t original, uint64_t *new_id)
{
	if (!g || !new_id || original >= g->meta.num_nodes)
		return EMBER_EINVAL;
	*new_id = graph_perm_fwd(&g->perm, original);
	return 0;
}

int ember_graph_node_to_original(const ember_graph *g, uint64_t new_id, uint64_t *original)
{
	if (!g || !original || new_id >= g->meta.num_nodes)
		return EMBER_EINVAL;
	*original = graph_perm_inv(&g->perm, new_id);
	return 0;
}

int ember_graph_bucket_size(const ember_graph *g, uint32_t i, uint32_t j, uint64_t *edges)
{
	if (!g || !edges || i >= g->meta.partitions || j >= g->meta.partitions)
		return EMBER_EINVAL;
	*edges = g->counts[(uint64_t)i * g->meta.partitions + j];
	return 0;
}

int ember_graph_read_bucket(ember_graph *g, uint32_t i, uint32_t j, ember_graph_edge *out,
			    size_t cap, size_t *n)
{
	if (!g || !n || i >= g->meta.partitions || j >= g->meta.partitions || (!out && cap))
		return EMBER_EINVAL;
	const struct graph_meta *m = &g->meta;
	uint64_t cnt = g->counts[(uint64_t)i * m->partitions + j];
	*n = cnt;
	if (cap < cnt)
		return EMBER_ERANGE;
	if (cnt == 0)
		return 0;
	uint32_t *raw = em_alloc(cnt * GRAPH_EDGE_BYTES);
	if (!raw)
		return EMBER_ENOMEM;
	ember_session *s = NULL;
	int rc = ember_session_open(g->db, &s);
	if (rc == 0)
		rc = graph_read_chunks(g, s, GK_EDGES, i, j, raw, cnt * GRAPH_EDGE_BYTES,
				       m->edges_per_chunk * GRAPH_EDGE_BYTES);
	ember_session_close(s);
	uint64_t base_i = (uint64_t)i * m->partition_size, base_j = (uint64_t)j * m->partition_size;
	for (uint64_t e = 0; rc == 0 && e < cnt; e++) {
		uint32_t sl = raw[3 * e], rel = raw[3 * e + 1], dl = raw[3 * e + 2];
		if (sl >= graph_part_rows(m, i) || dl >= graph_part_rows(m, j) ||
		    rel >= m->relations) {
			rc = EMBER_ECORRUPT;
			break;
		}
		out[e] = (ember_graph_edge){.src = base_i + sl, .dst = base_j + dl, .rel = rel};
	}
	em_free(raw, 0);
	return rc;
}

int ember_graph_read_nodes(ember_graph *g, uint64_t first, uint64_t count, float *out)
{
	if (!g || (!out && count) || first > g->meta.num_nodes ||
	    count > g->meta.num_nodes - first)
		return EMBER_EINVAL;
	if (count == 0)
		return 0;
	const struct graph_meta *m = &g->meta;
	size_t row = (size_t)m->dim * 4;
	ember_session *s = NULL;
	int rc = ember_session_open(g->db, &s);
	if (rc < 0)
		return rc;
	uint8_t *chunk = em_alloc((size_t)m->rows_per_chunk * row);
	if (!chunk) {
		rc = EMBER_ENOMEM;
		goto undo_session;
	}
	uint64_t at = first, end = first + count;
	while (at < end) {
		uint32_t part = (uint32_t)(at / m->partition_size);
		uint64_t local = at - (uint64_t)part * m->partition_size;
		uint32_t c = (uint32_t)(local / m->rows_per_chunk);
		uint64_t c0 = (uint64_t)c * m->rows_per_chunk;
		uint64_t rows = graph_part_rows(m, part) - c0;
		if (rows > m->rows_per_chunk)
			rows = m->rows_per_chunk;
		uint8_t key[GRAPH_KEY_MAX];
		size_t klen = graph_key(key, g->name, g->name_len, GK_NODES, part, 0, c), vlen = 0;
		rc = ember_get(s, key, klen, chunk, rows * row, &vlen);
		if (rc == EMBER_ENOTFOUND || rc == EMBER_ERANGE || (rc == 0 && vlen != rows * row))
			rc = EMBER_ECORRUPT;
		if (rc < 0)
			break;
		uint64_t take = c0 + rows - local;
		if (take > end - at)
			take = end - at;
		memcpy(out + (at - first) * m->dim, chunk + (local - c0) * row, take * row);
		at += take;
	}
	em_free(chunk, 0);
undo_session:
	ember_session_close(s);
	return rc;
}

void ember_graph_import_options_default(ember_graph_import_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->binary_fields = 2;
	o->init_scale = 0.1f;
	o->memory_budget = 64ull << 20;
	o->chunk_bytes = 4u << 20;
}
