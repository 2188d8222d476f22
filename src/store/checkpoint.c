/*
 * checkpoint.c - fold-over checkpoints of the whole store, and recovery from them.
 *
 * A checkpoint is a directory checkpoints/<id, 16 hex digits>/ holding
 *   hot.index   the hot index, as (bucket, entry) pairs of 8-byte words
 *   cold.table  the cold index's in-memory table (one word per hash chunk)
 *   meta        extents of the three logs, geometry, and the two files' sizes and
 *               checksums; itself checksummed. Written last (meta.tmp, fsync,
 *               rename, fsync of the directory): a checkpoint is complete exactly
 *               when its meta is there and checks out.
 * (Byte layouts: docs/format.md.)
 *
 * Design notes (the protocol of ckpt_take; docs/checkpoint.md argues each step)
 * ---------------------------------------------------------------------------
 *  1. Checkpoints are serialised by ck->mu, and each holds the compactor's pass_mu
 *     throughout: no compaction pass runs meanwhile, so the logs' begin addresses,
 *     the cold log, the chunk log and the cold index table do not change (only
 *     compaction writes them). User threads keep reading and writing the hot log.
 *  2. R = the hot tail, then every thread leaves its epoch (epoch_wait_safe): each
 *     record below R was allocated by an operation that has finished, so it is
 *     linked from the index or marked invalid.
 *  3. The hot index is copied bucket by bucket, while writers go on (a fuzzy copy).
 *     A read-cache entry is saved as the hot chain below it (the read cache is not
 *     durable). Tentative entries are skipped (their records are >= R: step 2).
 *  4. E = the hot tail after the copy, so every address the copy saw is below E.
 *     hlog_fold(hot, E) makes [begin, E) immutable and durable.
 *  5. Recovery loads the copy, then replays [R, E) in address order, pointing each
 *     record's (bucket, tag) entry at it when it is newer than the entry. An entry
 *     the copy missed or saw stale was changed by a record >= R, which the replay
 *     applies; entries never point at or above E. The result is the index of the
 *     log [begin, E), which is the state of every write that returned before the
 *     checkpoint began (each such record is < R <= E) plus some that ran during it.
 *  6. The cold log and the chunk log are folded to their tails, and the table of
 *     chunk addresses saved: with compaction paused they are consistent with the
 *     hot log's begin (every record compaction moved below it is in the cold log).
 *  7. Log space below a begin address is given back to the file system (punched)
 *     only once a complete checkpoint no longer needs it: ckpt_release punches up
 *     to min(begin, floor), floor being the begin recorded by the newest complete
 *     checkpoint (no floor before the store's first checkpoint: a crash then
 *     recovers an empty store anyway). The floor rises only after step 8 is
 *     durable: no older checkpoint that needs the space can come back after a
 *     crash and be recovered from.
 *  8. After the meta is durable, older checkpoint directories are removed, and the
 *     checkpoints directory fsynced.
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
#include "store/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "store/compact.h"
#include "store/store_int.h"

#define META_MAGIC "EMBERCKP"
#define META_VERSION 1u
#define WBUF_SIZE (1u << 20)   /* file writer's staging buffer */
#define REPLAY_WINDOW (4u << 20)
#define MAX_CKPT_DIRS 64       /* directory names listed at a time */

struct ckpt {
	pthread_mutex_t mu; /* one checkpoint at a time; guards last, have_last */
	_Atomic int active; /* a checkpoint holds pass_mu */
	struct ckpt_meta last;
	int have_last;
	/* guarded by the compactor's pass_mu */
	uint64_t floor[3];    /* punch nothing at or above (aligned begin of last) */
	uint64_t released[3]; /* punched below this */
	/* recovery: the files of the chosen checkpoint, until ckpt_apply */
	uint64_t *index_words;
	size_t index_cap;
	uint64_t *table_words;
	size_t table_cap;
	char chosen[32];
	/* background thread */
	pthread_t thread;
	pthread_mutex_t tmu;
	pthread_cond_t tcv;
	int stop, started;
};

/* ---- paths ------------------------------------------------------------------- */

/* dir/checkpoints[/name[/file]] into a fresh string */
static char *ck_path(struct ember_db *db, const char *name, const char *file)
{
	size_t n = strlen(db->dir) + strlen(CKPT_DIR) + (name ? strlen(name) : 0) +
		   (file ? strlen(file) : 0) + 4;
	char *p = em_alloc(n);
	if (!p)
		return NULL;
	snprintf(p, n, "%s/%s%s%s%s%s", db->dir, CKPT_DIR, name ? "/" : "", name ? name : "",
		 file ? "/" : "", file ? file : "");
	return p;
}

/* Remove one checkpoint directory. What counts is its meta: without it the
 * directory is a partial checkpoint that recovery never loads. So an error
 * removing the meta is returned; once the meta is gone, a directory that stays
 * (a stray file in it) has the meta's removal made durable by an fsync of the
 * directory itself, and counts as removed. Anything else under the name (a file,
 * a symbolic link) is unlinked itself, never followed. Returns 0 (gone), 1
 * (stays, without its meta) or an error. */
static int remove_ckpt_dir(struct ember_db *db, const char *name)
{
	static const char *const files[] = {"meta", "meta.tmp", "hot.index", "cold.table"};
	char *d = ck_path(db, name, NULL);
	if (!d)
		return EMBER_ENOMEM;
	int rc = 0;
	struct stat sb;
	if (lstat(d, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
		/* a file or a symbolic link, not a directory, under a checkpoint's name:
		 * no checkpoint of Ember's, and it would stop the checkpoint of that id
		 * (its mkdir), so it goes. The entry only: through a link, the files of
		 * whatever it led to went, and a dangling one failed the removal
		 * (-ENOENT) at every checkpoint, so log space was never given back */
		rc = em_path_unlink(d);
		rc = rc == -ENOENT ? 0 : rc;
		goto out;
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char *p = ck_path(db, name, files[i]);
		if (!p) {
			rc = EMBER_ENOMEM;
			goto out;
		}
		rc = em_path_unlink(p);
		rc = rc == -ENOENT ? 0 : rc;
		em_free(p, 0);
		if (rc < 0 && i == 0)
			goto out; /* the meta stays: still a checkpoint */
	}
	rc = 0;
	int drc = em_path_rmdir(d);
	if (drc < 0 && drc != -ENOENT) {
		rc = em_dir_fsync(d); /* it stays, without its meta: make that durable */
		if (rc == 0)
			rc = 1;
	}
out:
	em_free(d, 0);
	return rc;
}

/* A checkpoint directory's name: 16 lowercase hex digits (its id). */
static int ckpt_name_ok(const char *name)
{
	return strlen(name) == 16 && strspn(name, "0123456789abcdef") == 16;
}

/* ---- meta ------------------------------------------------------------------------ */

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

static int geometry_equal(const struct store_geometry *a, const struct store_geometry *b)
{
	return a->page_size == b->page_size && a->hot_mem == b->hot_mem &&
	       a->cold_mem == b->cold_mem && a->chunk_mem == b->chunk_mem &&
	       a->index_buckets == b->index_buckets && a->cold_index_chunks == b->cold_index_chunks &&
	       a->cold_chunk_bytes == b->cold_chunk_bytes &&
	       a->log_segment_bytes == b->log_segment_bytes;
}

/* ---- writing a checkpoint's files ----------------------------------------------- */

/* Streams words to a file through an O_DIRECT-sized staging buffer. */
struct fwriter {
	struct em_file f;
	struct em_ring *ring;
	uint8_t *buf;
	size_t n;
	uint64_t off;
	XXH3_state_t *st;
	int open;
};

static int fw_open(struct fwriter *w, struct em_ring *ring, const char *path)
{
	memset(w, 0, sizeof(*w));
	w->ring = ring;
	w->buf = em_alloc_aligned(EM_IO_ALIGN, WBUF_SIZE);
	w->st = XXH3_createState();
	if (!w->buf || !w->st)
		return EMBER_ENOMEM;
	XXH3_64bits_reset(w->st);
	int rc = em_file_open(&w->f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	if (rc == 0)
		w->open = 1;
	return rc;
}

static int fw_flush(struct fwriter *w)
{
	if (!w->n)
		return 0;
	size_t len = em_align_up(w->n, EM_IO_ALIGN);
	memset(w->buf + w->n, 0, len - w->n);
	int rc = em_io_pwrite(w->ring, &w->f, w->buf, (uint32_t)len, w->off);
	w->off += len;
	w->n = 0;
	return rc;
}

static int fw_put(struct fwriter *w, const void *p, size_t len)
{
	XXH3_64bits_update(w->st, p, len);
	const uint8_t *s = p;
	while (len) {
		size_t k = WBUF_SIZE - w->n < len ? WBUF_SIZE - w->n : len;
		memcpy(w->buf + w->n, s, k);
		w->n += k;
		s += k;
		len -= k;
		if (w->n == WBUF_SIZE) {
			int rc = fw_flush(w);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* Flush, fsync, and close; *sum = checksum of everything put. */
static int fw_close(struct fwriter *w, int ok, uint64_t *sum)
{
	int rc = 0;
	if (ok && w->open) {
		rc = fw_flush(w);
		if (rc == 0)
			rc = em_io_fsync(w->ring, &w->f);
		if (sum)
			*sum = XXH3_64bits_digest(w->st);
	}
	if (w->open)
		em_file_close(&w->f);
	if (w->st)
		XXH3_freeState(w->st);
	em_free(w->buf, WBUF_SIZE);
	memset(w, 0, sizeof(*w));
	return rc;
}

/* Step 3: the fuzzy copy of the hot index. Protected in stretches of buckets. */
static int write_index(struct ember_db *db, ember_session *s, struct fwriter *w, uint64_t *count)
{
	struct hash_index *hi = &db->index;
	uint64_t pairs[2 * 64];
	size_t np = 0;
	int rc = 0;
	*count = 0;
	epoch_protect(db->ep, s->slot);
	for (uint64_t b = 0; b < hi->nbuckets; b++) {
		if ((b & 4095) == 4095)
			epoch_refresh(db->ep, s->slot);
		for (struct hi_bucket *k = &hi->table[b]; k; k = hi_overflow_next(hi, k)) {
			for (int i = 0; i < HI_SLOTS; i++) {
				/* acquire: a read-cache record the entry names is fully written */
				uint64_t e = atomic_load_explicit(&k->entry[i], memory_order_acquire);
				if (!e || (e & HI_TENTATIVE))
					continue;
				if (e & HI_READCACHE) {
					uint64_t below = hot_chain(db, e);
					if (!below)
						continue;
					e = (e & HI_TAG_MASK) | below;
				}
				pairs[np++] = b;
				pairs[np++] = e;
				if (np == 2 * 64) {
					rc = fw_put(w, pairs, np * 8);
					*count += np / 2;
					np = 0;
					if (rc < 0)
						goto out;
				}
			}
		}
	}
	if (np) {
		rc = fw_put(w, pairs, np * 8);
		*count += np / 2;
	}
out:
	epoch_unprotect(db->ep, s->slot);
	return rc;
}

static int write_table(struct ember_db *db, struct fwriter *w)
{
	struct cold_index *ci = &db->cidx;
	uint64_t words[512];
	for (uint64_t c = 0; c < ci->nchunks; c += 512) {
		uint64_t n = ci->nchunks - c < 512 ? ci->nchunks - c : 512;
		for (uint64_t i = 0; i < n; i++)
			words[i] = ci_table_load(ci, c + i); /* stable: compaction is paused */
		int rc = fw_put(w, words, n * 8);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static struct em_file *kind_file(struct ember_db *db, int kind)
{
	return kind == COMPACT_HOT ? &db->hot_file : kind == COMPACT_COLD ? &db->cold_file
									   : &db->chunk_file;
}

static struct hlog *kind_hlog(struct ember_db *db, int kind)
{
	return kind == COMPACT_HOT ? db->hot : kind == COMPACT_COLD ? db->cold : db->chunks;
}

int ckpt_release(struct ember_db *db, int kind, uint64_t a, struct em_ring *ring)
{
	struct ckpt *ck = db->ck;
	uint64_t lim = em_align_down(a, EM_IO_ALIGN);
	if (lim > ck->floor[kind])
		lim = ck->floor[kind];
	if (lim <= ck->released[kind])
		return 0;
	int rc = em_io_punch(ring, kind_file(db, kind), ck->released[kind], lim - ck->released[kind]);
	if (rc < 0 && rc != -EOPNOTSUPP)
		return rc;
	ck->released[kind] = lim;
	return 0;
}

static void geometry_of(struct ember_db *db, struct store_geometry *g)
{
	g->page_size = db->opts.page_size;
	g->hot_mem = db->hot->mem_size;
	g->cold_mem = db->cold->mem_size;
	g->chunk_mem = db->chunks->mem_size;
	g->index_buckets = db->index.nbuckets;
	g->cold_index_chunks = db->cidx.nchunks;
	g->cold_chunk_bytes = db->cidx.chunk_bytes;
	g->log_segment_bytes = db->opts.log_segment_bytes;
}

/* Write meta through meta.tmp and a rename, then make both directories durable. */
static int write_meta(struct ember_db *db, struct em_ring *ring, const char *name,
		      const struct ckpt_meta *m)
{
	int rc;
	char *tmp = ck_path(db, name, "meta.tmp"), *fin = ck_path(db, name, "meta");
	char *dir = ck_path(db, name, NULL), *top = ck_path(db, NULL, NULL);
	uint8_t *b = em_alloc_aligned(EM_IO_ALIGN, CKPT_META_SIZE);
	if (!tmp || !fin || !dir || !top || !b) {
		rc = EMBER_ENOMEM;
		goto out;
	}
	ckpt_meta_encode(m, b);
	struct em_file f;
	rc = em_file_open(&f, tmp, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	if (rc < 0)
		goto out;
	rc = em_io_pwrite(ring, &f, b, CKPT_META_SIZE, 0);
	if (rc == 0)
		rc = em_io_fsync(ring, &f);
	em_file_close(&f);
	/* the entries of hot.index, cold.table and meta.tmp durable before the meta
	 * that names them is published: a crash could otherwise keep the rename and
	 * lose a file it needs (a damaged checkpoint: the first one's failed the open) */
	if (rc == 0)
		rc = em_dir_fsync(dir);
	if (rc < 0)
		goto out;
	rc = em_path_rename(tmp, fin);
	if (rc < 0)
		goto out;
	rc = em_dir_fsync(dir); /* the rename */
	if (rc == 0)
		rc = em_dir_fsync(top); /* the checkpoint directory's entry */
out:
	em_free(b, CKPT_META_SIZE);
	em_free(tmp, 0);
	em_free(fin, 0);
	em_free(dir, 0);
	em_free(top, 0);
	return rc;
}

static int each_name(struct ember_db *db, int (*fn)(void *arg, const char *name), void *arg);

struct remove_walk {
	struct ember_db *db;
	const char *keep;
	int rc; /* the first error */
};

static int remove_one(void *arg, const char *name)
{
	struct remove_walk *rw = arg;
	if (strcmp(name, rw->keep) != 0) {
		int rc = remove_ckpt_dir(rw->db, name);
		if (rc < 0 && rw->rc == 0)
			rw->rc = rc;
	}
	return 0; /* the others still go */
}

/* Remove every checkpoint directory but keep (a name; "" keeps none). Windows of
 * names move strictly down, so a directory that stays (without its meta) is
 * listed once. Returns 0 or the first error. */
static int remove_others(struct ember_db *db, const char *keep)
{
	struct remove_walk rw = {db, keep, 0};
	int rc = each_name(db, remove_one, &rw);
	return rc < 0 ? rc : rw.rc;
}

int ckpt_remove_all(struct ember_db *db)
{
	int rc = remove_others(db, "");
	if (rc < 0)
		return rc;
	/* durable before the caller truncates the logs: a crash in between must not
	 * bring back a checkpoint whose logs are gone (ext4 keeps this order anyway;
	 * POSIX does not promise it) */
	char *top = ck_path(db, NULL, NULL);
	if (!top)
		return EMBER_ENOMEM;
	rc = em_dir_fsync(top);
	em_free(top, 0);
	return rc == -ENOENT ? 0 : rc; /* no checkpoints/ yet: nothing to make durable */
}

int ckpt_active(struct ember_db *db)
{
	/* relaxed: a hint for compaction assists */
	return db->ck && atomic_load_explicit(&db->ck->active, memory_order_relaxed);
}

int ckpt_dirty(struct ember_db *db)
{
	struct ckpt *ck = db->ck;
	pthread_mutex_lock(&ck->mu);
	int dirty;
	if (!ck->have_last)
		dirty = hlog_load(&db->hot->tail) > EM_LOG_START ||
			hlog_load(&db->cold->tail) > EM_LOG_START;
	else
		dirty = hlog_load(&db->hot->tail) != ck->last.hot_end ||
			hlog_load(&db->hot->begin) != ck->last.hot_begin ||
			hlog_load(&db->cold->tail) != ck->last.cold_end ||
			hlog_load(&db->cold->begin) != ck->last.cold_begin ||
			hlog_load(&db->chunks->tail) != ck->last.chunk_end;
	pthread_mutex_unlock(&ck->mu);
	return dirty;
}

int ckpt_take(struct ember_db *db, uint64_t *id_out)
{
	struct ckpt *ck = db->ck;
	struct compactor *c = db->comp;
	int rc;
	pthread_mutex_lock(&ck->mu);
	pthread_mutex_lock(&c->pass_mu);
	/* relaxed: a hint (see ckpt_active) */
	atomic_store_explicit(&ck->active, 1, memory_order_relaxed);
	struct ckpt_meta m = {0};
	m.id = (ck->have_last ? ck->last.id : 0) + 1;
	char name[32];
	snprintf(name, sizeof(name), "%016" PRIx64, m.id);
	ember_session *s = NULL;
	struct em_ring ring;
	int ring_ok = 0;
	struct fwriter w = {0};
	char *top = ck_path(db, NULL, NULL), *dir = ck_path(db, name, NULL);
	char *ipath = ck_path(db, name, "hot.index"), *tpath = ck_path(db, name, "cold.table");
	if (!top || !dir || !ipath || !tpath) {
		rc = EMBER_ENOMEM;
		goto out;
	}
	rc = session_create(db, 1, &s);
	if (rc < 0)
		goto out;
	rc = em_ring_init(&ring, 4);
	if (rc < 0)
		goto out;
	ring_ok = 1;
	struct stat sb;
	if (lstat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode) && (rc = em_path_unlink(dir)) < 0)
		goto out; /* a file under this checkpoint's name: in its directory's way */
	if ((rc = em_path_mkdir(top)) == 0)
		rc = em_dir_fsync(db->dir); /* checkpoints/ itself, made now: its entry durable */
	if ((rc < 0 && rc != -EEXIST) || ((rc = em_path_mkdir(dir)) < 0 && rc != -EEXIST))
		goto out;
	rc = 0;
	/* step 2 */
	m.hot_replay = hlog_load(&db->hot->tail);
	epoch_wait_safe(db->ep);
	/* step 3 */
	rc = fw_open(&w, &ring, ipath);
	if (rc == 0)
		rc = write_index(db, s, &w, &m.index_entries);
	if (rc == 0)
		rc = fw_close(&w, 1, &m.index_sum);
	if (rc < 0)
		goto out;
	/* step 4 */
	m.hot_end = hlog_load(&db->hot->tail);
	stats_tier_records(db, &m.hot_records, &m.cold_records);
	m.has_counts = 1;
	rc = hlog_fold(db->hot, m.hot_end, &ring);
	if (rc < 0)
		goto out;
	/* step 6 */
	m.cold_end = hlog_load(&db->cold->tail);
	m.chunk_end = hlog_load(&db->chunks->tail);
	rc = hlog_fold(db->cold, m.cold_end, &ring);
	if (rc == 0)
		rc = hlog_fold(db->chunks, m.chunk_end, &ring);
	if (rc < 0)
		goto out;
	rc = fw_open(&w, &ring, tpath);
	if (rc == 0)
		rc = write_table(db, &w);
	if (rc == 0)
		rc = fw_close(&w, 1, &m.table_sum);
	if (rc < 0)
		goto out;
	m.table_bytes = db->cidx.nchunks * 8;
	m.hot_begin = hlog_load(&db->hot->begin);
	m.cold_begin = hlog_load(&db->cold->begin);
	m.chunk_begin = hlog_load(&db->chunks->begin);
	m.time_unix = (uint64_t)time(NULL);
	geometry_of(db, &m.geo);
	rc = write_meta(db, &ring, name, &m);
	if (rc < 0)
		goto out;
	/* complete: it is the one recovery will use */
	ck->last = m;
	ck->have_last = 1;
	/* step 8 before step 7: the older checkpoints go, durably, before the space
	 * they need is released. Released first, a crash before their removal was
	 * durable left one whose log space was punched, and recovery fell back to it
	 * when this one failed a check: every read failed. */
	int rrc = remove_others(db, name);
	if (rrc == 0)
		rrc = em_dir_fsync(top);
	if (rrc < 0) {
		db_report(db, "checkpoint %" PRIu64 ": removing older checkpoints failed (%s): "
			  "log space kept until a checkpoint removes them", m.id, ember_strerror(rrc));
	} else {
		/* step 7: what compaction freed is no longer needed by any checkpoint */
		ck->floor[COMPACT_HOT] = em_align_down(m.hot_begin, EM_IO_ALIGN);
		ck->floor[COMPACT_COLD] = em_align_down(m.cold_begin, EM_IO_ALIGN);
		ck->floor[COMPACT_CHUNKS] = em_align_down(m.chunk_begin, EM_IO_ALIGN);
		for (int k = COMPACT_HOT; k <= COMPACT_CHUNKS && rc == 0; k++)
			rc = ckpt_release(db, k, hlog_load(&kind_hlog(db, k)->begin), &ring);
		if (rc < 0) {
			db_report(db, "checkpoint %" PRIu64 ": releasing log space failed: %s", m.id,
				  ember_strerror(rc));
			rc = 0; /* the checkpoint itself is complete */
		}
	}
	if (id_out)
		*id_out = m.id;
out:
	fw_close(&w, 0, NULL);
	if (rc < 0 && dir)
		(void)remove_ckpt_dir(db, name); /* best effort: recovery skips it anyway */
	if (ring_ok)
		em_ring_exit(&ring);
	if (s)
		session_free_internal(s);
	em_free(top, 0);
	em_free(dir, 0);
	em_free(ipath, 0);
	em_free(tpath, 0);
	atomic_store_explicit(&ck->active, 0, memory_order_relaxed); /* a hint */
	pthread_mutex_unlock(&c->pass_mu);
	pthread_mutex_unlock(&ck->mu);
	return rc;
}

int ember_checkpoint(ember_db *db, uint64_t *id)
{
	if (!db || db->magic != DB_MAGIC)
		return EMBER_EINVAL;
	if (db->readonly)
		return EMBER_EREADONLY;
	return ckpt_take(db, id);
}

/* ---- background checkpoints ----------------------------------------------------- */

static void *ckpt_main(void *arg)
{
	struct ember_db *db = arg;
	struct ckpt *ck = db->ck;
	uint32_t ms = db->opts.checkpoint_interval_ms;
	pthread_mutex_lock(&ck->tmu);
	while (!ck->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += ms / 1000;
		ts.tv_nsec += (long)(ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&ck->tcv, &ck->tmu, &ts);
		if (ck->stop)
			break;
		pthread_mutex_unlock(&ck->tmu);
		if (ckpt_dirty(db)) {
			int rc = ckpt_take(db, NULL);
			if (rc < 0)
				db_report(db, "background checkpoint failed: %s", ember_strerror(rc));
		}
		pthread_mutex_lock(&ck->tmu);
	}
	pthread_mutex_unlock(&ck->tmu);
	return NULL;
}

int ckpt_start(struct ember_db *db)
{
	struct ckpt *ck = db->ck;
	if (!db->opts.checkpoint_interval_ms || db->readonly)
		return 0;
	int rc = -pthread_create(&ck->thread, NULL, ckpt_main, db);
	if (rc == 0)
		ck->started = 1;
	return rc;
}

void ckpt_stop(struct ember_db *db)
{
	struct ckpt *ck = db->ck;
	if (!ck || !ck->started)
		return;
	pthread_mutex_lock(&ck->tmu);
	ck->stop = 1;
	pthread_cond_signal(&ck->tcv);
	pthread_mutex_unlock(&ck->tmu);
	pthread_join(ck->thread, NULL);
	ck->started = 0;
}

int ckpt_init(struct ember_db *db)
{
	struct ckpt *ck = em_zalloc(sizeof(*ck));
	if (!ck)
		return EMBER_ENOMEM;
	pthread_mutex_init(&ck->mu, NULL);
	pthread_mutex_init(&ck->tmu, NULL);
	pthread_cond_init(&ck->tcv, NULL);
	for (int k = 0; k < 3; k++)
		ck->floor[k] = UINT64_MAX; /* no checkpoint yet: nothing to keep */
	db->ck = ck;
	return 0;
}

void ckpt_free(struct ember_db *db)
{
	struct ckpt *ck = db->ck;
	if (!ck)
		return;
	ckpt_stop(db);
	em_free(ck->index_words, 0);
	em_free(ck->table_words, 0);
	pthread_cond_destroy(&ck->tcv);
	pthread_mutex_destroy(&ck->tmu);
	pthread_mutex_destroy(&ck->mu);
	em_free(ck, sizeof(*ck));
	db->ck = NULL;
}

/* ---- listing -------------------------------------------------------------------- */

/* Read a whole (small) file into an aligned buffer of its size rounded up to 4 KiB.
 * Returns 0 with *out (em_free(.., 0)) and *len, or an error: EMBER_ECORRUPT when
 * the file holds more than max bytes (checked before anything is allocated, so a
 * damaged size never costs its memory or its reads). */
static int read_file(struct em_ring *ring, const char *path, uint64_t max, uint8_t **out,
		     size_t *len)
{
	struct em_file f;
	int rc = em_file_open(&f, path, EM_FILE_READONLY);
	if (rc < 0)
		return rc;
	int64_t size = em_file_size(&f);
	if (size < 0) {
		rc = (int)size;
		goto undo_open;
	}
	if ((uint64_t)size > max) {
		rc = EMBER_ECORRUPT;
		goto undo_open;
	}
	size_t cap = em_align_up((uint64_t)size, EM_IO_ALIGN);
	uint8_t *b = em_alloc_aligned(EM_IO_ALIGN, cap ? cap : EM_IO_ALIGN);
	if (!b) {
		rc = EMBER_ENOMEM;
		goto undo_open;
	}
	for (size_t off = 0; off < cap && rc == 0;) {
		uint32_t n = cap - off > (8u << 20) ? (8u << 20) : (uint32_t)(cap - off);
		rc = em_io_pread(ring, &f, b + off, n, off);
		if (rc == -EIO && off + n > (size_t)size)
			rc = 0; /* the short last block of a buffered file */
		off += n;
	}
	if (rc < 0) {
		em_free(b, 0);
		goto undo_open;
	}
	*out = b;
	*len = (size_t)size;
undo_open:
	em_file_close(&f);
	return rc;
}

/* Names of checkpoint directories older than below (NULL: any), newest (largest
 * id) first: the newest cap of them. Returns how many (cap: there may be more; the
 * next window starts below the last) or an error. */
static int list_names(struct ember_db *db, char names[][32], int cap, const char *below)
{
	char *top = ck_path(db, NULL, NULL);
	if (!top)
		return EMBER_ENOMEM;
	DIR *d = opendir(top);
	em_free(top, 0);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	/* the newest cap of them, newest first (16 lowercase hex digits: string order
	 * is numeric order); every entry is looked at, so leftovers beyond cap never
	 * hide the newest (they did: the first cap in readdir order were kept) */
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!ckpt_name_ok(de->d_name) || (below && strcmp(de->d_name, below) >= 0))
			continue;
		if (n == cap && strcmp(de->d_name, names[n - 1]) <= 0)
			continue; /* older than all kept */
		int j = n < cap ? n++ : n - 1; /* a new place, or the oldest's */
		for (; j > 0 && strcmp(names[j - 1], de->d_name) < 0; j--)
			memcpy(names[j], names[j - 1], 32);
		snprintf(names[j], 32, "%s", de->d_name);
	}
	closedir(d);
	return n;
}

/* fn(arg, name) for every checkpoint directory name, newest first, MAX_CKPT_DIRS
 * names per listing (a window: the newest below the last window's oldest), until
 * fn returns nonzero, which is returned. Returns 0 when the names run out, or the
 * listing's error. */
static int each_name(struct ember_db *db, int (*fn)(void *arg, const char *name), void *arg)
{
	char names[MAX_CKPT_DIRS][32], below[32];
	for (int w = 0;; w++) {
		int n = list_names(db, names, MAX_CKPT_DIRS, w ? below : NULL);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			int rc = fn(arg, names[i]);
			if (rc)
				return rc;
		}
		if (n < MAX_CKPT_DIRS)
			return 0;
		memcpy(below, names[n - 1], 32);
	}
}

/* Does m's id name the directory name? (A copied or restored directory's does
 * not: taken as checkpoint m->id, the next checkpoint of that id would write
 * over it in place.) */
static int meta_is_named(const struct ckpt_meta *m, const char *name)
{
	char want[32];
	snprintf(want, sizeof(want), "%016" PRIx64, m->id);
	return strcmp(want, name) == 0;
}

static int read_meta(struct ember_db *db, struct em_ring *ring, const char *name,
		     struct ckpt_meta *m)
{
	char *p = ck_path(db, name, "meta");
	if (!p)
		return EMBER_ENOMEM;
	uint8_t *b = NULL;
	size_t len = 0;
	int rc = read_file(ring, p, CKPT_META_SIZE, &b, &len);
	em_free(p, 0);
	if (rc == -ENOTDIR)
		rc = -ENOENT; /* a file under a checkpoint's name was never one (Ember
			       * writes directories): as a partial one, it is skipped
			       * and removed, and never fails an open that has no
			       * complete checkpoint ("every complete one is damaged") */
	if (rc < 0)
		return rc;
	rc = ckpt_meta_parse(b, len, m);
	em_free(b, 0);
	return rc;
}

/* Errors that mean a checkpoint is damaged (recovery moves on to an older one);
 * any other error fails the open (ckpt_find) and ember_checkpoint_list. */
static int is_damage(int rc)
{
	return rc == EMBER_ECORRUPT || rc == EMBER_ENOTEMBER || rc == EMBER_EVERSION;
}

struct list_walk {
	struct ember_db *db;
	struct em_ring *ring;
	ember_checkpoint_info *out;
	size_t cap, k;
};

static int list_one(void *arg, const char *name)
{
	struct list_walk *lw = arg;
	struct ckpt_meta m;
	int rc = read_meta(lw->db, lw->ring, name, &m);
	if (rc == -ENOENT || is_damage(rc) || (rc == 0 && !meta_is_named(&m, name)))
		return 0; /* partial, damaged or a copy (load_one): no complete checkpoint */
	if (rc < 0)
		return rc; /* an I/O error, memory: not "no checkpoint" */
	if (lw->k < lw->cap)
		lw->out[lw->k] = (ember_checkpoint_info){m.id, m.time_unix, m.hot_begin, m.hot_end,
							 m.cold_begin, m.cold_end, m.index_entries};
	lw->k++;
	return 0;
}

int ember_checkpoint_list(ember_db *db, ember_checkpoint_info *out, size_t cap, size_t *n_out)
{
	if (!db || db->magic != DB_MAGIC || !n_out || (cap && !out))
		return EMBER_EINVAL;
	struct em_ring ring;
	int rc = em_ring_init(&ring, 2);
	if (rc < 0)
		return rc;
	struct list_walk lw = {db, &ring, out, cap, 0};
	pthread_mutex_lock(&db->ck->mu); /* not while one is being written or removed */
	rc = each_name(db, list_one, &lw);
	pthread_mutex_unlock(&db->ck->mu);
	em_ring_exit(&ring);
	*n_out = lw.k;
	if (rc == 0 && lw.k > cap)
		rc = EMBER_ERANGE;
	return rc;
}

/* ---- recovery ------------------------------------------------------------------- */

static void skip(struct ember_db *db, const char *name, const char *why, int code)
{
	if (!is_damage(code) && code != -ENOENT) { /* not skipped: the open fails */
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
	int rc = read_meta(db, ring, name, m);
	if (rc == -ENOENT) {
		skip(db, name, "no meta file (partial checkpoint)", rc);
		return 1;
	}
	if (rc < 0) {
		skip(db, name, "meta unreadable or damaged", rc);
		return rc;
	}
	if (!meta_is_named(m, name)) {
		skip(db, name, "its meta names another checkpoint id", EMBER_ECORRUPT);
		return EMBER_ECORRUPT;
	}
	if (!geometry_equal(&m->geo, geo)) {
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
		rc = p ? read_file(ring, p, em_align_up(want_len[i], EM_IO_ALIGN), &bufs[i], &len)
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
	if (rc < 0 && !is_damage(rc))
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
	rc = each_name(db, find_one, &fw);
	if (rc == 1) {
		*found = 1;
		rc = 0;
	}
	em_ring_exit(&ring);
	if (rc == 0 && !*found && !fw.complete_seen && fw.listed > 0 && !db->readonly)
		(void)remove_others(db, ""); /* only partial ones: the store starts empty */
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
	if (remove_others(db, ck->chosen) == 0 && em_dir_fsync(top) == 0) {
		for (int k = COMPACT_HOT; k <= COMPACT_CHUNKS; k++) {
			int n = em_file_remove_below(kind_file(db, k), ck->floor[k]);
			if (n > 0)
				db_report(db, "removed %d segment file%s below a log's begin", n,
					  n == 1 ? "" : "s");
			/* a failed removal only leaves disk space behind */
		}
	}
	em_free(top, 0);
	return 0;
}
