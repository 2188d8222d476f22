/*
 * test_io.c - the io layer: many writes and reads in flight on one ring, the
 * queue-depth limit, short reads at the end of a file, the buffered fallback
 * where O_DIRECT is refused, and em_alloc_io's buffers (alignment, a 5 MiB direct
 * round trip).
 */
#include <ember.h>
#include <errno.h>
#include <string.h>

#include "core/alloc.h"
#include "io/file.h"
#include "test_util.h"

#define BLOCKS 64

static int results[BLOCKS + 1];

static void done(void *ctx, uint64_t ud, int res)
{
	(void)ctx;
	results[ud] = res;
}

static void exercise(const char *path, int expect_direct)
{
	struct em_file f;
	CHECK_OK(em_file_open(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE));
	if (expect_direct >= 0)
		CHECK(f.direct == expect_direct, "O_DIRECT %d, want %d", f.direct, expect_direct);
	struct em_ring r;
	CHECK_OK(em_ring_init(&r, BLOCKS));
	uint8_t *buf = em_alloc_aligned(EM_IO_ALIGN, BLOCKS * EM_IO_ALIGN);
	for (int i = 0; i < BLOCKS; i++)
		memset(buf + i * EM_IO_ALIGN, i + 1, EM_IO_ALIGN);
	for (int i = 0; i < BLOCKS; i++)
		CHECK_OK(em_ring_write(&r, &f, buf + i * EM_IO_ALIGN, EM_IO_ALIGN,
				       (uint64_t)i * EM_IO_ALIGN, i));
	CHECK(em_ring_read(&r, &f, buf, EM_IO_ALIGN, 0, BLOCKS) == -EBUSY, "depth limit");
	CHECK_OK(em_ring_submit(&r));
	CHECK(em_ring_reap(&r, BLOCKS, done, NULL) == BLOCKS, "all writes reaped");
	for (int i = 0; i < BLOCKS; i++)
		CHECK(results[i] == (int)EM_IO_ALIGN, "write %d: %d", i, results[i]);
	CHECK(em_file_size(&f) == BLOCKS * EM_IO_ALIGN, "size");
	memset(buf, 0, BLOCKS * EM_IO_ALIGN);
	for (int i = 0; i < BLOCKS; i++) /* read in reverse order */
		CHECK_OK(em_ring_read(&r, &f, buf + i * EM_IO_ALIGN, EM_IO_ALIGN,
				      (uint64_t)(BLOCKS - 1 - i) * EM_IO_ALIGN, i));
	CHECK_OK(em_ring_submit(&r));
	CHECK(em_ring_reap(&r, BLOCKS, done, NULL) == BLOCKS, "all reads reaped");
	for (int i = 0; i < BLOCKS; i++) {
		CHECK(results[i] == (int)EM_IO_ALIGN, "read %d", i);
		CHECK(buf[i * EM_IO_ALIGN] == BLOCKS - i && buf[i * EM_IO_ALIGN + 4095] == BLOCKS - i,
		      "read %d content", i);
	}
	/* a read that runs past the end of the file comes back short */
	CHECK_OK(em_ring_read(&r, &f, buf, 2 * EM_IO_ALIGN, (BLOCKS - 1) * EM_IO_ALIGN, 0));
	CHECK_OK(em_ring_submit(&r));
	CHECK(em_ring_reap(&r, 1, done, NULL) == 1 && results[0] == (int)EM_IO_ALIGN, "short read");
	/* synchronous helpers */
	CHECK_OK(em_io_pwrite(&r, &f, buf, EM_IO_ALIGN, 0));
	CHECK_OK(em_io_fsync(&r, &f));
	CHECK_OK(em_io_pread(&r, &f, buf, EM_IO_ALIGN, 0));
	CHECK(em_io_pread(&r, &f, buf, EM_IO_ALIGN, BLOCKS * EM_IO_ALIGN) == -EIO, "pread past end");
	/* timeout reap with nothing in flight returns at once */
	CHECK(em_ring_reap_timeout(&r, 1000, done, NULL) == 0, "nothing to reap");
	em_free(buf, BLOCKS * EM_IO_ALIGN);
	em_ring_exit(&r);
	em_file_close(&f);
}

/* em_alloc_io: 4 KiB aligned below EM_HUGE_BYTES, 2 MiB aligned from there up,
 * writable to its last byte; and a direct write and read of 5 MiB through the
 * ring between two such buffers (huge pages, when the kernel gives them) gives the
 * bytes back. */
static void io_buffers(const char *path)
{
	const size_t sizes[] = {0, 1, 4095, 4096, EM_HUGE_BYTES - 1, EM_HUGE_BYTES, (5u << 20) + 3};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		uint8_t *p = em_alloc_io(n);
		CHECK(p != NULL, "em_alloc_io(%zu)", n);
		uintptr_t align = n >= EM_HUGE_BYTES ? EM_HUGE_BYTES : 4096;
		CHECK(((uintptr_t)p & (align - 1)) == 0, "em_alloc_io(%zu) = %p: not %zu aligned", n,
		      (void *)p, (size_t)align);
		if (n) {
			memset(p, 0xa5, n);
			CHECK(p[n - 1] == 0xa5, "last byte");
		}
		em_free(p, n);
	}
	const size_t len = 5u << 20;
	struct em_file f;
	CHECK_OK(em_file_open(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE));
	struct em_ring r;
	CHECK_OK(em_ring_init(&r, 4));
	uint8_t *w = em_alloc_io(len), *rd = em_alloc_io(len);
	CHECK(w && rd, "buffers");
	tu_rng_fill(tu_rng_global(), w, len);
	memset(rd, 0, len);
	CHECK_OK(em_io_pwrite(&r, &f, w, (uint32_t)len, 0));
	CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)len, 0));
	CHECK(memcmp(w, rd, len) == 0, "5 MiB read back into an em_alloc_io buffer differs");
	em_free(w, len);
	em_free(rd, len);
	em_ring_exit(&r);
	em_file_close(&f);
}

int main(int argc, char **argv)
{
	tu_init("test_io", argc, argv);
	char dir[4096], path[4200];
	CHECK(tu_tmpdir_make("io", dir, sizeof(dir)) == 0, "tmpdir");
	snprintf(path, sizeof(path), "%s/file", dir);
	exercise(path, -1);
	io_buffers(path);
	struct em_file f;
	snprintf(path, sizeof(path), "%s/missing/file", dir);
	CHECK(em_file_open(&f, path, 0) == -ENOENT, "missing file");
	tu_tmpdir_remove(dir);
	/* tmpfs refuses O_DIRECT: the fallback must give a working file */
	if (tu_tmpdir_make("io", dir, sizeof(dir)) == 0) {
		tu_tmpdir_remove(dir);
	}
	snprintf(path, sizeof(path), "/dev/shm/ember-test-io-%llu", (unsigned long long)tu_seed());
	if (em_file_open(&f, path, EM_FILE_CREATE) == 0) {
		int direct = f.direct;
		em_file_close(&f);
		exercise(path, direct);
		remove(path);
	}
	printf("ok\n");
	return 0;
}
