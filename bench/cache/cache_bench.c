/*
 * cache_bench.c - ember-cache-bench: the embedding cache driven by a synthetic
 * trainer over a generated Criteo-like trace, against an LRU cache fetching on
 * demand; plus the oracle's planning speed and the policy simulator.
 *
 *   ember-cache-bench [options]
 *     --parts plan,sim,train   what to run (default all three)
 *     --seed S                 trace seed (default 1)
 *     --skew S                 Zipf exponent (default 1.05)
 *   plan: 'plan ms/batch', the planning work per batch on one core: what
 *   ember_cache_push spends (the per-id dedupe and the oracle's link, in one pass;
 *   the ids copied) plus the prefetcher's oracle_plan and the lookups' slots, the
 *   same oracle calls on the same arrays, with a window of W batches linked ahead,
 *   at capacities of 1% and 5% of the rows
 *     --plan-batch-size B (16384) --plan-batches N (160) --plan-scale F (1.0: the
 *     real Criteo table sizes) --plan-window W (100) --plan-capacities LIST (rows,
 *     default 1% and 5% of all rows; at least one batch's distinct rows)
 *     --plan-repeat R (5: each
 *     capacity runs R times in a row; the figures are the median run's, with the
 *     fastest beside it: on a shared machine single runs vary by 2x)
 *   sim: rows fetched by the oracle, LRU, LFU and MIN at capacities 1%, 5%, 20%
 *     --sim-batch-size B (1024) --sim-batches N (400) --sim-scale F (0.02) --window W (100)
 *   train: a trainer over the real store and cache; the store holds every row and
 *   its data are larger than its memory budget; the tables are several times larger
 *   than the cache
 *     --batch-size B (512) --batches N (100) --scale F (0.01) --dim D (16)
 *     --capacity-frac F (0.05) --compute-us LIST (0,10000,30000) --mem-budget MB (8)
 *     --dir DIR (a fresh directory under $TMPDIR or /tmp)
 *     --lru 0 (skip the LRU baseline: the oracle's runs only)
 *     --dump-trace FILE (write the train trace in ember-trace's file format,
 *     docs/cache.md "Trace files", so another driver can replay the same batches:
 *     bench/python/bench_cache_loop.py)
 *   --json FILE   also write the figures as JSON
 *
 * The trainer "computes" by sleeping (like a GPU step, it leaves the CPU to the
 * prefetcher), after adding to element 0 of every row it looked up, so released
 * rows are dirty and evictions write back. The LRU baseline does the same work
 * on the trainer's thread: per batch, write back dirty victims and read the misses
 * (ember_put_batch / ember_get_batch), then compute; its wait is that I/O time.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/oracle.h"
#include "cache/sim.h"
#include "ember.h"
#include "ember_cache.h"
#include "trace.h"

struct cfg {
	const char *parts;
	uint64_t seed;
	double skew;
	uint32_t plan_bs, plan_nb, plan_rep, plan_window;
	double plan_scale;
	uint32_t sim_bs, sim_nb, window;
	double sim_scale;
	uint32_t bs, nb, dim;
	double scale, cap_frac;
	char compute[256];
	uint64_t mem_mb;
	const char *dir, *json, *plan_caps, *dump_trace;
	int lru;
};

static FILE *jf;
static int jfirst = 1;

static void jkv(const char *section, const char *key, double v)
{
	if (!jf)
		return;
	fprintf(jf, "%s  {\"section\": \"%s\", \"key\": \"%s\", \"value\": %.6g}", jfirst ? "" : ",\n",
		section, key, v);
	jfirst = 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "ember-cache-bench: %s: %s\n", what,
		rc <= -30000 ? ember_strerror(rc) : strerror(-rc));
	exit(1);
}

static int gen(uint32_t bs, uint32_t nb, double scale, const struct cfg *c, struct trace *t)
{
	struct trace_params p;
	trace_params_default(&p);
	p.batch_size = bs;
	p.nbatches = nb;
	p.scale = scale;
	p.skew = c->skew;
	p.seed = c->seed;
	return trace_generate(&p, t);
}

/* ---- plan: push's dedupe and link, and the plan, on full-size batches ---------------- */

#define PLAN_REP_MAX 101

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* This thread's CPU time: the planning figures count the time the planning
 * thread ran, not time it waited for a CPU (the bench machine is shared). */
static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One ring entry: the arrays ember_cache_push and the prefetcher use for a batch. */
struct pbatch {
	uint64_t *ids;   /* the cache's copy of the ids */
	uint32_t *lslot; /* lookup -> distinct row (push), then -> slot (plan) */
	struct urow *uniq;
	struct onext *next;
	uint32_t *slot;
	struct omiss *miss;
	struct obatch ob;
};

struct plan_run {
	double link_s, plan_s, map_s; /* over the timed steps */
	uint64_t fetched;             /* over every batch */
};

/* The trainer's ids of batch b (u64, table after table). */
static void batch_ids(const struct trace *t, uint32_t b, uint64_t *dst)
{
	for (uint32_t tb = 0; tb < t->ntables; tb++) {
		const uint32_t *src = trace_ids(t, b, tb);
		for (uint32_t i = 0; i < t->batch_size; i++)
			*dst++ = src[i];
	}
}

/*
 * One pass over the trace as the cache runs it, with a window of W batches:
 * batches 0..W-1 are linked first; step p plans batch p with the most rows
 * pinned the cache allows when it plans p (it plans at most 8 batches ahead of
 * the trainer's releases, and only while the unreleased planned batches' rows
 * fit in half the capacity: rows of batches r..p-1 pinned, r as small as those
 * rules let it be), maps its lookups to slots, and links batch p + W (push's
 * dedupe and link, the ids copied: ember_cache_push's work). Steps from `from` on
 * that link a batch are timed (the first fill the cache; the last W link none).
 */
static void plan_pass(const struct trace *t, uint64_t cap, uint32_t W, uint32_t umax,
		      uint32_t from, struct pbatch *ring, uint64_t *in, struct plan_run *out)
{
	struct oracle *o = NULL;
	int rc = oracle_create(&o, t->ntables, t->rows, cap, W);
	if (rc < 0)
		die("oracle_create", rc);
	oracle_prefault(o); /* time the planning, not the first touches of its memory */
	uint32_t nlk = umax < cap ? umax : (uint32_t)cap;
	size_t per = (size_t)t->ntables * t->batch_size;
	memset(out, 0, sizeof(*out));
	for (uint32_t p = 0, linked = 0; p < t->nbatches; p++) {
		/* the trainer builds batch `linked` (not timed), then pushes it */
		int timed = p >= from && p + W < t->nbatches;
		while (linked < t->nbatches && linked < p + W) {
			struct pbatch *e = &ring[linked % W];
			batch_ids(t, linked, in);
			double t0 = cpu_s();
			e->ob = (struct obatch){.seq = linked, .next = e->next, .slot = e->slot,
						.miss = e->miss};
			oracle_link_begin(o, &e->ob, e->uniq, nlk);
			size_t at = 0;
			for (uint32_t tb = 0; tb < t->ntables && rc == 0; tb++, at += t->batch_size)
				rc = oracle_link_part(o, &e->ob, tb, t->batch_size, in + at,
						      e->lslot + at, e->ids + at);
			if (rc < 0)
				die("oracle_link_part", rc);
			oracle_link_end(o, &e->ob);
			if (timed)
				out->link_s += cpu_s() - t0;
			linked++;
		}
		struct pbatch *e = &ring[p % W];
		uint32_t r = p;
		uint64_t rows = e->ob.nuniq;
		while (r > 0 && p - (r - 1) < 8 && rows + ring[(r - 1) % W].ob.nuniq <= cap / 2)
			rows += ring[--r % W].ob.nuniq;
		double t0 = cpu_s();
		oracle_plan(o, &e->ob, r);
		double t1 = cpu_s();
		for (size_t i = 0; i < per; i++) /* plan_one's map, in place */
			e->lslot[i] = e->slot[e->lslot[i]];
		double t2 = cpu_s();
		if (timed) {
			out->plan_s += t1 - t0;
			out->map_s += t2 - t1;
		}
		out->fetched += e->ob.nmiss;
	}
	oracle_destroy(o);
}

static void run_plan(const struct cfg *c)
{
	struct trace t;
	double t0 = now_s();
	int rc = gen(c->plan_bs, c->plan_nb, c->plan_scale, c, &t);
	if (rc < 0)
		die("trace", rc);
	uint64_t total = 0;
	for (uint32_t i = 0; i < t.ntables; i++)
		total += t.rows[i];
	/* distinct rows per batch (the arrays' size) */
	uint32_t *stamp = calloc(total, sizeof(uint32_t));
	uint64_t *base = calloc(t.ntables, sizeof(uint64_t));
	if (!stamp || !base)
		die("plan", -ENOMEM);
	for (uint32_t i = 1; i < t.ntables; i++)
		base[i] = base[i - 1] + t.rows[i - 1];
	uint32_t umax = 1;
	uint64_t usum = 0;
	for (uint32_t b = 0; b < t.nbatches; b++) {
		uint32_t nu = 0;
		for (uint32_t tb = 0; tb < t.ntables; tb++) {
			const uint32_t *ids = trace_ids(&t, b, tb);
			for (uint32_t i = 0; i < t.batch_size; i++)
				if (stamp[base[tb] + ids[i]] != b + 1) {
					stamp[base[tb] + ids[i]] = b + 1;
					nu++;
				}
		}
		umax = nu > umax ? nu : umax;
		usum += nu;
	}
	free(stamp);
	free(base);
	uint32_t W = c->plan_window < t.nbatches ? c->plan_window : t.nbatches;
	uint32_t from = 8, steps = t.nbatches > W + from ? t.nbatches - W - from : 0;
	if (steps == 0)
		die("--plan-batches must exceed the window + 8", -EINVAL);
	size_t per = (size_t)t.ntables * t.batch_size;
	struct pbatch *ring = calloc(W, sizeof(*ring));
	uint64_t *in = malloc(per * sizeof(uint64_t));
	if (!ring || !in)
		die("plan", -ENOMEM);
	for (uint32_t i = 0; i < W; i++) {
		struct pbatch *e = &ring[i];
		e->ids = malloc(per * sizeof(uint64_t));
		e->lslot = malloc(per * sizeof(uint32_t));
		e->uniq = malloc(umax * sizeof(struct urow));
		e->next = malloc(umax * sizeof(struct onext));
		e->slot = malloc(umax * sizeof(uint32_t));
		e->miss = malloc(umax * sizeof(struct omiss));
		if (!e->ids || !e->lslot || !e->uniq || !e->next || !e->slot || !e->miss)
			die("plan", -ENOMEM);
		/* first touches out of the timing */
		memset(e->ids, 0, per * sizeof(uint64_t));
		memset(e->lslot, 0, per * sizeof(uint32_t));
		memset(e->uniq, 0, umax * sizeof(struct urow));
		memset(e->next, 0, umax * sizeof(struct onext));
		memset(e->slot, 0, umax * sizeof(uint32_t));
		memset(e->miss, 0, umax * sizeof(struct omiss));
	}
	printf("\n== plan: %" PRIu32 " batches of %" PRIu32 " samples x %" PRIu32 " tables = %zu ids, "
	       "%.0f distinct rows per batch (%" PRIu64 " rows; generated in %.1f s), window %" PRIu32
	       "\n", t.nbatches, t.batch_size, t.ntables, per, (double)usum / t.nbatches, total,
	       now_s() - t0, W);
	printf("plan ms/batch = ember_cache_push's work (dedupe + link, ids copied) + oracle_plan +\n"
	       "the lookups' slots, per batch (thread CPU time), steps %" PRIu32 "..%" PRIu32 " (each links batch step +\n"
	       "window and plans batch step); one core; median of %" PRIu32 " runs, fastest in brackets\n",
	       from, from + steps - 1, c->plan_rep);
	printf("%-10s %14s %18s %10s %10s %10s %8s %10s %12s\n", "capacity", "plan ms/batch",
	       "[fastest ms/batch]", "push ms", "plan ms", "map ms", "ns/id", "ns/distinct",
	       "fetched/batch");
	/* capacities: 1% and 5% of the rows, or --plan-capacities; at least one batch's
	 * distinct rows */
	uint64_t caps[8];
	int ncaps = 0;
	if (c->plan_caps) {
		for (const char *q = c->plan_caps; *q && ncaps < 8; q = strchr(q, ',') ? strchr(q, ',') + 1 : "")
			caps[ncaps++] = strtoull(q, NULL, 10);
	} else {
		caps[ncaps++] = total / 100;
		caps[ncaps++] = total / 20;
	}
	for (int i = 0; i < ncaps; i++) {
		uint64_t cap = caps[i] < umax ? umax : caps[i];
		cap = cap > total ? total : cap;
		struct plan_run runs[PLAN_REP_MAX];
		double tot[PLAN_REP_MAX];
		for (uint32_t r = 0; r < c->plan_rep; r++) {
			plan_pass(&t, cap, W, umax, from, ring, in, &runs[r]);
			tot[r] = runs[r].link_s + runs[r].plan_s + runs[r].map_s;
		}
		double sorted[PLAN_REP_MAX];
		memcpy(sorted, tot, c->plan_rep * sizeof(double));
		qsort(sorted, c->plan_rep, sizeof(double), cmp_double);
		double med = sorted[c->plan_rep / 2];
		uint32_t mi = 0;
		for (uint32_t r = 0; r < c->plan_rep; r++)
			if (tot[r] == med)
				mi = r;
		const struct plan_run *m = &runs[mi];
		double ms = med * 1e3 / steps;
		printf("%-10" PRIu64 " %14.3f %18.3f %10.3f %10.3f %10.3f %8.2f %10.2f %12.0f\n", cap, ms,
		       sorted[0] * 1e3 / steps, m->link_s * 1e3 / steps, m->plan_s * 1e3 / steps,
		       m->map_s * 1e3 / steps, med * 1e9 / ((double)steps * per),
		       med * 1e9 / ((double)steps * usum / t.nbatches), (double)m->fetched / t.nbatches);
		char k[64];
		snprintf(k, sizeof(k), "cap%" PRIu64 "_plan_ms_per_batch", cap);
		jkv("plan", k, ms);
		snprintf(k, sizeof(k), "cap%" PRIu64 "_push_ms_per_batch", cap);
		jkv("plan", k, m->link_s * 1e3 / steps);
	}
	for (uint32_t i = 0; i < W; i++) {
		struct pbatch *e = &ring[i];
		free(e->ids);
		free(e->lslot);
		free(e->uniq);
		free(e->next);
		free(e->slot);
		free(e->miss);
	}
	free(ring);
	free(in);
	trace_free(&t);
}

/* ---- sim: rows fetched by policy ---------------------------------------------------- */

static void run_sim(const struct cfg *c)
{
	struct trace t;
	struct sim_trace st;
	int rc = gen(c->sim_bs, c->sim_nb, c->sim_scale, c, &t);
	if (rc < 0)
		die("trace", rc);
	rc = sim_trace_build(&st, t.ntables, t.rows, t.nbatches, t.batch_size, t.ids);
	if (rc < 0)
		die("sim_trace_build", rc);
	printf("\n== sim: %" PRIu32 " batches of %" PRIu32 " samples x %" PRIu32 " tables, %" PRIu64
	       " rows, %.0f distinct rows per batch; oracle window %" PRIu32 "\n",
	       t.nbatches, t.batch_size, t.ntables, st.total_rows,
	       (double)st.off[st.nbatches] / st.nbatches, c->window);
	printf("%-9s %10s %12s %12s %12s %12s %10s %10s\n", "capacity", "rows", "oracle", "LRU",
	       "LFU", "MIN", "oracle/MIN", "LRU/oracle");
	static const double fr[3] = {0.01, 0.05, 0.20};
	for (int i = 0; i < 3; i++) {
		uint64_t cap = (uint64_t)(fr[i] * (double)st.total_rows);
		if (cap < st.max_uniq) {
			printf("%8.0f%% %10" PRIu64 "   (below one batch's %" PRIu32
			       " distinct rows: n/a)\n",
			       fr[i] * 100, cap, st.max_uniq);
			continue;
		}
		struct sim_result o, l, f, m;
		if ((rc = sim_oracle(&st, cap, c->window, &o)) < 0 || (rc = sim_lru(&st, cap, &l)) < 0 ||
		    (rc = sim_lfu(&st, cap, &f)) < 0 || (rc = sim_min(&st, cap, &m)) < 0)
			die("sim", rc);
		double om = m.fetched ? (double)o.fetched / m.fetched : 0;
		double lo = o.fetched ? (double)l.fetched / o.fetched : 0;
		printf("%8.0f%% %10" PRIu64 " %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %12" PRIu64
		       " %10.4f %10.3f\n",
		       fr[i] * 100, cap, o.fetched, l.fetched, f.fetched, m.fetched, om, lo);
		char k[64];
		snprintf(k, sizeof(k), "cap%.0f_oracle_over_min", fr[i] * 100);
		jkv("sim", k, om);
		snprintf(k, sizeof(k), "cap%.0f_lru_over_oracle", fr[i] * 100);
		jkv("sim", k, lo);
		snprintf(k, sizeof(k), "cap%.0f_lfu_over_oracle", fr[i] * 100);
		jkv("sim", k, o.fetched ? (double)f.fetched / o.fetched : 0);
	}
	sim_trace_free(&st);
	trace_free(&t);
}

/* ---- train: the real store -------------------------------------------------------- */

static uint64_t pow2_floor(uint64_t x)
{
	uint64_t p = 1;
	while (p * 2 <= x)
		p *= 2;
	return p;
}

static void key_of(uint8_t *k, uint32_t table, uint64_t row)
{
	uint64_t v = (uint64_t)table << 48 | row;
	memcpy(k, &v, 8);
}

static void sleep_us(uint64_t us)
{
	if (!us)
		return;
	struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Load every row (init: small values) so the store's data exceed its budget. */
static void load_store(ember_db *db, const struct trace *t, uint32_t dim)
{
	ember_session *s = NULL;
	int rc = ember_session_open(db, &s);
	if (rc < 0)
		die("session", rc);
	enum { N = 1024 };
	static uint8_t keys[N][8];
	const void *kp[N], *vp[N];
	size_t kl[N], vl[N];
	int st[N];
	float *vals = calloc((size_t)N * dim, sizeof(float));
	size_t n = 0;
	for (uint32_t tb = 0; tb < t->ntables; tb++)
		for (uint64_t r = 0; r < t->rows[tb]; r++) {
			key_of(keys[n], tb, r);
			for (uint32_t j = 0; j < dim; j++)
				vals[n * dim + j] = (float)((r + j) % 7) * 0.01f;
			kp[n] = keys[n];
			kl[n] = 8;
			vp[n] = vals + n * dim;
			vl[n] = dim * sizeof(float);
			if (++n == N || (tb == t->ntables - 1 && r == t->rows[tb] - 1)) {
				rc = ember_put_batch(s, n, kp, kl, vp, vl, st);
				if (rc < 0)
					die("load", rc);
				for (size_t i = 0; i < n; i++)
					if (st[i] < 0)
						die("load", st[i]);
				n = 0;
			}
		}
	free(vals);
	ember_session_close(s);
}

struct run_out {
	double wall, wait_per_batch, fetched, rows_per_s, mb_per_s, plan_ms, written;
	double wait_after_fill; /* mean wait per batch, batches FILL.. (the pipeline full) */
	uint32_t waited;        /* batches FILL.. that waited over 0.1 ms */
};

#define FILL 8 /* the first batches wait for the pipeline to fill (prefetch_batches) */

static void run_cache(ember_db *db, const struct trace *t, uint32_t dim, uint64_t cap,
		      uint32_t window, uint64_t compute_us, struct run_out *out)
{
	ember_cache_table *tabs = calloc(t->ntables, sizeof(*tabs));
	for (uint32_t i = 0; i < t->ntables; i++)
		tabs[i] = (ember_cache_table){.rows = t->rows[i], .dim = dim};
	ember_cache_options o;
	ember_cache_options_default(&o);
	o.tables = tabs;
	o.ntables = t->ntables;
	o.capacity = cap;
	o.window = window;
	ember_cache *c = NULL;
	int rc = ember_cache_open(db, &o, &c);
	if (rc < 0)
		die("ember_cache_open", rc);
	ember_cache_part *parts = calloc(t->ntables, sizeof(*parts));
	uint64_t *ids = malloc((size_t)t->ntables * t->batch_size * sizeof(uint64_t));
	uint32_t pushed = 0;
	out->wait_after_fill = 0;
	out->waited = 0;
	double t0 = now_s();
	for (uint32_t b = 0; b < t->nbatches; b++) {
		while (pushed < t->nbatches) {
			for (uint32_t tb = 0; tb < t->ntables; tb++) {
				const uint32_t *src = trace_ids(t, pushed, tb);
				uint64_t *dst = ids + (size_t)tb * t->batch_size;
				for (uint32_t i = 0; i < t->batch_size; i++)
					dst[i] = src[i];
				parts[tb] = (ember_cache_part){.table = tb, .n = t->batch_size, .rows = dst};
			}
			ember_cache_batch batch = {.nparts = t->ntables, .parts = parts};
			rc = ember_cache_push(c, &batch);
			if (rc == EMBER_EAGAIN)
				break;
			if (rc < 0)
				die("push", rc);
			pushed++;
		}
		ember_cache_view v;
		double ta = now_s();
		rc = ember_cache_acquire(c, &v);
		if (rc < 0)
			die("acquire", rc);
		ta = now_s() - ta;
		if (b >= FILL) {
			out->wait_after_fill += ta;
			out->waited += ta > 1e-4;
		}
		for (uint32_t p = 0; p < v.nparts; p++)
			for (uint32_t i = 0; i < v.parts[p].n; i++)
				ember_cache_row(&v, p, i)[0] += 0.001f;
		sleep_us(compute_us);
		rc = ember_cache_release(c, &v);
		if (rc < 0)
			die("release", rc);
	}
	out->wall = now_s() - t0;
	out->wait_after_fill = t->nbatches > FILL ? out->wait_after_fill * 1e3 / (t->nbatches - FILL) : 0;
	ember_cache_stats s;
	ember_cache_stats_get(c, &s);
	out->wait_per_batch = s.wait_ns / 1e6 / t->nbatches;
	out->fetched = (double)s.rows_fetched;
	double busy = s.prefetch_busy_ns / 1e9;
	out->rows_per_s = busy > 0 ? s.rows_fetched / busy : 0;
	out->mb_per_s = busy > 0 ? (s.bytes_fetched + (double)s.rows_absent * dim * 4) / busy / 1e6 : 0;
	out->plan_ms = s.plan_ns / 1e6 / t->nbatches;
	out->written = (double)s.rows_written_back;
	if (getenv("EMBER_CACHE_BENCH_DEBUG"))
		fprintf(stderr, "  [oracle: %llu rounds, busy %.3f s, idle %.3f s, wait %.3f s, plan %.3f s]\n",
			(unsigned long long)s.fetch_rounds, s.prefetch_busy_ns / 1e9,
			s.prefetch_idle_ns / 1e9, s.wait_ns / 1e9, s.plan_ns / 1e9);
	rc = ember_cache_close(c);
	if (rc < 0)
		die("close", rc);
	free(parts);
	free(ids);
	free(tabs);
}

/* The baseline: an LRU cache of the same capacity that fetches on demand. */
static void run_lru(ember_db *db, const struct trace *t, uint32_t dim, uint64_t cap,
		    uint64_t compute_us, struct run_out *out)
{
	uint64_t *base = malloc(t->ntables * sizeof(uint64_t)), total = 0;
	for (uint32_t i = 0; i < t->ntables; i++) {
		base[i] = total;
		total += t->rows[i];
	}
	uint32_t *slot_of = malloc(total * sizeof(uint32_t));
	uint32_t *stamp = calloc(total, sizeof(uint32_t));
	uint64_t *owner = malloc(cap * sizeof(uint64_t));
	uint32_t *prev = malloc(cap * sizeof(uint32_t)), *next = malloc(cap * sizeof(uint32_t));
	uint8_t *dirty = calloc(cap, 1);
	float *mem = calloc(cap * dim, sizeof(float));
	size_t bn = (size_t)t->ntables * t->batch_size;
	uint8_t(*keys)[8] = malloc(bn * 8);
	const void **kp = malloc(bn * sizeof(void *));
	void **vp = malloc(bn * sizeof(void *));
	size_t *kl = malloc(bn * sizeof(size_t)), *vl = malloc(bn * sizeof(size_t)),
	       *vc = malloc(bn * sizeof(size_t));
	int *st = malloc(bn * sizeof(int));
	uint32_t *miss_slot = malloc(bn * sizeof(uint32_t));
	float *wb = malloc(bn * dim * sizeof(float));
	memset(slot_of, 0xff, total * sizeof(uint32_t));
	ember_session *s = NULL;
	int rc = ember_session_open(db, &s);
	if (rc < 0)
		die("session", rc);
	uint32_t head = UINT32_MAX, tail = UINT32_MAX, used = 0; /* head: least recent */
#define UNLINK(x)                                                                        \
	do {                                                                             \
		if (prev[x] != UINT32_MAX) next[prev[x]] = next[x]; else head = next[x];   \
		if (next[x] != UINT32_MAX) prev[next[x]] = prev[x]; else tail = prev[x];   \
	} while (0)
#define APPEND(x)                                                                        \
	do {                                                                             \
		prev[x] = tail; next[x] = UINT32_MAX;                                    \
		if (tail != UINT32_MAX) next[tail] = x; else head = x;                   \
		tail = x;                                                                \
	} while (0)
	double t0 = now_s(), io = 0, io_fill = 0;
	uint64_t fetched = 0, written = 0;
	out->waited = 0;
	for (uint32_t b = 0; b < t->nbatches; b++) {
		double t1 = now_s();
		size_t nm = 0, nw = 0;
		/* hits become most recent first, so that victims are never this batch's */
		for (uint32_t tb = 0; tb < t->ntables; tb++) {
			const uint32_t *src = trace_ids(t, b, tb);
			for (uint32_t i = 0; i < t->batch_size; i++) {
				uint64_t g = base[tb] + src[i];
				if (stamp[g] == b + 1)
					continue;
				stamp[g] = b + 1;
				if (slot_of[g] != UINT32_MAX) {
					UNLINK(slot_of[g]);
					APPEND(slot_of[g]);
				}
			}
		}
		for (uint32_t tb = 0; tb < t->ntables; tb++) {
			const uint32_t *src = trace_ids(t, b, tb);
			for (uint32_t i = 0; i < t->batch_size; i++) {
				uint64_t g = base[tb] + src[i];
				if (slot_of[g] != UINT32_MAX)
					continue;
				uint32_t x;
				if (used < cap) {
					x = used++;
				} else {
					x = head; /* least recent: not this batch's */
					UNLINK(x);
					slot_of[owner[x]] = UINT32_MAX;
					if (dirty[x]) {
						uint64_t og = owner[x];
						uint32_t ot = 0;
						while (ot + 1 < t->ntables && base[ot + 1] <= og)
							ot++;
						key_of(keys[nw], ot, og - base[ot]);
						memcpy(wb + nw * dim, mem + (size_t)x * dim, dim * 4);
						kp[nw] = keys[nw];
						kl[nw] = 8;
						vp[nw] = wb + nw * dim;
						vl[nw] = dim * 4;
						nw++;
					}
				}
				APPEND(x);
				owner[x] = g;
				slot_of[g] = x;
				dirty[x] = 0;
				miss_slot[nm++] = x;
			}
		}
		if (nw) {
			rc = ember_put_batch(s, nw, kp, kl, (const void *const *)vp, vl, st);
			if (rc < 0)
				die("lru put", rc);
			written += nw;
		}
		for (size_t i = 0; i < nm; i++) {
			uint64_t g = owner[miss_slot[i]];
			uint32_t ot = 0;
			while (ot + 1 < t->ntables && base[ot + 1] <= g)
				ot++;
			key_of(keys[i], ot, g - base[ot]);
			kp[i] = keys[i];
			kl[i] = 8;
			vp[i] = mem + (size_t)miss_slot[i] * dim;
			vc[i] = dim * 4;
		}
		if (nm) {
			rc = ember_get_batch(s, nm, kp, kl, vp, vc, vl, st);
			if (rc < 0)
				die("lru get", rc);
			fetched += nm;
		}
		io += now_s() - t1;
		if (b >= FILL) {
			io_fill += now_s() - t1;
			out->waited += now_s() - t1 > 1e-4;
		}
		/* the trainer's step */
		for (uint32_t tb = 0; tb < t->ntables; tb++) {
			const uint32_t *src = trace_ids(t, b, tb);
			for (uint32_t i = 0; i < t->batch_size; i++) {
				uint32_t x = slot_of[base[tb] + src[i]];
				mem[(size_t)x * dim] += 0.001f;
				dirty[x] = 1;
			}
		}
		sleep_us(compute_us);
	}
#undef UNLINK
#undef APPEND
	out->wall = now_s() - t0;
	out->wait_per_batch = io * 1e3 / t->nbatches;
	out->wait_after_fill = t->nbatches > FILL ? io_fill * 1e3 / (t->nbatches - FILL) : 0;
	out->fetched = (double)fetched;
	out->rows_per_s = io > 0 ? fetched / io : 0;
	out->mb_per_s = io > 0 ? fetched * dim * 4.0 / io / 1e6 : 0;
	out->plan_ms = 0;
	out->written = (double)written;
	ember_session_close(s);
	free(base);
	free(slot_of);
	free(stamp);
	free(owner);
	free(prev);
	free(next);
	free(dirty);
	free(mem);
	free(keys);
	free(kp);
	free(vp);
	free(kl);
	free(vl);
	free(vc);
	free(st);
	free(miss_slot);
	free(wb);
}

/* A fresh store holding every row (data larger than its memory budget), settled. */
static ember_db *loaded_store(const struct cfg *c, const struct trace *t, uint64_t total_rows,
			      char *dir, size_t cap, double *load_s)
{
	if (c->dir) {
		snprintf(dir, cap, "%s", c->dir);
	} else {
		const char *tmp = getenv("TMPDIR");
		snprintf(dir, cap, "%s/ember-cache-bench-XXXXXX", tmp ? tmp : "/tmp");
		if (!mkdtemp(dir))
			die("mkdtemp", -errno);
	}
	uint64_t budget = c->mem_mb << 20;
	uint64_t rec = 32 + 8 + ((c->dim * 4 + 7) & ~7u);
	ember_options so;
	ember_options_default(&so);
	uint64_t page = pow2_floor(budget / 256);
	so.page_size = (uint32_t)(page < (64u << 10) ? 64u << 10 : page > (1u << 20) ? 1u << 20 : page);
	so.memory_budget = budget;
	so.index_buckets = pow2_floor(budget / 4 / 64);
	so.hot_disk_budget = so.index_buckets * 4 * rec;
	so.cold_disk_budget = 8 * total_rows * rec;
	so.cold_index_chunks = pow2_floor(total_rows / 32 > 1 ? total_rows / 32 : 1) * 2;
	so.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	int rc = ember_open(dir, &so, &db);
	if (rc < 0)
		die("ember_open", rc);
	double t0 = now_s();
	load_store(db, t, c->dim);
	/* settle: compact what the load left, so the run does not share the disk
	 * with the load's background compaction */
	rc = ember_compact(db, 1);
	if (rc < 0)
		die("ember_compact", rc);
	*load_s = now_s() - t0;
	return db;
}

static void drop_store(const struct cfg *c, ember_db *db, const char *dir)
{
	ember_stats es;
	ember_stats_get(db, &es);
	printf("%56s store: reads from disk hot %" PRIu64 " cold %" PRIu64 "; compactions %" PRIu64
	       "\n", "", es.hot.reads_disk, es.cold.reads_disk, es.hot.compactions + es.cold.compactions);
	int rc = ember_close(db);
	if (rc < 0)
		die("ember_close", rc);
	if (!c->dir) {
		char cmd[600];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
}

static void run_train(const struct cfg *c)
{
	struct trace t;
	int rc = gen(c->bs, c->nb, c->scale, c, &t);
	if (rc < 0)
		die("trace", rc);
	struct sim_trace st;
	rc = sim_trace_build(&st, t.ntables, t.rows, t.nbatches, t.batch_size, t.ids);
	if (rc < 0)
		die("sim_trace_build", rc);
	uint64_t cap = (uint64_t)(c->cap_frac * (double)st.total_rows);
	if (cap < st.max_uniq) {
		fprintf(stderr, "ember-cache-bench: capacity %" PRIu64 " below a batch's %" PRIu32
				" distinct rows: raise --capacity-frac or lower --batch-size\n",
			cap, st.max_uniq);
		exit(1);
	}
	if (c->dump_trace && (rc = trace_write(&t, c->dump_trace)) < 0)
		die(c->dump_trace, rc);
	uint64_t rec = 32 + 8 + ((c->dim * 4 + 7) & ~7u);
	double data_mb = (double)st.total_rows * rec / 1e6;
	printf("\n== train: %" PRIu32 " batches of %" PRIu32 " samples x %" PRIu32 " tables, %" PRIu64
	       " rows of %" PRIu32 " fp32 (%.1f MB of records, store memory budget %" PRIu64
	       " MiB; a fresh store, loaded and compacted, for every run); cache %" PRIu64
	       " rows (%.1f%%, tables %.0fx the cache), window %" PRIu32 ", %.0f distinct rows per "
	       "batch\n",
	       t.nbatches, t.batch_size, t.ntables, st.total_rows, c->dim, data_mb, c->mem_mb, cap,
	       100.0 * cap / st.total_rows, (double)st.total_rows / cap, c->window,
	       (double)st.off[st.nbatches] / st.nbatches);
	struct sim_result mn;
	if (sim_min(&st, cap, &mn) == 0)
		printf("   (Belady's MIN would fetch %" PRIu64 " rows)\n", mn.fetched);
	printf("wait_ms/b: mean over all batches; after_fill: mean over batches %d.. (the first\n"
	       "ones wait for the pipeline to fill); waited: batches %d.. that waited > 0.1 ms.\n"
	       "rows/s, MB/s: rows (and row bytes) fetched per second of the prefetcher's busy\n"
	       "time (LRU: of the trainer's I/O time); written: rows written back\n", FILL, FILL);
	printf("%-7s %10s %8s %10s %10s %7s %9s %9s %7s %10s %9s\n", "cache", "compute_us", "wall_s",
	       "wait_ms/b", "after_fill", "waited", "fetched", "rows/s", "MB/s", "plan_ms/b",
	       "written");
	char list[256];
	snprintf(list, sizeof(list), "%s", c->compute);
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		uint64_t us = strtoull(tok, NULL, 10);
		struct run_out o, l;
		char dir[512];
		double load_s;
		ember_db *db = loaded_store(c, &t, st.total_rows, dir, sizeof(dir), &load_s);
		run_cache(db, &t, c->dim, cap, c->window, us, &o);
		printf("%-7s %10" PRIu64 " %8.2f %10.3f %10.3f %7u %9.0f %9.0f %7.1f %10.3f %9.0f\n",
		       "oracle", us, o.wall, o.wait_per_batch, o.wait_after_fill, o.waited, o.fetched,
		       o.rows_per_s, o.mb_per_s, o.plan_ms, o.written);
		drop_store(c, db, dir);
		char k[64];
		snprintf(k, sizeof(k), "compute%" PRIu64 "_oracle_wall_s", us);
		jkv("train", k, o.wall);
		if (c->lru) {
			db = loaded_store(c, &t, st.total_rows, dir, sizeof(dir), &load_s);
			run_lru(db, &t, c->dim, cap, us, &l);
			printf("%-7s %10" PRIu64 " %8.2f %10.3f %10.3f %7u %9.0f %9.0f %7.1f %10s %9.0f\n",
			       "lru", us, l.wall, l.wait_per_batch, l.wait_after_fill, l.waited,
			       l.fetched, l.rows_per_s, l.mb_per_s, "-", l.written);
			drop_store(c, db, dir);
		} else {
			memset(&l, 0, sizeof(l));
		}
		snprintf(k, sizeof(k), "compute%" PRIu64 "_oracle_wait_ms", us);
		jkv("train", k, o.wait_per_batch);
		snprintf(k, sizeof(k), "compute%" PRIu64 "_oracle_wait_after_fill_ms", us);
		jkv("train", k, o.wait_after_fill);
		if (c->lru) {
			snprintf(k, sizeof(k), "compute%" PRIu64 "_lru_wait_ms", us);
			jkv("train", k, l.wait_per_batch);
		}
		snprintf(k, sizeof(k), "compute%" PRIu64 "_oracle_rows_per_s", us);
		jkv("train", k, o.rows_per_s);
		snprintf(k, sizeof(k), "compute%" PRIu64 "_oracle_plan_ms", us);
		jkv("train", k, o.plan_ms);
		snprintf(k, sizeof(k), "compute%" PRIu64 "_oracle_fetched", us);
		jkv("train", k, o.fetched);
		if (c->lru) {
			snprintf(k, sizeof(k), "compute%" PRIu64 "_lru_fetched", us);
			jkv("train", k, l.fetched);
		}
	}
	sim_trace_free(&st);
	trace_free(&t);
}

int main(int argc, char **argv)
{
	struct cfg c = {.parts = "plan,sim,train", .seed = 1, .skew = 1.05, .plan_bs = 16384,
			.plan_nb = 160, .plan_rep = 5, .plan_window = 100, .plan_scale = 1.0, .sim_bs = 1024, .sim_nb = 400,
			.window = 100, .sim_scale = 0.02, .bs = 512, .nb = 100, .dim = 16,
			.scale = 0.01, .cap_frac = 0.05, .compute = "0,10000,30000", .mem_mb = 8, .lru = 1};
	for (int i = 1; i + 1 < argc || (i < argc && (fprintf(stderr, "missing value\n"), 0));
	     i += 2) {
		const char *a = argv[i], *v = argv[i + 1];
		if (!strcmp(a, "--parts")) c.parts = v;
		else if (!strcmp(a, "--seed")) c.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--skew")) c.skew = atof(v);
		else if (!strcmp(a, "--plan-batch-size")) c.plan_bs = (uint32_t)atoi(v);
		else if (!strcmp(a, "--plan-batches")) c.plan_nb = (uint32_t)atoi(v);
		else if (!strcmp(a, "--plan-scale")) c.plan_scale = atof(v);
		else if (!strcmp(a, "--plan-repeat")) c.plan_rep = (uint32_t)atoi(v);
		else if (!strcmp(a, "--plan-window")) c.plan_window = (uint32_t)atoi(v);
		else if (!strcmp(a, "--plan-capacities")) c.plan_caps = v;
		else if (!strcmp(a, "--sim-batch-size")) c.sim_bs = (uint32_t)atoi(v);
		else if (!strcmp(a, "--sim-batches")) c.sim_nb = (uint32_t)atoi(v);
		else if (!strcmp(a, "--sim-scale")) c.sim_scale = atof(v);
		else if (!strcmp(a, "--window")) c.window = (uint32_t)atoi(v);
		else if (!strcmp(a, "--batch-size")) c.bs = (uint32_t)atoi(v);
		else if (!strcmp(a, "--batches")) c.nb = (uint32_t)atoi(v);
		else if (!strcmp(a, "--scale")) c.scale = atof(v);
		else if (!strcmp(a, "--dim")) c.dim = (uint32_t)atoi(v);
		else if (!strcmp(a, "--capacity-frac")) c.cap_frac = atof(v);
		else if (!strcmp(a, "--compute-us")) snprintf(c.compute, sizeof(c.compute), "%s", v);
		else if (!strcmp(a, "--mem-budget")) c.mem_mb = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--dir")) c.dir = v;
		else if (!strcmp(a, "--json")) c.json = v;
		else if (!strcmp(a, "--lru")) c.lru = atoi(v) != 0;
		else if (!strcmp(a, "--dump-trace")) c.dump_trace = v;
		else {
			fprintf(stderr, "ember-cache-bench: unknown option %s (see the file's header)\n", a);
			return 2;
		}
	}
	if (!c.plan_bs || !c.plan_nb || !c.plan_rep || c.plan_rep > PLAN_REP_MAX || !c.plan_window || !c.sim_bs || !c.sim_nb || !c.window || !c.bs || !c.nb ||
	    !c.dim || c.dim > 1024 || !(c.cap_frac > 0) || !c.mem_mb) {
		fprintf(stderr, "ember-cache-bench: bad option value\n");
		return 2;
	}
	if (c.json && !(jf = fopen(c.json, "w")))
		die(c.json, -errno);
	if (jf)
		fprintf(jf, "[\n");
	printf("ember-cache-bench %s: seed %" PRIu64 ", skew %.2f\n", ember_version(), c.seed, c.skew);
	if (strstr(c.parts, "plan"))
		run_plan(&c);
	if (strstr(c.parts, "sim"))
		run_sim(&c);
	if (strstr(c.parts, "train"))
		run_train(&c);
	if (jf) {
		fprintf(jf, "\n]\n");
		fclose(jf);
	}
	return 0;
}
