/*
 * address.h - logical log addresses and their split into pages.
 *
 * An address is a 48-bit byte offset into a log's logical address space; the same
 * number is the offset in the log's file. Address 0 is "no address" (the end of a
 * hash chain); logs start at EM_LOG_START so no record ever lives at 0. A page is
 * 2^page_bits bytes: the unit in which a log is flushed and evicted. Records are
 * 8-byte aligned and may span pages.
 */
#ifndef EMBER_CORE_ADDRESS_H
#define EMBER_CORE_ADDRESS_H

#include <stdint.h>

#define EM_ADDR_BITS 48
#define EM_ADDR_MASK ((UINT64_C(1) << EM_ADDR_BITS) - 1)
#define EM_ADDR_NONE UINT64_C(0)
#define EM_LOG_START UINT64_C(64)

static inline uint64_t em_page_of(uint64_t addr, unsigned page_bits) { return addr >> page_bits; }

static inline uint64_t em_page_floor(uint64_t addr, unsigned page_bits)
{
	return addr & ~((UINT64_C(1) << page_bits) - 1);
}

static inline uint64_t em_page_ceil(uint64_t addr, unsigned page_bits)
{
	return em_page_floor(addr + (UINT64_C(1) << page_bits) - 1, page_bits);
}

static inline uint64_t em_align_up(uint64_t v, uint64_t align) { return (v + align - 1) & ~(align - 1); }

static inline uint64_t em_align_down(uint64_t v, uint64_t align) { return v & ~(align - 1); }

#endif
