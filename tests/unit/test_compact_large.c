/*
 * test_compact_large.c - compaction over large, mostly overwritten values reads
 * what it keeps, not what it drops (compact.c note 6, lookup.c note 8).
 *
 * A store gets large values (512 KiB, over compaction's HEAD_MIN) rewritten many
 * times, a few large values written once (live, so copied to the cold log), and
 * small values between them. A forced pass over the hot log must then:
 *   - drop the dead versions without reading them: its disk reads (ember_stats)
 *     come to what it keeps plus under an eighth of the log bytes it gives up;
 *   - keep every key's newest value, byte for byte, before and after a reopen.
 * Damage, each on a fresh store, closed and reopened:
 *   - a dead large record's size field: the pass stops with EMBER_ECORRUPT
 *     (the scan lands in other data and the next head fails its checks), the
 *     hot log keeps its begin, and every key still reads its newest value;
 *   - a dead large record's value bytes: never read, so the pass succeeds;
 *   - a live large record's value bytes: its copy is checked, so the pass
 *     stops with EMBER_ECORRUPT and the key is not lost (reads report the damage).
 * With the hot log in segment files, a pass removes a whole segment and the next
 * segment created reuses its file (the same inode), and every key keeps its newest
 * value through more passes and a reopen; a segment file below the log's begin (as
 * a crash can bring one back) is removed by the reopen.
 * EMBER_OPEN_PREWRITE_LOG (segment.c invariant 6): the open writes spare segment
 * files for the hot log's budget, the log's first segments take them, close keeps
 * the rest and the next open with the flag takes them up without writing again
 * (one cut short while closed is replaced); an open without the flag removes them.
 * The flag without segments, or with a read-only open, is EMBER_EINVAL and
 * changes nothing (not even with EMBER_OPEN_TRUNCATE).
 * All checks are byte and I/O counts, not timings.
 */
#include <ember.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#define BIG (512u << 10)
#define NBIG 8   /* rewritten GENS times */
#define GENS 8
#define NSTAY 4  /* written once */
#define NSMALL 200
#define SMALL 1000

static void fill(uint8_t *v, size_t n, unsigned key, unsigned gen)
{
	for (size_t i = 0; i < n; i++)
		v[i] = (uint8_t)(0x80 | (key * 31 + gen * 7 + i * 13 + (i >> 9)));
}

static int with_segments; /* the hot log in 32 MiB segment files, recycled */

static void opts(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->log_memory = 8u << 20;        /* 8 pages: most versions go to disk */
	o->mutable_fraction = 0.125;     /* a rewrite is a new record, not an update in place */
	o->hot_disk_budget = 1ull << 30; /* no pass but the forced ones */
	if (with_segments) {
		o->log_segment_bytes = 32u << 20;
		o->hot_disk_budget = 96u << 20; /* 3 spare segment files at most */
	}
	o->flags = flags;
}

static void key_of(char *k, const char *kind, unsigned i) { snprintf(k, 32, "%s-%u", kind, i); }

/* The newest generation written of the rewritten large values. */
static unsigned last_gen = GENS - 1;
static unsigned big_gen(void) { return last_gen; }

/* Generations g0 .. g1 - 1 of the rewritten values (the small ones only in the
 * first GENS), each followed by a checkpoint. The checkpoint makes the log
 * immutable up to its tail, so every rewrite is a new record: without it, a
 * rewrite whose previous version the log worker had not yet turned read-only (a
 * loaded machine) updated it in place, the log came out one or more records
 * shorter, and the passes and segments below landed elsewhere.
 * It also leaves everything written on disk, so the segment files the checks
 * look for exist. */
static void write_gens(ember_db *db, ember_session *s, unsigned g0, unsigned g1)
{
	uint8_t *v = malloc(BIG);
	char k[32];
	for (unsigned g = g0; g < g1; g++) {
		for (unsigned i = 0; i < NBIG; i++) {
			key_of(k, "big", i);
			fill(v, BIG, i, g);
			CHECK_OK(ember_put(s, k, strlen(k), v, BIG));
		}
		for (unsigned i = g * (NSMALL / GENS); g < GENS && i < (g + 1) * (NSMALL / GENS); i++) {
			key_of(k, "small", i);
			fill(v, SMALL, 1000 + i, g);
			CHECK_OK(ember_put(s, k, strlen(k), v, SMALL));
		}
		last_gen = g;
		CHECK_OK(ember_checkpoint(db, NULL));
	}
	free(v);
}

static void build_flags(const char *dir, uint32_t flags)
{
	ember_options o;
	opts(&o, EMBER_OPEN_TRUNCATE | flags);
	ember_db *db;
	ember_session *s;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	uint8_t *v = malloc(BIG);
	char k[32];
	for (unsigned i = 0; i < NSTAY; i++) {
		key_of(k, "stay", i);
		fill(v, BIG, 100 + i, 0);
		CHECK_OK(ember_put(s, k, strlen(k), v, BIG));
	}
	free(v);
	write_gens(db, s, 0, GENS);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
}

static void build(const char *dir) { build_flags(dir, 0); }

/* Every key reads its newest value; returns how many reads failed with
 * EMBER_ECORRUPT (never a wrong value, never another error). */
static unsigned verify(ember_db *db)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t *v = malloc(BIG), *ref = malloc(BIG);
	char k[32];
	unsigned bad = 0;
	for (unsigned kind = 0; kind < 3; kind++) {
		unsigned n = kind == 0 ? NSTAY : kind == 1 ? NBIG : NSMALL;
		for (unsigned i = 0; i < n; i++) {
			key_of(k, kind == 0 ? "stay" : kind == 1 ? "big" : "small", i);
			size_t len = kind == 2 ? SMALL : BIG;
			unsigned seed = kind == 0 ? 100 + i : kind == 1 ? i : 1000 + i;
			unsigned gen = kind == 0 ? 0 : kind == 1 ? big_gen() : i / (NSMALL / GENS);
			size_t vl = 0;
			int rc = ember_get(s, k, strlen(k), v, BIG, &vl);
			if (rc == EMBER_ECORRUPT) {
				bad++;
				continue;
			}
			CHECK(rc == 0, "get %s: %d (%s)", k, rc, ember_strerror(rc));
			fill(ref, len, seed, gen);
			CHECK(vl == len && memcmp(v, ref, len) == 0, "get %s: wrong value (%zu bytes)", k, vl);
		}
	}
	free(v);
	free(ref);
	CHECK_OK(ember_session_close(s));
	return bad;
}

/* File offset of the first record of key k with a BIG value in the hot log. */
static off_t find_record(const char *dir, const char *k)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/hot.log", dir);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0, "open %s", path);
	off_t size = lseek(fd, 0, SEEK_END);
	uint8_t *buf = malloc((size_t)size);
	CHECK(pread(fd, buf, (size_t)size, 0) == size, "read %s", path);
	close(fd);
	size_t kl = strlen(k);
	off_t at = -1;
	for (off_t o = 64; o + 32 + (off_t)kl <= size && at < 0; o += 8) {
		uint32_t klen, vcap;
		memcpy(&klen, buf + o + 16, 4);
		memcpy(&vcap, buf + o + 24, 4);
		if (klen == kl && vcap == BIG && memcmp(buf + o + 32, k, kl) == 0)
			at = o;
	}
	free(buf);
	CHECK(at >= 0, "no record of %s in %s", k, path);
	return at;
}

static void poke(const char *dir, off_t off, const void *bytes, size_t n)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/hot.log", dir);
	int fd = open(path, O_WRONLY);
	CHECK(fd >= 0, "open %s", path);
	CHECK(pwrite(fd, bytes, n, off) == (ssize_t)n, "write %s", path);
	CHECK(fsync(fd) == 0, "fsync");
	close(fd);
}

static ember_db *reopen(const char *dir)
{
	ember_options o;
	opts(&o, 0);
	ember_db *db;
	CHECK_OK(ember_open(dir, &o, &db));
	return db;
}

static void test_reads_what_it_keeps(const char *dir)
{
	build(dir);
	ember_db *db = reopen(dir);
	CHECK(verify(db) == 0, "reads before the pass");
	ember_stats a, b;
	CHECK_OK(ember_stats_get(db, &a));
	CHECK_OK(ember_compact(db, 1));
	CHECK_OK(ember_stats_get(db, &b));
	uint64_t dropped = a.hot.bytes_disk - b.hot.bytes_disk;
	uint64_t read = b.compaction_bytes_read - a.compaction_bytes_read;
	uint64_t moved = b.hot.compaction_bytes_written - a.hot.compaction_bytes_written;
	printf("  hot log %llu -> %llu bytes; the pass read %llu bytes in %llu reads, moved %llu\n",
	       (unsigned long long)a.hot.bytes_disk, (unsigned long long)b.hot.bytes_disk,
	       (unsigned long long)read,
	       (unsigned long long)(b.compaction_disk_reads - a.compaction_disk_reads),
	       (unsigned long long)moved);
	CHECK(dropped >= (uint64_t)NBIG * (GENS - 2) * BIG, "the pass dropped only %llu bytes",
	      (unsigned long long)dropped);
	CHECK(moved >= (uint64_t)NSTAY * BIG, "the live large values were not moved (%llu bytes)",
	      (unsigned long long)moved);
	/* what it keeps is read whole (and checked); what it drops, only by its head */
	CHECK(read < moved + dropped / 8, "the pass read %llu bytes to keep %llu and drop %llu",
	      (unsigned long long)read, (unsigned long long)moved, (unsigned long long)dropped);
	CHECK(verify(db) == 0, "reads after the pass");
	CHECK_OK(ember_close(db));
	db = reopen(dir);
	CHECK(verify(db) == 0, "reads after a reopen");
	CHECK_OK(ember_close(db));
}

static void test_damaged_dead_size(const char *dir)
{
	build(dir);
	off_t at = find_record(dir, "big-0"); /* generation 0: dead */
	uint32_t vcap = BIG + (32u << 10);    /* plausible: a multiple of 8, under the largest */
	poke(dir, at + 24, &vcap, 4);
	ember_db *db = reopen(dir);
	ember_stats a, b;
	CHECK_OK(ember_stats_get(db, &a));
	CHECK_RC(ember_compact(db, 1), EMBER_ECORRUPT);
	CHECK_OK(ember_stats_get(db, &b));
	CHECK(b.hot.bytes_disk == a.hot.bytes_disk, "the hot log gave up space past damage");
	CHECK(verify(db) == 0, "reads after the failed pass");
	CHECK_OK(ember_close(db));
}

static void test_damaged_dead_value(const char *dir)
{
	build(dir);
	off_t at = find_record(dir, "big-1");
	uint8_t junk[64];
	memset(junk, 0x5a, sizeof(junk));
	poke(dir, at + 32 + 8 + 4096, junk, sizeof(junk));
	ember_db *db = reopen(dir);
	CHECK_OK(ember_compact(db, 1)); /* the dead value is dropped unread */
	CHECK(verify(db) == 0, "reads after the pass");
	CHECK_OK(ember_close(db));
}

static void test_damaged_live_value(const char *dir)
{
	build(dir);
	off_t at = find_record(dir, "stay-2"); /* written once: live */
	uint8_t junk[64];
	memset(junk, 0x5a, sizeof(junk));
	poke(dir, at + 32 + 8 + 4096, junk, sizeof(junk));
	ember_db *db = reopen(dir);
	CHECK_RC(ember_compact(db, 1), EMBER_ECORRUPT);
	CHECK(verify(db) == 1, "only stay-2 reads as damaged");
	CHECK_OK(ember_close(db));
}

static ino_t seg_ino(const char *dir, unsigned n)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/hot.log.%06u", dir, n);
	return (ino_t)tu_file_ino(p);
}

/* Segment files: the pass removes the first segment whole, and the segment the
 * next writes create reuses its file (segment.c invariant 5); every key keeps its
 * newest value through more passes and a reopen. */
static void test_recycled_segments(const char *dir)
{
	with_segments = 1;
	last_gen = GENS - 1;
	build(dir);
	ino_t first = seg_ino(dir, 0);
	CHECK(first && !seg_ino(dir, 2), "the log spans segments 0 and 1");
	ember_db *db = reopen(dir);
	CHECK_OK(ember_compact(db, 1));
	/* space goes back once a checkpoint no longer needs it (checkpoint.c note 7) */
	CHECK_OK(ember_checkpoint(db, NULL));
	CHECK_OK(ember_compact(db, 1));
	CHECK(!seg_ino(dir, 0), "the pass left segment 0");
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	write_gens(db, s, GENS, 2 * GENS); /* past 64 MiB: segment 2 */
	CHECK(seg_ino(dir, 2) == first, "segment 2 is not segment 0's file");
	CHECK(verify(db) == 0, "reads from the recycled segment");
	CHECK_OK(ember_compact(db, 1));
	CHECK_OK(ember_checkpoint(db, NULL));
	write_gens(db, s, 2 * GENS, 3 * GENS);
	CHECK_OK(ember_session_close(s));
	CHECK(verify(db) == 0, "reads after a second pass");
	CHECK_OK(ember_close(db));
	/* a segment below begin, as a crash before the directory's fsync brings one
	 * back: the reopen removes it (em_file_remove_below) */
	char stale[600];
	snprintf(stale, sizeof(stale), "%s/hot.log.%06u", dir, 0u);
	FILE *sf = fopen(stale, "w");
	CHECK(sf && fputs("a segment the crash brought back", sf) >= 0 && fclose(sf) == 0,
	      "plant %s", stale);
	db = reopen(dir);
	CHECK(!seg_ino(dir, 0), "the reopen kept a segment below the log's begin");
	CHECK(verify(db) == 0, "reads after a reopen");
	CHECK_OK(ember_close(db));
	with_segments = 0;
	last_gen = GENS - 1;
}

/* How many "hot.log.spare.*" files dir holds. */
static unsigned spares(const char *dir)
{
	DIR *d = opendir(dir);
	CHECK(d != NULL, "opendir %s", dir);
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		n += strncmp(e->d_name, "hot.log.spare.", 14) == 0;
	closedir(d);
	return n;
}

/* Spare k's inode if it is a whole 32 MiB segment with every block written, else 0. */
static ino_t spare_ino(const char *dir, unsigned k)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/hot.log.spare.%06u", dir, k);
	return (ino_t)tu_whole_file(p, 32u << 20);
}

static int open_flags(const char *dir, uint32_t flags, ember_db **db)
{
	ember_options o;
	opts(&o, flags);
	return ember_open(dir, &o, db);
}

static void test_prewrite(const char *dir)
{
	ember_db *db;
	last_gen = GENS - 1;
	/* bad uses, on a store in one file: nothing changes */
	with_segments = 0;
	build(dir);
	CHECK_RC(open_flags(dir, EMBER_OPEN_PREWRITE_LOG, &db), EMBER_EINVAL);
	CHECK_RC(open_flags(dir, EMBER_OPEN_PREWRITE_LOG | EMBER_OPEN_TRUNCATE, &db), EMBER_EINVAL);
	CHECK_RC(open_flags(dir, EMBER_OPEN_PREWRITE_LOG | EMBER_OPEN_READONLY, &db), EMBER_EINVAL);
	with_segments = 1;
	CHECK_RC(open_flags(dir, EMBER_OPEN_PREWRITE_LOG, &db), EMBER_EINVAL); /* the store's own */
	with_segments = 0;
	db = reopen(dir);
	CHECK(verify(db) == 0, "the store after the refused opens");
	CHECK_OK(ember_close(db));
	CHECK(spares(dir) == 0, "spares of a one-file store");

	/* a new store: the 96 MiB budget is 3 spares, written at open */
	with_segments = 1;
	CHECK_OK(open_flags(dir, EMBER_OPEN_TRUNCATE | EMBER_OPEN_PREWRITE_LOG, &db));
	CHECK(spares(dir) == 3 && spare_ino(dir, 0) && spare_ino(dir, 1) && spare_ino(dir, 2),
	      "spares after the open: %u", spares(dir));
	ino_t s1 = spare_ino(dir, 1), s2 = spare_ino(dir, 2);
	CHECK_OK(ember_close(db));
	CHECK(spares(dir) == 3, "close kept %u spares", spares(dir));
	/* the build (a truncating open: the spares are the directory's, not the
	 * store's) spans segments 0 and 1: they are the last two spares' files */
	build_flags(dir, EMBER_OPEN_PREWRITE_LOG);
	CHECK(seg_ino(dir, 0) == s2 && seg_ino(dir, 1) == s1, "the log's segments are not the spares");
	CHECK(spares(dir) == 1, "spares left: %u", spares(dir));
	ino_t s0 = spare_ino(dir, 0);
	CHECK(s0, "spare 0 kept");
	/* a recovering open with the flag takes the spare up, unwritten */
	CHECK_OK(open_flags(dir, EMBER_OPEN_PREWRITE_LOG, &db));
	CHECK(spares(dir) == 1 && spare_ino(dir, 0) == s0, "the kept spare was not taken up");
	CHECK(verify(db) == 0, "reads after the open that took the spare up");
	CHECK_OK(ember_close(db));
	/* a spare cut short while closed: removed, and a whole one written */
	char p[600];
	snprintf(p, sizeof(p), "%s/hot.log.spare.%06u", dir, 0);
	CHECK(truncate(p, 4096) == 0, "truncate the spare");
	CHECK_OK(open_flags(dir, EMBER_OPEN_PREWRITE_LOG, &db));
	CHECK(spares(dir) == 1 && spare_ino(dir, 0), "the short spare was not replaced");
	/* passes release segment 0 (a spare again), and new writes take spares */
	CHECK_OK(ember_compact(db, 1));
	CHECK_OK(ember_checkpoint(db, NULL));
	CHECK_OK(ember_compact(db, 1));
	CHECK(!seg_ino(dir, 0) && spares(dir) == 2, "segment 0 released: %u spares", spares(dir));
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	write_gens(db, s, GENS, 2 * GENS);
	CHECK_OK(ember_session_close(s));
	CHECK(spares(dir) == 1, "segment 2 took a spare: %u left", spares(dir));
	CHECK(verify(db) == 0, "reads after the passes");
	CHECK_OK(ember_close(db));
	/* an open without the flag gives the space back */
	db = reopen(dir);
	CHECK(spares(dir) == 0, "spares after an open without the flag: %u", spares(dir));
	CHECK(verify(db) == 0, "reads after a reopen");
	CHECK_OK(ember_close(db));
	with_segments = 0;
	last_gen = GENS - 1;
}

int main(int argc, char **argv)
{
	tu_init("test_compact_large", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("compact-large", dir, sizeof(dir)) == 0, "tmpdir");
	printf("reads what it keeps\n");
	test_reads_what_it_keeps(dir);
	printf("a dead record's size damaged\n");
	test_damaged_dead_size(dir);
	printf("a dead record's value damaged\n");
	test_damaged_dead_value(dir);
	printf("a live record's value damaged\n");
	test_damaged_live_value(dir);
	printf("recycled segment files\n");
	test_recycled_segments(dir);
	printf("segment files written ahead\n");
	test_prewrite(dir);
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
