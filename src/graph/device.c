/*
 * device.c - samples to a device through ember_gpu's staging pipeline, and updated
 * rows back from it (ember_graph_device_*; the header's "samples to a device"
 * section is the contract, docs/graph.md the picture).
 *
 * Design notes
 * ------------
 * A sample's device image (rows, nodes, hop offsets, edge offsets, edge_dst,
 * edge_src; each section 64-byte aligned; image_layout) is produced as one byte
 * stream by a writer that fills the sender's pinned staging buffers in order: the
 * rows are copied from the buffer's partitions straight into staging memory, the
 * other sections from the sample's arrays. When a staging buffer is full and more
 * bytes follow, it is uploaded (ember_gpu_staging_upload: H2D copy of its bytes to
 * dst + the image offset of its first byte, then release against the stream) and
 * the next one is acquired. The last buffer is uploaded with `ready`, which the
 * copy stream records after it: the copies of one send all go on one stream, so by
 * stream order (ember_gpu.h rule 1) `ready` covers every one of them.
 *
 * Invariants
 *   D1. A send or update holds at most one staging buffer at any time (it releases
 *       before it acquires), so any number of threads share a ring of any size
 *       without deadlock: every HELD buffer is released by a thread that needs no
 *       other buffer to get there.
 *   D2. Every buffer a call acquires is released before the call returns, on
 *       success and on every error path (w_abort; after a failed upload the
 *       buffer is still HELD and may have a copy enqueued, so it is released
 *       against the stream, as ember_gpu.h asks).
 *   D3. A staging buffer is written only between its acquire and its upload; the
 *       ring's R3 guarantees the copy that last read it has run.
 *   D4. All checks that need no device happen before the first acquire, so those
 *       errors enqueue nothing.
 *
 * The way back (ember_graph_device_update) downloads whole rows, one staging buffer
 * at a time, on the caller's stream, waits for each download's event on the host,
 * and applies the rows with ember_graph_buffer_update (which marks partitions
 * dirty). The nodes are all checked first, so a bad node writes nothing.
 */
#include "graph/graph_int.h"

#include <ember_gpu.h>
#include <string.h>

#include "core/alloc.h"

#define IMAGE_ALIGN 64u
#define DEVICE_MAX_BUFFERS 1024u

struct ember_graph_device {
	ember_gpu *gpu;
	ember_gpu_staging *st;
	size_t cap; /* bytes per staging buffer */
};

void ember_graph_device_options_default(ember_graph_device_options *opts)
{
	if (!opts)
		return;
	memset(opts, 0, sizeof(*opts));
	opts->staging_bytes = 4u << 20;
	opts->staging_buffers = 4;
}

int ember_graph_device_open(ember_gpu *gpu, const ember_graph_device_options *opts,
			    ember_graph_device **out)
{
	ember_graph_device_options o;
	int rc = 0;

	if (out)
		*out = NULL;
	if (!gpu || !out)
		return EMBER_EINVAL;
	ember_graph_device_options_default(&o);
	if (opts) {
		if (opts->reserved || opts->staging_buffers > DEVICE_MAX_BUFFERS)
			return EMBER_EINVAL;
		if (opts->staging_bytes)
			o.staging_bytes = opts->staging_bytes;
		if (opts->staging_buffers)
			o.staging_buffers = opts->staging_buffers;
	}
	ember_graph_device *d = em_zalloc(sizeof(*d));
	if (!d)
		return EMBER_ENOMEM;
	ember_gpu_staging_options so;
	ember_gpu_staging_options_default(&so);
	so.buffer_bytes = o.staging_bytes;
	so.buffers = o.staging_buffers;
	if ((rc = ember_gpu_staging_create(gpu, &so, &d->st)) < 0)
		goto undo_alloc;
	d->gpu = gpu;
	d->cap = o.staging_bytes;
	*out = d;
	return 0;

undo_alloc:
	em_free(d, sizeof(*d));
	return rc;
}

int ember_graph_device_close(ember_graph_device *d)
{
	if (!d)
		return 0;
	int rc = ember_gpu_staging_destroy(d->st);
	if (rc < 0)
		return rc; /* a buffer is HELD: a send is racing with close */
	em_free(d, sizeof(*d));
	return 0;
}

/* ---- the device image ---------------------------------------------------------------- */

/* Byte offsets of the image's sections (docs/graph.md, the header's table). */
struct image {
	size_t rows, nodes, hop, eoff, edst, esrc, total;
	uint64_t num_nodes, num_edges;
};

static int add_sz(size_t *acc, size_t a, size_t b)
{
	return __builtin_add_overflow(a, b, acc) ? EMBER_ERANGE : 0;
}

/* *off = the end of a section of n elements of `elem` bytes starting at `at`. */
static int section(size_t at, uint64_t n, size_t elem, size_t *end)
{
	size_t bytes;
	if (n > SIZE_MAX || __builtin_mul_overflow((size_t)n, elem, &bytes))
		return EMBER_ERANGE;
	return add_sz(end, at, bytes);
}

static int align_up(size_t x, size_t *out)
{
	return add_sz(out, x, (IMAGE_ALIGN - x % IMAGE_ALIGN) % IMAGE_ALIGN);
}

static int image_layout(const ember_graph_sample *sm, uint32_t dim, struct image *im)
{
	int rc = 0;
	size_t end;
	im->num_nodes = sm->num_nodes;
	im->num_edges = sm->edge_offsets[sm->layers];
	im->rows = 0;
	if ((rc = section(0, im->num_nodes, (size_t)dim * 4, &end)) < 0 ||
	    (rc = align_up(end, &im->nodes)) < 0 ||
	    (rc = section(im->nodes, im->num_nodes, 8, &end)) < 0 ||
	    (rc = align_up(end, &im->hop)) < 0 ||
	    (rc = section(im->hop, sm->layers + 2, 8, &end)) < 0 ||
	    (rc = align_up(end, &im->eoff)) < 0 ||
	    (rc = section(im->eoff, sm->layers + 1, 8, &end)) < 0 ||
	    (rc = align_up(end, &im->edst)) < 0 ||
	    (rc = section(im->edst, im->num_edges, 4, &end)) < 0 ||
	    (rc = align_up(end, &im->esrc)) < 0 ||
	    (rc = section(im->esrc, im->num_edges, 4, &im->total)) < 0)
		return rc;
	return 0;
}

/* The shape checks that need only the sample's offsets. */
static int sample_shape_check(const ember_graph_sample *sm)
{
	if (!sm || sm->layers == 0 || sm->layers > EMBER_GRAPH_MAX_LAYERS || !sm->hop_offsets ||
	    !sm->edge_offsets)
		return EMBER_EINVAL;
	return 0;
}

int ember_graph_sample_device_bytes(const ember_graph_sample *sample, uint32_t dim,
				    size_t *bytes)
{
	struct image im;
	if (!bytes || dim == 0 || dim > EMBER_GRAPH_MAX_DIM || sample_shape_check(sample) < 0)
		return EMBER_EINVAL;
	int rc = image_layout(sample, dim, &im);
	if (rc < 0)
		return rc;
	*bytes = im.total;
	return 0;
}

/* Everything a send checks before it touches the ring (D4). */
static int sample_check(ember_graph_buffer *b, const ember_graph_sample *sm)
{
	uint32_t L = sm->layers;
	size_t n = sm->num_nodes;
	if (sm->hop_offsets[0] != 0 || sm->hop_offsets[L + 1] != n || sm->edge_offsets[0] != 0)
		return EMBER_EINVAL;
	for (uint32_t h = 0; h <= L; h++)
		if (sm->hop_offsets[h] > sm->hop_offsets[h + 1])
			return EMBER_EINVAL;
	for (uint32_t l = 0; l < L; l++)
		if (sm->edge_offsets[l] > sm->edge_offsets[l + 1])
			return EMBER_EINVAL;
	size_t ne = sm->edge_offsets[L];
	if ((n && !sm->nodes) || (ne && (!sm->edge_dst || !sm->edge_src)) || n > UINT32_MAX)
		return EMBER_EINVAL;
	for (size_t e = 0; e < ne; e++)
		if (sm->edge_dst[e] >= n || sm->edge_src[e] >= n)
			return EMBER_EINVAL;
	if (!b->have_state)
		return EMBER_ESTATE;
	uint64_t nn = b->g->meta.num_nodes;
	for (size_t i = 0; i < n; i++)
		if (sm->nodes[i] >= nn)
			return EMBER_EINVAL;
	for (size_t i = 0; i < n; i++)
		if (b->part_pos[sm->nodes[i] / b->ps] < 0)
			return EMBER_ESTATE; /* the buffer moved on since the sample was taken */
	return 0;
}

/* ---- the writer: a byte stream into staging buffers, uploaded as they fill -------------- */

struct writer {
	ember_graph_device *d;
	ember_gpu_stream *s;
	unsigned char *dst;
	size_t off;         /* image bytes written so far */
	size_t start;       /* image offset of the held buffer's first byte */
	unsigned char *buf; /* the held staging buffer */
	uint32_t idx;
	bool held;
};

/* Release a buffer whose transfer failed: against s, since a copy may be pending on
 * it; if s itself was refused (another context), nothing was enqueued: now (D2). */
static void release_after_error(ember_gpu_staging *st, uint32_t idx, ember_gpu_stream *s)
{
	if (ember_gpu_staging_release(st, idx, s) < 0)
		(void)ember_gpu_staging_release(st, idx, NULL);
}

/* Upload the held buffer's bytes (done may be NULL) and release it (D2). */
static int w_upload(struct writer *w, ember_gpu_event *done)
{
	int rc = ember_gpu_staging_upload(w->d->st, w->idx, w->s, w->dst + w->start,
					  w->off - w->start, done);
	if (rc < 0) /* still HELD, a copy may be enqueued: release against the stream */
		release_after_error(w->d->st, w->idx, w->s);
	w->held = false;
	return rc;
}

/* Append len bytes of src (zeros when src is NULL) to the image. */
static int w_put(struct writer *w, const void *src, size_t len)
{
	const unsigned char *p = src;
	while (len) {
		if (w->held && w->off - w->start == w->d->cap) {
			int rc = w_upload(w, NULL); /* full and more follows */
			if (rc < 0)
				return rc;
		}
		if (!w->held) {
			void *ptr;
			int rc = ember_gpu_staging_acquire(w->d->st, &w->idx, &ptr);
			if (rc < 0)
				return rc;
			w->buf = ptr;
			w->start = w->off;
			w->held = true;
		}
		size_t room = w->d->cap - (w->off - w->start), k = len < room ? len : room;
		if (p) {
			memcpy(w->buf + (w->off - w->start), p, k);
			p += k;
		} else {
			memset(w->buf + (w->off - w->start), 0, k);
		}
		w->off += k;
		len -= k;
	}
	return 0;
}

static int w_pad_to(struct writer *w, size_t at)
{
	return w_put(w, NULL, at - w->off);
}

/* On an error: give back a buffer still held (D2). Its bytes are never copied. */
static void w_abort(struct writer *w)
{
	if (w->held)
		(void)ember_gpu_staging_release(w->d->st, w->idx, NULL);
	w->held = false;
}

static int put_offsets(struct writer *w, const size_t *off, uint32_t n)
{
	uint64_t v[EMBER_GRAPH_MAX_LAYERS + 2];
	for (uint32_t i = 0; i < n; i++)
		v[i] = off[i];
	return w_put(w, v, (size_t)n * 8);
}

int ember_graph_device_send(ember_graph_device *d, ember_graph_buffer *b,
			    const ember_graph_sample *sample, ember_gpu_stream *stream,
			    void *dst, size_t dst_bytes, ember_gpu_event *ready,
			    ember_graph_device_sample *out)
{
	struct image im;
	int rc;

	if (!d || !b || !stream || !dst || !ready || sample_shape_check(sample) < 0)
		return EMBER_EINVAL;
	if ((rc = sample_check(b, sample)) < 0)
		return rc;
	if ((rc = image_layout(sample, b->dim, &im)) < 0)
		return rc;
	if (dst_bytes < im.total)
		return EMBER_ERANGE;
	graph_upd_drain(b); /* queued updates land first (update.c invariant 3) */

	struct writer w = {.d = d, .s = stream, .dst = dst};
	const uint32_t dim = b->dim;
	const size_t row_bytes = (size_t)dim * 4;
	const size_t n = sample->num_nodes, ne = (size_t)im.num_edges;
	for (size_t i = 0; i < n; i++) {
		if (i + 8 < n) { /* rows are scattered over the partitions: fetch ahead */
			uint64_t v = sample->nodes[i + 8], q = v / b->ps;
			__builtin_prefetch(b->cur_data[b->part_pos[q]] + (v - q * b->ps) * dim);
		}
		uint64_t v = sample->nodes[i], q = v / b->ps;
		if ((rc = w_put(&w, b->cur_data[b->part_pos[q]] + (v - q * b->ps) * dim,
				row_bytes)) < 0)
			goto undo_writer;
	}
	if ((rc = w_pad_to(&w, im.nodes)) < 0 || (rc = w_put(&w, sample->nodes, n * 8)) < 0 ||
	    (rc = w_pad_to(&w, im.hop)) < 0 ||
	    (rc = put_offsets(&w, sample->hop_offsets, sample->layers + 2)) < 0 ||
	    (rc = w_pad_to(&w, im.eoff)) < 0 ||
	    (rc = put_offsets(&w, sample->edge_offsets, sample->layers + 1)) < 0 ||
	    (rc = w_pad_to(&w, im.edst)) < 0 || (rc = w_put(&w, sample->edge_dst, ne * 4)) < 0 ||
	    (rc = w_pad_to(&w, im.esrc)) < 0 || (rc = w_put(&w, sample->edge_src, ne * 4)) < 0)
		goto undo_writer;
	/* the image is never empty (hop offsets), so the last buffer is still held */
	if ((rc = w_upload(&w, ready)) < 0)
		return rc;
	if (out) {
		unsigned char *base = dst;
		*out = (ember_graph_device_sample){
			.rows = (float *)(void *)(base + im.rows),
			.nodes = (uint64_t *)(void *)(base + im.nodes),
			.hop_offsets = (uint64_t *)(void *)(base + im.hop),
			.edge_offsets = (uint64_t *)(void *)(base + im.eoff),
			.edge_dst = (uint32_t *)(void *)(base + im.edst),
			.edge_src = (uint32_t *)(void *)(base + im.esrc),
			.num_nodes = im.num_nodes,
			.num_edges = im.num_edges,
			.layers = sample->layers,
			.dim = dim,
			.bytes = im.total,
		};
	}
	return 0;

undo_writer:
	w_abort(&w);
	return rc;
}

/* ---- the way back ---------------------------------------------------------------------- */

int ember_graph_device_update(ember_graph_device *d, ember_graph_buffer *b,
			      ember_gpu_stream *stream, size_t n, const uint64_t *nodes,
			      const float *rows, int mode)
{
	int rc = 0;
	if (!d || !b || !stream || (n && (!nodes || !rows)) ||
	    (mode != EMBER_GRAPH_UPDATE_ADD && mode != EMBER_GRAPH_UPDATE_SET))
		return EMBER_EINVAL;
	if (!b->have_state)
		return EMBER_ESTATE;
	uint64_t nn = b->g->meta.num_nodes;
	for (size_t i = 0; i < n; i++)
		if (nodes[i] >= nn || b->part_pos[nodes[i] / b->ps] < 0)
			return EMBER_EINVAL; /* as ember_graph_buffer_update: nothing written */
	size_t row_bytes = (size_t)b->dim * 4;
	if (row_bytes > d->cap)
		return EMBER_ERANGE;
	if (n == 0)
		return 0;
	size_t per = d->cap / row_bytes;
	ember_gpu_event *ev = NULL;
	if ((rc = ember_gpu_event_create(d->gpu, &ev)) < 0)
		return rc;
	for (size_t i = 0; i < n; i += per) {
		size_t k = n - i < per ? n - i : per;
		uint32_t idx;
		void *buf;
		if ((rc = ember_gpu_staging_acquire(d->st, &idx, &buf)) < 0)
			goto undo_event;
		rc = ember_gpu_staging_download(d->st, idx, stream,
						(const unsigned char *)rows + i * row_bytes,
						k * row_bytes, ev);
		if (rc == 0)
			rc = ember_gpu_event_synchronize(ev);
		if (rc == 0)
			rc = ember_graph_buffer_update(b, k, nodes + i, buf, mode);
		if (rc < 0)
			release_after_error(d->st, idx, stream);
		else
			(void)ember_gpu_staging_release(d->st, idx, NULL);
		if (rc < 0)
			goto undo_event;
	}

undo_event:
	(void)ember_gpu_event_destroy(ev);
	return rc;
}
