/*
 * micro_index.c - the hash index (index/hash_index.h): lookups of present keys and
 * inserts of new ones, at the store's default density (one bucket per 4 keys),
 * on a table that fits in the caches (64 Ki keys: 1 MiB of buckets) and on one
 * that does not (4 Mi keys: 64 MiB).
 *
 * Keys are 8-byte key numbers hashed with the store's hash (em_hash); the hashes
 * are computed before timing, so only the index is measured: each lookup or
 * insert is a random bucket access, the store's cost before it touches the log.
 */
#include <stdlib.h>
#include <string.h>

#include "core/address.h"
#include "core/hash.h"
#include "index/hash_index.h"
#include "micro.h"

#define BATCH 256

/* Hashes of key numbers [0, n) in a random order. NULL when out of memory. */
static uint64_t *key_hashes(uint64_t n, uint64_t seed)
{
	uint64_t *h = malloc(n * sizeof(*h));

	if (h == NULL)
		return NULL;
	for (uint64_t k = 0; k < n; k++)
		h[k] = em_hash(&k, sizeof(k));
	for (uint64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
		uint64_t j = micro_mix(&seed) % (i + 1), t = h[i];

		h[i] = h[j];
		h[j] = t;
	}
	return h;
}

static void bm_index_find(emb_state *st)
{
	uint64_t n = (uint64_t)emb_state_range(st, 0), i = 0, sum = 0;
	uint64_t *ins = key_hashes(n, 1), *look = key_hashes(n, 2);
	struct hash_index hi;

	if (ins == NULL || look == NULL || hi_init(&hi, n / 4) != 0) {
		emb_state_skip_with_error(st, "out of memory");
		goto out;
	}
	for (uint64_t k = 0; k < n; k++) {
		hi_slot *slot;
		uint64_t e;

		hi_insert(&hi, ins[k], EM_LOG_START + 64 * k, &slot, &e);
	}
	while (emb_state_keep_running_batch(st, BATCH)) {
		for (unsigned b = 0; b < BATCH; b++) {
			uint64_t e = 0;

			hi_find(&hi, look[i], &e);
			sum += e;
			i = i + 1 < n ? i + 1 : 0;
		}
	}
	emb_use_u64(sum);
	emb_set_items_processed(st, emb_state_iterations(st));
	emb_set_counter(st, "table_MiB", (double)hi.table_bytes / (1 << 20), 0);
	hi_destroy(&hi);
out:
	free(ins);
	free(look);
}

/* Empty the index in place: its pages stay mapped, so no page faults get timed. */
static void index_clear(struct hash_index *hi)
{
	uint64_t used = atomic_load_explicit(&hi->overflow_used, memory_order_relaxed);

	memset((void *)hi->table, 0, hi->table_bytes);
	for (uint64_t c = 0; c <= (used >> HI_CHUNK_BITS) && c < HI_MAX_CHUNKS; c++) {
		struct hi_bucket *chunk = atomic_load_explicit(&hi->chunks[c], memory_order_relaxed);

		if (chunk != NULL)
			memset((void *)chunk, 0, sizeof(*chunk) << HI_CHUNK_BITS);
	}
	atomic_store_explicit(&hi->overflow_used, 0, memory_order_relaxed);
}

static void fill(struct hash_index *hi, const uint64_t *h, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++) {
		hi_slot *slot;
		uint64_t e;

		hi_insert(hi, h[k], EM_LOG_START + 64 * k, &slot, &e);
	}
}

/* One iteration = one insert; a round inserts all n keys into an empty index. */
static void bm_index_insert(emb_state *st)
{
	uint64_t n = (uint64_t)emb_state_range(st, 0);
	uint64_t *h = key_hashes(n, 3);
	struct hash_index hi;

	if (h == NULL || hi_init(&hi, n / 4) != 0) {
		emb_state_skip_with_error(st, "out of memory");
		free(h);
		return;
	}
	fill(&hi, h, n); /* touch every page once, untimed */
	index_clear(&hi);
	while (emb_state_keep_running_batch(st, (int64_t)n)) {
		fill(&hi, h, n);
		emb_state_pause_timing(st);
		index_clear(&hi);
		emb_state_resume_timing(st);
	}
	emb_set_items_processed(st, emb_state_iterations(st));
	emb_set_counter(st, "table_MiB", (double)hi.table_bytes / (1 << 20), 0);
	hi_destroy(&hi);
	free(h);
}

void micro_register_index(void)
{
	emb_bench_arg(emb_bench_arg(emb_bench_arg_name(emb_register("index/find", bm_index_find),
						       "keys"), 64 << 10), 4 << 20);
	emb_bench_arg(emb_bench_arg(emb_bench_arg_name(emb_register("index/insert",
								    bm_index_insert), "keys"),
				    64 << 10), 4 << 20);
}
