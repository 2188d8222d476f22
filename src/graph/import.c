/*
 * import.c - ember_graph_import: an edge list into partitions and edge buckets.
 *
 * How it works
 * ------------
 *   1. scan   (only when num_nodes is not given) read the input once to find the
 *             largest id; every malformed line is reported here with its number.
 *   2. sort   read the input again; map each endpoint through the permutation
 *             (graph.c) and turn the edge into a 16-byte run record (bucket, src
 *             local, rel, dst local); fill a buffer of memory_budget bytes, sort it
 *             by (bucket, src, dst, rel) and write it out as a run file.
 *   3. merge  merge the runs (a heap over one read buffer per run). With more runs
 *             than the budget gives read buffers for, or than half the descriptors
 *             the process may still open (fan-in), runs are first merged
 *             in groups into longer runs (merge passes). The final merge feeds the
 *             bucket writer, which cuts each bucket into chunks of edges_per_chunk
 *             12-byte records and puts them. If everything fits in one buffer no
 *             file is written at all.
 *   4. nodes  write each partition's node data in chunks: rows of the uniform
 *             initialiser, zeros, or rows of the node data file (mapped read-only;
 *             row of new id n = file row perm^-1(n)).
 *   5. train  (optional) training nodes, per partition, as sorted local ids.
 *   6. commit bucket counts, training counts, then the metadata record.
 *
 * Memory: the sort buffer (memory_budget) or, while merging, the read buffers
 * (together at most memory_budget), one chunk, the p x p bucket counts, and the
 * training nodes. Invariant: a graph's metadata is written only after everything
 * it describes, so a failed import leaves no graph behind.
 */
#include "graph/graph_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"

#define LINE_MAX_BYTES 4096u
#define READ_BUF (1u << 20)
#define MERGE_MIN_BUF (64u << 10)

struct run_rec {
	uint32_t bucket, src, rel, dst;
};

struct import {
	ember_db *db;
	ember_session *s;
	const char *name;
	size_t name_len;
	const char *edges_path;
	ember_graph_import_options o;
	ember_graph_import_result *res;
	struct graph_meta meta;
	struct graph_perm perm;
	uint64_t *counts;
	uint64_t file_bytes;
	uint32_t fields;     /* 2 or 3 once known */
	uint32_t max_rel;
	uint64_t max_id;
	uint64_t edges;
	char tmp[4096];      /* run directory ("" until made) */
	uint32_t nruns;      /* run files named run-<i> in tmp */
	uint32_t next_run;
	double last_progress;
	/* bucket writer */
	uint8_t *chunk;
	uint32_t chunk_fill;  /* edges in chunk */
	uint32_t cur_bucket;
	uint32_t cur_chunk;
	int have_bucket;
};

static int fail(struct import *im, int rc, uint64_t line, const char *file, const char *fmt, ...)
{
	if (im->res) {
		im->res->error_line = line;
		snprintf(im->res->error_file, sizeof(im->res->error_file), "%s", file ? file : "");
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(im->res->error, sizeof(im->res->error), fmt, ap);
		va_end(ap);
	}
	return rc;
}

static void progress(struct import *im, const char *phase, uint64_t done, uint64_t total,
		     int final)
{
	if (!im->o.progress)
		return;
	double now = graph_now();
	if (!final && now - im->last_progress < 0.25)
		return;
	im->last_progress = now;
	im->o.progress(im->o.progress_arg, phase, done, total);
}

/* ---- reading the edge list ------------------------------------------------------ */

struct reader {
	int fd;
	uint8_t *buf;
	size_t len, pos;
	int eof;
	uint64_t line;     /* number of the line (record) last returned */
	uint64_t consumed; /* bytes handed out */
};

static int reader_open(struct reader *r, const char *path)
{
	memset(r, 0, sizeof(*r));
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0)
		return -errno;
	r->buf = em_alloc(READ_BUF);
	if (!r->buf) {
		close(r->fd);
		return EMBER_ENOMEM;
	}
	return 0;
}

static void reader_close(struct reader *r)
{
	if (r->buf)
		em_free(r->buf, READ_BUF);
	if (r->fd >= 0)
		close(r->fd);
	r->buf = NULL;
	r->fd = -1;
}

/* Make at least `want` unread bytes available unless the file ends first. */
static int reader_fill(struct reader *r, size_t want)
{
	if (r->len - r->pos >= want || r->eof)
		return 0;
	memmove(r->buf, r->buf + r->pos, r->len - r->pos);
	r->len -= r->pos;
	r->pos = 0;
	while (r->len < READ_BUF && !r->eof) {
		ssize_t n = read(r->fd, r->buf + r->len, READ_BUF - r->len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			r->eof = 1;
		r->len += (size_t)n;
		if (r->len - r->pos >= want)
			break;
	}
	return 0;
}

/* Next line (without its '\n'); *len = 0 and *line = NULL at the end. A line of
 * more than LINE_MAX_BYTES bytes (before its '\n') is EMBER_ECORRUPT wherever it
 * lies: whole in the buffer, cut by the buffer's end, or last in the file. */
static int reader_line(struct reader *r, const char **line, size_t *len)
{
	for (;;) {
		uint8_t *start = r->buf + r->pos;
		uint8_t *nl = memchr(start, '\n', r->len - r->pos);
		if (nl) {
			if ((size_t)(nl - start) > LINE_MAX_BYTES) {
				r->line++;
				return EMBER_ECORRUPT;
			}
			*line = (const char *)start;
			*len = (size_t)(nl - start);
			r->pos += *len + 1;
			r->consumed += *len + 1;
			r->line++;
			return 0;
		}
		if (r->eof) {
			if (r->pos == r->len) {
				*line = NULL;
				*len = 0;
				return 0;
			}
			if (r->len - r->pos > LINE_MAX_BYTES) {
				r->line++;
				return EMBER_ECORRUPT;
			}
			*line = (const char *)start; /* a last line without '\n' */
			*len = r->len - r->pos;
			r->consumed += *len;
			r->pos = r->len;
			r->line++;
			return 0;
		}
		if (r->len - r->pos > LINE_MAX_BYTES) {
			r->line++;
			return EMBER_ECORRUPT;
		}
		int rc = reader_fill(r, r->len - r->pos + 1);
		if (rc < 0)
			return rc;
	}
}

/*
 * Parse "a b" or "a b c": decimal u64s separated by spaces or tabs, optional
 * leading and trailing blanks and a trailing '\r'. *nf = 0 for a blank or '#'
 * line. Returns 0 or EMBER_ECORRUPT with *why set.
 */
static int parse_line(const char *p, size_t len, uint64_t v[3], uint32_t *nf, const char **why)
{
	size_t i = 0;
	uint32_t n = 0;
	if (len && p[len - 1] == '\r')
		len--;
	for (;;) {
		while (i < len && (p[i] == ' ' || p[i] == '\t'))
			i++;
		if (i == len)
			break;
		if (n == 0 && p[i] == '#') {
			*nf = 0;
			return 0;
		}
		if (p[i] < '0' || p[i] > '9') {
			*why = "expected a non-negative decimal integer";
			return EMBER_ECORRUPT;
		}
		if (n == 3) {
			*why = "more than three fields";
			return EMBER_ECORRUPT;
		}
		uint64_t x = 0;
		while (i < len && p[i] >= '0' && p[i] <= '9') {
			uint64_t d = (uint64_t)(p[i] - '0');
			if (x > (UINT64_MAX - d) / 10) {
				*why = "integer out of range";
				return EMBER_ECORRUPT;
			}
			x = x * 10 + d;
			i++;
		}
		if (i < len && p[i] != ' ' && p[i] != '\t') {
			*why = "unexpected character after an integer";
			return EMBER_ECORRUPT;
		}
		v[n++] = x;
	}
	if (n == 1) {
		*why = "one field (want \"src dst\" or \"src rel dst\")";
		return EMBER_ECORRUPT;
	}
	*nf = n;
	return 0;
}

/*
 * The next edge of the input (src, rel, dst in original ids); *got = 0 at the end.
 * Checks field counts and ids against the known node count (limit: ids must be
 * below it; UINT64_MAX during the scan).
 */
static int next_edge(struct import *im, struct reader *r, uint64_t limit, uint64_t e[3], int *got)
{
	*got = 0;
	if (im->o.format == EMBER_GRAPH_BINARY) {
		size_t rec = (size_t)im->o.binary_fields * 8;
		int rc = reader_fill(r, rec);
		if (rc < 0)
			return fail(im, rc, 0, "edges", "read failed");
		size_t left = r->len - r->pos;
		if (left == 0)
			return 0;
		r->line++;
		if (left < rec)
			return fail(im, EMBER_ECORRUPT, r->line, "edges",
				    "the file ends inside record %llu (%zu of %zu bytes)",
				    (unsigned long long)r->line, left, rec);
		uint64_t v[3];
		memcpy(v, r->buf + r->pos, rec);
		r->pos += rec;
		r->consumed += rec;
		e[0] = v[0];
		e[1] = im->o.binary_fields == 3 ? v[1] : 0;
		e[2] = im->o.binary_fields == 3 ? v[2] : v[1];
		im->fields = im->o.binary_fields;
	} else {
		for (;;) {
			const char *line;
			size_t len;
			int rc = reader_line(r, &line, &len);
			if (rc == EMBER_ECORRUPT)
				return fail(im, rc, r->line, "edges", "line longer than %u bytes",
					    LINE_MAX_BYTES);
			if (rc < 0)
				return fail(im, rc, 0, "edges", "read failed");
			if (!line)
				return 0;
			uint64_t v[3];
			uint32_t nf = 0;
			const char *why = NULL;
			rc = parse_line(line, len, v, &nf, &why);
			if (rc < 0)
				return fail(im, rc, r->line, "edges", "line %llu: %s",
					    (unsigned long long)r->line, why);
			if (nf == 0)
				continue;
			if (im->fields == 0)
				im->fields = nf;
			if (nf != im->fields)
				return fail(im, EMBER_ECORRUPT, r->line, "edges",
					    "line %llu: %u fields where the first edge had %u",
					    (unsigned long long)r->line, nf, im->fields);
			e[0] = v[0];
			e[1] = nf == 3 ? v[1] : 0;
			e[2] = nf == 3 ? v[2] : v[1];
			break;
		}
	}
	if (e[0] >= limit || e[2] >= limit)
		return fail(im, EMBER_ECORRUPT, r->line, "edges",
			    "line %llu: node id %llu is not below the node count %llu",
			    (unsigned long long)r->line,
			    (unsigned long long)(e[0] >= limit ? e[0] : e[2]),
			    (unsigned long long)limit);
	if (e[1] >= UINT32_MAX)
		return fail(im, EMBER_ECORRUPT, r->line, "edges",
			    "line %llu: relation id %llu too large", (unsigned long long)r->line,
			    (unsigned long long)e[1]);
	*got = 1;
	return 0;
}

static int scan_pass(struct import *im)
{
	struct reader r;
	int rc = reader_open(&r, im->edges_path);
	if (rc < 0)
		return fail(im, rc, 0, "edges", "cannot open %s", im->edges_path);
	uint64_t e[3];
	int got;
	uint64_t max = 0, n = 0;
	for (;;) {
		rc = next_edge(im, &r, UINT64_MAX - 1, e, &got);
		if (rc < 0 || !got)
			break;
		n++;
		if (e[0] > max)
			max = e[0];
		if (e[2] > max)
			max = e[2];
		if ((n & 0xffff) == 0)
			progress(im, "scan", r.consumed, im->file_bytes, 0);
	}
	if (rc == 0)
		progress(im, "scan", r.consumed, im->file_bytes, 1);
	reader_close(&r);
	if (rc < 0)
		return rc;
	if (n == 0)
		return fail(im, EMBER_ECORRUPT, 0, "edges", "the edge list holds no edge");
	im->max_id = max;
	return 0;
}

/* ---- runs ----------------------------------------------------------------------------- */

static int rec_cmp(const void *a, const void *b)
{
	const struct run_rec *x = a, *y = b;
	uint64_t xh = (uint64_t)x->bucket << 32 | x->src, yh = (uint64_t)y->bucket << 32 | y->src;
	if (xh != yh)
		return xh < yh ? -1 : 1;
	uint64_t xl = (uint64_t)x->dst << 32 | x->rel, yl = (uint64_t)y->dst << 32 | y->rel;
	return xl < yl ? -1 : xl > yl;
}

static int rec_less(const struct run_rec *x, const struct run_rec *y)
{
	return rec_cmp(x, y) < 0;
}

static void run_path(struct import *im, uint32_t id, char *out, size_t cap)
{
	snprintf(out, cap, "%s/run-%u", im->tmp, id);
}

static int tmp_make(struct import *im)
{
	if (im->tmp[0])
		return 0;
	const char *base = im->o.tmp_dir;
	if (!base || !*base)
		base = getenv("TMPDIR");
	if (!base || !*base)
		base = "/tmp";
	if ((size_t)snprintf(im->tmp, sizeof(im->tmp) - 32, "%s/ember-graph-XXXXXX", base) >=
	    sizeof(im->tmp) - 32) {
		im->tmp[0] = 0;
		return fail(im, EMBER_EINVAL, 0, NULL, "tmp_dir path too long");
	}
	if (!mkdtemp(im->tmp)) {
		int rc = -errno;
		im->tmp[0] = 0;
		return fail(im, rc, 0, NULL, "cannot make a run directory under %s", base);
	}
	return 0;
}

static void tmp_remove(struct import *im)
{
	if (!im->tmp[0])
		return;
	char p[4200];
	for (uint32_t i = 0; i < im->next_run; i++) {
		run_path(im, i, p, sizeof(p));
		unlink(p);
	}
	rmdir(im->tmp);
	im->tmp[0] = 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
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

static int run_write(struct import *im, const struct run_rec *recs, size_t n, uint32_t *id)
{
	int rc = tmp_make(im);
	if (rc < 0)
		return rc;
	char p[4200];
	*id = im->next_run++;
	run_path(im, *id, p, sizeof(p));
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail(im, -errno, 0, NULL, "cannot create run file %s", p);
	rc = write_all(fd, recs, n * sizeof(*recs));
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		return fail(im, rc, 0, NULL, "cannot write run file %s", p);
	return 0;
}

/* ---- the bucket writer ----------------------------------------------------------- */

static int put_value(struct import *im, int kind, uint32_t a, uint32_t b, uint32_t c,
		     const void *v, size_t vlen)
{
	uint8_t key[GRAPH_KEY_MAX];
	size_t klen = graph_key(key, im->name, im->name_len, kind, a, b, c);
	int rc = ember_put(im->s, key, klen, v, vlen);
	if (rc < 0)
		return fail(im, rc, 0, NULL, "store put of a %zu-byte value failed", vlen);
	if (im->res)
		im->res->bytes_stored += vlen;
	return 0;
}

static int sink_flush(struct import *im)
{
	if (!im->have_bucket || im->chunk_fill == 0)
		return 0;
	uint32_t p = im->meta.partitions;
	int rc = put_value(im, GK_EDGES, im->cur_bucket / p, im->cur_bucket % p, im->cur_chunk,
			   im->chunk, (size_t)im->chunk_fill * GRAPH_EDGE_BYTES);
	im->cur_chunk++;
	im->chunk_fill = 0;
	return rc;
}

static int sink_edge(struct import *im, const struct run_rec *r)
{
	int rc;
	if (!im->have_bucket || r->bucket != im->cur_bucket) {
		rc = sink_flush(im);
		if (rc < 0)
			return rc;
		im->cur_bucket = r->bucket;
		im->cur_chunk = 0;
		im->have_bucket = 1;
	}
	uint32_t *d = (uint32_t *)(im->chunk + (size_t)im->chunk_fill * GRAPH_EDGE_BYTES);
	d[0] = r->src;
	d[1] = r->rel;
	d[2] = r->dst;
	im->counts[r->bucket]++;
	im->edges++;
	if (++im->chunk_fill == im->meta.edges_per_chunk)
		return sink_flush(im);
	if ((im->edges & 0xffff) == 0)
		progress(im, "merge", im->edges, im->meta.num_edges, 0);
	return 0;
}

/* ---- merging --------------------------------------------------------------------- */

struct run_in {
	int fd;
	struct run_rec *buf;
	size_t cap, len, pos; /* in records */
	int eof;
};

static int run_in_next(struct run_in *ri, const struct run_rec **out)
{
	if (ri->pos == ri->len) {
		if (ri->eof) {
			*out = NULL;
			return 0;
		}
		size_t got = 0, want = ri->cap * sizeof(struct run_rec);
		uint8_t *b = (uint8_t *)ri->buf;
		while (got < want) {
			ssize_t n = read(ri->fd, b + got, want - got);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return -errno;
			}
			if (n == 0) {
				ri->eof = 1;
				break;
			}
			got += (size_t)n;
		}
		if (got % sizeof(struct run_rec))
			return EMBER_EIO; /* our own file came back short */
		ri->len = got / sizeof(struct run_rec);
		ri->pos = 0;
		if (ri->len == 0) {
			*out = NULL;
			return 0;
		}
	}
	*out = &ri->buf[ri->pos++];
	return 0;
}

/* Merge runs first..first+k-1 into a new run file (out_id) or, when out_id is NULL,
 * into the bucket writer. */
static int merge_runs(struct import *im, uint32_t first, uint32_t k, uint32_t *out_id)
{
	int rc = 0;
	size_t per = (size_t)(im->o.memory_budget / (k + 1)) / sizeof(struct run_rec);
	if (per < 1024)
		per = 1024;
	struct run_in *in = em_zalloc(k * sizeof(*in));
	const struct run_rec **head = em_zalloc(k * sizeof(*head));
	uint32_t *heap = em_alloc(k * sizeof(*heap));
	struct run_rec *out = out_id ? em_alloc(per * sizeof(*out)) : NULL;
	int out_fd = -1;
	size_t out_len = 0;
	if (!in || !head || !heap || (out_id && !out)) {
		rc = fail(im, EMBER_ENOMEM, 0, NULL, "out of memory merging runs");
		goto undo_mem;
	}
	for (uint32_t i = 0; i < k; i++)
		in[i].fd = -1;
	char p[4200];
	for (uint32_t i = 0; i < k; i++) {
		run_path(im, first + i, p, sizeof(p));
		in[i].fd = open(p, O_RDONLY | O_CLOEXEC);
		in[i].cap = per;
		in[i].buf = em_alloc(per * sizeof(struct run_rec));
		if (in[i].fd < 0 || !in[i].buf) {
			rc = fail(im, in[i].fd < 0 ? -errno : EMBER_ENOMEM, 0, NULL,
				  "cannot open run %s", p);
			goto undo_files;
		}
	}
	if (out_id) {
		rc = tmp_make(im);
		if (rc < 0)
			goto undo_files;
		*out_id = im->next_run++;
		run_path(im, *out_id, p, sizeof(p));
		out_fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (out_fd < 0) {
			rc = fail(im, -errno, 0, NULL, "cannot create run file %s", p);
			goto undo_files;
		}
	}
	/* a binary min-heap of run indices keyed by their head record */
	uint32_t hn = 0;
	for (uint32_t i = 0; i < k; i++) {
		rc = run_in_next(&in[i], &head[i]);
		if (rc < 0)
			goto undo_files;
		if (!head[i])
			continue;
		uint32_t j = hn++;
		while (j > 0 && rec_less(head[i], head[heap[(j - 1) / 2]])) {
			heap[j] = heap[(j - 1) / 2];
			j = (j - 1) / 2;
		}
		heap[j] = i;
	}
	while (hn > 0) {
		uint32_t top = heap[0];
		if (out_id) {
			out[out_len++] = *head[top];
			if (out_len == per) {
				rc = write_all(out_fd, out, out_len * sizeof(*out));
				out_len = 0;
			}
		} else {
			rc = sink_edge(im, head[top]);
		}
		if (rc < 0)
			goto undo_files;
		rc = run_in_next(&in[top], &head[top]);
		if (rc < 0)
			goto undo_files;
		uint32_t moving = top;
		if (!head[top])
			moving = heap[--hn];
		/* sift `moving` down from the root */
		uint32_t j = 0;
		for (;;) {
			uint32_t l = 2 * j + 1, m = j;
			const struct run_rec *best = head[moving];
			if (l < hn && rec_less(head[heap[l]], best)) {
				m = l;
				best = head[heap[l]];
			}
			if (l + 1 < hn && rec_less(head[heap[l + 1]], best))
				m = l + 1;
			if (m == j)
				break;
			heap[j] = heap[m];
			j = m;
		}
		if (hn > 0)
			heap[j] = moving;
	}
	if (out_id && out_len)
		rc = write_all(out_fd, out, out_len * sizeof(*out));
undo_files:
	if (out_fd >= 0 && close(out_fd) < 0 && rc == 0)
		rc = -errno;
	for (uint32_t i = 0; i < k; i++) {
		if (in[i].fd >= 0)
			close(in[i].fd);
		em_free(in[i].buf, 0);
		run_path(im, first + i, p, sizeof(p));
		unlink(p); /* merged: no longer needed */
	}
undo_mem:
	em_free(in, 0);
	em_free(head, 0);
	em_free(heap, 0);
	em_free(out, 0);
	return rc;
}

/* Run files one merge may hold open: half of the descriptors the process may still
 * open (the RLIMIT_NOFILE soft limit less those open now), leaving the other half
 * to the store, which opens files of its own while the final merge puts chunks.
 * Without it the fan-in (up to 1024) alone passes the usual limit of 1024. */
static uint64_t fd_room(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return UINT64_MAX; /* no count: the limit is met as EMFILE, reported */
	uint64_t open_now = 0;
	while (readdir(d))
		open_now++;
	closedir(d);
	open_now = open_now > 3 ? open_now - 3 : 0; /* ".", ".." and d's own */
	return (uint64_t)rl.rlim_cur > open_now ? ((uint64_t)rl.rlim_cur - open_now) / 2 : 0;
}

/* ---- the sort pass ------------------------------------------------------------------ */

static int sort_pass(struct import *im)
{
	struct graph_meta *m = &im->meta;
	size_t cap = (size_t)(im->o.memory_budget / sizeof(struct run_rec));
	struct run_rec *recs = em_alloc(cap * sizeof(*recs));
	if (!recs)
		return fail(im, EMBER_ENOMEM, 0, NULL, "cannot allocate the sort buffer");
	struct reader r;
	int rc = reader_open(&r, im->edges_path);
	if (rc < 0) {
		em_free(recs, 0);
		return fail(im, rc, 0, "edges", "cannot open %s", im->edges_path);
	}
	size_t n = 0;
	uint64_t total = 0;
	uint32_t id;
	for (;;) {
		uint64_t e[3];
		int got;
		rc = next_edge(im, &r, m->num_nodes, e, &got);
		if (rc < 0)
			goto out;
		if (!got)
			break;
		uint64_t s = graph_perm_fwd(&im->perm, e[0]), d = graph_perm_fwd(&im->perm, e[2]);
		uint32_t sp = (uint32_t)(s / m->partition_size), dp = (uint32_t)(d / m->partition_size);
		recs[n++] = (struct run_rec){.bucket = sp * m->partitions + dp,
					     .src = (uint32_t)(s - (uint64_t)sp * m->partition_size),
					     .rel = (uint32_t)e[1],
					     .dst = (uint32_t)(d - (uint64_t)dp * m->partition_size)};
		if (e[1] > im->max_rel)
			im->max_rel = (uint32_t)e[1];
		total++;
		if (n == cap) {
			qsort(recs, n, sizeof(*recs), rec_cmp);
			rc = run_write(im, recs, n, &id);
			if (rc < 0)
				goto out;
			im->nruns++;
			n = 0;
		}
		if ((total & 0xffff) == 0)
			progress(im, "sort", r.consumed, im->file_bytes, 0);
	}
	progress(im, "sort", r.consumed, im->file_bytes, 1);
	if (total == 0) {
		rc = fail(im, EMBER_ECORRUPT, 0, "edges", "the edge list holds no edge");
		goto out;
	}
	m->num_edges = total;
	qsort(recs, n, sizeof(*recs), rec_cmp);
	if (im->nruns == 0) {
		/* everything fit: straight into the buckets, no file written */
		for (size_t i = 0; i < n && rc == 0; i++)
			rc = sink_edge(im, &recs[i]);
		goto out;
	}
	if (n) {
		rc = run_write(im, recs, n, &id);
		if (rc < 0)
			goto out;
		im->nruns++;
	}
	em_free(recs, 0);
	recs = NULL;
	reader_close(&r);
	/* merge passes until one final merge can take every run */
	uint64_t fan = im->o.memory_budget / MERGE_MIN_BUF - 1, room = fd_room();
	if (fan > 1024)
		fan = 1024;
	if (fan > room)
		fan = room;
	uint32_t fanin = fan < 2 ? 2 : (uint32_t)fan;
	uint32_t first = 0, live = im->nruns;
	while (live > fanin) {
		uint32_t k = live - fanin + 1 < fanin ? live - fanin + 1 : fanin;
		rc = merge_runs(im, first, k, &id);
		if (rc < 0)
			return rc;
		first += k;
		live -= k - 1;
		if (im->res)
			im->res->merge_passes++;
	}
	return merge_runs(im, first, live, NULL);
out:
	em_free(recs, 0);
	reader_close(&r);
	return rc;
}

/* ---- node data ---------------------------------------------------------------------- */

static int nodes_pass(struct import *im)
{
	const struct graph_meta *m = &im->meta;
	size_t row = (size_t)m->dim * 4;
	const uint8_t *file = NULL;
	size_t file_len = 0;
	int rc = 0, fd = -1;
	if (im->o.init == EMBER_GRAPH_INIT_FILE) {
		fd = open(im->o.node_data_path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return fail(im, -errno, 0, "node data", "cannot open %s",
				    im->o.node_data_path);
		struct stat st;
		if (fstat(fd, &st) < 0) {
			rc = fail(im, -errno, 0, "node data", "cannot stat the node data file");
			goto undo_fd;
		}
		if ((uint64_t)st.st_size != m->num_nodes * row) {
			rc = fail(im, EMBER_ECORRUPT, 0, "node data",
				  "node data file holds %llu bytes, want %llu nodes x %u floats",
				  (unsigned long long)st.st_size, (unsigned long long)m->num_nodes,
				  m->dim);
			goto undo_fd;
		}
		file_len = (size_t)st.st_size;
		file = mmap(NULL, file_len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (file == MAP_FAILED) {
			file = NULL;
			rc = fail(im, -errno, 0, "node data", "cannot map the node data file");
			goto undo_fd;
		}
	}
	uint8_t *chunk = em_alloc((size_t)m->rows_per_chunk * row);
	if (!chunk) {
		rc = fail(im, EMBER_ENOMEM, 0, NULL, "out of memory");
		goto undo_map;
	}
	for (uint32_t part = 0; part < m->partitions && rc == 0; part++) {
		uint64_t rows = graph_part_rows(m, part), base = (uint64_t)part * m->partition_size;
		for (uint64_t c0 = 0; c0 < rows && rc == 0; c0 += m->rows_per_chunk) {
			uint64_t nr = rows - c0 < m->rows_per_chunk ? rows - c0 : m->rows_per_chunk;
			float *f = (float *)chunk;
			for (uint64_t i = 0; i < nr; i++) {
				uint64_t node = base + c0 + i;
				if (file) {
					uint64_t orig = graph_perm_inv(&im->perm, node);
					memcpy(f + i * m->dim, file + orig * row, row);
				} else if (im->o.init == EMBER_GRAPH_INIT_ZERO) {
					memset(f + i * m->dim, 0, row);
				} else {
					for (uint32_t d = 0; d < m->dim; d++)
						f[i * m->dim + d] = graph_init_value(
							im->o.seed, node, d, im->o.init_scale);
				}
			}
			rc = put_value(im, GK_NODES, part, 0, (uint32_t)(c0 / m->rows_per_chunk),
				       chunk, nr * row);
		}
		progress(im, "nodes", part + 1, m->partitions, part + 1 == m->partitions);
	}
	em_free(chunk, 0);
undo_map:
	if (file)
		munmap((void *)file, file_len);
undo_fd:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* ---- training nodes ---------------------------------------------------------------- */

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Sort ids[0..n) and drop repeats; returns how many are left. */
static size_t ids_unique(uint64_t *ids, size_t n)
{
	qsort(ids, n, 8, u64_cmp);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (u == 0 || ids[u - 1] != ids[i])
			ids[u++] = ids[i];
	return u;
}

/* Training ids are made sorted and unique whenever their array fills, and it grows
 * only when more than half of it is then distinct ids: its size follows the number
 * of training nodes (under 4 x 8 bytes each), not the number of lines, however
 * often the file repeats an id. */
static int train_pass(struct import *im, uint64_t *train_counts)
{
	struct graph_meta *m = &im->meta;
	struct reader r;
	int rc = reader_open(&r, im->o.train_nodes_path);
	if (rc < 0)
		return fail(im, rc, 0, "train nodes", "cannot open %s", im->o.train_nodes_path);
	size_t n = 0, cap = 1024;
	uint64_t *ids = em_alloc(cap * 8);
	uint32_t *chunk = NULL;
	if (!ids) {
		rc = fail(im, EMBER_ENOMEM, 0, NULL, "out of memory");
		goto undo_reader;
	}
	for (;;) {
		const char *line;
		size_t len;
		rc = reader_line(&r, &line, &len);
		if (rc == EMBER_ECORRUPT)
			rc = fail(im, rc, r.line, "train nodes", "line longer than %u bytes",
				  LINE_MAX_BYTES);
		if (rc < 0 || !line)
			break;
		/* one id per line: parse as a line and want exactly one field */
		size_t i = 0;
		while (i < len && (line[i] == ' ' || line[i] == '\t'))
			i++;
		if (i == len || line[i] == '#' || (line[i] == '\r' && i + 1 == len))
			continue;
		uint64_t v = 0;
		int digits = 0, bad = 0;
		while (i < len && line[i] >= '0' && line[i] <= '9') {
			uint64_t d = (uint64_t)(line[i++] - '0');
			if (v > (UINT64_MAX - d) / 10)
				bad = 1;
			v = v * 10 + d;
			digits++;
		}
		while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
			i++;
		if (!digits || bad || i != len || v >= m->num_nodes) {
			rc = fail(im, EMBER_ECORRUPT, r.line, "train nodes",
				  "line %llu: want one node id below %llu", (unsigned long long)r.line,
				  (unsigned long long)m->num_nodes);
			break;
		}
		if (n == cap) {
			n = ids_unique(ids, n); /* full: repeats cost no memory */
			if (n > cap / 2) {
				uint64_t *bigger = em_alloc(cap * 2 * 8);
				if (!bigger) {
					rc = fail(im, EMBER_ENOMEM, 0, NULL, "out of memory");
					break;
				}
				memcpy(bigger, ids, n * 8);
				em_free(ids, 0);
				ids = bigger;
				cap *= 2;
			}
		}
		ids[n++] = graph_perm_fwd(&im->perm, v);
	}
	if (rc < 0)
		goto undo_ids;
	if (n == 0) {
		/* train_nodes = 0 means every node trains: a file that names no node must
		 * not be stored as the opposite of what it says */
		rc = fail(im, EMBER_ECORRUPT, 0, "train nodes", "the training node file names no node");
		goto undo_ids;
	}
	size_t u = ids_unique(ids, n);
	chunk = em_alloc((size_t)m->train_per_chunk * 4);
	if (!chunk) {
		rc = fail(im, EMBER_ENOMEM, 0, NULL, "out of memory");
		goto undo_ids;
	}
	size_t at = 0;
	for (uint32_t part = 0; part < m->partitions && rc == 0; part++) {
		uint64_t base = (uint64_t)part * m->partition_size, c = 0;
		uint32_t fill = 0, ci = 0;
		while (at < u && ids[at] < base + m->partition_size && rc == 0) {
			chunk[fill++] = (uint32_t)(ids[at++] - base);
			c++;
			if (fill == m->train_per_chunk) {
				rc = put_value(im, GK_TRAIN, part, 0, ci++, chunk, (size_t)fill * 4);
				fill = 0;
			}
		}
		if (fill && rc == 0)
			rc = put_value(im, GK_TRAIN, part, 0, ci, chunk, (size_t)fill * 4);
		train_counts[part] = c;
	}
	m->train_nodes = u;
	progress(im, "train", u, u, 1);
	em_free(chunk, 0);
undo_ids:
	em_free(ids, 0);
undo_reader:
	reader_close(&r);
	return rc;
}

/* ---- the call -------------------------------------------------------------------------- */

static int options_check(struct import *im, const ember_graph_import_options *o)
{
	if (!o)
		return fail(im, EMBER_EINVAL, 0, NULL, "options are required (partitions, dim)");
	im->o = *o;
	ember_graph_import_options *x = &im->o;
	if (x->partitions == 0 || x->partitions > EMBER_GRAPH_MAX_PARTITIONS)
		return fail(im, EMBER_EINVAL, 0, NULL, "partitions must be 1..%u",
			    EMBER_GRAPH_MAX_PARTITIONS);
	if (x->dim == 0 || x->dim > EMBER_GRAPH_MAX_DIM)
		return fail(im, EMBER_EINVAL, 0, NULL, "dim must be 1..%u", EMBER_GRAPH_MAX_DIM);
	if (x->format != EMBER_GRAPH_TEXT && x->format != EMBER_GRAPH_BINARY)
		return fail(im, EMBER_EINVAL, 0, NULL, "unknown format %u", x->format);
	if (x->binary_fields == 0)
		x->binary_fields = 2;
	if (x->binary_fields != 2 && x->binary_fields != 3)
		return fail(im, EMBER_EINVAL, 0, NULL, "binary_fields must be 2 or 3");
	if (x->init > EMBER_GRAPH_INIT_FILE || (x->init == EMBER_GRAPH_INIT_FILE && !x->node_data_path))
		return fail(im, EMBER_EINVAL, 0, NULL, "bad init (a file init needs node_data_path)");
	if (x->init_scale == 0.0f)
		x->init_scale = 0.1f;
	if (!(x->init_scale > 0.0f) || x->init_scale > 1e30f)
		return fail(im, EMBER_EINVAL, 0, NULL, "init_scale must be positive");
	if (x->memory_budget == 0)
		x->memory_budget = 64ull << 20;
	if (x->memory_budget < (1ull << 20))
		return fail(im, EMBER_EINVAL, 0, NULL, "memory_budget must be at least 1 MiB");
	if (x->chunk_bytes == 0)
		x->chunk_bytes = 4u << 20;
	if (x->chunk_bytes < (64u << 10) || x->chunk_bytes > EMBER_MAX_VALUE_LEN)
		return fail(im, EMBER_EINVAL, 0, NULL, "chunk_bytes must be 64 KiB..16 MiB");
	if ((uint64_t)x->dim * 4 > x->chunk_bytes)
		return fail(im, EMBER_EINVAL, 0, NULL, "a node row (dim x 4 bytes) exceeds chunk_bytes");
	return 0;
}

int ember_graph_import(ember_db *db, const char *name, const char *edges_path,
		       const ember_graph_import_options *opts, ember_graph_import_result *res)
{
	struct import im;
	memset(&im, 0, sizeof(im));
	im.res = res;
	if (res)
		memset(res, 0, sizeof(*res));
	size_t nlen = name ? strnlen(name, EMBER_GRAPH_MAX_NAME + 1) : 0;
	if (!db || !edges_path || nlen == 0 || nlen > EMBER_GRAPH_MAX_NAME)
		return fail(&im, EMBER_EINVAL, 0, NULL, "db, name (1..%u bytes) and edges_path are required",
			    EMBER_GRAPH_MAX_NAME);
	int rc = options_check(&im, opts);
	if (rc < 0)
		return rc;
	im.db = db;
	im.name = name;
	im.name_len = nlen;
	im.edges_path = edges_path;
	struct stat st;
	if (stat(edges_path, &st) < 0)
		return fail(&im, -errno, 0, "edges", "cannot stat %s", edges_path);
	im.file_bytes = (uint64_t)st.st_size;
	rc = ember_session_open(db, &im.s);
	if (rc < 0)
		return fail(&im, rc, 0, NULL, "cannot open a store session");
	uint8_t key[GRAPH_KEY_MAX];
	size_t klen = graph_key(key, name, nlen, GK_META, 0, 0, 0), vlen = 0;
	rc = ember_get(im.s, key, klen, NULL, 0, &vlen);
	if (rc != EMBER_ENOTFOUND) {
		rc = fail(&im, rc < 0 && rc != EMBER_ERANGE ? rc : EMBER_EEXIST, 0, NULL,
			  "a graph named %s exists", name);
		goto undo_session;
	}
	rc = 0;

	struct graph_meta *m = &im.meta;
	m->num_nodes = im.o.num_nodes;
	if (m->num_nodes == 0) {
		rc = scan_pass(&im);
		if (rc < 0)
			goto undo_session;
		if (im.max_id == UINT64_MAX - 1) {
			rc = fail(&im, EMBER_ECORRUPT, 0, "edges", "node ids too large");
			goto undo_session;
		}
		m->num_nodes = im.max_id + 1;
		im.fields = 0;
	}
	m->magic = GRAPH_META_MAGIC;
	m->version = GRAPH_META_VERSION;
	m->partitions = im.o.partitions;
	m->dim = im.o.dim;
	/* ceil(num_nodes / p) without num_nodes + p - 1, which wraps for ids near 2^64
	 * (to a partition size of 0, and a division by zero when edges are bucketed) */
	m->partition_size = m->num_nodes / m->partitions + (m->num_nodes % m->partitions != 0);
	if (m->partition_size > UINT32_MAX) {
		rc = fail(&im, EMBER_EINVAL, 0, NULL, "more than 2^32-1 nodes per partition");
		goto undo_session;
	}
	m->perm_seed = im.o.seed;
	m->chunk_bytes = im.o.chunk_bytes;
	m->rows_per_chunk = im.o.chunk_bytes / (m->dim * 4);
	m->edges_per_chunk = im.o.chunk_bytes / GRAPH_EDGE_BYTES;
	m->counts_per_chunk = im.o.chunk_bytes / 8;
	m->train_per_chunk = im.o.chunk_bytes / 4;
	graph_perm_init(&im.perm, m->num_nodes, m->perm_seed);
	uint64_t pp = (uint64_t)m->partitions * m->partitions;
	im.counts = em_zalloc(pp * 8);
	im.chunk = em_alloc(im.o.chunk_bytes);
	uint64_t *train_counts = em_zalloc((size_t)m->partitions * 8);
	if (!im.counts || !im.chunk || !train_counts) {
		rc = fail(&im, EMBER_ENOMEM, 0, NULL, "out of memory");
		goto undo_mem;
	}

	rc = sort_pass(&im);
	if (rc == 0)
		rc = sink_flush(&im);
	progress(&im, "merge", im.edges, m->num_edges, 1);
	if (rc < 0)
		goto undo_tmp;
	m->relations = im.max_rel + 1;
	rc = nodes_pass(&im);
	if (rc < 0)
		goto undo_tmp;
	if (im.o.train_nodes_path) {
		rc = train_pass(&im, train_counts);
		if (rc < 0)
			goto undo_tmp;
	}
	/* commit: bucket counts, training counts, and the metadata record last */
	for (uint64_t at = 0, c = 0; at < pp && rc == 0; at += m->counts_per_chunk, c++) {
		uint64_t nv = pp - at < m->counts_per_chunk ? pp - at : m->counts_per_chunk;
		rc = put_value(&im, GK_COUNTS, 0, 0, (uint32_t)c, im.counts + at, nv * 8);
	}
	if (rc == 0 && m->train_nodes)
		rc = put_value(&im, GK_COUNTS, 1, 0, 0, train_counts, (size_t)m->partitions * 8);
	if (rc < 0)
		goto undo_tmp;
	graph_meta_seal(m);
	rc = put_value(&im, GK_META, 0, 0, 0, m, sizeof(*m));
	if (rc == 0 && res) {
		res->num_nodes = m->num_nodes;
		res->num_edges = m->num_edges;
		res->runs = im.nruns;
	}
undo_tmp:
	tmp_remove(&im);
undo_mem:
	em_free(train_counts, 0);
	em_free(im.chunk, 0);
	em_free(im.counts, 0);
undo_session:
	ember_session_close(im.s);
	return rc;
}
