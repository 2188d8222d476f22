/*
 * test_compact_space.c - what compaction gives back, not only what it keeps.
 *
 *  shadow   Keys pushed to the cold log, then all deleted: their tombstones stay in
 *           the hot log's memory. A forced cold->cold pass over the cold log's disk
 *           part copies none of their cold records (compact.c note 1: a cold record
 *           whose key has a hot record is dead), so deletes free cold space without
 *           waiting for their tombstones to leave the hot log.
 *  chunks   Cold inserts spread over many hash chunks leave the chunk log mostly
 *           dead copies (each insert into a chunk on disk writes a new copy,
 *           cold_index.h): here every key reaches the cold log twice. A
 *           forced pass copies only the copies the cold table names (compact.c
 *           note 4): afterwards the chunk log holds at most its memory ring plus
 *           one copy per chunk.
 * Both check reads too: the deleted keys read as absent, the live ones as written.
 */
#include <ember.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#define VAL 200
#define CHUNKS (1u << 12)
#define CHUNK_BYTES 128u
#define CHUNK_REC (32u + 8u + CHUNK_BYTES) /* header, key, value: docs/format.md */
#define RING (512u << 10)

static void opts_small(ember_options *o)
{
	ember_options_default(o);
	o->log_memory = RING; /* 8 pages: the least */
	o->page_size = 64u << 10;
	o->index_buckets = 1u << 12;
	o->cold_log_memory = RING;
	o->cold_index_chunks = CHUNKS;
	o->cold_chunk_bytes = CHUNK_BYTES;
	o->flags = EMBER_OPEN_TRUNCATE;
}

static ember_stats stats(ember_db *db)
{
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	return st;
}

static void fill(uint8_t *val, uint64_t k, uint64_t gen)
{
	for (size_t i = 0; i < VAL; i++)
		val[i] = (uint8_t)(k * 31 + gen * 7 + i);
}

static void put_range(ember_session *s, uint64_t from, uint64_t to, uint64_t gen)
{
	uint8_t val[VAL];
	for (uint64_t k = from; k < to; k++) {
		fill(val, k, gen);
		CHECK_OK(ember_put(s, &k, sizeof(k), val, sizeof(val)));
	}
}

static void check_range(ember_session *s, uint64_t from, uint64_t to, uint64_t gen)
{
	uint8_t val[VAL], got[VAL];
	for (uint64_t k = from; k < to; k += 5) { /* a sample: each read may go to disk */
		size_t len = 0;
		CHECK_OK(ember_get(s, &k, sizeof(k), got, sizeof(got), &len));
		fill(val, k, gen);
		CHECK(len == VAL && memcmp(got, val, VAL) == 0, "key %llu: wrong value",
		      (unsigned long long)k);
	}
}

/* Enough keys that most of them leave both logs' memory rings (512 KiB each). */
static uint64_t key_count(void)
{
	uint64_t n = tu_scaled(24000);
	return n < 12000 ? 12000 : n;
}

static void shadow(const char *dir)
{
	ember_options o;
	opts_small(&o);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint64_t n = key_count();
	put_range(s, 0, n, 1);
	CHECK_OK(ember_compact(db, 1)); /* hot -> cold, and cold->cold over its disk part */
	ember_stats st0 = stats(db);
	CHECK(st0.cold.records > n / 2, "only %llu of %llu keys reached the cold log",
	      (unsigned long long)st0.cold.records, (unsigned long long)n);
	CHECK(st0.cold.bytes_disk > st0.cold.bytes_memory,
	      "the cold log should be mostly on disk (%llu bytes, %llu in memory)",
	      (unsigned long long)st0.cold.bytes_disk, (unsigned long long)st0.cold.bytes_memory);
	check_range(s, 0, n, 1);

	for (uint64_t k = 0; k < n; k++)
		CHECK_OK(ember_delete(s, &k, sizeof(k)));
	CHECK_OK(ember_compact(db, 1));
	ember_stats st1 = stats(db);
	uint64_t copied = st1.cold.compaction_bytes_written - st0.cold.compaction_bytes_written;
	printf("shadow: n=%llu cold %llu -> %llu bytes on disk, cold->cold copied %llu bytes\n",
	       (unsigned long long)n, (unsigned long long)st0.cold.bytes_disk,
	       (unsigned long long)st1.cold.bytes_disk, (unsigned long long)copied);
	CHECK(st1.cold.compactions > st0.cold.compactions, "no cold->cold pass ran");
	CHECK(copied == 0, "cold->cold copied %llu bytes of deleted keys (a hot tombstone "
	      "makes their cold records dead)", (unsigned long long)copied);
	CHECK(st1.cold.bytes_disk < st0.cold.bytes_disk / 2,
	      "the cold log kept %llu of %llu bytes after every key was deleted",
	      (unsigned long long)st1.cold.bytes_disk, (unsigned long long)st0.cold.bytes_disk);
	for (uint64_t k = 0; k < n; k += 5) {
		size_t len = 0;
		uint8_t got[VAL];
		CHECK_RC(ember_get(s, &k, sizeof(k), got, sizeof(got), &len), EMBER_ENOTFOUND);
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
}

static void chunks(const char *dir)
{
	ember_options o;
	opts_small(&o);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint64_t n = key_count();
	/* every key pushed to the cold log twice: the second time rewrites every
	 * chunk again, leaving the copies the first made dead, and the pass over the
	 * chunk log that follows in the same ember_compact finds them below its head */
	for (uint64_t gen = 2; gen <= 3; gen++) {
		put_range(s, 0, n, gen);
		CHECK_OK(ember_compact(db, 1));
	}
	ember_stats st = stats(db);
	uint64_t bound = RING + (uint64_t)CHUNKS * CHUNK_REC + (64u << 10);
	printf("chunks: n=%llu chunk log %llu bytes on disk (bound %llu)\n", (unsigned long long)n,
	       (unsigned long long)st.chunk_log_bytes_disk, (unsigned long long)bound);
	CHECK(st.chunk_log_bytes_disk <= bound,
	      "after a forced pass the chunk log holds %llu bytes, more than its ring and one copy "
	      "of each chunk (%llu): dead chunk copies were kept",
	      (unsigned long long)st.chunk_log_bytes_disk, (unsigned long long)bound);
	check_range(s, 0, n, 3);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
}

int main(int argc, char **argv)
{
	tu_init("test_compact_space", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("compact-space", dir, sizeof(dir)) == 0, "mkdtemp");
	double t0 = tu_now();
	shadow(dir);
	double t1 = tu_now();
	chunks(dir);
	printf("shadow %.2f s, chunks %.2f s\n", t1 - t0, tu_now() - t1);
	CHECK(tu_tmpdir_remove(dir) == 0, "rmdir");
	printf("OK\n");
	return 0;
}
