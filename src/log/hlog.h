/*
 * hlog.h - the hybrid log: a log whose tail lives in memory and whose older part
 * lives on disk.
 *
 * Design notes
 * ------------
 * Addresses grow without bound; the newest mem_size bytes of the log may be held
 * in memory, in a ring buffer (anonymous memory, huge pages where the system
 * allows). Byte x of the log lives at base + (x mod mem_size) while x >= head. The
 * log is cut into laps of mem_size bytes: a record never crosses from one lap to
 * the next, so it is contiguous in the ring. When a record does not fit in what is
 * left of a lap, the allocator skips to the next lap and pads the rest with a
 * filler record (or leaves it bare when less than a record header is left:
 * hlog_skip_gap tells scanners where the next record starts).
 *
 * Regions, from old to new:
 *
 *   begin <= head <= safe_read_only <= read_only <= tail   (head, read_only and
 *   safe_read_only start at 0, below begin = EM_LOG_START; harmless)
 *   with one exception for begin: a compaction pass scans up to a point at or
 *   below head and ends at the first record boundary at or past it
 *   (compact_pass), so begin may stop inside or just past the record that
 *   straddled head, above head; [head, begin) is then dead memory that no read
 *   reaches (reads below begin are refused), and begin <= tail always.
 *   [begin, head)       on disk only; reads go to the file
 *   [head, safe_ro)     in memory, immutable; flushed (or being flushed) to disk
 *   [safe_ro, ro)       in memory, "fuzzy": threads that entered their epoch before
 *                       read_only moved may still update in place here, so a
 *                       read-modify-write must wait until safe_ro passes
 *   [ro, tail)          mutable: records are updated in place under their lock
 *
 * Invariants
 *  1. Every boundary only grows. head is page aligned; read_only is page aligned
 *     except where a checkpoint moved it to the tail (hlog_fold, a record
 *     boundary); flushed is a record boundary.
 *  2. [begin, tail) is dense: every byte belongs to a record that the allocating
 *     thread fully wrote (or marked invalid, or a filler) before leaving its epoch,
 *     except gaps of under REC_HDR_SIZE bytes at the end of a lap.
 *  3. safe_ro becomes R only once every thread that could have seen read_only < R
 *     has left its epoch (epoch action set_safe_ro), so nothing below safe_ro is
 *     written again: it may be checksummed and flushed.
 *  4. head <= flushed and head <= safe_ro: a record leaves memory only after all
 *     of it is on disk (flushed is always a record boundary, see worker_flush).
 *  5. safe_head becomes H only once every thread that could have seen head < H has
 *     left its epoch (set_safe_head); only then may the ring bytes of addresses below
 *     H be reused, so allocation stops at page_floor(safe_head) + mem_size.
 *
 * Transitions (made by the log worker thread, hlog_worker, except: tail moves in
 * user threads, and the set_safe_* epoch actions run on whichever thread drains
 * the epoch):
 *   tail moves      hlog_alloc (user threads, CAS)
 *   read_only moves worker_step when the mutable region exceeds its share, when
 *                   an allocator waits for room (alloc_need), or to a
 *                   checkpoint's fold point (hlog_fold sets fold_request)
 *   safe_ro moves   set_safe_ro, the epoch action of that move
 *   flush issued    worker_flush: checksums records, writes up to the end of the
 *                   record that straddles safe_ro (a block an earlier write still
 *                   covers is held, and issued by issue_held once that write is
 *                   done, so two writes of one block are never in flight at once)
 *   flushed moves   flush_done, in address order as writes complete
 *   head moves      worker_step, up to flushed, as far as room is needed
 *   safe_head moves set_safe_head, the epoch action of that move
 *
 * Threads: hlog_alloc/hlog_wait/hlog_rec may be called by any protected session;
 * the worker owns all other transitions.
 */
#ifndef EMBER_LOG_HLOG_H
#define EMBER_LOG_HLOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/address.h"
#include "core/epoch.h"
#include "io/file.h"
#include "log/record.h"

#define HLOG_MAX_FLUSH_WRITES 64
#define HLOG_BUMPS 32

struct hlog;

struct hlog_bump {
	struct hlog *log;
	uint64_t value;
	_Atomic int busy;
};

struct hlog_write {
	uint64_t start, end;
	uint64_t safe_end; /* flushed may advance to here when this write is done */
	int issued;        /* 0: a held block, issued once no earlier write overlaps it */
	int done;
};

struct hlog {
	/* configuration, fixed at init */
	uint64_t mem_size;
	uint64_t mem_mask; /* mem_size - 1 when a power of two, else 0 */
	uint64_t page_size;
	unsigned page_bits;
	uint64_t mutable_bytes;
	uint64_t headroom;
	uint8_t *base;
	size_t map_bytes;
	uint8_t *map;
	struct em_file *file; /* NULL: a memory-only log (the read cache): no flushes */
	struct epoch *ep;
	/* called by the worker with [from, to) before head moves past it (memory-only
	 * logs: the read cache unlinks what it is about to lose) */
	void (*evict)(void *ctx, uint64_t from, uint64_t to);
	void *evict_ctx;

	/* boundaries: each written by one party, read by all */
	_Atomic uint64_t tail __attribute__((aligned(64)));
	_Atomic uint64_t read_only __attribute__((aligned(64)));
	_Atomic uint64_t safe_read_only;
	_Atomic uint64_t head;
	_Atomic uint64_t safe_head;
	_Atomic uint64_t flushed;
	_Atomic uint64_t begin;
	_Atomic uint64_t alloc_need;
	_Atomic uint64_t fold_request; /* read_only must reach this (a checkpoint's fold point) */
	_Atomic int error; /* first I/O error of the worker, sticky */
	_Atomic uint64_t bytes_flushed;
	_Atomic uint64_t held_writes; /* writes of a block held behind an earlier one (a statistic) */

	/* worker state */
	uint64_t flush_issued; /* safe_ro value whose flush was issued */
	uint64_t flush_from;   /* next flush writes from here (4 KiB aligned) */
	uint64_t csum_cursor;  /* records below are checksummed */
	uint64_t flush_cursor; /* csum_cursor when the last whole flush was issued */
	uint64_t synced;       /* hlog_fold's: below it, on disk and fsynced */
	struct hlog_write writes[HLOG_MAX_FLUSH_WRITES];
	uint32_t writes_head, writes_count;
	struct hlog_bump bumps[HLOG_BUMPS];
	uint32_t bump_next;
	struct em_ring ring;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int kicked, stop, thread_started;
	/* While writes are in flight the worker sleeps in poll(2) on two eventfds:
	 * cq_fd, which the ring signals with each completion, and kick_fd, which
	 * hlog_kick writes when ring_waiting is set, so a kick (a record turned
	 * immutable, an allocator waiting for room) is seen at once, not at the next
	 * completion. -1 where eventfds could not be had: the worker then wakes from
	 * the ring every 500 us instead. */
	int cq_fd, kick_fd;
	_Atomic int ring_waiting;
};

struct hlog_config {
	uint64_t mem_size;
	uint32_t page_size;
	double mutable_fraction;
	/* Recovery: a log whose records [start_begin, start_tail) are on disk already
	 * (both 0: a new, empty log). Everything below start_tail is on disk only; the
	 * caller loads the partial 4 KiB block below start_tail with hlog_load_tail_block
	 * before the first flush could rewrite it. */
	uint64_t start_begin, start_tail;
};

/* Returns 0, EMBER_ENOMEM, or -errno. The log writes to file (which must stay open
 * until hlog_destroy); file NULL makes a memory-only log, whose records are simply
 * dropped when head passes them (after evict, if set, has run). */
int hlog_init(struct hlog *l, const struct hlog_config *cfg, struct em_file *file,
	      struct epoch *ep);
/* Stops the worker (waiting for its writes) and frees memory. */
void hlog_destroy(struct hlog *l);

static inline struct record *hlog_rec(struct hlog *l, uint64_t addr)
{
	uint64_t off = l->mem_mask ? (addr & l->mem_mask) : (addr % l->mem_size);
	return (struct record *)(void *)(l->base + off);
}

static inline uint64_t hlog_load(_Atomic uint64_t *boundary)
{
	/* acquire: what the mover published before moving the boundary is visible */
	return atomic_load_explicit(boundary, memory_order_acquire);
}

void hlog_kick(struct hlog *l);
/*
 * Fold-over (checkpoints): make every record below upto (<= tail, a record boundary
 * such as a tail value read earlier) immutable and durable. Moves read_only to
 * upto, waits until the log's flushed address passes it, then fsyncs the file (a
 * segmented one from the segment holding the previous fold point's block: writes
 * past that point may have been in flight during the previous fsync). The
 * caller must not be epoch-protected (the move waits for every thread to leave the
 * epoch in which it could still update in place below upto). ring: the caller's
 * own idle ring, for the fsync. Returns 0, the log's sticky I/O error, or an fsync
 * error (not sticky: the next fold fsyncs the same segments again).
 */
int hlog_fold(struct hlog *l, uint64_t upto, struct em_ring *ring);
/*
 * After hlog_init with start_tail: read the bytes of the 4 KiB block that holds
 * start_tail, below it, from the file into the ring, so that the first flush (which
 * rewrites whole blocks) writes them back unchanged. Returns 0 or an error.
 */
int hlog_load_tail_block(struct hlog *l, struct em_ring *ring);

/* Where the next record starts, given a scanner's position a (skips the bare gap
 * at the end of a lap). */
static inline uint64_t hlog_skip_gap(const struct hlog *l, uint64_t a)
{
	uint64_t left = l->mem_size - (l->mem_mask ? (a & l->mem_mask) : (a % l->mem_size));
	return left < REC_HDR_SIZE ? a + left : a;
}

uint64_t hlog_alloc_slow(struct hlog *l, uint64_t size);

/*
 * Claim size bytes at the tail (size <= mem_size / 2). Returns the address, or 0
 * when there is no room in memory yet: then call hlog_wait (which leaves and
 * re-enters the epoch) and start the operation over.
 */
static inline uint64_t hlog_alloc(struct hlog *l, uint64_t size)
{
	/* relaxed: the CAS below validates */
	uint64_t t = atomic_load_explicit(&l->tail, memory_order_relaxed);
	for (;;) {
		uint64_t off = l->mem_mask ? (t & l->mem_mask) : (t % l->mem_size);
		if (off + size > l->mem_size)
			return hlog_alloc_slow(l, size); /* crosses the end of the lap */
		uint64_t end = t + size;
		uint64_t limit = em_page_floor(hlog_load(&l->safe_head), l->page_bits) + l->mem_size;
		if (end > limit)
			return 0;
		/* acq_rel: claims [t, end); frames there were freed before safe_head moved */
		if (atomic_compare_exchange_weak_explicit(&l->tail, &t, end, memory_order_acq_rel,
							  memory_order_relaxed)) {
			if ((t >> l->page_bits) != (end >> l->page_bits))
				hlog_kick(l);
			return t;
		}
	}
}

/* Wait (unprotected) until size more bytes could fit. Returns 0 or the log's
 * sticky error. The caller is protected again on return. */
int hlog_wait(struct hlog *l, uint64_t size, int epoch_slot);

#endif
