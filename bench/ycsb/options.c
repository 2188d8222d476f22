/*
 * options.c - ember-ycsb's command line: parsing, --quick, and defaults.
 */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "value.h"
#include "workload.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: ember-ycsb [options]\n"
"YCSB core workloads against Ember (and RocksDB / LMDB when compiled in).\n"
"\n"
"  --quick               1M records, 8-byte keys and values, workloads A then C,\n"
"                        zipfian 0.99, threads 1 and 2, 3 s each, log memory\n"
"                        sized to hold the data (~30 s). Other options override.\n"
"  --workload LIST       A, B, C, D, F or a list \"A,B,C\" (E: scans, unsupported);\n"
"                        an entry may carry its own --dist and --batch:\n"
"                        \"A,C:uniform:32\" runs A as set, then C uniform in\n"
"                        batches of 32 (\"C::16\": batch only)\n"
"  --records N           keys loaded before the runs (default 1000000)\n"
"  --ops N               operations per run, all threads together\n"
"  --seconds S           time limit per run (with --ops: whichever ends first;\n"
"                        neither given: --ops 1000000)\n"
"  --threads LIST        worker threads, e.g. 1 or \"1,2,4\" (default 1)\n"
"  --value-size B        bytes per value (default 100)\n"
"  --key-size B          bytes per key, >= 8: the key number as 8 little-endian\n"
"                        bytes, zero-padded (default 8)\n"
"  --dist D              zipfian | uniform | latest (default: the workload's own:\n"
"                        zipfian, latest for D)\n"
"  --theta X             Zipfian constant, 0 < X < 1 (default 0.99)\n"
"  --batch K             issue reads through read batches of up to K consecutive\n"
"                        reads (ember_get_batch) (default 1: no batching)\n"
"  --batch-over-updates  a read batch also reaches past updates of keys it does\n"
"                        not hold (each applied at once, in order), as K clients\n"
"                        of one thread would; an update of a key in the batch\n"
"                        ends it first, so every read returns what it would in\n"
"                        order. Batch column: K+\n"
"  --inflight K          each thread keeps K operations of any kind in flight\n"
"                        (1..1024), as K clients would: Ember's asynchronous\n"
"                        calls (ember_*_async, ember_session_poll/wait); 1 in\n"
"                        64 operations timed from start to completion. RocksDB,\n"
"                        whose C API has no asynchronous call, runs its reads\n"
"                        as MultiGet batches of up to K past updates (as --batch\n"
"                        K --batch-over-updates); LMDB refuses it. Not with\n"
"                        --batch. Batch column: ~K\n"
"  --engine LIST         ember | rocksdb | lmdb | all, or a list (default ember)\n"
"  --dir PATH            parent directory for the stores (default: a fresh\n"
"                        mkdtemp directory under $TMPDIR or /tmp, removed at the\n"
"                        end)\n"
"  --log-memory BYTES    the memory budget: Ember's hot-log memory, RocksDB's\n"
"                        block cache; suffixes K, M, G (default: Ember's default,\n"
"                        256 MiB). When the raw data (keys + values) is larger,\n"
"                        each engine is held to it as a whole where it can be\n"
"                        (Ember: memory_budget; RocksDB: cache + memtables,\n"
"                        O_DIRECT reads; LMDB cannot: see its settings line)\n"
"  --index-buckets N     Ember's hash buckets (default: next power of two of\n"
"                        records / 4; larger than memory, a quarter of the\n"
"                        budget)\n"
"  --repeat R            run each configuration R times, report the median\n"
"  --json FILE           also write every run as JSON\n"
"  --pregen N            operations pre-generated per thread when only --seconds\n"
"                        bounds a run (cycled if the run outlasts them; default\n"
"                        4194304)\n"
"  --load-threads N      threads for the load phase (default: the largest\n"
"                        --threads value)\n"
"  --seed N              random seed (default 1; printed)\n"
"  --ember-read-cache BYTES|off  Ember's read cache (read_cache_memory; larger\n"
"                        than memory it is part of the budget). Default:\n"
"                        larger than memory, what the chunk cache leaves of\n"
"                        what the store leaves; else off\n"
"  --ember-read-cache-admit first|second  which disk reads Ember's read\n"
"                        cache copies (read_cache_admit): every one, or a\n"
"                        record's second read within a recent window\n"
"                        (default second)\n"
"  --ember-segment-bytes BYTES  Ember's log_segment_bytes: each log as files of\n"
"                        this size (32M .. 1T, a power of two; default 0: one\n"
"                        file per log)\n"
"  --ember-cold-cache BYTES|off  Ember's cold index chunk cache\n"
"                        (cold_cache_memory, part of the budget). Default:\n"
"                        larger than memory, what the store leaves, up to\n"
"                        what holds every chunk; else Ember's own default\n"
"  --ember-cold-chunks N Ember's cold_index_chunks, a power of two (default:\n"
"                        larger than memory, records / 32 rounded up)\n"
"  --ember-memory MODE   larger than memory, what the budget bounds in Ember:\n"
"                        whole (default: memory_budget, the whole store, with\n"
"                        the cold tier and compaction) or hot-log (log_memory\n"
"                        only; hash index and cold-tier memory beside it)\n"
"  --verify              write self-checking values (key number, version,\n"
"                        generation, pattern; value size >= 24) and check every\n"
"                        value read, then read every key back at the end; each\n"
"                        key has one updating thread (key mod threads); a read\n"
"                        older than the version published before it began (a\n"
"                        stale read), or any wrong, torn or missing value, fails\n"
"                        the run (exit 1).\n"
"                        For correctness tests, not for timing\n"
"  --disk-probe          measure the disk's random 4 KiB O_DIRECT read rate\n"
"                        (io_uring, queue depth 32) in the store directory before\n"
"                        and after the engines, and print each run's throughput\n"
"                        as a multiple of it\n"
"  --probe-seconds S     length of each probe measurement (default 3)\n"
"  --probe-size BYTES    probe file size (default: the raw data size, at least\n"
"                        256 MiB, at most 8 GiB and a quarter of the free space)\n"
"  --list-engines        print the engines compiled in, one a line, and exit\n"
"  --help\n"
"\n"
"Counts (--records, --ops, --pregen, --index-buckets, --ember-cold-chunks) take\n"
"K/M/G as powers of 1000; sizes (--value-size, --key-size, --log-memory) as\n"
"powers of 1024.\n");
}

enum { NO_SUFFIX, BINARY_SUFFIX, DECIMAL_SUFFIX };

/* An unsigned integer; with a suffix mode, K/M/G/T multiply by 1024^n (sizes, an
 * optional trailing "B"/"iB" allowed) or 1000^n (counts). */
static int parse_u64(const char *s, uint64_t *out, int suffix)
{
	char *end;
	double mult = 1, k = suffix == DECIMAL_SUFFIX ? 1000.0 : 1024.0;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (end == s || errno != 0 || s[0] == '-')
		return -1;
	if (suffix != NO_SUFFIX && *end != '\0') {
		switch (toupper((unsigned char)*end)) {
		case 'K': mult = k; break;
		case 'M': mult = k * k; break;
		case 'G': mult = k * k * k; break;
		case 'T': mult = k * k * k * k; break;
		default: return -1;
		}
		end++;
		if (suffix == BINARY_SUFFIX &&
		    (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0))
			end += strlen(end);
	}
	if (*end != '\0')
		return -1;
	*out = (uint64_t)((double)v * mult);
	return 0;
}

static int parse_double(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return end == s || *end != '\0' || errno != 0 ? -1 : 0;
}

/* "A,C:uniform:32": workloads, each optionally with its own key chooser and read
 * batch size (empty fields keep the general ones: "C::16"). */
static int parse_workloads(const char *s, ycsb_config *cfg, int *want_e)
{
	char *copy = strdup(s), *save = NULL;
	int rc = 0;

	cfg->nworkloads = 0;
	if (copy == NULL)
		return -1;
	for (char *tok = strtok_r(copy, ", ", &save); tok != NULL && rc == 0;
	     tok = strtok_r(NULL, ", ", &save)) {
		const ycsb_workload *wl = ycsb_workload_find(tok[0]);
		unsigned i = cfg->nworkloads;
		char *dist = NULL, *batch = NULL;
		uint64_t b;

		if (wl == NULL || (tok[1] != '\0' && tok[1] != ':') || i == YCSB_MAX_LIST) {
			rc = -1;
			break;
		}
		cfg->wl_dist[i] = -1;
		cfg->wl_batch[i] = 0;
		if (tok[1] == ':') {
			dist = tok + 2;
			batch = strchr(dist, ':');
			if (batch != NULL)
				*batch++ = '\0';
		}
		if (dist != NULL && dist[0] != '\0') {
			ycsb_dist d;

			if (ycsb_dist_parse(dist, &d) < 0)
				rc = -1;
			else
				cfg->wl_dist[i] = (int)d;
		}
		if (batch != NULL && batch[0] != '\0') {
			if (parse_u64(batch, &b, NO_SUFFIX) < 0 || b == 0 || b > 4096)
				rc = -1;
			else
				cfg->wl_batch[i] = (unsigned)b;
		}
		if (wl->name == 'E')
			*want_e = 1;
		cfg->workloads[cfg->nworkloads++] = wl->name;
	}
	free(copy);
	return rc == 0 && cfg->nworkloads > 0 ? 0 : -1;
}

static int parse_threads(const char *s, ycsb_config *cfg)
{
	char *copy = strdup(s), *save = NULL;
	int rc = 0;

	cfg->nthreads = 0;
	if (copy == NULL)
		return -1;
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t t;

		if (parse_u64(tok, &t, NO_SUFFIX) < 0 || t == 0 || t > 256 ||
		    cfg->nthreads == YCSB_MAX_LIST) {
			rc = -1;
			break;
		}
		cfg->threads[cfg->nthreads++] = (unsigned)t;
	}
	free(copy);
	return rc == 0 && cfg->nthreads > 0 ? 0 : -1;
}

static int parse_engines(const char *s, ycsb_config *cfg)
{
	char *copy = strdup(s), *save = NULL;
	int rc = 0;

	cfg->nengines = 0;
	if (copy == NULL)
		return -1;
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && rc == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		if (strcmp(tok, "all") == 0) {
			cfg->nengines = 0;
			for (size_t i = 0; ycsb_engines[i] != NULL; i++)
				cfg->engines[cfg->nengines++] = ycsb_engines[i];
			continue;
		}
		const ycsb_engine *e = ycsb_engine_find(tok);

		if (e == NULL) {
			fprintf(stderr, "ember-ycsb: engine '%s' is not compiled in (have:", tok);
			for (size_t i = 0; ycsb_engines[i] != NULL; i++)
				fprintf(stderr, " %s", ycsb_engines[i]->name);
			fprintf(stderr, ")\n");
			rc = -1;
		} else if (cfg->nengines < YCSB_MAX_LIST) {
			cfg->engines[cfg->nengines++] = e;
		}
	}
	free(copy);
	return rc == 0 && cfg->nengines > 0 ? 0 : -1;
}

static uint64_t next_pow2(uint64_t n)
{
	uint64_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

/* Bytes one record takes in a log, roughly: a 32-byte header allowance, key and
 * value, 8-byte aligned. Only used to size --quick's log memory generously. */
static uint64_t record_estimate(const ycsb_config *cfg)
{
	return (32 + cfg->key_size + cfg->value_size + 7) & ~(uint64_t)7;
}

enum {
	OPT_WORKLOAD = 256, OPT_RECORDS, OPT_OPS, OPT_SECONDS, OPT_THREADS, OPT_VALUE_SIZE,
	OPT_KEY_SIZE, OPT_DIST, OPT_THETA, OPT_BATCH, OPT_DIR, OPT_LOG_MEMORY,
	OPT_INDEX_BUCKETS, OPT_COLD_CHUNKS, OPT_READ_CACHE, OPT_RC_ADMIT, OPT_COLD_CACHE, OPT_REPEAT, OPT_JSON, OPT_ENGINE, OPT_QUICK, OPT_PREGEN,
	OPT_LOAD_THREADS, OPT_SEED, OPT_VERIFY, OPT_BATCH_OVER, OPT_DISK_PROBE, OPT_PROBE_SECONDS,
	OPT_PROBE_SIZE, OPT_LIST_ENGINES, OPT_EMBER_MEMORY, OPT_SEGMENT, OPT_INFLIGHT, OPT_HELP,
};

static const struct option long_opts[] = {
	{ "workload", required_argument, NULL, OPT_WORKLOAD },
	{ "records", required_argument, NULL, OPT_RECORDS },
	{ "ops", required_argument, NULL, OPT_OPS },
	{ "seconds", required_argument, NULL, OPT_SECONDS },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "value-size", required_argument, NULL, OPT_VALUE_SIZE },
	{ "key-size", required_argument, NULL, OPT_KEY_SIZE },
	{ "dist", required_argument, NULL, OPT_DIST },
	{ "theta", required_argument, NULL, OPT_THETA },
	{ "batch", required_argument, NULL, OPT_BATCH },
	{ "dir", required_argument, NULL, OPT_DIR },
	{ "log-memory", required_argument, NULL, OPT_LOG_MEMORY },
	{ "index-buckets", required_argument, NULL, OPT_INDEX_BUCKETS },
	{ "ember-cold-chunks", required_argument, NULL, OPT_COLD_CHUNKS },
	{ "ember-read-cache", required_argument, NULL, OPT_READ_CACHE },
	{ "ember-read-cache-admit", required_argument, NULL, OPT_RC_ADMIT },
	{ "ember-cold-cache", required_argument, NULL, OPT_COLD_CACHE },
	{ "ember-segment-bytes", required_argument, NULL, OPT_SEGMENT },
	{ "repeat", required_argument, NULL, OPT_REPEAT },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "engine", required_argument, NULL, OPT_ENGINE },
	{ "quick", no_argument, NULL, OPT_QUICK },
	{ "pregen", required_argument, NULL, OPT_PREGEN },
	{ "load-threads", required_argument, NULL, OPT_LOAD_THREADS },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "verify", no_argument, NULL, OPT_VERIFY },
	{ "batch-over-updates", no_argument, NULL, OPT_BATCH_OVER },
	{ "inflight", required_argument, NULL, OPT_INFLIGHT },
	{ "disk-probe", no_argument, NULL, OPT_DISK_PROBE },
	{ "probe-seconds", required_argument, NULL, OPT_PROBE_SECONDS },
	{ "probe-size", required_argument, NULL, OPT_PROBE_SIZE },
	{ "list-engines", no_argument, NULL, OPT_LIST_ENGINES },
	{ "ember-memory", required_argument, NULL, OPT_EMBER_MEMORY },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

/* Which options were given, so --quick fills only the others. */
typedef struct given {
	int workload, records, ops, seconds, threads, value_size, key_size, theta,
		log_memory, engine;
} given;

static int bad(const char *opt, const char *arg)
{
	fprintf(stderr, "ember-ycsb: bad value for --%s: '%s' (see --help)\n", opt, arg);
	return 2;
}

/* An Ember cache size: BYTES (K/M/G: powers of 1024, not 0) or "off" (UINT64_MAX).
 * 0 or -1. */
static int parse_cache_bytes(const char *arg, uint64_t *out)
{
	uint64_t v;

	if (!strcmp(arg, "off")) {
		*out = UINT64_MAX;
		return 0;
	}
	if (parse_u64(arg, &v, BINARY_SUFFIX) < 0 || v == 0)
		return -1;
	*out = v;
	return 0;
}

/* The options of Ember's settings and of the disk probe: what parse_one returns,
 * or -1 for an option that is not one of them. */
static int parse_engine_opt(int c, const char *arg, ycsb_config *cfg)
{
	uint64_t v;
	double d;

	switch (c) {
	case OPT_INDEX_BUCKETS:
		if (parse_u64(arg, &v, DECIMAL_SUFFIX) < 0)
			return bad("index-buckets", arg);
		cfg->index_buckets = v;
		return 0;
	case OPT_COLD_CHUNKS:
		if (parse_u64(arg, &v, DECIMAL_SUFFIX) < 0 || !v || (v & (v - 1)))
			return bad("ember-cold-chunks", arg);
		cfg->cold_chunks = v;
		return 0;
	case OPT_READ_CACHE:
		return parse_cache_bytes(arg, &cfg->read_cache) < 0 ? bad("ember-read-cache", arg) : 0;
	case OPT_RC_ADMIT:
		if (strcmp(arg, "first") && strcmp(arg, "second"))
			return bad("ember-read-cache-admit", arg);
		cfg->rc_admit_first = !strcmp(arg, "first");
		return 0;
	case OPT_COLD_CACHE:
		return parse_cache_bytes(arg, &cfg->cold_cache) < 0 ? bad("ember-cold-cache", arg) : 0;
	case OPT_SEGMENT:
		/* the store checks the range; 0 keeps one file per log */
		if (parse_u64(arg, &v, BINARY_SUFFIX) < 0)
			return bad("ember-segment-bytes", arg);
		cfg->segment_bytes = v;
		return 0;
	case OPT_EMBER_MEMORY:
		if (strcmp(arg, "whole") == 0)
			cfg->ember_hot_log_only = 0;
		else if (strcmp(arg, "hot-log") == 0)
			cfg->ember_hot_log_only = 1;
		else
			return bad("ember-memory", arg);
		return 0;
	case OPT_DISK_PROBE:
		cfg->disk_probe = 1;
		return 0;
	case OPT_PROBE_SECONDS:
		if (parse_double(arg, &d) < 0 || !(d > 0 && d <= 600))
			return bad("probe-seconds", arg);
		cfg->probe_seconds = d;
		return 0;
	case OPT_PROBE_SIZE:
		if (parse_u64(arg, &v, BINARY_SUFFIX) < 0 || v < (1u << 20))
			return bad("probe-size", arg);
		cfg->probe_size = v;
		return 0;
	}
	return -1;
}

static int parse_one(int c, const char *arg, ycsb_config *cfg, given *g, int *want_e)
{
	uint64_t v;
	double d;

	switch (c) {
	case OPT_WORKLOAD:
		g->workload = 1;
		return parse_workloads(arg, cfg, want_e) < 0 ? bad("workload", arg) : 0;
	case OPT_RECORDS:
		g->records = 1;
		if (parse_u64(arg, &v, DECIMAL_SUFFIX) < 0 || v == 0 || v > YCSB_OP_KEY_MASK / 2)
			return bad("records", arg);
		cfg->records = v;
		return 0;
	case OPT_OPS:
		g->ops = 1;
		if (parse_u64(arg, &v, DECIMAL_SUFFIX) < 0)
			return bad("ops", arg);
		cfg->ops = v;
		return 0;
	case OPT_SECONDS:
		g->seconds = 1;
		if (parse_double(arg, &d) < 0 || d < 0)
			return bad("seconds", arg);
		cfg->seconds = d;
		return 0;
	case OPT_THREADS:
		g->threads = 1;
		return parse_threads(arg, cfg) < 0 ? bad("threads", arg) : 0;
	case OPT_VALUE_SIZE:
		g->value_size = 1;
		if (parse_u64(arg, &v, BINARY_SUFFIX) < 0 || v > (64u << 20))
			return bad("value-size", arg);
		cfg->value_size = (size_t)v;
		return 0;
	case OPT_KEY_SIZE:
		g->key_size = 1;
		if (parse_u64(arg, &v, BINARY_SUFFIX) < 0 || v < 8 || v > (64u << 10))
			return bad("key-size", arg);
		cfg->key_size = (size_t)v;
		return 0;
	case OPT_DIST:
		cfg->dist_set = 1;
		return ycsb_dist_parse(arg, &cfg->dist) < 0 ? bad("dist", arg) : 0;
	case OPT_THETA:
		g->theta = 1;
		if (parse_double(arg, &d) < 0 || !(d > 0 && d < 1))
			return bad("theta", arg);
		cfg->theta = d;
		return 0;
	case OPT_BATCH:
		if (parse_u64(arg, &v, NO_SUFFIX) < 0 || v == 0 || v > 4096)
			return bad("batch", arg);
		cfg->batch = (unsigned)v;
		return 0;
	case OPT_DIR:
		cfg->dir = arg;
		return 0;
	case OPT_LOG_MEMORY:
		g->log_memory = 1;
		if (parse_u64(arg, &v, BINARY_SUFFIX) < 0)
			return bad("log-memory", arg);
		cfg->log_memory = v;
		return 0;
	case OPT_REPEAT:
		if (parse_u64(arg, &v, NO_SUFFIX) < 0 || v == 0 || v > YCSB_MAX_REPEAT)
			return bad("repeat", arg);
		cfg->repeat = (unsigned)v;
		return 0;
	case OPT_JSON:
		cfg->json = arg;
		return 0;
	case OPT_ENGINE:
		g->engine = 1;
		return parse_engines(arg, cfg) < 0 ? 2 : 0;
	case OPT_QUICK:
		cfg->quick = 1;
		return 0;
	case OPT_PREGEN:
		if (parse_u64(arg, &v, DECIMAL_SUFFIX) < 0 || v == 0)
			return bad("pregen", arg);
		cfg->pregen = v;
		return 0;
	case OPT_LOAD_THREADS:
		if (parse_u64(arg, &v, NO_SUFFIX) < 0 || v == 0 || v > 256)
			return bad("load-threads", arg);
		cfg->load_threads = (unsigned)v;
		return 0;
	case OPT_SEED:
		if (parse_u64(arg, &v, NO_SUFFIX) < 0)
			return bad("seed", arg);
		cfg->seed = v;
		return 0;
	case OPT_VERIFY:
		cfg->verify = 1;
		return 0;
	case OPT_BATCH_OVER:
		cfg->batch_over_updates = 1;
		return 0;
	case OPT_INFLIGHT:
		if (parse_u64(arg, &v, NO_SUFFIX) < 0 || v == 0 || v > YCSB_MAX_INFLIGHT) {
			fprintf(stderr, "ember-ycsb: bad value for --inflight: '%s': operations "
				"in flight per thread, 1..%u\n", arg, YCSB_MAX_INFLIGHT);
			return 2;
		}
		cfg->inflight = (unsigned)v;
		return 0;
	}
	int rc = parse_engine_opt(c, arg, cfg);
	if (rc != -1)
		return rc;
	usage(stderr);
	return 2;
}

/* --quick first (for what was not given), then the general defaults. */
static void fill_defaults(ycsb_config *cfg, const given *g)
{
	if (cfg->quick) {
		if (!g->records)
			cfg->records = 1000000;
		if (!g->key_size)
			cfg->key_size = 8;
		if (!g->value_size)
			cfg->value_size = 8;
		if (!g->workload) {
			cfg->workloads[0] = 'A';
			cfg->workloads[1] = 'C';
			cfg->wl_dist[0] = cfg->wl_dist[1] = -1;
			cfg->nworkloads = 2;
		}
		if (!g->threads) {
			cfg->threads[0] = 1;
			cfg->threads[1] = 2;
			cfg->nthreads = 2;
		}
		if (!g->seconds && !g->ops)
			cfg->seconds = 3;
		if (!g->log_memory) {
			/* Hold the data in memory: 4x a generous per-record estimate
			 * (updates that copy records to the tail grow the log), at least
			 * Ember's default. */
			uint64_t want = next_pow2(4 * cfg->records * record_estimate(cfg));

			cfg->log_memory = want > (256ull << 20) ? want : 256ull << 20;
		}
	}
	if (!g->records && cfg->records == 0)
		cfg->records = 1000000;
	if (cfg->key_size == 0)
		cfg->key_size = 8;
	if (!g->value_size && cfg->value_size == 0)
		cfg->value_size = 100;
	if (cfg->nworkloads == 0) {
		cfg->workloads[0] = 'A';
		cfg->wl_dist[0] = -1;
		cfg->nworkloads = 1;
	}
	if (cfg->nthreads == 0) {
		cfg->threads[0] = 1;
		cfg->nthreads = 1;
	}
	if (!g->ops && !g->seconds && cfg->seconds == 0)
		cfg->ops = 1000000;
	if (!g->theta)
		cfg->theta = 0.99;
	if (cfg->batch == 0)
		cfg->batch = 1;
	if (cfg->repeat == 0)
		cfg->repeat = 1;
	if (cfg->pregen == 0)
		cfg->pregen = 4u << 20;
	if (cfg->nengines == 0) {
		cfg->engines[0] = &ycsb_engine_ember;
		cfg->nengines = 1;
	}
	if (cfg->load_threads == 0)
		for (unsigned i = 0; i < cfg->nthreads; i++)
			if (cfg->threads[i] > cfg->load_threads)
				cfg->load_threads = cfg->threads[i];
	if (cfg->seed == 0)
		cfg->seed = 1;
	if (cfg->probe_seconds == 0)
		cfg->probe_seconds = 3;
}

/* --inflight with the rest of the command line: not with read batches, and only
 * for engines that keep operations in flight or stand in with read batches. 0, or
 * -1 after saying why. */
static int check_inflight(const ycsb_config *cfg)
{
	if (cfg->batch > 1) {
		fprintf(stderr, "ember-ycsb: --inflight %u cannot be combined with --batch %u: "
			"each of the K clients has one operation of any kind in flight\n",
			cfg->inflight, cfg->batch);
		return -1;
	}
	if (cfg->batch_over_updates) {
		fprintf(stderr, "ember-ycsb: --inflight cannot be combined with "
			"--batch-over-updates (an option of --batch)\n");
		return -1;
	}
	for (unsigned i = 0; i < cfg->nworkloads; i++) {
		if (cfg->wl_batch[i] > 1) {
			fprintf(stderr, "ember-ycsb: --inflight %u cannot be combined with workload "
				"%c's read batches of %u\n", cfg->inflight, cfg->workloads[i],
				cfg->wl_batch[i]);
			return -1;
		}
	}
	for (unsigned i = 0; i < cfg->nengines; i++) {
		const ycsb_engine *e = cfg->engines[i];

		if (e->start == NULL && !e->inflight_batches) {
			fprintf(stderr, "ember-ycsb: --inflight needs an engine with operations "
				"in flight (start/poll); %s has none: %s\n", e->name,
				e->inflight_refusal != NULL ? e->inflight_refusal
							    : "run it without --inflight");
			return -1;
		}
	}
	return 0;
}

int ycsb_config_parse(int argc, char **argv, ycsb_config *cfg, int *exit_now)
{
	given g = { 0 };
	int want_e = 0, c, rc;

	memset(cfg, 0, sizeof(*cfg));
	*exit_now = 0;
	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
		if (c == OPT_HELP) {
			usage(stdout);
			*exit_now = 1;
			return 0;
		}
		if (c == OPT_LIST_ENGINES) {
			for (size_t i = 0; ycsb_engines[i] != NULL; i++)
				printf("%s\n", ycsb_engines[i]->name);
			*exit_now = 1;
			return 0;
		}
		rc = parse_one(c, optarg, cfg, &g, &want_e);
		if (rc != 0) {
			*exit_now = 1;
			return rc;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ember-ycsb: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		*exit_now = 1;
		return 2;
	}
	if (want_e) {
		printf("workload E (scans) is not supported: Ember is a point index\n");
		*exit_now = 1;
		return 2;
	}
	fill_defaults(cfg, &g);
	if (cfg->verify && cfg->value_size < YCSB_VERIFY_MIN_VALUE) {
		fprintf(stderr, "ember-ycsb: --verify needs --value-size >= %u (got %zu)\n",
			YCSB_VERIFY_MIN_VALUE, cfg->value_size);
		*exit_now = 1;
		return 2;
	}
	for (unsigned i = 0; cfg->verify && i < cfg->nthreads; i++) {
		if (cfg->records < cfg->threads[i]) {
			/* every thread owns a loaded key to update (run.c, own_key) */
			fprintf(stderr, "ember-ycsb: --verify needs --records >= --threads (%u)\n",
				cfg->threads[i]);
			*exit_now = 1;
			return 2;
		}
	}
	if (cfg->inflight > 0 && check_inflight(cfg) < 0) {
		*exit_now = 1;
		return 2;
	}
	if (cfg->ops == 0 && cfg->seconds == 0) {
		fprintf(stderr, "ember-ycsb: --ops 0 needs --seconds\n");
		*exit_now = 1;
		return 2;
	}
	return 0;
}

const char *ycsb_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	unsigned u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0 || v == (double)(uint64_t)v)
		snprintf(buf, cap, "%.0f %s", v, units[u]);
	else
		snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}
