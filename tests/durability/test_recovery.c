/*
 * test_recovery.c - checkpoints and recovery, one behaviour per case:
 *
 *   clean_close     close (with its final checkpoint) and reopen: every key, hot
 *                   and cold, deleted or not, is as the reference map says
 *   crash           a child takes a checkpoint, writes more, and dies without
 *                   closing: the reopened store holds the checkpoint's state for
 *                   keys not written after it, and old-or-new values for the others
 *   geometry        reopening with other geometry options keeps the store's own
 *   list            ids grow, older checkpoints are removed, info is filled in
 *   readonly        read-only open: reads work, writes say EMBER_EREADONLY, no file
 *                   changes; a writer excludes a read-only open and vice versa
 *   partial         a newer directory without meta is skipped and removed
 *   damaged         a damaged meta / index / table of the only checkpoint: open
 *                   fails with EMBER_ECORRUPT and a log line; of a newer one while
 *                   an older complete one exists: the older is recovered
 *   truncate        EMBER_OPEN_TRUNCATE discards checkpoints too
 *   background      checkpoint_interval_ms takes checkpoints by itself
 *   bad_args        NULLs and wrong states
 *
 * Each case runs in a forked child (see main), so a failure does not hide others.
 */
#include <ember.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static void opts_small(ember_options *o, int tiered)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 1u << 20;
	o->index_buckets = 1u << 10;
	o->io_queue_depth = 64;
	if (tiered) {
		o->hot_disk_budget = 4u << 20;
		o->cold_disk_budget = 16u << 20;
		o->cold_log_memory = 1u << 20;
		o->cold_index_chunks = 1u << 8;
	}
}

static char last_log[512];
static void log_line(void *arg, const char *line)
{
	(void)arg;
	snprintf(last_log, sizeof(last_log), "%s", line);
}

static ember_db *open_db(const char *dir, ember_options *o)
{
	o->log_fn = log_line;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, o, &db));
	return db;
}

static void key_of(uint64_t k, char *buf) { snprintf(buf, 24, "key%012llu", (unsigned long long)k); }

/* value of key k at version v: a few words naming both (length varies) */
static size_t val_of(uint64_t k, uint64_t v, uint8_t *buf)
{
	size_t n = 16 + (tu_mix64(k * 7919 + v) % 200);
	uint64_t x = tu_mix64(k) ^ v;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t w = tu_mix64(x + i);
		memcpy(buf + i, &w, n - i < 8 ? n - i : 8);
	}
	memcpy(buf, &k, 8);
	memcpy(buf + 8, &v, 8);
	return n;
}

/* Apply random puts/deletes to db and the map. */
static void churn(ember_session *s, tu_map *ref, uint64_t keys, uint64_t ops, uint64_t *version)
{
	uint8_t val[256];
	char key[24];
	for (uint64_t i = 0; i < ops; i++) {
		uint64_t k = tu_rng_below(tu_rng_global(), keys);
		key_of(k, key);
		if (tu_rng_below(tu_rng_global(), 10) == 0) {
			CHECK_OK(ember_delete(s, key, strlen(key)));
			tu_map_del(ref, key, strlen(key));
		} else {
			size_t n = val_of(k, ++*version, val);
			CHECK_OK(ember_put(s, key, strlen(key), val, n));
			tu_map_put(ref, key, strlen(key), val, n);
		}
	}
}

/* Every key of [0, keys) reads as ref says. */
static void check_ref(ember_db *db, tu_map *ref, uint64_t keys)
{
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t buf[256];
	char key[24];
	for (uint64_t k = 0; k < keys; k++) {
		key_of(k, key);
		size_t vl = 0;
		int rc = ember_get(s, key, strlen(key), buf, sizeof(buf), &vl);
		const tu_map_entry *e = tu_map_get(ref, key, strlen(key));
		if (!e) {
			CHECK(rc == EMBER_ENOTFOUND, "key %llu: want absent, got %d (%s)",
			      (unsigned long long)k, rc, ember_strerror(rc));
			continue;
		}
		CHECK(rc == 0, "key %llu: %s", (unsigned long long)k, ember_strerror(rc));
		CHECK(vl == e->vlen && memcmp(buf, tu_map_val(e), vl) == 0, "key %llu: wrong value",
		      (unsigned long long)k);
	}
	CHECK_OK(ember_session_close(s));
}

static void test_clean_close(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("rec-clean", dir, sizeof(dir)) == 0, "tmpdir");
	tu_map ref;
	tu_map_init(&ref);
	uint64_t version = 0, keys = tu_scaled(8000);
	for (int round = 0; round < 4; round++) {
		ember_options o;
		opts_small(&o, 1);
		if (round == 0)
			o.flags = EMBER_OPEN_TRUNCATE;
		ember_db *db = open_db(dir, &o);
		if (round > 0)
			check_ref(db, &ref, keys);
		ember_session *s = NULL;
		CHECK_OK(ember_session_open(db, &s));
		churn(s, &ref, keys, tu_scaled(25000), &version);
		CHECK_OK(ember_session_close(s));
		if (round & 1)
			CHECK_OK(ember_compact(db, 1));
		ember_stats st;
		CHECK_OK(ember_stats_get(db, &st));
		printf("  round %d: hot %llu cold %llu records, %llu compactions\n", round,
		       (unsigned long long)st.hot.records, (unsigned long long)st.cold.records,
		       (unsigned long long)(st.hot.compactions + st.cold.compactions));
		check_ref(db, &ref, keys);
		CHECK_OK(ember_close(db));
	}
	ember_options o;
	opts_small(&o, 1);
	ember_db *db = open_db(dir, &o);
	check_ref(db, &ref, keys);
	ember_recovery_info ri;
	CHECK_OK(ember_recovery_info_get(db, &ri));
	CHECK(ri.checkpoint_id == 4, "recovered checkpoint %llu, want 4",
	      (unsigned long long)ri.checkpoint_id);
	CHECK_OK(ember_close(db));
	tu_map_free(&ref);
	tu_tmpdir_remove(dir);
}

/* The child: checkpoint after phase 1, then phase 2 and _exit without closing. */
static void test_crash(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("rec-crash", dir, sizeof(dir)) == 0, "tmpdir");
	uint64_t keys = tu_scaled(5000);
	for (int trial = 0; trial < 3; trial++) {
		uint64_t seed = tu_rng_next(tu_rng_global());
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			tu_rng_seed(tu_rng_global(), seed);
			ember_options o;
			opts_small(&o, trial == 2);
			o.flags = EMBER_OPEN_TRUNCATE;
			ember_db *db = open_db(dir, &o);
			ember_session *s = NULL;
			CHECK_OK(ember_session_open(db, &s));
			tu_map ref;
			tu_map_init(&ref);
			uint64_t version = 0;
			churn(s, &ref, keys, tu_scaled(20000), &version);
			CHECK_OK(ember_checkpoint(db, NULL));
			/* phase 2: only keys >= keys/2, so the lower half is exactly checkpointed */
			uint8_t val[256];
			char key[24];
			for (uint64_t i = 0; i < tu_scaled(20000); i++) {
				uint64_t k = keys / 2 + tu_rng_below(tu_rng_global(), keys / 2);
				key_of(k, key);
				size_t n = val_of(k, ++version, val);
				CHECK_OK(ember_put(s, key, strlen(key), val, n));
			}
			_exit(0); /* a crash: no close, no final checkpoint */
		}
		int st = 0;
		CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
		/* replay the child's phase 1 to know the checkpointed state */
		tu_rng_seed(tu_rng_global(), seed);
		tu_map ref;
		tu_map_init(&ref);
		uint64_t version = 0;
		{
			/* the same sequence of random choices as churn, without a store */
			uint8_t val[256];
			char key[24];
			for (uint64_t i = 0; i < tu_scaled(20000); i++) {
				uint64_t k = tu_rng_below(tu_rng_global(), keys);
				key_of(k, key);
				if (tu_rng_below(tu_rng_global(), 10) == 0) {
					tu_map_del(&ref, key, strlen(key));
				} else {
					size_t n = val_of(k, ++version, val);
					tu_map_put(&ref, key, strlen(key), val, n);
				}
			}
		}
		ember_options o;
		opts_small(&o, trial == 2);
		ember_db *db = open_db(dir, &o);
		ember_session *s = NULL;
		CHECK_OK(ember_session_open(db, &s));
		uint8_t buf[256], want[256];
		char key[24];
		for (uint64_t k = 0; k < keys; k++) {
			key_of(k, key);
			size_t vl = 0;
			int rc = ember_get(s, key, strlen(key), buf, sizeof(buf), &vl);
			const tu_map_entry *e = tu_map_get(&ref, key, strlen(key));
			if (k < keys / 2) {
				if (!e)
					CHECK(rc == EMBER_ENOTFOUND, "key %llu should be absent: %d",
					      (unsigned long long)k, rc);
				else
					CHECK(rc == 0 && vl == e->vlen && memcmp(buf, tu_map_val(e), vl) == 0,
					      "key %llu: checkpointed value lost (rc %d)",
					      (unsigned long long)k, rc);
				continue;
			}
			/* upper half: the checkpointed value or a later one, never garbage */
			if (rc == EMBER_ENOTFOUND) {
				CHECK(!e, "key %llu: checkpointed value lost", (unsigned long long)k);
				continue;
			}
			CHECK(rc == 0, "key %llu: %s", (unsigned long long)k, ember_strerror(rc));
			uint64_t kk, v;
			memcpy(&kk, buf, 8);
			memcpy(&v, buf + 8, 8);
			CHECK(kk == k && vl == val_of(k, v, want) && memcmp(buf, want, vl) == 0,
			      "key %llu: a value never written", (unsigned long long)k);
			if (e) {
				uint64_t ev;
				memcpy(&ev, tu_map_val(e) + 8, 8);
				CHECK(v >= ev, "key %llu: version %llu older than checkpointed %llu",
				      (unsigned long long)k, (unsigned long long)v, (unsigned long long)ev);
			}
		}
		CHECK_OK(ember_session_close(s));
		ember_recovery_info ri;
		CHECK_OK(ember_recovery_info_get(db, &ri));
		CHECK(ri.checkpoint_id == 1, "recovered %llu", (unsigned long long)ri.checkpoint_id);
		printf("  trial %d: recovered checkpoint 1, %llu records replayed\n", trial,
		       (unsigned long long)ri.records_replayed);
		CHECK_OK(ember_close(db));
		tu_map_free(&ref);
	}
	tu_tmpdir_remove(dir);
}

static void test_geometry(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("rec-geo", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	opts_small(&o, 0);
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = open_db(dir, &o);
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	tu_map ref;
	tu_map_init(&ref);
	uint64_t version = 0;
	churn(s, &ref, 3000, 10000, &version);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	ember_options_default(&o); /* other page size, memory, buckets: ignored */
	db = open_db(dir, &o);
	check_ref(db, &ref, 3000);
	CHECK_OK(ember_close(db));
	tu_map_free(&ref);
	tu_tmpdir_remove(dir);
}

static int count_dirs(const char *dir)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/checkpoints", dir);
	DIR *d = opendir(p);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static void test_list(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("rec-list", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	opts_small(&o, 0);
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = open_db(dir, &o);
	ember_checkpoint_info info[4];
	size_t n = 99;
	CHECK_OK(ember_checkpoint_list(db, info, 4, &n));
	CHECK(n == 0, "fresh store lists %zu checkpoints", n);
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	for (uint64_t want = 1; want <= 3; want++) {
		CHECK_OK(ember_put(s, "k", 1, &want, sizeof(want)));
		uint64_t id = 0;
		CHECK_OK(ember_checkpoint(db, &id));
		CHECK(id == want, "checkpoint id %llu, want %llu", (unsigned long long)id,
		      (unsigned long long)want);
		CHECK_OK(ember_checkpoint_list(db, info, 4, &n));
		CHECK(n == 1 && info[0].id == want, "list: %zu, newest %llu", n,
		      (unsigned long long)(n ? info[0].id : 0));
		CHECK(info[0].hot_end > info[0].hot_begin && info[0].index_entries == 1,
		      "extents %llu..%llu entries %llu", (unsigned long long)info[0].hot_begin,
		      (unsigned long long)info[0].hot_end, (unsigned long long)info[0].index_entries);
		CHECK(count_dirs(dir) == 1, "older checkpoint directories left: %d", count_dirs(dir));
	}
	CHECK_RC(ember_checkpoint_list(db, info, 0, &n), EMBER_ERANGE);
	CHECK(n == 1, "ERANGE still counts");
	/* nothing changed: close takes no new checkpoint */
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	o.flags = 0;
	db = open_db(dir, &o);
	ember_recovery_info ri;
	CHECK_OK(ember_recovery_info_get(db, &ri));
	CHECK(ri.checkpoint_id == 3 && ri.checkpoints_skipped == 0, "recovered %llu",
	      (unsigned long long)ri.checkpoint_id);
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

/* size + mtime of every file under dir (recursively one level) */
static uint64_t dir_fingerprint(const char *dir)
{
	uint64_t h = 0;
	char sub[2][600];
	snprintf(sub[0], sizeof(sub[0]), "%s", dir);
	snprintf(sub[1], sizeof(sub[1]), "%s/checkpoints", dir);
	for (int i = 0; i < 2; i++) {
		DIR *d = opendir(sub[i]);
		if (!d)
			continue;
		struct dirent *de;
		while ((de = readdir(d))) {
			char p[1600];
			snprintf(p, sizeof(p), "%s/%s", sub[i], de->d_name);
			struct stat st;
			if (de->d_name[0] == '.' || stat(p, &st) != 0)
				continue;
			h += tu_mix64((uint64_t)st.st_size ^ ((uint64_t)st.st_mtim.tv_nsec << 20) ^
				      (uint64_t)st.st_mtim.tv_sec ^ tu_mix64(de->d_name[0] * 131u + strlen(de->d_name)));
		}
		closedir(d);
	}
	return h;
}

static void test_readonly(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("rec-ro", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	opts_small(&o, 0);
	o.flags = EMBER_OPEN_READONLY;
	ember_db *db = NULL;
	CHECK(ember_open(dir, &o, &db) == -ENOENT && db == NULL, "read-only open of no store");
	o.flags = EMBER_OPEN_READONLY | EMBER_OPEN_TRUNCATE;
	CHECK_RC(ember_open(dir, &o, &db), EMBER_EINVAL);
	opts_small(&o, 0);
	o.flags = EMBER_OPEN_TRUNCATE;
	db = open_db(dir, &o);
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	tu_map ref;
	tu_map_init(&ref);
	uint64_t version = 0;
	churn(s, &ref, 2000, 5000, &version);
	CHECK_OK(ember_session_close(s));
	/* a writer excludes read-only opens */
	ember_options ro;
	opts_small(&ro, 0);
	ro.flags = EMBER_OPEN_READONLY;
	ember_db *r1 = NULL;
	CHECK_RC(ember_open(dir, &ro, &r1), EMBER_EBUSY);
	CHECK_OK(ember_close(db));
	sync();
	uint64_t fp = dir_fingerprint(dir);
	r1 = open_db(dir, &ro);
	ember_db *r2 = open_db(dir, &ro); /* read-only opens share */
	check_ref(r1, &ref, 2000);
	check_ref(r2, &ref, 2000);
	CHECK_OK(ember_session_open(r1, &s));
	uint8_t v = 1;
	CHECK_RC(ember_put(s, "k", 1, &v, 1), EMBER_EREADONLY);
	CHECK_RC(ember_delete(s, "k", 1), EMBER_EREADONLY);
	const void *keys[1] = {"k"};
	size_t kl[1] = {1}, vl[1] = {1};
	const void *vals[1] = {&v};
	int st[1];
	CHECK_RC(ember_put_batch(s, 1, keys, kl, vals, vl, st), EMBER_EREADONLY);
	CHECK_RC(ember_checkpoint(r1, NULL), EMBER_EREADONLY);
	CHECK_RC(ember_compact(r1, 1), EMBER_EREADONLY);
	CHECK_OK(ember_session_close(s));
	/* a writer cannot open while readers hold it */
	ember_db *w = NULL;
	opts_small(&o, 0);
	CHECK_RC(ember_open(dir, &o, &w), EMBER_EBUSY);
	CHECK_OK(ember_close(r1));
	CHECK_OK(ember_close(r2));
	CHECK(dir_fingerprint(dir) == fp, "a read-only open changed the store's files");
	tu_map_free(&ref);
	tu_tmpdir_remove(dir);
}

/* A store with one complete checkpoint (closed cleanly) and its reference. */
static void make_store(const char *dir, tu_map *ref, uint64_t keys)
{
	ember_options o;
	opts_small(&o, 0);
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = open_db(dir, &o);
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint64_t version = 0;
	churn(s, ref, keys, keys * 3, &version);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
}

static void ckpt_file(const char *dir, uint64_t id, const char *file, char *out, size_t cap)
{
	snprintf(out, cap, "%s/checkpoints/%016llx%s%s", dir, (unsigned long long)id,
		 file ? "/" : "", file ? file : "");
}

static void flip_byte(const char *path, long off)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	uint8_t b;
	CHECK(pread(fd, &b, 1, off) == 1, "pread %s", path);
	b ^= 0x40;
	CHECK(pwrite(fd, &b, 1, off) == 1, "pwrite %s", path);
	close(fd);
}

static void test_partial(void)
{
	char dir[512], p[700];
	CHECK(tu_tmpdir_make("rec-part", dir, sizeof(dir)) == 0, "tmpdir");
	tu_map ref;
	tu_map_init(&ref);
	make_store(dir, &ref, 2000);
	ckpt_file(dir, 2, NULL, p, sizeof(p));
	CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
	ckpt_file(dir, 2, "hot.index", p, sizeof(p));
	FILE *f = fopen(p, "w");
	CHECK(f && fputs("half-written", f) >= 0 && fclose(f) == 0, "write %s", p);
	ember_options o;
	opts_small(&o, 0);
	last_log[0] = '\0';
	ember_db *db = open_db(dir, &o);
	ember_recovery_info ri;
	CHECK_OK(ember_recovery_info_get(db, &ri));
	CHECK(ri.checkpoint_id == 1 && ri.checkpoints_skipped == 1, "recovered %llu skipped %u",
	      (unsigned long long)ri.checkpoint_id, ri.checkpoints_skipped);
	CHECK(strstr(ri.detail, "0000000000000002") && strstr(last_log, "partial"),
	      "detail '%s' log '%s'", ri.detail, last_log);
	check_ref(db, &ref, 2000);
	CHECK(count_dirs(dir) == 1, "the partial directory was not removed");
	CHECK_OK(ember_close(db));
	tu_map_free(&ref);
	tu_tmpdir_remove(dir);
}

static void test_damaged(void)
{
	static const struct {
		const char *file;
		long off;
	} cases[] = {{"meta", 20}, {"meta", 4000}, {"hot.index", 9}, {"cold.table", 0}};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char dir[512], p[700], q[700];
		CHECK(tu_tmpdir_make("rec-dmg", dir, sizeof(dir)) == 0, "tmpdir");
		tu_map ref;
		tu_map_init(&ref);
		make_store(dir, &ref, 1000);
		/* (a) the only checkpoint damaged: a clean error, and a log line */
		ckpt_file(dir, 1, cases[c].file, p, sizeof(p));
		flip_byte(p, cases[c].off);
		ember_options o;
		opts_small(&o, 0);
		o.log_fn = log_line;
		last_log[0] = '\0';
		ember_db *db = NULL;
		CHECK_RC(ember_open(dir, &o, &db), EMBER_ECORRUPT);
		CHECK(db == NULL && strstr(last_log, "damaged"), "log '%s'", last_log);
		flip_byte(p, cases[c].off); /* repair */
		/* (b) a damaged newer one beside a good older one: the older is used */
		ckpt_file(dir, 1, NULL, p, sizeof(p));
		ckpt_file(dir, 2, NULL, q, sizeof(q));
		char cmd[1600];
		snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", p, q);
		CHECK(system(cmd) == 0, "%s", cmd);
		/* make it a valid-looking id 2: a meta copied from 1 says id 1 but its
		 * directory says 2; damage it so it fails either way */
		ckpt_file(dir, 2, cases[c].file, q, sizeof(q));
		flip_byte(q, cases[c].off);
		db = open_db(dir, &o);
		ember_recovery_info ri;
		CHECK_OK(ember_recovery_info_get(db, &ri));
		CHECK(ri.checkpoint_id == 1 && ri.checkpoints_skipped == 1, "case %zu: recovered %llu "
		      "skipped %u", c, (unsigned long long)ri.checkpoint_id, ri.checkpoints_skipped);
		check_ref(db, &ref, 1000);
		CHECK_OK(ember_close(db));
		tu_map_free(&ref);
		tu_tmpdir_remove(dir);
	}
}

static void test_truncate(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("rec-trunc", dir, sizeof(dir)) == 0, "tmpdir");
	tu_map ref;
	tu_map_init(&ref);
	make_store(dir, &ref, 500);
	ember_options o;
	opts_small(&o, 0);
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = open_db(dir, &o);
	CHECK(count_dirs(dir) == 0, "TRUNCATE kept checkpoints");
	CHECK_OK(ember_close(db)); /* nothing written: no checkpoint */
	o.flags = 0;
	db = open_db(dir, &o);
	tu_map empty;
	tu_map_init(&empty);
	check_ref(db, &empty, 500);
	CHECK_OK(ember_close(db));
	tu_map_free(&empty);
	tu_map_free(&ref);
	tu_tmpdir_remove(dir);
}

static void test_background(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("rec-bg", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	opts_small(&o, 1);
	o.flags = EMBER_OPEN_TRUNCATE;
	o.checkpoint_interval_ms = 20;
	ember_db *db = open_db(dir, &o);
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	tu_map ref;
	tu_map_init(&ref);
	uint64_t version = 0;
	ember_checkpoint_info info[2];
	size_t n = 0;
	double t0 = tu_now();
	do {
		churn(s, &ref, 4000, 2000, &version);
		CHECK_OK(ember_checkpoint_list(db, info, 2, &n));
	} while ((n == 0 || info[0].id < 3) && tu_now() - t0 < 30);
	CHECK(n == 1 && info[0].id >= 3, "background checkpoints: %zu, newest %llu", n,
	      (unsigned long long)(n ? info[0].id : 0));
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	o.flags = 0;
	db = open_db(dir, &o);
	check_ref(db, &ref, 4000);
	CHECK_OK(ember_close(db));
	tu_map_free(&ref);
	tu_tmpdir_remove(dir);
}

static void test_bad_args(void)
{
	ember_checkpoint_info info[1];
	size_t n;
	ember_recovery_info ri;
	char buf[64];
	CHECK_RC(ember_checkpoint(NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_checkpoint_list(NULL, info, 1, &n), EMBER_EINVAL);
	CHECK_RC(ember_recovery_info_get(NULL, &ri), EMBER_EINVAL);
	CHECK_RC(ember_error_detail(NULL, buf, sizeof(buf)), EMBER_EINVAL);
	char dir[512];
	CHECK(tu_tmpdir_make("rec-bad", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	opts_small(&o, 0);
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = open_db(dir, &o);
	CHECK_RC(ember_checkpoint_list(db, NULL, 1, &n), EMBER_EINVAL);
	CHECK_RC(ember_checkpoint_list(db, info, 1, NULL), EMBER_EINVAL);
	CHECK_OK(ember_checkpoint_list(db, NULL, 0, &n));
	CHECK_RC(ember_recovery_info_get(db, NULL), EMBER_EINVAL);
	CHECK_RC(ember_error_detail(db, NULL, 10), EMBER_EINVAL);
	CHECK_RC(ember_error_detail(db, buf, 0), EMBER_EINVAL);
	CHECK_RC(ember_error_detail(db, buf, sizeof(buf)), EMBER_ENOTFOUND);
	CHECK_OK(ember_recovery_info_get(db, &ri));
	CHECK(ri.checkpoint_id == 0, "a new store recovered nothing");
	/* an empty store checkpoints fine, and twice */
	CHECK_OK(ember_checkpoint(db, NULL));
	CHECK_OK(ember_checkpoint(db, NULL));
	o.flags = 0x80;
	ember_db *db2 = NULL;
	CHECK_RC(ember_open(dir, &o, &db2), EMBER_EINVAL);
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

int main(int argc, char **argv)
{
	tu_init("recovery", argc, argv);
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"bad_args", test_bad_args},   {"list", test_list},
		{"clean_close", test_clean_close}, {"crash", test_crash},
		{"geometry", test_geometry},   {"readonly", test_readonly},
		{"partial", test_partial},     {"damaged", test_damaged},
		{"truncate", test_truncate},   {"background", test_background},
	};
	const char *only = getenv("EMBER_TEST_ONLY");
	int failed = 0;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (only && !strstr(tests[i].name, only))
			continue;
		double t0 = tu_now();
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			tests[i].fn();
			fflush(NULL);
			_exit(0);
		}
		int st = 0;
		CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			printf("  %-12s FAILED\n", tests[i].name);
			failed++;
			continue;
		}
		printf("  %-12s ok (%.2fs)\n", tests[i].name, tu_now() - t0);
	}
	printf("recovery: %s\n", failed ? "FAILED" : "OK");
	return failed ? 1 : 0;
}
