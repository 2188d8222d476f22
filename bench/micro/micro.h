/*
 * micro.h - what the micro-benchmark files of ember-micro share: their
 * registration functions and a scratch directory for the ones that need files.
 */
#ifndef EMBER_BENCH_MICRO_H
#define EMBER_BENCH_MICRO_H

#include <stddef.h>
#include <stdint.h>

#include "emb.h"

/* Each file registers its benchmarks with emb_register(). */
void micro_register_index(void);
void micro_register_hlog(void);
void micro_register_epoch(void);
void micro_register_record(void);
void micro_register_io(void);

/*
 * The scratch directory: a fresh mkdtemp directory under $EMBER_MICRO_DIR, or
 * /var/tmp (disk-backed, unlike /dev/shm or a tmpfs /tmp, since the I/O
 * benchmarks need O_DIRECT), made on first use and removed with its files at
 * exit. NULL if it cannot be made (the reason is printed).
 */
const char *micro_scratch_dir(void);

/* path = scratch dir + "/" + name, remembered so that it is removed at exit.
 * 0, or -1 (no scratch dir, or the name does not fit in cap). */
int micro_scratch_file(const char *name, char *path, size_t cap);

/* A splitmix64 step (seeding, mixing key numbers). */
static inline uint64_t micro_mix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif /* EMBER_BENCH_MICRO_H */
