/*
 * trace.h - synthetic recommendation traces: generation and the binary file format
 * (docs/cache.md, "Trace files", has the byte layout).
 *
 * A trace is nbatches batches of batch_size samples; each sample names one row in
 * each of ntables tables (Criteo-Kaggle-like: 26 categorical features whose table
 * sizes follow the real dataset's, scaled by `scale`). Ids are stored table-major
 * per batch: batch b, table t, sample i is
 *     ids[((size_t)b * ntables + t) * batch_size + i].
 *
 * Modes:
 *   TRACE_ZIPF   each id is Zipf(skew) over the table's rows (rank 1 the hottest),
 *                ranks scattered over row ids by a fixed bijection per table;
 *   TRACE_REUSE  reuse-distance mode: with probability reuse_prob an id repeats
 *                the one used d lookups earlier in the same table, d Zipf(skew)
 *                over [1, history]; otherwise it is uniform over the table.
 *
 * Generation is deterministic for a given set of parameters (seed included).
 * Not thread-safe per struct trace; different traces may be used concurrently.
 */
#ifndef EMBER_TRACE_H
#define EMBER_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define TRACE_CRITEO_TABLES 26
/* Criteo Kaggle (Display Advertising Challenge) categorical feature cardinalities. */
extern const uint64_t trace_criteo_rows[TRACE_CRITEO_TABLES];

enum { TRACE_ZIPF = 0, TRACE_REUSE = 1 };

struct trace_params {
	uint32_t ntables;       /* default 26 (the first ntables Criteo tables) */
	const uint64_t *rows;   /* optional: table sizes instead of Criteo's x scale */
	double scale;           /* Criteo sizes x scale (at least 1 row). Default 1 */
	double skew;            /* Zipf exponent (> 0). Default 1.05 */
	uint32_t batch_size;    /* samples per batch. Default 16384 */
	uint32_t nbatches;      /* default 100 */
	uint32_t mode;          /* TRACE_*. Default zipf */
	double reuse_prob;      /* TRACE_REUSE. Default 0.9 */
	uint32_t history;       /* TRACE_REUSE: longest reuse distance. Default 65536 */
	uint64_t seed;
};

struct trace {
	uint32_t ntables, batch_size, nbatches, mode;
	uint64_t seed;
	double skew, reuse_prob;
	uint64_t *rows; /* [ntables] */
	uint32_t *ids;  /* [nbatches * ntables * batch_size] */
};

void trace_params_default(struct trace_params *p);

/* Returns 0, or -EINVAL (bad parameters, a table over 2^32 rows) or -ENOMEM. */
int trace_generate(const struct trace_params *p, struct trace *t);

/* Returns 0 or -errno. */
int trace_write(const struct trace *t, const char *path);
/* Returns 0, -errno, or -EBADMSG (not a trace file, a bad checksum, wrong size). */
int trace_read(const char *path, struct trace *t);

void trace_free(struct trace *t);

static inline const uint32_t *trace_ids(const struct trace *t, uint32_t b, uint32_t table)
{
	return t->ids + ((size_t)b * t->ntables + table) * t->batch_size;
}

/* A small PRNG (xoshiro256**, seeded through splitmix64). */
struct trace_rng {
	uint64_t s[4];
};
void trace_rng_seed(struct trace_rng *r, uint64_t seed);
uint64_t trace_rng_next(struct trace_rng *r);
/* Uniform in [0, 1). */
double trace_rng_unit(struct trace_rng *r);

/* Zipf(s) over [1, n] by rejection-inversion (Hormann and Derflinger, 1996): any
 * s > 0, O(1) memory, about one try per sample. */
struct trace_zipf {
	double s, n, h_x1, h_n, s_lim;
};
void trace_zipf_init(struct trace_zipf *z, uint64_t n, double s);
uint64_t trace_zipf_sample(const struct trace_zipf *z, struct trace_rng *r);

#endif
