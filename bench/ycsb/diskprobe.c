/*
 * diskprobe.c - the disk random-read probe of ember-ycsb (see diskprobe.h).
 */
#include "diskprobe.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen.h"
#include "stats.h"

#define FILL_CHUNK (1u << 20)

void ycsb_probe_close(ycsb_probe *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
}

/* Write file_bytes of data, every 4 KiB block distinct (a storage layer that
 * deduplicates or compresses must not turn the probe into a cache test). */
static int probe_fill(int fd, uint64_t file_bytes)
{
	unsigned char *buf = NULL;
	ycsb_rng rng;
	int rc = 0;

	if (posix_memalign((void **)&buf, YCSB_PROBE_BLOCK, FILL_CHUNK) != 0)
		return -ENOMEM;
	ycsb_rng_seed(&rng, 0x70be);
	for (size_t i = 0; i < FILL_CHUNK; i += 8) {
		uint64_t x = ycsb_rng_next(&rng);

		memcpy(buf + i, &x, 8);
	}
	for (uint64_t off = 0; off < file_bytes && rc == 0; off += FILL_CHUNK) {
		for (size_t b = 0; b < FILL_CHUNK; b += YCSB_PROBE_BLOCK) {
			uint64_t tag = off + b;

			memcpy(buf + b, &tag, 8);
		}
		for (size_t done = 0; done < FILL_CHUNK;) {
			ssize_t n = pwrite(fd, buf + done, FILL_CHUNK - done, (off_t)(off + done));

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				rc = n < 0 ? -errno : -EIO;
				break;
			}
			done += (size_t)n;
		}
	}
	if (rc == 0 && fdatasync(fd) != 0)
		rc = -errno;
	free(buf);
	return rc;
}

int ycsb_probe_open(ycsb_probe *p, const char *dir, uint64_t file_bytes)
{
	char path[1200];
	int rc;

	p->fd = -1;
	p->file_bytes = file_bytes / FILL_CHUNK * FILL_CHUNK;
	if (p->file_bytes == 0)
		p->file_bytes = FILL_CHUNK;
	snprintf(p->dir, sizeof(p->dir), "%s", dir);
	if (snprintf(path, sizeof(path), "%s/disk-probe.%ld", dir, (long)getpid()) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	p->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
	if (p->fd < 0) {
		rc = -errno;
		if (rc == -EINVAL) /* O_DIRECT refused: the probe would measure RAM */
			unlink(path);
		return rc;
	}
	unlink(path); /* gone when closed, even if we crash */
	rc = probe_fill(p->fd, p->file_bytes);
	if (rc < 0)
		ycsb_probe_close(p);
	return rc;
}

typedef struct probe_slot {
	unsigned char *buf;
	uint64_t t_submit;
} probe_slot;

static void probe_queue(struct io_uring *ring, const ycsb_probe *p, probe_slot *s,
			unsigned idx, ycsb_rng *rng)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring); /* never NULL: depth slots */
	uint64_t off = ycsb_rng_below(rng, p->file_bytes / YCSB_PROBE_BLOCK) * YCSB_PROBE_BLOCK;

	io_uring_prep_read(sqe, p->fd, s[idx].buf, YCSB_PROBE_BLOCK, off);
	io_uring_sqe_set_data64(sqe, idx);
	s[idx].t_submit = ycsb_now_ns();
}

int ycsb_probe_run(ycsb_probe *p, unsigned depth, double seconds, uint64_t seed,
		   ycsb_probe_result *out)
{
	struct io_uring ring;
	probe_slot *slots = calloc(depth, sizeof(*slots));
	ycsb_hist *hist = calloc(1, sizeof(*hist));
	unsigned char *mem = NULL;
	uint64_t t0, t_end, deadline, reads = 0;
	unsigned inflight = 0;
	ycsb_rng rng;
	int rc;

	memset(out, 0, sizeof(*out));
	if (slots == NULL || hist == NULL ||
	    posix_memalign((void **)&mem, YCSB_PROBE_BLOCK, (size_t)depth * YCSB_PROBE_BLOCK)) {
		rc = -ENOMEM;
		goto undo_alloc;
	}
	rc = io_uring_queue_init(depth, &ring, 0);
	if (rc < 0)
		goto undo_alloc;
	ycsb_rng_seed(&rng, seed);
	for (unsigned i = 0; i < depth; i++) {
		slots[i].buf = mem + (size_t)i * YCSB_PROBE_BLOCK;
		probe_queue(&ring, p, slots, i, &rng);
	}
	t0 = ycsb_now_ns();
	deadline = t0 + (uint64_t)(seconds * 1e9);
	inflight = depth;
	rc = io_uring_submit(&ring);
	while (rc >= 0 && inflight > 0) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0, again = 0;
		uint64_t now;

		rc = io_uring_wait_cqe(&ring, &cqe);
		if (rc == -EINTR) {
			rc = 0;
			continue;
		}
		if (rc < 0)
			break;
		now = ycsb_now_ns();
		io_uring_for_each_cqe(&ring, head, cqe) {
			unsigned idx = (unsigned)io_uring_cqe_get_data64(cqe);

			n++;
			inflight--;
			if (cqe->res != (int)YCSB_PROBE_BLOCK) {
				rc = cqe->res < 0 ? cqe->res : -EIO;
				continue;
			}
			reads++;
			ycsb_hist_add(hist, now - slots[idx].t_submit);
			if (now < deadline && rc >= 0) {
				probe_queue(&ring, p, slots, idx, &rng);
				inflight++;
				again++;
			}
		}
		io_uring_cq_advance(&ring, n);
		if (again > 0 && rc >= 0) {
			int src = io_uring_submit(&ring);

			if (src < 0)
				rc = src;
		}
	}
	t_end = ycsb_now_ns();
	/* On an error, wait for what is still in flight before the buffers go. */
	while (inflight > 0) {
		struct io_uring_cqe *cqe;

		if (io_uring_wait_cqe(&ring, &cqe) < 0)
			break;
		io_uring_cqe_seen(&ring, cqe);
		inflight--;
	}
	io_uring_queue_exit(&ring);
	if (rc >= 0) {
		rc = 0;
		out->reads = reads;
		out->depth = depth;
		out->seconds = (double)(t_end - t0) / 1e9;
		out->reads_per_s = out->seconds > 0 ? (double)reads / out->seconds : 0;
		out->p50_us = (double)ycsb_hist_quantile(hist, 0.50) / 1e3;
		out->p99_us = (double)ycsb_hist_quantile(hist, 0.99) / 1e3;
	}
undo_alloc:
	free(mem);
	free(hist);
	free(slots);
	return rc;
}
