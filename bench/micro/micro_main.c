/*
 * micro_main.c - ember-micro: micro-benchmarks of Ember's internals (hash index,
 * log allocation, epochs, record checksums, io_uring reads), written in C over
 * Google Benchmark through the emb.h shim.
 *
 *   build/<cfg>/bench/ember-micro [--benchmark_filter=REGEX] [--benchmark_min_time=S]
 *                                 [--benchmark_format=json] [--benchmark_out=FILE] ...
 *
 * Environment: EMBER_MICRO_DIR (parent of the scratch directory, default /var/tmp;
 * must allow O_DIRECT), EMBER_MICRO_FILE_MB (the random-read file, default 256).
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ember.h>

#include "micro.h"

static char scratch[4096];
static int scratch_state; /* 0: not tried, 1: made, -1: failed */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void scratch_remove(void)
{
	if (scratch_state == 1)
		nftw(scratch, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

const char *micro_scratch_dir(void)
{
	const char *parent = getenv("EMBER_MICRO_DIR");

	if (scratch_state == 0) {
		if (parent == NULL || parent[0] == '\0')
			parent = "/var/tmp";
		snprintf(scratch, sizeof(scratch), "%s/ember-micro-XXXXXX", parent);
		if (mkdtemp(scratch) == NULL) {
			fprintf(stderr, "ember-micro: mkdtemp %s: %s\n", scratch, strerror(errno));
			scratch_state = -1;
		} else {
			scratch_state = 1;
			atexit(scratch_remove);
			emb_add_context("scratch_dir", scratch);
		}
	}
	return scratch_state == 1 ? scratch : NULL;
}

int micro_scratch_file(const char *name, char *path, size_t cap)
{
	const char *dir = micro_scratch_dir();

	if (dir == NULL || snprintf(path, cap, "%s/%s", dir, name) >= (int)cap)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	emb_add_context("ember_version", ember_version());
	micro_register_index();
	micro_register_hlog();
	micro_register_epoch();
	micro_register_record();
	micro_register_io();
	return emb_main(argc, argv);
}
