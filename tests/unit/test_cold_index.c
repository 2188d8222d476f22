/*
 * test_cold_index.c - the cold index alone: lookups of absent keys, chunk CAS
 * conflicts between threads (no lost update: every entry ends at the number of
 * increments made on it), and chunks that live mostly on disk (a chunk log of 512
 * KiB for 16384 chunks), so updates go through the copy-on-write path that reads a
 * chunk back from disk. And the chunk cache (cold_index.h, notes 5-8): exact
 * hits and misses, compact words (note 9: zeros, the widest span cached, wider
 * or unaligned copies not cached), and a seqlock stress in which threads fill and read a small
 * cache at once: every hit must return the words of the chunk copy it asked for,
 * never a torn mix of two fills.
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

/* ---- chunk cache ---------------------------------------------------------------- */

static struct cold_index cache_ci;
static _Atomic long cache_hits;

/* Word i of the copy at addr: a function of both, so a torn slot (one fill's
 * address, another's words, or words of two fills) shows. */
static uint64_t cache_word_of(uint64_t addr, uint32_t i)
{
	uint64_t w = EM_LOG_START + 8 * (((addr * 0x9E3779B97F4A7C15u) ^ ((uint64_t)i << 40)) & 0xFFFFFFF);
	if (cache_ci.tagged) /* a tag too, never 0 (cold_index.h note 10) */
		w |= (((addr * 31 + i) & 0xFFFF) | 1) << CI_TAG_SHIFT;
	return w;
}

static void cache_fill(struct cold_index *ci, uint64_t chunk, uint64_t addr)
{
	_Atomic uint64_t w[512];
	for (uint32_t i = 0; i < ci->entries; i++)
		atomic_init(&w[i], cache_word_of(addr, i));
	ci_cache_put(ci, chunk, addr, w);
}

static void *cache_hammer(void *arg)
{
	tu_rng rng;
	tu_rng_stream(&rng, 100 + (uint64_t)(uintptr_t)arg);
	long n = (long)tu_scaled(200000), hits = 0;
	uint64_t w[32];
	for (long i = 0; i < n; i++) {
		/* few chunks and few copies per chunk: slots are shared and rewritten */
		uint64_t chunk = tu_rng_below(&rng, 64);
		/* a copy's address names one chunk (log addresses are never reused) */
		uint64_t addr = EM_LOG_START + 8 * (chunk * 4 + tu_rng_below(&rng, 4));
		if (tu_rng_chance(&rng, 1, 2)) {
			cache_fill(&cache_ci, chunk, addr);
		} else if (ci_cache_read(&cache_ci, chunk, addr, 0, 32, w)) {
			for (uint32_t k = 0; k < 32; k++)
				CHECK(w[k] == cache_word_of(addr, k), "torn or foreign word %u: %llx for %llx", k,
				      (unsigned long long)w[k], (unsigned long long)addr);
			hits++;
		}
	}
	atomic_fetch_add(&cache_hits, hits);
	return NULL;
}

static void cache_test(void)
{
	struct cold_index *ci = &cache_ci;
	CHECK_OK(ci_init(ci, 64, 256, 0, NULL));
	uint64_t slot = CI_SLOT_BYTES(256, 0), e = 0;
	CHECK(ci_cache_get(ci, 1, EM_LOG_START, &e) == 0, "no cache: a miss");
	cache_fill(ci, 0, EM_LOG_START); /* no cache: nothing to do */
	CHECK_OK(ci_cache_init(ci, slot - 1)); /* under one slot: stays off */
	CHECK(ci->cache == NULL && ci->cache_slots == 0, "a cache smaller than a slot is off");
	CHECK_OK(ci_cache_init(ci, slot * 37)); /* 37 slots: not a power of two */
	CHECK(ci->cache_slots == 37, "slots %llu", (unsigned long long)ci->cache_slots);
	uint64_t h = (UINT64_C(3) << 20) | (UINT64_C(7) << 8); /* chunk 3, entry 7 */
	CHECK(ci_cache_get(ci, h, 4096, &e) == 0, "empty cache: a miss");
	cache_fill(ci, 3, 4096);
	CHECK(ci_cache_get(ci, h, 4096, &e) == 1 && e == cache_word_of(4096, 7),
	      "a hit returns the entry of that copy");
	CHECK(ci_cache_get(ci, h, 4104, &e) == 0, "another copy of the chunk misses");
	CHECK(ci_cache_get(ci, h, 0, &e) == 0, "address 0 (an unwritten chunk) never hits");
	uint64_t other = (UINT64_C(40) << 20) | (UINT64_C(7) << 8); /* chunk 40: slot 3 too */
	CHECK(ci_cache_get(ci, other, 12288, &e) == 0, "a chunk sharing the slot misses");
	cache_fill(ci, 3, 8192); /* the chunk moved: its new copy replaces the old */
	CHECK(ci_cache_get(ci, h, 8192, &e) == 1 && e == cache_word_of(8192, 7), "the new copy hits");
	CHECK(ci_cache_get(ci, h, 4096, &e) == 0, "the old copy no longer hits");
	cache_fill(ci, 40, 12288); /* the other chunk of the slot takes it */
	CHECK(ci_cache_get(ci, h, 8192, &e) == 0, "a replaced copy misses");
	CHECK(ci_cache_read(ci, 40, 12288, 0, 0, NULL) == 1, "a presence check hits");
	ci_destroy(ci);

	/* compact words (note 9): zeros, the widest span cached, too wide or unaligned
	 * not cached */
	CHECK_OK(ci_init(ci, 64, 256, 0, NULL));
	CHECK_OK(ci_cache_init(ci, slot * 64));
	_Atomic uint64_t w[32];
	uint64_t got[32];
	uint64_t lo = (UINT64_C(1) << 40) + 8, wide = lo + (UINT64_C(1) << 35) - 16;
	for (uint32_t i = 0; i < 32; i++)
		atomic_init(&w[i], i % 3 == 0 ? 0 : i % 3 == 1 ? lo + 8 * (i - 1) : wide);
	ci_cache_put(ci, 5, 4096, w);
	CHECK(ci_cache_read(ci, 5, 4096, 0, 32, got) == 1, "a span under 2^35 - 8 is cached");
	for (uint32_t i = 0; i < 32; i++)
		CHECK(got[i] == atomic_load(&w[i]), "word %u decodes to %llx, was %llx", i,
		      (unsigned long long)got[i], (unsigned long long)atomic_load(&w[i]));
	atomic_store(&w[2], wide + 8); /* span 2^35 - 8 */
	ci_cache_put(ci, 6, 8192, w);
	CHECK(ci_cache_read(ci, 6, 8192, 0, 0, NULL) == 0, "too wide a span is not cached");
	atomic_store(&w[2], lo + 4); /* not a record address */
	ci_cache_put(ci, 7, 12288, w);
	CHECK(ci_cache_read(ci, 7, 12288, 0, 0, NULL) == 0, "an unaligned entry is not cached");
	for (uint32_t i = 0; i < 32; i++)
		atomic_store(&w[i], 0);
	ci_cache_put(ci, 8, 16384, w);
	CHECK(ci_cache_get(ci, (UINT64_C(8) << 20) | (UINT64_C(9) << 8), 16384, &e) == 1 && e == 0,
	      "an all-empty copy is cached and reads 0");
	ci_destroy(ci);

	/* at most one slot per chunk: a larger cache is cut to nchunks slots */
	CHECK_OK(ci_init(ci, 64, 256, 0, NULL));
	CHECK_OK(ci_cache_init(ci, slot * 1000));
	CHECK(ci->cache_slots == 64 && ci->cache_bytes == 64 * slot, "slots %llu",
	      (unsigned long long)ci->cache_slots);
	ci_destroy(ci);

	/* the stress: 4 threads, 64 chunks of 4 copies each folded onto 13 slots; untagged
	 * and tagged slots */
	for (int tagged = 0; tagged < 2; tagged++) {
		CHECK_OK(ci_init(ci, 64, 256, tagged, NULL));
		CHECK_OK(ci_cache_init(ci, CI_SLOT_BYTES(256, tagged) * 13));
		atomic_store(&cache_hits, 0);
		pthread_t th[THREADS];
		for (int i = 0; i < THREADS; i++)
			pthread_create(&th[i], NULL, cache_hammer, (void *)(uintptr_t)i);
		for (int i = 0; i < THREADS; i++)
			pthread_join(th[i], NULL);
		printf("chunk cache stress (%s): %ld hits, none torn\n", tagged ? "tagged" : "untagged",
		       (long)atomic_load(&cache_hits));
		CHECK(atomic_load(&cache_hits) > 0, "the stress found cached chunks");
		ci_destroy(ci);
	}
}

/* A hash of chunk 2 whose home entry is home and whose tag is not tag_not, from
 * salt on (ci_tag_of mixes every bit: search). */
static uint64_t hash_with(struct cold_index *ci, uint64_t tag_not, uint32_t home, uint64_t salt)
{
	for (uint64_t x = salt;; x++) {
		uint64_t h = (UINT64_C(2) << 20) | ((uint64_t)home << 8) | (x << 30);
		if (ci_chunk_of(ci, h) == 2 && ci_slot_of(ci, h) == home && ci_tag_of(h) != tag_not)
			return h;
	}
}

/* Tagged entries (cold_index.h note 10): ci_pick's rule on plain words, the same
 * rule through the chunk cache, and what the cache refuses. */
static void tagged_test(void)
{
	struct cold_index *ci = &cache_ci;
	CHECK_OK(ci_init(ci, 64, 256, 1, NULL));
	CHECK_OK(ci_cache_init(ci, CI_SLOT_BYTES(256, 1) * 64));
	CHECK(ci->cache_slots == 64, "a tagged slot is 24 + 3/4 of the chunk");
	uint64_t h = hash_with(ci, 0, 9, 1), t = ci_tag_of(h), other = hash_with(ci, t, 9, 777);
	CHECK(t != 0 && t < (UINT64_C(1) << 16) && ci_tag_of(other) != t, "tags");
	_Atomic uint64_t w[32];
	for (uint32_t i = 0; i < 32; i++)
		atomic_init(&w[i], 0);
	uint64_t word = 1;
	CHECK(ci_pick(ci, w, h, &word) == 0 && word == 0, "an empty chunk: the first entry");
	CHECK(ci_word_with(ci, 0, h, 4096) == (t << CI_TAG_SHIFT | 4096),
	      "an empty entry takes the key's tag");
	atomic_store(&w[0], ci_tag_of(other) << CI_TAG_SHIFT | 4096);
	atomic_store(&w[1], ci_tag_of(other) << CI_TAG_SHIFT | 0); /* a tag, no chain yet */
	CHECK(ci_pick(ci, w, h, &word) == 2 && word == 0, "not an entry of another tag");
	CHECK(ci_pick(ci, w, other, &word) == 0 && ci_addr(ci, word) == 4096,
	      "the first entry of a tag");
	CHECK(ci_word_with(ci, word, h, 8192) == (ci_tag_of(other) << CI_TAG_SHIFT | 8192),
	      "an update keeps the entry's tag");
	atomic_store(&w[7], t << CI_TAG_SHIFT | 8192);
	CHECK(ci_pick(ci, w, h, &word) == 7 && ci_addr(ci, word) == 8192,
	      "the tag's entry, empty ones before it notwithstanding");
	ci_cache_put(ci, 2, 65536, w);
	uint64_t e = 0;
	CHECK(ci_cache_get(ci, h, 65536, &e) == 1 && e == 8192, "cached: the tag's entry (%llu)",
	      (unsigned long long)e);
	CHECK(ci_cache_get(ci, hash_with(ci, t, 3, 99), 65536, &e) == 1 && e == 0,
	      "cached: a third tag picks the first empty entry");
	uint64_t got[32];
	CHECK(ci_cache_read(ci, 2, 65536, 0, 32, got) == 1, "read whole");
	for (uint32_t i = 0; i < 32; i++)
		CHECK(got[i] == atomic_load(&w[i]), "word %u: %llx, was %llx", i,
		      (unsigned long long)got[i], (unsigned long long)atomic_load(&w[i]));
	/* full, the key's tag absent: the home entry (9) */
	for (uint32_t i = 0; i < 32; i++)
		if (i != 7)
			atomic_store(&w[i], (UINT64_C(50) + i) << CI_TAG_SHIFT | (16384 + 8 * i));
	atomic_store(&w[7], (UINT64_C(90)) << CI_TAG_SHIFT | 8192);
	uint64_t h2 = 0;
	for (uint64_t salt = 4242; !h2 || (ci_tag_of(h2) >= 50 && ci_tag_of(h2) <= 90); salt++)
		h2 = hash_with(ci, 0, 9, salt); /* a tag none of the 32 entries has */
	CHECK(ci_pick(ci, w, h2, &word) == 9 && ci_addr(ci, word) == 16384 + 72,
	      "a full chunk without the tag: the home entry");
	ci_cache_put(ci, 2, 131072, w);
	CHECK(ci_cache_get(ci, h2, 131072, &e) == 1 && e == 16384 + 72, "cached: the home entry");
	/* an address without a tag is damage: picked like an empty entry, never cached */
	atomic_store(&w[3], 4096);
	CHECK(ci_pick(ci, w, h2, &word) == 3 && word == 4096, "a tagless word is picked as it is");
	ci_cache_put(ci, 2, 196608, w);
	CHECK(ci_cache_read(ci, 2, 196608, 0, 0, NULL) == 0, "a tagless word is not cached");
	ci_destroy(ci);
}

int main(int argc, char **argv)
{
	tu_init("test_cold_index", argc, argv);
	cache_test();
	tagged_test();
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
