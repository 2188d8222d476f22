/*
 * debug.h - debug assertions that tie numbered invariants of the design notes to the
 * code (-Ddebug_checks=true, on in tools/build asan; compiled out otherwise).
 *
 * EM_DEBUG_CHECK(cond, fmt, ...) names the invariant it checks in fmt; a failure
 * prints where and what, then aborts: a broken invariant is a bug in Ember, never a
 * condition of the data (damaged files are reported as EMBER_ECORRUPT instead).
 */
#ifndef EMBER_CORE_DEBUG_H
#define EMBER_CORE_DEBUG_H

#ifdef EMBER_DEBUG_CHECKS
__attribute__((noreturn, format(printf, 4, 5))) void
em_debug_fail(const char *file, int line, const char *cond, const char *fmt, ...);
#define EM_DEBUG_CHECK(cond, ...)                                                  \
	do {                                                                       \
		if (!(cond))                                                       \
			em_debug_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);     \
	} while (0)
#define EM_DEBUG_CHECKS_ON 1
#else
#define EM_DEBUG_CHECK(cond, ...) ((void)sizeof(!(cond)))
#define EM_DEBUG_CHECKS_ON 0
#endif

#endif
