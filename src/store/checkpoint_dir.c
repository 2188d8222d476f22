/*
 * checkpoint_dir.c - the checkpoints directory: each checkpoint's paths, listing
 * the checkpoint directories newest first (in windows of MAX_CKPT_DIRS names),
 * reading a checkpoint's files and meta, removing checkpoint directories, and
 * ember_checkpoint_list. What a complete checkpoint is, and the order its files
 * are made durable in: checkpoint.c; which one recovery takes: recovery.c.
 */
#include "store/checkpoint_int.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"

#define MAX_CKPT_DIRS 64       /* directory names listed at a time */

/* ---- paths ------------------------------------------------------------------- */

/* dir/checkpoints[/name[/file]] into a fresh string */
char *ck_path(struct ember_db *db, const char *name, const char *file)
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
int ck_remove_dir(struct ember_db *db, const char *name)
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

/* ---- listing -------------------------------------------------------------------- */

/* Read a whole (small) file into an aligned buffer of its size rounded up to 4 KiB.
 * Returns 0 with *out (em_free(.., 0)) and *len, or an error: EMBER_ECORRUPT when
 * the file holds more than max bytes (checked before anything is allocated, so a
 * damaged size never costs its memory or its reads). */
int ck_read_file(struct em_ring *ring, const char *path, uint64_t max, uint8_t **out,
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
int ck_each_name(struct ember_db *db, int (*fn)(void *arg, const char *name), void *arg)
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
int ck_meta_is_named(const struct ckpt_meta *m, const char *name)
{
	char want[32];
	snprintf(want, sizeof(want), "%016" PRIx64, m->id);
	return strcmp(want, name) == 0;
}

int ck_read_meta(struct ember_db *db, struct em_ring *ring, const char *name,
		     struct ckpt_meta *m)
{
	char *p = ck_path(db, name, "meta");
	if (!p)
		return EMBER_ENOMEM;
	uint8_t *b = NULL;
	size_t len = 0;
	int rc = ck_read_file(ring, p, CKPT_META_SIZE, &b, &len);
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
int ck_is_damage(int rc)
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
	int rc = ck_read_meta(lw->db, lw->ring, name, &m);
	if (rc == -ENOENT || ck_is_damage(rc) || (rc == 0 && !ck_meta_is_named(&m, name)))
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
	rc = ck_each_name(db, list_one, &lw);
	pthread_mutex_unlock(&db->ck->mu);
	em_ring_exit(&ring);
	*n_out = lw.k;
	if (rc == 0 && lw.k > cap)
		rc = EMBER_ERANGE;
	return rc;
}

/* ---- removal -------------------------------------------------------------------- */

struct remove_walk {
	struct ember_db *db;
	const char *keep;
	int rc; /* the first error */
};

static int remove_one(void *arg, const char *name)
{
	struct remove_walk *rw = arg;
	if (strcmp(name, rw->keep) != 0) {
		int rc = ck_remove_dir(rw->db, name);
		if (rc < 0 && rw->rc == 0)
			rw->rc = rc;
	}
	return 0; /* the others still go */
}

/* Remove every checkpoint directory but keep (a name; "" keeps none). Windows of
 * names move strictly down, so a directory that stays (without its meta) is
 * listed once. Returns 0 or the first error. */
int ck_remove_others(struct ember_db *db, const char *keep)
{
	struct remove_walk rw = {db, keep, 0};
	int rc = ck_each_name(db, remove_one, &rw);
	return rc < 0 ? rc : rw.rc;
}

int ckpt_remove_all(struct ember_db *db)
{
	int rc = ck_remove_others(db, "");
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
