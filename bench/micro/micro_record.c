/*
 * micro_record.c - the record checksum (log/record.h: rec_checksum, XXH3 over the
 * header fields, key and value), computed when a page is flushed and checked on
 * every disk read. An 8-byte key with values of 8, 100 and 1000 bytes; bytes
 * processed count the whole record.
 */
#include <stdalign.h>
#include <string.h>

#include "log/record.h"
#include "micro.h"

#define BATCH 64

static void bm_checksum(emb_state *st)
{
	alignas(64) static uint8_t mem[REC_HDR_SIZE + 8 + 4096];
	uint32_t vlen = (uint32_t)emb_state_range(st, 0), sum = 0;
	uint64_t key = 0x1234567890abcdefull, x = 7;
	struct record *r = (struct record *)(void *)mem;
	uint8_t val[4096];

	for (uint32_t i = 0; i < vlen; i++)
		val[i] = (uint8_t)micro_mix(&x);
	rec_init(r, EM_LOG_START, 0, &key, 8, val, vlen, rec_cap_for(vlen));
	while (emb_state_keep_running_batch(st, BATCH)) {
		for (unsigned i = 0; i < BATCH; i++) {
			emb_do_not_optimize(r); /* the record may have changed: recompute */
			sum += rec_checksum(r);
		}
	}
	emb_use_u64(sum);
	emb_set_items_processed(st, emb_state_iterations(st));
	emb_set_bytes_processed(st, emb_state_iterations(st) * (int64_t)rec_total_size(r));
}

void micro_register_record(void)
{
	emb_bench *b = emb_bench_arg_name(emb_register("record/checksum", bm_checksum),
					  "value_bytes");

	emb_bench_arg(emb_bench_arg(emb_bench_arg(b, 8), 100), 1000);
}
