/*
 * epoch.c - the epoch protection framework; design notes in epoch.h.
 *
 * Why protect() needs the re-check loop: a thread loads E, then publishes it. If a
 * bump happened between the load and the publication, the bumper's scan may have
 * missed this thread while its published epoch is already old. After the full
 * fence the thread re-reads E: if it is unchanged, any later bumper's scan must see
 * the published value (the fence orders publication before the re-read, and the
 * bumper's seq_cst increment precedes its scan); if it changed, the thread
 * publishes again and has synchronised with the bump it observed.
 */
#include "core/epoch.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#define ACTION_FREE UINT64_MAX
#define ACTION_FILLING (UINT64_MAX - 1)
#define ACTION_RUNNING (UINT64_MAX - 2)

void epoch_init(struct epoch *ep)
{
	memset(ep, 0, sizeof(*ep));
	atomic_store_explicit(&ep->current, 1, memory_order_relaxed); /* before sharing */
	for (int i = 0; i < EPOCH_MAX_ACTIONS; i++)
		atomic_store_explicit(&ep->actions[i].state, ACTION_FREE, memory_order_relaxed);
}

void epoch_finish(struct epoch *ep)
{
	/* acquire: pairs with the increment in epoch_bump */
	while (atomic_load_explicit(&ep->pending, memory_order_acquire) > 0) {
		if (epoch_drain(ep) == 0)
			sched_yield();
	}
}

int epoch_register(struct epoch *ep)
{
	for (int i = 0; i < EPOCH_MAX_SLOTS; i++) {
		uint32_t expect = 0;
		/* acq_rel: claims the slot exclusively */
		if (atomic_compare_exchange_strong_explicit(&ep->slots[i].in_use, &expect, 1,
							    memory_order_acq_rel,
							    memory_order_relaxed)) {
			uint32_t hwm = atomic_load_explicit(&ep->slots_hwm, memory_order_relaxed);
			/* seq_cst: a scan that follows this registration in the total
			 * order covers the new slot */
			while (hwm < (uint32_t)i + 1 &&
			       !atomic_compare_exchange_weak_explicit(&ep->slots_hwm, &hwm, i + 1,
								      memory_order_seq_cst,
								      memory_order_relaxed))
				;
			return i;
		}
	}
	return -1;
}

void epoch_unregister(struct epoch *ep, int id)
{
	if (id < 0)
		return;
	/* release: the slot's last use happens before another thread claims it */
	atomic_store_explicit(&ep->slots[id].local, 0, memory_order_release);
	atomic_store_explicit(&ep->slots[id].in_use, 0, memory_order_release);
}

void epoch_protect(struct epoch *ep, int id)
{
	struct epoch_slot *slot = &ep->slots[id];
	/* seq_cst load: see the file comment for the re-check argument */
	uint64_t e = atomic_load(&ep->current);
	for (;;) {
		/* seq_cst exchange, not a relaxed store and a fence: an RMW continues the
		 * release sequence of our last unprotect, so a drainer that reads this
		 * value still synchronises with everything we did before (C++20 rules,
		 * and ThreadSanitizer, which ignores fences, need the RMW); it is also the
		 * full barrier that orders publication before any read of shared state */
		atomic_exchange_explicit(&slot->local, e, memory_order_seq_cst);
		uint64_t again = atomic_load(&ep->current);
		if (again == e)
			break;
		e = again;
	}
	/* relaxed: a hint; a stale zero only delays draining to the next call */
	if (atomic_load_explicit(&ep->pending, memory_order_relaxed))
		epoch_drain(ep);
}

void epoch_unprotect(struct epoch *ep, int id)
{
	/* release: every read of shared memory in the protected section happens
	 * before a bumper can see this slot as idle */
	atomic_store_explicit(&ep->slots[id].local, 0, memory_order_release);
}

void epoch_refresh(struct epoch *ep, int id)
{
	epoch_unprotect(ep, id);
	epoch_protect(ep, id);
}

uint64_t epoch_safe(struct epoch *ep)
{
	/* seq_cst: the scan must follow the bump's increment in the single total order */
	uint64_t oldest = atomic_load(&ep->current);
	uint32_t hwm = atomic_load(&ep->slots_hwm);
	for (uint32_t i = 0; i < hwm; i++) {
		/* seq_cst: pairs with the fence in epoch_protect */
		uint64_t l = atomic_load(&ep->slots[i].local);
		if (l != 0 && l < oldest)
			oldest = l;
	}
	uint64_t safe = oldest - 1;
	uint64_t cur = atomic_load_explicit(&ep->safe, memory_order_relaxed);
	/* relaxed CAS: ep->safe is only a cache of a monotonic value */
	while (cur < safe && !atomic_compare_exchange_weak_explicit(
				     &ep->safe, &cur, safe, memory_order_relaxed,
				     memory_order_relaxed))
		;
	return safe;
}

int epoch_drain(struct epoch *ep)
{
	int ran = 0;
	uint64_t safe = epoch_safe(ep);
	for (int i = 0; i < EPOCH_MAX_ACTIONS; i++) {
		struct epoch_action *a = &ep->actions[i];
		/* acquire: pairs with the release that published fn/arg */
		uint64_t st = atomic_load_explicit(&a->state, memory_order_acquire);
		if (st >= ACTION_RUNNING || st > safe)
			continue;
		/* acquire: exactly one drainer claims the action and sees fn/arg */
		if (!atomic_compare_exchange_strong_explicit(&a->state, &st, ACTION_RUNNING,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		epoch_action_fn fn = a->fn;
		void *arg = a->arg;
		/* release: fn/arg were read before the slot can be refilled */
		atomic_store_explicit(&a->state, ACTION_FREE, memory_order_release);
		if (fn)
			fn(arg);
		/* release: the action's effects happen before pending drops */
		atomic_fetch_sub_explicit(&ep->pending, 1, memory_order_release);
		ran++;
	}
	return ran;
}

void epoch_bump(struct epoch *ep, epoch_action_fn fn, void *arg)
{
	/* seq_cst: stores made before the bump (a moved boundary) are ordered before
	 * the new epoch, and before the scan of any drainer */
	uint64_t prior = atomic_fetch_add(&ep->current, 1);
	if (!fn) {
		return;
	}
	for (;;) {
		for (int i = 0; i < EPOCH_MAX_ACTIONS; i++) {
			struct epoch_action *a = &ep->actions[i];
			uint64_t st = ACTION_FREE;
			/* acquire: claim the free slot */
			if (!atomic_compare_exchange_strong_explicit(&a->state, &st, ACTION_FILLING,
								     memory_order_acquire,
								     memory_order_relaxed))
				continue;
			a->fn = fn;
			a->arg = arg;
			/* relaxed is enough for the count: drainers re-check the state */
			atomic_fetch_add_explicit(&ep->pending, 1, memory_order_relaxed);
			/* release: fn/arg are visible to the drainer that sees the epoch */
			atomic_store_explicit(&a->state, prior, memory_order_release);
			epoch_drain(ep);
			return;
		}
		/* every action slot is taken: help drain, then retry */
		if (epoch_drain(ep) == 0)
			sched_yield();
	}
}

void epoch_wait_safe(struct epoch *ep)
{
	/* seq_cst: read the epoch after whatever the caller loaded before the call */
	uint64_t e = atomic_load(&ep->current);
	epoch_bump(ep, NULL, NULL);
	while (epoch_safe(ep) < e) {
		epoch_drain(ep);
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
}
