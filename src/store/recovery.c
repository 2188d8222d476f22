/*
 * recovery.c - recovery from the newest usable checkpoint: choosing it (ckpt_find),
 * then loading its saved hot index and cold table and replaying the hot log's tail
 * (ckpt_apply). The protocol that makes the replay complete is checkpoint.c's
 * design notes, step 5; docs/checkpoint.md argues each step.
 *
 * Recovery (ember_open -> ckpt_find, then ckpt_apply): the newest directory whose
 * meta and files check out wins (among every directory there is); newer partial or
 * damaged ones (a meta that fails its checks or names another id, a file missing or
 * failing its checksum) are reported through db_report and removed (not in
 * read-only mode). Any other error (an I/O error, memory, permissions) fails the
 * open and removes nothing: falling back would recover an older state and delete
 * the newer one. The logs restart at the extents of the meta: addresses at or
 * above each end are overwritten by new records.
 */
#include "store/checkpoint_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"

#define REPLAY_WINDOW (4u << 20)

static void skip(struct ember_db *db, const char *name, const char *why, int code)
{
	if (!ck_is_damage(code) && code != -ENOENT) { /* not skipped: the open fails */
		db_report(db, "checkpoint %.31s cannot be read: %.120s (%.80s)", name, why,
			  ember_strerror(code));
		return;
	}
	db->recovery.checkpoints_skipped++;
	snprintf(db->recovery.detail, sizeof(db->recovery.detail), "checkpoint %.31s skipped: %.120s (%.80s)",
		 name, why, ember_strerror(code));
	db_report(db, "%s", db->recovery.detail);
}

/* Load and check one checkpoint's files into ck. Returns 0, 1 when it has no meta
 * (partial: never completed), or an error (damaged). */
static int load_one(struct ember_db *db, struct em_ring *ring, const char *name,
		    const struct store_geometry *geo, struct ckpt_meta *m)
{
	struct ckpt *ck = db->ck;
	int rc = ck_read_meta(db, ring, name, m);
	if (rc == -ENOENT) {
		skip(db, name, "no meta file (partial checkpoint)", rc);
		return 1;
	}
	if (rc < 0) {
		skip(db, name, "meta unreadable or damaged", rc);
		return rc;
	}
	if (!ck_meta_is_named(m, name)) {
		skip(db, name, "its meta names another checkpoint id", EMBER_ECORRUPT);
		return EMBER_ECORRUPT;
	}
	if (!ck_geometry_equal(&m->geo, geo)) {
		skip(db, name, "geometry differs from the superblock's", EMBER_ECORRUPT);
		return EMBER_ECORRUPT;
	}
	static const char *const files[2] = {"hot.index", "cold.table"};
	uint64_t want_len[2] = {m->index_entries * 16, m->table_bytes};
	uint64_t want_sum[2] = {m->index_sum, m->table_sum};
	uint8_t *bufs[2] = {NULL, NULL};
	for (int i = 0; i < 2; i++) {
		char *p = ck_path(db, name, files[i]);
		size_t len = 0;
		rc = p ? ck_read_file(ring, p, em_align_up(want_len[i], EM_IO_ALIGN), &bufs[i], &len)
		       : EMBER_ENOMEM;
		em_free(p, 0);
		if (rc == -ENOENT)
			rc = EMBER_ECORRUPT; /* a complete checkpoint lacks one of its files */
		if (rc == 0 && (len < want_len[i] || len > em_align_up(want_len[i], EM_IO_ALIGN) ||
				XXH3_64bits(bufs[i], want_len[i]) != want_sum[i]))
			rc = EMBER_ECORRUPT;
		if (rc < 0) {
			char why[96];
			snprintf(why, sizeof(why), "%s %s", files[i],
				 rc == EMBER_ECORRUPT ? "fails its size or checksum" : "unreadable");
			skip(db, name, why, rc);
			em_free(bufs[0], 0);
			em_free(bufs[1], 0);
			return rc;
		}
	}
	ck->index_words = (uint64_t *)(void *)bufs[0];
	ck->table_words = (uint64_t *)(void *)bufs[1];
	return 0;
}

struct find_walk {
	struct ember_db *db;
	struct em_ring *ring;
	const struct store_geometry *geo;
	struct ckpt_meta *m;
	int complete_seen, listed;
};

/* 1 (and ck->chosen) when name's checkpoint loads; 0 to go on to an older one; an
 * error that is not damage (memory, I/O, permissions) to fail the open, since
 * falling back would open an older state and remove this one. */
static int find_one(void *arg, const char *name)
{
	struct find_walk *fw = arg;
	fw->listed++;
	int rc = load_one(fw->db, fw->ring, name, fw->geo, fw->m);
	if (rc == 0) {
		snprintf(fw->db->ck->chosen, sizeof(fw->db->ck->chosen), "%.31s", name);
		return 1;
	}
	if (rc < 0 && !ck_is_damage(rc))
		return rc;
	if (rc != 1)
		fw->complete_seen = 1; /* a meta existed: data may be lost if we go on empty */
	return 0;
}

int ckpt_find(struct ember_db *db, const struct store_geometry *geo, struct ckpt_meta *m,
	      int *found)
{
	*found = 0;
	struct em_ring ring;
	int rc = em_ring_init(&ring, 2);
	if (rc < 0)
		return rc;
	/* every window of names, newest first, until one is used: a complete
	 * checkpoint below 64 newer partial ones is still found (with only partial
	 * ones in the first window, the store started empty and every directory
	 * went, the complete one with them) */
	struct find_walk fw = {db, &ring, geo, m, 0, 0};
	rc = ck_each_name(db, find_one, &fw);
	if (rc == 1) {
		*found = 1;
		rc = 0;
	}
	em_ring_exit(&ring);
	if (rc == 0 && !*found && !fw.complete_seen && fw.listed > 0 && !db->readonly)
		(void)ck_remove_others(db, ""); /* only partial ones: the store starts empty */
	if (rc == 0 && !*found && fw.complete_seen) {
		db_report(db, "no usable checkpoint in %s/%s: every complete one is damaged",
			  db->dir, CKPT_DIR);
		rc = EMBER_ECORRUPT;
	}
	return rc;
}

/* Point (bucket, tag) at addr unless it points higher already. */
static int index_set(struct hash_index *hi, uint64_t hash, uint64_t addr)
{
	uint64_t e;
	hi_slot *slot = hi_find(hi, hash, &e);
	if (slot) {
		if (hi_entry_addr(e) < addr)
			/* relaxed: recovery is single-threaded */
			atomic_store_explicit(slot, (e & HI_TAG_MASK) | addr, memory_order_relaxed);
		return 0;
	}
	int rc = hi_insert(&*hi, hash, addr, &slot, &e);
	if (rc == 1) /* present after all (cannot happen single-threaded): keep the newer */
		return index_set(hi, hash, addr);
	return rc;
}

/* Step 5: replay [hot_replay, hot_end) into the index. */
/* The lengths of a record header read back in replay are sane: a key of 1 ..
 * EMBER_MAX_KEY_LEN bytes (none for a filler) and a value that fits the log's
 * memory, so rec_total_size is bounded before anything is read by it. */
struct replay_src {
	struct em_ring *ring;
	struct em_file *f;
	uint64_t file_end; /* the checkpoint's hot end, block aligned */
};

/* rec_read_fn for replay: the hot log's file up to the checkpoint's end. */
static int replay_read(void *ctx, void *buf, uint32_t len, uint64_t off)
{
	struct replay_src *rs = ctx;
	if (off >= rs->file_end)
		return 0;
	if (len > rs->file_end - off)
		len = (uint32_t)(rs->file_end - off);
	int rc = em_io_pread(rs->ring, rs->f, buf, len, off);
	return rc < 0 ? rc : (int)len;
}

/* Link every record of [hot_replay, hot_end) into the index, as a read would
 * find it: each one must pass rec_check (log/record_reader.h). */
static int replay(struct ember_db *db, const struct ckpt_meta *m, struct em_ring *ring)
{
	struct hlog *l = db->hot;
	struct replay_src src = {ring, &db->hot_file, em_align_up(m->hot_end, EM_IO_ALIGN)};
	struct rec_rules ru = {.log = l, .max_cap = db->max_record, .end = m->hot_end, .fillers = 1};
	struct rec_cursor cur;
	rec_cursor_init(&cur, &ru, replay_read, &src, REPLAY_WINDOW, 0);
	int rc = 0;
	for (uint64_t a = hlog_skip_gap(l, m->hot_replay); a < m->hot_end;
	     a = hlog_skip_gap(l, a)) {
		struct record *r;
		int head_only;
		rc = rec_cursor_get(&cur, a, 1, &r, &head_only);
		if (rc == EMBER_ECORRUPT) {
			db_report(db, "hot.log at offset %" PRIu64 ": %s (replay of checkpoint %" PRIu64 ")",
				  a, cur.why, m->id);
			break;
		}
		if (rc < 0) {
			db_report(db, "hot.log at offset %" PRIu64 ": read failed during replay: %s", a,
				  ember_strerror(rc));
			break;
		}
		rc = 0;
		if (!(rec_header(r) & (REC_FILLER | REC_INVALID))) {
			rc = index_set(&db->index, em_hash(rec_key(r), r->key_len), a);
			if (rc < 0)
				break;
			db->recovery.records_replayed++;
		}
		a += rec_total_size(r);
	}
	rec_cursor_free(&cur);
	return rc;
}

int ckpt_apply(struct ember_db *db, const struct ckpt_meta *m)
{
	struct ckpt *ck = db->ck;
	int rc;
	/* the saved index: (bucket, entry) pairs; a fake hash with that bucket and tag */
	for (uint64_t i = 0; i < m->index_entries; i++) {
		uint64_t b = ck->index_words[2 * i], e = ck->index_words[2 * i + 1];
		uint64_t addr = hi_entry_addr(e);
		if (b >= db->index.nbuckets || (e & (HI_TENTATIVE | HI_READCACHE)) || addr >= m->hot_end) {
			db_report(db, "checkpoint %s: hot.index entry %" PRIu64 " is out of range",
				  ck->chosen, i);
			return EMBER_ECORRUPT;
		}
		uint64_t fake = ((e & HI_TAG_MASK) >> HI_TAG_SHIFT) << 50 | b;
		rc = index_set(&db->index, fake, addr);
		if (rc < 0)
			return rc;
	}
	for (uint64_t c = 0; c < db->cidx.nchunks; c++) {
		uint64_t a = ck->table_words[c];
		if (a && (a < m->chunk_begin || a >= m->chunk_end)) {
			db_report(db, "checkpoint %s: cold.table word %" PRIu64 " is out of range",
				  ck->chosen, c);
			return EMBER_ECORRUPT;
		}
		/* relaxed: nothing else runs yet */
		atomic_store_explicit(&db->cidx.table[c], a, memory_order_relaxed);
	}
	em_free(ck->index_words, 0);
	em_free(ck->table_words, 0);
	ck->index_words = ck->table_words = NULL;
	struct em_ring ring;
	rc = em_ring_init(&ring, 2);
	if (rc < 0)
		return rc;
	rc = replay(db, m, &ring);
	em_ring_exit(&ring);
	if (rc < 0)
		return rc;
	ck->last = *m;
	ck->have_last = 1;
	db->base_records[0] = m->hot_records; /* zero in a meta without counts */
	db->base_records[1] = m->cold_records;
	ck->floor[COMPACT_HOT] = em_align_down(m->hot_begin, EM_IO_ALIGN);
	ck->floor[COMPACT_COLD] = em_align_down(m->cold_begin, EM_IO_ALIGN);
	ck->floor[COMPACT_CHUNKS] = em_align_down(m->chunk_begin, EM_IO_ALIGN);
	for (int k = 0; k < 3; k++)
		ck->released[k] = ck->floor[k];
	db->recovery.checkpoint_id = m->id;
	if (db->readonly)
		return 0;
	/* skipped ones go (removed next time otherwise); once that is durable, no
	 * other checkpoint needs the segment files wholly below the logs' begins, and
	 * a crash may have brought back ones released before it (file.h:
	 * em_file_remove_below). Not before: a failed open must leave an older
	 * checkpoint usable. */
	char *top = ck_path(db, NULL, NULL);
	if (!top)
		return 0;
	if (ck_remove_others(db, ck->chosen) == 0 && em_dir_fsync(top) == 0) {
		for (int k = COMPACT_HOT; k <= COMPACT_CHUNKS; k++) {
			int n = em_file_remove_below(ck_kind_file(db, k), ck->floor[k]);
			if (n > 0)
				db_report(db, "removed %d segment file%s below a log's begin", n,
					  n == 1 ? "" : "s");
			/* a failed removal only leaves disk space behind */
		}
	}
	em_free(top, 0);
	return 0;
}
