/*
 * api_errors.c - every public call, given bad input, returns the documented code
 * and never crashes; the documented edge cases of good input work.
 *
 * Each test_* function below checks one part of the contract in include/ember.h and
 * cleans up after itself. Where the header leaves a choice open (for example whether
 * a bad element of a get_batch array fails the whole call or only its status[]),
 * both documented readings are accepted and the comment says so.
 */
#include "ember.h"
#include "test_util.h"

#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL_LOG (8u << 20)
#define SUPERBLOCK "ember.super"
#define CB_REFUSED (-31000) /* a callback's own error code */

/* A non-NULL pointer that must not be dereferenced nor returned. */
#define POISON_DB ((ember_db *)(uintptr_t)0x5a5a5a5a)

static void small_opts(ember_options *o)
{
	ember_options_default(o);
	o->log_memory = SMALL_LOG;
	o->page_size = 64u << 10;
	o->index_buckets = 1u << 10;
	o->flags = EMBER_OPEN_TRUNCATE;
}

/* Open a fresh small store in a new temp dir. */
static ember_db *open_small(char *dir, size_t cap, const char *tag)
{
	CHECK(tu_tmpdir_make(tag, dir, cap) == 0, "mkdtemp");
	ember_options o;
	small_opts(&o);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK(db != NULL, "ember_open returned 0 but no handle");
	return db;
}

static void close_and_remove(ember_db *db, ember_session *s, const char *dir)
{
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

/* ---- version, strerror, defaults ---------------------------------------------------- */

static void test_version_strerror(void)
{
	CHECK(ember_version() != NULL, "ember_version() NULL");
	CHECK(strcmp(ember_version(), EMBER_VERSION_STRING) == 0, "ember_version() '%s' != '%s'",
	      ember_version(), EMBER_VERSION_STRING);
	CHECK(EMBER_VERSION_NUMBER == 100, "EMBER_VERSION_NUMBER %d", EMBER_VERSION_NUMBER);

	const char *msgs[15];
	for (int code = EMBER_EREADONLY; code <= EMBER_EINVAL; code++) {
		const char *m = ember_strerror(code);
		CHECK(m != NULL && m[0] != '\0', "ember_strerror(%d) empty", code);
		msgs[EMBER_EINVAL - code] = m;
	}
	/* Each Ember code has its own explanation. */
	for (int i = 0; i < 15; i++)
		for (int j = i + 1; j < 15; j++)
			CHECK(strcmp(msgs[i], msgs[j]) != 0, "codes %d and %d share '%s'",
			      EMBER_EINVAL - i, EMBER_EINVAL - j, msgs[i]);
	const int others[] = { 0,	   -ENOENT, -EIO,    -EACCES, -ENOSPC, -EINTR, 12345, 1,
			       -29999,	   -30015,  -30999,  -4096,   -4095,   -1,	   INT_MIN,
			       INT_MAX };
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		const char *m = ember_strerror(others[i]);
		CHECK(m != NULL && m[0] != '\0', "ember_strerror(%d) empty", others[i]);
	}
	CHECK(strcmp(ember_strerror(-ENOENT), ember_strerror(-EACCES)) != 0,
	      "-ENOENT and -EACCES explained alike: '%s'", ember_strerror(-ENOENT));
}

static void test_defaults(void)
{
	ember_options o;
	memset(&o, 0xff, sizeof(o));
	ember_options_default(&o);
	CHECK(o.log_memory == 256ull << 20, "default log_memory %llu",
	      (unsigned long long)o.log_memory);
	CHECK(fabs(o.mutable_fraction - 0.9) < 1e-9, "default mutable_fraction %g",
	      o.mutable_fraction);
	CHECK(o.index_buckets == 1ull << 18, "default index_buckets %llu",
	      (unsigned long long)o.index_buckets);
	CHECK(o.page_size == 1u << 20, "default page_size %u", o.page_size);
	CHECK(o.io_queue_depth == 128, "default io_queue_depth %u", o.io_queue_depth);
	CHECK(o.flags == 0, "default flags %#x", o.flags);
}

/* ---- NULL arguments ------------------------------------------------------------------- */

static void test_null_args(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-null");
	ember_session *s = NULL;
	uint8_t buf[64];
	size_t vl = 0;
	ember_options o;
	small_opts(&o);

	ember_db *d2 = POISON_DB;
	char sub[600];
	CHECK(tu_path_join(sub, sizeof(sub), dir, "nullout") == 0, "path");
	CHECK_RC(ember_open(NULL, &o, &d2), EMBER_EINVAL);
	CHECK(d2 == NULL, "failed ember_open left *db = %p", (void *)d2);
	CHECK_RC(ember_open(sub, &o, NULL), EMBER_EINVAL);

	CHECK_RC(ember_session_open(NULL, &s), EMBER_EINVAL);
	CHECK_RC(ember_session_open(db, NULL), EMBER_EINVAL);
	CHECK_OK(ember_session_open(db, &s));
	CHECK(s != NULL, "session_open returned 0 but no handle");

	CHECK_RC(ember_put(NULL, "k", 1, "v", 1), EMBER_EINVAL);
	CHECK_RC(ember_put(s, NULL, 1, "v", 1), EMBER_EINVAL);
	CHECK_RC(ember_put(s, "k", 1, NULL, 5), EMBER_EINVAL);

	CHECK_OK(ember_put(s, "k", 1, "value", 5));
	CHECK_RC(ember_get(NULL, "k", 1, buf, sizeof(buf), &vl), EMBER_EINVAL);
	CHECK_RC(ember_get(s, NULL, 1, buf, sizeof(buf), &vl), EMBER_EINVAL);
	CHECK_RC(ember_get(s, "k", 1, NULL, 10, &vl), EMBER_EINVAL);
	CHECK_RC(ember_get(s, "k", 1, buf, sizeof(buf), NULL), EMBER_EINVAL);

	CHECK_RC(ember_delete(NULL, "k", 1), EMBER_EINVAL);
	CHECK_RC(ember_delete(s, NULL, 1), EMBER_EINVAL);

	CHECK_RC(ember_rmw(NULL, "k", 1, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_rmw(s, "k", 1, NULL, NULL), EMBER_EINVAL);
	CHECK_RC(ember_rmw(s, NULL, 1, NULL, NULL), EMBER_EINVAL);

	/* get_batch: NULL arrays fail the call and leave status[] untouched. */
	const void *keys[2] = { "k", "absent" };
	size_t klens[2] = { 1, 6 }, caps[2] = { sizeof(buf), sizeof(buf) }, vlens[2];
	uint8_t b2[64];
	void *bufs[2] = { buf, b2 };
	int st[2] = { 777, 777 };
	CHECK_RC(ember_get_batch(NULL, 2, keys, klens, bufs, caps, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_get_batch(s, 2, NULL, klens, bufs, caps, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_get_batch(s, 2, keys, NULL, bufs, caps, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_get_batch(s, 2, keys, klens, NULL, caps, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_get_batch(s, 2, keys, klens, bufs, NULL, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_get_batch(s, 2, keys, klens, bufs, caps, NULL, st), EMBER_EINVAL);
	CHECK_RC(ember_get_batch(s, 2, keys, klens, bufs, caps, vlens, NULL), EMBER_EINVAL);
	CHECK(st[0] == 777 && st[1] == 777, "status[] touched by a failed get_batch");

	/* A good batch works, and n == 0 works. */
	CHECK_OK(ember_get_batch(s, 2, keys, klens, bufs, caps, vlens, st));
	CHECK(st[0] == 0 && vlens[0] == 5 && memcmp(buf, "value", 5) == 0, "batch[0] %d", st[0]);
	CHECK(st[1] == EMBER_ENOTFOUND, "batch[1] absent: %d", st[1]);
	st[0] = 777;
	CHECK_OK(ember_get_batch(s, 0, keys, klens, bufs, caps, vlens, st));
	CHECK(st[0] == 777, "n == 0 batch wrote status[0]");
	/* n == 0 with NULL arrays: nothing to look at; 0 or EINVAL are both fair. */
	int rc = ember_get_batch(s, 0, NULL, NULL, NULL, NULL, NULL, NULL);
	CHECK(rc == 0 || rc == EMBER_EINVAL, "n == 0, NULL arrays: rc %d (%s)", rc,
	      ember_strerror(rc));
	/* bufs[i] may be NULL when caps[i] == 0: that asks the size. */
	void *nbufs[2] = { NULL, NULL };
	size_t zcaps[2] = { 0, 0 };
	CHECK_OK(ember_get_batch(s, 2, keys, klens, nbufs, zcaps, vlens, st));
	CHECK(st[0] == EMBER_ERANGE && vlens[0] == 5, "size query: status %d vlen %zu", st[0],
	      vlens[0]);
	CHECK(st[1] == EMBER_ENOTFOUND, "size query of absent key: %d", st[1]);

	/*
	 * A bad element (NULL key, NULL buffer with cap > 0) either fails the whole call
	 * with EINVAL (status untouched) or shows as EINVAL in its own status.
	 */
	const void *bkeys[2] = { "k", NULL };
	st[0] = st[1] = 777;
	rc = ember_get_batch(s, 2, bkeys, klens, bufs, caps, vlens, st);
	CHECK((rc == EMBER_EINVAL && st[0] == 777 && st[1] == 777) ||
		      (rc == 0 && st[1] == EMBER_EINVAL),
	      "batch with a NULL key: rc %d (%s), status %d %d", rc, ember_strerror(rc), st[0],
	      st[1]);
	void *bbufs[2] = { buf, NULL };
	st[0] = st[1] = 777;
	klens[1] = 1;
	keys[1] = "k";
	rc = ember_get_batch(s, 2, keys, klens, bbufs, caps, vlens, st);
	CHECK((rc == EMBER_EINVAL && st[0] == 777 && st[1] == 777) ||
		      (rc == 0 && st[1] == EMBER_EINVAL),
	      "batch with a NULL buffer, cap %zu: rc %d (%s), status %d %d", caps[1], rc,
	      ember_strerror(rc), st[0], st[1]);

	close_and_remove(db, s, dir);
}

/* ---- key and value lengths ---------------------------------------------------------------- */

static int rmw_set_x(void *arg, const void *old, size_t old_len, void *out, size_t out_cap,
		     size_t *out_len)
{
	(void)arg;
	(void)old;
	(void)old_len;
	if (out_cap < 1) {
		*out_len = 1;
		return EMBER_ERANGE;
	}
	*(uint8_t *)out = 'x';
	*out_len = 1;
	return 0;
}

static void test_key_limits(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-keys");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	size_t big = EMBER_MAX_KEY_LEN + 1;
	uint8_t *key = malloc(big);
	CHECK(key != NULL, "oom");
	memset(key, 'K', big);
	uint8_t buf[16];
	size_t vl = 0;

	CHECK_RC(ember_put(s, key, 0, "v", 1), EMBER_EINVAL);
	CHECK_RC(ember_get(s, key, 0, buf, sizeof(buf), &vl), EMBER_EINVAL);
	CHECK_RC(ember_delete(s, key, 0), EMBER_EINVAL);
	CHECK_RC(ember_rmw(s, key, 0, rmw_set_x, NULL), EMBER_EINVAL);

	CHECK_RC(ember_put(s, key, big, "v", 1), EMBER_ETOOBIG);
	CHECK_RC(ember_get(s, key, big, buf, sizeof(buf), &vl), EMBER_ETOOBIG);
	CHECK_RC(ember_delete(s, key, big), EMBER_ETOOBIG);
	CHECK_RC(ember_rmw(s, key, big, rmw_set_x, NULL), EMBER_ETOOBIG);
	CHECK_RC(ember_put(s, key, SIZE_MAX, "v", 1), EMBER_ETOOBIG);

	/* The largest key works, and differs from its own prefix. */
	CHECK_OK(ember_put(s, key, EMBER_MAX_KEY_LEN, "max", 3));
	CHECK_OK(ember_get(s, key, EMBER_MAX_KEY_LEN, buf, sizeof(buf), &vl));
	CHECK(vl == 3 && memcmp(buf, "max", 3) == 0, "max key round trip");
	CHECK_RC(ember_get(s, key, EMBER_MAX_KEY_LEN - 1, buf, sizeof(buf), &vl),
		 EMBER_ENOTFOUND);
	CHECK_OK(ember_rmw(s, key, EMBER_MAX_KEY_LEN, rmw_set_x, NULL));
	CHECK_OK(ember_get(s, key, EMBER_MAX_KEY_LEN, buf, sizeof(buf), &vl));
	CHECK(vl == 1 && buf[0] == 'x', "rmw on max key");
	CHECK_OK(ember_delete(s, key, EMBER_MAX_KEY_LEN));
	CHECK_RC(ember_get(s, key, EMBER_MAX_KEY_LEN, buf, sizeof(buf), &vl), EMBER_ENOTFOUND);

	/* get_batch with a 0-length or too-long key: the call or that status says so. */
	const void *keys[2] = { key, key };
	size_t klens[2] = { 0, big }, caps[2] = { sizeof(buf), sizeof(buf) }, vlens[2];
	void *bufs[2] = { buf, buf };
	int st[2] = { 777, 777 };
	int rc = ember_get_batch(s, 2, keys, klens, bufs, caps, vlens, st);
	CHECK((rc == EMBER_EINVAL && st[0] == 777) ||
		      (rc == 0 && st[0] == EMBER_EINVAL && st[1] == EMBER_ETOOBIG),
	      "batch with klen 0 and klen max+1: rc %d (%s), status %d %d", rc, ember_strerror(rc),
	      st[0], st[1]);
	free(key);
	close_and_remove(db, s, dir);
}

static void test_value_limits_small_log(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-vals");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	size_t n = 5u << 20;
	uint8_t *v = malloc(n), *g = malloc(n);
	CHECK(v && g, "oom");
	tu_rng_fill(tu_rng_global(), v, n);
	size_t vl = 0;

	/* log_memory 8 MiB: values above 4 MiB minus header and key are refused. */
	CHECK_RC(ember_put(s, "big", 3, v, n), EMBER_ETOOBIG);
	CHECK_RC(ember_put(s, "big", 3, v, SMALL_LOG / 2), EMBER_ETOOBIG);
	CHECK_RC(ember_get(s, "big", 3, g, n, &vl), EMBER_ENOTFOUND);

	/* Just under the limit (a KiB for the header) works, also read back from disk. */
	size_t ok = SMALL_LOG / 2 - 1024;
	CHECK_OK(ember_put(s, "big", 3, v, ok));
	CHECK_OK(ember_get(s, "big", 3, g, n, &vl));
	CHECK(vl == ok && memcmp(g, v, ok) == 0, "near-limit value round trip (vl %zu)", vl);
	for (int i = 0; i < 4; i++) /* push it out of memory */
		CHECK_OK(ember_put(s, &i, sizeof(i), v + 1, ok - 8));
	memset(g, 0, n);
	CHECK_OK(ember_get(s, "big", 3, g, n, &vl));
	CHECK(vl == ok && memcmp(g, v, ok) == 0, "near-limit value from disk (vl %zu)", vl);

	free(v);
	free(g);
	close_and_remove(db, s, dir);
}

static void test_value_limits_default(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("api-default", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, NULL, &db)); /* defaults: 256 MiB log */
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	size_t n16 = 16u << 20, nmax = EMBER_MAX_VALUE_LEN;
	uint8_t *v = malloc(nmax + 1), *g = malloc(nmax);
	CHECK(v && g, "oom");
	tu_rng_fill(tu_rng_global(), v, nmax);
	size_t vl = 0;

	CHECK_OK(ember_put(s, "v16", 3, v, n16));
	CHECK_OK(ember_get(s, "v16", 3, g, nmax, &vl));
	CHECK(vl == n16 && memcmp(g, v, n16) == 0, "16 MiB round trip (vl %zu)", vl);

	CHECK_RC(ember_put(s, "vmax", 4, v, nmax + 1), EMBER_ETOOBIG);
	CHECK_RC(ember_put(s, "vmax", 4, v, SIZE_MAX), EMBER_ETOOBIG);
	/* Exactly EMBER_MAX_VALUE_LEN fits in the default logs (32 MiB per record: half
	 * of the 64 MiB cold log tail). */
	CHECK_OK(ember_put(s, "vmax", 4, v, nmax));
	memset(g, 0, nmax);
	CHECK_OK(ember_get(s, "vmax", 4, g, nmax, &vl));
	CHECK(vl == nmax && memcmp(g, v, nmax) == 0, "max-size round trip (vl %zu)", vl);
	free(v);
	free(g);
	close_and_remove(db, s, dir);
}

/* ---- get buffer sizes, empty values ------------------------------------------------------- */

static void test_get_sizes(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-get");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t buf[64];
	size_t vl = 0;

	CHECK_OK(ember_put(s, "k", 1, "0123456789", 10));
	memset(buf, 0xee, sizeof(buf));
	vl = 0;
	CHECK_RC(ember_get(s, "k", 1, buf, 4, &vl), EMBER_ERANGE);
	CHECK(vl == 10, "ERANGE needed size %zu", vl);
	for (size_t i = 4; i < sizeof(buf); i++)
		CHECK(buf[i] == 0xee, "ERANGE get wrote past cap at %zu", i);
	vl = 0;
	CHECK_RC(ember_get(s, "k", 1, NULL, 0, &vl), EMBER_ERANGE);
	CHECK(vl == 10, "size query %zu", vl);
	CHECK_RC(ember_get(s, "k", 1, buf, 9, &vl), EMBER_ERANGE);
	CHECK_OK(ember_get(s, "k", 1, buf, 10, &vl));
	CHECK(vl == 10 && memcmp(buf, "0123456789", 10) == 0, "exact-size get");
	CHECK_RC(ember_get(s, "absent", 6, NULL, 0, &vl), EMBER_ENOTFOUND);

	/* An empty value: val may be NULL; get returns 0 with vlen 0, even for cap 0. */
	CHECK_OK(ember_put(s, "empty", 5, NULL, 0));
	vl = 99;
	CHECK_OK(ember_get(s, "empty", 5, buf, sizeof(buf), &vl));
	CHECK(vl == 0, "empty value: vlen %zu", vl);
	vl = 99;
	CHECK_OK(ember_get(s, "empty", 5, NULL, 0, &vl));
	CHECK(vl == 0, "empty value, cap 0: vlen %zu", vl);
	CHECK_OK(ember_put(s, "empty2", 6, "ignored", 0));
	CHECK_OK(ember_get(s, "empty2", 6, buf, sizeof(buf), &vl));
	CHECK(vl == 0, "empty value (non-NULL val): vlen %zu", vl);
	/* Replacing an empty value and emptying a full one. */
	CHECK_OK(ember_put(s, "empty", 5, "abc", 3));
	CHECK_OK(ember_get(s, "empty", 5, buf, sizeof(buf), &vl));
	CHECK(vl == 3 && memcmp(buf, "abc", 3) == 0, "refill empty");
	CHECK_OK(ember_put(s, "k", 1, NULL, 0));
	CHECK_OK(ember_get(s, "k", 1, buf, sizeof(buf), &vl));
	CHECK(vl == 0, "emptied value: vlen %zu", vl);
	close_and_remove(db, s, dir);
}

/* ---- delete ---------------------------------------------------------------------------------- */

static void test_delete(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-del");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t buf[16];
	size_t vl = 0;
	CHECK_OK(ember_delete(s, "never", 5));
	CHECK_RC(ember_get(s, "never", 5, buf, sizeof(buf), &vl), EMBER_ENOTFOUND);
	CHECK_OK(ember_put(s, "k", 1, "v1", 2));
	CHECK_OK(ember_delete(s, "k", 1));
	CHECK_RC(ember_get(s, "k", 1, buf, sizeof(buf), &vl), EMBER_ENOTFOUND);
	CHECK_RC(ember_get(s, "k", 1, NULL, 0, &vl), EMBER_ENOTFOUND);
	CHECK_OK(ember_delete(s, "k", 1));
	CHECK_OK(ember_put(s, "k", 1, "v2", 2));
	CHECK_OK(ember_get(s, "k", 1, buf, sizeof(buf), &vl));
	CHECK(vl == 2 && memcmp(buf, "v2", 2) == 0, "put after delete");
	/* Keys that are prefixes of one another are distinct. */
	CHECK_OK(ember_put(s, "kk", 2, "v3", 2));
	CHECK_OK(ember_delete(s, "k", 1));
	CHECK_OK(ember_get(s, "kk", 2, buf, sizeof(buf), &vl));
	CHECK(vl == 2 && memcmp(buf, "v3", 2) == 0, "prefix key survived delete");
	close_and_remove(db, s, dir);
}

/* ---- put_batch ------------------------------------------------------------------------------- */

static void test_put_batch(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-pbatch");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	const void *keys[3] = { "a", "b", "a" };
	size_t klens[3] = { 1, 1, 1 };
	const void *vals[3] = { "1", "2", "3" };
	size_t vlens[3] = { 1, 1, 1 };
	int st[3] = { 7, 7, 7 };
	uint8_t buf[16];
	size_t vl = 0;
	CHECK_RC(ember_put_batch(NULL, 3, keys, klens, vals, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_put_batch(s, 3, NULL, klens, vals, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_put_batch(s, 3, keys, NULL, vals, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_put_batch(s, 3, keys, klens, NULL, vlens, st), EMBER_EINVAL);
	CHECK_RC(ember_put_batch(s, 3, keys, klens, vals, NULL, st), EMBER_EINVAL);
	CHECK_RC(ember_put_batch(s, 3, keys, klens, vals, vlens, NULL), EMBER_EINVAL);
	CHECK_OK(ember_put_batch(s, 0, NULL, NULL, NULL, NULL, NULL));
	/* One bad pair (the last) writes nothing of the batch. */
	size_t bad_klens[3] = { 1, 1, 0 };
	CHECK_RC(ember_put_batch(s, 3, keys, bad_klens, vals, vlens, st), EMBER_EINVAL);
	const void *null_vals[3] = { "1", NULL, "3" };
	CHECK_RC(ember_put_batch(s, 3, keys, klens, null_vals, vlens, st), EMBER_EINVAL);
	size_t big_vlens[3] = { 1, 1, (size_t)EMBER_MAX_VALUE_LEN + 1 };
	CHECK_RC(ember_put_batch(s, 3, keys, klens, vals, big_vlens, st), EMBER_ETOOBIG);
	CHECK(st[0] == 7 && st[1] == 7 && st[2] == 7, "status[] touched by a refused batch");
	CHECK_RC(ember_get(s, "a", 1, buf, sizeof(buf), &vl), EMBER_ENOTFOUND);
	CHECK_RC(ember_get(s, "b", 1, buf, sizeof(buf), &vl), EMBER_ENOTFOUND);
	/* In order: the key given twice keeps its later value. */
	CHECK_OK(ember_put_batch(s, 3, keys, klens, vals, vlens, st));
	CHECK(st[0] == 0 && st[1] == 0 && st[2] == 0, "status %d %d %d", st[0], st[1], st[2]);
	CHECK_OK(ember_get(s, "a", 1, buf, sizeof(buf), &vl));
	CHECK(vl == 1 && buf[0] == '3', "a holds its later value");
	CHECK_OK(ember_get(s, "b", 1, buf, sizeof(buf), &vl));
	CHECK(vl == 1 && buf[0] == '2', "b written");
	close_and_remove(db, s, dir);
}

/* ---- rmw -------------------------------------------------------------------------------------- */

typedef struct cb_arg {
	int ret;         /* what to return when not asking for room */
	size_t grow_to;  /* the new value's length */
	unsigned calls;
	bool saw_absent; /* old == NULL && old_len == 0 */
} cb_arg;

static int rmw_cb(void *argp, const void *old, size_t old_len, void *out, size_t out_cap,
		  size_t *out_len)
{
	cb_arg *a = argp;
	a->calls++;
	a->saw_absent = old == NULL && old_len == 0;
	if (a->ret != 0)
		return a->ret;
	if (out_cap < a->grow_to) {
		*out_len = a->grow_to;
		return EMBER_ERANGE;
	}
	memset(out, 'g', a->grow_to);
	*out_len = a->grow_to;
	return 0;
}

static void test_rmw(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-rmw");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t buf[8192];
	size_t vl = 0;

	/* A refusing callback: its code comes back and nothing changes. */
	CHECK_OK(ember_put(s, "k", 1, "orig", 4));
	const int refusals[] = { CB_REFUSED, -EPERM, EMBER_EINVAL, EMBER_EIO };
	for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
		cb_arg a = { .ret = refusals[i] };
		CHECK_RC(ember_rmw(s, "k", 1, rmw_cb, &a), refusals[i]);
		CHECK(a.calls >= 1 && !a.saw_absent, "refusing rmw: calls %u", a.calls);
		CHECK_OK(ember_get(s, "k", 1, buf, sizeof(buf), &vl));
		CHECK(vl == 4 && memcmp(buf, "orig", 4) == 0, "value changed by a refused rmw");
	}
	/* Refused on an absent key: it stays absent. */
	cb_arg a = { .ret = CB_REFUSED };
	CHECK_RC(ember_rmw(s, "new", 3, rmw_cb, &a), CB_REFUSED);
	CHECK(a.saw_absent, "rmw of an absent key: old not NULL/0");
	CHECK_RC(ember_get(s, "new", 3, buf, sizeof(buf), &vl), EMBER_ENOTFOUND);

	/* Creating with rmw, then growing through the ERANGE re-call. */
	a = (cb_arg){ .grow_to = 3 };
	CHECK_OK(ember_rmw(s, "new", 3, rmw_cb, &a));
	CHECK_OK(ember_get(s, "new", 3, buf, sizeof(buf), &vl));
	CHECK(vl == 3 && memcmp(buf, "ggg", 3) == 0, "rmw-created value");
	a = (cb_arg){ .grow_to = 5000 };
	CHECK_OK(ember_rmw(s, "new", 3, rmw_cb, &a));
	CHECK_OK(ember_get(s, "new", 3, buf, sizeof(buf), &vl));
	CHECK(vl == 5000 && buf[0] == 'g' && buf[4999] == 'g', "grown value (vl %zu)", vl);
	a = (cb_arg){ .grow_to = 0 };
	CHECK_OK(ember_rmw(s, "new", 3, rmw_cb, &a));
	CHECK_OK(ember_get(s, "new", 3, buf, sizeof(buf), &vl));
	CHECK(vl == 0, "rmw to empty (vl %zu)", vl);
	/* Growing past what the log accepts: ETOOBIG, value unchanged. */
	a = (cb_arg){ .grow_to = 6u << 20 };
	int rc = ember_rmw(s, "k", 1, rmw_cb, &a);
	CHECK(rc == EMBER_ETOOBIG, "rmw to 6 MiB in an 8 MiB log: rc %d (%s)", rc,
	      ember_strerror(rc));
	CHECK_OK(ember_get(s, "k", 1, buf, sizeof(buf), &vl));
	CHECK(vl == 4 && memcmp(buf, "orig", 4) == 0, "value changed by a too-big rmw");
	close_and_remove(db, s, dir);
}

/* The callback's old is NULL only for an absent key: a present empty value is not. */
static int rmw_note_old(void *arg, const void *old, size_t old_len, void *out, size_t out_cap,
			size_t *out_len)
{
	(void)old_len;
	(void)out;
	(void)out_cap;
	*(int *)arg = old != NULL ? 1 : 0;
	*out_len = 0;
	return 0;
}

static void test_rmw_present_empty(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-rmw-empty");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	size_t vl = 99;
	int nonnull = -1;
	CHECK_OK(ember_put(s, "empty", 5, NULL, 0));
	CHECK_OK(ember_rmw(s, "empty", 5, rmw_note_old, &nonnull));
	CHECK(nonnull == 1, "rmw of a present empty value (in memory): old == NULL");
	nonnull = -1;
	CHECK_OK(ember_rmw(s, "absent", 6, rmw_note_old, &nonnull));
	CHECK(nonnull == 0, "rmw of an absent key: old != NULL");

	/* The same once the record is on disk, from a fresh session (no buffers yet). */
	size_t n = 1u << 20;
	uint8_t *fill = calloc(1, n);
	CHECK(fill != NULL, "oom");
	for (int i = 0; i < 24; i++) {
		char k[16];
		int kl = sprintf(k, "fill%d", i);
		CHECK_OK(ember_put(s, k, (size_t)kl, fill, n - 4096));
	}
	free(fill);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_get(s, "empty", 5, NULL, 0, &vl));
	CHECK(vl == 0, "empty value on disk: vlen %zu", vl);
	nonnull = -1;
	CHECK_OK(ember_rmw(s, "empty", 5, rmw_note_old, &nonnull));
	CHECK(nonnull == 1, "rmw of a present empty value (on disk, fresh session): old == NULL, "
			    "which ember.h reserves for an absent key");
	close_and_remove(db, s, dir);
}

/* ---- sessions and close ----------------------------------------------------------------------- */

static void test_closed_session(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-state");
	ember_session *s = NULL, *s2 = NULL;
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_put(s, "k", 1, "v", 1));
	CHECK_OK(ember_session_close(s));
	uint8_t buf[16];
	size_t vl;
	CHECK_RC(ember_put(s, "k", 1, "v", 1), EMBER_ESTATE);
	CHECK_RC(ember_get(s, "k", 1, buf, sizeof(buf), &vl), EMBER_ESTATE);
	CHECK_RC(ember_delete(s, "k", 1), EMBER_ESTATE);
	CHECK_RC(ember_rmw(s, "k", 1, rmw_set_x, NULL), EMBER_ESTATE);
	const void *keys[1] = { "k" };
	size_t klens[1] = { 1 }, caps[1] = { sizeof(buf) }, vlens[1];
	void *bufs[1] = { buf };
	int st[1] = { 777 };
	CHECK_RC(ember_get_batch(s, 1, keys, klens, bufs, caps, vlens, st), EMBER_ESTATE);
	CHECK(st[0] == 777, "status[] touched by an ESTATE batch");
	/* "any later call with it returns EMBER_ESTATE": closing it again too. */
	CHECK_RC(ember_session_close(s), EMBER_ESTATE);
	CHECK_OK(ember_session_close(NULL));

	/* Another session still sees the data. */
	CHECK_OK(ember_session_open(db, &s2));
	CHECK_OK(ember_get(s2, "k", 1, buf, sizeof(buf), &vl));
	CHECK(vl == 1 && buf[0] == 'v', "data after session close");

	/* ember_close refuses while a session is open, and closes nothing. */
	CHECK_RC(ember_close(db), EMBER_EBUSY);
	CHECK_OK(ember_put(s2, "k2", 2, "w", 1));
	CHECK_OK(ember_get(s2, "k2", 2, buf, sizeof(buf), &vl));
	CHECK_RC(ember_put(s, "k", 1, "v", 1), EMBER_ESTATE);
	CHECK_OK(ember_session_close(s2));
	CHECK_OK(ember_close(db));
	CHECK_OK(ember_close(NULL));
	tu_tmpdir_remove(dir);
}

static void test_session_limit(void)
{
	char dir[512];
	ember_db *db = open_small(dir, sizeof(dir), "api-sess");
	ember_session **ss = calloc(EMBER_MAX_SESSIONS + 1, sizeof(*ss));
	CHECK(ss != NULL, "oom");
	for (unsigned i = 0; i < EMBER_MAX_SESSIONS; i++)
		CHECK_OK(ember_session_open(db, &ss[i]));
	CHECK_RC(ember_session_open(db, &ss[EMBER_MAX_SESSIONS]), EMBER_ENOSPC);
	/* Closing one frees a slot. */
	CHECK_OK(ember_session_close(ss[7]));
	CHECK_OK(ember_session_open(db, &ss[EMBER_MAX_SESSIONS]));
	CHECK_OK(ember_put(ss[EMBER_MAX_SESSIONS], "k", 1, "v", 1));
	for (unsigned i = 0; i <= EMBER_MAX_SESSIONS; i++)
		if (i != 7)
			CHECK_OK(ember_session_close(ss[i]));
	CHECK_OK(ember_close(db));
	free(ss);
	tu_tmpdir_remove(dir);
}

/* ---- open: directories, superblock, locking ------------------------------------------------ */

static void list_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return;
	struct dirent *e;
	printf("  %s:", dir);
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			printf(" %s", e->d_name);
	printf("\n");
	closedir(d);
}

static void write_file(const char *path, const void *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	CHECK(write(fd, data, n) == (ssize_t)n, "write %s", path);
	close(fd);
}

/* Read up to cap bytes of path; returns how many. */
static size_t read_file(const char *path, void *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	ssize_t n = read(fd, buf, cap);
	CHECK(n >= 0, "read %s", path);
	close(fd);
	return (size_t)n;
}

static void expect_open_fails(const char *dir, const ember_options *o, int want, const char *why)
{
	ember_db *db = POISON_DB;
	int rc = ember_open(dir, o, &db);
	if (want == 0)
		CHECK(rc < 0, "%s: ember_open succeeded", why);
	else
		CHECK(rc == want, "%s: rc %d (%s), want %d (%s)", why, rc, ember_strerror(rc), want,
		      ember_strerror(want));
	CHECK(db == NULL, "%s: failed ember_open left *db = %p", why, (void *)db);
	if (rc == 0 && db != NULL && db != POISON_DB)
		ember_close(db);
}

static void test_open_dirs(void)
{
	char dir[512], path[600];
	CHECK(tu_tmpdir_make("api-open", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_options o;
	small_opts(&o);

	/* A directory that cannot be created: under a regular file, or in /proc. */
	CHECK(tu_path_join(path, sizeof(path), dir, "file") == 0, "path");
	write_file(path, "x", 1);
	CHECK(tu_path_join(path, sizeof(path), dir, "file/store") == 0, "path");
	expect_open_fails(path, &o, 0, "dir under a regular file");
	expect_open_fails("/proc/ember-no-such-dir/x", &o, 0, "dir in /proc");
	CHECK(tu_path_join(path, sizeof(path), dir, "file") == 0, "path");
	expect_open_fails(path, &o, 0, "dir is a regular file");
	expect_open_fails("", &o, 0, "empty path");

	/* ember_open creates a missing directory (one level). */
	CHECK(tu_path_join(path, sizeof(path), dir, "made") == 0, "path");
	ember_db *db = NULL;
	CHECK_OK(ember_open(path, &o, &db));
	CHECK_OK(ember_close(db));

	/* An existing store is recovered without TRUNCATE (NULL opts = defaults: the
	 * store keeps its own geometry), discarded with it. */
	ember_options keep = o;
	keep.flags = 0;
	db = NULL;
	CHECK_OK(ember_open(path, &keep, &db));
	CHECK_OK(ember_close(db));
	db = NULL;
	CHECK_OK(ember_open(path, NULL, &db));
	CHECK_OK(ember_close(db));
	db = NULL;
	CHECK_OK(ember_open(path, &o, &db));

	/* A second open of an open store: EBUSY, with or without TRUNCATE. */
	expect_open_fails(path, &o, EMBER_EBUSY, "second open (TRUNCATE) of an open store");
	expect_open_fails(path, &keep, EMBER_EBUSY, "second open of an open store");
	/* The same from another process. */
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		alarm(20); /* a hang here (a lock held across fork) fails the check */
		ember_db *d2 = NULL;
		int rc = ember_open(path, &o, &d2);
		_exit(rc == EMBER_EBUSY ? 0 : 1);
	}
	int wst = 0;
	CHECK(waitpid(pid, &wst, 0) == pid, "waitpid");
	CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
	      "ember_open from another process of an open store did not return EBUSY");
	CHECK_OK(ember_close(db));

	/* Closed: opening again works (the lock is released). */
	db = NULL;
	CHECK_OK(ember_open(path, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_put(s, "k", 1, "v", 1));
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));

	tu_tmpdir_remove(dir);
}

static void test_open_superblock(void)
{
	char dir[512], sb[600];
	CHECK(tu_tmpdir_make("api-super", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_options o;
	small_opts(&o);
	ember_options keep = o;
	keep.flags = 0;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_close(db));
	list_dir(dir);
	CHECK(tu_path_join(sb, sizeof(sb), dir, SUPERBLOCK) == 0, "path");
	struct stat st;
	CHECK(stat(sb, &st) == 0 && S_ISREG(st.st_mode), "no superblock file %s", sb);

	/* Random garbage the size of a page, a short text, and zeros. */
	uint8_t junk[4096];
	tu_rng_fill(tu_rng_global(), junk, sizeof(junk));
	write_file(sb, junk, sizeof(junk));
	expect_open_fails(dir, &keep, EMBER_ENOTEMBER, "random superblock");
	write_file(sb, "hello", 5);
	expect_open_fails(dir, &keep, EMBER_ENOTEMBER, "short text superblock");
	memset(junk, 0, sizeof(junk));
	write_file(sb, junk, sizeof(junk));
	expect_open_fails(dir, &keep, EMBER_ENOTEMBER, "zeroed superblock");
	/* TRUNCATE never overwrites a file that is not Ember's (ember.h, docs/format.md
	 * 7.1): EMBER_ENOTEMBER, and the file is left byte for byte */
	tu_rng_fill(tu_rng_global(), junk, sizeof(junk));
	for (int kind = 0; kind < 3; kind++) {
		size_t n = kind == 1 ? 5 : sizeof(junk);
		if (kind == 1)
			memcpy(junk, "hello", 5);
		if (kind == 2)
			memset(junk, 0, sizeof(junk));
		write_file(sb, junk, n);
		expect_open_fails(dir, &o, EMBER_ENOTEMBER, "TRUNCATE over a foreign superblock");
		uint8_t back[4097];
		size_t got = read_file(sb, back, sizeof(back));
		CHECK(got == n && memcmp(back, junk, n) == 0,
		      "TRUNCATE overwrote a foreign superblock (kind %d: %zu bytes now)", kind, got);
	}
	tu_tmpdir_remove(dir);
}

/*
 * memory_budget's accounting (ember.h): the budget holds the hash index, the cold
 * index table, the chunk log's memory, the cold log's memory, the chunk cache and
 * the read cache; the hot log gets the rest, rounded down to pages (log_memory is
 * ignored), and the open fails with EMBER_EINVAL when that is under 8 pages. The
 * chunk log's memory is a 16th of the budget (at least 8 pages). Checked against
 * ember_stats: index_bytes, cold_index_bytes (table + chunk ring + chunk cache),
 * read_cache_bytes, cold_cache_bytes, and the hot log's memory once it is full.
 */
static void budget_case(const char *dir, uint64_t budget, uint64_t cache, uint64_t rc,
			int want_rc)
{
	const uint64_t page = 64u << 10, index = (1u << 10) * 64, table = (1u << 10) * 8;
	const uint64_t cold = 8 * page;
	ember_options o;
	small_opts(&o);
	o.memory_budget = budget;
	o.log_memory = 64u << 20; /* ignored under a budget */
	o.cold_log_memory = cold;
	o.cold_index_chunks = 1u << 10;
	o.cold_cache_memory = cache ? cache : EMBER_COLD_CACHE_OFF;
	o.read_cache_memory = rc;
	uint64_t chunk = budget / 16 / page * page;
	if (chunk < 8 * page)
		chunk = 8 * page;
	uint64_t others = index + table + cold + chunk + cache + rc;
	uint64_t hot = budget > others ? (budget - others) / page * page : 0;
	ember_db *db = NULL;
	int rc_open = ember_open(dir, &o, &db);
	CHECK(rc_open == want_rc, "budget %llu (hot log %llu pages): open %d (%s), want %d",
	      (unsigned long long)budget, (unsigned long long)(hot / page), rc_open,
	      ember_strerror(rc_open), want_rc);
	if (rc_open != 0)
		return;
	CHECK(hot >= 8 * page, "the case's arithmetic: %llu", (unsigned long long)hot);
	/* at the open (the index has no overflow buckets yet) */
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	/* a chunk-cache slot of a new (tagged) store: docs/format.md 6.3 */
	uint64_t slot = 24 + 3 * (uint64_t)o.cold_chunk_bytes / 4;
	CHECK(st.index_bytes == index && st.read_cache_bytes == rc &&
		      st.cold_cache_bytes == cache / slot * slot &&
		      st.cold_index_bytes == table + chunk + st.cold_cache_bytes,
	      "budget %llu: index %llu (want %llu), read cache %llu (want %llu), chunk cache "
	      "%llu (want %llu), cold index %llu (want %llu)", (unsigned long long)budget,
	      (unsigned long long)st.index_bytes, (unsigned long long)index,
	      (unsigned long long)st.read_cache_bytes, (unsigned long long)rc,
	      (unsigned long long)st.cold_cache_bytes, (unsigned long long)cache,
	      (unsigned long long)st.cold_index_bytes,
	      (unsigned long long)(table + chunk + cache));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t v[1000];
	memset(v, 0x5a, sizeof(v));
	for (uint64_t i = 0; i < 2 * hot / sizeof(v) + 100; i++) /* twice the hot ring */
		CHECK_OK(ember_put(s, &i, sizeof(i), v, sizeof(v)));
	CHECK_OK(ember_session_close(s));
	uint64_t index_open = st.index_bytes;
	CHECK_OK(ember_stats_get(db, &st));
	/* twice the ring written: it holds at most what the budget left it (a ring a
	 * page larger would hold more), less the headroom the log keeps free (1.8 to
	 * 2.7 pages of 8 measured, as the flushes go) */
	CHECK(st.hot.bytes_memory <= hot && st.hot.bytes_memory >= hot / 2,
	      "budget %llu: the hot log holds %llu bytes of memory, the budget leaves %llu",
	      (unsigned long long)budget, (unsigned long long)st.hot.bytes_memory,
	      (unsigned long long)hot);
	st.index_bytes = index_open; /* overflow buckets grow outside the budget */
	CHECK(st.index_bytes + st.cold_index_bytes + st.read_cache_bytes + st.hot.bytes_memory +
		      cold <= budget, "budget %llu exceeded", (unsigned long long)budget);
	CHECK_OK(ember_close(db));
}

static void test_memory_budget(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("api-budget", dir, sizeof(dir)) == 0, "mkdtemp");
	const uint64_t page = 64u << 10, fixed = (1u << 10) * 64 + (1u << 10) * 8 + 8 * page;
	/* small budgets: the chunk ring is its 8-page minimum; the hot log gets exactly
	 * 8 pages, then one byte less than that (EINVAL), then 9 pages */
	uint64_t at8 = fixed + 8 * page + 8 * page;
	budget_case(dir, at8, 0, 0, 0);
	budget_case(dir, at8 - 1, 0, 0, EMBER_EINVAL);
	budget_case(dir, at8 + page + 100, 0, 0, 0);
	/* the read cache and the chunk cache count in it */
	budget_case(dir, at8 + 8 * page, 0, 8 * page, 0);
	budget_case(dir, at8 + 8 * page - 1, 0, 8 * page, EMBER_EINVAL);
	budget_case(dir, at8 + (96u << 10), 96u << 10, 0, 0);
	budget_case(dir, at8 + (96u << 10) - 1, 96u << 10, 0, EMBER_EINVAL);
	/* a large budget: the chunk ring is a 16th of it */
	budget_case(dir, 32u << 20, 0, 0, 0);
	tu_tmpdir_remove(dir);
}

/* Another format version: EMBER_EVERSION without TRUNCATE (and read-only); TRUNCATE
 * discards it and creates the store (docs/format.md 7.1). The version field is at
 * offset 8, the checksum (XXH3_64bits of bytes 0..4087) at 4088 (7.2). */
static void test_open_version(void)
{
	char dir[512], sb[600];
	CHECK(tu_tmpdir_make("api-version", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_options o;
	small_opts(&o);
	ember_options keep = o, ro = o;
	keep.flags = 0;
	ro.flags = EMBER_OPEN_READONLY;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_put(s, "k", 1, "v", 1));
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	CHECK(tu_path_join(sb, sizeof(sb), dir, SUPERBLOCK) == 0, "path");
	uint8_t good[4096], bad[4096];
	CHECK(read_file(sb, good, sizeof(good)) == sizeof(good), "superblock size");
	static const uint32_t versions[] = {0, 1, 5, 99, UINT32_MAX};
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		memcpy(bad, good, sizeof(bad));
		memcpy(bad + 8, &versions[i], 4);
		uint64_t sum = XXH3_64bits(bad, 4088);
		memcpy(bad + 4088, &sum, 8);
		write_file(sb, bad, sizeof(bad));
		expect_open_fails(dir, &keep, EMBER_EVERSION, "another format version");
		expect_open_fails(dir, &ro, EMBER_EVERSION, "another format version, read-only");
	}
	/* the checksum left stale: corruption, not a version */
	memcpy(bad, good, sizeof(bad));
	bad[8] ^= 0x40;
	write_file(sb, bad, sizeof(bad));
	expect_open_fails(dir, &keep, EMBER_ECORRUPT, "a version field that fails the checksum");
	/* TRUNCATE discards the store of another version: a new, empty store */
	memcpy(bad, good, sizeof(bad));
	uint32_t v = 99;
	memcpy(bad + 8, &v, 4);
	uint64_t sum = XXH3_64bits(bad, 4088);
	memcpy(bad + 4088, &sum, 8);
	write_file(sb, bad, sizeof(bad));
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_close(db));
	CHECK_OK(ember_open(dir, &keep, &db));
	CHECK_OK(ember_session_open(db, &s));
	char buf[8];
	size_t vl = 0;
	CHECK_RC(ember_get(s, "k", 1, buf, sizeof(buf), &vl), EMBER_ENOTFOUND);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	CHECK(read_file(sb, bad, sizeof(bad)) == sizeof(bad) && memcmp(bad + 8, good + 8, 4) == 0,
	      "the new store's superblock has this library's version");
	tu_tmpdir_remove(dir);
}

/* ---- options -------------------------------------------------------------------------------- */

static void test_bad_options(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("api-opts", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_options o;
#define BAD(field, value)                                                                   \
	do {                                                                                \
		small_opts(&o);                                                             \
		o.field = (value);                                                          \
		expect_open_fails(dir, &o, EMBER_EINVAL, #field " = " #value);             \
	} while (0)
	BAD(page_size, 100000);
	BAD(page_size, (64u << 10) + 1);
	BAD(page_size, 3u << 16);
	BAD(page_size, 32u << 10);
	BAD(page_size, 4096);
	BAD(page_size, 128u << 20);
	BAD(page_size, 1u << 31);
	BAD(mutable_fraction, 1.5);
	BAD(mutable_fraction, 1.0000001);
	BAD(mutable_fraction, -0.5);
	BAD(mutable_fraction, -1e-9);
	BAD(mutable_fraction, NAN);
	BAD(mutable_fraction, INFINITY);
	BAD(mutable_fraction, -INFINITY);
	BAD(io_queue_depth, 4097);
	BAD(io_queue_depth, UINT32_MAX);
	BAD(log_memory, 4u * (64u << 10)); /* fewer than 8 pages */
	BAD(log_memory, 8u * (64u << 10) - 1);
	BAD(cold_cache_memory, (1ull << 44) + 1);
	BAD(cold_cache_memory, UINT64_MAX - 1); /* only UINT64_MAX itself means "off" */
	BAD(flags, 0x80000000u);                /* no such flag */
	BAD(flags, EMBER_OPEN_TRUNCATE | EMBER_OPEN_READONLY);
	BAD(flags, EMBER_OPEN_PREWRITE_LOG | EMBER_OPEN_READONLY);
	BAD(flags, EMBER_OPEN_PREWRITE_LOG); /* a store in one file */
#undef BAD
	/* An index too big to allocate: a negative code, never a crash. */
	small_opts(&o);
	o.index_buckets = 1ull << 60;
	expect_open_fails(dir, &o, 0, "index_buckets 2^60");

	/* Boundary values that are valid. */
	struct {
		const char *what;
		ember_options o;
	} good[10];
	int ng = 0;
	small_opts(&good[ng].o), good[ng].o.mutable_fraction = 1.0, good[ng++].what = "f = 1";
	small_opts(&good[ng].o), good[ng].o.mutable_fraction = 0.01, good[ng++].what = "f = 0.01";
	small_opts(&good[ng].o), good[ng].o.io_queue_depth = 4096, good[ng++].what = "depth 4096";
	small_opts(&good[ng].o), good[ng].o.io_queue_depth = 1, good[ng++].what = "depth 1";
	small_opts(&good[ng].o), good[ng].o.log_memory = 8u * (64u << 10),
		good[ng++].what = "log = 8 pages";
	small_opts(&good[ng].o), good[ng].o.log_memory = 8u * (64u << 10) + 1000,
		good[ng++].what = "log = 8 pages + 1000";
	small_opts(&good[ng].o), good[ng].o.index_buckets = 1000,
		good[ng++].what = "1000 buckets (rounded up)";
	small_opts(&good[ng].o), good[ng].o.page_size = 1u << 20, good[ng].o.log_memory = 8u << 20,
		good[ng++].what = "1 MiB pages, 8 pages";
	small_opts(&good[ng].o), good[ng].o.cold_cache_memory = EMBER_COLD_CACHE_OFF,
		good[ng++].what = "no cold chunk cache";
	small_opts(&good[ng].o), good[ng].o.cold_cache_memory = 400,
		good[ng++].what = "a cold chunk cache of 2 slots";
	for (int i = 0; i < ng; i++) {
		ember_db *db = NULL;
		int rc = ember_open(dir, &good[i].o, &db);
		CHECK(rc == 0, "valid options (%s): rc %d (%s)", good[i].what, rc, ember_strerror(rc));
		ember_session *s = NULL;
		rc = ember_session_open(db, &s);
		/* A deep io_uring may be refused by the OS (-errno), never as EINVAL. */
		CHECK(rc == 0 || (rc < 0 && rc > -4096), "session with %s: rc %d (%s)", good[i].what,
		      rc, ember_strerror(rc));
		if (rc == 0) {
			uint8_t buf[8];
			size_t vl;
			CHECK_OK(ember_put(s, "k", 1, "v", 1));
			CHECK_OK(ember_get(s, "k", 1, buf, sizeof(buf), &vl));
			CHECK_OK(ember_session_close(s));
		}
		CHECK_OK(ember_close(db));
	}
	tu_tmpdir_remove(dir);
}

/*
 * A huge hot_disk_budget ("no limit") must not wrap the cold log's default budget
 * (4 x hot_disk_budget) round to almost nothing: with 2^62 the product is 0 mod
 * 2^64, and the cold log ended up with the 2 x cold_log_memory floor, so a forced
 * compaction of a few MiB of live data into it made every later put EMBER_ENOSPC.
 */
static void test_huge_disk_budget(void)
{
	static const uint64_t budgets[] = { UINT64_C(1) << 61, UINT64_C(1) << 62,
					    (UINT64_C(1) << 62) + (UINT64_C(1) << 20), UINT64_MAX };
	for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++) {
		char dir[512];
		CHECK(tu_tmpdir_make("api-budget", dir, sizeof(dir)) == 0, "mkdtemp");
		ember_options o;
		small_opts(&o);
		o.log_memory = 1u << 20;       /* 16 pages */
		o.cold_log_memory = 1u << 20;  /* floor of the cold budget: 2 MiB */
		o.hot_disk_budget = budgets[b];
		ember_db *db = NULL;
		CHECK_OK(ember_open(dir, &o, &db));
		ember_session *s = NULL;
		CHECK_OK(ember_session_open(db, &s));
		char val[1024];
		memset(val, 'v', sizeof(val));
		for (uint32_t i = 0; i < 6000; i++) /* about 6 MiB live */
			CHECK_OK(ember_put(s, &i, sizeof(i), val, sizeof(val)));
		CHECK_OK(ember_compact(db, 1));
		uint32_t k = 999999;
		int rc = ember_put(s, &k, sizeof(k), val, sizeof(val));
		CHECK(rc == 0, "hot_disk_budget %#llx: put after compaction: %d (%s)",
		      (unsigned long long)budgets[b], rc, ember_strerror(rc));
		close_and_remove(db, s, dir);
	}
}

/*
 * ember_iterate on the store being walked, from its own fn, returns EMBER_ESTATE,
 * also after fn walked another store first: the inner walk used to clear the
 * thread's "walking" mark on its way out, so the outer store's second walk then
 * waited for the compaction lock its own thread held (a hang).
 */
struct nested_walk {
	ember_db *self, *other;
	int calls, inner_other, inner_self;
};

static int count_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	(void)k, (void)kl, (void)v, (void)vl;
	++*(int *)arg;
	return 0;
}

static int nested_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	(void)k, (void)kl, (void)v, (void)vl;
	struct nested_walk *w = arg;
	if (w->calls++ == 0) {
		int n = 0;
		w->inner_other = ember_iterate(w->other, count_fn, &n);
		if (w->inner_other == 0 && n != 1)
			w->inner_other = -1;
		w->inner_self = ember_iterate(w->self, count_fn, &n);
	}
	return 0;
}

static void test_iterate_nested(void)
{
	char da[512], db_[512];
	ember_db *a = open_small(da, sizeof(da), "api-walk-a");
	ember_db *b = open_small(db_, sizeof(db_), "api-walk-b");
	ember_session *sa = NULL, *sb = NULL;
	CHECK_OK(ember_session_open(a, &sa));
	CHECK_OK(ember_session_open(b, &sb));
	CHECK_OK(ember_put(sa, "a", 1, "1", 1));
	CHECK_OK(ember_put(sb, "b", 1, "2", 1));
	alarm(60); /* a hang is the failure this test looks for */
	struct nested_walk w = { a, b, 0, 1, 1 };
	CHECK_OK(ember_iterate(a, nested_fn, &w));
	CHECK(w.calls == 1, "outer walk saw %d keys", w.calls);
	CHECK(w.inner_other == 0, "walk of another store from fn: %d", w.inner_other);
	CHECK_RC(w.inner_self, EMBER_ESTATE);
	/* and a plain nested walk of the same store still refuses */
	struct nested_walk w2 = { a, a, 0, 1, 1 };
	CHECK_OK(ember_iterate(a, nested_fn, &w2));
	CHECK_RC(w2.inner_other, EMBER_ESTATE);
	CHECK_RC(w2.inner_self, EMBER_ESTATE);
	alarm(0);
	close_and_remove(b, sb, db_);
	close_and_remove(a, sa, da);
}

/*
 * A FIFO under a store file's name fails the open with an error code: an O_RDONLY
 * open of a FIFO waits for a writer, so the superblock's read (every open) and a
 * read-only open's logs used to hang.
 */
static void expect_open_error(const char *dir, uint32_t flags, const char *what)
{
	ember_options o;
	small_opts(&o);
	o.flags = flags;
	ember_db *db = NULL;
	alarm(30); /* a hang is the failure this test looks for */
	int rc = ember_open(dir, &o, &db);
	alarm(0);
	CHECK(rc < 0 && db == NULL, "%s: ember_open returned %d", what, rc);
}

static void test_open_fifo(void)
{
	char dir[512], path[600];
	CHECK(tu_tmpdir_make("api-fifo", dir, sizeof(dir)) == 0, "mkdtemp");
	CHECK(tu_path_join(path, sizeof(path), dir, SUPERBLOCK) == 0, "path");
	CHECK(mkfifo(path, 0644) == 0, "mkfifo: %s", strerror(errno));
	expect_open_error(dir, 0, "a FIFO as the superblock");
	expect_open_error(dir, EMBER_OPEN_READONLY, "a FIFO as the superblock, read-only");
	expect_open_error(dir, EMBER_OPEN_TRUNCATE, "a FIFO as the superblock, truncate");
	CHECK(unlink(path) == 0, "unlink");

	/* a store whose hot.log became a FIFO: a read-only open reads it O_RDONLY */
	ember_options o;
	small_opts(&o);
	ember_db *db = NULL;
	ember_session *s = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_put(s, "k", 1, "v", 1));
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	const char *files[] = { "hot.log", "LOCK" };
	for (size_t i = 0; i < 2; i++) {
		CHECK(tu_path_join(path, sizeof(path), dir, files[i]) == 0, "path");
		CHECK(unlink(path) == 0 && mkfifo(path, 0644) == 0, "mkfifo %s", files[i]);
		if (i == 0) {
			expect_open_error(dir, EMBER_OPEN_READONLY, "a FIFO as hot.log, read-only");
			expect_open_error(dir, 0, "a FIFO as hot.log");
			CHECK(unlink(path) == 0, "unlink");
			int fd = open(path, O_CREAT | O_WRONLY, 0644); /* back, empty: not opened */
			CHECK(fd >= 0, "recreate");
			close(fd);
		} else {
			/* a FIFO as LOCK is only a lock: the open must not wait on it (it
			 * gets past the lock, then fails on the emptied hot.log) */
			small_opts(&o);
			o.flags = EMBER_OPEN_READONLY;
			alarm(30);
			int rc = ember_open(dir, &o, &db);
			alarm(0);
			CHECK(rc != 0 || ember_close(db) == 0, "close");
		}
	}
	tu_tmpdir_remove(dir);
}

/*
 * read_cache_memory is at least 8 pages of the store's page size: on a reopen the
 * store's page size replaces the options', and a read cache checked against the
 * options' smaller pages used to be floored to 0 or 1 of the store's pages
 * without a word (ember_stats_get: read_cache_bytes 0).
 */
static void test_reopen_read_cache_pages(void)
{
	char dir[512];
	CHECK(tu_tmpdir_make("api-rcpages", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_options o;
	small_opts(&o);
	o.page_size = 1u << 20; /* the store's pages: 1 MiB */
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_close(db));
	small_opts(&o);
	o.flags = 0;
	o.page_size = 64u << 10;
	o.read_cache_memory = 512u << 10; /* 8 pages of 64 KiB, under one of 1 MiB */
	int rc = ember_open(dir, &o, &db);
	if (rc == 0) {
		ember_stats st;
		CHECK_OK(ember_stats_get(db, &st));
		CHECK_OK(ember_close(db));
		CHECK(0, "reopen with a read cache under 8 store pages: 0, read_cache_bytes %llu",
		      (unsigned long long)st.read_cache_bytes);
	}
	CHECK_RC(rc, EMBER_EINVAL);
	o.read_cache_memory = 8u << 20; /* 8 of the store's pages: fine */
	CHECK_OK(ember_open(dir, &o, &db));
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	CHECK(st.read_cache_bytes == 8u << 20, "read_cache_bytes %llu",
	      (unsigned long long)st.read_cache_bytes);
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
}

int main(int argc, char **argv)
{
	tu_init("api_errors", argc, argv);
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{ "version_strerror", test_version_strerror },
		{ "defaults", test_defaults },
		{ "null_args", test_null_args },
		{ "key_limits", test_key_limits },
		{ "value_limits_small_log", test_value_limits_small_log },
		{ "value_limits_default", test_value_limits_default },
		{ "get_sizes", test_get_sizes },
		{ "delete", test_delete },
		{ "put_batch", test_put_batch },
		{ "rmw", test_rmw },
		{ "rmw_present_empty", test_rmw_present_empty },
		{ "closed_session", test_closed_session },
		{ "session_limit", test_session_limit },
		{ "open_dirs", test_open_dirs },
		{ "open_superblock", test_open_superblock },
		{ "open_version", test_open_version },
		{ "memory_budget", test_memory_budget },
		{ "bad_options", test_bad_options },
		{ "huge_disk_budget", test_huge_disk_budget },
		{ "iterate_nested", test_iterate_nested },
		{ "open_fifo", test_open_fifo },
		{ "reopen_read_cache_pages", test_reopen_read_cache_pages },
	};
	/*
	 * Each test runs in a child process, so one failure does not hide the checks
	 * of the tests after it (the parent never opens a store, so it forks while
	 * single-threaded). EMBER_TEST_NOFORK=1 runs them in-process (for a debugger);
	 * EMBER_TEST_ONLY=<substring> picks tests by name.
	 */
	const char *only = getenv("EMBER_TEST_ONLY");
	const char *nofork = getenv("EMBER_TEST_NOFORK");
	int failed = 0;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (only != NULL && strstr(tests[i].name, only) == NULL)
			continue;
		double t0 = tu_now();
		if (nofork != NULL && *nofork != '\0') {
			tests[i].fn();
		} else {
			fflush(NULL);
			pid_t pid = fork();
			CHECK(pid >= 0, "fork: %s", strerror(errno));
			if (pid == 0) {
				tests[i].fn();
				fflush(NULL);
				_exit(0);
			}
			int st = 0;
			CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				if (WIFSIGNALED(st))
					printf("  %-24s FAILED (signal %d)\n", tests[i].name, WTERMSIG(st));
				else
					printf("  %-24s FAILED\n", tests[i].name);
				failed++;
				continue;
			}
		}
		printf("  %-24s ok (%.2fs)\n", tests[i].name, tu_now() - t0);
	}
	if (failed) {
		printf("api_errors: %d test(s) FAILED, seed=%llu\n", failed,
		       (unsigned long long)tu_seed());
		return 1;
	}
	printf("api_errors: OK\n");
	return 0;
}
