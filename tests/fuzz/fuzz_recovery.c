/*
 * fuzz_recovery.c - libFuzzer target: ember_open of a store whose metadata files
 * (the superblock, and every file of its checkpoint directories: meta, hot.index,
 * cold.table) were damaged in a way the input chooses.
 *
 * At start a small store is built (puts, updates, deletes, a forced compaction, a
 * checkpoint, more writes, close, which checkpoints again) and every file of its
 * directory is kept in memory. For each input the directory is restored from that
 * copy, one metadata file is changed, and the store is opened:
 *
 *   byte 0   which metadata file (modulo their number, in name order)
 *   byte 1   how: bits 0-1  0 replace the file with the payload
 *                           1 XOR the payload into the file at offset
 *                           2 write the payload over the file at offset
 *                           3 truncate the file to offset (modulo its size + 1)
 *            bit 2  then fix the checksums the change broke (the superblock's and
 *                   meta's own, meta's index_sum and table_sum; layouts in
 *                   docs/format.md 7.2 and 7.6), so the input reaches the checks
 *                   behind them
 *   bytes 2-5  offset (little-endian, modulo the file's size)
 *   bytes 6-   payload
 *
 * ember_open must return 0 or an error code (never crash, hang or leak). When it
 * returns 0, every key the store ever held must read back as a value that was
 * written to it, as absent, or as an error; then ember_close must work.
 *
 * Seed corpus: EMBER_FUZZ_GEN_CORPUS=DIR fuzz_recovery writes one seed per
 * metadata file and change kind into DIR and exits (docs/faults.md).
 */
#include <dirent.h>
#include <ember.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define NKEYS 300
#define MAXV 600
#define MAXFILES 64

struct saved_file {
	char rel[256]; /* path below the store directory */
	uint8_t *data;
	size_t len;
	int meta;      /* a metadata file the fuzzer may change */
};

static char base[256], orig[300], work[300];
static struct saved_file files[MAXFILES];
static int nfiles;
static int meta_idx[MAXFILES], nmeta;
static uint32_t last_ver[NKEYS]; /* versions 1..last_ver[k] were written to key k */

#define FZ_CHECK(cond, ...)                                                          \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "fuzz_recovery: %s:%d: %s: ", __FILE__, __LINE__,   \
				#cond);                                             \
			fprintf(stderr, __VA_ARGS__);                               \
			fprintf(stderr, "\n");                                      \
			abort();                                                    \
		}                                                                   \
	} while (0)

static void quiet(void *arg, const char *line)
{
	(void)arg;
	(void)line;
}

static void options(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 8 * o->page_size;
	o->index_buckets = 128;
	o->cold_index_chunks = 32;
	o->cold_chunk_bytes = 128;
	o->cold_log_memory = 8 * o->page_size;
	o->hot_disk_budget = 2 * o->log_memory;
	o->io_queue_depth = 8;
	o->flags = flags;
	o->log_fn = quiet;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint32_t gen_value(uint32_t k, uint32_t v, uint8_t *out)
{
	uint32_t n = 8 + (uint32_t)(mix(((uint64_t)k << 32) | v) % (MAXV - 8));
	memcpy(out, &k, 4);
	memcpy(out + 4, &v, 4);
	for (uint32_t i = 8; i < n; i++)
		out[i] = (uint8_t)mix(((uint64_t)k << 40) ^ ((uint64_t)v << 20) ^ i);
	return n;
}

static void put(ember_session *s, uint32_t k)
{
	uint8_t v[MAXV];
	uint32_t ver = ++last_ver[k];
	uint32_t n = gen_value(k, ver, v);
	int rc = ember_put(s, &k, sizeof(k), v, n);
	FZ_CHECK(rc == 0, "put: %s", ember_strerror(rc));
}

/* ---- the store's files, kept in memory ----------------------------------------------- */

static void save_tree(const char *root, const char *rel)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
	DIR *d = opendir(path);
	FZ_CHECK(d, "opendir %s: %s", path, strerror(errno));
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char r[256], p[1300];
		snprintf(r, sizeof(r), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		snprintf(p, sizeof(p), "%s/%s", root, r);
		struct stat st;
		FZ_CHECK(stat(p, &st) == 0, "stat %s", p);
		if (S_ISDIR(st.st_mode)) {
			save_tree(root, r);
			continue;
		}
		FZ_CHECK(nfiles < MAXFILES, "too many files");
		struct saved_file *f = &files[nfiles++];
		snprintf(f->rel, sizeof(f->rel), "%s", r);
		f->len = (size_t)st.st_size;
		f->data = malloc(f->len ? f->len : 1);
		FZ_CHECK(f->data, "malloc");
		int fd = open(p, O_RDONLY);
		FZ_CHECK(fd >= 0 && read(fd, f->data, f->len) == (ssize_t)f->len, "read %s", p);
		close(fd);
		f->meta = strcmp(r, "ember.super") == 0 || strncmp(r, "checkpoints/", 12) == 0;
	}
	closedir(d);
}

static int cmp_files(const void *a, const void *b)
{
	return strcmp(((const struct saved_file *)a)->rel, ((const struct saved_file *)b)->rel);
}

static void rm_tree(const char *path)
{
	DIR *d = opendir(path);
	if (!d) {
		unlink(path);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char p[1300];
		snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
		struct stat st;
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			rm_tree(p);
		else
			unlink(p);
	}
	closedir(d);
	rmdir(path);
}

static void mkdirs_for(const char *path)
{
	char p[1300];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
}

static void write_file(const char *rel, const uint8_t *data, size_t len)
{
	char p[1300];
	snprintf(p, sizeof(p), "%s/%s", work, rel);
	mkdirs_for(p);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	FZ_CHECK(fd >= 0, "create %s: %s", p, strerror(errno));
	FZ_CHECK(len == 0 || write(fd, data, len) == (ssize_t)len, "write %s", p);
	close(fd);
}

static void restore(void)
{
	rm_tree(work);
	FZ_CHECK(mkdir(work, 0755) == 0, "mkdir %s: %s", work, strerror(errno));
	for (int i = 0; i < nfiles; i++)
		write_file(files[i].rel, files[i].data, files[i].len);
}

/* ---- checksum fix-ups (docs/format.md 7.2, 7.6) ---------------------------------------- */

static void fix_block_sum(uint8_t *b, size_t len)
{
	if (len != 4096)
		return;
	uint64_t sum = XXH3_64bits(b, 4088);
	memcpy(b + 4088, &sum, 8);
}

static const char *base_name(const char *rel)
{
	const char *s = strrchr(rel, '/');
	return s ? s + 1 : rel;
}

/* After hot.index or cold.table changed: rewrite its sum in the meta beside it. */
static void fix_meta_for(const struct saved_file *f, const uint8_t *data, size_t len)
{
	const char *name = base_name(f->rel);
	size_t count_off, sum_off, unit;
	if (strcmp(name, "hot.index") == 0) {
		count_off = 144, sum_off = 152, unit = 16;
	} else if (strcmp(name, "cold.table") == 0) {
		count_off = 160, sum_off = 168, unit = 1;
	} else {
		return;
	}
	char rel[256];
	snprintf(rel, sizeof(rel), "%.*smeta", (int)(name - f->rel), f->rel);
	for (int i = 0; i < nfiles; i++) {
		if (strcmp(files[i].rel, rel) != 0 || files[i].len != 4096)
			continue;
		uint8_t m[4096];
		memcpy(m, files[i].data, 4096);
		uint64_t count;
		memcpy(&count, m + count_off, 8);
		uint64_t n = count * unit;
		uint64_t sum = XXH3_64bits(data, n <= len ? n : len);
		memcpy(m + sum_off, &sum, 8);
		fix_block_sum(m, 4096);
		write_file(rel, m, 4096);
	}
}

/* ---- the store --------------------------------------------------------------------------- */

static void build_store(void)
{
	ember_options o;
	ember_db *db = NULL;
	ember_session *s = NULL;
	options(&o, EMBER_OPEN_TRUNCATE);
	int rc = ember_open(orig, &o, &db);
	FZ_CHECK(rc == 0, "open: %s", ember_strerror(rc));
	rc = ember_session_open(db, &s);
	FZ_CHECK(rc == 0, "session: %s", ember_strerror(rc));
	for (uint32_t k = 0; k < NKEYS; k++)
		put(s, k);
	for (uint32_t k = 0; k < NKEYS; k += 2)
		put(s, k);
	for (uint32_t k = 0; k < NKEYS; k += 7)
		FZ_CHECK(ember_delete(s, &k, sizeof(k)) == 0, "delete");
	rc = ember_compact(db, 1);
	FZ_CHECK(rc >= 0, "compact: %s", ember_strerror(rc));
	rc = ember_checkpoint(db, NULL);
	FZ_CHECK(rc == 0, "checkpoint: %s", ember_strerror(rc));
	for (uint32_t k = 0; k < NKEYS; k += 3)
		put(s, k);
	FZ_CHECK(ember_session_close(s) == 0, "session close");
	rc = ember_close(db); /* takes the final checkpoint */
	FZ_CHECK(rc == 0, "close: %s", ember_strerror(rc));
}

static void seed_file(const char *out, int idx, uint8_t how, uint32_t off, const void *payload,
		      size_t n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/m%d-how%u-off%u", out, idx, how, off);
	FILE *f = fopen(path, "wb");
	FZ_CHECK(f, "cannot write %s", path);
	uint8_t hdr[6] = {(uint8_t)idx, how, (uint8_t)off, (uint8_t)(off >> 8),
			  (uint8_t)(off >> 16), (uint8_t)(off >> 24)};
	fwrite(hdr, 1, 6, f);
	fwrite(payload, 1, n, f);
	fclose(f);
}

static void gen_corpus(const char *out)
{
	static const uint8_t flip[1] = {0x01}, ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	for (int i = 0; i < nmeta; i++) {
		const struct saved_file *f = &files[meta_idx[i]];
		seed_file(out, i, 1, 0, flip, 1);                      /* magic */
		seed_file(out, i, 1 | 4, 16, ones, 8);                 /* a field, sums fixed */
		seed_file(out, i, 3, (uint32_t)(f->len / 2), NULL, 0); /* torn */
		seed_file(out, i, 2 | 4, 8, ones, 4);                  /* version */
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof(base), "%s/ember-fuzz-recovery-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	FZ_CHECK(mkdtemp(base), "mkdtemp: %s", strerror(errno));
	snprintf(orig, sizeof(orig), "%s/orig", base);
	snprintf(work, sizeof(work), "%s/work", base);
	build_store();
	save_tree(orig, "");
	qsort(files, (size_t)nfiles, sizeof(files[0]), cmp_files);
	for (int i = 0; i < nfiles; i++)
		if (files[i].meta)
			meta_idx[nmeta++] = i;
	FZ_CHECK(nmeta > 0, "no metadata files in %s", orig);
	rm_tree(orig);
	const char *gen = getenv("EMBER_FUZZ_GEN_CORPUS");
	if (gen) {
		gen_corpus(gen);
		rm_tree(base);
		exit(0);
	}
	fprintf(stderr, "fuzz_recovery: %d files, %d of them metadata:", nfiles, nmeta);
	for (int i = 0; i < nmeta; i++)
		fprintf(stderr, " %s", files[meta_idx[i]].rel);
	fprintf(stderr, "\n");
	return 0;
}

static void check_reads(ember_db *db)
{
	ember_session *s = NULL;
	int rc = ember_session_open(db, &s);
	if (rc < 0)
		return;
	for (uint32_t k = 0; k < NKEYS; k++) {
		uint8_t buf[MAXV], want[MAXV];
		size_t len = 0;
		rc = ember_get(s, &k, sizeof(k), buf, sizeof(buf), &len);
		if (rc != 0)
			continue; /* absent, or an error: both allowed */
		uint32_t wk = UINT32_MAX, v = 0;
		if (len >= 8) {
			memcpy(&wk, buf, 4);
			memcpy(&v, buf + 4, 4);
		}
		FZ_CHECK(wk == k && v >= 1 && v <= last_ver[k] && gen_value(k, v, want) == len &&
				 memcmp(want, buf, len) == 0,
			 "key %u: a value (%zu bytes) that was never written", k, len);
	}
	ember_session_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 6)
		return 0;
	struct saved_file *f = &files[meta_idx[data[0] % nmeta]];
	uint8_t how = data[1];
	uint32_t off32;
	memcpy(&off32, data + 2, 4);
	const uint8_t *pl = data + 6;
	size_t pn = size - 6;

	restore();
	/* the changed copy of the file */
	size_t len = f->len;
	uint8_t *b;
	if ((how & 3) == 0) {
		len = pn;
		b = malloc(len ? len : 1);
		FZ_CHECK(b, "malloc");
		memcpy(b, pl, pn);
	} else {
		size_t off = f->len ? off32 % (f->len + ((how & 3) == 3)) : 0;
		if ((how & 3) == 2 && off + pn > len)
			len = off + pn;
		b = calloc(1, len ? len : 1);
		FZ_CHECK(b, "calloc");
		memcpy(b, f->data, f->len < len ? f->len : len);
		if ((how & 3) == 1)
			for (size_t i = 0; i < pn && off + i < len; i++)
				b[off + i] ^= pl[i];
		else if ((how & 3) == 2)
			memcpy(b + off, pl, pn);
		else
			len = off;
	}
	const char *name = base_name(f->rel);
	if (how & 4) {
		if (strcmp(name, "ember.super") == 0 || strcmp(name, "meta") == 0)
			fix_block_sum(b, len);
		else
			fix_meta_for(f, b, len);
	}
	write_file(f->rel, b, len);
	free(b);

	ember_options o;
	ember_db *db = NULL;
	options(&o, 0);
	int rc = ember_open(work, &o, &db);
	if (rc < 0) {
		FZ_CHECK(db == NULL, "a failed open left *db set");
		FZ_CHECK((rc <= EMBER_EINVAL && rc >= EMBER_EREADONLY) || rc > -4096,
			 "ember_open: unknown code %d", rc);
		return 0;
	}
	FZ_CHECK(rc == 0 && db, "ember_open: %d", rc);
	check_reads(db);
	rc = ember_close(db);
	FZ_CHECK(rc == 0 || (rc <= EMBER_EINVAL && rc >= EMBER_EREADONLY) || rc > -4096,
		 "ember_close: %d", rc);
	return 0;
}
