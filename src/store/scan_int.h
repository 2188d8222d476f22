/*
 * scan_int.h - what the walks of the logs share and nothing else includes: the
 * cursor (scan.c) that ember_iterate (iterate.c) and ember_verify (verify.c) read
 * the logs with. Design notes: scan.c (1-4), iterate.c (5-10), verify.c (11-13).
 *
 * A cursor belongs to one walk, on one thread; it uses that walk's internal
 * session (scan_session) for its epoch protection and its file reads.
 */
#ifndef EMBER_STORE_SCAN_INT_H
#define EMBER_STORE_SCAN_INT_H

#include <stdint.h>

#include "store/checkpoint.h"
#include "store/compact.h"
#include "store/store_int.h"

#define WINDOW (4u << 20) /* bytes of one sequential read */

enum { CUR_END = 0, CUR_DISK = 1, CUR_MEM = 2 };

/* A walk's view of one log: the file through a record cursor (log/record_reader.h),
 * the ring under epoch protection. */
struct scan_cursor {
	ember_session *s;
	struct ember_db *db;
	struct hlog *log;
	const char *name;    /* the log's file, for reports */
	int chunks;          /* the chunk log: every record must be a chunk */
	uint64_t a;          /* the next record starts here (or after a bare gap) */
	uint64_t end;        /* the tail snapshot */
	int prot;            /* protected: reading the ring */
	const char *why;     /* what the last failed check found */
	struct sync_src src;
	struct rec_cursor file; /* windows of the file, trusted below flushed */
};

/* A cursor over log (its file f, named name in reports) from its begin up to end;
 * chunks: the chunk log. Reads through s. */
void scan_init(struct scan_cursor *c, ember_session *s, struct hlog *log, struct em_file *f,
	       const char *name, int chunks, uint64_t end);
/* Leave the epoch protection scan_next took for a record in memory (note 2). */
void scan_pause(struct scan_cursor *c);
/* Pause and free the cursor's window. */
void scan_free(struct scan_cursor *c);
/* What is wrong with the record r at a (avail bytes readable, ending at or below
 * end; in_ring: in the log's memory): NULL when well-formed. */
const char *scan_rec_bad(const struct scan_cursor *c, uint64_t a, struct record *r,
			 uint64_t avail, uint64_t end, int in_ring);
/* The record at a, below flushed, from the file's windows, checked: CUR_DISK,
 * EMBER_ECORRUPT (c->why says what) or an I/O error. */
int scan_disk_record(struct scan_cursor *c, uint64_t a, struct record **out);
/* The next record at or after c->a: CUR_DISK, CUR_MEM (protected until
 * scan_pause), CUR_END, EMBER_ECORRUPT (c->why) or an I/O error. The caller
 * advances c->a. */
int scan_next(struct scan_cursor *c, struct record **out);
/* After a failure at c->a on disk: on to the next well-formed record (note 12).
 * Returns 0 or an I/O error. */
int scan_resync(struct scan_cursor *c);
/* An internal session whose I/O is counted in st (note 4). */
int scan_session(struct ember_db *db, struct sess_stats *st, ember_session **s);

#endif
