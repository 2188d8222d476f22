/*
 * rows.c - rows through the cache outside batches: ember_cache_read_rows and
 * ember_cache_write_rows (served by the prefetcher between its rounds, C8 in
 * cache.c), the tables' resolved settings and init, ember_cache_row and
 * ember_cache_state_floats.
 *
 * How a request is served (cache_rows_serve, on the prefetcher thread, while the
 * trainer waits in cache_request, so no batch is acquired and no fetch round runs):
 *   1. The requested rows go into a small open-addressing hash (row -> first
 *      request index). One pass over owner[] (the slots' physical owners) finds
 *      the slot each requested row sits in, if any. A row is in at most one slot
 *      (C4: a row's next admission follows the refill of its old slot), and a
 *      row's slot holds its newest value, dirty or clean: write-back happens only
 *      when the slot is refilled.
 *   2. Read: rows in a slot are read from it (fp32, as the trainer sees them);
 *      the others from the store (ember_get_batch, `depth` keys a call); rows the
 *      store does not hold are their table's init with zero state.
 *   3. Write: each distinct row's last occurrence is written to the store
 *      (ember_put_batch), then every slot that row sits in is overwritten with the
 *      same value (rounded to fp16 where the table stores fp16) and marked clean:
 *      the store already holds it. Without state_in the rows' state is read first
 *      (step 2) and written back unchanged. Batches planned but not yet fetched
 *      read the store afterwards (C4: the puts returned before any later get);
 *      batches already resident read the slots. With GPU slots the installs are
 *      waited for before the call returns, since `ready` events recorded earlier
 *      do not cover them.
 */
#include <math.h>
#include <string.h>

#include "cache/cache_int.h"
#include "core/alloc.h"
#include "core/rng.h"

#define NO_SLOT UINT32_MAX

/* ---- tables ------------------------------------------------------------------------ */

int cache_tables_init(struct ember_cache *c, const ember_cache_options *o)
{
	c->tables = em_alloc(c->ntables * sizeof(*c->tables));
	if (!c->tables)
		return EMBER_ENOMEM;
	for (uint32_t i = 0; i < c->ntables; i++) {
		const ember_cache_table *t = &o->tables[i];
		struct ctable *x = &c->tables[i];
		x->rows = t->rows;
		x->dim = t->dim;
		x->storage = t->storage;
		x->state = t->optimizer == EMBER_CACHE_OPT_ADAGRAD	   ? t->dim
			   : t->optimizer == EMBER_CACHE_OPT_ROWWISE_ADAGRAD ? 1
									     : 0;
		if (t->init == EMBER_CACHE_TABLE_INIT_CACHE) {
			x->init = o->init;
			x->scale = o->init_scale != 0 ? o->init_scale : 0.01f;
			x->seed = o->init_seed;
		} else {
			x->init = t->init == EMBER_CACHE_TABLE_INIT_UNIFORM ? EMBER_CACHE_INIT_UNIFORM
									    : EMBER_CACHE_INIT_ZERO;
			x->scale = t->init_scale != 0 ? t->init_scale : 0.01f;
			x->seed = t->init_seed;
		}
		x->vbytes = slot_value_bytes(x->dim, x->storage, x->state);
	}
	return 0;
}

/* A function of (seed, table, row, element) only: the same row reads the same in
 * every cache and every run. */
void cache_init_row(const struct ember_cache *c, uint32_t table, uint64_t row, void *buf)
{
	const struct ctable *t = &c->tables[table];
	size_t rb = slot_row_bytes(t->dim, t->storage);
	memset((uint8_t *)buf + rb, 0, (size_t)t->state * sizeof(float)); /* zero state */
	if (t->init == EMBER_CACHE_INIT_ZERO) {
		memset(buf, 0, rb);
		return;
	}
	uint64_t base = em_mix64(t->seed + 0x9e3779b97f4a7c15ull) ^
			em_mix64(((uint64_t)table << 48 | row) + 0x632be59bd9b4e019ull);
	for (uint32_t j = 0; j < t->dim; j++) {
		uint64_t h = em_mix64(base + (uint64_t)j * 0x9e3779b97f4a7c15ull);
		float u = (float)(h >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
		float v = (2.0f * u - 1.0f) * t->scale;
		if (t->storage == EMBER_CACHE_STORE_FP16)
			((uint16_t *)buf)[j] = slot_f32_to_f16(v);
		else
			memcpy((uint8_t *)buf + 4 * (size_t)j, &v, 4);
	}
}

uint32_t ember_cache_state_floats(const ember_cache *c, uint32_t table)
{
	if (!c || table >= c->ntables)
		return 0;
	return c->tables[table].state;
}

float *ember_cache_row(const ember_cache_view *v, uint32_t p, uint32_t i)
{
	return v->slot_memory + (size_t)v->slots[p][i] * v->slot_stride;
}

/* ---- the requested rows' slots ------------------------------------------------------ */

struct rowset {
	size_t mask;
	size_t *tab;    /* [mask + 1]: request index + 1 of a row's first occurrence, 0 empty */
	size_t *first;  /* [n] index of rows[i]'s first occurrence */
	uint32_t *slot; /* [n] for first occurrences: the slot holding the row, or NO_SLOT */
};

static void rowset_free(struct rowset *rs)
{
	em_free(rs->tab, 0);
	em_free(rs->first, 0);
	em_free(rs->slot, 0);
}

static size_t *rowset_find(const struct rowset *rs, const uint64_t *rows, uint64_t row)
{
	size_t h = (size_t)em_mix64(row) & rs->mask;
	while (rs->tab[h] && rows[rs->tab[h] - 1] != row)
		h = (h + 1) & rs->mask;
	return &rs->tab[h];
}

/* Step 1: dedupe the rows and find the slot each one physically sits in. */
static int rowset_build(struct ember_cache *c, struct rowset *rs, uint32_t table, size_t n,
			const uint64_t *rows)
{
	memset(rs, 0, sizeof(*rs));
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	rs->mask = cap - 1;
	rs->tab = em_zalloc(cap * sizeof(size_t));
	rs->first = em_alloc((n ? n : 1) * sizeof(size_t));
	rs->slot = em_alloc((n ? n : 1) * sizeof(uint32_t));
	if (!rs->tab || !rs->first || !rs->slot) {
		rowset_free(rs);
		return EMBER_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		size_t *e = rowset_find(rs, rows, rows[i]);
		if (!*e)
			*e = i + 1;
		rs->first[i] = *e - 1;
		rs->slot[i] = NO_SLOT;
	}
	for (uint64_t s = 0; s < c->capacity; s++) {
		if (c->owner[s].table != table)
			continue;
		size_t *e = rowset_find(rs, rows, c->owner[s].row);
		if (*e)
			rs->slot[*e - 1] = (uint32_t)s;
	}
	return 0;
}

/* ---- reading -------------------------------------------------------------------------- */

/* Copy a store-format value (row, then state) out as fp32 row and state. */
static void value_out(const struct ctable *t, const uint8_t *buf, float *out, float *state_out)
{
	slot_row_to_f32(out, buf, t->dim, t->storage);
	if (state_out)
		memcpy(state_out, buf + slot_row_bytes(t->dim, t->storage),
		       (size_t)t->state * sizeof(float));
}

/*
 * Step 2 for m rows: row k is rows[idx[k]], in slot sl[k] (NO_SLOT: not cached);
 * its fp32 row goes to out + k * dim, its state to state_out + k * state (NULL:
 * not wanted). *fatal is set when a slot read failed.
 */
static int read_into(struct ember_cache *c, uint32_t table, size_t m, const size_t *idx,
		     const uint64_t *rows, const uint32_t *sl, float *out, float *state_out,
		     int *fatal)
{
	const struct ctable *t = &c->tables[table];
	size_t sf = t->state;
	int rc;
	/* rows in slots: fp32 straight from the slot (storage FP32 in the move) */
	for (size_t k0 = 0; k0 < m;) {
		size_t j = 0, at[1024], cap = c->depth < 1024 ? c->depth : 1024;
		for (; k0 < m && j < cap; k0++) {
			if (sl[k0] == NO_SLOT)
				continue;
			c->mv[j] = (struct slot_move){.slot = sl[k0], .dim = t->dim,
						      .storage = EMBER_CACHE_STORE_FP32,
						      .state = t->state,
						      .buf = c->stage + j * c->max_row_bytes};
			at[j++] = k0;
		}
		if ((rc = slot_store_read(&c->ss, j, c->mv)) < 0) {
			*fatal = 1;
			return rc;
		}
		for (size_t q = 0; q < j; q++) {
			const float *b = c->mv[q].buf;
			memcpy(out + at[q] * t->dim, b, (size_t)t->dim * sizeof(float));
			if (state_out)
				memcpy(state_out + at[q] * sf, b + t->dim, sf * sizeof(float));
		}
	}
	/* the others from the store, `depth` keys a call */
	for (size_t k0 = 0; k0 < m;) {
		size_t j = 0, at[1024], cap = c->depth < 1024 ? c->depth : 1024;
		for (; k0 < m && j < cap; k0++) {
			if (sl[k0] != NO_SLOT)
				continue;
			key_encode(c->kbuf + j * KEY_LEN, table, rows[idx[k0]]);
			c->kptr[j] = c->kbuf + j * KEY_LEN;
			c->klen[j] = KEY_LEN;
			c->vptr[j] = c->stage + j * c->max_row_bytes;
			c->vcap[j] = t->vbytes;
			at[j++] = k0;
		}
		if (j == 0)
			break;
		rc = ember_get_batch(c->sess, j, c->kptr, c->klen, c->vptr, c->vcap, c->vlen, c->st);
		if (rc < 0)
			return rc;
		for (size_t q = 0; q < j; q++) {
			size_t k = at[q];
			if (c->st[q] == EMBER_ENOTFOUND)
				cache_init_row(c, table, rows[idx[k]], c->vptr[q]);
			else if (c->st[q] == EMBER_ERANGE || (c->st[q] == 0 && c->vlen[q] != t->vbytes))
				return EMBER_ECORRUPT; /* a value of another size under a row's key */
			else if (c->st[q] < 0)
				return c->st[q];
			value_out(t, c->vptr[q], out + k * t->dim, state_out ? state_out + k * sf : NULL);
		}
	}
	return 0;
}

static int serve_read(struct ember_cache *c, struct cache_req *r, const struct rowset *rs)
{
	size_t *idx = em_alloc((r->n ? r->n : 1) * sizeof(size_t));
	uint32_t *sl = em_alloc((r->n ? r->n : 1) * sizeof(uint32_t));
	int rc = EMBER_ENOMEM;
	if (idx && sl) {
		for (size_t i = 0; i < r->n; i++) {
			idx[i] = i;
			sl[i] = rs->slot[rs->first[i]];
		}
		uint32_t sf = c->tables[r->table].state;
		rc = read_into(c, r->table, r->n, idx, r->rows, sl, r->out,
			       sf ? r->state_out : NULL, &r->fatal);
	}
	em_free(idx, 0);
	em_free(sl, 0);
	return rc;
}

/* ---- writing --------------------------------------------------------------------------- */

/* Step 3 for the m distinct rows rows[idx[k]] (slots sl[k]), in chunks of depth:
 * values from in/state (state row k at state + k * sf when state_k, else at
 * state + idx[k] * sf). */
static int write_from(struct ember_cache *c, uint32_t table, size_t m, const size_t *idx,
		      const uint64_t *rows, const uint32_t *sl, const float *in,
		      const float *state, int state_k, int *fatal)
{
	const struct ctable *t = &c->tables[table];
	size_t rb = slot_row_bytes(t->dim, t->storage), sf = t->state;
	size_t cap = c->depth < 1024 ? c->depth : 1024;
	int rc, installed = 0;
	for (size_t k0 = 0; k0 < m; k0 += cap) {
		size_t j = m - k0 < cap ? m - k0 : cap, ns = 0;
		for (size_t q = 0; q < j; q++) {
			size_t k = k0 + q, i = idx[k];
			uint8_t *buf = c->rwbuf + q * c->max_row_bytes;
			slot_row_from_f32(buf, in + i * t->dim, t->dim, t->storage);
			if (sf)
				memcpy(buf + rb, state + (state_k ? k : i) * sf, sf * sizeof(float));
			key_encode(c->kbuf + q * KEY_LEN, table, rows[i]);
			c->kptr[q] = c->kbuf + q * KEY_LEN;
			c->klen[q] = KEY_LEN;
			c->vptr[q] = buf;
			c->vlen[q] = t->vbytes;
			ns += sl[k] != NO_SLOT;
		}
		rc = ember_put_batch(c->sess, j, c->kptr, c->klen, (const void *const *)c->vptr,
				     c->vlen, c->st);
		for (size_t q = 0; rc == 0 && q < j; q++)
			if (c->st[q] < 0)
				rc = c->st[q];
		if (rc < 0)
			return rc; /* slots untouched: they and the store agree on what came before */
		if (ns == 0)
			continue;
		/* the cached copies take the same bytes, and are clean: the store holds them */
		if ((rc = slot_store_stage(&c->ss, ns, c->stage, c->vptr)) < 0) {
			*fatal = 1;
			return rc;
		}
		size_t w = 0;
		for (size_t q = 0; q < j; q++) {
			uint32_t s = sl[k0 + q];
			if (s == NO_SLOT)
				continue;
			memcpy(c->vptr[w], c->rwbuf + q * c->max_row_bytes, t->vbytes);
			c->mv[w] = (struct slot_move){.slot = s, .dim = t->dim, .storage = t->storage,
						      .state = t->state, .buf = c->vptr[w]};
			c->dirty[s] = 0; /* C5: no batch is acquired during a request */
			w++;
		}
		if ((rc = slot_store_write(&c->ss, w, c->mv)) < 0) {
			*fatal = 1;
			return rc;
		}
		installed = 1;
	}
	if (installed && c->ss.where == EMBER_CACHE_SLOTS_GPU) {
		/* resident batches' `ready` events were recorded before these installs */
		if ((rc = ember_gpu_stream_synchronize(c->ss.h2d)) < 0) {
			*fatal = 1;
			return rc;
		}
	}
	return 0;
}

static int serve_write(struct ember_cache *c, struct cache_req *r, const struct rowset *rs)
{
	const struct ctable *t = &c->tables[r->table];
	size_t n = r->n, m = 0;
	size_t *idx = em_alloc((n ? n : 1) * sizeof(size_t));
	size_t *pos = em_alloc((n ? n : 1) * sizeof(size_t));
	uint32_t *sl = em_alloc((n ? n : 1) * sizeof(uint32_t));
	float *row = NULL, *state = NULL;
	int rc = EMBER_ENOMEM;
	if (!idx || !pos || !sl)
		goto out;
	/* each distinct row once (pos: first occurrence -> k), with its last
	 * occurrence's values: a row given twice ends with its later value */
	for (size_t i = 0; i < n; i++)
		if (rs->first[i] == i) {
			pos[i] = m;
			sl[m++] = rs->slot[i];
		}
	for (size_t i = 0; i < n; i++)
		idx[pos[rs->first[i]]] = i;
	const float *st = r->state_in;
	int state_k = 0;
	if (t->state && !st) {
		/* keep the state: read it first (from the slot or the store) */
		row = em_alloc((m ? m : 1) * t->dim * sizeof(float));
		state = em_alloc((m ? m : 1) * t->state * sizeof(float));
		if (!row || !state)
			goto out;
		rc = read_into(c, r->table, m, idx, r->rows, sl, row, state, &r->fatal);
		if (rc < 0)
			goto out;
		st = state;
		state_k = 1;
	}
	rc = write_from(c, r->table, m, idx, r->rows, sl, r->in, st, state_k, &r->fatal);
out:
	em_free(idx, 0);
	em_free(pos, 0);
	em_free(sl, 0);
	em_free(row, 0);
	em_free(state, 0);
	return rc;
}

void cache_rows_serve(struct ember_cache *c, struct cache_req *r)
{
	struct rowset rs;
	r->fatal = 0;
	r->rc = rowset_build(c, &rs, r->table, r->n, r->rows);
	if (r->rc < 0)
		return;
	r->rc = r->kind == REQ_READ ? serve_read(c, r, &rs) : serve_write(c, r, &rs);
	rowset_free(&rs);
}

/* ---- the trainer's calls ------------------------------------------------------------- */

static int rows_check(const struct ember_cache *c, uint32_t table, size_t n,
		      const uint64_t *rows, const void *buf)
{
	if (!c || (n && (!rows || !buf)) || table >= c->ntables)
		return EMBER_EINVAL;
	for (size_t i = 0; i < n; i++)
		if (rows[i] >= c->tables[table].rows)
			return EMBER_EINVAL;
	if (c->holding)
		return EMBER_ESTATE; /* the trainer's own field: the caller is the trainer */
	return 0;
}

int ember_cache_read_rows(ember_cache *c, uint32_t table, size_t n, const uint64_t *rows,
			  float *out, float *state_out)
{
	int rc = rows_check(c, table, n, rows, out);
	if (rc < 0)
		return rc;
	struct cache_req r = {.kind = REQ_READ, .table = table, .n = n, .rows = rows,
			      .out = out, .state_out = state_out};
	return cache_request(c, &r);
}

int ember_cache_write_rows(ember_cache *c, uint32_t table, size_t n, const uint64_t *rows,
			   const float *in, const float *state_in)
{
	int rc = rows_check(c, table, n, rows, in);
	if (rc < 0)
		return rc;
	struct cache_req r = {.kind = REQ_WRITE, .table = table, .n = n, .rows = rows,
			      .in = in, .state_in = state_in};
	return cache_request(c, &r);
}
