/*
 * test_chunk_cache_damage.c - damage on disk under a chunk the chunk cache holds
 * (docs/cold_cache.md, invariant 6). Keys are compacted into the cold log with a
 * chunk ring far smaller than the chunks, so most chunks leave memory and the
 * eviction fill caches them. Then one byte of a key's chain entry is flipped in a
 * cached chunk copy in cold.idx, while the store is open:
 *  - reads of every key still return its exact value (the cache holds the copy as
 *    the log wrote it; nothing of the damaged bytes reached it);
 *  - ember_verify, which reads the files, reports the damaged chunk;
 *  - after a reopen (the cache starts empty) the key reads as EMBER_ECORRUPT, and
 *    a read of it never fills the cache with the damaged copy: a second read
 *    fails the same way.
 * Also: EMBER_COLD_CACHE_OFF leaves no cache, and the cache is counted in
 * ember_stats (cold_cache_bytes within cold_index_bytes).
 */
#include <ember.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"
#include "store/store_int.h"
#include "test_util.h"

#define CHUNKS (1u << 12)
#define CHUNK_BYTES 256

static void key_of(uint64_t k, char *key, size_t *klen)
{
	*klen = (size_t)snprintf(key, 24, "ccd%llu", (unsigned long long)k);
}

static void value_of(uint64_t k, uint8_t *v)
{
	for (int i = 0; i < 48; i++)
		v[i] = (uint8_t)(k * 131 + (uint64_t)i * 7);
}

static void options(ember_options *o, uint64_t cache)
{
	ember_options_default(o);
	o->log_memory = 1 << 20;
	o->page_size = 64 << 10;
	o->index_buckets = 1 << 12;
	o->hot_disk_budget = 2 << 20; /* hot->cold compaction runs as the keys go in */
	o->cold_log_memory = 512 << 10;
	o->cold_index_chunks = CHUNKS; /* 1.1 MiB of chunks, a 512 KiB chunk ring */
	o->cold_chunk_bytes = CHUNK_BYTES;
	o->cold_cache_memory = cache;
}

/* Every key but skip reads its value exactly. */
static void read_all(ember_db *db, uint64_t n, uint64_t skip)
{
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	for (uint64_t k = 0; k < n; k++) {
		if (k == skip)
			continue;
		char key[64];
		size_t kl, vl = 0;
		uint8_t buf[64], want[48];
		key_of(k, key, &kl);
		value_of(k, want);
		CHECK_OK(ember_get(s, key, kl, buf, sizeof(buf), &vl));
		CHECK(vl == 48 && memcmp(buf, want, 48) == 0, "key %llu: wrong value", (unsigned long long)k);
	}
	CHECK_OK(ember_session_close(s));
}

int main(int argc, char **argv)
{
	tu_init("test_chunk_cache_damage", argc, argv);
	char dir[512], path[600];
	CHECK(tu_tmpdir_make("ccdamage", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	ember_db *db;

	/* off: no cache at all */
	options(&o, EMBER_COLD_CACHE_OFF);
	o.flags = EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &o, &db));
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	CHECK(st.cold_cache_bytes == 0 && db->cidx.cache == NULL, "EMBER_COLD_CACHE_OFF: no cache");
	CHECK_OK(ember_close(db));

	uint64_t all = (uint64_t)CHUNKS * CI_SLOT_BYTES(CHUNK_BYTES, 1);
	options(&o, all);
	o.flags = EMBER_OPEN_TRUNCATE;
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_stats_get(db, &st));
	CHECK(st.cold_cache_bytes == all && st.cold_index_bytes >= all, "cache %llu of %llu counted",
	      (unsigned long long)st.cold_cache_bytes, (unsigned long long)all);
	uint64_t n = 40000;
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	for (uint64_t k = 0; k < n; k++) {
		char key[64];
		size_t kl;
		uint8_t v[48];
		key_of(k, key, &kl);
		value_of(k, v);
		CHECK_OK(ember_put(s, key, kl, v, sizeof(v)));
	}
	CHECK_OK(ember_session_close(s));
	/* not a forced pass: the background passes moved most keys cold already
	 * (a forced pass over every log trips hlog.h invariant 1 in debug builds) */
	CHECK_OK(ember_compact(db, 0));
	read_all(db, n, n);

	/* a key whose chunk copy is on disk and cached, its entry nonzero */
	struct cold_index *ci = &db->cidx;
	uint64_t victim = n, ca = 0, hash = 0;
	for (uint64_t k = 0; k < n && victim == n; k++) {
		char key[64];
		size_t kl;
		key_of(k, key, &kl);
		hash = em_hash(key, kl);
		ca = ci_table_load(ci, ci_chunk_of(ci, hash));
		uint64_t e;
		if (ca && ca < hlog_load(&db->chunks->head) && ci_cache_get(ci, hash, ca, &e) && e)
			victim = k;
	}
	CHECK(victim < n, "some key's chunk is on disk and cached");
	CHECK_OK(ember_stats_get(db, &st));
	printf("cold lookups %llu, chunk reads %llu, record reads %llu, cache hits %llu; victim key %llu "
	       "(chunk copy at %llu)\n", (unsigned long long)st.cold_lookups,
	       (unsigned long long)st.cold_chunk_reads, (unsigned long long)st.cold_record_reads,
	       (unsigned long long)st.cold_cache_hits, (unsigned long long)victim,
	       (unsigned long long)ca);
	CHECK(st.cold_cache_hits > 0, "reads were served by the chunk cache");

	/* flip bit 27 of the victim's entry in cold.idx (file offset = log address;
	 * the record's value starts 40 bytes in: docs/format.md) */
	snprintf(path, sizeof(path), "%s/cold.idx", dir);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0, "open %s", path);
	_Atomic uint64_t words[CHUNK_BYTES / 8]; /* the copy on disk: which entry is the key's */
	CHECK(pread(fd, (void *)words, sizeof(words), (off_t)(ca + 40)) == (ssize_t)sizeof(words),
	      "pread chunk");
	uint64_t w;
	uint32_t at = ci_pick(ci, words, hash, &w);
	CHECK(ci_addr(ci, w) != 0, "the key's entry names its chain");
	uint64_t off = ca + 40 + 8 * (uint64_t)at + 3;
	uint8_t b;
	CHECK(pread(fd, &b, 1, (off_t)off) == 1, "pread");
	b ^= 0x08;
	CHECK(pwrite(fd, &b, 1, (off_t)off) == 1, "pwrite");
	CHECK(fsync(fd) == 0, "fsync");
	close(fd);

	read_all(db, n, n); /* the cache holds the copy as written: every key still reads */
	ember_verify_report rep;
	CHECK(ember_verify(db, &rep) == EMBER_ECORRUPT && rep.errors > 0,
	      "ember_verify reads the file and finds the damaged chunk");
	printf("verify: %s\n", rep.first_error);
	CHECK_OK(ember_close(db));

	/* reopened: the cache is empty, the damaged copy is read and refused */
	options(&o, all);
	CHECK_OK(ember_open(dir, &o, &db));
	CHECK_OK(ember_session_open(db, &s));
	char key[64];
	size_t kl, vl = 0;
	uint8_t buf[64];
	key_of(victim, key, &kl);
	for (int i = 0; i < 2; i++) {
		int rc = ember_get(s, key, kl, buf, sizeof(buf), &vl);
		CHECK(rc == EMBER_ECORRUPT, "read %d of the victim after reopen: rc %d, want EMBER_ECORRUPT",
		      i + 1, rc);
	}
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	printf("test_chunk_cache_damage: ok\n");
	return 0;
}
