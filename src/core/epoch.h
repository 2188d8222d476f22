/*
 * epoch.h - epoch protection: when may shared memory be reused?
 *
 * Design notes
 * ------------
 * A global epoch counter E only grows. A thread that is about to touch shared
 * structures (log pages in memory, index entries) "protects" itself: it publishes
 * the epoch it entered in its slot. When it is done it unprotects (slot = 0).
 * Whoever changes a shared boundary (moves the log's read-only or head address)
 * then "bumps" the epoch with an action: the action runs once every thread that
 * could have seen the old boundary has left the epoch in which it was changed.
 *
 * Invariants
 *  1. A protected thread's slot holds an epoch <= E, published with a full fence
 *     before the thread reads any shared boundary (epoch_protect).
 *  2. An action registered by epoch_bump() when E went from e to e+1 runs only when
 *     every slot is 0 or > e (epoch_drain, via epoch_safe()), and runs exactly once.
 *  3. A thread never waits for an epoch to become safe while it is protected
 *     (it would wait for itself): waiting code unprotects first.
 *
 * States of an action slot: FREE -> FILLING (epoch_bump claims it) -> READY(e)
 * (epoch_bump publishes it) -> RUNNING (epoch_drain claims it when e is safe) ->
 * FREE (epoch_drain, before calling the action).
 *
 * Threads: every call is thread-safe. A slot id belongs to one thread at a time.
 */
#ifndef EMBER_CORE_EPOCH_H
#define EMBER_CORE_EPOCH_H

#include <stdatomic.h>
#include <stdint.h>

#define EPOCH_MAX_SLOTS 320
#define EPOCH_MAX_ACTIONS 64

typedef void (*epoch_action_fn)(void *arg);

struct epoch_slot {
	_Atomic uint64_t local; /* epoch entered, 0 when not protected */
	_Atomic uint32_t in_use;
	char pad[64 - sizeof(uint64_t) - sizeof(uint32_t)];
} __attribute__((aligned(64)));

struct epoch_action {
	_Atomic uint64_t state; /* FREE, FILLING, RUNNING, or the trigger epoch */
	epoch_action_fn fn;
	void *arg;
};

struct epoch {
	_Atomic uint64_t current __attribute__((aligned(64)));
	_Atomic uint64_t safe __attribute__((aligned(64)));
	_Atomic uint32_t pending;   /* actions registered and not yet run */
	_Atomic uint32_t slots_hwm; /* slots below this index may be in use */
	struct epoch_action actions[EPOCH_MAX_ACTIONS];
	struct epoch_slot slots[EPOCH_MAX_SLOTS];
};

void epoch_init(struct epoch *ep);
/* Runs every pending action (waiting for them to become safe). No slot may be
 * protected. */
void epoch_finish(struct epoch *ep);

/* Claim a slot; returns its id, or -1 when all are taken. */
int epoch_register(struct epoch *ep);
void epoch_unregister(struct epoch *ep, int id);

void epoch_protect(struct epoch *ep, int id);
void epoch_unprotect(struct epoch *ep, int id);
/* Leave and re-enter the epoch (lets boundaries move), running ready actions. */
void epoch_refresh(struct epoch *ep, int id);

/* Advance the epoch; fn(arg) runs once the epoch before the bump is safe. fn may be
 * NULL (just advance). May run fn right away on this thread. */
void epoch_bump(struct epoch *ep, epoch_action_fn fn, void *arg);

/* Largest epoch no protected thread is in or below; caches it in ep->safe. */
uint64_t epoch_safe(struct epoch *ep);
/* Run the actions whose epoch is safe. Returns how many ran. */
int epoch_drain(struct epoch *ep);

/* Wait until every thread has left the epoch current at the call, draining
 * actions meanwhile (the caller must not be protected): whatever a thread did
 * inside an epoch before the call is complete when it returns. */
void epoch_wait_safe(struct epoch *ep);

static inline int epoch_is_protected(struct epoch *ep, int id)
{
	/* relaxed: the owner reads its own slot */
	return atomic_load_explicit(&ep->slots[id].local, memory_order_relaxed) != 0;
}

#endif
