/*
 * oracle.c - the embedding cache's plan: Belady's rule over a lookahead window.
 *
 * Design notes
 * ============
 * Batches are numbered in push order. For every batch the plan says which slot
 * each of its distinct rows occupies while the batch is trained, and, for each row
 * not already in a slot (a miss), which row it displaces. The rule is Belady's:
 * evict the row whose next use is farthest away, a row with no known next use
 * counting as infinitely far (ties among those: least recently used first). The
 * oracle knows a row's next use only within the batches linked so far (the
 * window); with a window as long as the whole trace, the plan is Belady's MIN.
 *
 * Per-row state: one 64-bit word per row of every table, zero at first:
 *   0               never seen (or seen and never planned into a slot);
 *   (q + 1) << 32 | k   OCC: the row's latest linked occurrence is uniq[k] of
 *                   batch q, not yet planned;
 *   s + 1 (< 2^32)  SLOT: when its latest occurrence was planned, the row went
 *                   into slot s with no next use known; a hint, valid while slot
 *                   s still holds the row (the slot's owner says so: victims'
 *                   words are never written, they go stale).
 * Per slot: its row (owner), its bucket key (next use or "never"), the position
 * npos of that next use in its batch, its last planned use lu.
 * Per linked, unplanned occurrence (batch q, index k): next[k] (the row's next
 * occurrence, batch and index) and slot[k] (the slot the row will be found in
 * when q is planned, or ORACLE_NONE: a miss, as far as the plan knows now).
 *
 * Linking batch q (one random access per distinct row into the per-row state):
 *   A. per id (oracle_link_part): the word says OCC(q, k): a duplicate within q,
 *      its index is k (the dedupe costs no other state); else the row is new to
 *      q: append it to uniq, keep the old word in a scratch array (in b->miss),
 *      write OCC(q, k). An error here (row out of range, too many distinct rows)
 *      puts the old words back: nothing else was written yet.
 *   B. per distinct row (link_finish), from the old word: OCC(q', k') -> the
 *      earlier occurrence learns its next use: next[k'] of q' = (q, k); its slot
 *      is settled when q' is planned. SLOT(s) and slot s holds the row -> it is
 *      resident, last use planned, next use unknown until now: it leaves "never"
 *      (its entry goes stale) for bucket q, npos = k, and slot[k] of q = s.
 *      Otherwise the row is not resident: slot[k] of q = ORACLE_NONE.
 * So every occurrence learns its next use, and its slot, in O(1) when they become
 * known: a row's slot is written into its next occurrence when the current one
 * is planned (pass 3) or when it is linked (B, from "never"), and cleared there
 * when the row is evicted from a bucket (pass 2).
 *
 * Why victims are cheap to find. Resident rows sit in buckets by next use: one
 * intrusive list per batch of the window (ring of `ring` heads, since every next
 * use lies within [planned, linked) and linked - planned <= ring) and one FIFO
 * queue "never" for rows with no known next use, in the order their last use was
 * planned. The victim is the head of "never" if any, else the first row of the
 * highest non-empty bucket above the batch being planned; `hi` remembers the
 * highest bucket that may be non-empty, so the scan is amortised O(1). Rows join
 * a bucket at its end (B1), so its list is ordered by last use.
 *
 * Planning batch p (oracle_plan), no access to the per-row state but one write
 * for rows with no next use:
 *   1. rows with slot[k] set are hits (they sit in bucket p); the others are
 *      misses (a sequential pass over slot[]);
 *   2. each miss takes a never-used slot or evicts a victim (never one of p's
 *      rows: they are in bucket p or not resident, and the search stops above
 *      p); a victim from bucket q' clears slot[npos] of q' (its next occurrence
 *      will miss); a victim's word is left stale;
 *   3. every row of p records p as its slot's last use and moves to the bucket of
 *      its next use, writing its slot into that occurrence's slot[] (npos), or
 *      to the tail of "never", writing SLOT(s) into its word; bucket p is then
 *      empty.
 *
 * Pinned rows. In the cache, the rows of batches planned but not yet released are
 * pinned: evicting one delays its admission until the trainer releases that batch,
 * and the trainer may then wait for the fetch. The victim search therefore takes
 * (1) the head of "never" if it is not pinned (the queue is ordered by last use,
 * so if its head is pinned, all of it is); else (2) the first unpinned row found
 * by walking the buckets from the highest down (at most PIN_SCAN entries per
 * distinct row of the batch, over the whole plan; one walk per plan, each victim's
 * search resuming where the last one stopped; by B1 a pinned row placed by a plan
 * ends the walk of its bucket); else
 * (3) the head of "never", pinned; else (4) the top of the highest bucket. With
 * nothing pinned (the simulator) this is exactly Belady's choice; with pins it
 * trades a few fetches (a row with a known next use instead of a pinned one with
 * none) for admissions that need not wait.
 *
 * Ties go least recently used first: among rows with no next use in the window
 * ("never") and among rows with the same next use (one bucket), the victim is the
 * one whose last use (batch lu, then index lpos in it) is oldest: the order LRU
 * keeps. That makes a one-batch window exactly LRU, and any window never worse
 * than LRU on any trace (nothing pinned; docs/cache.md, "The oracle against LRU
 * and LFU"): LRU (batch semantics, as sim.c) holds row r at batch t iff fewer
 * than `capacity` other rows were used more recently than r's last use s. If
 * the oracle evicts r while planning some u in (s, t), its slots are full, and
 * each other row it holds, and the row admitted, was used more recently than r:
 * rows of u; rows with a known next use, which is before t (either r's next use
 * t is unknown, beyond every known one, or r is the farthest, ties going least
 * recent first); rows in "never" behind r. That is `capacity` rows, so LRU
 * misses r at t too: every LRU hit is an oracle hit.
 *
 * Invariants (checked by oracle_check):
 *   I1. At most `capacity` rows have a slot (slots >= nused were never used);
 *       no two slots hold the same row. A slot's row has word SLOT(the slot) and
 *       key "never", or word OCC(q, k) with planned <= q < linked, uniq[k] of q
 *       the row, and a finite key.
 *   I2. Between plans, every used slot is in exactly one place: the list of
 *       bucket key (planned <= key < linked) or, with key ORACLE_NONE, the "never"
 *       queue as its one entry whose generation equals the slot's.
 *   I3. A finite bucket's list holds exactly the slots whose key is that batch
 *       (no stale entries: a slot leaves bucket q only by being planned at q,
 *       which empties q, or by being taken out as a victim); tail is its last.
 *   B1. Bucket q's list holds first the rows that linking q moved there from
 *       "never" (their lu < lkp[q], `planned` when q was linked: bucket q was
 *       empty until then), then the rows that plans placed there, in the order
 *       of those plans (lu nondecreasing, >= lkp[q]). So the unpinned-row scan,
 *       meeting a pinned row placed by a plan, knows the rest of the list is
 *       pinned: it costs O(buckets + pinned rows placed by linking) per plan,
 *       not a walk over every pinned row for every victim.
 *   I4. A slot's lu is the last planned batch that used its row; an admission's
 *       vlast is the victim's lu, so the caller can hold the physical eviction
 *       until every batch up to vlast is done with the row.
 *   I5. "never" entries whose generation differs from their slot's are stale (the
 *       slot moved since); the queue is compacted before it could overflow its
 *       2 x capacity + 1 entries, so link and plan never allocate.
 *   I6. Words OCC(q, k) only name unplanned batches, and the row's latest
 *       linked occurrence (its next[k] is none). Each linked, unplanned
 *       occurrence's next, if any, names a later one of the same row.
 *   I7. slot[k] of a linked, unplanned batch q is s exactly when slot s has key
 *       q and npos k (then s holds uniq[k]); so a row's next occurrence knows its
 *       slot, and one further on does not (it is ORACLE_NONE there).
 *
 * Cost: link is one random access per distinct row to its word (ids that repeat
 * within the batch find their row's line in the CPU cache) plus one to the
 * earlier occurrence's `next` or to the row's slot; plan is, per distinct row,
 * one to its slot and one to its next occurrence's slot[] or its word, plus per
 * miss the victim's slot and O(1) amortised bucket work. No hashing, no
 * allocation, no division (ring positions are masks: the ring is rounded up to a
 * power of two). Every random access whose address is known ahead is prefetched
 * a fixed distance ahead in the walk that needs it, so their misses overlap.
 */
#include "cache/oracle.h"

#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"
#include "ember.h"

/* Per-row words (see above). */
#define W_OCC(q, k) ((uint64_t)((q) + 1u) << 32 | (uint32_t)(k))
#define W_IS_OCC(w) (((w) >> 32) != 0)
#define W_OCC_SEQ(w) ((uint32_t)((w) >> 32) - 1u)

struct oslot {
	uint32_t gen;   /* changes whenever the slot's key changes (I5) */
	uint32_t key;   /* bucket: next use batch, or ORACLE_NONE ("never") */
	uint32_t lu;    /* last planned use (I4), ORACLE_NONE before the first */
	uint32_t lpos;  /* the row's index in batch lu's uniq[]: (lu, lpos) orders
			   rows by recency, as LRU does (B1) */
	uint32_t npos;  /* key finite: the row's index in batch key's uniq[] (I7) */
	uint32_t pad_;
	uint64_t tr;    /* the row: table << 48 | row (rows < 2^48, tables < 2^16) */
};

#define TR(table, row) ((uint64_t)(table) << 48 | (row))
#define TR_TABLE(tr) ((uint32_t)((tr) >> 48))
#define TR_ROW(tr) ((tr) & (((uint64_t)1 << 48) - 1))

/* A row linking moves from "never" to a bucket: its recency key (lu, lpos). */
struct omove {
	uint64_t key;
	uint32_t slot;
	uint32_t pad_;
};

/* Zeroed memory; regions of BIG_MIN bytes or more are their own mapping, aligned
 * to 2 MiB and advised to use huge pages (a random walk over them would otherwise
 * miss the TLB on most accesses); smaller ones come from the allocator. */
struct bigmem {
	void *p;
	void *map;       /* the mapping (NULL: p is from em_zalloc) */
	size_t bytes, map_bytes;
};

struct oracle {
	uint32_t ntables;
	uint64_t *rows;
	uint64_t total_rows;
	uint64_t **rowst;          /* [ntables]: each table's words, inside rowst_mem */
	struct bigmem rowst_mem;   /* every table's per-row words, one region */
	struct bigmem slot_mem;
	uint32_t capacity;
	uint32_t nused; /* slots handed out so far; slots >= nused were never used */
	struct oslot *slot;
	uint32_t *nextb;           /* [capacity]: next slot in its bucket's list (apart
				      from the slots: walking a list stays in a compact
				      array, and the slots it reaches can be prefetched) */
	struct bigmem nextb_mem;
	uint32_t ring;
	uint32_t rmask;            /* ring rounded up to a power of two, minus 1 */
	uint32_t *head;            /* [rmask + 1]: first of each finite bucket's list */
	uint32_t *tail;            /* [rmask + 1]: its last (ORACLE_NONE: empty) */
	uint32_t *lkp;             /* [rmask + 1]: `planned` when the bucket's batch was
				      linked (B1) */
	struct obatch **pending;   /* [rmask + 1]: linked, unplanned batches by seq & rmask */
	uint64_t *never;           /* entries: slot | gen << 32 */
	uint32_t never_head, never_n, never_cap;
	uint32_t planned, linked;
	uint32_t hi; /* highest finite bucket that may be non-empty */
	struct urow *lk_uniq;      /* oracle_link_begin's uniq[] (writable), and */
	uint32_t lk_max;           /* its size */
	struct omove *mv, *mv_tmp; /* [capacity]: link's moves out of "never", sorted */
	uint32_t sc_q, sc_prev;    /* pass 2's scan for unpinned rows: the bucket, and
				      the last pinned entry passed in it (ORACLE_NONE:
				      none yet); sc_q <= the batch planned: done */
	uint32_t sc_pf, sc_fresh;  /* the entry SC_AHEAD behind the scan's (its slot
				      prefetched), or NONE; 1: not set for this bucket */
};

/* How far ahead the walks over a batch's rows prefetch their random accesses. */
#define PF_AHEAD 16
/* How far ahead of pass 2's scan of a bucket list its slots are prefetched. */
#define SC_AHEAD 16
/* How far ahead oracle_link_part prefetches the word of an id, in tables of at
 * least PF_MIN_ROWS rows (2 MiB of words; smaller ones stay in the CPU cache). */
#define PF_IDS 16
#define PF_MIN_ROWS ((uint64_t)1 << 18)

/* oracle_link_part's per-id outputs (luidx, the ids' copy) are read again only
 * when the batch is planned or trained, a window later: streaming stores write
 * them around the CPU cache, without reading their lines first (measured on the
 * bench machine: the copy and luidx of a 426k-id batch, 1.0 -> 0.47 ms). */
#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#define STORE_NT64(p, v) _mm_stream_si64((long long *)(void *)(p), (long long)(v))
#define STORE_NT32(p, v) _mm_stream_si32((int *)(void *)(p), (int)(v))
#define STORE_FENCE() _mm_sfence()
#else
#define STORE_NT64(p, v) (*(p) = (v))
#define STORE_NT32(p, v) (*(p) = (v))
#define STORE_FENCE() ((void)0)
#endif
/* Regions of at least this many bytes get a mapping of their own (huge pages). */
#define BIG_MIN ((size_t)2 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)
/* Bucket entries the victim searches of one plan walk at most looking for unpinned
 * rows: PIN_SCAN per distinct row of the batch (bounds the plan's cost at a few
 * more accesses per row when most resident rows are pinned). */
#define PIN_SCAN 8

static inline uint64_t never_entry(uint32_t s, uint32_t gen)
{
	return (uint64_t)s | (uint64_t)gen << 32;
}

static int big_zalloc(struct bigmem *m, size_t bytes)
{
	m->bytes = bytes;
	if (bytes < BIG_MIN) {
		m->p = em_zalloc(bytes ? bytes : 1);
		return m->p ? 0 : EMBER_ENOMEM;
	}
	m->map_bytes = bytes + HUGE_ALIGN;
	void *a = mmap(NULL, m->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (a == MAP_FAILED)
		return EMBER_ENOMEM;
	m->map = a;
	m->p = (void *)(((uintptr_t)a + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
	madvise(m->p, bytes, MADV_HUGEPAGE); /* a hint: without it, 4 KiB pages */
	return 0;
}

static void big_free(struct bigmem *m)
{
	if (m->map)
		munmap(m->map, m->map_bytes);
	else if (m->p)
		em_free(m->p, m->bytes ? m->bytes : 1);
	m->p = m->map = NULL;
}

int oracle_create(struct oracle **out, uint32_t ntables, const uint64_t *rows,
		  uint64_t capacity, uint32_t ring)
{
	if (!out || ntables == 0 || ntables > 65535 || !rows || capacity == 0 ||
	    capacity > ORACLE_MAX_CAPACITY || ring == 0)
		return EMBER_EINVAL;
	/* bucket and batch ring indices by mask, not by a division per row: any
	 * size >= ring keeps the keys [planned, linked) apart */
	uint32_t rsz = 1;
	while (rsz < ring && rsz < (1u << 31))
		rsz <<= 1;
	if (rsz < ring)
		return EMBER_EINVAL;
	*out = NULL;
	int rc = EMBER_ENOMEM;
	struct oracle *o = em_zalloc(sizeof(*o));
	if (!o)
		return EMBER_ENOMEM;
	o->ntables = ntables;
	o->capacity = (uint32_t)capacity;
	o->ring = ring;
	o->rmask = rsz - 1;
	o->rows = em_zalloc(ntables * sizeof(uint64_t));
	o->rowst = em_zalloc(ntables * sizeof(*o->rowst));
	if (big_zalloc(&o->slot_mem, capacity * sizeof(struct oslot)) < 0)
		goto undo_alloc;
	o->slot = o->slot_mem.p;
	if (big_zalloc(&o->nextb_mem, capacity * sizeof(uint32_t)) < 0)
		goto undo_alloc;
	o->nextb = o->nextb_mem.p;
	o->head = em_alloc((size_t)rsz * sizeof(uint32_t));
	o->tail = em_alloc((size_t)rsz * sizeof(uint32_t));
	o->lkp = em_zalloc((size_t)rsz * sizeof(uint32_t));
	o->pending = em_zalloc((size_t)rsz * sizeof(*o->pending));
	o->never_cap = (uint32_t)(2 * capacity + 1 > UINT32_MAX ? UINT32_MAX : 2 * capacity + 1);
	o->never = em_alloc((size_t)o->never_cap * sizeof(uint64_t));
	o->mv = em_alloc(capacity * sizeof(struct omove));
	o->mv_tmp = em_alloc(capacity * sizeof(struct omove));
	if (!o->rows || !o->rowst || !o->head || !o->tail || !o->lkp || !o->pending || !o->never ||
	    !o->mv || !o->mv_tmp)
		goto undo_alloc;
	uint64_t total = 0;
	for (uint32_t t = 0; t < ntables; t++) {
		if (rows[t] == 0 || rows[t] > (uint64_t)1 << 48) {
			rc = EMBER_EINVAL;
			goto undo_alloc;
		}
		if (rows[t] > SIZE_MAX / sizeof(uint64_t) - total)
			goto undo_alloc; /* more state than memory can hold: ENOMEM */
		o->rows[t] = rows[t];
		total += rows[t];
	}
	o->total_rows = total;
	/* one region for every table (one mapping, however many tables); anonymous
	 * memory is zero and mapped lazily: untouched rows cost nothing */
	if (big_zalloc(&o->rowst_mem, total * sizeof(uint64_t)) < 0)
		goto undo_alloc;
	for (uint64_t t = 0, at = 0; t < ntables; at += rows[t], t++)
		o->rowst[t] = (uint64_t *)o->rowst_mem.p + at;
	for (uint32_t r = 0; r < rsz; r++)
		o->head[r] = o->tail[r] = ORACLE_NONE;
	for (uint64_t s = 0; s < capacity; s++) {
		o->slot[s].key = ORACLE_NONE;
		o->slot[s].lu = ORACLE_NONE;
		o->nextb[s] = ORACLE_NONE;
	}
	*out = o;
	return 0;

undo_alloc:
	oracle_destroy(o);
	return rc;
}

void oracle_destroy(struct oracle *o)
{
	if (!o)
		return;
	big_free(&o->rowst_mem);
	big_free(&o->slot_mem);
	big_free(&o->nextb_mem);
	em_free(o->rows, 0);
	em_free(o->rowst, 0);
	em_free(o->head, 0);
	em_free(o->tail, 0);
	em_free(o->lkp, 0);
	em_free(o->pending, 0);
	em_free(o->never, 0);
	em_free(o->mv, 0);
	em_free(o->mv_tmp, 0);
	em_free(o, sizeof(*o));
}

/* Slot s joins the end of bucket q's list (B1). */
static inline void bucket_push(struct oracle *o, uint32_t s, uint32_t q)
{
	uint32_t i = q & o->rmask;
	o->slot[s].key = q;
	o->slot[s].gen++;
	o->nextb[s] = ORACLE_NONE;
	if (o->tail[i] == ORACLE_NONE)
		o->head[i] = s;
	else
		o->nextb[o->tail[i]] = s;
	o->tail[i] = s;
	if (q > o->hi)
		o->hi = q;
}

/* I5: drop stale entries, keeping the order of the valid ones. */
static void never_compact(struct oracle *o)
{
	uint32_t w = 0;
	for (uint32_t i = o->never_head; i < o->never_n; i++) {
		uint64_t e = o->never[i];
		if (i + PF_AHEAD < o->never_n) /* the slots are random: overlap their misses */
			__builtin_prefetch(&o->slot[(uint32_t)o->never[i + PF_AHEAD]]);
		if (o->slot[(uint32_t)e].gen == (uint32_t)(e >> 32))
			o->never[w++] = e;
	}
	o->never_head = 0;
	o->never_n = w;
}

static inline void never_push(struct oracle *o, uint32_t s)
{
	o->slot[s].key = ORACLE_NONE;
	o->slot[s].gen++;
	o->never[o->never_n++] = never_entry(s, o->slot[s].gen);
}

/* The scratch array of old words between the two link passes (in b->miss, which
 * planning fills later: 24 bytes an entry, of which linking uses 8). */
static inline uint64_t *link_prev(struct obatch *b)
{
	return (uint64_t *)(void *)b->miss;
}

/* What pass B will touch for an old word w: prefetch it. (always_inline: a
 * helper that only prefetches looks pure to GCC, which then drops its calls.) */
static inline __attribute__((always_inline)) void prefetch_prev(const struct oracle *o, uint64_t w)
{
	if (W_IS_OCC(w))
		__builtin_prefetch(&o->pending[W_OCC_SEQ(w) & o->rmask]->next[(uint32_t)w], 1);
	else if (w != 0)
		__builtin_prefetch(&o->slot[(uint32_t)w - 1], 1);
}

/* Sort a[0..n) by key (LSD radix, 8 bits a pass; passes whose digit is the same
 * in every key are skipped: keys of nearby batches share their high bytes). */
static struct omove *sort_moves(struct omove *a, struct omove *tmp, uint32_t n)
{
	if (n <= 32) { /* insertion sort */
		for (uint32_t i = 1; i < n; i++) {
			struct omove x = a[i];
			uint32_t j = i;
			for (; j > 0 && a[j - 1].key > x.key; j--)
				a[j] = a[j - 1];
			a[j] = x;
		}
		return a;
	}
	uint32_t cnt[8][256];
	memset(cnt, 0, sizeof(cnt));
	for (uint32_t i = 0; i < n; i++)
		for (int d = 0; d < 8; d++)
			cnt[d][(a[i].key >> (8 * d)) & 0xff]++;
	for (int d = 0; d < 8; d++) {
		if (cnt[d][(a[0].key >> (8 * d)) & 0xff] == n)
			continue; /* one digit value: the pass would not move anything */
		uint32_t at = 0;
		for (int v = 0; v < 256; v++) {
			uint32_t c = cnt[d][v];
			cnt[d][v] = at;
			at += c;
		}
		for (uint32_t i = 0; i < n; i++)
			tmp[cnt[d][(a[i].key >> (8 * d)) & 0xff]++] = a[i];
		struct omove *t = a;
		a = tmp;
		tmp = t;
	}
	return a;
}

/* Pass B of linking (see the design notes): the old words in link_prev(b). */
static void link_finish(struct oracle *o, struct obatch *b)
{
	uint32_t q = b->seq;
	const uint64_t *prev = link_prev(b);
	o->pending[q & o->rmask] = b;
	o->lkp[q & o->rmask] = o->planned; /* B1: bucket q is empty until now */
	uint32_t nmv = 0;
	for (uint32_t k = 0; k < b->nuniq; k++) {
		if (k + PF_AHEAD < b->nuniq)
			prefetch_prev(o, prev[k + PF_AHEAD]);
		uint64_t w = prev[k];
		b->next[k].seq = ORACLE_NONE;
		b->next[k].pos = 0;
		b->slot[k] = ORACLE_NONE;
		if (W_IS_OCC(w)) {
			/* the earlier occurrence is still unplanned (I6): it learns its
			 * next use; this one's slot is settled when that one is planned */
			struct onext *e = &o->pending[W_OCC_SEQ(w) & o->rmask]->next[(uint32_t)w];
			e->seq = q;
			e->pos = k;
		} else if (w != 0) {
			uint32_t s = (uint32_t)w - 1;
			struct oslot *v = &o->slot[s];
			const struct urow *u = &b->uniq[k];
			if (v->tr == TR(u->table, u->row)) {
				/* resident, last use planned, next use unknown until now:
				 * it leaves "never" for bucket q, below */
				v->npos = k;
				b->slot[k] = s;
				o->mv[nmv++] = (struct omove){.key = (uint64_t)v->lu << 32 | v->lpos,
							      .slot = s};
			}
		}
	}
	/* B1: they join bucket q least recently used first (their "never" entries go
	 * stale); at most nuniq <= capacity of them */
	const struct omove *mv = sort_moves(o->mv, o->mv_tmp, nmv);
	for (uint32_t i = 0; i < nmv; i++)
		bucket_push(o, mv[i].slot, q);
	o->linked = q + 1;
}

void oracle_link(struct oracle *o, struct obatch *b)
{
	uint32_t q = b->seq;
	uint64_t *prev = link_prev(b);
	for (uint32_t k = 0; k < b->nuniq; k++) {
		const struct urow *u = &b->uniq[k];
		if (k + PF_AHEAD < b->nuniq) { /* overlap the random accesses' misses */
			const struct urow *f = &b->uniq[k + PF_AHEAD];
			__builtin_prefetch(&o->rowst[f->table][f->row], 1);
		}
		uint64_t *w = &o->rowst[u->table][u->row];
		prev[k] = *w;
		*w = W_OCC(q, k);
	}
	link_finish(o, b);
}

void oracle_link_begin(struct oracle *o, struct obatch *b, struct urow *uniq, uint32_t max_uniq)
{
	b->nuniq = 0;
	b->uniq = uniq;
	o->lk_uniq = uniq;
	o->lk_max = max_uniq;
}

/* oracle_link_part's loop over the ids; pf: prefetch the words ahead (a constant
 * in each call, so the compiler makes two loops: a small table's words stay in the
 * CPU cache, and prefetching them only costs instructions). */
static inline __attribute__((always_inline)) int
link_ids(uint64_t *ws, uint64_t nrows, uint64_t *prev, struct urow *uniq, uint32_t *nup,
	 uint32_t max, uint32_t q1, uint32_t table, size_t n, const uint64_t *rows,
	 uint32_t *luidx, int pf)
{
	const uint64_t tag = (uint64_t)q1 << 32;
	uint32_t nu = *nup;
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (pf && i + PF_IDS < n && rows[i + PF_IDS] < nrows) /* overlap the misses */
			__builtin_prefetch(&ws[rows[i + PF_IDS]], 1);
		const uint64_t r = rows[i];
		if (r >= nrows) {
			rc = EMBER_EINVAL;
			break;
		}
		const uint64_t w = ws[r];
		if ((uint32_t)(w >> 32) == q1) { /* a duplicate within the batch */
			STORE_NT32(&luidx[i], (uint32_t)w);
			continue;
		}
		/* new to the batch (a branch: measured faster than writing entry nu
		 * for every id without one) */
		if (nu == max) {
			rc = EMBER_ETOOBIG;
			break;
		}
		prev[nu] = w;
		uniq[nu] = (struct urow){.table = table, .row = r};
		ws[r] = tag | nu;
		STORE_NT32(&luidx[i], nu);
		nu++;
	}
	*nup = nu;
	return rc;
}

int oracle_link_part(struct oracle *o, struct obatch *b, uint32_t table, size_t n,
		     const uint64_t *rows, uint32_t *luidx, uint64_t *ids)
{
	if (ids) /* the copy first: a tight loop, and the main one keeps its registers */
		for (size_t j = 0; j < n; j++)
			STORE_NT64(&ids[j], rows[j]);
	uint32_t nu = b->nuniq;
	int rc = o->rows[table] >= PF_MIN_ROWS
			 ? link_ids(o->rowst[table], o->rows[table], link_prev(b), o->lk_uniq, &nu,
				    o->lk_max, b->seq + 1, table, n, rows, luidx, 1)
			 : link_ids(o->rowst[table], o->rows[table], link_prev(b), o->lk_uniq, &nu,
				    o->lk_max, b->seq + 1, table, n, rows, luidx, 0);
	STORE_FENCE(); /* the streaming stores are weakly ordered: complete them before
			  the caller publishes the batch to another thread */
	b->nuniq = nu;
	return rc;
}

void oracle_link_end(struct oracle *o, struct obatch *b)
{
	o->lk_uniq = NULL;
	link_finish(o, b);
}

void oracle_link_abort(struct oracle *o, struct obatch *b)
{
	const uint64_t *prev = link_prev(b);
	for (uint32_t k = 0; k < b->nuniq; k++)
		o->rowst[b->uniq[k].table][b->uniq[k].row] = prev[k];
	b->nuniq = 0;
	o->lk_uniq = NULL;
}

/* The slot of the resident row to evict while planning batch p (pass 2). */
static uint32_t pop_victim(struct oracle *o, uint32_t p, uint32_t pinned, uint64_t *budget)
{
	/* (1), (3): the head of "never" (stale entries dropped on the way) */
	while (o->never_head < o->never_n) {
		uint64_t e = o->never[o->never_head];
		uint32_t s = (uint32_t)e;
		if (o->slot[s].gen != (uint32_t)(e >> 32)) {
			o->never_head++;
			continue;
		}
		if (o->slot[s].lu < pinned || pinned == ORACLE_NONE) {
			o->never_head++;
			return s;
		}
		break; /* pinned, and so is the rest of the queue */
	}
	/* (2): an unpinned row in the highest buckets, the scan resuming where the
	 * previous victim of this plan left it (entries passed are pinned and stay
	 * so for the plan; pass 2 adds no bucket entries) */
	while (o->sc_q > p && *budget > 0) {
		uint32_t q = o->sc_q, i = q & o->rmask;
		uint32_t *link = o->sc_prev == ORACLE_NONE ? &o->head[i] : &o->nextb[o->sc_prev];
		uint32_t s = *link;
		if (s == ORACLE_NONE) {
			if (o->sc_prev == ORACLE_NONE && q == o->hi)
				o->hi = q - 1; /* the top bucket is empty: never scan it again */
			o->sc_q = q - 1;
			o->sc_prev = ORACLE_NONE;
			o->sc_fresh = 1;
			continue;
		}
		/* the slots the next victims will be read from: keep them in flight */
		if (o->sc_fresh) {
			uint32_t x = s;
			for (int d = 0; d < SC_AHEAD && x != ORACLE_NONE; d++)
				if ((x = o->nextb[x]) != ORACLE_NONE)
					__builtin_prefetch(&o->slot[x], 1);
			o->sc_pf = x;
			o->sc_fresh = 0;
		} else if (o->sc_pf != ORACLE_NONE &&
			   (o->sc_pf = o->nextb[o->sc_pf]) != ORACLE_NONE) {
			__builtin_prefetch(&o->slot[o->sc_pf], 1);
		}
		(*budget)--;
		const struct oslot *v = &o->slot[s];
		if (v->lu < pinned || pinned == ORACLE_NONE) {
			*link = o->nextb[s];
			if (o->tail[i] == s)
				o->tail[i] = o->sc_prev;
			return s;
		}
		if (v->lu >= o->lkp[i]) {
			/* B1: a row placed by a plan, pinned: the rest of the list was
			 * placed by the same or later plans, pinned too */
			o->sc_q = q - 1;
			o->sc_prev = ORACLE_NONE;
			o->sc_fresh = 1;
			continue;
		}
		o->sc_prev = s;
	}
	/* (3) */
	if (o->never_head < o->never_n)
		return (uint32_t)o->never[o->never_head++];
	/* (4) */
	for (uint32_t q = o->hi; q > p; q--) {
		uint32_t *h = &o->head[q & o->rmask];
		if (*h != ORACLE_NONE) {
			uint32_t s = *h;
			*h = o->nextb[s];
			if (*h == ORACLE_NONE)
				o->tail[q & o->rmask] = ORACLE_NONE;
			o->hi = q;
			return s;
		}
	}
	o->hi = p;
	return ORACLE_NONE;
}

/* Pass 3's random accesses for row k of b: prefetch them (always_inline: see
 * prefetch_prev). */
static inline __attribute__((always_inline)) void prefetch_place(const struct oracle *o, const struct obatch *b, uint32_t k)
{
	__builtin_prefetch(&o->slot[b->slot[k]], 1);
	const struct onext *nx = &b->next[k];
	if (nx->seq == ORACLE_NONE)
		__builtin_prefetch(&o->rowst[b->uniq[k].table][b->uniq[k].row], 1);
	else
		__builtin_prefetch(&o->pending[nx->seq & o->rmask]->slot[nx->pos], 1);
}

void oracle_plan(struct oracle *o, struct obatch *b, uint32_t pinned)
{
	uint32_t p = b->seq;
	uint32_t nmiss = 0;
	uint64_t budget = (uint64_t)PIN_SCAN * b->nuniq + 64;
	o->sc_q = o->hi;
	o->sc_prev = ORACLE_NONE;
	o->sc_fresh = 1;

	/* pass 1: hits were told their slot (I7: they sit in bucket p) */
	for (uint32_t k = 0; k < b->nuniq; k++) {
		b->miss[nmiss].uidx = k; /* without a branch: hits and misses mix at random */
		nmiss += b->slot[k] == ORACLE_NONE;
	}

	/* pass 2: admissions, each into a never-used slot or a victim's */
	for (uint32_t m = 0; m < nmiss; m++) {
		struct omiss *mi = &b->miss[m];
		const struct urow *u = &b->uniq[mi->uidx];
		uint32_t s;
		if (o->nused < o->capacity) {
			s = o->nused++;
			mi->vtable = ORACLE_NONE;
			mi->vrow = 0;
			mi->vlast = ORACLE_NONE;
		} else {
			/* the victims to come are mostly the next entries of "never" */
			if (o->never_head + PF_AHEAD < o->never_n)
				__builtin_prefetch(&o->slot[(uint32_t)o->never[o->never_head +
									 PF_AHEAD]], 1);
			s = pop_victim(o, p, pinned, &budget);
			/* the caller guarantees nuniq <= capacity, so a victim exists */
			struct oslot *v = &o->slot[s];
			mi->vtable = TR_TABLE(v->tr);
			mi->vrow = TR_ROW(v->tr);
			mi->vlast = v->lu;
			if (v->key != ORACLE_NONE) /* I7: its next occurrence will miss */
				o->pending[v->key & o->rmask]->slot[v->npos] = ORACLE_NONE;
			v->gen++;
			v->key = ORACLE_NONE;
		}
		o->slot[s].tr = TR(u->table, u->row);
		mi->slot = s;
		b->slot[mi->uidx] = s;
	}
	b->nmiss = nmiss;

	/* pass 3: every row of p moves to the bucket of its next use, which learns
	 * its slot, or to "never", its word keeping the slot */
	o->head[p & o->rmask] = o->tail[p & o->rmask] = ORACLE_NONE;
	if (o->never_n + b->nuniq > o->never_cap)
		never_compact(o);
	for (uint32_t k = 0; k < b->nuniq; k++) {
		if (k + PF_AHEAD < b->nuniq)
			prefetch_place(o, b, k + PF_AHEAD);
		uint32_t s = b->slot[k];
		const struct onext nx = b->next[k];
		o->slot[s].lu = p;
		o->slot[s].lpos = k;
		if (nx.seq == ORACLE_NONE) {
			never_push(o, s);
			o->rowst[b->uniq[k].table][b->uniq[k].row] = (uint64_t)s + 1;
		} else {
			bucket_push(o, s, nx.seq);
			o->slot[s].npos = nx.pos;
			o->pending[nx.seq & o->rmask]->slot[nx.pos] = s;
		}
	}
	o->pending[p & o->rmask] = NULL;
	o->planned = p + 1;
	if (o->hi < o->planned)
		o->hi = o->planned;
}

void oracle_prefault(struct oracle *o)
{
	volatile uint8_t *p = (volatile uint8_t *)o->rowst_mem.p;
	for (size_t off = 0; off < o->rowst_mem.bytes; off += 4096)
		p[off] = 0; /* zero is the state it already holds */
}

uint64_t oracle_resident(const struct oracle *o)
{
	return o->nused;
}

uint32_t oracle_planned(const struct oracle *o)
{
	return o->planned;
}

uint32_t oracle_linked(const struct oracle *o)
{
	return o->linked;
}

static int check(const struct oracle *o, uint8_t *held)
{
	if (o->nused > o->capacity || o->linked - o->planned > o->rmask + 1)
		return -__LINE__;
	/* I1: owners in range and distinct; each owner's word */
	for (uint32_t s = 0; s < o->nused; s++) {
		const struct oslot *v = &o->slot[s];
		uint32_t vt = TR_TABLE(v->tr);
		uint64_t vr = TR_ROW(v->tr);
		if (vt >= o->ntables || vr >= o->rows[vt])
			return -__LINE__;
		uint64_t g = (uint64_t)(o->rowst[vt] - o->rowst[0]) + vr;
		if (held[g]++)
			return -__LINE__;
		uint64_t w = o->rowst[vt][vr];
		if (!W_IS_OCC(w)) {
			if (w != (uint64_t)s + 1 || v->key != ORACLE_NONE)
				return -__LINE__;
			continue;
		}
		uint32_t q = W_OCC_SEQ(w);
		if (q < o->planned || q >= o->linked || v->key == ORACLE_NONE)
			return -__LINE__;
	}
	/* I6, I7: every linked, unplanned occurrence */
	for (uint32_t q = o->planned; q < o->linked; q++) {
		const struct obatch *b = o->pending[q & o->rmask];
		if (!b || b->seq != q)
			return -__LINE__;
		for (uint32_t k = 0; k < b->nuniq; k++) {
			const struct urow *u = &b->uniq[k];
			if (u->table >= o->ntables || u->row >= o->rows[u->table])
				return -__LINE__;
			uint64_t w = o->rowst[u->table][u->row];
			if (!W_IS_OCC(w) || W_OCC_SEQ(w) < q || W_OCC_SEQ(w) >= o->linked)
				return -__LINE__;
			const struct onext nx = b->next[k];
			if (nx.seq == ORACLE_NONE) {
				if (w != W_OCC(q, k)) /* the latest occurrence is in the word */
					return -__LINE__;
			} else {
				if (nx.seq <= q || nx.seq >= o->linked)
					return -__LINE__;
				const struct obatch *n = o->pending[nx.seq & o->rmask];
				if (nx.pos >= n->nuniq || n->uniq[nx.pos].table != u->table ||
				    n->uniq[nx.pos].row != u->row)
					return -__LINE__;
				if (n->slot[nx.pos] != ORACLE_NONE) /* told only via q */
					return -__LINE__;
			}
			uint32_t s = b->slot[k];
			if (s != ORACLE_NONE &&
			    (s >= o->nused || o->slot[s].key != q || o->slot[s].npos != k))
				return -__LINE__;
		}
	}
	/* I7 the other way, I2, I3: each used slot in exactly one place */
	uint64_t placed = 0, placed_never = 0;
	for (uint32_t q = o->planned; q < o->linked; q++) {
		uint32_t n = 0;
		const struct obatch *b = o->pending[q & o->rmask];
		uint32_t last = ORACLE_NONE, lkp = o->lkp[q & o->rmask];
		uint64_t rec = 0;
		for (uint32_t s = o->head[q & o->rmask]; s != ORACLE_NONE; s = o->nextb[s]) {
			const struct oslot *v = &o->slot[s];
			if (s >= o->nused || v->key != q || ++n > o->capacity)
				return -__LINE__;
			/* B1: least recently used first; linked rows (lu < lkp) before
			 * the rows plans placed */
			uint64_t r = (uint64_t)v->lu << 32 | v->lpos;
			if ((last != ORACLE_NONE && r <= rec) ||
			    (last != ORACLE_NONE && v->lu < lkp && o->slot[last].lu >= lkp))
				return -__LINE__;
			rec = r;
			last = s;
			if (v->npos >= b->nuniq || b->slot[v->npos] != s ||
			    TR(b->uniq[v->npos].table, b->uniq[v->npos].row) != v->tr)
				return -__LINE__;
		}
		if (o->tail[q & o->rmask] != last)
			return -__LINE__;
		placed += n;
	}
	uint64_t rec = 0;
	for (uint32_t i = o->never_head; i < o->never_n; i++) {
		uint64_t e = o->never[i];
		const struct oslot *v = &o->slot[(uint32_t)e];
		if (v->gen != (uint32_t)(e >> 32))
			continue;
		if ((uint32_t)e >= o->nused || v->key != ORACLE_NONE)
			return -__LINE__;
		uint64_t r = (uint64_t)v->lu << 32 | v->lpos; /* least recently used first */
		if (placed_never++ && r <= rec)
			return -__LINE__;
		rec = r;
		placed++;
	}
	if (placed != o->nused)
		return -__LINE__;
	/* I4: last uses are planned batches */
	for (uint32_t s = 0; s < o->nused; s++)
		if (o->slot[s].lu == ORACLE_NONE || o->slot[s].lu >= o->planned)
			return -__LINE__;
	return 0;
}

int oracle_check(const struct oracle *o)
{
	uint8_t *held = em_zalloc(o->total_rows);
	if (!held)
		return EMBER_ENOMEM;
	int rc = check(o, held);
	em_free(held, o->total_rows);
	return rc;
}
