/*
 * test_tier_counts.c - the tiers' record counts survive a reopen (the checkpoint
 * meta keeps them: docs/format.md, "meta"). Puts a random number of keys, some
 * overwritten, takes a checkpoint, compacts part of the hot log to the cold one;
 * the counts ember_stats reports before ember_close are the ones it reports after
 * a reopen, and again after a second reopen with more writes in between. A
 * read-only open reports them too. A meta written before the counts were kept
 * (flags and counts zero, checksum valid) still recovers, its counts starting at 0.
 */
#include <dirent.h>
#include <ember.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h" /* XXH3, the meta's checksum */
#include "test_util.h"

#define META_SIZE 4096
#define META_COUNTS 184 /* flags, hot_records, cold_records: docs/format.md */
#define META_SUM (META_SIZE - 8)

/* Rewrite the newest checkpoint's meta as a writer without the counts would have
 * written it: bytes 184..207 zero, the checksum recomputed. */
static void meta_drop_counts(const char *dir)
{
	char top[600], path[700], best[64] = "";
	snprintf(top, sizeof(top), "%s/checkpoints", dir);
	DIR *d = opendir(top);
	CHECK(d != NULL, "no checkpoints directory");
	struct dirent *e;
	while ((e = readdir(d)))
		if (strlen(e->d_name) == 16 && strcmp(e->d_name, best) > 0)
			snprintf(best, sizeof(best), "%s", e->d_name);
	closedir(d);
	CHECK(best[0], "no checkpoint");
	snprintf(path, sizeof(path), "%s/%s/meta", top, best);
	FILE *f = fopen(path, "r+b");
	CHECK(f != NULL, "open %s", path);
	uint8_t b[META_SIZE];
	CHECK(fread(b, 1, META_SIZE, f) == META_SIZE, "read meta");
	uint64_t flags;
	memcpy(&flags, b + META_COUNTS, 8);
	CHECK(flags == 1, "meta flags %llu, want 1 (counts present)", (unsigned long long)flags);
	memset(b + META_COUNTS, 0, 24);
	uint64_t sum = XXH3_64bits(b, META_SUM);
	memcpy(b + META_SUM, &sum, 8);
	CHECK(fseek(f, 0, SEEK_SET) == 0 && fwrite(b, 1, META_SIZE, f) == META_SIZE, "write meta");
	CHECK(fclose(f) == 0, "close meta");
}

static void opts_small(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->log_memory = 1u << 20;
	o->page_size = 64u << 10;
	o->index_buckets = 1u << 12;
	o->flags = flags;
}

static void counts(ember_db *db, uint64_t *hot, uint64_t *cold)
{
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	*hot = st.hot.records;
	*cold = st.cold.records;
}

static void put_some(ember_db *db, uint64_t n, uint64_t distinct, uint64_t gen)
{
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t val[200];
	for (uint64_t i = 0; i < n; i++) {
		uint64_t k = i % distinct;
		memset(val, (int)(k + gen), sizeof(val));
		CHECK_OK(ember_put(s, &k, sizeof(k), val, sizeof(val)));
	}
	CHECK_OK(ember_session_close(s));
}

static ember_db *reopen(const char *dir, uint32_t flags)
{
	ember_options o;
	opts_small(&o, flags);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	return db;
}

int main(int argc, char **argv)
{
	tu_init("test_tier_counts", argc, argv);
	tu_rng *r = tu_rng_global();
	char dir[512];
	CHECK(tu_tmpdir_make("tier-counts", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_db *db = reopen(dir, EMBER_OPEN_TRUNCATE);

	/* n distinct keys of over 200 bytes each (at least 1.6 MiB) outgrow the log's
	 * 1 MiB of memory, so its oldest records are on disk, and those past the first
	 * n / 4 keys stay live whatever the flush's timing: the compaction moves some.
	 * (Writing each key twice let the second write land in place while its first
	 * was still mutable: a slow run ended with nothing on disk and cold 0.) Then
	 * the first n / 4 keys again: their old records die. */
	uint64_t n = tu_rng_range(r, 8000, 20000), distinct = n;
	put_some(db, n, distinct, 1);
	put_some(db, n / 4, distinct, 2);
	CHECK_OK(ember_compact(db, 1)); /* hot -> cold: both tiers hold records */
	put_some(db, n / 4, distinct, 3);
	uint64_t hot0, cold0;
	counts(db, &hot0, &cold0);
	printf("n=%llu hot=%llu cold=%llu\n", (unsigned long long)n, (unsigned long long)hot0,
	       (unsigned long long)cold0);
	CHECK(hot0 > 0 && cold0 > 0, "hot %llu, cold %llu records: both tiers should hold some",
	      (unsigned long long)hot0, (unsigned long long)cold0);
	CHECK_OK(ember_close(db)); /* takes a final checkpoint */

	db = reopen(dir, 0);
	uint64_t hot1, cold1;
	counts(db, &hot1, &cold1);
	CHECK(hot1 == hot0 && cold1 == cold0, "after reopen: hot %llu cold %llu, want %llu %llu",
	      (unsigned long long)hot1, (unsigned long long)cold1, (unsigned long long)hot0,
	      (unsigned long long)cold0);

	/* more writes on the reopened store add to the recovered counts */
	put_some(db, 500, distinct, 4);
	uint64_t hot2, cold2;
	counts(db, &hot2, &cold2);
	CHECK(hot2 == hot1 + 500 && cold2 == cold1, "after 500 more puts: hot %llu cold %llu",
	      (unsigned long long)hot2, (unsigned long long)cold2);
	CHECK_OK(ember_checkpoint(db, NULL));
	CHECK_OK(ember_close(db));

	db = reopen(dir, EMBER_OPEN_READONLY);
	uint64_t hot3, cold3;
	counts(db, &hot3, &cold3);
	CHECK(hot3 == hot2 && cold3 == cold2, "read-only reopen: hot %llu cold %llu, want %llu %llu",
	      (unsigned long long)hot3, (unsigned long long)cold3, (unsigned long long)hot2,
	      (unsigned long long)cold2);
	CHECK_OK(ember_close(db));

	/* an older meta: no counts; the store opens, counting from 0 */
	meta_drop_counts(dir);
	db = reopen(dir, 0);
	uint64_t hot4, cold4;
	counts(db, &hot4, &cold4);
	CHECK(hot4 == 0 && cold4 == 0, "a meta without counts: hot %llu cold %llu, want 0 0",
	      (unsigned long long)hot4, (unsigned long long)cold4);
	ember_session *s = NULL;
	uint8_t v[256];
	size_t vl = 0;
	uint64_t k0 = 0;
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_get(s, &k0, sizeof(k0), v, sizeof(v), &vl)); /* the data is all there */
	CHECK_OK(ember_session_close(s));
	put_some(db, 10, distinct, 5);
	counts(db, &hot4, &cold4);
	CHECK(hot4 == 10, "10 puts after an old meta: hot %llu", (unsigned long long)hot4);
	CHECK_OK(ember_close(db));
	db = reopen(dir, EMBER_OPEN_READONLY);
	counts(db, &hot4, &cold4);
	CHECK(hot4 == 10 && cold4 == 0, "the next checkpoint keeps the counts again: %llu %llu",
	      (unsigned long long)hot4, (unsigned long long)cold4);
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
