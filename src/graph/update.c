/*
 * update.c - the trainer's writes into the buffer (scatter-add and overwrite),
 * applied in the call (ember_graph_buffer_update) or by the buffer's updater
 * thread while the trainer goes on (ember_graph_buffer_update_async); the
 * trainer's gather; and the next state's training examples, gathered and shuffled
 * ahead by the same updater thread.
 *
 * Design notes
 * ------------
 * A scatter-add of a batch touches rows scattered over the c resident partitions:
 * it is bound by memory latency, so every row is resolved (partition by a multiply,
 * graph_buf_part) UPD_AHEAD rows before its add and all of its cache lines are
 * prefetched; the partitions touched are marked dirty once per call, not per row.
 *
 * The asynchronous update is zero-copy for the rows: the updater reads the caller's
 * rows, which stay the caller's to keep unchanged until the next call that drains
 * (graph_upd_drain). The trainer resolves every node to its row's address while it
 * checks the nodes (upd_rowp), so the updater reads no state field and the trainer
 * may move to the next state while the update is still being applied. One update
 * at most is outstanding.
 *
 * Job states and their transitions (upd_busy, under mu):
 *   IDLE --update_async: checks, resolves, marks dirty, sets the job--> BUSY
 *   BUSY --updater: applies it outside mu, then under mu upd_busy = false--> IDLE
 *
 * Examples ahead. After entering state k the trainer asks the updater for state
 * k+1's examples (prep_want = k+1); its buckets are being read meanwhile. Between
 * update jobs (which go first) the updater waits until they are READY, collects
 * them under mu, and fills and shuffles ex_next outside it (prep_busy), then
 * publishes prep_done = k+1. next_state(k+1) swaps ex_next in, waiting for a build
 * in progress; a build not yet started is withdrawn and done by the trainer. So the
 * gather and shuffle leave the trainer's path whenever a state's buckets arrive
 * before the previous state ends.
 *   E1. One builder at a time: the updater only while prep_busy, the trainer only
 *       when neither prep_busy nor prep_want names the state; states are built in
 *       order, so ex_rng gives the same shuffles whoever builds (it changes hands
 *       under mu).
 *   E2. A build reads the entries (collected under mu while READY; a READY
 *       entry's bucket and edges do not change) and writes ex_next and
 *       ex_base_next, which the trainer touches only at the swap, when no build
 *       runs. The entries stay until next_state(k+2). The examples hold copies of
 *       the edges, so next_batch reads no entry.
 *
 * Invariants of the updates:
 *   1. update_async sets a job (and fills upd_rowp) only when IDLE (it drains
 *      first); the updater reads the job only while BUSY; both hand over under mu.
 *   2. Updates land in call order: an update (either kind) first drains the one
 *      outstanding, so ADD sums and SET keeps the last, as if each were applied
 *      at its call.
 *   3. While BUSY, no one else reads or writes the rows the job targets: they lie
 *      in slots of the state current at its call, marked dirty then (under mu).
 *      The trainer's data calls (update, update_sync, gather, flush, close) and the
 *      samplers' and device sends' reads drain first. next_state may move on: a
 *      touched slot that stays resident is read only by those calls; an evicted one
 *      is dirty, so it goes to the writer, which takes it only once the job
 *      outstanding at the eviction (upd_set then) is applied (upd_applied), and
 *      no reader refills it before its write ends (buffer.c invariant 1); with
 *      READ_ONLY (evictions write nothing) next_state drains. Jobs set after the
 *      eviction target the new state's slots, never the evicted one, so the
 *      writer need not wait for them (it did: with back-to-back updates it
 *      starved until the trainer stopped to wait).
 *   4. Slot data arrays live as long as the buffer, so resolved addresses stay
 *      valid across states.
 *   5. upd_pending mirrors upd_busy (stored under mu, release); a reader that loads
 *      0 (acquire) sees every applied row without taking mu.
 */
#include "graph/graph_int.h"

#include <sched.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"

/* Rows resolved ahead of their add: far enough for an L3 or DRAM access to land. */
#define UPD_AHEAD 16u

/* The row of node v, which nodes_check accepted. */
static inline float *cur_row(const ember_graph_buffer *b, uint64_t v)
{
	uint64_t part = graph_buf_part(b, v);
	return b->cur_data[b->part_pos[part]] + (v - part * b->ps) * b->dim;
}

/* Check that every node is in the current state; note the positions (in
 * cur_parts) of the partitions touched when touched is not NULL. */
static int nodes_check(const ember_graph_buffer *b, size_t n, const uint64_t *nodes,
		       bool *touched)
{
	if (!b->have_state)
		return EMBER_ESTATE;
	uint64_t nn = b->g->meta.num_nodes;
	for (size_t i = 0; i < n; i++) {
		if (nodes[i] >= nn)
			return EMBER_EINVAL;
		int32_t pos = b->part_pos[graph_buf_part(b, nodes[i])];
		if (pos < 0)
			return EMBER_EINVAL;
		if (touched)
			touched[pos] = true;
	}
	return 0;
}

static void row_add(float *restrict row, const float *restrict src, uint32_t dim)
{
	for (uint32_t d = 0; d < dim; d++)
		row[d] += src[d];
}

static void prefetch_row(const float *r, size_t row_bytes)
{
	for (size_t o = 0; o < row_bytes; o += 64)
		__builtin_prefetch((const char *)r + o, 1);
}

/* Apply n rows to the rows at rowp[] (resolved), prefetching UPD_AHEAD rows ahead. */
static void apply_resolved(float *const *rowp, const float *rows, size_t n, uint32_t dim,
			   int mode)
{
	size_t row_bytes = (size_t)dim * 4;
	for (size_t i = 0; i < n && i < UPD_AHEAD; i++)
		prefetch_row(rowp[i], row_bytes);
	for (size_t i = 0; i < n; i++) {
		if (i + UPD_AHEAD < n)
			prefetch_row(rowp[i + UPD_AHEAD], row_bytes);
		if (mode == EMBER_GRAPH_UPDATE_ADD)
			row_add(rowp[i], rows + i * dim, dim);
		else
			memcpy(rowp[i], rows + i * dim, row_bytes);
	}
}

/* Apply n rows to the nodes (checked), resolving each row UPD_AHEAD rows ahead. */
static void apply_nodes(const ember_graph_buffer *b, const uint64_t *nodes, const float *rows,
			size_t n, int mode)
{
	uint32_t dim = b->dim;
	size_t row_bytes = (size_t)dim * 4;
	float *ring[UPD_AHEAD]; /* row i waits in ring[i % UPD_AHEAD] */
	for (size_t i = 0; i < n + UPD_AHEAD; i++) {
		float *r = NULL;
		if (i < n) {
			r = cur_row(b, nodes[i]);
			prefetch_row(r, row_bytes);
		}
		if (i >= UPD_AHEAD) { /* row j leaves the slot row i takes */
			size_t j = i - UPD_AHEAD;
			if (mode == EMBER_GRAPH_UPDATE_ADD)
				row_add(ring[j % UPD_AHEAD], rows + j * dim, dim);
			else
				memcpy(ring[j % UPD_AHEAD], rows + j * dim, row_bytes);
		}
		if (r)
			ring[i % UPD_AHEAD] = r;
	}
}

/* Mark the partitions touched (positions in cur_parts) dirty. Caller holds mu. */
static void mark_dirty_locked(ember_graph_buffer *b, const bool *touched)
{
	for (uint32_t i = 0; i < b->c; i++)
		if (touched[i])
			b->slots[b->part_slot[b->cur_parts[i]]].dirty = true;
}

/* ---- examples ahead ---------------------------------------------------------------- */

/* Under mu: state k's assigned buckets into prep_list; false if one is not READY. */
static bool prep_collect(ember_graph_buffer *b, int64_t k, uint32_t *n)
{
	const uint32_t *s = b->states + (uint64_t)k * b->c;
	uint32_t m = 0;
	for (uint32_t i = 0; i < b->c; i++)
		for (uint32_t j = 0; j < b->c; j++) {
			uint32_t bk = s[i] * b->p + s[j];
			if (b->bucket_state[bk] != (uint32_t)k || !b->g->counts[bk])
				continue;
			uint32_t e = b->bucket_ent[bk];
			if (e == GRAPH_NONE || b->ents[e].state != BK_READY)
				return false;
			b->prep_list[m++] = (struct graph_prep_item){e, b->ents[e].count};
		}
	*n = m;
	return true;
}

/* The examples of prep_list[0..n) gathered into out (a sequential pass over each
 * bucket's edges) and shuffled, their buckets' bases into base; returns how many. */
static uint64_t prep_fill(ember_graph_buffer *b, uint32_t n, struct graph_example *out,
			  struct graph_ex_base *base)
{
	uint64_t m = 0;
	for (uint32_t t = 0; t < n; t++) {
		const struct bucket_ent *e = &b->ents[b->prep_list[t].entry];
		base[t] = (struct graph_ex_base){(uint64_t)(e->bucket / b->p) * b->ps,
						 (uint64_t)(e->bucket % b->p) * b->ps};
		const uint32_t *r = e->edges;
		for (uint64_t x = 0; x < b->prep_list[t].count; x++, r += 3)
			out[m++] = (struct graph_example){r[0], r[2], r[1], t};
	}
	/* the same draws as a shuffle of 8-byte indices made: a seed gives the same
	 * order whoever builds (E1) */
	for (uint64_t i = m; i > 1; i--) {
		uint64_t j = em_rng_below(b->ex_rng, i);
		struct graph_example tmp = out[i - 1];
		out[i - 1] = out[j];
		out[j] = tmp;
	}
	return m;
}

/* The updater, under mu (released while it builds): prep_want's examples. */
static void prep_build(ember_graph_buffer *b, uint32_t n)
{
	int64_t k = b->prep_want;
	b->prep_busy = true;
	pthread_mutex_unlock(&b->mu);
	uint64_t m = prep_fill(b, n, b->ex_next, b->ex_base_next);
	pthread_mutex_lock(&b->mu);
	b->nex_next = m;
	b->prep_busy = false;
	b->prep_want = -1;
	b->prep_done = k;
	b->st.states_prepared++;
	pthread_cond_broadcast(&b->cv_done);
}

void graph_examples_enter(ember_graph_buffer *b, int64_t k)
{
	while (b->prep_busy) /* building k's (E1): a short wait */
		pthread_cond_wait(&b->cv_done, &b->mu);
	b->ex_pos = 0;
	if (b->prep_done == k) {
		struct graph_example *t = b->examples;
		b->examples = b->ex_next;
		b->ex_next = t;
		struct graph_ex_base *tb = b->ex_base;
		b->ex_base = b->ex_base_next;
		b->ex_base_next = tb;
		b->nexamples = b->nex_next;
		b->prep_done = -1;
		return;
	}
	b->prep_want = -1; /* not started: withdrawn */
	b->prep_done = -1;
	uint32_t n = 0;
	/* every bucket state k trains is READY (next_state waited: buffer.c
	 * invariant 3), so the collection succeeds */
	bool ready = prep_collect(b, k, &n);
	b->nexamples = ready ? prep_fill(b, n, b->examples, b->ex_base) : 0;
}

void graph_examples_ahead(ember_graph_buffer *b, int64_t k)
{
	if (k + 1 >= b->nstates)
		return;
	b->prep_want = k + 1;
	pthread_cond_signal(&b->cv_update);
}

/* ---- the updater ---------------------------------------------------------------- */

/* The updater runs as SCHED_BATCH: the trainer wakes it once per update, and a
 * batch thread never preempts the waker (the kernel lets it in at the next tick or
 * on an idle CPU), so the trainer goes back to its compute at once. On 2 vCPUs this
 * cut ember_graph_buffer_update_async from about 160 to 70 us a call. The reader
 * and writer threads stay SCHED_OTHER: as batch threads their reads started later
 * and the trainer waited longer (measured: docs/graph.md). Best effort: a failure
 * leaves the thread as it was. */
static void updater_background(void)
{
	struct sched_param sp = {.sched_priority = 0};
	(void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
}

static void *updater_main(void *arg)
{
	ember_graph_buffer *b = arg;
	updater_background();
	pthread_mutex_lock(&b->mu);
	for (;;) {
		if (!b->upd_busy) {
			uint32_t n;
			if (b->prep_want >= 0 && !b->error && prep_collect(b, b->prep_want, &n)) {
				prep_build(b, n);
				continue;
			}
			if (b->stop)
				break;
			pthread_cond_wait(&b->cv_update, &b->mu);
			continue;
		}
		struct graph_upd_job job = b->upd;
		pthread_mutex_unlock(&b->mu);
		double t0 = graph_now();
		apply_resolved(job.rowp, job.rows, job.n, b->dim, job.mode);
		double t1 = graph_now();
		pthread_mutex_lock(&b->mu);
		b->st.update_seconds += t1 - t0;
		b->upd_busy = false;
		b->upd_applied++;
		/* release: a sampler that loads 0 without mu sees the rows applied */
		atomic_store_explicit(&b->upd_pending, 0, memory_order_release);
		pthread_cond_broadcast(&b->cv_done);
		pthread_cond_broadcast(&b->cv_writer); /* writes that waited for it */
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

int graph_upd_start(ember_graph_buffer *b)
{
	int rc = -pthread_create(&b->updater, NULL, updater_main, b);
	if (rc == 0)
		b->updater_started = true;
	return rc;
}

/* buffer_stop has set stop and broadcast cv_update: the updater finishes its job
 * (if any) and exits. */
void graph_upd_join(ember_graph_buffer *b)
{
	if (b->updater_started)
		pthread_join(b->updater, NULL);
	b->updater_started = false;
}

void graph_upd_free(ember_graph_buffer *b)
{
	em_free(b->upd_rowp, 0);
	b->upd_rowp = NULL;
	b->upd_cap = 0;
}

void graph_upd_drain_locked(ember_graph_buffer *b)
{
	if (!b->upd_busy)
		return;
	double t0 = graph_now();
	while (b->upd_busy)
		pthread_cond_wait(&b->cv_done, &b->mu);
	b->st.update_wait_seconds += graph_now() - t0;
}

void graph_upd_drain(ember_graph_buffer *b)
{
	/* acquire: pairs with the updater's release store; 0 means every row landed */
	if (atomic_load_explicit(&b->upd_pending, memory_order_acquire) == 0)
		return;
	pthread_mutex_lock(&b->mu);
	graph_upd_drain_locked(b);
	pthread_mutex_unlock(&b->mu);
}

/* ---- the calls -------------------------------------------------------------------- */

static int update_args(const ember_graph_buffer *b, size_t n, const uint64_t *nodes,
		       const float *rows, int mode)
{
	size_t row_bytes;
	if (!b || (n && (!nodes || !rows)) ||
	    (mode != EMBER_GRAPH_UPDATE_ADD && mode != EMBER_GRAPH_UPDATE_SET))
		return EMBER_EINVAL;
	/* rows[] is n x dim floats: no array of a size that overflows size_t exists */
	if (__builtin_mul_overflow(n, (size_t)b->dim * sizeof(float), &row_bytes))
		return EMBER_EINVAL;
	return 0;
}

int ember_graph_buffer_update(ember_graph_buffer *b, size_t n, const uint64_t *nodes,
			      const float *rows, int mode)
{
	bool touched[EMBER_GRAPH_MAX_PARTITIONS];
	int rc = update_args(b, n, nodes, rows, mode);
	if (rc < 0)
		return rc;
	graph_upd_drain(b); /* invariant 2 */
	memset(touched, 0, b->c);
	if ((rc = nodes_check(b, n, nodes, touched)) < 0 || n == 0)
		return rc;
	double t0 = graph_now();
	apply_nodes(b, nodes, rows, n, mode);
	pthread_mutex_lock(&b->mu);
	b->st.update_seconds += graph_now() - t0;
	mark_dirty_locked(b, touched);
	pthread_mutex_unlock(&b->mu);
	return 0;
}

int ember_graph_buffer_update_async(ember_graph_buffer *b, size_t n, const uint64_t *nodes,
				    const float *rows, int mode)
{
	bool touched[EMBER_GRAPH_MAX_PARTITIONS];
	int rc = update_args(b, n, nodes, rows, mode);
	if (rc < 0)
		return rc;
	graph_upd_drain(b); /* invariants 1 and 2 */
	if (!b->have_state)
		return EMBER_ESTATE;
	if (n == 0)
		return 0;
	if (n > b->upd_cap) {
		size_t cap = n < 1024 ? 1024 : n, cap_bytes;
		/* n x 8 bytes that overflow size_t cannot be allocated (with dim 1 the
		 * rows' n x 4 still fit: update_args let n through) */
		if (__builtin_mul_overflow(cap, sizeof(float *), &cap_bytes))
			return EMBER_ENOMEM;
		/* the row pointers count against memory_budget beside all the plan may
		 * hold at its peak (plan_need): where that leaves no room for them, the
		 * update is applied in this call instead */
		if (b->budget && (cap_bytes > b->budget || b->plan_need > b->budget - cap_bytes))
			return ember_graph_buffer_update(b, n, nodes, rows, mode);
		float **rp = em_alloc(cap_bytes);
		if (!rp)
			return EMBER_ENOMEM;
		em_free(b->upd_rowp, 0);
		pthread_mutex_lock(&b->mu);
		graph_mem_add(b, (int64_t)(cap - b->upd_cap) * (int64_t)sizeof(float *));
		pthread_mutex_unlock(&b->mu);
		b->upd_rowp = rp;
		b->upd_cap = cap;
	}
	/* check and resolve in one pass; nothing is handed over if a node fails */
	memset(touched, 0, b->c);
	uint64_t nn = b->g->meta.num_nodes;
	for (size_t i = 0; i < n; i++) {
		uint64_t v = nodes[i], part = graph_buf_part(b, v);
		int32_t pos = v < nn ? b->part_pos[part] : -1;
		if (pos < 0)
			return EMBER_EINVAL;
		touched[pos] = true;
		b->upd_rowp[i] = b->cur_data[pos] + (v - part * b->ps) * b->dim;
	}
	pthread_mutex_lock(&b->mu);
	mark_dirty_locked(b, touched);
	b->upd = (struct graph_upd_job){.rowp = b->upd_rowp, .rows = rows, .n = n, .mode = mode};
	b->upd_busy = true;
	b->upd_set++;
	/* release: pairs with graph_upd_drain's acquire (a non-zero value sends readers
	 * to wait under mu) */
	atomic_store_explicit(&b->upd_pending, 1, memory_order_release);
	b->st.updates_async++;
	pthread_cond_signal(&b->cv_update);
	pthread_mutex_unlock(&b->mu);
	return 0;
}

int ember_graph_buffer_update_sync(ember_graph_buffer *b)
{
	if (!b)
		return EMBER_EINVAL;
	graph_upd_drain(b);
	return 0;
}

int ember_graph_buffer_gather(ember_graph_buffer *b, size_t n, const uint64_t *nodes, float *out)
{
	if (!b || (n && (!nodes || !out)))
		return EMBER_EINVAL;
	graph_upd_drain(b);
	int rc = nodes_check(b, n, nodes, NULL);
	if (rc < 0)
		return rc;
	size_t row_bytes = (size_t)b->dim * 4;
	for (size_t i = 0; i < n; i++) {
		if (i + 8 < n)
			__builtin_prefetch(cur_row(b, nodes[i + 8]));
		memcpy(out + i * b->dim, cur_row(b, nodes[i]), row_bytes);
	}
	return 0;
}
