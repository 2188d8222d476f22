/*
 * segment.c - segmented files (em_file_open_segmented, file.h): a log's file as
 * numbered segment files "<path>.<n>", the table of their descriptors, removing
 * whole segments as a log's begin moves, and recycling removed segments' files as
 * spares. Requests over segments go through the ring (ring.c, invariant 4).
 *
 * Invariants (numbered with ring.c's: 1, 2 and 4 are there)
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
 *  7. Read alignment (em_file_read_align): 0 (read as EM_IO_ALIGN) until the
 *     first segment opens; that open sets it to the segment's own (io_seg_fd,
 *     seg_read_align), and it never changes after. Every segment opened later
 *     accepts reads at that alignment: one whose direct reads would need more
 *     is switched to buffered I/O before its descriptor is published. So a
 *     reader that loaded any value, 0 included, may read any segment with it,
 *     whether the segment is open yet or not.
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
char *io_dir_of(const char *path)
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
	char *dir = io_dir_of(path);
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
	/* relaxed: f is still the opener's alone; the first segment sets it (invariant 7) */
	atomic_store_explicit(&f->read_align, 0, memory_order_relaxed);
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
	g->dir = io_dir_of(path);
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
		int fd = io_open_store_file(sp, oflags, &direct);
		if (fd < 0) {
			rc = fd;
		} else {
			struct em_file one = {.fd = fd, .direct = direct};
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

/*
 * Invariant 7 for segment descriptor fd, just opened (under mu, not yet
 * published): the first segment opened sets the file's read alignment (its
 * direct-read alignment; EM_IO_ALIGN when buffered); a later one whose direct
 * reads need more (a file system that differs per file: never seen in one
 * directory, but nothing promises it) loses O_DIRECT (*direct = 0), since
 * buffered reads need no alignment. 0, or -1 with errno (fcntl failed).
 */
static int seg_read_align(struct em_file *f, int fd, int *direct)
{
	uint32_t need = *direct ? io_dio_read_align(fd) : EM_IO_ALIGN;
	/* relaxed: stored only under mu, which the caller holds */
	uint32_t have = atomic_load_explicit(&f->read_align, memory_order_relaxed);
	if (!have) {
		/* relaxed: the value alone; no segment was open before it (invariant 7) */
		atomic_store_explicit(&f->read_align, need, memory_order_relaxed);
		return 0;
	}
	if (!*direct || need <= have)
		return 0;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0)
		return -1;
	*direct = 0;
	return 0;
}

/* Segment n's descriptor, opening it (and creating it for a write) on first use:
 * >= 0, or -errno. */
int io_seg_fd(struct em_file *f, uint64_t n, int write)
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
		int rrc = sp ? io_path_rename(sp, name, 1) : -ENOMEM;
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
	int fd = io_open_store_file(name, oflags, &direct);
	if (fd >= 0 && seg_read_align(f, fd, &direct) < 0) {
		rc = -errno;
		close(fd);
		fd = rc;
	}
	if (fd >= 0 && !direct) /* the filesystem refuses O_DIRECT, or invariant 7 */
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
		int fd = io_seg_fd(f, n, 0);
		if (fd < 0)
			return fd;
	}
	return 0;
}

void io_segs_close(struct em_file *f)
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

/* Segmented punch. Ranges are released bottom-up (each starts where the last one
 * ended, as a log's begin moves), so a segment whose end the range reaches holds
 * nothing live: it is removed; the range's part of the segment where it ends is
 * punched (a segment never created has nothing to release). */
int io_segs_punch(struct em_ring *r, struct em_file *f, uint64_t off, uint64_t len)
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
			int fd = io_seg_fd(f, n, 0);
			if (fd >= 0) {
				/* relaxed: the flag alone (seg_fd may clear it under mu) */
				int d = atomic_load_explicit(&f->direct, memory_order_relaxed);
				struct em_file one = {.fd = fd, .direct = d};
				rc = em_io_punch(r, &one, a - s0, b - a);
			} else if (fd != -ENOENT) {
				rc = fd;
			}
		}
		a = b;
	}
	return rc;
}


/* Segmented fsync: every segment from `lo` to the highest written that exists,
 * then the directory if segments were created or removed. The caller says where to
 * start (em_io_fsync_from), never where the previous call ended: a write still in
 * flight to an older segment during that call would go unsynced. */
int io_segs_fsync(struct em_ring *r, struct em_file *f, uint64_t lo)
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
		struct em_file one = {.fd = v - 1, .direct = d};
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

