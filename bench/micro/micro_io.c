/*
 * micro_io.c - random 4 KiB reads through Ember's own I/O layer (io/file.h:
 * em_file with O_DIRECT, one em_ring), at queue depths 1, 32 and 128: the disk
 * rate a store's read path can reach at most.
 *
 * The file (EMBER_MICRO_FILE_MB MiB, default 256) is written once with real data
 * (reads of a sparse file would never reach the disk) through O_DIRECT, so it is
 * not in the page cache, in the scratch directory (micro.h: /var/tmp by default,
 * never /dev/shm: a filesystem that refuses O_DIRECT makes these benchmarks skip
 * rather than measure memory). Rates are by wall clock; one iteration is one
 * completed read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "micro.h"

#define BLOCK 4096u
#define FILL_CHUNK (1u << 20)
#define FILL_DEPTH 8u

static struct {
	int state; /* 0: not made, 1: ready, -1: failed */
	struct em_file file;
	uint64_t bytes;
	const char *why;
} f;

static void on_write(void *ctx, uint64_t ud, int res)
{
	(void)ud;
	if (res != (int)FILL_CHUNK)
		*(int *)ctx = -1;
}

/* Write the file in rounds of FILL_DEPTH chunk writes, every 4 KiB block distinct
 * (a storage layer that deduplicates must not turn the reads into cache hits). */
static int file_fill(void)
{
	struct em_ring ring;
	uint8_t *buf = NULL;
	uint64_t x = 42, round = (uint64_t)FILL_DEPTH * FILL_CHUNK;
	int failed = 0;
	int rc = em_ring_init(&ring, FILL_DEPTH);

	if (rc < 0)
		return rc;
	if (posix_memalign((void **)&buf, BLOCK, round) != 0) {
		em_ring_exit(&ring);
		return -1;
	}
	for (size_t i = 0; i < round; i += 8) {
		uint64_t v = micro_mix(&x);

		memcpy(buf + i, &v, 8);
	}
	for (uint64_t base = 0; base < f.bytes && rc >= 0 && !failed; base += round) {
		for (uint64_t b = 0; b < round; b += BLOCK) {
			uint64_t tag = base + b;

			memcpy(buf + b, &tag, 8);
		}
		for (uint64_t c = 0; c < FILL_DEPTH && base + c * FILL_CHUNK < f.bytes && rc >= 0; c++)
			rc = em_ring_write(&ring, &f.file, buf + c * FILL_CHUNK, FILL_CHUNK,
					   base + c * FILL_CHUNK, c);
		if (rc >= 0)
			rc = em_ring_submit(&ring);
		while (ring.inflight > 0) /* all of the round, before buf is rewritten */
			if (em_ring_reap(&ring, 1, on_write, &failed) < 0) {
				rc = -1;
				break;
			}
	}
	if (failed)
		rc = -1;
	if (rc >= 0)
		rc = em_io_fsync(&ring, &f.file);
	em_ring_exit(&ring);
	free(buf);
	return rc;
}

/* Make the file on first use; 0, or -1 with f.why set. */
static int file_ready(void)
{
	const char *mb = getenv("EMBER_MICRO_FILE_MB");
	char path[4200], ctx[64];

	if (f.state != 0)
		return f.state > 0 ? 0 : -1;
	f.state = -1;
	f.bytes = (uint64_t)(mb != NULL && atoi(mb) > 0 ? atoi(mb) : 256) << 20;
	if (micro_scratch_file("random-read", path, sizeof(path)) < 0) {
		f.why = "no scratch directory";
		return -1;
	}
	if (em_file_open(&f.file, path, EM_FILE_CREATE | EM_FILE_TRUNCATE) < 0) {
		f.why = "cannot create the file";
		return -1;
	}
	if (!f.file.direct) {
		f.why = "the scratch filesystem refuses O_DIRECT (tmpfs?): set EMBER_MICRO_DIR";
		return -1;
	}
	if (file_fill() < 0) {
		f.why = "writing the file failed";
		return -1;
	}
	snprintf(ctx, sizeof(ctx), "%llu MiB, O_DIRECT", (unsigned long long)(f.bytes >> 20));
	emb_add_context("random_read_file", ctx);
	f.state = 1;
	return 0;
}

typedef struct reads {
	struct em_ring ring;
	uint8_t *bufs;
	uint64_t seed;
	uint32_t *done;  /* slots completed by the last reap */
	unsigned ndone;
	int error;
} reads;

static void on_read(void *ctx, uint64_t slot, int res)
{
	reads *r = ctx;

	if (res != (int)BLOCK)
		r->error = 1;
	r->done[r->ndone++] = (uint32_t)slot;
}

static int queue_read(reads *r, uint32_t slot)
{
	uint64_t off = micro_mix(&r->seed) % (f.bytes / BLOCK) * BLOCK;

	return em_ring_read(&r->ring, &f.file, r->bufs + (size_t)slot * BLOCK, BLOCK, off, slot);
}

static void bm_random_read(emb_state *st)
{
	unsigned depth = (unsigned)emb_state_range(st, 0);
	reads r = { .seed = 1 };
	int64_t done = 0;

	if (file_ready() < 0) {
		emb_state_skip_with_error(st, f.why);
		return;
	}
	r.done = calloc(depth, sizeof(*r.done));
	if (r.done == NULL || posix_memalign((void **)&r.bufs, BLOCK, (size_t)depth * BLOCK) != 0 ||
	    em_ring_init(&r.ring, depth) < 0) {
		emb_state_skip_with_error(st, "cannot set up the ring");
		free(r.done);
		return;
	}
	for (uint32_t s = 0; s < depth; s++)
		queue_read(&r, s);
	em_ring_submit(&r.ring);
	while (emb_state_keep_running_batch(st, depth) && !r.error) {
		int64_t target = done + depth;

		while (done < target && !r.error) {
			r.ndone = 0;
			if (em_ring_reap(&r.ring, 1, on_read, &r) < 0) {
				r.error = 1;
				break;
			}
			for (unsigned i = 0; i < r.ndone; i++)
				queue_read(&r, r.done[i]);
			em_ring_submit(&r.ring);
			done += r.ndone;
		}
	}
	while (r.ring.inflight > 0) { /* before the buffers go */
		r.ndone = 0;
		if (em_ring_reap(&r.ring, 1, on_read, &r) < 0)
			break;
	}
	if (r.error)
		emb_state_skip_with_error(st, "a read failed or came back short");
	emb_set_items_processed(st, done);
	emb_set_bytes_processed(st, done * BLOCK);
	em_ring_exit(&r.ring);
	free(r.bufs);
	free(r.done);
}

void micro_register_io(void)
{
	emb_bench *b = emb_register("io/random_read_4k", bm_random_read);

	b = emb_bench_arg(emb_bench_arg(emb_bench_arg(emb_bench_arg_name(b, "qd"), 1), 32), 128);
	emb_bench_unit_us(emb_bench_real_time(b));
}
