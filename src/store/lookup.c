/*
 * lookup.c - finding a key's newest record across the tiers, with many keys' disk
 * reads in flight together.
 *
 * Read path of one key: hot index -> hot chain in memory -> hot chain on disk ->
 * (chain ends below the hot log's begin) -> cold index table -> hash chunk (memory
 * or one disk read) -> cold chain in memory -> cold chain on disk. A tombstone is a
 * record like any other: the first record of the key on this path ends the search.
 *
 * Design notes
 *  1. Memory steps run under epoch protection (lk_resolve); the thread leaves the
 *     epoch while reads are in flight, so a slow disk never holds back the logs.
 *  2. Every record read back is checked (sane lengths, a strictly descending chain,
 *     its checksum). A failed check at an address that is now below its log's
 *     begin is not corruption: compaction moved the record and released the space
 *     while the read was in flight. The lookup then restarts from the hot index
 *     (the moved record is reachable from there again); only a failed check above
 *     begin reports EMBER_ECORRUPT. A read of an address that fell below begin
 *     while it was in flight restarts the same way, whatever it brought back: the
 *     hot log's released segment files are reused (segment.c invariant 5), so it may
 *     hold a newer record that passes every check.
 *  3. A lookup's I/O slot is reused for its next read at once (chain hop or the
 *     next phase), so lookups never queue behind each other for slots.
 *  4. lookups_run calls done exactly once per lookup, even when the ring fails.
 *  5. First reads: FIRST_READ_MIN bytes, or for a caller with a large buffer the
 *     size of the record this session's last such read found, or of one that
 *     fills the buffer if that one filled its own (lookup_want_hint,
 *     store_int.h), so repeated reads of large values cost one disk read each.
 *  6. A chunk copy on disk that the cold index's chunk cache holds (cold_index.h,
 *     notes 5-8; the tag is the address the table names) is not read: the cold
 *     walk starts from the cached entry. Every chunk a lookup reads from disk and
 *     checks fills the cache while the table still names it; compaction's
 *     prefetch (LK_CHUNK_ONLY) copies its chunks to the chunk log's tail instead,
 *     and they reach the cache when they leave memory.
 *  7. A user read (dst: the caller's buffer) whose record turns up on disk with a
 *     value of REC_COPY_MIN bytes or more that fits the buffer copies the value
 *     there while it checks the checksum, block by block (rec_checksum_copy), and
 *     marks the lookup LK_COPIED, so the done callback copies nothing. A record
 *     whose checksum fails may have left part of its value in the buffer; the
 *     read then fails or restarts and copies again.
 *  8. Compaction's liveness lookups (LK_KEY_ONLY) need only the address of the
 *     key's first record on the chain, never its value: a record whose key matches
 *     is taken on its well-formed head (rec_check_head), without reading the rest of
 *     it or checking its checksum. Whatever its value holds, a user read of the key
 *     stops at that record too (returning it, or EMBER_ECORRUPT), so the answer is
 *     the one a read would see. A record passed on the way down (another key) is
 *     still read whole and checked, since its prev link decides where the walk
 *     goes. done gets only the head of such a record.
 *  9. Every read here is of one record or one chunk, at the file's read
 *     alignment (em_file_read_align: often 512 bytes), not EM_IO_ALIGN: a small
 *     record costs 512 or 1024 bytes of disk read instead of 4 KiB. The record
 *     sits at l->addr - io->off in the buffer, whatever the alignment was.
 */
#include "store/store_int.h"
#include "store/checkpoint.h"

#include <errno.h>
#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"

enum { LK_READ = 1, LK_FINISHED = 0 };

static struct hlog *phase_log(struct ember_db *db, int phase)
{
	return phase == LK_HOT ? db->hot : phase == LK_CHUNK ? db->chunks : db->cold;
}

static struct em_file *phase_file(struct ember_db *db, int phase)
{
	return phase == LK_HOT ? &db->hot_file : phase == LK_CHUNK ? &db->chunk_file : &db->cold_file;
}

static void finish(struct lookup_run *run, struct lookup *l, int status, struct record *rec,
		   int in_memory)
{
	/* a user read served by the cold log (its memory tail soon leaves for disk) or
	 * by the hot log below head is copied into the read cache; a hot record in
	 * memory needs no copy */
	if (status == 0 && (l->phase == LK_COLD || (l->phase == LK_HOT && !in_memory)) &&
	    (l->flags & LK_FILL_RC) && run->s->db->rc) {
		struct ember_db *db = run->s->db;
		int was = epoch_is_protected(db->ep, run->s->slot);
		if (!was)
			epoch_protect(db->ep, run->s->slot);
		rc_insert(run->s, l->hash, l->hot_entry, l->hot_tail, rec);
		if (!was)
			epoch_unprotect(db->ep, run->s->slot);
	}
	run->done(run->ctx, l, status, rec, in_memory);
}

static int lk_cold_start(struct lookup_run *run, struct lookup *l);

/*
 * A cold chain ended at an address below the cold log's begin. Cold->cold
 * compaction copies live records to the tail before moving begin, and links each
 * copy from the chunk entry: if this walk started from an entry that has changed
 * since, the key may live in such a copy, so start over from the chunk. A walk from
 * the current entry that ends below begin has truly not found the key (bounded
 * retries keep a stream of passes from looping us). Caller protected.
 */
static int lk_cold_end(struct lookup_run *run, struct lookup *l, uint64_t prev)
{
	struct ember_db *db = run->s->db;
	if (prev >= EM_LOG_START && l->restarts < 16) {
		struct cold_index *ci = &db->cidx;
		uint64_t ca = ci_table_load(ci, ci_chunk_of(ci, l->hash));
		/* the same copy on disk is immutable; one in memory may be CAS'd in place */
		int moved = ca != l->chunk_addr ||
			    (ca >= hlog_load(&db->chunks->head) &&
			     ci_entry(ci, hlog_rec(db->chunks, ca), l->hash) != l->entry);
		if (moved) {
			l->restarts++;
			return lk_cold_start(run, l);
		}
	}
	finish(run, l, EMBER_ENOTFOUND, NULL, 0);
	return LK_FINISHED;
}

/* The cold part of the memory walk, from cold-chain address a. Caller protected. */
static int lk_cold_walk(struct lookup_run *run, struct lookup *l, uint64_t a)
{
	struct ember_db *db = run->s->db;
	uint64_t at;
	l->entry = a;
	struct record *r = a ? trace_mem(db->cold, a, l->key, l->klen, &at) : NULL;
	if (r) {
		l->phase = LK_COLD;
		l->found = at;
		stat_add(&run->s->cur->reads[TIER_COLD_MEM], 1);
		finish(run, l, 0, r, 1);
		return LK_FINISHED;
	}
	if (!a || at < EM_LOG_START) {
		finish(run, l, EMBER_ENOTFOUND, NULL, 0);
		return LK_FINISHED;
	}
	if (at < hlog_load(&db->cold->begin))
		return lk_cold_end(run, l, at);
	l->phase = LK_COLD;
	l->addr = at;
	return LK_READ;
}

/* Start the cold part: the key's chunk. Caller protected. */
static int lk_cold_start(struct lookup_run *run, struct lookup *l)
{
	struct ember_db *db = run->s->db;
	struct cold_index *ci = &db->cidx;
	uint64_t ca = ci_table_load(ci, ci_chunk_of(ci, l->hash));
	l->chunk_addr = ca;
	if (!ca) {
		finish(run, l, EMBER_ENOTFOUND, NULL, 0);
		return LK_FINISHED;
	}
	if (!(l->flags & LK_COLD_SEEN)) {
		l->flags |= LK_COLD_SEEN;
		stat_add(&run->s->cur->cold_lookups, 1);
	}
	if (ca >= hlog_load(&db->chunks->head))
		return lk_cold_walk(run, l, ci_entry(ci, hlog_rec(db->chunks, ca), l->hash));
	uint64_t e;
	if (!(l->flags & LK_CHUNK_ONLY) && ci_cache_get(ci, l->hash, ca, &e)) {
		stat_add(&run->s->cur->ci_hits, 1); /* the copy on disk at ca holds e */
		return lk_cold_walk(run, l, e);
	}
	l->phase = LK_CHUNK;
	l->addr = ca;
	return LK_READ;
}

/* Resolve as far as memory allows, from l->phase / l->addr. Caller protected.
 * Returns LK_READ when l->addr of l->phase must be read next. */
static int lk_resolve(struct lookup_run *run, struct lookup *l)
{
	struct ember_db *db = run->s->db;
	if (l->phase == LK_HOT) {
		uint64_t a = l->addr;
		uint64_t e = 0, at;
		int tier = TIER_HOT_MEM;
		if (a == LK_FROM_INDEX) {
			l->hot_tail = hlog_load(&db->hot->tail);
			(void)hi_find(&db->index, l->hash, &e); /* e stays 0 when there is none */
			l->hot_entry = e;
		}
		/* from the index: the read cache, then the hot chain; else from a */
		struct record *r = a == LK_FROM_INDEX
					   ? front_find(db, e, l->key, l->klen, !(l->flags & LK_HOT_ONLY), &at, &tier)
					   : trace_mem(db->hot, a, l->key, l->klen, &at);
		if (r) {
			l->found = at; /* 0 for the read cache: above the hot chain, current */
			stat_add(&run->s->cur->reads[tier], 1);
			finish(run, l, 0, r, 1);
			return LK_FINISHED;
		}
		if (at >= EM_LOG_START && at >= hlog_load(&db->hot->begin)) {
			l->addr = at;
			return LK_READ;
		}
		if (l->flags & LK_HOT_ONLY) {
			finish(run, l, EMBER_ENOTFOUND, NULL, 0);
			return LK_FINISHED;
		}
		return lk_cold_start(run, l);
	}
	if (l->phase == LK_CHUNK && l->addr == LK_FROM_INDEX)
		return lk_cold_start(run, l);
	if (l->phase == LK_COLD && l->addr == LK_FROM_INDEX)
		return lk_cold_start(run, l);
	return LK_READ; /* a disk address of this phase is already set */
}

static int lk_restart(struct lookup_run *run, struct lookup *l)
{
	l->phase = (l->flags & LK_COLD_ONLY) ? LK_COLD : LK_HOT;
	l->addr = LK_FROM_INDEX;
	l->want = 0;
	struct ember_db *db = run->s->db;
	epoch_protect(db->ep, run->s->slot);
	int r = lk_resolve(run, l);
	epoch_unprotect(db->ep, run->s->slot);
	return r;
}

static void slot_release(struct io_pool *p, uint32_t idx)
{
	struct io_slot *io = &p->io[idx];
	io->busy = 0;
	io->lk = NULL;
	if (io->big) {
		em_free(io->big, io->big_cap);
		io->big = NULL;
		io->big_cap = 0;
	}
	p->io_free[p->io_free_n++] = idx;
}

/* Queue the read of lookup l on I/O slot idx of the run's pool. */
static int issue(struct lookup_run *run, struct lookup *l, uint32_t idx)
{
	ember_session *s = run->s;
	struct io_pool *p = run->pool;
	struct io_slot *io = &p->io[idx];
	struct em_file *f = phase_file(s->db, l->phase);
	uint32_t align = em_file_read_align(f); /* note 9 */
	uint64_t off = em_align_down(l->addr, align);
	/* a record's first read may follow the caller's hint; a chunk's never does */
	uint64_t first = l->hint && l->phase != LK_CHUNK ? l->hint : FIRST_READ_MIN;
	uint64_t end = l->addr + (l->want ? l->want : first);
	uint64_t len = em_align_up(end - off, align);
	if (len > UINT32_MAX - EM_IO_ALIGN)
		return EMBER_ECORRUPT;
	uint8_t *buf;
	if (len <= IO_BUF_SIZE) {
		if (!io->buf) {
			io->buf = em_alloc_aligned(EM_IO_ALIGN, IO_BUF_SIZE);
			if (!io->buf)
				return EMBER_ENOMEM;
		}
		buf = io->buf;
	} else {
		if (io->big_cap < len) {
			em_free(io->big, io->big_cap);
			io->big_cap = 0;
			io->big = em_alloc_io(len);
			if (!io->big)
				return EMBER_ENOMEM;
			io->big_cap = (uint32_t)len;
		}
		buf = io->big;
	}
	io->cur = buf;
	io->busy = 1;
	io->lk = l;
	io->off = off;
	io->len = (uint32_t)len;
	stat_add(&s->cur->ios, 1);
	stat_add(&s->cur->io_bytes, len);
	if (l->phase == LK_CHUNK)
		stat_add(&s->cur->chunk_reads, 1);
	else if (l->phase == LK_COLD)
		stat_add(&s->cur->cold_rec_reads, 1);
	return em_ring_read(&p->ring, f, buf, (uint32_t)len, off, idx);
}

/* After a memory step: read again on the same slot, or release it. */
static void continue_or_release(struct lookup_run *run, struct lookup *l, uint32_t idx, int next)
{
	if (next == LK_READ) {
		int rc = issue(run, l, idx);
		if (rc == 0)
			return;
		slot_release(run->pool, idx);
		finish(run, l, rc, NULL, 0);
		return;
	}
	slot_release(run->pool, idx);
}

/* A record read back failed its checks: corruption, or compaction moved it. */
static int bad_record(struct lookup_run *run, struct lookup *l)
{
	struct hlog *log = phase_log(run->s->db, l->phase);
	if (l->flags & LK_CHUNK_ONLY) {
		finish(run, l, EMBER_EAGAIN, NULL, 0); /* a prefetch: best effort */
		return LK_FINISHED;
	}
	if (l->addr < hlog_load(&log->begin))
		return lk_restart(run, l);
	if (l->phase == LK_CHUNK) {
		/* a newer copy of the chunk may have replaced this one: re-read the table */
		struct cold_index *ci = &run->s->db->cidx;
		if (ci_table_load(ci, ci_chunk_of(ci, l->hash)) != l->addr)
			return lk_restart(run, l);
	}
	db_report(run->s->db, "%s at offset %llu: %s fails its checksum or length checks "
		  "(log begin %llu head %llu flushed %llu tail %llu)",
		  log_file_name(run->s->db, log), (unsigned long long)l->addr,
		  l->phase == LK_CHUNK ? "cold index chunk" : "record",
		  (unsigned long long)hlog_load(&log->begin), (unsigned long long)hlog_load(&log->head),
		  (unsigned long long)hlog_load(&log->flushed), (unsigned long long)hlog_load(&log->tail));
	finish(run, l, EMBER_ECORRUPT, NULL, 0);
	return LK_FINISHED;
}

/* What a read brought back. */
static void on_read(struct lookup_run *run, uint32_t idx, int res)
{
	ember_session *s = run->s;
	struct ember_db *db = s->db;
	struct io_slot *io = &run->pool->io[idx];
	struct lookup *l = io->lk;
	uint8_t *buf = io->cur;
	int next;
	if (l->addr < hlog_load(&phase_log(db, l->phase)->begin)) {
		/* released while the read was in flight: it failed (a segment removed
		 * under it), or what came back may be another segment's newer bytes (a
		 * recycled file, segment.c invariant 5), however well-formed; back to the
		 * index (note 2) */
		next = bad_record(run, l);
		goto out;
	}
	if (res < 0) {
		slot_release(run->pool, idx);
		finish(run, l, res, NULL, 0);
		return;
	}
	uint64_t pos = l->addr - io->off;
	uint64_t avail = (uint64_t)res > pos ? (uint64_t)res - pos : 0;
	struct hlog *log = phase_log(db, l->phase);
	struct record *r = (struct record *)(void *)(buf + pos);
	struct rec_rules ru = {.log = log, .max_cap = log_max_record(db, log)};
	uint64_t chunk = ci_chunk_of(&db->cidx, l->hash);
	if (l->phase == LK_CHUNK) {
		ru.key = &chunk;
		ru.klen = sizeof(chunk);
	}
	int64_t v = rec_check_head(r, l->addr, avail, &ru, NULL);
	int mine = v == 0 && l->phase != LK_CHUNK && avail >= rec_head_size(r) &&
		   rec_key_eq(r, l->key, l->klen);
	if (mine && (l->flags & LK_KEY_ONLY)) {
		/* compaction asks only where the key's newest record is (note 8) */
		l->want = 0;
		l->found = l->addr;
		finish(run, l, 0, r, 0);
		next = LK_FINISHED;
		goto out;
	}
	int copied = 0;
	if (v == 0) /* the record asked for: checked while its value is copied (note 7) */
		v = rec_check_copy(r, l->addr, avail, &ru, mine ? l->dst : NULL, l->dcap, &copied, NULL);
	if (v < 0) {
		next = bad_record(run, l);
		goto out;
	}
	if (v > 0) {
		if ((uint64_t)res < io->len || l->want >= (uint64_t)v) {
			next = bad_record(run, l); /* short read: the record is cut off */
			goto out;
		}
		l->want = (uint32_t)v;
		next = LK_READ;
		goto out;
	}
	l->want = 0;
	if (copied)
		l->flags |= LK_COPIED;
	uint64_t size = rec_total_size(r);
	if (l->phase == LK_CHUNK) {
		struct cold_index *ci = &db->cidx;
		if (!ci_chunk_ok(ci, r, chunk)) {
			next = bad_record(run, l);
			goto out;
		}
		if (l->flags & LK_CHUNK_ONLY) {
			finish(run, l, 0, r, 0);
			next = LK_FINISHED;
			goto out;
		}
		uint64_t e = ci_entry(ci, r, l->hash);
		/* checked whole (rec_check_copy, ci_chunk_ok): cache it while current
		 * (cold_index.h, note 6b) */
		if (ci_table_load(ci, chunk) == l->addr)
			ci_cache_put(ci, chunk, l->addr, ci_words(r));
		epoch_protect(db->ep, s->slot);
		next = lk_cold_walk(run, l, e);
		epoch_unprotect(db->ep, s->slot);
		goto out;
	}
	if (rec_key_eq(r, l->key, l->klen)) {
		if ((l->flags & LK_BIG_CAP) && size <= (UINT32_MAX >> 2)) {
			s->want_hint = (uint32_t)size; /* the next large read's first read */
			s->want_fill = l->full && size >= l->full;
		}
		l->found = l->addr;
		stat_add(&s->cur->reads[l->phase == LK_HOT ? TIER_HOT_DISK : TIER_COLD_DISK], 1);
		finish(run, l, 0, r, 0);
		next = LK_FINISHED;
		goto out;
	}
	uint64_t prev = rec_prev(r); /* below l->addr: rec_check, R5 */
	if (prev >= EM_LOG_START && prev >= hlog_load(&log->begin)) {
		l->addr = prev;
		next = LK_READ;
		goto out;
	}
	/* this chain ends here */
	if (l->phase == LK_HOT && !(l->flags & LK_HOT_ONLY)) {
		epoch_protect(db->ep, s->slot);
		next = lk_cold_start(run, l);
		epoch_unprotect(db->ep, s->slot);
	} else if (l->phase == LK_COLD) {
		epoch_protect(db->ep, s->slot);
		next = lk_cold_end(run, l, prev);
		epoch_unprotect(db->ep, s->slot);
	} else {
		finish(run, l, EMBER_ENOTFOUND, NULL, 0);
		next = LK_FINISHED;
	}
out:
	continue_or_release(run, l, idx, next);
}

static void on_cqe(void *ctx, uint64_t ud, int res) { on_read(ctx, (uint32_t)ud, res); }

int lookup_begin(struct lookup_run *run, struct lookup *l)
{
	ember_session *s = run->s;
	struct io_pool *p = run->pool;
	struct ember_db *db = s->db;
	if (p->broken) {
		finish(run, l, EMBER_EIO, NULL, 0);
		return 0;
	}
	l->want = 0;
	epoch_protect(db->ep, s->slot);
	int step = lk_resolve(run, l);
	epoch_unprotect(db->ep, s->slot);
	if (step != LK_READ)
		return 0;
	uint32_t idx = p->io_free[--p->io_free_n];
	int ir = issue(run, l, idx);
	if (ir < 0) {
		slot_release(p, idx);
		finish(run, l, ir, NULL, 0);
		return 0;
	}
	return 1;
}

int lookups_progress(struct lookup_run *run, int wait)
{
	struct io_pool *p = run->pool;
	if (p->ring.inflight == 0)
		return 0;
	int rc = em_ring_submit(&p->ring);
	if (rc >= 0)
		rc = em_ring_reap(&p->ring, wait ? 1 : 0, on_cqe, run);
	if (rc >= 0)
		return rc;
	/* the ring failed: fail the reads in flight; their slots stay busy, since the
	 * kernel may still write into their buffers */
	p->broken = 1;
	for (uint32_t i = 0; i < p->io_n; i++) {
		struct lookup *l = p->io[i].lk;
		if (p->io[i].busy && l) {
			p->io[i].lk = NULL;
			finish(run, l, rc, NULL, 0);
		}
	}
	return rc;
}

int lookups_run(ember_session *s, struct lookup *lk, size_t n, lookup_done_fn done, void *ctx)
{
	struct lookup_run run = {s, &s->pool, done, ctx};
	size_t next = 0;
	int rc = 0;
	if (s->pool.broken) {
		for (size_t i = 0; i < n; i++)
			finish(&run, &lk[i], EMBER_EIO, NULL, 0);
		return EMBER_EIO;
	}
	while (next < n || s->pool.ring.inflight > 0) {
		while (next < n && s->pool.io_free_n > 0 && !s->pool.broken)
			(void)lookup_begin(&run, &lk[next++]);
		if (s->pool.ring.inflight == 0)
			continue;
		rc = lookups_progress(&run, 1);
		if (rc < 0)
			break;
		rc = 0;
	}
	if (rc < 0)
		while (next < n)
			finish(&run, &lk[next++], rc, NULL, 0);
	return rc;
}

int io_pool_init(struct io_pool *p, uint32_t depth)
{
	memset(p, 0, sizeof(*p));
	int rc = em_ring_init(&p->ring, depth);
	if (rc < 0)
		return rc == -ENOMEM ? EMBER_ENOMEM : rc; /* one code for memory, as elsewhere */
	p->io = em_zalloc(sizeof(*p->io) * depth);
	p->io_free = em_alloc(sizeof(*p->io_free) * depth);
	if (!p->io || !p->io_free) {
		io_pool_release(p);
		return EMBER_ENOMEM;
	}
	p->io_n = depth;
	for (uint32_t i = 0; i < depth; i++)
		p->io_free[i] = depth - 1 - i;
	p->io_free_n = depth;
	return 0;
}

void io_pool_release(struct io_pool *p)
{
	em_ring_exit(&p->ring); /* first: no read in flight writes into a freed buffer */
	if (p->io) {
		for (uint32_t i = 0; i < p->io_n; i++) {
			em_free(p->io[i].buf, IO_BUF_SIZE);
			em_free(p->io[i].big, p->io[i].big_cap);
		}
		em_free(p->io, 0);
	}
	em_free(p->io_free, 0);
	p->io = NULL;
	p->io_free = NULL;
	p->io_n = p->io_free_n = 0;
}
