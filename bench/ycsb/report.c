/*
 * report.c - the human table and the JSON file for YCSB runs.
 */
#include "report.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <ember.h>

void ycsb_report_header(FILE *f, int with_probe)
{
	fprintf(f, "%-8s %-2s %-12s %3s %5s %8s %8s %8s %8s %8s %8s %8s %8s", "engine",
		"wl", "dist", "thr", "batch", "Mops/s", "p50 us", "p99 us", "p99.9 us",
		"RSS MiB", "rd B/op", "wr B/op", "notfound");
	if (with_probe)
		fprintf(f, " %8s %8s", "ops/disk", "rdIO/dsk");
	fprintf(f, "\n");
}

/* Block-layer reads per second of a run, in 4 KiB units (0 when unknown). */
static double read_ios_per_s(const ycsb_result *r)
{
	return r->io_ok ? r->read_bytes_per_op * r->mops * 1e6 / 4096.0 : 0;
}

/* Bytes sent to the block layer per write operation (update, insert, rmw). */
static double write_bytes_per_write(const ycsb_result *r)
{
	uint64_t writes = r->done[YCSB_OP_UPDATE] + r->done[YCSB_OP_INSERT] +
			  r->done[YCSB_OP_RMW];

	return r->io_ok && writes > 0 ? r->write_bytes_per_op * (double)r->ops / (double)writes
				      : 0;
}

void ycsb_report_row(FILE *f, const ycsb_result *r)
{
	char dist[32];
	char rd[16] = "n/a", wr[16] = "n/a";

	if (r->dist == YCSB_DIST_UNIFORM)
		snprintf(dist, sizeof(dist), "uniform");
	else
		snprintf(dist, sizeof(dist), "%s %.2f",
			 r->dist == YCSB_DIST_ZIPFIAN ? "zipf" : "latest", r->theta);
	if (r->io_ok) {
		snprintf(rd, sizeof(rd), "%.1f", r->read_bytes_per_op);
		snprintf(wr, sizeof(wr), "%.1f", r->write_bytes_per_op);
	}
	char batch[16];

	if (r->inflight_async)
		snprintf(batch, sizeof(batch), "~%u", r->inflight);
	else
		snprintf(batch, sizeof(batch), "%u%s", r->batch, r->over_updates ? "+" : "");
	fprintf(f, "%-8s %-2c %-12s %3u %5s %8.3f %8.2f %8.2f %8.2f %8.1f %8s %8s %8" PRIu64,
		r->engine, r->workload, dist, r->threads, batch, r->mops, r->lat.p50_us,
		r->lat.p99_us, r->lat.p999_us, (double)r->peak_rss_kib / 1024.0, rd, wr,
		r->notfound);
	if (r->disk_reads_per_s > 0) {
		fprintf(f, " %8.2f", r->mops * 1e6 / r->disk_reads_per_s);
		if (r->io_ok)
			fprintf(f, " %8.2f", read_ios_per_s(r) / r->disk_reads_per_s);
		else
			fprintf(f, " %8s", "n/a");
	}
	fprintf(f, "\n");
	if (r->errors != 0)
		fprintf(f, "         ^ %" PRIu64 " operation(s) failed; the thread(s) stopped\n",
			r->errors);
	fflush(f);
}

void ycsb_report_notes(FILE *f, int any_batch, int any_inflight, int rss_per_run,
		       int any_wraps, int with_probe)
{
	fprintf(f, "Notes: Mops/s = operations of all threads / (first thread's start to last\n"
		   "thread's end). Latency: 1 operation in %d timed with clock_gettime, all\n"
		   "kinds together (per kind in the JSON).\n", YCSB_SAMPLE_EVERY);
	if (any_batch)
		fprintf(f, "With --batch K, one sample is a whole read batch (up to K consecutive\n"
			   "reads), timed 1 batch in 64/K (every batch when K >= 64). K+: the\n"
			   "batch also reached past updates of other keys (--batch-over-updates),\n"
			   "each applied at once and timed on its own.\n");
	if (any_inflight)
		fprintf(f, "~K (--inflight K): each thread kept K operations of any kind in\n"
			   "flight through the engine's asynchronous calls, as K clients; a\n"
			   "latency sample is one operation from its start to its completion.\n"
			   "An engine without them shows K+: its reads ran as read batches of up\n"
			   "to K past updates (see its settings line).\n");
	if (any_wraps)
		fprintf(f, "Timed runs outlasted their pre-generated arrays and cycled them\n"
			   "(array_wraps in the JSON; raise --pregen to avoid it).\n");
	fprintf(f, "RSS MiB: peak resident set, getrusage; %s\n"
		   "Each engine runs in a process of its own; the pre-generated operation\n"
		   "arrays count. rd/wr B/op: read_bytes / write_bytes of /proc/self/io over\n"
		   "the run phase, per operation: bytes asked of / sent to the block layer\n"
		   "(rewriting a page still dirty in the page cache counts nothing).\n",
		rss_per_run ? "reset before each run, so it covers that run."
			    : "the process's peak so far (reset refused).");
	if (with_probe)
		fprintf(f, "ops/disk: the run's operations per second over the disk probe's\n"
			   "random 4 KiB reads per second (measured before the engines).\n"
			   "rdIO/dsk: the run's block-layer reads per second (rd B/op x ops/s,\n"
			   "in 4 KiB units) over the same rate: how much of the disk's random-\n"
			   "read capacity the engine drove.\n");
}

/* JSON string: the settings lines are plain ASCII; escape what JSON requires. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s != NULL && *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_lat(FILE *f, const ycsb_lat *l)
{
	fprintf(f,
		"{\"samples\": %" PRIu64 ", \"mean\": %.3f, \"p50\": %.3f, \"p99\": %.3f, "
		"\"p999\": %.3f, \"max\": %.3f}",
		l->samples, l->mean_us, l->p50_us, l->p99_us, l->p999_us, l->max_us);
}

static void json_run(FILE *f, const ycsb_result *r)
{
	char wl[2] = { r->workload, '\0' };

	fprintf(f, "    {\"engine\": ");
	json_str(f, r->engine);
	fprintf(f, ", \"settings\": ");
	json_str(f, r->settings);
	fprintf(f, ", \"workload\": ");
	json_str(f, wl);
	fprintf(f, ", \"dist\": ");
	json_str(f, ycsb_dist_name(r->dist));
	fprintf(f,
		", \"theta\": %.4f, \"threads\": %u, \"batch\": %u, \"batch_over_updates\": %s,\n"
		"     \"inflight\": %u, \"inflight_async\": %s, \"pending_ops\": %" PRIu64 ",\n"
		"     \"records\": %" PRIu64 ", \"key_count\": %" PRIu64
		", \"key_size\": %zu, \"value_size\": %zu, \"load_seconds\": %.3f,\n"
		"     \"ops\": %" PRIu64 ", \"seconds\": %.4f, \"mops\": %.4f, \"repeats\": %u, "
		"\"mops_runs\": [",
		r->theta, r->threads, r->batch, r->over_updates ? "true" : "false", r->inflight,
		r->inflight_async ? "true" : "false", r->pending, r->records, r->key_count, r->key_size,
		r->value_size, r->load_seconds, r->ops, r->seconds, r->mops, r->repeats);
	for (unsigned i = 0; i < r->repeats; i++)
		fprintf(f, "%s%.4f", i ? ", " : "", r->mops_runs[i]);
	fprintf(f,
		"],\n     \"ops_by_kind\": {\"read\": %" PRIu64 ", \"update\": %" PRIu64
		", \"insert\": %" PRIu64 ", \"rmw\": %" PRIu64 "}, \"notfound\": %" PRIu64
		", \"errors\": %" PRIu64 ",\n     \"latency_us\": ",
		r->done[YCSB_OP_READ], r->done[YCSB_OP_UPDATE], r->done[YCSB_OP_INSERT],
		r->done[YCSB_OP_RMW], r->notfound, r->errors);
	json_lat(f, &r->lat);
	fprintf(f, ",\n     \"latency_us_by_kind\": {");
	for (unsigned c = 0; c < YCSB_LAT_CLASSES; c++) {
		fprintf(f, "%s\n       \"%s\": ", c ? "," : "", ycsb_lat_class_name((int)c));
		json_lat(f, &r->lat_class[c]);
	}
	fprintf(f, "},\n     \"peak_rss_mib\": %.1f, \"peak_rss_per_run\": %s, ",
		(double)r->peak_rss_kib / 1024.0, r->rss_per_run ? "true" : "false");
	if (r->io_ok)
		fprintf(f,
			"\"read_bytes_per_op\": %.3f, \"write_bytes_per_op\": %.3f, "
			"\"write_bytes_per_write\": %.3f, \"read_ios_per_s\": %.1f,\n",
			r->read_bytes_per_op, r->write_bytes_per_op, write_bytes_per_write(r),
			read_ios_per_s(r));
	else
		fprintf(f, "\"read_bytes_per_op\": null, \"write_bytes_per_op\": null, "
			   "\"write_bytes_per_write\": null, \"read_ios_per_s\": null,\n");
	if (r->disk_reads_per_s > 0)
		fprintf(f, "     \"ops_per_disk_read\": %.4f, ",
			r->mops * 1e6 / r->disk_reads_per_s);
	else
		fprintf(f, "     \"ops_per_disk_read\": null, ");
	fprintf(f, "\"verified_reads\": %" PRIu64 ",\n", r->verified);
	fprintf(f,
		"     \"gen_mops_per_thread\": %.3f, \"pregen_ops_per_thread\": %" PRIu64
		", \"array_wraps\": %" PRIu64 "}",
		r->gen_mops, r->pregen_per_thread, r->wraps);
}

int ycsb_report_json(const char *path, const ycsb_config *cfg, const ycsb_result *rs,
		     size_t n, const ycsb_probe_report *probe)
{
	FILE *f = fopen(path, "w");
	int rc = 0;

	if (f == NULL)
		return -errno;
	fprintf(f, "{\n  \"tool\": \"ember-ycsb\", \"ember_version\": ");
	json_str(f, ember_version());
	fprintf(f, ", \"seed\": %" PRIu64 ", \"quick\": %s, \"latency_sample_every\": %d,\n",
		cfg->seed, cfg->quick ? "true" : "false", YCSB_SAMPLE_EVERY);
	fprintf(f, "  \"memory_budget\": %" PRIu64 ", \"raw_data_bytes\": %" PRIu64
		", \"verify\": %s,\n",
		ycsb_budget_bytes(cfg), ycsb_raw_data_bytes(cfg), cfg->verify ? "true" : "false");
	if (probe != NULL && probe->ran)
		fprintf(f,
			"  \"disk_probe\": {\"block\": 4096, \"depth\": %u, \"seconds\": %.2f, "
			"\"file_bytes\": %" PRIu64 ", \"reads_per_s_before\": %.1f, "
			"\"reads_per_s_after\": %.1f, \"p50_us_before\": %.1f, "
			"\"p50_us_after\": %.1f},\n",
			probe->depth, probe->seconds, probe->file_bytes, probe->before,
			probe->after, probe->before_p50_us, probe->after_p50_us);
	else
		fprintf(f, "  \"disk_probe\": null,\n");
	fprintf(f, "  \"runs\": [\n");
	for (size_t i = 0; i < n; i++) {
		json_run(f, &rs[i]);
		fprintf(f, "%s\n", i + 1 < n ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc;
}
