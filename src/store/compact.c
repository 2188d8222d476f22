/*
 * compact.c - lookup-based compaction (hot->cold, cold->cold, chunk log) and its
 * background thread.
 *
 * Design notes
 * ------------
 * A pass scans the oldest part of one log, [begin, until) with until at or below
 * the log's head (that part is on disk only), record by record, in groups.
 *
 *  1. Liveness: a record R of key K at address a is live iff the newest record of K
 *     in R's log is R: a lookup restricted to that log (LK_HOT_ONLY for the hot log,
 *     LK_COLD_ONLY for the cold log) finds K first at a. In the hot log, an entry
 *     whose chain starts at a itself decides it without the lookup: every record
 *     of K is linked in front of the older ones, so nothing of K lies above a. Anything newer of K above
 *     a makes R dead; a chain that never reaches a (R was never linked) too. A cold
 *     record is also dead when K has any record in the hot log: reads stop there,
 *     and that record reaches the cold log later as K's newest (so deletes free
 *     cold space without waiting for their tombstones to leave the hot log).
 *  2. Hot->cold: live records and live tombstones are appended to the cold log as
 *     the newest of their cold chain (cold_insert, COLD_ANY). A newer hot version of
 *     K written meanwhile shadows the copy (reads look at the hot log first), and it
 *     can only reach the cold log in a later pass, after this copy: cold chains keep
 *     versions in order.
 *  3. Cold->cold: live records are re-appended at the cold tail only if the chain's
 *     entry is still the one the liveness lookup started from (cold_insert with
 *     expected): if anything was linked into the chain meanwhile, liveness is
 *     decided again. Live tombstones are dropped: every older record of K lies
 *     below them, inside the range being discarded.
 *  4. Chunk log: a chunk copy at a is live iff the cold table points to a; it is
 *     copied to the tail and linked by CAS on the table (a lost race means a newer
 *     copy exists: fine).
 *  5. Only after every live record of [begin, new_begin) has a copy does begin move
 *     (atomic max). Disk readers read unprotected: one that still chases an address
 *     below the new begin finds the record gone (or the space released) and
 *     restarts from the index (lookup.c, note 2). The epoch wait before clearing
 *     hot index entries (by CAS) orders the copies before anyone can see a cleared
 *     entry, and lets a thread that checked begin while protected rely on no entry
 *     being cleared until it leaves (the ABA check in ember_rmw and rc_insert).
 *  6. Large records (HEAD_MIN and up, hot and cold logs) are scanned by their
 *     heads: once the window holds the header and key (checked by rec_check_head),
 *     the scan moves on by the size the header gives, and after such a record the
 *     window's next read is small (HEAD_READ, doubling back to WINDOW while the
 *     records it finds are small), so the values of large records are mostly
 *     not read; only a record found live is read
 *     whole (cand_load), checked like any scanned record, and copied. Liveness
 *     lookups read heads only too (lookup.c, note 8). So a pass over a log of
 *     large, mostly overwritten values (the graph buffer's write-backs) reads what
 *     it keeps, not what it drops. A dead record's checksum is never checked: its
 *     bytes are dropped unread. What is trusted unchecked is its size; a damaged
 *     size moves the scan into the middle of other data, where the next head fails
 *     rec_check_head (and a small record its checksum) with all but certainty, and the
 *     pass stops with EMBER_ECORRUPT before begin moves.
 *  7. Insert order: a group's live candidates are inserted in slices. Before a
 *     slice, chunks_prefetch reads the on-disk chunks it will update, all in
 *     flight, and copies them to the chunk log's tail; it takes at most as many as
 *     half the chunk log's mutable region holds, so the copies are still mutable
 *     (updated in place) when the slice's inserts reach them. Within a slice, a
 *     candidate whose chunk is in the chunk log's fuzzy region goes last
 *     (group_insert): its insert would only wait for the region to settle. Any
 *     order is right: a hot pass has at most one live record per key (note 1:
 *     every record it scans was linked before it began, and the lookup finds one
 *     newest), so its inserts touch distinct keys (note 2); cold->cold inserts
 *     are conditional (note 3).
 *
 * Triggers: a log's used size is tail - begin. A pass starts when it passes
 * trigger (80%) of its budget and compacts down to 60%; a user write that finds
 * the hot or cold log past 100% runs passes itself (compact_assist), so disk use
 * stays bounded even when the background thread falls behind.
 */
#include "store/compact.h"
#include "store/checkpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "store/store_int.h"

#define GROUP 256 /* candidates decided together: liveness lookups and chunk reads in flight */
#define WINDOW (4u << 20)
#define HEAD_MIN (128u << 10) /* records this large are scanned by their heads (note 6) */
#define HEAD_READ (16u << 10) /* the window's first read after such a record */
#define TRIGGER 0.8
#define TARGET 0.6

struct cand {
	uint64_t addr;
	struct record *rec; /* in the window, or head (note 6) */
	uint64_t hash;
	uint64_t entry;
	int live;
	int late; /* its chunk was in the chunk log's fuzzy region: inserted last */
	uint8_t *head; /* a copy of the record's head only, or NULL: rec is whole */
};

struct scan {
	ember_session *s;
	struct hlog *log;
	struct compactor *c;
	struct sync_src src;
	struct rec_cursor cur; /* its window is the compactor's buf while the pass runs */
};

/* The next record at or after *a and below until. Returns 1 (record in *out at
 * address *a; *head_only: only its head is in the window, note 6), 0 (range done;
 * *a = where the next record would start), 2 (the window must move: process
 * pending candidates first, then call again with may_move), or an error. */
static int scan_next(struct scan *sc, uint64_t *a, uint64_t until, int may_move,
		     struct record **out, int *head_only)
{
	uint64_t x = hlog_skip_gap(sc->log, *a);
	*a = x;
	*head_only = 0;
	if (x >= until)
		return 0;
	int rc = rec_cursor_get(&sc->cur, x, may_move, out, head_only);
	if (rc == EMBER_ECORRUPT)
		db_report(sc->s->db, "%s at offset %llu: %s (compaction scan)",
			  log_file_name(sc->s->db, sc->log), (unsigned long long)x, sc->cur.why);
	return rc;
}

struct live_ctx {
	struct cand *cand;
	int phase;
	int rc; /* the first lookup that failed (not "not found"): decides nothing */
};

static void live_done(void *ctx, struct lookup *l, int status, struct record *rec, int in_memory)
{
	(void)rec;
	(void)in_memory;
	struct live_ctx *lc = ctx;
	struct cand *c = &lc->cand[l->user];
	if (status < 0 && status != EMBER_ENOTFOUND && !lc->rc)
		lc->rc = status;
	c->live = status == 0 && l->phase == lc->phase && l->found == c->addr;
	c->entry = l->entry;
}

/* Cold->cold: a key that has any record in the hot log (a newer value or a
 * tombstone) makes every cold record of it dead: reads never get past the hot one. */
static void shadow_done(void *ctx, struct lookup *l, int status, struct record *rec, int in_memory)
{
	(void)rec;
	(void)in_memory;
	struct live_ctx *lc = ctx;
	if (status < 0 && status != EMBER_ENOTFOUND && !lc->rc)
		lc->rc = status;
	lc->cand[l->user].live = status != 0; /* not in hot: still a candidate */
}

static void lookup_for(struct lookup *l, struct cand *c, size_t user, int phase, int flags)
{
	struct record *r = c->rec;
	*l = (struct lookup){.key = rec_key(r),
			     .klen = r->key_len,
			     .phase = (uint8_t)phase,
			     .flags = (uint8_t)(flags | LK_KEY_ONLY), /* lookup.c note 8 */
			     .hash = c->hash,
			     .addr = LK_FROM_INDEX,
			     .user = user};
}

/* Decide liveness of every candidate (each step's lookups all in flight). */
static int group_liveness(ember_session *s, struct cand *cand, size_t n, int kind,
			  struct lookup *lk)
{
	struct live_ctx lc = {cand, kind == COMPACT_HOT ? LK_HOT : LK_COLD, 0};
	int rc;
	if (kind == COMPACT_HOT) {
		/* note 1, without a read: a hot chain whose head is the candidate itself has
		 * nothing of its key above it (the common case for keys written once) */
		struct ember_db *db = s->db;
		size_t m = 0;
		epoch_protect(db->ep, s->slot);
		for (size_t i = 0; i < n; i++) {
			uint64_t e = 0;
			if (hi_find(&db->index, cand[i].hash, &e) && !(e & HI_TENTATIVE) &&
			    hot_chain(db, e) == cand[i].addr) {
				cand[i].live = 1;
				continue;
			}
			lookup_for(&lk[m++], &cand[i], i, LK_HOT, LK_HOT_ONLY);
		}
		epoch_unprotect(db->ep, s->slot);
		rc = m ? lookups_run(s, lk, m, live_done, &lc) : 0;
		return rc < 0 ? rc : lc.rc;
	}
	for (size_t i = 0; i < n; i++)
		lookup_for(&lk[i], &cand[i], i, LK_HOT, LK_HOT_ONLY);
	rc = lookups_run(s, lk, n, shadow_done, &lc);
	if (rc < 0 || lc.rc < 0)
		return rc < 0 ? rc : lc.rc;
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (cand[i].live)
			lookup_for(&lk[m++], &cand[i], i, LK_COLD, LK_COLD_ONLY);
	rc = m ? lookups_run(s, lk, m, live_done, &lc) : 0;
	return rc < 0 ? rc : lc.rc;
}

static int chunk_copy(struct compactor *c, ember_session *s, uint64_t a, struct record *r,
		      int count);

struct prefetch_ctx {
	struct compactor *c;
	ember_session *s;
	int rc;
};

static void prefetch_done(void *ctx, struct lookup *l, int status, struct record *rec,
			  int in_memory)
{
	(void)in_memory;
	struct prefetch_ctx *p = ctx;
	if (status == 0 && p->rc == 0)
		p->rc = chunk_copy(p->c, p->s, l->addr, rec, 0);
}

static int lk_by_addr(const void *a, const void *b)
{
	uint64_t x = ((const struct lookup *)a)->addr, y = ((const struct lookup *)b)->addr;
	return x < y ? -1 : x > y;
}

/*
 * Bring the on-disk chunks that the live candidates from `from` on will update
 * into the chunk log's memory, with all their reads in flight together, in
 * address order (a copy at the chunk log's tail, linked by CAS): the cold inserts
 * that follow then update chunks in memory instead of reading them one by one.
 * At most max_reads chunks are brought in, so that their copies are still in the
 * chunk log's mutable region when the inserts reach them (an insert into a copy
 * that turned read-only makes yet another copy). Returns the candidate index at
 * which it stopped (n: all covered), or an error.
 */
static long chunks_prefetch(struct compactor *c, ember_session *s, struct cand *cand, size_t from,
			    size_t n, size_t max_reads, struct lookup *lk)
{
	struct ember_db *db = c->db;
	struct cold_index *ci = &db->cidx;
	uint64_t head = hlog_load(&db->chunks->head);
	size_t m = 0, i;
	for (i = from; i < n; i++) {
		if (!cand[i].live)
			continue;
		uint64_t chunk = ci_chunk_of(ci, cand[i].hash);
		uint64_t ca = ci_table_load(ci, chunk);
		/* a chunk in memory, or in the chunk cache, is copied without a read */
		if (!ca || ca >= head || ci_cache_read(ci, chunk, ca, 0, 0, NULL))
			continue;
		if (m == max_reads)
			break;
		/* duplicates (two candidates of one chunk) go after the sort below */
		lk[m++] = (struct lookup){.key = NULL, .klen = 0, .phase = LK_CHUNK,
					  .flags = LK_CHUNK_ONLY, .hash = cand[i].hash,
					  .addr = ca, .user = i};
	}
	if (!m)
		return (long)i;
	qsort(lk, m, sizeof(*lk), lk_by_addr);
	size_t u = 1;
	for (size_t j = 1; j < m; j++)
		if (lk[j].addr != lk[u - 1].addr)
			lk[u++] = lk[j];
	struct prefetch_ctx p = {c, s, 0};
	int rc = lookups_run(s, lk, u, prefetch_done, &p);
	rc = rc < 0 ? rc : p.rc;
	return rc < 0 ? rc : (long)i;
}

/*
 * The whole record of a live candidate taken by its head (note 6), read into the
 * compactor's own buffer (cold_insert may use the session's): it must be the record
 * the head described, and pass every check a scanned record passes.
 */
static int cand_load(struct compactor *c, struct scan *sc, struct cand *cd, struct record **out)
{
	struct record *h = cd->rec, *r = NULL;
	struct rec_rules ru = sc->cur.rules;
	ru.key = rec_key(h);
	ru.klen = h->key_len;
	const char *why = NULL;
	int rc = rec_read_at(session_read_fn, &sc->src, em_file_read_align(sc->src.f), &c->rbuf,
			     &c->rcap, cd->addr, rec_total_size(h), &ru, &r, &why);
	if (rc == 0 && (rec_header(r) != rec_header(h) || r->val_cap != h->val_cap)) {
		why = "not the record its head described";
		rc = EMBER_ECORRUPT;
	}
	if (rc == EMBER_ECORRUPT)
		db_report(sc->s->db, "%s at offset %llu: %s (compaction copy)",
			  log_file_name(sc->s->db, sc->log), (unsigned long long)cd->addr, why);
	if (rc < 0)
		return rc;
	*out = r;
	return 0;
}


/* Copy one candidate to the cold log if it is live (notes 2, 3, 6). */
static int cand_insert(struct compactor *c, struct scan *sc, struct cand *cd, int kind,
		       struct lookup *lk)
{
	struct ember_db *db = c->db;
	ember_session *s = sc->s;
	struct record *r = cd->rec;
	int rc;
	if (cd->live && cd->head && !(kind == COMPACT_COLD && (rec_header(r) & REC_TOMBSTONE))) {
		rc = cand_load(c, sc, cd, &r);
		if (rc < 0)
			return rc;
	}
	while (cd->live) {
		if (kind == COMPACT_COLD && (rec_header(r) & REC_TOMBSTONE)) {
			stat_add(&c->st.tombstones_dropped, 1);
			break;
		}
		epoch_protect(db->ep, s->slot);
		rc = cold_insert(s, cd->hash, r, kind == COMPACT_HOT ? COLD_ANY : cd->entry);
		epoch_unprotect(db->ep, s->slot);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			stat_add(&c->st.records_moved[kind], 1);
			stat_add(&c->st.bytes_written[kind], rec_total_size(r));
			if (kind == COMPACT_HOT && (rec_header(r) & REC_TOMBSTONE))
				c->stuck_used[COMPACT_COLD] = 0; /* deletes: cold can shrink */
			break;
		}
		/* the cold chain changed under us: decide again for this one */
		rc = group_liveness(s, cd, 1, kind, lk);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int group_insert(struct compactor *c, struct scan *sc, struct cand *cand, size_t lo,
			size_t hi, int kind, struct lookup *lk);

static int group_process(struct compactor *c, struct scan *sc, struct cand *cand, size_t n,
			 int kind, struct lookup *lk)
{
	struct ember_db *db = c->db;
	ember_session *s = sc->s;
	int rc = group_liveness(s, cand, n, kind, lk);
	if (rc < 0)
		return rc;
	/* half the chunk log's mutable region: the prefetched copies stay mutable
	 * while the inserts of their slice run (chunks_prefetch) */
	size_t max_reads = db->chunks->mutable_bytes / 2 / rec_size(8, db->cidx.chunk_bytes);
	if (max_reads == 0)
		max_reads = 1;
	for (size_t lo = 0, hi; lo < n; lo = hi) {
		long next = chunks_prefetch(c, s, cand, lo, n, max_reads, lk);
		if (next < 0)
			return (int)next;
		hi = (size_t)next > lo ? (size_t)next : lo + 1;
		rc = group_insert(c, sc, cand, lo, hi, kind, lk);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The cold inserts of the live candidates [lo, hi) of a group (note 2, 3). */
static int group_insert(struct compactor *c, struct scan *sc, struct cand *cand, size_t lo,
			size_t hi, int kind, struct lookup *lk)
{
	ember_session *s = sc->s;
	int rc;
	/* a candidate whose chunk is in the chunk log's fuzzy region would wait for
	 * it to settle: it goes after the rest of the slice, by when it mostly has */
	size_t late = 0;
	for (size_t i = lo; i < hi; i++) {
		if (cand[i].live && cold_chunk_fuzzy(s, cand[i].hash)) {
			cand[i].late = 1;
			late++;
			continue;
		}
		rc = cand_insert(c, sc, &cand[i], kind, lk);
		if (rc < 0)
			return rc;
	}
	for (size_t i = lo; i < hi && late; i++) {
		if (!cand[i].late)
			continue;
		late--;
		rc = cand_insert(c, sc, &cand[i], kind, lk);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int chunk_copy(struct compactor *c, ember_session *s, uint64_t a, struct record *r,
		      int count)
{
	struct ember_db *db = c->db;
	struct cold_index *ci = &db->cidx;
	uint64_t id;
	memcpy(&id, rec_key(r), 8);
	if (!ci_chunk_ok(ci, r, id & ci->chunk_mask) || ci_table_load(ci, id) != a)
		return 0; /* dead (or not a chunk of this table) */
	uint64_t size = rec_total_size(r);
	epoch_protect(db->ep, s->slot);
	uint64_t na;
	int rc = 0;
	while (!(na = hlog_alloc(db->chunks, size))) {
		rc = hlog_wait(db->chunks, size, s->slot);
		if (rc)
			goto out;
	}
	struct record *nr = hlog_rec(db->chunks, na);
	rec_init(nr, 0, 0, rec_key(r), 8, rec_value(r), ci->chunk_bytes, ci->chunk_bytes);
	uint64_t expect = a;
	/* release: the copy is visible before the table names it */
	if (atomic_compare_exchange_strong_explicit(&ci->table[id], &expect, na, memory_order_release,
						    memory_order_relaxed)) {
		if (count) {
			stat_add(&c->st.records_moved[COMPACT_CHUNKS], 1);
			stat_add(&c->st.bytes_written[COMPACT_CHUNKS], size);
		}
	} else {
		/* relaxed: never published */
		atomic_fetch_or_explicit(&nr->header, REC_INVALID, memory_order_relaxed);
	}
out:
	epoch_unprotect(db->ep, s->slot);
	return rc;
}

static void clean_hot_index(struct ember_db *db, uint64_t begin)
{
	struct hash_index *hi = &db->index;
	for (uint64_t b = 0; b < hi->nbuckets; b++) {
		for (struct hi_bucket *k = &hi->table[b]; k;) {
			for (int i = 0; i < HI_SLOTS; i++) {
				/* relaxed: the CAS below re-validates */
				uint64_t e = atomic_load_explicit(&k->entry[i], memory_order_relaxed);
				if (e && !(e & (HI_TENTATIVE | HI_READCACHE)) && hi_entry_addr(e) < begin)
					/* relaxed: a failed CAS means a writer got there first */
					atomic_compare_exchange_strong_explicit(&k->entry[i], &e, 0,
										memory_order_relaxed,
										memory_order_relaxed);
			}
			/* acquire: see the overflow bucket's contents */
			uint64_t id = atomic_load_explicit(&k->overflow, memory_order_acquire);
			k = id ? &atomic_load_explicit(&hi->chunks[(id - 1) >> HI_CHUNK_BITS],
						       memory_order_acquire)[(id - 1) & ((1u << HI_CHUNK_BITS) - 1)]
			       : NULL;
		}
	}
}

static struct hlog *kind_log(struct ember_db *db, int kind)
{
	return kind == COMPACT_HOT ? db->hot : kind == COMPACT_COLD ? db->cold : db->chunks;
}

static uint64_t kind_budget(struct ember_db *db, int kind)
{
	return kind == COMPACT_HOT ? db->hot_budget : kind == COMPACT_COLD ? db->cold_budget
									    : db->chunk_budget;
}

/* Free the head copies of n candidates (note 6). */
static void cands_free(struct cand *cand, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (cand[i].head)
			em_free(cand[i].head, rec_head_size(cand[i].rec));
		cand[i].head = NULL;
	}
}

/* One pass over [begin, until) of one log. */
static int compact_pass(struct compactor *c, ember_session *s, int kind, uint64_t until)
{
	struct ember_db *db = c->db;
	struct hlog *log = kind_log(db, kind);
	struct em_file *f = kind == COMPACT_HOT ? &db->hot_file
			    : kind == COMPACT_COLD ? &db->cold_file : &db->chunk_file;
	struct scan sc = {.s = s, .log = log, .c = c, .src = {s, f}};
	struct rec_rules ru = {.log = log, .max_cap = log_max_record(db, log), .fillers = 1};
	rec_cursor_init(&sc.cur, &ru, session_read_fn, &sc.src, WINDOW, 1);
	sc.cur.buf = c->buf; /* lent for the pass, given back at out */
	sc.cur.cap = c->cap;
	sc.cur.next_want = HEAD_READ;
	if (kind != COMPACT_CHUNKS) {
		sc.cur.head_min = HEAD_MIN;
		sc.cur.head_read = HEAD_READ;
	}
	struct cand *cand = em_alloc(sizeof(*cand) * GROUP);
	struct lookup *lk = em_alloc(sizeof(*lk) * GROUP);
	int rc = 0;
	if (!cand || !lk) {
		rc = EMBER_ENOMEM;
		goto out;
	}
	uint64_t begin = hlog_load(&log->begin);
	uint64_t a = begin;
	size_t n = 0, n_win = 0; /* candidates; those whose records are in the window */
	/* relaxed: only passes (serialised by pass_mu) add to it */
	uint64_t written_before = atomic_load_explicit(&c->st.bytes_written[kind], memory_order_relaxed);
	for (;;) {
		struct record *r = NULL;
		int head_only = 0;
		rc = scan_next(&sc, &a, until, n_win == 0, &r, &head_only);
		if (rc == 2 || rc == 0 || (rc == 1 && n == GROUP)) {
			if (n) {
				int prc = group_process(c, &sc, cand, n, kind, lk);
				cands_free(cand, n);
				n = n_win = 0;
				if (prc < 0) {
					rc = prc;
					break;
				}
			}
			if (rc == 0)
				break;
			if (rc == 2)
				continue;
		}
		if (rc < 0)
			break;
		uint64_t size = rec_total_size(r);
		stat_add(&c->st.bytes_scanned[kind], size);
		if (!(rec_header(r) & (REC_FILLER | REC_INVALID))) {
			stat_add(&c->st.records_scanned[kind], 1);
			if (kind == COMPACT_CHUNKS) {
				rc = chunk_copy(c, s, a, r, 1);
				if (rc < 0)
					break;
			} else {
				struct cand cd = {a, r, em_hash(rec_key(r), r->key_len), 0, 0, 0, NULL};
				if (head_only) { /* the window moves on: keep a copy of the head */
					cd.head = em_alloc(rec_head_size(r));
					if (!cd.head) {
						rc = EMBER_ENOMEM;
						break;
					}
					memcpy(cd.head, r, rec_head_size(r));
					cd.rec = (struct record *)(void *)cd.head;
				} else {
					n_win++;
				}
				cand[n++] = cd;
			}
		}
		a += size;
	}
	cands_free(cand, n);
	if (rc < 0)
		goto out;
	/* every live record of [begin, a) has its copy: drop the range */
	if (a > begin) {
		/* a pass that rewrote almost all it scanned into the same log found it full
		 * of live data: stop retrying until the log has grown */
		uint64_t rewritten = kind == COMPACT_HOT ? 0
				     : atomic_load_explicit(&c->st.bytes_written[kind], memory_order_relaxed) -
					       written_before;
		uint64_t freed = (a - begin) > rewritten ? (a - begin) - rewritten : 0;
		c->stuck_used[kind] = freed < (a - begin) / 16 ? hlog_load(&log->tail) - a : 0;
		atomic_fetch_add_explicit(&c->st.passes[kind], 1, memory_order_relaxed); /* statistic */
		uint64_t cur = hlog_load(&log->begin);
		/* release: the copies happen before the range is given up */
		while (cur < a && !atomic_compare_exchange_weak_explicit(&log->begin, &cur, a,
									 memory_order_release,
									 memory_order_relaxed))
			;
		epoch_wait_safe(db->ep);
		/* give the file space back, as far as no checkpoint needs it */
		int prc = ckpt_release(db, kind, a, &s->pool.ring);
		if (prc < 0)
			rc = prc;
		if (kind == COMPACT_HOT)
			clean_hot_index(db, a);
	}
out:
	c->buf = sc.cur.buf;
	c->cap = sc.cur.cap;
	em_free(cand, 0);
	em_free(lk, 0);
	return rc;
}

/* How far the hot and cold logs are past their hard limits, in bytes. */
static uint64_t over_limit(struct ember_db *db)
{
	uint64_t over = 0;
	for (int kind = COMPACT_HOT; kind <= COMPACT_COLD; kind++) {
		struct hlog *log = kind_log(db, kind);
		uint64_t budget = kind_budget(db, kind);
		uint64_t used = hlog_load(&log->tail) - hlog_load(&log->begin);
		if (budget && used > budget)
			over += used - budget;
	}
	return over;
}

int compact_over_hard_limit(struct ember_db *db) { return over_limit(db) != 0; }

/* A counter that moves whenever a pass does work (records scanned or moved). */
static uint64_t compaction_work(struct compactor *c)
{
	uint64_t w = 0;
	for (int k = 0; k < 3; k++)
		/* relaxed: a progress hint */
		w += atomic_load_explicit(&c->st.records_scanned[k], memory_order_relaxed) +
		     atomic_load_explicit(&c->st.records_moved[k], memory_order_relaxed);
	return w;
}

/* Where a pass over kind should stop, 0 if none is due. */
static uint64_t pass_until(struct ember_db *db, int kind, int force)
{
	struct hlog *log = kind_log(db, kind);
	uint64_t budget = kind_budget(db, kind);
	uint64_t begin = hlog_load(&log->begin), tail = hlog_load(&log->tail);
	uint64_t head = em_page_floor(hlog_load(&log->head), log->page_bits);
	uint64_t used = tail - begin;
	uint64_t until;
	if (force) {
		until = head;
	} else {
		if (!budget || (double)used < TRIGGER * (double)budget)
			return 0;
		if (db->comp->stuck_used[kind] && used < db->comp->stuck_used[kind] + budget / 8)
			return 0; /* full of live data last time: wait until it grows */
		until = begin + (used - (uint64_t)(TARGET * (double)budget));
	}
	if (until > head)
		until = head;
	return until > begin ? until : 0;
}

int compact_run(struct ember_db *db, ember_session *s, int kind, int force)
{
	struct compactor *c = db->comp;
	int ran = 0;
	if (db->readonly)
		return 0; /* a read-only store never writes its files */
	pthread_mutex_lock(&c->pass_mu);
	for (int k = COMPACT_HOT; k <= COMPACT_CHUNKS; k++) {
		if (kind >= 0 && k != kind)
			continue;
		uint64_t until = pass_until(db, k, force);
		if (!until)
			continue;
		int rc = compact_pass(c, s, k, until);
		if (rc < 0) {
			int expect = 0;
			/* relaxed: a sticky flag */
			atomic_compare_exchange_strong_explicit(&c->error, &expect, rc, memory_order_relaxed,
								memory_order_relaxed);
			pthread_mutex_unlock(&c->pass_mu);
			return rc;
		}
		ran = 1;
		/* relaxed: a sticky flag; a pass that worked ends the error */
		atomic_store_explicit(&c->error, 0, memory_order_relaxed);
	}
	pthread_mutex_unlock(&c->pass_mu);
	return ran;
}

static void compactor_kick(struct compactor *c)
{
	pthread_mutex_lock(&c->mu);
	c->kicked = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

int compact_assist(ember_session *s)
{
	struct ember_db *db = s->db;
	struct compactor *c = db->comp;
	compactor_kick(c);
	uint64_t best = over_limit(db);
	uint64_t work = compaction_work(c);
	int strikes = 0;
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (best) {
		int err = atomic_load_explicit(&c->error, memory_order_relaxed); /* sticky flag */
		if (err)
			return err;
		int ran = 0;
		if (pthread_mutex_trylock(&c->pass_mu) == 0) {
			pthread_mutex_unlock(&c->pass_mu);
			stat_add(&c->st.assists, 1);
			s->cur = &s->comp_st; /* this I/O is compaction's, not a user read's */
			int rc = compact_run(db, s, -1, 0);
			s->cur = &s->st;
			if (rc < 0)
				return rc;
			ran = rc;
		}
		if (!ran) {
			/* another thread's pass, or nothing on disk yet: let it progress */
			struct timespec ts = {0, 200000};
			nanosleep(&ts, NULL);
		}
		uint64_t over = over_limit(db);
		if (over < best) {
			best = over;
			strikes = 0;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			continue;
		}
		/* a pass that is still scanning (another thread's) is progress too, and
		 * so is a checkpoint holding the passes back */
		uint64_t w = compaction_work(c);
		if (!ran && (w != work || ckpt_active(db))) {
			work = w;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			continue;
		}
		/* no progress: live data fills the budgets, so compaction cannot make
		 * room (three whole passes of our own that freed nothing, or five seconds
		 * in which no pass scanned a record) */
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((ran && ++strikes >= 3) || now.tv_sec - t0.tv_sec >= 5)
			return EMBER_ENOSPC;
	}
	return 0;
}

static void *compactor_main(void *arg)
{
	struct compactor *c = arg;
	struct ember_db *db = c->db;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		int stop = c->stop;
		c->kicked = 0;
		pthread_mutex_unlock(&c->mu);
		if (stop)
			break;
		int ran = compact_run(db, c->s, -1, 0);
		if (ran > 0)
			continue;
		pthread_mutex_lock(&c->mu);
		if (!c->kicked && !c->stop) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 5 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&c->cv, &c->mu, &ts);
		}
		pthread_mutex_unlock(&c->mu);
	}
	return NULL;
}

int compactor_start(struct ember_db *db)
{
	struct compactor *c = em_zalloc(sizeof(*c));
	if (!c)
		return EMBER_ENOMEM;
	c->db = db;
	int rc = session_create(db, 1, &c->s);
	if (rc < 0)
		goto undo_alloc;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_mutex_init(&c->pass_mu, NULL);
	db->comp = c;
	rc = -pthread_create(&c->thread, NULL, compactor_main, c);
	if (rc < 0)
		goto undo_session;
	c->started = 1;
	return 0;
undo_session:
	db->comp = NULL;
	pthread_mutex_destroy(&c->pass_mu);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	session_destroy(c->s);
undo_alloc:
	em_free(c, sizeof(*c));
	return rc;
}

void compactor_stop(struct ember_db *db)
{
	struct compactor *c = db->comp;
	if (!c)
		return;
	if (c->started) {
		pthread_mutex_lock(&c->mu);
		c->stop = 1;
		pthread_cond_signal(&c->cv);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->thread, NULL);
	}
	session_destroy(c->s);
	pthread_mutex_destroy(&c->pass_mu);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	em_free(c->buf, c->cap);
	em_free(c->rbuf, c->rcap);
	em_free(c, sizeof(*c));
	db->comp = NULL;
}

int ember_compact(ember_db *db, int force)
{
	if (!db || db->magic != DB_MAGIC)
		return EMBER_EINVAL;
	if (db->readonly)
		return EMBER_EREADONLY;
	ember_session *s;
	int rc = session_create(db, 1, &s);
	if (rc < 0)
		return rc;
	rc = compact_run(db, s, -1, force);
	session_free_internal(s);
	return rc < 0 ? rc : 0;
}
