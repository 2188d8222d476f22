/*
 * test_small_reads.c - point reads at the file's read alignment (io/file.h,
 * em_file_read_align; lookup.c note 9).
 *
 *  1. An em_file's read alignment is a power of two in [512, 4096], equal to
 *     what statx(STATX_DIOALIGN) reports for a file of the same directory (512
 *     on ext4 over a 512-byte-sector disk), EM_IO_ALIGN where nothing is
 *     reported; a segmented file has EM_IO_ALIGN until its first segment opens,
 *     then the same value; reads at that alignment (one crossing a segment end
 *     too) return the bytes written. With fault injection (dio_align), a later
 *     segment whose direct reads would need 4096 bytes falls back to buffered
 *     reads and answers reads at the first segment's alignment (segment.c,
 *     invariant 7), while the first keeps O_DIRECT.
 *  2. Through the public API, on a store whose logs are on disk (small log
 *     memory, then a reopen, which leaves nothing in memory): values of every
 *     size (a few bytes, across 512- and 4096-byte boundaries, several KiB:
 *     larger than the first read, larger than a slot's buffer), hot and cold (a
 *     chunk read, then a record read), the last records of each log's file, read
 *     back byte for byte by ember_get, ember_get_batch and ember_get_async +
 *     ember_session_wait; again after updates and a compaction that reads chunks
 *     and large records back (rec_read_at); and again after a second reopen.
 *     Every read must succeed: a read at a wrong alignment fails under O_DIRECT
 *     (EINVAL) and fails the get, which the test does not tolerate; the stats
 *     must show that every get went to the disk (no memory copy answered it), and
 *     that small records' reads cost about FIRST_READ_MIN + the alignment bytes
 *     each (1 KiB at 512, where 4 KiB alignment costs 4 or 8 KiB; pass_end).
 *  3. The chunk copy a session keeps after reading a chunk from disk (cold.c,
 *     chunk_fetch: read at the chunk log's read alignment) is found again where
 *     that read put it: a second cold_entry_get answers the same.
 */
#include <ember.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "core/fault.h"
#include "io/file.h"
#include "io/file_int.h" /* io_seg_fd */
#include "store/store_int.h" /* FIRST_READ_MIN, the session's chunk copy */
#include "test_util.h"

#define KEYS 600u
#define CAP (32u << 10)
#define WINDOW 64u /* asynchronous gets in flight at once */
#define BATCH 32u
#define PAD_RECORDS 96u      /* padding that pushes records to disk: */
#define PAD_BYTES (16u << 10) /* 1.5 MiB, more than the hot log's memory */

/* ---- 1. the alignment of an em_file ----------------------------------------- */

/* What statx reports for path opened O_DIRECT: the offset alignment (0: not
 * reported, or no O_DIRECT here). */
static uint32_t statx_dio_align(const char *path)
{
#ifdef STATX_DIOALIGN
	int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct statx sx;
	memset(&sx, 0, sizeof(sx));
	int rc = statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx);
	close(fd);
	if (rc != 0 || !(sx.stx_mask & STATX_DIOALIGN))
		return 0;
	return sx.stx_dio_offset_align;
#else
	(void)path;
	return 0;
#endif
}

static void pattern(uint8_t *p, size_t n, uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((off + i) * 131 + ((off + i) >> 9));
}

/* Read [off, off + len) of f at alignment a and compare with pattern. */
static void read_check(struct em_ring *r, struct em_file *f, uint8_t *buf, uint64_t off,
		       uint32_t len, const char *what)
{
	memset(buf, 0, len);
	int rc = em_io_pread(r, f, buf, len, off);
	CHECK(rc == 0, "%s: read of %u bytes at %llu: %d (%s)", what, len, (unsigned long long)off,
	      rc, strerror(-rc));
	uint8_t *ref = malloc(len);
	pattern(ref, len, off);
	CHECK(memcmp(buf, ref, len) == 0, "%s: wrong bytes at %llu", what, (unsigned long long)off);
	free(ref);
}

/* Returns the alignment of a file in dir (what the store's files get). */
static uint32_t file_align_checks(const char *dir)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/one.dat", dir);
	struct em_file f;
	CHECK_OK(em_file_open(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE));
	uint32_t a = em_file_read_align(&f);
	CHECK(a >= EM_READ_ALIGN_MIN && a <= EM_IO_ALIGN && (a & (a - 1)) == 0,
	      "read alignment %u is not a power of two in [512, 4096]", a);
	uint32_t rep = statx_dio_align(path);
	int direct = atomic_load(&f.direct);
	if (!direct) {
		printf("TMPDIR's file system refuses O_DIRECT: buffered, alignment %u\n", a);
		CHECK(a == EM_IO_ALIGN, "a buffered file's read alignment is %u", a);
	} else if (rep >= EM_READ_ALIGN_MIN && rep <= EM_IO_ALIGN && !(rep & (rep - 1))) {
		printf("TMPDIR's file system reports a direct-I/O offset alignment of %u; "
		       "the file's read alignment is %u\n", rep, a);
		CHECK(a == rep, "read alignment %u, statx reports %u", a, rep);
	} else {
		printf("TMPDIR's file system does not report STATX_DIOALIGN (statx: %u): "
		       "alignment %u, its equality with 512 not checked\n", rep, a);
		CHECK(a == EM_IO_ALIGN, "nothing reported, yet the read alignment is %u", a);
	}

	struct em_ring r;
	CHECK_OK(em_ring_init(&r, 4));
	const uint32_t n = 4 * EM_IO_ALIGN;
	uint8_t *buf = em_alloc_io(n);
	CHECK(buf, "alloc");
	pattern(buf, n, 0);
	CHECK_OK(em_io_pwrite(&r, &f, buf, n, 0));
	for (uint64_t off = 0; off + 2 * a <= n; off += a)
		read_check(&r, &f, buf, off, a, "one file");
	if (direct && a < EM_IO_ALIGN) {
		/* what a read at half the alignment does here: part 2 relies on a wrong
		 * alignment failing the read (or on the comparison with statx above) */
		int rc = em_io_pread(&r, &f, buf, a, a / 2);
		printf("a direct read at offset %u: %d (%s)\n", a / 2, rc,
		       rc == -EINVAL ? "refused, as a misaligned read must be" : "accepted");
	}
	em_file_close(&f);

	/* a segmented file: EM_IO_ALIGN until a segment opens, then the segment's */
	snprintf(path, sizeof(path), "%s/seg.log", dir);
	struct em_file g;
	CHECK_OK(em_file_open_segmented(&g, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, EM_SEG_MIN_BITS));
	CHECK(em_file_read_align(&g) == EM_IO_ALIGN, "no segment open yet: %u",
	      em_file_read_align(&g));
	uint64_t seg = UINT64_C(1) << EM_SEG_MIN_BITS;
	pattern(buf, n, seg - n / 2);
	CHECK_OK(em_io_pwrite(&r, &g, buf, n, seg - n / 2)); /* segments 0 and 1 */
	uint32_t ga = em_file_read_align(&g);
	printf("segmented file: read alignment %u after its first segments opened\n", ga);
	CHECK(ga == a || (!atomic_load(&g.direct) && ga == EM_IO_ALIGN),
	      "segmented file's read alignment %u, one file's %u", ga, a);
	read_check(&r, &g, buf, seg - ga, 2 * ga, "across a segment end");
	read_check(&r, &g, buf, seg + ga, ga, "second segment");
	em_file_close(&g);
	em_ring_exit(&r);
	em_free(buf, n);
	return a;
}

/* 1, the fallback of segment.c invariant 7: segment 1 opens after the file's
 * alignment a was set by segment 0, and is told (fault dio_align) that its direct
 * reads need 4096 bytes. */
static void segment_fallback_checks(const char *dir, uint32_t a)
{
#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
	char path[600];
	snprintf(path, sizeof(path), "%s/fallback.log", dir);
	struct em_file h;
	CHECK_OK(em_file_open_segmented(&h, path, EM_FILE_CREATE | EM_FILE_TRUNCATE, EM_SEG_MIN_BITS));
	struct em_ring r;
	CHECK_OK(em_ring_init(&r, 4));
	const uint32_t n = 4 * EM_IO_ALIGN;
	const uint64_t seg = UINT64_C(1) << EM_SEG_MIN_BITS;
	uint8_t *buf = em_alloc_io(n);
	CHECK(buf, "alloc");
	pattern(buf, n, 0);
	CHECK_OK(em_io_pwrite(&r, &h, buf, n, 0)); /* segment 0 opens: the alignment is set */
	if (!atomic_load(&h.direct) || em_file_read_align(&h) != a || a == EM_IO_ALIGN) {
		printf("segment fallback: not checked (buffered, or an alignment of %u already)\n",
		       em_file_read_align(&h));
		goto out;
	}
	struct em_fault_spec sp = {.countdown = 1};
	CHECK_OK(em_fault_arm(EM_FAULT_DIO_ALIGN, &sp));
	pattern(buf, n, seg - n / 2);
	CHECK_OK(em_io_pwrite(&r, &h, buf, n, seg - n / 2)); /* segment 1 opens */
	uint64_t fired = em_fault_fired(EM_FAULT_DIO_ALIGN);
	em_fault_disarm(EM_FAULT_DIO_ALIGN);
	CHECK(fired == 1, "dio_align fired %llu times, want once (segment 1's open)",
	      (unsigned long long)fired);
	CHECK(em_file_read_align(&h) == a, "the file's read alignment moved to %u from %u",
	      em_file_read_align(&h), a);
	int fd0 = io_seg_fd(&h, 0, 0), fd1 = io_seg_fd(&h, 1, 0);
	CHECK(fd0 >= 0 && fd1 >= 0, "segment descriptors %d %d", fd0, fd1);
	CHECK(fcntl(fd0, F_GETFL) & O_DIRECT, "segment 0 lost O_DIRECT");
	CHECK(!(fcntl(fd1, F_GETFL) & O_DIRECT), "segment 1 kept O_DIRECT: it needs 4096");
	read_check(&r, &h, buf, seg - a, 2 * a, "across into the buffered segment");
	for (uint64_t off = seg; off + a <= seg + n / 2; off += a)
		read_check(&r, &h, buf, off, a, "the buffered segment at the first's alignment");
	printf("segment fallback: segment 1 buffered, reads at %u bytes answered\n", a);
out:
	em_file_close(&h);
	em_ring_exit(&r);
	em_free(buf, n);
#else
	(void)dir;
	(void)a;
	printf("segment fallback: not checked (built without fault injection)\n");
#endif
}

/* ---- 2. the store --------------------------------------------------------------- */

static uint32_t vlen_of[KEYS];
static uint32_t gen_of[KEYS];

static void fill(uint8_t *v, size_t n, unsigned key, unsigned gen)
{
	uint64_t x = (uint64_t)key << 32 | gen;
	for (size_t i = 0; i < n; i++)
		v[i] = (uint8_t)(tu_mix64(x + (i >> 3)) >> ((i & 7) * 8));
}

/* A value length: mostly small, some across 512 and 4096 bytes, some of several
 * KiB (past the first read, past a slot's IO_BUF_SIZE buffer). */
static uint32_t pick_len(tu_rng *rng)
{
	uint64_t c = tu_rng_below(rng, 10);
	if (c < 5)
		return (uint32_t)tu_rng_range(rng, 0, 200);
	if (c < 7)
		return (uint32_t)tu_rng_range(rng, 300, 1600);
	if (c < 8)
		return (uint32_t)tu_rng_range(rng, 3800, 4400);
	return (uint32_t)tu_rng_range(rng, 5000, 20000);
}

static int key_of(unsigned k, char *kb)
{
	return snprintf(kb, 16, "key%05u", k);
}

static void put_key(ember_session *s, unsigned k, uint32_t len, unsigned gen, uint8_t *v)
{
	char kb[16];
	int kl = key_of(k, kb);
	fill(v, len, k, gen);
	CHECK_OK(ember_put(s, kb, (size_t)kl, v, len));
	vlen_of[k] = len;
	gen_of[k] = gen;
}

static void value_check(unsigned k, const uint8_t *got, size_t len, int rc, const char *how)
{
	CHECK(rc == 0, "%s key%05u: %d (%s)", how, k, rc, ember_strerror(rc));
	CHECK(len == vlen_of[k], "%s key%05u: length %zu, want %u", how, k, len, vlen_of[k]);
	uint8_t *ref = malloc(len + 1);
	fill(ref, len, k, gen_of[k]);
	CHECK(memcmp(got, ref, len) == 0, "%s key%05u: wrong bytes (%zu of them)", how, k, len);
	free(ref);
}

/* Reads a pass made: user reads, reads answered from disk, disk reads, bytes. */
struct pass {
	ember_stats a;
	uint64_t keys;
};

static void pass_begin(ember_db *db, struct pass *p)
{
	CHECK_OK(ember_stats_get(db, &p->a));
	p->keys = 0;
}

/* all_disk: every get of the pass answered from disk. small (only keys whose
 * records fit the first read): reads of FIRST_READ_MIN + align bytes at most on
 * average, with half as much again for the few chains that two keys' hashes share
 * (a record of another key met on the way down is read whole); at 512 that is
 * 1,536 bytes a read, where 4 KiB alignment costs 4,096 or 8,192. */
static void pass_end(ember_db *db, struct pass *p, const char *what, uint32_t align,
		     int all_disk, int small)
{
	ember_stats b;
	CHECK_OK(ember_stats_get(db, &b));
	uint64_t from_disk = (b.hot.reads_disk - p->a.hot.reads_disk) +
			     (b.cold.reads_disk - p->a.cold.reads_disk);
	uint64_t mem = (b.hot.reads_memory - p->a.hot.reads_memory) +
		       (b.cold.reads_memory - p->a.cold.reads_memory);
	uint64_t reads = b.disk_reads - p->a.disk_reads;
	uint64_t bytes = b.disk_bytes_read - p->a.disk_bytes_read;
	uint64_t chunks = b.cold_chunk_reads - p->a.cold_chunk_reads;
	printf("%-34s %5llu keys: %5llu from disk (%llu cold chunk reads), %6llu reads, "
	       "%.0f B/read\n", what, (unsigned long long)p->keys, (unsigned long long)from_disk,
	       (unsigned long long)chunks, (unsigned long long)reads,
	       reads ? (double)bytes / (double)reads : 0.0);
	CHECK(!all_disk || (from_disk == p->keys && mem == 0), "%s: %llu of %llu gets from disk, %llu from memory",
	      what, (unsigned long long)from_disk, (unsigned long long)p->keys,
	      (unsigned long long)mem);
	CHECK(bytes % align == 0, "%s: %llu bytes read, not whole %u-byte units", what,
	      (unsigned long long)bytes, align);
	if (small)
		CHECK(2 * bytes <= 3 * reads * (FIRST_READ_MIN + align),
		      "%s: %llu bytes in %llu reads: more than 1.5 x %u a read at alignment %u",
		      what, (unsigned long long)bytes, (unsigned long long)reads,
		      FIRST_READ_MIN + align, align);
}

/* Is key k's record small enough for the first read alone (value and key with
 * the header, well under FIRST_READ_MIN)? */
static int small_key(unsigned k) { return vlen_of[k] <= 200; }

static void pass_get(ember_db *db, ember_session *s, unsigned nkeys, uint32_t align,
		     int all_disk, int small_only, const char *what)
{
	uint8_t *buf = malloc(CAP);
	char kb[16];
	struct pass p;
	pass_begin(db, &p);
	for (unsigned k = 0; k < nkeys; k++) {
		if (small_only && !small_key(k))
			continue;
		int kl = key_of(k, kb);
		size_t vl = 0;
		/* a buffer of the value's size: no large-buffer first read (lookup.c note 5) */
		size_t cap = vlen_of[k] ? vlen_of[k] : 1;
		int rc = ember_get(s, kb, (size_t)kl, buf, cap, &vl);
		value_check(k, buf, vl, rc, what);
		p.keys++;
	}
	pass_end(db, &p, what, align, all_disk, small_only);
	free(buf);
}

static void pass_batch(ember_db *db, ember_session *s, unsigned nkeys, uint32_t align)
{
	char kb[BATCH][16];
	const void *keys[BATCH];
	size_t klens[BATCH], caps[BATCH], vlens[BATCH];
	void *bufs[BATCH];
	int status[BATCH];
	for (unsigned i = 0; i < BATCH; i++)
		bufs[i] = malloc(CAP);
	struct pass p;
	pass_begin(db, &p);
	for (unsigned k0 = 0; k0 < nkeys; k0 += BATCH) {
		unsigned n = nkeys - k0 < BATCH ? nkeys - k0 : BATCH;
		for (unsigned i = 0; i < n; i++) {
			klens[i] = (size_t)key_of(k0 + i, kb[i]);
			keys[i] = kb[i];
			caps[i] = CAP;
			vlens[i] = 0;
		}
		CHECK_OK(ember_get_batch(s, n, keys, klens, bufs, caps, vlens, status));
		for (unsigned i = 0; i < n; i++)
			value_check(k0 + i, bufs[i], vlens[i], status[i], "ember_get_batch");
		p.keys += n;
	}
	pass_end(db, &p, "ember_get_batch", align, 1, 0);
	for (unsigned i = 0; i < BATCH; i++)
		free(bufs[i]);
}

static void pass_async(ember_db *db, ember_session *s, unsigned nkeys, uint32_t align)
{
	ember_op ops[WINDOW];
	uint8_t *bufs[WINDOW];
	unsigned key[WINDOW];
	for (unsigned i = 0; i < WINDOW; i++)
		bufs[i] = malloc(CAP);
	struct pass p;
	pass_begin(db, &p);
	uint64_t pending = 0;
	char kb[16];
	for (unsigned k0 = 0; k0 < nkeys; k0 += WINDOW) {
		unsigned n = nkeys - k0 < WINDOW ? nkeys - k0 : WINDOW;
		for (unsigned i = 0; i < n; i++) {
			memset(&ops[i], 0, sizeof(ops[i]));
			key[i] = k0 + i;
			int kl = key_of(key[i], kb);
			int rc = ember_get_async(s, &ops[i], kb, (size_t)kl, bufs[i], CAP);
			CHECK(rc == 0 || rc == EMBER_EPENDING, "ember_get_async key%05u: %d (%s)", key[i],
			      rc, ember_strerror(rc));
			pending += rc == EMBER_EPENDING;
		}
		int w = ember_session_wait(s, EMBER_WAIT_ALL);
		CHECK(w >= 0, "ember_session_wait: %d (%s)", w, ember_strerror(w));
		for (unsigned i = 0; i < n; i++)
			value_check(key[i], bufs[i], ops[i].vlen, ops[i].status, "ember_get_async");
		p.keys += n;
	}
	CHECK(pending == p.keys, "%llu of %llu asynchronous gets went pending (all are on disk)",
	      (unsigned long long)pending, (unsigned long long)p.keys);
	pass_end(db, &p, "ember_get_async", align, 1, 0);
	for (unsigned i = 0; i < WINDOW; i++)
		free(bufs[i]);
}

/* ---- 3. the session's chunk copy ----------------------------------------------- */

static void chunk_copy_checks(ember_db *db, ember_session *s, unsigned nkeys)
{
	struct cold_index *ci = &db->cidx;
	unsigned from_disk = 0;
	char kb[64]; /* room past the key: gcc's bounds check of XXH3's loads */
	for (unsigned k = 0; k < nkeys; k++) {
		int kl = key_of(k, kb);
		uint64_t h = em_hash(kb, (size_t)kl), e1 = 0, e2 = 0;
		epoch_protect(db->ep, s->slot);
		uint64_t ca = ci_table_load(ci, ci_chunk_of(ci, h));
		int on_disk = ca && ca < hlog_load(&db->chunks->head);
		int rc1 = cold_entry_get(s, h, &e1);
		int read = s->rchunk == ca; /* the copy came from a disk read */
		int rc2 = cold_entry_get(s, h, &e2); /* from the session's copy */
		epoch_unprotect(db->ep, s->slot);
		CHECK(rc1 == 0 && rc2 == 0, "key%05u: cold_entry_get %d, %d", k, rc1, rc2);
		CHECK(e1 == e2, "key%05u: chunk entry %llx read, %llx from the session's copy", k,
		      (unsigned long long)e1, (unsigned long long)e2);
		if (on_disk) {
			CHECK(read, "key%05u: chunk at %llu on disk, not read", k, (unsigned long long)ca);
			from_disk += e1 != 0;
		}
	}
	printf("chunk copies read from disk and found again: %u\n", from_disk);
	CHECK(from_disk > 0, "no cold key's chunk was on disk");
}

static void open_store(const char *dir, int truncate, ember_db **db, ember_session **s)
{
	ember_options o;
	ember_options_default(&o);
	o.page_size = 64u << 10;
	o.log_memory = 1u << 20;         /* 16 pages: most records live on disk */
	o.hot_disk_budget = 64u << 20;   /* no compaction until asked */
	o.cold_log_memory = 512u << 10;  /* 8 pages */
	o.cold_index_chunks = 1u << 12; /* 2^17 chains: few shared by two keys */
	o.cold_cache_memory = EMBER_COLD_CACHE_OFF; /* cold gets read their chunk */
	o.flags = truncate ? EMBER_OPEN_TRUNCATE : 0;
	CHECK_OK(ember_open(dir, &o, db));
	CHECK_OK(ember_session_open(*db, s));
}

static void reopen(const char *dir, ember_db **db, ember_session **s)
{
	CHECK_OK(ember_session_close(*s));
	CHECK_OK(ember_close(*db)); /* a checkpoint: the reopen recovers every write */
	open_store(dir, 0, db, s);
}

int main(int argc, char **argv)
{
	tu_init("test_small_reads", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("smallrd", dir, sizeof(dir)) == 0, "tmpdir");
	uint32_t align = file_align_checks(dir);
	segment_fallback_checks(dir, align);

	unsigned nkeys = (unsigned)tu_scaled(KEYS);
	if (nkeys > KEYS)
		nkeys = KEYS;
	if (nkeys < 64)
		nkeys = 64;
	tu_rng *rng = tu_rng_global();
	ember_db *db;
	ember_session *s;
	open_store(dir, 1, &db, &s);
	uint8_t *v = malloc(CAP);
	/* The first half goes cold, the second stays hot. The last record of each
	 * half is large and ends its log's file (after the reopen), a small one just
	 * before it. */
	unsigned half = nkeys / 2;
	for (unsigned k = 0; k < nkeys; k++) {
		uint32_t len = k == half - 1 || k == nkeys - 1 ? 9000 : pick_len(rng);
		if (k == half - 2 || k == nkeys - 2)
			len = 40;
		put_key(s, k, len, 0, v);
		if (k != half - 1)
			continue;
		/* push the first half below head with padding, which then dies (a newer
		 * copy in memory), so that compaction copies the first half alone and
		 * the cold log ends with key half - 1 */
		char pk[16];
		for (unsigned i = 0; i < 2 * PAD_RECORDS; i++) {
			int pl = snprintf(pk, sizeof(pk), "pad%u", i % PAD_RECORDS);
			uint32_t plen = i < PAD_RECORDS ? PAD_BYTES : 8;
			fill(v, plen, 100000 + i, 0);
			CHECK_OK(ember_put(s, pk, (size_t)pl, v, plen));
		}
		CHECK_OK(ember_compact(db, 1));
	}
	pass_get(db, s, nkeys, align, 0, 0, "ember_get (open, hot and cold)");
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	CHECK(st.cold.records >= half, "%llu records went cold, want at least %u",
	      (unsigned long long)st.cold.records, half);

	/* everything on disk: the logs' files end with the last records written */
	reopen(dir, &db, &s);
	pass_get(db, s, nkeys, align, 1, 1, "ember_get small (reopened)");
	pass_get(db, s, nkeys, align, 1, 0, "ember_get (reopened)");
	pass_batch(db, s, nkeys, align);
	pass_async(db, s, nkeys, align);
	chunk_copy_checks(db, s, nkeys);

	/* updates, then a compaction that reads chunks on disk and large records
	 * taken by their heads (rec_read_at at the read alignment) */
	for (unsigned k = 0; k < nkeys; k += 3)
		put_key(s, k, pick_len(rng), 1, v);
	CHECK_OK(ember_compact(db, 1));
	pass_get(db, s, nkeys, align, 0, 0, "ember_get (updated, compacted)");
	reopen(dir, &db, &s);
	pass_get(db, s, nkeys, align, 1, 1, "ember_get small (reopened again)");
	pass_async(db, s, nkeys, align);
	pass_batch(db, s, nkeys, align);

	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	free(v);
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
