/*
 * file.h - files and io_uring rings: the only way Ember touches a disk.
 *
 * An em_file is an open file, with O_DIRECT when the filesystem allows it (then
 * every offset, length and buffer address must be a multiple of EM_IO_ALIGN) and
 * a buffered fallback otherwise (the same alignment is still used, so callers
 * never care which one they got). An em_ring is one io_uring instance; each user
 * session and each background thread owns its own ring and reaps its own
 * completions, so no ring is ever shared between threads.
 *
 * Threads: an em_file may be used by any number of rings at once. An em_ring
 * belongs to one thread at a time.
 */
#ifndef EMBER_IO_FILE_H
#define EMBER_IO_FILE_H

#include <liburing.h>
#include <stdint.h>

#define EM_IO_ALIGN 4096u

struct em_file {
	int fd;
	int direct; /* opened with O_DIRECT */
};

#define EM_FILE_CREATE 0x1
#define EM_FILE_TRUNCATE 0x2
#define EM_FILE_READONLY 0x4

/* Open path. Returns 0 or -errno. */
int em_file_open(struct em_file *f, const char *path, int flags);
void em_file_close(struct em_file *f);
/* Current size in bytes, or -errno. */
int64_t em_file_size(struct em_file *f);
/* Make the entries of directory path (creations, renames, removals) durable: open
 * it and fsync(2) it (io_uring has no use here: one synchronous call). 0 or -errno. */
int em_dir_fsync(const char *path);

struct em_ring {
	struct io_uring ring;
	uint32_t depth;
	uint32_t inflight; /* submitted and not yet reaped */
	int ready;
};

int em_ring_init(struct em_ring *r, uint32_t depth);
void em_ring_exit(struct em_ring *r);

/* Queue a read or write. Returns 0, or -EBUSY when depth requests are in flight
 * (reap first). Nothing reaches the kernel before em_ring_submit(). */
int em_ring_read(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off,
		 uint64_t user_data);
int em_ring_write(struct em_ring *r, struct em_file *f, const void *buf, uint32_t len,
		  uint64_t off, uint64_t user_data);
int em_ring_fsync(struct em_ring *r, struct em_file *f, uint64_t user_data);
/* Release [off, off + len) of the file's space (fallocate punch-hole, size kept). */
int em_ring_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len,
		  uint64_t user_data);
/* Hand queued requests to the kernel. Returns 0 or -errno. */
int em_ring_submit(struct em_ring *r);

typedef void (*em_ring_cb)(void *ctx, uint64_t user_data, int res);
/* Reap completions, waiting until at least min_complete arrived (0: do not wait).
 * Calls cb for each. Returns how many were reaped, or -errno. */
int em_ring_reap(struct em_ring *r, unsigned min_complete, em_ring_cb cb, void *ctx);
/* Like em_ring_reap with min_complete 1, but gives up after timeout_us. */
int em_ring_reap_timeout(struct em_ring *r, unsigned timeout_us, em_ring_cb cb, void *ctx);

/* Synchronous helpers for small metadata I/O, through ring r: whole length or
 * an error (-EIO for a short transfer). */
int em_io_pread(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off);
int em_io_pwrite(struct em_ring *r, struct em_file *f, const void *buf, uint32_t len,
		 uint64_t off);
int em_io_fsync(struct em_ring *r, struct em_file *f);
int em_io_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len);

#endif
