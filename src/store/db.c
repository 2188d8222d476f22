/*
 * db.c - opening and closing a store, its superblock, and sessions.
 *
 * A store directory holds:
 *   LOCK         an empty file held with flock() while the store is open
 *   ember.super  the superblock (layout in docs/format.md): magic, format version,
 *                page size, checksum
 *   hot.log      the hot log; byte x of the log is byte x of the file
 *
 * Open sequence (ember_open): check options -> mkdir -> lock -> check the
 * superblock -> epoch table -> hash index -> hot log file -> hot log -> write the
 * superblock. Each step has an undo label; a failure unwinds exactly the steps
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

#define SUPER_NAME "ember.super"
#define HOT_NAME "hot.log"
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
	if (out->flags & ~(uint32_t)EMBER_OPEN_TRUNCATE)
		return EMBER_EINVAL;
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
	struct ember_session *s = db->sessions;
	while (s) {
		struct ember_session *next = s->next_all;
		em_free(s, sizeof(*s));
		s = next;
	}
	pthread_mutex_destroy(&db->sess_mu);
	em_free(db->dir, 0);
	em_free(db, sizeof(*db));
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

	db->ep = em_alloc_aligned(64, sizeof(struct epoch));
	if (!db->ep) {
		rc = EMBER_ENOMEM;
		goto undo_lock;
	}
	epoch_init(db->ep);
	rc = hi_init(&db->index, db->opts.index_buckets);
	if (rc < 0)
		goto undo_epoch;
	char *hot_path = path_join(dir, HOT_NAME);
	if (!hot_path) {
		rc = EMBER_ENOMEM;
		goto undo_index;
	}
	rc = em_file_open(&db->hot_file, hot_path, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	em_free(hot_path, 0);
	if (rc < 0)
		goto undo_index;
	db->hot = em_alloc_aligned(64, sizeof(struct hlog));
	if (!db->hot) {
		rc = EMBER_ENOMEM;
		goto undo_file;
	}
	struct hlog_config hc = {.mem_size = db->opts.log_memory,
				 .page_size = db->opts.page_size,
				 .mutable_fraction = db->opts.mutable_fraction};
	rc = hlog_init(db->hot, &hc, &db->hot_file, db->ep);
	if (rc < 0)
		goto undo_hot;
	db->max_record = db->hot->mem_size / 2;
	rc = super_step(db, 1);
	if (rc < 0)
		goto undo_hlog;
	db->magic = DB_MAGIC;
	*out = db;
	return 0;

undo_hlog:
	hlog_destroy(db->hot);
undo_hot:
	em_free(db->hot, sizeof(struct hlog));
undo_file:
	em_file_close(&db->hot_file);
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
	db->magic = 0;
	hlog_destroy(db->hot);
	em_free(db->hot, sizeof(struct hlog));
	em_file_close(&db->hot_file);
	hi_destroy(&db->index);
	epoch_finish(db->ep);
	em_free(db->ep, sizeof(struct epoch));
	close(db->lock_fd);
	db_free(db);
	return 0;
}

static void session_release(struct ember_session *s)
{
	if (s->io) {
		em_ring_exit(&s->ring); /* first: no read in flight writes into a freed buffer */
		for (uint32_t i = 0; i < s->io_n; i++) {
			em_free(s->io[i].buf, IO_BUF_SIZE);
			em_free(s->io[i].big, s->io[i].big_cap);
		}
		em_free(s->io, 0);
	}
	em_free(s->io_free, 0);
	em_ring_exit(&s->ring);
	em_free(s->scratch, s->scratch_cap);
	em_free(s->oldbuf, s->oldbuf_cap);
	em_free(s->bhash, 0);
	em_free(s->baddr, 0);
	em_free(s->blk, 0);
	s->io = NULL;
	s->io_free = NULL;
	s->scratch = s->oldbuf = NULL;
	s->bhash = s->baddr = NULL;
	s->blk = NULL;
	s->scratch_cap = s->oldbuf_cap = s->bcap = 0;
	if (s->slot >= 0)
		epoch_unregister(s->db->ep, s->slot);
	s->slot = -1;
}

int ember_session_open(ember_db *db, ember_session **out)
{
	int rc;
	if (!out)
		return EMBER_EINVAL;
	*out = NULL;
	if (!db || db->magic != DB_MAGIC)
		return EMBER_EINVAL;
	struct ember_session *s = em_zalloc(sizeof(*s));
	if (!s)
		return EMBER_ENOMEM;
	s->db = db;
	s->slot = -1;
	pthread_mutex_lock(&db->sess_mu);
	if (db->open_sessions >= EMBER_MAX_SESSIONS) {
		pthread_mutex_unlock(&db->sess_mu);
		em_free(s, sizeof(*s));
		return EMBER_ENOSPC;
	}
	db->open_sessions++;
	s->next_all = db->sessions;
	db->sessions = s;
	pthread_mutex_unlock(&db->sess_mu);

	s->slot = epoch_register(db->ep);
	if (s->slot < 0) {
		rc = EMBER_ENOSPC;
		goto undo;
	}
	uint32_t qd = db->opts.io_queue_depth;
	rc = em_ring_init(&s->ring, qd);
	if (rc < 0)
		goto undo;
	s->io = em_zalloc(sizeof(*s->io) * qd);
	s->io_free = em_alloc(sizeof(*s->io_free) * qd);
	if (!s->io || !s->io_free) {
		rc = EMBER_ENOMEM;
		goto undo;
	}
	s->io_n = qd;
	for (uint32_t i = 0; i < qd; i++)
		s->io_free[i] = qd - 1 - i;
	s->io_free_n = qd;
	rc = session_buf_reserve(&s->scratch, &s->scratch_cap, 4096);
	if (rc < 0)
		goto undo;
	s->magic = SESSION_MAGIC;
	s->open = 1;
	*out = s;
	return 0;

undo:
	session_release(s);
	s->magic = SESSION_MAGIC; /* stays listed (closed) until ember_close frees it */
	pthread_mutex_lock(&db->sess_mu);
	db->open_sessions--;
	pthread_mutex_unlock(&db->sess_mu);
	return rc;
}

int ember_session_close(ember_session *s)
{
	if (!s)
		return 0;
	int rc = session_check(s);
	if (rc < 0)
		return rc;
	struct ember_db *db = s->db;
	s->open = 0;
	session_release(s);
	pthread_mutex_lock(&db->sess_mu);
	db->open_sessions--;
	pthread_mutex_unlock(&db->sess_mu);
	return 0;
}

int session_buf_reserve(uint8_t **buf, size_t *cap, size_t need)
{
	if (*cap >= need)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	uint8_t *p = em_alloc_aligned(64, n);
	if (!p)
		return EMBER_ENOMEM;
	em_free(*buf, *cap);
	*buf = p;
	*cap = n;
	return 0;
}
