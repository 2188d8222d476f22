/*
 * test_ckpt_window.c - the replay start of a checkpoint is read before it waits
 * for the writers already in flight (checkpoint.c, step 2), so a write whose
 * record was allocated during that wait and linked after the index copy passed its
 * bucket is replayed (step 5: recovery gives the index of the log [begin, E)).
 *
 * The window is made by hand, with the store's internals (a writer's steps of
 * ops.c, blind_write, taken one at a time):
 *   1. key K holds v1; a second session's ember_rmw on key Q blocks inside its
 *      callback, protected: the checkpoint's epoch_wait_safe must wait for it;
 *   2. ember_checkpoint starts on another thread; once the epoch moves (its
 *      epoch_wait_safe began, so R was read), writer A protects, allocates K's v2
 *      at the hot tail and fills it, and does not link it yet;
 *   3. the rmw is let go: the wait ends (A entered after it began), the index is
 *      copied with K's entry still naming v1 (hot.index appears);
 *   4. A links v2 and leaves the epoch; the checkpoint folds and completes.
 * The store is closed without a final checkpoint and reopened: K must read v2 (its
 * record is in [R, E)); a replay that started after the wait would give v1.
 */
#include <ember.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store/store_int.h"
#include "test_util.h"

static char dir[512];
static ember_db *db;
static atomic_int in_callback, let_go;

static void nap(void)
{
	struct timespec ts = {0, 200000};
	nanosleep(&ts, NULL);
}

static int blocking_rmw(void *arg, const void *old, size_t old_len, void *out, size_t cap,
			size_t *out_len)
{
	(void)arg;
	(void)old;
	(void)old_len;
	*out_len = 8;
	if (cap < 8)
		return EMBER_ERANGE;
	memset(out, 7, 8);
	atomic_store(&in_callback, 1);
	double t0 = tu_now();
	while (!atomic_load(&let_go)) {
		CHECK(tu_now() - t0 < 20, "the rmw was never let go");
		nap();
	}
	return 0;
}

static void *rmw_main(void *arg)
{
	(void)arg;
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	uint64_t q = 2;
	CHECK_OK(ember_rmw(s, &q, sizeof(q), blocking_rmw, NULL));
	CHECK_OK(ember_session_close(s));
	return NULL;
}

static void *ckpt_main(void *arg)
{
	uint64_t *id = arg;
	CHECK_OK(ember_checkpoint(db, id));
	return NULL;
}

static void opts(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->log_memory = 1u << 20;
	o->page_size = 64u << 10;
	o->index_buckets = 1u << 10;
	o->flags = flags | EMBER_OPEN_NO_CLOSE_CHECKPOINT;
}

int main(int argc, char **argv)
{
	tu_init("ckpt_window", argc, argv);
	CHECK(tu_tmpdir_make("ckpt-window", dir, sizeof(dir)) == 0, "mkdtemp");
	ember_options o;
	opts(&o, EMBER_OPEN_TRUNCATE);
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *a = NULL;
	CHECK_OK(ember_session_open(db, &a));
	uint64_t k = 1, q = 2, v1 = 0x1111, v2 = 0x2222;
	CHECK_OK(ember_put(a, &k, sizeof(k), &v1, sizeof(v1)));
	CHECK_OK(ember_put(a, &q, sizeof(q), &v1, sizeof(v1)));

	/* 1 */
	pthread_t rt, ct;
	CHECK(pthread_create(&rt, NULL, rmw_main, NULL) == 0, "pthread_create");
	double t0 = tu_now();
	while (!atomic_load(&in_callback)) {
		CHECK(tu_now() - t0 < 20, "the rmw callback never ran");
		nap();
	}
	/* 2 */
	uint64_t e0 = atomic_load(&db->ep->current), id = 0;
	CHECK(pthread_create(&ct, NULL, ckpt_main, &id) == 0, "pthread_create");
	t0 = tu_now();
	while (atomic_load(&db->ep->current) == e0) {
		CHECK(tu_now() - t0 < 20, "the checkpoint never began its wait");
		nap();
	}
	struct ember_db *d = db;
	uint64_t hash = em_hash(&k, sizeof(k));
	epoch_protect(d->ep, a->slot);
	uint64_t e = 0;
	hi_slot *slot = hi_find(&d->index, hash, &e);
	CHECK(slot && e, "key 1 has no index entry");
	uint32_t cap = rec_cap_for(sizeof(v2));
	uint64_t na = hlog_alloc(d->hot, rec_size(sizeof(k), cap));
	CHECK(na, "no room at the hot tail");
	rec_init(hlog_rec(d->hot, na), hot_chain(d, e), 0, &k, sizeof(k), &v2, sizeof(v2), cap);
	/* 3 */
	atomic_store(&let_go, 1);
	char idx[700];
	snprintf(idx, sizeof(idx), "%s/checkpoints/%016llx/hot.index", dir, 1ull);
	struct stat st;
	t0 = tu_now();
	while (stat(idx, &st) != 0 || st.st_size == 0) {
		CHECK(tu_now() - t0 < 20, "the checkpoint never wrote %s", idx);
		nap();
	}
	/* 4: as link_record does */
	uint64_t ne = hi_make_entry(em_hash_tag(hash), na);
	/* release: the record's contents are visible before the entry points to it */
	CHECK(atomic_compare_exchange_strong_explicit(slot, &e, ne, memory_order_release,
						      memory_order_relaxed),
	      "key 1's entry changed meanwhile");
	epoch_unprotect(d->ep, a->slot);
	CHECK(pthread_join(ct, NULL) == 0 && pthread_join(rt, NULL) == 0, "pthread_join");
	CHECK(id == 1, "checkpoint %llu, want 1", (unsigned long long)id);
	uint64_t got = 0;
	size_t len = 0;
	CHECK_OK(ember_get(a, &k, sizeof(k), &got, sizeof(got), &len));
	CHECK(got == v2, "before the crash: key 1 reads %llx", (unsigned long long)got);
	CHECK_OK(ember_session_close(a));
	CHECK_OK(ember_close(db)); /* no final checkpoint: a crash after checkpoint 1 */

	opts(&o, 0);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &a));
	CHECK_OK(ember_get(a, &k, sizeof(k), &got, sizeof(got), &len));
	CHECK(len == sizeof(got) && got == v2,
	      "after recovery key 1 reads %llx, want %llx: its record, allocated during the "
	      "checkpoint's wait and linked after the index copy, was not replayed",
	      (unsigned long long)got, (unsigned long long)v2);
	CHECK_OK(ember_session_close(a));
	CHECK_OK(ember_close(db));
	CHECK(tu_tmpdir_remove(dir) == 0, "rmdir");
	printf("ckpt_window: OK\n");
	return 0;
}
