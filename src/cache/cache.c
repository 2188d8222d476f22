/*
 * cache.c - the embedding cache: pushed batches, the prefetcher thread, acquire
 * and release, write-back and flush (include/ember_cache.h is the contract;
 * cache_int.h the shared structs; rows.c read_rows / write_rows; apply.c the
 * fused optimizer update).
 *
 * Design notes
 * ============
 * Three threads touch a cache: the loader (push; one call at a time), the
 * trainer (acquire, try_acquire, apply, release, flush, read_rows, write_rows;
 * one call at a time), which may run concurrently with the loader, and the
 * cache's prefetcher thread. close comes after both roles are done. They share a
 * mutex `mu` and four counters of batch numbers, each written by one side only:
 *     released <= acquired <= resident <= planned <= pushed
 * (pushed: loader; acquired, released: trainer; planned, resident: prefetcher;
 * acquired and planned are private to their writer, the others are read across
 * under `mu`). Batches live in a ring of `window` entries, entry seq % window. The
 * oracle has a lock of its own, `omu` (C7).
 *
 * Who owns which field (C9):
 *   loader     last_nuniq; the ring entry pushed % window until `pushed` moves
 *              past it (push checks pushed - released < window under mu, so that
 *              entry's previous batch was released: the release's writes
 *              happen-before, through mu)
 *   trainer    acquired, holding, the ap_* scratch of apply, the `applied` flag
 *              and dirty[] of the acquired batch (C5); a request in flight (C8)
 *   prefetcher planned, owner[], the I/O buffers, dirty[] of slots no
 *              unreleased batch uses, mdone and the plan arrays of planned batches
 *   under mu   pushed, resident, released, failed, stop, req, req_gen
 *   statistics relaxed atomics, from anyone
 * The loader and the trainer share nothing but fields under mu: acquire reads a
 * ring entry only for a batch < pushed (its push published it under mu), push
 * writes only the entry of batch `pushed`, which no acquired or resident batch
 * holds (pushed - released < window).
 *
 * A batch's states, and the call that moves it on:
 *   free --push: oracle_link_part (dedupe and link in one pass over the ids)-->
 *        pushed (= linked in the oracle)
 *        --prefetcher: oracle_plan (when seq == released, or seq < released +
 *        prefetch_batches and the unreleased planned rows fit in the
 *        capacity: inflight_fits)--> planned
 *        --prefetcher: fetch_round, until all its admissions are done--> resident
 *        --acquire--> acquired --release--> released (= free: the ring entry can
 *        take batch seq + window)
 *
 * A slot's states (per slot: the plan's owner in the oracle, the physical owner
 * owner[] and dirty[] here):
 *   empty --fetch_round (admission into a never-used slot)--> clean
 *   clean --release of a batch using it (not READONLY, or applied: C10)--> dirty
 *   clean/dirty --write_rows naming its row (cache_rows_serve, after the put)-->
 *   clean with the written value
 *   dirty --flush (writeback_all) or fetch_round evicting it (write-back)--> clean
 *   clean/dirty --fetch_round: admission of another row (after the write-back of
 *   a dirty victim)--> clean with the new row
 *
 * Invariants:
 *   C1. Never more rows than capacity: rows live only in the `capacity` slots.
 *   C2. A batch is acquired only when resident: every one of its rows is in its
 *       planned slot (fetch_round finishes batch f's admissions before f+1's,
 *       and a row kept by the plan was fetched for an earlier, resident batch).
 *   C3. A slot is refilled only after every batch that used its old row is
 *       released: an admission waits until its victim's last use vlast <
 *       released (the oracle never picks a victim from the batch it plans; I4).
 *       So the trainer never sees a row change under an acquired batch, and the
 *       prefetcher never reads a slot the trainer may be writing.
 *   C4. A fetch of a row is ordered after the write-back of every earlier
 *       eviction of that row: one thread (the prefetcher) does both; write-backs
 *       of a round complete (ember_put_batch returns) before its reads start,
 *       and a row evicted by batch f's admissions is admitted again only by a
 *       later batch, whose rounds come after f's. Hence every read sees every
 *       earlier update, in batch order.
 *   C5. dirty[s] is written by release (trainer) only for slots of the batch it
 *       releases, and by the prefetcher only for slots no unreleased batch uses
 *       (C3) or during a flush (no batch acquired): never both at once.
 *   C6. At most one batch is acquired at a time, so a blocked acquire never waits
 *       on a release only its own caller could make.
 *   C8. Requests (flush, read_rows, write_rows): the trainer stores a
 *       struct cache_req in `req` under mu and waits for `req_gen` to move; the
 *       prefetcher serves it between two of its steps (never inside a fetch
 *       round, so no round is half done) and publishes the result under mu.
 *       The trainer refuses a request while it holds a batch (ESTATE), so while
 *       one is served no batch is acquired: the prefetcher may read, overwrite
 *       and clean any slot (C5). A request serves at most once; one trainer
 *       means at most one request at a time. push may run meanwhile: it only
 *       links under omu, which requests do not touch.
 *   C9. The loader and the trainer share only what mu guards (fields above).
 *   C10. ember_cache_apply's rows are dirty at release even with READONLY
 *       (cbatch.applied), so an update through the cache is never dropped.
 *   C7. The oracle is touched only under `omu`: push links its batch there (so
 *       EMBER_ETOOBIG and a bad row id are found in the same pass as the dedupe,
 *       and undone with oracle_link_abort before any other state changed), the
 *       prefetcher plans there. Linking and planning write into the arrays of
 *       linked, unplanned batches (next, uslot); nothing else reads those
 *       before the batch is planned, and plan_one reads its batch's uslot after
 *       oracle_plan returned (planned batches are never written again). omu is
 *       never held with mu (no lock order to keep).
 *
 * GPU slots (slot_store_gpu.c has the device side, D1-D4): the trainer's work on
 * an acquired batch is asynchronous on its own streams, so the rules above,
 * stated for host calls, also need:
 *   G1. A batch is handed out with an event `ready` (its ring entry's), recorded
 *       on the H2D stream when the batch became resident, after its installs and
 *       the upload of its lookups' slots and their groups by row (plan_groups
 *       fills b->pub on the prefetcher, slot_store_publish uploads it; C2 then
 *       holds for whoever waits on `ready`).
 *   G2. release makes the H2D and D2H streams wait on the trainer's `done` event
 *       (slot_store_order) BEFORE it publishes `released` under mu; the
 *       prefetcher refills or evicts the batch's slots only after reading that
 *       `released` (C3), so its installs and eviction copies are enqueued after
 *       the waits and run after the trainer's work (rule 4). done == NULL: the
 *       trainer says that work is complete.
 *   G3. A ring entry's device slot array and `ready` are rewritten only by the
 *       batch seq + window, pushed after batch seq's release: after G2's waits
 *       (and `ready` re-recorded by batch seq's own acquire: G5).
 *   G4. With C4, the order a row travels is: trainer's update -> (done) -> D2H
 *       gather + download -> host waits -> ember_put_batch -> later fetch ->
 *       install on H2D -> `ready` -> the trainer's next use. Every read still sees
 *       every earlier update.
 *   G5. `ready` also covers the trainer's updates of every released batch, so a
 *       batch read on another stream than the one the previous batch was updated
 *       on still sees those updates (the header's promise: waiting on `ready` is
 *       enough). G1 alone does not give that: a batch becomes resident while the
 *       trainer still works on earlier ones (prefetch_batches ahead), so its
 *       `ready` is usually recorded BEFORE the previous batch's release, and the
 *       H2D wait on that batch's `done` (G2) comes after the record. Rows the two
 *       batches share are kept in their slots (no install), so nothing else
 *       orders the read of batch i+1 on stream B after the update of batch i on
 *       stream A. Hence acquire records `ready` on H2D once more
 *       (slot_store_ready) before handing the batch out: by then every earlier
 *       batch was released (C6), so H2D has already been told to wait on each
 *       `done` (G2), and rule 4 makes the new record stand for those waits, plus
 *       the batch's own installs and slot upload (enqueued before it became
 *       resident, same stream). Nothing else records that event meanwhile: the
 *       prefetcher records a ring entry's `ready` only when it publishes the
 *       entry's batch, and the entry's next batch (seq + window) is published
 *       only after this one's release (G3). The cost is one event record per
 *       acquire, and `ready` may also wait for installs of later batches that
 *       were enqueued before it.
 *   G6. write_rows installs into slots of batches that may already be
 *       resident, whose `ready` was recorded before: it waits for the H2D
 *       stream before the request completes (rows.c), so any trainer work
 *       started afterwards sees the written rows.
 */
#include "ember_cache.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "cache/cache_int.h"
#include "cache/oracle.h"
#include "cache/slot_store.h"
#include "core/debug.h"
#include "core/alloc.h"

/* ---- write-back and fetch (the prefetcher, or the closing thread) ------------------ */

/* Write n rows (slots sl[], owners ow[]; n <= depth) and their optimizer state
 * to the store; clears their dirty flags once all are written. */
int cache_writeback(struct ember_cache *c, size_t n, const uint32_t *sl, const struct urow *ow)
{
	if (n == 0)
		return 0;
	uint64_t bytes = 0;
	for (size_t i = 0; i < n; i++) {
		const struct ctable *t = &c->tables[ow[i].table];
		key_encode(c->kbuf + i * KEY_LEN, ow[i].table, ow[i].row);
		c->kptr[i] = c->kbuf + i * KEY_LEN;
		c->klen[i] = KEY_LEN;
		c->vptr[i] = c->stage + i * c->max_row_bytes;
		c->vlen[i] = t->vbytes;
		bytes += c->vlen[i];
		c->mv[i] = (struct slot_move){.slot = sl[i], .dim = t->dim, .storage = t->storage,
					      .state = t->state, .buf = c->vptr[i]};
	}
	int rc = slot_store_read(&c->ss, n, c->mv);
	if (rc < 0)
		return rc;
	rc = ember_put_batch(c->sess, n, c->kptr, c->klen, (const void *const *)c->vptr,
				 c->vlen, c->st);
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (c->st[i] < 0)
			rc = c->st[i];
	if (rc == 0) {
		/* clean only once the store holds them: after a failed put the rows stay
		 * dirty (their owners unchanged), and close writes them again */
		for (size_t i = 0; i < n; i++)
			c->dirty[sl[i]] = 0;
		stat_add(&c->st_wb, n);
		stat_add(&c->st_bytes_wb, bytes);
	}
	return rc;
}

/* Every dirty slot to the store (flush, close). No batch may be acquired. */
static int writeback_all(struct ember_cache *c)
{
	uint32_t sl[256];
	struct urow ow[256];
	size_t chunk = c->depth < 256 ? c->depth : 256, n = 0;
	for (uint64_t s = 0; s < c->capacity; s++) {
		if (!c->dirty[s])
			continue;
		sl[n] = (uint32_t)s;
		ow[n] = c->owner[s];
		if (++n == chunk) {
			int rc = cache_writeback(c, n, sl, ow);
			if (rc < 0)
				return rc;
			n = 0;
		}
	}
	return cache_writeback(c, n, sl, ow);
}

/*
 * One round of batch f's admissions: up to `depth` whose victims no unreleased
 * batch uses (C3), dirty victims written back first (C4), then the rows read.
 * Returns the number done (0: none ready), or an error.
 */
static int fetch_round(struct ember_cache *c, struct cbatch *b, uint32_t released)
{
	struct obatch *ob = &b->ob;
	uint32_t n = 0;
	for (uint32_t i = b->mdone; i < ob->nmiss && n < c->depth; i++) {
		struct omiss *m = &ob->miss[i];
		if (m->vlast != ORACLE_NONE && m->vlast >= released)
			continue;
		struct omiss tmp = ob->miss[b->mdone + n];
		ob->miss[b->mdone + n] = *m;
		*m = tmp;
		n++;
	}
	if (n == 0)
		return 0;
	struct omiss *ms = ob->miss + b->mdone;
	for (uint32_t j = 0; j < n; j++) {
		EM_DEBUG_CHECK(ms[j].slot < c->capacity, "C1: slot %u of a capacity of %llu",
			       ms[j].slot, (unsigned long long)c->capacity);
		EM_DEBUG_CHECK(ms[j].vlast == ORACLE_NONE || ms[j].vlast < released,
			       "C3: a slot refilled while batch %u, which uses its row, is "
			       "unreleased (released %u)", ms[j].vlast, released);
	}

	/* evictions: dirty victims go back to the store before any read (C4) */
	uint32_t wsl[64];
	struct urow wow[64];
	size_t nw = 0, nev = 0, wchunk = c->depth < 64 ? c->depth : 64;
	for (uint32_t j = 0; j < n; j++) {
		uint32_t s = ms[j].slot;
		if (ms[j].vlast == ORACLE_NONE)
			continue;
		nev++;
		if (!c->dirty[s])
			continue;
		wsl[nw] = s;
		wow[nw] = c->owner[s]; /* == (vtable, vrow): it was fetched for vlast or before */
		if (++nw == wchunk) {
			int rc = cache_writeback(c, nw, wsl, wow);
			if (rc < 0)
				return rc;
			nw = 0;
		}
	}
	int rc = cache_writeback(c, nw, wsl, wow);
	if (rc < 0)
		return rc;
	stat_add(&c->st_evicted, nev);

	/* admissions: many reads in flight in one ember_get_batch, landing in the
	 * slot store's staging (GPU slots: pinned staging buffers) */
	uint64_t bytes = 0, absent = 0, first = 0;
	rc = slot_store_stage(&c->ss, n, c->stage, c->vptr);
	if (rc < 0)
		return rc;
	for (uint32_t j = 0; j < n; j++) {
		const struct urow *u = &ob->uniq[ms[j].uidx];
		key_encode(c->kbuf + (size_t)j * KEY_LEN, u->table, u->row);
		c->kptr[j] = c->kbuf + (size_t)j * KEY_LEN;
		c->klen[j] = KEY_LEN;
		c->vcap[j] = c->tables[u->table].vbytes;
	}
	rc = ember_get_batch(c->sess, n, c->kptr, c->klen, c->vptr, c->vcap, c->vlen, c->st);
	if (rc < 0)
		goto undo_stage;
	for (uint32_t j = 0; j < n; j++) {
		const struct urow *u = &ob->uniq[ms[j].uidx];
		const struct ctable *t = &c->tables[u->table];
		if (c->st[j] == EMBER_ENOTFOUND) {
			cache_init_row(c, u->table, u->row, c->vptr[j]);
			absent++;
		} else if (c->st[j] < 0) {
			/* a longer value than the row's under its key: damage, as a shorter */
			rc = c->st[j] == EMBER_ERANGE ? EMBER_ECORRUPT : c->st[j];
			goto undo_stage;
		} else if (c->vlen[j] != c->vcap[j]) {
			rc = EMBER_ECORRUPT; /* a value of another size under a row's key */
			goto undo_stage;
		} else {
			bytes += c->vlen[j];
		}
		c->mv[j] = (struct slot_move){.slot = ms[j].slot, .dim = t->dim,
					      .storage = t->storage, .state = t->state,
					      .buf = c->vptr[j]};
		if (c->owner[ms[j].slot].table == ORACLE_NONE)
			first++;
		c->owner[ms[j].slot] = *u;
		c->dirty[ms[j].slot] = 0;
	}
	rc = slot_store_write(&c->ss, n, c->mv); /* gives the staging back, either way */
	if (rc < 0)
		return rc;
	b->mdone += n;
	stat_add(&c->st_fetched, n);
	stat_add(&c->st_rounds, 1);
	stat_add(&c->st_absent, absent);
	stat_add(&c->st_bytes_fetched, bytes);
	stat_add(&c->st_resident, first);
	return (int)n;

undo_stage:
	slot_store_unstage(&c->ss);
	return rc;
}

/* Plan batch `planned`: the oracle, then every lookup's slot. Rows last used by
 * batches from `released` on are pinned (their admissions would wait). */
/*
 * GPU slots: fill b->pub (sized by push) with what publish uploads: the lookups'
 * slots, then their groups by distinct row (a counting sort of the lookups by
 * their row's index: stable, so each group lists its lookups in increasing order;
 * distinct rows have distinct slots, so the groups' slots are distinct). Runs
 * before plan_one turns lslots from row indices into slots.
 */
static void plan_groups(struct cbatch *b)
{
	const size_t n = b->nids;
	const uint32_t nu = b->ob.nuniq;
	uint32_t *slots = b->pub, *gslots = slots + n, *goff = gslots + nu,
		 *order = goff + (size_t)nu + 1;
	memset(goff, 0, ((size_t)nu + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < n; i++)
		goff[b->lslots[i] + 1]++;
	for (uint32_t u = 0; u < nu; u++) {
		goff[u + 1] += goff[u];
		gslots[u] = goff[u]; /* a cursor for now */
	}
	for (size_t i = 0; i < n; i++)
		order[gslots[b->lslots[i]]++] = (uint32_t)i;
	for (uint32_t u = 0; u < nu; u++)
		gslots[u] = b->uslot[u];
	for (size_t i = 0; i < n; i++)
		slots[i] = b->uslot[b->lslots[i]];
}

static void plan_one(struct ember_cache *c, uint32_t released)
{
	struct cbatch *b = &c->ring[c->planned % c->window];
	pthread_mutex_lock(&c->omu);
	oracle_plan(c->oracle, &b->ob, released);
	pthread_mutex_unlock(&c->omu);
	if (c->ss.where == EMBER_CACHE_SLOTS_GPU)
		plan_groups(b);
	for (size_t i = 0; i < b->nids; i++) /* in place: distinct row -> its slot */
		b->lslots[i] = b->uslot[b->lslots[i]];
	b->mdone = 0;
	stat_add(&c->st_hits, b->ob.nuniq - b->ob.nmiss);
	stat_add(&c->st_planned, 1);
	c->planned++;
}

/*
 * Plan one more batch ahead only while the distinct rows of the batches planned
 * and not released, with the next one's, fit in the capacity: rows of unreleased
 * batches are pinned, and a plan that has to evict pinned rows makes its
 * admissions wait for the trainer's releases. The sum bounds the union of those
 * rows, so a plan admitted by it always finds unpinned victims for its misses, and
 * the next batch's fetch overlaps the trainer's work on the current one even when
 * a batch names a third of the capacity. (Half the capacity, the bound before
 * 2026-11-27, kept more unpinned rows to choose victims from: a hit rate 0.75 points higher on
 * bench_cache_loop's Criteo-like trace at 30% of the rows, but there the next
 * batch was planned only after the trainer released the current one, and the
 * trainer waited 29% of each step for fetches that its compute could hide.)
 */
static int inflight_fits(const struct ember_cache *c, uint32_t released)
{
	uint64_t rows = c->ring[c->planned % c->window].ob.nuniq;
	for (uint32_t q = released; q < c->planned; q++)
		rows += c->ring[q % c->window].ob.nuniq;
	return rows <= c->capacity;
}

static void *prefetcher_main(void *arg)
{
	struct ember_cache *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		if (c->stop)
			break;
		if (c->req) {
			/* C8: between rounds; the trainer waits, so no batch is acquired */
			struct cache_req *r = c->req;
			pthread_mutex_unlock(&c->mu);
			uint64_t t0 = now_ns();
			if (r->kind == REQ_FLUSH) {
				r->rc = writeback_all(c);
				r->fatal = r->rc < 0;
			} else {
				cache_rows_serve(c, r);
			}
			stat_add(&c->st_busy_ns, now_ns() - t0);
			pthread_mutex_lock(&c->mu);
			c->req = NULL;
			c->req_gen++;
			if (r->fatal && !c->failed)
				c->failed = r->rc;
			pthread_cond_broadcast(&c->tr_cv);
			continue;
		}
		uint32_t pushed = c->pushed, released = c->released;
		if (c->failed)
			goto idle;
		/* planned - released, not released + pf_batches: near 2^32 batches the
		 * sum wraps and the next batch was never planned (acquire hung) */
		if (c->planned < pushed && c->planned - released < c->pf_batches &&
		    (c->planned == released || inflight_fits(c, released))) {
			pthread_mutex_unlock(&c->mu);
			uint64_t t0 = now_ns();
			plan_one(c, released);
			stat_add(&c->st_plan_ns, now_ns() - t0);
			pthread_mutex_lock(&c->mu);
			continue;
		}
		if (c->resident < c->planned) {
			struct cbatch *b = &c->ring[c->resident % c->window];
			pthread_mutex_unlock(&c->mu);
			uint64_t t0 = now_ns();
			int rc = b->mdone < b->ob.nmiss ? fetch_round(c, b, released) : 0;
			if (rc >= 0 && b->mdone == b->ob.nmiss && c->ss.where == EMBER_CACHE_SLOTS_GPU) {
				int rc2 = slot_store_publish(&c->ss, &b->dev, b->pub,
							     2 * b->nids + 2 * (size_t)b->ob.nuniq + 1); /* G1 */
				if (rc2 < 0)
					rc = rc2;
			}
			stat_add(&c->st_busy_ns, now_ns() - t0);
			pthread_mutex_lock(&c->mu);
			if (rc < 0) {
				c->failed = rc;
				pthread_cond_broadcast(&c->tr_cv);
				continue;
			}
			if (b->mdone == b->ob.nmiss) {
				c->resident++; /* C2: all of its rows are in their slots */
				pthread_cond_broadcast(&c->tr_cv);
				continue;
			}
			if (rc > 0)
				continue;
		}
	idle:
		/* nothing to do until a push, a release, a flush or stop (re-check what
		 * changed while the lock was dropped) */
		if (c->pushed != pushed || c->released != released || c->stop || c->req)
			continue; /* their signals came while the lock was dropped */
		uint64_t t0 = now_ns();
		pthread_cond_wait(&c->pf_cv, &c->mu);
		stat_add(&c->st_idle_ns, now_ns() - t0);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* ---- open, close ------------------------------------------------------------------- */

void ember_cache_options_default(ember_cache_options *opts)
{
	if (opts)
		memset(opts, 0, sizeof(*opts));
}

static void batch_free(struct ember_cache *c, struct cbatch *b)
{
	if (c->ss.where == EMBER_CACHE_SLOTS_GPU && b->dev.ready)
		slot_batch_dev_free(&c->ss, &b->dev);
	em_free(b->parts, 0);
	em_free(b->pslots, 0);
	em_free(b->ids, 0);
	em_free(b->lslots, 0);
	em_free(b->uniq, 0);
	em_free(b->next, 0);
	em_free(b->uslot, 0);
	em_free(b->miss, 0);
	em_free(b->pub, 0);
}

/* Frees everything; returns the slot store's close result (device errors). */
static int cache_free(struct ember_cache *c)
{
	if (c->ring)
		for (uint32_t i = 0; i < c->window; i++)
			batch_free(c, &c->ring[i]);
	em_free(c->ring, 0);
	oracle_destroy(c->oracle);
	int rc = slot_store_close(&c->ss);
	em_free(c->dirty, 0);
	em_free(c->owner, 0);
	em_free(c->kbuf, 0);
	em_free(c->kptr, 0);
	em_free(c->klen, 0);
	em_free(c->vcap, 0);
	em_free(c->vlen, 0);
	em_free(c->vptr, 0);
	em_free(c->st, 0);
	em_free(c->stage, 0);
	em_free(c->rwbuf, 0);
	em_free(c->mv, 0);
	em_free(c->ap_map, 0);
	em_free(c->ap_slot, 0);
	em_free(c->ap_acc, 0);
	em_free(c->tables, 0);
	em_free(c, sizeof(*c));
	return rc;
}

static int check_options(const ember_cache_options *o, uint64_t *total_rows, uint32_t *max_dim)
{
	if (!o->tables || o->ntables == 0 || o->ntables > EMBER_CACHE_MAX_TABLES)
		return EMBER_EINVAL;
	*total_rows = 0;
	*max_dim = 0;
	for (uint32_t t = 0; t < o->ntables; t++) {
		const ember_cache_table *tb = &o->tables[t];
		if (tb->rows == 0 || tb->rows > EMBER_CACHE_MAX_ROWS || tb->dim == 0 ||
		    tb->dim > EMBER_CACHE_MAX_DIM || tb->storage > EMBER_CACHE_STORE_FP16 ||
		    tb->optimizer > EMBER_CACHE_OPT_ROWWISE_ADAGRAD ||
		    tb->init > EMBER_CACHE_TABLE_INIT_UNIFORM || !isfinite(tb->init_scale) ||
		    tb->init_scale < 0 || tb->reserved_ != 0)
			return EMBER_EINVAL;
		/* GPU slots: one arena layout for all tables, and the arena's state is
		 * Adagrad's (dim floats) or none: row-wise Adagrad is not supported there */
		if (o->slots == EMBER_CACHE_SLOTS_GPU &&
		    (tb->optimizer == EMBER_CACHE_OPT_ROWWISE_ADAGRAD ||
		     tb->optimizer != o->tables[0].optimizer))
			return EMBER_EINVAL;
		*total_rows += tb->rows;
		if (tb->dim > *max_dim)
			*max_dim = tb->dim;
	}
	if (o->init > EMBER_CACHE_INIT_UNIFORM || o->slots > EMBER_CACHE_SLOTS_GPU ||
	    !isfinite(o->init_scale) || o->init_scale < 0 || o->capacity > EMBER_CACHE_MAX_CAPACITY ||
	    o->window > EMBER_CACHE_MAX_WINDOW ||
	    (o->window && o->prefetch_batches > o->window) ||
	    (!o->window && o->prefetch_batches > 100))
		return EMBER_EINVAL;
	if (o->slots == EMBER_CACHE_SLOTS_HOST && (o->gpu || o->gpu_backend || o->gpu_device))
		return EMBER_EINVAL; /* device options without device slots: a mistake */
	if (o->slots == EMBER_CACHE_SLOTS_GPU &&
	    ((o->gpu && (o->gpu_backend || o->gpu_device)) || o->gpu_device < 0 ||
	     o->gpu_backend < EMBER_GPU_BACKEND_AUTO || o->gpu_backend > EMBER_GPU_BACKEND_CUDA))
		return EMBER_EINVAL;
	return 0;
}

/* The cache's sizes from the options: window, prefetch batches and depth, and the
 * capacity in rows (at most total_rows). Returns 0 or EMBER_EINVAL. */
static int cache_sizes(struct ember_cache *c, const ember_cache_options *opts, uint64_t total_rows)
{
	c->ntables = opts->ntables;
	c->window = opts->window ? opts->window : 100;
	c->pf_batches = opts->prefetch_batches;
	if (!c->pf_batches) {
		c->pf_batches = c->window / 4;
		c->pf_batches = c->pf_batches < 1 ? 1 : c->pf_batches > 8 ? 8 : c->pf_batches;
	}
	c->depth = opts->prefetch_depth ? opts->prefetch_depth : 1024;
	c->capacity = opts->capacity;
	if (!c->capacity) {
		c->capacity = total_rows / 100;
		if (c->capacity < 1024)
			c->capacity = 1024;
	}
	if (c->capacity > total_rows)
		c->capacity = total_rows;
	return c->capacity > EMBER_CACHE_MAX_CAPACITY ? EMBER_EINVAL : 0;
}

/* The oracle, the slot store and the buffers of the window and of a prefetch
 * round. Returns 0 or an error; what was made is freed by cache_free. */
static int cache_buffers(struct ember_cache *c, const ember_cache_options *opts, uint32_t max_dim)
{
	uint32_t max_floats = 0;
	for (uint32_t t = 0; t < c->ntables; t++)
		if (c->tables[t].dim + c->tables[t].state > max_floats)
			max_floats = c->tables[t].dim + c->tables[t].state;
	int gpu_state = opts->slots == EMBER_CACHE_SLOTS_GPU &&
				c->tables[0].state ? EMBER_GPU_STATE_ADAGRAD : EMBER_GPU_STATE_NONE;
	uint64_t *rows = em_alloc(c->ntables * sizeof(uint64_t));
	if (!rows)
		return EMBER_ENOMEM;
	for (uint32_t t = 0; t < c->ntables; t++)
		rows[t] = c->tables[t].rows;
	int rc = oracle_create(&c->oracle, c->ntables, rows, c->capacity, c->window);
	em_free(rows, 0);
	if (rc < 0)
		return rc;
	struct slot_gpu_config gcfg = {.gpu = opts->gpu, .backend = opts->gpu_backend,
				       .device = opts->gpu_device};
	rc = slot_store_open(&c->ss, opts->slots, (uint32_t)c->capacity, max_dim, max_floats,
			     gpu_state, c->depth, &gcfg);
	if (rc < 0)
		return rc;
	c->max_row_bytes = (size_t)c->ss.buf_floats * sizeof(float);
	c->ring = em_zalloc(c->window * sizeof(*c->ring));
	c->dirty = em_zalloc(c->capacity);
	c->owner = em_alloc(c->capacity * sizeof(*c->owner));
	size_t d = c->depth;
	c->kbuf = em_alloc(d * KEY_LEN);
	c->kptr = em_alloc(d * sizeof(*c->kptr));
	c->klen = em_alloc(d * sizeof(size_t));
	c->vcap = em_alloc(d * sizeof(size_t));
	c->vlen = em_alloc(d * sizeof(size_t));
	c->vptr = em_alloc(d * sizeof(void *));
	c->st = em_alloc(d * sizeof(int));
	c->stage = em_alloc(d * c->max_row_bytes);
	c->rwbuf = em_alloc(d * c->max_row_bytes);
	c->mv = em_alloc(d * sizeof(*c->mv));
	if (!c->ring || !c->dirty || !c->owner || !c->kbuf || !c->kptr || !c->klen ||
	    !c->vcap || !c->vlen || !c->vptr || !c->st || !c->stage || !c->rwbuf || !c->mv)
		return EMBER_ENOMEM;
	for (uint64_t s = 0; s < c->capacity; s++)
		c->owner[s] = (struct urow){.table = ORACLE_NONE};
	if (c->ss.where == EMBER_CACHE_SLOTS_GPU)
		for (uint32_t i = 0; i < c->window; i++)
			if ((rc = slot_batch_dev_init(&c->ss, &c->ring[i].dev)) < 0)
				return rc;
	return 0;
}

int ember_cache_open(ember_db *db, const ember_cache_options *opts, ember_cache **cache)
{
	if (!cache)
		return EMBER_EINVAL;
	*cache = NULL;
	if (!db || !opts)
		return EMBER_EINVAL;
	uint64_t total_rows;
	uint32_t max_dim;
	int rc = check_options(opts, &total_rows, &max_dim);
	if (rc < 0)
		return rc;
	struct ember_cache *c = em_zalloc(sizeof(*c));
	if (!c)
		return EMBER_ENOMEM;
	c->db = db;
	rc = cache_sizes(c, opts, total_rows);
	if (rc < 0)
		goto undo_cache;
	if (cache_tables_init(c, opts) < 0) {
		rc = EMBER_ENOMEM;
		goto undo_cache;
	}
	rc = cache_buffers(c, opts, max_dim);
	if (rc < 0)
		goto undo_cache;
	atomic_store_explicit(&c->st_resident, 0, memory_order_relaxed); /* before the thread */
	rc = ember_session_open(db, &c->sess);
	if (rc < 0)
		goto undo_cache;
	if (pthread_mutex_init(&c->mu, NULL) != 0) {
		rc = EMBER_ENOMEM;
		goto undo_session;
	}
	if (pthread_mutex_init(&c->omu, NULL) != 0) {
		rc = EMBER_ENOMEM;
		goto undo_mutex;
	}
	if (pthread_cond_init(&c->pf_cv, NULL) != 0) {
		rc = EMBER_ENOMEM;
		goto undo_omu;
	}
	if (pthread_cond_init(&c->tr_cv, NULL) != 0) {
		rc = EMBER_ENOMEM;
		goto undo_pf_cv;
	}
	if (pthread_create(&c->thread, NULL, prefetcher_main, c) != 0) {
		rc = EMBER_ENOMEM;
		goto undo_tr_cv;
	}
	c->thread_started = 1;
	*cache = c;
	return 0;

undo_tr_cv:
	pthread_cond_destroy(&c->tr_cv);
undo_pf_cv:
	pthread_cond_destroy(&c->pf_cv);
undo_omu:
	pthread_mutex_destroy(&c->omu);
undo_mutex:
	pthread_mutex_destroy(&c->mu);
undo_session:
	ember_session_close(c->sess);
undo_cache:
	cache_free(c);
	return rc;
}

int ember_cache_close(ember_cache *c)
{
	if (!c)
		return 0;
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_signal(&c->pf_cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	/* the prefetcher is gone: its session and the slots are this thread's now */
	int rc = writeback_all(c);
	if (c->failed && rc == 0)
		rc = c->failed;
	int rc2 = ember_session_close(c->sess);
	if (rc == 0)
		rc = rc2;
	pthread_cond_destroy(&c->tr_cv);
	pthread_cond_destroy(&c->pf_cv);
	pthread_mutex_destroy(&c->omu);
	pthread_mutex_destroy(&c->mu);
	rc2 = cache_free(c);
	if (rc == 0)
		rc = rc2;
	return rc;
}

/* ---- the trainer's calls ----------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	/* an eighth over what is needed: batches of about one size settle after a
	 * few pushes without doubling every ring entry's memory */
	size_t n = need + need / 8;
	n = n < 64 ? 64 : n;
	void *q = em_alloc(n * elem);
	if (!q)
		return EMBER_ENOMEM;
	em_free(*p, 0);
	*p = q;
	*cap = n;
	return 0;
}

/* Make room in b for nparts parts, nids lookups and nu distinct rows. */
static int batch_reserve(struct cbatch *b, uint32_t nparts, size_t nids, size_t nu)
{
	size_t pc = b->parts_cap, ic = b->ids_cap, uc = b->uniq_cap;
	if (nparts > pc) {
		size_t c2 = pc;
		if (grow((void **)&b->parts, &pc, nparts, sizeof(*b->parts)) < 0 ||
		    grow((void **)&b->pslots, &c2, nparts, sizeof(*b->pslots)) < 0)
			return EMBER_ENOMEM;
		b->parts_cap = (uint32_t)(pc < c2 ? pc : c2);
	}
	if (nids > ic) {
		size_t c2 = ic;
		if (grow((void **)&b->ids, &ic, nids, sizeof(uint64_t)) < 0 ||
		    grow((void **)&b->lslots, &c2, nids, sizeof(uint32_t)) < 0)
			return EMBER_ENOMEM;
		b->ids_cap = ic < c2 ? ic : c2;
	}
	if (nu > uc) {
		size_t c1 = uc, c2 = uc, c3 = uc, c4 = uc;
		if (grow((void **)&b->uniq, &c1, nu, sizeof(struct urow)) < 0 ||
		    grow((void **)&b->next, &c2, nu, sizeof(struct onext)) < 0 ||
		    grow((void **)&b->uslot, &c3, nu, sizeof(uint32_t)) < 0 ||
		    grow((void **)&b->miss, &c4, nu, sizeof(struct omiss)) < 0)
			return EMBER_ENOMEM;
		size_t m = c1;
		m = c2 < m ? c2 : m;
		m = c3 < m ? c3 : m;
		m = c4 < m ? c4 : m;
		b->uniq_cap = (uint32_t)(m > UINT32_MAX ? UINT32_MAX : m);
	}
	return 0;
}

int ember_cache_push(ember_cache *c, const ember_cache_batch *batch)
{
	if (!c || !batch || (batch->nparts && !batch->parts))
		return EMBER_EINVAL;
	size_t nids = 0;
	for (uint32_t p = 0; p < batch->nparts; p++) {
		const ember_cache_part *pt = &batch->parts[p];
		if (pt->table >= c->ntables || (pt->n && !pt->rows))
			return EMBER_EINVAL;
		nids += pt->n;
	}
	if (c->ss.where == EMBER_CACHE_SLOTS_GPU && nids > INT32_MAX)
		return EMBER_ETOOBIG; /* the kernels take at most 2^31 - 1 lookups */
	pthread_mutex_lock(&c->mu);
	int rc = c->failed ? EMBER_ESTATE
		 : c->pushed - c->released >= c->window ? EMBER_EAGAIN
		 : c->pushed >= ORACLE_MAX_BATCHES     ? EMBER_ENOSPC
						       : 0;
	uint32_t seq = c->pushed;
	pthread_mutex_unlock(&c->mu);
	if (rc < 0)
		return rc;
	/* entry seq % window held batch seq - window, released: the loader's now (C9) */
	struct cbatch *b = &c->ring[seq % c->window];
	/* Room for the distinct rows: at most min(ids, capacity), but a batch of
	 * skewed ids names far fewer (a Criteo-like batch: 75k of 426k), and the
	 * window holds `window` batches' arrays. So size them from the last batch
	 * (plus an eighth, or what the entry has already), and link again with the
	 * most room in the rare batch that needs more. */
	size_t nu_max = nids < c->capacity ? nids : c->capacity;
	size_t nu_try = nu_max;
	if (c->last_nuniq) {
		size_t est = (size_t)c->last_nuniq + c->last_nuniq / 8 + 64;
		est = est > b->uniq_cap ? est : b->uniq_cap;
		nu_try = est < nu_max ? est : nu_max;
	}
	/* GPU slots: room for what publish uploads (plan_groups), for at most nu_max
	 * distinct rows, before the batch is linked (a link cannot be undone after) */
	if (c->ss.where == EMBER_CACHE_SLOTS_GPU &&
	    (rc = grow((void **)&b->pub, &b->pub_cap, 2 * nids + 2 * nu_max + 1,
		       sizeof(uint32_t))) < 0)
		return rc;
	uint64_t t0 = now_ns();
	for (;;) {
		rc = batch_reserve(b, batch->nparts, nids, nu_try);
		if (rc < 0)
			return rc;
		/* link b into the oracle, deduplicating its ids in the same pass (C7) */
		b->ob = (struct obatch){.seq = seq, .next = b->next, .slot = b->uslot, .miss = b->miss};
		pthread_mutex_lock(&c->omu);
		oracle_link_begin(c->oracle, &b->ob, b->uniq, (uint32_t)nu_try);
		size_t at = 0;
		for (uint32_t p = 0; p < batch->nparts && rc == 0; p++) {
			const ember_cache_part *pt = &batch->parts[p];
			b->parts[p] = (ember_cache_part){.table = pt->table, .n = pt->n,
							 .rows = b->ids + at};
			b->pslots[p] = b->lslots + at;
			rc = oracle_link_part(c->oracle, &b->ob, pt->table, pt->n, pt->rows,
					      b->lslots + at, b->ids + at);
			at += pt->n;
		}
		if (rc < 0)
			oracle_link_abort(c->oracle, &b->ob); /* as if never pushed */
		else
			oracle_link_end(c->oracle, &b->ob);
		pthread_mutex_unlock(&c->omu);
		if (rc != EMBER_ETOOBIG || nu_try == nu_max)
			break;
		nu_try = nu_max; /* more distinct rows than the estimate: all the room */
		rc = 0;
	}
	stat_add(&c->st_plan_ns, now_ns() - t0);
	if (rc < 0)
		return rc;
	uint32_t nu = b->ob.nuniq;
	c->last_nuniq = nu;
	b->nparts = batch->nparts;
	b->nids = nids;
	b->mdone = 0;
	stat_add(&c->st_pushed, 1);
	stat_add(&c->st_lookups, nids);
	stat_add(&c->st_unique, nu);
	pthread_mutex_lock(&c->mu);
	c->pushed = seq + 1; /* publishes b to the prefetcher (mu) */
	pthread_cond_signal(&c->pf_cv);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

static int acquire(ember_cache *c, ember_cache_view *v, int wait)
{
	if (!c || !v)
		return EMBER_EINVAL;
	if (c->holding)
		return EMBER_ESTATE; /* C6 */
	pthread_mutex_lock(&c->mu);
	int rc = 0;
	if (c->acquired == c->pushed) {
		rc = c->failed ? c->failed : EMBER_ESTATE;
		goto out;
	}
	if (c->resident <= c->acquired && !c->failed) {
		if (!wait) {
			rc = EMBER_EAGAIN;
			goto out;
		}
		uint64_t t0 = now_ns();
		while (c->resident <= c->acquired && !c->failed)
			pthread_cond_wait(&c->tr_cv, &c->mu);
		stat_add(&c->st_wait_ns, now_ns() - t0);
	}
	if (c->failed) {
		rc = c->failed;
		goto out;
	}
	struct cbatch *b = &c->ring[c->acquired % c->window];
	v->batch = c->acquired;
	v->nparts = b->nparts;
	v->parts = b->parts;
	v->slots = b->pslots;
	v->slot_memory = slot_store_base(&c->ss);
	v->slot_stride = c->ss.stride;
	v->nslots = c->capacity;
	v->flags = 0;
	v->reserved_ = 0;
	v->reserved2_ = 0;
	v->done = NULL;
	if (c->ss.where == EMBER_CACHE_SLOTS_GPU) {
		/* G5: ready again, after the G2 waits of every release so far */
		if ((rc = slot_store_ready(&c->ss, &b->dev)) < 0)
			goto out;
		v->gpu = c->ss.g;
		v->arena = c->ss.arena;
		v->dev_slots = b->dev.dev_slots;
		v->ngroups = b->ob.nuniq;
		v->dev_group_slots = b->dev.dev_slots + b->nids;
		v->dev_group_offsets = v->dev_group_slots + b->ob.nuniq;
		v->dev_group_order = v->dev_group_offsets + b->ob.nuniq + 1;
		v->nlookups = b->nids;
		v->ready = b->dev.ready; /* G1, G5 */
	} else {
		v->gpu = NULL;
		v->arena = NULL;
		v->dev_slots = NULL;
		v->ngroups = 0;
		v->dev_group_slots = v->dev_group_offsets = v->dev_group_order = NULL;
		v->nlookups = b->nids;
		v->ready = NULL;
	}
	v->internal_ = b;
	b->applied = 0;
	c->acquired++;
	c->holding = 1;
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int ember_cache_acquire(ember_cache *c, ember_cache_view *v)
{
	return acquire(c, v, 1);
}

int ember_cache_try_acquire(ember_cache *c, ember_cache_view *v)
{
	return acquire(c, v, 0);
}

int ember_cache_release(ember_cache *c, ember_cache_view *v)
{
	if (!c || !v)
		return EMBER_EINVAL;
	struct cbatch *b = cache_acquired_batch(c, v);
	if (!b)
		return EMBER_ESTATE;
	int rc = slot_store_order(&c->ss, v->done); /* G2: before `released` moves */
	if (rc < 0)
		return rc;
	/* rows ember_cache_apply updated are dirty even in a view marked READONLY */
	if (!(v->flags & EMBER_CACHE_VIEW_READONLY) || b->applied)
		for (uint32_t k = 0; k < b->ob.nuniq; k++)
			c->dirty[b->uslot[k]] = 1; /* C5 */
	c->holding = 0;
	v->internal_ = NULL;
	stat_add(&c->st_released, 1);
	pthread_mutex_lock(&c->mu);
	c->released++; /* publishes the dirty flags to the prefetcher (mu) */
	pthread_cond_signal(&c->pf_cv);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int ember_cache_flush(ember_cache *c)
{
	if (!c)
		return EMBER_EINVAL;
	if (c->holding)
		return EMBER_ESTATE;
	struct cache_req r = {.kind = REQ_FLUSH};
	return cache_request(c, &r);
}

/* C8: the trainer's side of a request (flush, read_rows, write_rows). */
int cache_request(struct ember_cache *c, struct cache_req *r)
{
	pthread_mutex_lock(&c->mu);
	int rc = c->failed ? EMBER_ESTATE : 0;
	if (rc == 0) {
		/* one trainer: c->req is NULL here (the previous request was served
		 * before its caller returned) */
		uint64_t gen = c->req_gen;
		c->req = r;
		pthread_cond_signal(&c->pf_cv);
		while (c->req_gen == gen)
			pthread_cond_wait(&c->tr_cv, &c->mu);
		rc = r->rc;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int ember_cache_stats_get(ember_cache *c, ember_cache_stats *out)
{
	if (!c || !out)
		return EMBER_EINVAL;
/* independent counters: relaxed loads (a snapshot may mix slightly different moments) */
#define LD(x) atomic_load_explicit(&c->x, memory_order_relaxed)
	out->batches_pushed = LD(st_pushed);
	out->batches_planned = LD(st_planned);
	out->batches_released = LD(st_released);
	out->lookups = LD(st_lookups);
	out->unique_rows = LD(st_unique);
	out->hits = LD(st_hits);
	out->rows_fetched = LD(st_fetched);
	out->rows_absent = LD(st_absent);
	out->rows_evicted = LD(st_evicted);
	out->rows_written_back = LD(st_wb);
	out->bytes_fetched = LD(st_bytes_fetched);
	out->bytes_written_back = LD(st_bytes_wb);
	out->wait_ns = LD(st_wait_ns);
	out->prefetch_idle_ns = LD(st_idle_ns);
	out->prefetch_busy_ns = LD(st_busy_ns);
	out->plan_ns = LD(st_plan_ns);
	out->fetch_rounds = LD(st_rounds);
	out->resident = LD(st_resident);
#undef LD
	out->capacity = c->capacity;
	return 0;
}
