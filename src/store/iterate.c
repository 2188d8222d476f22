/*
 * iterate.c - ember_iterate: the newest value of every live key, walking the hot
 * log and then the cold log with the cursor (scan.c, notes 1-4) and deciding each
 * record's liveness in groups.
 *
 * Design notes (numbered on from scan.c's)
 * ------------
 *  5. Compaction pauses for the whole walk (the walk holds the compactor's pass_mu,
 *     as a checkpoint does): no begin moves, no record is copied between tiers, no
 *     file space is released, no chain loses a record. A failed check is therefore
 *     corruption (EMBER_ECORRUPT, reported through db_report).
 *  6. What is emitted. With T_hot, T_cold the tail snapshots, a record R of key K
 *     at address a is emitted iff
 *       R is in the hot log:  R is the newest record of K below T_hot in its hot
 *                             chain;
 *       R is in the cold log: K has no record below T_hot in the hot chain, and R
 *                             is the newest record of K below T_cold in its cold
 *                             chain;
 *     and R is not a tombstone when its value is copied. Chains go strictly down
 *     through addresses, so "newest below T" is the first record of K met walking
 *     the chain from the index while stepping over addresses >= T (chain_below in
 *     memory; on disk a lookup round, and a found record at or above T makes the
 *     next round start at its prev: decide_done). By 5 at most one record of K
 *     qualifies, in one tier, so a key is emitted at most once; a key not written
 *     during the walk is emitted exactly once with its value at the snapshot. A key
 *     written meanwhile shows its value at the snapshot or, after an in-place
 *     update, the newer one; one created or deleted meanwhile may be absent.
 *  7. Liveness is decided for a group of up to GROUP candidates at once: memory
 *     steps for all of them under one protection (index, chains above head,
 *     chunks in memory), then one round of reads for every candidate whose chain
 *     goes on on disk, all in flight together (note 10), and again until all are
 *     decided.
 *     A chain that reaches the disk exactly at the candidate decides it without a
 *     read: the scan has just read that record.
 *  8. The caller's fn runs once a group is decided, unprotected, with no read in
 *     flight, on copies of keys and values the walk owns (the window and the ring
 *     may move on).
 *  9. Before the cold walk, the entries of every chunk whose current copy is on
 *     disk are copied with one sequential pass over the chunk log (chunk_snapshot;
 *     at most SNAP_MAX bytes), valid for the whole walk by note 5: a cold candidate then costs no chunk read, and with note 7 usually
 *     no read at all.
 * 10. A chain that goes on on disk above the candidate is followed one record per
 *     round (hops_run): the records every waiting candidate needs next are read
 *     together, each address once, in address order; a hop that lands on the
 *     candidate's own address decides it without reading it again. Only a cold
 *     candidate whose chunk was not copied (note 9) uses lookups_run.
 */
#include "store/scan_int.h"

#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"

#define GROUP 256               /* candidates decided together */
#define GROUP_BYTES (8u << 20)  /* or this many bytes of keys and values */
#define SNAP_MAX (256u << 20)   /* chunk entries iterate copies at most (note 9) */

enum { ST_HOT, ST_SHADOW, ST_COLD };   /* what a candidate's next step decides */
enum { P_MEM, P_DISK, P_DONE };        /* where its next step runs */
enum { CH_FOUND, CH_NONE, CH_DISK };   /* chain_below's answers */

struct cand {
	uint64_t addr;       /* the record's address in its log */
	uint64_t hash;
	uint64_t next;       /* where the step's chain walk starts, or LK_FROM_INDEX */
	uint64_t chunk_addr; /* cold steps: the chunk copy and entry the walk started from */
	uint64_t entry;
	size_t koff, voff;   /* key and value copies in the arena */
	uint32_t klen, vlen;
	uint8_t step, pend, live;
};

struct iter {
	struct ember_db *db;
	ember_session *s;
	ember_iter_fn fn;
	void *arg;
	uint64_t t_hot, t_cold; /* the tail snapshots */
	struct cand *cand;
	size_t n;
	struct lookup *lk;
	uint8_t *arena;
	size_t alen, acap;
	int err;             /* the first lookup error of a round */
	struct hop *hops;    /* hop reads of a round (hops_run) */
	uint32_t *order;     /* candidates waiting for a hop, by (log, address) */
	struct scan_cursor hot_c, cold_c; /* rec_bad's view of each log (no window) */
	uint8_t *snap;       /* chunk_snapshot: chunk id's entries, as of snap_addr[id] */
	uint64_t *snap_addr; /* the chunk copy snap holds for id (0: none) */
	struct sess_stats st;
};

static int arena_reserve(struct iter *it, size_t more)
{
	size_t need = it->alen + more;
	if (need <= it->acap)
		return 0;
	size_t cap = it->acap ? it->acap : 1u << 16;
	while (cap < need)
		cap *= 2;
	uint8_t *p = em_alloc(cap);
	if (!p)
		return EMBER_ENOMEM;
	if (it->alen)
		memcpy(p, it->arena, it->alen);
	em_free(it->arena, it->acap);
	it->arena = p;
	it->acap = cap;
	return 0;
}

/*
 * In memory, from chain address a: the first record of key below limit (CH_FOUND,
 * at *at), the end of the chain (CH_NONE), or the first address on disk (CH_DISK,
 * *at), which may be the record wanted or above it. Caller protected.
 */
static int chain_below(struct hlog *log, uint64_t a, const void *key, uint32_t klen,
		       uint64_t limit, uint64_t *at)
{
	uint64_t head = hlog_load(&log->head), begin = hlog_load(&log->begin);
	while (a >= EM_LOG_START && a >= begin) {
		if (a < head) {
			*at = a;
			return CH_DISK;
		}
		struct record *r = hlog_rec(log, a);
		if (a < limit && rec_key_eq(r, key, klen)) {
			*at = a;
			return CH_FOUND;
		}
		a = rec_prev(r);
	}
	return CH_NONE;
}

static void decided(struct cand *c, int live)
{
	c->live = (uint8_t)live;
	c->pend = P_DONE;
}

/* A chain walk of c's step ended with res (chain_below's answer) at at. */
static void chain_result(struct cand *c, int res, uint64_t at)
{
	if (c->step == ST_SHADOW) {
		if (res == CH_FOUND) {
			decided(c, 0); /* the key has a hot record: its cold ones are shadowed */
		} else if (res == CH_NONE) {
			c->step = ST_COLD;
			c->next = LK_FROM_INDEX;
			c->pend = P_MEM;
		} else {
			c->next = at;
			c->pend = P_DISK;
		}
		return;
	}
	if (res == CH_FOUND)
		decided(c, at == c->addr);
	else if (res == CH_NONE)
		decided(c, 0);
	else if (at <= c->addr)
		decided(c, at == c->addr); /* the chain reaches the disk at the record, or skips it */
	else {
		c->next = at;
		c->pend = P_DISK;
	}
}

/* One memory step of c. Caller protected. */
static void resolve_mem(struct iter *it, struct cand *c)
{
	struct ember_db *db = it->db;
	const void *key = it->arena + c->koff;
	uint64_t a = c->next, at = 0;
	if (c->step != ST_COLD) {
		if (a == LK_FROM_INDEX) {
			uint64_t e = 0;
			if (!hi_find(&db->index, c->hash, &e)) {
				chain_result(c, CH_NONE, 0);
				return;
			}
			a = hot_chain(db, e);
		}
		int res = chain_below(db->hot, a, key, c->klen, it->t_hot, &at);
		chain_result(c, res, at);
		return;
	}
	if (a == LK_FROM_INDEX) {
		struct cold_index *ci = &db->cidx;
		uint64_t ca = ci_table_load(ci, ci_chunk_of(ci, c->hash));
		if (!ca) {
			decided(c, 0);
			return;
		}
		if (ca < hlog_load(&db->chunks->head)) {
			uint64_t id = ci_chunk_of(ci, c->hash);
			if (!it->snap_addr || it->snap_addr[id] != ca) {
				c->pend = P_DISK; /* the chunk is on disk: a lookup reads it */
				return;
			}
			/* the snapshot's words are the copy's: private, 8-byte aligned */
			a = ci_entry_in(ci,
					(const _Atomic uint64_t *)(const void *)(it->snap +
										 id * ci->chunk_bytes),
					c->hash);
		} else {
			a = ci_entry(ci, hlog_rec(db->chunks, ca), c->hash);
		}
		c->chunk_addr = ca;
		c->entry = a;
	}
	int res = chain_below(db->cold, a, key, c->klen, it->t_cold, &at);
	chain_result(c, res, at);
}

static void decide_done(void *ctx, struct lookup *l, int status, struct record *rec,
			int in_memory)
{
	(void)in_memory;
	struct iter *it = ctx;
	struct cand *c = &it->cand[l->user];
	if (status == EMBER_ENOTFOUND) {
		chain_result(c, CH_NONE, 0);
		return;
	}
	if (status < 0) {
		if (!it->err)
			it->err = status;
		decided(c, 0);
		return;
	}
	if (c->step == ST_COLD) {
		c->chunk_addr = l->chunk_addr;
		c->entry = l->entry;
	}
	uint64_t limit = c->step == ST_COLD ? it->t_cold : it->t_hot;
	if (l->found >= limit) {
		/* written after the snapshot: the key's record as of the snapshot is
		 * further down the chain (note 6) */
		uint64_t p = rec_prev(rec);
		if (p < EM_LOG_START) {
			chain_result(c, CH_NONE, 0);
			return;
		}
		c->next = p;
		c->pend = P_MEM;
		return;
	}
	chain_result(c, CH_FOUND, l->found);
}

/*
 * Hop reads (note 10): one record of a chain on disk per candidate and round, the
 * same address read once for every candidate waiting on it, all reads of a round
 * in flight together through the walk session's ring (idle between lookups_run
 * calls).
 */
struct hop {
	uint64_t addr;
	uint8_t cold;  /* which log */
	uint8_t done;  /* read, and whole (or as whole as the file allows) */
	uint8_t *buf;  /* EM_IO_ALIGN aligned */
	size_t cap;
	uint64_t off;  /* file offset of buf[0] */
	uint32_t len;  /* bytes asked for */
	uint64_t want; /* bytes of the record wanted from addr */
	int res;       /* bytes read, or -errno */
};

static void hop_cqe(void *ctx, uint64_t ud, int res)
{
	struct iter *it = ctx;
	it->hops[ud].res = res;
}

/* Read every hop of [0, nh) not done yet, all in flight together. */
static int hops_read(struct iter *it, size_t nh)
{
	ember_session *s = it->s;
	struct ember_db *db = it->db;
	size_t next = 0;
	for (;;) {
		while (next < nh && s->pool.ring.inflight < s->pool.ring.depth) {
			struct hop *h = &it->hops[next];
			if (h->done) {
				next++;
				continue;
			}
			uint64_t off = em_align_down(h->addr, EM_IO_ALIGN);
			uint64_t len = em_align_up(h->addr + h->want - off, EM_IO_ALIGN);
			if (len > UINT32_MAX - EM_IO_ALIGN)
				return EMBER_ECORRUPT;
			int rc = em_buf_reserve(&h->buf, &h->cap, len);
			if (rc < 0)
				return rc;
			h->off = off;
			h->len = (uint32_t)len;
			h->res = 0;
			rc = em_ring_read(&s->pool.ring, h->cold ? &db->cold_file : &db->hot_file, h->buf,
					      (uint32_t)len, off, next);
			if (rc < 0)
				return rc;
			next++;
		}
		if (!s->pool.ring.inflight)
			return 0;
		int rc = em_ring_submit(&s->pool.ring);
		if (rc == 0)
			rc = em_ring_reap(&s->pool.ring, 1, hop_cqe, it);
		if (rc < 0) {
			s->pool.broken = 1; /* reads may still be in flight: the session's end waits */
			return rc;
		}
	}
}

/* Is candidate x's hop before y's: by log, then address. */
static int hop_before(const struct cand *x, const struct cand *y)
{
	int xc = x->step == ST_COLD, yc = y->step == ST_COLD;
	return xc != yc ? xc < yc : x->next < y->next;
}

/* One round of hops for every candidate waiting on a disk address. */
static int hops_run(struct iter *it)
{
	struct ember_db *db = it->db;
	size_t m = 0, nh = 0;
	for (size_t i = 0; i < it->n; i++)
		if (it->cand[i].pend == P_DISK && it->cand[i].next != LK_FROM_INDEX)
			it->order[m++] = (uint32_t)i;
	if (!m)
		return 0;
	for (size_t j = 1; j < m; j++) { /* insertion sort: m <= GROUP */
		uint32_t x = it->order[j];
		size_t k = j;
		for (; k > 0 && hop_before(&it->cand[x], &it->cand[it->order[k - 1]]); k--)
			it->order[k] = it->order[k - 1];
		it->order[k] = x;
	}
	for (size_t j = 0; j < m; j++) {
		struct cand *c = &it->cand[it->order[j]];
		uint8_t cold = c->step == ST_COLD;
		if (nh && it->hops[nh - 1].addr == c->next && it->hops[nh - 1].cold == cold)
			continue;
		struct hop *h = &it->hops[nh++];
		h->addr = c->next;
		h->cold = cold;
		h->done = 0;
		h->want = FIRST_READ_MIN;
	}
	/* read every hop; one whose record is longer than its first read, again */
	for (int pass = 0; pass < 2; pass++) {
		int rc = hops_read(it, nh);
		if (rc < 0)
			return rc;
		int again = 0;
		for (size_t k = 0; k < nh; k++) {
			struct hop *h = &it->hops[k];
			if (h->done)
				continue;
			if (h->res < 0)
				return h->res;
			h->done = 1;
			uint64_t pos = h->addr - h->off;
			if (pass > 0 || pos + REC_HDR_SIZE > (uint64_t)h->res || (uint64_t)h->res < h->len)
				continue; /* a short read: judged below */
			struct record *r = (struct record *)(void *)(h->buf + pos);
			uint64_t size = rec_total_size(r);
			uint64_t max = (h->cold ? it->cold_c.file.rules.max_cap : it->hot_c.file.rules.max_cap) +
				       REC_HDR_SIZE;
			if (pos + size > (uint64_t)h->res && size <= max) {
				h->want = size;
				h->done = 0;
				again = 1;
			}
		}
		if (!again)
			break;
	}
	/* apply each hop to the candidates waiting on it */
	size_t k = 0;
	for (size_t j = 0; j < m; j++) {
		struct cand *c = &it->cand[it->order[j]];
		uint8_t cold = c->step == ST_COLD;
		while (it->hops[k].addr != c->next || it->hops[k].cold != cold)
			k++;
		struct hop *h = &it->hops[k];
		struct scan_cursor *view = cold ? &it->cold_c : &it->hot_c;
		uint64_t pos = h->addr - h->off;
		struct record *r = (struct record *)(void *)(h->buf + pos);
		const char *why = NULL;
		if (h->res < 0 || pos + REC_HDR_SIZE > (uint64_t)h->res)
			why = "the file ends inside the record";
		else if ((why = scan_rec_bad(view, h->addr, r, (uint64_t)h->res - pos,
					hlog_load(&view->log->flushed), 0)) != NULL)
			;
		else if (rec_header(r) & (REC_FILLER | REC_INVALID))
			why = "a chain link to a record that is not linked";
		if (why) {
			db_report(db, "iterate: %s offset %" PRIu64 ": %s", view->name, h->addr, why);
			return EMBER_ECORRUPT;
		}
		uint64_t limit = cold ? it->t_cold : it->t_hot;
		if (h->addr < limit && rec_key_eq(r, it->arena + c->koff, c->klen)) {
			chain_result(c, CH_FOUND, h->addr);
			continue;
		}
		uint64_t p = rec_prev(r);
		if (p < EM_LOG_START || p < hlog_load(&view->log->begin))
			chain_result(c, CH_NONE, 0);
		else
			chain_result(c, CH_DISK, p); /* below this record, so below head: on disk */
	}
	return 0;
}

/* Decide every candidate of the group (note 7). Caller unprotected. */
static int group_decide(struct iter *it)
{
	struct ember_db *db = it->db;
	for (;;) {
		epoch_protect(db->ep, it->s->slot);
		for (size_t i = 0; i < it->n; i++)
			while (it->cand[i].pend == P_MEM)
				resolve_mem(it, &it->cand[i]);
		epoch_unprotect(db->ep, it->s->slot);
		int rc = hops_run(it);
		if (rc < 0)
			return rc;
		size_t m = 0;
		for (size_t i = 0; i < it->n; i++) {
			struct cand *c = &it->cand[i];
			if (c->pend != P_DISK || c->next != LK_FROM_INDEX)
				continue; /* decided, or waiting for a memory step or a hop */
			int cold = c->step == ST_COLD;
			it->lk[m++] = (struct lookup){.key = it->arena + c->koff,
						      .klen = c->klen,
						      .phase = (uint8_t)(cold ? LK_COLD : LK_HOT),
						      .flags = (uint8_t)(cold ? LK_COLD_ONLY : LK_HOT_ONLY),
						      .hash = c->hash,
						      .addr = c->next,
						      .chunk_addr = c->chunk_addr,
						      .entry = c->entry,
						      .user = i};
			c->pend = P_MEM; /* decide_done moves it on */
		}
		if (!m) {
			int waiting = 0;
			for (size_t i = 0; i < it->n && !waiting; i++)
				waiting = it->cand[i].pend != P_DONE;
			if (!waiting)
				return 0;
			continue;
		}
		it->err = 0;
		rc = lookups_run(it->s, it->lk, m, decide_done, it);
		if (rc < 0)
			return rc;
		if (it->err == EMBER_ECORRUPT)
			db_report(db, "iterate: a liveness lookup read a damaged record");
		if (it->err)
			return it->err;
	}
}

/* Decide the group, hand its live records to fn, and empty it. */
static int group_flush(struct iter *it)
{
	int rc = group_decide(it);
	for (size_t i = 0; rc == 0 && i < it->n; i++) {
		struct cand *c = &it->cand[i];
		if (c->live)
			rc = it->fn(it->arg, it->arena + c->koff, c->klen, it->arena + c->voff, c->vlen);
	}
	it->n = 0;
	it->alen = 0;
	return rc;
}

/* Copy the record at a into the group as a candidate (tombstones are never emitted:
 * they are skipped here). in_memory: the cursor is protected and r is in the ring. */
static int group_add(struct iter *it, struct record *r, uint64_t a, int in_memory, int step)
{
	uint64_t hdr = rec_header(r);
	if (hdr & (REC_FILLER | REC_INVALID | REC_TOMBSTONE))
		return 0;
	uint32_t klen = r->key_len;
	int rc = arena_reserve(it, em_align_up(klen, 8) + r->val_cap);
	if (rc < 0)
		return rc;
	struct cand *c = &it->cand[it->n];
	*c = (struct cand){.addr = a, .next = LK_FROM_INDEX, .koff = it->alen, .klen = klen,
			   .step = (uint8_t)step, .pend = P_MEM};
	memcpy(it->arena + c->koff, rec_key(r), klen);
	c->voff = c->koff + em_align_up(klen, 8);
	size_t vlen = 0;
	if (in_memory) {
		/* the value may change in place: copy it under its sequence lock */
		if (rec_read_value(r, it->arena + c->voff, r->val_cap, &vlen) != 0)
			return 0; /* deleted in place meanwhile */
	} else {
		vlen = atomic_load_explicit(&r->val_len, memory_order_relaxed); /* a private copy */
		memcpy(it->arena + c->voff, rec_value(r), vlen);
	}
	c->vlen = (uint32_t)vlen;
	c->hash = em_hash(it->arena + c->koff, klen);
	it->alen = c->voff + vlen;
	it->n++;
	return 0;
}

/*
 * Note 12: copy the entries of every chunk whose current copy is on disk, with one
 * sequential pass over the chunk log's disk part, so that deciding a cold candidate
 * needs no chunk read. The table and the chunks stay as they are while compaction
 * pauses (note 5). Best effort: without memory for it (over SNAP_MAX) or after a
 * damaged chunk record, the chunks not copied are read by the lookups as usual
 * (which report real damage). Returns 0 or an I/O error.
 */
static int chunk_snapshot(struct iter *it)
{
	struct ember_db *db = it->db;
	struct cold_index *ci = &db->cidx;
	if (ci->nchunks > SNAP_MAX / ci->chunk_bytes)
		return 0;
	it->snap = em_alloc(ci->nchunks * ci->chunk_bytes);
	it->snap_addr = em_zalloc(ci->nchunks * sizeof(uint64_t));
	if (!it->snap || !it->snap_addr) {
		em_free(it->snap, 0);
		em_free(it->snap_addr, 0);
		it->snap = NULL;
		it->snap_addr = NULL;
		return 0;
	}
	struct scan_cursor cur;
	/* a record that starts below head is whole on disk (hlog.h, invariant 4) */
	scan_init(&cur, it->s, db->chunks, &db->chunk_file, "cold.idx", 1,
		    hlog_load(&db->chunks->head));
	int rc = 0;
	for (;;) {
		struct record *r = NULL;
		int k = scan_next(&cur, &r);
		if (k == CUR_END || k == EMBER_ECORRUPT)
			break;
		if (k < 0) {
			rc = k;
			break;
		}
		if (!(rec_header(r) & (REC_FILLER | REC_INVALID))) {
			uint64_t id;
			memcpy(&id, rec_key(r), sizeof(id)); /* < nchunks: scan_rec_bad checked */
			if (ci_table_load(ci, id) == cur.a) {
				memcpy(it->snap + id * ci->chunk_bytes, rec_value(r), ci->chunk_bytes);
				it->snap_addr[id] = cur.a;
			}
		}
		cur.a += rec_total_size(r);
	}
	scan_free(&cur);
	return rc;
}

/* Walk one log to its snapshot tail. */
static int iter_log(struct iter *it, struct hlog *log, struct em_file *f, const char *name,
		    uint64_t end, int step)
{
	struct scan_cursor cur;
	scan_init(&cur, it->s, log, f, name, 0, end);
	int rc = 0;
	for (;;) {
		struct record *r = NULL;
		int k = scan_next(&cur, &r);
		if (k == CUR_END)
			break;
		if (k < 0) {
			rc = k;
			if (k == EMBER_ECORRUPT)
				db_report(it->db, "iterate: %s offset %" PRIu64 ": %s", name, cur.a, cur.why);
			break;
		}
		rc = group_add(it, r, cur.a, k == CUR_MEM, step);
		if (rc < 0)
			break;
		cur.a += rec_total_size(r);
		if (it->n == GROUP || it->alen >= GROUP_BYTES) {
			scan_pause(&cur);
			rc = group_flush(it);
			if (rc != 0)
				break;
		}
	}
	scan_free(&cur);
	if (rc == 0 && it->n)
		rc = group_flush(it);
	it->n = 0;
	it->alen = 0;
	return rc;
}

/* The stores this thread is walking, innermost first: a walk's fn may walk another
 * store, so this is a stack of frames on the walkers' own stacks. ember_iterate
 * called (however deep) from the fn of a walk of the same store would wait for
 * the pass_mu that walk holds: it gets EMBER_ESTATE instead. */
struct walk_frame {
	struct ember_db *db;
	struct walk_frame *outer;
};
static _Thread_local struct walk_frame *walking;

static int walking_over(const struct ember_db *db)
{
	for (const struct walk_frame *f = walking; f; f = f->outer)
		if (f->db == db)
			return 1;
	return 0;
}

int ember_iterate(ember_db *db, ember_iter_fn fn, void *arg)
{
	if (!db || db->magic != DB_MAGIC || !fn)
		return EMBER_EINVAL;
	if (walking_over(db))
		return EMBER_ESTATE;
	struct iter it = {.db = db, .fn = fn, .arg = arg};
	int rc = scan_session(db, &it.st, &it.s);
	if (rc < 0)
		return rc;
	it.cand = em_alloc(sizeof(*it.cand) * GROUP);
	it.lk = em_alloc(sizeof(*it.lk) * GROUP);
	it.hops = em_zalloc(sizeof(*it.hops) * GROUP);
	it.order = em_alloc(sizeof(*it.order) * GROUP);
	scan_init(&it.hot_c, it.s, db->hot, &db->hot_file, "hot.log", 0, 0);
	scan_init(&it.cold_c, it.s, db->cold, &db->cold_file, "cold.log", 0, 0);
	if (!it.cand || !it.lk || !it.hops || !it.order) {
		rc = EMBER_ENOMEM;
		goto undo_alloc;
	}
	struct compactor *comp = db->comp;
	if (comp)
		pthread_mutex_lock(&comp->pass_mu); /* note 5 */
	struct walk_frame frame = {db, walking};
	walking = &frame;
	it.t_hot = hlog_load(&db->hot->tail);
	it.t_cold = hlog_load(&db->cold->tail);
	epoch_wait_safe(db->ep);
	rc = iter_log(&it, db->hot, &db->hot_file, "hot.log", it.t_hot, ST_HOT);
	if (rc == 0 && it.t_cold > hlog_load(&db->cold->begin))
		rc = chunk_snapshot(&it);
	if (rc == 0)
		rc = iter_log(&it, db->cold, &db->cold_file, "cold.log",
			      it.t_cold, ST_SHADOW);
	walking = frame.outer;
	if (comp)
		pthread_mutex_unlock(&comp->pass_mu);
undo_alloc:
	/* first: the session's ring ends (and with it any read into a hop buffer) */
	session_free_internal(it.s);
	for (size_t i = 0; it.hops && i < GROUP; i++)
		em_free(it.hops[i].buf, it.hops[i].cap);
	em_free(it.hops, 0);
	em_free(it.order, 0);
	em_free(it.snap, 0);
	em_free(it.snap_addr, 0);
	em_free(it.arena, it.acap);
	em_free(it.lk, 0);
	em_free(it.cand, 0);
	return rc;
}
