/*
 * cold_index.h - the two-level index of the cold log.
 *
 * Level 1 (memory): a dense table of nchunks 8-byte words, table[c] = the address in
 * the chunk log of the newest copy of hash chunk c (0: the chunk was never
 * written, all its entries are 0).
 * Level 2 (mostly disk): hash chunks, stored as records of their own hybrid log
 * (the chunk log): key = the chunk id (8 bytes, little-endian), value = entries
 * 8-byte words. Entry e of chunk c holds the cold-log address of the newest record
 * of the chain of keys whose hash selects (c, e); records link to older ones of the
 * same chain through their previous-address field.
 *
 * A key's chunk and entry come from disjoint bits of its hash (ci_chunk_of,
 * ci_slot_of). With chunk_bytes = 256 (32 entries) and about one cold key per
 * entry, memory per cold key is 8 / 32 = 0.25 bytes of table plus the chunk log's
 * small ring; a cold read costs one chunk read and one record read.
 *
 * Design notes (updates: cold_chunk_cas in store/cold.c)
 *  1. An entry changes only by compare-and-swap semantics: the update names the
 *     value it expects and fails with the current value on a mismatch.
 *  2. A chunk record in the chunk log's mutable region is updated in place with an
 *     atomic CAS on the entry word. A chunk below read_only is copied to the tail
 *     with the one entry changed, and the copy is linked by CAS on table[c]; a lost
 *     race retries from table[c].
 *  3. A chunk in the fuzzy region [safe_ro, ro) may still be CAS'd in place by a
 *     thread that saw it mutable; a copier waits (refreshes its epoch) until the
 *     region is safe, so no in-place CAS is lost to a concurrent copy.
 *  4. Readers load an entry with one 8-byte atomic load (memory) or read the whole
 *     chunk record back from disk (checksummed like every record).
 *  5. Entry cache (ci_cache_*): a direct-mapped table of (chunk copy address,
 *     entry index) -> entry, filled from the chunks that user reads fetched from
 *     disk, so a repeated cold read costs one disk read (the record) instead of
 *     two. A chunk copy below the chunk log's head never changes (in-place CAS
 *     happens only while it is mutable, notes 2-3) and log addresses are never
 *     reused, so a cached entry is exact for as long as table[c] still names the
 *     copy it came from: any update of the chunk makes a new copy at a new
 *     address, which retires every cached entry of the old one. Lookups consult
 *     the cache only for a copy below head (one in memory is read directly).
 *     Each slot is a seqlock (seq odd while a writer fills it): readers never
 *     wait and treat a slot being written as a miss; a writer that finds a slot
 *     taken skips its fill. 24 bytes a slot, memory-only, empty at open.
 *
 * Threads: every call is thread-safe; callers are epoch-protected sessions.
 */
#ifndef EMBER_INDEX_COLD_INDEX_H
#define EMBER_INDEX_COLD_INDEX_H

#include <stdatomic.h>
#include <stdint.h>

#include "log/hlog.h"
#include "log/record.h"

/* One entry-cache slot (note 5). */
struct ci_cache_slot {
	_Atomic uint64_t seq;   /* odd while a writer fills the slot */
	_Atomic uint64_t tag;   /* chunk copy address | entry index << EM_ADDR_BITS; 0: empty */
	_Atomic uint64_t entry; /* the entry's value in that copy */
};

struct cold_index {
	uint64_t nchunks;
	uint64_t chunk_mask;
	uint32_t chunk_bytes;
	uint32_t entries;
	_Atomic uint64_t *table;
	size_t table_bytes;
	struct hlog *log; /* the chunk log */
	struct ci_cache_slot *cache; /* entry cache (note 5); NULL: off */
	uint64_t cache_slots;
	size_t cache_bytes;
};

/* nchunks: a power of two; chunk_bytes: a power of two in [64, 4096]. */
int ci_init(struct cold_index *ci, uint64_t nchunks, uint32_t chunk_bytes, struct hlog *log);
void ci_destroy(struct cold_index *ci);

static inline uint64_t ci_chunk_of(const struct cold_index *ci, uint64_t hash)
{
	return (hash >> 20) & ci->chunk_mask;
}

static inline uint32_t ci_slot_of(const struct cold_index *ci, uint64_t hash)
{
	return (uint32_t)(hash >> 8) & (ci->entries - 1);
}

static inline uint64_t ci_table_load(struct cold_index *ci, uint64_t chunk)
{
	/* acquire: the chunk record the table points to is fully written */
	return atomic_load_explicit(&ci->table[chunk], memory_order_acquire);
}

static inline _Atomic uint64_t *ci_words(struct record *chunk_rec)
{
	return (_Atomic uint64_t *)(void *)rec_value(chunk_rec);
}

/* Entry slot of a chunk record (memory or a private disk copy). */
static inline uint64_t ci_entry(const struct cold_index *ci, struct record *chunk_rec,
				uint64_t hash)
{
	/* acquire: the cold record the entry points to is fully written */
	return atomic_load_explicit(&ci_words(chunk_rec)[ci_slot_of(ci, hash)],
				    memory_order_acquire);
}

/* Is rec (which passed rec_check) a well-formed copy of chunk c (CI_ANY_CHUNK:
 * of any chunk of the table)? Checked on every chunk read back, and by
 * ember_verify on every record of the chunk log. */
#define CI_ANY_CHUNK UINT64_MAX
static inline int ci_chunk_ok(const struct cold_index *ci, struct record *rec, uint64_t chunk)
{
	uint64_t id;
	if (rec->key_len != 8 || rec->val_cap != ci->chunk_bytes ||
	    atomic_load_explicit(&rec->val_len, memory_order_relaxed) != ci->chunk_bytes ||
	    (rec_header(rec) & (REC_TOMBSTONE | EM_ADDR_MASK)))
		return 0;
	memcpy(&id, rec_key(rec), 8);
	return chunk == CI_ANY_CHUNK ? id < ci->nchunks : id == chunk;
}

/* Give the cold index an entry cache of about bytes (note 5; 0: none). Call once,
 * after ci_init and before any lookup. 0 or EMBER_ENOMEM. */
int ci_cache_init(struct cold_index *ci, uint64_t bytes);

static inline struct ci_cache_slot *ci_cache_slot_of(const struct cold_index *ci, uint64_t hash)
{
	/* the chain (chunk, entry) picks the slot, spread by a multiplicative mix */
	uint64_t chain = (ci_chunk_of(ci, hash) << 9) | ci_slot_of(ci, hash);
	uint64_t m = chain * UINT64_C(0x9E3779B97F4A7C15);
	return &ci->cache[(uint64_t)(((unsigned __int128)m * ci->cache_slots) >> 64)];
}

static inline uint64_t ci_cache_tag(const struct cold_index *ci, uint64_t chunk_addr,
				    uint64_t hash)
{
	return chunk_addr | ((uint64_t)ci_slot_of(ci, hash) << EM_ADDR_BITS);
}

/* The entry of hash's chain in the chunk copy at chunk_addr (on disk), if cached:
 * 1 and *entry set, else 0. Never waits. */
static inline int ci_cache_get(const struct cold_index *ci, uint64_t hash, uint64_t chunk_addr,
			       uint64_t *entry)
{
	if (!ci->cache)
		return 0;
	struct ci_cache_slot *sl = ci_cache_slot_of(ci, hash);
	/* acquire: the words read below are at least as new as this sequence */
	uint64_t s1 = atomic_load_explicit(&sl->seq, memory_order_acquire);
	if (s1 & 1)
		return 0;
	/* acquire (both): a word from a newer fill brings that fill's odd sequence
	 * with it, and keeps the sequence load below from moving above these */
	uint64_t tag = atomic_load_explicit(&sl->tag, memory_order_acquire);
	uint64_t e = atomic_load_explicit(&sl->entry, memory_order_acquire);
	/* relaxed: ordered after the acquire loads above */
	if (atomic_load_explicit(&sl->seq, memory_order_relaxed) != s1 ||
	    tag != ci_cache_tag(ci, chunk_addr, hash))
		return 0;
	*entry = e;
	return 1;
}

/* Remember that hash's chain has entry in the chunk copy at chunk_addr (read from
 * disk). Skips the fill if another writer holds the slot. */
void ci_cache_put(struct cold_index *ci, uint64_t hash, uint64_t chunk_addr, uint64_t entry);

/* Table words in use (statistics). */
uint64_t ci_chunks_used(struct cold_index *ci);

#endif
