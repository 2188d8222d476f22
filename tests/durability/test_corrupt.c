/*
 * test_corrupt.c - damaged and torn files: the result is a clean error or a
 * recovery to the last good checkpoint, never a crash or a wrong value.
 *
 * A tiered store (hot, cold and chunk logs all in use) is built and closed (its
 * final checkpoint). Then, each on a fresh copy of it:
 *   flip      random bit flips in hot.log, cold.log, cold.idx: open, then every
 *             key reads its value or an error (EMBER_ECORRUPT / EMBER_EIO), never
 *             another value, and a live key never reads as "not found"; an ECORRUPT comes with ember_error_detail naming the
 *             file; a full ember_verify run (when it is linked) counts the damage
 *   truncate  each log cut short (to 0, to half, by one block): the same rule
 *   super     bit flips in the superblock: EMBER_ECORRUPT or EMBER_ENOTEMBER
 *   ckflip    bit flips in the checkpoint's own files: its meta (anywhere in the
 *             4 KiB block, the unused bytes and the tiers' counts too, which no
 *             other check reads), hot.index and cold.table (within the lengths
 *             the meta gives): the open fails with EMBER_ECORRUPT, never
 *             recovers from the damaged checkpoint (docs/checkpoint.md)
 *   missing   a log file deleted: the open fails cleanly; a checkpoint file
 *             deleted: EMBER_ECORRUPT (meta present), or the store opens empty
 *             (meta gone: indistinguishable from a crash during the first
 *             checkpoint, documented in docs/checkpoint.md)
 * Run under AddressSanitizer by the full test command.
 */
#include <ember.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static char base_dir[512];
static uint64_t KEYS;

static void opts(ember_options *o)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 512u << 10;
	o->index_buckets = 1u << 9;
	o->hot_disk_budget = 1u << 20;
	o->cold_disk_budget = 8u << 20;
	o->cold_log_memory = 512u << 10;
	o->cold_index_chunks = 1u << 7;
	o->io_queue_depth = 32;
}

static char last_log[512];
static void log_line(void *arg, const char *line)
{
	(void)arg;
	snprintf(last_log, sizeof(last_log), "%s", line);
}

static size_t value(uint64_t k, uint8_t *buf)
{
	size_t n = 24 + tu_mix64(k) % 150;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t w = tu_mix64(k * 977 + i);
		memcpy(buf + i, &w, n - i < 8 ? n - i : 8);
	}
	memcpy(buf, &k, 8);
	return n;
}

static void build(void)
{
	CHECK(tu_tmpdir_make("corrupt", base_dir, sizeof(base_dir)) == 0, "tmpdir");
	ember_options o;
	opts(&o);
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	CHECK_OK(ember_open(base_dir, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t v[256];
	for (int pass = 0; pass < 3; pass++)
		for (uint64_t k = 0; k < KEYS; k++) {
			if (pass == 2 && k % 5 == 0) {
				CHECK_OK(ember_delete(s, &k, 8));
				continue;
			}
			size_t n = value(k, v);
			CHECK_OK(ember_put(s, &k, 8, v, n));
		}
	CHECK_OK(ember_compact(db, 1)); /* most of it cold */
	for (uint64_t k = 0; k < KEYS; k += 7) { /* some hot again */
		if (k % 5 == 0)
			continue;
		size_t n = value(k, v);
		CHECK_OK(ember_put(s, &k, 8, v, n));
	}
	CHECK_OK(ember_session_close(s));
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	printf("  store: hot %llu B, cold %llu B, chunks %llu B on disk\n",
	       (unsigned long long)st.hot.bytes_disk, (unsigned long long)st.cold.bytes_disk,
	       (unsigned long long)st.chunk_log_bytes_disk);
	CHECK_OK(ember_close(db));
}

static void copy_store(const char *to)
{
	char cmd[2000];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -r '%s' '%s'", to, base_dir, to);
	CHECK(system(cmd) == 0, "%s", cmd);
}

static void remove_store(const char *d)
{
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	CHECK(system(cmd) == 0, "%s", cmd);
}

static off_t file_size(const char *p)
{
	struct stat st;
	CHECK(stat(p, &st) == 0, "stat %s", p);
	return st.st_size;
}

/*
 * Open d and read every key. Returns the number of keys that failed with an
 * error (never a wrong value); *opened = whether the open succeeded.
 */
static uint64_t read_all(const char *d, int *opened, int *open_rc)
{
	ember_options o;
	opts(&o);
	o.log_fn = log_line;
	ember_db *db = NULL;
	int rc = ember_open(d, &o, &db);
	*open_rc = rc;
	*opened = rc == 0;
	if (rc != 0) {
		CHECK(rc < 0 && db == NULL, "failed open left a handle");
		return 0;
	}
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	/* batches of 64 keys: their disk reads overlap */
	enum { B = 64 };
	static uint8_t bufs[B][256];
	uint8_t want[256];
	uint64_t kb[B];
	const void *keys[B];
	size_t klens[B], caps[B], vlens[B];
	void *bptr[B];
	int st[B];
	uint64_t errors = 0, corrupt = 0;
	for (uint64_t k0 = 0; k0 < KEYS; k0 += B) {
		size_t n = KEYS - k0 < B ? (size_t)(KEYS - k0) : B;
		for (size_t i = 0; i < n; i++) {
			kb[i] = k0 + i;
			keys[i] = &kb[i];
			klens[i] = 8;
			bptr[i] = bufs[i];
			caps[i] = sizeof(bufs[i]);
		}
		CHECK_OK(ember_get_batch(s, n, keys, klens, bptr, caps, vlens, st));
		for (size_t i = 0; i < n; i++) {
			uint64_t k = kb[i];
			rc = st[i];
			if (k % 5 == 0) {
				if (rc == EMBER_ENOTFOUND)
					continue;
			} else if (rc == 0) {
				size_t wn = value(k, want);
				CHECK(vlens[i] == wn && memcmp(bufs[i], want, wn) == 0,
				      "key %llu: a wrong value", (unsigned long long)k);
				continue;
			}
			/* a deleted key may also read as an error (its tombstone is damaged); a
			 * live key reads its value or an error, never "not found" */
			CHECK(rc == EMBER_ECORRUPT || rc == EMBER_EIO,
			      "key %llu (%s): rc %d (%s)", (unsigned long long)k,
			      k % 5 ? "live" : "deleted", rc, ember_strerror(rc));
			errors++;
			corrupt += rc == EMBER_ECORRUPT;
		}
	}
	if (corrupt) {
		char detail[256];
		CHECK_OK(ember_error_detail(db, detail, sizeof(detail)));
		CHECK(strstr(detail, ".log") || strstr(detail, ".idx"), "detail '%s'", detail);
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	return errors;
}

static void flip_at(const char *p, off_t off, uint8_t mask)
{
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0, "open %s", p);
	uint8_t b = 0;
	CHECK(pread(fd, &b, 1, off) == 1, "pread");
	b ^= mask;
	CHECK(pwrite(fd, &b, 1, off) == 1, "pwrite");
	close(fd);
}

static void test_flip(void)
{
	static const char *const logs[] = {"hot.log", "cold.log", "cold.idx"};
	char d[600], p[700];
	snprintf(d, sizeof(d), "%s.flip", base_dir);
	uint64_t trials = tu_scaled(8) < 3 ? 3 : tu_scaled(8);
	for (int l = 0; l < 3; l++) {
		uint64_t errs = 0, failed_opens = 0;
		for (uint64_t t = 0; t < trials; t++) {
			copy_store(d);
			snprintf(p, sizeof(p), "%s/%s", d, logs[l]);
			off_t size = file_size(p);
			if (size <= 64)
				continue;
			for (int f = 0; f < 4; f++)
				flip_at(p, 64 + (off_t)tu_rng_below(tu_rng_global(), (uint64_t)size - 64),
					(uint8_t)(1u << tu_rng_below(tu_rng_global(), 8)));
			int opened, orc;
			errs += read_all(d, &opened, &orc);
			if (!opened) {
				CHECK(orc == EMBER_ECORRUPT || orc == EMBER_EIO, "open: %s",
				      ember_strerror(orc));
				failed_opens++;
			}
		}
		printf("  flip %-8s: %llu trials, %llu keys read as errors, %llu opens refused\n",
		       logs[l], (unsigned long long)trials, (unsigned long long)errs,
		       (unsigned long long)failed_opens);
	}
	remove_store(d);
}

static void test_truncate(void)
{
	static const char *const logs[] = {"hot.log", "cold.log", "cold.idx"};
	char d[600], p[700];
	snprintf(d, sizeof(d), "%s.trunc", base_dir);
	for (int l = 0; l < 3; l++) {
		for (int how = 0; how < 3; how++) {
			copy_store(d);
			snprintf(p, sizeof(p), "%s/%s", d, logs[l]);
			off_t size = file_size(p);
			off_t to = how == 0 ? 0 : how == 1 ? size / 2 : (size > 4096 ? size - 4096 : 0);
			CHECK(truncate(p, to) == 0, "truncate");
			int opened, orc;
			uint64_t errs = read_all(d, &opened, &orc);
			if (!opened)
				CHECK(orc == EMBER_ECORRUPT || orc == EMBER_EIO || orc == -EIO, "open: %s",
				      ember_strerror(orc));
			printf("  truncate %-8s to %lld: %s, %llu keys read as errors\n", logs[l],
			       (long long)to, opened ? "opened" : ember_strerror(orc),
			       (unsigned long long)errs);
		}
	}
	remove_store(d);
}

static void test_super(void)
{
	char d[600], p[700];
	snprintf(d, sizeof(d), "%s.super", base_dir);
	for (int t = 0; t < 8; t++) {
		copy_store(d);
		snprintf(p, sizeof(p), "%s/ember.super", d);
		off_t off = t == 0 ? 0 : (off_t)tu_rng_below(tu_rng_global(), 4096);
		flip_at(p, off, 0x10);
		ember_options o;
		opts(&o);
		o.log_fn = log_line;
		ember_db *db = NULL;
		int rc = ember_open(d, &o, &db);
		CHECK(rc == EMBER_ECORRUPT || rc == EMBER_ENOTEMBER,
		      "superblock flip at %lld: %d (%s)", (long long)off, rc, ember_strerror(rc));
		CHECK(db == NULL, "handle left");
	}
	remove_store(d);
}

static uint64_t meta_word(const char *d, off_t off)
{
	char p[800];
	snprintf(p, sizeof(p), "%s/checkpoints/%016llx/meta", d, 1ull);
	int fd = open(p, O_RDONLY);
	CHECK(fd >= 0, "open %s", p);
	uint64_t v = 0;
	CHECK(pread(fd, &v, 8, off) == 8, "pread %s", p);
	close(fd);
	return v;
}

/* The offset of the first nonzero 8-byte word of file p at or after from (wrapping). */
static off_t nonzero_word(const char *p, off_t from)
{
	off_t size = file_size(p);
	int fd = open(p, O_RDONLY);
	CHECK(fd >= 0, "open %s", p);
	for (off_t i = 0; i < size; i += 8) {
		off_t off = (from + i) % size;
		uint64_t w = 0;
		CHECK(pread(fd, &w, 8, off) == 8, "pread %s", p);
		if (w) {
			close(fd);
			return off;
		}
	}
	close(fd);
	CHECK(0, "%s holds only zeros", p);
	return 0;
}

static void test_ckpt_flip(void)
{
	enum { META_SIZE = 4096, META_FIELDS = 208, META_COLD_RECORDS = 200,
	       META_INDEX_ENTRIES = 144, META_TABLE_BYTES = 160 }; /* docs/format.md */
	static const char *const files[] = {"meta", "hot.index", "cold.table"};
	char d[600], p[800];
	snprintf(d, sizeof(d), "%s.ckflip", base_dir);
	copy_store(d);
	/* what the checksums of hot.index and cold.table cover */
	uint64_t covered[3] = {META_SIZE - 8, meta_word(d, META_INDEX_ENTRIES) * 16,
			       meta_word(d, META_TABLE_BYTES)};
	CHECK(covered[1] > 0 && covered[2] > 0, "an empty hot.index or cold.table");
	for (int f = 0; f < 3; f++) {
		for (int t = 0; t < 3; t++) {
			copy_store(d);
			snprintf(p, sizeof(p), "%s/checkpoints/%016llx/%s", d, 1ull, files[f]);
			off_t off = (off_t)tu_rng_below(tu_rng_global(), covered[f]);
			uint8_t mask = (uint8_t)(1u << tu_rng_below(tu_rng_global(), 8));
			if (f == 0 && t == 0) /* the unused bytes after the fields */
				off = META_FIELDS + (off_t)tu_rng_below(tu_rng_global(),
									META_SIZE - 8 - META_FIELDS);
			else if (f == 0 && t == 1) /* a count */
				off = META_COLD_RECORDS;
			else if (f > 0 && t == 0) { /* an address 8 bytes off: in range */
				off = f == 1 ? (off / 16) * 16 + 8 : nonzero_word(p, off / 8 * 8);
				mask = 1u << 3;
			}
			flip_at(p, off, mask);
			ember_options o;
			opts(&o);
			o.log_fn = log_line;
			ember_db *db = NULL;
			int rc = ember_open(d, &o, &db);
			CHECK(rc == EMBER_ECORRUPT && db == NULL,
			      "%s flipped at %lld: the open returned %d (%s), want EMBER_ECORRUPT",
			      files[f], (long long)off, rc, ember_strerror(rc));
		}
	}
	remove_store(d);
}

static void test_missing(void)
{
	static const char *const files[] = {"hot.log", "cold.log", "cold.idx"};
	char d[600], p[800];
	snprintf(d, sizeof(d), "%s.miss", base_dir);
	for (int f = 0; f < 3; f++) {
		copy_store(d);
		snprintf(p, sizeof(p), "%s/%s", d, files[f]);
		CHECK(unlink(p) == 0, "unlink");
		ember_options o;
		opts(&o);
		o.log_fn = log_line;
		ember_db *db = NULL;
		int rc = ember_open(d, &o, &db);
		CHECK(rc == -ENOENT && db == NULL && strstr(last_log, files[f]),
		      "%s missing: %d (%s), log '%s'", files[f], rc, ember_strerror(rc), last_log);
	}
	static const char *const ck[] = {"hot.index", "cold.table"};
	for (int f = 0; f < 2; f++) {
		copy_store(d);
		snprintf(p, sizeof(p), "%s/checkpoints/%016llx/%s", d, 1ull, ck[f]);
		CHECK(unlink(p) == 0, "unlink %s", p);
		ember_options o;
		opts(&o);
		o.log_fn = log_line;
		ember_db *db = NULL;
		CHECK_RC(ember_open(d, &o, &db), EMBER_ECORRUPT);
	}
	/* the meta gone: a partial checkpoint; the store starts empty */
	copy_store(d);
	snprintf(p, sizeof(p), "%s/checkpoints/%016llx/meta", d, 1ull);
	CHECK(unlink(p) == 0, "unlink %s", p);
	ember_options o;
	opts(&o);
	o.log_fn = log_line;
	ember_db *db = NULL;
	CHECK_OK(ember_open(d, &o, &db));
	ember_recovery_info ri;
	CHECK_OK(ember_recovery_info_get(db, &ri));
	CHECK(ri.checkpoint_id == 0 && ri.checkpoints_skipped == 1, "meta gone: recovered %llu",
	      (unsigned long long)ri.checkpoint_id);
	CHECK_OK(ember_close(db));
	remove_store(d);
}

int main(int argc, char **argv)
{
	tu_init("corrupt", argc, argv);
	KEYS = tu_scaled(12000) < 8000 ? 8000 : tu_scaled(12000);
	build();
	test_super();
	test_ckpt_flip();
	test_missing();
	test_truncate();
	test_flip();
	remove_store(base_dir);
	printf("corrupt: OK\n");
	return 0;
}
