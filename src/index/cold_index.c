/*
 * cold_index.c - the cold index's table (design notes in cold_index.h; updates
 * live in store/cold.c, which has the sessions and their I/O).
 */
#include "index/cold_index.h"

#include <ember.h>
#include <string.h>
#include <sys/mman.h>

int ci_init(struct cold_index *ci, uint64_t nchunks, uint32_t chunk_bytes, struct hlog *log)
{
	memset(ci, 0, sizeof(*ci));
	if (!nchunks || (nchunks & (nchunks - 1)) || chunk_bytes < 64 || chunk_bytes > 4096 ||
	    (chunk_bytes & (chunk_bytes - 1)))
		return EMBER_EINVAL;
	ci->nchunks = nchunks;
	ci->chunk_mask = nchunks - 1;
	ci->chunk_bytes = chunk_bytes;
	ci->entries = chunk_bytes / 8;
	ci->table_bytes = nchunks * sizeof(uint64_t);
	void *t = mmap(NULL, ci->table_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (t == MAP_FAILED)
		return EMBER_ENOMEM;
	ci->table = t;
	ci->log = log;
	return 0;
}

void ci_destroy(struct cold_index *ci)
{
	if (ci->table)
		munmap((void *)ci->table, ci->table_bytes);
	ci->table = NULL;
}

uint64_t ci_chunks_used(struct cold_index *ci)
{
	uint64_t n = 0;
	for (uint64_t c = 0; c < ci->nchunks; c++)
		/* relaxed: a statistic */
		n += atomic_load_explicit(&ci->table[c], memory_order_relaxed) != 0;
	return n;
}
