/*
 * test_abi_structs.c - a caller built against an older, smaller ember_options or
 * ember_stats works with this library (docs/abi.md).
 *
 * "Older" structs are prefixes of today's: the first fields, as a release that
 * had only those would have declared them. Each lives in a heap block of exactly
 * its size, so that AddressSanitizer (the asan configuration) reports any byte
 * the library reads or writes past it; bytes after it in a larger block are
 * checked untouched in every configuration. Also: a zeroed options struct
 * (struct_size 0) is this release's; a newer caller's larger struct is accepted
 * when the bytes past this library's struct are zero and refused (EMBER_EINVAL)
 * otherwise; the dlsym-able functions of the same name as the macros fill this
 * release's struct.
 */
#include <ember.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ember_options as a release with only its first fields would declare it */
struct options_old {
	size_t struct_size;
	uint64_t log_memory;
	double mutable_fraction;
	uint64_t index_buckets;
	uint32_t page_size;
	uint32_t io_queue_depth;
	uint32_t flags;
};

/* ember_stats as a release with only its first fields would declare it */
struct stats_old {
	ember_tier_stats hot, cold;
	uint64_t read_cache_hits;
};

#define GUARD 64

static void test_old_options(const char *dir)
{
	_Static_assert(offsetof(struct options_old, flags) == offsetof(ember_options, flags),
		       "options_old is a prefix of ember_options");
	/* the old struct, then a guard the library must not touch */
	uint8_t *block = malloc(sizeof(struct options_old) + GUARD);
	CHECK(block != NULL, "oom");
	memset(block + sizeof(struct options_old), 0xa5, GUARD);
	struct options_old *o = (struct options_old *)block;
	ember_options_default_sized((ember_options *)o, sizeof(*o));
	CHECK(o->struct_size == sizeof(*o), "struct_size %zu, want %zu", o->struct_size,
	      sizeof(*o));
	CHECK(o->log_memory == 256u << 20 && o->page_size == 1u << 20,
	      "the old struct's fields got no defaults");
	for (int i = 0; i < GUARD; i++)
		CHECK(block[sizeof(*o) + i] == 0xa5, "options_default wrote past the old struct");
	o->log_memory = 4u << 20;
	o->page_size = 64u << 10;
	o->index_buckets = 1u << 10;
	o->flags = EMBER_OPEN_TRUNCATE;
	/* an exact-size copy: ASan sees any read past it */
	struct options_old *exact = malloc(sizeof(*exact));
	CHECK(exact != NULL, "oom");
	memcpy(exact, o, sizeof(*exact));
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, (const ember_options *)exact, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_put(s, "k", 1, "v", 1));

	/* stats into an old, smaller struct: exactly its bytes written */
	uint8_t *sblock = malloc(sizeof(struct stats_old) + GUARD);
	CHECK(sblock != NULL, "oom");
	memset(sblock, 0xa5, sizeof(struct stats_old) + GUARD);
	struct stats_old *so = (struct stats_old *)sblock;
	CHECK_OK(ember_stats_get_sized(db, (ember_stats *)so, sizeof(*so)));
	for (int i = 0; i < GUARD; i++)
		CHECK(sblock[sizeof(*so) + i] == 0xa5, "stats_get wrote past the old struct");
	ember_stats full;
	CHECK_OK(ember_stats_get(db, &full));
	CHECK(so->hot.records == 1 && full.hot.records == 1 && full.user_writes == 1,
	      "old struct: hot.records %llu, full: %llu", (unsigned long long)so->hot.records,
	      (unsigned long long)full.hot.records);
	CHECK(so->hot.bytes_memory == full.hot.bytes_memory, "old and full stats differ");
	struct stats_old *sexact = malloc(sizeof(*sexact));
	CHECK(sexact != NULL, "oom");
	CHECK_OK(ember_stats_get_sized(db, (ember_stats *)sexact, sizeof(*sexact)));
	CHECK(sexact->hot.records == 1, "exact-size old stats");
	CHECK_RC(ember_stats_get_sized(db, &full, 0), EMBER_EINVAL);

	/* the functions behind the macros, as dlsym finds them: this release's struct */
	ember_stats viafn;
	memset(&viafn, 0, sizeof(viafn));
	CHECK_OK((ember_stats_get)(db, &viafn));
	CHECK(viafn.user_writes == 1 && viafn.hot.records == 1, "ember_stats_get symbol");
	/* the function fills the first release's struct (it ends at log_arg), no more */
	ember_options d1, d2;
	size_t base = offsetof(ember_options, log_arg) + sizeof(void *);
	memset(&d1, 0xa5, sizeof(d1));
	(ember_options_default)(&d1);
	ember_options_default(&d2);
	CHECK(d1.struct_size == base, "function: struct_size %zu, want %zu", d1.struct_size, base);
	CHECK(memcmp((uint8_t *)&d1 + sizeof(size_t), (uint8_t *)&d2 + sizeof(size_t),
		     base - sizeof(size_t)) == 0,
	      "the function and the macro disagree");
	for (size_t i = base; i < sizeof(d1); i++)
		CHECK(((uint8_t *)&d1)[i] == 0xa5, "the function wrote byte %zu, past the first release's struct", i);
	CHECK(d2.struct_size == sizeof(ember_options), "struct_size %zu", d2.struct_size);

	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	free(sexact);
	free(sblock);
	free(exact);
	free(block);
}

static void test_zeroed_and_newer(const char *dir)
{
	/* zeroed: struct_size 0 is the first release's struct */
	ember_options z;
	memset(&z, 0, sizeof(z));
	z.log_memory = 4u << 20;
	z.page_size = 64u << 10;
	z.flags = EMBER_OPEN_TRUNCATE;
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &z, &db));
	CHECK_OK(ember_close(db));

	/* a newer caller's struct: what this library lacks must be zero */
	size_t big = sizeof(ember_options) + 32;
	uint8_t *nb = calloc(1, big);
	CHECK(nb != NULL, "oom");
	memcpy(nb, &z, sizeof(z));
	((ember_options *)nb)->struct_size = big;
	db = NULL;
	CHECK_OK(ember_open(dir, (ember_options *)nb, &db));
	CHECK_OK(ember_close(db));
	nb[sizeof(ember_options) + 5] = 1; /* an option this library does not know */
	db = (ember_db *)nb;
	CHECK_RC(ember_open(dir, (ember_options *)nb, &db), EMBER_EINVAL);
	CHECK(db == NULL, "a failed open left a handle");

	/* a newer caller's larger stats struct: the tail it knows and we do not is zeroed */
	uint8_t *sb = malloc(sizeof(ember_stats) + 32);
	CHECK(sb != NULL, "oom");
	memset(sb, 0xa5, sizeof(ember_stats) + 32);
	db = NULL;
	CHECK_OK(ember_open(dir, &z, &db));
	CHECK_OK(ember_stats_get_sized(db, (ember_stats *)sb, sizeof(ember_stats) + 32));
	for (size_t i = 0; i < 32; i++)
		CHECK(sb[sizeof(ember_stats) + i] == 0, "a newer caller's stats tail not zeroed");
	CHECK_OK(ember_close(db));
	free(sb);
	free(nb);
}

int main(int argc, char **argv)
{
	tu_init("test_abi_structs", argc, argv);
	char dir[512];
	CHECK(tu_tmpdir_make("abi", dir, sizeof(dir)) == 0, "mkdtemp");
	test_old_options(dir);
	test_zeroed_and_newer(dir);
	tu_tmpdir_remove(dir);
	printf("ok\n");
	return 0;
}
