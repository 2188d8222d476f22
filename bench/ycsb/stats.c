/*
 * stats.c - histogram quantiles and process counters (see stats.h).
 */
#include "stats.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

void ycsb_hist_merge(ycsb_hist *dst, const ycsb_hist *src)
{
	for (unsigned i = 0; i < YCSB_HIST_BUCKETS; i++)
		dst->bucket[i] += src->bucket[i];
	dst->count += src->count;
	dst->sum_ns += src->sum_ns;
	if (src->max_ns > dst->max_ns)
		dst->max_ns = src->max_ns;
}

/* Smallest value and width of bucket i. */
static void bucket_range(unsigned i, uint64_t *low, uint64_t *width)
{
	unsigned e, sub;

	if (i < 64) {
		*low = i;
		*width = 1;
		return;
	}
	e = (i - 64) / (1u << YCSB_HIST_SUB_BITS) + 6;
	sub = (i - 64) % (1u << YCSB_HIST_SUB_BITS) + 32;
	*low = (uint64_t)sub << (e - YCSB_HIST_SUB_BITS);
	*width = 1ull << (e - YCSB_HIST_SUB_BITS);
}

uint64_t ycsb_hist_quantile(const ycsb_hist *h, double q)
{
	uint64_t rank, seen = 0;

	if (h->count == 0)
		return 0;
	rank = (uint64_t)(q * (double)h->count + 0.5);
	if (rank < 1)
		rank = 1;
	if (rank > h->count)
		rank = h->count;
	for (unsigned i = 0; i < YCSB_HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= rank) {
			uint64_t low, width, mid;

			bucket_range(i, &low, &width);
			mid = low + width / 2;
			return mid < h->max_ns ? mid : h->max_ns;
		}
	}
	return h->max_ns;
}

int ycsb_proc_io(uint64_t *read_bytes, uint64_t *write_bytes)
{
	FILE *f = fopen("/proc/self/io", "r");
	char line[128];
	int found = 0;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "read_bytes: %" SCNu64, read_bytes) == 1)
			found |= 1;
		else if (sscanf(line, "write_bytes: %" SCNu64, write_bytes) == 1)
			found |= 2;
	}
	fclose(f);
	return found == 3 ? 0 : -1;
}

uint64_t ycsb_peak_rss_kib(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (uint64_t)ru.ru_maxrss;
}

int ycsb_peak_rss_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	int ok;

	if (f == NULL)
		return -1;
	ok = fputs("5", f) >= 0;
	return fclose(f) == 0 && ok ? 0 : -1;
}
