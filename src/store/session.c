/*
 * session.c - sessions: a thread's handle with its epoch slot, io_uring ring, I/O
 * slots and scratch buffers.
 *
 * Lifetime: a session is allocated by session_create and listed in db->sessions
 * until ember_close frees them all; closing one releases its resources, folds its
 * counters into db->gone_st and marks it closed, so a stale handle is detected
 * (EMBER_ESTATE). A closed user session joins the db->closed FIFO; once
 * SESSIONS_KEPT_CLOSED wait there, session_create reuses the oldest instead of
 * allocating, so memory stays bounded however many sessions are opened and closed.
 * Internal sessions (the compactor's) are not counted against EMBER_MAX_SESSIONS
 * nor as open, and never reused.
 */
#include "store/store_int.h"

#include <string.h>

#include "core/alloc.h"

static void session_release(struct ember_session *s)
{
	async_release(s);
	io_pool_release(&s->pool);
	em_free(s->scratch, s->scratch_cap);
	em_free(s->oldbuf, s->oldbuf_cap);
	em_free(s->rbuf, s->rbuf_cap);
	s->rbuf = NULL;
	s->rbuf_cap = 0;
	s->rchunk = 0;
	em_free(s->bhash, 0);
	em_free(s->baddr, 0);
	em_free(s->blk, 0);
	s->scratch = s->oldbuf = NULL;
	s->bhash = s->baddr = NULL;
	s->blk = NULL;
	s->scratch_cap = s->oldbuf_cap = s->bcap = 0;
	if (s->slot >= 0)
		epoch_unregister(s->db->ep, s->slot);
	s->slot = -1;
}

/* Add a session's counters to the db's (under sess_mu; its thread is done with it)
 * and zero them, so ember_stats counts them once whatever becomes of the handle. */
static void stats_fold(struct sess_stats *to, struct sess_stats *from)
{
	_Atomic uint64_t *pairs[][2] = {
		{ &to->reads[0], &from->reads[0] }, { &to->reads[1], &from->reads[1] },
		{ &to->reads[2], &from->reads[2] }, { &to->reads[3], &from->reads[3] },
		{ &to->reads[4], &from->reads[4] }, { &to->ios, &from->ios },
		{ &to->io_bytes, &from->io_bytes }, { &to->user_reads, &from->user_reads },
		{ &to->user_bytes, &from->user_bytes }, { &to->user_records, &from->user_records },
		{ &to->ci_hits, &from->ci_hits }, { &to->cold_lookups, &from->cold_lookups },
		{ &to->chunk_reads, &from->chunk_reads },
		{ &to->cold_rec_reads, &from->cold_rec_reads },
	};
	_Static_assert(sizeof(struct sess_stats) == sizeof(pairs) / sizeof(pairs[0]) * sizeof(uint64_t),
		       "stats_fold must name every counter of struct sess_stats");
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		/* relaxed: statistics, and both sides are read under sess_mu */
		stat_add(pairs[i][0], atomic_load_explicit(pairs[i][1], memory_order_relaxed));
		atomic_store_explicit(pairs[i][1], 0, memory_order_relaxed);
	}
}

/* Queue a closed user session for reuse (under sess_mu). */
static void closed_put(struct ember_db *db, struct ember_session *s)
{
	stats_fold(&db->gone_st, &s->st);
	/* relaxed: statistics; the closed session's thread is done with it */
	db->gone_comp_ios += atomic_load_explicit(&s->comp_st.ios, memory_order_relaxed);
	db->gone_comp_bytes += atomic_load_explicit(&s->comp_st.io_bytes, memory_order_relaxed);
	atomic_store_explicit(&s->comp_st.ios, 0, memory_order_relaxed);
	atomic_store_explicit(&s->comp_st.io_bytes, 0, memory_order_relaxed);
	s->next_closed = NULL;
	if (db->closed_tail)
		db->closed_tail->next_closed = s;
	else
		db->closed_head = s;
	db->closed_tail = s;
	db->closed_n++;
}

/* The oldest closed user session, taken off the FIFO for reuse, once
 * SESSIONS_KEPT_CLOSED wait there; else NULL (under sess_mu). */
static struct ember_session *closed_take(struct ember_db *db)
{
	if (db->closed_n < SESSIONS_KEPT_CLOSED)
		return NULL;
	struct ember_session *s = db->closed_head;
	db->closed_head = s->next_closed;
	if (!db->closed_head)
		db->closed_tail = NULL;
	db->closed_n--;
	return s;
}

int session_create(ember_db *db, int internal, ember_session **out)
{
	int rc;
	*out = NULL;
	/* allocated before sess_mu is taken, so no allocation waits inside it; freed
	 * again below when a closed handle is reused instead */
	struct ember_session *s = em_zalloc(sizeof(*s));
	if (!s)
		return EMBER_ENOMEM;
	pthread_mutex_lock(&db->sess_mu);
	if (!internal && db->open_sessions >= EMBER_MAX_SESSIONS) {
		pthread_mutex_unlock(&db->sess_mu);
		em_free(s, sizeof(*s));
		return EMBER_ENOSPC;
	}
	if (!internal)
		db->open_sessions++;
	struct ember_session *old = internal ? NULL : closed_take(db);
	if (old) {
		/* a closed handle, released and with its counters folded: start it afresh
		 * where it is listed (its next_all link stays) */
		struct ember_session *next_all = old->next_all;
		memset(old, 0, sizeof(*old));
		old->next_all = next_all;
		em_free(s, sizeof(*s));
		s = old;
	} else {
		s->next_all = db->sessions;
		db->sessions = s;
	}
	s->db = db;
	s->slot = -1;
	s->internal = internal;
	s->cur = internal ? &s->comp_st : &s->st;
	pthread_mutex_unlock(&db->sess_mu);

	s->slot = epoch_register(db->ep);
	if (s->slot < 0) {
		rc = EMBER_ENOSPC;
		goto undo;
	}
	rc = io_pool_init(&s->pool, db->opts.io_queue_depth);
	if (rc < 0)
		goto undo;
	rc = session_buf_reserve(&s->scratch, &s->scratch_cap, 4096);
	if (rc < 0)
		goto undo;
	s->magic = SESSION_MAGIC;
	s->open = 1;
	*out = s;
	return 0;

undo:
	s->magic = SESSION_MAGIC; /* stays listed (closed) until reused or ember_close */
	session_destroy(s);
	return rc;
}

void session_destroy(ember_session *s)
{
	struct ember_db *db = s->db;
	s->open = 0;
	session_release(s);
	if (!s->internal) {
		pthread_mutex_lock(&db->sess_mu);
		db->open_sessions--;
		closed_put(db, s);
		pthread_mutex_unlock(&db->sess_mu);
	}
}

void session_free_internal(ember_session *s)
{
	struct ember_db *db = s->db;
	session_destroy(s);
	pthread_mutex_lock(&db->sess_mu);
	/* relaxed: the session's own thread is done with it */
	db->gone_comp_ios += atomic_load_explicit(&s->comp_st.ios, memory_order_relaxed);
	db->gone_comp_bytes += atomic_load_explicit(&s->comp_st.io_bytes, memory_order_relaxed);
	for (struct ember_session **p = &db->sessions; *p; p = &(*p)->next_all) {
		if (*p == s) {
			*p = s->next_all;
			break;
		}
	}
	pthread_mutex_unlock(&db->sess_mu);
	em_free(s, sizeof(*s));
}

void sessions_free(ember_db *db)
{
	struct ember_session *s = db->sessions;
	while (s) {
		struct ember_session *next = s->next_all;
		em_free(s, sizeof(*s));
		s = next;
	}
	db->sessions = NULL;
}

int ember_session_open(ember_db *db, ember_session **out)
{
	if (!out)
		return EMBER_EINVAL;
	*out = NULL;
	if (!db || db->magic != DB_MAGIC)
		return EMBER_EINVAL;
	return session_create(db, 0, out);
}

int ember_session_close(ember_session *s)
{
	if (!s)
		return 0;
	int rc = session_check(s);
	if (rc < 0)
		return rc;
	if (s->internal)
		return EMBER_EINVAL;
	if (s->delivering)
		return EMBER_ESTATE; /* from a completion callback: the delivery holds it */
	if (s->async_n)
		return EMBER_EBUSY; /* asynchronous operations in flight: wait for them */
	session_destroy(s);
	return 0;
}

int session_buf_reserve(uint8_t **buf, size_t *cap, size_t need)
{
	return em_buf_reserve(buf, cap, need);
}

int session_read_sync(ember_session *s, struct em_file *f, void *buf, uint32_t len,
		      uint64_t off)
{
	if (s->pool.broken)
		return EMBER_EIO;
	int res = 0;
	int rc = em_ring_read(&s->pool.ring, f, buf, len, off, 0);
	if (rc == 0)
		rc = em_ring_wait_one(&s->pool.ring, &res);
	if (rc < 0) {
		s->pool.broken = 1;
		return rc;
	}
	stat_add(&s->cur->ios, 1);
	stat_add(&s->cur->io_bytes, len);
	return res;
}

int session_read_fn(void *ctx, void *buf, uint32_t len, uint64_t off)
{
	struct sync_src *src = ctx;
	return session_read_sync(src->s, src->f, buf, len, off);
}
