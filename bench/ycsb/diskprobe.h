/*
 * diskprobe.h - ember-ycsb --disk-probe: how many random 4 KiB reads per second the
 * disk under the store's directory serves, measured the way Ember reads (O_DIRECT,
 * io_uring), so a run's throughput can be put next to the disk's own rate.
 *
 * The probe writes a file of real data (not a sparse one: reading holes never
 * reaches the disk) with O_DIRECT, so it does not sit in the page cache, and unlinks
 * it at once: the file disappears when the probe is closed or the process dies.
 * Each measurement keeps `depth` reads in flight at uniformly random 4 KiB-aligned
 * offsets for the given time.
 *
 * Threads: a probe belongs to one thread.
 */
#ifndef YCSB_DISKPROBE_H
#define YCSB_DISKPROBE_H

#include <stdint.h>

#define YCSB_PROBE_BLOCK 4096u

typedef struct ycsb_probe {
	int fd;              /* O_DIRECT, unlinked */
	uint64_t file_bytes; /* a multiple of YCSB_PROBE_BLOCK */
	char dir[1024];      /* where the file was made */
} ycsb_probe;

typedef struct ycsb_probe_result {
	double reads_per_s;   /* completed 4 KiB reads per second */
	double seconds;       /* measured time */
	uint64_t reads;
	unsigned depth;
	double p50_us, p99_us; /* per-read latency, submit to completion */
} ycsb_probe_result;

/*
 * Make the probe file of file_bytes (rounded down to whole MiB, at least 1 MiB)
 * in dir. 0, or -errno; -EINVAL when the filesystem refuses O_DIRECT (tmpfs), in
 * which case there is nothing to measure.
 */
int ycsb_probe_open(ycsb_probe *p, const char *dir, uint64_t file_bytes);

/* Random reads at queue depth `depth` for `seconds`. 0, or -errno. */
int ycsb_probe_run(ycsb_probe *p, unsigned depth, double seconds, uint64_t seed,
		   ycsb_probe_result *out);

/* Close (and so delete) the probe file. Accepts a probe that never opened. */
void ycsb_probe_close(ycsb_probe *p);

#endif /* YCSB_DISKPROBE_H */
