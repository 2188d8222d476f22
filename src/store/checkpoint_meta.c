/*
 * checkpoint_meta.c - a checkpoint's meta file: encoding, parsing and checking the
 * 4 KiB block that says a checkpoint is complete (layout: docs/format.md 7.6), and
 * comparing the store geometry it records.
 */
#include "store/checkpoint_int.h"

#include <string.h>

#include "core/hash.h"

#define META_MAGIC "EMBERCKP"
#define META_VERSION 1u

/* field offsets of the meta block (docs/format.md) */
enum {
	M_MAGIC = 0, M_VERSION = 8, M_ID = 16, M_TIME = 24, M_PAGE = 32, M_HOT_MEM = 40,
	M_COLD_MEM = 48, M_CHUNK_MEM = 56, M_BUCKETS = 64, M_CHUNKS = 72, M_CHUNK_BYTES = 80,
	M_HOT_BEGIN = 88, M_HOT_REPLAY = 96, M_HOT_END = 104, M_COLD_BEGIN = 112,
	M_COLD_END = 120, M_CHUNK_BEGIN = 128, M_CHUNK_END = 136, M_INDEX_ENTRIES = 144,
	M_INDEX_SUM = 152, M_TABLE_BYTES = 160, M_TABLE_SUM = 168, M_SEGMENT = 176,
	M_FLAGS = 184, M_HOT_RECORDS = 192, M_COLD_RECORDS = 200,
	M_SUM = CKPT_META_SIZE - 8,
};
/* M_FLAGS bits; a meta without them reads zero there (reserved before) */
enum {
	MF_COUNTS = 1, /* M_HOT_RECORDS and M_COLD_RECORDS hold the tiers' counts */
};

static void put64(uint8_t *b, size_t off, uint64_t v) { memcpy(b + off, &v, 8); }
static uint64_t get64(const uint8_t *b, size_t off)
{
	uint64_t v;
	memcpy(&v, b + off, 8);
	return v;
}

void ckpt_meta_encode(const struct ckpt_meta *m, uint8_t *b)
{
	memset(b, 0, CKPT_META_SIZE);
	memcpy(b + M_MAGIC, META_MAGIC, 8);
	put64(b, M_VERSION, META_VERSION);
	put64(b, M_ID, m->id);
	put64(b, M_TIME, m->time_unix);
	put64(b, M_PAGE, m->geo.page_size);
	put64(b, M_HOT_MEM, m->geo.hot_mem);
	put64(b, M_COLD_MEM, m->geo.cold_mem);
	put64(b, M_CHUNK_MEM, m->geo.chunk_mem);
	put64(b, M_BUCKETS, m->geo.index_buckets);
	put64(b, M_CHUNKS, m->geo.cold_index_chunks);
	put64(b, M_CHUNK_BYTES, m->geo.cold_chunk_bytes);
	put64(b, M_HOT_BEGIN, m->hot_begin);
	put64(b, M_HOT_REPLAY, m->hot_replay);
	put64(b, M_HOT_END, m->hot_end);
	put64(b, M_COLD_BEGIN, m->cold_begin);
	put64(b, M_COLD_END, m->cold_end);
	put64(b, M_CHUNK_BEGIN, m->chunk_begin);
	put64(b, M_CHUNK_END, m->chunk_end);
	put64(b, M_INDEX_ENTRIES, m->index_entries);
	put64(b, M_INDEX_SUM, m->index_sum);
	put64(b, M_TABLE_BYTES, m->table_bytes);
	put64(b, M_TABLE_SUM, m->table_sum);
	put64(b, M_SEGMENT, m->geo.log_segment_bytes);
	if (m->has_counts) {
		put64(b, M_FLAGS, MF_COUNTS);
		put64(b, M_HOT_RECORDS, m->hot_records);
		put64(b, M_COLD_RECORDS, m->cold_records);
	}
	put64(b, M_SUM, XXH3_64bits(b, M_SUM));
}

int ckpt_meta_parse(const uint8_t *b, size_t len, struct ckpt_meta *m)
{
	if (len != CKPT_META_SIZE)
		return len >= 8 && memcmp(b, META_MAGIC, 8) == 0 ? EMBER_ECORRUPT : EMBER_ENOTEMBER;
	if (memcmp(b + M_MAGIC, META_MAGIC, 8) != 0)
		return EMBER_ENOTEMBER;
	if (get64(b, M_SUM) != XXH3_64bits(b, M_SUM))
		return EMBER_ECORRUPT;
	if (get64(b, M_VERSION) != META_VERSION)
		return EMBER_EVERSION;
	m->id = get64(b, M_ID);
	m->time_unix = get64(b, M_TIME);
	m->geo.page_size = get64(b, M_PAGE);
	m->geo.hot_mem = get64(b, M_HOT_MEM);
	m->geo.cold_mem = get64(b, M_COLD_MEM);
	m->geo.chunk_mem = get64(b, M_CHUNK_MEM);
	m->geo.index_buckets = get64(b, M_BUCKETS);
	m->geo.cold_index_chunks = get64(b, M_CHUNKS);
	m->geo.cold_chunk_bytes = get64(b, M_CHUNK_BYTES);
	m->hot_begin = get64(b, M_HOT_BEGIN);
	m->hot_replay = get64(b, M_HOT_REPLAY);
	m->hot_end = get64(b, M_HOT_END);
	m->cold_begin = get64(b, M_COLD_BEGIN);
	m->cold_end = get64(b, M_COLD_END);
	m->chunk_begin = get64(b, M_CHUNK_BEGIN);
	m->chunk_end = get64(b, M_CHUNK_END);
	m->index_entries = get64(b, M_INDEX_ENTRIES);
	m->index_sum = get64(b, M_INDEX_SUM);
	m->table_bytes = get64(b, M_TABLE_BYTES);
	m->table_sum = get64(b, M_TABLE_SUM);
	m->has_counts = (get64(b, M_FLAGS) & MF_COUNTS) != 0;
	m->hot_records = m->has_counts ? get64(b, M_HOT_RECORDS) : 0;
	m->cold_records = m->has_counts ? get64(b, M_COLD_RECORDS) : 0;
	m->geo.log_segment_bytes = get64(b, M_SEGMENT);
	/* a checksummed block can still hold nonsense written by a bug: check ranges */
	int ok = m->id > 0 && m->hot_begin >= EM_LOG_START && m->hot_begin <= m->hot_replay &&
		 m->hot_replay <= m->hot_end && m->hot_end <= EM_ADDR_MASK &&
		 m->cold_begin >= EM_LOG_START && m->cold_begin <= m->cold_end &&
		 m->cold_end <= EM_ADDR_MASK && m->chunk_begin >= EM_LOG_START &&
		 m->chunk_begin <= m->chunk_end && m->chunk_end <= EM_ADDR_MASK &&
		 m->index_entries <= (UINT64_C(1) << 40) &&
		 m->table_bytes == m->geo.cold_index_chunks * 8;
	return ok ? 0 : EMBER_ECORRUPT;
}

int ck_geometry_equal(const struct store_geometry *a, const struct store_geometry *b)
{
	return a->page_size == b->page_size && a->hot_mem == b->hot_mem &&
	       a->cold_mem == b->cold_mem && a->chunk_mem == b->chunk_mem &&
	       a->index_buckets == b->index_buckets && a->cold_index_chunks == b->cold_index_chunks &&
	       a->cold_chunk_bytes == b->cold_chunk_bytes &&
	       a->log_segment_bytes == b->log_segment_bytes;
}
