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
 * Why a row's next use is cheap to know. Linking batch q (oracle_link) walks q's
 * distinct rows once. Each row remembers its latest linked occurrence (batch and
 * position, in its per-row state), so linking writes q into that occurrence's
 * `next` field: every occurrence learns its next use exactly when it becomes
 * known, in O(1). If the latest occurrence was already planned, the row is
 * resident with no known next use, and linking moves it from the "never" queue to
 * bucket q.
 *
 * Why victims are cheap to find. Resident rows sit in buckets by next use: one
 * intrusive stack per batch of the window (ring of `ring` heads, since every next
 * use lies within [planned, linked) and linked - planned <= ring) and one FIFO
 * queue "never" for rows with no known next use, in the order their last use was
 * planned. The victim is the head of "never" if any, else the top of the highest
 * non-empty bucket above the batch being planned; `hi` remembers the highest
 * bucket that may be non-empty, so the scan is amortised O(1).
 *
 * Planning batch p (oracle_plan) runs these passes over p's distinct rows:
 *   1. rows with a slot are hits (they sit in bucket p); the others are misses;
 *   2a. each miss takes a never-used slot or evicts a victim (never one of p's
 *      rows: they are in bucket p or not yet in any bucket, and the search stops
 *      above p); only slots are touched;
 *   2b. the per-row state of every victim (slot dropped) and every admitted row
 *      (slot taken); the two sets are disjoint, so splitting 2a from 2b changes no
 *      decision, and 2b can prefetch both rows a fixed distance ahead (in one pass
 *      each victim's state was a dependent miss: never entry -> slot -> row);
 *   3. every row of p records p as its slot's last use and moves to the bucket of
 *      its next use (or the tail of "never"); bucket p is then empty.
 *
 * Pinned rows. In the cache, the rows of batches planned but not yet released are
 * pinned: evicting one delays its admission until the trainer releases that batch,
 * and the trainer may then wait for the fetch. The victim search therefore takes
 * (1) the head of "never" if it is not pinned (the queue is ordered by last use,
 * so if its head is pinned, all of it is); else (2) the first unpinned row found
 * by walking the buckets from the highest down (at most PIN_SCAN entries per
 * distinct row of the batch, over the whole plan); else
 * (3) the head of "never", pinned; else (4) the top of the highest bucket. With
 * nothing pinned (the simulator) this is exactly Belady's choice; with pins it
 * trades a few fetches (a row with a known next use instead of a pinned one with
 * none) for admissions that need not wait.
 *
 * Invariants (checked by oracle_check):
 *   I1. At most `capacity` rows have a slot; row -> slot (orow.slot1) and
 *       slot -> row (oslot.table/row) are inverse.
 *   I2. Between plans, every used slot is in exactly one place: the stack of
 *       bucket key (planned <= key < linked) or, with key ORACLE_NONE, the "never"
 *       queue as its one entry whose generation equals the slot's.
 *   I3. A finite bucket's stack holds exactly the slots whose key is that batch
 *       (no stale entries: a slot leaves bucket q only by being planned at q,
 *       which empties q, or by being popped as a victim from its top).
 *   I4. A slot's lu is the last planned batch that used its row; an admission's
 *       vlast is the victim's lu, so the caller can hold the physical eviction
 *       until every batch up to vlast is done with the row.
 *   I5. "never" entries whose generation differs from their slot's are stale (the
 *       slot moved since); the queue is compacted before it could overflow its
 *       2 x capacity + 1 entries, so link and plan never allocate.
 *
 * Cost: link is one random access per distinct row (its per-row state) plus one
 * to the earlier occurrence's `next` or to the row's slot; plan is two per
 * distinct row (per-row state and slot) plus, per miss, the victim's slot and
 * per-row state and O(1) amortised bucket work. No hashing, no allocation, no
 * division (ring positions are masks: the ring is rounded up to a power of two).
 * The random accesses whose address is known ahead are prefetched PF_AHEAD items
 * ahead in the walk that needs them (a batch's rows are known up front), so their
 * misses overlap. Measured and dropped (docs/cache.md): a second prefetch stage
 * in link (read the prefetched row state, prefetch the slot or `next` cell it
 * points to) and a longer distance: both slowed planning on the bench machine.
 */
#include "cache/oracle.h"

#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"
#include "ember.h"

/* Per-row state, indexed by row id (zeroed memory is "never seen, no slot"). */
struct orow {
	uint32_t slot1; /* slot + 1, or 0: no slot */
	uint32_t seen1; /* latest linked batch naming this row + 1, or 0 */
	uint32_t pos;   /* its index in that batch's uniq[] */
};

struct oslot {
	uint32_t gen;   /* changes whenever the slot's key changes (I5) */
	uint32_t key;   /* bucket: next use batch, or ORACLE_NONE ("never") */
	uint32_t lu;    /* last planned use (I4), ORACLE_NONE before the first */
	uint32_t nextb; /* next slot in its finite bucket's stack */
	uint32_t table;
	uint32_t pad_;
	uint64_t row;
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
	struct orow **rowst;       /* [ntables]: each table's rows, inside rowst_mem */
	struct bigmem rowst_mem;   /* every table's per-row state, one region */
	struct bigmem slot_mem;
	uint32_t capacity;
	uint32_t nused; /* slots handed out so far; slots >= nused were never used */
	struct oslot *slot;
	uint32_t ring;
	uint32_t rmask;            /* ring rounded up to a power of two, minus 1 */
	uint32_t *head;            /* [rmask + 1]: top of each finite bucket's stack */
	struct obatch **pending;   /* [rmask + 1]: linked, unplanned batches by seq & rmask */
	uint64_t *never;           /* entries: slot | gen << 32 */
	uint32_t never_head, never_n, never_cap;
	uint32_t planned, linked;
	uint32_t hi; /* highest finite bucket that may be non-empty */
};

/* How far ahead the walks over a batch's rows prefetch their per-row state. */
#define PF_AHEAD 16
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
	if (!out || ntables == 0 || !rows || capacity == 0 || capacity > ORACLE_MAX_BATCHES ||
	    ring == 0)
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
	o->head = em_alloc((size_t)rsz * sizeof(uint32_t));
	o->pending = em_zalloc((size_t)rsz * sizeof(*o->pending));
	o->never_cap = (uint32_t)(2 * capacity + 1 > UINT32_MAX ? UINT32_MAX : 2 * capacity + 1);
	o->never = em_alloc((size_t)o->never_cap * sizeof(uint64_t));
	if (!o->rows || !o->rowst || !o->head || !o->pending || !o->never)
		goto undo_alloc;
	uint64_t total = 0;
	for (uint32_t t = 0; t < ntables; t++) {
		if (rows[t] == 0) {
			rc = EMBER_EINVAL;
			goto undo_alloc;
		}
		if (rows[t] > SIZE_MAX / sizeof(struct orow) - total)
			goto undo_alloc; /* more state than memory can hold: ENOMEM */
		o->rows[t] = rows[t];
		total += rows[t];
	}
	/* one region for every table (one mapping, however many tables); anonymous
	 * memory is zero and mapped lazily: untouched rows cost nothing */
	if (big_zalloc(&o->rowst_mem, total * sizeof(struct orow)) < 0)
		goto undo_alloc;
	for (uint64_t t = 0, at = 0; t < ntables; at += rows[t], t++)
		o->rowst[t] = (struct orow *)o->rowst_mem.p + at;
	for (uint32_t r = 0; r < rsz; r++)
		o->head[r] = ORACLE_NONE;
	for (uint64_t s = 0; s < capacity; s++) {
		o->slot[s].key = ORACLE_NONE;
		o->slot[s].lu = ORACLE_NONE;
		o->slot[s].nextb = ORACLE_NONE;
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
	em_free(o->rows, 0);
	em_free(o->rowst, 0);
	em_free(o->head, 0);
	em_free(o->pending, 0);
	em_free(o->never, 0);
	em_free(o, sizeof(*o));
}

static inline void bucket_push(struct oracle *o, uint32_t s, uint32_t q)
{
	uint32_t *h = &o->head[q & o->rmask];
	o->slot[s].key = q;
	o->slot[s].gen++;
	o->slot[s].nextb = *h;
	*h = s;
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

void oracle_link(struct oracle *o, struct obatch *b)
{
	uint32_t q = b->seq;
	o->pending[q & o->rmask] = b;
	for (uint32_t k = 0; k < b->nuniq; k++) {
		const struct urow *u = &b->uniq[k];
		struct orow *r = &o->rowst[u->table][u->row];
		if (k + PF_AHEAD < b->nuniq) { /* overlap the random accesses' misses */
			const struct urow *f = &b->uniq[k + PF_AHEAD];
			__builtin_prefetch(&o->rowst[f->table][f->row], 1);
		}
		b->next[k] = ORACLE_NONE;
		if (r->seen1 != 0 && r->seen1 - 1 >= o->planned) {
			/* the earlier occurrence is still unplanned: it learns its next use */
			o->pending[(r->seen1 - 1) & o->rmask]->next[r->pos] = q;
		} else if (r->slot1 != 0) {
			/* resident, last use planned, next use unknown until now: leave
			 * "never" (its entry goes stale) for bucket q */
			bucket_push(o, r->slot1 - 1, q);
		}
		r->seen1 = q + 1;
		r->pos = k;
	}
	o->linked = q + 1;
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
	/* (2): an unpinned row in the highest buckets */
	for (uint32_t q = o->hi; q > p && *budget > 0; q--) {
		uint32_t *link = &o->head[q & o->rmask];
		if (*link == ORACLE_NONE && q == o->hi)
			o->hi = q - 1; /* the top bucket is empty: never scan it again */
		for (uint32_t s = *link; s != ORACLE_NONE && *budget > 0; s = *link, (*budget)--) {
			if (o->slot[s].lu < pinned || pinned == ORACLE_NONE) {
				*link = o->slot[s].nextb;
				return s;
			}
			link = &o->slot[s].nextb;
		}
	}
	/* (3) */
	if (o->never_head < o->never_n)
		return (uint32_t)o->never[o->never_head++];
	/* (4) */
	for (uint32_t q = o->hi; q > p; q--) {
		uint32_t *h = &o->head[q & o->rmask];
		if (*h != ORACLE_NONE) {
			uint32_t s = *h;
			*h = o->slot[s].nextb;
			o->hi = q;
			return s;
		}
	}
	o->hi = p;
	return ORACLE_NONE;
}

void oracle_plan(struct oracle *o, struct obatch *b, uint32_t pinned)
{
	uint32_t p = b->seq;
	uint32_t nmiss = 0;
	uint64_t budget = (uint64_t)PIN_SCAN * b->nuniq + 64;

	/* pass 1: hits keep their slot (they sit in bucket p) */
	for (uint32_t k = 0; k < b->nuniq; k++) {
		const struct urow *u = &b->uniq[k];
		if (k + PF_AHEAD < b->nuniq) {
			const struct urow *f = &b->uniq[k + PF_AHEAD];
			__builtin_prefetch(&o->rowst[f->table][f->row], 1);
		}
		uint32_t s1 = o->rowst[u->table][u->row].slot1;
		b->slot[k] = s1 - 1; /* ORACLE_NONE when s1 is 0 */
		b->miss[nmiss].uidx = k; /* without a branch: hits and misses mix at random */
		nmiss += s1 == 0;
	}

	/* pass 2a: admissions, each into a never-used slot or a victim's; only the
	 * slots are touched here (the victims' per-row state waits for pass 2b) */
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
			mi->vtable = v->table;
			mi->vrow = v->row;
			mi->vlast = v->lu;
			v->gen++;
			v->key = ORACLE_NONE;
		}
		o->slot[s].table = u->table;
		o->slot[s].row = u->row;
		mi->slot = s;
		b->slot[mi->uidx] = s;
	}
	/* pass 2b: the per-row state of victims and admitted rows, prefetched ahead
	 * (the two sets are disjoint: a victim is never a row of batch p, so the
	 * order of these writes does not matter) */
	for (uint32_t m = 0; m < nmiss; m++) {
		const struct omiss *mi = &b->miss[m];
		if (m + PF_AHEAD < nmiss) {
			const struct omiss *f = &b->miss[m + PF_AHEAD];
			if (f->vtable != ORACLE_NONE)
				__builtin_prefetch(&o->rowst[f->vtable][f->vrow], 1);
			const struct urow *fu = &b->uniq[f->uidx];
			__builtin_prefetch(&o->rowst[fu->table][fu->row], 1);
		}
		if (mi->vtable != ORACLE_NONE)
			o->rowst[mi->vtable][mi->vrow].slot1 = 0;
		const struct urow *u = &b->uniq[mi->uidx];
		o->rowst[u->table][u->row].slot1 = mi->slot + 1;
	}
	b->nmiss = nmiss;

	/* pass 3: every row of p moves to the bucket of its next use */
	o->head[p & o->rmask] = ORACLE_NONE;
	if (o->never_n + b->nuniq > o->never_cap)
		never_compact(o);
	for (uint32_t k = 0; k < b->nuniq; k++) {
		uint32_t s = b->slot[k];
		if (k + PF_AHEAD < b->nuniq)
			__builtin_prefetch(&o->slot[b->slot[k + PF_AHEAD]], 1);
		o->slot[s].lu = p;
		if (b->next[k] == ORACLE_NONE)
			never_push(o, s);
		else
			bucket_push(o, s, b->next[k]);
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

int oracle_check(const struct oracle *o)
{
	/* I1: slot -> row -> slot */
	for (uint32_t s = 0; s < o->nused; s++) {
		const struct oslot *v = &o->slot[s];
		if (v->table >= o->ntables || v->row >= o->rows[v->table])
			return -__LINE__;
		if (o->rowst[v->table][v->row].slot1 != s + 1)
			return -__LINE__;
	}
	/* I1 the other way, and the row count */
	uint64_t with_slot = 0;
	for (uint32_t t = 0; t < o->ntables; t++)
		for (uint64_t r = 0; r < o->rows[t]; r++) {
			uint32_t s1 = o->rowst[t][r].slot1;
			if (s1 == 0)
				continue;
			with_slot++;
			if (s1 - 1 >= o->nused || o->slot[s1 - 1].table != t || o->slot[s1 - 1].row != r)
				return -__LINE__;
		}
	if (with_slot != o->nused || o->nused > o->capacity)
		return -__LINE__;
	/* I2, I3: each used slot in exactly one place */
	uint64_t placed = 0;
	for (uint32_t q = o->planned; q < o->linked; q++) {
		uint32_t n = 0;
		for (uint32_t s = o->head[q & o->rmask]; s != ORACLE_NONE; s = o->slot[s].nextb) {
			if (s >= o->nused || o->slot[s].key != q || ++n > o->capacity)
				return -__LINE__;
		}
		placed += n;
	}
	for (uint32_t i = o->never_head; i < o->never_n; i++) {
		uint64_t e = o->never[i];
		const struct oslot *v = &o->slot[(uint32_t)e];
		if (v->gen != (uint32_t)(e >> 32))
			continue;
		if ((uint32_t)e >= o->nused || v->key != ORACLE_NONE)
			return -__LINE__;
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
