/*
 * ring.c - em_ring (see file.h): an io_uring of the caller's, requests queued on it
 * for plain and segmented files (split at segment ends), reaping their completions,
 * and the synchronous calls (em_io_*) built on it.
 *
 * Invariants (numbered with segment.c's: 3, 5 and 6 are there)
 *  1. r->inflight counts requests queued or submitted and not yet reaped; it never
 *     exceeds r->depth. A request takes one submission entry, or two when split
 *     (invariant 4), and the ring has 2 x depth of them (the completion queue twice
 *     that), so neither queue can overflow.
 *  2. A completion's res is the kernel's: bytes transferred or -errno. A request
 *     split at segment ends (invariant 3) reports the bytes moved contiguously from
 *     its start (a part that came back short ends the count) or its first error.
 *  4. A request that crosses a segment end is split in two (it may span at most two
 *     segments: -EINVAL otherwise). It holds one entry of r->splits, and counts once
 *     in r->inflight, from its queueing until its second part completes; each part's
 *     user_data is SPLIT_BIT | entry << 16 | part.
 */
#include "io/file_int.h"

#include "core/alloc.h"
#include "core/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int em_ring_init(struct em_ring *r, uint32_t depth)
{
	memset(r, 0, sizeof(*r));
	int fault = EM_FAULT(EM_FAULT_RING_INIT); /* fault injection: fail as setup would */
	if (fault)
		return fault;
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	if (depth == 0 || depth > 16384)
		return -EINVAL;
	/* two submission entries a request: a split one takes both (invariant 1) */
	int rc = io_uring_queue_init_params(2 * depth, &r->ring, &p);
	if (rc < 0)
		return rc;
	r->splits = em_zalloc(depth * sizeof(struct em_split));
	if (!r->splits) {
		io_uring_queue_exit(&r->ring);
		return -ENOMEM;
	}
	r->depth = depth;
	r->ready = 1;
	return 0;
}

void em_ring_exit(struct em_ring *r)
{
	if (!r->ready)
		return;
	EM_FAULT_RING_FORGET(r); /* fault injection: drop injected completions */
	PL(em_pl_ring_exit(r)); /* power-loss simulator: its requests never completed */
	io_uring_queue_exit(&r->ring);
	em_free(r->splits, r->depth * sizeof(struct em_split));
	r->splits = NULL;
	r->ready = 0;
}

static struct io_uring_sqe *ring_sqe(struct em_ring *r)
{
	if (r->inflight >= r->depth)
		return NULL;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	if (!sqe)
		return NULL;
	r->inflight++;
	return sqe;
}

/*
 * Fault injection (core/fault.h): a request that must fail is queued as a read of
 * fd -1 with the same user_data, so it travels like any request (submitted by
 * whatever submits the ring, completed in order with the others); the kernel fails
 * it with -EBADF, which ring_drain_ready turns into err. Compiled out, EM_FAULT is
 * 0 and this is unused.
 */
static inline int ring_fault(struct em_ring *r, uint64_t user_data, int err, int *rc)
{
#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
	if (r->inflight >= r->depth) {
		*rc = -EBUSY;
		return 1;
	}
	if (em_fault_ring_queue(r, user_data, err) < 0)
		return 0; /* cannot record it (no memory): no fault this time */
	struct io_uring_sqe *sqe = ring_sqe(r);
	if (!sqe) {
		(void)em_fault_ring_result(r, user_data, EM_FAULT_RING_MARK); /* unrecord */
		*rc = -EBUSY;
		return 1;
	}
	io_uring_prep_read(sqe, -1, NULL, 0, 0);
	io_uring_sqe_set_data64(sqe, user_data);
	*rc = 0;
	return 1;
#else
	(void)r;
	(void)user_data;
	*rc = err;
	return 1;
#endif
}
#define RING_FAULT(r, site, user_data)                                          \
	do {                                                                        \
		int fault_ = EM_FAULT(site), rc_;                                   \
		if (fault_ && ring_fault((r), (user_data), fault_, &rc_))           \
			return rc_;                                                 \
	} while (0)

/* Part p of a split request: its offset from the request's start and its length. */
static void split_part(uint64_t off, uint32_t len, uint32_t seg_bits, uint32_t p, uint64_t *rel,
		       uint32_t *plen)
{
	uint64_t seg = UINT64_C(1) << seg_bits;
	uint64_t first = seg - (off & (seg - 1)); /* bytes of the first part's segment */
	uint64_t a = p == 0 ? 0 : first + (uint64_t)(p - 1) * seg;
	uint64_t b = first + (uint64_t)p * seg;
	if (b > len)
		b = len;
	*rel = a;
	*plen = (uint32_t)(b - a);
}

/* A read or write of a segmented file: one request per segment it touches. */
static int seg_rw(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off,
		  uint64_t ud, int write)
{
	uint32_t bits = f->seg_bits;
	uint64_t n0 = off >> bits, n1 = len ? (off + len - 1) >> bits : n0;
	uint64_t parts = n1 - n0 + 1;
	if (ud & SPLIT_BIT || parts > 2)
		return -EINVAL;
	if (r->inflight >= r->depth)
		return -EBUSY;
	uint32_t zeroed = 0;
	int fds[2];
	for (uint64_t n = n0; n <= n1; n++) { /* every segment open before anything is queued */
		int fd = fds[n - n0] = io_seg_fd(f, n, write);
		if (fd == -ENOENT && !write)
			zeroed |= 1u << (n - n0); /* read as a hole (invariant 3) */
		else if (fd < 0)
			return fd;
	}
	if (write) {
		/* relaxed: a first guess, which the CAS below checks and refreshes */
		uint64_t hi = atomic_load_explicit(&f->segs->hi_written, memory_order_relaxed);
		/* release on success: pairs with segs_fsync's acquire (it syncs every
		 * segment written); relaxed on failure: only the value is taken */
		while (hi < n1 + 1 && !atomic_compare_exchange_weak_explicit(&f->segs->hi_written, &hi, n1 + 1,
									       memory_order_release,
									       memory_order_relaxed))
			;
	}
	uint32_t e = 0;
	int tagged = parts > 1 || zeroed;
	if (tagged) {
		/* a free entry exists: at most depth requests are in flight */
		while (r->splits[e].left)
			e++;
		r->splits[e] = (struct em_split){ud, off, len, bits, (uint32_t)parts, zeroed,
						 SPLIT_NONE, 0, 0};
	}
	r->inflight++; /* once for the request (invariant 1) */
	for (uint32_t p = 0; p < parts; p++) {
		uint64_t rel;
		uint32_t plen;
		split_part(off, len, bits, p, &rel, &plen);
		/* never NULL: 2 x depth entries, at most 2 a request (invariant 1) */
		struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
		uint64_t o = (off + rel) & ((UINT64_C(1) << bits) - 1);
		if (zeroed & (1u << p)) {
			memset((uint8_t *)buf + rel, 0, plen);
			io_uring_prep_nop(sqe);
		} else {
			int fd = fds[p];
			if (write) {
				PL(em_pl_write(fd, (const uint8_t *)buf + rel, plen, o, r, ud, 0));
				io_uring_prep_write(sqe, fd, (const uint8_t *)buf + rel, plen, o);
			}
			else
				io_uring_prep_read(sqe, fd, (uint8_t *)buf + rel, plen, o);
		}
		io_uring_sqe_set_data64(sqe, tagged ? SPLIT_BIT | (uint64_t)e << 16 | p : ud);
	}
	return 0;
}

int em_ring_read(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off,
		 uint64_t user_data)
{
	RING_FAULT(r, EM_FAULT_IO_READ, user_data);
	if (f->segs)
		return seg_rw(r, f, buf, len, off, user_data, 0);
	struct io_uring_sqe *sqe = ring_sqe(r);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, f->fd, buf, len, off);
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

int em_ring_write(struct em_ring *r, struct em_file *f, const void *buf, uint32_t len,
		  uint64_t off, uint64_t user_data)
{
	RING_FAULT(r, EM_FAULT_IO_WRITE, user_data);
	if (f->segs)
		return seg_rw(r, f, (void *)(uintptr_t)buf, len, off, user_data, 1);
	struct io_uring_sqe *sqe = ring_sqe(r);
	if (!sqe)
		return -EBUSY;
	PL(em_pl_write(f->fd, buf, len, off, r, user_data, 0)); /* power-loss simulator */
	io_uring_prep_write(sqe, f->fd, buf, len, off);
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

int em_ring_fsync(struct em_ring *r, struct em_file *f, uint64_t user_data)
{
	RING_FAULT(r, EM_FAULT_IO_FSYNC, user_data);
	if (f->segs)
		return -EINVAL;
	struct io_uring_sqe *sqe = ring_sqe(r);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_fsync(sqe, f->fd, 0);
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

int em_ring_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len,
		  uint64_t user_data)
{
	RING_FAULT(r, EM_FAULT_IO_PUNCH, user_data);
	if (f->segs)
		return -EINVAL;
	struct io_uring_sqe *sqe = ring_sqe(r);
	if (!sqe)
		return -EBUSY;
	PL(em_pl_write(f->fd, NULL, len, off, r, user_data, 1)); /* power-loss simulator */
	io_uring_prep_fallocate(sqe, f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

int em_ring_submit(struct em_ring *r)
{
	int fault = EM_FAULT(EM_FAULT_IO_SUBMIT); /* fault injection: nothing submitted */
	if (fault)
		return fault;
	for (;;) {
		int rc = io_uring_submit(&r->ring);
		if (rc >= 0)
			return 0;
		if (rc != -EINTR && rc != -EAGAIN)
			return rc;
	}
}

static int ring_drain_ready(struct em_ring *r, em_ring_cb cb, void *ctx)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	int done = 0;
	io_uring_for_each_cqe(&r->ring, head, cqe)
	{
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		n++;
		if (ud & SPLIT_BIT) {
			struct em_split *sp = &r->splits[(ud & ~SPLIT_BIT) >> 16];
			uint32_t p = (uint32_t)(ud & 0xffff), plen;
			uint64_t rel;
			split_part(sp->off, sp->len, sp->seg_bits, p, &rel, &plen);
			int pres = sp->zeroed & (1u << p) ? (int)plen : cqe->res;
			if (pres < 0) {
				if (!sp->err)
					sp->err = pres;
			} else if ((uint32_t)pres < plen && (sp->short_part == SPLIT_NONE || p < sp->short_part)) {
				sp->short_part = p;
				sp->short_res = pres;
			}
			if (--sp->left)
				continue;
			r->inflight--;
			int res = sp->err;
			if (!res && sp->short_part == SPLIT_NONE) {
				res = (int)sp->len;
			} else if (!res) {
				split_part(sp->off, sp->len, sp->seg_bits, sp->short_part, &rel, &plen);
				res = (int)(rel + (uint64_t)sp->short_res);
			}
			done++;
			PL(em_pl_complete(r, sp->ud)); /* power-loss simulator */
			cb(ctx, sp->ud, EM_FAULT_RING_RESULT(r, sp->ud, res)); /* fault injection */
			continue;
		}
		r->inflight--;
		PL(em_pl_complete(r, ud)); /* power-loss simulator */
		int res = EM_FAULT_RING_RESULT(r, ud, cqe->res); /* fault injection */
		done++;
		cb(ctx, ud, res);
	}
	io_uring_cq_advance(&r->ring, n);
	return done;
}

int em_ring_reap(struct em_ring *r, unsigned min_complete, em_ring_cb cb, void *ctx)
{
	int total = ring_drain_ready(r, cb, ctx);
	while ((unsigned)total < min_complete && r->inflight > 0) {
		struct io_uring_cqe *cqe;
		int rc = io_uring_wait_cqe(&r->ring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			return rc;
		total += ring_drain_ready(r, cb, ctx);
	}
	return total;
}

int em_ring_reap_timeout(struct em_ring *r, unsigned timeout_us, em_ring_cb cb, void *ctx)
{
	int total = ring_drain_ready(r, cb, ctx);
	if (total > 0 || r->inflight == 0)
		return total;
	struct __kernel_timespec ts = {.tv_sec = timeout_us / 1000000,
				       .tv_nsec = (long long)(timeout_us % 1000000) * 1000};
	struct io_uring_cqe *cqe;
	int rc = io_uring_wait_cqe_timeout(&r->ring, &cqe, &ts);
	if (rc < 0 && rc != -ETIME && rc != -EINTR)
		return rc;
	return ring_drain_ready(r, cb, ctx);
}

struct sync_result {
	int res;
	int done;
};

static void sync_cb(void *ctx, uint64_t ud, int res)
{
	(void)ud;
	struct sync_result *sr = ctx;
	sr->res = res;
	sr->done = 1;
}

int em_ring_wait_one(struct em_ring *r, int *res)
{
	struct sync_result sr = {0, 0};
	int rc = em_ring_submit(r);
	while (rc == 0 && !sr.done) {
		rc = em_ring_reap(r, 1, sync_cb, &sr);
		rc = rc < 0 ? rc : 0;
	}
	*res = sr.res;
	return rc;
}

static int sync_wait(struct em_ring *r)
{
	int res;
	int rc = em_ring_wait_one(r, &res);
	return rc < 0 ? rc : res;
}

/* A synchronous read or write, one segment at a time on a segmented file. */
static int io_sync_rw(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off,
		      int write)
{
	uint64_t seg = f->segs ? UINT64_C(1) << f->seg_bits : UINT64_MAX;
	do {
		uint64_t room = f->segs ? seg - (off & (seg - 1)) : len;
		uint32_t piece = room < len ? (uint32_t)room : len;
		int rc = write ? em_ring_write(r, f, buf, piece, off, 0) : em_ring_read(r, f, buf, piece, off, 0);
		if (rc < 0)
			return rc;
		rc = sync_wait(r);
		if (rc < 0)
			return rc;
		if ((uint32_t)rc != piece)
			return -EIO;
		buf = (uint8_t *)buf + piece;
		off += piece;
		len -= piece;
	} while (len);
	return 0;
}

int em_io_pread(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off)
{
	return io_sync_rw(r, f, buf, len, off, 0);
}

int em_io_pwrite(struct em_ring *r, struct em_file *f, const void *buf, uint32_t len,
		 uint64_t off)
{
	return io_sync_rw(r, f, (void *)(uintptr_t)buf, len, off, 1);
}

int em_io_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len)
{
	if (f->segs)
		return io_segs_punch(r, f, off, len);
	int rc = em_ring_punch(r, f, off, len, 0);
	if (rc < 0)
		return rc;
	rc = sync_wait(r);
	return rc < 0 ? rc : 0;
}

int em_io_fsync_from(struct em_ring *r, struct em_file *f, uint64_t from)
{
	if (f->segs)
		return io_segs_fsync(r, f, from >> f->seg_bits);
	return em_io_fsync(r, f);
}

int em_io_fsync(struct em_ring *r, struct em_file *f)
{
	if (f->segs)
		return io_segs_fsync(r, f, 0);
	uint64_t ticket = 0; /* power-loss simulator: what this fsync covers */
	PL(ticket = em_pl_sync_begin(f->fd, 0));
	(void)ticket;
	int rc = em_ring_fsync(r, f, 0);
	if (rc < 0)
		return rc;
	rc = sync_wait(r);
	PL(em_pl_sync_end(f->fd, 0, ticket, rc));
	return rc < 0 ? rc : 0;
}
