/*
 * test_util.c - seed and scale handling, failure reporting, temporary directories,
 * and the reference map of the test harness (see test_util.h).
 */
#include "test_util.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- seed, scale, failure ------------------------------------------------ */

static uint64_t g_seed;
static double g_scale = 1.0;
static tu_rng g_rng;
static const char *g_name = "test";

/* Temporary directories to remove when a CHECK fails. */
#define TU_MAX_TMPDIRS 32
static char g_tmpdirs[TU_MAX_TMPDIRS][512];
static int g_ntmpdirs;
static pthread_mutex_t g_tmpdir_lock = PTHREAD_MUTEX_INITIALIZER;

double tu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tu_init(const char *name, int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	g_name = name;

	const char *s = getenv("EMBER_TEST_SEED");
	if (s != NULL && *s != '\0') {
		g_seed = strtoull(s, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		x ^= (uint64_t)getpid() << 32;
		/* Keep printed seeds short enough to type: 1 .. 2^40. */
		g_seed = (tu_mix64(x) & ((1ull << 40) - 1)) + 1;
	}

	const char *sc = getenv("EMBER_TEST_SCALE");
	if (sc != NULL && *sc != '\0') {
		double v = strtod(sc, NULL);
		if (v > 0 && v < 1e6)
			g_scale = v;
	}
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--soak") == 0)
			g_scale *= 10.0;

	tu_rng_seed(&g_rng, g_seed);
	printf("%s: seed=%llu scale=%g (replay with EMBER_TEST_SEED=%llu)\n", name,
	       (unsigned long long)g_seed, g_scale, (unsigned long long)g_seed);
}

uint64_t tu_seed(void)
{
	return g_seed;
}

double tu_scale(void)
{
	return g_scale;
}

uint64_t tu_scaled(uint64_t n)
{
	double v = (double)n * g_scale;
	uint64_t r = (uint64_t)(v + 0.5);
	return (r == 0 && n > 0) ? 1 : r;
}

void tu_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	/* Only the first failing thread reports; the others wait for exit(). */
	static atomic_flag failing = ATOMIC_FLAG_INIT;
	if (atomic_flag_test_and_set(&failing)) {
		for (;;)
			pause();
	}
	fflush(stdout);
	fprintf(stderr, "%s:%d: CHECK(%s) failed: ", file, line, cond);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s: FAILED, seed=%llu (replay with EMBER_TEST_SEED=%llu)\n",
		g_name, (unsigned long long)g_seed, (unsigned long long)g_seed);
	const char *keep = getenv("EMBER_TEST_KEEP");
	pthread_mutex_lock(&g_tmpdir_lock);
	for (int i = 0; i < g_ntmpdirs; i++) {
		if (keep != NULL && *keep != '\0')
			fprintf(stderr, "kept %s\n", g_tmpdirs[i]);
		else
			tu_tmpdir_remove(g_tmpdirs[i]);
	}
	pthread_mutex_unlock(&g_tmpdir_lock);
	fflush(stderr);
	_exit(1);
}

/* ---- PRNG ------------------------------------------------------------------- */

void tu_rng_fill(tu_rng *r, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n >= 8) {
		uint64_t v = tu_rng_next(r);
		memcpy(p, &v, 8);
		p += 8;
		n -= 8;
	}
	if (n > 0) {
		uint64_t v = tu_rng_next(r);
		memcpy(p, &v, n);
	}
}

tu_rng *tu_rng_global(void)
{
	return &g_rng;
}

void tu_rng_stream(tu_rng *r, uint64_t stream)
{
	tu_rng_seed(r, tu_mix64(g_seed ^ tu_mix64(stream + 0x5eedull)));
}

/* ---- temporary directories --------------------------------------------------- */

int tu_tmpdir_make(const char *tag, char *out, size_t cap)
{
	const char *base = getenv("TMPDIR");
	if (base == NULL || *base == '\0')
		base = "/tmp";
	int n = snprintf(out, cap, "%s/ember-%s-XXXXXX", base, tag);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	if (mkdtemp(out) == NULL)
		return -errno;
	pthread_mutex_lock(&g_tmpdir_lock);
	if (g_ntmpdirs < TU_MAX_TMPDIRS && strlen(out) < sizeof(g_tmpdirs[0]))
		strcpy(g_tmpdirs[g_ntmpdirs++], out);
	pthread_mutex_unlock(&g_tmpdir_lock);
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	int rc = (flag == FTW_DP) ? rmdir(path) : unlink(path);
	if (rc != 0 && errno != ENOENT)
		fprintf(stderr, "tu_tmpdir_remove: %s: %s\n", path, strerror(errno));
	return 0; /* keep going */
}

int tu_tmpdir_remove(const char *path)
{
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
		return -errno;
	return 0;
}

unsigned long tu_file_ino(const char *name)
{
	struct stat st;
	return stat(name, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

unsigned long tu_whole_file(const char *name, uint64_t size)
{
	struct stat st;
	if (stat(name, &st) != 0)
		return 0;
	CHECK((uint64_t)st.st_size == size && (uint64_t)st.st_blocks * 512 >= size,
	      "%s: %lld bytes in %lld blocks, want %llu bytes, all allocated", name,
	      (long long)st.st_size, (long long)st.st_blocks, (unsigned long long)size);
	return (unsigned long)st.st_ino;
}

int tu_path_join(char *out, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(out, cap, "%s/%s", dir, name);
	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

/* ---- hashing ------------------------------------------------------------------- */

uint64_t tu_hash_bytes(const void *p, size_t n, uint64_t seed)
{
	const uint8_t *b = p;
	uint64_t h = tu_mix64(seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull));
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, b, 8);
		h = tu_mix64(h ^ w) + 0x632be59bd9b4e019ull;
		b += 8;
		n -= 8;
	}
	if (n > 0) {
		uint64_t w = 0;
		memcpy(&w, b, n);
		h = tu_mix64(h ^ w ^ ((uint64_t)n << 56));
	}
	return tu_mix64(h);
}

/* ---- reference map --------------------------------------------------------------- */

#define SLOT_EMPTY 0ull
#define SLOT_TOMB 1ull

static uint64_t key_hash(const void *key, size_t klen)
{
	/* Bit 1 set: never collides with the empty and tombstone markers. */
	return tu_hash_bytes(key, klen, 0x7e57) | 2ull;
}

void tu_map_init(tu_map *m)
{
	memset(m, 0, sizeof(*m));
	m->cap = 1024;
	m->slots = calloc(m->cap, sizeof(*m->slots));
	CHECK(m->slots != NULL, "out of memory");
}

void tu_map_free(tu_map *m)
{
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].hash > SLOT_TOMB)
			free(m->slots[i].bytes);
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

static void map_grow(tu_map *m)
{
	/* Double when mostly live; otherwise rebuild at the same size to drop tombs. */
	size_t ncap = (m->count * 2 >= m->cap / 2) ? m->cap * 2 : m->cap;
	tu_map_entry *ns = calloc(ncap, sizeof(*ns));
	CHECK(ns != NULL, "out of memory (%zu slots)", ncap);
	for (size_t i = 0; i < m->cap; i++) {
		tu_map_entry *e = &m->slots[i];
		if (e->hash <= SLOT_TOMB)
			continue;
		size_t j = e->hash & (ncap - 1);
		while (ns[j].hash != SLOT_EMPTY)
			j = (j + 1) & (ncap - 1);
		ns[j] = *e;
	}
	free(m->slots);
	m->slots = ns;
	m->cap = ncap;
	m->used = m->count;
}

/* The slot holding key, or NULL. */
static tu_map_entry *map_find(const tu_map *m, const void *key, size_t klen, uint64_t h)
{
	size_t j = h & (m->cap - 1);
	for (;;) {
		tu_map_entry *e = &m->slots[j];
		if (e->hash == SLOT_EMPTY)
			return NULL;
		if (e->hash == h && e->klen == klen && memcmp(e->bytes, key, klen) == 0)
			return e;
		j = (j + 1) & (m->cap - 1);
	}
}

void tu_map_put(tu_map *m, const void *key, size_t klen, const void *val, size_t vlen)
{
	CHECK(klen <= UINT32_MAX && vlen <= UINT32_MAX, "key or value too long");
	uint64_t h = key_hash(key, klen);
	tu_map_entry *e = map_find(m, key, klen, h);
	if (e != NULL) {
		uint8_t *nb = malloc(klen + vlen + 1);
		CHECK(nb != NULL, "out of memory");
		memcpy(nb, key, klen);
		if (vlen > 0)
			memcpy(nb + klen, val, vlen); /* val may alias e->bytes */
		free(e->bytes);
		m->bytes = m->bytes - e->vlen + vlen;
		e->bytes = nb;
		e->vlen = (uint32_t)vlen;
		return;
	}
	if ((m->used + 1) * 4 > m->cap * 3)
		map_grow(m);
	size_t j = h & (m->cap - 1);
	while (m->slots[j].hash > SLOT_TOMB)
		j = (j + 1) & (m->cap - 1);
	e = &m->slots[j];
	if (e->hash == SLOT_EMPTY)
		m->used++;
	e->bytes = malloc(klen + vlen + 1);
	CHECK(e->bytes != NULL, "out of memory");
	memcpy(e->bytes, key, klen);
	if (vlen > 0)
		memcpy(e->bytes + klen, val, vlen);
	e->klen = (uint32_t)klen;
	e->vlen = (uint32_t)vlen;
	e->hash = h;
	m->count++;
	m->bytes += klen + vlen;
}

const tu_map_entry *tu_map_get(const tu_map *m, const void *key, size_t klen)
{
	return map_find(m, key, klen, key_hash(key, klen));
}

bool tu_map_del(tu_map *m, const void *key, size_t klen)
{
	tu_map_entry *e = map_find(m, key, klen, key_hash(key, klen));
	if (e == NULL)
		return false;
	m->bytes -= e->klen + e->vlen;
	free(e->bytes);
	e->bytes = NULL;
	e->klen = e->vlen = 0;
	e->hash = SLOT_TOMB;
	m->count--;
	return true;
}

const tu_map_entry *tu_map_next(const tu_map *m, size_t *pos)
{
	while (*pos < m->cap) {
		const tu_map_entry *e = &m->slots[(*pos)++];
		if (e->hash > SLOT_TOMB)
			return e;
	}
	return NULL;
}
