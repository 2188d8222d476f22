/*
 * test_ordering_sim.c - the ordering simulator counts what its model says
 * (include/ember_graph.h): recomputed here by replaying each epoch's ordering
 * through a small model buffer that tracks resident and dirty partitions and the
 * resident bucket pairs, for BETA, COMET and SEQUENTIAL, several epochs, both
 * bucket models, with and without write-back. Also the closed forms for one BETA
 * epoch: c + swaps partitions read, swaps + c written.
 */
#include "ember_graph.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct model {
	uint32_t p, c;
	bool *resident;
	bool *dirty;
	bool *pair; /* p*p: bucket (i, j) is in the in-buffer graph */
} model;

/* Replay one epoch of ord through the model and fill *want. */
static void replay(model *m, const ember_graph_ordering *ord, const ember_graph_sim_options *so,
		   bool last_epoch, ember_graph_sim_epoch *want)
{
	uint32_t p = m->p, c = m->c;
	ember_graph_ordering_info info;
	CHECK_OK(ember_graph_ordering_info_get(ord, &info));
	memset(want, 0, sizeof(*want));
	want->swaps = info.swaps;
	want->lower_bound = info.lower_bound;
	const uint32_t *st0;
	CHECK_OK(ember_graph_ordering_state(ord, 0, &st0));
	bool *in0 = calloc(p, sizeof(bool));
	CHECK(in0, "oom");
	for (uint32_t k = 0; k < c; k++)
		in0[st0[k]] = true;
	/* Evict what state 0 does not keep; load what it lacks. */
	for (uint32_t x = 0; x < p; x++) {
		if (m->resident[x] && !in0[x]) {
			want->partitions_written += m->dirty[x];
			m->resident[x] = m->dirty[x] = false;
			for (uint32_t y = 0; y < p; y++)
				m->pair[(size_t)x * p + y] = m->pair[(size_t)y * p + x] = false;
		}
	}
	for (uint32_t k = 0; k < c; k++) {
		uint32_t x = st0[k];
		if (!m->resident[x]) {
			want->first_loads++;
			m->resident[x] = true;
		}
		m->dirty[x] = !so->features_only;
	}
	for (uint32_t a = 0; a < c; a++)
		for (uint32_t b = 0; b < c; b++) {
			size_t i = (size_t)st0[a] * p + st0[b];
			want->buckets_read += so->bucket_reads == 1 && !m->pair[i];
			m->pair[i] = true;
		}
	for (uint32_t s = 1; s < info.states; s++) {
		ember_graph_swap sw;
		CHECK_OK(ember_graph_ordering_swap(ord, s, &sw));
		CHECK(m->resident[sw.evicted] && !m->resident[sw.loaded], "swap %u", s);
		want->partitions_written += m->dirty[sw.evicted];
		m->resident[sw.evicted] = m->dirty[sw.evicted] = false;
		for (uint32_t y = 0; y < p; y++)
			m->pair[(size_t)sw.evicted * p + y] = m->pair[(size_t)y * p + sw.evicted] = false;
		m->resident[sw.loaded] = true;
		m->dirty[sw.loaded] = !so->features_only;
		want->partitions_read++;
		for (uint32_t y = 0; y < p; y++)
			if (m->resident[y]) {
				want->buckets_read += so->bucket_reads == 1;
				m->pair[(size_t)sw.loaded * p + y] = true;
				if (y != sw.loaded) {
					want->buckets_read += so->bucket_reads == 1;
					m->pair[(size_t)y * p + sw.loaded] = true;
				}
			}
	}
	want->partitions_read += want->first_loads;
	if (so->bucket_reads == 0)
		want->buckets_read = info.assigned;
	if (last_epoch)
		for (uint32_t x = 0; x < p; x++)
			if (m->resident[x] && m->dirty[x]) {
				want->partitions_written++;
				m->dirty[x] = false;
			}
	want->bytes_read = want->partitions_read * so->partition_bytes +
			   want->buckets_read * so->bucket_bytes;
	want->bytes_written = want->partitions_written * so->partition_bytes;
	free(in0);
}

static void check_sim(uint32_t p, uint32_t c, int kind, ember_graph_ordering_options *oo,
		      ember_graph_sim_options *so)
{
	uint32_t E = so->epochs ? so->epochs : 1;
	ember_graph_sim_epoch *got = calloc(E, sizeof(*got));
	model m = {.p = p, .c = c};
	m.resident = calloc(p, sizeof(bool));
	m.dirty = calloc(p, sizeof(bool));
	m.pair = calloc((size_t)p * p, sizeof(bool));
	CHECK(got && m.resident && m.dirty && m.pair, "oom");
	CHECK_OK(ember_graph_ordering_simulate(p, c, kind, oo, so, got, E));
	uint64_t base = oo->epoch;
	for (uint32_t e = 0; e < E; e++) {
		ember_graph_ordering_options o = *oo;
		o.epoch = base + e;
		ember_graph_ordering *ord;
		CHECK_OK(ember_graph_ordering_create(p, c, kind, &o, &ord));
		ember_graph_sim_epoch want;
		replay(&m, ord, so, e + 1 == E, &want);
		ember_graph_ordering_destroy(ord);
		CHECK(memcmp(&want, &got[e], sizeof(want)) == 0,
		      "p=%u c=%u kind=%d epoch %u features_only=%d bucket_reads=%d: got swaps "
		      "%lu first %lu read %lu written %lu buckets %lu; want %lu %lu %lu %lu %lu",
		      p, c, kind, e, so->features_only, so->bucket_reads,
		      (unsigned long)got[e].swaps, (unsigned long)got[e].first_loads,
		      (unsigned long)got[e].partitions_read,
		      (unsigned long)got[e].partitions_written,
		      (unsigned long)got[e].buckets_read, (unsigned long)want.swaps,
		      (unsigned long)want.first_loads, (unsigned long)want.partitions_read,
		      (unsigned long)want.partitions_written, (unsigned long)want.buckets_read);
	}
	free(m.pair);
	free(m.dirty);
	free(m.resident);
	free(got);
}

int main(int argc, char **argv)
{
	tu_init("test_ordering_sim", argc, argv);
	tu_rng *rng = tu_rng_global();
	static const uint32_t sizes[][2] = {{2, 2}, {5, 2}, {8, 4}, {12, 3}, {16, 4},
					    {16, 8}, {24, 6}, {40, 8}, {64, 16}};
	uint32_t train[4] = {0, 5, 1, 3};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t p = sizes[i][0], c = sizes[i][1];
		for (int kind = 0; kind <= 2; kind++)
			for (int fo = 0; fo <= 1; fo++)
				for (int br = 0; br <= 1; br++) {
					ember_graph_ordering_options oo;
					ember_graph_ordering_options_default(&oo);
					oo.seed = tu_rng_next(rng);
					oo.epoch = tu_rng_below(rng, 10);
					if (kind == EMBER_GRAPH_ORDERING_SEQUENTIAL) {
						oo.train = train;
						oo.n_train = c < 4 ? c - 1 : 3;
						if (p < 6)
							train[1] = 4 % p;
					}
					ember_graph_sim_options so;
					ember_graph_sim_options_default(&so);
					so.epochs = 1 + (uint32_t)tu_rng_below(rng, 4);
					so.partition_bytes = 1 + tu_rng_below(rng, 1u << 20);
					so.bucket_bytes = tu_rng_below(rng, 1u << 16);
					so.features_only = fo;
					so.bucket_reads = br;
					check_sim(p, c, kind, &oo, &so);
					train[1] = 5;
				}
	}

	/* One BETA epoch in closed form. */
	for (uint32_t p = 2; p <= 30; p++)
		for (uint32_t c = 2; c <= p; c++) {
			ember_graph_sim_epoch ep;
			ember_graph_sim_options so;
			ember_graph_sim_options_default(&so);
			so.partition_bytes = 1000;
			so.bucket_bytes = 10;
			CHECK_OK(ember_graph_ordering_simulate(p, c, EMBER_GRAPH_ORDERING_BETA, NULL,
							       &so, &ep, 1));
			uint64_t f;
			CHECK_OK(ember_graph_ordering_beta_swaps(p, c, &f));
			CHECK(ep.swaps == f && ep.first_loads == c && ep.partitions_read == c + f &&
				      ep.partitions_written == f + c &&
				      ep.buckets_read == (uint64_t)p * p &&
				      ep.bytes_read == (c + f) * 1000 + (uint64_t)p * p * 10 &&
				      ep.bytes_written == (f + c) * 1000,
			      "BETA p=%u c=%u one epoch: read %lu written %lu", p, c,
			      (unsigned long)ep.partitions_read, (unsigned long)ep.partitions_written);
		}
	printf("ok\n");
	return 0;
}
