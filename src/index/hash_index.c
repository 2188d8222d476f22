/*
 * hash_index.c - the hash index (design notes in hash_index.h).
 */
#include "index/hash_index.h"

#include <ember.h>
#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"
#include "core/cpu.h"
#include "core/hash.h"

#define CHUNK_BUCKETS (UINT64_C(1) << HI_CHUNK_BITS)

int hi_init(struct hash_index *hi, uint64_t nbuckets)
{
	memset(hi, 0, sizeof(*hi));
	uint64_t n = 1;
	while (n < nbuckets)
		n <<= 1;
	hi->nbuckets = n;
	hi->mask = n - 1;
	hi->table_bytes = n * sizeof(struct hi_bucket);
	/* mmap: zeroed pages, touched only as buckets get used */
	void *t = mmap(NULL, hi->table_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (t == MAP_FAILED)
		return EMBER_ENOMEM;
	/* huge pages: a random bucket access should not also miss the TLB */
	madvise(t, hi->table_bytes, MADV_HUGEPAGE);
	hi->table = t;
	hi->chunks = em_zalloc(sizeof(*hi->chunks) * HI_MAX_CHUNKS);
	if (!hi->chunks) {
		munmap(t, hi->table_bytes);
		hi->table = NULL;
		return EMBER_ENOMEM;
	}
	return 0;
}

void hi_destroy(struct hash_index *hi)
{
	if (hi->chunks) {
		for (uint64_t c = 0; c < HI_MAX_CHUNKS; c++) {
			struct hi_bucket *b = atomic_load_explicit(&hi->chunks[c], memory_order_relaxed);
			if (b)
				munmap(b, CHUNK_BUCKETS * sizeof(struct hi_bucket));
		}
		em_free(hi->chunks, sizeof(*hi->chunks) * HI_MAX_CHUNKS);
	}
	if (hi->table)
		munmap(hi->table, hi->table_bytes);
	memset(hi, 0, sizeof(*hi));
}

static struct hi_bucket *overflow_bucket(struct hash_index *hi, uint64_t id)
{
	uint64_t i = id - 1;
	/* acquire: the chunk's zeroed memory is visible before we use it */
	struct hi_bucket *chunk =
		atomic_load_explicit(&hi->chunks[i >> HI_CHUNK_BITS], memory_order_acquire);
	return &chunk[i & (CHUNK_BUCKETS - 1)];
}

static struct hi_bucket *next_bucket(struct hash_index *hi, struct hi_bucket *b)
{
	/* acquire: pairs with the release CAS that linked the bucket */
	uint64_t id = atomic_load_explicit(&b->overflow, memory_order_acquire);
	return id ? overflow_bucket(hi, id) : NULL;
}

/* Allocate a fresh overflow bucket; returns its id or 0. */
struct hi_bucket *hi_overflow_next(struct hash_index *hi, struct hi_bucket *b)
{
	return next_bucket(hi, b);
}

static uint64_t overflow_alloc(struct hash_index *hi)
{
	/* relaxed: ids only need to be unique */
	uint64_t i = atomic_fetch_add_explicit(&hi->overflow_used, 1, memory_order_relaxed);
	uint64_t c = i >> HI_CHUNK_BITS;
	if (c >= HI_MAX_CHUNKS)
		return 0;
	/* acquire: see a chunk another thread installed */
	struct hi_bucket *chunk = atomic_load_explicit(&hi->chunks[c], memory_order_acquire);
	if (!chunk) {
		void *m = mmap(NULL, CHUNK_BUCKETS * sizeof(struct hi_bucket), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return 0;
		struct hi_bucket *expect = NULL;
		/* acq_rel: publish our chunk, or see the winner's */
		if (!atomic_compare_exchange_strong_explicit(&hi->chunks[c], &expect, m,
							     memory_order_acq_rel,
							     memory_order_acquire))
			munmap(m, CHUNK_BUCKETS * sizeof(struct hi_bucket));
	}
	return i + 1;
}

hi_slot *hi_find(struct hash_index *hi, uint64_t hash, uint64_t *entry)
{
	uint64_t want = (uint64_t)em_hash_tag(hash) << HI_TAG_SHIFT;
	for (struct hi_bucket *b = hi_home(hi, hash); b; b = next_bucket(hi, b)) {
		for (int i = 0; i < HI_SLOTS; i++) {
			/* acquire: the record an entry points to is fully written */
			uint64_t e = atomic_load_explicit(&b->entry[i], memory_order_acquire);
			if (e && (e & (HI_TAG_MASK | HI_TENTATIVE)) == want) {
				*entry = e;
				return &b->entry[i];
			}
		}
	}
	return NULL;
}

/* Is there an entry for tag other than mine (tentative ones included)? */
static int other_with_tag(struct hash_index *hi, uint64_t hash, uint64_t want, hi_slot *mine,
			  hi_slot **found, uint64_t *found_entry)
{
	for (struct hi_bucket *b = hi_home(hi, hash); b; b = next_bucket(hi, b)) {
		for (int i = 0; i < HI_SLOTS; i++) {
			if (&b->entry[i] == mine)
				continue;
			/* seq_cst: with the claiming CAS, two racing inserters see each other */
			uint64_t e = atomic_load(&b->entry[i]);
			if (e && (e & HI_TAG_MASK) == want) {
				*found = &b->entry[i];
				*found_entry = e;
				return 1;
			}
		}
	}
	return 0;
}

int hi_insert(struct hash_index *hi, uint64_t hash, uint64_t addr, hi_slot **slot,
	      uint64_t *entry)
{
	return hi_insert_flags(hi, hash, addr, 0, slot, entry);
}

int hi_insert_flags(struct hash_index *hi, uint64_t hash, uint64_t addr, uint64_t flags,
		    hi_slot **slot, uint64_t *entry)
{
	uint64_t want = (uint64_t)em_hash_tag(hash) << HI_TAG_SHIFT;
	uint64_t final = want | (addr & EM_ADDR_MASK) | (flags & HI_READCACHE);
	for (;;) {
		hi_slot *free_slot = NULL;
		struct hi_bucket *last = NULL;
		for (struct hi_bucket *b = hi_home(hi, hash); b; b = next_bucket(hi, b)) {
			last = b;
			for (int i = 0; i < HI_SLOTS; i++) {
				/* acquire: as in hi_find */
				uint64_t e = atomic_load_explicit(&b->entry[i], memory_order_acquire);
				if (!e) {
					if (!free_slot)
						free_slot = &b->entry[i];
				} else if ((e & (HI_TAG_MASK | HI_TENTATIVE)) == want) {
					*slot = &b->entry[i];
					*entry = e;
					return 1;
				}
			}
		}
		if (!free_slot) {
			uint64_t id = overflow_alloc(hi);
			if (!id)
				return EMBER_ENOMEM;
			uint64_t none = 0;
			/* release: the new bucket's zeroed state is visible to followers;
			 * a lost race wastes one bucket, which is harmless */
			atomic_compare_exchange_strong_explicit(&last->overflow, &none, id,
								memory_order_acq_rel,
								memory_order_relaxed);
			continue;
		}
		uint64_t zero = 0;
		/* acq_rel: claim the slot; later re-scan must not move before it */
		if (!atomic_compare_exchange_strong_explicit(free_slot, &zero, final | HI_TENTATIVE,
							     memory_order_seq_cst,
							     memory_order_relaxed))
			continue;
		hi_slot *other;
		uint64_t other_e;
		if (other_with_tag(hi, hash, want, free_slot, &other, &other_e)) {
			/* release: give the slot back */
			atomic_store_explicit(free_slot, 0, memory_order_release);
			if (!(other_e & HI_TENTATIVE)) {
				*slot = other;
				*entry = other_e;
				return 1;
			}
			cpu_relax();
			continue;
		}
		/* release: the record at addr is visible before the entry is */
		atomic_store_explicit(free_slot, final, memory_order_release);
		*slot = free_slot;
		*entry = final;
		return 0;
	}
}

uint64_t hi_overflow_buckets(struct hash_index *hi)
{
	/* relaxed: a statistic */
	return atomic_load_explicit(&hi->overflow_used, memory_order_relaxed);
}
