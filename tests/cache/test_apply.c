/*
 * test_apply.c - ember_cache_apply against straightforward reference loops: SGD,
 * Adagrad and row-wise Adagrad, weight decay, duplicate lookups (their gradients
 * summed in lookup order), several parts of one table in a batch, grad_stride,
 * fp16 storage, and evictions between batches (the state travels with the row);
 * every bad input and wrong state of apply, and the new open-time checks of the
 * tables (optimizer, per-table init, reserved_, optimizer state with GPU slots).
 *
 * Built with -ffp-contract=off like apply.c (tests/cache/meson.build): the
 * reference rounds after every operation, as torch.optim does, and must match
 * bit for bit.
 */
#include "ember.h"
#include "ember_cache.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NT 3
#define ROWS 60
static const uint32_t DIM[NT] = {5, 7, 4};
static const uint32_t OPT[NT] = {EMBER_CACHE_OPT_NONE, EMBER_CACHE_OPT_ADAGRAD,
				 EMBER_CACHE_OPT_ROWWISE_ADAGRAD};
static const uint32_t STORAGE[NT] = {EMBER_CACHE_STORE_FP32, EMBER_CACHE_STORE_FP16,
				     EMBER_CACHE_STORE_FP32};

static char dir[256];
static ember_db *db;
static ember_cache_table tabs[NT];

static float frand(tu_rng *r, float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)(tu_rng_next(r) >> 11) * 0x1.0p-53);
}

/* The update, written out once more: g + wd*w, then the optimizer. */
static void ref_update(uint32_t opt, uint32_t dim, float *w, float *s, const float *g0, float lr,
		       float eps, float wd)
{
	float g[64];
	for (uint32_t j = 0; j < dim; j++)
		g[j] = wd != 0 ? g0[j] + wd * w[j] : g0[j];
	if (opt == EMBER_CACHE_OPT_NONE) {
		for (uint32_t j = 0; j < dim; j++)
			w[j] = w[j] + (-lr) * g[j];
	} else if (opt == EMBER_CACHE_OPT_ADAGRAD) {
		for (uint32_t j = 0; j < dim; j++) {
			s[j] = s[j] + g[j] * g[j];
			w[j] = w[j] + (-lr) * (g[j] / (sqrtf(s[j]) + eps));
		}
	} else {
		float sum = 0;
		for (uint32_t j = 0; j < dim; j++)
			sum = sum + g[j] * g[j];
		s[0] = s[0] + sum / (float)dim;
		for (uint32_t j = 0; j < dim; j++)
			w[j] = w[j] + (-lr) * (g[j] / (sqrtf(s[0]) + eps));
	}
}

static uint32_t state_of(uint32_t t)
{
	return OPT[t] == EMBER_CACHE_OPT_ADAGRAD ? DIM[t] : OPT[t] ? 1 : 0;
}

static void open_cache(ember_cache **c, uint64_t capacity)
{
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = tabs;
	o.ntables = NT;
	o.capacity = capacity;
	o.window = 4;
	o.init = EMBER_CACHE_INIT_UNIFORM;
	o.init_scale = 0.5f;
	o.init_seed = tu_seed();
	CHECK_OK(ember_cache_open(db, &o, c));
}

/* Apply one part against the reference: the rows and state as the slots hold them
 * before, the reference's result after, bit for bit. */
static void check_part(ember_cache *c, ember_cache_view *v, uint32_t p, tu_rng *r)
{
	const ember_cache_part *pt = &v->parts[p];
	uint32_t t = pt->table, dim = DIM[t], sf = state_of(t);
	size_t gs = dim + tu_rng_below(r, 3);
	float *grads = malloc((pt->n ? pt->n : 1) * gs * sizeof(float));
	float *ref = malloc((pt->n ? pt->n : 1) * (dim + sf) * sizeof(float));
	float *sum = malloc((pt->n ? pt->n : 1) * dim * sizeof(float));
	uint32_t *first = malloc((pt->n ? pt->n : 1) * sizeof(uint32_t));
	CHECK(grads && ref && sum && first, "malloc");
	for (size_t i = 0; i < pt->n * gs; i++)
		grads[i] = frand(r, -1, 1);
	/* distinct rows by id, the first lookup of each, gradients summed in order */
	for (uint32_t i = 0; i < pt->n; i++) {
		uint32_t f = i;
		for (uint32_t k = 0; k < i; k++)
			if (pt->rows[k] == pt->rows[i]) {
				f = k;
				break;
			}
		first[i] = f;
		CHECK(v->slots[p][i] == v->slots[p][f], "duplicates share a slot");
		if (f == i) {
			memcpy(sum + (size_t)i * dim, grads + i * gs, dim * sizeof(float));
			memcpy(ref + (size_t)i * (dim + sf), ember_cache_row(v, p, i),
			       (dim + sf) * sizeof(float));
		} else {
			for (uint32_t j = 0; j < dim; j++)
				sum[(size_t)f * dim + j] = sum[(size_t)f * dim + j] + grads[i * gs + j];
		}
	}
	ember_cache_update u = {.lr = frand(r, 0.01f, 0.5f),
				.eps = tu_rng_below(r, 2) ? 0 : 1e-6f,
				.weight_decay = tu_rng_below(r, 2) ? 0 : 0.05f};
	if (tu_rng_below(r, 8) == 0)
		u.lr = -u.lr; /* allowed: gradient ascent */
	float eps = u.eps != 0 ? u.eps : 1e-10f;
	for (uint32_t i = 0; i < pt->n; i++)
		if (first[i] == i)
			ref_update(OPT[t], dim, ref + (size_t)i * (dim + sf),
				   ref + (size_t)i * (dim + sf) + dim, sum + (size_t)i * dim, u.lr, eps,
				   u.weight_decay);
	CHECK_OK(ember_cache_apply(c, v, p, grads, gs == dim && tu_rng_below(r, 2) ? 0 : gs, &u));
	for (uint32_t i = 0; i < pt->n; i++) {
		if (first[i] != i)
			continue;
		const float *x = ember_cache_row(v, p, i);
		CHECK(memcmp(x, ref + (size_t)i * (dim + sf), (dim + sf) * sizeof(float)) == 0,
		      "table %u row %llu: apply differs from the reference (w[0] %.9g want %.9g)", t,
		      (unsigned long long)pt->rows[i], x[0], ref[(size_t)i * (dim + sf)]);
	}
	free(grads);
	free(ref);
	free(sum);
	free(first);
}

/* Many batches of random parts; a small capacity so rows are evicted and fetched
 * again with their state between batches. */
static void test_against_reference(void)
{
	ember_cache *c;
	open_cache(&c, 24);
	tu_rng r;
	tu_rng_seed(&r, tu_seed() ^ 0xa991);
	uint64_t nb = tu_scaled(300);
	uint64_t ids[4][12];
	for (uint64_t b = 0; b < nb; b++) {
		ember_cache_part parts[4];
		uint32_t np = 1 + (uint32_t)tu_rng_below(&r, 4), used = 0;
		for (uint32_t p = 0; p < np; p++) {
			uint32_t t = (uint32_t)tu_rng_below(&r, NT);
			uint32_t n = (uint32_t)tu_rng_below(&r, 6); /* 0 .. 5, few distinct */
			for (uint32_t i = 0; i < n; i++)
				ids[p][i] = tu_rng_below(&r, 3) ? tu_rng_below(&r, 8) : tu_rng_below(&r, ROWS);
			parts[p] = (ember_cache_part){.table = t, .n = n, .rows = ids[p]};
			used += n;
		}
		(void)used;
		ember_cache_batch bt = {.nparts = np, .parts = parts};
		CHECK_OK(ember_cache_push(c, &bt));
		ember_cache_view v;
		CHECK_OK(ember_cache_acquire(c, &v));
		CHECK(v.nslots == 24, "nslots %llu", (unsigned long long)v.nslots);
		for (uint32_t p = 0; p < np; p++)
			check_part(c, &v, p, &r);
		if (tu_rng_below(&r, 4) == 0)
			v.flags = EMBER_CACHE_VIEW_READONLY; /* applied rows are dirty anyway */
		CHECK_OK(ember_cache_release(c, &v));
		if (b % 50 == 49)
			CHECK_OK(ember_cache_flush(c));
	}
	CHECK_OK(ember_cache_close(c));
	printf("  reference: %llu batches ok\n", (unsigned long long)nb);
}

/* An applied row is dirty although the view was released READONLY: its update
 * reaches the store. */
static void test_readonly_applied(void)
{
	ember_cache *c;
	open_cache(&c, 24);
	uint64_t row = 3;
	float before[5];
	CHECK_OK(ember_cache_read_rows(c, 0, 1, &row, before, NULL));
	ember_cache_part p = {.table = 0, .n = 1, .rows = &row};
	ember_cache_batch bt = {.nparts = 1, .parts = &p};
	CHECK_OK(ember_cache_push(c, &bt));
	ember_cache_view v;
	CHECK_OK(ember_cache_acquire(c, &v));
	float g[5] = {1, 1, 1, 1, 1};
	ember_cache_update u = {.lr = 0.5f};
	CHECK_OK(ember_cache_apply(c, &v, 0, g, 0, &u));
	v.flags = EMBER_CACHE_VIEW_READONLY;
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_close(c));
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	uint64_t key = row; /* table 0 */
	float got[5];
	size_t len;
	CHECK_OK(ember_get(s, &key, 8, got, sizeof(got), &len));
	CHECK(len == sizeof(got), "len %zu", len);
	for (int j = 0; j < 5; j++)
		CHECK(got[j] == before[j] + (-0.5f) * 1.0f, "element %d: %g (was %g)", j, got[j],
		      before[j]);
	CHECK_OK(ember_session_close(s));
}

static void test_bad_inputs(void)
{
	ember_cache *c, *c2;
	open_cache(&c, 24);
	open_cache(&c2, 24);
	uint64_t rows[2] = {1, 1};
	ember_cache_part p = {.table = 1, .n = 2, .rows = rows};
	ember_cache_batch bt = {.nparts = 1, .parts = &p};
	float g[2 * 7] = {0};
	ember_cache_update u = {.lr = 0.1f};
	ember_cache_view v;
	memset(&v, 0, sizeof(v));
	CHECK_RC(ember_cache_apply(c, &v, 0, g, 0, &u), EMBER_ESTATE); /* nothing acquired */
	CHECK_OK(ember_cache_push(c, &bt));
	CHECK_OK(ember_cache_push(c2, &bt));
	ember_cache_view v2;
	CHECK_OK(ember_cache_acquire(c2, &v2));
	CHECK_RC(ember_cache_apply(c, &v2, 0, g, 0, &u), EMBER_ESTATE); /* another cache's */
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK_RC(ember_cache_apply(NULL, &v, 0, g, 0, &u), EMBER_EINVAL);
	CHECK_RC(ember_cache_apply(c, NULL, 0, g, 0, &u), EMBER_EINVAL);
	CHECK_RC(ember_cache_apply(c, &v, 0, g, 0, NULL), EMBER_EINVAL);
	CHECK_RC(ember_cache_apply(c, &v, 0, NULL, 0, &u), EMBER_EINVAL);
	CHECK_RC(ember_cache_apply(c, &v, 1, g, 0, &u), EMBER_EINVAL);
	CHECK_RC(ember_cache_apply(c, &v, 0, g, 6, &u), EMBER_EINVAL); /* stride < dim 7 */
	ember_cache_update bad[] = {
		{.lr = NAN}, {.lr = INFINITY}, {.lr = 0.1f, .eps = -1},
		{.lr = 0.1f, .eps = NAN}, {.lr = 0.1f, .weight_decay = -0.1f},
		{.lr = 0.1f, .weight_decay = INFINITY}, {.lr = 0.1f, .reserved_ = 1},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_RC(ember_cache_apply(c, &v, 0, g, 0, &bad[i]), EMBER_EINVAL);
	ember_cache_view stale = v;
	stale.batch++;
	CHECK_RC(ember_cache_apply(c, &stale, 0, g, 0, &u), EMBER_ESTATE);
	/* lr 0 is a valid no-op on the rows; Adagrad's state still grows */
	float before[7 + 7], after[7 + 7];
	memcpy(before, ember_cache_row(&v, 0, 0), sizeof(before));
	g[0] = 2;
	ember_cache_update z = {.lr = 0};
	CHECK_OK(ember_cache_apply(c, &v, 0, g, 0, &z));
	memcpy(after, ember_cache_row(&v, 0, 0), sizeof(after));
	CHECK(memcmp(before, after, 7 * sizeof(float)) == 0, "lr 0 changed the row");
	CHECK(after[7] == before[7] + 4.0f, "state %g, was %g", after[7], before[7]);
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_RC(ember_cache_apply(c, &v, 0, g, 0, &u), EMBER_ESTATE); /* released */
	CHECK_OK(ember_cache_release(c2, &v2));
	CHECK(ember_cache_state_floats(c, 0) == 0 && ember_cache_state_floats(c, 1) == 7 &&
		      ember_cache_state_floats(c, 2) == 1 && ember_cache_state_floats(c, 3) == 0 &&
		      ember_cache_state_floats(NULL, 1) == 0,
	      "ember_cache_state_floats");
	CHECK_OK(ember_cache_close(c));
	CHECK_OK(ember_cache_close(c2));

	/* GPU slots (the host backend): apply is for host slots only */
	ember_cache_table gt = {.rows = 10, .dim = 4};
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = &gt;
	o.ntables = 1;
	o.capacity = 8;
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu_backend = EMBER_GPU_BACKEND_HOST;
	CHECK_OK(ember_cache_open(db, &o, &c));
	uint64_t row = 2;
	ember_cache_part gp = {.table = 0, .n = 1, .rows = &row};
	ember_cache_batch gb = {.nparts = 1, .parts = &gp};
	CHECK_OK(ember_cache_push(c, &gb));
	CHECK_OK(ember_cache_acquire(c, &v));
	CHECK_RC(ember_cache_apply(c, &v, 0, g, 0, &u), EMBER_EINVAL);
	v.flags = EMBER_CACHE_VIEW_READONLY; /* nothing of this layout reaches the store */
	CHECK_OK(ember_cache_release(c, &v));
	CHECK_OK(ember_cache_close(c));
}

static void test_open_checks(void)
{
	ember_cache_options o;
	ember_cache *c = NULL;
	struct {
		const char *what;
		ember_cache_table t[2];
		uint32_t slots;
	} cases[] = {
		{"unknown optimizer", {{.rows = 9, .dim = 2, .optimizer = 3}, {.rows = 9, .dim = 2}}, 0},
		{"unknown init", {{.rows = 9, .dim = 2, .init = 3}, {.rows = 9, .dim = 2}}, 0},
		{"init_scale nan", {{.rows = 9, .dim = 2, .init = 2, .init_scale = NAN}, {.rows = 9, .dim = 2}}, 0},
		{"init_scale < 0", {{.rows = 9, .dim = 2, .init_scale = -1}, {.rows = 9, .dim = 2}}, 0},
		{"reserved_", {{.rows = 9, .dim = 2}, {.rows = 9, .dim = 2, .reserved_ = 1}}, 0},
		{"GPU row-wise", {{.rows = 9, .dim = 2, .optimizer = 2}, {.rows = 9, .dim = 2, .optimizer = 2}}, 1},
		{"GPU mixed", {{.rows = 9, .dim = 2, .optimizer = 1}, {.rows = 9, .dim = 2}}, 1},
		{"GPU mixed", {{.rows = 9, .dim = 2}, {.rows = 9, .dim = 2, .optimizer = 1}}, 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ember_cache_options_default(&o);
		o.tables = cases[i].t;
		o.ntables = 2;
		o.slots = cases[i].slots;
		if (o.slots)
			o.gpu_backend = EMBER_GPU_BACKEND_HOST;
		CHECK_RC(ember_cache_open(db, &o, &c), EMBER_EINVAL);
		CHECK(c == NULL, "%s: handle set", cases[i].what);
	}
	/* all Adagrad on GPU slots: accepted, the arena keeps the state */
	ember_cache_table ok[2] = {{.rows = 9, .dim = 2, .optimizer = 1},
				   {.rows = 9, .dim = 3, .optimizer = 1}};
	ember_cache_options_default(&o);
	o.tables = ok;
	o.ntables = 2;
	o.slots = EMBER_CACHE_SLOTS_GPU;
	o.gpu_backend = EMBER_GPU_BACKEND_HOST;
	CHECK_OK(ember_cache_open(db, &o, &c));
	CHECK(ember_cache_state_floats(c, 1) == 3, "state floats");
	CHECK_OK(ember_cache_close(c));
}

int main(int argc, char **argv)
{
	tu_init("cache_apply", argc, argv);
	CHECK(tu_tmpdir_make("cache-apply", dir, sizeof(dir)) == 0, "tmpdir");
	for (uint32_t t = 0; t < NT; t++)
		tabs[t] = (ember_cache_table){.rows = ROWS, .dim = DIM[t], .storage = STORAGE[t],
					      .optimizer = OPT[t]};
	ember_options so;
	ember_options_default(&so);
	so.log_memory = 8u << 20;
	so.page_size = 64u << 10;
	so.index_buckets = 1024;
	so.flags = EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &so, &db));
	test_open_checks();
	test_bad_inputs();
	test_readonly_applied();
	test_against_reference();
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("cache_apply: ok\n");
	return 0;
}
