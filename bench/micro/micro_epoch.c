/*
 * micro_epoch.c - epoch protection (core/epoch.h), the price every store
 * operation pays on entry and exit:
 *
 *   epoch/protect_unprotect   one epoch_protect + epoch_unprotect pair
 *   epoch/refresh             one epoch_refresh while protected (what a long
 *                             operation does to let boundaries move)
 *
 * each on 1 and 2 threads (every thread has its own slot; the epoch's counter is
 * shared, so two threads show the cost of the shared cache lines).
 */
#include <stdalign.h>

#include "core/epoch.h"
#include "micro.h"

#define BATCH 256

static alignas(64) struct epoch ep;

/* Thread 0 resets the epoch before the timed loop; every thread claims its slot
 * after the loop's start barrier, so that none uses the epoch before the reset. */
static void setup(emb_state *st)
{
	if (emb_state_thread_index(st) == 0)
		epoch_init(&ep);
}

static void bm_protect_unprotect(emb_state *st)
{
	int slot = -1;

	setup(st);
	while (emb_state_keep_running_batch(st, BATCH)) {
		if (slot < 0)
			slot = epoch_register(&ep);
		for (unsigned i = 0; i < BATCH; i++) {
			epoch_protect(&ep, slot);
			epoch_unprotect(&ep, slot);
		}
	}
	if (slot >= 0)
		epoch_unregister(&ep, slot);
	emb_set_items_processed(st, emb_state_iterations(st));
}

static void bm_refresh(emb_state *st)
{
	int slot = -1;

	setup(st);
	while (emb_state_keep_running_batch(st, BATCH)) {
		if (slot < 0) {
			slot = epoch_register(&ep);
			epoch_protect(&ep, slot);
		}
		for (unsigned i = 0; i < BATCH; i++)
			epoch_refresh(&ep, slot);
	}
	if (slot >= 0) {
		epoch_unprotect(&ep, slot);
		epoch_unregister(&ep, slot);
	}
	emb_set_items_processed(st, emb_state_iterations(st));
}

/* Rates by wall clock, so that 1 and 2 threads compare (with CPU time, Google
 * Benchmark would divide by the threads' summed CPU time). */
void micro_register_epoch(void)
{
	emb_bench *b = emb_register("epoch/protect_unprotect", bm_protect_unprotect);

	emb_bench_real_time(emb_bench_threads(emb_bench_threads(b, 1), 2));
	b = emb_register("epoch/refresh", bm_refresh);
	emb_bench_real_time(emb_bench_threads(emb_bench_threads(b, 1), 2));
}
