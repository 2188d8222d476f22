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
 *
 * Open sequence (ember_open): check options -> mkdir -> lock -> check the
 * superblock -> epoch table -> hash index -> hot, cold and chunk logs -> cold
 * index -> compactor -> write the superblock. Each step has an undo label; a failure unwinds exactly the steps
 * taken, and leaves no new superblock behind.
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "store/compact.h"

#define SUPER_NAME "ember.super"
#define HOT_NAME "hot.log"
#define COLD_NAME "cold.log"
#define CHUNK_NAME "cold.idx"
#define SUPER_SIZE 4096u
#define SUPER_MAGIC "EMBERDB\0"
#define FORMAT_VERSION 1u

void ember_options_default(ember_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->log_memory = UINT64_C(256) << 20;
	o->mutable_fraction = 0.9;
	o->index_buckets = UINT64_C(1) << 18;
	o->page_size = 1u << 20;
	o->io_queue_depth = 128;
	o->cold_index_chunks = UINT64_C(1) << 16;
	o->cold_chunk_bytes = 256;
	/* memory_budget, disk budgets and cold_log_memory: derived in layout_resolve */
}

static int options_resolve(const ember_options *in, ember_options *out)
{
	ember_options d;
	ember_options_default(&d);
	*out = in ? *in : d;
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
	if (out->read_cache_memory && out->read_cache_memory / out->page_size < 8)
		return EMBER_EINVAL;
	if (out->flags & ~(uint32_t)EMBER_OPEN_TRUNCATE)
		return EMBER_EINVAL;
	return 0;
}

/* Sizes of every log's memory and disk budget, from the resolved options. */
struct layout {
	uint64_t hot_mem, cold_mem, chunk_mem;
	uint64_t hot_budget, cold_budget, chunk_budget;
};

static uint64_t pow2_ceil(uint64_t v)
{
	uint64_t n = 1;
	while (n < v)
		n <<= 1;
	return n;
}

static int layout_resolve(const ember_options *o, struct layout *lay)
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
	if (o->memory_budget) {
		uint64_t others = index_bytes + table_bytes + lay->cold_mem + lay->chunk_mem +
				  o->read_cache_memory;
		if (o->memory_budget < others + min_log)
			return EMBER_EINVAL;
		lay->hot_mem = o->memory_budget - others;
	} else {
		lay->hot_mem = o->log_memory;
	}
	lay->hot_mem = em_page_floor(lay->hot_mem, (unsigned)__builtin_ctz(o->page_size));
	lay->hot_budget = o->hot_disk_budget ? o->hot_disk_budget : 16 * lay->hot_mem;
	if (lay->hot_budget < 2 * lay->hot_mem)
		lay->hot_budget = 2 * lay->hot_mem;
	lay->cold_budget = o->cold_disk_budget ? o->cold_disk_budget : 4 * lay->hot_budget;
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

/* Read the superblock. 0: valid; 1: absent; else an error code. */
static int super_read(struct em_ring *ring, const char *path)
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
	else if (version != FORMAT_VERSION)
		rc = EMBER_EVERSION;
	else
		rc = 0;
undo_buf:
	em_free(sb, SUPER_SIZE);
undo_open:
	em_file_close(&f);
	return rc;
}

static int super_write(struct em_ring *ring, const char *path, const ember_options *o)
{
	struct em_file f;
	int rc = em_file_open(&f, path, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	if (rc < 0)
		return rc;
	uint8_t *sb = em_alloc_aligned(EM_IO_ALIGN, SUPER_SIZE);
	if (!sb) {
		rc = EMBER_ENOMEM;
		goto undo_open;
	}
	memset(sb, 0, SUPER_SIZE);
	memcpy(sb, SUPER_MAGIC, 8);
	uint32_t version = FORMAT_VERSION, page = o->page_size;
	uint64_t mem = o->log_memory, now = (uint64_t)time(NULL);
	memcpy(sb + 8, &version, 4);
	memcpy(sb + 12, &page, 4);
	memcpy(sb + 16, &mem, 8);
	memcpy(sb + 24, &now, 8);
	uint64_t sum = super_checksum(sb);
	memcpy(sb + SUPER_SIZE - 8, &sum, 8);
	rc = em_io_pwrite(ring, &f, sb, SUPER_SIZE, 0);
	if (rc == 0)
		rc = em_io_fsync(ring, &f);
	em_free(sb, SUPER_SIZE);
undo_open:
	em_file_close(&f);
	return rc;
}

/*
 * Superblock at open. write == 0: may the store be created here? (absent: yes; an
 * Ember store: only with EMBER_OPEN_TRUNCATE, which also overrides a damaged one or
 * one of another version; a file that is not Ember's: never). write == 1: write the
 * new superblock (the last step of a successful open, so a failed open leaves no
 * store behind).
 */
static int super_step(struct ember_db *db, int write)
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
		rc = super_write(&ring, path, &db->opts);
	} else {
		int truncate = (db->opts.flags & EMBER_OPEN_TRUNCATE) != 0;
		rc = super_read(&ring, path);
		if (rc == 1)
			rc = 0; /* absent: a new store */
		else if (rc == 0)
			rc = truncate ? 0 : EMBER_EEXIST;
		else if ((rc == EMBER_ECORRUPT || rc == EMBER_EVERSION) && truncate)
			rc = 0;
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
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	int rc = fd < 0 ? -errno : 0;
	em_free(path, 0);
	if (rc < 0)
		return rc;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
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
	em_free(db->dir, 0);
	em_free(db, sizeof(*db));
}

/* Open one log: its file (truncated: recovery comes with checkpoints) and its
 * memory and worker. */
static int log_open(struct ember_db *db, const char *name, uint64_t mem, double mutable_fraction,
		    struct em_file *file, struct hlog **out)
{
	char *path = path_join(db->dir, name);
	if (!path)
		return EMBER_ENOMEM;
	int rc = em_file_open(file, path, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	em_free(path, 0);
	if (rc < 0)
		return rc;
	struct hlog *l = em_alloc_aligned(64, sizeof(struct hlog));
	if (!l) {
		rc = EMBER_ENOMEM;
		goto undo_file;
	}
	struct hlog_config hc = {.mem_size = mem, .page_size = db->opts.page_size,
				 .mutable_fraction = mutable_fraction};
	rc = hlog_init(l, &hc, file, db->ep);
	if (rc < 0)
		goto undo_log;
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

int ember_open(const char *dir, const ember_options *opts, ember_db **out)
{
	int rc;
	if (!out)
		return EMBER_EINVAL;
	*out = NULL;
	if (!dir || !*dir)
		return EMBER_EINVAL;
	struct ember_db *db = em_zalloc(sizeof(*db));
	if (!db)
		return EMBER_ENOMEM;
	db->lock_fd = -1;
	pthread_mutex_init(&db->sess_mu, NULL);
	rc = options_resolve(opts, &db->opts);
	if (rc < 0)
		goto undo_db;
	size_t dl = strlen(dir);
	db->dir = em_alloc(dl + 1);
	if (!db->dir) {
		rc = EMBER_ENOMEM;
		goto undo_db;
	}
	memcpy(db->dir, dir, dl + 1);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		rc = -errno;
		goto undo_db;
	}
	rc = lock_dir(db);
	if (rc < 0)
		goto undo_db;
	rc = super_step(db, 0);
	if (rc < 0)
		goto undo_lock;

	struct layout lay;
	rc = layout_resolve(&db->opts, &lay);
	if (rc < 0)
		goto undo_lock;
	db->ep = em_alloc_aligned(64, sizeof(struct epoch));
	if (!db->ep) {
		rc = EMBER_ENOMEM;
		goto undo_lock;
	}
	epoch_init(db->ep);
	rc = hi_init(&db->index, db->opts.index_buckets);
	if (rc < 0)
		goto undo_epoch;
	rc = log_open(db, HOT_NAME, lay.hot_mem, db->opts.mutable_fraction, &db->hot_file, &db->hot);
	if (rc < 0)
		goto undo_index;
	/* the cold and chunk logs are appended to, never updated in place (chunks are
	 * CAS'd in place only while mutable): keep their mutable regions small */
	rc = log_open(db, COLD_NAME, lay.cold_mem, 0.25, &db->cold_file, &db->cold);
	if (rc < 0)
		goto undo_hot;
	rc = log_open(db, CHUNK_NAME, lay.chunk_mem, 0.5, &db->chunk_file, &db->chunks);
	if (rc < 0)
		goto undo_cold;
	rc = ci_init(&db->cidx, db->opts.cold_index_chunks, db->opts.cold_chunk_bytes, db->chunks);
	if (rc < 0)
		goto undo_chunks;
	if (db->opts.read_cache_memory) {
		rc = rc_open(db, db->opts.read_cache_memory);
		if (rc < 0)
			goto undo_cidx_only;
	}
	db->max_record = db->hot->mem_size < db->cold->mem_size ? db->hot->mem_size / 2
								 : db->cold->mem_size / 2;
	db->cold_max_record = db->max_record;
	db->hot_budget = lay.hot_budget;
	db->cold_budget = lay.cold_budget;
	db->chunk_budget = lay.chunk_budget;
	db->magic = DB_MAGIC; /* sessions (the compactor's first) need it */
	rc = compactor_start(db);
	if (rc < 0)
		goto undo_rc;
	rc = super_step(db, 1);
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
undo_chunks:
	log_close(&db->chunk_file, &db->chunks);
undo_cold:
	log_close(&db->cold_file, &db->cold);
undo_hot:
	log_close(&db->hot_file, &db->hot);
undo_index:
	hi_destroy(&db->index);
undo_epoch:
	em_free(db->ep, sizeof(struct epoch));
undo_lock:
	close(db->lock_fd);
undo_db:
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
	close(db->lock_fd);
	db_free(db);
	return 0;
}
