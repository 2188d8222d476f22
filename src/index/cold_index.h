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
 *
 * Threads: every call is thread-safe; callers are epoch-protected sessions.
 */
#ifndef EMBER_INDEX_COLD_INDEX_H
#define EMBER_INDEX_COLD_INDEX_H

#include <stdatomic.h>
#include <stdint.h>

#include "log/hlog.h"
#include "log/record.h"

struct cold_index {
	uint64_t nchunks;
	uint64_t chunk_mask;
	uint32_t chunk_bytes;
	uint32_t entries;
	_Atomic uint64_t *table;
	size_t table_bytes;
	struct hlog *log; /* the chunk log */
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

/* Is rec a well-formed copy of chunk c? (checked on every chunk read from disk) */
static inline int ci_chunk_ok(const struct cold_index *ci, struct record *rec, uint64_t chunk)
{
	uint64_t id;
	if (rec->key_len != 8 || rec->val_cap != ci->chunk_bytes ||
	    atomic_load_explicit(&rec->val_len, memory_order_relaxed) != ci->chunk_bytes)
		return 0;
	memcpy(&id, rec_key(rec), 8);
	return id == chunk;
}

/* Table words in use (statistics). */
uint64_t ci_chunks_used(struct cold_index *ci);

#endif
