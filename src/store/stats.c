/*
 * stats.c - ember_stats_get: per-tier figures from the logs, the sessions'
 * counters and the compactor's.
 *
 * Sessions count with owner-only relaxed stores (no locked instructions on the
 * hot path); this reader sums them under sess_mu, so a figure may lag an
 * operation that is completing at the same moment, never more.
 */
#include "store/compact.h"
#include "store/store_int.h"

#include <stddef.h>
#include <string.h>

#include "core/abi.h"

static uint64_t ld(_Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed); /* statistics */
}

static void tier_fill(ember_tier_stats *t, struct hlog *l)
{
	uint64_t tail = hlog_load(&l->tail), begin = hlog_load(&l->begin);
	uint64_t head = hlog_load(&l->head);
	t->bytes_disk = tail - begin;
	uint64_t lo = head > begin ? head : begin;
	t->bytes_memory = tail > lo ? tail - lo : 0;
	if (t->bytes_memory > l->mem_size)
		t->bytes_memory = l->mem_size;
}

static void stats_fill(ember_db *db, ember_stats *out)
{
	memset(out, 0, sizeof(*out));
	tier_fill(&out->hot, db->hot);
	tier_fill(&out->cold, db->cold);
	struct compactor *c = db->comp;
	uint64_t reads[5] = {0, 0, 0, 0, 0};
	pthread_mutex_lock(&db->sess_mu);
	out->compaction_disk_reads = db->gone_comp_ios;
	out->compaction_bytes_read = db->gone_comp_bytes;
	struct sess_stats *g = &db->gone_st; /* sessions closed */
	for (int i = 0; i < 5; i++)
		reads[i] += ld(&g->reads[i]);
	out->disk_reads += ld(&g->ios);
	out->disk_bytes_read += ld(&g->io_bytes);
	out->user_reads += ld(&g->user_reads);
	out->user_writes += ld(&g->user_records);
	out->user_bytes_written += ld(&g->user_bytes);
	out->cold_cache_hits += ld(&g->ci_hits);
	out->cold_lookups += ld(&g->cold_lookups);
	out->cold_chunk_reads += ld(&g->chunk_reads);
	out->cold_record_reads += ld(&g->cold_rec_reads);
	for (struct ember_session *s = db->sessions; s; s = s->next_all) {
		/* compaction's I/O (internal sessions, writers' assists) is not a user's */
		out->compaction_disk_reads += ld(&s->comp_st.ios);
		out->compaction_bytes_read += ld(&s->comp_st.io_bytes);
		for (int i = 0; i < 5; i++)
			reads[i] += ld(&s->st.reads[i]);
		out->disk_reads += ld(&s->st.ios);
		out->disk_bytes_read += ld(&s->st.io_bytes);
		out->user_reads += ld(&s->st.user_reads);
		out->user_writes += ld(&s->st.user_records);
		out->user_bytes_written += ld(&s->st.user_bytes);
		out->cold_cache_hits += ld(&s->st.ci_hits);
		out->cold_lookups += ld(&s->st.cold_lookups);
		out->cold_chunk_reads += ld(&s->st.chunk_reads);
		out->cold_record_reads += ld(&s->st.cold_rec_reads);
	}
	pthread_mutex_unlock(&db->sess_mu);
	out->hot.reads_memory = reads[TIER_HOT_MEM];
	out->hot.reads_disk = reads[TIER_HOT_DISK];
	out->cold.reads_memory = reads[TIER_COLD_MEM];
	out->cold.reads_disk = reads[TIER_COLD_DISK];
	out->read_cache_hits = reads[TIER_RC];
	out->read_cache_bytes = db->rc ? db->rc->mem_size + rc_filter_bytes(db->opts.read_cache_memory,
									   db->opts.read_cache_admit)
				       : 0;
	out->hot.compactions = ld(&c->st.passes[COMPACT_HOT]);
	out->cold.compactions = ld(&c->st.passes[COMPACT_COLD]);
	out->hot.compaction_bytes_written = ld(&c->st.bytes_written[COMPACT_HOT]);
	out->cold.compaction_bytes_written = ld(&c->st.bytes_written[COMPACT_COLD]);
	uint64_t moved_in = ld(&c->st.records_moved[COMPACT_HOT]) + ld(&c->st.records_moved[COMPACT_COLD]);
	uint64_t hot_out = ld(&c->st.records_scanned[COMPACT_HOT]);
	uint64_t cold_out = ld(&c->st.records_scanned[COMPACT_COLD]);
	uint64_t hot_in = db->base_records[0] + out->user_writes;
	uint64_t cold_in = db->base_records[1] + moved_in;
	out->hot.records = hot_in > hot_out ? hot_in - hot_out : 0;
	out->cold.records = cold_in > cold_out ? cold_in - cold_out : 0;
	out->index_bytes = db->index.table_bytes + hi_overflow_buckets(&db->index) * 64;
	out->cold_cache_bytes = db->cidx.cache_bytes;
	out->cold_index_bytes = db->cidx.table_bytes + db->chunks->mem_size + db->cidx.cache_bytes;
	out->chunk_log_bytes_disk = hlog_load(&db->chunks->tail) - hlog_load(&db->chunks->begin);
	out->compaction_bytes_written = out->hot.compaction_bytes_written +
					out->cold.compaction_bytes_written +
					ld(&c->st.bytes_written[COMPACT_CHUNKS]);
	out->tombstones_dropped = ld(&c->st.tombstones_dropped);
	out->compaction_assists = ld(&c->st.assists);
	if (out->user_bytes_written)
		out->write_amplification = (double)(out->user_bytes_written + out->compaction_bytes_written) /
					   (double)out->user_bytes_written;
	if (out->user_reads)
		out->read_amplification = (double)out->disk_bytes_read / (double)out->user_reads;
	if (out->cold_lookups)
		out->disk_reads_per_cold_lookup = (double)(out->cold_chunk_reads + out->cold_record_reads) /
						  (double)out->cold_lookups;
	if (out->cold.records)
		out->cold_index_bytes_per_key = (double)out->cold_index_bytes / (double)out->cold.records;
}

/* The size of ember_stats in its first release: what the plain ember_stats_get
 * symbol (dlsym) fills. Fields added later are appended, and this stays. */
#define STATS_SIZE_BASE (offsetof(ember_stats, cold_index_bytes_per_key) + sizeof(double))

int ember_stats_get_sized(ember_db *db, ember_stats *out, size_t size)
{
	if (!db || db->magic != DB_MAGIC || !out || !size)
		return EMBER_EINVAL;
	ember_stats st;
	stats_fill(db, &st);
	abi_struct_out(out, size, &st, sizeof(st));
	return 0;
}

int(ember_stats_get)(ember_db *db, ember_stats *out)
{
	return ember_stats_get_sized(db, out, STATS_SIZE_BASE);
}

void stats_tier_records(ember_db *db, uint64_t *hot, uint64_t *cold)
{
	ember_stats st;
	stats_fill(db, &st);
	*hot = st.hot.records;
	*cold = st.cold.records;
}
