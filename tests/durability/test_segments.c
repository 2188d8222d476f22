/*
 * test_segments.c - a store whose logs are segment files (log_segment_bytes):
 *
 *   - 48 MiB of values through an 8 MiB hot log: hot.log.000000 and 000001 exist
 *     and no hot.log; the superblock says format version 4 and the segment size;
 *   - checkpoint, close, reopen asking for another segment size (the store keeps
 *     its own), every key read back, more written, reopened again and read;
 *   - the newest hot segment moved away: the reopen fails (-ENOENT), with a line
 *     naming the log, and succeeds once it is back;
 *   - the same directory recreated (EMBER_OPEN_TRUNCATE) as a one-file store: the
 *     segment files are gone; and back to segments: hot.log is gone;
 *   - bad sizes: under 32 MiB, not a power of two, over 1 TiB: EMBER_EINVAL.
 */
#include <ember.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#define SEG (UINT64_C(32) << 20)
#define KEYS 12000u
#define VAL 4000u

static char lines[4096];

static void log_line(void *arg, const char *line)
{
	(void)arg;
	size_t n = strlen(lines);
	snprintf(lines + n, sizeof(lines) - n, "%s\n", line);
}

static void options(ember_options *o, uint64_t seg, int truncate)
{
	ember_options_default(o);
	o->log_memory = 8u << 20;
	o->page_size = 256u << 10;
	o->index_buckets = 1u << 14;
	o->log_segment_bytes = seg;
	o->flags = truncate ? EMBER_OPEN_TRUNCATE : 0;
	o->log_fn = log_line;
}

static int exists(const char *dir, const char *name)
{
	char p[4300];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &st) == 0;
}

static void value_of(uint64_t k, uint32_t round, uint8_t *v)
{
	for (uint32_t i = 0; i < VAL; i += 8) {
		uint64_t w = (k * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)round << 40) ^ i;
		memcpy(v + i, &w, 8);
	}
}

static void write_all(ember_db *db, uint32_t round, uint32_t from, uint32_t to)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	static uint8_t v[VAL];
	for (uint64_t k = from; k < to; k++) {
		value_of(k, round, v);
		CHECK_OK(ember_put(s, &k, sizeof(k), v, VAL));
	}
	CHECK_OK(ember_session_close(s));
}

static void read_all(ember_db *db, uint32_t round, uint32_t until_new)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	static uint8_t v[VAL], got[VAL];
	for (uint64_t k = 0; k < KEYS; k++) {
		size_t len = 0;
		value_of(k, k < until_new ? round : 0, v);
		CHECK_OK(ember_get(s, &k, sizeof(k), got, sizeof(got), &len));
		CHECK(len == VAL && memcmp(got, v, VAL) == 0, "key %llu differs",
		      (unsigned long long)k);
	}
	CHECK_OK(ember_session_close(s));
}

static void superblock(const char *dir, uint32_t *version, uint64_t *seg)
{
	char p[4300];
	snprintf(p, sizeof(p), "%s/ember.super", dir);
	FILE *f = fopen(p, "rb");
	CHECK(f != NULL, "ember.super");
	uint8_t b[80];
	CHECK(fread(b, 1, sizeof(b), f) == sizeof(b), "superblock read");
	fclose(f);
	memcpy(version, b + 8, 4);
	memcpy(seg, b + 72, 8);
}

int main(int argc, char **argv)
{
	tu_init("test_segments", argc, argv);
	char dir[4096];
	CHECK(tu_tmpdir_make("segments", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	ember_db *db;

	/* bad sizes */
	uint64_t bad[] = {1, SEG / 2, SEG + 4096, 3 * SEG, UINT64_C(1) << 41};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		options(&o, bad[i], 1);
		CHECK(ember_open(dir, &o, &db) == EMBER_EINVAL, "log_segment_bytes %llu accepted",
		      (unsigned long long)bad[i]);
	}

	/* a new segmented store */
	options(&o, SEG, 1);
	CHECK_OK(ember_open(dir, &o, &db));
	write_all(db, 0, 0, KEYS);
	uint64_t id;
	CHECK_OK(ember_checkpoint(db, &id));
	CHECK(exists(dir, "hot.log.000000") && exists(dir, "hot.log.000001") &&
		      !exists(dir, "hot.log"),
	      "segment files of the hot log");
	read_all(db, 0, 0);
	CHECK_OK(ember_close(db));
	uint32_t version;
	uint64_t seg;
	superblock(dir, &version, &seg);
	CHECK(version == 4 && seg == SEG, "superblock: version %u, segment %llu", version,
	      (unsigned long long)seg);

	/* reopen asking for another size: the store's own stays */
	options(&o, 2 * SEG, 0);
	CHECK_OK(ember_open(dir, &o, &db));
	read_all(db, 0, 0);
	write_all(db, 1, 0, KEYS / 2);
	read_all(db, 1, KEYS / 2);
	CHECK_OK(ember_checkpoint(db, &id));
	CHECK_OK(ember_close(db));
	options(&o, 0, 0);
	CHECK_OK(ember_open(dir, &o, &db));
	read_all(db, 1, KEYS / 2);
	CHECK_OK(ember_close(db));

	/* a segment the checkpoint needs (the newest: it holds the tail) goes missing:
	 * a clean refusal */
	char p[4300], keep[4300], name[64];
	unsigned last = 0;
	for (unsigned n = 0; n < 64; n++) {
		snprintf(name, sizeof(name), "hot.log.%06u", n);
		if (exists(dir, name))
			last = n;
	}
	CHECK(last >= 2, "24 MiB more reached segment 2 (newest %u)", last);
	snprintf(p, sizeof(p), "%s/hot.log.%06u", dir, last);
	snprintf(keep, sizeof(keep), "%s/kept-segment", dir);
	CHECK(rename(p, keep) == 0, "move segment 3 aside");
	lines[0] = 0;
	options(&o, 0, 0);
	CHECK(ember_open(dir, &o, &db) == -ENOENT, "open without a needed segment");
	CHECK(strstr(lines, "hot.log") != NULL, "the report names the log: %s", lines);
	CHECK(rename(keep, p) == 0, "put it back");
	CHECK_OK(ember_open(dir, &o, &db));
	read_all(db, 1, KEYS / 2);
	CHECK_OK(ember_close(db));

	/* recreated as a one-file store: the segments go; and back */
	options(&o, 0, 1);
	CHECK_OK(ember_open(dir, &o, &db));
	write_all(db, 2, 0, 100);
	CHECK_OK(ember_close(db));
	CHECK(exists(dir, "hot.log") && !exists(dir, "hot.log.000000") &&
		      !exists(dir, "hot.log.000003") && !exists(dir, "cold.log.000000"),
	      "one file again");
	superblock(dir, &version, &seg);
	CHECK(version == 4 && seg == 0, "superblock: version %u, segment %llu", version,
	      (unsigned long long)seg);
	options(&o, SEG, 1);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_close(db));
	CHECK(!exists(dir, "hot.log"), "hot.log removed by the segmented store");

	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
