/*
 * workload.c - YCSB's core workload table and per-thread operation pre-generation.
 */
#include "workload.h"

#include <ctype.h>
#include <stddef.h>

/* YCSB's workloads/workload{a..f} files, minus the field counts and scans. */
static const ycsb_workload workloads[] = {
	{ 'A', "update heavy: 50% read, 50% update", 0.50, 0.50, 0, 0, YCSB_DIST_ZIPFIAN },
	{ 'B', "read mostly: 95% read, 5% update", 0.95, 0.05, 0, 0, YCSB_DIST_ZIPFIAN },
	{ 'C', "read only: 100% read", 1.0, 0, 0, 0, YCSB_DIST_ZIPFIAN },
	{ 'D', "read latest: 95% read, 5% insert", 0.95, 0, 0.05, 0, YCSB_DIST_LATEST },
	{ 'E', "short ranges: 95% scan, 5% insert", 0, 0, 0, 0, YCSB_DIST_ZIPFIAN },
	{ 'F', "read-modify-write: 50% read, 50% rmw", 0.50, 0, 0, 0.50, YCSB_DIST_ZIPFIAN },
};

const ycsb_workload *ycsb_workload_find(char name)
{
	name = (char)toupper((unsigned char)name);
	for (unsigned i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
		if (workloads[i].name == name)
			return &workloads[i];
	return NULL;
}

int ycsb_pregen_fill(const ycsb_pregen *p, uint64_t *ops, uint64_t n)
{
	const ycsb_workload *wl = p->wl;
	double c_read = wl->read, c_update = c_read + wl->update;
	double c_insert = c_update + wl->insert;
	uint64_t items = p->key_count;
	ycsb_chooser chooser;
	ycsb_rng rng;

	if (ycsb_chooser_init(&chooser, p->dist, items, p->theta) < 0)
		return -1;
	ycsb_rng_seed(&rng, p->seed);
	for (uint64_t i = 0; i < n; i++) {
		double u = ycsb_rng_double(&rng);
		unsigned kind = u < c_read     ? YCSB_OP_READ
				: u < c_update ? YCSB_OP_UPDATE
				: u < c_insert ? YCSB_OP_INSERT
					       : YCSB_OP_RMW;
		uint64_t key = 0;

		if (kind == YCSB_OP_INSERT) {
			/* Every thread inserts at about the same pace, so the store grows
			 * by `threads` keys per insert of ours: what "latest" draws over. */
			items += p->threads;
			ycsb_chooser_grow(&chooser, items);
		} else {
			key = ycsb_chooser_next(&chooser, &rng);
			if (p->dist == YCSB_DIST_LATEST)
				key |= YCSB_OP_LATEST;
		}
		ops[i] = ((uint64_t)kind << YCSB_OP_KIND_SHIFT) | key;
	}
	return 0;
}
