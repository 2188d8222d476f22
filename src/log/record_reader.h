/*
 * record_reader.h - what a well-formed record is, and the two ways records are
 * read back from a log's file: a cursor for sequential scans and a read of the one
 * record at an address.
 *
 * Every place that reads a record back (point and batch lookups, compaction's
 * scan and copies, ember_iterate, ember_verify, recovery's replay, the cold
 * index's chunk reads) judges it with rec_check, so that what ember_verify calls
 * damage is exactly what a read refuses, and what recovery replays is what a read
 * accepts.
 *
 * The rules, in the order rec_check applies them (docs/format.md, the record
 * table; record.h for the fields):
 *  R1 header: no reserved header bit (REC_RESERVED_BITS) and a zero reserved field.
 *  R2 filler (REC_FILLER): only where rules->fillers allows one (a sequential
 *     scan); marked invalid, no key, no value, no tombstone or prev, and it ends
 *     exactly at the end of its lap.
 *  R3 lengths: 1 <= key_len <= EMBER_MAX_KEY_LEN; val_cap a multiple of 8 and at
 *     most rules->max_cap; val_len <= val_cap.
 *  R4 place: the record does not cross the end of its lap, and ends at or below
 *     rules->end (when not 0).
 *  R5 chain: prev is 0 or in [EM_LOG_START, a): chains only go down.
 *  R6 key: when rules->key is set, the record holds that key.
 *  R7 checksum: the stored checksum matches (rules->in_ring: not checked; the log
 *     writes it when the page is flushed).
 * R1-R6 need only the record's head (header and key): rec_check_head stops there,
 * for callers that may trust a head (compaction's scan of large records and its
 * liveness lookups, docs/compaction.md "Large records").
 *
 * Thread rules: rec_check reads only fields that never change once a record is
 * published (and val_len atomically); a cursor or a read buffer belongs to one
 * thread.
 */
#ifndef EMBER_LOG_RECORD_READER_H
#define EMBER_LOG_RECORD_READER_H

#include <stddef.h>
#include <stdint.h>

#include "log/hlog.h"
#include "log/record.h"

struct rec_rules {
	struct hlog *log;       /* the log the record is in: its laps (R4) */
	uint64_t max_cap;       /* R3: the largest value capacity */
	uint64_t end;           /* R4: records end at or below this address (0: no bound) */
	const void *key;        /* R6: the key expected, or NULL for any */
	uint32_t klen;
	uint8_t fillers;        /* R2: a filler may stand here */
	uint8_t in_ring;        /* R7: the bytes are the log's memory, not its file */
};

/*
 * Judge the record r at log address a, of which avail bytes are readable.
 * Returns 0 (well-formed), EMBER_ECORRUPT (*why says which rule failed; why may
 * be NULL), or a positive byte count: the record may be well-formed, but that many
 * bytes from r are needed to tell (the header's, or the whole record's; never
 * more than a record R3 allows).
 */
int64_t rec_check(struct record *r, uint64_t a, uint64_t avail, const struct rec_rules *rules,
		  const char **why);

/*
 * rec_check, with the value copied to dst on the way when it is at least
 * REC_COPY_MIN bytes and fits in dcap (one pass over it, rec_checksum_copy):
 * *copied is then 1. dst may hold part of the value after a failed check.
 */
int64_t rec_check_copy(struct record *r, uint64_t a, uint64_t avail,
		       const struct rec_rules *rules, void *dst, size_t dcap, int *copied,
		       const char **why);

/* R1-R6 only: as rec_check, needing at most the record's head. */
int64_t rec_check_head(struct record *r, uint64_t a, uint64_t avail,
		       const struct rec_rules *rules, const char **why);

/* Read len bytes of the log's file at off into buf (off and len multiples of
 * EM_IO_ALIGN, or of the file's read alignment for rec_read_at; buf EM_IO_ALIGN
 * aligned): returns the bytes read (short at the end of the file) or a negative
 * error. */
typedef int (*rec_read_fn)(void *ctx, void *buf, uint32_t len, uint64_t off);

/*
 * Read the record at a into *buf (grown with em_alloc_io as needed; *cap its
 * size), first asking for first bytes, then once more for the whole record when
 * it is larger, and check it with rules. Each read's offset and length are
 * multiples of align: the file's read alignment (em_file_read_align, io/file.h),
 * a power of two in [EM_READ_ALIGN_MIN, EM_IO_ALIGN]; the record is at
 * a - (a rounded down to align) in *buf. Returns 0 with *out in *buf, or
 * EMBER_ECORRUPT (*why), EMBER_ENOMEM, the read's error, or EMBER_EINVAL for an
 * align out of that range.
 */
int rec_read_at(rec_read_fn read, void *ctx, uint32_t align, uint8_t **buf, size_t *cap,
		uint64_t a, uint64_t first, const struct rec_rules *rules, struct record **out,
		const char **why);

/*
 * A cursor: records of one log's file in address order, read in large sequential
 * windows. Bytes of a window are trusted only below a bound loaded before the
 * window was read: the log's flushed boundary (track_flushed: every record below
 * it is whole and final in the file, hlog.h invariant 4) or rules.end.
 */
struct rec_cursor {
	/* set before rec_cursor_get (rec_cursor_init, then optional fields) */
	struct rec_rules rules; /* rules.end: the fixed bound when !track_flushed */
	rec_read_fn read;
	void *ctx;
	uint64_t window;        /* bytes of a full read */
	uint64_t head_min;      /* records this large may be handed out by their head (0: never) */
	uint64_t head_read;     /* the first read after such a record, doubling up to window */
	int track_flushed;
	/* state */
	uint8_t *buf;           /* file bytes [off, off + len) */
	size_t cap;
	uint64_t off, len;
	uint64_t trusted;       /* the bound loaded before the window's read */
	uint64_t next_want;
	const char *why;        /* what the last failed check found */
};

void rec_cursor_init(struct rec_cursor *c, const struct rec_rules *rules, rec_read_fn read,
		     void *ctx, uint64_t window, int track_flushed);
void rec_cursor_free(struct rec_cursor *c);

#define REC_CUR_GOT 1  /* *out is the record at a, in the window */
#define REC_CUR_MOVE 2 /* the window must move: call again with may_move */

/*
 * The record at a (a record boundary below the trusted bound), read as needed.
 * Returns REC_CUR_GOT (*head_only: only its head is in the window; it is at least
 * head_min bytes and passed rec_check_head), REC_CUR_MOVE (only when !may_move),
 * EMBER_ECORRUPT (c->why), or the read's error. The window holds *out until the
 * next call that may move it.
 */
int rec_cursor_get(struct rec_cursor *c, uint64_t a, int may_move, struct record **out,
		   int *head_only);

/*
 * After damage at a: the next 8-aligned address below limit from which a record
 * passes rec_check (a false match needs a 32-bit checksum to agree), in *next, or
 * limit when there is none. Returns 0 or the read's error.
 */
int rec_cursor_resync(struct rec_cursor *c, uint64_t a, uint64_t limit, uint64_t *next);

#endif
