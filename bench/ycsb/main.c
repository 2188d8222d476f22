/*
 * main.c - ember-ycsb: YCSB core workloads A, B, C, D and F against Ember, and
 * against RocksDB and LMDB when they were found at build time.
 *
 * For each engine: open a store in a fresh directory, load the records once, then
 * for each workload, each thread count and each repetition run one timed phase on
 * the same store (D's inserts carry over: later runs see the grown key space).
 * Each configuration's median run (by throughput) is printed as a table row and
 * kept for the JSON file.
 *
 * --verify makes every value self-checking (value.h) and gives each key one writer
 * for updates, so that each read during the runs is checked for the exact version
 * it may return (value.h, "Exact versions"); after an engine's last run every key
 * is read back once, at exactly its last version.
 * --disk-probe measures the disk's random-read rate (diskprobe.h) in the store
 * directory before the first engine and after the last, and the table puts each
 * run next to the first measurement.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ember.h>

#include "diskprobe.h"
#include "options.h"
#include "report.h"
#include "run.h"
#include "workload.h"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0)
		fprintf(stderr, "ember-ycsb: cannot remove %s: %s\n", path, strerror(errno));
	return 0;
}

static void rm_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The directory an engine's store lives in: <base>/<engine>, made empty. A
 * --dir given by the user keeps its stores at exit, so an existing <engine>
 * subdirectory is only wiped if it carries our marker file. */
static int engine_dir(const char *base, const char *engine, char *out, size_t cap)
{
	char marker[4096];
	struct stat st;
	FILE *m;
	int n = snprintf(out, cap, "%s/%s", base, engine);

	if (n < 0 || (size_t)n >= cap ||
	    snprintf(marker, sizeof(marker), "%s.ember-ycsb", out) >= (int)sizeof(marker))
		return -ENAMETOOLONG;
	if (stat(out, &st) == 0) {
		if (stat(marker, &st) != 0) {
			fprintf(stderr,
				"ember-ycsb: %s exists and was not made by ember-ycsb; "
				"remove it or pick another --dir\n", out);
			return -EEXIST;
		}
		rm_tree(out);
	}
	if (mkdir(out, 0755) != 0)
		return -errno;
	m = fopen(marker, "w"); /* beside the store: engines want their dir clean */
	if (m != NULL)
		fclose(m);
	return 0;
}

static int cmp_mops(const void *a, const void *b)
{
	double x = (*(const ycsb_result *const *)a)->mops;
	double y = (*(const ycsb_result *const *)b)->mops;

	return x < y ? -1 : x > y;
}

/* What the engines' child processes report back: it lives in a MAP_SHARED
 * mapping made before the forks, and only one child runs at a time. */
typedef struct session_state {
	const ycsb_config *cfg;
	size_t nresults;
	int gen_reported;
	int any_batch;
	int any_inflight;
	int any_wraps;
	int rss_per_run;
	double probe_rate;     /* --disk-probe's first measurement, reads/s (0: none) */
	ycsb_result results[];
} session_state;

/* An engine's error code in words; a failed --verify check has its own. */
static const char *err_text(const ycsb_engine *e, int rc)
{
	return rc == YCSB_EVERIFY ? "a value read back failed its check (see above)"
				  : e->strerror(rc);
}

/* R runs of one configuration; the median run (by throughput) lands in *out. */
static int run_config(session_state *st, ycsb_run_spec *spec, ycsb_result *out)
{
	const ycsb_config *cfg = st->cfg;
	ycsb_result *runs = calloc(cfg->repeat, sizeof(*runs));
	ycsb_result **order = calloc(cfg->repeat, sizeof(*order));
	uint64_t start_keys = ycsb_keyseq_count(spec->inserts);
	int rc = 0;

	if (runs == NULL || order == NULL) {
		free(runs);
		free(order);
		return -ENOMEM;
	}
	for (unsigned r = 0; r < cfg->repeat && rc == 0; r++) {
		spec->seed = cfg->seed * 1000003u + st->nresults * 101u + r;
		spec->key_count = ycsb_keyseq_count(spec->inserts);
		rc = ycsb_run(spec, &runs[r]);
		order[r] = &runs[r];
		if (!st->gen_reported && runs[r].gen_mops > 0) {
			printf("generator: %.1f M ops/s per thread (%s %s; arrays of %" PRIu64
			       " ops per thread, pre-generated before the clock starts)\n",
			       runs[r].gen_mops, ycsb_dist_name(spec->dist),
			       spec->dist == YCSB_DIST_UNIFORM ? "" : "with precomputed zeta",
			       runs[r].pregen_per_thread);
			st->gen_reported = 1;
		}
		if (rc < 0) {
			fprintf(stderr,
				"ember-ycsb: %s workload %c, %u threads, seed %" PRIu64 ": "
				"%s of key %" PRIu64 " (thread %u, after %" PRIu64
				" of its operations) failed: %s (%d)\n",
				spec->engine->name, spec->wl->name, spec->threads, spec->seed,
				ycsb_lat_class_name(runs[r].fail_kind), runs[r].fail_key,
				runs[r].fail_thread, runs[r].fail_index,
				err_text(spec->engine, rc), rc);
			*out = runs[r];
			break;
		}
	}
	if (rc == 0) {
		qsort(order, cfg->repeat, sizeof(*order), cmp_mops);
		*out = *order[cfg->repeat / 2];
		out->repeats = cfg->repeat;
		for (unsigned r = 0; r < cfg->repeat; r++)
			out->mops_runs[r] = runs[r].mops;
	}
	out->key_count = start_keys;
	free(runs);
	free(order);
	return rc;
}

static void print_config(const ycsb_config *cfg, const char *base, int temp)
{
	char b1[32], b2[32];

	printf("ember-ycsb %s: engines compiled in:", EMBER_VERSION_STRING);
	for (size_t i = 0; ycsb_engines[i] != NULL; i++)
		printf(" %s", ycsb_engines[i]->name);
	printf("\nrecords %" PRIu64 ", key %zu B, value %zu B; ", cfg->records, cfg->key_size,
	       cfg->value_size);
	if (cfg->ops != 0)
		printf("%" PRIu64 " ops per run%s", cfg->ops, cfg->seconds > 0 ? " or " : "");
	if (cfg->seconds > 0)
		printf("%.1f s per run", cfg->seconds);
	printf("; workloads ");
	for (unsigned i = 0; i < cfg->nworkloads; i++) {
		printf("%s%c", i ? "," : "", cfg->workloads[i]);
		if (cfg->wl_dist[i] >= 0 || cfg->wl_batch[i] > 0)
			printf(":%s", cfg->wl_dist[i] >= 0 ? ycsb_dist_name(cfg->wl_dist[i]) : "");
		if (cfg->wl_batch[i] > 0)
			printf(":%u", cfg->wl_batch[i]);
	}
	printf("; threads ");
	for (unsigned i = 0; i < cfg->nthreads; i++)
		printf("%s%u", i ? "," : "", cfg->threads[i]);
	printf("; batch %u%s", cfg->batch,
	       cfg->batch_over_updates ? " (reads batched past updates of other keys)" : "");
	if (cfg->inflight > 0)
		printf("; inflight %u per thread", cfg->inflight);
	printf("; repeat %u; seed %" PRIu64 "%s\n",
	       cfg->repeat, cfg->seed,
	       cfg->verify ? "; --verify: every value read is checked (not for timing)" : "");
	printf("memory budget %s%s; store dir %s%s\n",
	       cfg->log_memory ? ycsb_fmt_bytes(cfg->log_memory, b1, sizeof(b1))
			       : "engine default",
	       cfg->quick && cfg->log_memory ? " (--quick: sized to hold the data)" : "",
	       base, temp ? " (temporary, removed at exit)" : "");
	if (ycsb_raw_data_bytes(cfg) > ycsb_budget_bytes(cfg))
		printf("note: raw data (%s) exceeds the memory budget: expect disk reads; "
		       "engines keep to the budget where they can (see their settings)\n",
		       ycsb_fmt_bytes(ycsb_raw_data_bytes(cfg), b2, sizeof(b2)));
}

/* Load, then every workload x thread count, for one engine. */
static int bench_engine(session_state *st, const ycsb_engine *e, const char *base)
{
	const ycsb_config *cfg = st->cfg;
	ycsb_engine_params p = { 0 };
	char dir[3072], settings[YCSB_SETTINGS_CAP] = "";
	unsigned max_threads = cfg->load_threads;
	ycsb_keyseq inserts;
	void *db = NULL;
	double load_s = 0;
	uint64_t verified = 0;
	/* --verify: every loaded key's published version, and room for inserted ones */
	uint64_t nversions = cfg->verify ? cfg->records + (UINT64_C(1) << 20) : 0;
	_Atomic uint64_t *versions = NULL;
	int rc;

	if (nversions) {
		versions = calloc(nversions, sizeof(*versions)); /* the load writes version 0 */
		if (versions == NULL)
			return -ENOMEM;
	}
	for (unsigned i = 0; i < cfg->nthreads; i++)
		if (cfg->threads[i] > max_threads)
			max_threads = cfg->threads[i];
	rc = engine_dir(base, e->name, dir, sizeof(dir));
	if (rc < 0) {
		fprintf(stderr, "ember-ycsb: %s: cannot prepare %s/%s: %s\n", e->name, base,
			e->name, strerror(-rc));
		free(versions);
		return rc;
	}
	p.dir = dir;
	p.mem_budget = cfg->log_memory;
	p.index_buckets = cfg->index_buckets;
	p.read_cache = cfg->read_cache;
	p.rc_admit_first = cfg->rc_admit_first;
	p.cold_cache = cfg->cold_cache;
	p.cold_chunks = cfg->cold_chunks;
	p.segment_bytes = cfg->segment_bytes;
	p.records = cfg->records;
	p.key_size = cfg->key_size;
	p.value_size = cfg->value_size;
	p.max_threads = max_threads;
	p.max_batch = cfg->batch;
	for (unsigned i = 0; i < cfg->nworkloads; i++)
		if (cfg->wl_batch[i] > p.max_batch)
			p.max_batch = cfg->wl_batch[i];
	p.max_inflight = cfg->inflight;
	/* --inflight without start(): read batches of up to K (options.c refused
	 * the engines that have neither) */
	if (cfg->inflight > 0 && e->start == NULL && cfg->inflight > p.max_batch)
		p.max_batch = cfg->inflight;
	p.hot_log_only = cfg->ember_hot_log_only;
	p.bounded = ycsb_raw_data_bytes(cfg) > ycsb_budget_bytes(cfg);
	rc = e->open(&p, &db, settings, sizeof(settings));
	if (rc < 0) {
		fprintf(stderr, "ember-ycsb: %s: open %s: %s (%d)\n", e->name, dir,
			e->strerror(rc), rc);
		free(versions);
		return rc;
	}
	printf("\n[%s] %s\n", e->name, settings);
	rc = ycsb_load(e, db, cfg->records, cfg->key_size, cfg->value_size,
		       cfg->load_threads, cfg->seed, cfg->verify, &load_s);
	if (rc < 0) {
		fprintf(stderr, "ember-ycsb: %s: load: %s (%d)\n", e->name, e->strerror(rc), rc);
		goto undo_open;
	}
	printf("[%s] load: %" PRIu64 " records in %.2f s (%.3f Mops/s, %u threads)\n", e->name,
	       cfg->records, load_s, (double)cfg->records / load_s / 1e6, cfg->load_threads);
	rc = ycsb_keyseq_init(&inserts, cfg->records);
	if (rc < 0)
		goto undo_open;
	for (unsigned w = 0; w < cfg->nworkloads && rc == 0; w++) {
		const ycsb_workload *wl = ycsb_workload_find(cfg->workloads[w]);
		ycsb_dist dist = cfg->wl_dist[w] >= 0 ? (ycsb_dist)cfg->wl_dist[w]
				 : cfg->dist_set     ? cfg->dist
						     : wl->default_dist;
		unsigned batch = cfg->wl_batch[w] > 0 ? cfg->wl_batch[w] : cfg->batch;
		unsigned inflight = e->start != NULL ? cfg->inflight : 0;
		int over = cfg->batch_over_updates;

		if (cfg->inflight > 0 && e->start == NULL) {
			batch = cfg->inflight; /* the engine's stand-in (engine.h) */
			over = 1;
		}

		for (unsigned t = 0; t < cfg->nthreads && rc == 0; t++) {
			ycsb_run_spec spec = {
				.engine = e, .db = db, .wl = wl, .dist = dist,
				.theta = cfg->theta, .threads = cfg->threads[t],
				.batch = batch, .ops = cfg->ops, .seconds = cfg->seconds,
				.pregen_ops = cfg->pregen, .key_size = cfg->key_size,
				.value_size = cfg->value_size, .inserts = &inserts,
				.verify = cfg->verify,
				.versions = versions, .nversions = nversions,
				.over_updates = over && batch > 1,
				.inflight = inflight,
			};
			ycsb_result *res = &st->results[st->nresults];

			rc = run_config(st, &spec, res);
			snprintf(res->settings, sizeof(res->settings), "%s", settings);
			res->load_seconds = load_s;
			res->records = cfg->records;
			res->inflight = cfg->inflight;
			res->disk_reads_per_s = st->probe_rate;
			verified += res->verified;
			st->nresults++;
			st->any_batch |= batch > 1;
			st->any_inflight |= cfg->inflight > 0;
			st->any_wraps |= res->wraps > 0;
			st->rss_per_run = res->rss_per_run;
			if (w == 0 && t == 0) /* after the generator's line */
				ycsb_report_header(stdout, st->probe_rate > 0);
			ycsb_report_row(stdout, res);
		}
	}
	if (cfg->verify && rc == 0) {
		uint64_t keys = ycsb_keyseq_count(&inserts), checked = 0;

		rc = ycsb_verify_all(e, db, keys, cfg->key_size, versions, nversions,
				     cfg->value_size, cfg->inflight, &checked);
		printf("[%s] verify: %" PRIu64 " values checked during the runs; read-back of "
		       "all %" PRIu64 " keys: %s\n", e->name, verified, keys,
		       rc == 0 ? "every value intact" : "FAILED");
		if (rc < 0)
			fprintf(stderr, "ember-ycsb: %s: verify: read-back failed after %" PRIu64
				" keys: %s (%d)\n", e->name, checked, err_text(e, rc), rc);
	}
	if (e->stats != NULL) {
		char line[1024];

		e->stats(db, line, sizeof(line));
		printf("[%s] stats: %s\n", e->name, line);
	}
	ycsb_keyseq_destroy(&inserts);
undo_open:
	{
		int crc = e->close(db);

		if (crc < 0) {
			fprintf(stderr, "ember-ycsb: %s: close: %s (%d)\n", e->name,
				e->strerror(crc), crc);
			if (rc == 0)
				rc = crc;
		}
	}
	free(versions);
	return rc;
}

/*
 * Run bench_engine() in a child process: each engine gets a fresh address space,
 * so its peak RSS and /proc/self/io counts are its own, and a crash in one engine
 * is reported without losing the others' results. 0, or -1 if the child failed.
 */
static int bench_engine_isolated(session_state *st, const ycsb_engine *e, const char *base)
{
	pid_t pid;
	int wstatus;

	fflush(stdout); /* or the child would print our buffered output again */
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "ember-ycsb: fork: %s; running %s in-process\n",
			strerror(errno), e->name);
		return bench_engine(st, e, base) < 0 ? -1 : 0;
	}
	if (pid == 0) {
		int rc = bench_engine(st, e, base);

		fflush(stdout);
		fflush(stderr);
		_exit(rc < 0 ? 1 : 0);
	}
	while (waitpid(pid, &wstatus, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(wstatus)) {
		fprintf(stderr, "ember-ycsb: %s: the benchmark process died of signal %d (%s)\n",
			e->name, WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
		return -1;
	}
	return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 ? 0 : -1;
}

/* --probe-size, or the raw data size clamped to [256 MiB, 8 GiB] and to a quarter
 * of the free space: a file about the size of the store's data, so that the
 * probe's reads spread over as much of the disk as the engines' do. */
static uint64_t probe_file_bytes(const ycsb_config *cfg, const char *dir)
{
	uint64_t want = cfg->probe_size;
	struct statvfs vfs;

	if (want == 0) {
		want = ycsb_raw_data_bytes(cfg);
		if (want < (256ull << 20))
			want = 256ull << 20;
		if (want > (8ull << 30))
			want = 8ull << 30;
		if (statvfs(dir, &vfs) == 0 && want > (uint64_t)vfs.f_bavail * vfs.f_frsize / 4)
			want = (uint64_t)vfs.f_bavail * vfs.f_frsize / 4;
	}
	return want;
}

/* One probe measurement, printed; the rate (0 when it failed). */
static double probe_measure(ycsb_probe *p, const ycsb_config *cfg, const char *when,
			    double *p50_us)
{
	ycsb_probe_result r;
	char b[32];
	int rc = ycsb_probe_run(p, 32, cfg->probe_seconds, cfg->seed, &r);

	if (rc < 0) {
		fprintf(stderr, "ember-ycsb: disk probe (%s): %s\n", when, strerror(-rc));
		return 0;
	}
	printf("disk probe (%s): %.0f random 4 KiB reads/s (O_DIRECT, io_uring, queue depth "
	       "%u, %.1f s, p50 %.0f us, p99 %.0f us; %s file in %s)\n", when, r.reads_per_s,
	       r.depth, r.seconds, r.p50_us, r.p99_us,
	       ycsb_fmt_bytes(p->file_bytes, b, sizeof(b)), p->dir);
	fflush(stdout);
	*p50_us = r.p50_us;
	return r.reads_per_s;
}

int main(int argc, char **argv)
{
	ycsb_config cfg;
	session_state *st;
	size_t st_size;
	char tmpl[4096];
	const char *base, *tmpdir = getenv("TMPDIR");
	ycsb_probe probe = { .fd = -1 };
	ycsb_probe_report probe_rep = { 0 };
	int exit_now, status = 0;
	int rc = ycsb_config_parse(argc, argv, &cfg, &exit_now);

	if (exit_now)
		return rc;
	if (cfg.dir != NULL) {
		base = cfg.dir;
		if (mkdir(base, 0755) != 0 && errno != EEXIST) {
			fprintf(stderr, "ember-ycsb: mkdir %s: %s\n", base, strerror(errno));
			return 1;
		}
	} else {
		snprintf(tmpl, sizeof(tmpl), "%s/ember-ycsb-XXXXXX",
			 tmpdir != NULL && tmpdir[0] != '\0' ? tmpdir : "/tmp");
		base = mkdtemp(tmpl);
		if (base == NULL) {
			fprintf(stderr, "ember-ycsb: mkdtemp %s: %s\n", tmpl, strerror(errno));
			return 1;
		}
	}
	print_config(&cfg, base, cfg.dir == NULL);
	st_size = sizeof(*st) +
		  sizeof(ycsb_result) * cfg.nengines * cfg.nworkloads * cfg.nthreads;
	st = mmap(NULL, st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (st == MAP_FAILED) {
		fprintf(stderr, "ember-ycsb: mmap: %s\n", strerror(errno));
		status = 1;
		goto undo_dir;
	}
	st->cfg = &cfg; /* the children are forks: the same address holds cfg there */
	if (cfg.disk_probe) {
		rc = ycsb_probe_open(&probe, base, probe_file_bytes(&cfg, base));
		if (rc < 0) {
			fprintf(stderr, "ember-ycsb: disk probe: cannot make a file in %s: %s%s\n",
				base, strerror(-rc),
				rc == -EINVAL ? " (O_DIRECT refused: tmpfs? pick another --dir)" : "");
		} else {
			probe_rep.ran = 1;
			probe_rep.depth = 32;
			probe_rep.seconds = cfg.probe_seconds;
			probe_rep.file_bytes = probe.file_bytes;
			probe_rep.before = probe_measure(&probe, &cfg, "before the engines",
							  &probe_rep.before_p50_us);
			st->probe_rate = probe_rep.before;
		}
	}
	for (unsigned i = 0; i < cfg.nengines; i++)
		if (bench_engine_isolated(st, cfg.engines[i], base) < 0)
			status = 1;
	if (probe_rep.ran) {
		printf("\n");
		probe_rep.after = probe_measure(&probe, &cfg, "after the engines",
						&probe_rep.after_p50_us);
		if (probe_rep.before > 0 && probe_rep.after > 0)
			printf("disk probe: after / before = %.2f (the table uses the rate "
			       "before)\n", probe_rep.after / probe_rep.before);
		ycsb_probe_close(&probe);
	}
	printf("\n");
	ycsb_report_notes(stdout, st->any_batch, st->any_inflight, st->rss_per_run,
			  st->any_wraps, st->probe_rate > 0);
	if (cfg.json != NULL) {
		rc = ycsb_report_json(cfg.json, &cfg, st->results, st->nresults, &probe_rep);
		if (rc < 0) {
			fprintf(stderr, "ember-ycsb: writing %s: %s\n", cfg.json, strerror(-rc));
			status = 1;
		} else {
			printf("JSON: %s\n", cfg.json);
		}
	}
	munmap(st, st_size);
undo_dir:
	if (cfg.dir == NULL)
		rm_tree(base);
	return status;
}
