/*
 * emb.h - a thin C interface to Google Benchmark, so that Ember's micro-benchmarks
 * are written in C. The only C++ is emb_shim.cc, which forwards each call to
 * benchmark::State or benchmark::internal::Benchmark.
 *
 * A benchmark is a C function taking an emb_state. Setup before the first
 * emb_state_keep_running() call and teardown after the last one are not timed:
 *
 *   static void bm_thing(emb_state *st)
 *   {
 *           struct thing *t = thing_new(emb_state_range(st, 0));  // untimed
 *           while (emb_state_keep_running(st))
 *                   thing_poke(t);                                // timed
 *           emb_set_items_processed(st, emb_state_iterations(st));
 *           thing_free(t);                                        // untimed
 *   }
 *   ...
 *   emb_bench_arg(emb_register("thing/poke", bm_thing), 64);
 *
 * Each emb_state_keep_running() call crosses into C++ (a few ns, not inlined);
 * loops whose body costs about that much should count whole batches with
 * emb_state_keep_running_batch() and loop inside.
 *
 * Threads: registration happens on the main thread before emb_main(). With
 * emb_bench_threads(b, n) the function runs on n threads at once, each with its
 * own emb_state; the threads start the timed loop together (the first
 * keep_running call is a barrier), so thread 0 may set shared state up before it.
 *
 * Ownership: names are copied at registration; nothing returned needs freeing.
 */
#ifndef EMBER_BENCH_EMB_H
#define EMBER_BENCH_EMB_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct emb_state emb_state; /* a benchmark::State */
typedef struct emb_bench emb_bench; /* a registered benchmark, to configure */
typedef void (*emb_fn)(emb_state *st);

/* ---- registration (before emb_main) ---------------------------------------------- */

emb_bench *emb_register(const char *name, emb_fn fn);
/* Each returns b, so that calls chain. */
emb_bench *emb_bench_arg(emb_bench *b, int64_t x);       /* one run per arg */
emb_bench *emb_bench_arg_name(emb_bench *b, const char *name);
emb_bench *emb_bench_threads(emb_bench *b, int threads); /* one run per count */
emb_bench *emb_bench_iterations(emb_bench *b, int64_t n); /* fixed, not adaptive */
emb_bench *emb_bench_min_time(emb_bench *b, double seconds);
emb_bench *emb_bench_real_time(emb_bench *b);  /* rate by wall clock (I/O, threads) */
emb_bench *emb_bench_unit_us(emb_bench *b);    /* report microseconds */

/* A key: value line in the report's context header. */
void emb_add_context(const char *key, const char *value);

/* Parse Google Benchmark's flags (--benchmark_filter=..., --help, ...), run the
 * registered benchmarks, shut down. Returns the exit status: 0, or 1 after an
 * unrecognised argument. */
int emb_main(int argc, char **argv);

/* ---- inside a benchmark ------------------------------------------------------------- */

/* True while the timed loop should go on: one iteration per call. */
int emb_state_keep_running(emb_state *st);
/* The same for n iterations at once; may overshoot by up to n. */
int emb_state_keep_running_batch(emb_state *st, int64_t n);
int64_t emb_state_range(emb_state *st, unsigned i); /* the i-th arg */
int64_t emb_state_iterations(emb_state *st);       /* done so far (all, after the loop) */
int emb_state_thread_index(emb_state *st);
int emb_state_threads(emb_state *st);
void emb_state_pause_timing(emb_state *st);
void emb_state_resume_timing(emb_state *st);
/* Mark the run failed with msg; the next keep_running call returns false. */
void emb_state_skip_with_error(emb_state *st, const char *msg);

void emb_set_items_processed(emb_state *st, int64_t items); /* reported as a rate */
void emb_set_bytes_processed(emb_state *st, int64_t bytes); /* reported as a rate */
/* A named counter; rate: report value per second rather than the value. */
void emb_set_counter(emb_state *st, const char *name, double value, int rate);
void emb_set_label(emb_state *st, const char *label);

/* Keep the compiler from discarding a computation whose result is unused. */
static inline void emb_do_not_optimize(const void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static inline void emb_use_u64(uint64_t v)
{
	__asm__ volatile("" : : "r"(v) : "memory");
}

#ifdef __cplusplus
}
#endif

#endif /* EMBER_BENCH_EMB_H */
