/*
 * test_powerloss.c - cut the power at many points, then recover (docs/faults.md,
 * "Power loss"; the promise of ember_checkpoint in include/ember.h).
 *
 * A run: a fresh store under the power-loss simulator (io/powerloss.h), armed to
 * cut the power at io event N. The main thread writes (puts of small and large
 * values, deletes) keys [0, KEYS), takes a checkpoint every CK_EVERY operations and
 * forces compaction (hot->cold, cold->cold) every CMP_EVERY; a second thread writes
 * keys [KEYS, 2 KEYS) meanwhile, so writes race the checkpoints (recovery replays
 * them). Small memory and disk budgets make the background compactor run too.
 * Once the power is gone the threads stop, the store is closed (nothing it does
 * then counts), the simulator rewrites the files as a power loss would leave them,
 * and the store is reopened. Every key must then hold
 *   - the value (or deletion) of the newest write to it that returned before the
 *     last checkpoint that completed before the power went began, or of a later
 *     write (none of the first kind: absent is allowed too);
 *   - never a value that was not written to it (values name their key and write).
 * The open must succeed: each state the simulator leaves is one a real power loss
 * could, and the store promises to recover from those.
 *
 * Cut points: a first run with no cut counts the io events of the workload and of
 * each checkpoint; then the power is cut at every event of one checkpoint (every
 * step of it: the index file, the log folds, the table, meta.tmp, the rename, the
 * directory fsyncs, the removal of the older checkpoint, the release of log space),
 * at points inside other checkpoints, and at points drawn over the whole run.
 * Floors on what happened are asserted at the end.
 *
 * With `seg` the logs are segment files (log_segment_bytes): each fsync then covers
 * a range of files, and their creation and removal need the directory's fsync.
 *
 *   test_powerloss [seg] [--soak]   (EMBER_TEST_SCALE shrinks it; the seed is printed)
 */
#include <ember.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/powerloss.h"
#include "test_util.h"

#define KEYS 256u
#define CK_EVERY 150u
#define CMP_EVERY 400u
#define MAX_CK 64
#define VBUF (40u << 10)

static uint64_t NOPS;      /* main-thread operations per run */
static int SEG;            /* the logs in segment files */
static char root[512];

/* ---- the workload: deterministic per (run seed, thread) ---- */

struct wop { uint32_t key; uint8_t del; };

static size_t value(uint64_t k, uint64_t i, uint8_t *buf)
{
	uint64_t h = tu_mix64(k * 7919 + i);
	size_t n = h % 50 == 0 ? 8000 + h % 24000 : 16 + h % 400;
	for (size_t j = 16; j < n; j += 8) {
		uint64_t w = tu_mix64(h + j);
		memcpy(buf + j, &w, n - j < 8 ? n - j : 8);
	}
	memcpy(buf, &k, 8);
	memcpy(buf + 8, &i, 8);
	return n;
}

/* One writer's history: ops[i] is its i-th write (key, deleted?). */
struct writer {
	ember_db *db;
	uint32_t key0;
	uint64_t seed;
	struct wop *ops;
	uint64_t cap;
	_Atomic uint64_t done;   /* writes that returned */
	_Atomic uint64_t *pace;  /* the other thread's count: stay within 200 of it */
	_Atomic int stop;
};

static int writer_op(struct writer *w, ember_session *s, tu_rng *r, uint8_t *buf)
{
	uint64_t i = atomic_load(&w->done);
	if (i >= w->cap)
		return 1;
	uint32_t k = w->key0 + (uint32_t)tu_rng_below(r, KEYS);
	int del = tu_rng_below(r, 10) == 0;
	w->ops[i] = (struct wop){k, (uint8_t)del};
	uint64_t key = k;
	int rc;
	if (del) {
		rc = ember_delete(s, &key, 8);
	} else {
		size_t n = value(k, (uint64_t)k << 32 | i, buf);
		rc = ember_put(s, &key, 8, buf, n);
	}
	/* after the power went the store still runs; an error then is no failure */
	CHECK(rc == 0 || em_powerloss_dead(), "write %" PRIu64 ": %s", i, ember_strerror(rc));
	atomic_store(&w->done, i + 1); /* seq_cst: the checkpoint's snapshot reads it */
	return 0;
}

static void *racer_main(void *arg)
{
	struct writer *w = arg;
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(w->db, &s));
	tu_rng r;
	tu_rng_seed(&r, w->seed);
	uint8_t *buf = malloc(VBUF);
	CHECK(buf, "malloc");
	while (!atomic_load(&w->stop) && !em_powerloss_dead()) {
		if (atomic_load(&w->done) > atomic_load(w->pace) + 200) {
			sched_yield();
			continue;
		}
		if (writer_op(w, s, &r, buf))
			break;
	}
	free(buf);
	CHECK_OK(ember_session_close(s));
	return NULL;
}

static void opts(ember_options *o)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 1u << 20;
	o->index_buckets = 1u << 9;
	o->hot_disk_budget = 2u << 20;
	o->cold_disk_budget = 8u << 20;
	o->cold_log_memory = 1u << 20;
	o->cold_index_chunks = 1u << 7;
	o->io_queue_depth = 32;
	if (SEG)
		o->log_segment_bytes = 32u << 20; /* the smallest allowed */
}

/* ---- one run ---- */

struct run {
	/* in: */
	uint64_t cut_after, seed;
	/* out: */
	uint64_t events;                 /* io events the run made */
	uint64_t ck_begin[MAX_CK], ck_end[MAX_CK]; /* events around each checkpoint */
	uint32_t nck;
	int died_in_ck, died_in_compact;
	char death[512];
	uint64_t checkpoint_id, replayed, keys_checked, values_found;
	struct em_powerloss_stats st;
};

/* Check key k of writer w after recovery; floor: writes of w that returned before
 * the last completed checkpoint began. */
static void check_key(ember_session *s, const struct writer *w, uint32_t k, uint64_t floor,
		      uint64_t seed, uint8_t *buf, uint8_t *want, struct run *ru)
{
	uint64_t n = atomic_load(&w->done), last = UINT64_MAX;
	int absent_ok = 1;
	for (uint64_t i = 0; i < floor; i++)
		if (w->ops[i].key == k)
			last = i;
	if (last != UINT64_MAX)
		absent_ok = w->ops[last].del;
	for (uint64_t i = last == UINT64_MAX ? floor : last; i < n && !absent_ok; i++)
		if (w->ops[i].key == k && w->ops[i].del)
			absent_ok = 1;
	uint64_t key = k;
	size_t len = 0;
	int rc = ember_get(s, &key, 8, buf, VBUF, &len);
	ru->keys_checked++;
	if (rc == EMBER_ENOTFOUND) {
		CHECK(absent_ok, "seed %" PRIu64 " cut %" PRIu64 ": key %u lost: its write %" PRIu64
		      " returned before a completed checkpoint began", seed, ru->cut_after, k, last);
		return;
	}
	CHECK(rc == 0, "seed %" PRIu64 " cut %" PRIu64 ": get key %u: %s", seed, ru->cut_after, k,
	      ember_strerror(rc));
	ru->values_found++;
	uint64_t vk, vi;
	CHECK(len >= 16, "key %u: a value of %zu bytes was never written", k, len);
	memcpy(&vk, buf, 8);
	memcpy(&vi, buf + 8, 8);
	uint64_t i = vi & 0xffffffffu;
	CHECK(vk == k && vi >> 32 == k && i < n && w->ops[i].key == k && !w->ops[i].del,
	      "seed %" PRIu64 " cut %" PRIu64 ": key %u holds a value never written to it", seed,
	      ru->cut_after, k);
	size_t wl = value(k, vi, want);
	CHECK(wl == len && memcmp(want, buf, len) == 0,
	      "seed %" PRIu64 " cut %" PRIu64 ": key %u: write %" PRIu64 "'s value damaged", seed,
	      ru->cut_after, k, i);
	CHECK(last == UINT64_MAX || i >= last,
	      "seed %" PRIu64 " cut %" PRIu64 ": key %u holds write %" PRIu64 ", older than write %"
	      PRIu64 " that a completed checkpoint covered", seed, ru->cut_after, k, i, last);
}

static void run_one(struct run *ru, uint64_t n)
{
	char dir[600], stash[600];
	snprintf(dir, sizeof(dir), "%s/s%" PRIu64, root, n);
	snprintf(stash, sizeof(stash), "%s/t%" PRIu64, root, n);
	CHECK(mkdir(stash, 0755) == 0, "mkdir %s", stash);
	struct writer w[2];
	uint64_t cap = NOPS * 4 + 1024;
	for (int t = 0; t < 2; t++) {
		memset(&w[t], 0, sizeof(w[t]));
		w[t].key0 = t * KEYS;
		w[t].seed = tu_mix64(ru->seed + (uint64_t)t);
		w[t].cap = cap;
		w[t].ops = calloc(cap, sizeof(struct wop));
		CHECK(w[t].ops, "calloc");
	}
	w[1].pace = &w[0].done;
	CHECK_OK(em_powerloss_arm(stash, ru->cut_after));
	ember_options o;
	opts(&o);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	w[0].db = w[1].db = db;
	pthread_t racer;
	CHECK(pthread_create(&racer, NULL, racer_main, &w[1]) == 0, "pthread_create");
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	tu_rng r;
	tu_rng_seed(&r, w[0].seed);
	uint8_t *buf = malloc(VBUF), *want = malloc(VBUF);
	CHECK(buf && want, "malloc");
	uint64_t floor[2] = {0, 0};
	for (uint64_t i = 1; i <= NOPS && !em_powerloss_dead(); i++) {
		CHECK(writer_op(&w[0], s, &r, buf) == 0, "history full");
		if (i % CK_EVERY == 0) {
			uint64_t at[2] = {atomic_load(&w[0].done), atomic_load(&w[1].done)};
			uint64_t e0 = em_powerloss_ops();
			int rc = ember_checkpoint(db, NULL);
			uint64_t e1 = em_powerloss_ops();
			int dead = em_powerloss_dead();
			if (ru->nck < MAX_CK) {
				ru->ck_begin[ru->nck] = e0;
				ru->ck_end[ru->nck++] = e1;
			}
			CHECK(rc == 0 || dead, "checkpoint: %s", ember_strerror(rc));
			if (rc == 0 && !dead) {
				floor[0] = at[0];
				floor[1] = at[1];
			}
			ru->died_in_ck |= dead;
		}
		if (i % CMP_EVERY == 0 && !em_powerloss_dead()) {
			int rc = ember_compact(db, 1);
			CHECK(rc == 0 || em_powerloss_dead(), "compact: %s", ember_strerror(rc));
			ru->died_in_compact |= em_powerloss_dead();
		}
	}
	atomic_store(&w[1].stop, 1);
	pthread_join(racer, NULL);
	CHECK_OK(ember_session_close(s));
	uint64_t at[2] = {atomic_load(&w[0].done), atomic_load(&w[1].done)};
	int rc = ember_close(db); /* a final checkpoint: complete if the power is still on */
	if (!em_powerloss_dead()) {
		CHECK(rc == 0, "close: %s", ember_strerror(rc));
		floor[0] = at[0];
		floor[1] = at[1];
	}
	ru->events = em_powerloss_ops();
	const char *d = em_powerloss_death();
	snprintf(ru->death, sizeof(ru->death), "%s", d ? d : "");
	rc = em_powerloss_cut(tu_mix64(ru->seed ^ 0xc0ffee), &ru->st);
	CHECK(rc == 0, "the cut failed: %s", strerror(-rc));

	/* recover, and check every key */
	db = NULL;
	rc = ember_open(dir, &o, &db);
	CHECK(rc == 0, "seed %" PRIu64 " cut %" PRIu64 " (at \"%s\"): recovery failed: %s",
	      ru->seed, ru->cut_after, ru->death, ember_strerror(rc));
	ember_recovery_info ri;
	CHECK_OK(ember_recovery_info_get(db, &ri));
	if (getenv("POWERLOSS_VERBOSE"))
		printf("cut %" PRIu64 " at \"%s\": recovered checkpoint %" PRIu64 " (%s), %" PRIu64
		       " replayed; kept %" PRIu64 " dropped %" PRIu64 " torn %" PRIu64 " after %" PRIu64
		       ", directory changes kept %" PRIu64 " undone %" PRIu64 "\n", ru->cut_after,
		       ru->death, ri.checkpoint_id, ri.detail, ri.records_replayed, ru->st.writes_kept,
		       ru->st.writes_dropped, ru->st.writes_torn, ru->st.writes_after,
		       ru->st.dirops_kept, ru->st.dirops_undone);
	ru->checkpoint_id = ri.checkpoint_id;
	ru->replayed = ri.records_replayed;
	CHECK_OK(ember_session_open(db, &s));
	for (int t = 0; t < 2; t++)
		for (uint32_t k = 0; k < KEYS; k++)
			check_key(s, &w[t], w[t].key0 + k, floor[t], ru->seed, buf, want, ru);
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	free(buf);
	free(want);
	for (int t = 0; t < 2; t++)
		free(w[t].ops);
	CHECK(tu_tmpdir_remove(dir) == 0 && tu_tmpdir_remove(stash) == 0, "cleanup");
}

/* The steps of a checkpoint a cut inside one should reach (substrings of the
 * event the power went at). */
static const char *const steps[] = {"hot.index", "hot.log", "cold.table", "meta.tmp",
				    "rename", "dirsync", "unlink", "rmdir", "mkdir"};
#define NSTEPS (sizeof(steps) / sizeof(steps[0]))

int main(int argc, char **argv)
{
	tu_init("powerloss", argc, argv);
	int soak = 0;
	for (int i = 1; i < argc; i++) {
		soak |= !strcmp(argv[i], "--soak");
		SEG |= !strcmp(argv[i], "seg");
	}
	NOPS = tu_scaled(soak ? 3000 : 1200);
	if (NOPS < 2 * CMP_EVERY)
		NOPS = 2 * CMP_EVERY;
	CHECK(tu_tmpdir_make("powerloss", root, sizeof(root)) == 0, "tmpdir");
	uint64_t seed = tu_seed();

	/* the reference run: no cut (the power goes never), counts the events */
	struct run ref = {.cut_after = 0, .seed = seed};
	run_one(&ref, 0);
	CHECK(ref.nck >= 4, "only %u checkpoints", ref.nck);
	printf("reference: %" PRIu64 " io events, %u checkpoints, checkpoint 3 at events [%" PRIu64
	       ", %" PRIu64 ")\n", ref.events, ref.nck, ref.ck_begin[2], ref.ck_end[2]);

	/* the cut points: every event of checkpoint 3 (it removes checkpoint 2 and
	 * releases space), a few in every other one, and points over the whole run */
	uint64_t ncuts = 0, capc = 4096, *cuts = malloc(capc * sizeof(*cuts));
	CHECK(cuts, "malloc");
	tu_rng r;
	tu_rng_seed(&r, seed ^ 0x5eed);
	for (uint64_t e = ref.ck_begin[2] + 1; e <= ref.ck_end[2] + 1 && ncuts < capc; e++)
		cuts[ncuts++] = e;
	for (uint32_t c = 0; c < ref.nck; c++)
		for (int j = 0; j < (soak ? 8 : 2) && ncuts < capc; j++)
			cuts[ncuts++] = tu_rng_range(&r, ref.ck_begin[c] + 1, ref.ck_end[c] + 1);
	uint64_t spread = tu_scaled(soak ? 600 : 60);
	for (uint64_t j = 0; j < spread && ncuts < capc; j++)
		cuts[ncuts++] = tu_rng_range(&r, 1, ref.events);

	uint64_t in_ck = 0, in_compact = 0, after_writes = 0, recovered_ckpt = 0, replayed = 0;
	uint64_t kept = 0, dropped = 0, torn = 0, undone = 0, step_seen[NSTEPS] = {0};
	double t0 = tu_now();
	for (uint64_t j = 0; j < ncuts; j++) {
		struct run ru = {.cut_after = cuts[j], .seed = tu_mix64(seed + j + 1)};
		run_one(&ru, j + 1);
		in_ck += ru.died_in_ck;
		in_compact += ru.died_in_compact;
		after_writes += ru.checkpoint_id > 0 || ru.values_found > 0;
		recovered_ckpt += ru.checkpoint_id > 0;
		replayed += ru.replayed;
		kept += ru.st.writes_kept;
		dropped += ru.st.writes_dropped;
		torn += ru.st.writes_torn;
		undone += ru.st.dirops_undone;
		for (size_t k = 0; k < NSTEPS && ru.died_in_ck; k++)
			step_seen[k] += strstr(ru.death, steps[k]) != NULL;
	}
	printf("%" PRIu64 " cuts in %.1f s: %" PRIu64 " inside checkpoints, %" PRIu64
	       " inside forced compaction, %" PRIu64 " recovered a checkpoint, %" PRIu64
	       " records replayed; unsynced writes kept %" PRIu64 ", dropped %" PRIu64 ", torn %"
	       PRIu64 "; directory changes undone %" PRIu64 "\n", ncuts, tu_now() - t0, in_ck,
	       in_compact, recovered_ckpt, replayed, kept, dropped, torn, undone);
	for (size_t k = 0; k < NSTEPS; k++)
		printf("  cuts inside a checkpoint at a \"%s\" event: %" PRIu64 "\n", steps[k],
		       step_seen[k]);
	/* floors: a suite whose cuts all missed would prove nothing */
	CHECK(in_ck >= (ref.ck_end[2] - ref.ck_begin[2]) / 2, "too few cuts inside checkpoints");
	CHECK(after_writes >= ncuts / 2, "too few cuts after the first checkpoint");
	CHECK(recovered_ckpt >= ncuts / 2, "too few recoveries of a checkpoint");
	CHECK(replayed > 0, "no recovery replayed a record");
	CHECK(kept + dropped + torn > 0 && undone > 0,
	      "no cut found an unsynced write or directory change");
	/* each unsynced write is kept, dropped or torn at random: with 60 of them, all
	 * three fates turn up but for about one run in 10^10; the sanitizer scales
	 * sometimes cut beside only a handful */
	if (kept + dropped + torn >= 60)
		CHECK(kept > 0 && dropped > 0 && torn > 0, "the simulator never varied");
	for (size_t k = 0; k < NSTEPS; k++)
		CHECK(step_seen[k] > 0, "no cut landed at a checkpoint's \"%s\" step", steps[k]);
	free(cuts);
	tu_tmpdir_remove(root);
	printf("ok\n");
	return 0;
}
