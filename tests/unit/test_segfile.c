/*
 * test_segfile.c - segmented files (io/file.h, em_file_open_segmented): requests
 * that cross a segment end complete as one (bytes, a short first part ending the
 * count, an error) and count once in the depth (-EBUSY; -EINVAL for a request of
 * three segments), missing segments reading as zeros, the
 * segment files they create, synchronous helpers piece by piece on a 2-deep ring,
 * punch removing the segments it covers whole, fsync, the existence check a
 * recovery makes, read-only and no-create opens, truncation, bad arguments, and
 * 4 threads opening and filling segments of one file at once (each with its ring),
 * and recycling (em_file_set_recycle): removed segments' files reused as new ones;
 * spares written ahead and kept (EM_FILE_KEEP_SPARES, em_file_prewrite_spares):
 * whole and allocated, taken by new segments, kept at close, taken up by the next
 * keeping open (a short, sparse or misnamed one removed), trimmed to the recycling
 * limit, removed by an open that does not keep them and by
 * em_file_remove_segments; bad uses refused; on tmpfs (no O_DIRECT) segments
 * opened buffered while another thread punches; em_file_remove_below; and (with
 * fault injection, which counts the fsyncs) which segments em_io_fsync_from covers.
 */
#include <ember.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "io/file.h"
#include "test_util.h"

#define MIB (UINT64_C(1) << 20)
#define SEG_BITS EM_SEG_MIN_BITS /* 4 MiB segments */

static int result[16];
static int calls;

static void done(void *ctx, uint64_t ud, int res)
{
	(void)ctx;
	CHECK(ud < 16, "user_data %llu came back (a split part's tag leaked?)",
	      (unsigned long long)ud);
	result[ud] = res;
	calls++;
}

/* Submit what is queued and reap exactly `want` callbacks. */
static void complete(struct em_ring *r, int want)
{
	calls = 0;
	CHECK_OK(em_ring_submit(r));
	CHECK(em_ring_reap(r, (unsigned)want, done, NULL) == want, "reap: %d callbacks, want %d",
	      calls, want);
	CHECK(calls == want, "callbacks %d, want %d", calls, want);
}

static int seg_exists(const char *path, unsigned n)
{
	char name[4300];
	struct stat st;
	snprintf(name, sizeof(name), "%s.%06u", path, n);
	return stat(name, &st) == 0;
}

static void fill(uint8_t *p, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i += 4096)
		memset(p + i, (int)(((off + i) >> 12) * 7 + 1), 4096);
}

static void check_bytes(const uint8_t *p, uint64_t off, uint64_t len, const char *what)
{
	for (uint64_t i = 0; i < len; i += 4096) {
		uint8_t want = (uint8_t)(((off + i) >> 12) * 7 + 1);
		CHECK(p[i] == want && p[i + 4095] == want, "%s: block at %llu holds %u, want %u", what,
		      (unsigned long long)(off + i), p[i], want);
	}
}

static void split_requests(const char *path)
{
	struct em_file f;
	struct em_ring r;
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, SEG_BITS));
	CHECK_OK(em_ring_init(&r, 8));
	size_t cap = 16 * MIB;
	uint8_t *w = em_alloc_io(cap), *rd = em_alloc_io(cap);
	CHECK(w && rd, "buffers");

	/* [2,6) [6,10) [10,14) [14,15) MiB: the first three cross a segment end; one
	 * callback each, one unit of the depth each */
	fill(w, 2 * MIB, 13 * MIB);
	for (int i = 0; i < 3; i++)
		CHECK_OK(em_ring_write(&r, &f, w + (uint64_t)i * 4 * MIB, (uint32_t)(4 * MIB),
				       (2 + 4 * (uint64_t)i) * MIB, (uint64_t)i));
	CHECK_OK(em_ring_write(&r, &f, w + 12 * MIB, (uint32_t)MIB, 14 * MIB, 3));
	CHECK(r.inflight == 4, "4 requests in flight, counted once each (%u)", r.inflight);
	complete(&r, 4);
	for (int i = 0; i < 4; i++)
		CHECK(result[i] == (int)((i < 3 ? 4 : 1) * MIB), "write %d: %d", i, result[i]);
	for (unsigned n = 0; n < 4; n++)
		CHECK(seg_exists(path, n), "segment %u created", n);
	CHECK(!seg_exists(path, 4), "segment 4 not created");

	/* read back: split reads, and one inside a segment */
	memset(rd, 0, cap);
	for (int i = 0; i < 3; i++)
		CHECK_OK(em_ring_read(&r, &f, rd + (uint64_t)i * 4 * MIB, (uint32_t)(4 * MIB),
				      (2 + 4 * (uint64_t)i) * MIB, (uint64_t)i));
	CHECK_OK(em_ring_read(&r, &f, rd + 12 * MIB, (uint32_t)MIB, 9 * MIB, 3));
	complete(&r, 4);
	for (int i = 0; i < 4; i++)
		CHECK(result[i] == (int)((i < 3 ? 4 : 1) * MIB), "read %d: %d", i, result[i]);
	check_bytes(rd, 2 * MIB, 12 * MIB, "split reads");
	check_bytes(rd + 12 * MIB, 9 * MIB, MIB, "plain read");
	/* a request spanning three segments is refused */
	CHECK(em_ring_read(&r, &f, rd, (uint32_t)(9 * MIB), 3 * MIB, 0) == -EINVAL, "3 segments");
	CHECK(em_ring_read(&r, &f, rd, 4096, 0, UINT64_C(1) << 63) == -EINVAL, "top bit");

	/* a read running past the end of the last segment comes back short */
	CHECK_OK(em_ring_read(&r, &f, rd, (uint32_t)(2 * MIB), 14 * MIB, 4));
	complete(&r, 1);
	CHECK(result[4] == (int)MIB, "short read at the end: %d", result[4]);

	/* a short first part ends the count, whatever the second moved: segment 5
	 * holds 1 MiB, segment 6 all of its 4 MiB */
	fill(w, 20 * MIB, MIB);
	fill(w + MIB, 24 * MIB, 4 * MIB);
	CHECK_OK(em_ring_write(&r, &f, w, (uint32_t)MIB, 20 * MIB, 5));
	CHECK_OK(em_ring_write(&r, &f, w + MIB, (uint32_t)(4 * MIB), 24 * MIB, 6));
	complete(&r, 2);
	CHECK(result[5] == (int)MIB && result[6] == (int)(4 * MIB), "writes %d %d", result[5],
	      result[6]);
	CHECK_OK(em_ring_read(&r, &f, rd, (uint32_t)(5 * MIB), 20 * MIB, 7));
	complete(&r, 1);
	CHECK(result[7] == (int)MIB, "short first part: %d, want 1 MiB", result[7]);
	/* both parts failing (a misaligned buffer, refused by O_DIRECT): the error */
	if (f.direct) {
		CHECK_OK(em_ring_read(&r, &f, rd + 1, (uint32_t)(4 * MIB), 6 * MIB, 8));
		complete(&r, 1);
		CHECK(result[8] == -EINVAL, "misaligned split read: %d", result[8]);
	}

	/* the depth counts requests: a 2-deep ring takes two split requests */
	struct em_ring small;
	CHECK_OK(em_ring_init(&small, 2));
	CHECK_OK(em_ring_read(&small, &f, rd, (uint32_t)(4 * MIB), 2 * MIB, 9));
	CHECK_OK(em_ring_read(&small, &f, rd + 4 * MIB, (uint32_t)(4 * MIB), 6 * MIB, 10));
	CHECK(em_ring_read(&small, &f, rd, 4096, 0, 11) == -EBUSY, "depth full");
	CHECK(small.inflight == 2, "2 in flight (%u)", small.inflight);
	complete(&small, 2);
	CHECK(result[9] == (int)(4 * MIB) && result[10] == (int)(4 * MIB), "reads %d %d",
	      result[9], result[10]);
	check_bytes(rd, 2 * MIB, 8 * MIB, "2-deep ring");

	/* a segment that does not exist reads as zeros, as a hole does: [18, 22) is
	 * 2 MiB of missing segment 4, then 1 MiB of segment 5 and its end */
	memset(rd, 0xee, 4 * MIB);
	CHECK_OK(em_ring_read(&r, &f, rd, (uint32_t)(4 * MIB), 18 * MIB, 0));
	complete(&r, 1);
	CHECK(result[0] == (int)(3 * MIB), "missing then short: %d, want 3 MiB", result[0]);
	CHECK(rd[0] == 0 && rd[2 * MIB - 1] == 0, "missing segment reads zeros");
	check_bytes(rd + 2 * MIB, 20 * MIB, MIB, "after the missing segment");
	CHECK_OK(em_ring_read(&r, &f, rd, 4096, 16 * MIB, 0));
	complete(&r, 1);
	CHECK(result[0] == 4096 && rd[0] == 0, "read inside a missing segment: %d", result[0]);
	CHECK(!seg_exists(path, 4), "a read creates nothing");
	/* one-file calls refuse a segmented file */
	CHECK(em_ring_fsync(&r, &f, 0) == -EINVAL, "em_ring_fsync");
	CHECK(em_ring_punch(&r, &f, 0, 4096, 0) == -EINVAL, "em_ring_punch");
	CHECK(em_file_size(&f) == -EINVAL, "em_file_size");
	struct em_ring zero;
	CHECK(em_ring_init(&zero, 0) == -EINVAL, "depth 0");

	/* synchronous helpers go segment by segment, even on a 2-deep ring */
	fill(w, 30 * MIB, 10 * MIB);
	CHECK_OK(em_io_pwrite(&small, &f, w, (uint32_t)(10 * MIB), 30 * MIB));
	memset(rd, 0, cap);
	CHECK_OK(em_io_pread(&small, &f, rd, (uint32_t)(10 * MIB), 30 * MIB));
	check_bytes(rd, 30 * MIB, 10 * MIB, "pread");
	CHECK(em_io_pread(&small, &f, rd, (uint32_t)(2 * MIB), 20 * MIB) == -EIO,
	      "pread past the end of segment 5's data");
	CHECK_OK(em_io_pread(&small, &f, rd, (uint32_t)(4 * MIB), 38 * MIB)); /* 10: zeros */
	CHECK(rd[3 * MIB] == 0, "segment 10 reads zeros");
	CHECK_OK(em_io_fsync(&small, &f));
	CHECK_OK(em_io_fsync(&small, &f)); /* nothing new: the newest segment again */

	/* the existence check, then punch: [4, 9) MiB removes segment 1 and punches
	 * the first MiB of segment 2 */
	CHECK_OK(em_file_check_segments(&f, 0, 16 * MIB));
	CHECK(em_file_check_segments(&f, 0, 20 * MIB + 1) == -ENOENT, "segment 4 missing");
	CHECK_OK(em_io_punch(&small, &f, 4 * MIB, 5 * MIB));
	CHECK(!seg_exists(path, 1) && seg_exists(path, 2) && seg_exists(path, 0), "punch removed "
	      "segment 1 only");
	CHECK(em_file_check_segments(&f, 0, 16 * MIB) == -ENOENT, "check after punch");
	CHECK_OK(em_file_check_segments(&f, 8 * MIB, 16 * MIB));
	rd[0] = 0xee;
	CHECK_OK(em_io_pread(&small, &f, rd, 4096, 5 * MIB));
	CHECK(rd[0] == 0, "a removed segment reads zeros");
	CHECK_OK(em_io_pread(&small, &f, rd, (uint32_t)MIB, 8 * MIB));
	for (uint64_t i = 0; i < MIB; i++)
		if (rd[i]) {
			CHECK(0, "punched byte %llu is %u", (unsigned long long)i, rd[i]);
			break;
		}
	CHECK_OK(em_io_pread(&small, &f, rd, (uint32_t)MIB, 9 * MIB));
	check_bytes(rd, 9 * MIB, MIB, "after punch");
	/* a range over segments never created releases nothing and fails nothing */
	CHECK_OK(em_io_punch(&small, &f, 44 * MIB + 4096, 8 * MIB));
	em_ring_exit(&small);
	em_ring_exit(&r);
	em_file_close(&f);

	/* reopen without create: reads work, a write to a new segment fails; read-only
	 * refuses writes */
	CHECK_OK(em_file_open_segmented(&f, path, 0, SEG_BITS));
	CHECK_OK(em_ring_init(&r, 8));
	CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)MIB, 9 * MIB));
	check_bytes(rd, 9 * MIB, MIB, "reopened");
	CHECK(em_ring_write(&r, &f, w, 4096, 48 * MIB, 0) == -ENOENT, "no create");
	CHECK_OK(em_io_pwrite(&r, &f, w, 4096, 0)); /* an existing segment */
	em_file_close(&f);
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_READONLY, SEG_BITS));
	CHECK_OK(em_io_pread(&r, &f, rd, 4096, 0));
	CHECK(em_ring_write(&r, &f, w, 4096, 0, 0) == -EBADF, "read-only write");
	em_file_close(&f);
	CHECK(em_file_open_segmented(&f, path, EM_FILE_READONLY | EM_FILE_TRUNCATE, SEG_BITS) ==
		      -EINVAL,
	      "truncate read-only");

	/* truncation removes the segments and a plain file of the same name */
	FILE *plain = fopen(path, "w");
	CHECK(plain != NULL, "plain file");
	fclose(plain);
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, SEG_BITS));
	CHECK(!seg_exists(path, 0) && !seg_exists(path, 2) && access(path, F_OK) != 0,
	      "truncated");
	em_file_close(&f);
	/* em_file_remove_segments leaves other names alone */
	char other[4300];
	snprintf(other, sizeof(other), "%s.x1", path);
	plain = fopen(other, "w");
	CHECK(plain != NULL, "other file");
	fclose(plain);
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE, SEG_BITS));
	CHECK_OK(em_io_pwrite(&r, &f, w, 4096, 4 * MIB));
	em_file_close(&f);
	CHECK(seg_exists(path, 1), "written");
	CHECK_OK(em_file_remove_segments(path));
	CHECK(!seg_exists(path, 1) && access(other, F_OK) == 0, "remove_segments");
	remove(other);

	/* bad arguments */
	CHECK(em_file_open_segmented(&f, path, EM_FILE_CREATE, EM_SEG_MIN_BITS - 1) == -EINVAL,
	      "segment too small");
	CHECK(em_file_open_segmented(&f, path, EM_FILE_CREATE, EM_SEG_MAX_BITS + 1) == -EINVAL,
	      "segment too large");
	CHECK(em_file_open_segmented(&f, NULL, EM_FILE_CREATE, SEG_BITS) == -EINVAL, "NULL path");
	em_ring_exit(&r);
	em_free(w, cap);
	em_free(rd, cap);
}

/* ---- 4 threads, one file ------------------------------------------------------------ */

#define THREADS 4
#define PER_THREAD 24 /* writes of 1.5 MiB each: the threads' ranges interleave */

struct worker {
	struct em_file *f;
	int id;
	int failed;
};

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct em_ring r;
	uint64_t len = 3 * MIB / 2;
	uint8_t *buf = em_alloc_io(len), *back = em_alloc_io(len);
	if (!buf || !back || em_ring_init(&r, 8) != 0) {
		wk->failed = 1;
		return NULL;
	}
	for (int i = 0; i < PER_THREAD && !wk->failed; i++) {
		/* slot i * THREADS + id: neighbours' writes meet inside segments */
		uint64_t off = ((uint64_t)i * THREADS + (uint64_t)wk->id) * len;
		fill(buf, off, len);
		if (em_io_pwrite(&r, wk->f, buf, (uint32_t)len, off) != 0 ||
		    em_io_pread(&r, wk->f, back, (uint32_t)len, off) != 0 || memcmp(buf, back, len))
			wk->failed = 1;
	}
	em_ring_exit(&r);
	em_free(buf, len);
	em_free(back, len);
	return NULL;
}

static void threads(const char *path)
{
	struct em_file f;
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, SEG_BITS));
	pthread_t th[THREADS];
	struct worker wk[THREADS];
	for (int i = 0; i < THREADS; i++) {
		wk[i] = (struct worker){&f, i, 0};
		CHECK(pthread_create(&th[i], NULL, worker_main, &wk[i]) == 0, "thread");
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		CHECK(!wk[i].failed, "thread %d: a write or its read back failed", i);
	}
	/* everything again, through one ring in 6 MiB requests */
	struct em_ring r;
	CHECK_OK(em_ring_init(&r, 4));
	uint64_t total = (uint64_t)THREADS * PER_THREAD * 3 * MIB / 2;
	uint8_t *rd = em_alloc_io(6 * MIB);
	for (uint64_t off = 0; off < total; off += 6 * MIB) {
		CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)(6 * MIB), off));
		check_bytes(rd, off, 6 * MIB, "after the threads");
	}
	CHECK_OK(em_io_fsync(&r, &f));
	em_free(rd, 6 * MIB);
	em_ring_exit(&r);
	em_file_close(&f);
}

/* The buffered fallback's flag (em_file.direct) under threads: on tmpfs where it
 * refuses O_DIRECT (kernels before 6.6), every segment a write creates clears it (under the segment
 * table's lock) while another thread punches part of segment 0, which reads it
 * without that lock. Under ThreadSanitizer a plain int there is a race. */
struct puncher {
	struct em_file *f;
	_Atomic int stop; /* relaxed: a flag alone */
	int failed;
};

static void *punch_main(void *arg)
{
	struct puncher *p = arg;
	struct em_ring r;
	if (em_ring_init(&r, 2) != 0) {
		p->failed = 1;
		return NULL;
	}
	do /* at least once, however late the thread starts */
		if (em_io_punch(&r, p->f, 4096, 4096) != 0)
			p->failed = 1;
	while (!atomic_load_explicit(&p->stop, memory_order_relaxed) && !p->failed);
	em_ring_exit(&r);
	return NULL;
}

static void buffered_fallback(void)
{
	char path[256];
	snprintf(path, sizeof(path), "/dev/shm/ember-test-segfile-%llu",
		 (unsigned long long)tu_seed());
	struct em_file f;
	if (em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, SEG_BITS) != 0)
		return; /* no /dev/shm here */
	struct em_ring r;
	CHECK_OK(em_ring_init(&r, 2));
	uint8_t *buf = em_alloc_io(64 << 10);
	fill(buf, 0, 64 << 10);
	CHECK_OK(em_io_pwrite(&r, &f, buf, 64 << 10, 0)); /* segment 0, for the puncher */
	struct puncher p = {&f, 0, 0};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, punch_main, &p) == 0, "thread");
	for (uint64_t n = 1; n <= 16; n++) /* each write opens a new segment */
		CHECK_OK(em_io_pwrite(&r, &f, buf, 64 << 10, n << SEG_BITS));
	atomic_store_explicit(&p.stop, 1, memory_order_relaxed);
	pthread_join(th, NULL);
	CHECK(!p.failed, "a punch failed");
	/* tmpfs takes O_DIRECT since Linux 6.6: there the race above is not run */
	printf("segments on /dev/shm: %s\n",
	       atomic_load(&f.direct) ? "O_DIRECT (no fallback to test)" : "buffered");
	/* segment 0 around the hole, and the newest segment, read back */
	uint8_t *back = em_alloc_io(64 << 10);
	CHECK_OK(em_io_pread(&r, &f, back, 64 << 10, 16 << SEG_BITS));
	check_bytes(back, 0, 64 << 10, "the newest segment");
	CHECK_OK(em_io_pread(&r, &f, back, 4096, 0));
	check_bytes(back, 0, 4096, "before the hole");
	CHECK_OK(em_io_pread(&r, &f, back, 4096, 4096));
	for (int i = 0; i < 4096; i++)
		CHECK(back[i] == 0, "the punched block holds %u at %d", back[i], i);
	em_free(back, 64 << 10);
	em_free(buf, 64 << 10);
	em_ring_exit(&r);
	em_file_close(&f);
	CHECK_OK(em_file_remove_segments(path));
}

/* A new segmented file at path with 64 KiB written at the start of each of its
 * segments 0-3 (fill's bytes), and a ring of `depth`; returns the 64 KiB buffer
 * (em_free it with 64 KiB). */
static uint8_t *four_segments(const char *path, struct em_file *f, struct em_ring *r,
			      unsigned depth)
{
	CHECK_OK(em_file_open_segmented(f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, SEG_BITS));
	CHECK_OK(em_ring_init(r, depth));
	uint8_t *buf = em_alloc_io(64 << 10);
	CHECK(buf, "em_alloc_io");
	fill(buf, 0, 64 << 10);
	for (uint64_t n = 0; n < 4; n++)
		CHECK_OK(em_io_pwrite(r, f, buf, 64 << 10, n << SEG_BITS));
	return buf;
}

#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
#include "core/fault.h"

/* fsyncs em_io_fsync_from (or em_io_fsync, from = 0) makes: one per segment file
 * (counted at the io_fsync site, which fails nothing here). */
static uint64_t fsyncs(struct em_ring *r, struct em_file *f, uint64_t from)
{
	em_fault_count(EM_FAULT_IO_FSYNC);
	CHECK_OK(from == UINT64_MAX ? em_io_fsync(r, f) : em_io_fsync_from(r, f, from));
	return em_fault_hits(EM_FAULT_IO_FSYNC);
}

/* Which segments an fsync covers: from the one holding `from` up, every time. A call
 * that started at the newest segment of the call before it would never fsync a write
 * to an older segment still in flight during that call. */
static void fsync_coverage(const char *path)
{
	struct em_file f;
	struct em_ring r;
	uint8_t *buf = four_segments(path, &f, &r, 4);
	uint64_t two = (UINT64_C(2) << SEG_BITS) + 100;
	CHECK(fsyncs(&r, &f, two) == 2, "from segment 2: segments 2 and 3");
	CHECK(fsyncs(&r, &f, 0) == 4, "from 0: all four");
	CHECK(fsyncs(&r, &f, UINT64_MAX) == 4, "em_io_fsync: all four");
	/* a write to segment 1 in flight (on a ring of its own) during an fsync; the
	 * next fsync covers segment 1 again */
	struct em_ring w;
	CHECK_OK(em_ring_init(&w, 2));
	CHECK_OK(em_ring_write(&w, &f, buf, 64 << 10, (UINT64_C(1) << SEG_BITS) + (64 << 10), 1));
	CHECK_OK(em_ring_submit(&w));
	CHECK(fsyncs(&r, &f, UINT64_C(1) << SEG_BITS) == 3, "segments 1-3");
	complete(&w, 1);
	CHECK(result[1] == 64 << 10, "the write in flight: %d", result[1]);
	CHECK(fsyncs(&r, &f, UINT64_C(1) << SEG_BITS) == 3, "segments 1-3 again");
	em_free(buf, 64 << 10);
	em_ring_exit(&w);
	em_ring_exit(&r);
	em_file_close(&f);
	CHECK_OK(em_file_remove_segments(path));
}
#endif

/* em_file_remove_below: the segment files wholly below an offset go (a recovered
 * log's begin); the one holding it stays; a read-only file refuses. */
static void remove_below(const char *path)
{
	struct em_file f;
	struct em_ring r;
	uint8_t *buf = four_segments(path, &f, &r, 2);
	CHECK(em_file_remove_below(&f, (UINT64_C(2) << SEG_BITS) + 4096) == 2, "two removed");
	CHECK(!seg_exists(path, 0) && !seg_exists(path, 1) && seg_exists(path, 2) &&
	      seg_exists(path, 3), "segments 2 and 3 stay");
	CHECK(em_file_remove_below(&f, UINT64_C(2) << SEG_BITS) == 0, "nothing left to remove");
	uint8_t *back = em_alloc_io(64 << 10);
	CHECK_OK(em_io_pread(&r, &f, back, 64 << 10, 3ull << SEG_BITS));
	check_bytes(back, 0, 64 << 10, "segment 3 after the removal");
	em_free(back, 64 << 10);
	em_free(buf, 64 << 10);
	em_ring_exit(&r);
	em_file_close(&f);
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_READONLY, SEG_BITS));
	CHECK(em_file_remove_below(&f, UINT64_C(4) << SEG_BITS) == -EBADF, "read-only");
	CHECK(seg_exists(path, 2), "a refused removal removed");
	em_file_close(&f);
	CHECK_OK(em_file_remove_segments(path));
}

static ino_t seg_ino(const char *path, unsigned n)
{
	char name[4300];
	snprintf(name, sizeof(name), "%s.%06u", path, n);
	return (ino_t)tu_file_ino(name);
}

static unsigned spares(const char *path)
{
	unsigned n = 0;
	char name[4300];
	struct stat st;
	for (unsigned k = 0; k < 256; k++) {
		snprintf(name, sizeof(name), "%s.spare.%06u", path, k);
		n += stat(name, &st) == 0;
	}
	return n;
}

/* em_file_set_recycle (segment.c invariant 5): segments removed whole become spares, and
 * the next segments created take them (the same inodes, the new bytes, blocks
 * already allocated); a partial release punches nothing; a segment file that
 * exists on disk is never replaced by a spare; spares go at close and at open. */
static void recycling(const char *path)
{
	struct em_file f;
	struct em_ring r;
	CHECK_OK(em_ring_init(&r, 4));
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, SEG_BITS));
	em_file_set_recycle(&f, 2);
	uint8_t *w = em_alloc_io(16 * MIB), *rd = em_alloc_io(16 * MIB);
	fill(w, 0, 16 * MIB);
	CHECK_OK(em_io_pwrite(&r, &f, w, (uint32_t)(16 * MIB), 0)); /* segments 0..3 */
	ino_t i0 = seg_ino(path, 0), i1 = seg_ino(path, 1);
	CHECK(i0 && i1, "segments 0 and 1 exist");
	struct stat st2, st2b;
	char n2[4300];
	snprintf(n2, sizeof(n2), "%s.%06u", path, 2);
	CHECK(stat(n2, &st2) == 0, "segment 2");
	/* [0, 9 MiB): segments 0 and 1 whole, 1 MiB of segment 2 */
	CHECK_OK(em_io_punch(&r, &f, 0, 9 * MIB));
	CHECK(!seg_exists(path, 0) && !seg_exists(path, 1), "removed segments are gone");
	CHECK(spares(path) == 2, "two spares, found %u", spares(path));
	CHECK(stat(n2, &st2b) == 0 && st2b.st_blocks == st2.st_blocks,
	      "a partial release punched blocks while recycling (%lld -> %lld)",
	      (long long)st2.st_blocks, (long long)st2b.st_blocks);
	/* segments 4 and 5 take the spares: their inodes, the new bytes */
	fill(w, 16 * MIB, 8 * MIB);
	CHECK_OK(em_io_pwrite(&r, &f, w, (uint32_t)(8 * MIB), 16 * MIB));
	ino_t i4 = seg_ino(path, 4), i5 = seg_ino(path, 5);
	CHECK((i4 == i0 || i4 == i1) && (i5 == i0 || i5 == i1) && i4 != i5,
	      "new segments are the removed files");
	CHECK(spares(path) == 0, "spares left: %u", spares(path));
	CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)(8 * MIB), 16 * MIB));
	check_bytes(rd, 16 * MIB, 8 * MIB, "recycled segments");
	CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)(7 * MIB), 9 * MIB));
	check_bytes(rd, 9 * MIB, 7 * MIB, "the segments kept");
	/* segment 2 released whole: a spare; closing unlinks it */
	CHECK_OK(em_io_punch(&r, &f, 9 * MIB, 3 * MIB));
	CHECK(spares(path) == 1, "one spare, found %u", spares(path));
	em_file_close(&f);
	CHECK(spares(path) == 0, "close left %u spares", spares(path));
	/* reopened: segment 3 is on disk but not open here; a spare must not replace
	 * it when a write "creates" it */
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE, SEG_BITS));
	em_file_set_recycle(&f, 2);
	CHECK_OK(em_io_punch(&r, &f, 12 * MIB, 0)); /* nothing */
	CHECK_OK(em_io_punch(&r, &f, 16 * MIB, 4 * MIB)); /* segment 4 -> spare */
	CHECK(spares(path) == 1, "one spare after the reopen, found %u", spares(path));
	ino_t i3 = seg_ino(path, 3);
	fill(w, 12 * MIB, 4 * MIB);
	CHECK_OK(em_io_pwrite(&r, &f, w + 4096, 4096, 12 * MIB + 4096)); /* the same bytes again */
	CHECK(seg_ino(path, 3) == i3 && spares(path) == 1, "an existing segment was replaced");
	CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)(4 * MIB), 12 * MIB));
	check_bytes(rd, 12 * MIB, 4 * MIB, "segment 3 after the reopen");
	em_file_close(&f);
	/* a leftover spare (a crash) goes at the next writable open */
	char sp[4300];
	snprintf(sp, sizeof(sp), "%s.spare.%06u", path, 7);
	FILE *x = fopen(sp, "w");
	CHECK(x && fclose(x) == 0, "make a leftover spare");
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE, SEG_BITS));
	CHECK(spares(path) == 0, "a leftover spare survived the open");
	em_file_close(&f);
	CHECK_OK(em_file_remove_segments(path));
	em_free(w, 16 * MIB);
	em_free(rd, 16 * MIB);
	em_ring_exit(&r);
}

/* Spare k's inode if it is a whole segment with every block allocated, else 0. */
static ino_t whole_spare(const char *path, unsigned k)
{
	char name[4300];
	snprintf(name, sizeof(name), "%s.spare.%06u", path, k);
	return (ino_t)tu_whole_file(name, UINT64_C(1) << SEG_BITS);
}

/* write: 1 written, 0 a hole, 2 allocated and never written (fallocate) */
static void make_file(const char *name, uint64_t size, int write)
{
	int fd = open(name, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	CHECK(fd >= 0, "create %s", name);
	if (write == 2) {
		CHECK(fallocate(fd, 0, 0, (off_t)size) == 0, "fallocate");
	} else if (write) {
		static uint8_t block[65536];
		for (uint64_t o = 0; o < size; o += sizeof(block))
			CHECK(pwrite(fd, block, sizeof(block), (off_t)o) == (ssize_t)sizeof(block), "write");
	} else {
		CHECK(ftruncate(fd, (off_t)size) == 0, "ftruncate"); /* a hole */
	}
	close(fd);
}

/* Spares written ahead and kept across opens (segment.c invariant 6). */
static void kept_spares(const char *path)
{
	struct em_file f, one;
	struct em_ring r;
	CHECK_OK(em_ring_init(&r, 4));
	uint64_t seg = UINT64_C(1) << SEG_BITS;
	/* bad uses: one file, read-only, not recycling */
	char plain[4300];
	snprintf(plain, sizeof(plain), "%s.plain", path);
	CHECK_OK(em_file_open(&one, plain, EM_FILE_CREATE | EM_FILE_TRUNCATE));
	CHECK_RC(em_file_prewrite_spares(&one, 2), -EINVAL);
	CHECK(em_file_spares(&one) == 0, "a plain file's spares");
	em_file_close(&one);
	unlink(plain);
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE | EM_FILE_KEEP_SPARES,
					SEG_BITS));
	CHECK_OK(em_file_prewrite_spares(&f, 2)); /* recycling off: nothing */
	CHECK(spares(path) == 0, "spares written while not recycling");
	/* three at most */
	em_file_set_recycle(&f, 3);
	CHECK_OK(em_file_prewrite_spares(&f, 5));
	CHECK(spares(path) == 3 && em_file_spares(&f) == 3, "spares: %u", spares(path));
	ino_t s1 = whole_spare(path, 1), s2 = whole_spare(path, 2);
	CHECK(whole_spare(path, 0) && s1 && s2, "spares 0..2 whole");
	/* segments 0 and 1 take spares 2 and 1 */
	uint8_t *w = em_alloc_io(8 * MIB), *rd = em_alloc_io(8 * MIB);
	fill(w, 0, 8 * MIB);
	CHECK_OK(em_io_pwrite(&r, &f, w, (uint32_t)(8 * MIB), 0));
	CHECK(seg_ino(path, 0) == s2 && seg_ino(path, 1) == s1, "new segments are not the spares");
	CHECK(spares(path) == 1, "spares left: %u", spares(path));
	CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)(8 * MIB), 0));
	check_bytes(rd, 0, 8 * MIB, "segments from spares");
	em_file_close(&f);
	ino_t s0 = whole_spare(path, 0);
	CHECK(s0 && spares(path) == 1, "close kept %u spares", spares(path));
	/* leftovers that are not whole spares, and one of another name */
	char name[4300];
	snprintf(name, sizeof(name), "%s.spare.%06u", path, 7);
	make_file(name, 4096, 1);
	snprintf(name, sizeof(name), "%s.spare.%06u", path, 8);
	make_file(name, seg, 0);
	char unwritten[4300];
	snprintf(unwritten, sizeof(unwritten), "%s.spare.%06u", path, 10);
	make_file(unwritten, seg, 2);
	snprintf(name, sizeof(name), "%s.spare.9", path);
	make_file(name, seg, 1);
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_KEEP_SPARES, SEG_BITS));
	CHECK(em_file_spares(&f) == 1 && whole_spare(path, 0) == s0, "the kept spare was not taken up");
	struct stat st;
	CHECK(spares(path) == 1 && stat(name, &st) != 0, "leftovers survived a keeping open");
	CHECK(stat(unwritten, &st) != 0, "a spare allocated but never written was kept");
	em_file_set_recycle(&f, 3);
	CHECK_OK(em_file_prewrite_spares(&f, 2));
	CHECK(em_file_spares(&f) == 2 && whole_spare(path, 0) == s0 && whole_spare(path, 1),
	      "a second spare after spare 0 (%u)", spares(path));
	CHECK_OK(em_io_pread(&r, &f, rd, (uint32_t)(8 * MIB), 0));
	check_bytes(rd, 0, 8 * MIB, "segments after the reopen");
	em_file_set_recycle(&f, 1); /* trims */
	CHECK(em_file_spares(&f) == 1 && spares(path) == 1, "trimmed to %u", spares(path));
	em_file_close(&f);
	/* an open that does not keep them removes them */
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE, SEG_BITS));
	CHECK(spares(path) == 0 && em_file_spares(&f) == 0, "spares after a plain open: %u", spares(path));
	em_file_close(&f);
	/* as does em_file_remove_segments, with the segments */
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_CREATE | EM_FILE_KEEP_SPARES, SEG_BITS));
	em_file_set_recycle(&f, 2);
	CHECK_OK(em_file_prewrite_spares(&f, 2));
	em_file_close(&f);
	CHECK(spares(path) == 2, "kept: %u", spares(path));
	CHECK_OK(em_file_remove_segments(path));
	CHECK(spares(path) == 0 && !seg_exists(path, 0) && !seg_exists(path, 1),
	      "em_file_remove_segments left files");
	/* read-only: nothing kept or written, leftovers untouched */
	snprintf(name, sizeof(name), "%s.spare.%06u", path, 3);
	make_file(name, seg, 1);
	CHECK_OK(em_file_open_segmented(&f, path, EM_FILE_READONLY | EM_FILE_KEEP_SPARES, SEG_BITS));
	em_file_set_recycle(&f, 2);
	CHECK_RC(em_file_prewrite_spares(&f, 2), -EINVAL);
	CHECK(em_file_spares(&f) == 0 && spares(path) == 1, "a read-only open changed the spares");
	em_file_close(&f);
	CHECK_OK(em_file_remove_segments(path));
	em_free(w, 8 * MIB);
	em_free(rd, 8 * MIB);
	em_ring_exit(&r);
}

int main(int argc, char **argv)
{
	tu_init("test_segfile", argc, argv);
	char dir[4096], path[4200];
	CHECK(tu_tmpdir_make("segfile", dir, sizeof(dir)) == 0, "tmpdir");
	snprintf(path, sizeof(path), "%s/log", dir);
	split_requests(path);
	threads(path);
	recycling(path);
	kept_spares(path);
	buffered_fallback();
	remove_below(path);
#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
	fsync_coverage(path);
#endif
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
