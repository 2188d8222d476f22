/*
 * store_int.h - what the store's own files share: the db and session objects and
 * the disk lookup machinery.
 *
 * Object lifetimes
 *  - ember_db owns the epoch table, the hash index, the hot log and its file.
 *  - A session is allocated by ember_session_open and freed only by ember_close;
 *    ember_session_close releases its ring and buffers and marks it closed, so a
 *    stale handle is detected (EMBER_ESTATE) instead of touching freed memory.
 */
#ifndef EMBER_STORE_INT_H
#define EMBER_STORE_INT_H

#include <ember.h>
#include <pthread.h>
#include <stdint.h>

#include "core/epoch.h"
#include "index/hash_index.h"
#include "io/file.h"
#include "log/hlog.h"

#define SESSION_MAGIC 0x454d5353u /* "EMSS" */
#define DB_MAGIC 0x454d4442u      /* "EMDB" */
#define IO_BUF_SIZE 8192u         /* a disk read of a small record fits here */
#define FIRST_READ_MIN 512u       /* bytes of a record asked for by the first read */

struct io_slot {
	uint8_t *buf;     /* IO_BUF_SIZE bytes, EM_IO_ALIGN aligned */
	uint8_t *big;     /* larger buffer for big records, freed after use */
	uint32_t big_cap;
	uint8_t *cur;     /* the buffer the read in flight fills: buf or big */
	int busy;         /* a read is in flight for this slot */
	uint32_t lookup;  /* index of the lookup being served */
	uint64_t off;     /* file offset of buf[0] */
	uint32_t len;     /* bytes requested */
};

/* One key being chased down its hash chain on disk. */
struct disk_lookup {
	const void *key;
	uint32_t klen;
	uint64_t addr; /* next record to read */
	uint32_t want; /* bytes to read from addr's block (0: the default first read) */
	size_t user;   /* the caller's index for this lookup */
};

/* Called once per lookup when it ends: rec is the found record (status 0, valid
 * only during the call), NULL otherwise. */
typedef void (*disk_done_fn)(void *ctx, size_t i, int status, struct record *rec);

struct ember_session {
	uint32_t magic;
	int open;
	struct ember_db *db;
	int slot; /* epoch slot */
	struct em_ring ring;
	int ring_broken;  /* the ring failed: its state is unknown, no more disk reads */
	struct io_slot *io;
	uint32_t io_n;
	uint32_t *io_free;
	uint32_t io_free_n;
	uint8_t *scratch; /* rmw output */
	size_t scratch_cap;
	uint8_t *oldbuf; /* rmw input read from disk */
	size_t oldbuf_cap;
	uint64_t *bhash; /* get_batch: per-key hash and address */
	uint64_t *baddr;
	struct disk_lookup *blk;
	size_t bcap;
	struct ember_session *next_all;
};

struct ember_db {
	uint32_t magic;
	char *dir;
	ember_options opts;
	int lock_fd;
	struct epoch *ep;
	struct hash_index index;
	struct em_file hot_file;
	struct hlog *hot;
	uint64_t max_record; /* largest record the hot log accepts */
	pthread_mutex_t sess_mu;
	struct ember_session *sessions; /* every session ever opened */
	uint32_t open_sessions;
};

/* Validate a session handle for a data call: EMBER_EINVAL or EMBER_ESTATE. */
static inline int session_check(ember_session *s)
{
	if (!s || s->magic != SESSION_MAGIC)
		return EMBER_EINVAL;
	if (!s->open)
		return EMBER_ESTATE;
	return 0;
}

static inline int key_check(const void *key, size_t klen)
{
	if (!key || klen == 0)
		return EMBER_EINVAL;
	if (klen > EMBER_MAX_KEY_LEN)
		return EMBER_ETOOBIG;
	return 0;
}

/* Walk the chain from addr while it is in memory. Returns the record holding key
 * (its address in *at), or NULL with *at = the first address below head (or an
 * address below EM_LOG_START: the chain ended). Caller is protected. */
static inline struct record *trace_mem(struct hlog *l, uint64_t addr, const void *key,
				       uint32_t klen, uint64_t *at)
{
	uint64_t head = hlog_load(&l->head);
	while (addr >= head && addr >= EM_LOG_START) {
		struct record *r = hlog_rec(l, addr);
		if (rec_key_eq(r, key, klen)) {
			*at = addr;
			return r;
		}
		addr = rec_prev(r);
	}
	*at = addr;
	return NULL;
}

/* Copy a record's value out under its sequence lock (get semantics). */
int rec_read_value(struct record *r, void *buf, size_t cap, size_t *vlen);

/* Chase n lookups on disk with as many reads in flight as the ring allows; done
 * is called exactly once for each. The caller must not be protected. Returns 0, or
 * a ring error: then every unfinished lookup got that error, and the session
 * reports EMBER_EIO for every later disk read (its ring is in an unknown state). */
int disk_lookups(ember_session *s, struct disk_lookup *lk, size_t n, disk_done_fn done,
		 void *ctx);

/* Grow a session buffer to at least need bytes (content not kept). */
int session_buf_reserve(uint8_t **buf, size_t *cap, size_t need);

#endif
