/*
 * ember.c - the `ember` command-line tool: open a store and inspect or change it.
 *
 *   ember [--readonly] [--create] DIR COMMAND [OPTIONS] [ARGS]
 *
 * One command per run: stats, verify, dump, get, put, delete, checkpoint,
 * checkpoints, compact, info (the table `cmds` below; docs/cli.md has the manual).
 * `ember --help` lists them, `ember COMMAND --help` explains one.
 *
 * Conventions
 *  - Keys and values on the command line are text, or hex with a 0x prefix ("0x"
 *    alone is the empty value). A value may also come from a file: @path (@- is
 *    standard input).
 *  - Output: bytes that are printable ASCII (not starting with 0x, @ or -) are printed
 *    as text, anything else as 0x-hex, so every key and value printed can be given
 *    back as an argument; --text and --hex force one form.
 *  - Opening never truncates and never creates a store unless --create is given.
 *  - Exit codes: 0 success; 1 the answer is "no" (get: key absent; verify: damage
 *    found); 2 usage error (unknown command or option, bad argument); 3 the store
 *    failed (open, I/O, corruption, read-only, ...): the message has
 *    ember_strerror() and, for EMBER_ECORRUPT, ember_error_detail().
 */
#include <ember.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK = 0, EXIT_NO = 1, EXIT_USAGE = 2, EXIT_STORE = 3 };
enum { FMT_AUTO, FMT_TEXT, FMT_HEX, FMT_RAW };

struct ctx {
	const char *dir;
	ember_db *db;
	int readonly;
	int quiet_log; /* the command reports the store's findings itself */
};

struct cmd {
	const char *name;
	const char *synopsis; /* what follows the command's name */
	const char *summary;  /* one line for `ember --help` */
	const char *help;     /* options, output and exit codes */
	int (*run)(struct ctx *c, int argc, char **argv);
};

static const struct cmd *find_cmd(const char *name);

/* ---- messages ------------------------------------------------------------------- */

__attribute__((format(printf, 1, 2))) static void warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ember: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* A failed store call: its explanation, and where for corruption. */
static int store_error(struct ctx *c, const char *what, int rc)
{
	warn("%s: %s", what, ember_strerror(rc));
	if ((rc == EMBER_ECORRUPT || rc == EMBER_EIO) && c->db) {
		char detail[256];
		if (ember_error_detail(c->db, detail, sizeof(detail)) == 0)
			warn("detail: %s", detail);
	}
	return EXIT_STORE;
}

static int usage_error(const struct cmd *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ember: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	if (cmd) {
		fprintf(stderr, "usage: ember [--readonly] DIR %s %s\n", cmd->name, cmd->synopsis);
		fprintf(stderr, "Try 'ember %s --help'.\n", cmd->name);
	} else {
		fputs("usage: ember [--readonly] [--create] DIR COMMAND [OPTIONS] [ARGS]\n"
		      "Try 'ember --help'.\n",
		      stderr);
	}
	return EXIT_USAGE;
}

/* The store's own log lines (recovery notes, corruption found). */
static void log_line(void *arg, const char *line)
{
	struct ctx *c = arg;
	if (!c->quiet_log)
		fprintf(stderr, "ember: %s: %s\n", c->dir, line);
}

/* ---- bytes in and out -------------------------------------------------------------- */

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Read a whole file (path "-": standard input) into *out. */
static int read_file(const char *path, uint8_t **out, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	if (!f) {
		warn("%s: %s", path, strerror(errno));
		return -1;
	}
	size_t cap = 1 << 16, n = 0;
	uint8_t *buf = malloc(cap);
	while (buf) {
		if (n == cap) {
			uint8_t *b = cap > EMBER_MAX_VALUE_LEN ? NULL : realloc(buf, cap * 2);
			if (!b) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = b;
			cap *= 2;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	int err = ferror(f);
	if (f != stdin)
		fclose(f);
	if (!buf) {
		warn("%s: too large (values are at most %u bytes)", path, EMBER_MAX_VALUE_LEN);
		return -1;
	}
	if (err) {
		warn("%s: read error", path);
		free(buf);
		return -1;
	}
	*out = buf;
	*len = n;
	return 0;
}

/*
 * Parse a key or value argument: "0x..." is hex, anything else text; for a value
 * (allow_file) "@path" reads a file. *out is malloc'd. Returns 0, or -1 after a
 * message.
 */
static int parse_bytes(const char *arg, int allow_file, uint8_t **out, size_t *len)
{
	if (allow_file && arg[0] == '@')
		return read_file(arg + 1, out, len);
	if (arg[0] == '0' && (arg[1] == 'x' || arg[1] == 'X')) {
		const char *h = arg + 2;
		size_t n = strlen(h);
		if (n % 2) {
			warn("%s: odd number of hex digits", arg);
			return -1;
		}
		uint8_t *b = malloc(n / 2 + 1);
		if (!b)
			return -1;
		for (size_t i = 0; i < n / 2; i++) {
			int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);
			if (hi < 0 || lo < 0) {
				warn("%s: not a hex digit: '%c'", arg, hi < 0 ? h[2 * i] : h[2 * i + 1]);
				free(b);
				return -1;
			}
			b[i] = (uint8_t)(hi << 4 | lo);
		}
		*out = b;
		*len = n / 2;
		return 0;
	}
	size_t n = strlen(arg);
	*out = malloc(n + 1);
	if (!*out)
		return -1;
	memcpy(*out, arg, n);
	*len = n;
	return 0;
}

static int is_plain_text(const uint8_t *p, size_t n)
{
	/* what would read back as something else: empty, 0x..., @file, an option */
	if (n == 0 || (n >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) || p[0] == '@' ||
	    p[0] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] > 0x7e)
			return 0;
	return 1;
}

static void print_bytes(FILE *out, const void *data, size_t n, int fmt)
{
	const uint8_t *p = data;
	/* plain text is printed as it is: --text's escapes (\\ for a backslash)
	 * would not read back as the same bytes */
	if (fmt == FMT_RAW || (fmt == FMT_AUTO && is_plain_text(p, n))) {
		fwrite(p, 1, n, out);
		return;
	}
	if (fmt == FMT_AUTO)
		fmt = FMT_HEX;
	if (fmt == FMT_HEX) {
		fputs("0x", out);
		for (size_t i = 0; i < n; i++)
			fprintf(out, "%02x", p[i]);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\\')
			fputs("\\\\", out);
		else if (p[i] >= 0x20 && p[i] <= 0x7e)
			fputc(p[i], out);
		else
			fprintf(out, "\\x%02x", p[i]);
	}
}

/* ---- options of a command ------------------------------------------------------------ */

/* Is arg one of the command's flags? Sets *fmt for --hex/--text/--raw. */
static int take_format(const char *arg, int *fmt, int allow_raw)
{
	if (!strcmp(arg, "--hex"))
		*fmt = FMT_HEX;
	else if (!strcmp(arg, "--text"))
		*fmt = FMT_TEXT;
	else if (allow_raw && !strcmp(arg, "--raw"))
		*fmt = FMT_RAW;
	else
		return 0;
	return 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	/* digits only: strtoull would also take leading blanks and a sign, and
	 * wrap " -1" round to 2^64 - 1 */
	if (*s < '0' || *s > '9')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

/* Split a command's arguments into options (handled by opt) and positionals. */
typedef int (*opt_fn)(void *st, const char *arg, int argc, char **argv, int *i);

static int split_args(const struct cmd *cmd, int argc, char **argv, opt_fn opt, void *st,
		      char **pos, int want_pos)
{
	int np = 0, only_pos = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!only_pos && !strcmp(a, "--")) {
			only_pos = 1;
			continue;
		}
		if (!only_pos && a[0] == '-' && a[1] == '-') {
			int r = opt ? opt(st, a, argc, argv, &i) : 0;
			if (r < 0)
				return -1;
			if (r == 0) {
				usage_error(cmd, "%s: unknown option %s", cmd->name, a);
				return -1;
			}
			continue;
		}
		if (np == want_pos) {
			usage_error(cmd, "%s: unexpected argument '%s'", cmd->name, a);
			return -1;
		}
		pos[np++] = argv[i];
	}
	if (np < want_pos) {
		usage_error(cmd, "%s: missing argument", cmd->name);
		return -1;
	}
	return 0;
}

/* ---- commands ------------------------------------------------------------------------- */

static void stat_line(const char *name, uint64_t v)
{
	printf("  %-28s %20" PRIu64 "\n", name, v);
}

static void tier_lines(const char *tier, const ember_tier_stats *t)
{
	printf("%s log:\n", tier);
	stat_line("records", t->records);
	stat_line("bytes in memory", t->bytes_memory);
	stat_line("bytes on disk", t->bytes_disk);
	stat_line("reads from memory", t->reads_memory);
	stat_line("reads from disk", t->reads_disk);
	stat_line("compactions", t->compactions);
	stat_line("compaction bytes written", t->compaction_bytes_written);
}

static int cmd_stats(struct ctx *c, int argc, char **argv)
{
	if (split_args(find_cmd("stats"), argc, argv, NULL, NULL, NULL, 0) < 0)
		return EXIT_USAGE;
	ember_stats st;
	int rc = ember_stats_get(c->db, &st);
	if (rc < 0)
		return store_error(c, "stats", rc);
	tier_lines("hot", &st.hot);
	tier_lines("cold", &st.cold);
	printf("read cache:\n");
	stat_line("hits", st.read_cache_hits);
	stat_line("bytes", st.read_cache_bytes);
	printf("indexes:\n");
	stat_line("hot index bytes", st.index_bytes);
	stat_line("cold index bytes", st.cold_index_bytes);
	stat_line("cold chunk cache hits", st.cold_cache_hits);
	stat_line("cold chunk cache bytes", st.cold_cache_bytes);
	stat_line("cold lookups", st.cold_lookups);
	stat_line("cold chunk reads", st.cold_chunk_reads);
	stat_line("cold record reads", st.cold_record_reads);
	stat_line("chunk log bytes on disk", st.chunk_log_bytes_disk);
	printf("since open:\n");
	stat_line("user reads", st.user_reads);
	stat_line("user writes", st.user_writes);
	stat_line("user bytes written", st.user_bytes_written);
	stat_line("disk reads", st.disk_reads);
	stat_line("disk bytes read", st.disk_bytes_read);
	stat_line("compaction disk reads", st.compaction_disk_reads);
	stat_line("compaction bytes read", st.compaction_bytes_read);
	stat_line("compaction bytes written", st.compaction_bytes_written);
	stat_line("tombstones dropped", st.tombstones_dropped);
	stat_line("compaction assists", st.compaction_assists);
	printf("  %-28s %20.3f\n", "write amplification", st.write_amplification);
	printf("  %-28s %20.3f\n", "read amplification", st.read_amplification);
	printf("  %-28s %20.3f\n", "cold index bytes per key", st.cold_index_bytes_per_key);
	printf("  %-28s %20.3f\n", "disk reads per cold lookup", st.disk_reads_per_cold_lookup);
	return EXIT_OK;
}

static int cmd_verify(struct ctx *c, int argc, char **argv)
{
	if (split_args(find_cmd("verify"), argc, argv, NULL, NULL, NULL, 0) < 0)
		return EXIT_USAGE;
	ember_verify_report rep;
	c->quiet_log = 1; /* the report says where */
	int rc = ember_verify(c->db, &rep);
	c->quiet_log = 0;
	if (rc < 0 && rc != EMBER_ECORRUPT)
		return store_error(c, "verify", rc);
	printf("records  %" PRIu64 "\n", rep.records);
	printf("bytes    %" PRIu64 "\n", rep.bytes);
	printf("chunks   %" PRIu64 "\n", rep.chunks);
	printf("errors   %" PRIu64 "\n", rep.errors);
	if (rep.errors) {
		printf("first error: %s\n", rep.first_error);
		return EXIT_NO;
	}
	printf("ok\n");
	return EXIT_OK;
}

struct dump_opts {
	int keys_only, fmt;
	uint64_t limit, done;
	int has_limit;
};

static int dump_opt(void *st, const char *a, int argc, char **argv, int *i)
{
	struct dump_opts *d = st;
	if (!strcmp(a, "--keys-only")) {
		d->keys_only = 1;
		return 1;
	}
	if (take_format(a, &d->fmt, 0))
		return 1;
	if (!strcmp(a, "--limit")) {
		if (*i + 1 >= argc || parse_u64(argv[*i + 1], &d->limit) < 0) {
			usage_error(find_cmd("dump"), "dump: --limit needs a number");
			return -1;
		}
		d->has_limit = 1;
		(*i)++;
		return 1;
	}
	return 0;
}

#define DUMP_STOP 1 /* dump_fn's "enough" */

static int dump_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	struct dump_opts *d = arg;
	if (d->has_limit && d->done >= d->limit)
		return DUMP_STOP;
	print_bytes(stdout, k, kl, d->fmt);
	if (!d->keys_only) {
		putchar('\t');
		print_bytes(stdout, v, vl, d->fmt);
	}
	putchar('\n');
	d->done++;
	if (ferror(stdout))
		return -EIO;
	return d->has_limit && d->done >= d->limit ? DUMP_STOP : 0;
}

static int cmd_dump(struct ctx *c, int argc, char **argv)
{
	struct dump_opts d = {0, FMT_AUTO, 0, 0, 0};
	if (split_args(find_cmd("dump"), argc, argv, dump_opt, &d, NULL, 0) < 0)
		return EXIT_USAGE;
	if (d.has_limit && d.limit == 0)
		return EXIT_OK;
	c->quiet_log = 1;
	int rc = ember_iterate(c->db, dump_fn, &d);
	c->quiet_log = 0;
	if (fflush(stdout) != 0 && rc == 0)
		rc = -EIO;
	if (rc == DUMP_STOP)
		rc = 0;
	if (rc < 0)
		return store_error(c, "dump", rc);
	return EXIT_OK;
}

static int get_opt(void *st, const char *a, int argc, char **argv, int *i)
{
	(void)argc;
	(void)argv;
	(void)i;
	return take_format(a, st, 1);
}

static int with_session(struct ctx *c, ember_session **s)
{
	int rc = ember_session_open(c->db, s);
	return rc < 0 ? store_error(c, "session", rc) : EXIT_OK;
}

static int cmd_get(struct ctx *c, int argc, char **argv)
{
	const struct cmd *cmd = find_cmd("get");
	int fmt = FMT_AUTO;
	char *pos[1];
	if (split_args(cmd, argc, argv, get_opt, &fmt, pos, 1) < 0)
		return EXIT_USAGE;
	uint8_t *key = NULL;
	size_t klen = 0;
	if (parse_bytes(pos[0], 0, &key, &klen) < 0)
		return usage_error(cmd, "get: bad KEY");
	ember_session *s = NULL;
	int ex = with_session(c, &s);
	if (ex) {
		free(key);
		return ex;
	}
	size_t cap = 4096, vlen = 0;
	uint8_t *buf = malloc(cap);
	int rc = buf ? ember_get(s, key, klen, buf, cap, &vlen) : EMBER_ENOMEM;
	while (rc == EMBER_ERANGE) { /* it may grow again before the next read */
		free(buf);
		cap = vlen;
		buf = malloc(cap ? cap : 1);
		rc = buf ? ember_get(s, key, klen, buf, cap, &vlen) : EMBER_ENOMEM;
	}
	ember_session_close(s);
	if (rc == EMBER_ENOTFOUND) {
		fputs("ember: get: ", stderr);
		print_bytes(stderr, key, klen, FMT_AUTO);
		fputs(": not found\n", stderr);
		ex = EXIT_NO;
	} else if (rc < 0) {
		ex = rc == EMBER_EINVAL || rc == EMBER_ETOOBIG ? usage_error(cmd, "get: %s", ember_strerror(rc))
							       : store_error(c, "get", rc);
	} else {
		print_bytes(stdout, buf, vlen, fmt);
		if (fmt != FMT_RAW)
			putchar('\n');
		ex = fflush(stdout) ? store_error(c, "get: writing the value", -EIO) : EXIT_OK;
	}
	free(buf);
	free(key);
	return ex;
}

/* The exit code of a failed write: bad arguments are usage errors. */
static int write_error(struct ctx *c, const struct cmd *cmd, int rc)
{
	if (rc == EMBER_EINVAL || rc == EMBER_ETOOBIG)
		return usage_error(cmd, "%s: %s", cmd->name, ember_strerror(rc));
	return store_error(c, cmd->name, rc);
}

static int cmd_put(struct ctx *c, int argc, char **argv)
{
	const struct cmd *cmd = find_cmd("put");
	char *pos[2];
	if (split_args(cmd, argc, argv, NULL, NULL, pos, 2) < 0)
		return EXIT_USAGE;
	uint8_t *key = NULL, *val = NULL;
	size_t klen = 0, vlen = 0;
	if (parse_bytes(pos[0], 0, &key, &klen) < 0)
		return usage_error(cmd, "put: bad KEY");
	if (parse_bytes(pos[1], 1, &val, &vlen) < 0) {
		free(key);
		return usage_error(cmd, "put: bad VALUE");
	}
	ember_session *s = NULL;
	int ex = with_session(c, &s);
	if (ex == EXIT_OK) {
		int rc = ember_put(s, key, klen, val, vlen);
		ember_session_close(s);
		ex = rc < 0 ? write_error(c, cmd, rc) : EXIT_OK;
	}
	free(key);
	free(val);
	return ex;
}

static int cmd_delete(struct ctx *c, int argc, char **argv)
{
	const struct cmd *cmd = find_cmd("delete");
	char *pos[1];
	if (split_args(cmd, argc, argv, NULL, NULL, pos, 1) < 0)
		return EXIT_USAGE;
	uint8_t *key = NULL;
	size_t klen = 0;
	if (parse_bytes(pos[0], 0, &key, &klen) < 0)
		return usage_error(cmd, "delete: bad KEY");
	ember_session *s = NULL;
	int ex = with_session(c, &s);
	if (ex == EXIT_OK) {
		int rc = ember_delete(s, key, klen);
		ember_session_close(s);
		ex = rc < 0 ? write_error(c, cmd, rc) : EXIT_OK;
	}
	free(key);
	return ex;
}

static int cmd_checkpoint(struct ctx *c, int argc, char **argv)
{
	if (split_args(find_cmd("checkpoint"), argc, argv, NULL, NULL, NULL, 0) < 0)
		return EXIT_USAGE;
	uint64_t id = 0;
	int rc = ember_checkpoint(c->db, &id);
	if (rc < 0)
		return store_error(c, "checkpoint", rc);
	printf("checkpoint %" PRIu64 "\n", id);
	return EXIT_OK;
}

static void print_time(uint64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;
	char buf[32];
	if (gmtime_r(&tt, &tm) && strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm))
		printf("%-20s", buf);
	else
		printf("%-20" PRIu64, t);
}

static int cmd_checkpoints(struct ctx *c, int argc, char **argv)
{
	if (split_args(find_cmd("checkpoints"), argc, argv, NULL, NULL, NULL, 0) < 0)
		return EXIT_USAGE;
	size_t cap = 16, n = 0;
	ember_checkpoint_info *list = NULL;
	int rc;
	for (;;) {
		free(list);
		list = malloc(sizeof(*list) * cap);
		if (!list)
			return store_error(c, "checkpoints", EMBER_ENOMEM);
		rc = ember_checkpoint_list(c->db, list, cap, &n);
		if (rc != EMBER_ERANGE)
			break;
		cap = n + 16; /* one may complete meanwhile */
	}
	if (rc < 0) {
		free(list);
		return store_error(c, "checkpoints", rc);
	}
	if (n == 0)
		printf("no complete checkpoint\n");
	else
		printf("%-8s %-20s %-32s %-32s %s\n", "id", "completed (UTC)", "hot log [begin, end)",
		       "cold log [begin, end)", "index entries");
	for (size_t i = 0; i < n; i++) {
		const ember_checkpoint_info *k = &list[i];
		char hot[48], cold[48];
		snprintf(hot, sizeof(hot), "[%" PRIu64 ", %" PRIu64 ")", k->hot_begin, k->hot_end);
		snprintf(cold, sizeof(cold), "[%" PRIu64 ", %" PRIu64 ")", k->cold_begin, k->cold_end);
		printf("%-8" PRIu64 " ", k->id);
		print_time(k->time_unix);
		printf(" %-32s %-32s %" PRIu64 "\n", hot, cold, k->index_entries);
	}
	free(list);
	return EXIT_OK;
}

static int compact_opt(void *st, const char *a, int argc, char **argv, int *i)
{
	(void)argc;
	(void)argv;
	(void)i;
	if (strcmp(a, "--force"))
		return 0;
	*(int *)st = 1;
	return 1;
}

static int cmd_compact(struct ctx *c, int argc, char **argv)
{
	int force = 0;
	if (split_args(find_cmd("compact"), argc, argv, compact_opt, &force, NULL, 0) < 0)
		return EXIT_USAGE;
	ember_stats before, after;
	int rc = ember_stats_get(c->db, &before);
	if (rc == 0)
		rc = ember_compact(c->db, force);
	if (rc == 0)
		rc = ember_stats_get(c->db, &after);
	if (rc < 0)
		return store_error(c, "compact", rc);
	printf("%-10s %20s %20s\n", "log", "bytes on disk before", "after");
	printf("%-10s %20" PRIu64 " %20" PRIu64 "\n", "hot", before.hot.bytes_disk, after.hot.bytes_disk);
	printf("%-10s %20" PRIu64 " %20" PRIu64 "\n", "cold", before.cold.bytes_disk,
	       after.cold.bytes_disk);
	printf("%-10s %20" PRIu64 " %20" PRIu64 "\n", "cold.idx", before.chunk_log_bytes_disk,
	       after.chunk_log_bytes_disk);
	return EXIT_OK;
}

static int cmd_info(struct ctx *c, int argc, char **argv)
{
	if (split_args(find_cmd("info"), argc, argv, NULL, NULL, NULL, 0) < 0)
		return EXIT_USAGE;
	ember_recovery_info ri;
	int rc = ember_recovery_info_get(c->db, &ri);
	if (rc < 0)
		return store_error(c, "info", rc);
	printf("library             %s\n", ember_version());
	printf("recovered from      ");
	if (ri.checkpoint_id)
		printf("checkpoint %" PRIu64 "\n", ri.checkpoint_id);
	else
		printf("nothing (a new store, or one never checkpointed)\n");
	printf("records replayed    %" PRIu64 "\n", ri.records_replayed);
	printf("checkpoints skipped %" PRIu32 "\n", ri.checkpoints_skipped);
	if (ri.detail[0])
		printf("skipped because     %s\n", ri.detail);
	return EXIT_OK;
}

/* ---- the command table and help --------------------------------------------------------- */

static const struct cmd cmds[] = {
	{"stats", "", "print the store's statistics",
	 "Prints every figure of ember_stats_get(): per log (hot, cold) its records,\n"
	 "bytes in memory and on disk, reads and compactions; the read cache; the\n"
	 "indexes' memory; and the counters since open (user reads and writes, disk\n"
	 "reads, compaction I/O, amplification). The tool opens the store afresh, so\n"
	 "the counters since open describe this run (recovery included).\n"
	 "Exit: 0, or 3 if the store failed.\n",
	 cmd_stats},
	{"verify", "", "check every record, checksum and cold-index chunk",
	 "Reads every record of hot.log, cold.log and cold.idx between each log's begin\n"
	 "and tail (from disk where it is on disk) and checks its structure and checksum,\n"
	 "and checks that every cold-index table word names a well-formed chunk\n"
	 "(ember_verify). Prints records, bytes and chunks checked, the error count and\n"
	 "the first error (file, offset, what failed).\n"
	 "Exit: 0 when all is well, 1 when damage was found, 3 if the store failed\n"
	 "(for example an I/O error).\n",
	 cmd_verify},
	{"dump", "[--keys-only] [--hex | --text] [--limit N]", "print every live key and value",
	 "Prints each live key (its newest value, deleted keys left out) on a line of\n"
	 "its own: KEY, a tab, VALUE (ember_iterate). Keys come in no particular order.\n"
	 "  --keys-only  print the keys only\n"
	 "  --hex        print keys and values as 0x-hex\n"
	 "  --text       print them as text, with \\xNN for bytes that are not printable\n"
	 "               ASCII and \\\\ for a backslash\n"
	 "  --limit N    stop after N keys\n"
	 "By default a key or value that is printable ASCII (and does not start with 0x,\n"
	 "@ or -) is printed as it is, any other as 0x-hex: every field can be given back\n"
	 "to get, put or delete as it was printed. Compaction pauses while the dump runs.\n"
	 "Exit: 0, or 3 if the store failed (a damaged record: the detail says where).\n",
	 cmd_dump},
	{"get", "[--hex | --text | --raw] KEY", "print one key's value",
	 "Prints KEY's value and a newline. KEY is text, or hex with a 0x prefix.\n"
	 "  --hex, --text  force the value's form (default: as dump prints it)\n"
	 "  --raw          write the value's bytes exactly, with no newline\n"
	 "Exit: 0, 1 if the key is absent, 2 for a bad KEY, 3 if the store failed.\n",
	 cmd_get},
	{"put", "KEY VALUE", "store a value (VALUE: text, 0xHEX, or @FILE)",
	 "Stores KEY -> VALUE, replacing any value KEY had. KEY is text, or hex with a\n"
	 "0x prefix; VALUE likewise, or @PATH for the contents of a file (@- reads\n"
	 "standard input); \"0x\" alone is the empty value. The write is durable once\n"
	 "the tool exits 0 (closing the store takes a checkpoint).\n"
	 "Exit: 0, 2 for a bad or too large KEY or VALUE, 3 if the store failed\n"
	 "(read-only, out of disk budget, ...).\n",
	 cmd_put},
	{"delete", "KEY", "delete a key",
	 "Deletes KEY (whether or not it exists). KEY is text, or hex with a 0x prefix.\n"
	 "Exit: 0, 2 for a bad KEY, 3 if the store failed.\n",
	 cmd_delete},
	{"checkpoint", "", "take a checkpoint now",
	 "Takes a checkpoint (ember_checkpoint) and prints its id. Older checkpoints\n"
	 "are removed once it is complete.\n"
	 "Exit: 0, or 3 if the store failed (read-only store, I/O error).\n",
	 cmd_checkpoint},
	{"checkpoints", "", "list the complete checkpoints",
	 "Lists the store's complete checkpoints, newest first: id, when it completed\n"
	 "(UTC), the hot and cold log extents it covers (log addresses) and the hot\n"
	 "index entries it saved.\n"
	 "Exit: 0, or 3 if the store failed.\n",
	 cmd_checkpoints},
	{"compact", "[--force]", "run compaction now",
	 "Runs a compaction pass over every log past its trigger (80% of its disk\n"
	 "budget), or with --force over everything on disk, and prints each log's bytes\n"
	 "on disk before and after. The disk space is given back to the file system\n"
	 "when the next checkpoint completes (the tool takes one as it closes).\n"
	 "Exit: 0, or 3 if the store failed (read-only store, I/O error).\n",
	 cmd_compact},
	{"info", "", "what the open recovered",
	 "Prints the library version and what opening the store recovered: the\n"
	 "checkpoint it loaded, how many log records it replayed past it, and how many\n"
	 "newer, partial or damaged checkpoints it skipped, and why.\n"
	 "Exit: 0, or 3 if the store failed.\n",
	 cmd_info},
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static const struct cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < NCMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

static void help_main(FILE *out)
{
	fputs("usage: ember [--readonly] [--create] DIR COMMAND [OPTIONS] [ARGS]\n"
	      "       ember COMMAND --help\n"
	      "       ember --help | --version\n"
	      "\n"
	      "Open the Ember store in directory DIR (recovering its newest complete\n"
	      "checkpoint), run one command, and close it (taking a checkpoint if the\n"
	      "command changed anything).\n"
	      "\n"
	      "Commands:\n",
	      out);
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(out, "  %-12s %s\n", cmds[i].name, cmds[i].summary);
	fputs("\n"
	      "Options (before DIR):\n"
	      "  --readonly  open read-only (EMBER_OPEN_READONLY): nothing in DIR changes;\n"
	      "              put, delete, checkpoint and compact fail (exit 3)\n"
	      "  --create    create a new store if DIR holds none (otherwise that is an\n"
	      "              error); an existing store is never truncated\n"
	      "  --help      this text; `ember COMMAND --help` explains a command\n"
	      "  --version   the library's version\n"
	      "\n"
	      "Keys and values are text, or hex with a 0x prefix (\"0x\": empty); put also\n"
	      "takes a value from a file as @PATH.\n"
	      "\n"
	      "Exit codes:\n"
	      "  0  success\n"
	      "  1  the answer is no: get found no such key, verify found damage\n"
	      "  2  usage error: unknown command or option, missing or bad argument\n"
	      "  3  the store failed: it could not be opened, an I/O error, corruption,\n"
	      "     a read-only store asked to write; the message gives the reason and,\n"
	      "     for corruption, where it was found\n",
	      out);
}

static void help_cmd(const struct cmd *cmd)
{
	printf("usage: ember [--readonly] DIR %s %s\n\n%s\n%s", cmd->name, cmd->synopsis,
	       cmd->summary, cmd->help);
}

/* ---- main ----------------------------------------------------------------------------------- */

static int has_store(const char *dir)
{
	char path[4096];
	struct stat sb;
	if (snprintf(path, sizeof(path), "%s/ember.super", dir) >= (int)sizeof(path))
		return 0;
	return stat(path, &sb) == 0;
}

/*
 * A standard descriptor the caller closed (`ember DIR dump >&-`) would be reused by
 * the store's first open (LOCK, or a log), and the tool's output written into
 * that file. Hold each closed one with /dev/null opened read-only: writes to it
 * fail (EBADF), so the output error is reported as for any other.
 */
static int hold_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int got = open("/dev/null", O_RDONLY); /* the lowest free descriptor: fd */
		if (got != fd) {
			if (got >= 0)
				close(got);
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ctx c = {0};
	if (hold_std_fds() < 0)
		return EXIT_STORE; /* nowhere safe to write, not even a message */
	int create = 0, i = 1;
	/* `--help` anywhere: help for the command named before it, if any */
	for (int j = 1; j < argc; j++) {
		if (!strcmp(argv[j], "--help") || !strcmp(argv[j], "-h")) {
			for (int k = 1; k < j; k++) {
				const struct cmd *cmd = find_cmd(argv[k]);
				if (cmd) {
					help_cmd(cmd);
					return EXIT_OK;
				}
			}
			help_main(stdout);
			return EXIT_OK;
		}
		if (!strcmp(argv[j], "--"))
			break;
	}
	for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
		if (!strcmp(argv[i], "--readonly"))
			c.readonly = 1;
		else if (!strcmp(argv[i], "--create"))
			create = 1;
		else if (!strcmp(argv[i], "--version")) {
			printf("ember %s\n", ember_version());
			return EXIT_OK;
		} else if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else
			return usage_error(NULL, "unknown option %s", argv[i]);
	}
	if (argc - i < 2)
		return usage_error(NULL, argc - i == 1 ? "missing COMMAND" : "missing DIR and COMMAND");
	c.dir = argv[i];
	const struct cmd *cmd = find_cmd(argv[i + 1]);
	if (!cmd) {
		if (find_cmd(c.dir))
			return usage_error(NULL, "DIR comes before the command ('%s' is a command)", c.dir);
		return usage_error(NULL, "unknown command '%s'", argv[i + 1]);
	}
	if (create && c.readonly)
		return usage_error(NULL, "--create and --readonly exclude each other");
	if (!create && !has_store(c.dir)) {
		warn("%s: no Ember store here (use --create to make one)", c.dir);
		return EXIT_STORE;
	}

	ember_options opts;
	ember_options_default(&opts);
	opts.flags = c.readonly ? EMBER_OPEN_READONLY : 0; /* never EMBER_OPEN_TRUNCATE */
	opts.log_fn = log_line;
	opts.log_arg = &c;
	int rc = ember_open(c.dir, &opts, &c.db);
	if (rc < 0) {
		warn("%s: cannot open: %s", c.dir, ember_strerror(rc));
		return EXIT_STORE;
	}
	int ex = cmd->run(&c, argc - i - 2, argv + i + 2);
	rc = ember_close(c.db);
	if (rc < 0) {
		c.db = NULL;
		warn("%s: close: %s", c.dir, ember_strerror(rc));
		if (ex == EXIT_OK)
			ex = EXIT_STORE;
	}
	return ex;
}
