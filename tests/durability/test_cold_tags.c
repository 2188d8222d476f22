/*
 * test_cold_tags.c - the cold index's tagged entries (cold_index.h note 10) against
 * the untagged ones of format versions 2 and 3, through the public API:
 *
 *   - a new store is format version 4 and its index is tagged;
 *   - a store whose superblock says version 2 or 3 (rewritten before any data, so
 *     that its files are those of that version) stays untagged through writes,
 *     compaction and reopens;
 *   - in both, every key reads back after its records went to the cold log, after
 *     half of them were overwritten and compacted again, and after a reopen, and
 *     ember_verify finds nothing;
 *   - with about one cold key per entry (the driver's cold_index_chunks = keys /
 *     32), a tagged index reads at most 1.1 cold records per read that the cold
 *     log's disk part answers (the key's own, and chain hops only for the keys
 *     of a full chunk or a shared tag), an untagged one clearly more (a hop past
 *     every newer key of its entry).
 */
#include <ember.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "store/store_int.h"
#include "test_util.h"

#define VAL 100

static void options(ember_options *o, uint64_t keys, uint64_t seg, int truncate)
{
	ember_options_default(o);
	o->log_memory = 512u << 10; /* 8 pages: the smallest hot log */
	o->cold_log_memory = 512u << 10; /* cold records on disk: their reads count */
	o->page_size = 64u << 10;
	o->index_buckets = 1u << 12;
	o->log_segment_bytes = seg;
	uint64_t chunks = 1;
	while (chunks * 32 < keys)
		chunks <<= 1;
	o->cold_index_chunks = chunks; /* about one cold key per entry */
	o->cold_chunk_bytes = 256;
	o->flags = truncate ? EMBER_OPEN_TRUNCATE : 0;
}

static void value_of(uint64_t k, uint32_t round, uint8_t *v)
{
	for (uint32_t i = 0; i < VAL; i += 4) {
		uint32_t w = (uint32_t)(k * 2654435761u) ^ (round << 24) ^ i;
		memcpy(v + i, &w, 4);
	}
}

static void write_keys(ember_db *db, uint32_t round, uint64_t from, uint64_t to, uint64_t step)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t v[VAL];
	for (uint64_t k = from; k < to; k += step) {
		value_of(k, round, v);
		CHECK_OK(ember_put(s, &k, sizeof(k), v, VAL));
	}
	CHECK_OK(ember_session_close(s));
}

/* Read every key (odd keys of round `odd_round`, even ones of round 0), BATCH keys
 * in flight at a time; returns cold record reads per read that the cold log's disk
 * part answered. */
#define BATCH 64
static double read_keys(ember_db *db, uint64_t n, uint32_t odd_round)
{
	ember_stats a, b;
	CHECK_OK(ember_stats_get(db, &a));
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	static uint8_t got[BATCH][VAL];
	uint64_t ks[BATCH];
	const void *keys[BATCH];
	void *bufs[BATCH];
	size_t klens[BATCH], caps[BATCH], vlens[BATCH];
	int status[BATCH];
	for (uint64_t k0 = 0; k0 < n; k0 += BATCH) {
		size_t m = n - k0 < BATCH ? (size_t)(n - k0) : BATCH;
		for (size_t i = 0; i < m; i++) {
			ks[i] = k0 + i;
			keys[i] = &ks[i];
			klens[i] = sizeof(ks[i]);
			bufs[i] = got[i];
			caps[i] = VAL;
		}
		CHECK_OK(ember_get_batch(s, m, keys, klens, bufs, caps, vlens, status));
		for (size_t i = 0; i < m; i++) {
			uint64_t k = ks[i];
			uint8_t v[VAL];
			value_of(k, (k & 1) ? odd_round : 0, v);
			CHECK(status[i] == 0, "key %llu: %s", (unsigned long long)k,
			      ember_strerror(status[i]));
			CHECK(vlens[i] == VAL && memcmp(got[i], v, VAL) == 0, "key %llu: wrong value",
			      (unsigned long long)k);
		}
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_stats_get(db, &b));
	/* every cold record read is either the answer of a read served from the cold
	 * log's disk part or a hop past another key's record on the way to one */
	uint64_t answers = b.cold.reads_disk - a.cold.reads_disk;
	uint64_t recs = b.cold_record_reads - a.cold_record_reads;
	CHECK(answers > n / 4, "reads served by the cold log on disk: %llu of %llu",
	      (unsigned long long)answers, (unsigned long long)n);
	return (double)recs / (double)answers;
}

/* Rewrite the superblock's format version (and its checksum). */
static void set_version(const char *dir, uint32_t version)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/ember.super", dir);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0, "open %s", p);
	uint8_t sb[4096];
	CHECK(pread(fd, sb, sizeof(sb), 0) == (ssize_t)sizeof(sb), "read superblock");
	uint32_t was;
	memcpy(&was, sb + 8, 4);
	CHECK(was == 4, "a new store is format version 4, not %u", was);
	memcpy(sb + 8, &version, 4);
	uint64_t sum = XXH3_64bits(sb, sizeof(sb) - 8);
	memcpy(sb + sizeof(sb) - 8, &sum, 8);
	CHECK(pwrite(fd, sb, sizeof(sb), 0) == (ssize_t)sizeof(sb), "write superblock");
	CHECK(fsync(fd) == 0, "fsync");
	close(fd);
}

/* One store of format version (2, 3 or 4): returns record reads per cold lookup of
 * its first full read. */
static double run(const char *dir, uint32_t version, uint64_t n)
{
	ember_options o;
	ember_db *db;
	uint64_t seg = version == 2 ? 0 : UINT64_C(32) << 20;
	options(&o, n, seg, 1);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK(db->cidx.tagged == 1, "a new store's index is tagged");
	CHECK_OK(ember_close(db));
	if (version != 4)
		set_version(dir, version);
	options(&o, n, seg, 0);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK(db->cidx.tagged == (version == 4), "version %u: tagged %u", version, db->cidx.tagged);
	write_keys(db, 0, 0, n, 1);
	CHECK_OK(ember_compact(db, 1)); /* hot -> cold: every record on disk */
	double per = read_keys(db, n, 0);
	/* the odd keys again: a newer record in front of the older one of each */
	write_keys(db, 1, 1, n, 2);
	CHECK_OK(ember_compact(db, 1));
	double again = read_keys(db, n, 1);
	CHECK_OK(ember_checkpoint(db, NULL));
	CHECK_OK(ember_close(db));
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK(db->cidx.tagged == (version == 4), "reopened: version %u, tagged %u", version,
	      db->cidx.tagged);
	(void)read_keys(db, n, 1);
	ember_verify_report rep;
	CHECK_OK(ember_verify(db, &rep));
	CHECK_OK(ember_close(db));
	printf("version %u (%s): %.3f cold record reads per read answered from the cold log's "
	       "disk, %.3f after the overwrites\n", version, version == 4 ? "tagged" : "untagged", per, again);
	return per;
}

int main(int argc, char **argv)
{
	tu_init("test_cold_tags", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("cold-tags", dir, sizeof(dir)) == 0, "tmpdir");
	uint64_t n = tu_scaled(32000);
	if (n < 12000)
		n = 12000; /* most keys cold, and enough of them for the chains' statistics */
	double tagged = run(dir, 4, n);
	double v2 = run(dir, 2, n);
	(void)run(dir, 3, 12000); /* version 3: segment files, the same index as 2 */
	CHECK(tagged <= 1.10, "tagged: %.3f cold record reads per cold disk read (at most 1.1)",
	      tagged);
	CHECK(v2 > tagged + 0.1, "untagged chains are shared: %.3f against %.3f tagged", v2, tagged);
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
