/*
 * test_index.c - the hash index: find/insert, overflow buckets, and the tentative
 * insert protocol under concurrent inserters of the same tags.
 */
#include <ember.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/hash.h"
#include "index/hash_index.h"
#include "test_util.h"

static struct hash_index hi;

/* A hash with a chosen bucket and tag. */
static uint64_t mk(uint64_t bucket, uint32_t tag) { return ((uint64_t)tag << 50) | bucket; }

static void test_basic(void)
{
	CHECK_OK(hi_init(&hi, 3)); /* rounds to 4 buckets */
	CHECK(hi.nbuckets == 4, "power of two");
	uint64_t e;
	hi_slot *slot;
	CHECK(hi_find(&hi, mk(1, 5), &e) == NULL, "empty");
	CHECK(hi_insert(&hi, mk(1, 5), 4096, &slot, &e) == 0, "insert");
	CHECK(hi_entry_addr(e) == 4096, "address");
	uint64_t e2;
	CHECK(hi_find(&hi, mk(1, 5), &e2) == slot && e2 == e, "find after insert");
	CHECK(hi_find(&hi, mk(1, 6), &e2) == NULL, "other tag absent");
	CHECK(hi_find(&hi, mk(2, 5), &e2) == NULL, "other bucket absent");
	hi_slot *s2;
	CHECK(hi_insert(&hi, mk(1, 5), 8192, &s2, &e2) == 1 && s2 == slot && e2 == e,
	      "second insert finds the existing entry");
	/* 100 tags in one bucket: overflow buckets chain */
	for (uint32_t t = 100; t < 200; t++)
		CHECK(hi_insert(&hi, mk(3, t), 64 * t, &slot, &e) == 0, "insert %u", t);
	CHECK(hi_overflow_buckets(&hi) >= 100 / HI_SLOTS, "overflow used");
	for (uint32_t t = 100; t < 200; t++) {
		slot = hi_find(&hi, mk(3, t), &e);
		CHECK(slot && hi_entry_addr(e) == 64 * t, "find %u", t);
		uint64_t ne = hi_make_entry(t, 128 * t);
		CHECK(atomic_compare_exchange_strong(slot, &e, ne), "cas update");
	}
	for (uint32_t t = 100; t < 200; t++) {
		CHECK(hi_find(&hi, mk(3, t), &e) && hi_entry_addr(e) == 128 * t, "updated %u", t);
	}
	hi_destroy(&hi);
}

#define TAGS 600
static _Atomic int go;

static void *inserter(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	while (!atomic_load(&go))
		;
	for (uint32_t t = 0; t < TAGS; t++) {
		uint32_t tag = (uint32_t)((t * 7919 + id * 13) % TAGS);
		hi_slot *slot;
		uint64_t e;
		int rc = hi_insert(&hi, mk(tag % 3, tag), 64 * (id + 1), &slot, &e);
		CHECK(rc == 0 || rc == 1, "insert rc %d", rc);
		CHECK((e & HI_TAG_MASK) >> HI_TAG_SHIFT == tag, "right tag");
	}
	return NULL;
}

static void test_race(int threads, int rounds)
{
	for (int round = 0; round < rounds; round++) {
		CHECK_OK(hi_init(&hi, 4));
		atomic_store(&go, 0);
		pthread_t th[8];
		for (int i = 0; i < threads; i++)
			pthread_create(&th[i], NULL, inserter, (void *)(uintptr_t)i);
		atomic_store(&go, 1);
		for (int i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		/* exactly one non-tentative entry per tag */
		static int count[TAGS];
		for (int t = 0; t < TAGS; t++)
			count[t] = 0;
		for (uint64_t b = 0; b < hi.nbuckets; b++) {
			for (struct hi_bucket *k = &hi.table[b]; k;) {
				for (int i = 0; i < HI_SLOTS; i++) {
					uint64_t e = atomic_load(&k->entry[i]);
					if (!e)
						continue;
					CHECK(!(e & HI_TENTATIVE), "tentative entry left behind");
					count[(e & HI_TAG_MASK) >> HI_TAG_SHIFT]++;
				}
				uint64_t id = atomic_load(&k->overflow);
				k = id ? &atomic_load(&hi.chunks[(id - 1) >> HI_CHUNK_BITS])
						  [(id - 1) & ((1u << HI_CHUNK_BITS) - 1)]
				       : NULL;
			}
		}
		for (int t = 0; t < TAGS; t++)
			CHECK(count[t] == 1, "tag %d has %d entries", t, count[t]);
		hi_destroy(&hi);
	}
}

int main(int argc, char **argv)
{
	tu_init("test_index", argc, argv);
	test_basic();
	test_race(4, (int)tu_scaled(20));
	printf("ok\n");
	return 0;
}
