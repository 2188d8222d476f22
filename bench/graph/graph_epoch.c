/*
 * graph_epoch.c - ember-graph-epoch: one training epoch through the partition
 * buffer against the I/O it cannot avoid.
 *
 * Steps (each timed and reported):
 *   1. generate a Graph500-style R-MAT edge list (a=0.57, b=0.19, c=0.19, seeded)
 *      and import it into a fresh store: p partitions of dim-float embeddings;
 *   2. probe the disk: sequential O_DIRECT writes of a new probe file in the
 *      store's directory, the same writes over it, then reads of it (4 MiB requests
 *      into huge pages, as the store's large reads use) -> write bandwidth (the
 *      faster of the two writes) and read bandwidth; probed again after the epoch,
 *      and the floor takes the fastest probe each way (the device drifts, and is
 *      slower for a while after writes that appended);
 *   3. an epoch of an ordering (BETA by default) over a buffer of c partitions (+2
 *      prefetch slots), node data >= 4x the buffer: per batch of edges, a synthetic
 *      compute time (sleep, as a GPU step would leave the CPU to the buffer's
 *      threads) and a scatter-add of both ends' rows (all partitions go dirty),
 *      handed to the buffer's updater thread (ember_graph_buffer_update_async: the
 *      gradient rows stay put) so that it overlaps the next batch's compute, as a
 *      trainer whose GPU step runs asynchronously would (--sync-updates applies it
 *      on the trainer's thread, ember_graph_buffer_update); then a flush;
 *   4. the I/O floor: bytes the ordering must move per the ordering simulator
 *      (partition reads and dirty writes, each assigned bucket read once) divided
 *      by the probed bandwidths; the goal is epoch <= 1.2 x max(floor, compute).
 *      Beside it, what the disk really did in the epoch: bytes from the process's
 *      I/O counters (less than the floor's when a partition is still in the store's
 *      in-memory log) and the device's busy time (/sys/dev/block/M:m/stat);
 *   5. sampler throughput: 2 layers, fan-out 10, batches of roots over one state of
 *      a buffer holding every in-buffer bucket (sampled nodes per second).
 * --prefetch N sets the extra slots (states read ahead); 0 for none. --store-mib
 * and --store-mutable set the store's log memory (default 16 MiB) and its mutable
 * fraction (default 0.25: each 4 MiB write-back stays mutable, unflushed, until the
 * next one is written; 0.0625, one page, flushes it at once, which measured faster
 * with --store-prewrite and slower with one appended file);
 * --store-segment-mib N keeps the store's logs as segment
 * files of N MiB (log_segment_bytes; default 0: one file per log). --epochs N runs
 * N epochs (a line each; the floor counts N times the ordering's bytes), and
 * --store-hot-mib N gives the store's hot log a disk budget of N MiB, so that
 * compaction keeps it bounded epoch after epoch (default: big enough for none).
 * --store-prewrite opens the store with EMBER_OPEN_PREWRITE_LOG (needs
 * --store-segment-mib): the hot log's budget is written ahead as spare segment
 * files before the import, timed on its own ("store open").
 * Prints a table and, with --json FILE, the same figures as JSON.
 */
#include <ember.h>
#include <ember_graph.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

struct cfg {
	const char *dir;
	const char *json;
	uint32_t scale, edge_factor, partitions, capacity, dim, batch, prefetch, chunk_kib, store_mib;
	uint32_t store_segment_mib;
	uint32_t store_hot_mib; /* the store's hot disk budget (0: big enough for no compaction) */
	int store_prewrite;     /* EMBER_OPEN_PREWRITE_LOG */
	uint32_t epochs;
	double store_mutable;
	uint64_t seed;
	double compute_ms;
	int comet;
	int sync_updates;
	uint64_t probe_bytes;
	double sample_seconds;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds this process has used (all threads). */
/* bytes this process made the block layer read and write (/proc/self/io): what the
 * disk really moved, whatever the store did to serve the buffer */
static void proc_io(uint64_t *rd, uint64_t *wr)
{
	*rd = *wr = 0;
	FILE *f = fopen("/proc/self/io", "r");
	if (!f)
		return;
	char line[128];
	unsigned long long v;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "read_bytes: %llu", &v) == 1)
			*rd = v;
		else if (sscanf(line, "write_bytes: %llu", &v) == 1)
			*wr = v;
	}
	fclose(f);
}

/* milliseconds the disk under dir was busy (io_ticks of /sys/dev/block/M:m/stat, which
 * counts any I/O, ours or not); -1 when unknown */
static long long disk_busy_ms(const char *dir)
{
	struct stat sb;
	if (stat(dir, &sb) != 0)
		return -1;
	char path[96];
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/stat", major(sb.st_dev), minor(sb.st_dev));
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	unsigned long long v[10];
	int n = fscanf(f, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		       &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
	fclose(f);
	return n == 10 ? (long long)v[9] : -1;
}

static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* The 1-minute load average (other work on the machine), 0 if unknown. */
static double load_avg(void)
{
	double l = 0;
	FILE *f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = 0;
		fclose(f);
	}
	return l;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "ember-graph-epoch: %s: %s\n", what, ember_strerror(rc));
	exit(1);
}

static uint64_t rs[4];
static uint64_t rnext(void)
{
	uint64_t *s = rs, r = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = s[3] << 45 | s[3] >> 19;
	return r;
}

static void rseed(uint64_t x)
{
	for (int i = 0; i < 4; i++) {
		uint64_t z = (x += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		rs[i] = z ^ (z >> 31);
	}
}

static void rmat(const char *path, uint32_t scale, uint64_t m)
{
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		exit(1);
	}
	const double a = 0.57, ab = 0.76, abc = 0.95;
	for (uint64_t e = 0; e < m; e++) {
		uint64_t v[2] = {0, 0};
		for (uint32_t bit = 0; bit < scale; bit++) {
			double r = (double)(rnext() >> 11) * (1.0 / 9007199254740992.0);
			v[0] = v[0] << 1 | (r >= ab);
			v[1] = v[1] << 1 | ((r >= a && r < ab) || r >= abc);
		}
		if (fwrite(v, 8, 2, f) != 2) {
			perror("fwrite");
			exit(1);
		}
	}
	if (fclose(f)) {
		perror("fclose");
		exit(1);
	}
}

/* A probe's 4 MiB request buffer of random bytes, on huge pages as the store's own
 * large reads use (em_alloc_io): a direct read into 4 KiB pages is split into many
 * requests and the device looks slower. NULL if refused. */
static void *probe_buf(void)
{
	void *buf = NULL;
	if (posix_memalign(&buf, 2u << 20, 4u << 20))
		return NULL;
	(void)madvise(buf, 4u << 20, MADV_HUGEPAGE);
	for (size_t i = 0; i < (4u << 20) / 8; i++)
		((uint64_t *)buf)[i] = rnext();
	return buf;
}

/* `bytes` of sequential O_DIRECT 4 MiB writes, synced: 1 if all went. A new file
 * (`fresh`: every write allocates blocks, as a log that appends does) or one written
 * before (overwrites, as a log written ahead or recycling its segments does). */
static int probe_write(const char *path, uint64_t bytes, const void *buf, bool fresh)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_DIRECT | (fresh ? O_TRUNC : 0), 0600);
	if (fd < 0)
		return 0;
	uint64_t o = 0;
	for (; o < bytes; o += 4u << 20)
		if (pwrite(fd, buf, 4u << 20, (off_t)o) != (ssize_t)(4u << 20))
			break;
	int ok = o >= bytes && fdatasync(fd) == 0;
	close(fd);
	return ok;
}

/* `bytes` of sequential O_DIRECT 4 MiB reads: 1 if all went. */
static int probe_read(const char *path, uint64_t bytes, void *buf)
{
	int fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		return 0;
	uint64_t o = 0;
	for (; o < bytes; o += 4u << 20)
		if (pread(fd, buf, 4u << 20, (off_t)o) != (ssize_t)(4u << 20))
			break;
	close(fd);
	return o >= bytes;
}

/* The mixed probe's writer thread. */
struct mixed_writer {
	const char *path;
	uint64_t bytes;
	const void *buf;
	int ok;
};

static void *mixed_write(void *arg)
{
	struct mixed_writer *w = arg;
	w->ok = probe_write(w->path, w->bytes, w->buf, false);
	return NULL;
}

/*
 * Seconds the disk takes to read `bytes` and write `bytes` at the same time (two
 * threads, sequential O_DIRECT 4 MiB requests into huge pages, the writes over a
 * file written before): what a buffer that overlaps its reads with its write-backs
 * asks of the device. On the bench VM this took 1.2x the sum of the two alone when
 * the writes appended, so the sequential floor was not reachable by any overlap
 * there (bench/results/2026-11-27-graph-epochs.md). -1 if refused.
 */
static double probe_mixed(const char *dir, uint64_t bytes)
{
	char rpath[4200], wpath[4200];
	snprintf(rpath, sizeof(rpath), "%s/probe-r", dir);
	snprintf(wpath, sizeof(wpath), "%s/probe-w", dir);
	void *rbuf = probe_buf(), *wbuf = probe_buf();
	double t = -1;
	/* the file to read, and the one to overwrite */
	if (!rbuf || !wbuf || !probe_write(rpath, bytes, wbuf, true) ||
	    !probe_write(wpath, bytes, wbuf, true))
		goto out;
	struct mixed_writer w = {wpath, bytes, wbuf, 0};
	pthread_t th;
	double t0 = now();
	if (pthread_create(&th, NULL, mixed_write, &w) != 0)
		goto out;
	int rok = probe_read(rpath, bytes, rbuf);
	pthread_join(th, NULL);
	double el = now() - t0;
	if (rok && w.ok)
		t = el;
out:
	unlink(rpath);
	unlink(wpath);
	free(rbuf);
	free(wbuf);
	return t;
}

static double dmax(double a, double b)
{
	return a > b ? a : b;
}

/*
 * Sequential O_DIRECT writes of `bytes` to a new file, the same writes over it again,
 * then reads of it: bytes/s each (0 if refused). The disk's write bandwidth is the
 * faster of the two writes: on ext4 over this VM's disk, writes that allocate run
 * 10-35% slower than overwrites, and a store written ahead overwrites, so a floor
 * from appends alone would be one its epochs could beat without moving bytes any
 * faster than the device can.
 */
static void probe_disk(const char *dir, uint64_t bytes, double *wbw, double *obw, double *rbw)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/probe", dir);
	*wbw = *obw = *rbw = 0;
	void *buf = probe_buf();
	if (!buf)
		return;
	double t0 = now();
	if (probe_write(path, bytes, buf, true)) {
		*wbw = (double)bytes / (now() - t0);
		t0 = now();
		if (probe_write(path, bytes, buf, false))
			*obw = (double)bytes / (now() - t0);
		t0 = now();
		if (probe_read(path, bytes, buf))
			*rbw = (double)bytes / (now() - t0);
	}
	unlink(path);
	free(buf);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: ember-graph-epoch [--dir DIR] [--scale 19] [--edge-factor 8] [--partitions 32]\n"
		"         [--capacity 4] [--prefetch 2] [--chunk-kib 4096] [--dim 64] [--batch 10000] [--compute-ms 2] [--comet]\n"
		"         [--sync-updates] [--store-mib 16] [--store-mutable 0.25] [--store-segment-mib 0]\n"
		"         [--store-hot-mib 0] [--store-prewrite] [--epochs 1]\n"
		"         [--seed 1] [--probe-mib 512] [--sample-seconds 2] [--json FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct cfg c = {.scale = 19, .edge_factor = 8, .partitions = 32, .capacity = 4, .dim = 64,
			.batch = 10000, .prefetch = 2, .store_mib = 16, .store_mutable = 0.25, .seed = 1, .compute_ms = 2.0, .probe_bytes = 512ull << 20,
			.sample_seconds = 2.0, .epochs = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--comet")) {
			c.comet = 1;
			continue;
		}
		if (!strcmp(a, "--sync-updates")) {
			c.sync_updates = 1;
			continue;
		}
		if (!strcmp(a, "--store-prewrite")) {
			c.store_prewrite = 1;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--dir"))
			c.dir = v;
		else if (!strcmp(a, "--json"))
			c.json = v;
		else if (!strcmp(a, "--scale"))
			c.scale = (uint32_t)atoi(v);
		else if (!strcmp(a, "--edge-factor"))
			c.edge_factor = (uint32_t)atoi(v);
		else if (!strcmp(a, "--partitions"))
			c.partitions = (uint32_t)atoi(v);
		else if (!strcmp(a, "--capacity"))
			c.capacity = (uint32_t)atoi(v);
		else if (!strcmp(a, "--dim"))
			c.dim = (uint32_t)atoi(v);
		else if (!strcmp(a, "--chunk-kib"))
			c.chunk_kib = (uint32_t)atoi(v);
		else if (!strcmp(a, "--store-mib"))
			c.store_mib = (uint32_t)atoi(v);
		else if (!strcmp(a, "--store-hot-mib"))
			c.store_hot_mib = (uint32_t)atoi(v);
		else if (!strcmp(a, "--epochs"))
			c.epochs = (uint32_t)atoi(v);
		else if (!strcmp(a, "--store-mutable"))
			c.store_mutable = atof(v);
		else if (!strcmp(a, "--store-segment-mib"))
			c.store_segment_mib = (uint32_t)atoi(v);
		else if (!strcmp(a, "--prefetch"))
			c.prefetch = (uint32_t)atoi(v);
		else if (!strcmp(a, "--batch"))
			c.batch = (uint32_t)atoi(v);
		else if (!strcmp(a, "--compute-ms"))
			c.compute_ms = atof(v);
		else if (!strcmp(a, "--seed"))
			c.seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--probe-mib"))
			c.probe_bytes = strtoull(v, NULL, 10) << 20;
		else if (!strcmp(a, "--sample-seconds"))
			c.sample_seconds = atof(v);
		else
			usage();
	}
	if (c.scale < 8 || c.scale > 32 || !c.edge_factor || c.capacity < 2 ||
	    c.capacity > c.partitions || !c.dim || !c.batch || !c.store_mib ||
	    !(c.store_mutable > 0 && c.store_mutable <= 1))
		usage();
	char dirbuf[4096];
	int made = 0;
	if (!c.dir) {
		const char *t = getenv("TMPDIR");
		snprintf(dirbuf, sizeof(dirbuf), "%s/ember-graph-epoch-XXXXXX", t && *t ? t : "/tmp");
		if (!mkdtemp(dirbuf)) {
			perror("mkdtemp");
			return 1;
		}
		c.dir = dirbuf;
		made = 1;
	} else {
		mkdir(c.dir, 0755);
	}
	rseed(c.seed);
	char edges[4200], store[4200];
	snprintf(edges, sizeof(edges), "%s/rmat.bin", c.dir);
	snprintf(store, sizeof(store), "%s/store", c.dir);
	uint64_t m = (uint64_t)c.edge_factor << c.scale;
	double t0 = now();
	rmat(edges, c.scale, m);
	double t_gen = now() - t0;

	/* the store: a small in-memory log (16 MiB, four partitions' worth), so that
	 * partitions come from the disk; with 64 MiB it served about a sixth of the
	 * reads from memory (the "disk moved" line), memory beside the buffer's */
	ember_options so;
	ember_options_default(&so);
	so.log_memory = (uint64_t)c.store_mib << 20;
	/* write-backs are whole new values, never updated in place: a small mutable
	 * region starts their flush early, so a put seldom waits for log space (with
	 * the default 0.9 the writer's puts took 5.7 ms each instead of 1.9 ms, and the
	 * trainer waited behind them) */
	so.mutable_fraction = c.store_mutable;
	so.log_segment_bytes = (uint64_t)c.store_segment_mib << 20;
	uint64_t node_bytes = ((uint64_t)1 << c.scale) * c.dim * 4;
	so.hot_disk_budget = 6 * (node_bytes + m * 12) + (1ull << 30);
	if (c.store_hot_mib) /* compaction keeps the log within it, epoch after epoch */
		so.hot_disk_budget = (uint64_t)c.store_hot_mib << 20;
	so.flags = EMBER_OPEN_TRUNCATE | (c.store_prewrite ? EMBER_OPEN_PREWRITE_LOG : 0);
	ember_db *db = NULL;
	t0 = now();
	int rc = ember_open(store, &so, &db);
	if (rc < 0)
		die("open", rc);
	double t_open = now() - t0;
	ember_graph_import_options io;
	ember_graph_import_options_default(&io);
	io.partitions = c.partitions;
	io.dim = c.dim;
	io.format = EMBER_GRAPH_BINARY;
	io.seed = c.seed;
	io.tmp_dir = c.dir;
	io.memory_budget = 64u << 20;
	io.chunk_bytes = c.chunk_kib << 10; /* 0: the default, 4 MiB */
	ember_graph_import_result ir;
	t0 = now();
	rc = ember_graph_import(db, "rmat", edges, &io, &ir);
	if (rc < 0) {
		fprintf(stderr, "import: %s\n", ir.error);
		die("import", rc);
	}
	double t_import = now() - t0;
	unlink(edges);
	ember_graph *g = NULL;
	if ((rc = ember_graph_open(db, "rmat", &g)) < 0)
		die("graph open", rc);
	ember_graph_info gi;
	ember_graph_info_get(g, &gi);
	uint64_t part_bytes = gi.partition_size * gi.dim * 4;

	double wbw, obw, rbw;
	probe_disk(c.dir, c.probe_bytes, &wbw, &obw, &rbw);

	/* ---- the epoch ---- */
	ember_graph_ordering_options oo;
	ember_graph_ordering_options_default(&oo);
	oo.seed = c.seed;
	int kind = c.comet ? EMBER_GRAPH_ORDERING_COMET : EMBER_GRAPH_ORDERING_BETA;
	ember_graph_ordering *ord = NULL;
	if ((rc = ember_graph_ordering_create(c.partitions, c.capacity, kind, &oo, &ord)) < 0)
		die("ordering", rc);
	ember_graph_ordering_info oi;
	ember_graph_ordering_info_get(ord, &oi);
	ember_graph_sim_options sim;
	ember_graph_sim_options_default(&sim);
	sim.partition_bytes = part_bytes;
	sim.bucket_bytes = gi.num_edges * 12 / ((uint64_t)gi.partitions * gi.partitions);
	ember_graph_sim_epoch se;
	if ((rc = ember_graph_ordering_simulate(c.partitions, c.capacity, kind, &oo, &sim, &se, 1)) < 0)
		die("simulate", rc);
	ember_graph_buffer_options bo;
	ember_graph_buffer_options_default(&bo);
	bo.capacity = c.capacity;
	bo.prefetch_slots = c.prefetch ? c.prefetch : EMBER_GRAPH_BUFFER_NO_PREFETCH;
	bo.seed = c.seed;
	ember_graph_buffer *b = NULL;
	if ((rc = ember_graph_buffer_open(g, &bo, &b)) < 0)
		die("buffer open", rc);
	ember_graph_buffer_stats st0;
	ember_graph_buffer_stats_get(b, &st0);
	ember_graph_edge *batch = malloc(c.batch * sizeof(*batch));
	uint64_t *nodes = malloc(2 * (size_t)c.batch * 8);
	float *grad = malloc(2 * (size_t)c.batch * c.dim * 4);
	for (size_t i = 0; i < 2 * (size_t)c.batch * c.dim; i++)
		grad[i] = 1e-3f;
	uint64_t batches = 0, edges_done = 0;
	double t_compute = 0, t_update = 0, t_batch = 0, t_state = 0;
	struct timespec sl = {.tv_sec = (time_t)(c.compute_ms / 1000),
			      .tv_nsec = (long)(((c.compute_ms / 1000) - (double)(time_t)(c.compute_ms / 1000)) * 1e9)};
	uint64_t prd0, pwr0, prd1, pwr1;
	ember_stats es0, es1;
	ember_stats_get(db, &es0);
	proc_io(&prd0, &pwr0);
	long long busy0 = disk_busy_ms(c.dir);
	double te0 = now(), cpu0 = cpu_now();
	double *ep_s = calloc(c.epochs, sizeof(double)), *ep_c = calloc(c.epochs, sizeof(double));
	for (uint32_t ep = 0; ep < c.epochs; ep++) {
	/* each epoch's own figures, printed one line each when there are several */
	double ep0 = now();
	ember_graph_buffer_stats sq;
	ember_graph_buffer_stats_get(b, &sq);
	ember_stats eq;
	ember_stats_get(db, &eq);
	long long bq = disk_busy_ms(c.dir);
	double cq = t_compute;
	if ((rc = ember_graph_buffer_set_ordering(b, ord)) < 0)
		die("set_ordering", rc);
	for (;;) {
		ember_graph_state gs;
		double s0 = now();
		rc = ember_graph_buffer_next_state(b, &gs);
		t_state += now() - s0;
		if (rc == EMBER_ENOTFOUND)
			break;
		if (rc < 0)
			die("next_state", rc);
		for (;;) {
			size_t n;
			double u0 = now();
			ember_graph_buffer_next_batch(b, batch, c.batch, &n);
			if (n == 0)
				break;
			double u1 = now();
			if (c.compute_ms > 0)
				nanosleep(&sl, NULL);
			double u2 = now();
			for (size_t i = 0; i < n; i++) {
				nodes[2 * i] = batch[i].src;
				nodes[2 * i + 1] = batch[i].dst;
			}
			rc = c.sync_updates
				     ? ember_graph_buffer_update(b, 2 * n, nodes, grad, EMBER_GRAPH_UPDATE_ADD)
				     : ember_graph_buffer_update_async(b, 2 * n, nodes, grad, EMBER_GRAPH_UPDATE_ADD);
			if (rc < 0)
				die("update", rc);
			t_compute += u2 - u1;
			t_update += (now() - u2) + (u1 - u0);
			t_batch += u1 - u0;
			batches++;
			edges_done += n;
		}
	}
	if ((rc = ember_graph_buffer_flush(b)) < 0)
		die("flush", rc);
	ep_s[ep] = now() - ep0;
	ep_c[ep] = t_compute - cq;
	if (c.epochs > 1) {
		ember_graph_buffer_stats sr;
		ember_graph_buffer_stats_get(b, &sr);
		ember_stats er;
		ember_stats_get(db, &er);
		long long br = disk_busy_ms(c.dir);
		printf("  epoch %-3u %.2f s (compute %.2f s, waiting %.2f s, disk busy %.2f s; "
		       "compaction read %.1f MiB, wrote %.1f MiB; hot log %.0f MiB, cold %.0f MiB)\n",
		       ep + 1, ep_s[ep], t_compute - cq, sr.wait_seconds - sq.wait_seconds,
		       bq >= 0 && br >= bq ? (double)(br - bq) / 1e3 : -1.0,
		       (double)(er.compaction_bytes_read - eq.compaction_bytes_read) / 1048576,
		       (double)(er.compaction_bytes_written - eq.compaction_bytes_written) / 1048576,
		       (double)er.hot.bytes_disk / 1048576, (double)er.cold.bytes_disk / 1048576);
	}
	}
	double t_epoch = now() - te0, cpu_epoch = cpu_now() - cpu0;
	proc_io(&prd1, &pwr1);
	long long busy1 = disk_busy_ms(c.dir);
	ember_stats_get(db, &es1);
	/* the device's speed drifts on a shared host: probe again after the epoch and
	 * take the floor at the faster of the two probes, each way. Not their mean:
	 * after an epoch whose writes appended, this VM's disk read and wrote up to
	 * 40% slower for a while (after-probes of 1.1-1.5 GB/s read against 2.1-2.9
	 * before), which flattered that epoch's ratio; after one
	 * whose writes overwrote, the two probes agreed */
	double wbw2, obw2, rbw2, wbw1 = wbw, obw1 = obw, rbw1 = rbw;
	probe_disk(c.dir, c.probe_bytes, &wbw2, &obw2, &rbw2);
	wbw = dmax(dmax(wbw1, obw1), dmax(wbw2, obw2)); /* writes: the fastest probe */
	rbw = dmax(rbw1, rbw2);
	double t_mixed = probe_mixed(c.dir, c.probe_bytes);
	ember_graph_buffer_stats st;
	ember_graph_buffer_stats_get(b, &st);
	ember_graph_buffer_close(b);
	ember_graph_ordering_destroy(ord);
	se.bytes_read *= c.epochs; /* the ordering's bytes, every epoch */
	se.bytes_written *= c.epochs;
	double floor_s = (rbw > 0 ? (double)se.bytes_read / rbw : 0) +
			 (wbw > 0 ? (double)se.bytes_written / wbw : 0);
	double bound = floor_s > t_compute ? floor_s : t_compute;
	/* the same bytes at the mixed probe's pace (it moved probe_bytes each way) */
	double floor_mixed = t_mixed > 0 ? t_mixed * (double)(se.bytes_read + se.bytes_written) /
						   (2.0 * (double)c.probe_bytes)
					 : 0;
	double bound_mixed = floor_mixed > t_compute ? floor_mixed : t_compute;

	/* ---- sampler throughput over one state holding every in-buffer bucket ---- */
	bo.flags = EMBER_GRAPH_BUFFER_ALL_EDGES;
	if ((rc = ember_graph_buffer_open(g, &bo, &b)) < 0)
		die("buffer open (sampling)", rc);
	uint32_t *states = malloc(c.capacity * 4), *bst = malloc((size_t)c.partitions * c.partitions * 4);
	for (uint32_t i = 0; i < c.capacity; i++)
		states[i] = i;
	for (size_t i = 0; i < (size_t)c.partitions * c.partitions; i++)
		bst[i] = (i / c.partitions < c.capacity && i % c.partitions < c.capacity) ? 0
											   : EMBER_GRAPH_NO_STATE;
	ember_graph_plan plan = {.partitions = c.partitions, .capacity = c.capacity, .num_states = 1,
				 .states = states, .bucket_state = bst};
	if ((rc = ember_graph_buffer_set_plan(b, &plan)) < 0 || (rc = ember_graph_buffer_next_state(b, NULL)) < 0)
		die("sampling state", rc);
	ember_graph_sampler_options sop;
	ember_graph_sampler_options_default(&sop); /* 2 layers, fan-out 10 */
	sop.seed = c.seed;
	ember_graph_sampler *smp = NULL;
	if ((rc = ember_graph_sampler_open(b, &sop, &smp)) < 0)
		die("sampler", rc);
	uint64_t roots[1000], sampled = 0, runs = 0, sampled_edges = 0;
	float *staging = NULL;
	size_t staging_rows = 0;
	double ts0 = now(), t_gather = 0;
	while (now() - ts0 < c.sample_seconds) {
		for (int i = 0; i < 1000; i++)
			roots[i] = (rnext() % c.capacity) * gi.partition_size + rnext() % gi.partition_size;
		for (int i = 0; i < 1000; i++)
			if (roots[i] >= gi.num_nodes)
				roots[i] = 0;
		ember_graph_sample sm;
		if ((rc = ember_graph_sampler_run(smp, 1000, roots, &sm)) < 0)
			die("sample", rc);
		if (sm.num_nodes > staging_rows) {
			free(staging);
			staging_rows = sm.num_nodes * 2;
			staging = malloc(staging_rows * gi.dim * 4);
		}
		double g0 = now();
		if ((rc = ember_graph_sampler_gather(smp, staging, staging_rows)) < 0)
			die("gather", rc);
		t_gather += now() - g0;
		sampled += sm.num_nodes;
		sampled_edges += sm.edge_offsets[sm.layers];
		runs++;
	}
	double t_sample = now() - ts0;
	ember_graph_sampler_close(smp);
	ember_graph_buffer_close(b);
	free(states);
	free(bst);
	free(staging);

	printf("ember-graph-epoch: R-MAT scale %u (%llu nodes, %llu edges), dim %u, p=%u c=%u (+%u prefetch), %s\n",
	       c.scale, (unsigned long long)gi.num_nodes, (unsigned long long)gi.num_edges, c.dim,
	       c.partitions, c.capacity, st.slots - c.capacity, c.comet ? "COMET" : "BETA");
	printf("  %-34s %10.1f MiB  (%.1fx the buffer's %.1f MiB of slots)\n", "node data",
	       (double)gi.num_nodes * gi.dim * 4 / 1048576, (double)gi.num_nodes * gi.dim * 4 / ((double)st.slots * part_bytes),
	       (double)st.slots * part_bytes / 1048576);
	printf("  %-34s %10u MiB  (mutable fraction %.4f; the store's memory, beside the buffer's)\n",
	       "store log memory", c.store_mib, c.store_mutable);
	if (c.store_segment_mib)
		printf("  %-34s %10u MiB\n", "store log segment files", c.store_segment_mib);
	printf("  %-34s %10.2f s%s\n", "store open", t_open,
	       c.store_prewrite ? " (the hot log's budget written ahead)" : "");
	printf("  %-34s %10.2f s (generate %.2f s)\n", "import", t_import, t_gen);
	printf("  %-34s %10.0f MB/s write, %.0f MB/s read (O_DIRECT, 4 MiB; the fastest of: before the epoch "
	       "%.0f new/%.0f over/%.0f read, after %.0f/%.0f/%.0f)\n", "disk probe", wbw / 1e6, rbw / 1e6,
	       wbw1 / 1e6, obw1 / 1e6, rbw1 / 1e6, wbw2 / 1e6, obw2 / 1e6, rbw2 / 1e6);
	printf("  %-34s %10llu (lower bound %llu, states %u)\n", "swaps", (unsigned long long)oi.swaps,
	       (unsigned long long)oi.lower_bound, oi.states);
	printf("  %-34s %10.1f MiB read, %.1f MiB written\n", "ordering must move (simulator)",
	       (double)se.bytes_read / 1048576, (double)se.bytes_written / 1048576);
	printf("  %-34s %10.1f MiB read, %.1f MiB written (%llu partitions read, %llu reclaimed, %llu written)\n",
	       "buffer moved", (double)st.bytes_read / 1048576, (double)st.bytes_written / 1048576,
	       (unsigned long long)st.partitions_read, (unsigned long long)st.partitions_reclaimed,
	       (unsigned long long)st.partitions_written);
	double floor_par = (rbw > 0 ? (double)se.bytes_read / rbw : 0);
	if (wbw > 0 && (double)se.bytes_written / wbw > floor_par)
		floor_par = (double)se.bytes_written / wbw;
	printf("  %-34s %10.1f MiB read, %.1f MiB written (process I/O counters; store: %.1f MiB user "
	       "reads, %.1f MiB compaction reads, %.1f MiB compaction writes)\n", "disk moved",
	       (double)(prd1 - prd0) / 1048576, (double)(pwr1 - pwr0) / 1048576,
	       (double)(es1.disk_bytes_read - es0.disk_bytes_read) / 1048576,
	       (double)(es1.compaction_bytes_read - es0.compaction_bytes_read) / 1048576,
	       (double)(es1.compaction_bytes_written - es0.compaction_bytes_written) / 1048576);
	if (busy0 >= 0 && busy1 >= busy0)
		printf("  %-34s %10.2f s (%.0f%% of the epoch; the device's own count, other I/O included)\n",
		       "disk busy", (double)(busy1 - busy0) / 1e3, (double)(busy1 - busy0) / 10 / t_epoch);
	printf("  %-34s %10.2f s (reads + writes; %.2f s if the disk overlaps them)\n", "I/O floor",
	       floor_s, floor_par);
	if (floor_mixed > 0)
		printf("  %-34s %10.2f s (%.2fx the floor: the disk reading and writing at once, "
		       "as any overlap must)\n", "I/O floor, mixed", floor_mixed, floor_mixed / floor_s);
	printf("  %-34s %10.2f s (%llu batches x %.2f ms)\n", "compute (synthetic)", t_compute,
	       (unsigned long long)batches, c.compute_ms);
	printf("  %-34s %10.2f s (next_batch %.2f s, update %.2f s)\n", "trainer examples + scatter-add",
	       t_update, t_batch, t_update - t_batch);
	printf("  %-34s %10.2f s (of which waiting %.2f s; examples of %llu states built ahead)\n",
	       "trainer in next_state", t_state, st.wait_seconds, (unsigned long long)st.states_prepared);
	for (uint32_t ep = 0; c.epochs > 1 && ep < c.epochs; ep++) {
		double f1 = floor_s / c.epochs;
		printf("  %-34s %10.2f s = %.2fx max(floor, compute)\n", ep == 0 ? "each epoch" : "",
		       ep_s[ep], ep_s[ep] / (f1 > ep_c[ep] ? f1 : ep_c[ep]));
	}
	printf("  %-34s %10.2f s = %.2fx max(floor, compute) (goal <= 1.2x)\n",
	       c.epochs > 1 ? "all epochs" : "epoch", t_epoch,
	       bound > 0 ? t_epoch / bound : 0);
	double bound2 = floor_s > t_compute + t_update ? floor_s : t_compute + t_update;
	printf("  %-34s %10.2fx max(floor, compute + trainer CPU)\n", "", t_epoch / bound2);
	if (floor_mixed > 0)
		printf("  %-34s %10.2fx max(mixed floor, compute)\n", "", t_epoch / bound_mixed);
	printf("  %-34s %10.2f s (%.1f%% of the epoch; I/O %.2f s, updates %.2f s)\n",
	       "trainer waiting for the buffer", st.wait_seconds + st.update_wait_seconds,
	       100 * (st.wait_seconds + st.update_wait_seconds) / t_epoch, st.wait_seconds,
	       st.update_wait_seconds);
	printf("  %-34s %10.2f s (%s; %llu in the background)\n", "scatter-add applied in",
	       st.update_seconds, c.sync_updates ? "ember_graph_buffer_update" : "ember_graph_buffer_update_async",
	       (unsigned long long)st.updates_async);
	printf("  %-34s %10.2f s reads, %.2f s writes (background)\n", "buffer I/O time",
	       st.read_seconds, st.write_seconds);
	printf("  %-34s %10.2f s (%.2f CPUs busy on average; load average %.2f)\n",
	       "process CPU during the epoch", cpu_epoch, cpu_epoch / t_epoch, load_avg());
	printf("  %-34s %10.0f nodes/s (%llu runs of 1000 roots, %.0f nodes/run, %.0f edges/run; "
	       "gather %.0f%% of it)\n", "sampler, 2 layers fan-out 10", (double)sampled / t_sample,
	       (unsigned long long)runs, (double)sampled / (double)runs, (double)sampled_edges / (double)runs,
	       100 * t_gather / t_sample);
	if (edges_done != gi.num_edges * c.epochs)
		printf("  WARNING: the epochs trained %llu of %llu edges\n", (unsigned long long)edges_done,
		       (unsigned long long)(gi.num_edges * c.epochs));
	if (c.json) {
		FILE *f = fopen(c.json, "w");
		if (f) {
			fprintf(f, "{\"scale\": %u, \"nodes\": %llu, \"edges\": %llu, \"dim\": %u, "
				   "\"partitions\": %u, \"capacity\": %u, \"slots\": %u, \"ordering\": \"%s\", "
				   "\"open_s\": %.3f, \"import_s\": %.3f, \"disk_write_Bps\": %.0f, \"disk_read_Bps\": %.0f, "
				   "\"swaps\": %llu, \"swaps_lower_bound\": %llu, \"floor_bytes_read\": %llu, "
				   "\"floor_bytes_written\": %llu, \"bytes_read\": %llu, \"bytes_written\": %llu, "
				   "\"io_floor_s\": %.3f, \"compute_s\": %.3f, \"update_s\": %.3f, \"epoch_s\": %.3f, "
				   "\"epoch_over_bound\": %.3f, \"wait_s\": %.3f, \"wait_fraction\": %.4f, "
				   "\"sampled_nodes_per_s\": %.0f, \"io_floor_overlapped_s\": %.3f, \"prefetch_slots\": %u, "
				   "\"update_wait_s\": %.3f, \"update_apply_s\": %.3f, \"next_state_s\": %.3f, "
				   "\"next_batch_s\": %.3f, \"states_prepared\": %llu, \"sync_updates\": %d, "
				   "\"epoch_cpu_s\": %.3f, \"load_avg\": %.2f, \"io_floor_mixed_s\": %.3f, "
				   "\"epoch_over_mixed_bound\": %.3f, \"store_log_mib\": %u, \"store_mutable\": %.2f, "
				   "\"disk_moved_read\": %llu, \"disk_moved_written\": %llu, \"disk_busy_s\": %.3f}\n",
				c.scale, (unsigned long long)gi.num_nodes, (unsigned long long)gi.num_edges, c.dim,
				c.partitions, c.capacity, st.slots, c.comet ? "comet" : "beta", t_open, t_import, wbw, rbw,
				(unsigned long long)oi.swaps, (unsigned long long)oi.lower_bound,
				(unsigned long long)se.bytes_read, (unsigned long long)se.bytes_written,
				(unsigned long long)st.bytes_read, (unsigned long long)st.bytes_written, floor_s,
				t_compute, t_update, t_epoch, bound > 0 ? t_epoch / bound : 0, st.wait_seconds,
				st.wait_seconds / t_epoch, (double)sampled / t_sample, floor_par,
				st.slots - c.capacity, st.update_wait_seconds, st.update_seconds, t_state,
				t_batch, (unsigned long long)st.states_prepared, c.sync_updates, cpu_epoch,
				load_avg(), floor_mixed, bound_mixed > 0 ? t_epoch / bound_mixed : 0, c.store_mib,
				c.store_mutable, (unsigned long long)(prd1 - prd0),
				(unsigned long long)(pwr1 - pwr0),
				busy0 >= 0 && busy1 >= busy0 ? (double)(busy1 - busy0) / 1e3 : -1.0);
			fclose(f);
		}
	}
	free(batch);
	free(nodes);
	free(grad);
	free(ep_s);
	free(ep_c);
	ember_graph_close(g);
	ember_close(db);
	if (made) {
		char cmd[4300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", c.dir);
	}
	return 0;
}
