/*
 * ops.c - single-key operations: put, delete, get, read-modify-write.
 *
 * Design notes (how writes stay correct without locks on the index)
 *  1. The index entry for a key's tag points to the newest record of a chain that
 *     may hold several keys; a new record is linked by CAS(entry, old, new) with
 *     prev = old, so a chain is only ever extended at its head.
 *  2. A record at or above read_only may be updated in place, under its sequence
 *     lock. A blind write (put, delete) that finds the key's record read-only just
 *     appends a new record: a concurrent in-place writer that still saw the record
 *     as mutable is ordered before it (its write is overwritten, as if it came
 *     first).
 *  3. A read-modify-write reads the old value, so it must never lose a concurrent
 *     update:
 *     - mutable record: it holds the record's lock across read and write; if the
 *       new value does not fit it appends a copy and seals the old record when the
 *       CAS succeeds (sealed records refuse in-place writers, who then retry from
 *       the index and find the copy);
 *     - record in the fuzzy region [safe_ro, ro): an old-epoch thread may still be
 *       writing it in place, so the RMW refreshes its epoch and retries;
 *     - record below safe_ro (memory or disk): immutable; the CAS on the entry
 *       value seen before the read fails if anything was linked since, and the
 *       RMW retries.
 *  4. A record that lost its CAS is marked invalid and never linked.
 *  5. An operation that must wait for log space leaves its epoch (hlog_wait) and
 *     starts over, holding no record lock while it waits.
 */
#include "store/store_int.h"

#include <string.h>

#include "core/alloc.h"
#include "core/cpu.h"
#include "core/fault.h"
#include "core/hash.h"
#include "store/compact.h"

int rec_read_value(struct record *r, void *buf, size_t cap, size_t *vlen)
{
	for (;;) {
		/* acquire: pairs with the unlocking release of the last writer */
		uint32_t s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
		if (s1 & 1) {
			cpu_relax();
			continue;
		}
		uint64_t hdr = rec_header(r);
		/* relaxed: validated by the seq re-check */
		uint32_t n = atomic_load_explicit(&r->val_len, memory_order_relaxed);
		int rc = 0;
		if (hdr & REC_TOMBSTONE)
			rc = EMBER_ENOTFOUND;
		else if (n > cap)
			rc = EMBER_ERANGE;
		else if (n)
			rec_value_load(r, buf, n);
		/* acquire fence: the value loads above happen before the re-check */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&r->seq, memory_order_relaxed) == s1) {
			if (rc != EMBER_ENOTFOUND)
				*vlen = n;
			return rc;
		}
	}
}

static void rec_mark_invalid(struct record *r)
{
	/* relaxed: the record was never published */
	atomic_fetch_or_explicit(&r->header, REC_INVALID, memory_order_relaxed);
}

/* Link a freshly written record nr at na: CAS on slot (entry e) or a new entry. */
static int link_record(struct ember_db *db, uint64_t hash, hi_slot *slot, uint64_t e,
		       uint64_t na)
{
	if (slot) {
		uint64_t ne = hi_make_entry(em_hash_tag(hash), na);
		/* release: the record's contents are visible before the entry points to it */
		if (atomic_compare_exchange_strong_explicit(slot, &e, ne, memory_order_release,
							    memory_order_relaxed))
			return 0;
		return 1;
	}
	hi_slot *ns;
	uint64_t ne;
	int rc = hi_insert(&db->index, hash, na, &ns, &ne);
	return rc; /* 0 inserted, 1 someone else created the entry: retry, <0 error */
}

#define RESERVE_RETRY 1

/*
 * Room for size bytes at the hot tail, at *na (a delete is let through past the
 * disk budget). Returns 0; RESERVE_RETRY after
 * helping compaction or waiting for log space (the epoch was left: start the
 * operation over); or an error. locked (may be NULL) is a record lock the caller
 * holds: released before any wait, never on success.
 */
static int hot_reserve(ember_session *s, uint64_t size, struct record *locked, int is_delete,
		       uint64_t *na)
{
	struct ember_db *db = s->db;
	int rc;
	/* deletes pass even at the hard limit: their tombstones are how live data
	 * shrinks again after EMBER_ENOSPC */
	if (!is_delete && compact_over_hard_limit(db)) {
		/* the disk budget is spent: help compaction before growing the log */
		if (locked)
			rec_unlock(locked, 0);
		epoch_unprotect(db->ep, s->slot);
		rc = compact_assist(s);
		epoch_protect(db->ep, s->slot);
		return rc < 0 ? rc : RESERVE_RETRY;
	}
	*na = hlog_alloc(db->hot, size);
	if (*na)
		return 0;
	if (locked)
		rec_unlock(locked, 0);
	rc = hlog_wait(db->hot, size, s->slot);
	return rc ? rc : RESERVE_RETRY;
}

/* put (tomb == 0) and delete (tomb == 1) */
int blind_write(ember_session *s, const void *key, uint32_t klen, const void *val,
		       uint32_t vlen, int tomb)
{
	struct ember_db *db = s->db;
	struct hlog *hot = db->hot;
	uint64_t hash = em_hash(key, klen);
	uint32_t cap = tomb ? 0 : rec_cap_for(vlen);
	uint64_t size = rec_size(klen, cap);
	int rc;
	epoch_protect(db->ep, s->slot);
	for (;;) {
		uint64_t e = 0;
		hi_slot *slot = hi_find(&db->index, hash, &e);
		if (!slot && tomb) {
			struct cold_index *ci = &db->cidx;
			if (!ci_table_load(ci, ci_chunk_of(ci, hash))) {
				rc = 0; /* in no hot record, and its cold chunk is empty */
				break;
			}
		}
		if (slot) {
			uint64_t ro = hlog_load(&hot->read_only);
			uint64_t a = hot_chain(db, e);
			struct record *r = NULL;
			while (a >= ro && a >= EM_LOG_START) {
				struct record *c = hlog_rec(hot, a);
				if (rec_key_eq(c, key, klen)) {
					r = c;
					break;
				}
				a = rec_prev(c);
			}
			if (r && (tomb || vlen <= r->val_cap)) {
				if (rec_lock(r) != 0)
					continue; /* sealed: a newer copy exists */
				if (tomb) {
					/* relaxed: ordered by the unlock's release */
					atomic_fetch_or_explicit(&r->header, REC_TOMBSTONE, memory_order_relaxed);
				} else {
					rec_write_in_place(r, val, vlen);
				}
				rec_unlock(r, 0);
				rc = 0;
				break;
			}
		}
		uint64_t na = 0;
		rc = hot_reserve(s, size, NULL, tomb, &na);
		if (rc == RESERVE_RETRY)
			continue;
		if (rc < 0)
			break;
		struct record *nr = hlog_rec(hot, na);
		rec_init(nr, slot ? hot_chain(db, e) : 0, tomb ? REC_TOMBSTONE : 0, key, klen, val,
			 tomb ? 0 : vlen, cap);
		rc = link_record(db, hash, slot, e, na);
		if (rc == 0) {
			stat_add(&s->st.user_bytes, size);
			stat_add(&s->st.user_records, 1);
			break;
		}
		rec_mark_invalid(nr);
		if (rc < 0)
			break;
	}
	epoch_unprotect(db->ep, s->slot);
	return rc;
}

int ember_put(ember_session *s, const void *key, size_t klen, const void *val, size_t vlen)
{
	int rc = sync_op_check(s, key, klen);
	if (rc < 0)
		return rc;
	if (s->db->readonly)
		return EMBER_EREADONLY;
	if (!val && vlen)
		return EMBER_EINVAL;
	rc = size_check(s, klen, vlen);
	if (rc < 0)
		return rc;
	return blind_write(s, key, (uint32_t)klen, val, (uint32_t)vlen, 0);
}

/*
 * Check every pair first (so a bad argument writes nothing), then write in order.
 * Upserts at the hot tail are blind and stay in memory, so there is nothing to
 * overlap here the way ember_get_batch overlaps misses: one call saves the caller
 * the per-call checks and keeps the batch's writes together in the log.
 */
int ember_put_batch(ember_session *s, size_t n, const void *const keys[], const size_t klens[],
		    const void *const vals[], const size_t vlens[], int status[])
{
	int rc = sync_check(s);
	if (rc < 0)
		return rc;
	if (s->db->readonly)
		return EMBER_EREADONLY;
	if (n == 0)
		return 0;
	if (!keys || !klens || !vals || !vlens || !status)
		return EMBER_EINVAL;
	for (size_t i = 0; i < n; i++) {
		rc = key_check(keys[i], klens[i]);
		if (rc == 0 && !vals[i] && vlens[i])
			rc = EMBER_EINVAL;
		if (rc == 0)
			rc = size_check(s, klens[i], vlens[i]);
		if (rc < 0)
			return rc;
	}
	int fault = EM_FAULT(EM_FAULT_STORE_PUT); /* fault injection: a refused batch */
	if (fault)
		return fault;
	for (size_t i = 0; i < n; i++)
		status[i] = blind_write(s, keys[i], (uint32_t)klens[i], vals[i], (uint32_t)vlens[i], 0);
	return 0;
}

int ember_delete(ember_session *s, const void *key, size_t klen)
{
	int rc = sync_op_check(s, key, klen);
	if (rc < 0)
		return rc;
	if (s->db->readonly)
		return EMBER_EREADONLY;
	return blind_write(s, key, (uint32_t)klen, NULL, 0, 1);
}

struct get_ctx {
	void *buf;
	size_t cap;
	size_t *vlen;
	int rc;
};

static void get_done(void *ctx, struct lookup *l, int status, struct record *rec, int in_memory)
{
	struct get_ctx *g = ctx;
	g->rc = status == 0 ? lookup_copy_value(l, rec, in_memory, g->buf, g->cap, g->vlen) : status;
}

/* get_front's body, inlined into ember_get: the in-memory read is the store's
 * fastest path, and a call there costs a tenth of it (25 instructions of about
 * 260 per get at 200K keys: callgrind, 2026-11-27). */
static inline __attribute__((always_inline)) int
get_front_inl(ember_session *s, const void *key, uint32_t klen, uint64_t hash, void *buf,
	      size_t cap, size_t *vlen, struct lookup *lk)
{
	struct ember_db *db = s->db;
	epoch_protect(db->ep, s->slot);
	uint64_t t0 = hlog_load(&db->hot->tail);
	uint64_t e = 0, at = 0;
	int tier;
	(void)hi_find(&db->index, hash, &e); /* e stays 0 when there is no entry */
	struct record *r = front_find(db, e, key, klen, 1, &at, &tier);
	if (r) {
		int rc = rec_read_value(r, buf, cap, vlen);
		stat_add(&s->st.reads[tier], 1);
		epoch_unprotect(db->ep, s->slot);
		return rc;
	}
	epoch_unprotect(db->ep, s->slot);
	/* on disk or cold: at is where the hot chain left memory (0: no chain) */
	*lk = (struct lookup){.key = key, .klen = klen, .phase = LK_HOT,
			      .flags = LK_FILL_RC | lookup_cap_flag(cap), .hint = lookup_want_hint(s, klen, cap),
			      .full = lookup_full(klen, cap), .dst = buf, .dcap = cap,
			      .hash = hash, .addr = at, .hot_entry = e, .hot_tail = t0};
	return GET_NEED_READ;
}

int get_front(ember_session *s, const void *key, uint32_t klen, uint64_t hash, void *buf,
	      size_t cap, size_t *vlen, struct lookup *lk)
{
	return get_front_inl(s, key, klen, hash, buf, cap, vlen, lk);
}

int ember_get(ember_session *s, const void *key, size_t klen, void *buf, size_t cap,
	      size_t *vlen)
{
	int rc = sync_op_check(s, key, klen);
	if (rc < 0)
		return rc;
	if (!vlen || (!buf && cap))
		return EMBER_EINVAL;
	uint64_t hash = em_hash(key, klen);
	stat_add(&s->st.user_reads, 1);
	struct lookup lk;
	rc = get_front_inl(s, key, (uint32_t)klen, hash, buf, cap, vlen, &lk);
	if (rc != GET_NEED_READ)
		return rc;
	struct get_ctx g = {buf, cap, vlen, EMBER_EIO};
	rc = lookups_run(s, &lk, 1, get_done, &g);
	return rc < 0 ? rc : g.rc;
}

/*
 * rmw: the old value fetched from the hot log's disk or the cold tier into f->old
 * (the done callback of the lookup rmw_apply asked for; also async.c's).
 */
void rmw_fetch_done(struct rmw_fetch *f, struct lookup *l, int status, struct record *rec,
		    int in_memory)
{
	f->rc = status == EMBER_ENOTFOUND ? 0 : status;
	f->present = 0;
	f->have = f->rc == 0;
	if (status != 0)
		return;
	/* a present empty value still needs a non-NULL old (NULL means absent) */
	if (em_buf_reserve(&f->old, &f->old_cap, 1) < 0)
		goto nomem;
	for (;;) {
		size_t n = 0;
		int rc = lookup_copy_value(l, rec, in_memory, f->old, f->old_cap, &n);
		if (rc == EMBER_ENOTFOUND)
			return; /* a tombstone: absent */
		if (rc == EMBER_ERANGE) {
			if (em_buf_reserve(&f->old, &f->old_cap, n) < 0)
				goto nomem;
			continue;
		}
		f->present = 1;
		f->old_len = n;
		return;
	}
nomem:
	f->rc = EMBER_ENOMEM;
	f->have = 0;
}

static void old_done(void *ctx, struct lookup *l, int status, struct record *rec, int in_memory)
{
	rmw_fetch_done(ctx, l, status, rec, in_memory);
}

/* Run the callback into s->scratch, growing it on EMBER_ERANGE. */
static int call_rmw(ember_session *s, ember_rmw_fn fn, void *arg, const void *old,
		    size_t old_len, size_t *out_len)
{
	for (int tries = 0;; tries++) {
		size_t need = 0;
		int rc = fn(arg, old, old_len, s->scratch, s->scratch_cap, &need);
		if (rc == EMBER_ERANGE) {
			if (need > EMBER_MAX_VALUE_LEN)
				return EMBER_ETOOBIG;
			if (need <= s->scratch_cap || tries >= 3)
				return EMBER_EINVAL; /* the callback asked for room it already had */
			rc = session_buf_reserve(&s->scratch, &s->scratch_cap, need);
			if (rc < 0)
				return rc;
			continue;
		}
		if (rc < 0)
			return rc;
		if (need > s->scratch_cap)
			return EMBER_EINVAL;
		*out_len = need;
		return 0;
	}
}

int rmw_apply(ember_session *s, const void *key, uint32_t kl, uint64_t hash, ember_rmw_fn fn,
	      void *arg, struct rmw_fetch *f)
{
	struct ember_db *db = s->db;
	struct hlog *hot = db->hot;
	size_t klen = kl;
	int rc;
	epoch_protect(db->ep, s->slot);
	for (;;) {
		/* the hot tail before looking: see the check before hi_insert below */
		uint64_t t0 = hlog_load(&hot->tail);
		uint64_t e = 0;
		hi_slot *slot = hi_find(&db->index, hash, &e);
		uint64_t at = 0;
		int tier;
		struct record *r = front_find(db, slot ? e : 0, key, kl, 1, &at, &tier);
		struct record *x = r && tier == TIER_RC ? r : NULL;
		r = x ? NULL : r;
		struct record *locked = NULL;
		const void *old = NULL;
		size_t old_len = 0;
		if (x) {
			/* a read-cache copy is current while the entry names it; the CAS on
			 * the entry below fails if a write replaced it meanwhile */
			old = rec_value(x);
			/* relaxed: read-cache records never change */
			old_len = atomic_load_explicit(&x->val_len, memory_order_relaxed);
		} else if (r) {
			if (at >= hlog_load(&hot->read_only)) {
				if (rec_lock(r) != 0)
					continue; /* sealed: retry from the index */
				locked = r;
			} else if (at >= hlog_load(&hot->safe_read_only)) {
				epoch_refresh(db->ep, s->slot); /* fuzzy region: let it settle */
				continue;
			}
			if (!(rec_header(r) & REC_TOMBSTONE)) {
				old = rec_value(r);
				/* relaxed: stable (locked, or immutable) */
				old_len = atomic_load_explicit(&r->val_len, memory_order_relaxed);
			}
		} else if (f->have && (slot != NULL) == f->slot && (!slot || e == f->e)) {
			/* not in memory, and fetched (by the caller) for this very chain: the
			 * CAS on e below fails if anything was linked since the fetch began */
			t0 = f->t0;
			if (f->present) {
				old = f->old;
				old_len = f->old_len;
			}
		} else {
			/* not in memory: the hot chain on disk, or the cold tier; the caller
			 * reads it from f->at and calls again */
			f->have = 0;
			f->slot = slot != NULL;
			f->e = slot ? e : 0;
			f->t0 = t0;
			f->at = slot ? at : 0;
			rc = RMW_NEED_READ;
			break;
		}
		if (!slot && hlog_load(&hot->begin) > t0) {
			/* no entry when we looked: a put may have created one since, had its
			 * record compacted and the entry cleared back to nothing, and a new
			 * entry would then hide its value. Compaction clears entries only an
			 * epoch after moving begin, so while begin is still at or below t0
			 * (checked here, protected until the insert) that cannot happen. */
			f->have = 0; /* a value fetched before then is stale too */
			continue;
		}
		size_t out_len = 0;
		rc = call_rmw(s, fn, arg, old, old_len, &out_len);
		if (rc == 0)
			rc = size_check(s, klen, out_len);
		if (rc < 0) {
			if (locked)
				rec_unlock(locked, 0);
			break;
		}
		if (locked && out_len <= locked->val_cap) {
			rec_write_in_place(locked, s->scratch, (uint32_t)out_len);
			rec_unlock(locked, 0);
			rc = 0;
			break;
		}
		uint32_t cap = rec_cap_for(out_len);
		uint64_t size = rec_size(kl, cap);
		uint64_t na = 0;
		rc = hot_reserve(s, size, locked, 0, &na);
		if (rc == RESERVE_RETRY)
			continue;
		if (rc < 0)
			break; /* hot_reserve released the lock */
		struct record *nr = hlog_rec(hot, na);
		rec_init(nr, slot ? hot_chain(db, e) : 0, 0, key, kl, s->scratch, (uint32_t)out_len, cap);
		rc = link_record(db, hash, slot, e, na);
		if (rc == 0) {
			if (locked)
				rec_unlock(locked, 1); /* seal: the copy is the newest now */
			stat_add(&s->st.user_bytes, size);
			stat_add(&s->st.user_records, 1);
			break;
		}
		rec_mark_invalid(nr);
		if (locked)
			rec_unlock(locked, 0);
		if (rc < 0)
			break;
	}
	epoch_unprotect(db->ep, s->slot);
	return rc;
}

int ember_rmw(ember_session *s, const void *key, size_t klen, ember_rmw_fn fn, void *arg)
{
	int rc = sync_op_check(s, key, klen);
	if (rc < 0)
		return rc;
	if (!fn)
		return EMBER_EINVAL;
	if (s->db->readonly)
		return EMBER_EREADONLY;
	uint64_t hash = em_hash(key, klen);
	/* the session's buffer holds the old value fetched from disk */
	struct rmw_fetch f = {.old = s->oldbuf, .old_cap = s->oldbuf_cap};
	for (;;) {
		rc = rmw_apply(s, key, (uint32_t)klen, hash, fn, arg, &f);
		if (rc != RMW_NEED_READ)
			break;
		struct lookup lk = {.key = key, .klen = (uint32_t)klen, .phase = LK_HOT, .hash = hash,
				    .addr = f.at};
		f.rc = EMBER_EIO;
		rc = lookups_run(s, &lk, 1, old_done, &f);
		if (rc == 0)
			rc = f.rc;
		if (rc < 0)
			break;
	}
	s->oldbuf = f.old;
	s->oldbuf_cap = f.old_cap;
	return rc;
}
