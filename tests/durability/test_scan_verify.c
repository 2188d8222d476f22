/*
 * test_scan_verify.c - ember_verify finds damage in every log, one behaviour per
 * mode:
 *
 *   live     a store with records on disk in hot.log, cold.log and cold.idx passes;
 *            then, one at a time, a byte is flipped in the file under the open store
 *            (below each log's head, so verify reads it from disk):
 *              - a key byte of a hot.log record, then of a cold.log record: exactly
 *                one error (checksum), at that record's offset, one record fewer
 *                checked (the walk resynchronises on the next record);
 *              - the key length of a hot.log record: one error (structure), and the
 *                walk still checks the rest;
 *              - an entry byte of a live cold.idx chunk: the chunk log's record and
 *                the table word naming it both fail;
 *            ember_error_detail names the place, ember_iterate over the damaged hot
 *            record returns EMBER_ECORRUPT; after the byte is restored all passes.
 *   damage   larger damage on a live store: 64 KiB of hot.log zeroed (one error; the
 *            walk resynchronises after the hole and checks the rest), then hot.log
 *            truncated in the middle of its disk part once its flush has settled
 *            (one error: the file ends inside a record; the walk goes on in
 *            memory; nothing wrote past the cut); iterate reports
 *            EMBER_ECORRUPT for both, nothing crashes or hangs.
 *   reopen   the store is closed, a byte of a hot.log record flipped, and the store
 *            opened again: the open fails with EMBER_ECORRUPT (recovery read the
 *            record), or verify finds the record.
 *
 * Offsets are found by scanning the files for the keys' bytes (the keys are
 * unique strings, the values random bytes); the logs' boundaries come from the
 * store's internals.
 */
#include <ember.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_int.h"
#include "test_util.h"

#define KEY_PREFIX "vkey"

/* The store's log lines (db_report): kept, not printed. */
static char last_line[512];
static void log_line(void *arg, const char *line)
{
	(void)arg;
	snprintf(last_line, sizeof(last_line), "%s", line);
}

static void opts_small(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 512u << 10;
	o->cold_log_memory = 512u << 10;
	o->hot_disk_budget = 2u << 20;   /* hot->cold passes while loading */
	o->cold_disk_budget = 64u << 20; /* no cold->cold pass */
	o->index_buckets = 1u << 12;
	o->cold_index_chunks = 1u << 13; /* chunks overflow the chunk log's memory */
	o->cold_chunk_bytes = 64;
	o->io_queue_depth = 32;
	o->flags = flags;
	o->log_fn = log_line;
}

static void load(ember_db *db, uint64_t n)
{
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	tu_rng *r = tu_rng_global();
	uint8_t v[256];
	for (uint64_t i = 0; i < n; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), KEY_PREFIX "%08llu", (unsigned long long)i);
		size_t vl = tu_rng_range(r, 100, 200);
		tu_rng_fill(r, v, vl);
		CHECK_OK(ember_put(s, k, (size_t)kl, v, vl));
	}
	CHECK_OK(ember_session_close(s));
	/* let running passes end; no more are due without writes */
	CHECK_OK(ember_compact(db, 0));
	CHECK_OK(ember_compact(db, 0));
}

static void file_path(const char *dir, const char *name, char *out, size_t cap)
{
	CHECK_OK(tu_path_join(out, cap, dir, name));
}

/* Read-modify-write one byte of a file through an aligned block (O_DIRECT where the
 * file system allows: the store reads with O_DIRECT). Returns the old byte. */
static uint8_t poke(const char *path, uint64_t off, uint8_t xor_mask)
{
	int fd = open(path, O_RDWR | O_DIRECT);
	if (fd < 0)
		fd = open(path, O_RDWR);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	uint8_t *blk = NULL;
	CHECK(posix_memalign((void **)&blk, 4096, 4096) == 0, "posix_memalign");
	uint64_t base = off & ~(uint64_t)4095;
	CHECK(pread(fd, blk, 4096, (off_t)base) == 4096, "pread %s: %s", path, strerror(errno));
	uint8_t old = blk[off - base];
	blk[off - base] ^= xor_mask;
	CHECK(pwrite(fd, blk, 4096, (off_t)base) == 4096, "pwrite %s: %s", path, strerror(errno));
	CHECK(fdatasync(fd) == 0, "fdatasync");
	close(fd);
	free(blk);
	return old;
}

/* The file offset of the first record whose key starts with KEY_PREFIX in
 * [from, to) of a log file: where the key's bytes are, minus the header. */
static uint64_t find_record(const char *path, uint64_t from, uint64_t to)
{
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0, "open %s", path);
	size_t len = (size_t)(to - from);
	uint8_t *buf = malloc(len + 1);
	CHECK(buf, "malloc");
	CHECK(pread(fd, buf, len, (off_t)from) == (ssize_t)len, "pread %s", path);
	close(fd);
	uint64_t found = 0;
	for (size_t i = REC_HDR_SIZE; i + 12 <= len; i += 8) { /* keys are 8-aligned */
		if (memcmp(buf + i, KEY_PREFIX, 4) == 0) {
			found = from + i - REC_HDR_SIZE;
			break;
		}
	}
	free(buf);
	CHECK(found, "no record found in %s [%" PRIu64 ", %" PRIu64 ")", path, from, to);
	return found;
}

static void verify_ok(ember_db *db, ember_verify_report *rep, const char *when)
{
	int rc = ember_verify(db, rep);
	CHECK(rc == 0 && rep->errors == 0, "%s: verify %s, %" PRIu64 " errors: %s", when,
	      ember_strerror(rc), rep->errors, rep->first_error);
}

/* Verify must fail with `errors` errors, the first at `name offset off`. */
static void verify_bad(ember_db *db, uint64_t errors, const char *name, uint64_t off,
		       const char *what, uint64_t good_records, ember_verify_report *rep)
{
	char want[128];
	snprintf(want, sizeof(want), "%s offset %" PRIu64 ": ", name, off);
	CHECK_RC(ember_verify(db, rep), EMBER_ECORRUPT);
	printf("    found: %s (%" PRIu64 " errors)\n", rep->first_error, rep->errors);
	CHECK(rep->errors == errors, "%" PRIu64 " errors, want %" PRIu64 ": %s", rep->errors,
	      errors, rep->first_error);
	CHECK(strncmp(rep->first_error, want, strlen(want)) == 0, "first error \"%s\", want \"%s...\"",
	      rep->first_error, want);
	CHECK(strstr(rep->first_error, what), "first error \"%s\" does not say \"%s\"",
	      rep->first_error, what);
	CHECK(rep->records == good_records - 1, "%" PRIu64 " records checked, want %" PRIu64,
	      rep->records, good_records - 1);
	char detail[256];
	CHECK_OK(ember_error_detail(db, detail, sizeof(detail)));
	CHECK(strstr(detail, want), "error detail \"%s\" does not name \"%s\"", detail, want);
	CHECK(strstr(last_line, want), "log line \"%s\" does not name \"%s\"", last_line, want);
}

static int count_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	(*(uint64_t *)arg)++;
	return 0;
}

static void test_live(void)
{
	char dir[256], path[512];
	CHECK_OK(tu_tmpdir_make("scan-verify", dir, sizeof(dir)));
	ember_options o;
	opts_small(&o, EMBER_OPEN_TRUNCATE);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	uint64_t n = tu_scaled(30000);
	if (n < 20000)
		n = 20000; /* the chunk log must overflow its memory */
	load(db, n);

	ember_verify_report good;
	verify_ok(db, &good, "loaded");
	printf("  good store: %" PRIu64 " records, %" PRIu64 " bytes, %" PRIu64 " chunks\n",
	       good.records, good.bytes, good.chunks);
	CHECK(good.records >= n && good.chunks > 0, "verify checked too little");
	uint64_t keys = 0;
	CHECK_OK(ember_iterate(db, count_fn, &keys));
	CHECK(keys == n, "%" PRIu64 " keys", keys);

	/* every log has records on disk, below its head */
	uint64_t hot_b = hlog_load(&db->hot->begin), hot_h = hlog_load(&db->hot->head);
	uint64_t cold_b = hlog_load(&db->cold->begin), cold_h = hlog_load(&db->cold->head);
	uint64_t ch_b = hlog_load(&db->chunks->begin), ch_h = hlog_load(&db->chunks->head);
	printf("  hot [%" PRIu64 ", head %" PRIu64 "), cold [%" PRIu64 ", head %" PRIu64
	       "), chunks [%" PRIu64 ", head %" PRIu64 ")\n",
	       hot_b, hot_h, cold_b, cold_h, ch_b, ch_h);
	CHECK(hot_h > hot_b + 65536 && cold_h > cold_b + 65536 && ch_h > ch_b + 65536,
	      "a log has too little on disk");

	/* hot.log: a key byte */
	file_path(dir, "hot.log", path, sizeof(path));
	uint64_t a = find_record(path, hot_b + 4096, hot_h - 8192);
	printf("  hot.log record at %" PRIu64 ": flip a key byte\n", a);
	uint8_t old = poke(path, a + REC_HDR_SIZE + 5, 0x10);
	verify_bad(db, 1, "hot.log", a, "checksum mismatch", good.records, &good);
	CHECK_RC(ember_iterate(db, count_fn, &keys), EMBER_ECORRUPT);
	char detail[256];
	CHECK_OK(ember_error_detail(db, detail, sizeof(detail)));
	CHECK(strstr(detail, "hot.log offset"), "iterate's detail: %s", detail);
	poke(path, a + REC_HDR_SIZE + 5, 0x10);
	(void)old;
	verify_ok(db, &good, "hot.log restored");

	/* hot.log: the key length (a structure failure; the walk resynchronises) */
	printf("  hot.log record at %" PRIu64 ": corrupt its key length\n", a);
	poke(path, a + 16 + 2, 0x40); /* key_len += 4 MiB */
	verify_bad(db, 1, "hot.log", a, "key length out of range", good.records, &good);
	poke(path, a + 16 + 2, 0x40);
	verify_ok(db, &good, "key length restored");

	/* cold.log: a key byte */
	file_path(dir, "cold.log", path, sizeof(path));
	a = find_record(path, cold_b + 4096, cold_h - 8192);
	printf("  cold.log record at %" PRIu64 ": flip a key byte\n", a);
	poke(path, a + REC_HDR_SIZE + 6, 0x01);
	verify_bad(db, 1, "cold.log", a, "checksum mismatch", good.records, &good);
	poke(path, a + REC_HDR_SIZE + 6, 0x01);
	verify_ok(db, &good, "cold.log restored");

	/* cold.idx: an entry byte of a chunk the table names, on disk */
	uint64_t id = 0, w = 0;
	for (; id < db->cidx.nchunks; id++) {
		w = ci_table_load(&db->cidx, id);
		if (w >= ch_b + 4096 && w + 4096 < ch_h)
			break;
	}
	CHECK(id < db->cidx.nchunks, "no chunk on disk");
	file_path(dir, "cold.idx", path, sizeof(path));
	printf("  cold.idx chunk %" PRIu64 " at %" PRIu64 ": flip an entry byte\n", id, w);
	poke(path, w + REC_HDR_SIZE + 8 + 3, 0x80);
	verify_bad(db, 2, "cold.idx", w, "checksum mismatch", good.records, &good);
	poke(path, w + REC_HDR_SIZE + 8 + 3, 0x80);
	verify_ok(db, &good, "cold.idx restored");

	keys = 0;
	CHECK_OK(ember_iterate(db, count_fn, &keys));
	CHECK(keys == n, "%" PRIu64 " keys after the repairs", keys);
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

/* Write len zero bytes at off (block aligned) under the open store. */
static void zero_range(const char *path, uint64_t off, uint64_t len)
{
	int fd = open(path, O_RDWR | O_DIRECT);
	if (fd < 0)
		fd = open(path, O_RDWR);
	CHECK(fd >= 0, "open %s", path);
	uint8_t *z = NULL;
	CHECK(posix_memalign((void **)&z, 4096, len) == 0, "posix_memalign");
	memset(z, 0, len);
	CHECK(pwrite(fd, z, len, (off_t)off) == (ssize_t)len, "pwrite");
	CHECK(fdatasync(fd) == 0, "fdatasync");
	close(fd);
	free(z);
}

/* Wait until the hot log's worker has written everything below read_only: a flush
 * still in flight when the test cuts hot.log would write past the cut and leave a
 * sparse gap where the file should end (the walk then reads zeros, a checksum
 * error, instead of the end of the file). Nothing moves read_only afterwards: the
 * test writes nothing more and no compaction runs. */
static void wait_flushed(ember_db *db)
{
	struct hlog *l = db->hot;
	for (int i = 0; i < 10000; i++) {
		uint64_t ro = hlog_load(&l->read_only);
		if (hlog_load(&l->safe_read_only) == ro && hlog_load(&l->flushed) >= ro)
			return;
		usleep(1000);
	}
	CHECK(0, "the hot log's flush did not reach read_only in 10 s");
}

static off_t file_size(const char *path)
{
	struct stat st;
	CHECK(stat(path, &st) == 0, "stat %s: %s", path, strerror(errno));
	return st.st_size;
}

static void test_damage(void)
{
	char dir[256], path[512];
	CHECK_OK(tu_tmpdir_make("scan-damage", dir, sizeof(dir)));
	ember_options o;
	opts_small(&o, EMBER_OPEN_TRUNCATE);
	o.hot_disk_budget = 64u << 20; /* everything stays in the hot log */
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	load(db, 20000);
	ember_verify_report good, rep;
	verify_ok(db, &good, "loaded");
	uint64_t hot_b = hlog_load(&db->hot->begin), hot_h = hlog_load(&db->hot->head);
	CHECK(hot_h > hot_b + (1u << 20), "too little of the hot log on disk");
	file_path(dir, "hot.log", path, sizeof(path));

	/* a hole of 64 KiB in the middle of the disk part */
	uint64_t hole = (hot_b + (hot_h - hot_b) / 2) & ~(uint64_t)4095;
	zero_range(path, hole, 64u << 10);
	CHECK_RC(ember_verify(db, &rep), EMBER_ECORRUPT);
	printf("  64 KiB zeroed at %" PRIu64 ": %s (%" PRIu64 " errors, %" PRIu64 " of %" PRIu64
	       " records checked)\n", hole, rep.first_error, rep.errors, rep.records, good.records);
	CHECK(rep.errors == 1, "%" PRIu64 " errors for one hole", rep.errors);
	CHECK(strncmp(rep.first_error, "hot.log offset ", 15) == 0, "%s", rep.first_error);
	uint64_t at = strtoull(rep.first_error + 15, NULL, 10);
	CHECK(at >= hole - 70000 && at < hole + 4096, "the error at %" PRIu64 " is not at the hole", at);
	/* the records after the hole were checked: at most the hole's worth are missing */
	CHECK(rep.records < good.records && rep.records + 400 > good.records,
	      "%" PRIu64 " records checked of %" PRIu64, rep.records, good.records);
	uint64_t n = 0;
	CHECK_RC(ember_iterate(db, count_fn, &n), EMBER_ECORRUPT);

	/* the file cut in the middle of the disk part, once no flush is in flight */
	wait_flushed(db);
	CHECK(truncate(path, (off_t)hole) == 0, "truncate: %s", strerror(errno));
	CHECK_RC(ember_verify(db, &rep), EMBER_ECORRUPT);
	CHECK(file_size(path) == (off_t)hole, "hot.log was written after the cut: %lld bytes, cut at %" PRIu64,
	      (long long)file_size(path), hole);
	printf("  truncated at %" PRIu64 ": %s (%" PRIu64 " errors, %" PRIu64 " records checked)\n",
	       hole, rep.first_error, rep.errors, rep.records);
	CHECK(rep.errors == 1, "%" PRIu64 " errors for one cut", rep.errors);
	CHECK(strstr(rep.first_error, "hot.log offset") && strstr(rep.first_error, "file ends"),
	      "%s", rep.first_error);
	CHECK(rep.records < good.records, "the cut hid nothing");
	CHECK_RC(ember_iterate(db, count_fn, &n), EMBER_ECORRUPT);
	/* closing a store whose file was cut under it may fail its final checkpoint;
	 * it must return, not crash or hang */
	int rc = ember_close(db);
	printf("  close: %s\n", ember_strerror(rc));
	tu_tmpdir_remove(dir);
}

static void test_reopen(void)
{
	char dir[256], path[512];
	CHECK_OK(tu_tmpdir_make("scan-reopen", dir, sizeof(dir)));
	ember_options o;
	opts_small(&o, EMBER_OPEN_TRUNCATE);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	load(db, 20000);
	uint64_t hot_b = hlog_load(&db->hot->begin), hot_h = hlog_load(&db->hot->head);
	CHECK_OK(ember_close(db));
	opts_small(&o, 0);
	CHECK_OK(ember_open(dir, &o, &db));
	ember_verify_report good;
	verify_ok(db, &good, "reopened");
	CHECK_OK(ember_close(db));

	file_path(dir, "hot.log", path, sizeof(path));
	uint64_t a = find_record(path, hot_b + 4096, hot_h - 8192);
	printf("  hot.log record at %" PRIu64 ": flip a value byte, reopen\n", a);
	poke(path, a + REC_HDR_SIZE + 16 + 9, 0x04);
	int rc = ember_open(dir, &o, &db);
	if (rc == EMBER_ECORRUPT) {
		printf("  the open found it: %s\n", ember_strerror(rc));
	} else {
		CHECK_OK(rc);
		ember_verify_report rep;
		char want[64];
		snprintf(want, sizeof(want), "hot.log offset %" PRIu64 ": ", a);
		CHECK_RC(ember_verify(db, &rep), EMBER_ECORRUPT);
		printf("    found: %s\n", rep.first_error);
		CHECK(rep.errors == 1 && strncmp(rep.first_error, want, strlen(want)) == 0,
		      "%" PRIu64 " errors, first %s", rep.errors, rep.first_error);
		CHECK_OK(ember_close(db));
	}
	tu_tmpdir_remove(dir);
}

int main(int argc, char **argv)
{
	tu_init("scan_verify", argc, argv);
	const char *mode = argc > 1 ? argv[1] : "live";
	if (!strcmp(mode, "live"))
		test_live();
	else if (!strcmp(mode, "damage"))
		test_damage();
	else if (!strcmp(mode, "reopen"))
		test_reopen();
	else
		CHECK(0, "unknown mode %s", mode);
	printf("scan_verify %s: ok\n", mode);
	return 0;
}
