/*
 * file_int.h - what the io layer's files share and nothing else includes: the
 * segment table (struct em_segs), the split-request entries of a ring (struct
 * em_split), the power-loss simulator's hook macro, and the calls between
 *   file.c     plain files and paths
 *   segment.c  segmented files (invariants 3, 5, 6, 7)
 *   ring.c     the io_uring ring and the synchronous calls (invariants 1, 2, 4)
 */
#ifndef EMBER_IO_FILE_INT_H
#define EMBER_IO_FILE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "io/file.h"

#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM
#include "io/powerloss.h" /* test builds: every durability event goes through it */
#define PL(x) x
#else
#define PL(x) ((void)0)
#endif

#define SPLIT_BIT (UINT64_C(1) << 63)
#define SEG_BLOCK_BITS 12u /* segments per block of the descriptor table */
#define SEG_BLOCK (1u << SEG_BLOCK_BITS)
#define SPLIT_NONE UINT32_MAX
/* Descriptors of removed segments kept open (invariant 3): a reader that loaded one
 * just before the removal reads the old bytes, not another file's. */
#define SEG_RETIRED 16
/* Spare segment files kept for reuse (invariant 5). */
#define SEG_SPARE 64

struct em_split {
	uint64_t ud;        /* the caller's user_data */
	uint64_t off;       /* the request's logical offset */
	uint32_t len;       /* and length */
	uint32_t seg_bits;
	uint32_t left;      /* parts not completed; 0: the entry is free */
	uint32_t zeroed;    /* bit p: part p read a missing segment, zero-filled (a NOP) */
	uint32_t short_part; /* lowest part that moved less than asked (SPLIT_NONE) */
	int short_res;
	int err;            /* first error */
};

struct em_segs {
	char *path;       /* base path; segment n is "<path>.<n>" */
	char *dir;        /* its directory, for fsync */
	int writable;     /* segments open O_RDWR (created by writes when create) */
	int create;
	uint32_t nblocks; /* table blocks: 2^(EM_SEG_SPACE_BITS - seg_bits) / SEG_BLOCK */
	_Atomic(uintptr_t) *blocks; /* each NULL or SEG_BLOCK _Atomic ints: fd + 1, 0 closed */
	pthread_mutex_t mu;
	_Atomic uint64_t hi_written; /* 1 + the highest segment a write was queued to */
	int dir_dirty;              /* under mu: a segment was created since the last fsync */
	int retired[SEG_RETIRED];   /* under mu: descriptors of removed segments, -1 none */
	uint32_t retired_next;
	uint32_t spare_max;         /* em_file_set_recycle; 0: off (invariant 5) */
	uint32_t nspare;            /* under mu: spare files "<path>.spare.<spare[i]>" */
	uint64_t spare[SEG_SPARE];
	uint64_t spare_seq;         /* under mu: the next spare's number */
	int keep_spares;            /* EM_FILE_KEEP_SPARES (invariant 6) */
	uint32_t seg_bits;
};

/* ---- file.c ----------------------------------------------------------------------- */

/* open(2) for a store file (flags oflags): O_DIRECT where the file system allows it
 * (*direct = 1), else buffered; a FIFO or socket is refused (-ESPIPE). Returns the
 * descriptor or -errno. */
int io_open_store_file(const char *path, int oflags, int *direct);
/* rename(2), or renameat2 with RENAME_NOREPLACE: 0 or -errno. */
int io_path_rename(const char *from, const char *to, int noreplace);
/* The offset and length alignment direct reads of fd (opened with O_DIRECT) need,
 * from statx(STATX_DIOALIGN): its stx_dio_offset_align when that is a power of
 * two in [EM_READ_ALIGN_MIN, EM_IO_ALIGN] and the memory alignment it reports is
 * at most EM_IO_ALIGN; EM_IO_ALIGN when it is not reported or anything is odd. */
uint32_t io_dio_read_align(int fd);

/* ---- segment.c -------------------------------------------------------------------- */

/* path's directory, in a fresh string (em_free(.., 0)); NULL: memory. */
char *io_dir_of(const char *path);
/* Segment n's descriptor, opened (and, writing to a creatable file, created) on
 * first use (invariant 3): >= 0, -ENOENT (a segment never written, or removed), or
 * -errno. */
int io_seg_fd(struct em_file *f, uint64_t n, int write);
/* Close every segment and free the table (em_file_close). */
void io_segs_close(struct em_file *f);
/* Release [off, off + len) of a segmented file: segments wholly inside are removed
 * (or kept as spares), the part of the last one punched. 0 or -errno. */
int io_segs_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len);
/* fsync every segment from lo to the highest written, then the directory when
 * segments were created or removed. 0 or -errno. */
int io_segs_fsync(struct em_ring *r, struct em_file *f, uint64_t lo);

#endif
