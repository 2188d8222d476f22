/*
 * read_cache.c - the optional read cache: copies of records that user reads found
 * on disk or in the cold log (lookup.c, finish), kept in a memory-only hybrid log
 * and reached from the hot index (see store_int.h).
 *
 * Design notes
 *  1. Insert (rc_insert): after a cold hit or a hot hit below head, copy the record to the read-cache tail
 *     with prev = the hot chain, and CAS the hot entry from the value the lookup
 *     saw when it began (or insert a new entry if there was none). Any write of the
 *     tag in between changed the entry, so the CAS fails and nothing stale is cached.
 *  2. Writers (ops.c) link their new record behind the hot chain (hot_chain) and
 *     CAS the entry away from the read-cache record: the copy is simply dropped.
 *  3. Eviction (rc_evict, run by the log worker before head moves past [from, to);
 *     it resumes at the record boundary where it stopped, since head is page
 *     aligned and records span pages):
 *     every entry that still points into the range is CAS'd back to the record's
 *     hot chain, or, for a record hit since it was inserted (second chance), to a
 *     fresh copy at the tail. Only then does head move, and the memory is reused
 *     only after one more epoch (safe_head): a reader that loaded a read-cache
 *     address before the entry changed is still protected.
 *  4. The cache never waits: a full cache skips the insert.
 *  5. Admission (EMBER_READ_CACHE_ADMIT_SECOND): rc_seen holds a 32-bit
 *     fingerprint per slot (one slot per 256 bytes of the cache, a power of two),
 *     the slot picked by the hash's high 32 bits, the fingerprint its low 32 (so
 *     at most 2^32 slots). rc_insert copies a record only if
 *     its slot holds its fingerprint, that is, its key was read from disk before
 *     and no other key took the slot since; it then clears the slot. Otherwise the
 *     slot takes the fingerprint and nothing is copied. Until the cache first
 *     evicts (its head still at the log's start) every read is copied: the rule
 *     chooses what replaces what, and a cache with room replaces nothing. (Measured
 *     without this: a 3 MiB cache took over a minute of YCSB C to fill.) The table is a hint: its
 *     loads and stores are relaxed and unordered, and a race costs one copy more
 *     or less, never a wrong read (what a read sees rests on the CAS of note 1).
 */
#include "store/store_int.h"

#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"

static void rc_evict(void *ctx, uint64_t from, uint64_t to)
{
	struct ember_db *db = ctx;
	struct hlog *rc = db->rc;
	/* head is page aligned and records span pages: start where the last call
	 * stopped (a record boundary), not at from */
	uint64_t a = db->rc_cursor > from ? db->rc_cursor : from;
	for (;;) {
		a = hlog_skip_gap(rc, a);
		if (a >= to)
			break;
		struct record *x = hlog_rec(rc, a);
		uint64_t size = rec_total_size(x);
		uint64_t hdr = rec_header(x);
		if (!(hdr & (REC_FILLER | REC_INVALID))) {
			uint64_t hash = em_hash(rec_key(x), x->key_len);
			uint32_t tag = em_hash_tag(hash);
			uint64_t e;
			hi_slot *slot = hi_find(&db->index, hash, &e);
			uint64_t mine = hi_make_entry(tag, a) | HI_READCACHE;
			if (slot && e == mine) {
				uint64_t next = rec_prev(x) ? hi_make_entry(tag, rec_prev(x)) : 0;
				uint64_t na = (hdr & REC_RC_HIT) ? hlog_alloc(rc, size) : 0;
				if (na) {
					/* second chance: move it to the tail, hit bit cleared */
					struct record *nr = hlog_rec(rc, na);
					uint32_t vlen = atomic_load_explicit(&x->val_len, memory_order_relaxed);
					rec_init(nr, rec_prev(x), 0, rec_key(x), x->key_len, rec_value(x), vlen,
						 x->val_cap);
					next = hi_make_entry(tag, na) | HI_READCACHE;
				}
				/* release: the copy is visible before the entry names it; a failed
				 * CAS means a writer replaced the entry already */
				if (!atomic_compare_exchange_strong_explicit(slot, &e, next, memory_order_release,
									     memory_order_relaxed) &&
				    na)
					atomic_fetch_or_explicit(&hlog_rec(rc, na)->header, REC_INVALID,
								 memory_order_relaxed); /* unpublished */
			}
		}
		a += size;
	}
	db->rc_cursor = a;
}

uint64_t rc_filter_bytes(uint64_t mem, uint32_t admit)
{
	if (admit != EMBER_READ_CACHE_ADMIT_SECOND || !mem)
		return 0;
	uint64_t slots = 1024;
	while (slots * 2 <= mem / 256 && slots < (UINT64_C(1) << 32))
		slots *= 2; /* at most 2^32: the slot is 32 bits of the hash */
	return slots * sizeof(uint32_t);
}

/* Note 5: may this disk read of the key of hash be copied? */
static int rc_admit(struct ember_db *db, uint64_t hash)
{
	if (!db->rc_seen || hlog_load(&db->rc->head) <= EM_LOG_START)
		return 1; /* no filter, or the cache not yet full */
	_Atomic uint32_t *slot = &db->rc_seen[(hash >> 32) & db->rc_seen_mask];
	uint32_t fp = (uint32_t)hash | 1; /* never 0, the empty slot */
	/* relaxed: a hint (note 5) */
	if (atomic_load_explicit(slot, memory_order_relaxed) == fp) {
		atomic_store_explicit(slot, 0, memory_order_relaxed); /* relaxed: a hint */
		return 1;
	}
	atomic_store_explicit(slot, fp, memory_order_relaxed); /* relaxed: a hint */
	return 0;
}

int rc_open(struct ember_db *db, uint64_t mem)
{
	uint64_t seen = rc_filter_bytes(mem, db->opts.read_cache_admit);
	if (seen) {
		db->rc_seen = em_zalloc(seen);
		if (!db->rc_seen)
			return EMBER_ENOMEM;
		db->rc_seen_mask = seen / sizeof(uint32_t) - 1;
	}
	int rc = EMBER_ENOMEM;
	struct hlog *l = em_alloc_aligned(64, sizeof(struct hlog));
	if (!l)
		goto undo_seen;
	struct hlog_config hc = {.mem_size = mem, .page_size = db->opts.page_size,
				 .mutable_fraction = 0.1};
	rc = hlog_init(l, &hc, NULL, db->ep);
	if (rc < 0)
		goto undo_log;
	db->rc_cursor = EM_LOG_START;
	l->evict_ctx = db;
	l->evict = rc_evict; /* set before the first head move: the worker reads it then */
	db->rc = l;
	return 0;
undo_log:
	em_free(l, sizeof(*l));
undo_seen:
	em_free(db->rc_seen, seen);
	db->rc_seen = NULL;
	return rc;
}

void rc_close(struct ember_db *db)
{
	if (!db->rc)
		return;
	hlog_destroy(db->rc);
	em_free(db->rc, sizeof(struct hlog));
	db->rc = NULL;
	em_free(db->rc_seen, rc_filter_bytes(db->opts.read_cache_memory, db->opts.read_cache_admit));
	db->rc_seen = NULL;
}

void rc_insert(ember_session *s, uint64_t hash, uint64_t hot_entry, uint64_t hot_tail,
	       struct record *rec)
{
	struct ember_db *db = s->db;
	struct hlog *rc = db->rc;
	if (!rc || (hot_entry & HI_READCACHE) || (rec_header(rec) & REC_TOMBSTONE))
		return;
	uint32_t vlen = atomic_load_explicit(&rec->val_len, memory_order_relaxed); /* immutable */
	uint32_t cap = rec_cap_for(vlen);
	uint64_t size = rec_size(rec->key_len, cap);
	if (size > rc->mem_size / 16)
		return; /* large values would churn the cache */
	if (!rc_admit(db, hash))
		return; /* its first disk read lately (note 5) */
	uint64_t e;
	hi_slot *slot = hi_find(&db->index, hash, &e);
	if (slot ? e != hot_entry : hot_entry != 0)
		return; /* the tag was written meanwhile */
	if (!slot && hlog_load(&db->hot->begin) > hot_tail)
		return; /* an entry may have come and gone meanwhile (see ember_rmw) */
	uint64_t na = hlog_alloc(rc, size);
	if (!na)
		return;
	struct record *nr = hlog_rec(rc, na);
	rec_init(nr, hi_entry_addr(hot_entry), 0, rec_key(rec), rec->key_len, rec_value(rec), vlen, cap);
	int linked;
	if (slot) {
		uint64_t ne = hi_make_entry(em_hash_tag(hash), na) | HI_READCACHE;
		/* release: the copy is visible before the entry names it */
		linked = atomic_compare_exchange_strong_explicit(slot, &e, ne, memory_order_release,
								 memory_order_relaxed);
	} else {
		hi_slot *ns;
		uint64_t ne;
		linked = hi_insert_flags(&db->index, hash, na, HI_READCACHE, &ns, &ne) == 0;
	}
	if (!linked)
		/* relaxed: never published */
		atomic_fetch_or_explicit(&nr->header, REC_INVALID, memory_order_relaxed);
}
