/*
 * test_verdict.c - one verdict per damaged record, whichever path reads it.
 *
 * A corpus of damaged hot-log records on disk: truncated (its second half reads as
 * zeros), a bad checksum, bad lengths (key_len too large; val_len over val_cap),
 * a wrong key (another key's well-formed record, checksum and all, where the index
 * names this key's), and torn across a page (the part past its first 4 KiB block
 * boundary holds another record's bytes), a chain link that points up and a reserved
 * header bit (both with a recomputed checksum: well-formed but for that one rule),
 * plus an undamaged control. For each case
 * a store is built afresh, one record damaged in hot.log, and the same record asked
 * about four ways:
 *   get       ember_get of its key after a read-only open
 *   verify    ember_verify of that store
 *   iterate   ember_iterate: its key, and whether the walk fails
 *   recovery  a read-only open whose checkpoint replays the whole hot log (its meta's
 *             hot_replay moved down to hot_begin, checksum recomputed: docs/format.md
 *             7.6), then ember_get of its key
 * Each path's answer is one of: intact (the value), absent (not found, no damage
 * reported) or damaged (EMBER_ECORRUPT, or errors counted). All four must agree, and
 * agree with the case: damage reads as damaged; a wrong key as absent; the control
 * as intact.
 */
#include <ember.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/record.h"
#include "test_util.h"

enum { V_INTACT, V_ABSENT, V_DAMAGED };
static const char *const verdict_name[] = {"intact", "absent", "damaged"};

enum { C_NONE, C_TRUNCATED, C_CHECKSUM, C_KEY_LEN, C_VAL_LEN, C_WRONG_KEY, C_TORN, C_PREV,
       C_RESERVED, NCASE };
static const char *const case_name[NCASE] = {"undamaged", "truncated", "bad checksum",
					     "bad key_len", "val_len over val_cap", "wrong key",
					     "torn across a page", "prev above itself",
					     "reserved header bit"};
static const int expected[NCASE] = {V_INTACT, V_DAMAGED, V_DAMAGED, V_DAMAGED, V_DAMAGED,
				    V_ABSENT, V_DAMAGED, V_DAMAGED, V_DAMAGED};

#define VLEN 6000u /* a record of two 4 KiB blocks at least */
#define NPAD 400
static char dir[512];
static uint8_t val[VLEN], got[VLEN + 64];
static const char KEY[] = "verdict/target";

static void opts(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 512u << 10;
	o->cold_log_memory = 512u << 10;
	o->hot_disk_budget = 64u << 20; /* no compaction */
	o->cold_disk_budget = 64u << 20;
	o->flags = flags;
}

static void pad(ember_session *s, int from, int n)
{
	uint8_t v[300];
	char k[32];
	for (int i = from; i < from + n; i++) {
		memset(v, i & 0xff, sizeof(v));
		int kl = snprintf(k, sizeof(k), "verdict/pad/%d", i);
		CHECK_OK(ember_put(s, k, (size_t)kl, v, 100 + (size_t)(i % 200)));
	}
}

/* The target's record between padding, then a checkpoint (replaying nothing of it). */
static void build(void)
{
	ember_options o;
	opts(&o, EMBER_OPEN_TRUNCATE);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	pad(s, 0, NPAD);
	CHECK_OK(ember_put(s, KEY, strlen(KEY), val, VLEN));
	pad(s, NPAD, NPAD); /* the target is not in the last block */
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_checkpoint(db, NULL));
	CHECK_OK(ember_close(db));
}

static int open_file(const char *name, int flags)
{
	char p[700];
	CHECK(tu_path_join(p, sizeof(p), dir, name) == 0, "path");
	int fd = open(p, flags);
	CHECK(fd >= 0, "open %s: %s", p, strerror(errno));
	return fd;
}

/* The target's record offset in hot.log (found by its value's first 16 bytes). */
static uint64_t find_target(int fd, uint8_t **file, size_t *len)
{
	struct stat st;
	CHECK(fstat(fd, &st) == 0, "stat");
	*len = (size_t)st.st_size;
	*file = malloc(*len);
	CHECK(*file, "malloc");
	CHECK(pread(fd, *file, *len, 0) == (ssize_t)*len, "read hot.log");
	size_t kpad = (sizeof(KEY) - 1 + 7) & ~(size_t)7;
	for (size_t off = 32 + kpad; off + VLEN <= *len; off += 8)
		if (memcmp(*file + off, val, 16) == 0)
			return off - 32 - kpad;
	CHECK(0, "the target's record is not in hot.log");
	return 0;
}

static void damage(int c)
{
	int fd = open_file("hot.log", O_RDWR);
	uint8_t *file;
	size_t len;
	uint64_t at = find_target(fd, &file, &len);
	struct record *r = (struct record *)(void *)(file + at);
	uint64_t size = rec_total_size(r), cut = (at + 4096) & ~(uint64_t)4095;
	CHECK(cut > at + REC_HDR_SIZE && cut < at + size, "the record spans a block boundary");
	switch (c) {
	case C_TRUNCATED:
		memset(file + at + size / 2, 0, size - size / 2);
		break;
	case C_CHECKSUM: r->checksum ^= 0x80000000u; break;
	case C_KEY_LEN: r->key_len = EMBER_MAX_KEY_LEN + 8; break;
	case C_VAL_LEN: atomic_store(&r->val_len, r->val_cap + 8); break;
	case C_WRONG_KEY:
		rec_key(r)[r->key_len - 1] ^= 0x01; /* another key, well-formed */
		r->checksum = rec_checksum(r);
		break;
	case C_TORN: /* bytes of an earlier record where the second page was not written */
		memcpy(file + cut, file + 4096, at + size - cut);
		break;
	case C_PREV: /* a link to a newer address, checksum recomputed */
		atomic_store(&r->header, (atomic_load(&r->header) & ~EM_ADDR_MASK) | (at + size));
		r->checksum = rec_checksum(r);
		break;
	case C_RESERVED:
		atomic_fetch_or(&r->header, UINT64_C(1) << 60);
		r->checksum = rec_checksum(r);
		break;
	default: break;
	}
	CHECK(pwrite(fd, file + at, size, (off_t)at) == (ssize_t)size, "write hot.log");
	close(fd);
	free(file);
}

/* Move the newest checkpoint's hot_replay down to hot_begin (format.md 7.6). */
static void replay_everything(void)
{
	char p[700], name[64] = "";
	CHECK(tu_path_join(p, sizeof(p), dir, "checkpoints") == 0, "path");
	DIR *d = opendir(p);
	CHECK(d, "opendir %s", p);
	struct dirent *e;
	while ((e = readdir(d)))
		if (strlen(e->d_name) == 16 && strcmp(e->d_name, name) > 0)
			snprintf(name, sizeof(name), "%s", e->d_name);
	closedir(d);
	CHECK(name[0], "no checkpoint");
	char rel[128];
	snprintf(rel, sizeof(rel), "checkpoints/%s/meta", name);
	int fd = open_file(rel, O_RDWR);
	uint8_t m[4096];
	CHECK(pread(fd, m, sizeof(m), 0) == (ssize_t)sizeof(m), "read meta");
	memcpy(m + 96, m + 88, 8); /* hot_replay = hot_begin */
	uint64_t sum = XXH3_64bits(m, 4088);
	memcpy(m + 4088, &sum, 8);
	CHECK(pwrite(fd, m, sizeof(m), 0) == (ssize_t)sizeof(m), "write meta");
	close(fd);
}

static int get_verdict(ember_db *db)
{
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	size_t n = 0;
	int rc = ember_get(s, KEY, strlen(KEY), got, sizeof(got), &n);
	CHECK_OK(ember_session_close(s));
	if (rc == 0) {
		CHECK(n == VLEN && memcmp(got, val, VLEN) == 0, "ember_get returned another value");
		return V_INTACT;
	}
	if (rc == EMBER_ENOTFOUND)
		return V_ABSENT;
	CHECK(rc == EMBER_ECORRUPT || rc == EMBER_EIO, "ember_get: %s", ember_strerror(rc));
	return V_DAMAGED;
}

struct seen {
	int found, same;
};

static int iter_fn(void *arg, const void *key, size_t klen, const void *v, size_t vlen)
{
	struct seen *x = arg;
	if (klen == strlen(KEY) && memcmp(key, KEY, klen) == 0) {
		x->found++;
		x->same = vlen == VLEN && memcmp(v, val, VLEN) == 0;
	}
	return 0;
}

static void run_case(int c, int verdict[4])
{
	build();
	damage(c);
	ember_options o;
	opts(&o, EMBER_OPEN_READONLY);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	verdict[0] = get_verdict(db);
	ember_verify_report rep;
	int rc = ember_verify(db, &rep);
	CHECK(rc == 0 || rc == EMBER_ECORRUPT, "ember_verify: %s", ember_strerror(rc));
	/* verify tells damage from no damage only: clean agrees with intact and absent */
	verdict[1] = rep.errors ? V_DAMAGED : verdict[0] == V_DAMAGED ? V_INTACT : verdict[0];
	if (rep.errors)
		printf("    verify: %s\n", rep.first_error);
	struct seen x = {0, 0};
	rc = ember_iterate(db, iter_fn, &x);
	CHECK(rc == 0 || rc == EMBER_ECORRUPT, "ember_iterate: %s", ember_strerror(rc));
	CHECK(x.found <= 1 && (!x.found || x.same), "iterate yields the key once, with its value");
	verdict[2] = rc ? V_DAMAGED : x.found ? V_INTACT : V_ABSENT;
	CHECK_OK(ember_close(db));

	replay_everything();
	db = NULL;
	rc = ember_open(dir, &o, &db);
	if (rc == 0) {
		ember_recovery_info ri;
		CHECK_OK(ember_recovery_info_get(db, &ri));
		CHECK(ri.records_replayed > 2 * NPAD, "the whole hot log was replayed (%llu)",
		      (unsigned long long)ri.records_replayed);
		verdict[3] = get_verdict(db);
		CHECK_OK(ember_close(db));
	} else {
		CHECK(rc == EMBER_ECORRUPT, "recovery: %s", ember_strerror(rc));
		verdict[3] = V_DAMAGED;
	}
}

int main(int argc, char **argv)
{
	tu_init("test_verdict", argc, argv);
	CHECK(tu_tmpdir_make("verdict", dir, sizeof(dir)) == 0, "tmpdir");
	for (size_t i = 0; i < VLEN; i++)
		val[i] = (uint8_t)(tu_rng_next(tu_rng_global()) >> 56);
	static const char *const path[4] = {"get", "verify", "iterate", "recovery"};
	for (int c = 0; c < NCASE; c++) {
		int v[4];
		run_case(c, v);
		printf("  %-22s get %-7s verify %-7s iterate %-7s recovery %s\n", case_name[c],
		       verdict_name[v[0]], verdict_name[v[1]], verdict_name[v[2]], verdict_name[v[3]]);
		for (int p = 0; p < 4; p++)
			CHECK(v[p] == expected[c], "%s: %s says %s, expected %s", case_name[c], path[p],
			      verdict_name[v[p]], verdict_name[expected[c]]);
	}
	CHECK(tu_tmpdir_remove(dir) == 0, "rmdir");
	printf("test_verdict: OK\n");
	return 0;
}
