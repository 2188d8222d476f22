/*
 * options.h - ember-ycsb's command line.
 */
#ifndef YCSB_OPTIONS_H
#define YCSB_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "gen.h"

#define YCSB_MAX_LIST 16

typedef struct ycsb_config {
	char workloads[YCSB_MAX_LIST];   /* 'A', 'B', ... in run order */
	int wl_dist[YCSB_MAX_LIST];      /* a workload's own ycsb_dist, or -1 */
	unsigned wl_batch[YCSB_MAX_LIST]; /* a workload's own batch size, or 0 */
	unsigned nworkloads;
	unsigned threads[YCSB_MAX_LIST];
	unsigned nthreads;
	const ycsb_engine *engines[YCSB_MAX_LIST];
	unsigned nengines;
	uint64_t records;
	uint64_t ops;          /* 0: bounded by seconds only */
	double seconds;        /* 0: bounded by ops only */
	size_t key_size;
	size_t value_size;
	int dist_set;          /* --dist given: overrides each workload's own */
	ycsb_dist dist;
	double theta;
	unsigned batch;
	int batch_over_updates; /* read batches reach past updates of other keys */
	unsigned inflight;     /* --inflight K: operations in flight per thread (0: none) */
	const char *dir;       /* NULL: a fresh mkdtemp directory, removed at exit */
	uint64_t log_memory;   /* 0: Ember's default */
	uint64_t index_buckets;
	uint64_t read_cache; /* Ember's read_cache_memory (0: the driver's default; UINT64_MAX: off) */
	int rc_admit_first;  /* Ember's read_cache_admit: EMBER_READ_CACHE_ADMIT_FIRST, not SECOND */
	uint64_t cold_cache; /* Ember's cold_cache_memory (0: default; UINT64_MAX: off) */
	uint64_t cold_chunks; /* Ember's cold_index_chunks (0: the driver's choice) */
	uint64_t segment_bytes; /* Ember's log_segment_bytes (0: one file per log) */
	unsigned repeat;
	const char *json;
	int quick;
	uint64_t pregen;       /* per-thread array when only --seconds bounds a run */
	unsigned load_threads;
	uint64_t seed;
	int verify;            /* --verify: self-checking values, every read checked */
	int ember_hot_log_only; /* --ember-memory hot-log */
	int disk_probe;        /* --disk-probe: measure the disk's random-read rate */
	double probe_seconds;  /* ... for this long (each of the two measurements) */
	uint64_t probe_size;   /* ... on a file this large (0: sized from the data) */
} ycsb_config;

/* Parse argv into *cfg with every default filled in. Returns 0 to go on, or an
 * exit status: 0 after --help, 2 after a usage error (already printed), including
 * a request for workload E. */
int ycsb_config_parse(int argc, char **argv, ycsb_config *cfg, int *exit_now);

/* Bytes the loaded records take as raw keys and values (no engine overhead):
 * what "larger than memory" is judged by. */
static inline uint64_t ycsb_raw_data_bytes(const ycsb_config *cfg)
{
	return cfg->records * (uint64_t)(cfg->key_size + cfg->value_size);
}

/* The memory budget in force: --log-memory, or Ember's default of 256 MiB. */
static inline uint64_t ycsb_budget_bytes(const ycsb_config *cfg)
{
	return cfg->log_memory != 0 ? cfg->log_memory : 256ull << 20;
}

/* "256 MiB", "1.5 GiB": n in the largest binary unit that keeps it >= 1. */
const char *ycsb_fmt_bytes(uint64_t n, char *buf, size_t cap);

#endif /* YCSB_OPTIONS_H */
