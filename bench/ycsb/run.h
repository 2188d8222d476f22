/*
 * run.h - the YCSB load phase and run phase: threads, timing, and what one run
 * measured.
 */
#ifndef YCSB_RUN_H
#define YCSB_RUN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "gen.h"
#include "keyseq.h"
#include "value.h"
#include "workload.h"

/* Latency classes: one per operation kind, plus whole read batches. */
enum { YCSB_LAT_READ_BATCH = YCSB_OP_KINDS, YCSB_LAT_CLASSES };
/* A failure's kind besides those: the engine's poll() (--inflight). */
#define YCSB_FAIL_POLL YCSB_LAT_CLASSES

#define YCSB_SAMPLE_EVERY 64 /* time 1 operation in 64 */

typedef struct ycsb_lat {
	uint64_t samples;
	double mean_us;
	double p50_us, p99_us, p999_us, max_us;
} ycsb_lat;

typedef struct ycsb_run_spec {
	const ycsb_engine *engine;
	void *db;
	const ycsb_workload *wl;
	ycsb_dist dist;
	double theta;
	unsigned threads;
	unsigned batch;        /* 1 = no batching */
	int over_updates;      /* a read batch reaches past updates of keys it does not hold */
	unsigned inflight;     /* 0, or K: each thread keeps K operations of any kind in
				  flight through the engine's start() / poll()
				  (run_inflight.c); needs batch == 1 */
	uint64_t ops;          /* over all threads; 0 = only the time limit bounds the run */
	double seconds;        /* 0 = no time limit */
	uint64_t pregen_ops;   /* per thread, when ops == 0: the array is cycled */
	size_t key_size;
	size_t value_size;
	uint64_t key_count;    /* keys in the store when the run starts: 0 .. key_count-1 */
	ycsb_keyseq *inserts;  /* shared: new key numbers, and the newest inserted */
	uint64_t seed;
	int verify;            /* write self-checking values, check every value read
				  (value.h); an absent key then counts as a failure */
	/* verify: the published version of keys 0 .. nversions-1 (value.h, "Exact
	 * versions"), shared by every run over one store; keys past nversions get the
	 * value check only. Updates and read-modify-writes of key k are made by
	 * thread k % threads alone (another thread's draw of k goes to the nearest
	 * key at or below it that the thread owns). */
	_Atomic uint64_t *versions;
	uint64_t nversions;
} ycsb_run_spec;

#define YCSB_MAX_REPEAT 99
#define YCSB_SETTINGS_CAP 1024

typedef struct ycsb_result {
	const char *engine;
	char workload;
	ycsb_dist dist;
	double theta;
	unsigned threads;
	unsigned batch;
	int over_updates;
	unsigned inflight;               /* --inflight K (0: none) ... */
	int inflight_async;              /* ... kept in flight by start()/poll(); 0: the
					    engine ran it as read batches (batch = K) */
	size_t key_size, value_size;
	uint64_t key_count;
	uint64_t ops;                    /* operations done, all threads */
	uint64_t done[YCSB_OP_KINDS];    /* ... of each kind */
	uint64_t notfound;               /* reads that found no value */
	uint64_t pending;                /* --inflight: operations that went pending */
	uint64_t verified;               /* reads whose value was checked (--verify) */
	uint64_t errors;                 /* operations that failed (the thread stopped) */
	int first_error;
	int fail_kind;                   /* first failure: YCSB_OP_*, YCSB_LAT_READ_BATCH or
					    YCSB_FAIL_POLL; -1: none */
	uint64_t fail_key;               /* ... its key number */
	uint64_t fail_index;             /* ... operations its thread had done before it */
	unsigned fail_thread;            /* ... that thread */
	double seconds;                  /* first thread's start to last thread's end */
	double mops;                     /* ops / seconds / 1e6 */
	ycsb_lat lat;                    /* all samples together (batches count as one) */
	ycsb_lat lat_class[YCSB_LAT_CLASSES];
	uint64_t peak_rss_kib;
	int rss_per_run;                 /* the peak covers this run only (else the process's) */
	int io_ok;                       /* /proc/self/io was readable */
	double read_bytes_per_op, write_bytes_per_op;
	uint64_t pregen_per_thread;      /* largest per-thread operation array */
	double gen_mops;                 /* generator rate, per thread */
	uint64_t wraps;                  /* times a thread cycled its array */
	char settings[YCSB_SETTINGS_CAP]; /* the engine's settings line (set by the caller) */
	double load_seconds;             /* the engine's load phase (set by the caller) */
	uint64_t records;                /* keys loaded (set by the caller) */
	double disk_reads_per_s;         /* --disk-probe's rate, 0: none (set by the caller) */
	unsigned repeats;                /* runs behind this result (median reported) */
	double mops_runs[YCSB_MAX_REPEAT];
} ycsb_result;

/*
 * Load keys 0 .. records-1 with `threads` threads (contiguous ranges), values of
 * value_size random bytes (self-checking ones, value.h, when verify is set).
 * *seconds receives the wall time. 0 or the first error.
 */
int ycsb_load(const ycsb_engine *e, void *db, uint64_t records, size_t key_size,
	      size_t value_size, unsigned threads, uint64_t seed, int verify,
	      double *seconds);

/*
 * Read keys 0 .. keys-1 back on one thread and check every value (value.h): one
 * at a time, or, with inflight K and an engine with start(), K reads in flight.
 * *checked receives how many were read. 0, YCSB_EVERIFY for the first bad or
 * absent value (reported on stderr), or the engine's error.
 */
int ycsb_verify_all(const ycsb_engine *e, void *db, uint64_t keys, size_t key_size,
		    const _Atomic uint64_t *versions, uint64_t nversions,
		    size_t value_size, unsigned inflight, uint64_t *checked);

/* "read", "update", "insert", "rmw", "read_batch" for a latency class / fail_kind;
 * "poll" for YCSB_FAIL_POLL. */
const char *ycsb_lat_class_name(int c);

/* One timed run. 0, or the first error (res is filled either way). */
int ycsb_run(const ycsb_run_spec *spec, ycsb_result *res);

#endif /* YCSB_RUN_H */
