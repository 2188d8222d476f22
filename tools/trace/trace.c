/*
 * trace.c - generation, writing and reading of synthetic recommendation traces
 * (trace.h; the file format is in docs/cache.md).
 *
 * File layout (little-endian): a 64-byte header (magic "EMBTRACE", version,
 * ntables, batch_size, nbatches, mode, seed, skew, reuse_prob), ntables u64 row
 * counts, the ids as u32 (batch-major, then table-major), and a u64 XXH64 of
 * everything before it (seed 0).
 */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/rng.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "trace files are written in the host's byte order, which must be little-endian"
#endif

#define TRACE_MAGIC "EMBTRACE"
#define TRACE_VERSION 1u
#define TRACE_HEADER 64

const uint64_t trace_criteo_rows[TRACE_CRITEO_TABLES] = {
	1460,    583,    10131227, 2202608, 305,  24,      12517,   633,    3,
	93145,   5683,   8351593,  3194,    27,   14992,   5461306, 10,     5652,
	2173,    4,      7046547,  18,      15,   286181,  105,     142572,
};

/* ---- PRNG and Zipf ----------------------------------------------------------------- */

/* The library's generator (core/rng.h): the same sequences, one copy. */
void trace_rng_seed(struct trace_rng *r, uint64_t seed) { em_rng_seed(r->s, seed); }

uint64_t trace_rng_next(struct trace_rng *r) { return em_rng_next(r->s); }

double trace_rng_unit(struct trace_rng *r)
{
	return (double)(trace_rng_next(r) >> 11) * 0x1.0p-53;
}

static uint64_t rng_below(struct trace_rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)trace_rng_next(r) * n) >> 64);
}

static double helper1(double x) /* log1p(x) / x */
{
	return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

static double helper2(double x) /* expm1(x) / x */
{
	return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

/* H(x): an integral of h(x) = x^-s */
static double zipf_H(const struct trace_zipf *z, double x)
{
	double lx = log(x);
	return helper2((1 - z->s) * lx) * lx;
}

static double zipf_h(const struct trace_zipf *z, double x)
{
	return exp(-z->s * log(x));
}

static double zipf_Hinv(const struct trace_zipf *z, double x)
{
	double t = x * (1 - z->s);
	if (t < -1)
		t = -1;
	return exp(helper1(t) * x);
}

void trace_zipf_init(struct trace_zipf *z, uint64_t n, double s)
{
	z->s = s;
	z->n = (double)n;
	z->h_x1 = zipf_H(z, 1.5) - 1;
	z->h_n = zipf_H(z, z->n + 0.5);
	z->s_lim = 2 - zipf_Hinv(z, zipf_H(z, 2.5) - zipf_h(z, 2));
}

uint64_t trace_zipf_sample(const struct trace_zipf *z, struct trace_rng *r)
{
	for (;;) {
		double u = z->h_n + trace_rng_unit(r) * (z->h_x1 - z->h_n);
		double x = zipf_Hinv(z, u);
		double k = floor(x + 0.5);
		if (k < 1)
			k = 1;
		else if (k > z->n)
			k = z->n;
		if (k - x <= z->s_lim || u >= zipf_H(z, k + 0.5) - zipf_h(z, k))
			return (uint64_t)k;
	}
}

/* ---- generation ------------------------------------------------------------------- */

void trace_params_default(struct trace_params *p)
{
	memset(p, 0, sizeof(*p));
	p->ntables = TRACE_CRITEO_TABLES;
	p->scale = 1.0;
	p->skew = 1.05;
	p->batch_size = 16384;
	p->nbatches = 100;
	p->mode = TRACE_ZIPF;
	p->reuse_prob = 0.9;
	p->history = 65536;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

int trace_generate(const struct trace_params *p, struct trace *t)
{
	memset(t, 0, sizeof(*t));
	if (p->ntables == 0 || p->batch_size == 0 || !(p->skew > 0) || p->mode > TRACE_REUSE ||
	    (!p->rows && (p->ntables > TRACE_CRITEO_TABLES || !(p->scale > 0))) ||
	    (p->mode == TRACE_REUSE && (p->history == 0 || p->reuse_prob < 0 || p->reuse_prob > 1)))
		return -EINVAL;
	size_t n = (size_t)p->nbatches * p->ntables * p->batch_size;
	t->rows = malloc(p->ntables * sizeof(uint64_t));
	t->ids = malloc((n ? n : 1) * sizeof(uint32_t));
	uint32_t *hist = NULL;
	if (!t->rows || !t->ids)
		goto undo_enomem;
	t->ntables = p->ntables;
	t->batch_size = p->batch_size;
	t->nbatches = p->nbatches;
	t->mode = p->mode;
	t->seed = p->seed;
	t->skew = p->skew;
	t->reuse_prob = p->mode == TRACE_REUSE ? p->reuse_prob : 0;
	for (uint32_t tb = 0; tb < p->ntables; tb++) {
		uint64_t r = p->rows ? p->rows[tb]
				     : (uint64_t)llround((double)trace_criteo_rows[tb] * p->scale);
		if (r == 0)
			r = 1;
		if (r > UINT32_MAX) {
			trace_free(t);
			return -EINVAL;
		}
		t->rows[tb] = r;
	}
	if (p->mode == TRACE_REUSE) {
		hist = malloc((size_t)p->history * sizeof(uint32_t));
		if (!hist)
			goto undo_enomem;
	}
	/* one stream per table, so that a table's ids do not depend on the others' */
	for (uint32_t tb = 0; tb < p->ntables; tb++) {
		struct trace_rng rng;
		struct trace_zipf z;
		uint64_t rows = t->rows[tb];
		trace_rng_seed(&rng, p->seed * 0x100000001b3ull + tb + 1);
		/* rank -> row: (rank * a + c) mod rows, a coprime with rows */
		uint64_t a = 0x9e3779b1u % rows, c = trace_rng_next(&rng) % rows;
		if (a == 0)
			a = 1;
		while (gcd(a, rows) != 1)
			a++;
		uint32_t hlen = 0, hpos = 0, hcap = p->history;
		trace_zipf_init(&z, p->mode == TRACE_REUSE ? hcap : rows, p->skew);
		for (uint32_t b = 0; b < p->nbatches; b++) {
			uint32_t *ids = t->ids + ((size_t)b * p->ntables + tb) * p->batch_size;
			for (uint32_t i = 0; i < p->batch_size; i++) {
				uint64_t id;
				if (p->mode == TRACE_ZIPF) {
					uint64_t rank = trace_zipf_sample(&z, &rng) - 1;
					id = (uint64_t)(((unsigned __int128)rank * a + c) % rows);
				} else {
					if (hlen > 0 && trace_rng_unit(&rng) < p->reuse_prob) {
						/* Zipf over the history so far: a few tries,
						 * then uniform (only while the history fills) */
						uint64_t d = trace_zipf_sample(&z, &rng);
						for (int k = 0; d > hlen && k < 16; k++)
							d = trace_zipf_sample(&z, &rng);
						if (d > hlen)
							d = 1 + rng_below(&rng, hlen);
						id = hist[(hpos + hcap - d) % hcap];
					} else {
						id = rng_below(&rng, rows);
					}
					hist[hpos] = (uint32_t)id;
					hpos = (hpos + 1) % hcap;
					if (hlen < hcap)
						hlen++;
				}
				ids[i] = (uint32_t)id;
			}
		}
	}
	free(hist);
	return 0;

undo_enomem:
	free(hist);
	trace_free(t);
	return -ENOMEM;
}

void trace_free(struct trace *t)
{
	if (!t)
		return;
	free(t->rows);
	free(t->ids);
	memset(t, 0, sizeof(*t));
}

/* ---- files ------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static int write_all(int fd, const void *buf, size_t n, XXH64_state_t *h)
{
	const uint8_t *p = buf;
	if (h)
		XXH64_update(h, buf, n);
	while (n > 0) {
		ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n > 0) {
		ssize_t r = read(fd, p, n > (1u << 30) ? (1u << 30) : n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EBADMSG;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int trace_write(const struct trace *t, const char *path)
{
	uint8_t hdr[TRACE_HEADER] = {0};
	memcpy(hdr, TRACE_MAGIC, 8);
	put32(hdr + 8, TRACE_VERSION);
	put32(hdr + 12, t->ntables);
	put32(hdr + 16, t->batch_size);
	put32(hdr + 20, t->nbatches);
	put32(hdr + 24, t->mode);
	put64(hdr + 32, t->seed);
	memcpy(hdr + 40, &t->skew, 8);
	memcpy(hdr + 48, &t->reuse_prob, 8);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -errno;
	XXH64_state_t *h = XXH64_createState();
	int rc = h ? 0 : -ENOMEM;
	if (rc == 0)
		XXH64_reset(h, 0);
	if (rc == 0)
		rc = write_all(fd, hdr, sizeof(hdr), h);
	if (rc == 0)
		rc = write_all(fd, t->rows, t->ntables * sizeof(uint64_t), h);
	if (rc == 0)
		rc = write_all(fd, t->ids,
			       (size_t)t->nbatches * t->ntables * t->batch_size * sizeof(uint32_t), h);
	if (rc == 0) {
		uint8_t sum[8];
		put64(sum, XXH64_digest(h));
		rc = write_all(fd, sum, 8, NULL);
	}
	XXH64_freeState(h);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

int trace_read(const char *path, struct trace *t)
{
	memset(t, 0, sizeof(*t));
	uint8_t hdr[TRACE_HEADER];
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	struct stat sb;
	int rc = fstat(fd, &sb) < 0 ? -errno : read_all(fd, hdr, sizeof(hdr));
	uint32_t ver = 0;
	if (rc == 0) {
		memcpy(&ver, hdr + 8, 4);
		memcpy(&t->ntables, hdr + 12, 4);
		memcpy(&t->batch_size, hdr + 16, 4);
		memcpy(&t->nbatches, hdr + 20, 4);
		memcpy(&t->mode, hdr + 24, 4);
		memcpy(&t->seed, hdr + 32, 8);
		memcpy(&t->skew, hdr + 40, 8);
		memcpy(&t->reuse_prob, hdr + 48, 8);
		if (memcmp(hdr, TRACE_MAGIC, 8) != 0 || ver != TRACE_VERSION || t->ntables == 0 ||
		    t->ntables > 65535 || t->mode > TRACE_REUSE)
			rc = -EBADMSG;
	}
	size_t nids = (size_t)t->nbatches * t->ntables * t->batch_size;
	if (rc == 0 && (uint64_t)sb.st_size != TRACE_HEADER + 8ull * t->ntables + 4ull * nids + 8)
		rc = -EBADMSG;
	if (rc == 0) {
		t->rows = malloc(t->ntables * sizeof(uint64_t));
		t->ids = malloc((nids ? nids : 1) * sizeof(uint32_t));
		if (!t->rows || !t->ids)
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = read_all(fd, t->rows, t->ntables * sizeof(uint64_t));
	if (rc == 0)
		rc = read_all(fd, t->ids, nids * sizeof(uint32_t));
	uint8_t sum[8];
	if (rc == 0)
		rc = read_all(fd, sum, 8);
	if (rc == 0) {
		XXH64_state_t *h = XXH64_createState();
		if (!h) {
			rc = -ENOMEM;
		} else {
			uint64_t want;
			memcpy(&want, sum, 8);
			XXH64_reset(h, 0);
			XXH64_update(h, hdr, sizeof(hdr));
			XXH64_update(h, t->rows, t->ntables * sizeof(uint64_t));
			XXH64_update(h, t->ids, nids * sizeof(uint32_t));
			if (XXH64_digest(h) != want)
				rc = -EBADMSG;
			XXH64_freeState(h);
		}
	}
	for (uint32_t tb = 0; rc == 0 && tb < t->ntables; tb++)
		if (t->rows[tb] == 0 || t->rows[tb] > UINT32_MAX)
			rc = -EBADMSG;
	for (size_t i = 0; rc == 0 && i < nids; i++) /* every id within its table */
		if (t->ids[i] >= t->rows[(i / t->batch_size) % t->ntables])
			rc = -EBADMSG;
	close(fd);
	if (rc < 0)
		trace_free(t);
	return rc;
}
