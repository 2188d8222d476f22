/*
 * report.h - the human table and the JSON file for YCSB runs.
 */
#ifndef YCSB_REPORT_H
#define YCSB_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "options.h"
#include "run.h"

/* with_probe: add the columns that compare each run with the disk probe. */
void ycsb_report_header(FILE *f, int with_probe);
void ycsb_report_row(FILE *f, const ycsb_result *r);
/* The notes that explain the table's columns, printed once after it. */
void ycsb_report_notes(FILE *f, int any_batch, int any_inflight, int rss_per_run,
		       int any_wraps, int with_probe);

/* What --disk-probe measured (before and after the engines), for the JSON file. */
typedef struct ycsb_probe_report {
	int ran;
	uint64_t file_bytes;
	unsigned depth;
	double seconds;
	double before, after;          /* reads/s; 0 when that measurement failed */
	double before_p50_us, after_p50_us;
} ycsb_probe_report;

/* Write every result to path as one JSON object. probe may be NULL. 0 or -errno. */
int ycsb_report_json(const char *path, const ycsb_config *cfg, const ycsb_result *rs,
		     size_t n, const ycsb_probe_report *probe);

#endif /* YCSB_REPORT_H */
