/*
 * db.c - opening and closing a store, its superblock, and sessions.
 *
 * A store directory holds:
 *   LOCK         an empty file held with flock() while the store is open
 *   ember.super  the superblock (layout in docs/format.md): magic, format version,
 *                page size, checksum
 *   hot.log      the hot log; byte x of the log is byte x of the file
 *   cold.log     the cold log (compaction output), likewise
 *   cold.idx     the chunk log: the cold index's hash chunks, likewise
 *   checkpoints/ one directory per complete checkpoint (checkpoint.c)
 *
 * Open sequence (ember_open): check options -> mkdir -> lock -> read the
 * superblock (absent, or TRUNCATE: a new store; else recover) -> find the newest
 * usable checkpoint -> epoch table -> hash index -> hot, cold and chunk logs (new:
 * truncated; recovered: restarted at the checkpoint's extents) -> cold index ->
 * apply the checkpoint (index, cold table, replay) -> compactor -> write the
 * superblock (new stores only) -> background checkpoints. Each step has an undo
 * label; a failure unwinds exactly the steps taken, and leaves no new superblock
 * behind. A new store removes old checkpoints before it truncates any log, so a
 * crash in between never pairs an old checkpoint with emptied logs.
 *
 * Close: background checkpoints stop, then a final checkpoint is taken when the
 * store changed since the last one (a clean close loses nothing), then everything
 * is torn down.
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/abi.h"
#include "core/alloc.h"
#include "core/hash.h"
#include "store/checkpoint.h"
#include "store/compact.h"

#define SUPER_NAME "ember.super"
#define HOT_NAME "hot.log"
#define COLD_NAME "cold.log"
#define CHUNK_NAME "cold.idx"
#define SUPER_SIZE 4096u
#define SUPER_MAGIC "EMBERDB\0"
#define FORMAT_VERSION 2u     /* each log one file */
#define FORMAT_VERSION_SEG 3u /* logs in segment files (log_segment_bytes at 72) */
/* tagged cold-index entries; logs in one file each or in segment files
 * (log_segment_bytes at 72: 0 or the segment size). Every new store. */
#define FORMAT_VERSION_TAGS 4u
/* The smallest log segment: every request the store makes (a record: value, key and
 * header, under 17 MiB; a flush write: 4 MiB) spans at most two segments, as
 * em_ring_read/write require. */
#define LOG_SEGMENT_MIN (UINT64_C(32) << 20)
_Static_assert(LOG_SEGMENT_MIN >= EMBER_MAX_VALUE_LEN + EMBER_MAX_KEY_LEN + 4096,
	       "a record fits in one segment");

/* Is seg a log segment size the store accepts (a power of two, LOG_SEGMENT_MIN ..
 * 2^EM_SEG_MAX_BITS)? 0 (one file per log) is not one. */
static int log_segment_ok(uint64_t seg)
{
	return seg >= LOG_SEGMENT_MIN && seg <= (UINT64_C(1) << EM_SEG_MAX_BITS) && !(seg & (seg - 1));
}

/* The size of ember_options in its first release: a caller's struct_size of 0
 * means this. Fields added later are appended, and this stays. */
#define OPTIONS_SIZE_BASE (offsetof(ember_options, log_arg) + sizeof(void *))

static void options_fill_default(ember_options *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->log_memory = UINT64_C(256) << 20;
	o->mutable_fraction = 0.9;
	o->index_buckets = UINT64_C(1) << 18;
	o->page_size = 1u << 20;
	o->io_queue_depth = 128;
	o->cold_index_chunks = UINT64_C(1) << 16;
	o->cold_chunk_bytes = 256;
	/* memory_budget, disk budgets and cold_log_memory: derived in layout_resolve */
}

void ember_options_default_sized(ember_options *o, size_t size)
{
	if (!o || !size)
		return;
	ember_options d;
	options_fill_default(&d);
	abi_struct_out(o, size, &d, sizeof(d));
	if (size >= sizeof(o->struct_size))
		o->struct_size = size;
}

void(ember_options_default)(ember_options *o)
{
	ember_options_default_sized(o, OPTIONS_SIZE_BASE);
}

static int options_resolve(const ember_options *in, ember_options *out)
{
	ember_options d;
	options_fill_default(&d);
	*out = d;
	if (in) {
		/* the caller's struct as far as it goes; what it lacks is zero: default */
		int rc = abi_struct_in(out, sizeof(*out), in,
				       in->struct_size ? in->struct_size : OPTIONS_SIZE_BASE);
		if (rc < 0)
			return rc;
	}
	if (!out->log_memory)
		out->log_memory = d.log_memory;
	if (out->mutable_fraction == 0)
		out->mutable_fraction = d.mutable_fraction;
	if (!out->index_buckets)
		out->index_buckets = d.index_buckets;
	if (!out->page_size)
		out->page_size = d.page_size;
	if (!out->io_queue_depth)
		out->io_queue_depth = d.io_queue_depth;
	if (!out->cold_index_chunks)
		out->cold_index_chunks = d.cold_index_chunks;
	if (!out->cold_chunk_bytes)
		out->cold_chunk_bytes = d.cold_chunk_bytes;
	if (out->page_size < (64u << 10) || out->page_size > (64u << 20) ||
	    (out->page_size & (out->page_size - 1)))
		return EMBER_EINVAL;
	if (!(out->mutable_fraction > 0 && out->mutable_fraction <= 1))
		return EMBER_EINVAL;
	if (out->io_queue_depth > 4096)
		return EMBER_EINVAL;
	if (out->index_buckets > (UINT64_C(1) << 36))
		return EMBER_EINVAL;
	if (out->log_memory / out->page_size < 8 || out->log_memory > (UINT64_C(1) << 44))
		return EMBER_EINVAL;
	if ((out->cold_index_chunks & (out->cold_index_chunks - 1)) ||
	    out->cold_index_chunks > (UINT64_C(1) << 36))
		return EMBER_EINVAL;
	if (out->cold_chunk_bytes < 64 || out->cold_chunk_bytes > 4096 ||
	    (out->cold_chunk_bytes & (out->cold_chunk_bytes - 1)))
		return EMBER_EINVAL;
	if (out->memory_budget > (UINT64_C(1) << 44) || out->cold_log_memory > (UINT64_C(1) << 44) ||
	    out->read_cache_memory > (UINT64_C(1) << 44))
		return EMBER_EINVAL;
	if (out->cold_cache_memory != EMBER_COLD_CACHE_OFF &&
	    out->cold_cache_memory > (UINT64_C(1) << 44))
		return EMBER_EINVAL;
	if (out->read_cache_memory && out->read_cache_memory / out->page_size < 8)
		return EMBER_EINVAL;
	if (out->read_cache_admit > EMBER_READ_CACHE_ADMIT_SECOND)
		return EMBER_EINVAL;
	if (out->log_segment_bytes && !log_segment_ok(out->log_segment_bytes))
		return EMBER_EINVAL;
	if (out->flags & ~(uint32_t)(EMBER_OPEN_TRUNCATE | EMBER_OPEN_READONLY | EMBER_OPEN_PREWRITE_LOG |
				     EMBER_OPEN_NO_CLOSE_CHECKPOINT))
		return EMBER_EINVAL;
	if ((out->flags & EMBER_OPEN_READONLY) &&
	    (out->flags & (EMBER_OPEN_TRUNCATE | EMBER_OPEN_PREWRITE_LOG)))
		return EMBER_EINVAL;
	return 0;
}

/* Sizes of every log's memory and disk budget, from the resolved options. */
struct layout {
	uint64_t hot_mem, cold_mem, chunk_mem, cache_mem;
	uint64_t hot_budget, cold_budget, chunk_budget;
};

static uint64_t pow2_ceil(uint64_t v)
{
	uint64_t n = 1;
	while (n < v)
		n <<= 1;
	return n;
}

static int layout_resolve(const ember_options *o, const struct store_geometry *geo,
			  struct layout *lay)
{
	uint64_t page = o->page_size, min_log = 8 * page;
	uint64_t index_bytes = pow2_ceil(o->index_buckets) * 64;
	uint64_t table_bytes = o->cold_index_chunks * 8;
	uint64_t base = o->memory_budget ? o->memory_budget : o->log_memory;
	lay->cold_mem = o->cold_log_memory;
	if (!lay->cold_mem) {
		lay->cold_mem = UINT64_C(64) << 20;
		if (o->memory_budget && lay->cold_mem > o->memory_budget / 8)
			lay->cold_mem = o->memory_budget / 8;
	}
	lay->cold_mem = em_page_floor(lay->cold_mem, (unsigned)__builtin_ctz(o->page_size));
	if (lay->cold_mem < min_log)
		lay->cold_mem = min_log;
	lay->chunk_mem = em_page_floor(base / 16, (unsigned)__builtin_ctz(o->page_size));
	if (lay->chunk_mem < min_log)
		lay->chunk_mem = min_log;
	/* the chunk cache: asked for, off, or by default a quarter of the budget (a
	 * 32nd of log_memory without one) that yields to the logs when the budget is
	 * tight; never more than holds every chunk (cold_index.h, note 7) */
	int cache_default = !o->cold_cache_memory;
	/* a new store's index is tagged (format version 4); a recovered one as made */
	int tagged = geo ? geo->cold_tags != 0 : 1;
	uint64_t cache_all = o->cold_index_chunks * CI_SLOT_BYTES(o->cold_chunk_bytes, tagged);
	lay->cache_mem = o->cold_cache_memory == EMBER_COLD_CACHE_OFF ? 0
			 : !cache_default			     ? o->cold_cache_memory
			 : o->memory_budget			     ? o->memory_budget / 4
								     : base / 32;
	if (lay->cache_mem > cache_all)
		lay->cache_mem = cache_all;
	if (o->memory_budget) {
		uint64_t others = index_bytes + table_bytes + lay->cold_mem + lay->chunk_mem +
				  o->read_cache_memory +
				  rc_filter_bytes(o->read_cache_memory, o->read_cache_admit);
		if (cache_default && o->memory_budget < others + lay->cache_mem + min_log)
			lay->cache_mem = o->memory_budget > others + min_log
						 ? o->memory_budget - others - min_log
						 : 0;
		others += lay->cache_mem;
		if (o->memory_budget < others + min_log && !geo)
			return EMBER_EINVAL;
		lay->hot_mem = o->memory_budget - others;
	} else {
		lay->hot_mem = o->log_memory;
	}
	lay->hot_mem = em_page_floor(lay->hot_mem, (unsigned)__builtin_ctz(o->page_size));
	if (geo) {
		/* a recovered store keeps the rings it was created with (the laps of
		 * its logs depend on them) */
		lay->hot_mem = geo->hot_mem;
		lay->cold_mem = geo->cold_mem;
		lay->chunk_mem = geo->chunk_mem;
	}
	lay->hot_budget = o->hot_disk_budget ? o->hot_disk_budget : 16 * lay->hot_mem;
	if (lay->hot_budget < 2 * lay->hot_mem)
		lay->hot_budget = 2 * lay->hot_mem;
	/* saturating: a hot budget of 2^62 or more ("no limit") must not wrap the
	 * cold one round to a few MiB */
	lay->cold_budget = o->cold_disk_budget	       ? o->cold_disk_budget
			   : lay->hot_budget > UINT64_MAX / 4 ? UINT64_MAX
							      : 4 * lay->hot_budget;
	if (lay->cold_budget < 2 * lay->cold_mem)
		lay->cold_budget = 2 * lay->cold_mem;
	/* live chunks plus room for their garbage */
	uint64_t chunks_bytes = o->cold_index_chunks * (REC_HDR_SIZE + 8 + o->cold_chunk_bytes);
	lay->chunk_budget = 4 * chunks_bytes + 2 * lay->chunk_mem;
	return 0;
}

static char *path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = em_alloc(a + b + 2);
	if (!p)
		return NULL;
	memcpy(p, dir, a);
	p[a] = '/';
	memcpy(p + a + 1, name, b + 1);
	return p;
}

static uint64_t super_checksum(const uint8_t *sb) { return XXH3_64bits(sb, SUPER_SIZE - 8); }

/* Read the superblock. 0: valid (*geo filled); 1: absent; else an error code. */
static int super_read(struct em_ring *ring, const char *path, struct store_geometry *geo)
{
	struct em_file f;
	int rc = em_file_open(&f, path, EM_FILE_READONLY);
	if (rc == -ENOENT)
		return 1;
	if (rc < 0)
		return rc;
	uint8_t *sb = em_alloc_aligned(EM_IO_ALIGN, SUPER_SIZE);
	if (!sb) {
		rc = EMBER_ENOMEM;
		goto undo_open;
	}
	int64_t size = em_file_size(&f);
	if (size != SUPER_SIZE) {
		rc = size < 0 ? (int)size : EMBER_ENOTEMBER;
		goto undo_buf;
	}
	rc = em_io_pread(ring, &f, sb, SUPER_SIZE, 0);
	if (rc < 0)
		goto undo_buf;
	uint32_t version;
	uint64_t sum;
	memcpy(&version, sb + 8, 4);
	memcpy(&sum, sb + SUPER_SIZE - 8, 8);
	if (memcmp(sb, SUPER_MAGIC, 8) != 0)
		rc = EMBER_ENOTEMBER;
	else if (sum != super_checksum(sb))
		rc = EMBER_ECORRUPT;
	else if (version != FORMAT_VERSION && version != FORMAT_VERSION_SEG &&
		 version != FORMAT_VERSION_TAGS)
		rc = EMBER_EVERSION;
	else
		rc = 0;
	if (rc == 0) {
		uint32_t page;
		memcpy(&page, sb + 12, 4);
		geo->page_size = page;
		memcpy(&geo->hot_mem, sb + 16, 8);
		memcpy(&geo->cold_mem, sb + 32, 8);
		memcpy(&geo->chunk_mem, sb + 40, 8);
		memcpy(&geo->index_buckets, sb + 48, 8);
		memcpy(&geo->cold_index_chunks, sb + 56, 8);
		memcpy(&geo->cold_chunk_bytes, sb + 64, 8);
		memcpy(&geo->log_segment_bytes, sb + 72, 8);
		uint64_t seg = geo->log_segment_bytes;
		/* version 2: reserved zero; version 3: a segment size; version 4: either
		 * (docs/format.md 7.2) */
		int seg_ok = version == FORMAT_VERSION	   ? seg == 0
			     : version == FORMAT_VERSION_SEG ? log_segment_ok(seg)
							     : seg == 0 || log_segment_ok(seg);
		geo->cold_tags = version == FORMAT_VERSION_TAGS;
		/* checksummed, but check what the rest of open relies on */
		if (page < (64u << 10) || page > (64u << 20) || (page & (page - 1)) ||
		    geo->hot_mem < 8 * (uint64_t)page || geo->hot_mem % page ||
		    geo->hot_mem > (UINT64_C(1) << 44) || geo->cold_mem < 8 * (uint64_t)page ||
		    geo->cold_mem % page || geo->cold_mem > (UINT64_C(1) << 44) ||
		    geo->chunk_mem < 8 * (uint64_t)page || geo->chunk_mem % page ||
		    geo->chunk_mem > (UINT64_C(1) << 44) || !geo->index_buckets ||
		    (geo->index_buckets & (geo->index_buckets - 1)) ||
		    geo->index_buckets > (UINT64_C(1) << 36) || !geo->cold_index_chunks ||
		    (geo->cold_index_chunks & (geo->cold_index_chunks - 1)) ||
		    geo->cold_index_chunks > (UINT64_C(1) << 36) || geo->cold_chunk_bytes < 64 ||
		    geo->cold_chunk_bytes > 4096 || (geo->cold_chunk_bytes & (geo->cold_chunk_bytes - 1)) ||
		    !seg_ok)
			rc = EMBER_ECORRUPT;
	}
undo_buf:
	em_free(sb, SUPER_SIZE);
undo_open:
	em_file_close(&f);
	return rc;
}

/* The superblock is written whole to ember.super.tmp, fsynced, renamed over
 * ember.super, and the directory fsynced: a failure at any step leaves no
 * ember.super behind (and never a half-written one that would refuse every later
 * open as EMBER_ENOTEMBER). */
static int super_write(struct em_ring *ring, const char *dir, const char *path,
		       const struct store_geometry *g)
{
	struct em_file f;
	int rc;
	size_t pl = strlen(path);
	char *tmp = em_alloc(pl + 5);
	uint8_t *sb = em_alloc_aligned(EM_IO_ALIGN, SUPER_SIZE);
	if (!tmp || !sb) {
		rc = EMBER_ENOMEM;
		goto undo_alloc;
	}
	memcpy(tmp, path, pl);
	memcpy(tmp + pl, ".tmp", 5);
	rc = em_file_open(&f, tmp, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	if (rc < 0)
		goto undo_alloc;
	memset(sb, 0, SUPER_SIZE);
	memcpy(sb, SUPER_MAGIC, 8);
	uint32_t version = g->cold_tags			? FORMAT_VERSION_TAGS
			   : g->log_segment_bytes ? FORMAT_VERSION_SEG
						  : FORMAT_VERSION;
	uint32_t page = (uint32_t)g->page_size;
	uint64_t now = (uint64_t)time(NULL);
	memcpy(sb + 8, &version, 4);
	memcpy(sb + 12, &page, 4);
	memcpy(sb + 16, &g->hot_mem, 8);
	memcpy(sb + 24, &now, 8);
	memcpy(sb + 32, &g->cold_mem, 8);
	memcpy(sb + 40, &g->chunk_mem, 8);
	memcpy(sb + 48, &g->index_buckets, 8);
	memcpy(sb + 56, &g->cold_index_chunks, 8);
	memcpy(sb + 64, &g->cold_chunk_bytes, 8);
	memcpy(sb + 72, &g->log_segment_bytes, 8);
	uint64_t sum = super_checksum(sb);
	memcpy(sb + SUPER_SIZE - 8, &sum, 8);
	rc = em_io_pwrite(ring, &f, sb, SUPER_SIZE, 0);
	if (rc == 0)
		rc = em_io_fsync(ring, &f);
	em_file_close(&f);
	if (rc == 0)
		rc = em_path_rename(tmp, path);
	if (rc < 0) {
		(void)em_path_unlink(tmp);
		goto undo_alloc;
	}
	rc = em_dir_fsync(dir); /* the rename is durable once the directory is */
undo_alloc:
	em_free(sb, SUPER_SIZE);
	em_free(tmp, 0);
	return rc;
}

/*
 * Superblock at open. write == 0: what is here? Returns 0 with *recover = 0 for a
 * new store (absent; or any Ember store, even a damaged one or one of another
 * version, with EMBER_OPEN_TRUNCATE), *recover = 1 with *geo for a store to
 * recover, or an error (a file that is not Ember's is never overwritten; read-only
 * needs a store). write == 1: write the new superblock from *geo (the last step of
 * a successful open, so a failed open leaves no store behind).
 */
static int super_step(struct ember_db *db, int write, struct store_geometry *geo, int *recover)
{
	struct em_ring ring;
	int rc = em_ring_init(&ring, 4);
	if (rc < 0)
		return rc;
	char *path = path_join(db->dir, SUPER_NAME);
	if (!path) {
		rc = EMBER_ENOMEM;
		goto undo_ring;
	}
	if (write) {
		rc = super_write(&ring, db->dir, path, geo);
	} else {
		int truncate = (db->opts.flags & EMBER_OPEN_TRUNCATE) != 0;
		*recover = 0;
		rc = super_read(&ring, path, geo);
		if (rc == 1)
			rc = db->readonly ? -ENOENT : 0; /* absent: a new store */
		else if (rc == 0 && !truncate)
			*recover = 1;
		else if ((rc == EMBER_ECORRUPT || rc == EMBER_EVERSION) && truncate)
			rc = 0;
		if (rc == EMBER_ECORRUPT)
			db_report(db, "%s: superblock fails its checksum or field checks", path);
	}
	em_free(path, 0);
undo_ring:
	em_ring_exit(&ring);
	return rc;
}

static int lock_dir(struct ember_db *db)
{
	char *path = path_join(db->dir, "LOCK");
	if (!path)
		return EMBER_ENOMEM;
	/* O_NONBLOCK: a FIFO named LOCK would make an O_RDONLY open wait for a writer */
	int fd = db->readonly ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
			      : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	int rc = fd < 0 ? -errno : 0;
	em_free(path, 0);
	if (rc < 0)
		return rc;
	/* writers exclude everyone; read-only opens share */
	if (flock(fd, (db->readonly ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
		rc = errno == EWOULDBLOCK ? EMBER_EBUSY : -errno;
		close(fd);
		return rc;
	}
	db->lock_fd = fd;
	return 0;
}

static void db_free(struct ember_db *db)
{
	sessions_free(db);
	pthread_mutex_destroy(&db->sess_mu);
	pthread_mutex_destroy(&db->err_mu);
	em_free(db->dir, 0);
	em_free(db, sizeof(*db));
}

/* Open one log: its file and its memory and worker. begin == 0: a new log (the file
 * is truncated); else the log restarts with [begin, tail) on disk. */
static int log_open(struct ember_db *db, const char *name, uint64_t mem, double mutable_fraction,
		    uint64_t begin, uint64_t tail, int keep_spares, struct em_file *file,
		    struct hlog **out)
{
	char *path = path_join(db->dir, name);
	if (!path)
		return EMBER_ENOMEM;
	/* a recovered log must exist: creating it empty would turn a lost file into
	 * reads that fail one by one instead of a clean error here */
	int fl = db->readonly ? EM_FILE_READONLY : begin ? 0 : EM_FILE_CREATE | EM_FILE_TRUNCATE;
	uint64_t seg = db->opts.log_segment_bytes;
	int rc;
	if (seg) {
		/* segments exist only where the log has data: check [begin, tail);
		 * writes create the segments past a recovered tail */
		if (!db->readonly)
			fl |= EM_FILE_CREATE | (keep_spares ? EM_FILE_KEEP_SPARES : 0);
		rc = em_file_open_segmented(file, path, fl, (uint32_t)__builtin_ctzll(seg));
		if (rc == 0 && begin && (rc = em_file_check_segments(file, begin, tail)) < 0)
			em_file_close(file);

	} else {
		/* a new one-file log: segments left by an earlier store go */
		rc = !begin && !db->readonly ? em_file_remove_segments(path) : 0;
		if (rc == 0)
			rc = em_file_open(file, path, fl);
	}
	if (rc < 0 && begin)
		db_report(db, "%s: cannot open a log the checkpoint needs: %s", path,
			  ember_strerror(rc));
	em_free(path, 0);
	if (rc < 0)
		return rc;
	struct hlog *l = em_alloc_aligned(64, sizeof(struct hlog));
	if (!l) {
		rc = EMBER_ENOMEM;
		goto undo_file;
	}
	struct hlog_config hc = {.mem_size = mem, .page_size = db->opts.page_size,
				 .mutable_fraction = mutable_fraction, .start_begin = begin,
				 .start_tail = begin ? tail : 0};
	rc = hlog_init(l, &hc, file, db->ep);
	if (rc < 0)
		goto undo_log;
	if (begin) {
		struct em_ring ring;
		rc = em_ring_init(&ring, 2);
		if (rc == 0) {
			rc = hlog_load_tail_block(l, &ring);
			em_ring_exit(&ring);
		}
		if (rc < 0) {
			db_report(db, "%s: reading the block below the recovered tail %llu failed: %s",
				  name, (unsigned long long)tail, ember_strerror(rc));
			hlog_destroy(l);
			goto undo_log;
		}
	}
	*out = l;
	return 0;
undo_log:
	em_free(l, sizeof(struct hlog));
undo_file:
	em_file_close(file);
	return rc;
}

static void log_close(struct em_file *file, struct hlog **l)
{
	if (*l) {
		hlog_destroy(*l);
		em_free(*l, sizeof(struct hlog));
		*l = NULL;
	}
	em_file_close(file);
}

/* The handle of the store in dir, its directory made (and its entry durable) and
 * locked. Returns 0 with *out, or an error with nothing left behind. */
static int open_dir(const char *dir, const ember_options *opts, struct ember_db **out)
{
	struct ember_db *db = em_zalloc(sizeof(*db));
	if (!db)
		return EMBER_ENOMEM;
	db->lock_fd = -1;
	pthread_mutex_init(&db->sess_mu, NULL);
	pthread_mutex_init(&db->err_mu, NULL);
	int rc = options_resolve(opts, &db->opts);
	if (rc < 0)
		goto undo_db;
	db->readonly = (db->opts.flags & EMBER_OPEN_READONLY) != 0;
	size_t dl = strlen(dir);
	db->dir = em_alloc(dl + 1);
	if (!db->dir) {
		rc = EMBER_ENOMEM;
		goto undo_db;
	}
	memcpy(db->dir, dir, dl + 1);
	if (!db->readonly && (rc = em_path_mkdir(dir)) < 0 && rc != -EEXIST)
		goto undo_db;
	/* a directory made now: its entry durable, or a crash could lose the store that
	 * a completed checkpoint made durable inside it */
	if (rc == 0 && !db->readonly && (rc = em_dir_fsync_parent(dir)) < 0)
		goto undo_db;
	rc = lock_dir(db);
	if (rc < 0)
		goto undo_db;
	*out = db;
	return 0;
undo_db:
	db_free(db);
	return rc;
}

/* What the open starts from: the superblock's geometry (*recover: there is one),
 * and the checkpoint to recover from (*found, m); a new store's old checkpoints
 * removed. Sets up the checkpoint state (ckpt_init), and frees it on failure.
 * Returns 0 or an error. */
static int open_find_state(struct ember_db *db, struct store_geometry *geo, int *recover,
			   struct ckpt_meta *m, int *found)
{
	int rc = super_step(db, 0, geo, recover);
	if (rc < 0)
		return rc;
	/* before anything changes on disk: the store's own segment size, or the new one's */
	if ((db->opts.flags & EMBER_OPEN_PREWRITE_LOG) &&
	    !(*recover ? geo->log_segment_bytes : db->opts.log_segment_bytes)) {
		db_report(db, "%s: EMBER_OPEN_PREWRITE_LOG needs a store in segment files "
			      "(log_segment_bytes)", db->dir);
		return EMBER_EINVAL;
	}
	rc = ckpt_init(db);
	if (rc < 0)
		return rc;
	if (*recover) {
		/* the store's geometry, whatever the options say */
		db->opts.page_size = (uint32_t)geo->page_size;
		db->opts.index_buckets = geo->index_buckets;
		db->opts.cold_index_chunks = geo->cold_index_chunks;
		db->opts.cold_chunk_bytes = (uint32_t)geo->cold_chunk_bytes;
		db->opts.log_segment_bytes = geo->log_segment_bytes;
		/* checked against the options' page size; the store's own counts */
		if (db->opts.read_cache_memory && db->opts.read_cache_memory / geo->page_size < 8) {
			db_report(db, "%s: read_cache_memory %llu is under 8 of the store's %llu-byte pages",
				  db->dir, (unsigned long long)db->opts.read_cache_memory,
				  (unsigned long long)geo->page_size);
			rc = EMBER_EINVAL;
		} else {
			rc = ckpt_find(db, geo, m, found);
		}
	} else {
		rc = ckpt_remove_all(db);
	}
	if (rc < 0)
		ckpt_free(db);
	return rc;
}

/* The three logs, at m's extents (NULL: a new store), the hot log's spares set up.
 * Returns 0, or an error with none of them open. */
static int open_logs(struct ember_db *db, const struct layout *lay, const struct ckpt_meta *m)
{
	int prewrite = (db->opts.flags & EMBER_OPEN_PREWRITE_LOG) != 0;
	int rc = log_open(db, HOT_NAME, lay->hot_mem, db->opts.mutable_fraction,
			  m ? m->hot_begin : 0, m ? m->hot_end : 0, prewrite, &db->hot_file,
			  &db->hot);
	if (rc < 0)
		return rc;
	/* the hot log reuses its released segment files (segment.c invariant 5), so its
	 * appends overwrite blocks written before (docs/graph.md); the spares it keeps
	 * hold at most its disk budget again */
	if (db->opts.log_segment_bytes && !db->readonly)
		em_file_set_recycle(&db->hot_file, lay->hot_budget / db->opts.log_segment_bytes);
	if (prewrite) {
		/* spares for every segment the log may take before it reaches its budget
		 * (segment.c invariant 6); those an earlier open kept count */
		uint64_t seg = db->opts.log_segment_bytes, begin = m ? m->hot_begin : 0;
		uint64_t tail = m ? m->hot_end : 0;
		uint64_t live = tail > begin ? (tail - 1) / seg - begin / seg + 1 : 0;
		uint64_t want = lay->hot_budget / seg > live ? lay->hot_budget / seg - live : 0;
		rc = em_file_prewrite_spares(&db->hot_file, want < UINT32_MAX ? (uint32_t)want : UINT32_MAX);
		if (rc < 0) {
			db_report(db, "%s: writing the hot log's spare segments ahead failed: %s",
				  db->dir, ember_strerror(rc));
			goto undo_hot;
		}
	}
	/* the cold and chunk logs are appended to, never updated in place (chunks are
	 * CAS'd in place only while mutable): keep their mutable regions small */
	rc = log_open(db, COLD_NAME, lay->cold_mem, 0.25, m ? m->cold_begin : 0,
		      m ? m->cold_end : 0, 0, &db->cold_file, &db->cold);
	if (rc < 0)
		goto undo_hot;
	rc = log_open(db, CHUNK_NAME, lay->chunk_mem, 0.5, m ? m->chunk_begin : 0,
		      m ? m->chunk_end : 0, 0, &db->chunk_file, &db->chunks);
	if (rc < 0)
		goto undo_cold;
	return 0;
undo_cold:
	log_close(&db->cold_file, &db->cold);
undo_hot:
	log_close(&db->hot_file, &db->hot);
	return rc;
}

int ember_open(const char *dir, const ember_options *opts, ember_db **out)
{
	if (!out)
		return EMBER_EINVAL;
	*out = NULL;
	if (!dir || !*dir)
		return EMBER_EINVAL;
	struct ember_db *db;
	int rc = open_dir(dir, opts, &db);
	if (rc < 0)
		return rc;
	struct store_geometry geo;
	struct ckpt_meta m;
	int recover = 0, found = 0;
	rc = open_find_state(db, &geo, &recover, &m, &found);
	if (rc < 0)
		goto undo_lock;
	struct layout lay;
	rc = layout_resolve(&db->opts, recover ? &geo : NULL, &lay);
	if (rc < 0)
		goto undo_ckpt;
	db->ep = em_alloc_aligned(64, sizeof(struct epoch));
	if (!db->ep) {
		rc = EMBER_ENOMEM;
		goto undo_ckpt;
	}
	epoch_init(db->ep);
	rc = hi_init(&db->index, db->opts.index_buckets);
	if (rc < 0)
		goto undo_epoch;
	rc = open_logs(db, &lay, found ? &m : NULL);
	if (rc < 0)
		goto undo_index;
	rc = ci_init(&db->cidx, db->opts.cold_index_chunks, db->opts.cold_chunk_bytes,
		     recover ? geo.cold_tags != 0 : 1, db->chunks);
	if (rc < 0)
		goto undo_logs;
	rc = ci_cache_init(&db->cidx, lay.cache_mem);
	if (rc < 0)
		goto undo_cidx_only;
	chunk_cache_attach(db);
	if (db->opts.read_cache_memory) {
		rc = rc_open(db, db->opts.read_cache_memory);
		if (rc < 0)
			goto undo_cidx_only;
	}
	/* before replay: it judges records by the limits reads use */
	db->max_record = db->hot->mem_size < db->cold->mem_size ? db->hot->mem_size / 2
								 : db->cold->mem_size / 2;
	db->cold_max_record = db->max_record;
	if (found) {
		rc = ckpt_apply(db, &m);
		if (rc < 0)
			goto undo_rc;
	}
	db->hot_budget = lay.hot_budget;
	db->cold_budget = lay.cold_budget;
	db->chunk_budget = lay.chunk_budget;
	db->magic = DB_MAGIC; /* sessions (the compactor's first) need it */
	rc = compactor_start(db);
	if (rc < 0)
		goto undo_rc;
	if (!recover) {
		struct store_geometry g = {db->opts.page_size, db->hot->mem_size, db->cold->mem_size,
					   db->chunks->mem_size, db->index.nbuckets,
					   db->cidx.nchunks, db->cidx.chunk_bytes,
					   db->opts.log_segment_bytes, db->cidx.tagged};
		rc = super_step(db, 1, &g, NULL);
		if (rc < 0)
			goto undo_compactor;
	}
	rc = ckpt_start(db);
	if (rc < 0)
		goto undo_compactor;
	*out = db;
	return 0;

undo_compactor:
	compactor_stop(db);
undo_rc:
	db->magic = 0;
	rc_close(db);
undo_cidx_only:
	ci_destroy(&db->cidx);
undo_logs:
	log_close(&db->chunk_file, &db->chunks);
	log_close(&db->cold_file, &db->cold);
	log_close(&db->hot_file, &db->hot);
undo_index:
	hi_destroy(&db->index);
undo_epoch:
	em_free(db->ep, sizeof(struct epoch));
undo_ckpt:
	ckpt_free(db);
undo_lock:
	close(db->lock_fd);
	db_free(db);
	return rc;
}

int ember_close(ember_db *db)
{
	if (!db)
		return 0;
	if (db->magic != DB_MAGIC)
		return EMBER_EINVAL;
	pthread_mutex_lock(&db->sess_mu);
	uint32_t open_sessions = db->open_sessions;
	pthread_mutex_unlock(&db->sess_mu);
	if (open_sessions)
		return EMBER_EBUSY;
	ckpt_stop(db);
	int rc = 0;
	if (!db->readonly && !(db->opts.flags & EMBER_OPEN_NO_CLOSE_CHECKPOINT) && ckpt_dirty(db)) {
		rc = ckpt_take(db, NULL);
		if (rc < 0)
			db_report(db, "final checkpoint at close failed: %s", ember_strerror(rc));
	}
	compactor_stop(db);
	db->magic = 0;
	rc_close(db);
	ci_destroy(&db->cidx);
	log_close(&db->chunk_file, &db->chunks);
	log_close(&db->cold_file, &db->cold);
	log_close(&db->hot_file, &db->hot);
	hi_destroy(&db->index);
	epoch_finish(db->ep);
	em_free(db->ep, sizeof(struct epoch));
	ckpt_free(db);
	close(db->lock_fd);
	db_free(db);
	return rc;
}
