/*
 * powerloss.h - the power-loss simulator: a test-only layer under src/io that
 * remembers every change the disk has not been told to make durable, and on
 * em_powerloss_cut rewrites the files to a state a real power loss could have
 * left (docs/faults.md, section "Power loss").
 *
 * Compiled only into the test library ember_plsim (meson: EMBER_POWERLOSS_SIM=1);
 * libember and the internal library used by other tests have none of it: the
 * hooks in src/io (file.c, ring.c, segment.c) are #if'ed out, so the release library pays nothing.
 *
 * What is remembered, while armed:
 *   - every write, punch-hole and truncating open of a file, until an fsync of
 *     that file that began after the write completed returns 0; before its first
 *     unsynced change, each 512-byte sector it touches is copied (the shadow of
 *     the file's synced content, per file);
 *   - every create, rename, unlink, mkdir and rmdir, until an fsync of the
 *     directory (each directory it changes) that began after it returns 0. An
 *     unlinked or replaced file is kept alive as a hard link in the stash
 *     directory, so the cut can bring it back.
 *
 * The cut point: arming with cut_after = N makes the N-th io event (a write or
 * punch part, an fsync of a file or directory, a directory change, a truncating
 * open) the moment power goes: it and everything after it never happened, though
 * the library goes on running (it sees no error) until the test stops it. Events
 * are counted in em_powerloss_ops.
 *
 * em_powerloss_cut (after the store is closed, no io in flight): for each file,
 * each unsynced change made before the power went is dropped, kept, or torn
 * (each 512-byte sector of it kept or dropped on its own), chosen by a generator
 * seeded with seed; later changes are dropped. Each unsynced directory change is
 * kept or undone (undoing one undoes every later change of the same names, and
 * of names inside an undone directory), directory changes after the power went
 * are undone. Then the simulator is disarmed and forgets everything.
 *
 * Threads: the hooks may be called from any thread (one mutex). The test calls
 * arm, cut and disarm while no store is open.
 */
#ifndef EMBER_IO_POWERLOSS_H
#define EMBER_IO_POWERLOSS_H

#include <stddef.h>
#include <stdint.h>

#if defined(EMBER_POWERLOSS_SIM) && EMBER_POWERLOSS_SIM

/* ---- the test's calls ---- */

/* Arm: stash_dir (an existing, empty directory on the same file system as the
 * store: unlinked files are kept there as links) and the event at which the power
 * goes (0: never; cut with what was unsynced at the cut). Everything on disk now
 * counts as durable. 0 or -errno (-EBUSY when armed already). */
int em_powerloss_arm(const char *stash_dir, uint64_t cut_after);
/* io events counted since arming. */
uint64_t em_powerloss_ops(void);
/* Has the power gone (the cut_after-th event was reached)? */
int em_powerloss_dead(void);
/* The event at which it went, as a trace line (below), or NULL while it is on.
 * Valid until the next arm. */
const char *em_powerloss_death(void);

struct em_powerloss_stats {
	uint64_t writes_kept, writes_dropped, writes_torn; /* unsynced, before the cut */
	uint64_t writes_after;   /* changes after the power went (dropped) */
	uint64_t dirops_kept, dirops_undone;
	uint64_t files;          /* files whose content was rewritten */
};
/* Rewrite the disk as a power loss would leave it (see above), then disarm. Call
 * with no store open. 0 or -errno (the first failure; the rest is still tried). */
int em_powerloss_cut(uint64_t seed, struct em_powerloss_stats *st);
/* Disarm and forget everything, changing no file. */
void em_powerloss_disarm(void);

/* The trace: while on (and armed), each durability event is recorded as one
 * line "KIND PATH" (KIND: fsync, dirsync, write, punch, trunc, create, rename
 * (PATH -> PATH2), unlink, mkdir, rmdir), in the order they happened. */
void em_powerloss_trace(int on);
/* Event i of the trace (NULL past the end). Valid until the next clear or arm. */
const char *em_powerloss_trace_line(size_t i);
size_t em_powerloss_trace_count(void);
void em_powerloss_trace_clear(void);

/* ---- the hooks src/io calls (while armed; each returns at once otherwise) ---- */
int em_pl_armed(void);
/* A write or punch (data NULL: zeros) of [off, off + len) of fd, queued on ring
 * with ud: before the request is handed to the kernel. */
void em_pl_write(int fd, const void *data, uint64_t len, uint64_t off, const void *ring,
		 uint64_t ud, int punch);
/* A request of ring with user_data ud completed. */
void em_pl_complete(const void *ring, uint64_t ud);
/* ring is going away: its requests never complete as far as we know. */
void em_pl_ring_exit(const void *ring);
/* An fsync of fd (dir: a directory) begins: returns a ticket for em_pl_sync_end. */
uint64_t em_pl_sync_begin(int fd, int dir);
/* ... and returned res. */
void em_pl_sync_end(int fd, int dir, uint64_t ticket, int res);
/* open(path, oflags) with O_CREAT or O_TRUNC is about to run: *st for the end. */
void em_pl_open_begin(const char *path, int oflags, int *st);
void em_pl_open_end(const char *path, int oflags, int st, int fd);
/* Directory changes, done by the simulator itself: 0 or -errno. */
int em_pl_unlink(const char *path);
int em_pl_rename(const char *from, const char *to, int noreplace);
int em_pl_mkdir(const char *path, unsigned mode);
int em_pl_rmdir(const char *path);

#endif
#endif
