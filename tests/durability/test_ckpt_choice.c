/*
 * test_ckpt_choice.c - which checkpoint recovery takes (recovery.c, ckpt_find):
 *
 *   copy     a checkpoint's directory copied under a newer id, its meta still
 *            naming the old one (a restored backup): skipped as damaged; the real
 *            one recovers every key, and the next checkpoints write nothing over it.
 *            Taken as the newest before, the copy was checkpoint "old id", and the
 *            next checkpoint of that id wrote over it in place.
 *   many     80 leftover partial directories with older ids beside the real one:
 *            recovery finds the newest (it listed the first 64 in readdir order).
 *   stray    a file in checkpoints/ and one inside an old checkpoint's directory:
 *            log space is still given back (the floor rises only once older
 *            checkpoints are removed, and these must not count as such).
 *   huge     the newest checkpoint's meta, then its hot.index, grown to 1 TiB (a
 *            sparse file): skipped as damaged without reading or allocating its
 *            size, and the older one beside it recovered. Before, the open
 *            allocated the file's size and failed with EMBER_ENOMEM.
 *   file     a regular file under the next checkpoint's name: the open skips it
 *            as a partial checkpoint and removes it (it failed with -ENOTDIR; as
 *            damage, it failed an open that had no complete checkpoint), and a
 *            file put there later does not stop the next checkpoint (it failed,
 *            and every one after it, since they all took the same id).
 *   above    70 partial directories with newer ids than the one complete checkpoint
 *            (what checkpoints that never completed leave): the open recovers it,
 *            a read-only open lists it, and the read-write open removes only the
 *            partial ones. Before, recovery looked at the newest 64 only: it found
 *            none complete, started the store empty and removed every directory,
 *            the complete checkpoint with them.
 *   list     ember_checkpoint_list beside a copy under a newer id (a read-only
 *            open keeps it): the real checkpoint only, as recovery sees it.
 *            Before, the copy was listed too, under the id its meta names: that
 *            id twice. And (fault-injection builds) a meta that cannot be read
 *            (an I/O error) fails the call. Before, the checkpoint was left out
 *            and the call returned 0: "no checkpoints".
 *   link     symbolic links under older checkpoints' names, one dangling and one
 *            to a directory outside checkpoints/ holding a checkpoint's files: the
 *            open removes the links, and only them, and the next checkpoint
 *            removes its older ones (log space is given back). Before, the
 *            dangling link's removal failed (-ENOENT) at the open and at every
 *            checkpoint, so log space was never given back, and the files the
 *            other link led to were deleted.
 *   ioerror  (fault-injection builds) the newest checkpoint's meta cannot be read
 *            (an I/O error, not damage) while an older complete one is there: the
 *            open fails with the error and removes nothing, and succeeds on the
 *            newest once the error is gone. Before, it recovered the older state
 *            and deleted the newer checkpoint.
 */
#include <dirent.h>
#include <ember.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
#include "core/fault.h"
#endif

#define KEYS 500u

static char dir[512];

/* The small store every case opens, with flags. */
static void store_opts(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->log_memory = 1u << 20;
	o->page_size = 64u << 10;
	o->index_buckets = 1u << 10;
	o->flags = flags;
}

static ember_db *open_store(int truncate)
{
	ember_options o;
	store_opts(&o, truncate ? EMBER_OPEN_TRUNCATE : 0);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	return db;
}

static void put_all(ember_db *db, uint32_t version)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	for (uint32_t k = 0; k < KEYS; k++) {
		char key[16];
		uint32_t v[8] = {k, version, k ^ version};
		snprintf(key, sizeof(key), "k%u", k);
		CHECK_OK(ember_put(s, key, strlen(key), v, sizeof(v)));
	}
	CHECK_OK(ember_session_close(s));
}

/* Every key holds version. */
static void check_all(ember_db *db, uint32_t version, const char *when)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	for (uint32_t k = 0; k < KEYS; k++) {
		char key[16];
		uint32_t v[8] = {0};
		size_t vl = 0;
		snprintf(key, sizeof(key), "k%u", k);
		int rc = ember_get(s, key, strlen(key), v, sizeof(v), &vl);
		CHECK(rc == 0 && vl == sizeof(v) && v[0] == k && v[1] == version,
		      "%s: key %u: %d, version %u, want %u", when, k, rc, v[1], version);
	}
	CHECK_OK(ember_session_close(s));
}

static void ckpt_name(char *out, size_t n, uint64_t id)
{
	snprintf(out, n, "%s/checkpoints/%016" PRIx64, dir, id);
}

static int exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* Copy checkpoint directory from to to (its three files). */
static void copy_ckpt(const char *from, const char *to)
{
	CHECK(mkdir(to, 0755) == 0, "mkdir %s", to);
	static const char *const files[3] = {"meta", "hot.index", "cold.table"};
	for (int i = 0; i < 3; i++) {
		char a[700], b[700];
		snprintf(a, sizeof(a), "%s/%s", from, files[i]);
		snprintf(b, sizeof(b), "%s/%s", to, files[i]);
		int in = open(a, O_RDONLY), out = open(b, O_CREAT | O_WRONLY | O_TRUNC, 0644);
		CHECK(in >= 0 && out >= 0, "copy %s", a);
		char buf[65536];
		ssize_t n;
		while ((n = read(in, buf, sizeof(buf))) > 0)
			CHECK(write(out, buf, (size_t)n) == n, "write %s", b);
		CHECK(n == 0 && fsync(out) == 0, "read %s", a);
		close(in);
		close(out);
	}
}

/* The one checkpoint directory there is beside an entry named `but` ("": none). */
static void only_ckpt_but(char *out, size_t n, const char *but)
{
	char top[600];
	snprintf(top, sizeof(top), "%s/checkpoints", dir);
	DIR *d = opendir(top);
	CHECK(d, "opendir %s", top);
	int found = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && strcmp(e->d_name, but) != 0) {
			CHECK(snprintf(out, n, "%s/%s", top, e->d_name) < (int)n, "path");
			found++;
		}
	closedir(d);
	CHECK(found == 1, "%d checkpoint directories", found);
}

/* A new store whose keys all hold version, checkpointed and closed; the id. */
static uint64_t fresh_ckpt(uint32_t version)
{
	ember_db *db = open_store(1);
	put_all(db, version);
	uint64_t id = 0;
	CHECK_OK(ember_checkpoint(db, &id));
	CHECK_OK(ember_close(db));
	return id;
}

static uint32_t skipped(ember_db *db)
{
	ember_recovery_info ri;
	CHECK_OK(ember_recovery_info_get(db, &ri));
	return ri.checkpoints_skipped;
}

static void test_copy(void)
{
	uint64_t id = fresh_ckpt(1);
	char real[600], copy[600];
	only_ckpt_but(real, sizeof(real), "");
	ckpt_name(copy, sizeof(copy), id + 100);
	copy_ckpt(real, copy);
	ember_db *db = open_store(0);
	CHECK(skipped(db) == 1, "the copy was taken (%u skipped)", skipped(db));
	check_all(db, 1, "recovered beside the copy");
	CHECK(!exists(copy), "the copy stayed");
	put_all(db, 2);
	CHECK_OK(ember_checkpoint(db, &id));
	CHECK_OK(ember_close(db));
	db = open_store(0);
	CHECK(skipped(db) == 0, "a checkpoint skipped after the copy was gone");
	check_all(db, 2, "after the next checkpoints");
	CHECK_OK(ember_close(db));
	printf("  copy: skipped, every key recovered\n");
}

static void test_many(void)
{
	ember_db *db = open_store(1);
	put_all(db, 3);
	for (int i = 0; i < 90; i++) /* ids past the leftovers' */
		CHECK_OK(ember_checkpoint(db, NULL));
	CHECK_OK(ember_close(db));
	/* the newest checkpoint is the only one; 80 partial leftovers below it */
	for (uint64_t i = 0; i < 80; i++) {
		char p[600];
		snprintf(p, sizeof(p), "%s/checkpoints/00000000%08" PRIx64, dir, i);
		CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
	}
	db = open_store(0);
	check_all(db, 3, "beside 80 leftovers");
	CHECK_OK(ember_close(db));
	printf("  many: the newest found among 81 directories\n");
}

/* Bytes the file system holds for path. */
static uint64_t allocated(const char *path)
{
	struct stat st;
	CHECK(stat(path, &st) == 0, "stat %s", path);
	return (uint64_t)st.st_blocks * 512;
}

/* Stray entries in checkpoints/ (a file; a file left inside an old checkpoint's
 * directory) never hold back the log space passes release: 12 rounds of 2 MiB of
 * rewrites, a forced pass and a checkpoint keep hot.log near one round's size. */
static void test_stray(void)
{
	ember_db *db = open_store(1);
	CHECK_OK(ember_checkpoint(db, NULL));
	char p[700];
	snprintf(p, sizeof(p), "%s/checkpoints/README", dir);
	FILE *f = fopen(p, "w");
	CHECK(f && fputs("not a checkpoint\n", f) >= 0 && fclose(f) == 0, "write %s", p);
	char first[600];
	only_ckpt_but(first, sizeof(first), "README");
	snprintf(p, sizeof(p), "%s/notes", first);
	f = fopen(p, "w");
	CHECK(f && fputs("a stray file in a checkpoint\n", f) >= 0 && fclose(f) == 0, "write %s", p);
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	static uint8_t v[4096];
	for (int round = 0; round < 12; round++) {
		for (uint32_t k = 0; k < KEYS; k++) {
			char key[16];
			snprintf(key, sizeof(key), "big%u", k);
			memset(v, round + 1, sizeof(v));
			CHECK_OK(ember_put(s, key, strlen(key), v, sizeof(v)));
		}
		CHECK_OK(ember_compact(db, 1));
		CHECK_OK(ember_checkpoint(db, NULL));
	}
	CHECK_OK(ember_session_close(s));
	snprintf(p, sizeof(p), "%s/hot.log", dir);
	uint64_t held = allocated(p);
	CHECK_OK(ember_close(db));
	printf("  stray: hot.log holds %llu KiB after 24 MiB of rewrites\n",
	       (unsigned long long)(held >> 10));
	CHECK(held < (8u << 20), "hot.log holds %llu bytes: the space was never released",
	      (unsigned long long)held);
	snprintf(p, sizeof(p), "%s/checkpoints/README", dir);
	CHECK(exists(p), "a file not named as a checkpoint was removed");
	CHECK(unlink(p) == 0, "unlink %s", p);
	snprintf(p, sizeof(p), "%s/notes", first);
	CHECK(unlink(p) == 0 && rmdir(first) == 0, "the old checkpoint's leftover directory");
}

/* Two complete checkpoints (versions 6 and 7), the older one put back from a copy
 * after the newer one's checkpoint removed it; names the newer's directory. */
static void two_ckpts(char *newer, size_t n)
{
	ember_db *db = open_store(1);
	put_all(db, 6);
	uint64_t old_id = 0, new_id = 0;
	CHECK_OK(ember_checkpoint(db, &old_id));
	char old[600], aside[600];
	ckpt_name(old, sizeof(old), old_id);
	snprintf(aside, sizeof(aside), "%s/aside6", dir);
	copy_ckpt(old, aside);
	put_all(db, 7);
	CHECK_OK(ember_checkpoint(db, &new_id));
	CHECK_OK(ember_close(db));
	if (!exists(old))
		CHECK(rename(aside, old) == 0, "put back %s", old);
	ckpt_name(newer, n, new_id);
	CHECK(exists(newer), "no checkpoint %" PRIu64, new_id);
}

static void test_huge(void)
{
	char newer[600], meta[700];
	two_ckpts(newer, sizeof(newer));
	snprintf(meta, sizeof(meta), "%s/meta", newer);
	CHECK(truncate(meta, (off_t)1 << 40) == 0, "truncate %s: %s", meta, strerror(errno));
	ember_db *db = open_store(0);
	CHECK(skipped(db) == 1, "%u checkpoints skipped, want the grown one", skipped(db));
	check_all(db, 6, "the older checkpoint, the newer's meta grown");
	CHECK(!exists(newer), "the damaged checkpoint stayed");
	CHECK_OK(ember_close(db));
	/* the same with its hot.index grown (its size bounded by the meta's count) */
	two_ckpts(newer, sizeof(newer));
	snprintf(meta, sizeof(meta), "%s/hot.index", newer);
	CHECK(truncate(meta, (off_t)1 << 40) == 0, "truncate %s: %s", meta, strerror(errno));
	db = open_store(0);
	CHECK(skipped(db) == 1, "%u checkpoints skipped, want the grown one", skipped(db));
	check_all(db, 6, "the older checkpoint, the newer's hot.index grown");
	CHECK(!exists(newer), "the damaged checkpoint stayed");
	CHECK_OK(ember_close(db));
	printf("  huge: a 1 TiB meta or hot.index skipped unread, the older checkpoint "
	       "recovered\n");
}

static void test_file(void)
{
	uint64_t id = fresh_ckpt(8);
	char p[600];
	ckpt_name(p, sizeof(p), id + 1);
	FILE *f = fopen(p, "w");
	CHECK(f && fputs("not a checkpoint\n", f) >= 0 && fclose(f) == 0, "write %s", p);
	ember_db *db = open_store(0);
	CHECK(skipped(db) == 1, "%u checkpoints skipped, want the file", skipped(db));
	check_all(db, 8, "beside a file under a checkpoint's name");
	CHECK(!exists(p), "the file stayed");
	/* a file under the next checkpoint's name, put there while the store is open */
	ckpt_name(p, sizeof(p), id + 1);
	f = fopen(p, "w");
	CHECK(f && fclose(f) == 0, "write %s", p);
	put_all(db, 9);
	uint64_t next = 0;
	CHECK_OK(ember_checkpoint(db, &next));
	CHECK(next == id + 1, "checkpoint %" PRIu64 ", want %" PRIu64, next, id + 1);
	CHECK_OK(ember_close(db));
	db = open_store(0);
	CHECK(skipped(db) == 0, "%u checkpoints skipped", skipped(db));
	check_all(db, 9, "after a checkpoint in the file's place");
	CHECK_OK(ember_close(db));
	/* and a truncating open removes such a file */
	ckpt_name(p, sizeof(p), next + 5);
	f = fopen(p, "w");
	CHECK(f && fclose(f) == 0, "write %s", p);
	db = open_store(1);
	CHECK(!exists(p), "a truncating open kept the file");
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	uint32_t v[8];
	size_t vl = 0;
	CHECK(ember_get(s, "k1", 2, v, sizeof(v), &vl) == EMBER_ENOTFOUND, "a key outlived the truncation");
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	/* a store with no checkpoint at all (nothing written) beside such a file opens:
	 * the file is no damaged checkpoint */
	ckpt_name(p, sizeof(p), 1);
	f = fopen(p, "w");
	CHECK(f && fclose(f) == 0, "write %s", p);
	db = open_store(0);
	CHECK(!exists(p), "the file stayed beside no checkpoint");
	CHECK_OK(ember_close(db));
	printf("  file: skipped and removed at open, out of the next checkpoint's way\n");
}

/* n partial directories (no meta) with ids first, first + 1, ... */
static void partial_dirs(uint64_t first, int n)
{
	for (int i = 0; i < n; i++) {
		char p[600];
		ckpt_name(p, sizeof(p), first + (uint64_t)i);
		CHECK(mkdir(p, 0755) == 0, "mkdir %s: %s", p, strerror(errno));
	}
}

static void test_above(void)
{
	uint64_t id = fresh_ckpt(10);
	char real[600];
	ckpt_name(real, sizeof(real), id);
	partial_dirs(id + 1, 70);
	/* read-only: recovered and listed, nothing removed */
	ember_options o;
	store_opts(&o, EMBER_OPEN_READONLY);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_recovery_info ri;
	CHECK_OK(ember_recovery_info_get(db, &ri));
	CHECK(ri.checkpoint_id == id, "read-only: recovered checkpoint %" PRIu64 ", want %" PRIu64,
	      ri.checkpoint_id, id);
	check_all(db, 10, "read-only, beside 70 newer partial directories");
	ember_checkpoint_info info[2];
	size_t n = 0;
	CHECK_OK(ember_checkpoint_list(db, info, 2, &n));
	CHECK(n == 1 && info[0].id == id, "read-only: %zu checkpoints listed, want %" PRIu64, n, id);
	CHECK_OK(ember_close(db));
	char last[600];
	ckpt_name(last, sizeof(last), id + 70);
	CHECK(exists(last), "a read-only open removed a partial directory");
	/* read-write: recovered, the partial ones removed, the checkpoint kept */
	db = open_store(0);
	CHECK_OK(ember_recovery_info_get(db, &ri));
	CHECK(ri.checkpoint_id == id, "recovered checkpoint %" PRIu64 ", want %" PRIu64,
	      ri.checkpoint_id, id);
	check_all(db, 10, "beside 70 newer partial directories");
	CHECK(exists(real), "the complete checkpoint was removed");
	CHECK(!exists(last), "a partial directory stayed");
	CHECK_OK(ember_close(db));
	printf("  above: the complete checkpoint found below 70 newer partial directories\n");
}

static void test_list(void)
{
	uint64_t id = fresh_ckpt(11);
	char real[600], copy[600];
	ckpt_name(real, sizeof(real), id);
	ckpt_name(copy, sizeof(copy), id + 100);
	copy_ckpt(real, copy);
	ember_options o;
	store_opts(&o, EMBER_OPEN_READONLY);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_checkpoint_info info[4];
	size_t n = 0;
	CHECK_OK(ember_checkpoint_list(db, info, 4, &n));
	CHECK(n == 1 && info[0].id == id, "%zu checkpoints listed beside the copy (first %" PRIu64
	      "), want %" PRIu64 " only", n, n ? info[0].id : 0, id);
#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
	struct em_fault_spec all = {.every = 1};
	CHECK_OK(em_fault_arm(EM_FAULT_IO_READ, &all));
	n = 0;
	int rc = ember_checkpoint_list(db, info, 4, &n);
	em_fault_disarm(EM_FAULT_IO_READ);
	CHECK(rc < 0 && rc != EMBER_ERANGE, "a meta's read error: %d, %zu listed", rc, n);
	CHECK_OK(ember_checkpoint_list(db, info, 4, &n));
	CHECK(n == 1 && info[0].id == id, "%zu listed once the error is gone", n);
#endif
	CHECK_OK(ember_close(db));
	db = open_store(0); /* removes the copy */
	CHECK(!exists(copy), "the copy stayed");
	CHECK_OK(ember_close(db));
	printf("  list: the real checkpoint only; a read error is returned\n");
}

static int removal_failed; /* log_fn lines saying older checkpoints stayed */

static void count_removal_failed(void *arg, const char *line)
{
	(void)arg;
	if (strstr(line, "removing older checkpoints failed"))
		removal_failed++;
	fprintf(stderr, "ember: %s\n", line);
}

static void test_link(void)
{
	ember_db *db = open_store(1);
	put_all(db, 12);
	uint64_t id = 0;
	CHECK_OK(ember_checkpoint(db, &id));
	put_all(db, 12);
	CHECK_OK(ember_checkpoint(db, &id)); /* id 2: 1 is an older name */
	CHECK_OK(ember_close(db));
	char real[600], outside[600], dangling[600], to_dir[600], p[700];
	ckpt_name(real, sizeof(real), id);
	snprintf(outside, sizeof(outside), "%s/outside", dir);
	copy_ckpt(real, outside);
	ckpt_name(dangling, sizeof(dangling), 0);
	snprintf(p, sizeof(p), "%s/nowhere", dir);
	CHECK(symlink(p, dangling) == 0, "symlink %s: %s", dangling, strerror(errno));
	ckpt_name(to_dir, sizeof(to_dir), id - 1);
	CHECK(symlink(outside, to_dir) == 0, "symlink %s: %s", to_dir, strerror(errno));
	ember_options o;
	store_opts(&o, 0);
	o.log_fn = count_removal_failed;
	db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	check_all(db, 12, "beside links under older names");
	removal_failed = 0;
	put_all(db, 13);
	CHECK_OK(ember_checkpoint(db, NULL));
	CHECK(removal_failed == 0, "a checkpoint could not remove the links");
	struct stat st;
	CHECK(lstat(dangling, &st) != 0 && lstat(to_dir, &st) != 0, "a link stayed");
	snprintf(p, sizeof(p), "%s/meta", outside);
	CHECK(exists(p), "the files a link led to were deleted");
	CHECK_OK(ember_close(db));
	static const char *const files[3] = {"meta", "hot.index", "cold.table"};
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", outside, files[i]);
		CHECK(unlink(p) == 0, "unlink %s", p);
	}
	CHECK(rmdir(outside) == 0, "rmdir %s", outside);
	printf("  link: the links removed, and only them\n");
}

#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
static void test_ioerror(void)
{
	ember_db *db = open_store(1);
	put_all(db, 4);
	uint64_t old_id = 0;
	CHECK_OK(ember_checkpoint(db, &old_id));
	char old[600], aside[600];
	ckpt_name(old, sizeof(old), old_id);
	snprintf(aside, sizeof(aside), "%s/aside", dir);
	copy_ckpt(old, aside); /* outside checkpoints/: recovery never sees it */
	put_all(db, 5);
	CHECK_OK(ember_close(db)); /* its checkpoint removes old */
	char old_meta[700];
	snprintf(old_meta, sizeof(old_meta), "%s/meta", old);
	CHECK(!exists(old_meta), "the older checkpoint stayed");
	/* the n-th read of an open fails once: the superblock's, the newest meta's,
	 * ... Whichever it is, the open must fail or recover the newest state, never
	 * the older one beside it */
	int failed_open = 0;
	for (uint64_t n = 1; n <= 6; n++) {
		if (!exists(old))
			copy_ckpt(aside, old); /* a good open removes it */
		struct em_fault_spec once = {.countdown = n, .limit = 1};
		CHECK_OK(em_fault_arm(EM_FAULT_IO_READ, &once));
		ember_options o;
		store_opts(&o, 0);
		db = NULL;
		int rc = ember_open(dir, &o, &db);
		em_fault_disarm(EM_FAULT_IO_READ);
		if (rc == 0) {
			check_all(db, 5, "an open with a failed read");
			CHECK_OK(ember_close(db));
			continue;
		}
		CHECK(exists(old_meta), "open failed (%d) and removed the older checkpoint", rc);
		failed_open++;
	}
	CHECK(failed_open > 0, "no injected read made the open fail");
	db = open_store(0);
	check_all(db, 5, "the newest, once the error is gone");
	CHECK_OK(ember_close(db));
	printf("  ioerror: %d opens failed and removed nothing, the others recovered the "
	       "newest\n", failed_open);
}
#endif

/* EMBER_OPEN_NO_CLOSE_CHECKPOINT: close takes no checkpoint, so the reopen recovers
 * the last explicit one and drops what was written after it; without the flag the
 * same close keeps everything. The flag with READONLY is accepted (nothing to do). */
static void test_no_close_checkpoint(void)
{
	ember_options o;
	ember_db *db = NULL;
	store_opts(&o, EMBER_OPEN_TRUNCATE | EMBER_OPEN_NO_CLOSE_CHECKPOINT);
	CHECK_OK(ember_open(dir, &o, &db));
	put_all(db, 1);
	uint64_t id = 0;
	CHECK_OK(ember_checkpoint(db, &id));
	put_all(db, 2);
	CHECK_OK(ember_close(db));
	db = open_store(0); /* no flag now: this close checkpoints */
	check_all(db, 1, "reopen after a close without checkpoint");
	put_all(db, 3);
	CHECK_OK(ember_close(db));
	store_opts(&o, EMBER_OPEN_READONLY | EMBER_OPEN_NO_CLOSE_CHECKPOINT);
	CHECK_OK(ember_open(dir, &o, &db));
	check_all(db, 3, "reopen after a close with checkpoint");
	CHECK_OK(ember_close(db));
	store_opts(&o, 0x10u); /* an unknown flag */
	db = NULL;
	CHECK(ember_open(dir, &o, &db) == EMBER_EINVAL && !db, "unknown flag 0x10 accepted");
}

int main(int argc, char **argv)
{
	tu_init("test_ckpt_choice", argc, argv);
	CHECK(tu_tmpdir_make("ckpt-choice", dir, sizeof(dir)) == 0, "tmpdir");
	test_copy();
	test_many();
	test_stray();
	test_huge();
	test_file();
	test_above();
	test_list();
	test_link();
	test_no_close_checkpoint();
#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION
	test_ioerror();
#endif
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
