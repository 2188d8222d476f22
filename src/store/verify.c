/*
 * verify.c - ember_verify: the structure and checksum of every record of the three
 * logs, read with the cursor (scan.c, notes 1-4), and every cold-index chunk the
 * table names.
 *
 * Design notes (numbered on from iterate.c's)
 * ------------
 * 11. Compaction keeps running. A check that fails at an address now below its
 *     log's begin is no corruption: compaction released that space while the walk
 *     read it. The walk goes on at the new begin (a record boundary). A record
 *     that passes its checks is taken only if its address is still at or above
 *     begin after the read: with recycled segment files (file.c invariant 5) a
 *     window read while its space was released may hold a newer segment's
 *     records, well-formed, whose sizes would lead the walk astray.
 * 12. After a real failure on disk the walk counts one error and resynchronises: it
 *     goes on at the next 8-aligned address that holds a well-formed record with a
 *     matching checksum (a false match needs a 32-bit checksum to agree), so one bad
 *     record is one error and the rest of the log is still checked. In memory
 *     there is no checksum to resynchronise on: that log's walk stops there.
 * 13. Every non-zero cold-index table word must name a well-formed copy of its own
 *     chunk (ci_chunk_ok, plus the checksum when it is on disk). Words naming a
 *     chunk on disk are checked with lookups_run (LK_CHUNK_ONLY), many reads in
 *     flight; a failed one is judged again after re-reading the word, since
 *     chunk-log compaction may have moved the chunk meanwhile.
 */
#include "store/scan_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

#define TABLE_BATCH 1024        /* cold-index words checked together */
#define MEM_BATCH 256           /* records read under one protection */

struct verify {
	struct ember_db *db;
	ember_session *s;
	ember_verify_report *rep;
	struct sess_stats st;
};

__attribute__((format(printf, 4, 5))) static void
note_error(struct verify *v, const char *name, uint64_t off, const char *fmt, ...)
{
	ember_verify_report *rep = v->rep;
	if (rep->errors++ == 0) {
		char what[192];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(what, sizeof(what), fmt, ap);
		va_end(ap);
		snprintf(rep->first_error, sizeof(rep->first_error), "%s offset %" PRIu64 ": %s", name,
			 off, what);
	}
}

static int verify_log(struct verify *v, struct hlog *log, struct em_file *f, const char *name,
		      int chunks, uint64_t end)
{
	struct scan_cursor cur;
	scan_init(&cur, v->s, log, f, name, chunks, end);
	int rc = 0;
	unsigned in_mem = 0;
	for (;;) {
		struct record *r = NULL;
		int k = scan_next(&cur, &r);
		if (k == CUR_END)
			break;
		if (k == EMBER_ECORRUPT) {
			uint64_t begin = hlog_load(&log->begin);
			if (cur.a < begin) {
				scan_pause(&cur); /* compaction released it meanwhile (note 11) */
				cur.a = begin;
				continue;
			}
			note_error(v, name, cur.a, "%s", cur.why);
			if (cur.prot)
				break; /* in memory: nothing to resynchronise on */
			rc = scan_resync(&cur);
			if (rc < 0)
				break;
			continue;
		}
		if (k < 0) {
			rc = k;
			break;
		}
		if (k == CUR_DISK && cur.a < hlog_load(&log->begin)) {
			/* released while the window was read: a recycled segment file may
			 * hold a newer segment's well-formed records there (note 11) */
			scan_pause(&cur);
			cur.a = hlog_load(&log->begin);
			continue;
		}
		uint64_t size = rec_total_size(r);
		v->rep->records++;
		v->rep->bytes += size;
		cur.a += size;
		if (k == CUR_MEM && ++in_mem == MEM_BATCH) {
			scan_pause(&cur); /* let the log's boundaries move */
			in_mem = 0;
		}
	}
	scan_free(&cur);
	return rc;
}

/* Why the chunk copy at w, in memory, is not a good copy of chunk id (NULL: it is).
 * Caller protected, w at or above the chunk log's head. */
static const char *chunk_bad_mem(struct scan_cursor *c, uint64_t id, uint64_t w)
{
	struct hlog *log = c->db->chunks;
	uint64_t tail = hlog_load(&log->tail);
	if (w + REC_HDR_SIZE > tail)
		return "the table names an address past the chunk log's tail";
	struct record *r = hlog_rec(log, w);
	const char *why = scan_rec_bad(c, w, r, tail - w, tail, 1);
	if (!why && !ci_chunk_ok(&c->db->cidx, r, id))
		why = "the table names a record that is not this chunk";
	return why;
}

/* Why the chunk copy at w, on disk, is not a good copy of chunk id (*why NULL: it
 * is). Returns 0 or an I/O error. */
static int chunk_bad_disk(struct scan_cursor *c, uint64_t id, uint64_t w, const char **why)
{
	struct hlog *log = c->db->chunks;
	struct record *r = NULL;
	*why = NULL;
	if (w < hlog_load(&log->begin)) {
		*why = "the table names a chunk copy below the chunk log's begin";
		return 0;
	}
	int k = scan_disk_record(c, w, &r);
	if (k == EMBER_ECORRUPT)
		*why = c->why;
	else if (k < 0)
		return k;
	else if (!ci_chunk_ok(&c->db->cidx, r, id))
		*why = "the table names a record that is not this chunk";
	return 0;
}

struct table_ctx {
	uint64_t *bad; /* chunk ids whose lookup failed */
	size_t nbad;
	int err;
};

static void table_done(void *ctx, struct lookup *l, int status, struct record *rec, int in_memory)
{
	(void)rec;
	(void)in_memory;
	struct table_ctx *t = ctx;
	if (status == 0)
		return;
	if (status != EMBER_EAGAIN && status != EMBER_ECORRUPT) {
		if (!t->err)
			t->err = status; /* an I/O error */
		return;
	}
	t->bad[t->nbad++] = l->user;
}

/* A word whose chunk failed its lookup: judge it again from the table (note 13). */
static int table_recheck(struct verify *v, struct scan_cursor *c, uint64_t id)
{
	struct ember_db *db = v->db;
	struct cold_index *ci = &db->cidx;
	for (int tries = 0; tries < 4; tries++) {
		const char *why = NULL;
		epoch_protect(db->ep, v->s->slot);
		uint64_t w = ci_table_load(ci, id);
		if (w && w >= hlog_load(&db->chunks->head))
			why = chunk_bad_mem(c, id, w);
		epoch_unprotect(db->ep, v->s->slot);
		if (!w)
			return 0;
		if (w >= hlog_load(&db->chunks->head)) {
			if (why)
				note_error(v, c->name, w, "chunk %" PRIu64 ": %s", id, why);
			return 0;
		}
		int rc = chunk_bad_disk(c, id, w, &why);
		if (rc < 0)
			return rc;
		if (!why)
			return 0;
		if (ci_table_load(ci, id) == w) {
			note_error(v, c->name, w, "chunk %" PRIu64 ": %s", id, why);
			return 0;
		}
		/* the chunk moved meanwhile: judge its new copy */
	}
	return 0;
}

static int verify_table(struct verify *v)
{
	struct ember_db *db = v->db;
	struct cold_index *ci = &db->cidx;
	struct scan_cursor c;
	scan_init(&c, v->s, db->chunks, &db->chunk_file, "cold.idx", 1, 0);
	struct lookup *lk = em_alloc(sizeof(*lk) * TABLE_BATCH);
	uint64_t *bad = em_alloc(sizeof(uint64_t) * TABLE_BATCH);
	int rc = 0;
	if (!lk || !bad) {
		rc = EMBER_ENOMEM;
		goto out;
	}
	for (uint64_t c0 = 0; c0 < ci->nchunks && rc == 0; c0 += TABLE_BATCH) {
		uint64_t c1 = c0 + TABLE_BATCH < ci->nchunks ? c0 + TABLE_BATCH : ci->nchunks;
		size_t m = 0;
		epoch_protect(db->ep, v->s->slot);
		uint64_t head = hlog_load(&db->chunks->head);
		for (uint64_t id = c0; id < c1; id++) {
			uint64_t w = ci_table_load(ci, id);
			if (!w)
				continue;
			v->rep->chunks++;
			if (w < head) {
				lk[m++] = (struct lookup){.phase = LK_CHUNK, .flags = LK_CHUNK_ONLY,
							  .hash = id << 20, .addr = w, .user = id};
				continue;
			}
			const char *why = chunk_bad_mem(&c, id, w);
			if (why)
				note_error(v, "cold.idx", w, "chunk %" PRIu64 ": %s", id, why);
		}
		epoch_unprotect(db->ep, v->s->slot);
		if (!m)
			continue;
		struct table_ctx t = {bad, 0, 0};
		rc = lookups_run(v->s, lk, m, table_done, &t);
		if (rc == 0)
			rc = t.err;
		for (size_t i = 0; rc == 0 && i < t.nbad; i++)
			rc = table_recheck(v, &c, t.bad[i]);
	}
out:
	scan_free(&c);
	em_free(bad, 0);
	em_free(lk, 0);
	return rc;
}

int ember_verify(ember_db *db, ember_verify_report *report)
{
	if (!db || db->magic != DB_MAGIC || !report)
		return EMBER_EINVAL;
	memset(report, 0, sizeof(*report));
	struct verify v = {.db = db, .rep = report};
	int rc = scan_session(db, &v.st, &v.s);
	if (rc < 0)
		return rc;
	uint64_t t_hot = hlog_load(&db->hot->tail);
	uint64_t t_cold = hlog_load(&db->cold->tail);
	uint64_t t_chunks = hlog_load(&db->chunks->tail);
	epoch_wait_safe(db->ep);
	rc = verify_log(&v, db->hot, &db->hot_file, "hot.log", 0, t_hot);
	if (rc == 0)
		rc = verify_log(&v, db->cold, &db->cold_file, "cold.log", 0, t_cold);
	if (rc == 0)
		rc = verify_log(&v, db->chunks, &db->chunk_file, "cold.idx", 1, t_chunks);
	if (rc == 0)
		rc = verify_table(&v);
	session_free_internal(v.s);
	if (rc < 0)
		return rc;
	if (report->errors) {
		db_report(db, "verify: %" PRIu64 " error(s); the first: %s", report->errors,
			  report->first_error);
		return EMBER_ECORRUPT;
	}
	return 0;
}
