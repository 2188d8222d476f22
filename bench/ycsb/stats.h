/*
 * stats.h - latency histograms, clocks and process counters for the YCSB driver.
 *
 * The histogram is log-linear: values below 64 ns are exact, above that each power
 * of two is split in 32 buckets (relative error under 1.6% once the bucket's
 * midpoint is reported). One histogram is ~15 KiB, owned by one thread; merge them
 * after the threads are joined.
 */
#ifndef YCSB_STATS_H
#define YCSB_STATS_H

#include <stdint.h>
#include <time.h>

#define YCSB_HIST_SUB_BITS 5
#define YCSB_HIST_BUCKETS (64 + (64 - 6) * (1 << YCSB_HIST_SUB_BITS))

typedef struct ycsb_hist {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t max_ns;
	uint64_t bucket[YCSB_HIST_BUCKETS];
} ycsb_hist;

static inline unsigned ycsb_hist_index(uint64_t ns)
{
	unsigned e, sub;

	if (ns < 64)
		return (unsigned)ns;
	e = 63u - (unsigned)__builtin_clzll(ns); /* 6 .. 63 */
	sub = (unsigned)(ns >> (e - YCSB_HIST_SUB_BITS)); /* 32 .. 63 */
	return 64u + (e - 6u) * (1u << YCSB_HIST_SUB_BITS) + (sub - 32u);
}

static inline void ycsb_hist_add(ycsb_hist *h, uint64_t ns)
{
	h->bucket[ycsb_hist_index(ns)]++;
	h->count++;
	h->sum_ns += ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

void ycsb_hist_merge(ycsb_hist *dst, const ycsb_hist *src);

/* The value at quantile q (0 < q <= 1) in ns, bucket midpoint; 0 when empty. */
uint64_t ycsb_hist_quantile(const ycsb_hist *h, double q);

static inline uint64_t ycsb_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* /proc/self/io's read_bytes and write_bytes (bytes that reached the block layer,
 * all threads of the process, io_uring workers included). 0, or -1 if the file
 * cannot be read (some containers hide it). */
int ycsb_proc_io(uint64_t *read_bytes, uint64_t *write_bytes);

/* Peak resident set of the process so far, in KiB (getrusage ru_maxrss). */
uint64_t ycsb_peak_rss_kib(void);

/* Restart the peak at the current resident set ("5" to /proc/self/clear_refs,
 * Linux >= 4.0), so the next ycsb_peak_rss_kib() covers only what follows.
 * 0, or -1 where that is refused (then the peak stays the process's). */
int ycsb_peak_rss_reset(void);

#endif /* YCSB_STATS_H */
