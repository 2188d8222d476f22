/*
 * apply.c - ember_cache_apply: the fused optimizer update of an acquired batch's
 * rows in host slots (SGD, Adagrad, row-wise Adagrad, with weight decay).
 *
 * The arithmetic is torch.optim's, operation for operation, so that a Python
 * trainer can check it against torch to fp32 rounding:
 *   weight decay   g = g + wd * w                       (grad.add(param, alpha=wd))
 *   SGD            w = w + (-lr) * g                     (param.add_(g, alpha=-lr))
 *   Adagrad        s = s + g * g; std = sqrt(s) + eps;   (state_sum.addcmul_(g, g);
 *                  w = w + (-lr) * (g / std)              param.addcdiv_(g, std, -lr))
 *   row-wise       s = s + sum(g * g) / dim, the sum in element order; then as
 *                  Adagrad with the one std for the whole row
 * This file is compiled with -ffp-contract=off (src/cache/meson.build): a fused
 * multiply-add would round once where torch rounds twice.
 *
 * Duplicates: the part's lookups naming one row share its slot, so the gradients
 * are summed per slot, in lookup order (the first copied, the next ones added),
 * into scratch kept by the cache for the trainer (ap_map: slot -> index, reset
 * after each call; ap_slot, ap_acc grown as needed). Each distinct row is then
 * updated once.
 */
#include <math.h>
#include <string.h>

#include "cache/cache_int.h"
#include "core/alloc.h"

/* Room for nd distinct rows of dim floats in the scratch (the trainer's). */
static int scratch_reserve(struct ember_cache *c, size_t nd, uint32_t dim)
{
	if (!c->ap_map) {
		c->ap_map = em_alloc(c->capacity * sizeof(uint32_t));
		if (!c->ap_map)
			return EMBER_ENOMEM;
		memset(c->ap_map, 0xff, c->capacity * sizeof(uint32_t)); /* ORACLE_NONE */
	}
	if (nd <= c->ap_cap && dim <= c->ap_dim)
		return 0;
	size_t cap = nd > c->ap_cap ? nd + nd / 8 + 16 : c->ap_cap;
	uint32_t d = dim > c->ap_dim ? dim : c->ap_dim;
	uint32_t *sl = em_alloc(cap * sizeof(uint32_t));
	float *acc = em_alloc(cap * d * sizeof(float));
	if (!sl || !acc) {
		em_free(sl, 0);
		em_free(acc, 0);
		return EMBER_ENOMEM;
	}
	em_free(c->ap_slot, 0);
	em_free(c->ap_acc, 0);
	c->ap_slot = sl;
	c->ap_acc = acc;
	c->ap_cap = cap;
	c->ap_dim = d;
	return 0;
}

static void update_row(const struct ctable *t, float *w, const float *g0,
		       const ember_cache_update *u, float eps, float *g)
{
	uint32_t dim = t->dim;
	for (uint32_t j = 0; j < dim; j++)
		g[j] = u->weight_decay != 0 ? g0[j] + u->weight_decay * w[j] : g0[j];
	float nlr = -u->lr;
	if (t->state == 0) {
		for (uint32_t j = 0; j < dim; j++)
			w[j] = w[j] + nlr * g[j];
		return;
	}
	float *s = w + dim;
	if (t->state == dim) {
		for (uint32_t j = 0; j < dim; j++) {
			s[j] = s[j] + g[j] * g[j];
			float std = sqrtf(s[j]) + eps;
			w[j] = w[j] + nlr * (g[j] / std);
		}
		return;
	}
	float sum = 0.0f;
	for (uint32_t j = 0; j < dim; j++)
		sum = sum + g[j] * g[j];
	s[0] = s[0] + sum / (float)dim;
	float std = sqrtf(s[0]) + eps;
	for (uint32_t j = 0; j < dim; j++)
		w[j] = w[j] + nlr * (g[j] / std);
}

static int update_ok(const ember_cache_update *u)
{
	return isfinite(u->lr) && isfinite(u->eps) && u->eps >= 0 && isfinite(u->weight_decay) &&
	       u->weight_decay >= 0 && u->reserved_ == 0;
}

int ember_cache_apply(ember_cache *c, ember_cache_view *v, uint32_t part, const float *grads,
		      size_t grad_stride, const ember_cache_update *upd)
{
	if (!c || !v || !upd || !update_ok(upd) || c->ss.where != EMBER_CACHE_SLOTS_HOST)
		return EMBER_EINVAL;
	struct cbatch *b = cache_acquired_batch(c, v);
	if (!b)
		return EMBER_ESTATE;
	if (part >= b->nparts)
		return EMBER_EINVAL;
	const ember_cache_part *pt = &b->parts[part];
	const struct ctable *t = &c->tables[pt->table];
	size_t gs = grad_stride ? grad_stride : t->dim;
	if (gs < t->dim || (pt->n && !grads))
		return EMBER_EINVAL;
	if (pt->n == 0)
		return 0;
	/* distinct rows of the part: at most n, and at most the capacity */
	size_t nd_max = pt->n < c->capacity ? pt->n : c->capacity;
	int rc = scratch_reserve(c, nd_max + 1, t->dim);
	if (rc < 0)
		return rc;
	const uint32_t *sl = b->pslots[part];
	size_t nd = 0, dim = t->dim;
	for (size_t i = 0; i < pt->n; i++) {
		uint32_t s = sl[i], k = c->ap_map[s];
		const float *g = grads + i * gs;
		if (k == ORACLE_NONE) {
			k = (uint32_t)nd++;
			c->ap_map[s] = k;
			c->ap_slot[k] = s;
			memcpy(c->ap_acc + k * dim, g, dim * sizeof(float));
		} else {
			float *a = c->ap_acc + (size_t)k * dim;
			for (size_t j = 0; j < dim; j++)
				a[j] = a[j] + g[j];
		}
	}
	float eps = upd->eps != 0 ? upd->eps : 1e-10f;
	float *tmp = c->ap_acc + nd * dim; /* the spare row reserved above */
	for (size_t k = 0; k < nd; k++) {
		uint32_t s = c->ap_slot[k];
		update_row(t, c->ss.mem + (size_t)s * c->ss.stride, c->ap_acc + k * dim, upd, eps,
			   tmp);
		c->ap_map[s] = ORACLE_NONE;
	}
	b->applied = 1; /* release marks the rows dirty even with READONLY */
	return 0;
}
