/*
 * workload.h - YCSB core workloads and the pre-generated operation arrays.
 *
 * An operation is one uint64_t: the kind in bits 60..62, bit 59 set when the key is
 * a distance back from the newest key ("latest": resolved while running, because
 * the newest key depends on the inserts done so far, as in YCSB's
 * SkewedLatestGenerator), and the key number (or distance) in bits 0..58.
 * Inserts carry no key: they take the next key number from a counter shared by all
 * threads at run time, as YCSB's insert key sequence does.
 */
#ifndef YCSB_WORKLOAD_H
#define YCSB_WORKLOAD_H

#include <stdint.h>

#include "gen.h"

enum ycsb_op_kind {
	YCSB_OP_READ = 0,
	YCSB_OP_UPDATE = 1,
	YCSB_OP_INSERT = 2,
	YCSB_OP_RMW = 3,
	YCSB_OP_KINDS
};

#define YCSB_OP_KIND_SHIFT 60
#define YCSB_OP_LATEST (1ull << 59)
#define YCSB_OP_KEY_MASK (YCSB_OP_LATEST - 1)

static inline unsigned ycsb_op_kind(uint64_t op)
{
	return (unsigned)(op >> YCSB_OP_KIND_SHIFT);
}

/* A YCSB core workload: operation proportions and its default key chooser. */
typedef struct ycsb_workload {
	char name;        /* 'A' .. 'F' */
	const char *what; /* one line for the table header */
	double read, update, insert, rmw; /* proportions, summing to 1 */
	ycsb_dist default_dist;
} ycsb_workload;

/* The workload called name ('A'...'F', either case), or NULL. E is returned too
 * (its proportions are all zero): the caller refuses it. */
const ycsb_workload *ycsb_workload_find(char name);

/* What one thread's pre-generation needs. */
typedef struct ycsb_pregen {
	const ycsb_workload *wl;
	ycsb_dist dist;
	double theta;
	uint64_t key_count; /* keys in the store when the run starts */
	unsigned threads;   /* threads inserting at once (how fast "latest" grows) */
	uint64_t seed;
} ycsb_pregen;

/* Fill ops[0..n) for one thread. 0, or -1 if the chooser cannot be built (theta). */
int ycsb_pregen_fill(const ycsb_pregen *p, uint64_t *ops, uint64_t n);

/*
 * The key number an operation names. "latest" operations carry a distance back
 * from the newest key; `latest` is the newest key known to be present (see
 * keyseq.h), read by the caller only when op has YCSB_OP_LATEST set.
 */
static inline uint64_t ycsb_op_key(uint64_t op, uint64_t latest)
{
	uint64_t k = op & YCSB_OP_KEY_MASK;

	if (op & YCSB_OP_LATEST)
		return k <= latest ? latest - k : 0;
	return k;
}

/* Keys: the key number as 8 little-endian bytes, then zero padding to key_size. */
static inline void ycsb_key_format(unsigned char *key, uint64_t keyno)
{
	for (int i = 0; i < 8; i++)
		key[i] = (unsigned char)(keyno >> (8 * i));
}

#endif /* YCSB_WORKLOAD_H */
