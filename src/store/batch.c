/*
 * batch.c - ember_get_batch: many gets at once.
 *
 * Keys run in groups of BATCH_GROUP: hash every key and prefetch its bucket, then
 * find every entry and prefetch its record, then resolve each key in memory, so the
 * cache misses of a group overlap. Keys that need the disk (or the cold tier) are
 * collected and run together by lookups_run, all their reads in flight at once.
 */
#include "store/store_int.h"

#include <errno.h>
#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"

#define BATCH_GROUP 32

struct batch_ctx {
	void *const *bufs;
	const size_t *caps;
	size_t *vlens;
	int *status;
};

static void batch_done(void *ctx, struct lookup *l, int status, struct record *rec,
		       int in_memory)
{
	struct batch_ctx *b = ctx;
	size_t k = l->user;
	if (status == 0)
		status = lookup_copy_value(l, rec, in_memory, b->bufs[k], b->caps[k], &b->vlens[k]);
	b->status[k] = status;
}

static int batch_reserve(ember_session *s, size_t n)
{
	if (s->bcap >= n)
		return 0;
	size_t cap = s->bcap ? s->bcap : 64;
	while (cap < n)
		cap *= 2;
	uint64_t *h = em_alloc(cap * sizeof(*h));
	uint64_t *a = em_alloc(cap * sizeof(*a));
	struct lookup *lk = em_alloc(cap * sizeof(*lk));
	if (!h || !a || !lk) {
		em_free(h, 0);
		em_free(a, 0);
		em_free(lk, 0);
		return EMBER_ENOMEM;
	}
	em_free(s->bhash, 0);
	em_free(s->baddr, 0);
	em_free(s->blk, 0);
	s->bhash = h;
	s->baddr = a;
	s->blk = lk;
	s->bcap = cap;
	return 0;
}

int ember_get_batch(ember_session *s, size_t n, const void *const keys[], const size_t klens[],
		    void *const bufs[], const size_t caps[], size_t vlens[], int status[])
{
	int rc = sync_check(s);
	if (rc < 0)
		return rc;
	if (n == 0)
		return 0;
	if (!keys || !klens || !bufs || !caps || !vlens || !status)
		return EMBER_EINVAL;
	for (size_t i = 0; i < n; i++) {
		rc = key_check(keys[i], klens[i]);
		if (rc < 0)
			return rc;
		if (!bufs[i] && caps[i])
			return EMBER_EINVAL;
	}
	rc = batch_reserve(s, n);
	if (rc < 0)
		return rc;
	struct ember_db *db = s->db;
	struct hlog *hot = db->hot;
	size_t ndisk = 0;
	epoch_protect(db->ep, s->slot);
	for (size_t g = 0; g < n; g += BATCH_GROUP) {
		size_t end = g + BATCH_GROUP < n ? g + BATCH_GROUP : n;
		for (size_t i = g; i < end; i++) {
			s->bhash[i] = em_hash(keys[i], klens[i]);
			hi_prefetch(&db->index, s->bhash[i]);
		}
		uint64_t head = hlog_load(&hot->head);
		uint64_t t0 = hlog_load(&hot->tail);
		for (size_t i = g; i < end; i++) {
			uint64_t e = 0;
			s->baddr[i] = hi_find(&db->index, s->bhash[i], &e) ? e : 0; /* the whole entry */
			uint64_t a = hi_entry_addr(e);
			if (e & HI_READCACHE)
				__builtin_prefetch(rc_rec(db, e));
			else if (a >= head && a >= EM_LOG_START)
				__builtin_prefetch(hlog_rec(hot, a));
		}
		for (size_t i = g; i < end; i++) {
			uint64_t e = s->baddr[i], at = 0;
			int tier;
			struct record *r = front_find(db, e, keys[i], (uint32_t)klens[i], 1, &at, &tier);
			if (r) {
				status[i] = rec_read_value(r, bufs[i], caps[i], &vlens[i]);
				stat_add(&s->st.reads[tier], 1);
				continue;
			}
			/* on disk, or in the cold tier: resolved together below */
			s->blk[ndisk] = (struct lookup){.key = keys[i],
							.klen = (uint32_t)klens[i],
							.hint = lookup_want_hint(s, klens[i], caps[i]),
							.full = lookup_full(klens[i], caps[i]),
							.dst = bufs[i],
							.dcap = caps[i],
							.phase = LK_HOT,
							.flags = LK_FILL_RC | lookup_cap_flag(caps[i]),
							.hash = s->bhash[i],
							.addr = at,
							.hot_entry = e,
							.hot_tail = t0,
							.user = i};
			ndisk++;
		}
	}
	epoch_unprotect(db->ep, s->slot);
	stat_add(&s->st.user_reads, n);
	if (ndisk) {
		struct batch_ctx bc = {bufs, caps, vlens, status};
		rc = lookups_run(s, s->blk, ndisk, batch_done, &bc);
		if (rc < 0)
			return rc;
	}
	return 0;
}
