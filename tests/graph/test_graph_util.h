/*
 * test_graph_util.h - helpers the partition buffer's tests share: a small store in
 * a temp dir, random edge lists written as text or binary, and a plan maker that
 * needs no ordering (pairs of blocks of c/2 partitions, buckets assigned at random
 * among the states that hold both ends).
 */
#ifndef TEST_GRAPH_UTIL_H
#define TEST_GRAPH_UTIL_H

#include "ember.h"
#include "ember_graph.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tg_edge {
	uint64_t src, rel, dst;
} tg_edge;

static inline ember_db *tg_open_store(char *dir, size_t cap, const char *tag)
{
	CHECK(tu_tmpdir_make(tag, dir, cap) == 0, "tmpdir");
	char sd[600];
	CHECK(tu_path_join(sd, sizeof(sd), dir, "store") == 0, "path");
	ember_options o;
	ember_options_default(&o);
	o.log_memory = 64u << 20;
	o.index_buckets = 1u << 12;
	o.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	CHECK_OK(ember_open(sd, &o, &db));
	return db;
}

/* Random edges over n nodes (skewed a little so some nodes have many). */
static inline tg_edge *tg_random_edges(tu_rng *r, uint64_t n, size_t m, uint32_t rels)
{
	tg_edge *e = malloc(m * sizeof(*e));
	CHECK(e, "malloc");
	for (size_t i = 0; i < m; i++) {
		uint64_t a = tu_rng_below(r, n), b = tu_rng_below(r, n);
		if (tu_rng_chance(r, 1, 4))
			a = tu_rng_below(r, n < 16 ? n : 16);
		e[i] = (tg_edge){a, rels > 1 ? tu_rng_below(r, rels) : 0, b};
	}
	return e;
}

/* Write edges as text ("a b" or "a r b"), with comments and blank lines mixed in. */
static inline void tg_write_text(const char *path, const tg_edge *e, size_t m, int rel,
				 tu_rng *r)
{
	FILE *f = fopen(path, "w");
	CHECK(f, "fopen %s", path);
	fprintf(f, "# a test edge list\n\n");
	for (size_t i = 0; i < m; i++) {
		if (tu_rng_chance(r, 1, 50))
			fprintf(f, "%s\n", tu_rng_chance(r, 1, 2) ? "# comment" : "   ");
		if (rel)
			fprintf(f, "%llu\t%llu %llu\n", (unsigned long long)e[i].src,
				(unsigned long long)e[i].rel, (unsigned long long)e[i].dst);
		else
			fprintf(f, "%llu %llu%s\n", (unsigned long long)e[i].src,
				(unsigned long long)e[i].dst, tu_rng_chance(r, 1, 10) ? " \r" : "");
	}
	CHECK(fclose(f) == 0, "fclose");
}

static inline void tg_write_binary(const char *path, const tg_edge *e, size_t m, int fields)
{
	FILE *f = fopen(path, "wb");
	CHECK(f, "fopen %s", path);
	for (size_t i = 0; i < m; i++) {
		uint64_t v[3] = {e[i].src, fields == 3 ? e[i].rel : e[i].dst, e[i].dst};
		CHECK(fwrite(v, 8, (size_t)fields, f) == (size_t)fields, "fwrite");
	}
	CHECK(fclose(f) == 0, "fclose");
}

static inline void tg_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f, "fopen %s", path);
	fputs(text, f);
	CHECK(fclose(f) == 0, "fclose");
}

/* Graph "g" of 2 partitions and dim floats per node, imported into db from the
 * edge list text (written to dir/edges.txt; num_nodes 0: from the ids), opened. */
static inline ember_graph *tg_small_graph(ember_db *db, const char *dir, const char *text,
					  uint32_t dim, uint64_t num_nodes)
{
	char path[600];
	CHECK(tu_path_join(path, sizeof(path), dir, "edges.txt") == 0, "path");
	tg_write_file(path, text);
	ember_graph_import_options io;
	ember_graph_import_options_default(&io);
	io.partitions = 2;
	io.dim = dim;
	io.num_nodes = num_nodes;
	io.chunk_bytes = 64u << 10;
	io.seed = tu_seed();
	CHECK_OK(ember_graph_import(db, "g", path, &io, NULL));
	ember_graph *g = NULL;
	CHECK_OK(ember_graph_open(db, "g", &g));
	return g;
}

/* A buffer (flags) over a 2-partition graph, in the one state of a plan that
 * holds both partitions. */
static inline ember_graph_buffer *tg_whole_buffer(ember_graph *g, uint32_t flags)
{
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = 2;
	bo.flags = flags;
	ember_graph_buffer *b = NULL;
	CHECK_OK(ember_graph_buffer_open(g, &bo, &b));
	uint32_t states[2] = {0, 1}, bs[4];
	for (int i = 0; i < 4; i++)
		bs[i] = EMBER_GRAPH_NO_STATE;
	ember_graph_plan plan = {.partitions = 2, .capacity = 2, .num_states = 1,
				 .states = states, .bucket_state = bs};
	CHECK_OK(ember_graph_buffer_set_plan(b, &plan));
	CHECK_OK(ember_graph_buffer_next_state(b, NULL));
	return b;
}

/*
 * A plan without an ordering: blocks of c/2 partitions (c even, c/2 divides p);
 * one state per unordered pair of blocks (and one per block when there is a single
 * block); every bucket goes to a random state holding both ends. The slot order of
 * each state is shuffled.
 */
typedef struct tg_plan {
	ember_graph_plan plan;
	uint32_t *states;
	uint32_t *bucket_state;
} tg_plan;

static inline void tg_plan_make(tg_plan *tp, uint32_t p, uint32_t c, tu_rng *r)
{
	CHECK(c % 2 == 0 && p % (c / 2) == 0 && c <= p, "plan shape p=%u c=%u", p, c);
	uint32_t h = c / 2, nb = p / h;
	uint32_t ns = nb == 1 ? 1 : nb * (nb - 1) / 2;
	tp->states = malloc((size_t)ns * c * 4);
	tp->bucket_state = malloc((size_t)p * p * 4);
	CHECK(tp->states && tp->bucket_state, "malloc");
	uint32_t k = 0;
	for (uint32_t a = 0; a < nb; a++)
		for (uint32_t b = a + 1; b < nb || (nb == 1 && b == 1); b++) {
			uint32_t *s = tp->states + (size_t)k * c;
			for (uint32_t i = 0; i < h; i++) {
				s[i] = a * h + i;
				s[h + i] = (nb == 1 ? a : b) * h + i;
			}
			if (nb == 1)
				for (uint32_t i = 0; i < c; i++)
					s[i] = i;
			for (uint32_t i = c - 1; i > 0; i--) {
				uint32_t j = (uint32_t)tu_rng_below(r, i + 1), t = s[i];
				s[i] = s[j];
				s[j] = t;
			}
			k++;
			if (nb == 1)
				break;
		}
	CHECK(k == ns, "states %u %u", k, ns);
	for (uint32_t i = 0; i < p; i++)
		for (uint32_t j = 0; j < p; j++) {
			uint32_t cand[4096], nc = 0;
			for (uint32_t s = 0; s < ns; s++) {
				int hi = 0, hj = 0;
				for (uint32_t q = 0; q < c; q++) {
					hi |= tp->states[(size_t)s * c + q] == i;
					hj |= tp->states[(size_t)s * c + q] == j;
				}
				if (hi && hj && nc < 4096)
					cand[nc++] = s;
			}
			CHECK(nc > 0, "bucket %u,%u has no state", i, j);
			tp->bucket_state[(size_t)i * p + j] = cand[tu_rng_below(r, nc)];
		}
	tp->plan = (ember_graph_plan){.partitions = p, .capacity = c, .num_states = ns,
				      .states = tp->states, .bucket_state = tp->bucket_state};
}

static inline void tg_plan_free(tg_plan *tp)
{
	free(tp->states);
	free(tp->bucket_state);
}

#endif
