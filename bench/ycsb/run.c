/*
 * run.c - the load and run phases of the YCSB driver.
 *
 * Run phase, per worker thread:
 *   1. thread_init (an Ember session, ...), then pre-generate the whole operation
 *      array and fill the key / value buffers -- timed on its own as the generator's
 *      rate, never inside the measurement;
 *   2. wait on the start barrier with the other workers and the main thread (the
 *      main thread samples /proc/self/io just before it arrives);
 *   3. run the array: one engine call per operation, or one read_batch per run of
 *      up to `batch` consecutive reads; time 1 operation in 64 (or 1 batch in
 *      64 / batch) with clock_gettime; stop at the op count or the deadline;
 *   4. thread_fini after the end timestamp.
 * With --inflight K, step 3 is run_inflight.c's loop instead: K operations of
 * any kind in flight through the engine's start() / poll().
 * What runs inside the timed loop besides the engine call: decoding the 8-byte
 * operation, writing the 8 key bytes (and, for updates, 8 counter bytes of the
 * value), the shared insert counter (one atomic add per insert, as YCSB's insert
 * key sequence), and the clock reads on sampled operations. With --verify, also
 * writing whole self-checking values and checking every value read (value.h):
 * a correctness mode, not one to time.
 *
 * --verify's exact versions (value.h): updates and read-modify-writes of key k are
 * made by thread k % threads only (own_key), which publishes the version after the
 * write returns; every read is checked against the versions published before it
 * began and after it ended. EMBER_YCSB_STALE_READ=N (for the driver's own test)
 * makes each thread serve its first read after N checked ones, of a key with a
 * version above 0, as if from the previous version: the run must then fail.
 */
#include "run.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_int.h"
#include "stats.h"

static void worker_free(worker *w)
{
	free(w->ops);
	free(w->key_mem);
	free(w->ukey);
	free(w->val);
	free(w->read_mem);
	free(w->keys);
	free(w->klens);
	free(w->bufs);
	free(w->caps);
	free(w->vlens);
	free(w->status);
	free(w->before);
	ycsb_inflight_free(w);
}

/* Buffers for up to `batch` keys and reads at once. 0 or -1 (out of memory). */
static int worker_buffers(worker *w, unsigned batch, size_t key_size, size_t value_size,
			  uint64_t seed)
{
	size_t cap = value_size + READ_SLACK;

	w->key_mem = calloc(batch, key_size); /* zero: the padding after the 8 bytes */
	w->ukey = calloc(1, key_size);
	w->val = malloc(value_size > 0 ? value_size : 1);
	w->read_mem = malloc(batch * cap);
	w->keys = calloc(batch, sizeof(*w->keys));
	w->klens = calloc(batch, sizeof(*w->klens));
	w->bufs = calloc(batch, sizeof(*w->bufs));
	w->caps = calloc(batch, sizeof(*w->caps));
	w->vlens = calloc(batch, sizeof(*w->vlens));
	w->status = calloc(batch, sizeof(*w->status));
	w->before = calloc(batch, sizeof(*w->before));
	if (w->before == NULL || w->key_mem == NULL || w->ukey == NULL || w->val == NULL || w->read_mem == NULL || w->keys == NULL ||
	    w->klens == NULL || w->bufs == NULL || w->caps == NULL || w->vlens == NULL ||
	    w->status == NULL)
		return -1;
	for (unsigned i = 0; i < batch; i++) {
		w->keys[i] = w->key_mem + (size_t)i * key_size;
		w->klens[i] = key_size;
		w->bufs[i] = w->read_mem + (size_t)i * cap;
		w->caps[i] = cap;
	}
	fill_random(w->val, value_size, seed);
	memset(w->read_mem, 0, batch * cap); /* fault the pages in before timing */
	return 0;
}

/*
 * --verify: turn one read's result into a verdict. An absent key is a failure (the
 * driver only names keys that were loaded or inserted and acknowledged), and so is
 * a value that fails ycsb_value_check(). The first failure of the thread is
 * described on stderr. Returns 0, YCSB_EVERIFY, or rc when rc is an engine error.
 */
int ycsb_verify_read(worker *w, int rc, const unsigned char *buf, size_t vlen,
		       uint64_t keyno, uint64_t before)
{
	const ycsb_run_spec *s = w->spec;
	char why[192];

	if (rc < 0)
		return rc;
	if (rc == YCSB_NOTFOUND) {
		snprintf(why, sizeof(why), "absent, though it was loaded or inserted");
	} else {
		w->verified++;
		if (ycsb_value_check(buf, vlen, s->value_size, keyno, why, sizeof(why)) < 0)
			goto bad;
		if (keyno >= s->nversions)
			return 0;
		uint64_t got = ycsb_get_le64(buf);
		if (w->stale_at && w->verified >= w->stale_at && got > 0) {
			got--; /* EMBER_YCSB_STALE_READ: as if the previous version */
			w->stale_at = 0;
		}
		/* acquire: pairs with the owner's release after its write returned */
		uint64_t after = atomic_load_explicit(&s->versions[keyno], memory_order_acquire);
		if (ycsb_version_check(got, before, after, keyno % s->threads == w->idx, why,
				       sizeof(why)) == 0)
			return 0;
	}
bad:
	if (w->errors == 0)
		fprintf(stderr, "ember-ycsb: %s: verify: thread %u, key %llu: %s\n",
			w->spec->engine->name, w->idx, (unsigned long long)keyno, why);
	return YCSB_EVERIFY;
}

/* The value a write of key keyno stores: self-checking under --verify, with the
 * key's next version (the caller owns the key). */
static inline void write_value(worker *w, uint64_t keyno, uint64_t stamp)
{
	const ycsb_run_spec *s = w->spec;

	if (s->verify)
		ycsb_value_fill(w->val, s->value_size, keyno, ycsb_splitmix64(&w->gen_state),
				version_of(s, keyno) + 1);
	else
		stamp_value(w->val, s->value_size, stamp);
}

/* With over_updates: may the update at ops[i] run before the k reads collected so
 * far? Only if none of them reads its key (each read then returns what it would
 * have in order). */
static int update_may_pass(const worker *w, uint64_t i, uint64_t k)
{
	const ycsb_run_spec *s = w->spec;
	uint64_t keyno = own_key(w, op_key(w->ops[i], s->inserts));

	for (uint64_t j = 0; j < k; j++)
		if (ycsb_get_le64(w->keys[j]) == keyno)
			return 0;
	return 1;
}

/* Up to `batch` consecutive reads starting at ops[pos], as one batch (with
 * over_updates, updates of other keys between them are applied at once, in order,
 * on their own key buffer). Returns the number of operations done; *stop set on an
 * error. */
static uint64_t run_read_batch(worker *w, void *ctx, uint64_t pos, uint64_t room,
			       int sample, int *stop)
{
	const ycsb_run_spec *s = w->spec;
	const ycsb_engine *e = s->engine;
	uint64_t k = 0, n = 0, t0 = 0;
	int rc = 0;

	while (k < s->batch && n < room && pos + n < w->nops && !*stop) {
		uint64_t op = w->ops[pos + n];

		if (ycsb_op_kind(op) == YCSB_OP_READ) {
			ycsb_key_format(w->key_mem + k * s->key_size, op_key(op, s->inserts));
			k++;
			n++;
			continue;
		}
		if (!s->over_updates || ycsb_op_kind(op) != YCSB_OP_UPDATE ||
		    !update_may_pass(w, pos + n, k))
			break;
		uint64_t keyno = own_key(w, op_key(op, s->inserts)), u0 = 0;
		int usample = (w->usamples++ & (YCSB_SAMPLE_EVERY - 1)) == 0;

		ycsb_key_format(w->ukey, keyno);
		write_value(w, keyno, w->done[YCSB_OP_UPDATE]);
		if (usample)
			u0 = ycsb_now_ns();
		rc = e->update(ctx, w->ukey, s->key_size, w->val, s->value_size);
		if (usample)
			ycsb_hist_add(&w->hist[YCSB_OP_UPDATE], ycsb_now_ns() - u0);
		if (rc == 0)
			version_publish(s, keyno, version_of(s, keyno) + 1);
		*stop = note_rc(w, rc, YCSB_OP_UPDATE, keyno);
		w->done[YCSB_OP_UPDATE]++;
		n++;
	}
	if (k == 0)
		return n;
	if (s->verify)
		for (uint64_t i = 0; i < k; i++)
			w->before[i] = version_of(s, ycsb_get_le64(w->keys[i]));
	if (sample)
		t0 = ycsb_now_ns();
	if (e->read_batch != NULL) {
		rc = e->read_batch(ctx, k, (const void *const *)w->keys, w->klens,
				   (void *const *)w->bufs, w->caps, w->vlens, w->status);
	} else {
		for (uint64_t i = 0; i < k; i++)
			w->status[i] = e->read(ctx, w->keys[i], w->klens[i], w->bufs[i],
					       w->caps[i], &w->vlens[i]);
	}
	if (sample)
		ycsb_hist_add(&w->hist[YCSB_LAT_READ_BATCH], ycsb_now_ns() - t0);
	if (rc < 0) {
		*stop = note_rc(w, rc, YCSB_LAT_READ_BATCH, ycsb_get_le64(w->keys[0]));
		w->done[YCSB_OP_READ] += k;
		return n;
	}
	for (uint64_t i = 0; i < k; i++) {
		uint64_t keyno = ycsb_get_le64(w->keys[i]); /* as formatted above */
		int st = w->status[i];

		if (s->verify)
			st = ycsb_verify_read(w, st, w->bufs[i], w->vlens[i], keyno, w->before[i]);
		if (note_rc(w, st, YCSB_OP_READ, keyno))
			*stop = 1;
	}
	w->done[YCSB_OP_READ] += k;
	return n;
}

/* The timed loop. */
static void run_ops(worker *w, void *ctx)
{
	const ycsb_run_spec *s = w->spec;
	const ycsb_engine *e = s->engine;
	uint64_t limit = s->ops != 0 ? w->nops : UINT64_MAX;
	unsigned char *key = w->key_mem;
	size_t cap = w->caps[0];
	uint64_t batch_every = s->batch >= YCSB_SAMPLE_EVERY ? 1 : YCSB_SAMPLE_EVERY / s->batch;
	uint64_t done = 0, pos = 0, next_check = 0, singles = 0, batches = 0, deadline;
	int stop = 0;

	w->t_start = ycsb_now_ns();
	deadline = s->seconds > 0 ? w->t_start + (uint64_t)(s->seconds * 1e9) : UINT64_MAX;
	while (done < limit && !stop) {
		uint64_t op, keyno, t0 = 0;
		unsigned kind;
		int sample, rc;

		if (done >= next_check) {
			if (deadline != UINT64_MAX && ycsb_now_ns() >= deadline)
				break;
			next_check = done + 256;
		}
		if (pos == w->nops) {
			pos = 0;
			w->wraps++;
		}
		op = w->ops[pos];
		kind = ycsb_op_kind(op);
		if (kind == YCSB_OP_READ && s->batch > 1) {
			uint64_t k = run_read_batch(w, ctx, pos, limit - done,
						    batches++ % batch_every == 0, &stop);

			done += k;
			pos += k;
			continue;
		}
		sample = (singles++ & (YCSB_SAMPLE_EVERY - 1)) == 0;
		if (kind == YCSB_OP_INSERT) {
			keyno = ycsb_keyseq_next(s->inserts);
			if (keyno == UINT64_MAX) {
				stop = note_rc(w, -EOVERFLOW, kind, 0);
				break;
			}
		} else {
			keyno = op_key(op, s->inserts);
			if (kind != YCSB_OP_READ)
				keyno = own_key(w, keyno);
		}
		ycsb_key_format(key, keyno);
		if (sample)
			t0 = ycsb_now_ns();
		switch (kind) {
		case YCSB_OP_READ: {
			size_t vlen;
			uint64_t before = version_of(s, keyno);

			rc = e->read(ctx, key, s->key_size, w->bufs[0], cap, &vlen);
			if (s->verify)
				rc = ycsb_verify_read(w, rc, w->bufs[0], vlen, keyno, before);
			break;
		}
		case YCSB_OP_UPDATE:
			write_value(w, keyno, done);
			rc = e->update(ctx, key, s->key_size, w->val, s->value_size);
			if (rc == 0)
				version_publish(s, keyno, version_of(s, keyno) + 1);
			break;
		case YCSB_OP_INSERT:
			if (s->verify) /* a new key: version 0 */
				ycsb_value_fill(w->val, s->value_size, keyno,
						ycsb_splitmix64(&w->gen_state), 0);
			else
				stamp_value(w->val, s->value_size, keyno);
			rc = e->insert(ctx, key, s->key_size, w->val, s->value_size);
			ycsb_keyseq_ack(s->inserts, keyno);
			break;
		default:
			rc = e->rmw(ctx, key, s->key_size, s->value_size);
			if (rc == 0) /* the owner's rmw adds 1 to its own last version */
				version_publish(s, keyno, version_of(s, keyno) + 1);
			break;
		}
		if (sample)
			ycsb_hist_add(&w->hist[kind], ycsb_now_ns() - t0);
		stop = note_rc(w, rc, kind, keyno);
		w->done[kind]++;
		done++;
		pos++;
	}
	w->t_end = ycsb_now_ns();
}

static void *run_worker(void *arg)
{
	worker *w = arg;
	const ycsb_run_spec *s = w->spec;
	uint64_t seed = s->seed ^ ((uint64_t)w->idx << 32);
	void *ctx = NULL;
	int rc;

	rc = s->engine->thread_init(s->db, &ctx);
	if (rc < 0) {
		w->rc = rc;
		ctx = NULL;
	}
	if (s->ops != 0)
		w->nops = s->ops / s->threads + (w->idx < s->ops % s->threads);
	else
		w->nops = s->pregen_ops;
	if (s->verify && getenv("EMBER_YCSB_STALE_READ") != NULL)
		w->stale_at = strtoull(getenv("EMBER_YCSB_STALE_READ"), NULL, 10) + 1;
	if (w->rc == 0) {
		ycsb_pregen p = { s->wl, s->dist, s->theta, s->key_count, s->threads, 0 };
		uint64_t t0 = ycsb_now_ns();

		p.seed = ycsb_splitmix64(&seed);
		w->gen_state = ycsb_splitmix64(&seed);
		w->ops = malloc((w->nops > 0 ? w->nops : 1) * sizeof(*w->ops));
		if (w->ops == NULL || worker_buffers(w, s->batch, s->key_size, s->value_size,
						     ycsb_splitmix64(&seed)) < 0)
			w->rc = -ENOMEM;
		else if (ycsb_pregen_fill(&p, w->ops, w->nops) < 0)
			w->rc = -EINVAL; /* theta out of range */
		w->gen_ns = ycsb_now_ns() - t0;
	}
	if (w->rc == 0 && s->inflight > 0 && ycsb_inflight_init(w) < 0)
		w->rc = -ENOMEM;
	pthread_barrier_wait(w->barrier);
	if (w->rc == 0 && w->nops > 0 && s->inflight > 0)
		ycsb_run_inflight(w, ctx);
	else if (w->rc == 0 && w->nops > 0)
		run_ops(w, ctx);
	if (ctx != NULL)
		s->engine->thread_fini(ctx);
	return NULL;
}

const char *ycsb_lat_class_name(int c)
{
	static const char *const names[YCSB_LAT_CLASSES] = {
		[YCSB_OP_READ] = "read",
		[YCSB_OP_UPDATE] = "update",
		[YCSB_OP_INSERT] = "insert",
		[YCSB_OP_RMW] = "rmw",
		[YCSB_LAT_READ_BATCH] = "read_batch",
	};

	if (c == YCSB_FAIL_POLL)
		return "poll";
	return c >= 0 && c < YCSB_LAT_CLASSES ? names[c] : "?";
}

static void lat_from_hist(ycsb_lat *l, const ycsb_hist *h)
{
	l->samples = h->count;
	l->mean_us = h->count ? (double)h->sum_ns / (double)h->count / 1e3 : 0;
	l->p50_us = (double)ycsb_hist_quantile(h, 0.50) / 1e3;
	l->p99_us = (double)ycsb_hist_quantile(h, 0.99) / 1e3;
	l->p999_us = (double)ycsb_hist_quantile(h, 0.999) / 1e3;
	l->max_us = (double)h->max_ns / 1e3;
}

static void run_collect(const ycsb_run_spec *s, worker *ws, ycsb_result *res)
{
	ycsb_hist *all = calloc(1, sizeof(*all));
	ycsb_hist *cls = calloc(YCSB_LAT_CLASSES, sizeof(*cls));
	uint64_t first = UINT64_MAX, last = 0, gen_ns = 0, gen_ops = 0;

	for (unsigned t = 0; t < s->threads; t++) {
		worker *w = &ws[t];

		for (unsigned k = 0; k < YCSB_OP_KINDS; k++) {
			res->done[k] += w->done[k];
			res->ops += w->done[k];
		}
		res->notfound += w->notfound;
		res->pending += w->pending;
		res->verified += w->verified;
		res->errors += w->errors;
		res->wraps += w->wraps;
		if (w->rc < 0 && res->first_error == 0) {
			res->first_error = w->rc;
			res->fail_kind = w->fail_kind;
			res->fail_key = w->fail_key;
			res->fail_index = w->fail_index;
			res->fail_thread = t;
		}
		if (w->t_start != 0 && w->t_start < first)
			first = w->t_start;
		if (w->t_end > last)
			last = w->t_end;
		gen_ns += w->gen_ns;
		gen_ops += w->nops;
		if (w->nops > res->pregen_per_thread)
			res->pregen_per_thread = w->nops;
		for (unsigned c = 0; c < YCSB_LAT_CLASSES && all != NULL && cls != NULL; c++) {
			ycsb_hist_merge(&cls[c], &w->hist[c]);
			ycsb_hist_merge(all, &w->hist[c]);
		}
	}
	res->seconds = last > first ? (double)(last - first) / 1e9 : 0;
	res->mops = res->seconds > 0 ? (double)res->ops / res->seconds / 1e6 : 0;
	res->gen_mops = gen_ns > 0 ? (double)gen_ops / ((double)gen_ns / 1e3) : 0;
	if (all != NULL && cls != NULL) {
		lat_from_hist(&res->lat, all);
		for (unsigned c = 0; c < YCSB_LAT_CLASSES; c++)
			lat_from_hist(&res->lat_class[c], &cls[c]);
	}
	free(all);
	free(cls);
}

int ycsb_run(const ycsb_run_spec *s, ycsb_result *res)
{
	worker *ws = calloc(s->threads, sizeof(*ws));
	pthread_barrier_t barrier;
	uint64_t rd0 = 0, wr0 = 0, rd1 = 0, wr1 = 0;
	unsigned started = 0;
	int io_ok, rc = 0;

	memset(res, 0, sizeof(*res));
	res->engine = s->engine->name;
	res->workload = s->wl->name;
	res->dist = s->dist;
	res->theta = s->theta;
	res->threads = s->threads;
	res->batch = s->batch;
	res->over_updates = s->over_updates;
	res->inflight = s->inflight;
	res->inflight_async = s->inflight > 0;
	res->key_size = s->key_size;
	res->value_size = s->value_size;
	res->key_count = s->key_count;
	res->repeats = 1;
	if (ws == NULL)
		return -ENOMEM;
	pthread_barrier_init(&barrier, NULL, s->threads + 1);
	res->fail_kind = -1;
	res->rss_per_run = ycsb_peak_rss_reset() == 0;
	for (; started < s->threads; started++) {
		ws[started].fail_kind = -1;
		ws[started].spec = s;
		ws[started].idx = started;
		ws[started].barrier = &barrier;
		if (pthread_create(&ws[started].tid, NULL, run_worker, &ws[started]) != 0) {
			/* The barrier counts on every worker: without them all, give up
			 * loudly rather than hang. */
			fprintf(stderr, "ember-ycsb: pthread_create failed for worker %u\n",
				started);
			abort();
		}
	}
	/* Workers are generating; none passes the barrier before we arrive. */
	io_ok = ycsb_proc_io(&rd0, &wr0) == 0;
	pthread_barrier_wait(&barrier);
	for (unsigned t = 0; t < started; t++)
		pthread_join(ws[t].tid, NULL);
	io_ok = io_ok && ycsb_proc_io(&rd1, &wr1) == 0;
	pthread_barrier_destroy(&barrier);
	ycsb_keyseq_settle(s->inserts);

	run_collect(s, ws, res);
	res->peak_rss_kib = ycsb_peak_rss_kib();
	res->io_ok = io_ok;
	if (io_ok && res->ops > 0) {
		res->read_bytes_per_op = (double)(rd1 - rd0) / (double)res->ops;
		res->write_bytes_per_op = (double)(wr1 - wr0) / (double)res->ops;
	}
	rc = res->first_error;
	for (unsigned t = 0; t < s->threads; t++)
		worker_free(&ws[t]);
	free(ws);
	return rc;
}

/* ---- load phase ---- */

typedef struct loader {
	const ycsb_engine *e;
	void *db;
	uint64_t first, end; /* keys [first, end) */
	size_t key_size, value_size;
	uint64_t seed;
	int verify;
	pthread_barrier_t *barrier;
	pthread_t tid;
	int rc;
} loader;

static void *load_worker(void *arg)
{
	loader *l = arg;
	unsigned char *key = calloc(1, l->key_size);
	unsigned char *val = malloc(l->value_size > 0 ? l->value_size : 1);
	void *ctx = NULL;
	uint64_t gen_state = l->seed * 0x9e3779b97f4a7c15ull;
	int rc = key == NULL || val == NULL ? -ENOMEM : l->e->thread_init(l->db, &ctx);

	if (rc == 0)
		fill_random(val, l->value_size, l->seed);
	pthread_barrier_wait(l->barrier);
	for (uint64_t k = l->first; rc == 0 && k < l->end; k++) {
		ycsb_key_format(key, k);
		if (l->verify)
			ycsb_value_fill(val, l->value_size, k, ycsb_splitmix64(&gen_state), 0);
		else
			stamp_value(val, l->value_size, k);
		rc = l->e->insert(ctx, key, l->key_size, val, l->value_size);
	}
	if (ctx != NULL)
		l->e->thread_fini(ctx);
	l->rc = rc;
	free(key);
	free(val);
	return NULL;
}

int ycsb_load(const ycsb_engine *e, void *db, uint64_t records, size_t key_size,
	      size_t value_size, unsigned threads, uint64_t seed, int verify,
	      double *seconds)
{
	loader *ls = calloc(threads, sizeof(*ls));
	pthread_barrier_t barrier;
	uint64_t t0;
	int rc = 0;

	if (ls == NULL)
		return -ENOMEM;
	pthread_barrier_init(&barrier, NULL, threads + 1);
	for (unsigned t = 0; t < threads; t++) {
		ls[t] = (loader){ .e = e, .db = db, .key_size = key_size,
				  .value_size = value_size, .barrier = &barrier,
				  .verify = verify,
				  .first = records * t / threads,
				  .end = records * (t + 1) / threads,
				  .seed = seed + 0x1000 + t };
		if (pthread_create(&ls[t].tid, NULL, load_worker, &ls[t]) != 0) {
			fprintf(stderr, "ember-ycsb: pthread_create failed for loader %u\n", t);
			abort();
		}
	}
	pthread_barrier_wait(&barrier);
	t0 = ycsb_now_ns();
	for (unsigned t = 0; t < threads; t++) {
		pthread_join(ls[t].tid, NULL);
		if (ls[t].rc < 0 && rc == 0)
			rc = ls[t].rc;
	}
	*seconds = (double)(ycsb_now_ns() - t0) / 1e9;
	pthread_barrier_destroy(&barrier);
	free(ls);
	return rc;
}

/* ---- --verify: the final read-back of every key ---- */

int ycsb_readback_check(const ycsb_engine *e, uint64_t k, int rc, const unsigned char *buf,
			size_t vlen, size_t value_size, const _Atomic uint64_t *versions,
			uint64_t nversions, uint64_t *checked)
{
	char why[192];

	if (rc == YCSB_NOTFOUND) {
		fprintf(stderr, "ember-ycsb: %s: verify: key %llu is absent\n", e->name,
			(unsigned long long)k);
		return YCSB_EVERIFY;
	}
	if (rc < 0)
		return rc;
	++*checked;
	if (ycsb_value_check(buf, vlen, value_size, k, why, sizeof(why)) < 0 ||
	    (k < nversions &&
	     /* relaxed: every writer was joined before this read-back */
	     ycsb_version_check(ycsb_get_le64(buf),
				atomic_load_explicit(&versions[k], memory_order_relaxed),
				atomic_load_explicit(&versions[k], memory_order_relaxed), 1, why,
				sizeof(why)) < 0)) {
		fprintf(stderr, "ember-ycsb: %s: verify: key %llu: %s\n", e->name,
			(unsigned long long)k, why);
		return YCSB_EVERIFY;
	}
	return 0;
}

int ycsb_verify_all(const ycsb_engine *e, void *db, uint64_t keys, size_t key_size,
		    const _Atomic uint64_t *versions, uint64_t nversions,
		    size_t value_size, unsigned inflight, uint64_t *checked)
{
	size_t cap = value_size + READ_SLACK;
	unsigned char *key, *buf;
	void *ctx = NULL;
	int rc;

	*checked = 0;
	if (inflight > 0 && e->start != NULL)
		return ycsb_verify_all_inflight(e, db, keys, key_size, versions, nversions,
						value_size, inflight, checked);
	key = calloc(1, key_size);
	buf = malloc(cap);
	rc = key == NULL || buf == NULL ? -ENOMEM : e->thread_init(db, &ctx);
	for (uint64_t k = 0; rc == 0 && k < keys; k++) {
		size_t vlen = 0;

		ycsb_key_format(key, k);
		rc = e->read(ctx, key, key_size, buf, cap, &vlen);
		rc = ycsb_readback_check(e, k, rc, buf, vlen, value_size, versions, nversions,
					 checked);
	}
	if (ctx != NULL)
		e->thread_fini(ctx);
	free(key);
	free(buf);
	return rc;
}
