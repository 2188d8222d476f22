/*
 * errors.c - ember_strerror() and ember_version().
 *
 * Ember's own codes live in [-30015, -30000]; anything else negative is a negated
 * errno value, explained by the C library's description of it.
 */
#include <ember.h>

#include <string.h>

const char *ember_version(void) { return EMBER_VERSION_STRING; }

const char *ember_strerror(int code)
{
	switch (code) {
	case EMBER_OK: return "success";
	case EMBER_EINVAL: return "invalid argument (NULL, zero or out of range)";
	case EMBER_ENOTFOUND: return "key not found";
	case EMBER_ERANGE: return "buffer too small for the value (needed size returned)";
	case EMBER_ETOOBIG: return "key or value larger than the store accepts";
	case EMBER_ENOMEM: return "out of memory";
	case EMBER_EIO: return "I/O error";
	case EMBER_ECORRUPT: return "corrupt data: a checksum or structure check failed";
	case EMBER_ENOTEMBER: return "not an Ember file";
	case EMBER_EVERSION: return "unsupported Ember format version";
	case EMBER_EEXIST: return "a store already exists in this directory";
	case EMBER_EBUSY: return "store busy: locked by another handle or sessions still open";
	case EMBER_ESTATE: return "call not valid in the object's current state";
	case EMBER_EAGAIN: return "resource temporarily unavailable, try again";
	case EMBER_ENOSPC: return "a configured limit is exhausted";
	case EMBER_EREADONLY: return "the store is open read-only";
	case EMBER_EPENDING: return "the operation is pending: it completes in ember_session_poll or ember_session_wait";
	default: break;
	}
	if (code < 0 && code > -4096) {
		const char *d = strerrordesc_np(-code);
		if (d)
			return d;
	}
	return "unknown error code";
}

#ifdef EMBER_DEBUG_CHECKS
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/debug.h"

void em_debug_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "ember: debug check failed at %s:%d: %s: ", file, line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}
#endif
