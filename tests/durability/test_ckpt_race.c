/*
 * test_ckpt_race.c - checkpoints taken while writers run, then a crash: what
 * recovery must restore (ember.h, ember_checkpoint; docs/checkpoint.md, "Why
 * recovery gets exactly the checkpointed state").
 *
 * A forked child opens a store with a large hot index (so that the fuzzy copy of
 * step 3 takes long enough for writes to land in buckets it has already copied)
 * and runs WRITERS threads, each inserting its own fresh keys (writer w, sequence s)
 * with a value naming both, in order, publishing s after each put returns. The
 * main thread takes checkpoints back to back; before each it reads every writer's
 * published count, and after it returns 0 it records that snapshot as covered (in
 * memory shared with the parent). After CHECKPOINTS of them the child dies with
 * _exit while the writers still run (no close, no final checkpoint).
 *
 * The parent reopens the store and checks, per writer:
 *   - every write that returned before the last completed checkpoint began is there
 *     (sequences 0 .. covered-1), with exactly its value;
 *   - the writes present are a prefix 0 .. S of the writer's sequence: a write
 *     that raced a checkpoint may be there or not, but never one without every
 *     write its writer made before it (they returned before it began, so their
 *     records lie below it in the log: recovery replays [R, E) in address order);
 *   - no value is torn, mixed or never written (the value names key and sequence).
 * Floors: every round completes its checkpoints, writes returned while a checkpoint
 * ran, and recovery replayed records past the saved index in at least one round
 * (the race this test is about happened).
 */
#include <ember.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#define WRITERS 3
#define CHECKPOINTS 6
#define MAX_SEQ (1u << 22) /* per writer, far above what a round writes */

/* Shared with the parent (MAP_SHARED): what the child promised. */
struct shared {
	_Atomic uint64_t done[WRITERS];    /* sequences whose put returned */
	uint64_t covered[WRITERS];         /* done[] read before the last checkpoint
					      that returned 0 began */
	_Atomic uint64_t raced;            /* puts that returned while a checkpoint ran */
	uint32_t checkpoints;              /* completed */
	int failed;                        /* a child check failed: its line */
};

static struct shared *sh;
static _Atomic int in_ckpt;
static _Atomic int stop;
static ember_db *cdb;

static int key_of(uint32_t w, uint64_t s, char *buf)
{
	return snprintf(buf, 32, "w%u-%010llu", w, (unsigned long long)s);
}

/* value of (w, s): 24..215 bytes naming both, the rest derived from them */
static size_t val_of(uint32_t w, uint64_t s, uint8_t *buf)
{
	size_t n = 24 + (tu_mix64(s * 31 + w) % 192);
	uint64_t x = tu_mix64(((uint64_t)w << 40) ^ s);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = tu_mix64(x + i);
		memcpy(buf + i, &v, n - i < 8 ? n - i : 8);
	}
	uint64_t ww = w;
	memcpy(buf, &ww, 8);
	memcpy(buf + 8, &s, 8);
	return n;
}

static void *writer_main(void *arg)
{
	uint32_t w = (uint32_t)(uintptr_t)arg;
	ember_session *s = NULL;
	if (ember_session_open(cdb, &s) < 0) {
		sh->failed = __LINE__;
		return NULL;
	}
	char k[32];
	uint8_t v[256];
	/* relaxed: a stop flag; the child _exits without waiting for us anyway */
	for (uint64_t seq = 0; seq < MAX_SEQ && !atomic_load_explicit(&stop, memory_order_relaxed);
	     seq++) {
		int kl = key_of(w, seq, k);
		size_t vl = val_of(w, seq, v);
		/* seq_cst (both in_ckpt loads): a put that began and returned inside one
		 * checkpoint sees the flag set by the main thread before it called it */
		int before = atomic_load(&in_ckpt);
		int rc = ember_put(s, k, (size_t)kl, v, vl);
		if (rc < 0) {
			sh->failed = __LINE__;
			break;
		}
		if (before && atomic_load(&in_ckpt))
			/* relaxed: a count read after the child is gone */
			atomic_fetch_add_explicit(&sh->raced, 1, memory_order_relaxed);
		/* release: the count is published only after the put returned; the main
		 * thread's acquire load before a checkpoint sees only returned writes */
		atomic_store_explicit(&sh->done[w], seq + 1, memory_order_release);
		if (seq % 8 == 7)
			usleep(20); /* a few hundred thousand keys a round at most */
	}
	ember_session_close(s);
	return NULL;
}

static void child(const char *dir)
{
	ember_options o;
	ember_options_default(&o);
	o.page_size = 64u << 10;
	o.log_memory = 8u << 20;
	o.index_buckets = 1u << 15; /* 2 MiB of buckets: a copy that takes a while */
	if (ember_open(dir, &o, &cdb) < 0)
		_exit(3);
	pthread_t th[WRITERS];
	for (uint32_t w = 0; w < WRITERS; w++)
		if (pthread_create(&th[w], NULL, writer_main, (void *)(uintptr_t)w) != 0)
			_exit(4);
	/* let the writers fill some of the index first */
	while (atomic_load_explicit(&sh->done[0], memory_order_acquire) < 2000 && !sh->failed)
		usleep(1000);
	for (uint32_t c = 0; c < CHECKPOINTS && !sh->failed; c++) {
		uint64_t snap[WRITERS];
		for (int w = 0; w < WRITERS; w++)
			/* acquire: pairs with the writer's release after its put returned */
			snap[w] = atomic_load_explicit(&sh->done[w], memory_order_acquire);
		atomic_store(&in_ckpt, 1); /* seq_cst: see writer_main */
		int rc = ember_checkpoint(cdb, NULL);
		atomic_store(&in_ckpt, 0);
		if (rc < 0) {
			sh->failed = __LINE__;
			break;
		}
		memcpy(sh->covered, snap, sizeof(snap));
		sh->checkpoints = c + 1;
		usleep(2000 + (useconds_t)(tu_rng_below(tu_rng_global(), 3000)));
	}
	/* a crash with the writers running: nothing is closed or checkpointed */
	_exit(0);
}

/* Check writer w's keys in the reopened store; returns the writes present. */
static uint64_t check_writer(ember_session *s, uint32_t w, uint64_t covered, uint64_t done)
{
	char k[32];
	uint8_t want[256], got[256];
	uint64_t present = 0, first_absent = UINT64_MAX;
	/* every write made (done) and the one that may have been in flight */
	for (uint64_t seq = 0; seq <= done; seq++) {
		int kl = key_of(w, seq, k);
		size_t vl = val_of(w, seq, want), gl = 0;
		int rc = ember_get(s, k, (size_t)kl, got, sizeof(got), &gl);
		if (rc == EMBER_ENOTFOUND) {
			CHECK(seq >= covered,
			      "writer %u: write %llu returned before the last checkpoint began "
			      "(%llu covered) and is lost", w, (unsigned long long)seq,
			      (unsigned long long)covered);
			if (first_absent == UINT64_MAX)
				first_absent = seq;
			continue;
		}
		CHECK_OK(rc);
		CHECK(gl == vl && memcmp(got, want, vl) == 0,
		      "writer %u write %llu: the value read back is not the one written (torn "
		      "or mixed)", w, (unsigned long long)seq);
		CHECK(first_absent == UINT64_MAX,
		      "writer %u: write %llu is there but its earlier write %llu is lost (not a "
		      "prefix of the writer's writes)", w, (unsigned long long)seq,
		      (unsigned long long)first_absent);
		present++;
	}
	/* nothing past what the writer made: a key never written is absent */
	for (uint64_t seq = done + 1; seq < done + 64; seq++) {
		size_t gl = 0;
		int kl = key_of(w, seq, k);
		CHECK(ember_get(s, k, (size_t)kl, got, sizeof(got), &gl) == EMBER_ENOTFOUND,
		      "writer %u: write %llu was never made, yet it is there", w,
		      (unsigned long long)seq);
	}
	return present;
}

int main(int argc, char **argv)
{
	tu_init("ckpt_race", argc, argv);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(sh != MAP_FAILED, "mmap");
	uint64_t rounds = tu_scaled(3);
	uint64_t replayed_total = 0, raced_total = 0;
	for (uint64_t r = 0; r < rounds; r++) {
		char dir[256];
		CHECK(tu_tmpdir_make("ckpt-race", dir, sizeof(dir)) == 0, "tmpdir");
		memset(sh, 0, sizeof(*sh));
		atomic_store(&stop, 0);
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			tu_rng_stream(tu_rng_global(), r);
			child(dir);
		}
		int st = 0;
		CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exited with %d", st);
		CHECK(sh->failed == 0, "the child failed at test_ckpt_race.c:%d", sh->failed);
		CHECK(sh->checkpoints == CHECKPOINTS, "round %llu: %u of %d checkpoints completed",
		      (unsigned long long)r, sh->checkpoints, CHECKPOINTS);

		ember_db *db = NULL;
		CHECK_OK(ember_open(dir, NULL, &db));
		ember_recovery_info ri;
		CHECK_OK(ember_recovery_info_get(db, &ri));
		CHECK(ri.checkpoint_id == CHECKPOINTS, "recovered checkpoint %llu, want %d",
		      (unsigned long long)ri.checkpoint_id, CHECKPOINTS);
		ember_session *s = NULL;
		CHECK_OK(ember_session_open(db, &s));
		uint64_t present = 0, covered = 0;
		for (uint32_t w = 0; w < WRITERS; w++) {
			uint64_t done = atomic_load(&sh->done[w]);
			present += check_writer(s, w, sh->covered[w], done);
			covered += sh->covered[w];
		}
		CHECK(covered > 0, "round %llu: no write covered", (unsigned long long)r);
		uint64_t raced = atomic_load(&sh->raced);
		printf("round %llu: %llu writes covered, %llu recovered, %llu raced a checkpoint, "
		       "%llu records replayed\n", (unsigned long long)r, (unsigned long long)covered,
		       (unsigned long long)present, (unsigned long long)raced,
		       (unsigned long long)ri.records_replayed);
		replayed_total += ri.records_replayed;
		raced_total += raced;
		CHECK_OK(ember_session_close(s));
		CHECK_OK(ember_close(db));
		tu_tmpdir_remove(dir);
	}
	/* floors: the writes did race the checkpoints, and the replay had work */
	CHECK(raced_total > 0, "no put returned while a checkpoint ran");
	CHECK(replayed_total > 0, "recovery never replayed a record past the saved index");
	printf("ok: %llu rounds, %llu raced puts, %llu records replayed\n",
	       (unsigned long long)rounds, (unsigned long long)raced_total,
	       (unsigned long long)replayed_total);
	return 0;
}
