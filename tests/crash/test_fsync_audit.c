/*
 * test_fsync_audit.c - which files and directories each ember_checkpoint syncs,
 * and in which order (docs/checkpoint.md, "The checkpoint protocol").
 *
 * The power-loss simulator's trace (io/powerloss.h) records every write, fsync,
 * directory fsync and directory change the store makes. For each of several
 * checkpoints (the first one, which creates checkpoints/; later ones, which remove
 * the older checkpoint and release the log space compaction freed) it prints the
 * sync events and checks the order the durability argument needs:
 *   1. every file written before meta is published (hot.index, cold.table,
 *      meta.tmp, the logs the folds flushed) is fsynced after its last write and
 *      before the rename of meta.tmp to meta; no other file is fsynced;
 *   2. the checkpoint directory is fsynced after its files were created and before
 *      the rename (their entries durable before the meta that names them), and
 *      again after it (the rename durable);
 *   3. checkpoints/ is fsynced after the rename (the new directory's entry), and,
 *      when this checkpoint created checkpoints/, the store directory after that
 *      mkdir and before the rename;
 *   4. the older checkpoint's files go only after that, followed by an fsync of
 *      checkpoints/, and log space is punched only after that fsync.
 */
#include <ember.h>

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/powerloss.h"
#include "test_util.h"

static char root[PATH_MAX], store[PATH_MAX + 16], stash[PATH_MAX + 16];

/* Index of the first trace line from `from` that is "kind path[ rest]", or -1. */
static long find(const char *kind, const char *path, long from, long to)
{
	size_t kl = strlen(kind), pl = strlen(path);
	for (long i = from < 0 ? 0 : from; i < to; i++) {
		const char *l = em_powerloss_trace_line((size_t)i);
		if (!strncmp(l, kind, kl) && l[kl] == ' ' && !strncmp(l + kl + 1, path, pl) &&
		    (l[kl + 1 + pl] == 0 || l[kl + 1 + pl] == ' '))
			return i;
	}
	return -1;
}

static long find_last(const char *kind, const char *path, long from, long to)
{
	long last = -1;
	for (long i = find(kind, path, from, to); i >= 0; i = find(kind, path, i + 1, to))
		last = i;
	return last;
}

static void audit(uint64_t id, int first, int older)
{
	long n = (long)em_powerloss_trace_count();
	char top[PATH_MAX + 32], ck[PATH_MAX + 64], p[PATH_MAX + 96], p2[PATH_MAX + 96];
	snprintf(top, sizeof(top), "%s/checkpoints", store);
	snprintf(ck, sizeof(ck), "%s/%016" PRIx64, top, id);
	printf("checkpoint %" PRIu64 ": %ld events; syncs in order:\n", id, n);
	for (long i = 0; i < n; i++) {
		const char *l = em_powerloss_trace_line((size_t)i);
		if (!strncmp(l, "fsync ", 6) || !strncmp(l, "dirsync ", 8) || !strncmp(l, "rename ", 7))
			printf("  %3ld %s\n", i, l);
	}
	/* the publish */
	snprintf(p, sizeof(p), "%s/meta.tmp", ck);
	long ren = find("rename", p, 0, n);
	CHECK(ren >= 0, "checkpoint %" PRIu64 ": no rename of meta.tmp", id);
	CHECK(find("rename", p, ren + 1, n) < 0, "meta renamed twice");
	/* 1: every file written before the rename is fsynced after its last write,
	 * before the rename; every file fsynced was written */
	for (long i = 0; i < ren; i++) {
		const char *l = em_powerloss_trace_line((size_t)i);
		if (strncmp(l, "write ", 6) && strncmp(l, "fsync ", 6))
			continue;
		const char *f = l + 6;
		long lw = find_last("write", f, 0, ren);
		CHECK(lw >= 0, "checkpoint %" PRIu64 ": %s fsynced, never written", id, f);
		long fs = find("fsync", f, lw + 1, ren);
		CHECK(fs > lw, "checkpoint %" PRIu64 ": %s written (event %ld) and not fsynced "
		      "before meta is published (event %ld)", id, f, lw, ren);
	}
	static const char *const files[] = {"hot.index", "cold.table", "meta.tmp"};
	long created = -1;
	for (size_t i = 0; i < 3; i++) {
		snprintf(p2, sizeof(p2), "%s/%s", ck, files[i]);
		long c = find("create", p2, 0, ren);
		CHECK(c >= 0, "checkpoint %" PRIu64 ": %s not created before the rename", id, files[i]);
		CHECK(find("fsync", p2, c, ren) > c, "checkpoint %" PRIu64 ": %s never fsynced", id,
		      files[i]);
		if (c > created)
			created = c;
	}
	/* 2 */
	long pre = find("dirsync", ck, created, ren);
	CHECK(pre > created, "checkpoint %" PRIu64 ": its directory is not fsynced between "
	      "creating its files (event %ld) and publishing meta (event %ld)", id, created, ren);
	long post = find("dirsync", ck, ren, n);
	CHECK(post > ren, "checkpoint %" PRIu64 ": its directory not fsynced after the rename", id);
	/* 3 */
	long mk = find("mkdir", ck, 0, ren);
	CHECK(mk >= 0, "checkpoint %" PRIu64 ": its directory was not made", id);
	long par = find("dirsync", top, ren, n);
	CHECK(par > ren, "checkpoint %" PRIu64 ": checkpoints/ not fsynced after the rename", id);
	long mktop = find("mkdir", top, 0, ren);
	CHECK(first ? mktop >= 0 : mktop < 0, "checkpoints/ made by checkpoint %" PRIu64, id);
	if (mktop >= 0)
		CHECK(find("dirsync", store, mktop, ren) > mktop, "checkpoint %" PRIu64 ": the store "
		      "directory is not fsynced after making checkpoints/ and before the rename", id);
	/* 4 */
	long rm = -1, fin = find_last("dirsync", top, 0, n);
	if (older) {
		snprintf(p2, sizeof(p2), "%s/%016" PRIx64 "/meta", top, id - 1);
		rm = find("unlink", p2, 0, n);
		CHECK(rm > par, "checkpoint %" PRIu64 ": the older meta removed (event %ld) before "
		      "this one is durable (event %ld)", id, rm, par);
		CHECK(fin > rm, "checkpoint %" PRIu64 ": removal of the older one not fsynced", id);
	}
	/* Before the first checkpoint nothing durable names any log space (a crash then
	 * recovers an empty store), so the background compactor may release space while
	 * the first checkpoint is taken: the rule binds once an older checkpoint exists. */
	for (long i = 0; older && i < n; i++)
		if (!strncmp(em_powerloss_trace_line((size_t)i), "punch ", 6))
			CHECK(i > fin, "checkpoint %" PRIu64 ": log space punched (event %ld: %s) "
			      "before the older checkpoint's removal is durable (event %ld)", id, i,
			      em_powerloss_trace_line((size_t)i), fin);
}

int main(int argc, char **argv)
{
	tu_init("fsync_audit", argc, argv);
	char tmp[PATH_MAX];
	CHECK(tu_tmpdir_make("fsync-audit", tmp, sizeof(tmp)) == 0, "tmpdir");
	CHECK(realpath(tmp, root) != NULL, "realpath"); /* the trace names files by their real path */
	snprintf(store, sizeof(store), "%s/db", root);
	snprintf(stash, sizeof(stash), "%s/stash", root);
	CHECK(mkdir(stash, 0755) == 0, "mkdir");
	CHECK_OK(em_powerloss_arm(stash, 0));
	ember_options o;
	ember_options_default(&o);
	o.page_size = 64u << 10;
	o.log_memory = 1u << 20;
	o.hot_disk_budget = 2u << 20;
	o.cold_disk_budget = 8u << 20;
	o.cold_log_memory = 1u << 20;
	ember_db *db = NULL;
	CHECK_OK(ember_open(store, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint8_t val[3000];
	tu_rng *r = tu_rng_global();
	uint64_t punched = 0;
	for (uint64_t c = 1; c <= 4; c++) {
		uint64_t n = tu_scaled(3000) + 200;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t k = tu_rng_below(r, 500);
			tu_rng_fill(r, val, sizeof(val));
			CHECK_OK(ember_put(s, &k, 8, val, 100 + tu_rng_below(r, sizeof(val) - 100)));
		}
		if (c > 1)
			CHECK_OK(ember_compact(db, 1)); /* space for the checkpoint to release */
		em_powerloss_trace_clear();
		em_powerloss_trace(1);
		uint64_t id = 0;
		CHECK_OK(ember_checkpoint(db, &id));
		em_powerloss_trace(0);
		CHECK(id == c, "checkpoint id %" PRIu64, id);
		audit(id, c == 1, c > 1);
		for (size_t i = 0; i < em_powerloss_trace_count(); i++)
			punched += !strncmp(em_powerloss_trace_line(i), "punch ", 6);
	}
	CHECK(punched > 0, "no checkpoint released log space: the audit of step 4 saw nothing");
	em_powerloss_trace_clear();
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	em_powerloss_disarm();
	tu_tmpdir_remove(root);
	printf("ok\n");
	return 0;
}
