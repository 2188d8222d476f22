/*
 * hlog.c - the hybrid log's memory, allocation waits and its worker thread
 * (design notes in hlog.h).
 */
#include "log/hlog.h"

#include "core/debug.h"

#include <ember.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_CHUNK (4u << 20) /* largest single write */

static void atomic_max_u64(_Atomic uint64_t *v, uint64_t x)
{
	/* relaxed: the CAS below validates it */
	uint64_t cur = atomic_load_explicit(v, memory_order_relaxed);
	/* release: publish what was done before raising the boundary */
	while (cur < x && !atomic_compare_exchange_weak_explicit(v, &cur, x, memory_order_release,
								 memory_order_relaxed))
		;
}

/* Stop the log with err, unless an earlier error already has: the first one is
 * the one reported (hlog.h: error). */
static void set_error(struct hlog *l, int err)
{
	int expect = 0;
	/* relaxed: a sticky flag on its own; waiters only compare it with 0 */
	atomic_compare_exchange_strong_explicit(&l->error, &expect, err, memory_order_relaxed,
						memory_order_relaxed);
}

/* The worker's sticky error, 0 if none. */
static int get_error(struct hlog *l)
{
	/* relaxed: a sticky flag on its own; nothing is read on the strength of it */
	return atomic_load_explicit(&l->error, memory_order_relaxed);
}

void hlog_kick(struct hlog *l)
{
	pthread_mutex_lock(&l->mu);
	l->kicked = 1;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
	/* seq_cst, with the worker's store of ring_waiting before it reads kicked
	 * under mu: either it sees kicked, or this sees it waiting and wakes it */
	if (l->kick_fd >= 0 && atomic_load(&l->ring_waiting))
		(void)eventfd_write(l->kick_fd, 1);
}

uint64_t hlog_alloc_slow(struct hlog *l, uint64_t size)
{
	/* relaxed: the CAS below validates */
	uint64_t t = atomic_load_explicit(&l->tail, memory_order_relaxed);
	for (;;) {
		uint64_t off = l->mem_mask ? (t & l->mem_mask) : (t % l->mem_size);
		uint64_t start = off + size > l->mem_size ? t + (l->mem_size - off) : t;
		uint64_t end = start + size;
		uint64_t limit = em_page_floor(hlog_load(&l->safe_head), l->page_bits) + l->mem_size;
		if (end > limit)
			return 0;
		/* acq_rel: as in hlog_alloc */
		if (!atomic_compare_exchange_weak_explicit(&l->tail, &t, end, memory_order_acq_rel,
							   memory_order_relaxed))
			continue;
		uint64_t gap = start - t;
		if (gap >= REC_HDR_SIZE) {
			/* pad the rest of the lap: a filler scanners step over */
			struct record *f = hlog_rec(l, t);
			/* init (plain stores), as rec_init does: no one reads below the
			 * tail before safe_read_only passes it, which waits for this
			 * thread to leave its epoch */
			atomic_init(&f->header, REC_FILLER | REC_INVALID);
			atomic_init(&f->seq, 0);
			f->checksum = 0;
			f->key_len = 0;
			atomic_init(&f->val_len, 0);
			f->val_cap = (uint32_t)(gap - REC_HDR_SIZE);
			f->reserved = 0;
		}
		hlog_kick(l);
		return start;
	}
}

static void set_safe_ro(void *arg)
{
	struct hlog_bump *b = arg;
	struct hlog *l = b->log;
	atomic_max_u64(&l->safe_read_only, b->value);
	/* release: the slot may be reused once this is seen */
	atomic_store_explicit(&b->busy, 0, memory_order_release);
	hlog_kick(l);
}

static void set_safe_head(void *arg)
{
	struct hlog_bump *b = arg;
	atomic_max_u64(&b->log->safe_head, b->value);
	/* release: as above */
	atomic_store_explicit(&b->busy, 0, memory_order_release);
}

/* Move a boundary and register the epoch action that makes it safe. Returns 0 if
 * no bump slot is free (try again later). */
static int bump(struct hlog *l, _Atomic uint64_t *boundary, uint64_t value,
		epoch_action_fn fn)
{
	struct hlog_bump *b = &l->bumps[l->bump_next % HLOG_BUMPS];
	/* acquire: the previous action on this slot has finished with it */
	if (atomic_load_explicit(&b->busy, memory_order_acquire))
		return 0;
	l->bump_next++;
	b->log = l;
	b->value = value;
	atomic_store_explicit(&b->busy, 1, memory_order_relaxed); /* published by epoch_bump */
	atomic_max_u64(boundary, value);
	epoch_bump(l->ep, fn, b);
	return 1;
}

static void flush_done(void *ctx, uint64_t ud, int res)
{
	struct hlog *l = ctx;
	struct hlog_write *w = &l->writes[ud];
	if (res < 0 || (uint64_t)res != w->end - w->start)
		set_error(l, res < 0 ? res : EMBER_EIO);
	w->done = 1;
	while (l->writes_count > 0 && l->writes[l->writes_head].done) {
		struct hlog_write *o = &l->writes[l->writes_head];
		/* relaxed: a statistic */
		atomic_fetch_add_explicit(&l->bytes_flushed, o->end - o->start, memory_order_relaxed);
		if (!get_error(l))
			atomic_max_u64(&l->flushed, o->safe_end);
		l->writes_head = (l->writes_head + 1) % HLOG_MAX_FLUSH_WRITES;
		l->writes_count--;
	}
}

/* Checksum every record that starts below upto (all of them immutable now). */
static int checksum_records(struct hlog *l, uint64_t upto)
{
	uint64_t tail = hlog_load(&l->tail);
	while (l->csum_cursor < upto) {
		uint64_t a = hlog_skip_gap(l, l->csum_cursor);
		if (a >= upto) {
			l->csum_cursor = a;
			break;
		}
		struct record *r = hlog_rec(l, a);
		uint64_t size = rec_total_size(r);
		int filler = (rec_header(r) & REC_FILLER) != 0;
		if ((!filler && (r->key_len == 0 || r->key_len > EMBER_MAX_KEY_LEN)) ||
		    r->val_cap > l->mem_size || a + size > tail)
			return EMBER_ECORRUPT;
		r->checksum = rec_checksum(r);
		l->csum_cursor = a + size;
	}
	return 0;
}

/* Is some write queued before entry i, and not done, over [start, end)? */
static int overlaps_earlier(const struct hlog *l, uint32_t i, uint64_t start, uint64_t end)
{
	for (uint32_t j = 0; j < i; j++) {
		const struct hlog_write *w = &l->writes[(l->writes_head + j) % HLOG_MAX_FLUSH_WRITES];
		if (!w->done && w->start < end && start < w->end)
			return 1;
	}
	return 0;
}

/* Issue every held write that no earlier write overlaps any more (in queue order).
 * Returns how many were issued. */
static int issue_held(struct hlog *l)
{
	int issued = 0;
	for (uint32_t i = 0; i < l->writes_count; i++) {
		uint32_t idx = (l->writes_head + i) % HLOG_MAX_FLUSH_WRITES;
		struct hlog_write *w = &l->writes[idx];
		if (w->issued || overlaps_earlier(l, i, w->start, w->end))
			continue;
		int wrc = em_ring_write(&l->ring, l->file, (void *)hlog_rec(l, w->start),
					(uint32_t)(w->end - w->start), w->start, idx);
		if (wrc < 0) {
			if (wrc != -EBUSY) /* -EBUSY: the ring is full, next time */
				set_error(l, wrc);
			break;
		}
		w->issued = 1;
		issued++;
	}
	return issued;
}

/* Send the held writes that may go now (the log stops on a failed submit). */
static void send_held(struct hlog *l)
{
	if (l->file && !get_error(l) && issue_held(l) > 0 && em_ring_submit(&l->ring) < 0)
		set_error(l, EMBER_EIO);
}

/*
 * Flush what safe_ro now covers. Records may span pages, so the record that
 * straddles safe_ro is written whole: the write runs to the 4 KiB block after the
 * checksum cursor (the end of the last record that starts below safe_ro). Bytes
 * past the cursor in that last block may belong to mutable records and be stale
 * on disk; the next flush starts at the block holding the cursor and rewrites
 * them. Two writes of one block may complete in either order, so while an earlier
 * write of that first block is in flight, the block is queued as a held write of
 * its own (issue_held sends it once the earlier one is done) and the rest of the
 * flush goes at once: flushes follow one another without waiting for the one
 * before to land. Only the last write queued for a flush has a safe_end (what
 * flushed may advance to): the cursor, a record boundary; writes retire in queue
 * order, so flushed reaches it only when the held block is on disk too. Earlier
 * chunks end wherever 4 MiB falls, often inside a record, so they leave flushed
 * alone; every record below flushed is whole and final on disk (invariant 4, for
 * records that straddle head too).
 */
static void worker_flush(struct hlog *l)
{
	uint64_t sro = hlog_load(&l->safe_read_only);
	if (sro <= l->flush_issued || get_error(l))
		return;
	if (!l->file) {
		/* memory only: nothing to write, the region is "flushed" as it turns
		 * read-only (records are dropped at eviction) */
		l->flush_issued = sro;
		atomic_max_u64(&l->flushed, sro);
		return;
	}
	if (l->writes_count > HLOG_MAX_FLUSH_WRITES / 2)
		return; /* let writes complete first: one flush is issued whole */
	int rc = checksum_records(l, sro);
	if (rc < 0) {
		set_error(l, rc);
		return;
	}
	uint64_t cursor = l->csum_cursor;
	if (cursor == l->flush_cursor) {
		/* safe_ro moved within the record that straddled it before: every
		 * record it now covers is in the writes already issued (or on disk) */
		l->flush_issued = sro;
		return;
	}
	uint64_t target = em_align_up(cursor, EM_IO_ALIGN);
	uint64_t start = l->flush_from;
	if (start < target &&
	    overlaps_earlier(l, l->writes_count, start, start + EM_IO_ALIGN)) {
		/* the first block is still on its way with older contents: hold its
		 * write (laps are whole blocks, so it lies in one lap) */
		uint64_t end = target < start + EM_IO_ALIGN ? target : start + EM_IO_ALIGN;
		uint32_t idx = (l->writes_head + l->writes_count) % HLOG_MAX_FLUSH_WRITES;
		l->writes[idx] = (struct hlog_write){start, end, end >= target ? cursor : 0, 0, 0};
		l->writes_count++;
		/* relaxed: a statistic */
		atomic_fetch_add_explicit(&l->held_writes, 1, memory_order_relaxed);
		start = end;
	}
	while (start < target && l->writes_count < HLOG_MAX_FLUSH_WRITES) {
		uint64_t end = target - start > FLUSH_CHUNK ? start + FLUSH_CHUNK : target;
		uint64_t lap_end = start - (l->mem_mask ? (start & l->mem_mask) : (start % l->mem_size)) +
				   l->mem_size;
		if (end > lap_end)
			end = lap_end; /* the ring is contiguous only up to the end of a lap */
		uint32_t idx = (l->writes_head + l->writes_count) % HLOG_MAX_FLUSH_WRITES;
		/* only the last write of a flush ends on a record boundary (the cursor) */
		l->writes[idx] = (struct hlog_write){start, end, end >= target ? cursor : 0, 1, 0};
		if (overlaps_earlier(l, l->writes_count, start, end)) {
			/* cannot happen (the first block was held above, and earlier
			 * flushes end within it): stop the log rather than let a block
			 * land with older contents; the tests fail on it */
			set_error(l, EMBER_ECORRUPT);
			break;
		}
		int wrc = em_ring_write(&l->ring, l->file, (void *)hlog_rec(l, start), (uint32_t)(end - start),
					start, idx);
		if (wrc < 0) {
			/* -EBUSY: the ring is full, go on next time; anything else (a log
			 * segment that cannot be created) stops the log: sticky flag */
			if (wrc != -EBUSY)
				set_error(l, wrc);
			break;
		}
		l->writes_count++;
		start = end;
	}
	if (start >= target) {
		l->flush_issued = sro;
		l->flush_from = em_align_down(cursor, EM_IO_ALIGN);
		l->flush_cursor = cursor;
	} else {
		l->flush_from = start; /* ring full: continue from here next time */
	}
	if (em_ring_submit(&l->ring) < 0)
		set_error(l, EMBER_EIO);
}

/* Invariants 1 and 4 (hlog.h): begin <= head <= safe_ro <= ro <= tail, and head <=
 * flushed. Each bound only grows, so loading them from the oldest region to the
 * newest keeps the order of the true values. */
static void check_regions(struct hlog *l)
{
	if (!EM_DEBUG_CHECKS_ON)
		return;
	uint64_t begin = hlog_load(&l->begin), head = hlog_load(&l->head);
	uint64_t sro = hlog_load(&l->safe_read_only), ro = hlog_load(&l->read_only);
	uint64_t tail = hlog_load(&l->tail);
	/* begin may pass head, but only inside the record that straddled head when a
	 * compaction pass ended (hlog.h, the region note): never past the tail */
	EM_DEBUG_CHECK(begin <= tail, "hlog.h regions: begin %llu above tail %llu",
		       (unsigned long long)begin, (unsigned long long)tail);
	EM_DEBUG_CHECK(head <= sro && sro <= ro && ro <= tail, "hlog.h invariant 1: head %llu "
		       "safe_ro %llu ro %llu tail %llu", (unsigned long long)head,
		       (unsigned long long)sro, (unsigned long long)ro, (unsigned long long)tail);
	uint64_t flushed = hlog_load(&l->flushed);
	EM_DEBUG_CHECK(head <= flushed, "hlog.h invariant 4: head %llu above flushed %llu",
		       (unsigned long long)head, (unsigned long long)flushed);
}

static void worker_step(struct hlog *l)
{
	uint64_t tail = hlog_load(&l->tail);
	uint64_t need = hlog_load(&l->alloc_need);
	if (need < tail)
		need = tail;
	uint64_t want_head = 0;
	if (need + l->headroom > l->mem_size)
		want_head = em_page_ceil(need + l->headroom - l->mem_size, l->page_bits);
	uint64_t tail_floor = em_page_floor(tail, l->page_bits);
	uint64_t want_ro = tail_floor > l->mutable_bytes ? tail_floor - l->mutable_bytes : 0;
	want_ro = em_page_floor(want_ro, l->page_bits);
	if (want_ro < want_head)
		want_ro = want_head;
	if (want_ro > tail_floor)
		want_ro = tail_floor;
	/* a checkpoint's fold point: never past the tail, so no bound applies */
	uint64_t fold = hlog_load(&l->fold_request);
	if (fold > want_ro)
		want_ro = fold;
	if (want_ro > hlog_load(&l->read_only))
		bump(l, &l->read_only, want_ro, set_safe_ro);

	send_held(l);
	worker_flush(l);

	/* each bound is loaded once: safe_read_only moves under us (set_safe_ro runs
	 * in whichever thread drains the epoch), and flushed may be above it (the
	 * record straddling safe_ro is flushed whole), so a second load of a bound
	 * after comparing with the first could raise h past flushed (invariant 4) */
	uint64_t flushed = hlog_load(&l->flushed);
	uint64_t safe_ro = hlog_load(&l->safe_read_only);
	uint64_t h = want_head;
	if (h > flushed)
		h = flushed;
	if (h > safe_ro)
		h = safe_ro;
	h = em_page_floor(h, l->page_bits);
	uint64_t head = hlog_load(&l->head);
	if (h > head) {
		/* relaxed: only this thread sets busy, and bump() checks it again */
		if (l->evict && !atomic_load_explicit(&l->bumps[l->bump_next % HLOG_BUMPS].busy,
						      memory_order_relaxed))
			l->evict(l->evict_ctx, head > EM_LOG_START ? head : EM_LOG_START, h);
		bump(l, &l->head, h, set_safe_head);
	}
	check_regions(l);
}

static int bumps_pending(struct hlog *l)
{
	for (int i = 0; i < HLOG_BUMPS; i++)
		/* relaxed: a hint for how long to sleep */
		if (atomic_load_explicit(&l->bumps[i].busy, memory_order_relaxed))
			return 1;
	return 0;
}

/*
 * Writes are in flight: reap what completed, or sleep until a completion or a kick
 * arrives. A boundary move waiting for its epoch action (a record just turned
 * immutable, whose flush waits for safe_ro) is drained here too, and the sleep is
 * then 50 us: the threads that must leave their epoch first do not signal it, and
 * the flush should not wait for the writes in flight to land. Otherwise at most
 * 20 ms (without eventfds, 500 us in the ring).
 */
static void ring_wait(struct hlog *l)
{
	int pending = bumps_pending(l);
	if (pending && epoch_drain(l->ep) > 0) {
		/* a boundary moved: flush what it covers, with what landed retired */
		em_ring_reap(&l->ring, 0, flush_done, l);
		return;
	}
	if (l->cq_fd < 0) {
		em_ring_reap_timeout(&l->ring, pending ? 50 : 500, flush_done, l);
		return;
	}
	eventfd_t v;
	(void)eventfd_read(l->cq_fd, &v); /* reset first: a completion after it wakes poll */
	if (em_ring_reap(&l->ring, 0, flush_done, l) != 0)
		return;
	atomic_store(&l->ring_waiting, 1); /* seq_cst: see hlog_kick */
	pthread_mutex_lock(&l->mu);
	int kicked = l->kicked || l->stop;
	pthread_mutex_unlock(&l->mu);
	if (!kicked) {
		struct pollfd p[2] = {{.fd = l->cq_fd, .events = POLLIN},
				      {.fd = l->kick_fd, .events = POLLIN}};
		struct timespec ts = {0, pending ? 50000 : 20000000};
		(void)ppoll(p, 2, &ts, NULL);
	}
	atomic_store(&l->ring_waiting, 0); /* seq_cst: see hlog_kick */
	(void)eventfd_read(l->kick_fd, &v);
	em_ring_reap(&l->ring, 0, flush_done, l);
}

static void *hlog_worker(void *arg)
{
	struct hlog *l = arg;
	for (;;) {
		pthread_mutex_lock(&l->mu);
		int stop = l->stop;
		l->kicked = 0;
		pthread_mutex_unlock(&l->mu);
		if (stop)
			break;
		worker_step(l);
		if (l->ring.inflight > 0) {
			/* writes queued by a flush whose submit failed never reach the kernel
			 * by themselves: submit them again (the error stays sticky) */
			if (io_uring_sq_ready(&l->ring.ring) > 0)
				em_ring_submit(&l->ring);
			ring_wait(l);
			continue;
		}
		if (bumps_pending(l)) {
			epoch_drain(l->ep);
			if (bumps_pending(l)) {
				struct timespec ts = {0, 20000};
				nanosleep(&ts, NULL);
			}
			continue;
		}
		pthread_mutex_lock(&l->mu);
		if (!l->kicked && !l->stop) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 20 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&l->cv, &l->mu, &ts);
		}
		pthread_mutex_unlock(&l->mu);
	}
	for (;;) {
		/* a held write (not in inflight) goes once the write it waits for has
		 * landed: a destroy waits for it too */
		send_held(l);
		if (l->ring.inflight == 0)
			break;
		/* queued writes the kernel never got would be waited for forever: try to
		 * submit them; if that fails too, they are lost (the error is sticky) */
		if (io_uring_sq_ready(&l->ring.ring) > 0 && em_ring_submit(&l->ring) < 0)
			break;
		if (em_ring_reap(&l->ring, 1, flush_done, l) < 0)
			break;
	}
	return NULL;
}

int hlog_wait(struct hlog *l, uint64_t size, int epoch_slot)
{
	uint64_t t = hlog_load(&l->tail);
	uint64_t off = l->mem_mask ? (t & l->mem_mask) : (t % l->mem_size);
	if (off + size > l->mem_size)
		t += l->mem_size - off; /* the record will start the next lap */
	uint64_t need = t + size;
	atomic_max_u64(&l->alloc_need, need);
	hlog_kick(l);
	epoch_unprotect(l->ep, epoch_slot);
	int rc = 0;
	for (unsigned spins = 0;; spins++) {
		uint64_t limit = em_page_floor(hlog_load(&l->safe_head), l->page_bits) + l->mem_size;
		if (limit >= need)
			break;
		rc = get_error(l);
		if (rc)
			break;
		epoch_drain(l->ep);
		if (spins < 64) {
			sched_yield();
		} else {
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
		}
	}
	epoch_protect(l->ep, epoch_slot);
	return rc;
}

int hlog_fold(struct hlog *l, uint64_t upto, struct em_ring *ring)
{
	atomic_max_u64(&l->fold_request, upto);
	int rc = 0;
	for (unsigned spins = 0;; spins++) {
		if (hlog_load(&l->flushed) >= upto)
			break;
		rc = get_error(l);
		if (rc)
			return rc;
		hlog_kick(l);
		epoch_drain(l->ep);
		struct timespec ts = {0, spins < 100 ? 20000 : 200000};
		nanosleep(&ts, NULL);
	}
	if (!l->file)
		return 0;
	/* every record below synced landed before the previous fold's fsync began;
	 * only the block holding it may have been written again since (the flush
	 * after a fold starts at the cursor's block) */
	rc = em_io_fsync_from(ring, l->file, em_align_down(l->synced, EM_IO_ALIGN));
	if (rc == 0 && upto > l->synced)
		l->synced = upto;
	return rc;
}

int hlog_load_tail_block(struct hlog *l, struct em_ring *ring)
{
	uint64_t t = hlog_load(&l->tail);
	uint64_t from = em_align_down(t, EM_IO_ALIGN);
	if (!l->file || from == t || t <= EM_LOG_START)
		return 0;
	/* the block lies in one lap: laps and pages are multiples of 4 KiB */
	void *dst = l->base + (l->mem_mask ? (from & l->mem_mask) : (from % l->mem_size));
	return em_io_pread(ring, l->file, dst, EM_IO_ALIGN, from);
}

static int map_ring(struct hlog *l)
{
	const size_t huge = 2u << 20;
	l->map_bytes = l->mem_size + huge;
	l->map = mmap(NULL, l->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (l->map == MAP_FAILED) {
		l->map = NULL;
		return EMBER_ENOMEM;
	}
	/* align to a huge page, and ask for huge pages: a random record access should
	 * not also miss the TLB */
	l->base = (uint8_t *)em_align_up((uintptr_t)l->map, huge);
	madvise(l->base, l->mem_size, MADV_HUGEPAGE);
	return 0;
}

static void close_eventfds(struct hlog *l)
{
	if (l->cq_fd >= 0)
		close(l->cq_fd);
	if (l->kick_fd >= 0)
		close(l->kick_fd);
	l->cq_fd = l->kick_fd = -1;
}

int hlog_init(struct hlog *l, const struct hlog_config *cfg, struct em_file *file,
	      struct epoch *ep)
{
	int rc;
	memset(l, 0, sizeof(*l));
	l->cq_fd = l->kick_fd = -1; /* before anything could kick */
	atomic_init(&l->ring_waiting, 0);
	l->page_size = cfg->page_size;
	l->page_bits = (unsigned)__builtin_ctzll(cfg->page_size);
	l->mem_size = em_page_floor(cfg->mem_size, l->page_bits);
	l->mem_mask = (l->mem_size & (l->mem_size - 1)) == 0 ? l->mem_size - 1 : 0;
	l->mutable_bytes = em_page_floor((uint64_t)(cfg->mutable_fraction * (double)l->mem_size),
					 l->page_bits);
	if (l->mutable_bytes < l->page_size)
		l->mutable_bytes = l->page_size;
	l->headroom = em_page_ceil(l->mem_size / 8, l->page_bits);
	l->file = file;
	l->ep = ep;
	atomic_init(&l->tail, EM_LOG_START);
	atomic_init(&l->begin, EM_LOG_START);
	l->csum_cursor = EM_LOG_START;
	if (cfg->start_tail > EM_LOG_START) {
		/* recovered: [start_begin, start_tail) is on disk, nothing in memory */
		uint64_t t = cfg->start_tail;
		atomic_init(&l->begin, cfg->start_begin);
		atomic_init(&l->tail, t);
		atomic_init(&l->read_only, t);
		atomic_init(&l->safe_read_only, t);
		atomic_init(&l->head, t);
		atomic_init(&l->safe_head, t);
		atomic_init(&l->flushed, t);
		atomic_init(&l->fold_request, t);
		l->csum_cursor = t;
		l->flush_issued = t;
		l->flush_from = em_align_down(t, EM_IO_ALIGN);
		l->flush_cursor = t;
		l->synced = t;
	}
	for (int i = 0; i < HLOG_BUMPS; i++)
		atomic_init(&l->bumps[i].busy, 0);

	rc = map_ring(l);
	if (rc < 0)
		return rc;
	rc = em_ring_init(&l->ring, HLOG_MAX_FLUSH_WRITES);
	if (rc < 0)
		goto undo_map;
	if (file) {
		/* without them the worker polls its ring instead (see hlog.h) */
		l->cq_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		l->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (l->cq_fd < 0 || l->kick_fd < 0 ||
		    io_uring_register_eventfd(&l->ring.ring, l->cq_fd) < 0)
			close_eventfds(l);
	}
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	rc = -pthread_create(&l->thread, NULL, hlog_worker, l);
	if (rc < 0)
		goto undo_ring;
	l->thread_started = 1;
	return 0;

undo_ring:
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	em_ring_exit(&l->ring);
	close_eventfds(l);
undo_map:
	munmap(l->map, l->map_bytes);
	l->map = l->base = NULL;
	return rc == -ENOMEM ? EMBER_ENOMEM : rc;
}

void hlog_destroy(struct hlog *l)
{
	if (l->thread_started) {
		pthread_mutex_lock(&l->mu);
		l->stop = 1;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->mu);
		if (l->kick_fd >= 0)
			(void)eventfd_write(l->kick_fd, 1); /* out of ring_wait's poll */
		pthread_join(l->thread, NULL);
		l->thread_started = 0;
		/* actions that still point into this log must run before it goes */
		epoch_finish(l->ep);
		pthread_cond_destroy(&l->cv);
		pthread_mutex_destroy(&l->mu);
		em_ring_exit(&l->ring);
		close_eventfds(l);
	}
	if (l->map)
		munmap(l->map, l->map_bytes);
	l->map = l->base = NULL;
}
