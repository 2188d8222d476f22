/*
 * hash_index.h - the latch-free in-memory hash index of a log.
 *
 * A table of 2^k buckets, each one 64-byte cache line: seven 8-byte entries and an
 * overflow link to a further bucket. An entry packs
 *
 *   bits 0-47  address of the newest record of the chain (0 = none)
 *   bits 48-61 tag: the top 14 bits of the key's hash
 *   bit  62    tentative: being inserted; invisible to readers
 *   bit  63    read-cache: the address is in the read cache (reserved for F2)
 *
 * and 0 means "free slot". At most one non-tentative entry per (bucket, tag)
 * exists; keys whose hashes share bucket and tag share a chain of records.
 *
 * Design notes
 *  1. Entries change only by compare-and-swap (hi_insert, the callers' updates),
 *     so a reader always sees a whole entry.
 *  2. Insert protocol (hi_insert): claim a free slot with a tentative entry, then
 *     re-scan the bucket chain; if another entry with the same tag exists
 *     (tentative or not) back off (free the slot) and retry, else clear the
 *     tentative bit. Two racing inserters of one tag cannot both finish: each sees
 *     the other's tentative entry before it clears its own bit.
 *  3. Overflow buckets are appended with a CAS on the link and never removed while
 *     the index lives, so a reader that follows a link never reaches freed memory.
 *
 * Threads: every call is thread-safe.
 */
#ifndef EMBER_INDEX_HASH_INDEX_H
#define EMBER_INDEX_HASH_INDEX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/address.h"

#define HI_SLOTS 7
#define HI_TAG_SHIFT 48
#define HI_TAG_MASK (UINT64_C(0x3fff) << HI_TAG_SHIFT)
#define HI_TENTATIVE (UINT64_C(1) << 62)
#define HI_READCACHE (UINT64_C(1) << 63)
#define HI_CHUNK_BITS 14 /* overflow buckets are allocated 16384 at a time */
#define HI_MAX_CHUNKS 65536

struct hi_bucket {
	_Atomic uint64_t entry[HI_SLOTS];
	_Atomic uint64_t overflow; /* 1-based id of the next bucket, 0 = none */
} __attribute__((aligned(64)));

struct hash_index {
	struct hi_bucket *table;
	uint64_t nbuckets;
	uint64_t mask;
	size_t table_bytes;
	struct hi_bucket *_Atomic *chunks; /* HI_MAX_CHUNKS pointers */
	_Atomic uint64_t overflow_used;
};

typedef _Atomic uint64_t hi_slot;

/* nbuckets is rounded up to a power of two. Returns 0 or EMBER_ENOMEM. */
int hi_init(struct hash_index *hi, uint64_t nbuckets);
void hi_destroy(struct hash_index *hi);

static inline uint64_t hi_entry_addr(uint64_t e) { return e & EM_ADDR_MASK; }

static inline uint64_t hi_make_entry(uint32_t tag, uint64_t addr)
{
	return ((uint64_t)tag << HI_TAG_SHIFT) | (addr & EM_ADDR_MASK);
}

static inline struct hi_bucket *hi_home(struct hash_index *hi, uint64_t hash)
{
	return &hi->table[hash & hi->mask];
}

static inline void hi_prefetch(struct hash_index *hi, uint64_t hash)
{
	__builtin_prefetch(hi_home(hi, hash));
}

/* The slot holding the (non-tentative) entry for hash's tag, and its value in
 * *entry; NULL when there is none. */
hi_slot *hi_find(struct hash_index *hi, uint64_t hash, uint64_t *entry);

/*
 * Insert an entry for hash's tag pointing at addr. Returns 0 with *slot set when
 * it inserted; 1 when an entry for the tag exists already (*slot and *entry are
 * that entry's, nothing inserted); EMBER_ENOMEM when no overflow bucket could be
 * allocated.
 */
int hi_insert(struct hash_index *hi, uint64_t hash, uint64_t addr, hi_slot **slot,
	      uint64_t *entry);
/* The same, with flag bits (HI_READCACHE) set in the new entry. */
int hi_insert_flags(struct hash_index *hi, uint64_t hash, uint64_t addr, uint64_t flags,
		    hi_slot **slot, uint64_t *entry);

/* The overflow bucket linked from b, or NULL (for walks over every entry). */
struct hi_bucket *hi_overflow_next(struct hash_index *hi, struct hi_bucket *b);
/* Overflow buckets in use (statistics). */
uint64_t hi_overflow_buckets(struct hash_index *hi);

#endif
