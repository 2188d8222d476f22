/*
 * file.h - files and io_uring rings: the only way Ember touches a disk.
 *
 * An em_file is an open file, with O_DIRECT when the filesystem allows it and a
 * buffered fallback otherwise. Every offset, length and buffer address is a
 * multiple of EM_IO_ALIGN whichever it got, so callers never care, except that
 * offset and length of a point read (one record, one chunk) may be multiples of
 * the file's read alignment instead (em_file_read_align, below: what O_DIRECT
 * needs of this file, often 512). An em_ring is one io_uring instance; each user
 * session and each background thread owns its own ring and reaps its own
 * completions, so no ring is ever shared between threads.
 *
 * Threads: an em_file may be used by any number of rings at once. An em_ring
 * belongs to one thread at a time.
 */
#ifndef EMBER_IO_FILE_H
#define EMBER_IO_FILE_H

#include <liburing.h>
#include <stdatomic.h>
#include <stdint.h>

#define EM_IO_ALIGN 4096u

struct em_segs;

/*
 * A segmented file (em_file_open_segmented) is one logical file kept as a series of
 * files of 2^seg_bits bytes: logical byte x lives at offset x mod 2^seg_bits of
 * segment x >> seg_bits, the file "<path>.<n>" (n in decimal, at least 6 digits).
 * Segments are opened on first use and created by their first write. A request
 * may span at most two segments (a request no longer than a segment always does);
 * one that crosses a segment end is split, and its two parts complete as one (one
 * callback: the bytes moved from its start, or the first error). Why: on ext4 an
 * O_DIRECT write that extends a file takes the inode's lock exclusively, waits for
 * every direct I/O of the file in flight and completes synchronously, so reads of
 * the file stall behind each appending write; with segments, only reads of the
 * segment being appended do (docs/format.md 7.3).
 */
struct em_file {
	int fd;            /* one file: its descriptor; segmented: -1 */
	/* opened with O_DIRECT. Segmented: 1 until a segment's open falls back to
	 * buffered I/O (seg_fd, under segs->mu); atomic because one-segment views
	 * read it without that lock. Informational: the I/O paths do not consult it. */
	_Atomic int direct;
	uint32_t seg_bits; /* 0: one file; else log2 of the segment size */
	struct em_segs *segs;
	/* em_file_read_align's value; 0: not known (yet), EM_IO_ALIGN. One file: set
	 * at open. Segmented: set when the first segment opens (under segs->mu);
	 * atomic because readers load it without that lock (segment.c, invariant 7).
	 * A view of one segment's descriptor (segment.c) leaves it 0. */
	_Atomic uint32_t read_align;
};

/* Segment sizes em_file_open_segmented accepts: 2^EM_SEG_MIN_BITS .. 2^EM_SEG_MAX_BITS
 * (the store asks for at least 32 MiB: its largest request, a record, fits in one). */
#define EM_SEG_MIN_BITS 22u
#define EM_SEG_MAX_BITS 40u
/* Logical offsets of a segmented file stay below 2^EM_SEG_SPACE_BITS. */
#define EM_SEG_SPACE_BITS 48u

#define EM_FILE_CREATE 0x1
#define EM_FILE_TRUNCATE 0x2
#define EM_FILE_READONLY 0x4
/* Segmented and writable: take up the spare files an earlier open left (segment.c
 * invariant 6) instead of removing them, and leave them at close. */
#define EM_FILE_KEEP_SPARES 0x8

/* Open path. Returns 0 or -errno. */
int em_file_open(struct em_file *f, const char *path, int flags);

/* The smallest alignment em_file_read_align returns. */
#define EM_READ_ALIGN_MIN 512u

/*
 * The alignment of offset and length for a point read of f (one record, one
 * hash chunk): a power of two in [EM_READ_ALIGN_MIN, EM_IO_ALIGN]. Why: O_DIRECT
 * needs offsets and lengths aligned only to what the file system reports
 * (statx STATX_DIOALIGN's stx_dio_offset_align: on ext4 the device's logical
 * block, often 512 bytes), not to the 4 KiB of EM_IO_ALIGN; a 100-byte record
 * then costs a 512- or 1024-byte read instead of 4 KiB. EM_IO_ALIGN wherever
 * that is not reported or looks odd, and for a buffered file (which needs no
 * alignment at all: one value is simpler). Every segment of a segmented file
 * accepts reads at this alignment (segment.c, invariant 7). Buffer addresses
 * stay EM_IO_ALIGN aligned, and sequential scans and every write keep
 * EM_IO_ALIGN.
 */
static inline uint32_t em_file_read_align(struct em_file *f)
{
	/* relaxed: the value alone; any value a reader sees suits every segment
	 * (segment.c, invariant 7) */
	uint32_t a = atomic_load_explicit(&f->read_align, memory_order_relaxed);
	return a ? a : EM_IO_ALIGN;
}

/* Open the segmented file "<path>.<n>" with segments of 2^seg_bits bytes (see
 * above). EM_FILE_TRUNCATE removes its segments and a plain file at path first;
 * EM_FILE_CREATE lets writes create segments (without it, as with READONLY, a
 * missing segment fails its request with -ENOENT). Returns 0 or -errno (-EINVAL
 * for seg_bits out of range). */
int em_file_open_segmented(struct em_file *f, const char *path, int flags, uint32_t seg_bits);
/* Segmented, opened with EM_FILE_CREATE: keep up to max_spares (at most 64) files
 * of segments removed whole and reuse them as the next segments created (segment.c
 * invariant 5); 0 turns it off. A read through a descriptor loaded before a
 * removal may then see a later segment's bytes: callers check after the read that
 * its range is still theirs. Call before any I/O. */
void em_file_set_recycle(struct em_file *f, uint32_t max_spares);
/* Segmented, recycling: write spare files full of zeros until there are n spares
 * (at most the recycling limit), so that the next n segments created overwrite
 * blocks written before (segment.c invariant 6). Synchronous: n segments' bytes of
 * writes, up to 8 MiB each. Call before any I/O. 0 or -errno (a spare being
 * written when it fails is removed; the spares written before it are kept). */
int em_file_prewrite_spares(struct em_file *f, uint32_t n);
/* Segmented: spare files held now (0 for one file). */
uint32_t em_file_spares(struct em_file *f);
/* Segmented: unlink every segment file wholly below off (a recovered log's begin:
 * they hold nothing live; a crash before the directory's fsync can bring back the
 * ones released before it, which the log's releases, starting at begin, would never
 * visit). Returns how many were removed, or -errno. One file: 0. */
int em_file_remove_below(struct em_file *f, uint64_t off);
/* Segmented: 0 if every segment holding a byte of [off, end) exists, else -ENOENT
 * (or another -errno from opening one). One file: 0. */
int em_file_check_segments(struct em_file *f, uint64_t off, uint64_t end);
/* Remove every segment file "<path>.<n>" and spare "<path>.spare.<k>" (a store
 * that was segmented and is recreated with one file). 0 or -errno. */
int em_file_remove_segments(const char *path);
void em_file_close(struct em_file *f);
/* Current size in bytes, or -errno (-EINVAL for a segmented file). */
int64_t em_file_size(struct em_file *f);
/* Make the entries of directory path (creations, renames, removals) durable: open
 * it and fsync(2) it (io_uring has no use here: one synchronous call). 0 or -errno. */
int em_dir_fsync(const char *path);
/* em_dir_fsync of the directory holding path (its entry durable: after a mkdir). */
int em_dir_fsync_parent(const char *path);

/* Directory changes of store files: unlink(2), rename(2), mkdir(2) (mode 0755) and
 * rmdir(2), returning 0 or -errno. Every change the store makes to its directories
 * goes through these (or through the em_file calls above), so that a test build's
 * power-loss simulator (io/powerloss.h) sees each one. */
int em_path_unlink(const char *path);
int em_path_rename(const char *from, const char *to);
int em_path_mkdir(const char *path);
int em_path_rmdir(const char *path);

struct em_split;

struct em_ring {
	struct io_uring ring;
	uint32_t depth;
	uint32_t inflight; /* submitted and not yet reaped */
	int ready;
	struct em_split *splits; /* depth entries: requests split at a segment end */
};

/* depth: requests in flight at most, 1 .. 16384. 0 or -errno. */
int em_ring_init(struct em_ring *r, uint32_t depth);
void em_ring_exit(struct em_ring *r);

/* Queue a read or write. Returns 0, or -EBUSY when depth requests are in flight
 * (reap first). Nothing reaches the kernel before em_ring_submit(). On a segmented
 * file, a request spanning more than two segments fails with -EINVAL, and opening
 * a segment may fail one (-errno; nothing queued). user_data must be below 2^63
 * (the top bit marks the parts of a split request). */
int em_ring_read(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off,
		 uint64_t user_data);
int em_ring_write(struct em_ring *r, struct em_file *f, const void *buf, uint32_t len,
		  uint64_t off, uint64_t user_data);
/* One file only (-EINVAL for a segmented one: em_io_fsync). */
int em_ring_fsync(struct em_ring *r, struct em_file *f, uint64_t user_data);
/* Release [off, off + len) of the file's space (fallocate punch-hole, size kept).
 * One file only (-EINVAL for a segmented one: em_io_punch). */
int em_ring_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len,
		  uint64_t user_data);
/* Hand queued requests to the kernel. Returns 0 or -errno. */
int em_ring_submit(struct em_ring *r);

typedef void (*em_ring_cb)(void *ctx, uint64_t user_data, int res);
/* Reap completions, waiting until at least min_complete arrived (0: do not wait).
 * Calls cb for each (once per request, however many parts it was split into).
 * Returns how many requests completed, or -errno. */
int em_ring_reap(struct em_ring *r, unsigned min_complete, em_ring_cb cb, void *ctx);
/* Like em_ring_reap with min_complete 1, but gives up after timeout_us. */
int em_ring_reap_timeout(struct em_ring *r, unsigned timeout_us, em_ring_cb cb, void *ctx);

/* Submit what is queued on r and wait for the one request in flight: 0 with *res
 * its result (bytes or -errno), or the ring's error. */
int em_ring_wait_one(struct em_ring *r, int *res);

/* Synchronous helpers for small metadata I/O, through ring r: whole length or
 * an error (-EIO for a short transfer). */
int em_io_pread(struct em_ring *r, struct em_file *f, void *buf, uint32_t len, uint64_t off);
int em_io_pwrite(struct em_ring *r, struct em_file *f, const void *buf, uint32_t len,
		 uint64_t off);
/* Segmented: em_io_fsync fsyncs every segment file there is (and the directory
 * once a segment was created or removed); em_io_fsync_from only the segments from
 * the one holding offset `from` up to the highest written, where `from` is at or
 * below every offset a write may have landed at since the caller's previous fsync
 * of the file began (a write still in flight during an fsync is not covered by it:
 * the next one must cover its segment again). On one file both fsync the file.
 * pread/pwrite go segment by segment; punch expects ranges released bottom-up (each
 * one starting at or above where the previous one ended) and removes every segment
 * file whose end the range reaches. */
int em_io_fsync(struct em_ring *r, struct em_file *f);
int em_io_fsync_from(struct em_ring *r, struct em_file *f, uint64_t from);
int em_io_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len);

#endif
