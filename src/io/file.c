/*
 * file.c - em_file and em_ring (see file.h).
 *
 * Invariants
 *  1. r->inflight counts requests queued or submitted and not yet reaped; it never
 *     exceeds r->depth. A request takes one submission entry, or two when split
 *     (invariant 4), and the ring has 2 x depth of them (the completion queue twice
 *     that), so neither queue can overflow.
 *  2. A completion's res is the kernel's: bytes transferred or -errno. A request
 *     split at segment ends (invariant 3) reports the bytes moved contiguously from
 *     its start (a part that came back short ends the count) or its first error.
 *  3. Segmented files: a segment's descriptor, once published in the table
 *     (fd + 1, release), stays there until em_io_punch removes the segment. The
 *     removal unlinks the file and moves the descriptor to a FIFO of SEG_RETIRED
 *     (closed when pushed out, or at em_file_close): a read that loaded it just
 *     before still reads the old bytes; a read of a removed (or never written)
 *     segment reads zeros, as a punched hole of a one-file log does, and the
 *     store's checks send such a lookup back to the index. Opening, removing and
 *     the fsync range are serialised by segs->mu.
 *     With recycling (invariant 5) a removed segment's file lives on as a
 *     later segment, so a read through a retired descriptor may see that
 *     segment's newer bytes: its caller must check, after the read, that the
 *     address is still live (the store's lookups do: lookup.c, note 2).
 *  4. A request that crosses a segment end is split in two (it may span at most two
 *     segments: -EINVAL otherwise). It holds one entry of r->splits, and counts once
 *     in r->inflight, from its queueing until its second part completes; each part's
 *     user_data is SPLIT_BIT | entry << 16 | part.
 *  5. Recycling (em_file_set_recycle): a segment removed whole is renamed
 *     "<path>.spare.<k>" (at most spare_max of them; more are unlinked) instead of
 *     unlinked, and the next
 *     segment a write creates takes a spare by a rename that never replaces an
 *     existing file (RENAME_NOREPLACE). Its writes then overwrite blocks the file
 *     system has allocated and written before: on ext4 an O_DIRECT write that
 *     extends a file, or fills a hole, allocates and completes synchronously and
 *     holds reads of the file back; an overwrite does neither. A recycled segment
 *     holds stale bytes past what was written to it anew, as a log's file does
 *     past its recovered tail: nothing reads there (the store reads only what it
 *     wrote, and recovery only below the checkpoint's tail). Partial releases are
 *     not punched while recycling, so spares have no holes. Spares are unlinked
 *     at open and close, unless kept (invariant 6).
 *  6. Kept spares (EM_FILE_KEEP_SPARES, em_file_prewrite_spares): a spare's bytes
 *     are never read as such (invariant 5), so any file of a whole segment's size
 *     with every block allocated serves, whatever it holds: zeros written ahead,
 *     or a released segment's records. An open that keeps spares takes up those
 *     an earlier one left (fewer than SEG_SPARE, numbered below spare_seq after
 *     it) and unlinks every other "<path>.spare.*" (wrong size, holes: a crash
 *     while one was written); close leaves them. Recycling trims them to its
 *     limit.
 */
#include "io/file.h"

#include "core/fault.h"
#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM
#include "io/powerloss.h" /* test builds: every durability event goes through it */
#define PL(x) x
#else
#define PL(x) ((void)0)
#endif

#include "core/alloc.h"

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

/*
 * open(2) for a store file: O_DIRECT where the filesystem allows it (*direct = 1),
 * else buffered. O_NONBLOCK while opening: an O_RDONLY open of a FIFO waits for a
 * writer, so a FIFO under a store file's name hung the open; a FIFO or socket is
 * refused (-ESPIPE) and a regular file gets its blocking mode back. Returns the
 * descriptor or -errno.
 */
static int open_store_file(const char *path, int oflags, int *direct)
{
	*direct = 1;
	int plst = 0; /* power-loss simulator: did the file exist? */
	PL(em_pl_open_begin(path, oflags, &plst));
	(void)plst;
	int fd = open(path, oflags | O_DIRECT | O_NONBLOCK, 0644);
	if (fd < 0 && errno == EINVAL) {
		fd = open(path, oflags | O_NONBLOCK, 0644); /* the filesystem refuses O_DIRECT */
		*direct = 0;
	}
	if (fd < 0)
		return -errno;
	PL(em_pl_open_end(path, oflags, plst, fd));
	struct stat sb;
	int rc = fstat(fd, &sb) != 0 ? -errno : 0;
	if (rc == 0 && (S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode)))
		rc = -ESPIPE;
	if (rc == 0) {
		int fl = fcntl(fd, F_GETFL);
		if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
			rc = -errno;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

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
	f->direct = 0; /* seq_cst, though nobody else sees f yet: a plain store would do */
	f->seg_bits = 0;
	f->segs = NULL;
	int direct = 0;
	int fd = open_store_file(path, oflags, &direct); /* buffered where O_DIRECT is refused (tmpfs) */
	if (fd < 0)
		return fd;
	f->direct = direct; /* seq_cst: as above, f is still the opener's alone */
	f->fd = fd;
	return 0;
}

/* ---- segmented files ------------------------------------------------------------ */

static char *seg_name(const struct em_segs *g, uint64_t n)
{
	size_t cap = strlen(g->path) + 24;
	char *p = em_alloc(cap);
	if (p)
		snprintf(p, cap, "%s.%06" PRIu64, g->path, n);
	return p;
}

static char *spare_name(const struct em_segs *g, uint64_t k)
{
	size_t cap = strlen(g->path) + 32;
	char *p = em_alloc(cap);
	if (p)
		snprintf(p, cap, "%s.spare.%06" PRIu64, g->path, k);
	return p;
}

/* Is c a decimal number (one digit at least)? Then *n is its value. */
static int num_parse(const char *c, uint64_t *n)
{
	if (!*c)
		return 0;
	uint64_t v = 0;
	for (; *c; c++) {
		if (*c < '0' || *c > '9' || v > UINT64_MAX / 10 - 1)
			return 0;
		v = v * 10 + (uint64_t)(*c - '0');
	}
	*n = v;
	return 1;
}

/* Is name "<base>.<digits>"? Then *n is the segment number. */
static int seg_parse(const char *name, const char *base, size_t blen, uint64_t *n)
{
	return !strncmp(name, base, blen) && name[blen] == '.' && num_parse(name + blen + 1, n);
}

/* path's directory ("." or "/" where it has none) into a new string, or NULL. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
	char *d = em_alloc(n + 1);
	if (!d)
		return NULL;
	if (!slash)
		d[0] = '.';
	else
		memcpy(d, slash == path ? "/" : path, n);
	d[n] = 0;
	return d;
}

/* Does file name (in directory dfd) hold data, not a hole, at every byte below
 * size? st_blocks alone also counts blocks allocated but never written (fallocate,
 * or a crash before the writes' extents were converted), whose first write would
 * convert them synchronously: the cost a spare is kept to avoid. */
static int no_hole(int dfd, const char *name, uint64_t size)
{
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no wait */
	if (fd < 0)
		return 0;
	off_t h = lseek(fd, 0, SEEK_HOLE);
	close(fd);
	return h >= 0 && (uint64_t)h >= size;
}

static int path_rename(const char *from, const char *to, int noreplace);

/* Unlink name in directory dir (through em_path_unlink). 0 or -errno. */
static int unlink_in(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = em_alloc(n);
	if (!p)
		return -ENOMEM;
	snprintf(p, n, "%s/%s", dir, name);
	int rc = em_path_unlink(p);
	em_free(p, 0);
	return rc;
}

#define RM_SEGS 1   /* remove_files: the segment files "<path>.<n>" */
#define RM_SPARES 2 /* and/or the spares "<path>.spare.*" (invariant 5) */

/* Unlink path's files of the kinds in what (RM_*). With keep (spares only), a
 * spare of a whole segment's size with every block allocated is kept instead and
 * recorded in keep (invariant 6). 0 or -errno. */
static int remove_files(const char *path, int what, struct em_segs *keep)
{
	char *dir = dir_of(path);
	if (!dir)
		return -ENOMEM;
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t blen = strlen(base);
	int rc = 0;
	DIR *d = opendir(dir);
	if (!d) {
		rc = errno == ENOENT ? 0 : -errno;
		goto out;
	}
	struct dirent *e;
	size_t slen = strlen(".spare.");
	while ((e = readdir(d)) != NULL) {
		uint64_t n;
		int spare = !strncmp(e->d_name, base, blen) && !strncmp(e->d_name + blen, ".spare.", slen);
		int match = spare ? (what & RM_SPARES) : (what & RM_SEGS) && seg_parse(e->d_name, base, blen, &n);
		if (!match)
			continue;
		const char *num = e->d_name + blen + slen;
		char canon[24]; /* the name spare_name gives n: the only one a rename finds */
		if (spare && keep && keep->nspare < SEG_SPARE && num_parse(num, &n) && n < UINT64_MAX / 2 &&
		    snprintf(canon, sizeof(canon), "%06" PRIu64, n) > 0 && !strcmp(canon, num)) {
			uint64_t seg = UINT64_C(1) << keep->seg_bits;
			struct stat st;
			if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISREG(st.st_mode) && (uint64_t)st.st_size == seg &&
			    (uint64_t)st.st_blocks * 512 >= seg && no_hole(dirfd(d), e->d_name, seg)) {
				keep->spare[keep->nspare++] = n; /* invariant 6 */
				if (n >= keep->spare_seq)
					keep->spare_seq = n + 1;
				continue;
			}
		}
		int urc = unlink_in(dir, e->d_name);
		if (urc < 0 && urc != -ENOENT && rc == 0)
			rc = urc;
	}
	closedir(d);
out:
	em_free(dir, 0);
	return rc;
}

int em_file_remove_segments(const char *path)
{
	return remove_files(path, RM_SEGS | RM_SPARES, NULL);
}

int em_file_open_segmented(struct em_file *f, const char *path, int flags, uint32_t seg_bits)
{
	f->fd = -1;
	f->direct = 1; /* seq_cst, though nobody else sees f yet: a plain store would do */
	f->seg_bits = 0;
	f->segs = NULL;
	if (!path || seg_bits < EM_SEG_MIN_BITS || seg_bits > EM_SEG_MAX_BITS)
		return -EINVAL;
	int fault = EM_FAULT(EM_FAULT_FILE_OPEN); /* fault injection: fail as open(2) would */
	if (fault)
		return fault;
	int rc = -ENOMEM;
	struct em_segs *g = em_zalloc(sizeof(*g));
	if (!g)
		return -ENOMEM;
	size_t pl = strlen(path);
	g->path = em_alloc(pl + 1);
	g->dir = dir_of(path);
	g->nblocks = (uint32_t)(((UINT64_C(1) << (EM_SEG_SPACE_BITS - seg_bits)) + SEG_BLOCK - 1) /
				SEG_BLOCK);
	g->blocks = em_zalloc(g->nblocks * sizeof(*g->blocks));
	if (!g->path || !g->dir || !g->blocks)
		goto undo;
	memcpy(g->path, path, pl + 1);
	g->writable = !(flags & EM_FILE_READONLY);
	g->create = g->writable && (flags & EM_FILE_CREATE);
	g->keep_spares = g->writable && (flags & EM_FILE_KEEP_SPARES);
	g->seg_bits = seg_bits;
	/* a crash's leftovers, or (invariant 6) the spares an earlier open kept */
	if (g->writable && (rc = remove_files(path, RM_SPARES, g->keep_spares ? g : NULL)) < 0)
		goto undo;
	if (flags & EM_FILE_TRUNCATE) {
		if (!g->writable) {
			rc = -EINVAL;
			goto undo;
		}
		rc = remove_files(path, RM_SEGS, NULL);
		if (rc == 0 && (rc = em_path_unlink(path)) == -ENOENT)
			rc = 0;
		if (rc < 0)
			goto undo;
		g->dir_dirty = 1;
	}
	for (int i = 0; i < SEG_RETIRED; i++)
		g->retired[i] = -1;
	pthread_mutex_init(&g->mu, NULL);
	f->seg_bits = seg_bits;
	f->segs = g;
	return 0;
undo:
	em_free(g->blocks, 0);
	em_free(g->dir, 0);
	em_free(g->path, 0);
	em_free(g, sizeof(*g));
	return rc;
}

/* Unlink spares beyond spare_max (under mu, or while the file is its opener's
 * alone). */
static void trim_spares(struct em_segs *g)
{
	while (g->nspare > g->spare_max) { /* spares kept beyond the limit (invariant 6) */
		char *sp = spare_name(g, g->spare[--g->nspare]);
		if (sp)
			(void)em_path_unlink(sp); /* one left behind goes at the next open */
		em_free(sp, 0);
	}
}

void em_file_set_recycle(struct em_file *f, uint32_t max_spares)
{
	struct em_segs *g = f->segs;
	if (!g || !g->create)
		return;
	g->spare_max = max_spares < SEG_SPARE ? max_spares : SEG_SPARE;
	trim_spares(g);
}

uint32_t em_file_spares(struct em_file *f)
{
	if (!f->segs)
		return 0;
	pthread_mutex_lock(&f->segs->mu);
	uint32_t n = f->segs->nspare;
	pthread_mutex_unlock(&f->segs->mu);
	return n;
}

#define PREWRITE_CHUNK (UINT32_C(8) << 20) /* bytes of zeros per write */

int em_file_prewrite_spares(struct em_file *f, uint32_t n)
{
	struct em_segs *g = f->segs;
	if (!g || !g->create)
		return -EINVAL;
	uint64_t seg = UINT64_C(1) << f->seg_bits;
	if (n > g->spare_max)
		n = g->spare_max;
	if (g->nspare >= n)
		return 0;
	struct em_ring r;
	int rc = em_ring_init(&r, 1);
	if (rc < 0)
		return rc;
	uint32_t chunk = seg < PREWRITE_CHUNK ? (uint32_t)seg : PREWRITE_CHUNK;
	void *zero = em_alloc_io(chunk);
	if (!zero) {
		rc = -ENOMEM;
		goto out;
	}
	memset(zero, 0, chunk);
	pthread_mutex_lock(&g->mu); /* no other user yet: held for the spare list */
	while (g->nspare < n && rc == 0) {
		char *sp = spare_name(g, g->spare_seq);
		if (!sp) {
			rc = -ENOMEM;
			break;
		}
		int oflags = O_CLOEXEC | O_RDWR | O_CREAT | O_EXCL, direct = 1;
		int fd = open_store_file(sp, oflags, &direct);
		if (fd < 0) {
			rc = fd;
		} else {
			struct em_file one = {fd, direct, 0, NULL};
			for (uint64_t off = 0; off < seg && rc == 0; off += chunk)
				rc = em_io_pwrite(&r, &one, zero, chunk, off);
			close(fd);
			if (rc < 0)
				(void)em_path_unlink(sp); /* half written: not a spare */
			else
				g->spare[g->nspare++] = g->spare_seq;
			g->dir_dirty = 1;
		}
		g->spare_seq++;
		em_free(sp, 0);
	}
	pthread_mutex_unlock(&g->mu);
out:
	em_ring_exit(&r);
	em_free(zero, chunk); /* after the ring: no write of it is left */
	return rc;
}

/* Segment n's table cell (allocating its block when alloc), or NULL. */
static _Atomic int *seg_cell(struct em_segs *g, uint64_t n, int alloc)
{
	uint64_t b = n >> SEG_BLOCK_BITS;
	if (b >= g->nblocks)
		return NULL;
	/* acquire: a block published by another thread is seen zeroed */
	_Atomic int *blk = (_Atomic int *)atomic_load_explicit(&g->blocks[b], memory_order_acquire);
	if (!blk && alloc) {
		blk = em_zalloc(SEG_BLOCK * sizeof(_Atomic int));
		if (!blk)
			return NULL;
		/* release: the zeroed block before its pointer (only under mu: no race) */
		atomic_store_explicit(&g->blocks[b], (uintptr_t)blk, memory_order_release);
	}
	return blk ? &blk[n & (SEG_BLOCK - 1)] : NULL;
}

/* Segment n's descriptor, opening it (and creating it for a write) on first use:
 * >= 0, or -errno. */
static int seg_fd(struct em_file *f, uint64_t n, int write)
{
	struct em_segs *g = f->segs;
	if (n >= (uint64_t)g->nblocks << SEG_BLOCK_BITS)
		return -EFBIG;
	if (write && !g->writable)
		return -EBADF;
	_Atomic int *cell = seg_cell(g, n, 0);
	/* acquire: pairs with the release that published the descriptor */
	int v = cell ? atomic_load_explicit(cell, memory_order_acquire) : 0;
	if (v > 0)
		return v - 1;
	pthread_mutex_lock(&g->mu);
	int rc;
	cell = seg_cell(g, n, 1);
	if (!cell) {
		rc = -ENOMEM;
		goto out;
	}
	/* relaxed: under mu, which every store of a cell holds */
	v = atomic_load_explicit(cell, memory_order_relaxed);
	if (v > 0) {
		rc = v - 1;
		goto out;
	}
	char *name = seg_name(g, n);
	if (!name) {
		rc = -ENOMEM;
		goto out;
	}
	int oflags = O_CLOEXEC | (g->writable ? O_RDWR : O_RDONLY) |
		     (write && g->create ? O_CREAT : 0);
	if ((oflags & O_CREAT) && g->nspare) {
		/* a spare becomes segment n, unless n's file exists (invariant 5) */
		char *sp = spare_name(g, g->spare[g->nspare - 1]);
		int rrc = sp ? path_rename(sp, name, 1) : -ENOMEM;
		if (rrc == 0) {
			g->nspare--;
			g->dir_dirty = 1;
		} else if (rrc == -ENOENT) {
			g->nspare--; /* gone from under us: forget it */
		} else if (rrc == -EINVAL || rrc == -ENOSYS) {
			/* no RENAME_NOREPLACE here: recycling cannot work, and every
			 * segment would try again; the spares would only hold disk */
			g->spare_max = 0;
			trim_spares(g);
		}
		em_free(sp, 0);
	}
	int direct = 1;
	int fd = open_store_file(name, oflags, &direct);
	if (fd >= 0 && !direct) /* the filesystem refuses O_DIRECT */
		/* relaxed: a flag alone, read by segs_punch/segs_fsync without mu */
		atomic_store_explicit(&f->direct, 0, memory_order_relaxed);
	rc = fd;
	em_free(name, 0);
	if (fd >= 0) {
		if (oflags & O_CREAT)
			g->dir_dirty = 1;
		/* release: the open descriptor before readers use it (invariant 3) */
		atomic_store_explicit(cell, fd + 1, memory_order_release);
	}
out:
	pthread_mutex_unlock(&g->mu);
	return rc;
}

/* Under mu: segment n leaves the table; its descriptor, if open, joins the FIFO of
 * retired ones (invariant 3), closing the oldest there. */
static void retire_fd(struct em_segs *g, uint64_t n)
{
	_Atomic int *cell = seg_cell(g, n, 0);
	/* relaxed: under mu; no request uses a released segment (invariant 3) */
	int v = cell ? atomic_exchange_explicit(cell, 0, memory_order_relaxed) : 0;
	if (v > 0) {
		int *slot = &g->retired[g->retired_next++ % SEG_RETIRED];
		if (*slot >= 0)
			close(*slot);
		*slot = v - 1;
	}
}

int em_file_remove_below(struct em_file *f, uint64_t off)
{
	struct em_segs *g = f->segs;
	if (!g)
		return 0;
	if (!g->writable)
		return -EBADF;
	uint64_t lim = off >> f->seg_bits;
	const char *slash = strrchr(g->path, '/');
	const char *base = slash ? slash + 1 : g->path;
	size_t blen = strlen(base);
	DIR *d = opendir(g->dir);
	if (!d)
		return -errno;
	int rc = 0, removed = 0;
	pthread_mutex_lock(&g->mu);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		uint64_t n;
		if (!seg_parse(e->d_name, base, blen, &n) || n >= lim)
			continue;
		retire_fd(g, n);
		int urc = unlink_in(g->dir, e->d_name);
		if (urc == 0) {
			removed++;
			g->dir_dirty = 1; /* the next fsync makes the removal durable */
		} else if (urc != -ENOENT && rc == 0) {
			rc = urc;
		}
	}
	pthread_mutex_unlock(&g->mu);
	closedir(d);
	return rc < 0 ? rc : removed;
}

int em_file_check_segments(struct em_file *f, uint64_t off, uint64_t end)
{
	if (!f->segs || end <= off)
		return 0;
	for (uint64_t n = off >> f->seg_bits; n <= (end - 1) >> f->seg_bits; n++) {
		int fd = seg_fd(f, n, 0);
		if (fd < 0)
			return fd;
	}
	return 0;
}

static void segs_close(struct em_file *f)
{
	struct em_segs *g = f->segs;
	for (uint32_t b = 0; b < g->nblocks; b++) {
		/* relaxed: closing, no other user is left */
		_Atomic int *blk = (_Atomic int *)atomic_load_explicit(&g->blocks[b], memory_order_relaxed);
		if (!blk)
			continue;
		for (uint32_t i = 0; i < SEG_BLOCK; i++) {
			int v = atomic_load_explicit(&blk[i], memory_order_relaxed); /* as above */
			if (v > 0)
				close(v - 1);
		}
		em_free(blk, SEG_BLOCK * sizeof(_Atomic int));
	}
	for (int i = 0; i < SEG_RETIRED; i++)
		if (g->retired[i] >= 0)
			close(g->retired[i]);
	for (uint32_t i = 0; i < g->nspare && !g->keep_spares; i++) {
		char *sp = spare_name(g, g->spare[i]);
		if (sp)
			(void)em_path_unlink(sp); /* space back to the file system; a leftover goes at open */
		em_free(sp, 0);
	}
	pthread_mutex_destroy(&g->mu);
	em_free(g->blocks, 0);
	em_free(g->dir, 0);
	em_free(g->path, 0);
	em_free(g, sizeof(*g));
	f->segs = NULL;
	f->seg_bits = 0;
}

void em_file_close(struct em_file *f)
{
	if (f->segs)
		segs_close(f);
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

int em_dir_fsync(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint64_t ticket = 0; /* power-loss simulator: what this fsync covers */
	PL(ticket = em_pl_sync_begin(fd, 1));
	int rc = fsync(fd) == 0 ? 0 : -errno;
	PL(em_pl_sync_end(fd, 1, ticket, rc));
	(void)ticket;
	close(fd);
	return rc;
}

int em_dir_fsync_parent(const char *path)
{
	char *d = dir_of(path);
	if (!d)
		return -ENOMEM;
	int rc = em_dir_fsync(d);
	em_free(d, 0);
	return rc;
}

/* rename(2), or renameat2 with RENAME_NOREPLACE: 0 or -errno. */
static int path_rename(const char *from, const char *to, int noreplace)
{
#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM
	if (em_pl_armed())
		return em_pl_rename(from, to, noreplace);
#endif
	int rc = noreplace ? renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE)
			   : rename(from, to);
	return rc == 0 ? 0 : -errno;
}

int em_path_rename(const char *from, const char *to)
{
	return path_rename(from, to, 0);
}

int em_path_unlink(const char *path)
{
#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM
	if (em_pl_armed())
		return em_pl_unlink(path);
#endif
	return unlink(path) == 0 ? 0 : -errno;
}

int em_path_mkdir(const char *path)
{
#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM
	if (em_pl_armed())
		return em_pl_mkdir(path, 0755);
#endif
	return mkdir(path, 0755) == 0 ? 0 : -errno;
}

int em_path_rmdir(const char *path)
{
#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM
	if (em_pl_armed())
		return em_pl_rmdir(path);
#endif
	return rmdir(path) == 0 ? 0 : -errno;
}

int64_t em_file_size(struct em_file *f)
{
	if (f->segs)
		return -EINVAL;
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
		int fd = fds[n - n0] = seg_fd(f, n, write);
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

/* Segmented punch. Ranges are released bottom-up (each starts where the last one
 * ended, as a log's begin moves), so a segment whose end the range reaches holds
 * nothing live: it is removed; the range's part of the segment where it ends is
 * punched (a segment never created has nothing to release). */
static int segs_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len)
{
	struct em_segs *g = f->segs;
	uint64_t seg = UINT64_C(1) << f->seg_bits, end = off + len;
	int rc = 0;
	for (uint64_t a = off; a < end && rc == 0;) {
		uint64_t n = a >> f->seg_bits, s0 = n << f->seg_bits, s1 = s0 + seg;
		uint64_t b = end < s1 ? end : s1;
		if (b == s1) {
			pthread_mutex_lock(&g->mu);
			retire_fd(g, n);
			char *name = seg_name(g, n);
			char *sp = g->nspare < g->spare_max ? spare_name(g, g->spare_seq) : NULL;
			if (!name) {
				rc = -ENOMEM;
			} else if (sp && em_path_rename(name, sp) == 0) {
				g->spare[g->nspare++] = g->spare_seq++; /* invariant 5 */
				g->dir_dirty = 1;
			} else if ((rc = em_path_unlink(name)) == 0) {
				g->dir_dirty = 1; /* the next fsync makes the removal durable */
			} else if (rc == -ENOENT) {
				rc = 0;
			}
			em_free(sp, 0);
			em_free(name, 0);
			pthread_mutex_unlock(&g->mu);
		} else if (!g->spare_max) { /* a recycled file keeps its blocks (invariant 5) */
			int fd = seg_fd(f, n, 0);
			if (fd >= 0) {
				/* relaxed: the flag alone (seg_fd may clear it under mu) */
				int d = atomic_load_explicit(&f->direct, memory_order_relaxed);
				struct em_file one = {fd, d, 0, NULL};
				rc = em_io_punch(r, &one, a - s0, b - a);
			} else if (fd != -ENOENT) {
				rc = fd;
			}
		}
		a = b;
	}
	return rc;
}

int em_io_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len)
{
	if (f->segs)
		return segs_punch(r, f, off, len);
	int rc = em_ring_punch(r, f, off, len, 0);
	if (rc < 0)
		return rc;
	rc = sync_wait(r);
	return rc < 0 ? rc : 0;
}

/* Segmented fsync: every segment from `lo` to the highest written that exists,
 * then the directory if segments were created or removed. The caller says where to
 * start (em_io_fsync_from): starting where the previous call ended (its newest
 * segment) would miss a write still in flight to an older segment during that call. */
static int segs_fsync(struct em_ring *r, struct em_file *f, uint64_t lo)
{
	struct em_segs *g = f->segs;
	pthread_mutex_lock(&g->mu);
	/* acquire: pairs with seg_rw's release (every segment written is counted) */
	uint64_t hi = atomic_load_explicit(&g->hi_written, memory_order_acquire);
	int rc = 0;
	for (uint64_t n = lo; n < hi && rc == 0; n++) {
		_Atomic int *cell = seg_cell(g, n, 0);
		/* relaxed: under mu, which every store of a cell holds */
		int v = cell ? atomic_load_explicit(cell, memory_order_relaxed) : 0;
		if (v <= 0)
			continue; /* removed, or never written */
		/* relaxed: the flag alone; seg_fd clears it under mu, held here */
		int d = atomic_load_explicit(&f->direct, memory_order_relaxed);
		struct em_file one = {v - 1, d, 0, NULL};
		rc = em_io_fsync(r, &one);
	}
	if (rc == 0 && g->dir_dirty) {
		rc = em_dir_fsync(g->dir);
		if (rc == 0)
			g->dir_dirty = 0;
	}
	pthread_mutex_unlock(&g->mu);
	return rc;
}

int em_io_fsync_from(struct em_ring *r, struct em_file *f, uint64_t from)
{
	if (f->segs)
		return segs_fsync(r, f, from >> f->seg_bits);
	return em_io_fsync(r, f);
}

int em_io_fsync(struct em_ring *r, struct em_file *f)
{
	if (f->segs)
		return segs_fsync(r, f, 0);
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
