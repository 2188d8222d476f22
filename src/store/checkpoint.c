/*
 * checkpoint.c - taking fold-over checkpoints of the whole store (ckpt_take, the
 * background thread), and giving log space back once no checkpoint needs it.
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
 */
#include "store/checkpoint_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/alloc.h"
#include "core/hash.h"

#define WBUF_SIZE (1u << 20)   /* file writer's staging buffer */

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

int ckpt_release(struct ember_db *db, int kind, uint64_t a, struct em_ring *ring)
{
	struct ckpt *ck = db->ck;
	uint64_t lim = em_align_down(a, EM_IO_ALIGN);
	if (lim > ck->floor[kind])
		lim = ck->floor[kind];
	if (lim <= ck->released[kind])
		return 0;
	int rc = em_io_punch(ring, ck_kind_file(db, kind), ck->released[kind], lim - ck->released[kind]);
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
	g->cold_tags = db->cidx.tagged;
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

/* The checkpoint's directory dir, under top (checkpoints/, made and its entry made
 * durable the first time). Returns 0 or an error. */
static int make_dir(struct ember_db *db, const char *top, const char *dir)
{
	struct stat sb;
	int rc;
	if (lstat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode) && (rc = em_path_unlink(dir)) < 0)
		return rc; /* a file under this checkpoint's name: in its directory's way */
	if ((rc = em_path_mkdir(top)) == 0)
		rc = em_dir_fsync(db->dir); /* checkpoints/ itself, made now: its entry durable */
	if ((rc < 0 && rc != -EEXIST) || ((rc = em_path_mkdir(dir)) < 0 && rc != -EEXIST))
		return rc;
	return 0;
}

/* Steps 2, 3, 4 and 6: hot.index (ipath) and cold.table (tpath) written and
 * durable, the three logs folded; m gets the logs' extents and the files' sizes
 * and checksums. Returns 0 or an error (the caller removes the directory). */
static int write_files(struct ember_db *db, ember_session *s, struct em_ring *ring,
		       const char *ipath, const char *tpath, struct ckpt_meta *m)
{
	struct fwriter w = {0};
	int rc;
	/* step 2 */
	m->hot_replay = hlog_load(&db->hot->tail);
	epoch_wait_safe(db->ep);
	/* step 3 */
	rc = fw_open(&w, ring, ipath);
	if (rc == 0)
		rc = write_index(db, s, &w, &m->index_entries);
	if (rc == 0)
		rc = fw_close(&w, 1, &m->index_sum);
	if (rc < 0)
		goto out;
	/* step 4 */
	m->hot_end = hlog_load(&db->hot->tail);
	stats_tier_records(db, &m->hot_records, &m->cold_records);
	m->has_counts = 1;
	rc = hlog_fold(db->hot, m->hot_end, ring);
	if (rc < 0)
		goto out;
	/* step 6 */
	m->cold_end = hlog_load(&db->cold->tail);
	m->chunk_end = hlog_load(&db->chunks->tail);
	rc = hlog_fold(db->cold, m->cold_end, ring);
	if (rc == 0)
		rc = hlog_fold(db->chunks, m->chunk_end, ring);
	if (rc < 0)
		goto out;
	rc = fw_open(&w, ring, tpath);
	if (rc == 0)
		rc = write_table(db, &w);
	if (rc == 0)
		rc = fw_close(&w, 1, &m->table_sum);
	if (rc < 0)
		goto out;
	m->table_bytes = db->cidx.nchunks * 8;
	m->hot_begin = hlog_load(&db->hot->begin);
	m->cold_begin = hlog_load(&db->cold->begin);
	m->chunk_begin = hlog_load(&db->chunks->begin);
out:
	fw_close(&w, 0, NULL); /* a writer still open: closed without its fsync */
	return rc;
}

/*
 * Steps 8 and 7, once checkpoint m (directory name, under top) is complete: the
 * older checkpoints go, durably, and then the log space that only they needed.
 * In that order: with the space released first, a crash before their removal was
 * durable could leave an older checkpoint whose log space is punched, and recovery
 * would fall back to it if the new one failed a check, and every read would fail.
 * A failure is reported and leaves space on disk; the checkpoint itself stands.
 */
static void retire_older(struct ember_db *db, const char *name, const char *top,
			 const struct ckpt_meta *m, struct em_ring *ring)
{
	struct ckpt *ck = db->ck;
	int rc = ck_remove_others(db, name);
	if (rc == 0)
		rc = em_dir_fsync(top);
	if (rc < 0) {
		db_report(db, "checkpoint %" PRIu64 ": removing older checkpoints failed (%s): "
			  "log space kept until a checkpoint removes them", m->id, ember_strerror(rc));
		return;
	}
	/* step 7: what compaction freed is no longer needed by any checkpoint */
	ck->floor[COMPACT_HOT] = em_align_down(m->hot_begin, EM_IO_ALIGN);
	ck->floor[COMPACT_COLD] = em_align_down(m->cold_begin, EM_IO_ALIGN);
	ck->floor[COMPACT_CHUNKS] = em_align_down(m->chunk_begin, EM_IO_ALIGN);
	for (int k = COMPACT_HOT; k <= COMPACT_CHUNKS && rc == 0; k++)
		rc = ckpt_release(db, k, hlog_load(&ck_kind_hlog(db, k)->begin), ring);
	if (rc < 0)
		db_report(db, "checkpoint %" PRIu64 ": releasing log space failed: %s", m->id,
			  ember_strerror(rc));
}

int ckpt_take(struct ember_db *db, uint64_t *id_out)
{
	struct ckpt *ck = db->ck;
	struct compactor *c = db->comp;
	int rc;
	pthread_mutex_lock(&ck->mu);
	pthread_mutex_lock(&c->pass_mu); /* step 1 */
	/* relaxed: a hint (see ckpt_active) */
	atomic_store_explicit(&ck->active, 1, memory_order_relaxed);
	struct ckpt_meta m = {0};
	m.id = (ck->have_last ? ck->last.id : 0) + 1;
	char name[32];
	snprintf(name, sizeof(name), "%016" PRIx64, m.id);
	ember_session *s = NULL;
	struct em_ring ring;
	int ring_ok = 0;
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
	rc = make_dir(db, top, dir);
	if (rc == 0)
		rc = write_files(db, s, &ring, ipath, tpath, &m);
	if (rc < 0)
		goto out;
	m.time_unix = (uint64_t)time(NULL);
	geometry_of(db, &m.geo);
	rc = write_meta(db, &ring, name, &m);
	if (rc < 0)
		goto out;
	/* complete: it is the one recovery will use */
	ck->last = m;
	ck->have_last = 1;
	retire_older(db, name, top, &m, &ring);
	if (id_out)
		*id_out = m.id;
out:
	if (rc < 0 && dir)
		(void)ck_remove_dir(db, name); /* best effort: recovery skips it anyway */
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
