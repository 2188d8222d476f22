/*
 * test_async_crash.c - SIGKILL while writers work through the asynchronous
 * operations (docs/async.md), then recovery.
 *
 * Each iteration forks a child that creates a store and runs WRITERS threads, each
 * with its own session and up to INFLIGHT operations in flight. In round r a
 * writer visits each of its keys once: rmw keys (k % 4 == 0) get an rmw whose
 * callback checks that the old value is value(k, r - 1) (absent for r = 1) and
 * writes value(k, r); the other keys are put value(k, r), or deleted when
 * del(k, r). Rounds overlap: round r + 1 starts while round r's operations are
 * still pending, so an rmw is often queued behind the pending rmw of the round
 * before and must see its result (invariant 1). A round is finished when all its
 * operations completed. The child's main thread loops: R = the newest round every
 * writer has finished; take a checkpoint; record R in the progress file (pwrite +
 * fdatasync). Background checkpoints run too, and compaction (small budgets). The
 * parent kills the child after a random delay (every other time counted from the
 * child's first recorded checkpoint, which the parent waits for), recovers the store
 * and checks every key: its state is that of some round r' (absent with del(k, r'),
 * or value(k, r') byte for byte), with R <= r' <= the newest round any writer
 * started. The run fails unless half the kills came after recorded checkpoints and
 * enough operations went pending.
 */
#include <ember.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#define WRITERS 2
#define INFLIGHT 64
#define VMAX 1300
static uint64_t KEYS_PER;
static char dir[512], store[600], progress_path[600];

struct shared {
	_Atomic uint64_t pending, queued_rmw, ops;
};
static struct shared *shm; /* counted by the children, read by the parent */

static int is_rmw_key(uint64_t k) { return k % 4 == 0; }
static int del(uint64_t k, uint64_t r) { return !is_rmw_key(k) && tu_mix64(k * 1000003 + r) % 7 == 0; }

static size_t value(uint64_t k, uint64_t r, uint8_t *buf)
{
	size_t n = 16 + tu_mix64(k ^ (r << 20)) % (VMAX - 16);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t w = tu_mix64(k * 31 + r * 131 + i);
		memcpy(buf + i, &w, n - i < 8 ? n - i : 8);
	}
	memcpy(buf, &k, 8);
	memcpy(buf + 8, &r, 8);
	return n;
}

static void opts(ember_options *o, uint32_t interval, uint32_t flags)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 512u << 10; /* 8 pages: a round's values leave memory */
	o->index_buckets = 1u << 9;
	o->hot_disk_budget = 4u << 20;
	o->cold_disk_budget = 16u << 20;
	o->cold_log_memory = 1u << 20;
	o->cold_index_chunks = 1u << 7;
	o->io_queue_depth = 32;
	o->checkpoint_interval_ms = interval;
	o->flags = flags;
}

/* ---- the child ------------------------------------------------------------------ */

struct writer;
struct wop {
	ember_op op;
	struct writer *w;
	uint64_t k, r;
	int busy;
};

struct writer {
	ember_db *db;
	int t;
	int progress_fd;
	_Atomic uint64_t done;  /* rounds 1..done finished */
	uint64_t left[4];       /* operations of round r not yet completed, at r % 4 */
	struct wop ops[INFLIGHT];
};

/* rmw: old must be round r - 1's value (absent for round 1); write round r's */
static int rmw_next(void *arg, const void *old, size_t old_len, void *out, size_t cap,
		    size_t *out_len)
{
	struct wop *o = arg;
	uint8_t want[VMAX];
	if (o->r == 1) {
		CHECK(!old, "key %llu round 1: a value before the first write", (unsigned long long)o->k);
	} else {
		size_t n = value(o->k, o->r - 1, want);
		CHECK(old && old_len == n && memcmp(old, want, n) == 0,
		      "key %llu round %llu: the rmw did not see round %llu's value (len %zu, want %zu)",
		      (unsigned long long)o->k, (unsigned long long)o->r, (unsigned long long)o->r - 1,
		      old_len, n);
	}
	size_t n = value(o->k, o->r, want);
	*out_len = n;
	if (cap < n)
		return EMBER_ERANGE;
	memcpy(out, want, n);
	return 0;
}

static void round_step(struct writer *w, uint64_t r)
{
	if (--w->left[r % 4] == 0) {
		/* rounds finish in order: a key's operations complete in issue order */
		CHECK(atomic_load(&w->done) == r - 1, "round %llu finished before round %llu",
		      (unsigned long long)r, (unsigned long long)atomic_load(&w->done) + 1);
		atomic_store(&w->done, r);
	}
}

static void wop_done(ember_op *op)
{
	struct wop *o = op->user;
	CHECK(op->status == 0, "key %llu round %llu: %s", (unsigned long long)o->k,
	      (unsigned long long)o->r, ember_strerror(op->status));
	o->busy = 0;
	round_step(o->w, o->r);
}

static struct wop *free_wop(struct writer *w, ember_session *s)
{
	for (;;) {
		for (int i = 0; i < INFLIGHT; i++)
			if (!w->ops[i].busy)
				return &w->ops[i];
		CHECK(ember_session_wait(s, 0) > 0, "wait");
	}
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(w->db, &s));
	uint8_t val[VMAX];
	for (uint64_t r = 1;; r++) {
		/* at most two rounds in flight */
		while (atomic_load(&w->done) + 2 < r)
			CHECK(ember_session_wait(s, 0) > 0, "wait");
		/* the round this writer starts, for the parent's upper bound, before any of
		 * its writes (no fsync: the page cache outlives SIGKILL) */
		CHECK(pwrite(w->progress_fd, &r, 8, 8 + 8 * (off_t)w->t) == 8, "pwrite");
		w->left[r % 4] = KEYS_PER;
		for (uint64_t i = 0; i < KEYS_PER; i++) {
			uint64_t k = (uint64_t)w->t * KEYS_PER + i;
			struct wop *o = free_wop(w, s);
			*o = (struct wop){.op = {.done = wop_done, .user = o}, .w = w, .k = k, .r = r};
			int rc;
			if (is_rmw_key(k)) {
				rc = ember_rmw_async(s, &o->op, &k, 8, rmw_next, o);
			} else if (del(k, r)) {
				rc = ember_delete_async(s, &o->op, &k, 8);
			} else {
				size_t n = value(k, r, val);
				rc = ember_put_async(s, &o->op, &k, 8, val, n);
			}
			atomic_fetch_add_explicit(&shm->ops, 1, memory_order_relaxed);
			if (rc == EMBER_EPENDING) {
				o->busy = 1;
				atomic_fetch_add_explicit(&shm->pending, 1, memory_order_relaxed);
				if (is_rmw_key(k) && atomic_load(&w->done) + 1 < r)
					atomic_fetch_add_explicit(&shm->queued_rmw, 1, memory_order_relaxed);
				continue;
			}
			CHECK(rc == 0, "key %llu round %llu: %s", (unsigned long long)k, (unsigned long long)r,
			      ember_strerror(rc));
			round_step(w, r);
		}
	}
	return NULL;
}

static void child(uint64_t seed)
{
	tu_rng_seed(tu_rng_global(), seed);
	int fd = open(progress_path, O_RDWR | O_CREAT, 0644);
	CHECK(fd >= 0, "progress file");
	ember_options o;
	opts(&o, 5 + (uint32_t)tu_rng_below(tu_rng_global(), 40), EMBER_OPEN_TRUNCATE);
	ember_db *db = NULL;
	CHECK_OK(ember_open(store, &o, &db));
	static struct writer ws[WRITERS];
	pthread_t th[WRITERS];
	for (int t = 0; t < WRITERS; t++) {
		ws[t].db = db;
		ws[t].t = t;
		ws[t].progress_fd = fd;
		CHECK(pthread_create(&th[t], NULL, writer_main, &ws[t]) == 0, "thread");
	}
	for (;;) {
		uint64_t R = UINT64_MAX;
		for (int t = 0; t < WRITERS; t++) {
			uint64_t d = atomic_load(&ws[t].done);
			if (d < R)
				R = d;
		}
		/* rounds <= R are finished by every writer: all their operations completed */
		int rc = ember_checkpoint(db, NULL);
		CHECK(rc == 0, "checkpoint: %s", ember_strerror(rc));
		if (R > 0)
			CHECK(pwrite(fd, &R, 8, 0) == 8 && fdatasync(fd) == 0, "progress");
		struct timespec ts = {0, (long)tu_rng_below(tu_rng_global(), 20) * 1000000L};
		nanosleep(&ts, NULL);
	}
}

/* ---- the parent ----------------------------------------------------------------- */

/* The newest round r in [lo, hi] whose state key k holds (buf, rc), or 0. */
static uint64_t round_of(uint64_t k, int rc, const uint8_t *buf, size_t vl, uint64_t lo, uint64_t hi)
{
	uint8_t want[VMAX];
	for (uint64_t r = hi; r >= lo && r > 0; r--) {
		if (del(k, r)) {
			if (rc == EMBER_ENOTFOUND)
				return r;
			continue;
		}
		size_t n = value(k, r, want);
		if (rc == 0 && vl == n && memcmp(buf, want, n) == 0)
			return r;
	}
	return 0;
}

/* Wait until the child's progress file records a checkpoint (its first word
 * nonzero): 1, or 0 when the child ended or `secs` passed first. */
static int wait_recorded(pid_t pid, double secs)
{
	double end = tu_now() + secs;
	while (tu_now() < end) {
		uint64_t r = 0;
		int fd = open(progress_path, O_RDONLY);
		if (fd >= 0) {
			ssize_t n = pread(fd, &r, sizeof(r), 0);
			close(fd);
			if (n == (ssize_t)sizeof(r) && r != 0)
				return 1;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return 0;
		usleep(2000);
	}
	return 0;
}

int main(int argc, char **argv)
{
	tu_init("async_crash", argc, argv);
	KEYS_PER = tu_scaled(800) < 300 ? 300 : tu_scaled(800);
	uint64_t iters = tu_scaled(24) < 8 ? 8 : tu_scaled(24);
	CHECK(tu_tmpdir_make("async-crash", dir, sizeof(dir)) == 0, "tmpdir");
	snprintf(progress_path, sizeof(progress_path), "%s.progress", dir);
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(shm != MAP_FAILED, "mmap");
	uint64_t ckpt_recorded = 0, max_R = 0, keys_checked = 0;
	double t0 = tu_now();
	for (uint64_t it = 0; it < iters; it++) {
		unlink(progress_path);
		/* a directory per iteration: a child killed in its creating open leaves
		 * nothing of an older store behind */
		snprintf(store, sizeof(store), "%s/it%llu", dir, (unsigned long long)it);
		uint64_t seed = tu_rng_next(tu_rng_global());
		/* half the kills early; the others after the child recorded a checkpoint
		 * (waited for, not guessed: a sanitizer build on a loaded machine takes
		 * seconds to get there), then a little later */
		int late = it % 2;
		uint64_t delay_us = late ? tu_rng_below(tu_rng_global(), 300000)
					 : 30000 + tu_rng_below(tu_rng_global(), 120000);
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0)
			child(seed);
		if (late)
			CHECK(wait_recorded(pid, 60.0), "iteration %llu: the child recorded no "
			      "checkpoint within 60 s", (unsigned long long)it);
		usleep((useconds_t)delay_us);
		kill(pid, SIGKILL);
		int st = 0;
		CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		      "iteration %llu: the child ended by itself (status %d): it failed",
		      (unsigned long long)it, st);
		uint64_t prog[1 + WRITERS] = {0};
		int fd = open(progress_path, O_RDONLY);
		if (fd >= 0) {
			CHECK(pread(fd, prog, sizeof(prog), 0) >= 0, "read progress");
			close(fd);
		}
		uint64_t R = prog[0], newest = 0;
		for (int t = 0; t < WRITERS; t++)
			if (prog[1 + t] > newest)
				newest = prog[1 + t];
		ckpt_recorded += R > 0;
		if (R > max_R)
			max_R = R;
		ember_options o;
		opts(&o, 0, 0);
		ember_db *db = NULL;
		int rc = ember_open(store, &o, &db);
		if (rc == EMBER_ENOTEMBER || rc == EMBER_ECORRUPT) {
			/* killed inside the child's creating open: nothing was promised */
			CHECK(R == 0 && newest == 0, "iteration %llu: no store after round %llu: %s",
			      (unsigned long long)it, (unsigned long long)R, ember_strerror(rc));
			continue;
		}
		CHECK(rc == 0, "iteration %llu: recovery failed: %s", (unsigned long long)it, ember_strerror(rc));
		ember_session *s;
		CHECK_OK(ember_session_open(db, &s));
		uint8_t buf[VMAX];
		for (uint64_t k = 0; k < WRITERS * KEYS_PER; k++) {
			size_t vl = 0;
			rc = ember_get(s, &k, 8, buf, sizeof(buf), &vl);
			CHECK(rc == 0 || rc == EMBER_ENOTFOUND, "key %llu: %s", (unsigned long long)k,
			      ember_strerror(rc));
			if (R == 0 && rc == EMBER_ENOTFOUND)
				continue; /* never written, or its writes were lost: allowed */
			uint64_t r = round_of(k, rc, buf, vl, R ? R : 1, newest);
			CHECK(r != 0, "iteration %llu: key %llu holds no state of rounds %llu..%llu (rc %d, "
				      "vlen %zu)",
			      (unsigned long long)it, (unsigned long long)k, (unsigned long long)R,
			      (unsigned long long)newest, rc, vl);
			keys_checked++;
		}
		CHECK_OK(ember_session_close(s));
		CHECK_OK(ember_close(db));
		tu_tmpdir_remove(store);
	}
	uint64_t pend = atomic_load(&shm->pending), ops = atomic_load(&shm->ops);
	printf("async_crash: %llu iterations in %.1f s, %llu with a recorded checkpoint (newest round "
	       "%llu), %llu keys checked; %llu operations, %llu pending, %llu rmws queued behind "
	       "the round before\n",
	       (unsigned long long)iters, tu_now() - t0, (unsigned long long)ckpt_recorded,
	       (unsigned long long)max_R, (unsigned long long)keys_checked, (unsigned long long)ops,
	       (unsigned long long)pend, (unsigned long long)atomic_load(&shm->queued_rmw));
	CHECK(ckpt_recorded >= iters / 2, "kills after a recorded checkpoint: %llu",
	      (unsigned long long)ckpt_recorded);
	CHECK(max_R >= 2, "rounds covered by a checkpoint: %llu", (unsigned long long)max_R);
	CHECK(pend >= ops / 50 && pend >= 300, "operations that went pending: %llu of %llu",
	      (unsigned long long)pend, (unsigned long long)ops);
	CHECK(atomic_load(&shm->queued_rmw) > 0, "rmws queued behind a pending rmw of their key");
	tu_tmpdir_remove(dir);
	unlink(progress_path);
	return 0;
}
