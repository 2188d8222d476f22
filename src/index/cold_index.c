/*
 * cold_index.c - the cold index's table (design notes in cold_index.h; updates
 * live in store/cold.c, which has the sessions and their I/O).
 */
#include "index/cold_index.h"

#include <ember.h>
#include <string.h>
#include <sys/mman.h>

int ci_init(struct cold_index *ci, uint64_t nchunks, uint32_t chunk_bytes, int tagged,
	    struct hlog *log)
{
	memset(ci, 0, sizeof(*ci));
	if (!nchunks || (nchunks & (nchunks - 1)) || chunk_bytes < 64 || chunk_bytes > 4096 ||
	    (chunk_bytes & (chunk_bytes - 1)))
		return EMBER_EINVAL;
	ci->nchunks = nchunks;
	ci->chunk_mask = nchunks - 1;
	ci->chunk_bytes = chunk_bytes;
	ci->entries = chunk_bytes / 8;
	ci->tagged = tagged != 0;
	ci->table_bytes = nchunks * sizeof(uint64_t);
	void *t = mmap(NULL, ci->table_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (t == MAP_FAILED)
		return EMBER_ENOMEM;
	ci->table = t;
	ci->log = log;
	return 0;
}

void ci_destroy(struct cold_index *ci)
{
	if (ci->table)
		munmap((void *)ci->table, ci->table_bytes);
	ci->table = NULL;
	if (ci->cache)
		munmap(ci->cache, ci->cache_bytes);
	ci->cache = NULL;
	ci->cache_slots = 0;
}

int ci_cache_init(struct cold_index *ci, uint64_t bytes)
{
	uint64_t slot = CI_SLOT_BYTES(ci->chunk_bytes, ci->tagged);
	uint64_t n = bytes / slot;
	if (n > ci->nchunks)
		n = ci->nchunks; /* note 7: one slot per chunk is all a cache can use */
	if (!n)
		return 0;
	size_t len = (size_t)(n * slot);
	/* zero pages: every slot starts empty (address 0 names no chunk copy) */
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return EMBER_ENOMEM;
	ci->cache = m;
	ci->cache_slots = n;
	ci->slot_bytes = slot;
	ci->cache_bytes = len;
	return 0;
}

void ci_cache_put(struct cold_index *ci, uint64_t chunk, uint64_t chunk_addr,
		  const _Atomic uint64_t *words)
{
	if (!ci->cache || !chunk_addr)
		return;
	/* note 9: the smallest and largest nonzero address; relaxed: words is immutable */
	uint64_t lo = UINT64_MAX, hi = 0;
	for (uint32_t i = 0; i < ci->entries; i++) {
		uint64_t w = atomic_load_explicit(&words[i], memory_order_relaxed);
		uint64_t a = ci_addr(ci, w);
		if (ci->tagged && w && !(w >> CI_TAG_SHIFT))
			return; /* an address without a tag (note 10): not cached */
		if (!a)
			continue;
		if (a & 7)
			return; /* not a record address: not cached */
		lo = a < lo ? a : lo;
		hi = a > hi ? a : hi;
	}
	if (hi && hi - lo >= (UINT64_C(1) << 35) - 8)
		return; /* too wide for 4-byte words */
	uint64_t base = hi ? lo >> 3 : 0;
	struct ci_cache_slot *sl = ci_cache_slot_of(ci, chunk);
	_Atomic uint16_t *tags = ci_cache_tags(ci, sl);
	/* relaxed: the CAS below decides */
	uint64_t s1 = atomic_load_explicit(&sl->seq, memory_order_relaxed);
	if (s1 & 1)
		return;
	/* acquire: the word stores below stay after taking the slot */
	if (!atomic_compare_exchange_strong_explicit(&sl->seq, &s1, s1 + 1, memory_order_acquire,
						     memory_order_relaxed))
		return;
	/* release (all): a reader that loads any new word sees the odd sequence */
	atomic_store_explicit(&sl->addr, chunk_addr, memory_order_release);
	atomic_store_explicit(&sl->base, base, memory_order_release);
	for (uint32_t i = 0; i < ci->entries; i++) {
		/* relaxed load: words is immutable */
		uint64_t w = atomic_load_explicit(&words[i], memory_order_relaxed);
		uint64_t a = ci_addr(ci, w);
		atomic_store_explicit(&sl->words[i], a ? (uint32_t)((a >> 3) - base + 1) : 0,
				      memory_order_release);
		if (ci->tagged)
			atomic_store_explicit(&tags[i], (uint16_t)(w >> CI_TAG_SHIFT),
					      memory_order_release);
	}
	/* release: the new words are visible before the even sequence */
	atomic_store_explicit(&sl->seq, s1 + 2, memory_order_release);
}

int ci_cache_pick(const struct cold_index *ci, uint64_t hash, uint64_t chunk_addr,
		  uint64_t *entry)
{
	uint64_t s1, base;
	struct ci_cache_slot *sl = ci_cache_enter(ci, ci_chunk_of(ci, hash), chunk_addr, &s1, &base);
	if (!sl)
		return 0;
	_Atomic uint16_t *tags = ci_cache_tags(ci, sl);
	uint64_t tag = ci_tag_of(hash);
	uint32_t at = UINT32_MAX, empty_at = UINT32_MAX;
	for (uint32_t i = 0; i < ci->entries && at == UINT32_MAX; i++) {
		/* acquire: as every load between enter and stayed */
		uint64_t t = atomic_load_explicit(&tags[i], memory_order_acquire);
		if (t == tag)
			at = i;
		else if (!t && empty_at == UINT32_MAX)
			empty_at = i;
	}
	/* ci_pick's rule (note 10); an untagged word is never cached, so an empty
	 * entry's word is 0 */
	if (at == UINT32_MAX)
		at = empty_at != UINT32_MAX ? empty_at : ci_slot_of(ci, hash);
	/* acquire: as above */
	uint32_t w = atomic_load_explicit(&sl->words[at], memory_order_acquire);
	*entry = w ? (base + w - 1) << 3 : 0;
	return ci_cache_stayed(sl, s1);
}

uint64_t ci_chunks_used(struct cold_index *ci)
{
	uint64_t n = 0;
	for (uint64_t c = 0; c < ci->nchunks; c++)
		/* relaxed: a statistic */
		n += atomic_load_explicit(&ci->table[c], memory_order_relaxed) != 0;
	return n;
}
