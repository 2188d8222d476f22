/*
 * powerloss.c - the power-loss simulator (powerloss.h; docs/faults.md, "Power
 * loss"). Test builds only (EMBER_POWERLOSS_SIM).
 *
 * Design notes
 *  1. Files are known by (st_dev, st_ino), not by name or descriptor: names change
 *     (renames) and descriptors close. The simulator opens its own descriptor of
 *     each file it tracks (through /proc/self/fd, without O_DIRECT), so it can read
 *     pre-images and rewrite content whatever the file is called by then.
 *  2. A file's shadow holds, for every sector that a pending (unsynced) change
 *     touches, its synced content, and synced_size the synced length. A sector's
 *     pre-image is read from disk before its first pending change is handed to the
 *     kernel: no other pending change touches it then, so the disk holds its
 *     synced content. A truncating open first copies every sector below the size.
 *  3. Time is a counter (stamp) advanced at every completion. A change completed
 *     at stamp s is covered by an fsync of its file that began at a stamp >= s and
 *     returned 0: em_pl_sync_end folds it into the shadow (in issue order) and
 *     forgets it. A change still in flight when an fsync began is not covered.
 *  4. A directory change is durable once every directory it changed was fsynced by
 *     a call that began after it (em_pl_sync_end with dir set).
 *  5. The power goes at the cut_after-th event (em_pl_event): that event and every
 *     later one are marked "after"; fsyncs that had not returned by then cover
 *     nothing. Nothing fails: the library runs on, its later changes are undone.
 *  6. The cut replays, per file, the synced image plus each pending change before
 *     the power went, kept, dropped or torn per 512-byte sector; the size grows to
 *     the end of the last sector kept. Directory changes are undone in reverse
 *     order of issue.
 */
#include "io/powerloss.h"

#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"

#define SECTOR 512u

enum { OP_WRITE, OP_PUNCH, OP_TRUNC };
enum { D_CREATE, D_UNLINK, D_RENAME, D_MKDIR, D_RMDIR };

struct plop { /* one pending change of a file's content */
	struct plop *next;
	uint64_t off, len;
	uint8_t *data;      /* OP_WRITE: a copy of what was written */
	int kind, done, after;
	uint64_t stamp;     /* completion stamp (note 3) */
	const void *ring;   /* the request's ring and user_data, until done */
	uint64_t ud;
};

struct plfile {
	dev_t dev;
	ino_t ino;
	int fd;                 /* the simulator's own descriptor (note 1) */
	uint64_t synced_size;
	uint64_t *keys;         /* shadow: sector numbers (open addressing; UINT64_MAX empty) */
	uint8_t *img;           /* their synced bytes, SECTOR each */
	size_t cap, n;
	struct plop *ops, **tail;
};

struct pldir {
	int kind, durable, after;
	char *path, *path2;     /* rename: from, to; others: path */
	char *stash, *stash2;   /* unlink: the stashed file; rename: the replaced target */
	dev_t pdev[2];          /* the directories it changed */
	ino_t pino[2];
	int nparent, synced[2];
	uint64_t stamp;
};

static struct {
	pthread_mutex_t mu;
	_Atomic int armed; /* read without mu by the hooks' fast path: relaxed */
	int dead;
	uint64_t ops, cut_after, stamp, stash_seq;
	char *stash_dir;
	struct plfile *files;
	size_t nfiles, capfiles;
	struct pldir *dirs;
	size_t ndirs, capdirs;
	char death[4200]; /* the event at which the power went */
	int trace;
	char **lines;
	size_t nlines, caplines;
} pl = {.mu = PTHREAD_MUTEX_INITIALIZER};

int em_pl_armed(void)
{
	/* relaxed: armed and disarmed only while no store thread runs */
	return atomic_load_explicit(&pl.armed, memory_order_relaxed);
}

static void trace_add(const char *kind, const char *a, const char *b);

/* Count one event (under mu), traced as "kind a [-> b]": is it after the power
 * went? (note 5) */
static int pl_event(const char *kind, const char *a, const char *b)
{
	pl.ops++;
	trace_add(kind, a, b);
	if (!pl.dead && pl.cut_after && pl.ops >= pl.cut_after) {
		pl.dead = 1;
		snprintf(pl.death, sizeof(pl.death), "%s %s%s%s", kind, a, b ? " -> " : "", b ? b : "");
	}
	return pl.dead;
}

/* The path of fd, into buf (cap bytes). */
static const char *fd_path(int fd, char *buf, size_t cap)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, buf, cap - 1);
	buf[n > 0 ? n : 0] = 0;
	return buf;
}

static void trace_add(const char *kind, const char *a, const char *b)
{
	if (!pl.trace)
		return;
	if (pl.nlines == pl.caplines) {
		size_t cap = pl.caplines ? 2 * pl.caplines : 256;
		char **l = realloc(pl.lines, cap * sizeof(*l));
		if (!l)
			return;
		pl.lines = l;
		pl.caplines = cap;
	}
	size_t n = strlen(kind) + strlen(a) + (b ? strlen(b) + 4 : 0) + 2;
	char *s = malloc(n);
	if (!s)
		return;
	snprintf(s, n, "%s %s%s%s", kind, a, b ? " -> " : "", b ? b : "");
	pl.lines[pl.nlines++] = s;
}

/* ---- files and shadows ---- */

static uint8_t *shadow_find(struct plfile *f, uint64_t s)
{
	if (!f->cap)
		return NULL;
	for (size_t i = (s * 0x9E3779B97F4A7C15ull) & (f->cap - 1);; i = (i + 1) & (f->cap - 1)) {
		if (f->keys[i] == s)
			return f->img + i * SECTOR;
		if (f->keys[i] == UINT64_MAX)
			return NULL;
	}
}

/* A new shadow slot for sector s (not there yet), or NULL (no memory). */
static uint8_t *shadow_add(struct plfile *f, uint64_t s)
{
	if (2 * (f->n + 1) > f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 64;
		uint64_t *keys = malloc(cap * sizeof(*keys));
		uint8_t *img = malloc(cap * SECTOR);
		if (!keys || !img) {
			free(keys);
			free(img);
			return NULL;
		}
		memset(keys, 0xff, cap * sizeof(*keys));
		for (size_t i = 0; i < f->cap; i++) {
			if (f->keys[i] == UINT64_MAX)
				continue;
			size_t j = (f->keys[i] * 0x9E3779B97F4A7C15ull) & (cap - 1);
			while (keys[j] != UINT64_MAX)
				j = (j + 1) & (cap - 1);
			keys[j] = f->keys[i];
			memcpy(img + j * SECTOR, f->img + i * SECTOR, SECTOR);
		}
		free(f->keys);
		free(f->img);
		f->keys = keys;
		f->img = img;
		f->cap = cap;
	}
	size_t i = (s * 0x9E3779B97F4A7C15ull) & (f->cap - 1);
	while (f->keys[i] != UINT64_MAX)
		i = (i + 1) & (f->cap - 1);
	f->keys[i] = s;
	f->n++;
	return f->img + i * SECTOR;
}

static void shadow_clear(struct plfile *f)
{
	free(f->keys);
	free(f->img);
	f->keys = NULL;
	f->img = NULL;
	f->cap = f->n = 0;
}

/* Copy the synced content of sectors [s0, s1) before a change (note 2). */
static void shadow_capture(struct plfile *f, uint64_t s0, uint64_t s1)
{
	for (uint64_t s = s0; s < s1; s++) {
		if (shadow_find(f, s))
			continue;
		uint8_t *p = shadow_add(f, s);
		if (!p)
			return; /* no memory: the cut restores less (a test build only) */
		memset(p, 0, SECTOR);
		if (s * SECTOR < f->synced_size)
			(void)pread(f->fd, p, SECTOR, (off_t)(s * SECTOR));
	}
}

/* The tracked file behind fd (tracking it from now on), or NULL. */
static struct plfile *file_of(int fd, const char *path)
{
	struct stat st;
	if ((path ? stat(path, &st) : fstat(fd, &st)) != 0 || !S_ISREG(st.st_mode))
		return NULL;
	for (size_t i = 0; i < pl.nfiles; i++)
		if (pl.files[i].dev == st.st_dev && pl.files[i].ino == st.st_ino)
			return &pl.files[i];
	if (pl.nfiles == pl.capfiles) {
		size_t cap = pl.capfiles ? 2 * pl.capfiles : 32;
		struct plfile *a = realloc(pl.files, cap * sizeof(*a));
		if (!a)
			return NULL;
		pl.files = a;
		pl.capfiles = cap;
		for (size_t i = 0; i < pl.nfiles; i++) /* the lists' tails moved with them */
			if (!pl.files[i].ops)
				pl.files[i].tail = &pl.files[i].ops;
	}
	int sfd;
	if (path) {
		sfd = open(path, O_RDWR | O_CLOEXEC);
	} else {
		char link[64];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		sfd = open(link, O_RDWR | O_CLOEXEC);
	}
	if (sfd < 0)
		return NULL;
	struct plfile *f = &pl.files[pl.nfiles++];
	memset(f, 0, sizeof(*f));
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->fd = sfd;
	f->synced_size = (uint64_t)st.st_size;
	f->tail = &f->ops;
	return f;
}

static void op_append(struct plfile *f, struct plop *o)
{
	if (!f->ops)
		f->tail = &f->ops;
	*f->tail = o;
	f->tail = &o->next;
}

/*
 * A copy of a write's buffer, as the device reads it. The hybrid log writes whole
 * aligned blocks, and the last block of a flush may hold bytes past the flush point
 * that writers are still filling (the record after safe_read_only): the kernel reads
 * them racily too, and they are written again by a later flush, so what the copy
 * holds of them never counts. Plain byte loads, not instrumented by ThreadSanitizer,
 * which would report that benign race here (it cannot see the kernel's read).
 */
__attribute__((no_sanitize_thread, noinline)) static void pl_copy_buffer(void *dst,
									  const void *src,
									  size_t len)
{
	volatile const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < len; i++)
		d[i] = s[i];
}

void em_pl_write(int fd, const void *data, uint64_t len, uint64_t off, const void *ring,
		 uint64_t ud, int punch)
{
	if (!em_pl_armed() || !len)
		return;
	pthread_mutex_lock(&pl.mu);
	char path[4096];
	int after = pl_event(punch ? "punch" : "write", fd_path(fd, path, sizeof(path)), NULL);
	struct plfile *f = file_of(fd, NULL);
	struct plop *o = f ? calloc(1, sizeof(*o)) : NULL;
	if (o && !punch && !(o->data = malloc(len))) {
		free(o);
		o = NULL;
	}
	if (o) {
		shadow_capture(f, off / SECTOR, (off + len + SECTOR - 1) / SECTOR);
		o->kind = punch ? OP_PUNCH : OP_WRITE;
		o->off = off;
		o->len = len;
		if (!punch)
			pl_copy_buffer(o->data, data, len);
		o->after = after;
		o->ring = ring;
		o->ud = ud;
		op_append(f, o);
	}
	pthread_mutex_unlock(&pl.mu);
}

void em_pl_complete(const void *ring, uint64_t ud)
{
	if (!em_pl_armed())
		return;
	pthread_mutex_lock(&pl.mu);
	pl.stamp++;
	for (size_t i = 0; i < pl.nfiles; i++)
		for (struct plop *o = pl.files[i].ops; o; o = o->next)
			if (!o->done && o->ring == ring && o->ud == ud) {
				o->done = 1;
				o->stamp = pl.stamp;
				o->ring = NULL;
			}
	pthread_mutex_unlock(&pl.mu);
}

void em_pl_ring_exit(const void *ring)
{
	if (!em_pl_armed())
		return;
	pthread_mutex_lock(&pl.mu);
	for (size_t i = 0; i < pl.nfiles; i++)
		for (struct plop *o = pl.files[i].ops; o; o = o->next)
			if (!o->done && o->ring == ring)
				o->ring = NULL; /* never completed, as far as we know: never synced */
	pthread_mutex_unlock(&pl.mu);
}

/* Apply o's sectors [s0, s1) (all of it) to the image in the shadow; size too. */
static void op_apply(struct plfile *f, const struct plop *o, uint64_t *size, const uint8_t *keep)
{
	if (o->kind == OP_TRUNC) {
		for (size_t i = 0; i < f->cap; i++)
			if (f->keys[i] != UINT64_MAX && f->keys[i] * SECTOR >= o->off)
				memset(f->img + i * SECTOR, 0, SECTOR);
		*size = o->off;
		return;
	}
	uint64_t s0 = o->off / SECTOR, s1 = (o->off + o->len + SECTOR - 1) / SECTOR, last = 0;
	for (uint64_t s = s0; s < s1; s++) {
		if (keep && !keep[s - s0])
			continue;
		uint8_t *p = shadow_find(f, s);
		if (!p)
			continue;
		uint64_t a = s * SECTOR > o->off ? s * SECTOR : o->off;
		uint64_t b = (s + 1) * SECTOR < o->off + o->len ? (s + 1) * SECTOR : o->off + o->len;
		if (o->kind == OP_WRITE)
			memcpy(p + (a - s * SECTOR), o->data + (a - o->off), b - a);
		else
			memset(p + (a - s * SECTOR), 0, b - a);
		last = b;
	}
	if (o->kind == OP_WRITE && last > *size)
		*size = last;
}

uint64_t em_pl_sync_begin(int fd, int dir)
{
	if (!em_pl_armed())
		return 0;
	pthread_mutex_lock(&pl.mu);
	char path[4096];
	int after = pl_event(dir ? "dirsync" : "fsync", fd_path(fd, path, sizeof(path)), NULL);
	uint64_t t = after ? UINT64_MAX : pl.stamp;
	pthread_mutex_unlock(&pl.mu);
	return t;
}

static void dir_synced(const struct stat *st, uint64_t ticket)
{
	for (size_t i = 0; i < pl.ndirs; i++) {
		struct pldir *d = &pl.dirs[i];
		if (d->durable || d->after || d->stamp > ticket)
			continue;
		for (int k = 0; k < d->nparent; k++)
			if (d->pdev[k] == st->st_dev && d->pino[k] == st->st_ino)
				d->synced[k] = 1;
		d->durable = d->synced[0] && (d->nparent < 2 || d->synced[1]);
	}
}

void em_pl_sync_end(int fd, int dir, uint64_t ticket, int res)
{
	if (!em_pl_armed() || res < 0 || ticket == UINT64_MAX)
		return;
	pthread_mutex_lock(&pl.mu);
	struct stat st;
	if (pl.dead || fstat(fd, &st) != 0)
		goto out; /* returned after the power went: covers nothing (note 5) */
	if (dir) {
		dir_synced(&st, ticket);
		goto out;
	}
	struct plfile *f = NULL;
	for (size_t i = 0; i < pl.nfiles && !f; i++)
		if (pl.files[i].dev == st.st_dev && pl.files[i].ino == st.st_ino)
			f = &pl.files[i];
	if (!f)
		goto out;
	struct plop **pp = &f->ops;
	while (*pp) { /* fold what completed before the fsync began (note 3) */
		struct plop *o = *pp;
		if (o->done && !o->after && o->stamp <= ticket) {
			op_apply(f, o, &f->synced_size, NULL);
			*pp = o->next;
			free(o->data);
			free(o);
		} else {
			pp = &o->next;
		}
	}
	f->tail = pp;
	if (!f->ops)
		shadow_clear(f);
out:
	pthread_mutex_unlock(&pl.mu);
}

void em_pl_open_begin(const char *path, int oflags, int *st)
{
	*st = 0;
	if (!em_pl_armed())
		return;
	struct stat sb;
	int exists = stat(path, &sb) == 0;
	*st = exists ? 1 : 0;
	if (!exists || !(oflags & O_TRUNC) || !S_ISREG(sb.st_mode) || sb.st_size == 0)
		return;
	pthread_mutex_lock(&pl.mu);
	int after = pl_event("trunc", path, NULL);
	struct plfile *f = file_of(-1, path);
	struct plop *o = f ? calloc(1, sizeof(*o)) : NULL;
	if (o) {
		shadow_capture(f, 0, (f->synced_size + SECTOR - 1) / SECTOR); /* note 2 */
		o->kind = OP_TRUNC;
		o->off = 0;
		o->done = 1;
		o->stamp = ++pl.stamp;
		o->after = after;
		op_append(f, o);
	}
	pthread_mutex_unlock(&pl.mu);
}

/* ---- directory changes ---- */

static char *xstrdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void parent_of(const char *path, dev_t *dev, ino_t *ino)
{
	char *c = strdup(path);
	struct stat st = {0};
	if (c)
		(void)stat(dirname(c), &st);
	free(c);
	*dev = st.st_dev;
	*ino = st.st_ino;
}

static struct pldir *dir_add(int kind, const char *a, const char *b, int after)
{
	if (pl.ndirs == pl.capdirs) {
		size_t cap = pl.capdirs ? 2 * pl.capdirs : 64;
		struct pldir *d = realloc(pl.dirs, cap * sizeof(*d));
		if (!d)
			return NULL;
		pl.dirs = d;
		pl.capdirs = cap;
	}
	struct pldir *d = &pl.dirs[pl.ndirs++];
	memset(d, 0, sizeof(*d));
	d->kind = kind;
	d->after = after;
	d->path = xstrdup(a);
	d->path2 = xstrdup(b);
	d->stamp = ++pl.stamp;
	parent_of(a, &d->pdev[0], &d->pino[0]);
	d->nparent = 1;
	if (b) {
		parent_of(b, &d->pdev[1], &d->pino[1]);
		d->nparent = 2;
	}
	return d;
}

/* A link to path in the stash (a new name), or NULL. */
static char *stash_link(const char *path)
{
	size_t n = strlen(pl.stash_dir) + 32;
	char *s = malloc(n);
	if (!s)
		return NULL;
	snprintf(s, n, "%s/%" PRIu64, pl.stash_dir, pl.stash_seq++);
	if (link(path, s) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

void em_pl_open_end(const char *path, int oflags, int st, int fd)
{
	if (!em_pl_armed() || fd < 0 || st || !(oflags & O_CREAT))
		return;
	pthread_mutex_lock(&pl.mu);
	int after = pl_event("create", path, NULL);
	(void)dir_add(D_CREATE, path, NULL, after);
	pthread_mutex_unlock(&pl.mu);
}

/* The end of an unlink or a rename that may have replaced a regular file, under
 * pl.mu: when it succeeded the event is recorded, and stash (a link to the replaced
 * inode, or NULL) goes with it, as the unlinked path's (stash) or the rename
 * target's (stash2); when it failed, or the event could not be recorded, the stash
 * is removed. */
static void dir_replaced(int rc, int kind, const char *ev, const char *a, const char *b,
			 char *stash)
{
	struct pldir *d = rc == 0 ? dir_add(kind, a, b, pl_event(ev, a, b)) : NULL;
	if (d && kind == D_UNLINK)
		d->stash = stash;
	else if (d)
		d->stash2 = stash;
	else if (stash) {
		(void)unlink(stash);
		free(stash);
	}
}

int em_pl_unlink(const char *path)
{
	pthread_mutex_lock(&pl.mu);
	struct stat sb;
	char *stash = lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? stash_link(path) : NULL;
	int rc = unlink(path) == 0 ? 0 : -errno;
	dir_replaced(rc, D_UNLINK, "unlink", path, NULL, stash);
	pthread_mutex_unlock(&pl.mu);
	return rc;
}

int em_pl_rename(const char *from, const char *to, int noreplace)
{
	pthread_mutex_lock(&pl.mu);
	struct stat sb;
	char *stash = lstat(to, &sb) == 0 && S_ISREG(sb.st_mode) && !noreplace ? stash_link(to) : NULL;
	int rc = noreplace ? renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE)
			   : rename(from, to);
	rc = rc == 0 ? 0 : -errno;
	dir_replaced(rc, D_RENAME, "rename", from, to, stash);
	pthread_mutex_unlock(&pl.mu);
	return rc;
}

int em_pl_mkdir(const char *path, unsigned mode)
{
	pthread_mutex_lock(&pl.mu);
	int rc = mkdir(path, (mode_t)mode) == 0 ? 0 : -errno;
	if (rc == 0) {
		int after = pl_event("mkdir", path, NULL);
		(void)dir_add(D_MKDIR, path, NULL, after);
	}
	pthread_mutex_unlock(&pl.mu);
	return rc;
}

int em_pl_rmdir(const char *path)
{
	pthread_mutex_lock(&pl.mu);
	int rc = rmdir(path) == 0 ? 0 : -errno;
	if (rc == 0) {
		int after = pl_event("rmdir", path, NULL);
		(void)dir_add(D_RMDIR, path, NULL, after);
	}
	pthread_mutex_unlock(&pl.mu);
	return rc;
}

/* ---- the test's calls ---- */

int em_powerloss_arm(const char *stash_dir, uint64_t cut_after)
{
	if (!stash_dir)
		return -EINVAL;
	pthread_mutex_lock(&pl.mu);
	int rc = 0;
	if (em_pl_armed()) {
		rc = -EBUSY;
	} else if (!(pl.stash_dir = strdup(stash_dir))) {
		rc = -ENOMEM;
	} else {
		pl.dead = 0;
		pl.ops = 0;
		pl.death[0] = 0;
		pl.cut_after = cut_after;
		/* relaxed: no store thread runs while the test arms (powerloss.h) */
		atomic_store_explicit(&pl.armed, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&pl.mu);
	return rc;
}

uint64_t em_powerloss_ops(void)
{
	pthread_mutex_lock(&pl.mu);
	uint64_t n = pl.ops;
	pthread_mutex_unlock(&pl.mu);
	return n;
}

const char *em_powerloss_death(void)
{
	pthread_mutex_lock(&pl.mu);
	const char *s = pl.dead ? pl.death : NULL;
	pthread_mutex_unlock(&pl.mu);
	return s;
}

int em_powerloss_dead(void)
{
	pthread_mutex_lock(&pl.mu);
	int d = pl.dead;
	pthread_mutex_unlock(&pl.mu);
	return d;
}

static void forget_all(void)
{
	for (size_t i = 0; i < pl.nfiles; i++) {
		struct plfile *f = &pl.files[i];
		for (struct plop *o = f->ops, *nx; o; o = nx) {
			nx = o->next;
			free(o->data);
			free(o);
		}
		shadow_clear(f);
		close(f->fd);
	}
	free(pl.files);
	pl.files = NULL;
	pl.nfiles = pl.capfiles = 0;
	for (size_t i = 0; i < pl.ndirs; i++) {
		struct pldir *d = &pl.dirs[i];
		if (d->stash)
			(void)unlink(d->stash);
		if (d->stash2)
			(void)unlink(d->stash2);
		free(d->path);
		free(d->path2);
		free(d->stash);
		free(d->stash2);
	}
	free(pl.dirs);
	pl.dirs = NULL;
	pl.ndirs = pl.capdirs = 0;
	free(pl.stash_dir);
	pl.stash_dir = NULL;
	/* relaxed: see em_powerloss_arm */
	atomic_store_explicit(&pl.armed, 0, memory_order_relaxed);
}

void em_powerloss_disarm(void)
{
	pthread_mutex_lock(&pl.mu);
	forget_all();
	pthread_mutex_unlock(&pl.mu);
}

/* One file's content after the cut (note 6). 0 or -errno. */
static int cut_file(struct plfile *f, uint64_t *g, struct em_powerloss_stats *st)
{
	uint64_t size = f->synced_size;
	int changed = 0;
	for (struct plop *o = f->ops; o; o = o->next) {
		changed = 1;
		if (o->after) {
			st->writes_after++;
			continue;
		}
		uint32_t how = (uint32_t)(em_rng_next(g) % 3); /* 0 drop, 1 keep, 2 tear */
		if (how == 2 && o->kind != OP_TRUNC) {
			uint64_t ns = (o->off + o->len + SECTOR - 1) / SECTOR - o->off / SECTOR;
			uint8_t *keep = malloc(ns);
			if (!keep)
				return -ENOMEM;
			for (uint64_t i = 0; i < ns; i++)
				keep[i] = (uint8_t)(em_rng_next(g) & 1);
			op_apply(f, o, &size, keep);
			free(keep);
			st->writes_torn++;
		} else if (how >= 1) {
			op_apply(f, o, &size, NULL);
			st->writes_kept++;
		} else {
			st->writes_dropped++;
		}
	}
	if (!changed)
		return 0;
	st->files++;
	int rc = ftruncate(f->fd, (off_t)size) == 0 ? 0 : -errno;
	for (size_t i = 0; i < f->cap && rc == 0; i++) {
		uint64_t s = f->keys[i];
		if (s == UINT64_MAX || s * SECTOR >= size)
			continue;
		uint64_t n = size - s * SECTOR < SECTOR ? size - s * SECTOR : SECTOR;
		if (pwrite(f->fd, f->img + i * SECTOR, n, (off_t)(s * SECTOR)) != (ssize_t)n)
			rc = -EIO;
	}
	if (rc == 0 && fsync(f->fd) != 0)
		rc = -errno;
	return rc;
}

/* Does path b name a or something inside it (or the other way round)? */
static int related(const char *a, const char *b)
{
	if (!a || !b)
		return 0;
	size_t la = strlen(a), lb = strlen(b), n = la < lb ? la : lb;
	return !strncmp(a, b, n) && (la == lb || (la < lb ? b[la] : a[lb]) == '/');
}

static int rm_tree(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			size_t n = strlen(path) + strlen(e->d_name) + 2;
			char *p = malloc(n);
			if (!p)
				break;
			snprintf(p, n, "%s/%s", path, e->d_name);
			if (unlink(p) != 0 && (errno == EISDIR || errno == EPERM))
				(void)rm_tree(p); /* a directory (unlink's error for one varies) */
			free(p);
		}
		closedir(d);
	}
	return rmdir(path) == 0 || errno == ENOENT ? 0 : -errno;
}

static int undo_dir(const struct pldir *d)
{
	int rc = 0;
	switch (d->kind) {
	case D_CREATE:
		rc = unlink(d->path) == 0 || errno == ENOENT ? 0 : -errno;
		break;
	case D_MKDIR:
		rc = rm_tree(d->path);
		break;
	case D_UNLINK:
		if (d->stash)
			rc = rename(d->stash, d->path) == 0 ? 0 : -errno;
		break;
	case D_RMDIR:
		rc = mkdir(d->path, 0755) == 0 || errno == EEXIST ? 0 : -errno;
		break;
	case D_RENAME:
		rc = rename(d->path2, d->path) == 0 ? 0 : -errno;
		if (rc == 0 && d->stash2)
			rc = rename(d->stash2, d->path2) == 0 ? 0 : -errno;
		break;
	}
	return rc;
}

/* Which directory changes are undone (note 6), then undo them newest first. */
static int cut_dirs(uint64_t *g, struct em_powerloss_stats *st)
{
	int rc = 0;
	uint8_t *undo = calloc(pl.ndirs + 1, 1);
	if (!undo)
		return -ENOMEM;
	for (size_t i = 0; i < pl.ndirs; i++) {
		const struct pldir *d = &pl.dirs[i];
		if (d->after || (!d->durable && (em_rng_next(g) & 1)))
			undo[i] = 1;
		for (size_t j = 0; j < i && !undo[i]; j++) /* an earlier undone change of its names */
			if (undo[j] && (related(pl.dirs[j].path, d->path) ||
					related(pl.dirs[j].path, d->path2) ||
					related(pl.dirs[j].path2, d->path) ||
					related(pl.dirs[j].path2, d->path2)))
				undo[i] = 1;
	}
	for (size_t i = pl.ndirs; i-- > 0;) {
		if (!undo[i]) {
			st->dirops_kept++;
			continue;
		}
		st->dirops_undone++;
		int r = undo_dir(&pl.dirs[i]);
		if (r < 0 && rc == 0)
			rc = r;
	}
	free(undo);
	return rc;
}

int em_powerloss_cut(uint64_t seed, struct em_powerloss_stats *stp)
{
	struct em_powerloss_stats st = {0};
	uint64_t g[4];
	em_rng_seed(g, seed);
	pthread_mutex_lock(&pl.mu);
	int rc = em_pl_armed() ? 0 : -EINVAL;
	for (size_t i = 0; i < pl.nfiles && rc >= 0; i++) {
		int r = cut_file(&pl.files[i], g, &st);
		if (r < 0 && rc == 0)
			rc = r;
	}
	if (em_pl_armed()) {
		int r = cut_dirs(g, &st);
		if (r < 0 && rc == 0)
			rc = r;
		forget_all();
	}
	pthread_mutex_unlock(&pl.mu);
	if (stp)
		*stp = st;
	return rc;
}

void em_powerloss_trace(int on)
{
	pthread_mutex_lock(&pl.mu);
	pl.trace = on;
	pthread_mutex_unlock(&pl.mu);
}

const char *em_powerloss_trace_line(size_t i)
{
	pthread_mutex_lock(&pl.mu);
	const char *s = i < pl.nlines ? pl.lines[i] : NULL;
	pthread_mutex_unlock(&pl.mu);
	return s;
}

size_t em_powerloss_trace_count(void)
{
	pthread_mutex_lock(&pl.mu);
	size_t n = pl.nlines;
	pthread_mutex_unlock(&pl.mu);
	return n;
}

void em_powerloss_trace_clear(void)
{
	pthread_mutex_lock(&pl.mu);
	for (size_t i = 0; i < pl.nlines; i++)
		free(pl.lines[i]);
	free(pl.lines);
	pl.lines = NULL;
	pl.nlines = pl.caplines = 0;
	pthread_mutex_unlock(&pl.mu);
}

#endif
