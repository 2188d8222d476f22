/*
 * test_dlopen.c - libember.so loads with dlopen into a program that does not link
 * it (as Python and ctypes load it), whatever the allocator option: the library
 * links no allocator with initial-exec TLS (src/core/alloc.c). The program opens a
 * store, writes from several threads, checkpoints, closes, unloads the library,
 * loads it again and reads everything back.
 *
 *   test_dlopen <path of libember.so>
 */
#include "test_util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ember.h"

/* the calls used, looked up with dlsym */
static struct api {
	void (*options_default)(ember_options *);
	int (*open)(const char *, const ember_options *, ember_db **);
	int (*close)(ember_db *);
	int (*session_open)(ember_db *, ember_session **);
	int (*session_close)(ember_session *);
	int (*put)(ember_session *, const void *, size_t, const void *, size_t);
	int (*get)(ember_session *, const void *, size_t, void *, size_t, size_t *);
	int (*checkpoint)(ember_db *, uint64_t *);
	const char *(*strerror)(int);
} api;

const char *ember_strerror(int code) { return api.strerror ? api.strerror(code) : "?"; }

#define THREADS 4

/* ThreadSanitizer's runtime keeps pointers into an instrumented library after
 * dlclose and calls one at exit (a SEGV there): under it the library stays loaded,
 * and the second load only takes another reference. */
#if defined(__SANITIZE_THREAD__)
#define UNLOAD 0
#else
#define UNLOAD 1
#endif

static void *load(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	CHECK(h, "dlopen(%s): %s", path, dlerror());
#define SYM(field, name)                                                            \
	do {                                                                        \
		*(void **)&api.field = dlsym(h, name);                              \
		CHECK(api.field, "dlsym(%s): %s", name, dlerror());                 \
	} while (0)
	SYM(options_default, "ember_options_default");
	SYM(open, "ember_open");
	SYM(close, "ember_close");
	SYM(session_open, "ember_session_open");
	SYM(session_close, "ember_session_close");
	SYM(put, "ember_put");
	SYM(get, "ember_get");
	SYM(checkpoint, "ember_checkpoint");
	SYM(strerror, "ember_strerror");
#undef SYM
	return h;
}

/* Is a file whose name contains `name` mapped into this process? */
static int mapped(const char *name)
{
	char line[4096];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, name) != NULL;
	fclose(f);
	return found;
}

struct worker {
	ember_db *db;
	int id;
	uint64_t keys;
};

static void *write_keys(void *arg)
{
	struct worker *w = arg;
	ember_session *s = NULL;
	CHECK_OK(api.session_open(w->db, &s));
	for (uint64_t i = 0; i < w->keys; i++) {
		char key[32], val[64];
		int kl = snprintf(key, sizeof key, "t%d-k%llu", w->id, (unsigned long long)i);
		int vl = snprintf(val, sizeof val, "value %llu of %d", (unsigned long long)i * 7,
				  w->id);
		CHECK_OK(api.put(s, key, (size_t)kl, val, (size_t)vl));
	}
	CHECK_OK(api.session_close(s));
	return NULL;
}

static void read_back(ember_db *db, uint64_t keys)
{
	ember_session *s = NULL;
	CHECK_OK(api.session_open(db, &s));
	for (int t = 0; t < THREADS; t++) {
		for (uint64_t i = 0; i < keys; i++) {
			char key[32], want[64], got[64];
			size_t len = 0;
			int kl = snprintf(key, sizeof key, "t%d-k%llu", t, (unsigned long long)i);
			int wl = snprintf(want, sizeof want, "value %llu of %d",
					  (unsigned long long)i * 7, t);
			CHECK_OK(api.get(s, key, (size_t)kl, got, sizeof got, &len));
			CHECK(len == (size_t)wl && memcmp(got, want, len) == 0,
			      "key %s: wrong value", key);
		}
	}
	CHECK_OK(api.session_close(s));
}

int main(int argc, char **argv)
{
	char dir[4096];
	ember_options o;
	ember_db *db = NULL;
	pthread_t th[THREADS];
	struct worker w[THREADS];
	uint64_t keys = tu_scaled(20000) + 1;
	void *h;

	tu_init("dlopen", argc, argv);
	CHECK(argc >= 2, "usage: test_dlopen <libember.so>");
	CHECK(!mapped("libember"), "libember is mapped before dlopen: the test links it");
	CHECK(tu_tmpdir_make("dlopen", dir, sizeof dir) == 0, "temp dir");

	h = load(argv[1]);
	CHECK(!mapped("libjemalloc"), "loading libember brought libjemalloc in");
	api.options_default(&o);
	o.log_memory = 16u << 20;
	o.index_buckets = 1u << 12;
	CHECK_OK(api.open(dir, &o, &db));
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){db, t, keys};
		CHECK(pthread_create(&th[t], NULL, write_keys, &w[t]) == 0, "pthread_create");
	}
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	read_back(db, keys);
	CHECK_OK(api.checkpoint(db, NULL));
	CHECK_OK(api.close(db));
	if (UNLOAD)
		CHECK(dlclose(h) == 0, "dlclose: %s", dlerror());
	memset(&api, 0, sizeof api);

	/* a second load in the same process: a fresh library state */
	h = load(argv[1]);
	db = NULL;
	CHECK_OK(api.open(dir, &o, &db));
	read_back(db, keys);
	CHECK_OK(api.close(db));
	if (UNLOAD)
		CHECK(dlclose(h) == 0, "dlclose: %s", dlerror());
	memset(&api, 0, sizeof api);
	tu_tmpdir_remove(dir);
	printf("dlopen: %d threads x %llu keys written, checkpointed, read back after a "
	       "reload\n", THREADS, (unsigned long long)keys);
	return 0;
}
