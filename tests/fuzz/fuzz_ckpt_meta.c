/*
 * fuzz_ckpt_meta.c - libFuzzer target: ckpt_meta_parse, the decoder of a checkpoint's
 * meta file (src/store/checkpoint_meta.c; layout in docs/format.md 7.6).
 *
 * Byte 0 of an input chooses whether its checksum (the last 8 bytes of a
 * 4096-byte meta) is recomputed first (odd: yes), so most inputs get past the
 * checksum to the field checks behind it; the rest is the file. The parser must
 * return 0 or EMBER_ENOTEMBER / EMBER_ECORRUPT / EMBER_EVERSION and read nothing
 * past the input (AddressSanitizer); a meta it accepts must have the ranges it
 * promises, and encoding it again must give a meta that parses to the same fields
 * (encode and parse agree).
 *
 * Seed corpus: EMBER_FUZZ_GEN_CORPUS=DIR fuzz_ckpt_meta writes a valid meta (as the
 * store writes it), one of another version and one cut short, and exits.
 */
#include <ember.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/address.h"
#include "store/checkpoint.h"

#define FZ_CHECK(cond, ...)                                                          \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "fuzz_ckpt_meta: %s:%d: %s: ", __FILE__, __LINE__,  \
				#cond);                                             \
			fprintf(stderr, __VA_ARGS__);                               \
			fprintf(stderr, "\n");                                      \
			abort();                                                    \
		}                                                                   \
	} while (0)

static void seed(const char *dir, const char *name, uint8_t fix, const uint8_t *b, size_t n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	FZ_CHECK(f, "cannot write %s", path);
	fwrite(&fix, 1, 1, f);
	fwrite(b, 1, n, f);
	fclose(f);
}

static void gen_corpus(const char *dir)
{
	static uint8_t b[CKPT_META_SIZE];
	struct ckpt_meta m = {
		.id = 3, .time_unix = 1700000000,
		.geo = {.page_size = 1u << 20, .hot_mem = 256u << 20, .cold_mem = 64u << 20,
			.chunk_mem = 16u << 20, .index_buckets = 1u << 18,
			.cold_index_chunks = 1u << 16, .cold_chunk_bytes = 256},
		.hot_begin = 64, .hot_replay = 1u << 20, .hot_end = 3u << 20,
		.cold_begin = 64, .cold_end = 5u << 20, .chunk_begin = 64, .chunk_end = 1u << 20,
		.index_entries = 1000, .index_sum = 0x1234, .table_bytes = (1u << 16) * 8,
		.table_sum = 0x5678};
	ckpt_meta_encode(&m, b);
	seed(dir, "valid", 0, b, sizeof(b));
	b[8] = 2; /* version 2 */
	seed(dir, "version2_fixed", 1, b, sizeof(b));
	ckpt_meta_encode(&m, b);
	seed(dir, "cut_short", 0, b, 100);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *gen = getenv("EMBER_FUZZ_GEN_CORPUS");
	if (gen) {
		gen_corpus(gen);
		exit(0);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t n = size - 1;
	uint8_t *b = malloc(n ? n : 1); /* exactly n bytes: ASan sees any read past them */
	FZ_CHECK(b, "malloc");
	memcpy(b, data + 1, n);
	if ((data[0] & 1) && n == CKPT_META_SIZE) {
		uint64_t sum = XXH3_64bits(b, CKPT_META_SIZE - 8);
		memcpy(b + CKPT_META_SIZE - 8, &sum, 8);
	}
	struct ckpt_meta m;
	memset(&m, 0, sizeof(m));
	int rc = ckpt_meta_parse(b, n, &m);
	free(b);
	if (rc != 0) {
		FZ_CHECK(rc == EMBER_ENOTEMBER || rc == EMBER_ECORRUPT || rc == EMBER_EVERSION,
			 "parse returned %d (%s)", rc, ember_strerror(rc));
		return 0;
	}
	/* what an accepted meta promises (docs/format.md 7.6) */
	FZ_CHECK(m.id > 0, "id 0");
	FZ_CHECK(m.hot_begin >= EM_LOG_START && m.hot_begin <= m.hot_replay &&
			 m.hot_replay <= m.hot_end && m.hot_end <= EM_ADDR_MASK,
		 "hot extents");
	FZ_CHECK(m.cold_begin >= EM_LOG_START && m.cold_begin <= m.cold_end &&
			 m.cold_end <= EM_ADDR_MASK,
		 "cold extents");
	FZ_CHECK(m.chunk_begin >= EM_LOG_START && m.chunk_begin <= m.chunk_end &&
			 m.chunk_end <= EM_ADDR_MASK,
		 "chunk extents");
	FZ_CHECK(m.table_bytes == m.geo.cold_index_chunks * 8, "table bytes");
	/* encode and parse agree */
	static uint8_t again[CKPT_META_SIZE];
	struct ckpt_meta m2;
	memset(&m2, 0, sizeof(m2));
	ckpt_meta_encode(&m, again);
	rc = ckpt_meta_parse(again, sizeof(again), &m2);
	FZ_CHECK(rc == 0, "a re-encoded meta does not parse: %d", rc);
	FZ_CHECK(memcmp(&m, &m2, sizeof(m)) == 0, "re-encoding changed a field");
	return 0;
}
