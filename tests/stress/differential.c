/*
 * differential.c - random operations against Ember and a reference map, compared.
 *
 * One thread runs millions of random put / get / delete / rmw operations (plus
 * occasional ember_get_batch calls and gets with too-small buffers) on a store
 * whose in-memory log is small (8 MiB, 64 KiB pages, 4096 index buckets), over a
 * key space several times larger than the log holds: most of the data is on disk.
 * Most operations go to a hot set that stays in the mutable region (in-place
 * updates); the rest are spread over the whole key space and mostly read from
 * disk (a disk read costs tens of microseconds, so this mix keeps the run short).
 * The session is closed and reopened every SESSION_OPS operations. Every result is
 * compared with a reference hash map (tests/test_util.h). At the end every key of
 * the reference is read back, and every absent id of the key space (plus a sample
 * of never-written ids) must be EMBER_ENOTFOUND.
 *
 *   differential            keys 1..64 bytes (sometimes up to 4 KiB), values
 *                           0..200 bytes (sometimes up to 64 KiB, rarely ~1 MiB)
 *   differential large      values mostly 1..64 KiB (rarely up to ~3.5 MiB): the
 *                           live data is tens of times the log memory
 *   --soak                  ten times the operations (suite 'soak')
 *
 * The key of id i is a pure function of i: its length is drawn from a hash of i and
 * its bytes from a hash of i / 2, so ids 2k and 2k+1 make keys where one is a prefix
 * of the other (or, at equal length, the same key: the reference map is keyed by
 * bytes, so that is fine). Tiny keys (1..4 bytes) collide on purpose.
 *
 * The rmw callback checks what the store hands it (old value equal to the
 * reference, out_cap honoured after an EMBER_ERANGE) and computes the new value by
 * the same function the test then applies to the reference.
 */
#include "ember.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

/* A code of our own for "the callback refused": neither an Ember code nor errno. */
#define RMW_REFUSED (-31000)

#define GUARD 32 /* sentinel bytes checked after the caller's capacity */
#define SESSION_OPS 20000 /* operations per session before it is reopened */
#define GUARD_BYTE 0xA5

typedef struct params {
	const char *mode;
	uint64_t ops;
	uint64_t keyspace; /* ids 0 .. keyspace-1 are used; up to 2*keyspace for absent probes */
	uint64_t hot_keys; /* the hot set: ids 0 .. hot_keys-1 */
	unsigned hot_pct;  /* percentage of operations drawn from the hot set */
	size_t max_val;    /* buffer size: above any value the store accepts here */
	size_t rmw_cap;    /* rmw growth stops below this */
	bool large;
} params;

typedef struct stats {
	uint64_t puts, gets, hits, misses, small_bufs, deletes;
	uint64_t rmws, rmw_calls, rmw_eranges, rmw_inplace, rmw_refused;
	uint64_t batches, batch_keys;
	uint64_t bytes_written;
} stats;

static params P;
static stats S;

/* ---- keys and values ------------------------------------------------------------ */

#define KEY_MAX 4096

static size_t make_key(uint64_t id, uint8_t *out)
{
	uint64_t h = tu_mix64(id ^ 0x6b657973ull);
	uint64_t r = h % 1000, x = h >> 10;
	size_t len;
	if (r < 20)
		len = 1 + x % 4;
	else if (r < 985)
		len = 5 + x % 60;
	else
		len = 65 + x % (KEY_MAX - 64);
	uint64_t s = (id >> 1) ^ 0x1234abcdull;
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = tu_splitmix64(&s);
		memcpy(out + i, &w, len - i < 8 ? len - i : 8);
	}
	return len;
}

static uint64_t pick_id(tu_rng *r)
{
	if (tu_rng_below(r, 100) < P.hot_pct)
		return tu_rng_below(r, P.hot_keys);
	return tu_rng_below(r, P.keyspace);
}

static size_t pick_vlen(tu_rng *r)
{
	uint64_t x = tu_rng_below(r, 100000);
	if (!P.large) {
		if (x < 5000)
			return 0;
		if (x < 99400)
			return tu_rng_range(r, 1, 200);
		if (x < 99997)
			return tu_rng_range(r, 201, 64 * 1024);
		return tu_rng_range(r, 900 * 1024, 1100 * 1024);
	}
	if (x < 2000)
		return tu_rng_range(r, 0, 200);
	if (x < 97000)
		return tu_rng_range(r, 1024, 64 * 1024);
	if (x < 99980)
		return tu_rng_range(r, 64 * 1024, 1024 * 1024);
	return tu_rng_range(r, 3 * 1024 * 1024, 3 * 1024 * 1024 + 512 * 1024);
}

/* ---- rmw ---------------------------------------------------------------------------- */

enum rmw_mode { RMW_APPEND, RMW_INCR, RMW_GROW, RMW_SHRINK, RMW_SET, RMW_REFUSE };

typedef struct rmw_arg {
	enum rmw_mode mode;
	size_t amount; /* GROW: bytes added; SET: the new length */
	uint8_t byte;  /* the fill pattern's seed */
	/* What the store should hand the callback (from the reference map). */
	bool exp_present;
	const uint8_t *exp_old;
	size_t exp_len;
	/* Bookkeeping across the calls of one ember_rmw(). */
	size_t last_need;
	unsigned calls;
} rmw_arg;

static size_t rmw_new_len(const rmw_arg *a, size_t old_len)
{
	switch (a->mode) {
	case RMW_APPEND:
		return old_len + 1;
	case RMW_INCR:
		return old_len >= 8 ? old_len : 8;
	case RMW_GROW:
		return old_len + a->amount;
	case RMW_SHRINK:
		return old_len / 2;
	case RMW_SET:
		return a->amount;
	case RMW_REFUSE:
		break;
	}
	return 0;
}

/* The new value from old: shared by the callback and the reference update. */
static void rmw_compute(const rmw_arg *a, const uint8_t *old, size_t old_len, uint8_t *out,
			size_t new_len)
{
	switch (a->mode) {
	case RMW_APPEND:
	case RMW_GROW:
		if (old_len > 0)
			memmove(out, old, old_len); /* out may be old itself */
		for (size_t i = old_len; i < new_len; i++)
			out[i] = (uint8_t)(a->byte + i * 7);
		break;
	case RMW_INCR: {
		uint64_t c = 0;
		if (old_len >= 8) {
			memmove(out, old, old_len);
			memcpy(&c, out, 8);
		} else {
			memset(out, 0, 8);
		}
		c++;
		memcpy(out, &c, 8);
		break;
	}
	case RMW_SHRINK:
		if (new_len > 0)
			memmove(out, old, new_len);
		break;
	case RMW_SET:
		for (size_t i = 0; i < new_len; i++)
			out[i] = (uint8_t)(a->byte ^ (i * 13));
		break;
	case RMW_REFUSE:
		break;
	}
}

static int rmw_cb(void *argp, const void *oldp, size_t old_len, void *outp, size_t out_cap,
		  size_t *out_len)
{
	rmw_arg *a = argp;
	const uint8_t *old = oldp;
	a->calls++;
	S.rmw_calls++;
	CHECK(a->calls < 100, "rmw callback called %u times for one ember_rmw", a->calls);
	CHECK(out_len != NULL, "rmw callback: out_len NULL");
	if (!a->exp_present) {
		CHECK(old == NULL && old_len == 0,
		      "rmw callback: key absent but old=%p old_len=%zu", oldp, old_len);
	} else {
		CHECK(old_len == a->exp_len, "rmw callback: old_len %zu, reference %zu", old_len,
		      a->exp_len);
		/* NULL means "absent" (ember.h), so a present empty value is non-NULL. */
		CHECK(old != NULL, "rmw callback: key present (old_len %zu) but old == NULL", old_len);
		CHECK(old_len == 0 || memcmp(old, a->exp_old, old_len) == 0,
		      "rmw callback: old value differs from reference (len %zu)", old_len);
	}
	if (outp == oldp && old != NULL) {
		S.rmw_inplace++;
		CHECK(out_cap >= old_len, "rmw in place: out_cap %zu < old_len %zu", out_cap,
		      old_len);
	}
	/* After an ERANGE the store promised room for what we asked. */
	CHECK(a->last_need == 0 || out_cap >= a->last_need,
	      "rmw re-call: out_cap %zu < needed %zu", out_cap, a->last_need);
	if (a->mode == RMW_REFUSE)
		return RMW_REFUSED;
	size_t need = rmw_new_len(a, old_len);
	if (out_cap < need) {
		S.rmw_eranges++;
		a->last_need = need;
		*out_len = need;
		return EMBER_ERANGE;
	}
	CHECK(outp != NULL || need == 0, "rmw callback: out NULL with out_cap %zu", out_cap);
	rmw_compute(a, old, old_len, outp, need);
	*out_len = need;
	return 0;
}

/* ---- the operations ----------------------------------------------------------------- */

typedef struct ctx {
	ember_session *s;
	tu_map ref;
	tu_rng *rng;
	uint8_t *vbuf;  /* values to write */
	uint8_t *gbuf;  /* get buffer: max_val + GUARD */
	uint8_t *tmp;   /* reference rmw results */
	uint64_t op;
} ctx;

static void do_put(ctx *c, const uint8_t *key, size_t klen)
{
	size_t vlen = pick_vlen(c->rng);
	tu_rng_fill(c->rng, c->vbuf, vlen);
	/* Sometimes pass NULL for an empty value (allowed). */
	const void *v = (vlen == 0 && tu_rng_chance(c->rng, 1, 2)) ? NULL : c->vbuf;
	CHECK_OK(ember_put(c->s, key, klen, v, vlen));
	tu_map_put(&c->ref, key, klen, c->vbuf, vlen);
	S.puts++;
	S.bytes_written += klen + vlen;
}

static void check_guard(const uint8_t *p, const char *what, uint64_t op)
{
	for (int i = 0; i < GUARD; i++)
		CHECK(p[i] == GUARD_BYTE, "op %llu: %s wrote past the caller's capacity (+%d)",
		      (unsigned long long)op, what, i);
}

static void do_get(ctx *c, const uint8_t *key, size_t klen)
{
	const tu_map_entry *e = tu_map_get(&c->ref, key, klen);
	size_t vlen = (size_t)-1;
	S.gets++;
	if (e != NULL && e->vlen > 0 && tu_rng_chance(c->rng, 3, 100)) {
		/* Too small a buffer: ERANGE and the needed size; nothing past cap. */
		size_t cap = tu_rng_below(c->rng, e->vlen);
		if (tu_rng_chance(c->rng, 1, 4))
			cap = 0;
		memset(c->gbuf + cap, GUARD_BYTE, GUARD);
		int rc = ember_get(c->s, key, klen, cap ? c->gbuf : NULL, cap, &vlen);
		CHECK(rc == EMBER_ERANGE, "op %llu: get cap %zu < len %u: rc %d (%s)",
		      (unsigned long long)c->op, cap, e->vlen, rc, ember_strerror(rc));
		CHECK(vlen == e->vlen, "op %llu: ERANGE vlen %zu, want %u",
		      (unsigned long long)c->op, vlen, e->vlen);
		check_guard(c->gbuf + cap, "get(ERANGE)", c->op);
		S.small_bufs++;
		return;
	}
	/* Usually a roomy buffer; sometimes exactly the value's size. */
	size_t cap = P.max_val;
	if (e != NULL && tu_rng_chance(c->rng, 1, 10))
		cap = e->vlen;
	memset(c->gbuf + cap, GUARD_BYTE, GUARD);
	int rc = ember_get(c->s, key, klen, c->gbuf, cap, &vlen);
	if (e == NULL) {
		CHECK(rc == EMBER_ENOTFOUND, "op %llu: get of an absent key (klen %zu): rc %d (%s)",
		      (unsigned long long)c->op, klen, rc, ember_strerror(rc));
		S.misses++;
		return;
	}
	CHECK(rc == 0, "op %llu: get (klen %zu, vlen %u): rc %d (%s)", (unsigned long long)c->op,
	      klen, e->vlen, rc, ember_strerror(rc));
	CHECK(vlen == e->vlen, "op %llu: get vlen %zu, want %u", (unsigned long long)c->op, vlen,
	      e->vlen);
	CHECK(memcmp(c->gbuf, tu_map_val(e), vlen) == 0,
	      "op %llu: get value differs from reference (klen %zu, vlen %zu)",
	      (unsigned long long)c->op, klen, vlen);
	check_guard(c->gbuf + cap, "get", c->op);
	S.hits++;
}

static void do_delete(ctx *c, const uint8_t *key, size_t klen)
{
	CHECK_OK(ember_delete(c->s, key, klen));
	tu_map_del(&c->ref, key, klen);
	S.deletes++;
}

static void do_rmw(ctx *c, const uint8_t *key, size_t klen)
{
	const tu_map_entry *e = tu_map_get(&c->ref, key, klen);
	size_t old_len = e ? e->vlen : 0;
	rmw_arg a = { 0 };
	a.byte = (uint8_t)tu_rng_next(c->rng);
	a.exp_present = e != NULL;
	a.exp_old = e ? tu_map_val(e) : NULL;
	a.exp_len = old_len;
	uint64_t x = tu_rng_below(c->rng, 100);
	if (x < 35) {
		a.mode = RMW_APPEND;
	} else if (x < 65) {
		a.mode = RMW_INCR;
	} else if (x < 83) {
		a.mode = RMW_GROW;
		a.amount = tu_rng_chance(c->rng, 1, 20) ? tu_rng_range(c->rng, 1, 64 * 1024)
							 : tu_rng_range(c->rng, 1, 300);
	} else if (x < 90) {
		a.mode = RMW_SHRINK;
	} else if (x < 97) {
		a.mode = RMW_SET;
		a.amount = pick_vlen(c->rng);
	} else {
		a.mode = RMW_REFUSE;
	}
	if (a.mode != RMW_REFUSE && rmw_new_len(&a, old_len) > P.rmw_cap)
		a.mode = RMW_SHRINK; /* keep values bounded */

	int rc = ember_rmw(c->s, key, klen, rmw_cb, &a);
	S.rmws++;
	CHECK(a.calls >= 1, "op %llu: ember_rmw never called the callback: rc %d (%s), mode %d, "
	      "key %s (klen %zu, vlen %zu)", (unsigned long long)c->op, rc, ember_strerror(rc),
	      a.mode, e ? "present" : "absent", klen, old_len);
	if (a.mode == RMW_REFUSE) {
		CHECK(rc == RMW_REFUSED, "op %llu: rmw refused by callback: rc %d (%s), want %d",
		      (unsigned long long)c->op, rc, ember_strerror(rc), RMW_REFUSED);
		S.rmw_refused++;
		return; /* the reference is unchanged; later gets check the store is too */
	}
	CHECK(rc == 0, "op %llu: rmw mode %d (old_len %zu): rc %d (%s)",
	      (unsigned long long)c->op, a.mode, old_len, rc, ember_strerror(rc));
	size_t nl = rmw_new_len(&a, old_len);
	rmw_compute(&a, a.exp_old, old_len, c->tmp, nl);
	tu_map_put(&c->ref, key, klen, c->tmp, nl);
	S.bytes_written += klen + nl;
}

/* One ember_get_batch over 1..256 keys: duplicates, absent keys, small buffers. */
static void do_batch(ctx *c)
{
	enum { NMAX = 256 };
	static uint8_t keys[NMAX][KEY_MAX];
	static const void *kp[NMAX];
	static size_t klens[NMAX], caps[NMAX], vlens[NMAX], offs[NMAX];
	static void *bufs[NMAX];
	static int status[NMAX];
	static const tu_map_entry *exp[NMAX];

	size_t n = tu_rng_range(c->rng, 1, NMAX);
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && tu_rng_chance(c->rng, 1, 8)) {
			size_t j = tu_rng_below(c->rng, i);
			memcpy(keys[i], keys[j], klens[j]);
			klens[i] = klens[j];
		} else if (tu_rng_chance(c->rng, 1, 8)) {
			/* Never written (unless a tiny key collides: the reference decides). */
			klens[i] = make_key(P.keyspace + tu_rng_below(c->rng, P.keyspace), keys[i]);
		} else {
			klens[i] = make_key(pick_id(c->rng), keys[i]);
		}
		kp[i] = keys[i];
		exp[i] = tu_map_get(&c->ref, keys[i], klens[i]);
		size_t len = exp[i] ? exp[i]->vlen : 0;
		uint64_t x = tu_rng_below(c->rng, 100);
		if (exp[i] == NULL)
			caps[i] = tu_rng_below(c->rng, 65);
		else if (x < 85 || len == 0)
			caps[i] = len + tu_rng_below(c->rng, 65);
		else if (x < 95)
			caps[i] = tu_rng_below(c->rng, len);
		else
			caps[i] = 0;
		offs[i] = total;
		total += caps[i] + GUARD;
		vlens[i] = (size_t)-7;
		status[i] = 12345;
	}
	uint8_t *arena = malloc(total);
	CHECK(arena != NULL, "out of memory");
	memset(arena, GUARD_BYTE, total);
	for (size_t i = 0; i < n; i++)
		bufs[i] = caps[i] ? arena + offs[i] : NULL;

	int rc = ember_get_batch(c->s, n, kp, klens, bufs, caps, vlens, status);
	CHECK(rc == 0, "op %llu: get_batch n=%zu: rc %d (%s)", (unsigned long long)c->op, n, rc,
	      ember_strerror(rc));
	for (size_t i = 0; i < n; i++) {
		const tu_map_entry *e = exp[i];
		if (e == NULL) {
			CHECK(status[i] == EMBER_ENOTFOUND,
			      "op %llu: batch[%zu/%zu] absent key: status %d (%s)",
			      (unsigned long long)c->op, i, n, status[i], ember_strerror(status[i]));
		} else if (caps[i] < e->vlen) {
			CHECK(status[i] == EMBER_ERANGE,
			      "op %llu: batch[%zu/%zu] cap %zu < len %u: status %d (%s)",
			      (unsigned long long)c->op, i, n, caps[i], e->vlen, status[i],
			      ember_strerror(status[i]));
			CHECK(vlens[i] == e->vlen, "op %llu: batch[%zu] ERANGE vlen %zu, want %u",
			      (unsigned long long)c->op, i, vlens[i], e->vlen);
		} else {
			CHECK(status[i] == 0, "op %llu: batch[%zu/%zu] (klen %zu vlen %u): status %d (%s)",
			      (unsigned long long)c->op, i, n, klens[i], e->vlen, status[i],
			      ember_strerror(status[i]));
			CHECK(vlens[i] == e->vlen, "op %llu: batch[%zu] vlen %zu, want %u",
			      (unsigned long long)c->op, i, vlens[i], e->vlen);
			CHECK(e->vlen == 0 || memcmp(bufs[i], tu_map_val(e), e->vlen) == 0,
			      "op %llu: batch[%zu/%zu] value differs (klen %zu vlen %u)",
			      (unsigned long long)c->op, i, n, klens[i], e->vlen);
		}
		check_guard(arena + offs[i] + caps[i], "get_batch", c->op);
	}
	free(arena);
	S.batches++;
	S.batch_keys += n;
}

/* ---- final verification -------------------------------------------------------------- */

/* Check up to FINAL_BATCH reference entries with one ember_get_batch. */
#define FINAL_BATCH 128
static void verify_batch(ctx *c, const tu_map_entry *const *es, size_t n)
{
	const void *keys[FINAL_BATCH] = { 0 };
	size_t klens[FINAL_BATCH] = { 0 }, caps[FINAL_BATCH] = { 0 }, vlens[FINAL_BATCH];
	void *bufs[FINAL_BATCH] = { 0 };
	int st[FINAL_BATCH];
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += es[i]->vlen;
	uint8_t *arena = malloc(total + 1);
	CHECK(arena != NULL, "out of memory");
	total = 0;
	for (size_t i = 0; i < n; i++) {
		keys[i] = tu_map_key(es[i]);
		klens[i] = es[i]->klen;
		caps[i] = es[i]->vlen;
		bufs[i] = arena + total;
		total += es[i]->vlen;
	}
	CHECK_OK(ember_get_batch(c->s, n, keys, klens, bufs, caps, vlens, st));
	for (size_t i = 0; i < n; i++) {
		CHECK(st[i] == 0, "final batch: (klen %zu vlen %zu): status %d (%s)", klens[i], caps[i],
		      st[i], ember_strerror(st[i]));
		CHECK(vlens[i] == caps[i] && memcmp(bufs[i], tu_map_val(es[i]), caps[i]) == 0,
		      "final batch: value differs (klen %zu, vlen %zu want %zu)", klens[i], vlens[i],
		      caps[i]);
	}
	free(arena);
}

/*
 * Every key of the reference is read back: one in FINAL_GET_EVERY with ember_get,
 * the rest with ember_get_batch (its reads overlap; one disk read at a time would
 * make this phase as long as the random run).
 */
#define FINAL_GET_EVERY 8
static void verify_all(ctx *c)
{
	size_t pos = 0, n = 0, nb = 0;
	const tu_map_entry *e, *batch[FINAL_BATCH];
	size_t vlen;
	double t_start = tu_now();
	while ((e = tu_map_next(&c->ref, &pos)) != NULL) {
		n++;
		if (n % FINAL_GET_EVERY != 0) {
			batch[nb++] = e;
			if (nb == FINAL_BATCH) {
				verify_batch(c, batch, nb);
				nb = 0;
			}
			continue;
		}
		int rc = ember_get(c->s, tu_map_key(e), e->klen, c->gbuf, P.max_val, &vlen);
		CHECK(rc == 0, "final: get (klen %u vlen %u): rc %d (%s)", e->klen, e->vlen, rc,
		      ember_strerror(rc));
		CHECK(vlen == e->vlen && memcmp(c->gbuf, tu_map_val(e), vlen) == 0,
		      "final: value differs (klen %u, vlen %zu want %u)", e->klen, vlen, e->vlen);
	}
	if (nb > 0)
		verify_batch(c, batch, nb);
	CHECK(n == c->ref.count, "reference iteration saw %zu of %zu", n, c->ref.count);
	double t_present = tu_now();
	/* Every id of the key space, and a sample of those never written: absent ones
	 * stay absent (deleted keys end in a tombstone that may be on disk). Batched
	 * like the present keys, one in FINAL_GET_EVERY with ember_get. */
	static uint8_t akeys[FINAL_BATCH][KEY_MAX];
	const void *akp[FINAL_BATCH];
	size_t aklens[FINAL_BATCH], acaps[FINAL_BATCH] = { 0 }, avlens[FINAL_BATCH];
	void *abufs[FINAL_BATCH] = { 0 };
	uint64_t aids[FINAL_BATCH];
	int ast[FINAL_BATCH];
	size_t absent = 0, na = 0;
	const uint64_t step = 16;
	for (uint64_t id = 0;; id += id < P.keyspace ? 1 : step) {
		bool more = id < 2 * P.keyspace;
		if (more) {
			size_t klen = make_key(id, akeys[na]);
			if (tu_map_get(&c->ref, akeys[na], klen) != NULL)
				continue;
			absent++;
			if (absent % FINAL_GET_EVERY == 0) {
				int rc = ember_get(c->s, akeys[na], klen, c->gbuf, P.max_val, &vlen);
				CHECK(rc == EMBER_ENOTFOUND, "final: id %llu (klen %zu) absent: rc %d (%s)",
				      (unsigned long long)id, klen, rc, ember_strerror(rc));
				continue;
			}
			akp[na] = akeys[na];
			aklens[na] = klen;
			aids[na++] = id;
		}
		if (na == FINAL_BATCH || (!more && na > 0)) {
			CHECK_OK(ember_get_batch(c->s, na, akp, aklens, abufs, acaps, avlens, ast));
			for (size_t i = 0; i < na; i++)
				CHECK(ast[i] == EMBER_ENOTFOUND,
				      "final batch: id %llu (klen %zu) absent: status %d (%s)",
				      (unsigned long long)aids[i], aklens[i], ast[i],
				      ember_strerror(ast[i]));
			na = 0;
		}
		if (!more)
			break;
	}
	printf("final: %zu keys present (%zu bytes, %.1fs), %zu absent ids checked (%.1fs)\n", n,
	       c->ref.bytes, t_present - t_start, absent, tu_now() - t_present);
}

int main(int argc, char **argv)
{
	tu_init("differential", argc, argv);
	P.large = argc > 1 && strcmp(argv[1], "large") == 0;
	if (!P.large) {
		P.mode = "small";
		P.ops = tu_scaled(2000000);
		P.keyspace = 200000;
		P.hot_keys = 3000;
		P.hot_pct = 95;
		P.max_val = 4u << 20;
		P.rmw_cap = 1536u << 10;
	} else {
		P.mode = "large";
		P.ops = tu_scaled(30000);
		P.keyspace = 6000;
		P.hot_keys = 100;
		P.hot_pct = 20;
		P.max_val = 4u << 20;
		P.rmw_cap = 3840u << 10;
	}
	ember_options opts;
	ember_options_default(&opts);
	opts.log_memory = 8u << 20;
	opts.page_size = 64u << 10;
	opts.index_buckets = 1u << 12;
	opts.flags = EMBER_OPEN_TRUNCATE;

	char dir[512];
	CHECK(tu_tmpdir_make("diff", dir, sizeof(dir)) == 0, "mkdtemp failed");
	printf("mode=%s ops=%llu keyspace=%llu dir=%s\n", P.mode, (unsigned long long)P.ops,
	       (unsigned long long)P.keyspace, dir);

	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &opts, &db));
	ctx c = { 0 };
	c.rng = tu_rng_global();
	CHECK_OK(ember_session_open(db, &c.s));
	tu_map_init(&c.ref);
	c.vbuf = malloc(P.max_val);
	c.gbuf = malloc(P.max_val + GUARD);
	c.tmp = malloc(P.max_val);
	CHECK(c.vbuf && c.gbuf && c.tmp, "out of memory");

	double t0 = tu_now();
	uint64_t report = P.ops / 8 ? P.ops / 8 : 1;
	uint8_t key[KEY_MAX];
	for (c.op = 0; c.op < P.ops; c.op++) {
		if (tu_rng_chance(c.rng, 1, 400)) {
			do_batch(&c);
			continue;
		}
		size_t klen = make_key(pick_id(c.rng), key);
		uint64_t x = tu_rng_below(c.rng, 100);
		if (x < 33)
			do_put(&c, key, klen);
		else if (x < 73)
			do_get(&c, key, klen);
		else if (x < 81)
			do_delete(&c, key, klen);
		else
			do_rmw(&c, key, klen);
		if ((c.op + 1) % SESSION_OPS == 0) {
			/* A fresh session: its buffers start small again (more ERANGE re-calls). */
			CHECK_OK(ember_session_close(c.s));
			CHECK_OK(ember_session_open(db, &c.s));
		}
		if ((c.op + 1) % report == 0)
			printf("  %llu/%llu ops, %zu keys live (%.1f MiB), %.1f MiB written, %.1fs\n",
			       (unsigned long long)(c.op + 1), (unsigned long long)P.ops,
			       c.ref.count, c.ref.bytes / 1048576.0, S.bytes_written / 1048576.0,
			       tu_now() - t0);
	}
	double t1 = tu_now();
	verify_all(&c);
	double t2 = tu_now();

	printf("puts %llu, gets %llu (hit %llu, miss %llu, small buffer %llu), deletes %llu\n",
	       (unsigned long long)S.puts, (unsigned long long)S.gets,
	       (unsigned long long)S.hits, (unsigned long long)S.misses,
	       (unsigned long long)S.small_bufs, (unsigned long long)S.deletes);
	printf("rmw %llu (callback calls %llu, ERANGE re-calls %llu, in place %llu, refused %llu)\n",
	       (unsigned long long)S.rmws, (unsigned long long)S.rmw_calls,
	       (unsigned long long)S.rmw_eranges, (unsigned long long)S.rmw_inplace,
	       (unsigned long long)S.rmw_refused);
	printf("batches %llu (%llu keys); ops %.1fs (%.0f ops/s), final check %.1fs\n",
	       (unsigned long long)S.batches, (unsigned long long)S.batch_keys, t1 - t0,
	       P.ops / (t1 - t0), t2 - t1);

	CHECK_OK(ember_session_close(c.s));
	CHECK_OK(ember_close(db));
	tu_map_free(&c.ref);
	free(c.vbuf);
	free(c.gbuf);
	free(c.tmp);
	tu_tmpdir_remove(dir);
	printf("differential %s: OK\n", P.mode);
	return 0;
}
