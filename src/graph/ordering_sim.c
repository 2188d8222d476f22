/*
 * ordering_sim.c - the ordering simulator: partitions and buckets read, partitions
 * written, per epoch, for an ordering (the model is in include/ember_graph.h and
 * docs/graph_orderings.md).
 *
 * State carried from epoch to epoch: which partitions are resident (the last state
 * of the previous epoch). Epoch e:
 *   1. first loads = partitions of its state 0 not resident; as many are evicted
 *      (written when dirty, i.e. unless features_only);
 *   2. its swaps: one read each, and one write each unless features_only;
 *   3. after the last epoch the c resident partitions are written unless
 *      features_only.
 * Buckets, bucket_reads == 0: the ordering's assigned buckets, once each.
 * Buckets, bucket_reads == 1: every ordered pair (i, j) of resident partitions
 * (i == j included) is read when it becomes resident together: c*c at a cold
 * start, c*c - k*k at an epoch start that keeps k partitions, 2c-1 per swap.
 */
#include "graph/ordering_int.h"

#include "core/alloc.h"

#include <string.h>

void ember_graph_sim_options_default(ember_graph_sim_options *opts)
{
	if (opts)
		memset(opts, 0, sizeof(*opts));
}

int ember_graph_ordering_simulate(uint32_t p, uint32_t c, int kind,
				  const ember_graph_ordering_options *ord_opts,
				  const ember_graph_sim_options *sim,
				  ember_graph_sim_epoch *out, uint32_t out_len)
{
	int rc = 0;
	ember_graph_ordering_options oo;
	ember_graph_sim_options so;
	if (ord_opts)
		oo = *ord_opts;
	else
		ember_graph_ordering_options_default(&oo);
	if (sim)
		so = *sim;
	else
		ember_graph_sim_options_default(&so);
	uint32_t epochs = so.epochs ? so.epochs : 1;
	if (!out || out_len < epochs || (so.bucket_reads != 0 && so.bucket_reads != 1))
		return EMBER_EINVAL;
	if (c < 2 || c > p || p > EMBER_GRAPH_ORDERING_MAX_PARTITIONS)
		return EMBER_EINVAL;

	bool *resident = em_zalloc((size_t)p * sizeof(bool));
	if (!resident)
		return EMBER_ENOMEM;
	uint64_t lb = 0;
	ember_graph_ordering_lower_bound(p, c, &lb);
	uint64_t base_epoch = oo.epoch;
	bool cold = true;
	for (uint32_t e = 0; e < epochs; e++) {
		ember_graph_ordering *ord = NULL;
		oo.epoch = base_epoch + e;
		if ((rc = ember_graph_ordering_create(p, c, kind, &oo, &ord)) < 0)
			goto undo_resident;
		ember_graph_sim_epoch *ep = &out[e];
		memset(ep, 0, sizeof(*ep));
		const uint32_t *st0 = ord->slots;
		uint64_t kept = 0;
		for (uint32_t i = 0; i < c; i++)
			kept += resident[st0[i]];
		ep->swaps = ord->nstates - 1;
		ep->lower_bound = lb;
		ep->first_loads = c - kept;
		ep->partitions_read = ep->first_loads + ep->swaps;
		if (!so.features_only)
			ep->partitions_written = (cold ? 0 : c - kept) + ep->swaps +
						 (e + 1 == epochs ? c : 0);
		if (so.bucket_reads == 0)
			ep->buckets_read = ord->assigned;
		else
			ep->buckets_read = (uint64_t)c * c - kept * kept +
					   ep->swaps * (2ull * c - 1);
		ep->bytes_read = ep->partitions_read * so.partition_bytes +
				 ep->buckets_read * so.bucket_bytes;
		ep->bytes_written = ep->partitions_written * so.partition_bytes;
		memset(resident, 0, (size_t)p * sizeof(bool));
		const uint32_t *last = ord->slots + (size_t)(ord->nstates - 1) * c;
		for (uint32_t i = 0; i < c; i++)
			resident[last[i]] = true;
		cold = false;
		ember_graph_ordering_destroy(ord);
	}
undo_resident:
	em_free(resident, (size_t)p * sizeof(bool));
	return rc;
}
