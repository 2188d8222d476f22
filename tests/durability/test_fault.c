/*
 * test_fault.c - every injected fault surfaces as an error code and leaves the
 * store usable or cleanly closed (sites in src/core/fault.h, docs/faults.md).
 *
 *   test_fault SITE [points]     SITE: io_read, io_write, io_fsync, io_punch,
 *                                io_submit, ring_init, file_open, alloc
 *
 * How it works
 *  1. A child process runs the workload once with SITE counting hits only: N hits.
 *  2. For a set of points k in 1..N (all of the first ones, then spread out, plus a
 *     few runs where every hit from k on fails, the hits 1..24 counted from the
 *     first forced compaction, runs where every hit from that compaction on, or
 *     from the last writes before close on, fails,
 *     and a few with a probability), a
 *     fresh child arms SITE and runs the workload: open, puts, put_batch, gets,
 *     get_batch, rmw, deletes, forced compactions with small disk budgets (each
 *     followed by a read of every key), a checkpoint, a final read of every key,
 *     close.
 *  3. Each call must return 0 or a clean error (a negated errno, EMBER_EIO,
 *     EMBER_ENOMEM, EMBER_ENOSPC, EMBER_EAGAIN; ENOTFOUND for reads). A read that
 *     succeeds must return a value some write of that key made, and one the model
 *     allows (the last successful write, or any failed write after it). ember_close
 *     must return 0 once the sessions are closed.
 *  4. The faults are then disarmed and the store reopened: every key must hold a
 *     value that was written to it, or be absent; when ember_close returned 0 (its
 *     final checkpoint worked), every key must be in a state the model allows.
 *  5. The parent sees each child's end: a signal (a crash, an ASan report with
 *     abort_on_error, or SIGALRM: the child hung past its alarm) or a nonzero exit
 *     (a CHECK, or LeakSanitizer at exit) is a failed point, printed so it can be
 *     replayed: EMBER_TEST_SEED=S test_fault SITE k [MODE]
 *     (MODE: persistent, probability, compaction, compaction-persistent,
 *     close-persistent). The runs go on past a failed point (up to 4 of them) and
 *     the test fails at the end.
 *
 * Values are self-describing: key id, version and a length derived from both, then
 * bytes derived from (seed, key, version), so a wrong, stale or torn value is
 * recognised.
 */
#include <ember.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fault.h"
#include "test_util.h"

#define NKEYS 400
#define MAXV 1400
#define MAXACC 64

/* ---- the model ---------------------------------------------------------------------- */

struct key_model {
	uint32_t next_ver;        /* versions 1 .. next_ver-1 were attempted */
	uint32_t nacc;            /* acceptable current states (0 = absent) */
	uint32_t acc[MAXACC];
};

static struct key_model model[NKEYS];
static char dir[4096];
/* MODE_COMPACT*: the site is armed as the first forced compaction starts;
 * MODE_CLOSE_ALL: as the last writes before close start */
static int defer_site = -1, defer_close;
static struct em_fault_spec defer_spec;

struct shared {
	uint64_t hits, fired;
	int phase;     /* how far the child got (for the parent's message) */
	int reopened;  /* 1: recovery verified, 0: skipped (no recovery yet) */
	int closed_ok; /* ember_close returned 0 (its final checkpoint, if any, worked) */
};
static struct shared *shm;

static void keybytes(uint32_t k, uint8_t out[12])
{
	memcpy(out, "fkey", 4);
	uint64_t x = k;
	memcpy(out + 4, &x, 8);
}

static uint32_t val_len(uint32_t k, uint32_t v)
{
	return 8 + (uint32_t)(tu_mix64(tu_seed() ^ ((uint64_t)k << 32) ^ v) % (MAXV - 8));
}

static void gen_value(uint32_t k, uint32_t v, uint8_t *out, uint32_t *len)
{
	uint32_t n = val_len(k, v);
	memcpy(out, &k, 4);
	memcpy(out + 4, &v, 4);
	uint64_t x = tu_seed() * 31 + ((uint64_t)k << 32) + v;
	for (uint32_t i = 8; i < n; i += 8) {
		uint64_t w = tu_splitmix64(&x);
		memcpy(out + i, &w, n - i < 8 ? n - i : 8);
	}
	*len = n;
}

/* The version a value holds, or 0 if it is not a value any write of key k made. */
static uint32_t value_version(uint32_t k, const uint8_t *val, size_t len)
{
	uint8_t want[MAXV];
	uint32_t wk, v, wl;
	if (len < 8)
		return 0;
	memcpy(&wk, val, 4);
	memcpy(&v, val + 4, 4);
	if (wk != k || v == 0 || v >= model[k].next_ver)
		return 0;
	gen_value(k, v, want, &wl);
	return wl == len && memcmp(want, val, len) == 0 ? v : 0;
}

static int acceptable(uint32_t k, uint32_t v)
{
	for (uint32_t i = 0; i < model[k].nacc; i++)
		if (model[k].acc[i] == v)
			return 1;
	return 0;
}

static void model_write(uint32_t k, uint32_t v, int ok)
{
	struct key_model *m = &model[k];
	if (ok) {
		m->nacc = 1;
		m->acc[0] = v;
	} else if (m->nacc < MAXACC) {
		m->acc[m->nacc++] = v; /* may or may not have happened */
	} else {
		m->acc[MAXACC - 1] = v; /* cannot happen in this workload's size */
	}
}

/* ---- return codes ------------------------------------------------------------------- */

/* An error an injected fault may legitimately turn into. */
static int clean_error(int rc)
{
	if (rc < 0 && rc > -4096)
		return 1; /* -errno */
	return rc == EMBER_EIO || rc == EMBER_ENOMEM || rc == EMBER_ENOSPC || rc == EMBER_EAGAIN;
}

#define CHECK_CLEAN(rc, what)                                                        \
	CHECK((rc) == 0 || clean_error(rc), "%s: %d (%s)", what, rc, ember_strerror(rc))

/* ---- the workload --------------------------------------------------------------------- */

struct rmw_arg {
	uint32_t k, v;
	int bad_old;
};

static int rmw_fn(void *arg, const void *old, size_t old_len, void *out, size_t out_cap,
		  size_t *out_len)
{
	struct rmw_arg *a = arg;
	if (old) {
		uint32_t ov = value_version(a->k, old, old_len);
		if (!ov || !acceptable(a->k, ov))
			a->bad_old = 1;
	} else if (!acceptable(a->k, 0)) {
		a->bad_old = 2;
	}
	uint8_t v[MAXV];
	uint32_t n;
	gen_value(a->k, a->v, v, &n);
	*out_len = n;
	if (out_cap < n)
		return EMBER_ERANGE;
	memcpy(out, v, n);
	return 0;
}

static void check_read(uint32_t k, int rc, const uint8_t *val, size_t len, const char *what)
{
	if (rc == EMBER_ENOTFOUND) {
		CHECK(acceptable(k, 0), "%s key %u: absent, but it must hold a value", what, k);
		return;
	}
	CHECK_CLEAN(rc, what);
	if (rc < 0)
		return;
	uint32_t v = value_version(k, val, len);
	CHECK(v != 0, "%s key %u: a value (%zu bytes) no write made", what, k, len);
	CHECK(acceptable(k, v), "%s key %u: version %u, not one the model allows (last ok %u)",
	      what, k, v, model[k].acc[0]);
}

static void do_put(ember_session *s, uint32_t k)
{
	uint8_t kb[12], v[MAXV];
	uint32_t n, ver = model[k].next_ver++;
	keybytes(k, kb);
	gen_value(k, ver, v, &n);
	int rc = ember_put(s, kb, sizeof(kb), v, n);
	CHECK_CLEAN(rc, "put");
	model_write(k, ver, rc == 0);
}

static void do_delete(ember_session *s, uint32_t k)
{
	uint8_t kb[12];
	keybytes(k, kb);
	int rc = ember_delete(s, kb, sizeof(kb));
	CHECK_CLEAN(rc, "delete");
	model_write(k, 0, rc == 0);
}

static void do_rmw(ember_session *s, uint32_t k)
{
	uint8_t kb[12];
	keybytes(k, kb);
	struct rmw_arg a = {k, model[k].next_ver++, 0};
	int rc = ember_rmw(s, kb, sizeof(kb), rmw_fn, &a);
	CHECK_CLEAN(rc, "rmw");
	CHECK(!a.bad_old, "rmw key %u: the callback got a value the model does not allow (%d)", k,
	      a.bad_old);
	model_write(k, a.v, rc == 0);
}

static void do_get(ember_session *s, uint32_t k)
{
	uint8_t kb[12], buf[MAXV];
	size_t len = 0;
	keybytes(k, kb);
	int rc = ember_get(s, kb, sizeof(kb), buf, sizeof(buf), &len);
	check_read(k, rc, buf, len, "get");
}

static void do_get_batch(ember_session *s, uint32_t from, uint32_t n)
{
	static uint8_t kbs[64][12], bufs[64][MAXV];
	const void *keys[64];
	size_t klens[64], caps[64], vlens[64];
	void *bp[64];
	int st[64];
	for (uint32_t i = 0; i < n; i++) {
		keybytes((from + i) % NKEYS, kbs[i]);
		keys[i] = kbs[i];
		klens[i] = 12;
		bp[i] = bufs[i];
		caps[i] = MAXV;
	}
	int rc = ember_get_batch(s, n, keys, klens, bp, caps, vlens, st);
	CHECK_CLEAN(rc, "get_batch");
	if (rc < 0)
		return;
	for (uint32_t i = 0; i < n; i++)
		check_read((from + i) % NKEYS, st[i], bufs[i], vlens[i], "get_batch");
}

static void do_put_batch(ember_session *s, uint32_t from, uint32_t n)
{
	static uint8_t kbs[32][12], vals[32][MAXV];
	const void *keys[32], *vp[32];
	size_t klens[32], vlens[32];
	uint32_t vers[32];
	int st[32];
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = (from + i) % NKEYS, len;
		keybytes(k, kbs[i]);
		vers[i] = model[k].next_ver++;
		gen_value(k, vers[i], vals[i], &len);
		keys[i] = kbs[i];
		klens[i] = 12;
		vp[i] = vals[i];
		vlens[i] = len;
	}
	int rc = ember_put_batch(s, n, keys, klens, vp, vlens, st);
	CHECK_CLEAN(rc, "put_batch");
	for (uint32_t i = 0; i < n; i++) {
		if (rc == 0)
			CHECK_CLEAN(st[i], "put_batch status");
		model_write((from + i) % NKEYS, vers[i], rc == 0 && st[i] == 0);
	}
}

/* Compaction must not lose or roll back a key: read every key after each pass. */
static void compact_and_check(ember_db *db, ember_session *s)
{
	if (defer_site >= 0 && !defer_close) {
		CHECK_OK(em_fault_arm(defer_site, &defer_spec));
		defer_site = -1;
	}
	int rc = ember_compact(db, 1);
	CHECK(rc >= 0 || clean_error(rc), "compact: %d (%s)", rc, ember_strerror(rc));
	for (uint32_t k = 0; k < NKEYS; k += 64)
		do_get_batch(s, k, k + 64 <= NKEYS ? 64 : NKEYS - k);
}

static void options(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 8 * o->page_size; /* 512 KiB: most of the data goes to disk */
	o->index_buckets = 256;
	o->io_queue_depth = 16;
	o->cold_index_chunks = 64;
	o->cold_chunk_bytes = 256;
	o->cold_log_memory = 8 * o->page_size;
	o->hot_disk_budget = 2 * o->log_memory; /* the smallest budgets: compaction runs */
	o->cold_disk_budget = 4 * o->cold_log_memory;
	o->flags = flags;
}

static void workload(tu_rng *rng)
{
	ember_options o;
	ember_db *db = NULL;
	ember_session *s = NULL;
	options(&o, EMBER_OPEN_TRUNCATE);
	shm->phase = 1;
	int rc = ember_open(dir, &o, &db);
	CHECK_CLEAN(rc, "open");
	if (rc < 0) {
		CHECK(db == NULL, "failed open left *db set");
		return;
	}
	shm->phase = 2;
	rc = ember_session_open(db, &s);
	CHECK_CLEAN(rc, "session_open");
	if (rc == 0) {
		shm->phase = 3;
		for (uint32_t k = 0; k < NKEYS; k++)
			do_put(s, k);
		for (uint32_t k = 0; k < NKEYS; k += 40)
			do_put_batch(s, k, 20);
		shm->phase = 4;
		for (uint32_t k = 0; k < NKEYS; k += 48)
			do_get_batch(s, k, 48);
		for (int i = 0; i < NKEYS * 2; i++) {
			uint32_t k = (uint32_t)tu_rng_below(rng, NKEYS);
			uint64_t op = tu_rng_below(rng, 100);
			if (op < 45)
				do_put(s, k);
			else if (op < 60)
				do_delete(s, k);
			else if (op < 80)
				do_rmw(s, k);
			else
				do_get(s, k);
		}
		shm->phase = 5;
		compact_and_check(db, s);
		uint64_t id = 0;
		rc = ember_checkpoint(db, &id);
		CHECK_CLEAN(rc, "checkpoint");
		shm->phase = 6;
		for (int pass = 0; pass < 2; pass++)
			for (uint32_t k = pass; k < NKEYS; k += 2)
				do_put(s, k);
		for (uint32_t k = 0; k < NKEYS; k += 64)
			do_get_batch(s, k, 64);
		compact_and_check(db, s);
		/* one more round of overwrites and compaction: more space to release */
		for (uint32_t k = 0; k < NKEYS; k++)
			do_put(s, (k * 7) % NKEYS);
		compact_and_check(db, s);
		for (int i = 0; i < NKEYS / 2; i++)
			do_rmw(s, (uint32_t)tu_rng_below(rng, NKEYS));
		if (defer_site >= 0 && defer_close) {
			CHECK_OK(em_fault_arm(defer_site, &defer_spec));
			defer_site = -1;
		}
		for (uint32_t k = 0; k < NKEYS; k += 3)
			do_put(s, k);
		/* afterwards: every key reads back as the model allows, or an error */
		shm->phase = 7;
		for (uint32_t k = 0; k < NKEYS; k++)
			do_get(s, k);
		for (uint32_t k = 0; k < NKEYS; k += 50)
			do_get_batch(s, k, 50);
		ember_stats st;
		CHECK_OK(ember_stats_get(db, &st));
		CHECK_OK(ember_session_close(s));
	}
	shm->phase = 8;
	/* close frees everything even when it fails (its final checkpoint may meet
	 * the fault): LeakSanitizer at the child's exit checks that */
	rc = ember_close(db);
	CHECK_CLEAN(rc, "close");
	shm->closed_ok = rc == 0;
}

/* With every fault disarmed: a reopened store holds only values that were written. */
static void reopen_check(void)
{
	ember_options o;
	ember_db *db = NULL;
	ember_session *s = NULL;
	em_fault_disarm_all();
	options(&o, 0);
	shm->phase = 9;
	int rc = ember_open(dir, &o, &db);
	/* whatever failed before, the directory holds a complete checkpoint, a store
	 * that never got one (it opens empty), or no store at all (one is made) */
	CHECK(rc == 0, "reopen after the faults: %d (%s)", rc, ember_strerror(rc));
	/* a close that returned 0 took a final checkpoint covering every write */
	int strict = shm->closed_ok;
	CHECK_OK(ember_session_open(db, &s));
	for (uint32_t k = 0; k < NKEYS; k++) {
		uint8_t kb[12], buf[MAXV];
		size_t len = 0;
		keybytes(k, kb);
		rc = ember_get(s, kb, sizeof(kb), buf, sizeof(buf), &len);
		if (rc == EMBER_ENOTFOUND) {
			CHECK(!strict || acceptable(k, 0),
			      "reopened key %u is absent, but the store closed cleanly at version %u",
			      k, model[k].acc[0]);
			continue;
		}
		CHECK(rc == 0 || rc == EMBER_ECORRUPT || clean_error(rc), "reopened get key %u: %d (%s)",
		      k, rc, ember_strerror(rc));
		if (rc != 0)
			continue;
		uint32_t v = value_version(k, buf, len);
		CHECK(v != 0, "reopened key %u holds a value (%zu bytes) never written", k, len);
		/* a clean close checkpoints everything: the state the model allows */
		CHECK(!strict || acceptable(k, v),
		      "reopened key %u holds version %u, but the store closed cleanly at version %u",
		      k, v, model[k].acc[0]);
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	shm->reopened = 1;
}

/* ---- the parent: one child per injection point ------------------------------------------ */

enum { MODE_COUNT, MODE_ONCE, MODE_PERSIST, MODE_PROB, MODE_COMPACT, MODE_COMPACT_ALL,
       MODE_CLOSE_ALL };

static void child(int site, int mode, uint64_t point, unsigned alarm_s)
{
	alarm(alarm_s); /* a hang ends the child with SIGALRM */
	memset(model, 0, sizeof(model));
	for (uint32_t k = 0; k < NKEYS; k++) {
		model[k].next_ver = 1;
		model[k].nacc = 1; /* absent */
	}
	CHECK_OK(tu_tmpdir_remove(dir));
	tu_rng rng;
	tu_rng_stream(&rng, 1); /* the same operations at every point */
	struct em_fault_spec sp = {0};
	if (mode == MODE_COUNT) {
		em_fault_count(site);
	} else {
		if (mode == MODE_PROB) {
			sp.probability = 1.0 / (double)point;
			sp.seed = tu_seed() + point;
		} else {
			sp.countdown = point;
			sp.persistent = mode == MODE_PERSIST || mode == MODE_COMPACT_ALL ||
					mode == MODE_CLOSE_ALL;
		}
		if (mode == MODE_COMPACT || mode == MODE_COMPACT_ALL || mode == MODE_CLOSE_ALL) {
			defer_site = site; /* counted from the first ember_compact on */
			defer_close = mode == MODE_CLOSE_ALL; /* or from the last writes */
			defer_spec = sp;
		} else {
			CHECK_OK(em_fault_arm(site, &sp));
		}
	}
	workload(&rng);
	shm->hits = em_fault_hits(site);
	shm->fired = em_fault_fired(site);
	reopen_check();
	exit(0);
}

static const char *mode_name(int mode)
{
	static const char *const n[] = {"count", "once", "persistent", "probability 1/",
					"compaction", "compaction, persistent, ",
					"last writes, persistent, "};
	return n[mode];
}

/* The replay argument of a mode (test_fault SITE POINT [MODE]). */
static const char *mode_arg(int mode)
{
	static const char *const n[] = {"", "", " persistent", " probability", " compaction",
					" compaction-persistent", " close-persistent"};
	return n[mode];
}

/* Run one point in a child; fail the test on anything but a clean exit. */
/* Failed points so far; the test goes on past a failure (up to MAX_FAILED, to list
 * them all in one run) and fails at the end. */
#define MAX_FAILED 4
static unsigned failed;

/* Run one point in a child; anything but a clean exit is a failed point. */
static void run_point(int site, int mode, uint64_t point, unsigned alarm_s)
{
	memset(shm, 0, sizeof(*shm));
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		child(site, mode, point, alarm_s);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return;
	const char *name = em_fault_site_name(site);
	char what[64];
	if (WIFSIGNALED(status))
		snprintf(what, sizeof(what), "%s (signal %d)",
			 WTERMSIG(status) == SIGALRM ? "hung" : "crashed", WTERMSIG(status));
	else
		snprintf(what, sizeof(what), "exited %d (a failed check above, or a leak)",
			 WEXITSTATUS(status));
	printf("test_fault %s: FAILED POINT %s%llu: the child %s in phase %d; replay with "
	       "EMBER_TEST_SEED=%llu test_fault %s %llu%s\n",
	       name, mode_name(mode), (unsigned long long)point, what, shm->phase,
	       (unsigned long long)tu_seed(), name, (unsigned long long)point, mode_arg(mode));
	failed++;
}

int main(int argc, char **argv)
{
	tu_init("test_fault", argc, argv);
	CHECK(argc >= 2, "usage: test_fault SITE [point [MODE]]");
	int site = em_fault_site_lookup(argv[1]);
	CHECK(site >= 0, "unknown site '%s'", argv[1]);
	CHECK(tu_tmpdir_make("fault", dir, sizeof(dir)) == 0, "tmpdir");
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(shm != MAP_FAILED, "mmap");
	/* a workload takes well under a second (a few under sanitizers): a child still
	 * running after this long is hung */
	unsigned alarm_s = tu_scale() < 1 ? 40 : 20;

	if (argc >= 3) { /* replay one point */
		int mode = MODE_ONCE;
		if (argc >= 4)
			mode = strcmp(argv[3], "persistent") == 0   ? MODE_PERSIST
			       : strcmp(argv[3], "compaction") == 0 ? MODE_COMPACT
			       : strcmp(argv[3], "compaction-persistent") == 0 ? MODE_COMPACT_ALL
			       : strcmp(argv[3], "close-persistent") == 0 ? MODE_CLOSE_ALL
								    : MODE_PROB;
		run_point(site, mode, strtoull(argv[2], NULL, 10), alarm_s);
		CHECK(!failed, "the point failed");
		printf("test_fault %s: point %s ok (fired %llu)\n", argv[1], argv[2],
		       (unsigned long long)shm->fired);
		tu_tmpdir_remove(dir);
		return 0;
	}

	run_point(site, MODE_COUNT, 0, alarm_s);
	uint64_t n = shm->hits;
	printf("test_fault %s: the workload hits the site %llu times (reopen %s)\n", argv[1],
	       (unsigned long long)n, shm->reopened ? "checked" : "skipped: no recovery yet");
	/* every site registered in tests/durability/meson.build is one the workload
	 * reaches: a site it stops reaching is a change to the store or the workload
	 * that leaves its failures untested */
	CHECK(n > 0, "the workload never reaches the site %s", argv[1]);

	/* Targeted runs first (they find the most), then the spread-out points, all
	 * within a time budget: a point may take seconds (a writer waiting out a log
	 * whose flushes fail). */
	uint64_t runs = 0, fired = 0, slow = 0;
	double t0 = tu_now(), limit_s = tu_scale() < 1 ? 60 : 18;
	tu_rng *rng = tu_rng_global();
#define RUN(mode, point)                                                             \
	do {                                                                        \
		double t1_ = tu_now();                                              \
		run_point(site, (mode), (point), alarm_s);                          \
		if (tu_now() - t1_ > 2 && slow++ < 5)                               \
			printf("test_fault %s: %s%llu took %.1f s\n", argv[1],       \
			       mode_name(mode), (unsigned long long)(point),        \
			       tu_now() - t1_);                                     \
		runs++;                                                             \
		fired += shm->fired;                                                \
	} while (0)
	/* the first hits inside a forced compaction: its scans, liveness lookups and
	 * cold inserts (other runs reach them only by chance); not scaled, so every
	 * build runs the same points */
	for (uint64_t k = 1; k <= 24 && tu_now() - t0 < limit_s && failed < MAX_FAILED; k++)
		RUN(MODE_COMPACT, k);
	/* everything fails from the first forced compaction on, or from the last
	 * writes before close on: every later call must be an error, and close work */
	RUN(MODE_COMPACT_ALL, 1);
	RUN(MODE_CLOSE_ALL, 1);
	/* the points: all of the first ones, then spread over the rest */
	uint64_t budget = tu_scaled(80), dense = budget / 2;
	for (uint64_t i = 0; i < budget && tu_now() - t0 < limit_s && failed < MAX_FAILED; i++) {
		uint64_t point;
		if (i < dense || n <= budget) {
			point = i + 1;
		} else {
			uint64_t span = (n - dense) / (budget - dense);
			point = dense + (i - dense) * span + 1 + tu_rng_below(rng, span ? span : 1);
		}
		if (point > n)
			break;
		RUN(MODE_ONCE, point);
	}
	/* every hit from k on fails: the store must degrade to errors, and close */
	for (uint64_t i = 0; i < tu_scaled(8) && tu_now() - t0 < limit_s && failed < MAX_FAILED; i++)
		RUN(MODE_PERSIST, 1 + tu_rng_below(rng, n));
	/* scattered failures */
	for (uint64_t i = 0; i < tu_scaled(4) && tu_now() - t0 < limit_s && failed < MAX_FAILED; i++)
		RUN(MODE_PROB, 2 + tu_rng_below(rng, n < 50 ? n : 50));
#undef RUN
	CHECK(failed == 0, "%u of %llu runs failed (FAILED POINT lines above)", failed,
	      (unsigned long long)runs);
	CHECK(fired > 0, "no fault fired in %llu runs", (unsigned long long)runs);
	/* the 26 forced-compaction and all-fail runs alone come first: a run cut short
	 * by the time budget before them (measured: 31 to 49 runs per site under
	 * AddressSanitizer) injected too little to count */
	CHECK(runs >= 26, "only %llu runs within the time budget", (unsigned long long)runs);
	printf("test_fault %s: %llu runs, %llu faults injected, %.1f s; all surfaced as errors\n",
	       argv[1], (unsigned long long)runs, (unsigned long long)fired, tu_now() - t0);
	tu_tmpdir_remove(dir);
	return 0;
}
