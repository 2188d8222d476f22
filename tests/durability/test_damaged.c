/*
 * test_damaged.c - a damaged live record reads as EMBER_ECORRUPT (or EMBER_EIO),
 * never as "not found" and never as another value, through every read path.
 *
 * A store is built whose keys have known values, small and large (16 B to 150 KiB),
 * each written twice (version 1, then version 2), so that a lookup which skipped a
 * damaged version 2 would find version 1 (a wrong value) or nothing:
 *   hot    version 1 moved to the cold log by compaction, version 2 in the hot log
 *   cold   versions 1 and 2 both moved to the cold log
 *   chunk  live cold keys whose hash chunk (the cold index's record in cold.idx
 *          that names their cold chain) is damaged instead of their record: one
 *          byte of an entry, or (the last) marked a tombstone with its checksum
 *          made right, which only the chunk's own checks refuse
 * The store is closed, opened once as a control (every key reads its version 2,
 * ember_verify finds nothing), and closed. Then, in the files, each hot and cold
 * key's version-2 record gets one byte flipped (in turn: a value byte in the
 * middle, the last value byte, a key byte, the prev address, val_len, the
 * checksum, key_len, the tombstone bit, the invalid bit), and each chunk key's live chunk one byte of the entry that names the
 * key's chain. Every damaged place is below its log's checkpointed end's last 4 KiB
 * block, so a reopened store reads it from disk (docs/format.md 7.1).
 * The store is opened and each damaged key is read through ember_get,
 * ember_get_batch, ember_rmw (the callback must never run for it), ember_iterate
 * (never yields it) and ember_verify (counts the damage); then the store is closed
 * and opened again (recovery) and ember_get asked once more. Every answer must be
 * EMBER_ECORRUPT or EMBER_EIO. The undamaged keys keep reading their exact values.
 * Record offsets are found by scanning the files for each value's 16-byte marker;
 * log ends and chunk addresses come from the checkpoint's meta and cold.table
 * (docs/format.md 7.6).
 */
#include <ember.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/hash.h"
#include "index/cold_index.h" /* which entry of a chunk is a key's (ci_pick) */
#include "log/record.h" /* a chunk damaged with its checksum made right */
#include "test_util.h"

enum { HOT, COLD, CHUNK, PAD, SEP, NKIND };
static const char *const kind_name[NKIND] = {"hot", "cold", "chunk", "pad", "sep"};
#define NHOT 18 /* two of each flip */
#define NCOLD 18
#define NCHUNK_CAND 64 /* candidates for the chunk keys: the first 3 that qualify */
#define NCHUNK 4 /* the last one's chunk well-formed but a tombstone */
#define CHUNKS (1u << 13)
#define CHUNK_BYTES 64u
#define BUCKETS (1u << 12)
static uint64_t NPAD;
static uint64_t nsep; /* separators written so far (one after each version 2) */

static const size_t sizes[] = {16, 40, 200, 1000, 4100, 20000, 150000};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Where a hot or cold record is flipped, in turn. */
enum { F_VAL_MID, F_VAL_LAST, F_KEY, F_PREV, F_VAL_LEN, F_CHECKSUM, F_KEY_LEN, F_TOMBSTONE,
       F_INVALID, NFLIP };
static const char *const flip_name[NFLIP] = {
	"value (middle)", "value (last byte)", "key", "prev address", "val_len", "checksum",
	"key_len", "the tombstone bit", "the invalid bit"};

static char dir[512];
static uint8_t *vbuf, *rbuf; /* 150 KiB each */
#define VCAP (160u << 10)

static char last_line[512];
static void log_line(void *arg, const char *line)
{
	(void)arg;
	snprintf(last_line, sizeof(last_line), "%s", line);
}

static void opts(ember_options *o, uint32_t flags)
{
	ember_options_default(o);
	o->page_size = 64u << 10;
	o->log_memory = 512u << 10;
	o->cold_log_memory = 512u << 10;
	o->hot_disk_budget = 64u << 20; /* no pass but the forced ones */
	o->cold_disk_budget = 64u << 20;
	o->index_buckets = BUCKETS;
	o->cold_index_chunks = CHUNKS; /* 832 KiB of chunks: more than the chunk ring */
	o->cold_chunk_bytes = CHUNK_BYTES;
	o->io_queue_depth = 32;
	o->flags = flags;
	o->log_fn = log_line;
}

static size_t key_of(int kind, uint64_t i, char *k)
{
	return (size_t)sprintf(k, "dmg/%s/%llu", kind_name[kind], (unsigned long long)i);
}

static size_t size_of(int kind, uint64_t i)
{
	if (kind == PAD || kind == SEP)
		return 24 + i % 40;
	return sizes[(i + (uint64_t)kind) % NSIZES];
}

/* The value of (kind, i) at version ver: a 16-byte marker unique to all three,
 * then bytes derived from them. */
static size_t value(int kind, uint64_t i, uint64_t ver, uint8_t *buf)
{
	size_t n = size_of(kind, i);
	uint64_t id = ((uint64_t)kind << 40 | i) * 8 + ver;
	for (size_t o = 0; o < n; o += 8) {
		uint64_t w = tu_mix64(id * 1000003 + o);
		memcpy(buf + o, &w, n - o < 8 ? n - o : 8);
	}
	uint64_t m0 = tu_mix64(id ^ 0x6d61726b6572ull), m1 = tu_mix64(~id);
	memcpy(buf, &m0, 8);
	memcpy(buf + 8, &m1, 8);
	return n;
}

/* Version ver of keys 0..n-1 of kind. Each version 2 of a key to be damaged is
 * followed by a separator record, so that no two damaged records are adjacent in
 * a log (ember_verify counts a run of damaged records as one error: it
 * resynchronises on the next record that checks out). */
/* The version build() wrote last. */
static uint64_t newest(int kind, uint64_t i)
{
	if (kind == SEP)
		return 1;
	return kind == PAD && i >= NPAD / 4 ? 1 : 2;
}

static void put_all(ember_session *s, int kind, uint64_t n, uint64_t ver)
{
	char k[64];
	for (uint64_t i = 0; i < n; i++) {
		size_t kl = key_of(kind, i, k), vl = value(kind, i, ver, vbuf);
		CHECK_OK(ember_put(s, k, kl, vbuf, vl));
		if (ver == 2 && kind != PAD) {
			kl = key_of(SEP, nsep, k);
			vl = value(SEP, nsep++, 1, vbuf);
			CHECK_OK(ember_put(s, k, kl, vbuf, vl));
		}
	}
}

/* ---- the damaged keys --------------------------------------------------------------- */

struct target {
	int kind;
	uint64_t i;
	int flip; /* F_* for hot and cold; chunk: -1 */
	uint64_t chunk;
};
static struct target targets[NHOT + NCOLD + NCHUNK];
static int ntargets;
static uint8_t damaged_chunk[CHUNKS];

static int is_target(int kind, uint64_t i)
{
	for (int t = 0; t < ntargets; t++)
		if (targets[t].kind == kind && targets[t].i == i)
			return 1;
	return 0;
}

/* A key's hot chain (home bucket and tag) and cold chain (chunk and entry):
 * docs/format.md 2.1 and 6. */
static uint64_t hot_chain(uint64_t h) { return (h & (BUCKETS - 1)) | (h >> 50) << 32; }
static uint64_t cold_chain(uint64_t h)
{
	return ((h >> 20) & (CHUNKS - 1)) << 16 | ((h >> 8) & (CHUNK_BYTES / 8 - 1));
}

static uint64_t target_hash(const struct target *t)
{
	char k[64];
	size_t kl = key_of(t->kind, t->i, k);
	return em_hash(k, kl);
}

/* A key outside the targets may read as an error only when its lookup passes damage
 * too: its chunk is damaged, or its hot or cold chain holds a damaged record. */
static int may_fail(int kind, uint64_t i)
{
	char k[64];
	size_t kl = key_of(kind, i, k);
	uint64_t h = em_hash(k, kl);
	if (damaged_chunk[(h >> 20) & (CHUNKS - 1)])
		return 1;
	for (int t = 0; t < ntargets; t++) {
		uint64_t th = target_hash(&targets[t]);
		if ((targets[t].kind == HOT && hot_chain(th) == hot_chain(h)) ||
		    (targets[t].kind == COLD && cold_chain(th) == cold_chain(h)))
			return 1;
	}
	return 0;
}

/* ---- files ----------------------------------------------------------------------------- */

static void path_of(char *out, size_t cap, const char *name)
{
	CHECK(tu_path_join(out, cap, dir, name) == 0, "path");
}

static uint8_t *slurp(const char *name, size_t *len)
{
	char p[700];
	path_of(p, sizeof(p), name);
	int fd = open(p, O_RDONLY);
	CHECK(fd >= 0, "open %s: %s", p, strerror(errno));
	struct stat st;
	CHECK(fstat(fd, &st) == 0, "stat");
	uint8_t *b = malloc((size_t)st.st_size + 1);
	CHECK(b, "malloc");
	CHECK(pread(fd, b, (size_t)st.st_size, 0) == st.st_size, "read %s", p);
	close(fd);
	*len = (size_t)st.st_size;
	return b;
}

static void flip_file(const char *name, uint64_t off, uint8_t mask)
{
	char p[700];
	path_of(p, sizeof(p), name);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0, "open %s", p);
	uint8_t b = 0;
	CHECK(pread(fd, &b, 1, (off_t)off) == 1, "pread");
	b ^= mask;
	CHECK(pwrite(fd, &b, 1, (off_t)off) == 1, "pwrite");
	close(fd);
}

/* Mark the chunk copy at addr of cold.idx (image idx) a tombstone, with its checksum
 * recomputed: it passes every check of a record read back, but a chunk is never a
 * tombstone (cold_index.h, ci_chunk_ok). */
static void chunk_tombstone(const uint8_t *idx, uint64_t addr)
{
	_Alignas(8) uint8_t rec[REC_HDR_SIZE + 8 + CHUNK_BYTES];
	memcpy(rec, idx + addr, sizeof(rec));
	struct record *r = (struct record *)(void *)rec;
	uint64_t hdr = rec_header(r);
	CHECK(hdr == 0 && r->checksum == rec_checksum(r), "chunk at %llu: header %llx",
	      (unsigned long long)addr, (unsigned long long)hdr);
	atomic_store_explicit(&r->header, REC_TOMBSTONE, memory_order_relaxed);
	r->checksum = rec_checksum(r);
	char p[700];
	path_of(p, sizeof(p), "cold.idx");
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0, "open %s", p);
	CHECK(pwrite(fd, rec, 16, (off_t)addr) == 16, "pwrite"); /* header, seq, checksum */
	close(fd);
}

/* The newest checkpoint's directory name (16 hex digits). */
static void newest_ckpt(char *out, size_t cap)
{
	char p[700];
	path_of(p, sizeof(p), "checkpoints");
	DIR *d = opendir(p);
	CHECK(d, "opendir %s", p);
	struct dirent *e;
	out[0] = 0;
	while ((e = readdir(d)))
		if (strlen(e->d_name) == 16 && strcmp(e->d_name, out) > 0)
			snprintf(out, cap, "%s", e->d_name);
	closedir(d);
	CHECK(out[0], "no checkpoint");
}

static uint64_t get64(const uint8_t *b, size_t off)
{
	uint64_t v;
	memcpy(&v, b + off, 8);
	return v;
}

/* ---- building, and the damage ---------------------------------------------------------- */

static void build(void)
{
	ember_options o;
	opts(&o, EMBER_OPEN_TRUNCATE);
	ember_db *db = NULL;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_session *s = NULL;
	CHECK_OK(ember_session_open(db, &s));
	put_all(s, HOT, NHOT, 1);
	put_all(s, COLD, NCOLD, 1);
	put_all(s, CHUNK, NCHUNK_CAND, 1);
	put_all(s, PAD, NPAD / 2, 1);
	CHECK_OK(ember_compact(db, 1)); /* all of it cold */
	put_all(s, COLD, NCOLD, 2);
	put_all(s, CHUNK, NCHUNK_CAND, 2);
	CHECK_OK(ember_compact(db, 1)); /* versions 2 cold */
	put_all(s, PAD, NPAD, 1);       /* more cold records and chunks after them */
	CHECK_OK(ember_compact(db, 1));
	put_all(s, HOT, NHOT, 2);
	put_all(s, PAD, NPAD / 4, 2); /* hot records after them: below the tail block */
	CHECK_OK(ember_session_close(s));
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	printf("  store: hot %llu B, cold %llu B, chunks %llu B on disk; %llu hot->cold, "
	       "%llu cold passes\n", (unsigned long long)st.hot.bytes_disk,
	       (unsigned long long)st.cold.bytes_disk, (unsigned long long)st.chunk_log_bytes_disk,
	       (unsigned long long)st.hot.compactions, (unsigned long long)st.cold.compactions);
	CHECK(st.hot.compactions >= 3, "the forced hot->cold passes ran");
	CHECK_OK(ember_close(db));
}

/*
 * Flip one byte of every copy of (kind, i)'s version-2 record in log (the live one
 * and any stale copy in a filler's body: a record found by its value's marker, with
 * its key and lengths in place). Returns how many copies below limit were found.
 */
static int damage_record(const char *log, const uint8_t *file, size_t len, uint64_t limit,
			 int kind, uint64_t i, int flip)
{
	char k[64];
	size_t kl = key_of(kind, i, k), vl = value(kind, i, 2, vbuf);
	size_t kpad = (kl + 7) & ~(size_t)7;
	int found = 0;
	for (size_t off = 64 + 32 + kpad; off + vl <= len; off += 8) {
		if (memcmp(file + off, vbuf, 16) != 0)
			continue;
		size_t rec = off - 32 - kpad;
		uint32_t klen, vlen;
		memcpy(&klen, file + rec + 16, 4);
		memcpy(&vlen, file + rec + 20, 4);
		if (klen != kl || vlen != vl || memcmp(file + rec + 32, k, kl) != 0)
			continue;
		CHECK(rec + 32 + kpad + vl <= limit,
		      "%s %llu: its record at %s offset %zu is in the last block before the "
		      "log's end %llu (the test's layout changed)", kind_name[kind],
		      (unsigned long long)i, log, rec, (unsigned long long)limit);
		uint64_t at;
		uint8_t mask = 0x10;
		switch (flip) {
		case F_VAL_MID: at = off + vl / 2; break;
		case F_VAL_LAST: at = off + vl - 1; break;
		case F_KEY: at = rec + 32 + kl - 1; mask = 0x01; break;
		case F_PREV: at = rec + 1; mask = 0x02; break; /* prev bit 9 */
		case F_VAL_LEN: at = rec + 20; mask = 0x04; break;
		case F_CHECKSUM: at = rec + 12; mask = 0x80; break;
		case F_KEY_LEN: at = rec + 16; mask = 0x02; break;
		case F_TOMBSTONE: at = rec + 6; mask = 0x01; break; /* header bit 48 */
		default: at = rec + 6; mask = 0x02; break;         /* header bit 49 */
		}
		flip_file(log, at, mask);
		found++;
	}
	return found;
}

static void damage(void)
{
	char ck[32], p[128];
	newest_ckpt(ck, sizeof(ck));
	size_t len;
	snprintf(p, sizeof(p), "checkpoints/%s/meta", ck);
	uint8_t *meta = slurp(p, &len);
	CHECK(len == 4096, "meta size %zu", len);
	/* below the last 4 KiB block before each end: a reopen reads it from disk */
	uint64_t hot_lim = get64(meta, 104) & ~4095ull, cold_lim = get64(meta, 120) & ~4095ull,
		 chunk_lim = get64(meta, 136) & ~4095ull;
	free(meta);
	snprintf(p, sizeof(p), "checkpoints/%s/cold.table", ck);
	uint8_t *table = slurp(p, &len);
	CHECK(len >= CHUNKS * 8, "cold.table size %zu", len);

	size_t hlen, clen, ilen;
	uint8_t *hot = slurp("hot.log", &hlen), *cold = slurp("cold.log", &clen),
		*idx = slurp("cold.idx", &ilen);
	for (uint64_t i = 0; i < NHOT; i++) {
		int f = (int)(i % NFLIP);
		int n = damage_record("hot.log", hot, hlen, hot_lim, HOT, i, f);
		CHECK(n >= 1, "hot %llu: no version-2 record in hot.log", (unsigned long long)i);
		targets[ntargets++] = (struct target){HOT, i, f, 0};
	}
	for (uint64_t i = 0; i < NCOLD; i++) {
		int f = (int)((i + 3) % NFLIP);
		int n = damage_record("cold.log", cold, clen, cold_lim, COLD, i, f);
		CHECK(n >= 1, "cold %llu: no version-2 record in cold.log", (unsigned long long)i);
		targets[ntargets++] = (struct target){COLD, i, f, 0};
	}
	/* chunk keys: live chunk copies on disk, one chunk each, no hot or cold target
	 * in it (so that only the chunk is damaged on their way) */
	int nchunk = 0;
	for (uint64_t i = 0; i < NCHUNK_CAND && nchunk < NCHUNK; i++) {
		char k[64];
		size_t kl = key_of(CHUNK, i, k);
		uint64_t h = em_hash(k, kl), c = (h >> 20) & (CHUNKS - 1);
		uint64_t addr = get64(table, 8 * c) & ((1ull << 48) - 1);
		if (addr == 0 || addr + 40 + CHUNK_BYTES > chunk_lim || damaged_chunk[c])
			continue;
		CHECK(addr + 40 + CHUNK_BYTES <= ilen, "chunk %llu past cold.idx's end",
		      (unsigned long long)c);
		uint32_t klen, vlen;
		memcpy(&klen, idx + addr + 16, 4);
		memcpy(&vlen, idx + addr + 20, 4);
		CHECK(klen == 8 && vlen == CHUNK_BYTES && get64(idx, addr + 32) == c,
		      "cold.idx at %llu is not chunk %llu", (unsigned long long)addr,
		      (unsigned long long)c);
		/* the entry of the key's chain: ci_pick over the copy (a new store's index
		 * is tagged, cold_index.h note 10) */
		struct cold_index geo = {.nchunks = CHUNKS, .chunk_mask = CHUNKS - 1,
					 .chunk_bytes = CHUNK_BYTES, .entries = CHUNK_BYTES / 8,
					 .tagged = 1};
		uint64_t word;
		uint64_t entry = ci_pick(&geo, (const _Atomic uint64_t *)(const void *)(idx + addr + 40),
					 h, &word);
		CHECK(word != 0 && get64(idx, addr + 40 + 8 * entry) == word,
		      "chunk key %llu: empty entry", (unsigned long long)i);
		if (nchunk < NCHUNK - 1)
			flip_file("cold.idx", addr + 40 + 8 * entry + 3, 0x08); /* address bit 27 */
		else
			chunk_tombstone(idx, addr);
		damaged_chunk[c] = 1;
		targets[ntargets++] = (struct target){CHUNK, i, -1, c};
		nchunk++;
	}
	CHECK(nchunk == NCHUNK, "only %d of %llu chunk keys have their chunk on disk", nchunk,
	      (unsigned long long)NCHUNK_CAND);
	/* a hot or cold target sharing a damaged chunk is fine: it must fail anyway */
	printf("  damaged: %d hot records, %d cold records, %d chunks\n", NHOT, NCOLD, NCHUNK);
	free(hot);
	free(cold);
	free(idx);
	free(table);
}

/* ---- reading ------------------------------------------------------------------------- */

static int bad_rc(int rc) { return rc == EMBER_ECORRUPT || rc == EMBER_EIO; }

static const char *tname(const struct target *t, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s key %llu (%zu B, %s)", kind_name[t->kind], (unsigned long long)t->i,
		 size_of(t->kind, t->i), t->flip >= 0 ? flip_name[t->flip] : "its chunk");
	return buf;
}

/* Every key that is not damaged reads its newest version exactly; returns how many
 * keys read as errors (only those that may_fail). */
static uint64_t check_good(ember_session *s, int all)
{
	const uint64_t n[NKIND] = {NHOT, NCOLD, NCHUNK_CAND, NPAD, nsep};
	uint64_t errors = 0;
	char k[64];
	for (int kind = 0; kind < NKIND; kind++) {
		for (uint64_t i = 0; i < n[kind]; i++) {
			if (all == 0 && is_target(kind, i))
				continue;
			size_t kl = key_of(kind, i, k), vl = 0;
			size_t wl = value(kind, i, newest(kind, i), vbuf);
			int rc = ember_get(s, k, kl, rbuf, VCAP, &vl);
			if (rc != 0 && bad_rc(rc) && may_fail(kind, i)) {
				errors++;
				continue;
			}
			CHECK(rc == 0, "%s key %llu (not damaged): %s", kind_name[kind],
			      (unsigned long long)i, ember_strerror(rc));
			CHECK(vl == wl && memcmp(rbuf, vbuf, wl) == 0, "%s key %llu: a wrong value",
			      kind_name[kind], (unsigned long long)i);
		}
	}
	return errors;
}

static void check_gets(ember_session *s, const char *when)
{
	char k[64], nm[128];
	for (int t = 0; t < ntargets; t++) {
		size_t kl = key_of(targets[t].kind, targets[t].i, k), vl = 0;
		int rc = ember_get(s, k, kl, rbuf, VCAP, &vl);
		CHECK(bad_rc(rc), "%s: ember_get of %s: %d (%s), want EMBER_ECORRUPT", when,
		      tname(&targets[t], nm, sizeof(nm)), rc, ember_strerror(rc));
	}
}

static void check_batch(ember_session *s)
{
	enum { N = NHOT + NCOLD + NCHUNK + 8 };
	static char keys[N][64];
	const void *kp[N];
	size_t kl[N], caps[N], vls[N];
	void *bp[N];
	int st[N];
	uint8_t *bufs = malloc((size_t)N * VCAP);
	CHECK(bufs, "malloc");
	size_t n = 0;
	for (int t = 0; t < ntargets; t++, n++)
		kl[n] = key_of(targets[t].kind, targets[t].i, keys[n]);
	size_t ngood = 0;
	for (uint64_t i = 0; n < N && i < NPAD; i++) /* good keys among them */
		if (!may_fail(PAD, i)) {
			kl[n] = key_of(PAD, i, keys[n]);
			n++;
			ngood++;
		}
	for (size_t i = 0; i < n; i++) {
		kp[i] = keys[i];
		bp[i] = bufs + i * VCAP;
		caps[i] = VCAP;
	}
	CHECK_OK(ember_get_batch(s, n, kp, kl, bp, caps, vls, st));
	char nm[128];
	for (size_t i = 0; i < (size_t)ntargets; i++)
		CHECK(bad_rc(st[i]), "ember_get_batch of %s: %d (%s), want EMBER_ECORRUPT",
		      tname(&targets[i], nm, sizeof(nm)), st[i], ember_strerror(st[i]));
	for (size_t i = (size_t)ntargets; i < n; i++) {
		uint64_t pi = strtoull(keys[i] + strlen("dmg/pad/"), NULL, 10);
		size_t wl = value(PAD, pi, newest(PAD, pi), vbuf);
		CHECK(st[i] == 0 && vls[i] == wl && memcmp(bufs + i * VCAP, vbuf, wl) == 0,
		      "ember_get_batch of good key %s: %d", keys[i], st[i]);
	}
	CHECK(ngood > 0, "no good key in the batch");
	free(bufs);
}

static int rmw_calls;
static int rmw_fn(void *arg, const void *old, size_t old_len, void *out, size_t out_cap,
		  size_t *out_len)
{
	(void)arg;
	(void)old;
	(void)old_len;
	(void)out;
	(void)out_cap;
	rmw_calls++;
	*out_len = 0;
	return 0;
}

static void check_rmw(ember_session *s)
{
	char k[64], nm[128];
	for (int t = 0; t < ntargets; t++) {
		size_t kl = key_of(targets[t].kind, targets[t].i, k);
		rmw_calls = 0;
		int rc = ember_rmw(s, k, kl, rmw_fn, NULL);
		CHECK(bad_rc(rc) && rmw_calls == 0,
		      "ember_rmw of %s: %d (%s), callback ran %d times (want EMBER_ECORRUPT, "
		      "never called)", tname(&targets[t], nm, sizeof(nm)), rc, ember_strerror(rc),
		      rmw_calls);
	}
}

struct iter_state {
	uint64_t seen, targets_seen;
	char first_bad[80];
};

static int iter_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	struct iter_state *it = arg;
	char k[80];
	CHECK(klen < sizeof(k), "key length %zu", klen);
	memcpy(k, key, klen);
	k[klen] = 0;
	it->seen++;
	char kn[16];
	unsigned long long ki;
	for (int kind = 0; kind < NKIND; kind++) {
		if (sscanf(k, "dmg/%15[a-z]/%llu", kn, &ki) != 2 || strcmp(kn, kind_name[kind]))
			continue;
		uint64_t i = ki;
		if (is_target(kind, i) && it->first_bad[0] == 0) {
			snprintf(it->first_bad, sizeof(it->first_bad), "%s", k);
			it->targets_seen++;
		}
		size_t wl = value(kind, i, newest(kind, i), vbuf);
		CHECK(vlen == wl && memcmp(val, vbuf, wl) == 0, "ember_iterate: %s with a wrong value",
		      k);
		return 0;
	}
	CHECK(0, "ember_iterate: a key never written: %s", k);
	return 0;
}

static void check_iterate_verify(ember_db *db)
{
	struct iter_state it = {0};
	int rc = ember_iterate(db, iter_fn, &it);
	CHECK(bad_rc(rc), "ember_iterate: %d (%s) after %llu keys, want EMBER_ECORRUPT", rc,
	      ember_strerror(rc), (unsigned long long)it.seen);
	CHECK(it.targets_seen == 0, "ember_iterate yielded the damaged key %s", it.first_bad);
	ember_verify_report rep;
	rc = ember_verify(db, &rep);
	CHECK(rc == EMBER_ECORRUPT, "ember_verify: %d (%s)", rc, ember_strerror(rc));
	/* each damaged record is one error (separators keep them apart in the hot and
	 * cold logs); a damaged chunk fails its table word, and its record in the walk
	 * of cold.idx unless it follows another damaged chunk (the walk resynchronises
	 * past both: one error) */
	CHECK(rep.errors >= NHOT + NCOLD + NCHUNK && rep.errors <= NHOT + NCOLD + 2 * NCHUNK,
	      "ember_verify: %llu errors for %d damaged records and %d chunks",
	      (unsigned long long)rep.errors, NHOT + NCOLD, NCHUNK);
	printf("  iterate: %s after %llu keys; verify: %llu errors, first: %s\n",
	       ember_strerror(rc), (unsigned long long)it.seen, (unsigned long long)rep.errors,
	       rep.first_error);
}

int main(int argc, char **argv)
{
	tu_init("damaged", argc, argv);
	NPAD = tu_scaled(24000) < 12000 ? 12000 : tu_scaled(24000);
	vbuf = malloc(VCAP);
	rbuf = malloc(VCAP);
	CHECK(vbuf && rbuf, "malloc");
	CHECK(tu_tmpdir_make("damaged", dir, sizeof(dir)) == 0, "tmpdir");
	build();

	ember_options o;
	opts(&o, 0);
	ember_db *db = NULL;
	ember_session *s = NULL;
	/* the control: every key reads its newest version; verify finds nothing */
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	CHECK(check_good(s, 1) == 0, "errors before any damage");
	ember_verify_report rep;
	CHECK_OK(ember_verify(db, &rep));
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));

	damage();
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	check_gets(s, "open");
	check_batch(s);
	check_rmw(s);
	uint64_t collateral = check_good(s, 0);
	check_iterate_verify(db);
	check_gets(s, "after iterate and verify");
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));

	/* recovery again: the damage is still reported, never dropped */
	int rc = ember_open(dir, &o, &db);
	if (rc == 0) {
		CHECK_OK(ember_session_open(db, &s));
		check_gets(s, "reopened");
		collateral += check_good(s, 0);
		CHECK_OK(ember_session_close(s));
		CHECK_OK(ember_close(db));
	} else {
		CHECK(rc == EMBER_ECORRUPT, "reopen: %d (%s)", rc, ember_strerror(rc));
	}
	printf("  %llu other keys read as errors (a damaged chunk or chain on their way)\n",
	       (unsigned long long)collateral);
	tu_tmpdir_remove(dir);
	free(vbuf);
	free(rbuf);
	printf("damaged: OK\n");
	return 0;
}
