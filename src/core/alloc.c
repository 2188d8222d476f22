/*
 * alloc.c - the allocator switch described in alloc.h.
 */
#include "core/alloc.h"

#include "core/fault.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* fault injection (core/fault.h): an injected failure returns NULL; 0 when compiled out */
#define ALLOC_FAULT() EM_FAULT(EM_FAULT_ALLOC)

#ifdef EMBER_USE_JEMALLOC
#include <jemalloc/jemalloc.h>

void *em_alloc(size_t size) { return ALLOC_FAULT() ? NULL : mallocx(size ? size : 1, 0); }

void *em_zalloc(size_t size)
{
	return ALLOC_FAULT() ? NULL : mallocx(size ? size : 1, MALLOCX_ZERO);
}

void *em_alloc_aligned(size_t align, size_t size)
{
	return ALLOC_FAULT() ? NULL : mallocx(size ? size : 1, MALLOCX_ALIGN(align));
}

void em_free(void *ptr, size_t size)
{
	(void)size; /* sdallocx would need the alignment flags too; keep it simple */
	if (ptr)
		dallocx(ptr, 0);
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
