/*
 * cold_race.c - owner-exact reads across the tiers while compaction moves records
 * hot->cold and cold->cold, with the read cache and the cold index's chunk cache on.
 *
 * 4 threads each own a set of keys (k % 4 == thread) and are their only writers:
 * put, delete, rmw and get/get_batch of an owned key must give exactly the last
 * write of the owner (value or absence), whatever tier the key is in and whatever
 * copies the read cache holds; a get of another thread's key must give a whole
 * value of that key (or nothing). Tiny budgets make both compactions run many
 * times, in the background and in writers' assists; the cold index's chunks
 * mostly live on disk, so cold reads go through the chunk cache too.
 *
 * Modes: "rc" (read cache on), "norc" (off), "collide" (read cache on, 16 chunks
 * of 8 chains: hundreds of keys per cold chain, twice the deletes), "ccall" (no
 * read cache, a chunk cache that holds every chunk: cold reads are served from
 * cached chunk copies while writers and both compactions rewrite the chunks;
 * cold_index.h notes 5-8), "ccsmall" (likewise with 61 slots for 8192 chunks:
 * slots shared and replaced all the time), "slices" (no caches, 1024 chunks of 4
 * KiB in a 512 KiB chunk ring: a compaction group's chunk reads come in slices of a
 * few dozen that must stay mutable until their inserts, and inserts whose chunk is
 * in the chunk ring's fuzzy region wait for the end of their slice; compact.c).
 */
#include <ember.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define THREADS 4
#define KEYS 8000
#define VLEN 200 /* a value: struct val, then padding */

static ember_db *db;
static int collide; /* 16 chunks of 8 chains: long cold chains of many keys */
static int slices;  /* 4 KiB chunks, no caches: every insert reads its chunk */
static uint64_t del_pct = 15;

struct val {
	uint64_t owner, key, seq, check;
};

static uint64_t vcheck(const struct val *v) { return v->owner * 31 + v->key * 17 + v->seq * 7 + 1; }

static void key_of(uint64_t k, char *key, size_t *klen)
{
	*klen = (size_t)snprintf(key, 24, "cr%llu", (unsigned long long)k);
}

struct model {
	uint64_t seq;    /* last written sequence */
	int present;     /* last write a put/rmw (1) or a delete (0) */
};

struct rmw_arg {
	const struct model *m;
	struct val out;
	int bad;
};

static int rmw_fn(void *arg, const void *old, size_t old_len, void *out, size_t cap, size_t *out_len)
{
	struct rmw_arg *a = arg;
	if (!a->m->present) {
		if (old)
			a->bad = 1; /* a deleted key came back */
	} else {
		struct val v;
		if (!old || (old_len != sizeof(v) && old_len != VLEN)) {
			a->bad = 2;
		} else {
			memcpy(&v, old, sizeof(v));
			if (v.seq != a->m->seq || v.check != vcheck(&v))
				a->bad = 3;
		}
	}
	*out_len = sizeof(a->out);
	if (cap < sizeof(a->out))
		return EMBER_ERANGE;
	memcpy(out, &a->out, sizeof(a->out));
	return 0;
}

static void check_own(uint64_t k, const struct model *m, int rc, const void *buf, size_t vl,
		      const char *how)
{
	if (!m->present) {
		CHECK(rc == EMBER_ENOTFOUND, "%s: key %llu deleted (seq %llu) but rc %d vl %zu",
		      how, (unsigned long long)k, (unsigned long long)m->seq, rc, vl);
		return;
	}
	CHECK(rc == 0, "%s: key %llu present (seq %llu) but rc %d", how, (unsigned long long)k,
	      (unsigned long long)m->seq, rc);
	struct val v;
	CHECK(vl == VLEN || vl == sizeof(v), "%s: key %llu length %zu", how, (unsigned long long)k, vl);
	memcpy(&v, buf, sizeof(v));
	CHECK(v.key == k && v.check == vcheck(&v), "%s: key %llu torn/foreign", how, (unsigned long long)k);
	CHECK(v.seq == m->seq, "%s: key %llu stale: seq %llu, want %llu", how, (unsigned long long)k,
	      (unsigned long long)v.seq, (unsigned long long)m->seq);
}

static void *worker(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	tu_rng rng;
	tu_rng_stream(&rng, id);
	ember_session *s;
	CHECK_OK(ember_session_open(db, &s));
	struct model *m = calloc(KEYS, sizeof(*m));
	CHECK(m != NULL, "calloc");
	/* slices: a chunk read per insert, so fewer operations do as much (and at
	 * least 30000, for hot->cold passes at the sanitizer scales) */
	uint64_t seq = 0, ops = tu_scaled(collide ? 400000 : slices ? 60000 : 200000);
	if (slices && ops < 30000)
		ops = 30000;
	for (uint64_t op = 0; op < ops; op++) {
		uint64_t d = tu_rng_below(&rng, 100);
		uint64_t k = tu_rng_below(&rng, KEYS / THREADS) * THREADS + id;
		char key[24];
		size_t klen;
		key_of(k, key, &klen);
		if (d < 25) {
			struct val v = {id, k, ++seq, 0};
			v.check = vcheck(&v);
			uint8_t pb[VLEN] = {0};
			memcpy(pb, &v, sizeof(v));
			CHECK_OK(ember_put(s, key, klen, pb, VLEN));
			m[k].seq = v.seq;
			m[k].present = 1;
		} else if (d < 25 + del_pct) {
			CHECK_OK(ember_delete(s, key, klen));
			m[k].present = 0;
		} else if (d < 35 + del_pct) {
			struct rmw_arg a = {&m[k], {id, k, ++seq, 0}, 0};
			a.out.check = vcheck(&a.out);
			CHECK_OK(ember_rmw(s, key, klen, rmw_fn, &a));
			CHECK(!a.bad, "rmw: key %llu old value wrong (%d), model seq %llu present %d",
			      (unsigned long long)k, a.bad, (unsigned long long)m[k].seq, m[k].present);
			m[k].seq = a.out.seq;
			m[k].present = 1;
		} else if (d < 80) {
			uint8_t buf[VLEN];
			size_t vl = 0;
			int rc = ember_get(s, key, klen, buf, sizeof(buf), &vl);
			check_own(k, &m[k], rc, buf, vl, "get");
		} else if (d < 88) {
			enum { NB = 8 };
			char keys[NB][24];
			const void *kp[NB];
			size_t kl[NB], vls[NB], caps[NB];
			uint64_t ks[NB];
			uint8_t bufs[NB][VLEN];
			void *bp[NB];
			int st[NB];
			for (int i = 0; i < NB; i++) {
				ks[i] = tu_rng_below(&rng, KEYS / THREADS) * THREADS + id;
				key_of(ks[i], keys[i], &kl[i]);
				kp[i] = keys[i];
				bp[i] = bufs[i];
				caps[i] = sizeof(bufs[i]);
			}
			CHECK_OK(ember_get_batch(s, NB, kp, kl, bp, caps, vls, st));
			for (int i = 0; i < NB; i++)
				check_own(ks[i], &m[ks[i]], st[i], bufs[i], vls[i], "get_batch");
		} else {
			uint64_t o = tu_rng_below(&rng, KEYS);
			char ok[24];
			size_t okl;
			key_of(o, ok, &okl);
			uint8_t buf[VLEN];
			size_t vl = 0;
			int rc = ember_get(s, ok, okl, buf, sizeof(buf), &vl);
			CHECK(rc == 0 || rc == EMBER_ENOTFOUND, "foreign get rc %d", rc);
			if (rc == 0) {
				struct val v;
				CHECK(vl == sizeof(v) || vl == VLEN, "foreign length");
				memcpy(&v, buf, sizeof(v));
				CHECK(v.key == o && v.owner == o % THREADS && v.check == vcheck(&v),
				      "foreign key %llu torn", (unsigned long long)o);
			}
		}
	}
	/* at the end: every owned key exactly as last written */
	for (uint64_t k = id; k < KEYS; k += THREADS) {
		char key[24];
		size_t klen;
		key_of(k, key, &klen);
		uint8_t buf[VLEN];
		size_t vl = 0;
		int rc = ember_get(s, key, klen, buf, sizeof(buf), &vl);
		check_own(k, &m[k], rc, buf, vl, "final get");
	}
	free(m);
	CHECK_OK(ember_session_close(s));
	return NULL;
}

int main(int argc, char **argv)
{
	tu_init("cold_race", argc, argv);
	const char *mode = argc >= 2 ? argv[1] : "rc";
	int ccall = strcmp(mode, "ccall") == 0, ccsmall = strcmp(mode, "ccsmall") == 0;
	slices = strcmp(mode, "slices") == 0;
	int rc_on = strcmp(mode, "norc") != 0 && !ccall && !ccsmall && !slices;
	collide = strcmp(mode, "collide") == 0;
	if (collide)
		del_pct = 30; /* keys stay deleted long enough for tombstones to go cold */
	char dir[512];
	CHECK(tu_tmpdir_make("cold-race", dir, sizeof(dir)) == 0, "tmpdir");
	ember_options o;
	ember_options_default(&o);
	o.log_memory = 1 << 20;
	o.page_size = 64 << 10;
	o.index_buckets = 1 << 10;
	o.hot_disk_budget = 2 << 20;
	o.cold_log_memory = 512 << 10;
	o.cold_disk_budget = 3 << 20;
	o.cold_index_chunks = 1 << 13; /* 850 KiB of chunks, a 512 KiB ring: many on disk */
	o.cold_chunk_bytes = 64;
	o.flags = EMBER_OPEN_TRUNCATE;
	if (collide)
		o.cold_index_chunks = 16;
	if (rc_on) {
		o.read_cache_memory = 512 << 10;
		/* either admission rule, as the seed picks (the seed replays it) */
		o.read_cache_admit = (uint32_t)(tu_seed() >> 3) & 1;
		printf("read cache admits a record on its %s disk read\n",
		       o.read_cache_admit ? "second" : "first");
	}
	/* a chunk-cache slot of a new (tagged) store: docs/format.md 6.3 */
	uint64_t slot = 24 + 3 * (uint64_t)o.cold_chunk_bytes / 4;
	if (ccall)
		o.cold_cache_memory = o.cold_index_chunks * slot;
	if (ccsmall)
		o.cold_cache_memory = 61 * slot;
	if (slices) {
		o.cold_index_chunks = 1024;
		o.cold_chunk_bytes = 4096;
		o.cold_cache_memory = EMBER_COLD_CACHE_OFF;
	}
	CHECK_OK(ember_open(dir, &o, &db));
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	ember_stats st;
	CHECK_OK(ember_stats_get(db, &st));
	printf("cold_race%s: hot passes %llu, cold passes %llu, cold reads %llu+%llu, rc hits %llu, "
	       "chunk cache hits %llu, cold lookups %llu (%llu chunk + %llu record reads, %.3f per "
	       "lookup), tombstones dropped %llu\n", rc_on ? " (rc)" : "",
	       (unsigned long long)st.hot.compactions, (unsigned long long)st.cold.compactions,
	       (unsigned long long)st.cold.reads_memory, (unsigned long long)st.cold.reads_disk,
	       (unsigned long long)st.read_cache_hits, (unsigned long long)st.cold_cache_hits,
	       (unsigned long long)st.cold_lookups, (unsigned long long)st.cold_chunk_reads,
	       (unsigned long long)st.cold_record_reads, st.disk_reads_per_cold_lookup,
	       (unsigned long long)st.tombstones_dropped);
	CHECK(st.cold_lookups > 0, "reads reached the cold index");
	/* The chunk cache saves only reads of chunks that left the chunk log's memory. At
	 * full scale many do; the sanitizer scales write so little that a handful of
	 * chunks, or none, leave it, and a few reads of distinct chunks need not repeat
	 * one the cache kept, so there the check waits for 32 chunk reads (a cache that
	 * missed every time would show them). */
	int cc_needed = tu_scale() >= 0.5 || st.cold_chunk_reads >= 32;
	if ((ccall || ccsmall) && cc_needed)
		CHECK(st.cold_cache_hits > 0, "cold reads were served by the chunk cache");
	if (ccall && cc_needed)
		CHECK(st.cold_cache_hits > st.cold_chunk_reads,
		      "a cache of every chunk saves most chunk reads (%llu hits, %llu reads)",
		      (unsigned long long)st.cold_cache_hits, (unsigned long long)st.cold_chunk_reads);
	CHECK(st.hot.compactions > 0, "hot->cold compaction ran");
	if (slices)
		CHECK(st.compaction_disk_reads > 0, "compaction read chunks from disk");
	/* sanitizer scales write too little for cold passes, and so does slices (its
	 * point is the chunk reads; the other modes check cold->cold) */
	if (tu_scale() >= 0.5 && !slices)
		CHECK(st.cold.compactions > 0, "cold->cold compaction ran");
	CHECK_OK(ember_close(db));
	tu_tmpdir_remove(dir);
	return 0;
}
