/*
 * file.c - em_file and em_ring (see file.h).
 *
 * Invariants
 *  1. r->inflight counts requests queued or submitted and not yet reaped; it never
 *     exceeds r->depth, so the completion queue (twice the submission queue) can
 *     never overflow.
 *  2. A completion's res is the kernel's: bytes transferred or -errno.
 */
#include "io/file.h"

#include "core/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int em_file_open(struct em_file *f, const char *path, int flags)
{
	int fault = EM_FAULT(EM_FAULT_FILE_OPEN); /* fault injection: fail as open(2) would */
	if (fault)
		return fault;
	int oflags = O_CLOEXEC;
	oflags |= (flags & EM_FILE_READONLY) ? O_RDONLY : O_RDWR;
	if (flags & EM_FILE_CREATE)
		oflags |= O_CREAT;
	if (flags & EM_FILE_TRUNCATE)
		oflags |= O_TRUNC;
	f->fd = -1;
	f->direct = 0;
	int fd = open(path, oflags | O_DIRECT, 0644);
	if (fd >= 0) {
		f->direct = 1;
	} else if (errno == EINVAL) {
		/* the filesystem refuses O_DIRECT (tmpfs): fall back to buffered I/O */
		fd = open(path, oflags, 0644);
	}
	if (fd < 0)
		return -errno;
	f->fd = fd;
	return 0;
}

void em_file_close(struct em_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

int em_dir_fsync(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) == 0 ? 0 : -errno;
	close(fd);
	return rc;
}

int64_t em_file_size(struct em_file *f)
{
	struct stat st;
	if (fstat(f->fd, &st) != 0)
		return -errno;
	return st.st_size;
}

int em_ring_init(struct em_ring *r, uint32_t depth)
{
	memset(r, 0, sizeof(*r));
	int fault = EM_FAULT(EM_FAULT_RING_INIT); /* fault injection: fail as setup would */
	if (fault)
		return fault;
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	int rc = io_uring_queue_init_params(depth, &r->ring, &p);
	if (rc < 0)
		return rc;
	r->depth = depth;
	r->ready = 1;
	return 0;
}

void em_ring_exit(struct em_ring *r)
{
	if (!r->ready)
		return;
	EM_FAULT_RING_FORGET(r); /* fault injection: drop injected completions */
	io_uring_queue_exit(&r->ring);
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

int em_ring_read(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off,
		 uint64_t user_data)
{
	RING_FAULT(r, EM_FAULT_IO_READ, user_data);
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
	struct io_uring_sqe *sqe = ring_sqe(r);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_write(sqe, f->fd, buf, len, off);
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

int em_ring_fsync(struct em_ring *r, struct em_file *f, uint64_t user_data)
{
	RING_FAULT(r, EM_FAULT_IO_FSYNC, user_data);
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
	struct io_uring_sqe *sqe = ring_sqe(r);
	if (!sqe)
		return -EBUSY;
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
	io_uring_for_each_cqe(&r->ring, head, cqe)
	{
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		int res = EM_FAULT_RING_RESULT(r, ud, cqe->res); /* fault injection */
		n++;
		r->inflight--;
		cb(ctx, ud, res);
	}
	io_uring_cq_advance(&r->ring, n);
	return (int)n;
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

static int sync_wait(struct em_ring *r)
{
	struct sync_result sr = {0, 0};
	int rc = em_ring_submit(r);
	if (rc < 0)
		return rc;
	while (!sr.done) {
		rc = em_ring_reap(r, 1, sync_cb, &sr);
		if (rc < 0)
			return rc;
	}
	return sr.res;
}

int em_io_pread(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off)
{
	int rc = em_ring_read(r, f, buf, len, off, 0);
	if (rc < 0)
		return rc;
	rc = sync_wait(r);
	if (rc < 0)
		return rc;
	return (uint32_t)rc == len ? 0 : -EIO;
}

int em_io_pwrite(struct em_ring *r, struct em_file *f, const void *buf, uint32_t len,
		 uint64_t off)
{
	int rc = em_ring_write(r, f, buf, len, off, 0);
	if (rc < 0)
		return rc;
	rc = sync_wait(r);
	if (rc < 0)
		return rc;
	return (uint32_t)rc == len ? 0 : -EIO;
}

int em_io_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len)
{
	int rc = em_ring_punch(r, f, off, len, 0);
	if (rc < 0)
		return rc;
	rc = sync_wait(r);
	return rc < 0 ? rc : 0;
}

int em_io_fsync(struct em_ring *r, struct em_file *f)
{
	int rc = em_ring_fsync(r, f, 0);
	if (rc < 0)
		return rc;
	rc = sync_wait(r);
	return rc < 0 ? rc : 0;
}
