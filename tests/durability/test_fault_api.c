/*
 * test_fault_api.c - the fault-injection sites themselves (src/core/fault.c): the
 * triggers (countdown, persistent, every, probability, limit), the $EMBER_FAULTS
 * parser and its bad inputs, and how an injected failure surfaces at each hook:
 * em_alloc* return NULL, em_file_open / em_ring_init / em_ring_submit return the
 * error, and a failed read / write / fsync / punch completes with res = err only
 * after a successful submit, alongside real requests on the same ring. With an
 * argument (env, badenv) it checks what $EMBER_FAULTS armed when the library loaded.
 *
 * Built only with -Dfault_injection=true.
 */
#include <ember.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/fault.h"
#include "io/file.h"
#include "test_util.h"

/* Hits 1..n of site; a bitmap of which failed (n <= 64). */
static uint64_t pattern(enum em_fault_site site, int n)
{
	uint64_t bits = 0;
	for (int i = 0; i < n; i++)
		if (em_fault_hit(site))
			bits |= UINT64_C(1) << i;
	return bits;
}

static void triggers(void)
{
	struct em_fault_spec sp = {0};
	/* disarmed: nothing fails, nothing is counted */
	em_fault_disarm_all();
	CHECK(pattern(EM_FAULT_IO_READ, 64) == 0, "disarmed site fails");
	CHECK(em_fault_hits(EM_FAULT_IO_READ) == 0, "disarmed site counts");

	sp.countdown = 3;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_READ, &sp));
	CHECK(pattern(EM_FAULT_IO_READ, 10) == 0x4, "countdown 3 fails hit 3 only");
	CHECK(em_fault_hits(EM_FAULT_IO_READ) == 10 && em_fault_fired(EM_FAULT_IO_READ) == 1,
	      "counters %llu %llu", (unsigned long long)em_fault_hits(EM_FAULT_IO_READ),
	      (unsigned long long)em_fault_fired(EM_FAULT_IO_READ));

	sp.persistent = true;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_READ, &sp));
	CHECK(pattern(EM_FAULT_IO_READ, 8) == 0xfc, "persistent from hit 3");
	sp.limit = 2;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_READ, &sp));
	CHECK(pattern(EM_FAULT_IO_READ, 8) == 0x0c, "persistent, limit 2");

	memset(&sp, 0, sizeof(sp));
	sp.every = 4;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_WRITE, &sp));
	CHECK(pattern(EM_FAULT_IO_WRITE, 16) == 0x8888, "every 4th");
	CHECK(pattern(EM_FAULT_IO_READ, 8) == 0, "other sites unaffected");

	/* the error injected: the site's default, or the spec's */
	memset(&sp, 0, sizeof(sp));
	sp.countdown = 1;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_FSYNC, &sp));
	CHECK(em_fault_hit(EM_FAULT_IO_FSYNC) == -EIO, "default -EIO");
	sp.err = -ENOSPC;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_FSYNC, &sp));
	CHECK(em_fault_hit(EM_FAULT_IO_FSYNC) == -ENOSPC, "err=-ENOSPC");
	sp.err = 0;
	CHECK_OK(em_fault_arm(EM_FAULT_RING_INIT, &sp));
	CHECK(em_fault_hit(EM_FAULT_RING_INIT) == -ENOMEM, "ring_init default -ENOMEM");

	/* probability: about p of the hits, reproducible for a seed */
	memset(&sp, 0, sizeof(sp));
	sp.probability = 0.25;
	sp.seed = tu_seed();
	CHECK_OK(em_fault_arm(EM_FAULT_ALLOC, &sp));
	int fails = 0;
	uint64_t first = pattern(EM_FAULT_ALLOC, 64);
	for (int i = 0; i < 20000; i++)
		fails += em_fault_hit(EM_FAULT_ALLOC) != 0;
	CHECK(fails > 4500 && fails < 5500, "probability 0.25: %d of 20000", fails);
	CHECK_OK(em_fault_arm(EM_FAULT_ALLOC, &sp));
	CHECK(pattern(EM_FAULT_ALLOC, 64) == first, "same seed, same failures");
	sp.probability = 1;
	CHECK_OK(em_fault_arm(EM_FAULT_ALLOC, &sp));
	CHECK(pattern(EM_FAULT_ALLOC, 64) == UINT64_MAX, "probability 1");

	/* counting only */
	em_fault_count(EM_FAULT_IO_PUNCH);
	CHECK(pattern(EM_FAULT_IO_PUNCH, 7) == 0 && em_fault_hits(EM_FAULT_IO_PUNCH) == 7,
	      "count mode");

	/* bad specs */
	memset(&sp, 0, sizeof(sp));
	CHECK(em_fault_arm(EM_FAULT_IO_READ, &sp) == -EINVAL, "no trigger");
	sp.countdown = 1;
	CHECK(em_fault_arm(EM_FAULT_NSITES, &sp) == -EINVAL, "bad site");
	CHECK(em_fault_arm((enum em_fault_site)-1, &sp) == -EINVAL, "negative site");
	CHECK(em_fault_arm(EM_FAULT_IO_READ, NULL) == -EINVAL, "NULL spec");
	sp.err = EIO;
	CHECK(em_fault_arm(EM_FAULT_IO_READ, &sp) == -EINVAL, "positive err");
	sp.err = 0;
	sp.probability = 1.5;
	CHECK(em_fault_arm(EM_FAULT_IO_READ, &sp) == -EINVAL, "probability > 1");
	CHECK(em_fault_hit(EM_FAULT_NSITES) == 0 && em_fault_hits(EM_FAULT_NSITES) == 0,
	      "out-of-range site is inert");
	em_fault_disarm_all();
}

static void parser(void)
{
	CHECK(em_fault_site_lookup("io_submit") == EM_FAULT_IO_SUBMIT, "lookup");
	CHECK(em_fault_site_lookup("nope") == -1 && em_fault_site_lookup(NULL) == -1, "lookup bad");
	for (int i = 0; i < EM_FAULT_NSITES; i++)
		CHECK(em_fault_site_lookup(em_fault_site_name((enum em_fault_site)i)) == i,
		      "name round trip %d", i);
	CHECK(em_fault_site_name(EM_FAULT_NSITES) == NULL, "name out of range");

	CHECK_OK(em_fault_parse("io_write:countdown=2; alloc:every=3:limit=1,io_read:prob=1:err=ENOSPC"));
	CHECK(pattern(EM_FAULT_IO_WRITE, 4) == 0x2, "parsed countdown");
	CHECK(pattern(EM_FAULT_ALLOC, 9) == 0x4, "parsed every + limit");
	CHECK(em_fault_hit(EM_FAULT_IO_READ) == -ENOSPC, "parsed err name");
	CHECK_OK(em_fault_parse("io_fsync:countdown=0x2:persistent:err=28"));
	CHECK(pattern(EM_FAULT_IO_FSYNC, 4) == 0xe, "hex countdown, persistent");
	em_fault_disarm_all();
	CHECK_OK(em_fault_parse("io_read:probability=0.5:seed=9"));
	em_fault_disarm_all();
	CHECK_OK(em_fault_parse(""));

	const char *bad[] = {
		"nosuchsite:countdown=1", "io_read", "io_read:countdown=", "io_read:countdown=x",
		"io_read:countdown=-1", "io_read:probability=2", "io_read:bogus=1",
		"io_read:err=EWHAT", "io_read:countdown=1:persistent=1", "io_read:err=0",
		"io_write:countdown=1;io_read:countdown=zz",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(em_fault_parse(bad[i]) == -EINVAL, "'%s' accepted", bad[i]);
	/* a bad item arms nothing, even the good items before it */
	CHECK(pattern(EM_FAULT_IO_WRITE, 4) == 0, "partial parse armed a site");
	CHECK(em_fault_parse(NULL) == -EINVAL, "NULL text");
	em_fault_disarm_all();
}

static void alloc_hooks(void)
{
	struct em_fault_spec sp = {.countdown = 1};
	CHECK_OK(em_fault_arm(EM_FAULT_ALLOC, &sp));
	CHECK(em_alloc(16) == NULL, "em_alloc");
	CHECK_OK(em_fault_arm(EM_FAULT_ALLOC, &sp));
	CHECK(em_zalloc(16) == NULL, "em_zalloc");
	CHECK_OK(em_fault_arm(EM_FAULT_ALLOC, &sp));
	CHECK(em_alloc_aligned(4096, 16) == NULL, "em_alloc_aligned");
	void *p = em_alloc(16); /* the countdown is spent */
	CHECK(p != NULL, "alloc after the fault");
	em_free(p, 16);
	/* the public API reports it as EMBER_ENOMEM */
	ember_db *db = (ember_db *)1;
	char dir[4096];
	CHECK_OK(tu_tmpdir_make("fault-api", dir, sizeof(dir)));
	CHECK_OK(em_fault_arm(EM_FAULT_ALLOC, &sp));
	CHECK_RC(ember_open(dir, NULL, &db), EMBER_ENOMEM);
	CHECK(db == NULL, "*db left NULL");
	em_fault_disarm_all();
	/* a session whose ring cannot be set up for memory: EMBER_ENOMEM too, not
	 * -ENOMEM (the graph and cache layers passed -12 through) */
	CHECK_OK(ember_open(dir, NULL, &db));
	ember_session *s = (ember_session *)1;
	CHECK_OK(em_fault_arm(EM_FAULT_RING_INIT, &sp));
	CHECK_RC(ember_session_open(db, &s), EMBER_ENOMEM);
	CHECK(s == NULL, "*session left NULL");
	CHECK_OK(ember_session_open(db, &s));
	CHECK_OK(ember_session_close(s));
	CHECK_OK(ember_close(db));
	em_fault_disarm_all();
	tu_tmpdir_remove(dir);
}

static int res_of[8];
static int reaped;

static void on_cqe(void *ctx, uint64_t ud, int res)
{
	(void)ctx;
	res_of[ud] = res;
	reaped++;
}

static void io_hooks(void)
{
	char dir[4096], path[4200];
	CHECK_OK(tu_tmpdir_make("fault-io", dir, sizeof(dir)));
	snprintf(path, sizeof(path), "%s/f", dir);
	struct em_fault_spec sp = {.countdown = 1};
	struct em_file f;
	struct em_ring r;

	CHECK_OK(em_fault_arm(EM_FAULT_FILE_OPEN, &sp));
	CHECK(em_file_open(&f, path, EM_FILE_CREATE) == -EIO, "file_open");
	CHECK_OK(em_file_open(&f, path, EM_FILE_CREATE));
	CHECK_OK(em_fault_arm(EM_FAULT_RING_INIT, &sp));
	CHECK(em_ring_init(&r, 4) == -ENOMEM, "ring_init");
	CHECK_OK(em_ring_init(&r, 4));

	uint8_t *buf = em_alloc_aligned(EM_IO_ALIGN, 4 * EM_IO_ALIGN);
	CHECK(buf, "buf");
	memset(buf, 0xab, 4 * EM_IO_ALIGN);

	/* a failed write among real ones: res -EIO for it only, after the submit */
	sp.countdown = 2;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_WRITE, &sp));
	for (int i = 0; i < 3; i++)
		CHECK_OK(em_ring_write(&r, &f, buf + i * EM_IO_ALIGN, EM_IO_ALIGN,
				       (uint64_t)i * EM_IO_ALIGN, (uint64_t)i));
	CHECK(r.inflight == 3, "the injected request holds a slot");
	CHECK(em_ring_reap(&r, 0, on_cqe, NULL) == 0, "nothing completes before submit");
	CHECK(em_ring_write(&r, &f, buf, EM_IO_ALIGN, 0, 3) == 0, "fourth slot");
	CHECK(em_ring_write(&r, &f, buf, EM_IO_ALIGN, 0, 4) == -EBUSY, "depth still enforced");
	CHECK_OK(em_ring_submit(&r));
	reaped = 0;
	CHECK(em_ring_reap(&r, 4, on_cqe, NULL) == 4 && reaped == 4, "reaped 4");
	CHECK(res_of[0] == (int)EM_IO_ALIGN && res_of[1] == -EIO && res_of[2] == (int)EM_IO_ALIGN &&
		      res_of[3] == (int)EM_IO_ALIGN,
	      "results %d %d %d %d", res_of[0], res_of[1], res_of[2], res_of[3]);
	CHECK(r.inflight == 0, "inflight back to 0");

	/* each synchronous helper sees its request fail */
	sp.countdown = 1;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_READ, &sp));
	CHECK(em_io_pread(&r, &f, buf, EM_IO_ALIGN, 0) == -EIO, "pread");
	CHECK_OK(em_io_pread(&r, &f, buf, EM_IO_ALIGN, 0));
	CHECK_OK(em_fault_arm(EM_FAULT_IO_WRITE, &sp));
	CHECK(em_io_pwrite(&r, &f, buf, EM_IO_ALIGN, 0) == -EIO, "pwrite");
	sp.err = -ENOSPC;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_FSYNC, &sp));
	CHECK(em_io_fsync(&r, &f) == -ENOSPC, "fsync");
	sp.err = 0;
	CHECK_OK(em_fault_arm(EM_FAULT_IO_PUNCH, &sp));
	CHECK(em_io_punch(&r, &f, 0, EM_IO_ALIGN) == -EIO, "punch");
	CHECK_OK(em_io_fsync(&r, &f));

	/* a failed submit submits nothing; the queued request goes with the next one */
	CHECK_OK(em_fault_arm(EM_FAULT_IO_SUBMIT, &sp));
	CHECK_OK(em_ring_read(&r, &f, buf, EM_IO_ALIGN, 0, 5));
	CHECK(em_ring_submit(&r) == -EIO, "submit");
	CHECK(em_ring_reap_timeout(&r, 20000, on_cqe, NULL) == 0, "nothing was submitted");
	CHECK_OK(em_ring_submit(&r));
	reaped = 0;
	CHECK(em_ring_reap(&r, 1, on_cqe, NULL) == 1 && res_of[5] == (int)EM_IO_ALIGN, "read after");

	/* injected completions still pending at ring exit are dropped (no leak) */
	CHECK_OK(em_fault_arm(EM_FAULT_IO_READ, &sp));
	CHECK_OK(em_ring_read(&r, &f, buf, EM_IO_ALIGN, 0, 6));
	em_fault_disarm_all();
	em_free(buf, 4 * EM_IO_ALIGN);
	em_ring_exit(&r);
	em_file_close(&f);
	tu_tmpdir_remove(dir);
}

/* $EMBER_FAULTS is read when the library loads (the meson test sets it). */
static void from_env(const char *mode)
{
	const char *env = getenv("EMBER_FAULTS");
	CHECK(env, "run with EMBER_FAULTS set");
	if (strcmp(mode, "env") == 0) {
		/* EMBER_FAULTS="io_punch:countdown=2:err=EROFS;alloc:every=3:limit=1" */
		CHECK(em_fault_hit(EM_FAULT_IO_PUNCH) == 0, "punch hit 1");
		CHECK(em_fault_hit(EM_FAULT_IO_PUNCH) == -EROFS, "punch hit 2 fails with -EROFS");
		CHECK(em_fault_hit(EM_FAULT_IO_PUNCH) == 0, "punch hit 3");
		CHECK(pattern(EM_FAULT_ALLOC, 9) == 0x4, "alloc every 3rd, once");
	} else {
		/* a bad string arms nothing */
		for (int i = 0; i < EM_FAULT_NSITES; i++)
			CHECK(pattern((enum em_fault_site)i, 16) == 0, "site %d armed", i);
	}
	em_fault_disarm_all();
}

int main(int argc, char **argv)
{
	tu_init("test_fault_api", argc, argv);
	if (argc >= 2) {
		from_env(argv[1]);
		printf("test_fault_api %s: ok\n", argv[1]);
		return 0;
	}
	triggers();
	parser();
	alloc_hooks();
	io_hooks();
	printf("test_fault_api: ok\n");
	return 0;
}
