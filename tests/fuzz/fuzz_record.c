/*
 * fuzz_record.c - libFuzzer target: the checks every record read back from disk
 * passes through (rec_read_at and rec_check in src/log/record_reader.c, the one
 * record reader: sizes, lengths, the whole record present, checksum; then
 * ci_chunk_ok and ci_entry for chunk records).
 *
 * Each input is a disk block: byte 0-1 pick where in the block the record starts
 * (8-aligned, as every record is), byte 2 how large a record the reader accepts;
 * the rest is written to a scratch file at offset 4096, and rec_read_at reads it
 * back through a real session's io_uring (session_read_fn, as read_record_sync
 * does, with the chosen largest record). Whatever the
 * bytes, it must return 0 or a clean error; when it returns 0 the record must lie
 * entirely inside the bytes the file holds, have sane lengths and a matching
 * checksum, and its key and value are read in full (AddressSanitizer checks the
 * accesses).
 *
 * Seed corpus: EMBER_FUZZ_GEN_CORPUS=DIR fuzz_record writes a few valid records
 * (a value record, a tombstone, a chunk, a filler, a record cut short) into DIR and
 * exits; tests/fuzz/corpus/record was made that way (docs/faults.md).
 */
#include <ember.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "log/record.h"
#include "log/record_reader.h"
#include "store/store_int.h"

#define BLOCK_OFF 4096u

static char dir[256];
static ember_db *db;
static ember_session *sess;
static struct em_file file;
static int wfd = -1;

#define FZ_CHECK(cond, ...)                                                          \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "fuzz_record: %s:%d: %s: ", __FILE__, __LINE__,     \
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

/* Write one seed: header bytes (pos, max_record selector) then the block. */
static void seed(const char *out, const char *name, uint16_t pos, uint8_t maxsel,
		 const uint8_t *block, size_t n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", out, name);
	FILE *f = fopen(path, "wb");
	FZ_CHECK(f, "cannot write %s", path);
	uint8_t hdr[3] = {(uint8_t)pos, (uint8_t)(pos >> 8), maxsel};
	fwrite(hdr, 1, 3, f);
	fwrite(block, 1, n, f);
	fclose(f);
}

static void gen_corpus(const char *out)
{
	static uint8_t block[8192];
	struct record *r;
	uint64_t k = 0x1122334455667788ull;
	uint8_t val[200];
	for (size_t i = 0; i < sizeof(val); i++)
		val[i] = (uint8_t)(i * 7);

	memset(block, 0, sizeof(block));
	r = (struct record *)(void *)(block + 64);
	rec_init(r, 0, 0, &k, 8, val, sizeof(val), rec_cap_for(sizeof(val)));
	r->checksum = rec_checksum(r);
	seed(out, "value", 64, 0, block, 64 + rec_total_size(r));

	memset(block, 0, sizeof(block));
	r = (struct record *)(void *)(block + 8);
	rec_init(r, 4096, REC_TOMBSTONE, "a longer key of 27 bytes..", 27, NULL, 0, 0);
	r->checksum = rec_checksum(r);
	seed(out, "tombstone", 8, 0, block, 8 + rec_total_size(r));

	/* a chunk record: key = chunk id, value = chunk_bytes of entry words */
	memset(block, 0, sizeof(block));
	uint64_t chunk = 5, entries[32];
	for (int i = 0; i < 32; i++)
		entries[i] = i % 3 ? 0 : 64 + 8 * (uint64_t)i;
	r = (struct record *)(void *)block;
	rec_init(r, 0, 0, &chunk, 8, entries, sizeof(entries), sizeof(entries));
	r->checksum = rec_checksum(r);
	seed(out, "chunk", 0, 1, block, rec_total_size(r));

	/* a filler (key length 0: the reader must refuse it) */
	memset(block, 0, sizeof(block));
	r = (struct record *)(void *)(block + 16);
	atomic_init(&r->header, REC_FILLER | REC_INVALID);
	r->val_cap = 96;
	r->checksum = rec_checksum(r);
	seed(out, "filler", 16, 0, block, 16 + 32 + 96);

	/* a record larger than the first read (FIRST_READ_MIN), then cut short */
	memset(block, 0, sizeof(block));
	r = (struct record *)(void *)(block + 3000);
	static uint8_t big[3000];
	memset(big, 0x5a, sizeof(big));
	rec_init(r, 64, 0, &k, 8, big, sizeof(big), sizeof(big));
	r->checksum = rec_checksum(r);
	seed(out, "spans_blocks", 3000, 2, block, 3000 + rec_total_size(r));
	seed(out, "cut_short", 3000, 2, block, 3000 + rec_total_size(r) - 100);
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
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/ember-fuzz-record-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	FZ_CHECK(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	ember_options o;
	ember_options_default(&o);
	o.page_size = 64u << 10;
	o.log_memory = 8 * o.page_size;
	o.index_buckets = 256;
	o.cold_index_chunks = 64;
	o.cold_chunk_bytes = 256;
	o.io_queue_depth = 4;
	o.flags = EMBER_OPEN_TRUNCATE;
	o.log_fn = quiet;
	int rc = ember_open(dir, &o, &db);
	FZ_CHECK(rc == 0, "ember_open: %s", ember_strerror(rc));
	rc = ember_session_open(db, &sess);
	FZ_CHECK(rc == 0, "session: %s", ember_strerror(rc));
	char path[512];
	snprintf(path, sizeof(path), "%s/fuzz.blk", dir);
	rc = em_file_open(&file, path, EM_FILE_CREATE | EM_FILE_TRUNCATE);
	FZ_CHECK(rc == 0, "open %s: %d", path, rc);
	wfd = open(path, O_WRONLY | O_CLOEXEC);
	FZ_CHECK(wfd >= 0, "open %s: %s", path, strerror(errno));
	/* the store, session and file live until the process ends: libFuzzer has no
	 * teardown hook, and leak checking only counts what an input leaves behind */
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	uint64_t pos = (uint64_t)(data[0] | (data[1] << 8)) % EM_IO_ALIGN & ~UINT64_C(7);
	/* the largest record accepted: the store's, or small ones that the checks
	 * must enforce too */
	static const uint64_t maxes[4] = {0, 256 + 40, 4096, 64};
	uint64_t max_record = maxes[data[2] % 4] ? maxes[data[2] % 4] : db->max_record;
	const uint8_t *blk = data + 3;
	size_t n = size - 3;
	FZ_CHECK(ftruncate(wfd, 0) == 0, "ftruncate: %s", strerror(errno));
	if (n)
		FZ_CHECK(pwrite(wfd, blk, n, BLOCK_OFF) == (ssize_t)n, "pwrite: %s", strerror(errno));
	uint64_t addr = BLOCK_OFF + pos; /* above the log's begin: a bad record is corrupt */
	uint64_t file_end = BLOCK_OFF + n;

	struct record *r = NULL;
	struct sync_src src = {sess, &file};
	struct rec_rules ru = {.log = db->hot, .max_cap = max_record};
	const char *why = NULL;
	sess->rchunk = 0; /* rbuf is about to hold something else */
	int rc = rec_read_at(session_read_fn, &src, em_file_read_align(&file), &sess->rbuf,
			     &sess->rbuf_cap, addr, FIRST_READ_MIN, &ru, &r, &why);
	if (rc < 0) {
		FZ_CHECK(rc == EMBER_ECORRUPT || rc == EMBER_ENOMEM || rc == EMBER_EIO ||
				 (rc > -4096 && rc != EMBER_EAGAIN),
			 "rec_read_at returned %d (%s)", rc, ember_strerror(rc));
		FZ_CHECK(!sess->pool.broken, "the session's ring broke on a plain read");
		return 0;
	}
	FZ_CHECK(rc == 0 && r, "rc %d", rc);
	/* what the reader promises about a record it accepts */
	uint64_t size_total = rec_total_size(r);
	uint32_t vlen = atomic_load_explicit(&r->val_len, memory_order_relaxed);
	FZ_CHECK(addr + size_total <= file_end, "record [%llu, +%llu) past the file's end %llu",
		 (unsigned long long)addr, (unsigned long long)size_total,
		 (unsigned long long)file_end);
	FZ_CHECK(r->key_len >= 1 && r->key_len <= EMBER_MAX_KEY_LEN, "key_len %u", r->key_len);
	FZ_CHECK(vlen <= r->val_cap && !(r->val_cap & 7) && r->val_cap <= max_record,
		 "val_len %u val_cap %u", vlen, r->val_cap);
	FZ_CHECK(r->checksum == rec_checksum(r), "checksum");
	FZ_CHECK(memcmp(r, blk + pos, REC_HDR_SIZE) == 0, "the record is not the bytes at addr");
	/* every byte of key and value is readable (ASan checks the buffer) */
	uint8_t *copy = malloc(r->key_len + (size_t)vlen + 1);
	FZ_CHECK(copy, "malloc");
	memcpy(copy, rec_key(r), r->key_len);
	rec_value_load(r, copy + r->key_len, vlen);
	FZ_CHECK(memcmp(copy, blk + pos + REC_HDR_SIZE, r->key_len) == 0, "key bytes");
	free(copy);
	/* as a chunk of the cold index: ci_chunk_ok, then entries through ci_entry */
	struct cold_index *ci = &db->cidx;
	if (r->key_len == 8) {
		uint64_t id;
		memcpy(&id, rec_key(r), 8);
		if (ci_chunk_ok(ci, r, id % ci->nchunks)) {
			for (uint64_t h = 0; h < 4; h++) {
				uint64_t hash = ((id % ci->nchunks) << 20) | (h * 0x9e3779b97f4a7c15ull >> 44 << 8);
				(void)ci_entry(ci, r, hash);
			}
		}
	}
	return 0;
}
