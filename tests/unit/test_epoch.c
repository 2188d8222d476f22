/*
 * test_epoch.c - epoch protection: actions wait for protected threads, run once,
 * and memory retired through an action is never seen by a protected reader.
 */
#include <ember.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/epoch.h"
#include "test_util.h"

static struct epoch ep;

static void count_action(void *arg) { atomic_fetch_add((_Atomic int *)arg, 1); }

static void test_single(void)
{
	epoch_init(&ep);
	_Atomic int ran = 0;
	int a = epoch_register(&ep);
	int b = epoch_register(&ep);
	CHECK(a >= 0 && b >= 0 && a != b, "register");
	epoch_protect(&ep, a);
	epoch_bump(&ep, count_action, &ran);
	epoch_drain(&ep);
	CHECK(ran == 0, "action ran while a thread was still in the old epoch");
	epoch_protect(&ep, b); /* b entered after the bump: does not hold it back */
	epoch_drain(&ep);
	CHECK(ran == 0, "still held by a");
	epoch_unprotect(&ep, a);
	epoch_drain(&ep);
	CHECK(ran == 1, "action must run once a left (ran=%d)", ran);
	epoch_drain(&ep);
	CHECK(ran == 1, "action ran twice");
	epoch_unprotect(&ep, b);
	/* many actions at once: more than the table holds */
	for (int i = 0; i < 3 * EPOCH_MAX_ACTIONS; i++)
		epoch_bump(&ep, count_action, &ran);
	epoch_finish(&ep);
	CHECK(ran == 1 + 3 * EPOCH_MAX_ACTIONS, "all actions ran once (ran=%d)", ran);
	epoch_unregister(&ep, a);
	epoch_unregister(&ep, b);
}

/* Readers dereference a shared object under protection; a writer swaps it and
 * retires the old one through an epoch action that poisons and frees it. */
struct obj {
	_Atomic uint64_t magic;
};
#define LIVE 0x600dULL
#define DEAD 0xdeadULL

static _Atomic(struct obj *) shared;
static _Atomic int stop;
static _Atomic long retired, freed;

static void retire(void *arg)
{
	struct obj *o = arg;
	atomic_store(&o->magic, DEAD);
	free(o);
	atomic_fetch_add(&freed, 1);
}

static void *reader(void *arg)
{
	(void)arg;
	int id = epoch_register(&ep);
	CHECK(id >= 0, "register");
	long n = 0;
	while (!atomic_load(&stop)) {
		epoch_protect(&ep, id);
		struct obj *o = atomic_load(&shared);
		for (int i = 0; i < 8; i++)
			CHECK(atomic_load(&o->magic) == LIVE, "protected reader saw a retired object");
		epoch_unprotect(&ep, id);
		if (++n % 64 == 0)
			sched_yield();
	}
	epoch_unregister(&ep, id);
	return NULL;
}

static void test_stress(int threads, long swaps)
{
	epoch_init(&ep);
	struct obj *first = malloc(sizeof(*first));
	atomic_init(&first->magic, LIVE);
	atomic_store(&shared, first);
	pthread_t th[16];
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, reader, NULL);
	for (long i = 0; i < swaps; i++) {
		struct obj *o = malloc(sizeof(*o));
		atomic_init(&o->magic, LIVE);
		struct obj *old = atomic_exchange(&shared, o);
		atomic_fetch_add(&retired, 1);
		epoch_bump(&ep, retire, old);
		if (i % 16 == 0)
			epoch_drain(&ep);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	epoch_finish(&ep);
	CHECK(freed == retired, "every retired object freed once (%ld of %ld)", (long)freed,
	      (long)retired);
	free(atomic_load(&shared));
}

int main(int argc, char **argv)
{
	tu_init("test_epoch", argc, argv);
	test_single();
	test_stress(4, (long)tu_scaled(200000));
	printf("ok\n");
	return 0;
}
