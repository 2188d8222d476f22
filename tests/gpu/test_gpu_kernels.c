/*
 * test_gpu_kernels.c - the kernels' reference behaviour: gather order with
 * duplicates, install (with and without optimizer state, from device memory and
 * straight from a staging buffer), scatter-apply's duplicate summing with SGD and
 * Adagrad, all against straightforward loops written here; bad slot indices.
 *
 *   test_gpu_kernels host   the host backend against the reference (suite unit)
 *   test_gpu_kernels cuda   the CUDA backend against the reference AND against the
 *                           host backend's results for the same inputs (suite gpu;
 *                           exits 77 without CUDA or a device)
 *
 * Every output buffer (gather's batch tensor, and the arena before a full install)
 * is poisoned with 0xFF bytes (a NaN pattern) before the kernel runs, and every
 * element is checked to have been overwritten: a kernel that skips part of its
 * output fails even where the stale value would happen to be right.
 *
 * Rounds: tu_scaled(12) random shapes (dim in {1,3,4,7,16,64,130,256}: scalar and
 * float4 paths, one or more column passes per lane; 1..300 slots, up to
 * tu_scaled(3000) lookups, half of them drawn from 8 hot slots so that duplicates
 * are common), then one large round (tu_scaled(600000) lookups over 5000 slots)
 * that makes the CUDA grids go round their grid-stride loops.
 */
#include "gpu_test.h"

#include <math.h>

static const uint32_t POISON = 0xffffffffu;

typedef struct shape {
	uint32_t dim;
	uint32_t slots;
	int state;      /* EMBER_GPU_STATE_* */
	uint32_t sf;    /* state floats: 0 or dim */
	uint32_t w;     /* packed width with state: dim + sf */
	uint32_t n;     /* lookups */
	int opt;        /* EMBER_GPU_OPT_* */
	float lr, eps;
	float state_init;
} shape;

typedef struct inputs {
	float *init;      /* slots x w: initial rows with state */
	uint32_t *look;   /* n lookups (some duplicated) */
	float *grads;     /* n x dim */
	uint32_t m;       /* re-installed slots */
	uint32_t *inst;   /* m distinct slots */
	float *inst_rows; /* m x dim */
} inputs;

/* What a backend produced; every buffer packed, host memory. */
typedef struct outputs {
	float *gathered;  /* n x dim: gather of look */
	float *gathered_s;/* n x w: gather of look WITH_STATE */
	float *applied;   /* slots x w: arena after scatter-apply */
	float *installed; /* slots x w: arena after the re-install */
} outputs;

static bool poisoned(const float *p, size_t count, size_t *where)
{
	for (size_t i = 0; i < count; i++) {
		uint32_t b;
		memcpy(&b, &p[i], sizeof(b));
		if (b == POISON) {
			*where = i;
			return true;
		}
	}
	return false;
}

static void check_close(const char *what, const float *got, const float *want, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		if (memcmp(&got[i], &want[i], sizeof(float)) == 0)
			continue;
		float d = fabsf(got[i] - want[i]);
		CHECK(d <= 1e-5f * fmaxf(1.0f, fabsf(want[i])),
		      "%s: element %zu is %.9g, want %.9g", what, i, (double)got[i],
		      (double)want[i]);
	}
}

/* ---- the reference ------------------------------------------------------------ */

static void ref_apply(const shape *sh, const inputs *in, float *arena /* slots x w */)
{
	/* Lookups of each slot, in lookup order. */
	uint32_t *count = calloc(sh->slots, sizeof(uint32_t));
	uint32_t *first = gt_malloc((size_t)sh->slots * sizeof(uint32_t));
	uint32_t *list = gt_malloc((size_t)sh->n * sizeof(uint32_t) + 1);
	float *acc = gt_malloc((size_t)sh->dim * sizeof(float));
	CHECK(count != NULL, "calloc");
	for (uint32_t i = 0; i < sh->n; i++)
		count[in->look[i]]++;
	uint32_t off = 0;
	for (uint32_t k = 0; k < sh->slots; k++) {
		first[k] = off;
		off += count[k];
		count[k] = 0;
	}
	for (uint32_t i = 0; i < sh->n; i++) {
		uint32_t k = in->look[i];
		list[first[k] + count[k]++] = i;
	}
	for (uint32_t k = 0; k < sh->slots; k++) {
		if (count[k] == 0)
			continue;
		for (uint32_t j = 0; j < sh->dim; j++) {
			acc[j] = 0.0f;
			for (uint32_t c = 0; c < count[k]; c++)
				acc[j] += in->grads[(size_t)list[first[k] + c] * sh->dim + j];
		}
		float *w = arena + (size_t)k * sh->w;
		float *h = w + sh->dim;
		for (uint32_t j = 0; j < sh->dim; j++) {
			if (sh->opt == EMBER_GPU_OPT_SGD) {
				w[j] -= sh->lr * acc[j];
			} else {
				h[j] += acc[j] * acc[j];
				w[j] -= sh->lr * acc[j] / (sqrtf(h[j]) + sh->eps);
			}
		}
	}
	free(acc);
	free(list);
	free(first);
	free(count);
}

static void reference(const shape *sh, const inputs *in, outputs *out)
{
	for (uint32_t i = 0; i < sh->n; i++) {
		const float *row = in->init + (size_t)in->look[i] * sh->w;
		memcpy(out->gathered + (size_t)i * sh->dim, row, sh->dim * sizeof(float));
		memcpy(out->gathered_s + (size_t)i * sh->w, row, sh->w * sizeof(float));
	}
	memcpy(out->applied, in->init, (size_t)sh->slots * sh->w * sizeof(float));
	ref_apply(sh, in, out->applied);
	memcpy(out->installed, out->applied, (size_t)sh->slots * sh->w * sizeof(float));
	for (uint32_t i = 0; i < in->m; i++) {
		float *row = out->installed + (size_t)in->inst[i] * sh->w;
		memcpy(row, in->inst_rows + (size_t)i * sh->dim, sh->dim * sizeof(float));
		for (uint32_t j = 0; j < sh->sf; j++)
			row[sh->dim + j] = sh->state_init;
	}
}

/* ---- one backend -------------------------------------------------------------- */

/* The whole arena, packed with state, through a poisoned gather of every slot. */
static void read_arena(ember_gpu *g, ember_gpu_arena *a, const shape *sh, const uint32_t *ident_d,
		       float *out)
{
	ember_gpu_stream *s = gt_compute(g);
	size_t bytes = (size_t)sh->slots * sh->w * sizeof(float);
	void *d = NULL;
	size_t where;
	CHECK_OK(ember_gpu_mem_alloc(g, bytes, &d));
	CHECK_OK(ember_gpu_memset(s, d, 0xff, bytes));
	CHECK_OK(ember_gpu_gather(s, a, ident_d, sh->slots, d, EMBER_GPU_WITH_STATE));
	gt_download(g, out, d, bytes);
	CHECK(!poisoned(out, (size_t)sh->slots * sh->w, &where),
	      "gather of the whole arena left element %zu unwritten", where);
	CHECK_OK(ember_gpu_mem_free(g, d));
}

/* The scratch scatter-apply takes is what ember_gpu.h documents: host 8n + 4 dim;
 * CUDA 16n (four arrays, each rounded up to 256 bytes) plus the sort's counters,
 * at most n / 4 + 64 KiB. */
static void check_scratch(ember_gpu *g, ember_gpu_arena *a, uint32_t n, uint32_t dim)
{
	size_t bytes = 0, base = 4 * (((size_t)n * 4 + 255) & ~(size_t)255);
	CHECK_OK(ember_gpu_scatter_scratch(a, n, &bytes));
	if (ember_gpu_backend(g) == EMBER_GPU_BACKEND_HOST)
		CHECK(bytes == (size_t)n * 8 + (size_t)dim * 4, "host scratch %zu for n %u", bytes, n);
	else
		CHECK(bytes >= base && bytes <= base + n / 4 + (64u << 10),
		      "CUDA scratch %zu for n %u: outside [%zu, %zu]", bytes, n, base,
		      base + n / 4 + (64u << 10));
	if (n >= 100000)
		printf("scatter-apply scratch for %u lookups: %zu bytes (%.2f per lookup)\n", n,
		       bytes, (double)bytes / n);
}

/* ember_gpu_scatter_apply_grouped over the lookups grouped by slot on the host (in
 * lookup order within a group) must give the arena ember_gpu_scatter_apply gave,
 * bit for bit: a second arena from the same rows, then the two compared. */
static void grouped_check(ember_gpu *g, const shape *sh, const inputs *in, const float *applied,
			  const uint32_t *ident_d, const float *grads_d)
{
	ember_gpu_stream *s = gt_compute(g);
	ember_gpu_arena_options ao = { .dim = sh->dim, .slots = sh->slots, .state = sh->state };
	ember_gpu_arena *a = NULL;
	CHECK_OK(ember_gpu_arena_create(g, &ao, &a));
	float *init_d = gt_upload(g, in->init, (size_t)sh->slots * sh->w * sizeof(float));
	CHECK_OK(ember_gpu_install(s, a, ident_d, sh->slots, init_d, EMBER_GPU_WITH_STATE, 0.0f));

	/* a counting sort of the lookups by slot: stable, so lookup order within a slot */
	uint32_t *count = gt_malloc(((size_t)sh->slots + 1) * sizeof(uint32_t));
	uint32_t *order = gt_malloc((size_t)sh->n * sizeof(uint32_t));
	uint32_t *gslots = gt_malloc((size_t)sh->n * sizeof(uint32_t));
	uint32_t *goff = gt_malloc(((size_t)sh->n + 1) * sizeof(uint32_t));
	memset(count, 0, ((size_t)sh->slots + 1) * sizeof(uint32_t));
	for (uint32_t i = 0; i < sh->n; i++)
		count[in->look[i] + 1]++;
	uint32_t ng = 0;
	for (uint32_t k = 0; k < sh->slots; k++) {
		if (count[k + 1]) {
			gslots[ng] = k;
			goff[ng++] = count[k];
		}
		count[k + 1] += count[k];
	}
	goff[ng] = sh->n;
	for (uint32_t i = 0; i < sh->n; i++)
		order[count[in->look[i]]++] = i;

	uint32_t *gslots_d = gt_upload(g, gslots, ((size_t)ng + 1) * sizeof(uint32_t));
	uint32_t *goff_d = gt_upload(g, goff, ((size_t)ng + 1) * sizeof(uint32_t));
	uint32_t *order_d = gt_upload(g, order, (size_t)sh->n * sizeof(uint32_t));
	ember_gpu_update u = { .optimizer = sh->opt, .lr = sh->lr, .eps = sh->eps };
	CHECK_OK(ember_gpu_scatter_apply_grouped(s, a, gslots_d, goff_d, ng, order_d, sh->n, sh->n,
						 grads_d, &u));
	float *got = gt_malloc((size_t)sh->slots * sh->w * sizeof(float));
	read_arena(g, a, sh, ident_d, got);
	CHECK_OK(ember_gpu_arena_check(a));
	CHECK(memcmp(got, applied, (size_t)sh->slots * sh->w * sizeof(float)) == 0,
	      "grouped scatter-apply (%u groups) differs from scatter-apply", ng);

	/* a bad group is skipped and flagged; the others are applied */
	if (ng >= 2) {
		gslots[0] = sh->slots; /* out of range */
		uint32_t *bad_d = gt_upload(g, gslots, (size_t)ng * sizeof(uint32_t));
		CHECK_OK(ember_gpu_scatter_apply_grouped(s, a, bad_d, goff_d, ng, order_d,
							 sh->n, sh->n, grads_d, &u));
		CHECK_OK(ember_gpu_stream_synchronize(s));
		CHECK_OK(ember_gpu_mem_free(g, bad_d));
		CHECK_OK(ember_gpu_stream_synchronize(s));
		CHECK_RC(ember_gpu_arena_check(a), EMBER_EINVAL);
		CHECK_OK(ember_gpu_scatter_apply_grouped(s, a, gslots_d, goff_d, ng, order_d,
							 sh->n, 0, grads_d, &u)); /* max_row 0 */
		CHECK_OK(ember_gpu_stream_synchronize(s));
		CHECK_RC(ember_gpu_arena_check(a), EMBER_EINVAL);
	}
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_OK(ember_gpu_mem_free(g, order_d));
	CHECK_OK(ember_gpu_mem_free(g, goff_d));
	CHECK_OK(ember_gpu_mem_free(g, gslots_d));
	CHECK_OK(ember_gpu_mem_free(g, init_d));
	CHECK_OK(ember_gpu_arena_destroy(a));
	free(got);
	free(goff);
	free(gslots);
	free(order);
	free(count);
}

static void run_backend(ember_gpu *g, const shape *sh, const inputs *in, outputs *out)
{
	ember_gpu_stream *s = gt_compute(g);
	ember_gpu_arena_options ao = { .dim = sh->dim, .slots = sh->slots, .state = sh->state };
	ember_gpu_arena *a = NULL;
	ember_gpu_staging *st = NULL;
	ember_gpu_staging_options so = { .buffer_bytes = (size_t)sh->slots * sh->w * sizeof(float),
					 .buffers = 2 };
	size_t where;

	CHECK_OK(ember_gpu_arena_create(g, &ao, &a));
	ember_gpu_arena_info info;
	CHECK_OK(ember_gpu_arena_query(a, &info));
	CHECK(info.dim == sh->dim && info.state_floats == sh->sf && info.slots == sh->slots &&
	      info.stride % 4 == 0 && info.stride >= sh->w, "arena info");

	uint32_t *all = gt_malloc((size_t)sh->slots * sizeof(uint32_t));
	for (uint32_t k = 0; k < sh->slots; k++)
		all[k] = sh->slots - 1 - k; /* reversed: install order differs from slot order */
	uint32_t *all_d = gt_upload(g, all, (size_t)sh->slots * sizeof(uint32_t));
	for (uint32_t k = 0; k < sh->slots; k++)
		all[k] = k;
	uint32_t *ident_d = gt_upload(g, all, (size_t)sh->slots * sizeof(uint32_t));
	for (uint32_t k = 0; k < sh->slots; k++)
		all[k] = sh->slots - 1 - k;

	/* Poison the arena, then install every slot WITH_STATE straight from a staging
	 * buffer (the fused path: the kernel reads pinned host memory). */
	CHECK_OK(ember_gpu_memset(s, info.base, 0xff, (size_t)sh->slots * info.stride * 4));
	CHECK_OK(ember_gpu_staging_create(g, &so, &st));
	uint32_t bi;
	void *bp;
	CHECK_OK(ember_gpu_staging_acquire(st, &bi, &bp));
	for (uint32_t k = 0; k < sh->slots; k++)
		memcpy((float *)bp + (size_t)k * sh->w, in->init + (size_t)all[k] * sh->w,
		       sh->w * sizeof(float));
	CHECK_OK(ember_gpu_install(s, a, all_d, sh->slots, bp, EMBER_GPU_WITH_STATE, 0.0f));
	CHECK_OK(ember_gpu_staging_release(st, bi, s));

	/* Gather the lookups, rows only and with state, into poisoned outputs. */
	uint32_t *look_d = gt_upload(g, in->look, (size_t)sh->n * sizeof(uint32_t));
	size_t gb = (size_t)sh->n * sh->dim * sizeof(float), gsb = (size_t)sh->n * sh->w * 4;
	void *gd = NULL, *gsd = NULL;
	CHECK_OK(ember_gpu_mem_alloc(g, gb, &gd));
	CHECK_OK(ember_gpu_mem_alloc(g, gsb, &gsd));
	CHECK_OK(ember_gpu_memset(s, gd, 0xff, gb));
	CHECK_OK(ember_gpu_memset(s, gsd, 0xff, gsb));
	CHECK_OK(ember_gpu_gather(s, a, look_d, sh->n, gd, 0));
	CHECK_OK(ember_gpu_gather(s, a, look_d, sh->n, gsd, EMBER_GPU_WITH_STATE));
	gt_download(g, out->gathered, gd, gb);
	gt_download(g, out->gathered_s, gsd, gsb);
	CHECK(!poisoned(out->gathered, (size_t)sh->n * sh->dim, &where),
	      "gather left element %zu unwritten", where);
	CHECK(!poisoned(out->gathered_s, (size_t)sh->n * sh->w, &where),
	      "gather with state left element %zu unwritten", where);
	CHECK_OK(ember_gpu_arena_check(a));

	/* Scatter-apply the gradients (the grads go through the upload path: staging
	 * -> H2D stream -> event -> compute stream waits). */
	ember_gpu_stream *h2d = NULL;
	ember_gpu_event *ready = NULL;
	CHECK_OK(ember_gpu_stream_get(g, EMBER_GPU_STREAM_H2D, 0, &h2d));
	CHECK_OK(ember_gpu_event_create(g, &ready));
	void *grads_d = NULL;
	CHECK_OK(ember_gpu_mem_alloc(g, gb, &grads_d));
	ember_gpu_staging *gst = NULL;
	ember_gpu_staging_options gso = { .buffer_bytes = gb, .buffers = 1 };
	CHECK_OK(ember_gpu_staging_create(g, &gso, &gst));
	CHECK_OK(ember_gpu_staging_acquire(gst, &bi, &bp));
	memcpy(bp, in->grads, gb);
	CHECK_OK(ember_gpu_staging_upload(gst, bi, h2d, grads_d, gb, ready));
	CHECK_OK(ember_gpu_stream_wait_event(s, ready));
	ember_gpu_update u = { .optimizer = sh->opt, .lr = sh->lr, .eps = sh->eps };
	check_scratch(g, a, sh->n, sh->dim);
	CHECK_OK(ember_gpu_scatter_apply(s, a, look_d, sh->n, grads_d, &u));
	read_arena(g, a, sh, ident_d, out->applied);
	grouped_check(g, sh, in, out->applied, ident_d, grads_d);

	/* Re-install m slots without state: the state goes to state_init. */
	if (in->m > 0) {
		uint32_t *inst_d = gt_upload(g, in->inst, (size_t)in->m * sizeof(uint32_t));
		float *rows_d = gt_upload(g, in->inst_rows, (size_t)in->m * sh->dim * sizeof(float));
		CHECK_OK(ember_gpu_install(s, a, inst_d, in->m, rows_d, 0, sh->state_init));
		read_arena(g, a, sh, ident_d, out->installed);
		CHECK_OK(ember_gpu_mem_free(g, rows_d));
		CHECK_OK(ember_gpu_mem_free(g, inst_d));
	} else {
		memcpy(out->installed, out->applied, (size_t)sh->slots * sh->w * sizeof(float));
	}
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_OK(ember_gpu_arena_check(a));

	CHECK_OK(ember_gpu_staging_destroy(gst));
	CHECK_OK(ember_gpu_staging_destroy(st));
	CHECK_OK(ember_gpu_event_destroy(ready));
	CHECK_OK(ember_gpu_mem_free(g, grads_d));
	CHECK_OK(ember_gpu_mem_free(g, gsd));
	CHECK_OK(ember_gpu_mem_free(g, gd));
	CHECK_OK(ember_gpu_mem_free(g, look_d));
	CHECK_OK(ember_gpu_mem_free(g, all_d));
	CHECK_OK(ember_gpu_mem_free(g, ident_d));
	CHECK_OK(ember_gpu_arena_destroy(a));
	free(all);
}

/* ---- bad slot indices ------------------------------------------------------------ */

static void bad_slots(ember_gpu *g)
{
	ember_gpu_stream *s = gt_compute(g);
	ember_gpu_arena_options ao = { .dim = 4, .slots = 8, .state = EMBER_GPU_STATE_ADAGRAD };
	ember_gpu_arena *a = NULL;
	CHECK_OK(ember_gpu_arena_create(g, &ao, &a));

	float rows[3 * 4];
	for (int i = 0; i < 12; i++)
		rows[i] = (float)(i + 1);
	uint32_t inst[3] = { 1, 8, 2 }; /* 8 is out of range */
	uint32_t *inst_d = gt_upload(g, inst, sizeof(inst));
	float *rows_d = gt_upload(g, rows, sizeof(rows));
	CHECK_OK(ember_gpu_install(s, a, inst_d, 3, rows_d, 0, 0.5f));
	CHECK_OK(ember_gpu_stream_synchronize(s));
	CHECK_RC(ember_gpu_arena_check(a), EMBER_EINVAL);
	CHECK_OK(ember_gpu_arena_check(a)); /* the flag was cleared */

	uint32_t look[4] = { 2, 0xffffffffu, 1, 2 };
	uint32_t *look_d = gt_upload(g, look, sizeof(look));
	float out[4 * 8];
	float *out_d = NULL;
	CHECK_OK(ember_gpu_mem_alloc(g, sizeof(out), (void **)&out_d));
	CHECK_OK(ember_gpu_memset(s, out_d, 0xff, sizeof(out)));
	CHECK_OK(ember_gpu_gather(s, a, look_d, 4, out_d, EMBER_GPU_WITH_STATE));
	gt_download(g, out, out_d, sizeof(out));
	CHECK_RC(ember_gpu_arena_check(a), EMBER_EINVAL);
	for (int j = 0; j < 4; j++) {
		CHECK(out[0 * 8 + j] == rows[2 * 4 + j] && out[3 * 8 + j] == rows[2 * 4 + j],
		      "slot 2 col %d", j);
		CHECK(out[2 * 8 + j] == rows[0 * 4 + j], "slot 1 col %d", j);
		CHECK(out[0 * 8 + 4 + j] == 0.5f, "state_init col %d", j);
	}
	for (int j = 0; j < 8; j++)
		CHECK(out[1 * 8 + j] == 0.0f, "a bad lookup gathers zeros (col %d)", j);

	/* Scatter with a bad lookup: the good ones are applied, the bad one skipped. */
	float grads[4 * 4];
	for (int i = 0; i < 16; i++)
		grads[i] = 1.0f;
	float *grads_d = gt_upload(g, grads, sizeof(grads));
	ember_gpu_update u = { .optimizer = EMBER_GPU_OPT_SGD, .lr = 0.25f };
	CHECK_OK(ember_gpu_scatter_apply(s, a, look_d, 4, grads_d, &u));
	CHECK_OK(ember_gpu_gather(s, a, look_d, 4, out_d, EMBER_GPU_WITH_STATE));
	gt_download(g, out, out_d, sizeof(out));
	CHECK_RC(ember_gpu_arena_check(a), EMBER_EINVAL);
	for (int j = 0; j < 4; j++) {
		CHECK(out[0 * 8 + j] == rows[2 * 4 + j] - 0.5f, "slot 2 got two gradients");
		CHECK(out[2 * 8 + j] == rows[0 * 4 + j] - 0.25f, "slot 1 got one gradient");
	}
	CHECK_OK(ember_gpu_mem_free(g, grads_d));
	CHECK_OK(ember_gpu_mem_free(g, out_d));
	CHECK_OK(ember_gpu_mem_free(g, look_d));
	CHECK_OK(ember_gpu_mem_free(g, rows_d));
	CHECK_OK(ember_gpu_mem_free(g, inst_d));
	CHECK_OK(ember_gpu_arena_destroy(a));
}

/* ---- driver ------------------------------------------------------------------- */

/* large: the last round, big enough that the CUDA kernels' grids are capped and
 * their grid-stride loops go round (more than 2^16 blocks of 8 warps). */
static void make_case(tu_rng *r, shape *sh, inputs *in, bool large)
{
	static const uint32_t dims[] = { 1, 3, 4, 7, 16, 64, 130, 256 };
	memset(sh, 0, sizeof(*sh));
	sh->dim = dims[tu_rng_below(r, sizeof(dims) / sizeof(dims[0]))];
	sh->slots = (uint32_t)tu_rng_range(r, 1, 300);
	if (large) {
		sh->dim = 4;
		sh->slots = 5000;
	}
	sh->state = tu_rng_chance(r, 1, 2) ? EMBER_GPU_STATE_ADAGRAD : EMBER_GPU_STATE_NONE;
	sh->sf = sh->state == EMBER_GPU_STATE_ADAGRAD ? sh->dim : 0;
	sh->w = sh->dim + sh->sf;
	sh->n = (uint32_t)tu_rng_range(r, 1, tu_scaled(3000));
	if (large)
		sh->n = (uint32_t)tu_scaled(600000);
	sh->opt = sh->state == EMBER_GPU_STATE_ADAGRAD && tu_rng_chance(r, 2, 3)
			  ? EMBER_GPU_OPT_ADAGRAD : EMBER_GPU_OPT_SGD;
	sh->lr = (float)tu_rng_range(r, 1, 100) / 256.0f;
	sh->eps = tu_rng_chance(r, 1, 2) ? 1e-10f : 0.01f;
	sh->state_init = (float)tu_rng_below(r, 4) / 8.0f;

	in->init = gt_malloc((size_t)sh->slots * sh->w * sizeof(float));
	for (size_t k = 0; k < sh->slots; k++)
		for (uint32_t j = 0; j < sh->w; j++)
			in->init[k * sh->w + j] = j < sh->dim ? gt_randf(r)
							      : fabsf(gt_randf(r)); /* h >= 0 */
	in->look = gt_malloc((size_t)sh->n * sizeof(uint32_t));
	uint32_t hot = sh->slots < 8 ? sh->slots : 8;
	for (uint32_t i = 0; i < sh->n; i++)
		in->look[i] = tu_rng_chance(r, 1, 2) ? (uint32_t)tu_rng_below(r, hot)
						     : (uint32_t)tu_rng_below(r, sh->slots);
	in->grads = gt_malloc((size_t)sh->n * sh->dim * sizeof(float));
	for (size_t i = 0; i < (size_t)sh->n * sh->dim; i++)
		in->grads[i] = gt_randf(r);
	/* m distinct slots: a random subset, shuffled. */
	uint32_t *perm = gt_malloc((size_t)sh->slots * sizeof(uint32_t));
	for (uint32_t k = 0; k < sh->slots; k++)
		perm[k] = k;
	for (uint32_t k = sh->slots - 1; k > 0; k--) {
		uint32_t j = (uint32_t)tu_rng_below(r, k + 1), t = perm[k];
		perm[k] = perm[j];
		perm[j] = t;
	}
	in->m = (uint32_t)tu_rng_below(r, sh->slots + 1);
	in->inst = perm;
	in->inst_rows = gt_malloc((size_t)in->m * sh->dim * sizeof(float) + 4);
	for (size_t i = 0; i < (size_t)in->m * sh->dim; i++)
		in->inst_rows[i] = gt_randf(r);
}

static void outputs_alloc(const shape *sh, outputs *o)
{
	o->gathered = gt_malloc((size_t)sh->n * sh->dim * sizeof(float));
	o->gathered_s = gt_malloc((size_t)sh->n * sh->w * sizeof(float));
	o->applied = gt_malloc((size_t)sh->slots * sh->w * sizeof(float));
	o->installed = gt_malloc((size_t)sh->slots * sh->w * sizeof(float));
}

static void outputs_free(outputs *o)
{
	free(o->gathered);
	free(o->gathered_s);
	free(o->applied);
	free(o->installed);
}

static void compare(const char *who, const shape *sh, const outputs *got, const outputs *want)
{
	char what[96];
	snprintf(what, sizeof(what), "%s gather", who);
	check_close(what, got->gathered, want->gathered, (size_t)sh->n * sh->dim);
	snprintf(what, sizeof(what), "%s gather with state", who);
	check_close(what, got->gathered_s, want->gathered_s, (size_t)sh->n * sh->w);
	snprintf(what, sizeof(what), "%s scatter-apply (%s)", who,
		 sh->opt == EMBER_GPU_OPT_SGD ? "sgd" : "adagrad");
	check_close(what, got->applied, want->applied, (size_t)sh->slots * sh->w);
	snprintf(what, sizeof(what), "%s install", who);
	check_close(what, got->installed, want->installed, (size_t)sh->slots * sh->w);
}

int main(int argc, char **argv)
{
	tu_init("test_gpu_kernels", argc, argv);
	int backend = gt_backend(argc, argv, "test_gpu_kernels");
	ember_gpu *g = gt_open(backend);
	ember_gpu *host = backend == EMBER_GPU_BACKEND_CUDA ? gt_open(EMBER_GPU_BACKEND_HOST) : NULL;
	tu_rng *r = tu_rng_global();

	bad_slots(g);
	uint64_t rounds = tu_scaled(12) + 1;
	for (uint64_t round = 0; round < rounds; round++) {
		shape sh;
		inputs in;
		outputs want, got, ref_host;
		make_case(r, &sh, &in, round == rounds - 1);
		outputs_alloc(&sh, &want);
		outputs_alloc(&sh, &got);
		reference(&sh, &in, &want);
		run_backend(g, &sh, &in, &got);
		compare(backend == EMBER_GPU_BACKEND_CUDA ? "cuda vs reference" : "host vs reference",
			&sh, &got, &want);
		if (host) {
			outputs_alloc(&sh, &ref_host);
			run_backend(host, &sh, &in, &ref_host);
			compare("cuda vs host", &sh, &got, &ref_host);
			outputs_free(&ref_host);
		}
		printf("round %llu: dim=%u slots=%u n=%u m=%u %s ok\n", (unsigned long long)round,
		       sh.dim, sh.slots, sh.n, in.m,
		       sh.opt == EMBER_GPU_OPT_SGD ? "sgd" : "adagrad");
		outputs_free(&want);
		outputs_free(&got);
		free(in.init);
		free(in.look);
		free(in.grads);
		free(in.inst);
		free(in.inst_rows);
	}
	CHECK_OK(ember_gpu_close(host));
	CHECK_OK(ember_gpu_close(g));
	printf("test_gpu_kernels: ok\n");
	return 0;
}
