/*
 * scan.c - the cursor every walk of a log reads it with (struct scan_cursor in
 * scan_int.h): one record after another from a log's begin to a tail snapshot,
 * from the file below the flushed boundary and from the ring above it. Its users:
 * ember_iterate (iterate.c) and ember_verify (verify.c). The design notes are
 * numbered across the three files: 1-4 here, 5-10 in iterate.c, 11-13 in verify.c.
 *
 * Design notes
 * ------------
 * A walk reads one log from its begin to a tail snapshot with a cursor (struct
 * cursor) that takes each record from wherever it is:
 *   - below the log's flushed boundary, from the file, in large sequential windows
 *     (WINDOW bytes a read) through the walk's own internal session. Every record
 *     below flushed is whole and final on disk (hlog.h, invariant 4); a window
 *     trusts only the bytes below the flushed value loaded before its read.
 *   - at or above flushed, from the log's ring, under epoch protection: the cursor
 *     protects, re-reads flushed, and reads memory only if the record is still at
 *     or above it (so at or above head: the bytes stay valid while it stays
 *     protected).
 *
 * Invariants
 *  1. Tail snapshot: a walk reads the tails, then waits until every thread has left
 *     the epoch current at that moment (epoch_wait_safe). Every record below a snapshot
 *     tail is then fully written, and linked or marked invalid (hlog.h, invariant
 *     2; ops.c links or invalidates before it leaves its epoch).
 *  2. The walker is protected only while it reads records in memory or index
 *     entries, never while it waits for I/O (window reads, lookups_run) or runs the
 *     caller's fn.
 *  3. A record in memory may change in place (value, val_len, tombstone bit) under
 *     its sequence lock: its value is copied with rec_read_value. Key, key_len,
 *     val_cap and prev never change once published. The checksum field, written by
 *     the log worker, is never read in memory.
 *  4. The walk's I/O is counted in its own statistics (s->cur), neither a user's
 *     reads nor compaction's.
 */
#include "store/scan_int.h"

void scan_init(struct scan_cursor *c, ember_session *s, struct hlog *log, struct em_file *f,
	       const char *name, int chunks, uint64_t end)
{
	*c = (struct scan_cursor){.s = s, .db = s->db, .log = log, .name = name,
				  .chunks = chunks, .a = hlog_load(&log->begin), .end = end, .src = {s, f}};
	struct rec_rules ru = {.log = log, .max_cap = log_max_record(s->db, log), .fillers = 1};
	rec_cursor_init(&c->file, &ru, session_read_fn, &c->src, WINDOW, 1);
}

void scan_pause(struct scan_cursor *c)
{
	if (c->prot)
		epoch_unprotect(c->db->ep, c->s->slot);
	c->prot = 0;
}

void scan_free(struct scan_cursor *c)
{
	scan_pause(c);
	rec_cursor_free(&c->file);
}

/*
 * What is wrong with the record r at a, of which avail bytes are readable and
 * which must end at or below end (in_ring: in the log's memory, note 3): rec_check,
 * and in the chunk log the form of a chunk. NULL when well-formed.
 */
const char *scan_rec_bad(const struct scan_cursor *c, uint64_t a, struct record *r,
			 uint64_t avail, uint64_t end, int in_ring)
{
	struct rec_rules ru = c->file.rules;
	ru.end = end;
	ru.in_ring = (uint8_t)in_ring;
	const char *why = NULL;
	int64_t v = rec_check(r, a, avail, &ru, &why);
	if (v > 0)
		return "the file ends inside the record";
	if (v < 0)
		return why;
	if (c->chunks && !(rec_header(r) & REC_FILLER) && !ci_chunk_ok(&c->db->cidx, r, CI_ANY_CHUNK))
		return "not a well-formed chunk";
	return NULL;
}

/* The record at a (below flushed) from the file's windows; checked. */
int scan_disk_record(struct scan_cursor *c, uint64_t a, struct record **out)
{
	int head_only;
	int k = rec_cursor_get(&c->file, a, 1, out, &head_only);
	if (k == EMBER_ECORRUPT)
		c->why = c->file.why;
	if (k < 0)
		return k;
	if (c->chunks && !(rec_header(*out) & REC_FILLER) &&
	    !ci_chunk_ok(&c->db->cidx, *out, CI_ANY_CHUNK)) {
		c->why = "not a well-formed chunk";
		return EMBER_ECORRUPT;
	}
	return CUR_DISK;
}

/*
 * The next record: CUR_DISK (*out in the window, checksum checked), CUR_MEM (*out
 * in the ring; the cursor is protected until scan_pause), CUR_END, EMBER_ECORRUPT
 * (c->why says what, at c->a), or an I/O error. The caller advances c->a.
 */
int scan_next(struct scan_cursor *c, struct record **out)
{
	uint64_t a = hlog_skip_gap(c->log, c->a);
	c->a = a;
	if (a >= c->end) {
		scan_pause(c);
		return CUR_END;
	}
	if (!c->prot && a >= hlog_load(&c->log->flushed)) {
		epoch_protect(c->db->ep, c->s->slot);
		c->prot = 1;
		if (a < hlog_load(&c->log->flushed))
			scan_pause(c); /* flushed passed it meanwhile: read the file */
	}
	if (c->prot) {
		struct record *r = hlog_rec(c->log, a);
		c->why = scan_rec_bad(c, a, r, c->end - a, c->end, 1);
		if (c->why)
			return EMBER_ECORRUPT;
		*out = r;
		return CUR_MEM;
	}
	return scan_disk_record(c, a, out);
}

/*
 * After a failure at c->a on disk: move c->a to the next address from which
 * well-formed records with matching checksums start (note 12), or to flushed (a
 * record boundary) when there is none below it. Returns 0 or an I/O error.
 */
int scan_resync(struct scan_cursor *c)
{
	uint64_t flushed = hlog_load(&c->log->flushed);
	uint64_t limit = flushed < c->end ? flushed : c->end;
	if (limit <= c->a) {
		c->a = flushed > c->a ? flushed : c->a + 8;
		return 0;
	}
	return rec_cursor_resync(&c->file, c->a, limit, &c->a);
}

/* An internal session whose I/O is counted apart (note 4). */
int scan_session(struct ember_db *db, struct sess_stats *st, ember_session **s)
{
	int rc = session_create(db, 1, s);
	if (rc < 0)
		return rc;
	(*s)->cur = st;
	return 0;
}
