/*
 * buffer.c - the partition buffer: c partition slots driven by a plan, with
 * background reads of the next state and background write-back of dirty evictions.
 *
 * Design notes
 * ------------
 * Threads: the trainer (the caller of ember_graph_buffer_*), GRAPH_READERS readers
 * and a writer (each with a store session of its own), and an updater (update.c:
 * asynchronous updates, the next state's examples); a reader claims queued loads
 * under the lock, so two never take the same one. One mutex (mu) guards every slot
 * and bucket-entry field except the data arrays; four condition variables wake the
 * reader (cv_reader), the writer (cv_writer), the updater (cv_update) and whoever
 * waits for I/O or an update (cv_done).
 *
 * Slot states and their transitions (each names the function that makes it):
 *
 *   FREE --schedule_load--> LOADING --reader_main--> RESIDENT
 *   RESIDENT --evict (clean, or READ_ONLY)--> FREE (valid: a clean copy stays)
 *   RESIDENT --evict (dirty)--> FREE + writing --writer_main--> FREE (valid, clean)
 *   RESIDENT --ember_graph_buffer_flush (dirty)--> RESIDENT + writing --writer_main-->
 *       RESIDENT (clean)
 *   FREE (valid, maybe writing) --schedule_load of the same partition--> LOADING
 *       with need_read = false (a reclaim: no read)
 *
 * Invariants:
 *   1. A slot's data changes only when (a) the reader fills a LOADING slot whose
 *      writing flag is clear, or (b) the trainer (or the updater thread, applying the
 *      trainer's asynchronous update: update.c) updates a RESIDENT slot of the
 *      current state. The writer reads data only while writing is set, and (a) and
 *      (b) never happen to a slot that is writing: the reader skips LOADING slots
 *      that are writing until the write ends, a reclaim of a partition being written
 *      back waits the same way, and flush waits for its writes before returning.
 *      So a read of a partition being written back waits for that write.
 *   2. part_slot[P] names the one slot whose part is P (LOADING, RESIDENT, or a
 *      valid FREE copy), or GRAPH_NONE. A slot taken for another partition first
 *      clears the old partition's entry.
 *   3. Every partition of the current state is RESIDENT in a slot; next_state
 *      returns only when that holds and every bucket the state needs is READY.
 *   4. Background reads only target slots outside the current state (prefetch) or
 *      slots the trainer waits for (inside next_state), so the trainer never reads
 *      data that is being filled.
 *   5. Clean partitions are never written; dirty ones are written once per eviction
 *      (or flush), and a write's data is what the trainer left at eviction.
 *   6. Slot memory is nslots x slot_bytes, fixed at open; held buckets and the
 *      example arrays (two: the current state's and the next one's, built ahead)
 *      are checked against memory_budget at set_plan (the union of a state's and
 *      the next state's buckets, the peak of any two neighbours). Buckets are read
 *      bucket_ahead states ahead: the horizon in training mode when the largest
 *      window of horizon + 1 states' buckets passes the same check, else 1.
 *   7. Held buckets belong to states k .. k+bucket_ahead only (next_state frees
 *      the others, all READY: k waited for its own), so nents = (max(horizon, 1)
 *      + 1) x c^2 entries always suffice.
 *
 * Pipeline of next_state(k): evict what neither state k nor the states read ahead
 * for (k+1 .. k+H, H = the extra slots) hold (dirty ones go to the writer) ->
 * schedule loads of what state k lacks (normally nothing: it was prefetched; if no
 * slot is free, a partition kept for a later state is evicted, the one needed
 * last) -> schedule the buckets of states k+1 .. k+bucket_ahead and the partitions
 * of k+1, k+2, ... into free slots while they last -> wait for state k -> build its
 * examples. The reader takes every queued load at once and issues one
 * ember_get_batch over all their chunks.
 */
#include "graph/graph_int.h"

#include <errno.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"

/* ---- small helpers -------------------------------------------------------------- */

void graph_mem_add(ember_graph_buffer *b, int64_t d)
{
	b->st.memory_bytes = (uint64_t)((int64_t)b->st.memory_bytes + d);
	if (b->st.memory_bytes > b->st.memory_peak)
		b->st.memory_peak = b->st.memory_bytes;
}

static uint64_t bucket_count(const ember_graph_buffer *b, uint32_t bucket)
{
	return b->g->counts[bucket];
}

/* Memory of a held bucket (edges, and views when the sampler needs them). */
static uint64_t bucket_bytes(const ember_graph_buffer *b, uint32_t bucket)
{
	uint64_t n = bucket_count(b, bucket), bytes = n * GRAPH_EDGE_BYTES;
	if (b->all_edges) /* as bucket_views allocates them: csc_src, csr_off, csc_off */
		bytes += (n * 4 + 4) + 4 * (graph_part_rows(&b->g->meta, bucket / b->p) + 1) +
			 4 * (graph_part_rows(&b->g->meta, bucket % b->p) + 2);
	return bytes;
}

static void bucket_free(ember_graph_buffer *b, struct bucket_ent *e)
{
	em_free(e->edges, 0);
	em_free(e->csr_off, 0);
	em_free(e->csc_off, 0);
	em_free(e->csc_src, 0);
	graph_mem_add(b, -(int64_t)e->bytes);
	b->bucket_ent[e->bucket] = GRAPH_NONE;
	*e = (struct bucket_ent){.bucket = GRAPH_NONE};
}

static bool in_state(const ember_graph_buffer *b, int64_t k, uint32_t part)
{
	if (k < 0 || k >= b->nstates)
		return false;
	const uint32_t *s = b->states + (uint64_t)k * b->c;
	for (uint32_t i = 0; i < b->c; i++)
		if (s[i] == part)
			return true;
	return false;
}

/* Does state k need bucket (i, j) in memory? */
static bool state_needs(const ember_graph_buffer *b, int64_t k, uint32_t bucket)
{
	if (k < 0 || k >= b->nstates || bucket_count(b, bucket) == 0)
		return false;
	if (b->all_edges)
		return in_state(b, k, bucket / b->p) && in_state(b, k, bucket % b->p);
	return b->bucket_state[bucket] == (uint32_t)k;
}

/* ---- the reader ------------------------------------------------------------------- */

/* Is partition `part` being written back from some slot? (A read of it must wait.) */
static bool part_writing(const ember_graph_buffer *b, uint32_t part)
{
	for (uint32_t i = 0; i < b->nslots; i++)
		if (b->slots[i].writing && b->slots[i].write_part == part)
			return true;
	return false;
}

struct rd_item {
	int is_bucket;
	uint32_t idx;       /* slot or entry */
	uint32_t first_key; /* its first chunk in the batch arrays */
	uint32_t nkeys;
};

/* Build the CSR and CSC views of a loaded bucket (counting sort by dst). */
static int bucket_views(ember_graph_buffer *b, struct bucket_ent *e)
{
	const struct graph_meta *m = &b->g->meta;
	uint64_t ri = graph_part_rows(m, e->bucket / b->p), rj = graph_part_rows(m, e->bucket % b->p);
	e->csr_off = em_zalloc((ri + 1) * 4);
	e->csc_off = em_zalloc((rj + 2) * 4);
	e->csc_src = em_alloc(e->count * 4 + 4);
	if (!e->csr_off || !e->csc_off || !e->csc_src)
		return EMBER_ENOMEM;
	for (uint64_t x = 0; x < e->count; x++) {
		uint32_t s = e->edges[3 * x], d = e->edges[3 * x + 2];
		if (s >= ri || d >= rj)
			return EMBER_ECORRUPT;
		e->csr_off[s + 1]++;
		e->csc_off[d + 2]++;
	}
	for (uint64_t s = 0; s < ri; s++)
		e->csr_off[s + 1] += e->csr_off[s];
	for (uint64_t d = 0; d < rj; d++)
		e->csc_off[d + 2] += e->csc_off[d + 1];
	/* csc_off[d + 1] is now the start of d; placing shifts it to d's end, which is
	 * d + 1's start: csc_off[0 .. rj] ends up as the offsets */
	for (uint64_t x = 0; x < e->count; x++) {
		uint32_t d = e->edges[3 * x + 2];
		e->csc_src[e->csc_off[d + 1]++] = e->edges[3 * x];
	}
	for (uint64_t x = 1; x < e->count; x++)
		if (e->edges[3 * x] < e->edges[3 * (x - 1)])
			return EMBER_ECORRUPT; /* the CSR view needs src order */
	return 0;
}

/* The reader thread's batch: the loads it takes at once, and the arrays of their
 * ember_get_batch call (grown, never shrunk; the reader's own). */
struct rd_batch {
	struct rd_item *items;
	size_t items_cap, keys_cap;
	size_t ni, nk; /* loads and keys of the batch taken */
	uint8_t *keybuf;
	const void **keys;
	size_t *klens, *caps, *vlens;
	void **bufs;
	int *status;
};

/* Room for ni loads and nk keys (under the lock: a short allocation). 0 or
 * EMBER_ENOMEM (the arrays kept). */
static int rd_grow(struct rd_batch *rb, size_t ni, size_t nk)
{
	if (ni <= rb->items_cap && nk <= rb->keys_cap)
		return 0;
	size_t icap = ni * 2, kcap = nk * 2 + 16;
	struct rd_item *it = em_alloc(icap * sizeof(*it));
	uint8_t *kb = em_alloc(kcap * GRAPH_KEY_MAX);
	void *arr = em_alloc(kcap * (2 * sizeof(void *) + 3 * sizeof(size_t) + sizeof(int)));
	if (!it || !kb || !arr) {
		em_free(it, 0);
		em_free(kb, 0);
		em_free(arr, 0);
		return EMBER_ENOMEM;
	}
	em_free(rb->items, 0);
	em_free(rb->keybuf, 0);
	em_free(rb->keys, 0);
	rb->items = it;
	rb->keybuf = kb;
	rb->keys = arr;
	rb->bufs = (void **)(rb->keys + kcap);
	rb->klens = (size_t *)(rb->bufs + kcap);
	rb->caps = rb->klens + kcap;
	rb->vlens = rb->caps + kcap;
	rb->status = (int *)(rb->vlens + kcap);
	rb->items_cap = icap;
	rb->keys_cap = kcap;
	return 0;
}

/* Take every queued load whose slot is not being written (under b->mu): a first
 * pass counts them and grows the arrays, the second takes them. rb->ni = 0: none.
 * Returns 0 or EMBER_ENOMEM. */
static int rd_take(ember_graph_buffer *b, struct rd_batch *rb)
{
	const struct graph_meta *m = &b->g->meta;
	size_t ni = 0, nk = 0;
	rb->ni = rb->nk = 0;
	for (int pass = 0; pass < 2; pass++) {
		ni = nk = 0;
		for (uint32_t i = 0; i < b->nslots; i++) {
			struct slot *sl = &b->slots[i];
			if (!sl->load_queued || sl->writing ||
			    (sl->need_read && part_writing(b, sl->part)))
				continue;
			uint32_t n = sl->need_read ? graph_chunks(graph_part_rows(m, sl->part),
								  m->rows_per_chunk)
						   : 0;
			if (pass) {
				rb->items[ni] = (struct rd_item){0, i, (uint32_t)nk, n};
				sl->load_queued = false;
			}
			nk += n;
			ni++;
		}
		for (uint32_t i = 0; i < b->nents; i++) {
			struct bucket_ent *e = &b->ents[i];
			if (!e->load_queued)
				continue;
			uint32_t n = graph_chunks(e->count, m->edges_per_chunk);
			if (pass) {
				rb->items[ni] = (struct rd_item){1, i, (uint32_t)nk, n};
				e->load_queued = false;
			}
			nk += n;
			ni++;
		}
		if (pass == 0) {
			if (ni == 0)
				return 0;
			int rc = rd_grow(rb, ni, nk);
			if (rc < 0)
				return rc;
		}
	}
	rb->ni = ni;
	rb->nk = nk;
	return 0;
}

/* Allocate bucket memory and build the keys, under the lock (the entries' buckets
 * and the slots' partitions cannot change meanwhile anyway: they are LOADING).
 * Returns 0 or EMBER_ENOMEM. */
static int rd_build_keys(ember_graph_buffer *b, struct rd_batch *rb)
{
	ember_graph *g = b->g;
	const struct graph_meta *m = &g->meta;
	for (size_t t = 0; t < rb->ni; t++) {
		struct rd_item *it = &rb->items[t];
		uint32_t a, bb, kind, per;
		uint8_t *dst;
		uint64_t bytes;
		if (it->is_bucket) {
			struct bucket_ent *e = &b->ents[it->idx];
			e->edges = em_alloc(e->count * GRAPH_EDGE_BYTES);
			if (!e->edges)
				return EMBER_ENOMEM;
			kind = GK_EDGES;
			a = e->bucket / b->p;
			bb = e->bucket % b->p;
			dst = (uint8_t *)e->edges;
			bytes = e->count * GRAPH_EDGE_BYTES;
			per = m->edges_per_chunk * GRAPH_EDGE_BYTES;
		} else {
			struct slot *sl = &b->slots[it->idx];
			kind = GK_NODES;
			a = sl->part;
			bb = 0;
			dst = (uint8_t *)sl->data;
			bytes = graph_part_rows(m, sl->part) * b->dim * 4;
			per = m->rows_per_chunk * b->dim * 4;
		}
		for (uint32_t c = 0; c < it->nkeys; c++) {
			uint32_t k = it->first_key + c;
			uint8_t *kp = rb->keybuf + (size_t)k * GRAPH_KEY_MAX;
			rb->klens[k] = graph_key(kp, g->name, g->name_len, (int)kind, a, bb, c);
			rb->keys[k] = kp;
			rb->bufs[k] = dst + (uint64_t)c * per;
			uint64_t left = bytes - (uint64_t)c * per;
			rb->caps[k] = left < per ? left : per;
		}
	}
	return 0;
}

/* Read the batch (without the lock): every chunk must be there, whole. Builds the
 * views of the buckets read (all_edges). Returns 0 or an error. */
static int rd_read(ember_graph_buffer *b, ember_session *s, struct rd_batch *rb)
{
	size_t nk = rb->nk;
	int rc = nk ? ember_get_batch(s, nk, (const void *const *)rb->keys, rb->klens,
				      (void *const *)rb->bufs, rb->caps, rb->vlens, rb->status)
		    : 0;
	for (size_t k = 0; k < nk && rc == 0; k++) {
		if (rb->status[k] == EMBER_ENOTFOUND || rb->status[k] == EMBER_ERANGE ||
		    (rb->status[k] == 0 && rb->vlens[k] != rb->caps[k]))
			rc = EMBER_ECORRUPT;
		else if (rb->status[k] < 0)
			rc = rb->status[k];
	}
	for (size_t t = 0; t < rb->ni && rc == 0 && b->all_edges; t++)
		if (rb->items[t].is_bucket)
			rc = bucket_views(b, &b->ents[rb->items[t].idx]);
	return rc;
}

/* The batch is in (under b->mu): its buckets ready, its slots resident. */
static void rd_done(ember_graph_buffer *b, const struct rd_batch *rb)
{
	for (size_t k = 0; k < rb->nk; k++)
		b->st.bytes_read += rb->caps[k];
	for (size_t t = 0; t < rb->ni; t++) {
		if (rb->items[t].is_bucket) {
			struct bucket_ent *e = &b->ents[rb->items[t].idx];
			e->state = BK_READY;
			b->st.buckets_read++;
			pthread_cond_signal(&b->cv_update); /* examples ahead may wait for it */
		} else {
			struct slot *sl = &b->slots[rb->items[t].idx];
			sl->state = SLOT_RESIDENT;
			sl->valid = true;
			sl->dirty = false;
			b->st.partitions_loaded++;
			if (sl->need_read)
				b->st.partitions_read++;
			else
				b->st.partitions_reclaimed++;
		}
	}
	pthread_cond_broadcast(&b->cv_done);
}

static void *reader_main(void *arg)
{
	ember_graph_buffer *b = arg;
	ember_session *s = NULL;
	int rc = ember_session_open(b->g->db, &s);
	pthread_mutex_lock(&b->mu);
	b->ready++;
	if (rc < 0 && !b->error)
		b->error = rc;
	pthread_cond_broadcast(&b->cv_done);
	struct rd_batch rb = {0};
	while (!b->stop && rc == 0) {
		rc = rd_take(b, &rb);
		if (rc < 0)
			break;
		if (rb.ni == 0) {
			pthread_cond_wait(&b->cv_reader, &b->mu);
			continue;
		}
		rc = rd_build_keys(b, &rb);
		if (rc < 0)
			break;
		pthread_mutex_unlock(&b->mu);
		double t0 = graph_now();
		rc = rd_read(b, s, &rb);
		double t1 = graph_now();
		pthread_mutex_lock(&b->mu);
		b->st.read_seconds += t1 - t0;
		if (rc < 0)
			break;
		rd_done(b, &rb);
	}
	if (rc < 0 && !b->error)
		b->error = rc;
	pthread_cond_broadcast(&b->cv_done);
	pthread_mutex_unlock(&b->mu);
	em_free(rb.items, 0);
	em_free(rb.keybuf, 0);
	em_free(rb.keys, 0);
	ember_session_close(s);
	return NULL;
}

/* ---- the writer ------------------------------------------------------------------- */

static void *writer_main(void *arg)
{
	ember_graph_buffer *b = arg;
	ember_graph *g = b->g;
	const struct graph_meta *m = &g->meta;
	ember_session *s = NULL;
	int rc = ember_session_open(g->db, &s);
	uint32_t per_slot = graph_chunks(b->ps, m->rows_per_chunk);
	size_t kcap = (size_t)per_slot * b->nslots + 1;
	uint8_t *keybuf = em_alloc(kcap * GRAPH_KEY_MAX);
	void *arr = em_alloc(kcap * (2 * sizeof(void *) + 2 * sizeof(size_t) + sizeof(int)));
	uint32_t *taken = em_alloc(b->nslots * sizeof(uint32_t));
	if (rc == 0 && (!keybuf || !arr || !taken))
		rc = EMBER_ENOMEM;
	const void **keys = arr;
	const void **vals = keys + kcap;
	size_t *klens = (size_t *)(vals + kcap), *vlens = klens + kcap;
	int *status = (int *)(vlens + kcap);
	pthread_mutex_lock(&b->mu);
	b->ready++;
	if (rc < 0 && !b->error)
		b->error = rc;
	pthread_cond_broadcast(&b->cv_done);
	while (!b->stop && rc == 0) {
		uint32_t nt = 0;
		size_t nk = 0;
		for (uint32_t i = 0; i < b->nslots; i++) {
			struct slot *sl = &b->slots[i];
			if (!sl->write_queued)
				continue;
			if (b->upd_applied < sl->write_after) {
				/* the update job outstanding at its eviction may still
				 * add to its rows (update.c invariant 3): the updater
				 * wakes us when it is applied */
				continue;
			}
			sl->write_queued = false;
			taken[nt++] = i;
			uint64_t rows = graph_part_rows(m, sl->write_part);
			uint32_t per = m->rows_per_chunk * b->dim * 4;
			for (uint32_t c = 0; c < graph_chunks(rows, m->rows_per_chunk); c++) {
				uint8_t *kp = keybuf + nk * GRAPH_KEY_MAX;
				klens[nk] = graph_key(kp, g->name, g->name_len, GK_NODES, sl->write_part, 0, c);
				keys[nk] = kp;
				vals[nk] = (uint8_t *)sl->data + (uint64_t)c * per;
				uint64_t left = rows * b->dim * 4 - (uint64_t)c * per;
				vlens[nk] = left < per ? left : per;
				nk++;
			}
		}
		if (nt == 0) {
			pthread_cond_wait(&b->cv_writer, &b->mu);
			continue;
		}
		pthread_mutex_unlock(&b->mu);
		double t0 = graph_now();
		rc = nk ? ember_put_batch(s, nk, (const void *const *)keys, klens,
					  (const void *const *)vals, vlens, status)
			: 0;
		uint64_t bytes = 0;
		for (size_t k = 0; k < nk; k++) {
			if (rc == 0 && status[k] < 0)
				rc = status[k];
			bytes += vlens[k];
		}
		double t1 = graph_now();
		pthread_mutex_lock(&b->mu);
		b->st.write_seconds += t1 - t0;
		if (rc < 0)
			break;
		b->st.bytes_written += bytes;
		for (uint32_t t = 0; t < nt; t++) {
			struct slot *sl = &b->slots[taken[t]];
			sl->writing = false;
			sl->dirty = false;
			b->st.partitions_written++;
		}
		pthread_cond_broadcast(&b->cv_done);
		pthread_cond_broadcast(&b->cv_reader); /* loads that waited for these writes */
	}
	if (rc < 0 && !b->error)
		b->error = rc;
	pthread_cond_broadcast(&b->cv_done);
	pthread_mutex_unlock(&b->mu);
	em_free(keybuf, 0);
	em_free(arr, 0);
	em_free(taken, 0);
	ember_session_close(s);
	return NULL;
}

/* ---- scheduling (trainer thread, under mu) ---------------------------------------- */

/* Make partition `part` LOADING or RESIDENT. Uses only slots that hold no partition
 * of state `keep` (the current state) and are not LOADING/RESIDENT. Returns false
 * when no slot is free. */
static bool schedule_load(ember_graph_buffer *b, uint32_t part)
{
	uint32_t i = b->part_slot[part];
	if (i != GRAPH_NONE) {
		struct slot *sl = &b->slots[i];
		if (sl->state != SLOT_FREE)
			return true; /* already LOADING or RESIDENT */
		if (sl->valid) {
			/* a reclaim; the reader waits for a write in flight (invariant 1) */
			sl->state = SLOT_LOADING;
			sl->need_read = false;
			sl->load_queued = true;
			if (sl->writing)
				b->st.reads_after_write++;
			return true;
		}
	}
	/* prefer an empty slot, then a clean copy, then one still being written */
	uint32_t best = GRAPH_NONE;
	int best_rank = 3;
	for (uint32_t s = 0; s < b->nslots; s++) {
		struct slot *sl = &b->slots[s];
		if (sl->state != SLOT_FREE)
			continue;
		int rank = sl->writing ? 2 : sl->valid ? 1 : 0;
		if (rank < best_rank) {
			best_rank = rank;
			best = s;
		}
	}
	if (best == GRAPH_NONE)
		return false;
	struct slot *sl = &b->slots[best];
	if (sl->part != GRAPH_NONE && b->part_slot[sl->part] == best)
		b->part_slot[sl->part] = GRAPH_NONE;
	sl->part = part;
	sl->valid = false;
	sl->dirty = false;
	sl->state = SLOT_LOADING;
	sl->need_read = true;
	sl->load_queued = true;
	b->part_slot[part] = best;
	if (part_writing(b, part))
		b->st.reads_after_write++;
	return true;
}

static int schedule_bucket(ember_graph_buffer *b, uint32_t bucket)
{
	if (b->bucket_ent[bucket] != GRAPH_NONE)
		return 0;
	for (uint32_t i = 0; i < b->nents; i++) {
		struct bucket_ent *e = &b->ents[i];
		if (e->bucket != GRAPH_NONE)
			continue;
		*e = (struct bucket_ent){.bucket = bucket, .state = BK_LOADING, .load_queued = true,
					 .count = bucket_count(b, bucket),
					 .bytes = bucket_bytes(b, bucket)};
		graph_mem_add(b, (int64_t)e->bytes);
		b->bucket_ent[bucket] = i;
		return 0;
	}
	return EMBER_ENOSPC; /* cannot happen: nents covers states k .. k+ahead */
}

static void evict(ember_graph_buffer *b, struct slot *sl);

/* Prefetch horizon: states after the current one whose partitions may be read
 * ahead (and stay resident); one per extra slot. */
static int64_t horizon(const ember_graph_buffer *b)
{
	return (int64_t)(b->nslots - b->c);
}

/* Is the partition needed by state k or by one of the states the buffer may be
 * reading ahead for (k+1 .. k+horizon)? Such partitions are not evicted. */
static bool wanted(const ember_graph_buffer *b, int64_t k, uint32_t part)
{
	for (int64_t j = k; j <= k + horizon(b) && j < b->nstates; j++)
		if (in_state(b, j, part))
			return true;
	return false;
}

/* The first state after k that holds part (nstates if none). */
static int64_t next_use(const ember_graph_buffer *b, int64_t k, uint32_t part)
{
	for (int64_t j = k + 1; j < b->nstates; j++)
		if (in_state(b, j, part))
			return j;
	return b->nstates;
}

/*
 * Schedule the partitions of state k. A prefetch (!all) takes free slots only and
 * returns false at the first partition that finds none. For the state the trainer
 * is entering (all) a partition that finds no slot evicts a resident partition
 * kept for a later state (the one needed last); c slots always suffice then.
 */
static int schedule_parts(ember_graph_buffer *b, int64_t k, bool all)
{
	const uint32_t *s = b->states + (uint64_t)k * b->c;
	int rc = 1;
	for (uint32_t i = 0; i < b->c; i++) {
		while (!schedule_load(b, s[i])) {
			if (!all) {
				rc = 0;
				goto out;
			}
			struct slot *victim = NULL;
			int64_t far = -1;
			for (uint32_t x = 0; x < b->nslots; x++) {
				struct slot *sl = &b->slots[x];
				if (sl->state != SLOT_RESIDENT || in_state(b, k, sl->part))
					continue;
				int64_t u = next_use(b, k, sl->part);
				if (u > far) {
					far = u;
					victim = sl;
				}
			}
			if (victim) {
				evict(b, victim);
				continue;
			}
			/* every other slot is loading for a later state: wait for one */
			bool loading = false;
			for (uint32_t x = 0; x < b->nslots; x++)
				loading |= b->slots[x].state == SLOT_LOADING &&
					   !in_state(b, k, b->slots[x].part);
			if (!loading)
				return EMBER_ENOSPC; /* cannot happen: nslots >= c */
			if (b->error)
				return b->error;
			pthread_cond_wait(&b->cv_done, &b->mu);
		}
	}
out:
	pthread_cond_signal(&b->cv_reader);
	return rc;
}

/* Schedule the buckets state k needs. */
static int schedule_buckets(ember_graph_buffer *b, int64_t k)
{
	const uint32_t *s = b->states + (uint64_t)k * b->c;
	for (uint32_t i = 0; i < b->c; i++)
		for (uint32_t j = 0; j < b->c; j++) {
			uint32_t bk = s[i] * b->p + s[j];
			if (state_needs(b, k, bk)) {
				int rc = schedule_bucket(b, bk);
				if (rc < 0)
					return rc;
			}
		}
	pthread_cond_signal(&b->cv_reader);
	return 0;
}

/* Does a state the buffer holds buckets for (k .. k+bucket_ahead) need bucket? */
static bool bucket_wanted(const ember_graph_buffer *b, int64_t k, uint32_t bucket)
{
	for (int64_t j = k; j <= k + b->bucket_ahead; j++)
		if (state_needs(b, j, bucket))
			return true;
	return false;
}

/* Read ahead after entering state k: the buckets of states k+1 .. k+bucket_ahead,
 * and the partitions of states k+1, k+2, ... while free slots last (within the
 * horizon). */
static int prefetch_after(ember_graph_buffer *b, int64_t k)
{
	if (k + 1 >= b->nstates)
		return 0;
	int rc = 0;
	for (int64_t j = k + 1; rc == 0 && j <= k + b->bucket_ahead && j < b->nstates; j++)
		rc = schedule_buckets(b, j);
	for (int64_t j = k + 1; rc == 0 && j < b->nstates && j <= k + (horizon(b) ? horizon(b) : 1); j++) {
		int got = schedule_parts(b, j, false);
		if (got <= 0)
			return got < 0 ? got : 0;
	}
	return rc;
}

static bool state_ready(ember_graph_buffer *b, int64_t k)
{
	const uint32_t *s = b->states + (uint64_t)k * b->c;
	for (uint32_t i = 0; i < b->c; i++) {
		uint32_t sl = b->part_slot[s[i]];
		if (sl == GRAPH_NONE || b->slots[sl].state != SLOT_RESIDENT)
			return false;
	}
	for (uint32_t i = 0; i < b->c; i++)
		for (uint32_t j = 0; j < b->c; j++) {
			uint32_t bk = s[i] * b->p + s[j];
			if (state_needs(b, k, bk) &&
			    (b->bucket_ent[bk] == GRAPH_NONE ||
			     b->ents[b->bucket_ent[bk]].state != BK_READY))
				return false;
		}
	return true;
}

/* ---- open / close ---------------------------------------------------------------- */

void ember_graph_buffer_options_default(ember_graph_buffer_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->prefetch_slots = 1;
}

static void buffer_free(ember_graph_buffer *b)
{
	if (b->slots)
		for (uint32_t i = 0; i < b->nslots; i++)
			em_free(b->slots[i].data, 0);
	if (b->ents)
		for (uint32_t i = 0; i < b->nents; i++) {
			em_free(b->ents[i].edges, 0);
			em_free(b->ents[i].csr_off, 0);
			em_free(b->ents[i].csc_off, 0);
			em_free(b->ents[i].csc_src, 0);
		}
	em_free(b->slots, 0);
	em_free(b->part_slot, 0);
	em_free(b->ents, 0);
	em_free(b->bucket_ent, 0);
	em_free(b->states, 0);
	em_free(b->bucket_state, 0);
	em_free(b->first_state, 0);
	em_free(b->cur_parts, 0);
	em_free(b->part_pos, 0);
	em_free(b->cur_data, 0);
	em_free(b->cur_bk, 0);
	em_free(b->examples, 0);
	em_free(b->ex_next, 0);
	em_free(b->ex_base, 0);
	em_free(b->ex_base_next, 0);
	em_free(b->prep_list, 0);
	em_free(b->train_all, 0);
	em_free(b->train_off, 0);
	em_free(b->nodes_ex, 0);
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv_reader);
	pthread_cond_destroy(&b->cv_writer);
	pthread_cond_destroy(&b->cv_done);
	pthread_cond_destroy(&b->cv_update);
	graph_upd_free(b);
	em_free(b, sizeof(*b));
}

static void buffer_stop(ember_graph_buffer *b)
{
	if (!b->threads_started)
		return;
	pthread_mutex_lock(&b->mu);
	b->stop = true;
	pthread_cond_broadcast(&b->cv_reader);
	pthread_cond_broadcast(&b->cv_writer);
	pthread_cond_broadcast(&b->cv_update);
	pthread_mutex_unlock(&b->mu);
	for (uint32_t i = 0; i < b->nreaders; i++)
		pthread_join(b->readers[i], NULL);
	pthread_join(b->writer, NULL);
	graph_upd_join(b);
	b->threads_started = false;
}

/* Read every partition's training nodes (local ids) into train_all. */
static int load_train(ember_graph_buffer *b)
{
	ember_graph *g = b->g;
	const struct graph_meta *m = &g->meta;
	b->train_off = em_zalloc(((size_t)b->p + 1) * 8);
	if (!b->train_off)
		return EMBER_ENOMEM;
	for (uint32_t i = 0; i < b->p; i++)
		b->train_off[i + 1] = b->train_off[i] +
				      (m->train_nodes ? g->train_counts[i] : 0);
	if (!m->train_nodes)
		return 0;
	b->train_all = em_alloc(m->train_nodes * 4);
	if (!b->train_all)
		return EMBER_ENOMEM;
	graph_mem_add(b, (int64_t)(m->train_nodes * 4));
	ember_session *s = NULL;
	int rc = ember_session_open(g->db, &s);
	for (uint32_t i = 0; i < b->p && rc == 0; i++)
		rc = graph_read_chunks(g, s, GK_TRAIN, i, 0, b->train_all + b->train_off[i],
				       g->train_counts[i] * 4, m->train_per_chunk * 4);
	ember_session_close(s);
	for (uint32_t i = 0; i < b->p && rc == 0; i++)
		for (uint64_t x = b->train_off[i]; x < b->train_off[i + 1]; x++)
			if (b->train_all[x] >= graph_part_rows(m, i))
				rc = EMBER_ECORRUPT;
	return rc;
}

/* The buffer's geometry and sizes from the graph and the options: slots (the
 * capacity and the prefetch slots the budget leaves room for) and bucket entries.
 * Returns 0 or EMBER_ENOSPC (the capacity's slots alone exceed the budget). */
static int buffer_sizes(ember_graph_buffer *b, ember_graph *g,
			const ember_graph_buffer_options *opts)
{
	const struct graph_meta *m = &g->meta;
	b->g = g;
	b->o = *opts;
	b->p = m->partitions;
	b->c = opts->capacity;
	b->dim = m->dim;
	b->ps = m->partition_size;
	b->ps_magic = b->ps > 1 && b->ps <= UINT32_MAX ? UINT64_MAX / b->ps + 1 : 0;
	b->slot_bytes = b->ps * b->dim * 4;
	b->budget = opts->memory_budget;
	b->all_edges = opts->flags & EMBER_GRAPH_BUFFER_ALL_EDGES;
	b->read_only = opts->flags & EMBER_GRAPH_BUFFER_READ_ONLY;
	uint32_t extra = opts->prefetch_slots == EMBER_GRAPH_BUFFER_NO_PREFETCH ? 0
			 : opts->prefetch_slots ? opts->prefetch_slots : 1;
	if (extra > b->p - b->c)
		extra = b->p - b->c;
	if (b->budget) {
		if (b->slot_bytes * b->c > b->budget)
			return EMBER_ENOSPC;
		uint64_t fit = (b->budget - b->slot_bytes * b->c) / (b->slot_bytes ? b->slot_bytes : 1);
		if (extra > fit)
			extra = (uint32_t)fit;
	}
	b->nslots = b->c + extra;
	b->nents = ((extra ? extra : 1) + 1) * b->c * b->c;
	b->bucket_ahead = 1;
	return 0;
}

/* The buffer's arrays, and every slot's memory. Returns 0 or EMBER_ENOMEM (what
 * was made is freed by buffer_free). */
static int buffer_arrays(ember_graph_buffer *b)
{
	uint64_t pp = (uint64_t)b->p * b->p;
	b->slots = em_zalloc(b->nslots * sizeof(*b->slots));
	b->part_slot = em_alloc(b->p * 4);
	b->ents = em_zalloc(b->nents * sizeof(*b->ents));
	b->bucket_ent = em_alloc(pp * 4);
	b->cur_parts = em_alloc(b->c * 4);
	b->part_pos = em_alloc(b->p * 4);
	b->cur_data = em_zalloc(b->c * sizeof(float *));
	b->cur_bk = em_zalloc((size_t)b->c * b->c * sizeof(void *));
	b->prep_list = em_alloc((size_t)b->c * b->c * sizeof(*b->prep_list));
	b->ex_base = em_alloc((size_t)b->c * b->c * sizeof(*b->ex_base));
	b->ex_base_next = em_alloc((size_t)b->c * b->c * sizeof(*b->ex_base_next));
	if (!b->slots || !b->part_slot || !b->ents || !b->bucket_ent || !b->cur_parts ||
	    !b->part_pos || !b->cur_data || !b->cur_bk || !b->prep_list || !b->ex_base ||
	    !b->ex_base_next)
		return EMBER_ENOMEM;
	for (uint32_t i = 0; i < b->p; i++) {
		b->part_slot[i] = GRAPH_NONE;
		b->part_pos[i] = -1;
	}
	for (uint64_t i = 0; i < pp; i++)
		b->bucket_ent[i] = GRAPH_NONE;
	for (uint32_t i = 0; i < b->nents; i++)
		b->ents[i].bucket = GRAPH_NONE;
	for (uint32_t i = 0; i < b->nslots; i++) {
		b->slots[i].part = GRAPH_NONE;
		/* huge pages from 2 MiB up: the store's copy in, the scatter-add and the
		 * gathers touch rows all over the slots, and 4 KiB pages miss the TLB */
		b->slots[i].data = em_alloc_io(b->slot_bytes ? b->slot_bytes : 4);
		if (!b->slots[i].data)
			return EMBER_ENOMEM;
	}
	b->st.slots = b->nslots;
	graph_mem_add(b, (int64_t)(b->slot_bytes * b->nslots));
	return 0;
}

int ember_graph_buffer_open(ember_graph *g, const ember_graph_buffer_options *opts,
			    ember_graph_buffer **out)
{
	if (out)
		*out = NULL;
	if (!g || !opts || !out)
		return EMBER_EINVAL;
	const struct graph_meta *m = &g->meta;
	if (opts->capacity == 0 || opts->capacity > m->partitions ||
	    (opts->flags & ~(EMBER_GRAPH_BUFFER_READ_ONLY | EMBER_GRAPH_BUFFER_ALL_EDGES)) ||
	    opts->reserved)
		return EMBER_EINVAL;
	ember_graph_buffer *b = em_zalloc(sizeof(*b));
	if (!b)
		return EMBER_ENOMEM;
	int rc = 0;
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv_reader, NULL);
	pthread_cond_init(&b->cv_writer, NULL);
	pthread_cond_init(&b->cv_done, NULL);
	pthread_cond_init(&b->cv_update, NULL);
	rc = buffer_sizes(b, g, opts);
	if (rc == 0)
		rc = buffer_arrays(b);
	if (rc < 0)
		goto undo_buffer;
	em_rng_seed(b->rng, opts->seed ^ 0x243f6a8885a308d3ull);
	em_rng_seed(b->ex_rng, opts->seed ^ 0x13198a2e03707344ull);
	b->prep_want = b->prep_done = -1;
	rc = load_train(b);
	if (rc < 0)
		goto undo_buffer;
	b->cur = -1;
	for (uint32_t i = 0; i < GRAPH_READERS && rc == 0; i++) {
		rc = -pthread_create(&b->readers[i], NULL, reader_main, b);
		if (rc == 0)
			b->nreaders++;
	}
	if (rc == 0)
		rc = -pthread_create(&b->writer, NULL, writer_main, b);
	if (rc < 0) {
		pthread_mutex_lock(&b->mu);
		b->stop = true;
		pthread_cond_broadcast(&b->cv_reader);
		pthread_mutex_unlock(&b->mu);
		for (uint32_t i = 0; i < b->nreaders; i++)
			pthread_join(b->readers[i], NULL);
		goto undo_buffer;
	}
	b->threads_started = true;
	pthread_mutex_lock(&b->mu);
	while (b->ready < (int)GRAPH_READERS + 1)
		pthread_cond_wait(&b->cv_done, &b->mu);
	rc = b->error;
	pthread_mutex_unlock(&b->mu);
	if (rc == 0)
		rc = graph_upd_start(b);
	if (rc < 0)
		goto undo_threads;
	atomic_fetch_add_explicit(&g->buffers, 1, memory_order_relaxed); /* relaxed: a use count */
	*out = b;
	return 0;

undo_threads:
	buffer_stop(b);
undo_buffer:
	buffer_free(b);
	return rc;
}

/* Queue every dirty RESIDENT slot for writing and wait for all writes (under mu). */
static int flush_locked(ember_graph_buffer *b)
{
	graph_upd_drain_locked(b);
	if (!b->read_only)
		for (uint32_t i = 0; i < b->nslots; i++) {
			struct slot *sl = &b->slots[i];
			if (sl->state == SLOT_RESIDENT && sl->dirty && !sl->writing) {
				sl->writing = true;
				sl->write_part = sl->part;
				sl->write_queued = true;
				sl->write_after = b->upd_set;
			}
		}
	pthread_cond_signal(&b->cv_writer);
	for (;;) {
		bool busy = false;
		for (uint32_t i = 0; i < b->nslots; i++)
			busy |= b->slots[i].writing;
		if (!busy || b->error)
			break;
		pthread_cond_wait(&b->cv_done, &b->mu);
	}
	return b->error;
}

int ember_graph_buffer_flush(ember_graph_buffer *b)
{
	if (!b)
		return EMBER_EINVAL;
	pthread_mutex_lock(&b->mu);
	int rc = flush_locked(b);
	pthread_mutex_unlock(&b->mu);
	return rc;
}

int ember_graph_buffer_close(ember_graph_buffer *b)
{
	if (!b)
		return 0;
	/* a sampler keeps b and reads it in every run (relaxed: caller-ordered) */
	if (atomic_load_explicit(&b->samplers, memory_order_relaxed) > 0)
		return EMBER_EBUSY;
	pthread_mutex_lock(&b->mu);
	/* loads in flight finish first (their slots may be flushed afterwards) */
	for (;;) {
		bool busy = false;
		for (uint32_t i = 0; i < b->nslots; i++)
			busy |= b->slots[i].state == SLOT_LOADING;
		for (uint32_t i = 0; i < b->nents; i++)
			busy |= b->ents[i].state == BK_LOADING;
		if (!busy || b->error)
			break;
		pthread_cond_wait(&b->cv_done, &b->mu);
	}
	int rc = flush_locked(b);
	pthread_mutex_unlock(&b->mu);
	buffer_stop(b);
	atomic_fetch_sub_explicit(&b->g->buffers, 1, memory_order_relaxed); /* relaxed: a use count */
	buffer_free(b);
	return rc;
}

/* ---- plans ------------------------------------------------------------------------ */

static uint64_t part_examples(const ember_graph_buffer *b, uint32_t part)
{
	if (b->g->meta.train_nodes)
		return b->train_off[part + 1] - b->train_off[part];
	return graph_part_rows(&b->g->meta, part);
}

/* A plan being checked and sized by ember_graph_buffer_set_plan: its own copies of
 * the caller's arrays, and what they need. */
struct plan_build {
	uint32_t ns;       /* states */
	size_t words;      /* words of one state's membership bitmap */
	uint64_t *member;  /* ns bitmaps of p bits: partition x is in state k */
	uint32_t *states;  /* ns x c partitions */
	uint32_t *bstate;  /* p x p: the state that trains each bucket */
	uint32_t *first;   /* p: the first state holding each partition */
	uint64_t *ex_count, *ex_bytes; /* ns: examples and bytes of each state's buckets */
	uint64_t max_ex, max_nodes, max_union;
};

static void plan_build_free(struct plan_build *pb)
{
	em_free(pb->member, 0);
	em_free(pb->states, 0);
	em_free(pb->bstate, 0);
	em_free(pb->first, 0);
	em_free(pb->ex_count, 0);
	em_free(pb->ex_bytes, 0);
}

/* Copy the plan and check it: each state c distinct partitions, each bucket's
 * state holding both of its partitions. Tallies each state's examples and bytes.
 * Returns 0, EMBER_ENOMEM or EMBER_EINVAL (pb freed by the caller either way). */
static int plan_copy_check(struct ember_graph_buffer *b, const ember_graph_plan *plan,
			   struct plan_build *pb)
{
	uint32_t p = b->p, c = b->c, ns = plan->num_states;
	uint64_t pp = (uint64_t)p * p;
	size_t words = (p + 63) / 64;
	pb->ns = ns;
	pb->words = words;
	pb->member = em_zalloc((size_t)ns * words * 8);
	pb->states = em_alloc((size_t)ns * c * 4);
	pb->bstate = em_alloc(pp * 4);
	pb->first = em_alloc((size_t)p * 4);
	pb->ex_count = em_zalloc((size_t)ns * 8);
	pb->ex_bytes = em_zalloc((size_t)ns * 8);
	if (!pb->member || !pb->states || !pb->bstate || !pb->first || !pb->ex_count ||
	    !pb->ex_bytes)
		return EMBER_ENOMEM;
	memcpy(pb->states, plan->states, (size_t)ns * c * 4);
	memcpy(pb->bstate, plan->bucket_state, pp * 4);
	for (uint32_t i = 0; i < p; i++)
		pb->first[i] = GRAPH_NONE;
	for (uint32_t k = 0; k < ns; k++) {
		uint64_t *mk = pb->member + (size_t)k * words;
		for (uint32_t i = 0; i < c; i++) {
			uint32_t x = pb->states[(size_t)k * c + i];
			if (x >= p || (mk[x / 64] >> (x % 64) & 1))
				return EMBER_EINVAL;
			mk[x / 64] |= 1ull << (x % 64);
			if (pb->first[x] == GRAPH_NONE)
				pb->first[x] = k;
		}
	}
	for (uint64_t bk = 0; bk < pp; bk++) {
		uint32_t k = pb->bstate[bk], i = (uint32_t)(bk / p), j = (uint32_t)(bk % p);
		if (k == EMBER_GRAPH_NO_STATE)
			continue;
		const uint64_t *mk = pb->member + (size_t)k * words;
		if (k >= ns || !(mk[i / 64] >> (i % 64) & 1) || !(mk[j / 64] >> (j % 64) & 1))
			return EMBER_EINVAL;
		pb->ex_count[k] += b->g->counts[bk];
		pb->ex_bytes[k] += bucket_bytes(b, bk);
	}
	return 0;
}

/* The bytes of the buckets held while state k trains: with all_edges, every
 * bucket among its partitions and those the next state adds; else the two states'
 * own buckets. */
static uint64_t plan_union(struct ember_graph_buffer *b, const struct plan_build *pb, uint32_t k)
{
	uint32_t p = b->p, c = b->c, ns = pb->ns;
	size_t words = pb->words;
	if (!b->all_edges)
		return pb->ex_bytes[k] + (k + 1 < ns ? pb->ex_bytes[k + 1] : 0);
	const uint32_t *s = pb->states + (size_t)k * c;
	const uint64_t *mn = k + 1 < ns ? pb->member + (size_t)(k + 1) * words : NULL;
	uint64_t u = 0;
	for (uint32_t a = 0; a < c; a++)
		for (uint32_t d = 0; d < c; d++)
			u += bucket_bytes(b, s[a] * p + s[d]);
	if (mn) {
		const uint32_t *t = pb->states + (size_t)(k + 1) * c;
		const uint64_t *mk = pb->member + (size_t)k * words;
		for (uint32_t a = 0; a < c; a++)
			for (uint32_t d = 0; d < c; d++) {
				uint32_t x = t[a], y = t[d];
				bool both_old = (mk[x / 64] >> (x % 64) & 1) &&
						(mk[y / 64] >> (y % 64) & 1);
				if (!both_old)
					u += bucket_bytes(b, x * p + y);
			}
	}
	return u;
}

/* memory: the largest two-neighbour union of held buckets, plus the example
 * arrays sized for the largest state */
static void plan_sizes(struct ember_graph_buffer *b, struct plan_build *pb)
{
	uint32_t c = b->c;
	for (uint32_t k = 0; k < pb->ns; k++) {
		uint64_t nodes = 0;
		for (uint32_t i = 0; i < c; i++)
			if (pb->first[pb->states[(size_t)k * c + i]] == k)
				nodes += part_examples(b, pb->states[(size_t)k * c + i]);
		if (nodes > pb->max_nodes)
			pb->max_nodes = nodes;
		if (pb->ex_count[k] > pb->max_ex)
			pb->max_ex = pb->ex_count[k];
		uint64_t u = plan_union(b, pb, k);
		if (u > pb->max_union)
			pb->max_union = u;
	}
}

/* Does the plan fit the budget? Sets *ahead (states whose buckets are read ahead)
 * and *need (the plan's memory). Returns 0 or EMBER_ENOSPC. */
static int plan_fit(struct ember_graph_buffer *b, struct plan_build *pb, uint32_t *ahead,
		    uint64_t *need)
{
	/* the example arrays: the current state's and the next one's, and the nodes */
	uint64_t ex_mem = 2 * pb->max_ex * sizeof(struct graph_example) + 8 * pb->max_nodes;
	/* besides buckets and examples, the budget holds the slots, the training nodes
	 * (load_train) and update_async's row pointers (upd_cap; update.c keeps their
	 * growth within the budget) */
	uint64_t plan_fixed = b->slot_bytes * b->nslots + b->g->meta.train_nodes * 4;
	uint64_t fixed = plan_fixed + b->upd_cap * sizeof(float *);
	/* until next_state(0) frees them, the buckets the last plan still holds (its
	 * last state's) stand where this plan's will be */
	uint64_t held = 0;
	pthread_mutex_lock(&b->mu);
	for (uint32_t i = 0; i < b->nents; i++)
		if (b->ents[i].bucket != GRAPH_NONE)
			held += b->ents[i].bytes;
	pthread_mutex_unlock(&b->mu);
	if (b->budget &&
	    fixed + (held > pb->max_union ? held : pb->max_union) + ex_mem > b->budget)
		return EMBER_ENOSPC;
	/* buckets further ahead (training mode, where a bucket belongs to one state):
	 * the states of the horizon, when the largest window of that many states'
	 * buckets fits the budget too; else the next state's only */
	uint32_t horizon_n = b->nslots - b->c;
	*ahead = 1;
	if (!b->all_edges && horizon_n > 1) {
		uint64_t max_win = 0;
		for (uint32_t k = 0; k < pb->ns; k++) {
			uint64_t w = 0;
			for (uint32_t j = k; j <= k + horizon_n && j < pb->ns; j++)
				w += pb->ex_bytes[j];
			if (w > max_win)
				max_win = w;
		}
		if (!b->budget || fixed + max_win + ex_mem <= b->budget) {
			*ahead = horizon_n;
			pb->max_union = max_win;
		}
	}
	*need = plan_fixed + pb->max_union + ex_mem;
	return 0;
}

/* The example and node arrays sized to this plan, smaller ones too: the budget
 * check counts this plan's, not the largest a plan ever had. Returns 0 or
 * EMBER_ENOMEM (the old arrays kept). */
static int plan_arrays(struct ember_graph_buffer *b, uint64_t max_ex, uint64_t max_nodes)
{
	if (max_ex != b->ex_cap) {
		/* no examples are being built ahead: the last state asked for none */
		struct graph_example *ex = max_ex ? em_alloc(max_ex * sizeof(*ex)) : NULL,
				     *ex2 = max_ex ? em_alloc(max_ex * sizeof(*ex2)) : NULL;
		if (max_ex && (!ex || !ex2)) {
			em_free(ex, 0);
			em_free(ex2, 0);
			return EMBER_ENOMEM;
		}
		em_free(b->examples, 0);
		em_free(b->ex_next, 0);
		pthread_mutex_lock(&b->mu);
		graph_mem_add(b, ((int64_t)max_ex - (int64_t)b->ex_cap) * 2 * (int64_t)sizeof(*ex));
		pthread_mutex_unlock(&b->mu);
		b->examples = ex;
		b->ex_next = ex2;
		b->ex_cap = max_ex;
		b->nexamples = b->ex_pos = 0;
	}
	if (max_nodes != b->nodes_cap) {
		uint64_t *nx = max_nodes ? em_alloc(max_nodes * 8) : NULL;
		if (max_nodes && !nx)
			return EMBER_ENOMEM;
		em_free(b->nodes_ex, 0);
		pthread_mutex_lock(&b->mu);
		graph_mem_add(b, ((int64_t)max_nodes - (int64_t)b->nodes_cap) * 8);
		pthread_mutex_unlock(&b->mu);
		b->nodes_ex = nx;
		b->nodes_cap = max_nodes;
		b->nnodes_ex = b->nodes_pos = 0;
	}
	return 0;
}

int ember_graph_buffer_set_plan(ember_graph_buffer *b, const ember_graph_plan *plan)
{
	if (!b || !plan || !plan->states || !plan->bucket_state || plan->num_states == 0 ||
	    plan->partitions != b->p || plan->capacity != b->c)
		return EMBER_EINVAL;
	uint32_t p = b->p, c = b->c;
	pthread_mutex_lock(&b->mu);
	if (b->have_plan) {
		pthread_mutex_unlock(&b->mu);
		return EMBER_ESTATE;
	}
	pthread_mutex_unlock(&b->mu);
	/* only the trainer thread calls set_plan and next_state, so the plan fields may
	 * be built outside the lock; of the background threads only the updater reads
	 * them (prep_collect, under mu, while prep_want names a state), and no state is
	 * wanted between epochs */
	struct plan_build pb = {0};
	uint32_t ahead = 1;
	uint64_t need = 0;
	int rc = plan_copy_check(b, plan, &pb);
	if (rc < 0)
		goto undo_mem;
	plan_sizes(b, &pb);
	rc = plan_fit(b, &pb, &ahead, &need);
	if (rc == 0)
		rc = plan_arrays(b, pb.max_ex, pb.max_nodes);
	if (rc < 0)
		goto undo_mem;
	pthread_mutex_lock(&b->mu);
	em_free(b->states, 0);
	em_free(b->bucket_state, 0);
	em_free(b->first_state, 0);
	b->states = pb.states;
	b->bucket_state = pb.bstate;
	b->first_state = pb.first;
	pb.states = NULL;
	pb.bstate = pb.first = NULL;
	b->nstates = pb.ns;
	b->bucket_ahead = ahead;
	b->plan_need = need;
	b->cur = -1;
	b->have_plan = true;
	rc = b->error;
	/* state 0's buckets are read now only if they fit beside what the last plan
	 * still holds (its last state's buckets, freed by next_state(0)); else
	 * next_state(0) reads them once it has freed those (an epoch after the first
	 * went over the budget when they were read at once) */
	uint64_t add = 0;
	for (uint32_t i = 0; i < c; i++)
		for (uint32_t j = 0; j < c; j++) {
			uint32_t bk = b->states[i] * p + b->states[j];
			if (state_needs(b, 0, bk) && b->bucket_ent[bk] == GRAPH_NONE)
				add += bucket_bytes(b, bk);
		}
	if (rc == 0 && (!b->budget || b->st.memory_bytes + add <= b->budget))
		rc = schedule_buckets(b, 0);
	if (rc == 0 && schedule_parts(b, 0, false) < 0)
		rc = EMBER_ENOSPC;
	pthread_mutex_unlock(&b->mu);
undo_mem:
	plan_build_free(&pb);
	return rc;
}

/* ---- moving between states ----------------------------------------------------------- */

static void evict(ember_graph_buffer *b, struct slot *sl)
{
	sl->state = SLOT_FREE;
	if (sl->dirty && !b->read_only) {
		sl->writing = true;
		sl->write_part = sl->part;
		sl->write_queued = true;
		sl->write_after = b->upd_set;
		pthread_cond_signal(&b->cv_writer);
	} else if (sl->dirty) {
		sl->valid = false; /* updates dropped: the stored copy is older */
		sl->dirty = false;
	} else {
		b->st.clean_evictions++;
	}
}

void graph_shuffle64(uint64_t *rng, uint64_t *a, uint64_t n)
{
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = em_rng_below(rng, i), t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
}

/* Set the current state to k (everything resident) and build its examples. */
static void enter_state(ember_graph_buffer *b, int64_t k)
{
	const struct graph_meta *m = &b->g->meta;
	if (b->have_state)
		for (uint32_t i = 0; i < b->c; i++)
			b->part_pos[b->cur_parts[i]] = -1;
	const uint32_t *s = b->states + (uint64_t)k * b->c;
	for (uint32_t i = 0; i < b->c; i++) {
		b->cur_parts[i] = s[i];
		b->part_pos[s[i]] = (int32_t)i;
		b->cur_data[i] = b->slots[b->part_slot[s[i]]].data;
	}
	for (uint32_t i = 0; i < b->c; i++)
		for (uint32_t j = 0; j < b->c; j++) {
			uint32_t e = b->bucket_ent[s[i] * b->p + s[j]];
			b->cur_bk[(size_t)i * b->c + j] =
				e != GRAPH_NONE && b->ents[e].state == BK_READY ? &b->ents[e] : NULL;
		}
	b->have_state = true;
	b->cur = k;
	graph_examples_enter(b, k);
	b->nnodes_ex = b->nodes_pos = 0;
	for (uint32_t i = 0; i < b->c; i++) {
		uint32_t part = s[i];
		if (b->first_state[part] != (uint32_t)k)
			continue;
		uint64_t base = (uint64_t)part * b->ps;
		if (m->train_nodes)
			for (uint64_t x = b->train_off[part]; x < b->train_off[part + 1]; x++)
				b->nodes_ex[b->nnodes_ex++] = base + b->train_all[x];
		else
			for (uint64_t x = 0; x < graph_part_rows(m, part); x++)
				b->nodes_ex[b->nnodes_ex++] = base + x;
	}
	graph_shuffle64(b->rng, b->nodes_ex, b->nnodes_ex);
}

int ember_graph_buffer_next_state(ember_graph_buffer *b, ember_graph_state *st)
{
	if (!b)
		return EMBER_EINVAL;
	int rc = 0;
	pthread_mutex_lock(&b->mu);
	if (b->error) {
		rc = b->error;
		goto out;
	}
	if (!b->have_plan) {
		rc = EMBER_ESTATE;
		goto out;
	}
	if (b->read_only)
		graph_upd_drain_locked(b); /* update.c invariant 3: evictions write nothing */
	int64_t k = b->cur + 1;
	if (k >= b->nstates) {
		b->have_plan = false; /* the resident partitions stay, and stay current */
		rc = EMBER_ENOTFOUND;
		goto out;
	}
	/* evict what state k lacks; drop the buckets it does not need */
	for (uint32_t i = 0; i < b->nslots; i++) {
		struct slot *sl = &b->slots[i];
		if (sl->state == SLOT_RESIDENT && !wanted(b, k, sl->part))
			evict(b, sl);
	}
	for (uint32_t i = 0; i < b->nents; i++) {
		struct bucket_ent *e = &b->ents[i];
		if (e->bucket != GRAPH_NONE && e->state == BK_READY && !bucket_wanted(b, k, e->bucket))
			bucket_free(b, e);
	}
	if (b->have_state) {
		for (uint32_t i = 0; i < b->c; i++)
			b->part_pos[b->cur_parts[i]] = -1;
		b->have_state = false;
	}
	rc = schedule_buckets(b, k);
	if (rc == 0)
		rc = schedule_parts(b, k, true);
	if (rc < 0)
		goto out;
	/* read ahead for the states after k now, not once k is ready: into free slots
	 * only (k's own loads are all scheduled), so the second reader starts them
	 * while k's are in flight and the disk never idles between states */
	rc = prefetch_after(b, k);
	if (rc < 0)
		goto out;
	double t0 = graph_now();
	while (!b->error && !state_ready(b, k))
		pthread_cond_wait(&b->cv_done, &b->mu);
	b->st.wait_seconds += graph_now() - t0;
	if (b->error) {
		rc = b->error;
		goto out;
	}
	enter_state(b, k);
	graph_examples_ahead(b, k);
	b->st.states++;
	if (st)
		*st = (ember_graph_state){.index = (uint32_t)k,
					  .capacity = b->c,
					  .partitions = b->cur_parts,
					  .edges = b->nexamples,
					  .nodes = b->nnodes_ex};
out:
	pthread_mutex_unlock(&b->mu);
	return rc;
}

/* ---- examples and updates (trainer thread) --------------------------------------------- */

int ember_graph_buffer_next_batch(ember_graph_buffer *b, ember_graph_edge *out, size_t cap,
				  size_t *n)
{
	if (!b || !out || !n || cap == 0)
		return EMBER_EINVAL;
	if (!b->have_state)
		return EMBER_ESTATE;
	size_t k = 0;
	/* the examples were gathered when they were built: a sequential pass */
	while (k < cap && b->ex_pos < b->nexamples) {
		const struct graph_example *x = &b->examples[b->ex_pos++];
		const struct graph_ex_base *base = &b->ex_base[x->t];
		out[k++] = (ember_graph_edge){.src = base->src + x->src,
					      .dst = base->dst + x->dst,
					      .rel = x->rel};
	}
	*n = k;
	return 0;
}

int ember_graph_buffer_next_nodes(ember_graph_buffer *b, uint64_t *out, size_t cap, size_t *n)
{
	if (!b || !out || !n || cap == 0)
		return EMBER_EINVAL;
	if (!b->have_state)
		return EMBER_ESTATE;
	size_t k = 0;
	while (k < cap && b->nodes_pos < b->nnodes_ex)
		out[k++] = b->nodes_ex[b->nodes_pos++];
	*n = k;
	return 0;
}

int ember_graph_buffer_stats_get(ember_graph_buffer *b, ember_graph_buffer_stats *out)
{
	if (!b || !out)
		return EMBER_EINVAL;
	pthread_mutex_lock(&b->mu);
	*out = b->st;
	pthread_mutex_unlock(&b->mu);
	return 0;
}

int ember_graph_buffer_set_ordering(ember_graph_buffer *b, const ember_graph_ordering *ord)
{
	ember_graph_ordering_info oi;
	if (!b || !ord || ember_graph_ordering_info_get(ord, &oi) < 0)
		return EMBER_EINVAL;
	if (oi.partitions != b->p || oi.capacity != b->c || oi.states == 0)
		return EMBER_EINVAL;
	uint64_t pp = (uint64_t)b->p * b->p;
	uint32_t *states = em_alloc((size_t)oi.states * b->c * 4);
	uint32_t *bstate = em_alloc(pp * 4);
	int rc = 0;
	if (!states || !bstate) {
		rc = EMBER_ENOMEM;
		goto undo_mem;
	}
	for (uint32_t k = 0; k < oi.states && rc == 0; k++) {
		const uint32_t *slots = NULL;
		rc = ember_graph_ordering_state(ord, k, &slots);
		if (rc == 0)
			memcpy(states + (size_t)k * b->c, slots, (size_t)b->c * 4);
	}
	for (uint32_t i = 0; i < b->p && rc == 0; i++)
		for (uint32_t j = 0; j < b->p && rc == 0; j++)
			rc = ember_graph_ordering_bucket_state(ord, i, j, &bstate[(uint64_t)i * b->p + j]);
	if (rc == 0) {
		ember_graph_plan plan = {.partitions = b->p, .capacity = b->c,
					 .num_states = oi.states, .states = states,
					 .bucket_state = bstate};
		rc = ember_graph_buffer_set_plan(b, &plan);
	}
undo_mem:
	em_free(states, 0);
	em_free(bstate, 0);
	return rc;
}
