/*
 * file.c - em_file for a plain file (see file.h): opening a store file (O_DIRECT
 * where the file system allows it), closing one, its size, and the path calls
 * (fsync of a directory, rename, unlink, mkdir, rmdir) that go through the
 * power-loss simulator in test builds. Segmented files: segment.c; the io_uring
 * ring and the synchronous calls over it: ring.c.
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

/*
 * open(2) for a store file: O_DIRECT where the filesystem allows it (*direct = 1),
 * else buffered. O_NONBLOCK while opening: an O_RDONLY open of a FIFO waits for a
 * writer, so a FIFO under a store file's name hung the open; a FIFO or socket is
 * refused (-ESPIPE) and a regular file gets its blocking mode back. Returns the
 * descriptor or -errno.
 */
int io_open_store_file(const char *path, int oflags, int *direct)
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

uint32_t io_dio_read_align(int fd)
{
	if (EM_FAULT(EM_FAULT_DIO_ALIGN))
		return EM_IO_ALIGN; /* fault injection: a file system that wants whole blocks */
#ifdef STATX_DIOALIGN
	struct statx sx;
	memset(&sx, 0, sizeof(sx));
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) != 0 ||
	    !(sx.stx_mask & STATX_DIOALIGN))
		return EM_IO_ALIGN; /* an older kernel, or a file system that does not say */
	uint32_t a = sx.stx_dio_offset_align, m = sx.stx_dio_mem_align;
	/* 0: direct I/O unsupported on this file (ext4 with journalled data, say) */
	if (a < EM_READ_ALIGN_MIN || a > EM_IO_ALIGN || (a & (a - 1)) || m == 0 || m > EM_IO_ALIGN)
		return EM_IO_ALIGN;
	return a;
#else
	(void)fd; /* headers older than Linux 6.1: no STATX_DIOALIGN */
	return EM_IO_ALIGN;
#endif
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
	/* relaxed: f is still the opener's alone */
	atomic_store_explicit(&f->read_align, 0, memory_order_relaxed);
	int direct = 0;
	int fd = io_open_store_file(path, oflags, &direct); /* buffered where O_DIRECT is refused (tmpfs) */
	if (fd < 0)
		return fd;
	f->direct = direct; /* seq_cst: as above, f is still the opener's alone */
	f->fd = fd;
	/* relaxed: as above; buffered reads need no alignment, EM_IO_ALIGN serves */
	atomic_store_explicit(&f->read_align, direct ? io_dio_read_align(fd) : EM_IO_ALIGN,
			      memory_order_relaxed);
	return 0;
}

void em_file_close(struct em_file *f)
{
	if (f->segs)
		io_segs_close(f);
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
	char *d = io_dir_of(path);
	if (!d)
		return -ENOMEM;
	int rc = em_dir_fsync(d);
	em_free(d, 0);
	return rc;
}

/* rename(2), or renameat2 with RENAME_NOREPLACE: 0 or -errno. */
int io_path_rename(const char *from, const char *to, int noreplace)
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
	return io_path_rename(from, to, 0);
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
