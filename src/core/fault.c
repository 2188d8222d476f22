/*
 * fault.c - fault injection sites (see fault.h and docs/faults.md). Compiled only
 * with -Dfault_injection=true.
 *
 * Design notes
 *  1. The fast path of a hit is one relaxed load of the site's armed flag; an
 *     unarmed site counts nothing and fails nothing.
 *  2. A hit of an armed site takes a ticket (fetch_add on hits): ticket n (1-based)
 *     decides alone whether it fails, from the spec (countdown, every, and the
 *     probability generator indexed by n), so concurrent hits never double-fire a
 *     countdown and a single-threaded workload is fully reproducible.
 *  3. limit is enforced with a CAS loop on fired: a failure is injected only if it
 *     can claim one of the limit slots.
 *  4. An injected I/O failure is a real request (a read of fd -1, which the kernel
 *     fails with -EBADF) plus a record (ring, user_data, error) in a list under
 *     one mutex; the reaper swaps the -EBADF of a recorded (ring, user_data) for
 *     the error. pending counts the records so the reaper skips the mutex when
 *     none exist. The list uses malloc, not em_alloc, so the alloc site never
 *     recurses here.
 */
#include "core/fault.h"

#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fault_site {
	_Atomic int armed;      /* 0 off, 1 armed, 2 counting only */
	_Atomic uint64_t hits;  /* tickets handed out since arming */
	_Atomic uint64_t fired; /* failures injected since arming */
	/* the spec: written while disarmed, read after an acquire of armed */
	uint64_t countdown, every, limit, seed;
	uint64_t prob_threshold; /* probability * 2^64, saturated */
	int persistent;
	int err;
};

static struct fault_site sites[EM_FAULT_NSITES];
static _Atomic int verbose;

static const char *const site_names[EM_FAULT_NSITES] = {
	[EM_FAULT_IO_READ] = "io_read",     [EM_FAULT_IO_WRITE] = "io_write",
	[EM_FAULT_IO_FSYNC] = "io_fsync",   [EM_FAULT_IO_PUNCH] = "io_punch",
	[EM_FAULT_IO_SUBMIT] = "io_submit", [EM_FAULT_RING_INIT] = "ring_init",
	[EM_FAULT_FILE_OPEN] = "file_open", [EM_FAULT_ALLOC] = "alloc",
	[EM_FAULT_STORE_PUT] = "store_put", [EM_FAULT_DIO_ALIGN] = "dio_align",
};

static int site_default_err(enum em_fault_site site)
{
	switch (site) {
	case EM_FAULT_RING_INIT:
	case EM_FAULT_ALLOC:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

const char *em_fault_site_name(enum em_fault_site site)
{
	return (unsigned)site < EM_FAULT_NSITES ? site_names[site] : NULL;
}

int em_fault_site_lookup(const char *name)
{
	for (int i = 0; i < EM_FAULT_NSITES; i++)
		if (name && strcmp(name, site_names[i]) == 0)
			return i;
	return -1;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int ticket_fails(const struct fault_site *f, uint64_t n)
{
	if (f->countdown && (n == f->countdown || (f->persistent && n > f->countdown)))
		return 1;
	if (f->every && n % f->every == 0)
		return 1;
	if (f->prob_threshold && mix64(f->seed ^ mix64(n)) < f->prob_threshold)
		return 1;
	return 0;
}

int em_fault_hit(enum em_fault_site site)
{
	if ((unsigned)site >= EM_FAULT_NSITES)
		return 0;
	struct fault_site *f = &sites[site];
	/* acquire: the spec fields written before arming are visible */
	int armed = atomic_load_explicit(&f->armed, memory_order_acquire);
	if (!armed)
		return 0;
	/* relaxed: a ticket; only its uniqueness matters */
	uint64_t n = atomic_fetch_add_explicit(&f->hits, 1, memory_order_relaxed) + 1;
	if (armed != 1 || !ticket_fails(f, n))
		return 0;
	/* relaxed: a counter bounded by limit, nothing else is published through it */
	uint64_t done = atomic_load_explicit(&f->fired, memory_order_relaxed);
	do {
		if (f->limit && done >= f->limit)
			return 0;
	} while (!atomic_compare_exchange_weak_explicit(&f->fired, &done, done + 1,
							 memory_order_relaxed, memory_order_relaxed));
	int err = f->err ? f->err : site_default_err(site);
	/* relaxed: a debugging switch */
	int v = atomic_load_explicit(&verbose, memory_order_relaxed);
	if (v) {
		fprintf(stderr, "ember fault: %s hit %llu fails (%d)\n", site_names[site],
			(unsigned long long)n, err);
		if (v > 1) { /* where it was hit (resolve with addr2line) */
			void *frames[24];
			backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
		}
	}
	return err;
}

static void site_reset(struct fault_site *f)
{
	/* release: a hit that sees armed == 0 must not read a half-written spec later */
	atomic_store_explicit(&f->armed, 0, memory_order_release);
	atomic_store_explicit(&f->hits, 0, memory_order_relaxed);  /* reset while disarmed */
	atomic_store_explicit(&f->fired, 0, memory_order_relaxed); /* as above */
}

int em_fault_arm(enum em_fault_site site, const struct em_fault_spec *spec)
{
	if ((unsigned)site >= EM_FAULT_NSITES || !spec)
		return -EINVAL;
	if (!(spec->probability >= 0 && spec->probability <= 1) || spec->err > 0)
		return -EINVAL;
	if (!spec->countdown && !spec->every && spec->probability == 0)
		return -EINVAL;
	struct fault_site *f = &sites[site];
	site_reset(f);
	f->countdown = spec->countdown;
	f->persistent = spec->persistent;
	f->every = spec->every;
	f->limit = spec->limit;
	f->seed = spec->seed;
	f->err = spec->err;
	if (spec->probability >= 1)
		f->prob_threshold = UINT64_MAX;
	else
		f->prob_threshold = (uint64_t)(spec->probability * 18446744073709551616.0);
	/* release: the spec above is complete before any hit can see the site armed */
	atomic_store_explicit(&f->armed, 1, memory_order_release);
	return 0;
}

void em_fault_count(enum em_fault_site site)
{
	if ((unsigned)site >= EM_FAULT_NSITES)
		return;
	site_reset(&sites[site]);
	/* release: counting reads no spec, but keep one rule for every arming */
	atomic_store_explicit(&sites[site].armed, 2, memory_order_release);
}

void em_fault_disarm(enum em_fault_site site)
{
	if ((unsigned)site < EM_FAULT_NSITES)
		/* release: pairs with the acquire in em_fault_hit (the counters stay) */
		atomic_store_explicit(&sites[site].armed, 0, memory_order_release);
}

void em_fault_disarm_all(void)
{
	for (int i = 0; i < EM_FAULT_NSITES; i++)
		em_fault_disarm((enum em_fault_site)i);
}

uint64_t em_fault_hits(enum em_fault_site site)
{
	/* relaxed: a statistic */
	return (unsigned)site < EM_FAULT_NSITES
		       ? atomic_load_explicit(&sites[site].hits, memory_order_relaxed)
		       : 0;
}

uint64_t em_fault_fired(enum em_fault_site site)
{
	/* relaxed: a statistic */
	return (unsigned)site < EM_FAULT_NSITES
		       ? atomic_load_explicit(&sites[site].fired, memory_order_relaxed)
		       : 0;
}

void em_fault_set_verbose(int on)
{
	/* relaxed: a debugging switch */
	atomic_store_explicit(&verbose, on < 0 ? 0 : on > 2 ? 2 : on, memory_order_relaxed);
}

/* ---- the $EMBER_FAULTS syntax ---------------------------------------------------- */

static const struct {
	const char *name;
	int value;
} err_names[] = {
	{"EIO", EIO},       {"ENOSPC", ENOSPC}, {"ENOMEM", ENOMEM}, {"EBUSY", EBUSY},
	{"EAGAIN", EAGAIN}, {"EINTR", EINTR},   {"EBADF", EBADF},   {"EINVAL", EINVAL},
	{"EFAULT", EFAULT}, {"EROFS", EROFS},   {"EDQUOT", EDQUOT}, {"ENODEV", ENODEV},
};

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	if (!*s || *s == '-')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_err(const char *s, int *out)
{
	for (size_t i = 0; i < sizeof(err_names) / sizeof(err_names[0]); i++) {
		if (strcmp(s, err_names[i].name) == 0) {
			*out = -err_names[i].value;
			return 0;
		}
	}
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v == 0 || v > 4095 || v < -4095)
		return -EINVAL;
	*out = v < 0 ? (int)v : (int)-v;
	return 0;
}

/* One "site:key=value:..." item into *spec; *site set. Modifies item. */
static int parse_item(char *item, int *site, struct em_fault_spec *spec)
{
	char *save = NULL;
	char *tok = strtok_r(item, ":", &save);
	if (!tok || (*site = em_fault_site_lookup(tok)) < 0)
		return -EINVAL;
	memset(spec, 0, sizeof(*spec));
	while ((tok = strtok_r(NULL, ":", &save)) != NULL) {
		char *eq = strchr(tok, '=');
		const char *val = eq ? eq + 1 : "";
		if (eq)
			*eq = '\0';
		int rc = 0;
		if (strcmp(tok, "countdown") == 0) {
			rc = parse_u64(val, &spec->countdown);
		} else if (strcmp(tok, "every") == 0) {
			rc = parse_u64(val, &spec->every);
		} else if (strcmp(tok, "limit") == 0) {
			rc = parse_u64(val, &spec->limit);
		} else if (strcmp(tok, "seed") == 0) {
			rc = parse_u64(val, &spec->seed);
		} else if (strcmp(tok, "persistent") == 0) {
			spec->persistent = true;
			rc = eq ? -EINVAL : 0;
		} else if (strcmp(tok, "probability") == 0 || strcmp(tok, "prob") == 0) {
			char *end;
			spec->probability = strtod(val, &end);
			rc = (!*val || *end) ? -EINVAL : 0;
		} else if (strcmp(tok, "err") == 0) {
			rc = parse_err(val, &spec->err);
		} else {
			rc = -EINVAL;
		}
		if (rc < 0)
			return rc;
	}
	if (!(spec->probability >= 0 && spec->probability <= 1))
		return -EINVAL;
	if (!spec->countdown && !spec->every && spec->probability == 0)
		return -EINVAL;
	return 0;
}

int em_fault_parse(const char *text)
{
	if (!text)
		return -EINVAL;
	char *copy = strdup(text);
	if (!copy)
		return -ENOMEM;
	struct em_fault_spec specs[EM_FAULT_NSITES];
	int named[EM_FAULT_NSITES] = {0};
	int rc = 0;
	char *save = NULL;
	for (char *item = strtok_r(copy, ";,", &save); item; item = strtok_r(NULL, ";,", &save)) {
		while (*item == ' ')
			item++;
		if (!*item)
			continue;
		/* parse_item uses strtok_r on its own token: give it a private copy */
		char *one = strdup(item);
		if (!one) {
			rc = -ENOMEM;
			break;
		}
		int site;
		struct em_fault_spec spec;
		rc = parse_item(one, &site, &spec);
		free(one);
		if (rc < 0)
			break;
		specs[site] = spec;
		named[site] = 1;
	}
	free(copy);
	if (rc < 0)
		return rc;
	for (int i = 0; i < EM_FAULT_NSITES; i++)
		if (named[i])
			em_fault_arm((enum em_fault_site)i, &specs[i]);
	return 0;
}

/* Arm from the environment when the library loads. A bad $EMBER_FAULTS is reported
 * and ignored (the library has no other channel at this point). */
__attribute__((constructor)) static void fault_from_env(void)
{
	const char *v = getenv("EMBER_FAULTS_VERBOSE");
	if (v && *v && strcmp(v, "0") != 0)
		em_fault_set_verbose(strcmp(v, "2") == 0 ? 2 : 1);
	const char *text = getenv("EMBER_FAULTS");
	if (text && *text && em_fault_parse(text) < 0)
		fprintf(stderr, "ember: EMBER_FAULTS=\"%s\" is not valid; no fault armed "
				"(see docs/faults.md)\n",
			text);
}

/* ---- injected I/O failures -------------------------------------------------------- */

struct fake_req {
	struct fake_req *next;
	const void *ring;
	uint64_t ud;
	int err;
};

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_req *fake_head;
static _Atomic unsigned fake_pending; /* entries in the list */

_Static_assert(EM_FAULT_RING_MARK == -EBADF, "the mark is -EBADF");

int em_fault_ring_queue(const void *ring, uint64_t ud, int err)
{
	struct fake_req *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct fake_req){NULL, ring, ud, err};
	pthread_mutex_lock(&fake_mu);
	/* order does not matter: entries of one (ring, ud) are interchangeable */
	c->next = fake_head;
	fake_head = c;
	/* relaxed: a hint for the reaper's fast path; the list is under fake_mu */
	atomic_fetch_add_explicit(&fake_pending, 1, memory_order_relaxed);
	pthread_mutex_unlock(&fake_mu);
	return 0;
}

/* Unlink the first entry of ring (with user_data ud unless any). Under fake_mu. */
static struct fake_req *unlink_first(const void *ring, uint64_t ud, int any)
{
	for (struct fake_req **pp = &fake_head; *pp; pp = &(*pp)->next) {
		struct fake_req *c = *pp;
		if (c->ring != ring || (!any && c->ud != ud))
			continue;
		*pp = c->next;
		/* relaxed: as in em_fault_ring_queue */
		atomic_fetch_sub_explicit(&fake_pending, 1, memory_order_relaxed);
		return c;
	}
	return NULL;
}

int em_fault_ring_result(const void *ring, uint64_t ud, int res)
{
	/* relaxed: a ring's own thread recorded its entries, so it sees them */
	if (res != EM_FAULT_RING_MARK || !atomic_load_explicit(&fake_pending, memory_order_relaxed))
		return res;
	pthread_mutex_lock(&fake_mu);
	struct fake_req *c = unlink_first(ring, ud, 0);
	pthread_mutex_unlock(&fake_mu);
	if (!c)
		return res; /* a real -EBADF */
	int err = c->err;
	free(c);
	return err;
}

unsigned em_fault_ring_forget(const void *ring)
{
	unsigned n = 0;
	/* relaxed: as in em_fault_ring_result */
	if (!atomic_load_explicit(&fake_pending, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&fake_mu);
	struct fake_req *c;
	while ((c = unlink_first(ring, 0, 1)) != NULL) {
		free(c);
		n++;
	}
	pthread_mutex_unlock(&fake_mu);
	return n;
}
