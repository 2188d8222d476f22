/*
 * fault.h - fault injection: named sites in the I/O layer and the allocator that
 * can be made to fail on purpose, so tests can prove that every failure surfaces
 * as an error code and leaves the store usable or cleanly closed (docs/faults.md).
 *
 * Built only with `meson setup -Dfault_injection=true` (which defines
 * EMBER_FAULT_INJECTION=1 and compiles fault.c). Otherwise EM_FAULT(site) is the
 * constant 0 and the hooks vanish at compile time: release builds pay nothing.
 *
 * A site is one kind of operation (a read queued on a ring, an allocation, ...).
 * Each time the code reaches a site it "hits" it; an armed site decides per hit
 * whether that hit fails. A spec arms a site with any mix of:
 *
 *   countdown = N   the N-th hit after arming fails (1 = the next one); with
 *                   persistent, that hit and every later one fail
 *   every = N       hits N, 2N, 3N, ... fail
 *   probability = p each hit fails with probability p (a seeded generator)
 *   limit = K       at most K failures in all (0: no limit)
 *   err = -E        the error an I/O site injects (0: the site's default)
 *
 * How a failure shows (the caller cannot tell it from a real one):
 *   io_read, io_write, io_fsync, io_punch   the request is queued as a read of fd
 *            -1 with the caller's user_data, so it is submitted and completed like
 *            any other; its completion has res = err (default -EIO)
 *   io_submit   em_ring_submit returns err (default -EIO) and submits nothing;
 *            the queued requests stay queued, as after a real failed submit
 *   ring_init   em_ring_init returns err (default -ENOMEM)
 *   file_open   em_file_open returns err (default -EIO)
 *   alloc    em_alloc, em_zalloc, em_alloc_aligned return NULL
 *   store_put   ember_put_batch returns err (default -EIO) after its argument
 *            checks, writing nothing: a store that refused the batch
 *   dio_align   io_dio_read_align reports EM_IO_ALIGN (4096), as a file system
 *            whose direct reads need whole blocks would: no error, a larger
 *            alignment (a later log segment falls back to buffered reads)
 *
 * Arming from the environment: $EMBER_FAULTS, read once when the library loads:
 *   EMBER_FAULTS="io_write:countdown=3;alloc:probability=0.001:seed=7:limit=5"
 * (sites separated by ';' or ',', settings by ':'; see docs/faults.md.)
 * $EMBER_FAULTS_VERBOSE=1 prints a line on stderr for every injected failure, =2
 * also the call stack that hit it.
 *
 * Threads: em_fault_hit may be called from any thread. Arm and disarm while no
 * store thread hits the site (before ember_open or after ember_close), or accept
 * that a racing hit may see the old or the new spec; the counters are atomic.
 */
#ifndef EMBER_CORE_FAULT_H
#define EMBER_CORE_FAULT_H

#include <stdint.h>

enum em_fault_site {
	EM_FAULT_IO_READ = 0,
	EM_FAULT_IO_WRITE,
	EM_FAULT_IO_FSYNC,
	EM_FAULT_IO_PUNCH,
	EM_FAULT_IO_SUBMIT,
	EM_FAULT_RING_INIT,
	EM_FAULT_FILE_OPEN,
	EM_FAULT_ALLOC,
	EM_FAULT_STORE_PUT,
	EM_FAULT_DIO_ALIGN,
	EM_FAULT_NSITES
};

#if defined(EMBER_FAULT_INJECTION) && EMBER_FAULT_INJECTION

#include <stdbool.h>

struct em_fault_spec {
	uint64_t countdown;  /* fail the countdown-th hit after arming; 0: off */
	bool persistent;     /* with countdown: every hit from then on fails too */
	uint64_t every;      /* fail every every-th hit; 0: off */
	double probability;  /* fail each hit with this probability; 0: off */
	uint64_t seed;       /* of the probability generator (0 is a valid seed) */
	uint64_t limit;      /* the most failures injected; 0: no limit */
	int err;             /* negative errno an I/O site injects; 0: its default */
};

/* A hit of site: 0 (go on), or the negative errno the caller must fail with
 * (for EM_FAULT_ALLOC any nonzero value means "return NULL"). */
int em_fault_hit(enum em_fault_site site);

/* Arm site with spec (copied), resetting its hit and failure counters. Returns 0
 * or -EINVAL (unknown site, negative or >1 probability, positive err, or a spec
 * with no trigger at all). */
int em_fault_arm(enum em_fault_site site, const struct em_fault_spec *spec);
void em_fault_disarm(enum em_fault_site site);
void em_fault_disarm_all(void);

/* Count hits of site without failing any (a way to learn how many hits a workload
 * makes before arming a countdown over them). Resets the counters. */
void em_fault_count(enum em_fault_site site);

/* Hits since the site was last armed or counted, and failures injected. */
uint64_t em_fault_hits(enum em_fault_site site);
uint64_t em_fault_fired(enum em_fault_site site);

/* The site's name ("io_read", ...) or NULL; and the reverse (-1 if unknown). */
const char *em_fault_site_name(enum em_fault_site site);
int em_fault_site_lookup(const char *name);

/*
 * Parse and arm a spec string in $EMBER_FAULTS syntax. Sites not named are left
 * as they are. Returns 0, or -EINVAL with nothing armed when any part is bad.
 */
int em_fault_parse(const char *text);

/* Verbose reporting: 0 off, 1 a stderr line per injected failure, 2 with a backtrace. */
void em_fault_set_verbose(int on);

/*
 * Injected I/O failures (used by io/ring.c only). A request that must fail goes to
 * the kernel as a read of fd -1 (which completes with EM_FAULT_RING_MARK = -EBADF)
 * and is recorded here against its ring and user_data; when its completion comes
 * back, the reaper swaps the mark for the injected error.
 *   em_fault_ring_queue(ring, ud, err)    record one; 0 or -ENOMEM
 *   em_fault_ring_result(ring, ud, res)   res of a completion: err (and the record
 *                                         removed) if res is the mark and ring has
 *                                         one recorded for ud, else res itself
 *   em_fault_ring_forget(ring)            drop all of the ring's (ring exit);
 *                                         returns how many were dropped
 * A real request of the store never uses fd -1, so the mark cannot be confused.
 */
#define EM_FAULT_RING_MARK (-9) /* -EBADF */
int em_fault_ring_queue(const void *ring, uint64_t ud, int err);
int em_fault_ring_result(const void *ring, uint64_t ud, int res);
unsigned em_fault_ring_forget(const void *ring);

#define EM_FAULT(site) em_fault_hit(site)
#define EM_FAULT_RING_RESULT(ring, ud, res) em_fault_ring_result((ring), (ud), (res))
#define EM_FAULT_RING_FORGET(ring) ((void)em_fault_ring_forget(ring))

#else /* compiled out: constants the optimiser removes */

#define EM_FAULT(site) 0
#define EM_FAULT_RING_RESULT(ring, ud, res) (res)
#define EM_FAULT_RING_FORGET(ring) ((void)0)

#endif

#endif
