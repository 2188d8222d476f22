/*
 * test_big_reads.c - first reads sized for large values (lookup.c note 5,
 * lookup_want_hint in store_int.h): a session that reads large values into a
 * large buffer learns their size, so each later read of one costs one disk read
 * instead of a header read plus a full read; a large buffer over small values
 * learns the small size; a value larger than what was learnt is still read whole;
 * a caller whose buffers fit its values exactly pays one read per value whatever
 * the mix of sizes (singly and in one batch); cold values (chunk, then record) too;
 * a damaged large value, checked while it is copied out, is EMBER_ECORRUPT. Every
 * value read is checked byte for byte, and the disk-read counts come from
 * ember_stats (I/O counts, not timing).
 */
#include <ember.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define BIG (200u << 10)
#define NBIG 40
#define NSMALL 64
#define CAP (256u << 10)
#define MID (24u << 10)
#define NMID 16

static void fill(uint8_t *v, size_t n, unsigned key, unsigned gen)
{
	for (size_t i = 0; i < n; i++)
		v[i] = (uint8_t)(key * 31 + gen * 7 + i * 13 + (i >> 9));
}

static uint64_t disk_reads(ember_db *db)
{
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	return st.disk_reads;
}

static void get_check_cap(ember_session *s, const char *key, uint8_t *buf, size_t cap,
			  size_t want_len, unsigned k, unsigned gen)
{
	size_t vl = 0;
	int rc = ember_get(s, key, strlen(key), buf, cap, &vl);
	CHECK(rc == 0, "get %s: %d (%s)", key, rc, ember_strerror(rc));
	CHECK(vl == want_len, "get %s: length %zu, want %zu", key, vl, want_len);
	uint8_t *ref = malloc(want_len);
	fill(ref, want_len, k, gen);
	CHECK(memcmp(buf, ref, want_len) == 0, "get %s: wrong bytes", key);
	free(ref);
}

static void get_check(ember_session *s, const char *key, uint8_t *buf, size_t want_len,
		      unsigned k, unsigned gen)
{
	get_check_cap(s, key, buf, CAP, want_len, k, gen);
}

/* One ember_get_batch call's arrays: up to 8 keys. */
struct tbatch {
	const void *keys[8];
	size_t klens[8], caps[8], vlens[8];
	void *bufs[8];
	int status[8];
	char kb[8][32];
};

/* Key i of the batch is prefix + k, read into a fresh buffer of cap bytes. */
static void batch_key(struct tbatch *b, unsigned i, const char *prefix, unsigned k, size_t cap)
{
	snprintf(b->kb[i], sizeof(b->kb[i]), "%s%u", prefix, k);
	b->keys[i] = b->kb[i];
	b->klens[i] = strlen(b->kb[i]);
	b->caps[i] = cap;
	b->bufs[i] = malloc(cap);
	CHECK(b->bufs[i] != NULL, "malloc");
}

int main(int argc, char **argv)
{
	tu_init("test_big_reads", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("bigrd", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	ember_options_default(&o);
	o.log_memory = 1 << 20; /* 16 pages: the values live on disk */
	o.page_size = 64 << 10;
	o.hot_disk_budget = 64 << 20; /* no compaction until asked */
	o.cold_log_memory = 512 << 10; /* 8 pages: compacted values go to disk too */
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t *v = malloc(CAP), *buf = malloc(CAP);
	char key[32];
	for (unsigned k = 0; k < NBIG; k++) {
		snprintf(key, sizeof(key), "big%u", k);
		fill(v, BIG, k, 0);
		CHECK_OK(ember_put(s, key, strlen(key), v, BIG));
	}
	for (unsigned k = 0; k < NSMALL; k++) {
		snprintf(key, sizeof(key), "small%u", k);
		fill(v, 100, 1000 + k, 0);
		CHECK_OK(ember_put(s, key, strlen(key), v, 100));
	}
	for (unsigned k = 0; k < NMID; k++) {
		snprintf(key, sizeof(key), "mid%u", k);
		fill(v, MID, 2000 + k, 0);
		CHECK_OK(ember_put(s, key, strlen(key), v, MID));
	}
	/* push the small ones to disk too */
	for (unsigned k = 0; k < 8; k++) {
		snprintf(key, sizeof(key), "pad%u", k);
		fill(v, BIG, 5000 + k, 0);
		CHECK_OK(ember_put(s, key, strlen(key), v, BIG));
	}

	/* 1. large values into a large buffer: two reads for the first, one after */
	uint64_t r0 = disk_reads(db);
	for (unsigned k = 0; k < NBIG - 16; k++) {
		snprintf(key, sizeof(key), "big%u", k);
		get_check(s, key, buf, BIG, k, 0);
	}
	uint64_t used = disk_reads(db) - r0;
	printf("%u large values on disk: %llu disk reads\n", NBIG - 16, (unsigned long long)used);
	CHECK(used <= NBIG - 16 + 1, "large reads took %llu disk reads for %u values",
	      (unsigned long long)used, NBIG - 16);

	/* 2. small values into the same large buffer: the session learns their size
	 * (each costs one small read, never a 200 KiB one) */
	ember_stats a, b;
	CHECK_OK(ember_stats_get(db, &a));
	for (unsigned k = 0; k < NSMALL; k++) {
		snprintf(key, sizeof(key), "small%u", k);
		get_check(s, key, buf, 100, 1000 + k, 0);
	}
	CHECK_OK(ember_stats_get(db, &b));
	uint64_t bytes = b.disk_bytes_read - a.disk_bytes_read;
	printf("%u small values: %llu disk reads, %llu bytes\n", NSMALL,
	       (unsigned long long)(b.disk_reads - a.disk_reads), (unsigned long long)bytes);
	CHECK(bytes < (uint64_t)BIG + NSMALL * 8192u,
	      "small values cost %llu bytes: the large hint was not unlearnt",
	      (unsigned long long)bytes);

	/* 3. a large value after the small size was learnt: read whole all the same */
	snprintf(key, sizeof(key), "big%u", NBIG - 1);
	get_check(s, key, buf, BIG, NBIG - 1, 0);

	/* 4. a batch of large and small values with large buffers */
	struct tbatch tb;
	for (unsigned i = 0; i < 8; i++) {
		unsigned big = i % 2 == 0;
		batch_key(&tb, i, big ? "big" : "small", big ? NBIG - 16 + i : i, CAP);
	}
	CHECK_OK(ember_get_batch(s, 8, tb.keys, tb.klens, tb.bufs, tb.caps, tb.vlens, tb.status));
	for (unsigned i = 0; i < 8; i++) {
		unsigned big = i % 2 == 0;
		unsigned k = big ? NBIG - 16 + i : i;
		size_t n = big ? BIG : 100;
		CHECK(tb.status[i] == 0 && tb.vlens[i] == n, "batch %u: status %d len %zu", i,
		      tb.status[i], tb.vlens[i]);
		fill(v, n, big ? k : 1000 + k, 0);
		CHECK(memcmp(tb.bufs[i], v, n) == 0, "batch %u: wrong bytes", i);
		free(tb.bufs[i]);
	}

	/* 5. buffers sized to their values, 24 KiB and 200 KiB alternating: after the
	 * first, one read each (a 24 KiB record that filled its buffer does not teach
	 * the session to read 24 KiB of the next 200 KiB one) */
	for (unsigned k = 0; k < 2; k++) {
		snprintf(key, sizeof(key), "mid%u", k);
		get_check_cap(s, key, buf, MID, MID, 2000 + k, 0);
	}
	r0 = disk_reads(db);
	for (unsigned k = 2; k < NMID; k++) {
		snprintf(key, sizeof(key), "big%u", k);
		get_check_cap(s, key, buf, BIG, BIG, k, 0);
		snprintf(key, sizeof(key), "mid%u", k);
		get_check_cap(s, key, buf, MID, MID, 2000 + k, 0);
	}
	used = disk_reads(db) - r0;
	printf("%u exact-size values, alternating: %llu disk reads\n", 2 * (NMID - 2),
	       (unsigned long long)used);
	CHECK(used == 2 * (NMID - 2), "exact-size reads took %llu disk reads for %u values",
	      (unsigned long long)used, 2 * (NMID - 2));
	for (unsigned i = 0; i < 8; i++) {
		unsigned big = i % 2 == 1;
		batch_key(&tb, i, big ? "big" : "mid", 4 + i, big ? BIG : MID);
	}
	r0 = disk_reads(db);
	CHECK_OK(ember_get_batch(s, 8, tb.keys, tb.klens, tb.bufs, tb.caps, tb.vlens, tb.status));
	used = disk_reads(db) - r0;
	for (unsigned i = 0; i < 8; i++) {
		unsigned big = i % 2 == 1, k = 4 + i;
		CHECK(tb.status[i] == 0 && tb.vlens[i] == tb.caps[i],
		      "exact batch %u: status %d len %zu", i, tb.status[i], tb.vlens[i]);
		fill(v, tb.caps[i], big ? k : 2000 + k, 0);
		CHECK(memcmp(tb.bufs[i], v, tb.caps[i]) == 0, "exact batch %u: wrong bytes", i);
		free(tb.bufs[i]);
	}
	CHECK(used == 8, "an exact-size mixed batch took %llu disk reads for 8 values",
	      (unsigned long long)used);
	/* the same large values several times in one batch, each checked and copied
	 * on its own (test_differential's large mode is what caught a hash state
	 * carried over from the last read of the same record: record.h) */
	for (unsigned round = 0; round < 16; round++) {
		for (unsigned i = 0; i < 8; i++)
			batch_key(&tb, i, i % 2 ? "big" : "mid", 2 + (i + round) % 3, CAP);
		CHECK_OK(ember_get_batch(s, 8, tb.keys, tb.klens, tb.bufs, tb.caps, tb.vlens, tb.status));
		for (unsigned i = 0; i < 8; i++) {
			unsigned k = 2 + (i + round) % 3, big = i % 2;
			size_t n = big ? BIG : MID;
			fill(v, n, big ? k : 2000 + k, 0);
			CHECK(tb.status[i] == 0 && tb.vlens[i] == n && memcmp(tb.bufs[i], v, n) == 0,
			      "repeated batch %u/%u: status %d", round, i, tb.status[i]);
			free(tb.bufs[i]);
		}
	}
	/* then a small value into a large buffer: one read of at most the buffer, and
	 * the small size is learnt again */
	CHECK_OK(ember_stats_get(db, &a));
	for (unsigned k = 0; k < 8; k++) {
		snprintf(key, sizeof(key), "small%u", k);
		get_check(s, key, buf, 100, 1000 + k, 0);
	}
	CHECK_OK(ember_stats_get(db, &b));
	bytes = b.disk_bytes_read - a.disk_bytes_read;
	CHECK(b.disk_reads - a.disk_reads == 8 && bytes < (uint64_t)CAP + 8 * 8192u,
	      "small values after exact ones: %llu reads, %llu bytes",
	      (unsigned long long)(b.disk_reads - a.disk_reads), (unsigned long long)bytes);

	/* 6. the cold tier: chunk (never read with the hint) then record */
	CHECK_OK(ember_compact(db, 1));
	r0 = disk_reads(db);
	for (unsigned k = 0; k < NBIG; k++) {
		snprintf(key, sizeof(key), "big%u", k);
		get_check(s, key, buf, BIG, k, 0);
	}
	used = disk_reads(db) - r0;
	CHECK_OK(ember_stats_get(db, &b));
	printf("%u large values after compaction: %llu disk reads (cold reads %llu+%llu)\n", NBIG,
	       (unsigned long long)used, (unsigned long long)b.cold.reads_memory,
	       (unsigned long long)b.cold.reads_disk);
	CHECK(b.cold.reads_disk > 0, "some large values were read from the cold log's disk");
	CHECK(used <= 2 * NBIG + 1, "cold large reads took %llu disk reads for %u values",
	      (unsigned long long)used, NBIG);

	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));

	/* 7. a damaged large value read into a large buffer (checked while it is
	 * copied): EMBER_ECORRUPT, singly and in a batch; its neighbours read fine */
	unsigned bad = 3;
	fill(v, BIG, bad, 0);
	unsigned flipped = 0;
	static const char *const logs[] = {"hot.log", "cold.log"};
	for (unsigned f = 0; f < 2; f++) {
		char path[600];
		snprintf(path, sizeof(path), "%s/%s", dir, logs[f]);
		FILE *fp = fopen(path, "r+b");
		CHECK(fp, "open %s", path);
		CHECK(fseek(fp, 0, SEEK_END) == 0, "seek");
		long n = ftell(fp);
		uint8_t *img = malloc((size_t)n);
		CHECK(img && fseek(fp, 0, SEEK_SET) == 0 && fread(img, 1, (size_t)n, fp) == (size_t)n,
		      "read %s", path);
		for (long off = 0; off + (long)BIG <= n; off += 8)
			if (img[off] == v[0] && memcmp(img + off, v, 256) == 0 &&
			    memcmp(img + off + BIG - 256, v + BIG - 256, 256) == 0) {
				uint8_t x = (uint8_t)(img[off + BIG / 2] ^ 0x10);
				CHECK(fseek(fp, off + BIG / 2, SEEK_SET) == 0 && fwrite(&x, 1, 1, fp) == 1,
				      "flip");
				flipped++;
			}
		free(img);
		fclose(fp);
	}
	CHECK(flipped > 0, "big%u's value was not found on disk", bad);
	o.flags &= ~(uint32_t)EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	size_t vl = 0;
	snprintf(key, sizeof(key), "big%u", bad);
	CHECK_RC(ember_get(s, key, strlen(key), buf, CAP, &vl), EMBER_ECORRUPT);
	snprintf(key, sizeof(key), "big%u", bad + 1);
	get_check(s, key, buf, BIG, bad + 1, 0);
	for (unsigned i = 0; i < 3; i++)
		batch_key(&tb, i, "big", bad - 1 + i, CAP);
	CHECK_OK(ember_get_batch(s, 3, tb.keys, tb.klens, tb.bufs, tb.caps, tb.vlens, tb.status));
	for (unsigned i = 0; i < 3; i++) {
		if (i == 1) {
			CHECK(tb.status[i] == EMBER_ECORRUPT, "damaged value in a batch: %d", tb.status[i]);
		} else {
			fill(v, BIG, bad - 1 + i, 0);
			CHECK(tb.status[i] == 0 && tb.vlens[i] == BIG && memcmp(tb.bufs[i], v, BIG) == 0,
			      "batch neighbour %u", i);
		}
		free(tb.bufs[i]);
	}

	free(v);
	free(buf);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("big reads: OK\n");
	return 0;
}
