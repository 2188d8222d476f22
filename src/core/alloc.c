/*
 * alloc.c - the allocator switch described in alloc.h.
 */
#include "core/alloc.h"

#include "core/fault.h"

#include <ember.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* fault injection (core/fault.h): an injected failure returns NULL; 0 when compiled out */
#define ALLOC_FAULT() EM_FAULT(EM_FAULT_ALLOC)

#ifdef EMBER_USE_JEMALLOC
/*
 * jemalloc, found at run time. libember.so does not link libjemalloc: Debian's
 * libjemalloc.so.2 keeps its thread state in initial-exec TLS, which a library
 * loaded by dlopen (a Python extension, ctypes) cannot get ("cannot allocate memory
 * in static TLS block"). The programs link jemalloc instead (meson.build), and the
 * library uses jemalloc's mallocx/dallocx when the process has them, libc's malloc
 * otherwise. The choice is made once per process, at the first allocation, and
 * never changes, so memory from one allocator is never freed by the other.
 */
#include <dlfcn.h>
#include <jemalloc/jemalloc.h> /* MALLOCX_ZERO, MALLOCX_ALIGN: flags only, no calls */
#include <pthread.h>
#include <stdatomic.h>

struct alloc_api {
	void *(*mallocx)(size_t size, int flags); /* NULL: libc */
	void (*dallocx)(void *ptr, int flags);
};

static const struct alloc_api libc_api = {NULL, NULL};
static struct alloc_api jemalloc_api;
/* release (alloc_choose) / acquire (alloc_get): whoever sees the pointer sees the
 * function pointers stored in jemalloc_api before it was published */
static const struct alloc_api *_Atomic alloc_chosen;
static pthread_once_t alloc_once = PTHREAD_ONCE_INIT;

static void alloc_choose(void)
{
	const struct alloc_api *api = &libc_api;
	void *m = dlsym(RTLD_DEFAULT, "mallocx");
	void *d = dlsym(RTLD_DEFAULT, "dallocx");
	if (m && d) {
		*(void **)&jemalloc_api.mallocx = m;
		*(void **)&jemalloc_api.dallocx = d;
		api = &jemalloc_api;
	}
	/* release: pairs with alloc_get's acquire (jemalloc_api's fields above) */
	atomic_store_explicit(&alloc_chosen, api, memory_order_release);
}

static const struct alloc_api *alloc_get(void)
{
	/* acquire: pairs with alloc_choose's release; NULL until the one choice is made */
	const struct alloc_api *api = atomic_load_explicit(&alloc_chosen, memory_order_acquire);
	if (__builtin_expect(api != NULL, 1))
		return api;
	(void)pthread_once(&alloc_once, alloc_choose);
	/* acquire: pthread_once already ordered it; the load just reads the choice */
	return atomic_load_explicit(&alloc_chosen, memory_order_acquire);
}

int em_alloc_uses_jemalloc(void) { return alloc_get()->mallocx != NULL; }

void *em_alloc(size_t size)
{
	const struct alloc_api *a = alloc_get();
	if (ALLOC_FAULT())
		return NULL;
	return a->mallocx ? a->mallocx(size ? size : 1, 0) : malloc(size ? size : 1);
}

void *em_zalloc(size_t size)
{
	const struct alloc_api *a = alloc_get();
	if (ALLOC_FAULT())
		return NULL;
	return a->mallocx ? a->mallocx(size ? size : 1, MALLOCX_ZERO) : calloc(1, size ? size : 1);
}

void *em_alloc_aligned(size_t align, size_t size)
{
	const struct alloc_api *a = alloc_get();
	void *p = NULL;
	if (ALLOC_FAULT())
		return NULL;
	if (a->mallocx)
		return a->mallocx(size ? size : 1, MALLOCX_ALIGN(align));
	if (posix_memalign(&p, align, size ? size : 1) != 0)
		return NULL;
	return p;
}

void em_free(void *ptr, size_t size)
{
	const struct alloc_api *a;
	(void)size; /* sdallocx would need the alignment flags too; keep it simple */
	if (!ptr)
		return;
	a = alloc_get();
	if (a->mallocx)
		a->dallocx(ptr, 0);
	else
		free(ptr);
}

#else

void *em_alloc(size_t size) { return ALLOC_FAULT() ? NULL : malloc(size ? size : 1); }

void *em_zalloc(size_t size) { return ALLOC_FAULT() ? NULL : calloc(1, size ? size : 1); }

void *em_alloc_aligned(size_t align, size_t size)
{
	void *p = NULL;
	if (ALLOC_FAULT())
		return NULL;
	if (posix_memalign(&p, align, size ? size : 1) != 0)
		return NULL;
	return p;
}

void em_free(void *ptr, size_t size)
{
	(void)size;
	free(ptr);
}

int em_alloc_uses_jemalloc(void) { return 0; }

#endif

void *em_alloc_io(size_t size)
{
	if (size < EM_HUGE_BYTES)
		return em_alloc_aligned(4096, size);
	void *p = em_alloc_aligned(EM_HUGE_BYTES, size);
	/* a hint only: without THP (or with it off) the buffer still works */
	if (p)
		(void)madvise(p, size & ~(size_t)(EM_HUGE_BYTES - 1), MADV_HUGEPAGE);
	return p;
}

int em_buf_reserve(unsigned char **buf, size_t *cap, size_t need)
{
	if (*cap >= need)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	unsigned char *p = em_alloc_io(n); /* fit for O_DIRECT reads */
	if (!p)
		return EMBER_ENOMEM;
	em_free(*buf, *cap);
	*buf = p;
	*cap = n;
	return 0;
}
