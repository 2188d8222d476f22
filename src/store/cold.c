/*
 * cold.c - the cold tier's writes: cold-index entry updates (the chunk CAS) and
 * appends to the cold log; and the synchronous record read they share with
 * compaction (read_record_sync). Design notes of the cold index are in index/cold_index.h.
 *
 * Why cold_insert(expected) never loses a newer write: every record of a chain is
 * linked by a CAS of the chain's one entry. If the CAS from expected succeeds,
 * nothing was linked into that chain since the caller observed expected, so a
 * record the caller judged live (newest of its key below expected) still is.
 *
 * cold_insert appends its record only when the chunk is not in the chunk log's
 * fuzzy region (cold_chunk_fuzzy): there the CAS would give up (cold_index.h,
 * note 3) and the record would be thrown away, cold-log space written for nothing.
 */
#include "store/store_int.h"
#include "store/checkpoint.h"

#include <errno.h>
#include <string.h>

#include "core/alloc.h"
#include "core/debug.h"

int read_record_sync(ember_session *s, struct hlog *log, struct em_file *f, uint64_t addr,
		     const void *key, uint32_t klen, struct record **out)
{
	struct sync_src src = {s, f};
	struct rec_rules ru = {.log = log, .max_cap = log_max_record(s->db, log), .key = key,
			       .klen = klen};
	const char *why = NULL;
	s->rchunk = 0; /* rbuf is about to hold something else */
	/* one record: the file's read alignment (io/file.h, em_file_read_align) */
	int rc = rec_read_at(session_read_fn, &src, em_file_read_align(f), &s->rbuf, &s->rbuf_cap,
			     addr, FIRST_READ_MIN, &ru, out, &why);
	if (rc < 0 && rc != EMBER_ENOMEM && addr < hlog_load(&log->begin))
		return EMBER_EAGAIN; /* released, or moved by compaction meanwhile */
	if (rc == EMBER_ECORRUPT)
		db_report(s->db, "%s at offset %llu: %s", log_file_name(s->db, log),
			  (unsigned long long)addr, why);
	return rc;
}

/* The copy of chunk at ca from the chunk cache (cold_index.h, note 5), rebuilt as
 * a chunk record at the start of s->rbuf: 0 and *out, 1 (not cached), or
 * EMBER_ENOMEM. */
static int chunk_from_cache(ember_session *s, uint64_t chunk, uint64_t ca, struct record **out)
{
	struct cold_index *ci = &s->db->cidx;
	if (!ci->cache)
		return 1;
	int rc = em_buf_reserve(&s->rbuf, &s->rbuf_cap, rec_size(8, ci->chunk_bytes));
	if (rc < 0)
		return rc;
	s->rchunk = 0; /* rbuf is about to hold something else */
	struct record *r = (struct record *)(void *)s->rbuf;
	rec_init(r, 0, 0, &chunk, 8, NULL, 0, ci->chunk_bytes);
	uint64_t *w = (uint64_t *)(void *)rec_value(r);
	if (!ci_cache_read(ci, chunk, ca, 0, ci->entries, w))
		return 1;
	/* private copy, not yet handed out */
	atomic_store_explicit(&r->val_len, ci->chunk_bytes, memory_order_relaxed);
	stat_add(&s->cur->ci_hits, 1);
	s->rchunk = ca;
	s->rchunk_off = 0;
	*out = r;
	return 0;
}

/* The chunk record currently at ca, readable (memory, or a private copy read from
 * disk into s->rbuf). may_wait: the caller holds no unpublished record, so the
 * epoch may be left for the read. Caller protected. Returns 0, EMBER_EAGAIN (the
 * table moved on, or a read would be needed and !may_wait) or an error. */
static int chunk_fetch(ember_session *s, uint64_t chunk, uint64_t ca, int may_wait,
		       struct record **out)
{
	struct ember_db *db = s->db;
	struct cold_index *ci = &db->cidx;
	if (ca >= hlog_load(&db->chunks->head)) {
		*out = hlog_rec(db->chunks, ca);
		return 0;
	}
	if (s->rchunk == ca) {
		*out = (struct record *)(void *)(s->rbuf + s->rchunk_off);
		return 0;
	}
	int rc = chunk_from_cache(s, chunk, ca, out);
	if (rc != 1)
		return rc;
	if (!may_wait)
		return EMBER_EAGAIN;
	epoch_unprotect(db->ep, s->slot);
	struct record *r;
	rc = read_record_sync(s, db->chunks, &db->chunk_file, ca, &chunk, 8, &r);
	epoch_protect(db->ep, s->slot);
	if (rc == EMBER_EAGAIN || ci_table_load(ci, chunk) != ca)
		return EMBER_EAGAIN;
	if (rc < 0)
		return rc;
	EM_DEBUG_CHECK(ca >= hlog_load(&db->chunks->begin) || ci_table_load(ci, chunk) != ca,
		       "cold_index.h note 4: the table names chunk %llu below the chunk log's begin",
		       (unsigned long long)chunk);
	if (!ci_chunk_ok(ci, r, chunk)) {
		db_report(db, "cold.idx at offset %llu: not a well-formed copy of chunk %llu",
			  (unsigned long long)ca, (unsigned long long)chunk);
		return EMBER_ECORRUPT;
	}
	s->rchunk = ca;
	s->rchunk_off = (size_t)((uint8_t *)r - s->rbuf); /* where the read put it */
	*out = r;
	return 0;
}

int cold_entry_get(ember_session *s, uint64_t hash, uint64_t *entry)
{
	struct cold_index *ci = &s->db->cidx;
	uint64_t chunk = ci_chunk_of(ci, hash);
	for (;;) {
		uint64_t ca = ci_table_load(ci, chunk);
		if (!ca) {
			*entry = 0;
			return 0;
		}
		/* cold_index.h, notes 2 and 4: a table word names a copy of its own chunk
		 * in the chunk log, below its tail */
		EM_DEBUG_CHECK(ca >= EM_LOG_START && ca < hlog_load(&s->db->chunks->tail),
			       "cold_index.h note 2: chunk %llu at %llu, chunk log tail %llu",
			       (unsigned long long)chunk, (unsigned long long)ca,
			       (unsigned long long)hlog_load(&s->db->chunks->tail));
		struct record *r;
		int rc = chunk_fetch(s, chunk, ca, 1, &r);
		if (rc == EMBER_EAGAIN)
			continue;
		if (rc < 0)
			return rc;
		*entry = ci_entry(ci, r, hash);
		return 0;
	}
}

int cold_chunk_fuzzy(ember_session *s, uint64_t hash)
{
	struct cold_index *ci = &s->db->cidx;
	struct hlog *log = s->db->chunks;
	uint64_t ca = ci_table_load(ci, ci_chunk_of(ci, hash));
	return ca && ca < hlog_load(&log->read_only) && ca >= hlog_load(&log->safe_read_only);
}

#define CAS_AGAIN 2      /* nothing changed: try again */
#define CAS_WAIT_LOG 3   /* the chunk log has no room: wait for it, then again */

/* One attempt at the chunk CAS (see cold_index.h, notes 2-3 and 10). may_wait as
 * in chunk_fetch. Returns 0, 1 (mismatch, *actual set), CAS_AGAIN, CAS_WAIT_LOG, or
 * an error. */
static int chunk_cas_once(ember_session *s, uint64_t hash, uint64_t expected, uint64_t desired,
			  uint64_t *actual, int may_wait)
{
	struct ember_db *db = s->db;
	struct cold_index *ci = &db->cidx;
	struct hlog *log = db->chunks;
	uint64_t chunk = ci_chunk_of(ci, hash);
	uint64_t ca = ci_table_load(ci, chunk);
	struct record *src = NULL;
	uint64_t cur = 0;
	/* an unwritten chunk has every entry empty: ci_pick would pick this one */
	uint32_t slot = ci->tagged ? 0 : ci_slot_of(ci, hash);
	if (ca) {
		if (ca >= hlog_load(&log->read_only)) {
			_Atomic uint64_t *w = ci_words(hlog_rec(log, ca));
			slot = ci_pick(ci, w, hash, &cur);
			if (ci_addr(ci, cur) != expected) {
				*actual = ci_addr(ci, cur);
				return 1;
			}
			/* acq_rel: the cold record is visible before the entry names it */
			if (atomic_compare_exchange_strong_explicit(
				    &w[slot], &cur, ci_word_with(ci, cur, hash, desired),
				    memory_order_acq_rel, memory_order_acquire))
				return 0;
			/* the word changed since the pick: the next attempt picks again
			 * and decides (another key may have taken an empty entry) */
			return CAS_AGAIN;
		}
		if (ca >= hlog_load(&log->safe_read_only)) {
			if (may_wait)
				epoch_refresh(db->ep, s->slot); /* fuzzy region: let it settle */
			return CAS_AGAIN;
		}
		int rc = chunk_fetch(s, chunk, ca, may_wait, &src);
		if (rc == EMBER_EAGAIN)
			return CAS_AGAIN;
		if (rc < 0)
			return rc;
		slot = ci_pick(ci, ci_words(src), hash, &cur);
	}
	if (ci_addr(ci, cur) != expected) {
		*actual = ci_addr(ci, cur);
		return 1;
	}
	uint64_t size = rec_size(8, ci->chunk_bytes);
	uint64_t na = hlog_alloc(log, size);
	if (!na)
		return CAS_WAIT_LOG;
	struct record *nr = hlog_rec(log, na);
	rec_init(nr, 0, 0, &chunk, 8, NULL, 0, ci->chunk_bytes);
	atomic_store_explicit(&nr->val_len, ci->chunk_bytes, memory_order_relaxed); /* unpublished */
	_Atomic uint64_t *dst = ci_words(nr);
	uint64_t nw = ci_word_with(ci, cur, hash, desired);
	for (uint32_t i = 0; i < ci->entries; i++) {
		/* relaxed: src is immutable (read-only region or a private copy) */
		uint64_t w = src ? atomic_load_explicit(&ci_words(src)[i], memory_order_relaxed) : 0;
		atomic_store_explicit(&dst[i], i == slot ? nw : w, memory_order_relaxed);
	}
	uint64_t expect_ca = ca;
	/* release: the new chunk copy is visible before the table names it */
	if (atomic_compare_exchange_strong_explicit(&ci->table[chunk], &expect_ca, na,
						    memory_order_release, memory_order_relaxed))
		return 0;
	/* relaxed: never published */
	atomic_fetch_or_explicit(&nr->header, REC_INVALID, memory_order_relaxed);
	return CAS_AGAIN;
}

static int wait_chunk_log(ember_session *s)
{
	struct cold_index *ci = &s->db->cidx;
	return hlog_wait(s->db->chunks, rec_size(8, ci->chunk_bytes), s->slot);
}

int cold_chunk_cas(ember_session *s, uint64_t hash, uint64_t expected, uint64_t desired,
		   uint64_t *actual)
{
	for (;;) {
		int rc = chunk_cas_once(s, hash, expected, desired, actual, 1);
		if (rc == CAS_AGAIN)
			continue;
		if (rc == CAS_WAIT_LOG) {
			rc = wait_chunk_log(s);
			if (rc)
				return rc;
			continue;
		}
		return rc;
	}
}

int cold_insert(ember_session *s, uint64_t hash, struct record *src, uint64_t expected)
{
	struct ember_db *db = s->db;
	struct hlog *cold = db->cold;
	uint64_t flags = rec_header(src) & REC_TOMBSTONE;
	/* immutable; a tombstone (even one made in place) carries no value */
	uint32_t vlen = flags ? 0 : atomic_load_explicit(&src->val_len, memory_order_relaxed);
	uint32_t cap = rec_cap_for(vlen);
	uint64_t size = rec_size(src->key_len, cap);
	for (;;) {
		/* read the entry first: this may leave the epoch; nothing is held yet */
		uint64_t e;
		int rc = cold_entry_get(s, hash, &e);
		if (rc < 0)
			return rc;
		if (expected != COLD_ANY && e != expected)
			return 1;
		if (cold_chunk_fuzzy(s, hash)) {
			/* the CAS would give up (note 3 of cold_index.h): let the region
			 * settle before appending a record that would be thrown away */
			epoch_refresh(db->ep, s->slot);
			continue;
		}
		uint64_t na = hlog_alloc(cold, size);
		if (!na) {
			rc = hlog_wait(cold, size, s->slot);
			if (rc)
				return rc;
			continue;
		}
		/* from here until the CAS the new record is unpublished: never leave the
		 * epoch (the log would flush it, or reuse its memory) */
		struct record *nr = hlog_rec(cold, na);
		rec_init(nr, e, flags, rec_key(src), src->key_len, rec_value(src), vlen, cap);
		uint64_t actual;
		rc = chunk_cas_once(s, hash, e, na, &actual, 0);
		if (rc == 0)
			return 0;
		/* relaxed: never published */
		atomic_fetch_or_explicit(&nr->header, REC_INVALID, memory_order_relaxed);
		if (rc == 1 && expected != COLD_ANY)
			return 1;
		if (rc == CAS_WAIT_LOG) {
			rc = wait_chunk_log(s);
			if (rc)
				return rc;
		} else if (rc < 0) {
			return rc;
		} else {
			/* nothing is held now: leave the epoch, or a chunk in the fuzzy
			 * region could never become safe (our own epoch holds it back) */
			epoch_refresh(db->ep, s->slot);
		}
	}
}

/*
 * The chunk log's eviction hook (cold_index.h, note 6a), run by its worker before
 * head moves past [from, to): every chunk copy there that the table still names
 * goes into the chunk cache. The range is below flushed and safe_read_only, so its
 * records are whole and never change again. Resumes where the last call stopped
 * (a record boundary: head is page aligned and records span pages).
 */
static void chunk_evict(void *ctx, uint64_t from, uint64_t to)
{
	struct ember_db *db = ctx;
	struct cold_index *ci = &db->cidx;
	struct hlog *log = db->chunks;
	uint64_t size = rec_size(8, ci->chunk_bytes);
	if (db->chunk_cursor == UINT64_MAX)
		return; /* lost its place once: fills come from disk reads only */
	uint64_t a = db->chunk_cursor > from ? db->chunk_cursor : from;
	for (;;) {
		a = hlog_skip_gap(log, a);
		if (a >= to)
			break;
		struct record *x = hlog_rec(log, a);
		uint64_t len = rec_total_size(x);
		if (rec_header(x) & REC_FILLER) {
			a += len;
			continue;
		}
		if (len != size) {
			/* every chunk record has one size: never guess where the next starts */
			db->chunk_cursor = UINT64_MAX;
			return;
		}
		uint64_t id;
		memcpy(&id, rec_key(x), 8);
		if (!(rec_header(x) & REC_INVALID) && ci_chunk_ok(ci, x, CI_ANY_CHUNK) &&
		    ci_table_load(ci, id) == a)
			ci_cache_put(ci, id, a, ci_words(x));
		a += len;
	}
	db->chunk_cursor = a;
}

void chunk_cache_attach(struct ember_db *db)
{
	if (!db->cidx.cache)
		return;
	/* records below the tail at open are on disk only; the first evicted range
	 * starts at or above it */
	db->chunk_cursor = hlog_load(&db->chunks->tail);
	db->chunks->evict_ctx = db;
	db->chunks->evict = chunk_evict; /* before the first head move: the worker reads it then */
}
