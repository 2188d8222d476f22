/*
 * test_cold_index.c - the cold index alone: lookups of absent keys, chunk CAS
 * conflicts between threads (no lost update: every entry ends at the number of
 * increments made on it), and chunks that live mostly on disk (a chunk log of 512
 * KiB for 16384 chunks), so updates go through the copy-on-write path that reads a
 * chunk back from disk.
 */
#include <ember.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "store/store_int.h"
#include "test_util.h"

#define THREADS 4
#define HASHES 512

static ember_db *db;
static uint64_t hashes[HASHES];
static _Atomic long incs[HASHES];
static _Atomic long conflicts;

static void *incrementer(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	tu_rng rng;
	tu_rng_stream(&rng, id);
	ember_session *s;
	CHECK_OK(session_create(db, 1, &s));
	long n = (long)tu_scaled(6000);
	for (long i = 0; i < n; i++) {
		/* a few hot hashes make conflicts likely */
		size_t h = tu_rng_chance(&rng, 1, 2) ? tu_rng_below(&rng, 8) : tu_rng_below(&rng, HASHES);
		epoch_protect(db->ep, s->slot);
		for (;;) {
			uint64_t cur, actual;
			CHECK_OK(cold_entry_get(s, hashes[h], &cur));
			int rc = cold_chunk_cas(s, hashes[h], cur, cur + 8, &actual);
			CHECK(rc == 0 || rc == 1, "cas rc %d (%s)", rc, ember_strerror(rc));
			if (rc == 0)
				break;
			CHECK(actual != cur, "a conflict reports the current value");
			atomic_fetch_add(&conflicts, 1);
		}
		epoch_unprotect(db->ep, s->slot);
		atomic_fetch_add(&incs[h], 1);
	}
	session_destroy(s);
	return NULL;
}

int main(int argc, char **argv)
{
	tu_init("test_cold_index", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("cidx", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	ember_options_default(&o);
	o.log_memory = 1 << 20;
	o.page_size = 64 << 10;
	o.cold_index_chunks = 1 << 14;
	o.cold_chunk_bytes = 256;
	o.flags = EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &o, &db));
	struct cold_index *ci = &db->cidx;
	CHECK(ci->entries == 32 && ci->nchunks == (1u << 14), "geometry");
	CHECK(db->chunks->mem_size == (512u << 10), "a small chunk log: %llu",
	      (unsigned long long)db->chunks->mem_size);

	/* distinct (chunk, slot) pairs spread over every chunk */
	tu_rng *rng = tu_rng_global();
	for (size_t i = 0; i < HASHES; i++) {
		for (;;) {
			uint64_t h = tu_rng_next(rng);
			int dup = 0;
			for (size_t j = 0; j < i; j++)
				dup |= ci_chunk_of(ci, hashes[j]) == ci_chunk_of(ci, h) &&
				       ci_slot_of(ci, hashes[j]) == ci_slot_of(ci, h);
			if (!dup) {
				hashes[i] = h;
				break;
			}
		}
	}
	ember_session *s;
	CHECK_OK(session_create(db, 1, &s));
	epoch_protect(db->ep, s->slot);
	for (size_t i = 0; i < HASHES; i++) {
		uint64_t e = 1;
		CHECK_OK(cold_entry_get(s, hashes[i], &e));
		CHECK(e == 0, "absent: entry %llu", (unsigned long long)e);
	}
	uint64_t actual = 0;
	CHECK(cold_chunk_cas(s, hashes[0], 5, 6, &actual) == 1 && actual == 0, "mismatch on empty");
	/* a stale expected value loses, and reports the winner's */
	CHECK_OK(cold_chunk_cas(s, hashes[1], 0, 8, &actual));
	CHECK(cold_chunk_cas(s, hashes[1], 0, 16, &actual) == 1 && actual == 8, "stale CAS");
	CHECK_OK(cold_chunk_cas(s, hashes[1], 8, 0, &actual));
	epoch_unprotect(db->ep, s->slot);

	/* fill every chunk so the chunk log (512 KiB) spills: ~4.8 MiB of chunks */
	epoch_protect(db->ep, s->slot);
	for (uint64_t c = 0; c < ci->nchunks; c++) {
		uint64_t h = (c << 20) | (31u << 8); /* slot 31 of chunk c (counters snapshot below) */
		uint64_t cur;
		CHECK_OK(cold_entry_get(s, h, &cur));
		int rc = cold_chunk_cas(s, h, cur, cur + 8, &actual);
		CHECK(rc == 0, "fill chunk %llu: rc %d", (unsigned long long)c, rc);

	}
	epoch_unprotect(db->ep, s->slot);
	CHECK(hlog_load(&db->chunks->head) > 0, "chunks went to disk");
	/* the filler entries must not disturb the counters: take their values now */
	uint64_t base[HASHES];
	epoch_protect(db->ep, s->slot);
	for (size_t i = 0; i < HASHES; i++)
		CHECK_OK(cold_entry_get(s, hashes[i], &base[i]));
	epoch_unprotect(db->ep, s->slot);

	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, incrementer, (void *)(uintptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	epoch_protect(db->ep, s->slot);
	for (size_t i = 0; i < HASHES; i++) {
		uint64_t e;
		CHECK_OK(cold_entry_get(s, hashes[i], &e));
		CHECK(e == base[i] + 8 * (uint64_t)incs[i], "hash %zu: %llu, want %llu (lost update)", i,
		      (unsigned long long)e, (unsigned long long)(base[i] + 8 * (uint64_t)incs[i]));
	}
	epoch_unprotect(db->ep, s->slot);
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	printf("conflicts %ld, chunk log on disk %llu KiB\n", (long)conflicts,
	       (unsigned long long)(st.chunk_log_bytes_disk >> 10));
	session_destroy(s);
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
