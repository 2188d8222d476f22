/*
 * slot_store_gpu.c - the cache's slots in an ember_gpu arena (EMBER_CACHE_SLOTS_GPU):
 * the store's rows go through pinned staging buffers into the arena with the
 * install kernel on the H2D copy stream; evicted rows come back with the gather
 * kernel and a download on the D2H copy stream. Written over the public
 * ember_gpu calls only, so it runs on the CUDA backend and on the host backend
 * alike. slot_store.h is the interface, docs/cache.md ("GPU slots") the design.
 *
 * Objects (all created at open, freed at close):
 *   arena        nslots slots of max_dim floats, then (EMBER_GPU_STATE_ADAGRAD,
 *                every table Adagrad) max_dim floats of state; cache slot s is
 *                arena slot s. A narrower table's row and state are each padded
 *                with zeros to max_dim.
 *   ring         4 pinned staging buffers of rows_off + depth * buf_floats * 4
 *                bytes (buf_floats = max_dim + the arena's state floats):
 *                [0, rows_off) slot indices, [rows_off, ...) packed rows (with
 *                their state, EMBER_GPU_WITH_STATE, when the arena has one).
 *   h2d, d2h     the context's copy streams 0.
 *   installed    event recorded on h2d after every install round.
 *   downloaded   event recorded on d2h after every eviction download.
 *   dev_idx_in, dev_idx_out, dev_rows_out: device scratch of one round each.
 *
 * A fetch round (the prefetcher):
 *   stage    acquire a staging buffer; the store's reads land in its rows.
 *   write    move the state (after the row's store bytes) to + max_dim, convert
 *            the row in place to fp32 (fp16 tables), pad row and state with
 *            zeros to max_dim, slot indices into its head, then on
 *            h2d: copy the indices to dev_idx_in, install (the kernel reads the
 *            rows straight from the pinned buffer), record `installed`, and
 *            release the buffer against h2d (the ring reuses it only after h2d
 *            got past the install).
 * An eviction / flush round (read):
 *   indices into a staging buffer; on d2h: wait for `installed`, copy the indices
 *   to dev_idx_out, gather the rows into dev_rows_out, download them into the
 *   buffer, record `downloaded`; the host waits for `downloaded` (it must read the
 *   rows to write them to the store), converts them into the caller's buffers and
 *   releases the buffer.
 *
 * Invariants (the cache's C3-C5 and G1-G4 in cache.c make them hold):
 *   D1. Every install of a round is ordered after the trainer's work on the
 *       slots it refills: the refilled slots' previous rows were last used by
 *       released batches (C3), and each release made h2d wait on the trainer's
 *       `done` event before the prefetcher could see the release (G2).
 *   D2. An eviction's gather runs after the install that put the row there
 *       (d2h waits on `installed`, rule 4) and after the trainer's updates to
 *       it (d2h waited on `done` at release, G2). The host reads the rows only
 *       after `downloaded`.
 *   D3. A slot is refilled only after its dirty row came back: the install of
 *       the new row is enqueued after the host waited for `downloaded`.
 *   D4. Scratch reuse: dev_idx_in is rewritten by the next round's copy on h2d,
 *       after the previous install on the same stream (rule 1); dev_idx_out and
 *       dev_rows_out are reused only after the host waited for `downloaded`;
 *       staging buffers are reused by the ring's own rule (R3).
 */
#include "cache/slot_store.h"

#include <string.h>

#include "ember.h"
#include "ember_cache.h"

#define RING_BUFFERS 4u

int slot_gpu_open(struct slot_store *ss, const struct slot_gpu_config *cfg, int state)
{
	int rc;
	if (state != EMBER_GPU_STATE_NONE && state != EMBER_GPU_STATE_ADAGRAD)
		return EMBER_EINVAL;
	if (cfg->gpu) {
		ss->g = cfg->gpu;
	} else {
		ember_gpu_options o;
		ember_gpu_options_default(&o);
		o.backend = cfg->backend;
		o.device = cfg->device;
		if ((rc = ember_gpu_open(&o, &ss->g)) < 0)
			return rc;
		ss->own_g = 1;
	}
	if ((rc = ember_gpu_stream_get(ss->g, EMBER_GPU_STREAM_H2D, 0, &ss->h2d)) < 0 ||
	    (rc = ember_gpu_stream_get(ss->g, EMBER_GPU_STREAM_D2H, 0, &ss->d2h)) < 0)
		goto undo_context;
	ember_gpu_arena_options ao = {.dim = ss->max_dim, .slots = ss->nslots,
				      .state = state};
	if ((rc = ember_gpu_arena_create(ss->g, &ao, &ss->arena)) < 0)
		goto undo_context;
	ember_gpu_arena_info ai;
	if ((rc = ember_gpu_arena_query(ss->arena, &ai)) < 0)
		goto undo_arena;
	ss->mem = ai.base;
	ss->stride = ai.stride;
	ss->state_floats = ai.state_floats;
	ss->buf_floats = ss->max_dim + ss->state_floats;
	size_t row = (size_t)ss->buf_floats * sizeof(float);
	ss->rows_off = ((size_t)ss->depth * sizeof(uint32_t) + 63) & ~(size_t)63;
	ember_gpu_staging_options so;
	ember_gpu_staging_options_default(&so);
	so.buffer_bytes = ss->rows_off + (size_t)ss->depth * row;
	so.buffers = RING_BUFFERS;
	if ((rc = ember_gpu_staging_create(ss->g, &so, &ss->ring)) < 0)
		goto undo_arena;
	if ((rc = ember_gpu_event_create(ss->g, &ss->installed)) < 0)
		goto undo_ring;
	if ((rc = ember_gpu_event_create(ss->g, &ss->downloaded)) < 0)
		goto undo_installed;
	if ((rc = ember_gpu_mem_alloc(ss->g, (size_t)ss->depth * sizeof(uint32_t),
				      (void **)&ss->dev_idx_in)) < 0)
		goto undo_downloaded;
	if ((rc = ember_gpu_mem_alloc(ss->g, (size_t)ss->depth * sizeof(uint32_t),
				      (void **)&ss->dev_idx_out)) < 0)
		goto undo_idx_in;
	if ((rc = ember_gpu_mem_alloc(ss->g, (size_t)ss->depth * row, (void **)&ss->dev_rows_out)) < 0)
		goto undo_idx_out;
	return 0;

undo_idx_out:
	ember_gpu_mem_free(ss->g, ss->dev_idx_out);
undo_idx_in:
	ember_gpu_mem_free(ss->g, ss->dev_idx_in);
undo_downloaded:
	ember_gpu_event_destroy(ss->downloaded);
undo_installed:
	ember_gpu_event_destroy(ss->installed);
undo_ring:
	ember_gpu_staging_destroy(ss->ring);
undo_arena:
	ember_gpu_arena_destroy(ss->arena);
undo_context:
	if (ss->own_g)
		ember_gpu_close(ss->g);
	return rc;
}

int slot_gpu_close(struct slot_store *ss)
{
	slot_gpu_unstage(ss);
	/* every operation on the slots and scratch was enqueued on h2d or d2h (or on
	 * the trainer's streams, which h2d and d2h waited for at release: G2) */
	int rc = ember_gpu_stream_synchronize(ss->h2d);
	int rc2 = ember_gpu_stream_synchronize(ss->d2h);
	if (rc == 0)
		rc = rc2;
	ember_gpu_mem_free(ss->g, ss->dev_rows_out);
	ember_gpu_mem_free(ss->g, ss->dev_idx_out);
	ember_gpu_mem_free(ss->g, ss->dev_idx_in);
	ember_gpu_event_destroy(ss->downloaded);
	ember_gpu_event_destroy(ss->installed);
	rc2 = ember_gpu_staging_destroy(ss->ring);
	if (rc == 0)
		rc = rc2;
	ember_gpu_arena_destroy(ss->arena);
	if (ss->own_g) {
		rc2 = ember_gpu_close(ss->g);
		if (rc == 0)
			rc = rc2;
	}
	return rc;
}

int slot_gpu_stage(struct slot_store *ss, size_t n, void **bufs)
{
	if (ss->staged)
		return EMBER_ESTATE;
	void *p;
	int rc = ember_gpu_staging_acquire(ss->ring, &ss->stage_idx, &p);
	if (rc < 0)
		return rc;
	ss->stage_buf = p;
	ss->staged = 1;
	size_t row = (size_t)ss->buf_floats * sizeof(float);
	for (size_t j = 0; j < n; j++)
		bufs[j] = ss->stage_buf + ss->rows_off + j * row;
	return 0;
}

void slot_gpu_unstage(struct slot_store *ss)
{
	if (!ss->staged)
		return;
	ember_gpu_staging_release(ss->ring, ss->stage_idx, NULL); /* nothing enqueued on it */
	ss->staged = 0;
}

int slot_gpu_write(struct slot_store *ss, size_t n, const struct slot_move *m)
{
	if (!ss->staged)
		return EMBER_ESTATE;
	if (n == 0) {
		slot_gpu_unstage(ss);
		return 0;
	}
	uint32_t *idx = (uint32_t *)ss->stage_buf;
	float *rows = (float *)(ss->stage_buf + ss->rows_off);
	for (size_t j = 0; j < n; j++) {
		float *r = rows + j * ss->buf_floats;
		if (m[j].buf != (void *)r || m[j].dim > ss->max_dim || m[j].slot >= ss->nslots ||
		    m[j].state > ss->state_floats) {
			slot_gpu_unstage(ss);
			return EMBER_EINVAL; /* not the layout stage handed out */
		}
		if (ss->state_floats) {
			/* the state first (it sits in the row's padding): + max_dim */
			memmove(r + ss->max_dim, (uint8_t *)r + slot_row_bytes(m[j].dim, m[j].storage),
				(size_t)m[j].state * sizeof(float));
			memset(r + ss->max_dim + m[j].state, 0,
			       (size_t)(ss->state_floats - m[j].state) * sizeof(float));
		}
		slot_row_to_f32(r, r, m[j].dim, m[j].storage);
		memset(r + m[j].dim, 0, (size_t)(ss->max_dim - m[j].dim) * sizeof(float));
		idx[j] = m[j].slot;
	}
	uint32_t flags = ss->state_floats ? EMBER_GPU_WITH_STATE : 0;
	int rc = ember_gpu_copy_h2d(ss->h2d, ss->dev_idx_in, idx, n * sizeof(uint32_t));
	if (rc == 0)
		rc = ember_gpu_install(ss->h2d, ss->arena, ss->dev_idx_in, (uint32_t)n, rows, flags,
				       0.0f);
	if (rc == 0)
		rc = ember_gpu_event_record(ss->installed, ss->h2d);
	/* reusable once h2d got past the install (or whatever of it was enqueued) */
	int rc2 = ember_gpu_staging_release(ss->ring, ss->stage_idx, ss->h2d);
	ss->staged = 0;
	return rc < 0 ? rc : rc2;
}

int slot_gpu_read(struct slot_store *ss, size_t n, const struct slot_move *m)
{
	if (n == 0)
		return 0;
	if (n > ss->depth)
		return EMBER_EINVAL;
	uint32_t bi;
	void *p;
	int rc = ember_gpu_staging_acquire(ss->ring, &bi, &p);
	if (rc < 0)
		return rc;
	uint32_t *idx = p;
	for (size_t j = 0; j < n; j++) {
		if (m[j].slot >= ss->nslots || m[j].dim > ss->max_dim ||
		    m[j].state > ss->state_floats) {
			ember_gpu_staging_release(ss->ring, bi, NULL);
			return EMBER_EINVAL;
		}
		idx[j] = m[j].slot;
	}
	size_t bytes = n * (size_t)ss->buf_floats * sizeof(float);
	uint32_t flags = ss->state_floats ? EMBER_GPU_WITH_STATE : 0;
	rc = ember_gpu_stream_wait_event(ss->d2h, ss->installed); /* D2 */
	if (rc == 0)
		rc = ember_gpu_copy_h2d(ss->d2h, ss->dev_idx_out, idx, n * sizeof(uint32_t));
	if (rc == 0)
		rc = ember_gpu_gather(ss->d2h, ss->arena, ss->dev_idx_out, (uint32_t)n,
				      ss->dev_rows_out, flags);
	/* the download lands at the buffer's start, over the indices: the copy of the
	 * indices ran before it (same stream, rule 1) */
	if (rc == 0)
		rc = ember_gpu_staging_download(ss->ring, bi, ss->d2h, ss->dev_rows_out, bytes,
						ss->downloaded);
	if (rc == 0)
		rc = ember_gpu_event_synchronize(ss->downloaded);
	if (rc < 0) {
		/* part of it may be enqueued: let it run before the buffer goes back */
		ember_gpu_stream_synchronize(ss->d2h);
		ember_gpu_staging_release(ss->ring, bi, NULL);
		return rc;
	}
	const float *rows = p;
	for (size_t j = 0; j < n; j++) {
		const float *r = rows + j * ss->buf_floats;
		slot_row_from_f32(m[j].buf, r, m[j].dim, m[j].storage);
		memcpy((uint8_t *)m[j].buf + slot_row_bytes(m[j].dim, m[j].storage), r + ss->max_dim,
		       (size_t)m[j].state * sizeof(float));
	}
	return ember_gpu_staging_release(ss->ring, bi, NULL);
}

int slot_batch_dev_init(struct slot_store *ss, struct slot_batch_dev *d)
{
	memset(d, 0, sizeof(*d));
	return ember_gpu_event_create(ss->g, &d->ready);
}

void slot_batch_dev_free(struct slot_store *ss, struct slot_batch_dev *d)
{
	if (d->dev_slots) {
		/* the upload on h2d, and the trainer's kernels (h2d waited on them) */
		ember_gpu_stream_synchronize(ss->h2d);
		ember_gpu_mem_free(ss->g, d->dev_slots);
	}
	ember_gpu_event_destroy(d->ready);
	memset(d, 0, sizeof(*d));
}

int slot_store_publish(struct slot_store *ss, struct slot_batch_dev *d, const uint32_t *slots,
		       size_t n)
{
	int rc;
	if (n > d->cap) {
		/* the old array may still be read: by the previous upload (h2d) or by
		 * the trainer's kernels of the batch this ring entry held before, which
		 * was released, so h2d waited for them (G2). Let h2d drain first. */
		size_t cap = d->cap ? d->cap : 1024;
		while (cap < n)
			cap *= 2;
		if (d->dev_slots) {
			if ((rc = ember_gpu_stream_synchronize(ss->h2d)) < 0)
				return rc;
			ember_gpu_mem_free(ss->g, d->dev_slots);
			d->dev_slots = NULL;
			d->cap = 0;
		}
		void *p;
		if ((rc = ember_gpu_mem_alloc(ss->g, cap * sizeof(uint32_t), &p)) < 0)
			return rc;
		d->dev_slots = p;
		d->cap = cap;
	}
	size_t per = (ss->rows_off + (size_t)ss->depth * ss->buf_floats * sizeof(float)) /
		     sizeof(uint32_t);
	for (size_t off = 0; off < n; off += per) {
		size_t k = n - off < per ? n - off : per;
		uint32_t bi;
		void *p;
		if ((rc = ember_gpu_staging_acquire(ss->ring, &bi, &p)) < 0)
			return rc;
		memcpy(p, slots + off, k * sizeof(uint32_t));
		rc = ember_gpu_staging_upload(ss->ring, bi, ss->h2d, d->dev_slots + off,
					      k * sizeof(uint32_t), NULL);
		if (rc < 0) {
			ember_gpu_staging_release(ss->ring, bi, ss->h2d);
			return rc;
		}
	}
	/* after the upload, and every install enqueued so far (rule 1) */
	return ember_gpu_event_record(d->ready, ss->h2d);
}

int slot_store_order(struct slot_store *ss, ember_gpu_event *done)
{
	if (ss->where != EMBER_CACHE_SLOTS_GPU || !done)
		return 0;
	int rc = ember_gpu_stream_wait_event(ss->h2d, done);
	if (rc == 0)
		rc = ember_gpu_stream_wait_event(ss->d2h, done);
	return rc;
}
