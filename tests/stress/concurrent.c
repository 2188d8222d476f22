/*
 * concurrent.c - several threads, one session each, on one store; invariants that
 * must hold under any interleaving.
 *
 *   concurrent [small|big] [threads]     (default: small 4)
 *     small: log_memory 8 MiB, 64 KiB pages, 4096 index buckets, 16384 owned keys
 *            per thread: the live data is larger than the log's memory, so reads
 *            go to disk during the run, and index buckets overflow;
 *     big:   log_memory 256 MiB, 2048 owned keys per thread: everything stays in
 *            memory (in-place updates, copies to the tail when a value grows).
 *     --soak ten times the operations and time.
 *
 * Three key sets, all threads on all of them:
 *
 *  (a) counters "ctr/<c>": ember_rmw(+1) by every thread. Each thread counts its own
 *      increments per counter. A thread that reads a counter sees a value >= what it
 *      saw before and >= its own increments. At the end each counter equals the sum
 *      of all threads' increments (no update lost, none doubled).
 *  (b) owned keys "own/<t>/<k>": only thread t writes them, with ember_put, a value
 *      (owner, index, sequence number, 8..300 pad bytes, checksum). Every thread
 *      reads them with ember_get and ember_get_batch: each value is well-formed (not
 *      torn: checksum and pad pattern), names the right key, and its sequence number
 *      never goes backwards for the same reader; once seen, a key never disappears.
 *      The owner reads its own writes back exactly (read-your-writes).
 *  (c) churn keys "churn/<c>": put and deleted by every thread; a read sees either
 *      EMBER_ENOTFOUND or a well-formed value for that key.
 *  (d) append-log keys "app/<a>": every thread appends its id byte with ember_rmw,
 *      so values grow past their record's capacity (copies to the tail, sealing of
 *      the old record). A reader's successive reads of a key must each extend the
 *      previous one (the earlier value is a prefix of the later: no update lost or
 *      reordered), and hold no more of its own bytes than it appended. At the end
 *      each thread's byte occurs exactly as often as it appended it.
 *
 * Each thread first writes each of its owned keys once (a load phase that runs
 * concurrently with the other threads' loads), then runs a random mix of the
 * operations above until its operation count or a time cap, whichever comes first.
 * Must run clean under ThreadSanitizer: threads share nothing but the store until
 * they are joined.
 */
#include "ember.h"
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 64
#define NCTR 32
#define NOWN_MAX 16384 /* owned keys per thread, at most */
#define NCHURN 64
#define NAPP 16 /* append-log keys */
#define APP_GET_CAP (1u << 20)
#define VAL_CAP 512
#define MAGIC 0x454d4252u /* "EMBR" */
#define CB_MALFORMED (-31001)

enum kind { KIND_OWN = 1, KIND_CHURN = 2 };

/* Value layout: header, pad[padlen], checksum (u64 over header + pad). */
typedef struct vhdr {
	uint32_t magic;
	uint16_t owner;
	uint16_t kind;
	uint32_t idx;
	uint32_t padlen;
	uint64_t seq;
} vhdr;

_Static_assert(sizeof(vhdr) == 24, "vhdr layout");

static unsigned g_threads = 4;
static unsigned g_nown; /* owned keys per thread: small 16384 (more than the log holds), big 2048 */
static uint64_t g_ops;
static double g_time_cap;
static pthread_barrier_t g_start;

typedef struct worker {
	unsigned id;
	pthread_t thr;
	ember_db *db;
	tu_rng rng;
	uint64_t ctr_mine[NCTR];          /* my increments per counter */
	uint64_t ctr_seen[NCTR];          /* the largest value I read */
	uint64_t own_seq[NOWN_MAX];       /* my keys: the last sequence number I wrote */
	uint64_t *seen_seq;               /* [owner * g_nown + k]: the last I read */
	uint64_t churn_seq;
	uint64_t app_mine[NAPP];          /* bytes I appended to each append-log key */
	uint8_t *app_seen[NAPP];          /* the longest value of it I read */
	size_t app_seen_len[NAPP], app_seen_cap[NAPP];
	uint8_t *app_buf;                 /* APP_GET_CAP bytes for reads */
	uint64_t ops_done;
	uint64_t n_rmw, n_get, n_put, n_batch, n_del, n_notfound;
} worker;

static worker g_workers[MAX_THREADS];

/* ---- values ---------------------------------------------------------------------- */

static uint8_t pad_byte(const vhdr *h, uint32_t i)
{
	return (uint8_t)((h->seq * 131u) ^ (h->owner * 31u) ^ (h->idx * 7u) ^ (i * 13u));
}

static size_t make_value(uint8_t *out, unsigned owner, enum kind kind, uint32_t idx,
			 uint64_t seq, uint32_t padlen)
{
	vhdr h = { MAGIC, (uint16_t)owner, (uint16_t)kind, idx, padlen, seq };
	memcpy(out, &h, sizeof(h));
	for (uint32_t i = 0; i < padlen; i++)
		out[sizeof(h) + i] = pad_byte(&h, i);
	uint64_t sum = tu_hash_bytes(out, sizeof(h) + padlen, 0xc0ffee);
	memcpy(out + sizeof(h) + padlen, &sum, 8);
	return sizeof(h) + padlen + 8;
}

/* CHECKs that the value is well-formed for key (kind, idx[, owner]); returns its seq. */
static uint64_t check_value(const uint8_t *v, size_t len, enum kind kind, uint32_t idx,
			    int owner, const char *what)
{
	vhdr h;
	CHECK(len >= sizeof(h) + 8 + 8 && len <= VAL_CAP, "%s: value length %zu", what, len);
	memcpy(&h, v, sizeof(h));
	CHECK(h.magic == MAGIC, "%s: bad magic %#x (len %zu)", what, h.magic, len);
	CHECK(len == sizeof(h) + h.padlen + 8, "%s: length %zu but padlen %u (torn?)", what, len,
	      h.padlen);
	uint64_t sum;
	memcpy(&sum, v + sizeof(h) + h.padlen, 8);
	CHECK(sum == tu_hash_bytes(v, sizeof(h) + h.padlen, 0xc0ffee),
	      "%s: checksum mismatch (torn value), len %zu seq %llu", what, len,
	      (unsigned long long)h.seq);
	CHECK(h.kind == kind && h.idx == idx, "%s: value of kind %u idx %u under key kind %u idx %u",
	      what, h.kind, h.idx, kind, idx);
	CHECK(owner < 0 || h.owner == owner, "%s: owner %u, key's owner %d", what, h.owner, owner);
	CHECK(h.owner < g_threads, "%s: owner %u out of range", what, h.owner);
	for (uint32_t i = 0; i < h.padlen; i++)
		CHECK(v[sizeof(h) + i] == pad_byte(&h, i), "%s: pad byte %u wrong", what, i);
	return h.seq;
}

static size_t key_ctr(char *k, unsigned c)
{
	return (size_t)sprintf(k, "ctr/%u", c);
}

static size_t key_own(char *k, unsigned owner, unsigned idx)
{
	return (size_t)sprintf(k, "own/%u/%u", owner, idx);
}

static size_t key_churn(char *k, unsigned c)
{
	return (size_t)sprintf(k, "churn/%u", c);
}

/* ---- (a) counters ------------------------------------------------------------------- */

typedef struct ctr_arg {
	unsigned calls;
} ctr_arg;

static int ctr_incr(void *argp, const void *old, size_t old_len, void *out, size_t out_cap,
		    size_t *out_len)
{
	ctr_arg *a = argp;
	a->calls++;
	if (old == NULL && old_len != 0)
		return CB_MALFORMED;
	if (old != NULL && old_len != 8)
		return CB_MALFORMED;
	if (out_cap < 8) {
		*out_len = 8;
		return EMBER_ERANGE;
	}
	uint64_t v = 0;
	if (old != NULL)
		memcpy(&v, old, 8);
	v++;
	memcpy(out, &v, 8);
	*out_len = 8;
	return 0;
}

static void op_ctr_rmw(worker *w, ember_session *s)
{
	char k[32];
	unsigned c = (unsigned)tu_rng_below(&w->rng, NCTR);
	size_t kl = key_ctr(k, c);
	ctr_arg a = { 0 };
	int rc = ember_rmw(s, k, kl, ctr_incr, &a);
	CHECK(rc == 0, "thread %u: rmw %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
	CHECK(a.calls >= 1, "thread %u: rmw %s never ran the callback", w->id, k);
	w->ctr_mine[c]++;
	w->n_rmw++;
}

static void op_ctr_get(worker *w, ember_session *s)
{
	char k[32];
	uint8_t buf[16];
	size_t vlen = 0;
	unsigned c = (unsigned)tu_rng_below(&w->rng, NCTR);
	size_t kl = key_ctr(k, c);
	int rc = ember_get(s, k, kl, buf, sizeof(buf), &vlen);
	w->n_get++;
	if (rc == EMBER_ENOTFOUND) {
		CHECK(w->ctr_mine[c] == 0 && w->ctr_seen[c] == 0,
		      "thread %u: %s vanished (mine %llu, seen %llu)", w->id, k,
		      (unsigned long long)w->ctr_mine[c], (unsigned long long)w->ctr_seen[c]);
		w->n_notfound++;
		return;
	}
	CHECK(rc == 0, "thread %u: get %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
	CHECK(vlen == 8, "thread %u: %s has length %zu", w->id, k, vlen);
	uint64_t v;
	memcpy(&v, buf, 8);
	CHECK(v >= w->ctr_seen[c], "thread %u: %s went backwards: %llu after %llu", w->id, k,
	      (unsigned long long)v, (unsigned long long)w->ctr_seen[c]);
	CHECK(v >= w->ctr_mine[c], "thread %u: %s = %llu < my own %llu increments", w->id, k,
	      (unsigned long long)v, (unsigned long long)w->ctr_mine[c]);
	w->ctr_seen[c] = v;
}

/* ---- (b) owned keys ----------------------------------------------------------------- */

/* Check one read of own/<o>/<k> (rc, value) and advance the reader's view. */
static void seen_owned(worker *w, unsigned o, unsigned k, int rc, const uint8_t *v,
		       size_t vlen, const char *what)
{
	uint64_t *seen = &w->seen_seq[o * g_nown + k];
	if (rc == EMBER_ENOTFOUND) {
		CHECK(*seen == 0, "thread %u: %s own/%u/%u vanished after seq %llu", w->id, what, o,
		      k, (unsigned long long)*seen);
		CHECK(o != w->id || w->own_seq[k] == 0,
		      "thread %u: %s own/%u/%u: my own write (seq %llu) not found", w->id, what, o, k,
		      (unsigned long long)w->own_seq[k]);
		w->n_notfound++;
		return;
	}
	CHECK(rc == 0, "thread %u: %s own/%u/%u: rc %d (%s)", w->id, what, o, k, rc,
	      ember_strerror(rc));
	uint64_t seq = check_value(v, vlen, KIND_OWN, k, (int)o, what);
	CHECK(seq >= *seen, "thread %u: %s own/%u/%u went backwards: seq %llu after %llu", w->id,
	      what, o, k, (unsigned long long)seq, (unsigned long long)*seen);
	CHECK(o != w->id || seq == w->own_seq[k],
	      "thread %u: %s own/%u/%u: read seq %llu, I wrote %llu", w->id, what, o, k,
	      (unsigned long long)seq, (unsigned long long)w->own_seq[k]);
	*seen = seq;
}

static void own_put(worker *w, ember_session *s, unsigned idx)
{
	char k[48];
	uint8_t v[VAL_CAP];
	size_t kl = key_own(k, w->id, idx);
	uint64_t seq = ++w->own_seq[idx];
	size_t vl = make_value(v, w->id, KIND_OWN, idx, seq,
			       (uint32_t)tu_rng_range(&w->rng, 8, 300));
	int rc = ember_put(s, k, kl, v, vl);
	CHECK(rc == 0, "thread %u: put %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
	w->n_put++;
	if (tu_rng_chance(&w->rng, 1, 4)) {
		uint8_t buf[VAL_CAP];
		size_t gl = 0;
		rc = ember_get(s, k, kl, buf, sizeof(buf), &gl);
		seen_owned(w, w->id, idx, rc, buf, gl, "get-own");
		w->n_get++;
	}
}

static void op_own_put(worker *w, ember_session *s)
{
	own_put(w, s, (unsigned)tu_rng_below(&w->rng, g_nown));
}

static void op_own_get(worker *w, ember_session *s)
{
	char k[48];
	uint8_t buf[VAL_CAP];
	size_t vl = 0;
	unsigned o = (unsigned)tu_rng_below(&w->rng, g_threads);
	unsigned idx = (unsigned)tu_rng_below(&w->rng, g_nown);
	size_t kl = key_own(k, o, idx);
	int rc = ember_get(s, k, kl, buf, sizeof(buf), &vl);
	seen_owned(w, o, idx, rc, buf, vl, "get");
	w->n_get++;
}

static void op_own_batch(worker *w, ember_session *s)
{
	enum { B = 64 };
	char kb[B][48];
	const void *keys[B];
	size_t klens[B], caps[B], vlens[B];
	void *bufs[B];
	int status[B];
	unsigned os[B], ks[B];
	static _Thread_local uint8_t data[B][VAL_CAP];

	size_t n = tu_rng_range(&w->rng, 1, B);
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && tu_rng_chance(&w->rng, 1, 10)) { /* a duplicate */
			size_t j = tu_rng_below(&w->rng, i);
			os[i] = os[j];
			ks[i] = ks[j];
		} else {
			os[i] = (unsigned)tu_rng_below(&w->rng, g_threads);
			ks[i] = (unsigned)tu_rng_below(&w->rng, g_nown);
		}
		klens[i] = key_own(kb[i], os[i], ks[i]);
		keys[i] = kb[i];
		bufs[i] = data[i];
		caps[i] = VAL_CAP;
		status[i] = 12345;
	}
	int rc = ember_get_batch(s, n, keys, klens, bufs, caps, vlens, status);
	CHECK(rc == 0, "thread %u: get_batch n=%zu: rc %d (%s)", w->id, n, rc, ember_strerror(rc));
	/*
	 * The batch's lookups are not ordered among themselves, so a duplicate may see
	 * an older value than its twin: check each against the view from before the
	 * batch, then advance the view by the largest seq seen.
	 */
	uint64_t max_seq[B] = { 0 };
	for (size_t i = 0; i < n; i++) {
		unsigned o = os[i], k = ks[i];
		uint64_t view = w->seen_seq[o * g_nown + k];
		if (status[i] == EMBER_ENOTFOUND) {
			CHECK(view == 0, "thread %u: batch own/%u/%u vanished after seq %llu", w->id, o,
			      k, (unsigned long long)view);
			CHECK(o != w->id || w->own_seq[k] == 0,
			      "thread %u: batch own/%u/%u: my own write (seq %llu) not found", w->id,
			      o, k, (unsigned long long)w->own_seq[k]);
			continue;
		}
		CHECK(status[i] == 0, "thread %u: batch[%zu] own/%u/%u: status %d (%s)", w->id, i, o,
		      k, status[i], ember_strerror(status[i]));
		uint64_t seq = check_value(data[i], vlens[i], KIND_OWN, k, (int)o, "batch");
		CHECK(seq >= view, "thread %u: batch own/%u/%u went backwards: seq %llu after %llu",
		      w->id, o, k, (unsigned long long)seq, (unsigned long long)view);
		CHECK(o != w->id || seq == w->own_seq[k],
		      "thread %u: batch own/%u/%u: read seq %llu, I wrote %llu", w->id, o, k,
		      (unsigned long long)seq, (unsigned long long)w->own_seq[k]);
		max_seq[i] = seq;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t *seen = &w->seen_seq[os[i] * g_nown + ks[i]];
		if (max_seq[i] > *seen)
			*seen = max_seq[i];
	}
	w->n_batch++;
}

/* ---- (c) churn keys ----------------------------------------------------------------- */

static void op_churn(worker *w, ember_session *s)
{
	char k[32];
	uint8_t v[VAL_CAP];
	unsigned c = (unsigned)tu_rng_below(&w->rng, NCHURN);
	size_t kl = key_churn(k, c);
	uint64_t x = tu_rng_below(&w->rng, 10);
	int rc;
	if (x < 4) {
		size_t vl = make_value(v, w->id, KIND_CHURN, c, ++w->churn_seq,
				       (uint32_t)tu_rng_range(&w->rng, 8, 300));
		rc = ember_put(s, k, kl, v, vl);
		CHECK(rc == 0, "thread %u: put %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
		w->n_put++;
	} else if (x < 6) {
		rc = ember_delete(s, k, kl);
		CHECK(rc == 0, "thread %u: delete %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
		w->n_del++;
	} else {
		size_t vl = 0;
		rc = ember_get(s, k, kl, v, sizeof(v), &vl);
		w->n_get++;
		if (rc == EMBER_ENOTFOUND) {
			w->n_notfound++;
			return;
		}
		CHECK(rc == 0, "thread %u: get %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
		check_value(v, vl, KIND_CHURN, c, -1, "churn get");
	}
}

/* ---- (d) append-log keys ------------------------------------------------------------ */

static size_t key_app(char *k, unsigned a)
{
	return (size_t)sprintf(k, "app/%u", a);
}

typedef struct app_arg {
	uint8_t byte;
} app_arg;

static int app_append(void *argp, const void *old, size_t old_len, void *out, size_t out_cap,
		      size_t *out_len)
{
	const app_arg *a = argp;
	if (out_cap < old_len + 1) {
		*out_len = old_len + 1;
		return EMBER_ERANGE;
	}
	if (old_len > 0)
		memmove(out, old, old_len); /* out may be old (an in-place update) */
	((uint8_t *)out)[old_len] = a->byte;
	*out_len = old_len + 1;
	return 0;
}

static void op_app_rmw(worker *w, ember_session *s)
{
	char k[32];
	unsigned a = (unsigned)tu_rng_below(&w->rng, NAPP);
	size_t kl = key_app(k, a);
	app_arg arg = { (uint8_t)w->id };
	int rc = ember_rmw(s, k, kl, app_append, &arg);
	CHECK(rc == 0, "thread %u: rmw %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
	w->app_mine[a]++;
	w->n_rmw++;
}

static void op_app_get(worker *w, ember_session *s)
{
	char k[32];
	unsigned a = (unsigned)tu_rng_below(&w->rng, NAPP);
	size_t kl = key_app(k, a), vl = 0;
	int rc = ember_get(s, k, kl, w->app_buf, APP_GET_CAP, &vl);
	w->n_get++;
	if (rc == EMBER_ENOTFOUND) {
		CHECK(w->app_mine[a] == 0 && w->app_seen_len[a] == 0,
		      "thread %u: %s vanished (I appended %llu, saw %zu bytes)", w->id, k,
		      (unsigned long long)w->app_mine[a], w->app_seen_len[a]);
		w->n_notfound++;
		return;
	}
	CHECK(rc == 0, "thread %u: get %s: rc %d (%s)", w->id, k, rc, ember_strerror(rc));
	size_t had = w->app_seen_len[a];
	CHECK(vl >= had && (had == 0 || memcmp(w->app_buf, w->app_seen[a], had) == 0),
	      "thread %u: %s (%zu bytes) does not extend what I read before (%zu bytes)", w->id,
	      k, vl, had);
	uint64_t mine = 0;
	for (size_t i = 0; i < vl; i++) {
		CHECK(w->app_buf[i] < g_threads, "thread %u: %s byte %zu = %u", w->id, k, i,
		      w->app_buf[i]);
		mine += w->app_buf[i] == w->id;
	}
	CHECK(mine == w->app_mine[a], "thread %u: %s holds %llu of my bytes, I appended %llu",
	      w->id, k, (unsigned long long)mine, (unsigned long long)w->app_mine[a]);
	if (vl > w->app_seen_cap[a]) {
		size_t cap = vl * 2;
		uint8_t *p = realloc(w->app_seen[a], cap);
		CHECK(p != NULL, "out of memory");
		w->app_seen[a] = p;
		w->app_seen_cap[a] = cap;
	}
	memcpy(w->app_seen[a], w->app_buf, vl);
	w->app_seen_len[a] = vl;
}

/* ---- threads ----------------------------------------------------------------------- */

static void *worker_main(void *p)
{
	worker *w = p;
	ember_session *s = NULL;
	int rc = ember_session_open(w->db, &s);
	CHECK(rc == 0, "thread %u: session_open: rc %d (%s)", w->id, rc, ember_strerror(rc));
	pthread_barrier_wait(&g_start);
	double deadline = tu_now() + g_time_cap;
	/* Load: every owned key once, while the other threads load theirs (in the small
	 * variant the owned keys alone outgrow the log's memory). */
	for (unsigned k = 0; k < g_nown; k++)
		own_put(w, s, k);
	for (uint64_t i = 0; i < g_ops; i++) {
		if ((i & 255) == 0 && tu_now() > deadline)
			break;
		uint64_t x = tu_rng_below(&w->rng, 100);
		if (x < 22)
			op_ctr_rmw(w, s);
		else if (x < 34)
			op_ctr_get(w, s);
		else if (x < 52)
			op_own_put(w, s);
		else if (x < 70)
			op_own_get(w, s);
		else if (x < 74)
			op_own_batch(w, s);
		else if (x < 78)
			op_app_rmw(w, s);
		else if (x < 80)
			op_app_get(w, s);
		else
			op_churn(w, s);
		w->ops_done++;
	}
	rc = ember_session_close(s);
	CHECK(rc == 0, "thread %u: session_close: rc %d (%s)", w->id, rc, ember_strerror(rc));
	return NULL;
}

/* After the join: counters add up, owned keys hold their owner's last write. */
static void final_check(ember_db *db)
{
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	char k[48];
	uint8_t buf[VAL_CAP];
	size_t vl;
	for (unsigned c = 0; c < NCTR; c++) {
		uint64_t want = 0, got = 0;
		for (unsigned t = 0; t < g_threads; t++)
			want += g_workers[t].ctr_mine[c];
		size_t kl = key_ctr(k, c);
		int rc = ember_get(s, k, kl, buf, sizeof(buf), &vl);
		if (want == 0) {
			CHECK(rc == EMBER_ENOTFOUND, "final %s: never incremented, rc %d", k, rc);
			continue;
		}
		CHECK(rc == 0 && vl == 8, "final %s: rc %d (%s) vlen %zu", k, rc, ember_strerror(rc),
		      vl);
		memcpy(&got, buf, 8);
		CHECK(got == want, "final %s = %llu, threads incremented it %llu times", k,
		      (unsigned long long)got, (unsigned long long)want);
	}
	for (unsigned t = 0; t < g_threads; t++) {
		for (unsigned i = 0; i < g_nown; i++) {
			size_t kl = key_own(k, t, i);
			int rc = ember_get(s, k, kl, buf, sizeof(buf), &vl);
			uint64_t want = g_workers[t].own_seq[i];
			if (want == 0) {
				CHECK(rc == EMBER_ENOTFOUND, "final %s: never written, rc %d", k, rc);
				continue;
			}
			CHECK(rc == 0, "final %s: rc %d (%s)", k, rc, ember_strerror(rc));
			uint64_t seq = check_value(buf, vl, KIND_OWN, i, (int)t, "final");
			CHECK(seq == want, "final %s: seq %llu, owner's last write %llu", k,
			      (unsigned long long)seq, (unsigned long long)want);
		}
	}
	uint8_t *abuf = malloc(APP_GET_CAP);
	CHECK(abuf != NULL, "out of memory");
	for (unsigned a = 0; a < NAPP; a++) {
		uint64_t want[MAX_THREADS] = { 0 }, got[MAX_THREADS] = { 0 }, total = 0;
		for (unsigned t = 0; t < g_threads; t++) {
			want[t] = g_workers[t].app_mine[a];
			total += want[t];
		}
		size_t kl = key_app(k, a);
		int rc = ember_get(s, k, kl, abuf, APP_GET_CAP, &vl);
		if (total == 0) {
			CHECK(rc == EMBER_ENOTFOUND, "final %s: never appended to, rc %d", k, rc);
			continue;
		}
		CHECK(rc == 0, "final %s: rc %d (%s)", k, rc, ember_strerror(rc));
		CHECK(vl == total, "final %s: %zu bytes, threads appended %llu", k, vl,
		      (unsigned long long)total);
		for (size_t i = 0; i < vl; i++) {
			CHECK(abuf[i] < g_threads, "final %s: byte %zu = %u", k, i, abuf[i]);
			got[abuf[i]]++;
		}
		for (unsigned t = 0; t < g_threads; t++)
			CHECK(got[t] == want[t], "final %s: %llu bytes of thread %u, it appended %llu", k,
			      (unsigned long long)got[t], t, (unsigned long long)want[t]);
	}
	free(abuf);
	for (unsigned c = 0; c < NCHURN; c++) {
		size_t kl = key_churn(k, c);
		int rc = ember_get(s, k, kl, buf, sizeof(buf), &vl);
		if (rc == EMBER_ENOTFOUND)
			continue;
		CHECK(rc == 0, "final %s: rc %d (%s)", k, rc, ember_strerror(rc));
		check_value(buf, vl, KIND_CHURN, c, -1, "final churn");
	}
	CHECK_OK(ember_session_close(s));
}

int main(int argc, char **argv)
{
	tu_init("concurrent", argc, argv);
	bool big = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "big") == 0)
			big = true;
		else if (strcmp(argv[i], "small") == 0)
			big = false;
		else if (argv[i][0] >= '1' && argv[i][0] <= '9')
			g_threads = (unsigned)atoi(argv[i]);
	}
	CHECK(g_threads >= 1 && g_threads <= MAX_THREADS, "threads must be 1..%d", MAX_THREADS);
	/* Disk reads bound the small variant; the big one runs in memory, faster. */
	g_ops = tu_scaled(big ? 600000 : 100000);
	g_time_cap = tu_scale() > 1.0 ? 20.0 * tu_scale() : 20.0;

	ember_options opts;
	ember_options_default(&opts);
	opts.flags = EMBER_OPEN_TRUNCATE;
	if (big) {
		g_nown = 2048;
		opts.log_memory = 256u << 20;
	} else {
		g_nown = NOWN_MAX;
		opts.log_memory = 8u << 20;
		opts.page_size = 64u << 10;
		opts.index_buckets = 1u << 12;
	}
	char dir[512];
	CHECK(tu_tmpdir_make("conc", dir, sizeof(dir)) == 0, "mkdtemp failed");
	printf("mode=%s threads=%u ops/thread=%llu time cap %.0fs dir=%s\n", big ? "big" : "small",
	       g_threads, (unsigned long long)g_ops, g_time_cap, dir);

	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &opts, &db));
	CHECK(pthread_barrier_init(&g_start, NULL, g_threads) == 0, "barrier");
	for (unsigned t = 0; t < g_threads; t++) {
		worker *w = &g_workers[t];
		w->id = t;
		w->db = db;
		tu_rng_stream(&w->rng, t);
		w->seen_seq = calloc((size_t)g_threads * g_nown, sizeof(uint64_t));
		w->app_buf = malloc(APP_GET_CAP);
		CHECK(w->seen_seq != NULL && w->app_buf != NULL, "out of memory");
	}
	double t0 = tu_now();
	for (unsigned t = 0; t < g_threads; t++)
		CHECK(pthread_create(&g_workers[t].thr, NULL, worker_main, &g_workers[t]) == 0,
		      "pthread_create");
	for (unsigned t = 0; t < g_threads; t++)
		pthread_join(g_workers[t].thr, NULL);
	double t1 = tu_now();

	uint64_t ops = 0;
	for (unsigned t = 0; t < g_threads; t++) {
		worker *w = &g_workers[t];
		ops += w->ops_done;
		printf("  thread %u: %llu ops (rmw %llu, get %llu, put %llu, batch %llu, del %llu, "
		       "not found %llu)\n",
		       t, (unsigned long long)w->ops_done, (unsigned long long)w->n_rmw,
		       (unsigned long long)w->n_get, (unsigned long long)w->n_put,
		       (unsigned long long)w->n_batch, (unsigned long long)w->n_del,
		       (unsigned long long)w->n_notfound);
	}
	final_check(db);
	printf("%llu ops in %.1fs (%.0f ops/s)\n", (unsigned long long)ops, t1 - t0,
	       ops / (t1 - t0));
	/* The floor under the time cap: each thread did a twentieth of its operations
	 * (ThreadSanitizer at scale 0.15 on 2 busy cores does all of them), every kind
	 * of them. A run cut short by the cap before it got going tested nothing. */
	for (unsigned t = 0; t < g_threads; t++) {
		worker *w = &g_workers[t];
		CHECK(w->ops_done >= g_ops / 20 && w->n_rmw > 0 && w->n_get > 0 && w->n_put > 0 &&
			      w->n_batch > 0 && w->n_del > 0,
		      "thread %u did %llu of %llu operations in the %.0f s cap (rmw %llu, batch "
		      "%llu, del %llu)", t, (unsigned long long)w->ops_done,
		      (unsigned long long)g_ops, g_time_cap, (unsigned long long)w->n_rmw,
		      (unsigned long long)w->n_batch, (unsigned long long)w->n_del);
	}
	CHECK_OK(ember_close(db));
	pthread_barrier_destroy(&g_start);
	for (unsigned t = 0; t < g_threads; t++) {
		free(g_workers[t].seen_seq);
		free(g_workers[t].app_buf);
		for (unsigned a = 0; a < NAPP; a++)
			free(g_workers[t].app_seen[a]);
	}
	tu_tmpdir_remove(dir);
	printf("concurrent %s: OK\n", big ? "big" : "small");
	return 0;
}
