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
 * A key's chunk comes from its hash (ci_chunk_of). Which entry of the chunk holds
 * its chain depends on the store's format (note 10): in a tagged index (format
 * version 4) each entry carries the 16-bit tag of the keys of its chain, and a key
 * takes the entry with its tag, so that a chain holds about one key; in an untagged
 * one (versions 2 and 3) the entry comes from other bits of the hash (ci_slot_of)
 * and every key that picks it shares its chain. With chunk_bytes = 256 (32
 * entries) and about one cold key per entry, memory per cold key is 8 / 32 = 0.25
 * bytes of table plus the chunk log's small ring; a cold read costs one chunk read
 * and one record read.
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
 *  5. Chunk cache (ci_cache_*): copies of whole chunk records that left the chunk
 *     log's memory, each tagged with the chunk-log address of the copy it holds,
 *     so that a cold read whose chunk is on disk costs one disk read (the record)
 *     instead of two. A chunk copy below the chunk log's safe_read_only never
 *     changes again (in-place CAS happens only while it is mutable, notes 2-3)
 *     and log addresses are never reused, so a cached copy is exact for as long
 *     as table[c] still names its address: any update of the chunk (a writer's
 *     copy-on-write, hot->cold or cold->cold compaction, chunk-log compaction)
 *     makes a new copy at a new address, which retires the cached one at once.
 *     Readers check the tag against the table word they loaded; they never serve
 *     a copy the table no longer names.
 *  6. Fills. (a) The chunk log's eviction (store/cold.c, chunk_evict) puts every
 *     current chunk copy that is about to leave memory into the cache: a chunk
 *     rewritten by an upsert or by compaction is cached again, at its new
 *     address, before the lookups that follow could need a disk read for it.
 *     (b) A lookup that read a chunk from disk (checked by the record reader:
 *     checksum, key, shape) puts it in the cache if the table still names it.
 *     The cache holds only bytes that came from memory the log wrote or from a
 *     read that passed every check; a damaged chunk on disk is still found when
 *     it is read (a miss) and never reaches the cache.
 *  7. Placement: direct-mapped, slot = chunk % slots, at most one slot per chunk
 *     (slots = min(bytes / slot size, nchunks)): with a cache that holds every
 *     chunk no two chunks share a slot. A fill replaces whatever the slot held.
 *  8. Each slot is a seqlock (seq odd while a writer fills it): readers never
 *     wait and treat a slot being written as a miss; a writer that finds the
 *     slot taken skips its fill (fills are best effort). Memory-only, empty at
 *     open, counted in memory_budget.
 *  9. Compact words: a slot keeps each entry in 4 bytes, as 0 (empty) or
 *     1 + (entry - base) / 8, where base is the copy's smallest nonzero entry
 *     (cold-log records are 8-byte aligned). A copy whose nonzero entries span
 *     2^35 - 8 bytes or more, or one with an entry not 8-byte aligned, is not
 *     cached (a skipped fill), so every cached word decodes to exactly the entry
 *     of the copy. A slot is CI_SLOT_BYTES(chunk_bytes) = 24 + chunk_bytes / 2
 *     bytes: every chunk of a 2^16-chunk index in 9.5 MiB. A tagged index's slot
 *     also keeps each entry's tag (2 bytes; CI_SLOT_BYTES(chunk_bytes, 1) = 24 +
 *     3 * chunk_bytes / 4: 13.5 MiB for the same index).
 * 10. Tagged entries (ci_pick). An entry word is tag << 48 | address; tag 0 marks
 *     an empty entry (ci_tag_of is never 0). The entry of a key with tag t is the
 *     first entry whose tag is t; else the first empty entry; else, the chunk
 *     being full, its home entry (ci_slot_of), whose chain then holds keys of
 *     other tags too. Lookups and updates pick with the same rule, and an entry's
 *     tag never changes once set (an update keeps it; an entry never becomes
 *     empty again), so the pick of a key never moves while its chain is not
 *     empty: a tag-t entry appears only by taking the first empty entry, which a
 *     key of tag t would have picked itself, and a full chunk stays full. A key
 *     shares its chain with the keys of its own tag in its chunk (one chance in
 *     2^16 per other key) and, in a full chunk without its tag, with its home
 *     entry's keys. An update CASes the whole word it picked: a lost race (another
 *     key took the empty entry, or the chain moved) picks again.
 *
 * Threads: every call is thread-safe; callers are epoch-protected sessions.
 */
#ifndef EMBER_INDEX_COLD_INDEX_H
#define EMBER_INDEX_COLD_INDEX_H

#include <stdatomic.h>
#include <stdint.h>

#include "log/hlog.h"
#include "log/record.h"

/* One chunk-cache slot (notes 5-9); chunk_bytes / 8 compact words follow it. */
struct ci_cache_slot {
	_Atomic uint64_t seq;     /* odd while a writer fills the slot */
	_Atomic uint64_t addr;    /* chunk-log address of the copy held; 0: empty */
	_Atomic uint64_t base;    /* the copy's smallest nonzero address / 8 (note 9) */
	_Atomic uint32_t words[]; /* the copy's entries, compact (note 9); in a tagged
				   * index, their tags (uint16) follow */
};
#define CI_SLOT_BYTES(chunk_bytes, tagged)                                                      \
	(sizeof(struct ci_cache_slot) + (uint64_t)(chunk_bytes) / 2 +                           \
	 ((tagged) ? (uint64_t)(chunk_bytes) / 4 : 0))

/* Tagged entries (note 10): the tag in the top bits, the cold-log address below. */
#define CI_TAG_SHIFT EM_ADDR_BITS

struct cold_index {
	uint64_t nchunks;
	uint64_t chunk_mask;
	uint32_t chunk_bytes;
	uint32_t entries;
	uint32_t tagged; /* entries carry tags (note 10; format version 4) */
	_Atomic uint64_t *table;
	size_t table_bytes;
	struct hlog *log; /* the chunk log */
	uint8_t *cache; /* chunk cache (note 5); NULL: off */
	uint64_t cache_slots;
	uint64_t slot_bytes; /* CI_SLOT_BYTES(chunk_bytes, tagged) */
	size_t cache_bytes;
};

/* nchunks: a power of two; chunk_bytes: a power of two in [64, 4096]; tagged: the
 * entries carry tags (note 10). */
int ci_init(struct cold_index *ci, uint64_t nchunks, uint32_t chunk_bytes, int tagged,
	    struct hlog *log);
void ci_destroy(struct cold_index *ci);

static inline uint64_t ci_chunk_of(const struct cold_index *ci, uint64_t hash)
{
	return (hash >> 20) & ci->chunk_mask;
}

/* An untagged index's entry of hash; a tagged one's home entry (note 10). */
static inline uint32_t ci_slot_of(const struct cold_index *ci, uint64_t hash)
{
	return (uint32_t)(hash >> 8) & (ci->entries - 1);
}

/* The tag of hash (note 10): all of its bits mixed, so that the keys of one chunk
 * (which share the chunk bits) still differ; never 0, which marks an empty entry. */
static inline uint64_t ci_tag_of(uint64_t hash)
{
	uint64_t t = (hash * UINT64_C(0x9E3779B97F4A7C15)) >> CI_TAG_SHIFT;
	return t ? t : 1;
}

/* The cold-log address an entry word names. */
static inline uint64_t ci_addr(const struct cold_index *ci, uint64_t word)
{
	return ci->tagged ? word & EM_ADDR_MASK : word;
}

/* The word that makes the entry word cur (picked for hash) name addr: a tagged
 * entry keeps its tag, an empty one takes hash's (note 10). */
static inline uint64_t ci_word_with(const struct cold_index *ci, uint64_t cur, uint64_t hash,
				    uint64_t addr)
{
	if (!ci->tagged)
		return addr;
	uint64_t tag = cur >> CI_TAG_SHIFT;
	return ((tag ? tag : ci_tag_of(hash)) << CI_TAG_SHIFT) | addr;
}

/* The entry of hash's chain among entries words w (note 10), its word in *word.
 * The words may change under the pick (a mutable chunk): each is loaded once. */
static inline uint32_t ci_pick(const struct cold_index *ci, const _Atomic uint64_t *w,
			       uint64_t hash, uint64_t *word)
{
	uint32_t home = ci_slot_of(ci, hash);
	if (!ci->tagged) {
		/* acquire: the cold record the entry points to is fully written */
		*word = atomic_load_explicit(&w[home], memory_order_acquire);
		return home;
	}
	uint64_t tag = ci_tag_of(hash), empty_at = UINT64_MAX, empty_word = 0, home_word = 0;
	for (uint32_t i = 0; i < ci->entries; i++) {
		/* acquire: as above, for the entry that is picked */
		uint64_t x = atomic_load_explicit(&w[i], memory_order_acquire);
		uint64_t t = x >> CI_TAG_SHIFT;
		if (t == tag) {
			*word = x;
			return i;
		}
		if (!t && empty_at == UINT64_MAX) {
			empty_at = i;
			empty_word = x; /* 0, unless damaged: then the CAS still names it */
		}
		if (i == home)
			home_word = x;
	}
	if (empty_at != UINT64_MAX) {
		*word = empty_word;
		return (uint32_t)empty_at;
	}
	*word = home_word;
	return home;
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

/* The cold-log address of hash's chain among a chunk's entry words w; 0: none. */
static inline uint64_t ci_entry_in(const struct cold_index *ci, const _Atomic uint64_t *w,
				   uint64_t hash)
{
	uint64_t word;
	(void)ci_pick(ci, w, hash, &word);
	return ci_addr(ci, word);
}

/* The same in a chunk record (memory or a private disk copy). */
static inline uint64_t ci_entry(const struct cold_index *ci, struct record *chunk_rec,
				uint64_t hash)
{
	return ci_entry_in(ci, ci_words(chunk_rec), hash);
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

/* Give the cold index a chunk cache of at most bytes (notes 5-8; 0, or less than
 * one slot: none). Call once, after ci_init and before any lookup. 0 or
 * EMBER_ENOMEM. */
int ci_cache_init(struct cold_index *ci, uint64_t bytes);

static inline struct ci_cache_slot *ci_cache_slot_of(const struct cold_index *ci, uint64_t chunk)
{
	return (struct ci_cache_slot *)(void *)(ci->cache + (chunk % ci->cache_slots) * ci->slot_bytes);
}

/* A tagged slot's tags: one uint16 per entry, after its words (note 9). */
static inline _Atomic uint16_t *ci_cache_tags(const struct cold_index *ci,
					      struct ci_cache_slot *sl)
{
	return (_Atomic uint16_t *)(void *)&sl->words[ci->entries];
}

/* The read side of a slot's seqlock (note 8), opened: the slot of chunk if it holds
 * the copy at chunk_addr and no writer is in it, with its sequence in *s1 and its
 * base in *base; else NULL. Every word or tag then read from it is loaded with
 * acquire, and the read counts only if ci_cache_stayed(sl, *s1). */
static inline struct ci_cache_slot *ci_cache_enter(const struct cold_index *ci, uint64_t chunk,
						   uint64_t chunk_addr, uint64_t *s1,
						   uint64_t *base)
{
	if (!ci->cache || !chunk_addr)
		return NULL;
	struct ci_cache_slot *sl = ci_cache_slot_of(ci, chunk);
	/* acquire: the words read after are at least as new as this sequence */
	*s1 = atomic_load_explicit(&sl->seq, memory_order_acquire);
	if (*s1 & 1)
		return NULL;
	/* acquire (all, and the caller's word loads): a word from a newer fill brings
	 * that fill's odd sequence with it, and keeps ci_cache_stayed's load from
	 * moving above these (no fences, so ThreadSanitizer models every step) */
	if (atomic_load_explicit(&sl->addr, memory_order_acquire) != chunk_addr)
		return NULL;
	*base = atomic_load_explicit(&sl->base, memory_order_acquire);
	return sl;
}

/* The seqlock's read side, closed: 1 if no writer entered the slot since
 * ci_cache_enter returned it (the words read meanwhile are one fill's). */
static inline int ci_cache_stayed(struct ci_cache_slot *sl, uint64_t s1)
{
	/* relaxed: ordered after the caller's acquire loads */
	return atomic_load_explicit(&sl->seq, memory_order_relaxed) == s1;
}

/* Read entry words i .. i + n - 1 of the copy of chunk at chunk_addr into out (as
 * the copy holds them: tag and address) if the cache holds that copy: 1, else 0.
 * Never waits (note 8). */
static inline int ci_cache_read(const struct cold_index *ci, uint64_t chunk, uint64_t chunk_addr,
				uint32_t i, uint32_t n, uint64_t *out)
{
	uint64_t s1, base;
	struct ci_cache_slot *sl = ci_cache_enter(ci, chunk, chunk_addr, &s1, &base);
	if (!sl)
		return 0;
	_Atomic uint16_t *tags = ci_cache_tags(ci, sl);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t w = atomic_load_explicit(&sl->words[i + k], memory_order_acquire);
		out[k] = w ? (base + w - 1) << 3 : 0; /* note 9 */
		if (ci->tagged)
			/* acquire: as the words */
			out[k] |= (uint64_t)atomic_load_explicit(&tags[i + k], memory_order_acquire)
				  << CI_TAG_SHIFT;
	}
	return ci_cache_stayed(sl, s1);
}

/* A tagged index's ci_cache_get: ci_pick over the cached tags. */
int ci_cache_pick(const struct cold_index *ci, uint64_t hash, uint64_t chunk_addr,
		  uint64_t *entry);

/* The cold-log address of hash's chain in the copy of its chunk at chunk_addr, if
 * cached: 1 and *entry set, else 0. */
static inline int ci_cache_get(const struct cold_index *ci, uint64_t hash, uint64_t chunk_addr,
			       uint64_t *entry)
{
	if (ci->tagged)
		return ci_cache_pick(ci, hash, chunk_addr, entry);
	return ci_cache_read(ci, ci_chunk_of(ci, hash), chunk_addr, ci_slot_of(ci, hash), 1, entry);
}

/* Remember that the copy of chunk at chunk_addr holds words (ci->entries of them;
 * immutable: read back from disk and checked, or below the chunk log's
 * safe_read_only). Skips the fill if another writer holds the slot. */
void ci_cache_put(struct cold_index *ci, uint64_t chunk, uint64_t chunk_addr,
		  const _Atomic uint64_t *words);

/* Table words in use (statistics). */
uint64_t ci_chunks_used(struct cold_index *ci);

#endif
