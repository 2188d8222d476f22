/*
 * report.h - the human table and the JSON file for YCSB runs.
 */
#ifndef YCSB_REPORT_H
#define YCSB_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "options.h"
#include "run.h"

void ycsb_report_header(FILE *f);
void ycsb_report_row(FILE *f, const ycsb_result *r);
/* The notes that explain the table's columns, printed once after it. */
void ycsb_report_notes(FILE *f, int any_batch, int rss_per_run, int any_wraps);

/* Write every result to path as one JSON object. 0 or -errno. */
int ycsb_report_json(const char *path, const ycsb_config *cfg, const ycsb_result *rs,
		     size_t n);

#endif /* YCSB_REPORT_H */
