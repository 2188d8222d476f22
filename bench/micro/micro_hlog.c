/*
 * micro_hlog.c - allocation at the hybrid log's tail (log/hlog.h): hlog_alloc
 * plus writing the record (rec_init, 8-byte key), inside the epoch, as an insert
 * does before it links the record into the index.
 *
 * Only allocation is measured, not flushing: the log has 512 MiB of memory, all of
 * it mutable, and allocations stay in the first half of its first lap, where the
 * log worker has nothing to flush or evict (no boundary moves: checked). The
 * memory is touched once before timing so that page faults are not counted.
 *
 *   hlog/alloc/<bytes>            one thread; when a round has used the room, the
 *                                 tail is rewound (timing paused). Rewinding is
 *                                 sound only because read_only, head and the
 *                                 flush state never left their initial values,
 *                                 which the benchmark checks each round.
 *   hlog/alloc/<bytes>/threads:2  two threads contending on the tail's CAS; a
 *                                 fixed number of allocations per thread that
 *                                 fits in the room (no rewind with two threads).
 *
 * The epoch is entered once per 256 allocations here; its own cost is what
 * micro_epoch.c measures.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/address.h"
#include "core/epoch.h"
#include "io/file.h"
#include "log/hlog.h"
#include "log/record.h"
#include "micro.h"

#define LOG_MEM (512ull << 20)
#define ROOM (LOG_MEM / 2) /* bytes a round (or a threaded run) may allocate */
#define BATCH 256

/* One log shared by the threads of a run; set up and torn down by thread 0. */
static struct {
	struct epoch *ep;
	struct hlog *log;
	struct em_file file;
	char path[4200];
	_Atomic int users; /* threads still registered in the epoch */
} g;

static int log_open(void)
{
	struct hlog_config cfg = { .mem_size = LOG_MEM, .page_size = 1u << 20,
				   .mutable_fraction = 1.0 };
	int rc;

	if (micro_scratch_file("hlog", g.path, sizeof(g.path)) < 0)
		return -ENOENT;
	rc = em_file_open(&g.file, g.path, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	if (rc < 0)
		return rc;
	g.ep = aligned_alloc(64, sizeof(*g.ep));
	g.log = aligned_alloc(64, sizeof(*g.log));
	if (g.ep == NULL || g.log == NULL) {
		rc = -ENOMEM;
		goto undo_alloc;
	}
	epoch_init(g.ep);
	rc = hlog_init(g.log, &cfg, &g.file, g.ep);
	if (rc < 0)
		goto undo_alloc;
	memset(g.log->base, 0, g.log->mem_size); /* fault the ring in, untimed */
	return 0;

undo_alloc:
	free(g.ep);
	free(g.log);
	g.ep = NULL;
	g.log = NULL;
	em_file_close(&g.file);
	remove(g.path);
	return rc;
}

static void log_close(void)
{
	hlog_destroy(g.log); /* runs the epoch's pending actions too */
	free(g.log);
	free(g.ep);
	g.log = NULL;
	g.ep = NULL;
	em_file_close(&g.file);
	remove(g.path);
}

/* Nothing moved since the log was made: the worker has flushed nothing. */
static int log_untouched(void)
{
	return hlog_load(&g.log->read_only) == 0 && hlog_load(&g.log->head) == 0 &&
	       hlog_load(&g.log->flushed) == 0;
}

/* BATCH allocations of `size` bytes, each record written as an insert would. */
static inline void alloc_batch(int slot, uint64_t size, const uint8_t *val, uint64_t *key)
{
	uint32_t vcap = (uint32_t)(size - REC_HDR_SIZE - 8);

	epoch_protect(g.ep, slot);
	for (unsigned i = 0; i < BATCH; i++) {
		uint64_t a;

		while ((a = hlog_alloc(g.log, size)) == 0) /* not reached: room is kept */
			hlog_wait(g.log, size, slot);
		rec_init(hlog_rec(g.log, a), 0, 0, key, 8, val, vcap, vcap);
		++*key;
	}
	epoch_unprotect(g.ep, slot);
}

static void bm_alloc(emb_state *st)
{
	uint64_t size = (uint64_t)emb_state_range(st, 0), key = 0;
	uint64_t per_round = ROOM / size / BATCH * BATCH, in_round = 0;
	uint8_t val[4096] = { 0 };
	int slot, rc = log_open();

	if (rc < 0) {
		emb_state_skip_with_error(st, "cannot make the log (scratch dir?)");
		return;
	}
	slot = epoch_register(g.ep);
	while (emb_state_keep_running_batch(st, BATCH)) {
		if (in_round == per_round) {
			emb_state_pause_timing(st);
			if (!log_untouched()) {
				emb_state_skip_with_error(st, "the log moved a boundary");
				emb_state_resume_timing(st);
				break;
			}
			/* relaxed: no other thread allocates; the worker only reads tail */
			atomic_store_explicit(&g.log->tail, EM_LOG_START, memory_order_relaxed);
			in_round = 0;
			emb_state_resume_timing(st);
		}
		alloc_batch(slot, size, val, &key);
		in_round += BATCH;
	}
	epoch_unregister(g.ep, slot);
	emb_set_items_processed(st, emb_state_iterations(st));
	emb_set_bytes_processed(st, emb_state_iterations(st) * (int64_t)size);
	log_close();
}

static void bm_alloc_threads(emb_state *st)
{
	uint64_t size = (uint64_t)emb_state_range(st, 0), key = 0;
	uint8_t val[4096] = { 0 };
	int slot = -1, failed = 0;

	if (emb_state_thread_index(st) == 0) {
		failed = log_open() < 0;
		atomic_store(&g.users, emb_state_threads(st));
	}
	while (emb_state_keep_running_batch(st, BATCH)) {
		if (g.log == NULL) { /* thread 0 failed; all stop */
			failed = 1;
			break;
		}
		if (slot < 0)
			slot = epoch_register(g.ep);
		alloc_batch(slot, size, val, &key);
	}
	if (slot >= 0)
		epoch_unregister(g.ep, slot);
	emb_set_items_processed(st, emb_state_iterations(st));
	emb_set_bytes_processed(st, emb_state_iterations(st) * (int64_t)size);
	if (failed) {
		emb_state_skip_with_error(st, "cannot make the log (scratch dir?)");
		return;
	}
	/* seq_cst: thread 0 sees every other thread's unregistering before teardown */
	atomic_fetch_sub(&g.users, 1);
	if (emb_state_thread_index(st) == 0) {
		while (atomic_load(&g.users) > 0)
			sched_yield();
		if (!log_untouched())
			emb_state_skip_with_error(st, "the log moved a boundary: room too small");
		log_close();
	}
}

void micro_register_hlog(void)
{
	emb_bench *b = emb_register("hlog/alloc", bm_alloc);

	emb_bench_arg(emb_bench_arg(emb_bench_arg_name(b, "bytes"), 64), 256);
	b = emb_register("hlog/alloc", bm_alloc_threads);
	b = emb_bench_arg(emb_bench_arg_name(b, "bytes"), 64);
	/* Fixed count: two threads together fill at most the room. */
	emb_bench_real_time(emb_bench_threads(emb_bench_iterations(b, ROOM / 64 / 2), 2));
}
