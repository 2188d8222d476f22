/*
 * alloc.h - the library's allocation calls.
 *
 * Every allocation Ember makes for itself goes through these calls, so the
 * allocator is chosen in one place: jemalloc's non-standard API (mallocx/dallocx)
 * when built with -Dallocator=jemalloc and the process has jemalloc loaded (the
 * library does not link it, so that dlopen can load it: alloc.c), libc otherwise
 * (and always with -Dallocator=libc: sanitizer builds, where ASan must see every
 * allocation). Large, long-lived regions (the log buffer, the hash table) are
 * mapped with mmap by their owners instead.
 *
 * Invariant: memory from em_alloc* is freed with em_free, passing the same size
 * (size 0 is allowed when the size is unknown to the caller).
 */
#ifndef EMBER_CORE_ALLOC_H
#define EMBER_CORE_ALLOC_H

#include <stddef.h>

void *em_alloc(size_t size);
void *em_zalloc(size_t size);
/* align is a power of two >= sizeof(void *). */
void *em_alloc_aligned(size_t align, size_t size);
void em_free(void *ptr, size_t size);
/* 1 when this process's em_* calls go to jemalloc, 0 when to libc (fixed at the
 * first call). */
int em_alloc_uses_jemalloc(void);

/* A buffer for O_DIRECT reads: 4 KiB aligned; from EM_HUGE_BYTES up, 2 MiB aligned
 * and advised to transparent huge pages (MADV_HUGEPAGE), because a direct read into
 * 4 KiB pages is cut into requests of max_segments pages (about 1 MiB on virtio),
 * and one into 2 MiB pages is not: 4 MiB reads went 1.5x faster on the test VM
 * (docs/graph.md). Freed with em_free. */
#define EM_HUGE_BYTES (2u << 20)
void *em_alloc_io(size_t size);

/* Grow *buf (an em_alloc_io buffer of *cap bytes, or NULL and 0) to hold need
 * bytes, doubling from 256; its contents are not kept. 0 or EMBER_ENOMEM. */
int em_buf_reserve(unsigned char **buf, size_t *cap, size_t need);

#endif
