/*
 * batch.c - reads that go to disk, and ember_get_batch.
 *
 * Disk lookups (disk_lookups): each lookup chases one key down its hash chain
 * below the log's head. A read fetches the 4 KiB-aligned blocks around the record
 * (at least FIRST_READ_MIN bytes of it); if the record turns out larger, a second
 * read fetches all of it. Every record read back is checked: sane lengths, the
 * chain strictly descending, and its checksum, else EMBER_ECORRUPT. All lookups of
 * a call share the session's ring, with up to io_queue_depth reads in flight; a
 * lookup whose record did not match moves to the previous address and reuses its
 * I/O slot at once.
 *
 * Batched gets (ember_get_batch) run in groups of BATCH_GROUP keys: hash every key
 * and prefetch its bucket, then find every entry and prefetch its record, then
 * resolve each key, so the cache misses of a group overlap. Keys that must go to
 * disk are collected and chased together after the in-memory pass.
 */
#include "store/store_int.h"

#include <errno.h>
#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"

#define BATCH_GROUP 32

struct lookup_run {
	ember_session *s;
	struct disk_lookup *lk;
	disk_done_fn done;
	void *ctx;
	uint64_t begin;
	int fatal;
};

static void slot_release(ember_session *s, uint32_t idx)
{
	struct io_slot *io = &s->io[idx];
	io->busy = 0;
	if (io->big) {
		em_free(io->big, io->big_cap);
		io->big = NULL;
		io->big_cap = 0;
	}
	s->io_free[s->io_free_n++] = idx;
}

/* Queue the read for lookup li on I/O slot idx. */
static int issue(ember_session *s, struct disk_lookup *l, uint32_t idx, uint32_t li)
{
	struct io_slot *io = &s->io[idx];
	uint64_t off = em_align_down(l->addr, EM_IO_ALIGN);
	uint64_t end = l->addr + (l->want ? l->want : FIRST_READ_MIN);
	uint64_t len = em_align_up(end - off, EM_IO_ALIGN);
	if (len > UINT32_MAX - EM_IO_ALIGN)
		return EMBER_ECORRUPT;
	uint8_t *buf;
	if (len <= IO_BUF_SIZE) {
		if (!io->buf) {
			io->buf = em_alloc_aligned(EM_IO_ALIGN, IO_BUF_SIZE);
			if (!io->buf)
				return EMBER_ENOMEM;
		}
		buf = io->buf;
	} else {
		if (io->big_cap < len) {
			em_free(io->big, io->big_cap);
			io->big_cap = 0;
			io->big = em_alloc_aligned(EM_IO_ALIGN, len);
			if (!io->big)
				return EMBER_ENOMEM;
			io->big_cap = (uint32_t)len;
		}
		buf = io->big;
	}
	io->cur = buf;
	io->busy = 1;
	io->lookup = li;
	io->off = off;
	io->len = (uint32_t)len;
	return em_ring_read(&s->ring, &s->db->hot_file, buf, (uint32_t)len, off, idx);
}

static void finish(struct lookup_run *run, uint32_t li, int status, struct record *rec)
{
	run->done(run->ctx, li, status, rec);
}

/* Look at what a read brought back; returns 1 when the lookup needs another read
 * (already queued on the same slot), 0 when it ended. */
static int on_read(struct lookup_run *run, uint32_t idx, int res)
{
	ember_session *s = run->s;
	struct io_slot *io = &s->io[idx];
	uint32_t li = io->lookup;
	struct disk_lookup *l = &run->lk[li];
	uint8_t *buf = io->cur;
	int status;
	if (res < 0) {
		status = res;
		goto end;
	}
	uint64_t pos = l->addr - io->off;
	uint64_t avail = (uint64_t)res;
	status = EMBER_ECORRUPT;
	if (pos + REC_HDR_SIZE > avail)
		goto end; /* the file ends before the record does */
	struct record *r = (struct record *)(void *)(buf + pos);
	uint32_t vlen = atomic_load_explicit(&r->val_len, memory_order_relaxed); /* private */
	if (r->key_len == 0 || r->key_len > EMBER_MAX_KEY_LEN || (r->val_cap & 7) ||
	    r->val_cap > s->db->max_record || vlen > r->val_cap)
		goto end;
	uint64_t size = rec_total_size(r);
	if (pos + size > avail) {
		if (avail < io->len || l->want >= size)
			goto end; /* short read: the record is cut off */
		l->want = (uint32_t)size;
		status = issue(s, l, idx, li);
		if (status < 0)
			goto end;
		return 1;
	}
	if (r->checksum != rec_checksum(r))
		goto end;
	if (rec_key_eq(r, l->key, l->klen)) {
		finish(run, li, 0, r);
		slot_release(s, idx);
		return 0;
	}
	uint64_t prev = rec_prev(r);
	if (prev >= l->addr)
		goto end; /* chains only go down */
	if (prev < run->begin) {
		status = EMBER_ENOTFOUND;
		goto end;
	}
	l->addr = prev;
	l->want = 0;
	status = issue(s, l, idx, li);
	if (status < 0)
		goto end;
	return 1;
end:
	finish(run, li, status, NULL);
	slot_release(s, idx);
	return 0;
}

static void on_cqe(void *ctx, uint64_t ud, int res)
{
	on_read(ctx, (uint32_t)ud, res);
}

int disk_lookups(ember_session *s, struct disk_lookup *lk, size_t n, disk_done_fn done,
		 void *ctx)
{
	struct lookup_run run = {s, lk, done, ctx, hlog_load(&s->db->hot->begin), 0};
	size_t next = 0;
	int rc = 0;
	if (s->ring_broken) {
		for (size_t i = 0; i < n; i++)
			finish(&run, (uint32_t)i, EMBER_EIO, NULL);
		return EMBER_EIO;
	}
	while (next < n || s->ring.inflight > 0) {
		while (next < n && s->io_free_n > 0) {
			uint32_t idx = s->io_free[--s->io_free_n];
			lk[next].want = 0;
			int ir = issue(s, &lk[next], idx, (uint32_t)next);
			if (ir < 0) {
				slot_release(s, idx);
				finish(&run, (uint32_t)next, ir, NULL);
			}
			next++;
		}
		rc = em_ring_submit(&s->ring);
		if (rc < 0)
			break;
		rc = em_ring_reap(&s->ring, 1, on_cqe, &run);
		if (rc < 0)
			break;
		rc = 0;
	}
	if (rc < 0) {
		/* the ring failed: fail the reads in flight and what is left; their slots
		 * stay busy, since the kernel may still write into their buffers */
		s->ring_broken = 1;
		for (uint32_t i = 0; i < s->io_n; i++)
			if (s->io[i].busy)
				finish(&run, s->io[i].lookup, rc, NULL);
		while (next < n)
			finish(&run, (uint32_t)next++, rc, NULL);
	}
	return rc;
}

struct batch_ctx {
	void *const *bufs;
	const size_t *caps;
	size_t *vlens;
	int *status;
	struct disk_lookup *lk;
};

static void batch_done(void *ctx, size_t i, int status, struct record *rec)
{
	struct batch_ctx *b = ctx;
	size_t k = b->lk[i].user;
	if (status == 0) {
		if (rec_header(rec) & REC_TOMBSTONE) {
			status = EMBER_ENOTFOUND;
		} else {
			uint32_t n = atomic_load_explicit(&rec->val_len, memory_order_relaxed); /* private */
			b->vlens[k] = n;
			if (n > b->caps[k])
				status = EMBER_ERANGE;
			else if (n)
				memcpy(b->bufs[k], rec_value(rec), n);
		}
	}
	b->status[k] = status;
}

static int batch_reserve(ember_session *s, size_t n)
{
	if (s->bcap >= n)
		return 0;
	size_t cap = s->bcap ? s->bcap : 64;
	while (cap < n)
		cap *= 2;
	uint64_t *h = em_alloc(cap * sizeof(*h));
	uint64_t *a = em_alloc(cap * sizeof(*a));
	struct disk_lookup *lk = em_alloc(cap * sizeof(*lk));
	if (!h || !a || !lk) {
		em_free(h, 0);
		em_free(a, 0);
		em_free(lk, 0);
		return EMBER_ENOMEM;
	}
	em_free(s->bhash, 0);
	em_free(s->baddr, 0);
	em_free(s->blk, 0);
	s->bhash = h;
	s->baddr = a;
	s->blk = lk;
	s->bcap = cap;
	return 0;
}

int ember_get_batch(ember_session *s, size_t n, const void *const keys[], const size_t klens[],
		    void *const bufs[], const size_t caps[], size_t vlens[], int status[])
{
	int rc = session_check(s);
	if (rc < 0)
		return rc;
	if (n == 0)
		return 0;
	if (!keys || !klens || !bufs || !caps || !vlens || !status)
		return EMBER_EINVAL;
	for (size_t i = 0; i < n; i++) {
		rc = key_check(keys[i], klens[i]);
		if (rc < 0)
			return rc;
		if (!bufs[i] && caps[i])
			return EMBER_EINVAL;
	}
	rc = batch_reserve(s, n);
	if (rc < 0)
		return rc;
	struct ember_db *db = s->db;
	struct hlog *hot = db->hot;
	size_t ndisk = 0;
	epoch_protect(db->ep, s->slot);
	uint64_t begin = hlog_load(&hot->begin);
	for (size_t g = 0; g < n; g += BATCH_GROUP) {
		size_t end = g + BATCH_GROUP < n ? g + BATCH_GROUP : n;
		for (size_t i = g; i < end; i++) {
			s->bhash[i] = em_hash(keys[i], klens[i]);
			hi_prefetch(&db->index, s->bhash[i]);
		}
		uint64_t head = hlog_load(&hot->head);
		for (size_t i = g; i < end; i++) {
			uint64_t e = 0;
			s->baddr[i] = hi_find(&db->index, s->bhash[i], &e) ? hi_entry_addr(e) : 0;
			if (s->baddr[i] >= head && s->baddr[i] >= EM_LOG_START)
				__builtin_prefetch(hlog_rec(hot, s->baddr[i]));
		}
		for (size_t i = g; i < end; i++) {
			uint64_t at = s->baddr[i];
			if (!at) {
				status[i] = EMBER_ENOTFOUND;
				continue;
			}
			struct record *r = trace_mem(hot, at, keys[i], (uint32_t)klens[i], &at);
			if (r) {
				status[i] = rec_read_value(r, bufs[i], caps[i], &vlens[i]);
			} else if (at >= begin) {
				s->blk[ndisk] = (struct disk_lookup){.key = keys[i],
								     .klen = (uint32_t)klens[i],
								     .addr = at,
								     .user = i};
				ndisk++;
			} else {
				status[i] = EMBER_ENOTFOUND;
			}
		}
	}
	epoch_unprotect(db->ep, s->slot);
	if (ndisk) {
		struct batch_ctx bc = {bufs, caps, vlens, status, s->blk};
		rc = disk_lookups(s, s->blk, ndisk, batch_done, &bc);
		if (rc < 0)
			return rc;
	}
	return 0;
}
