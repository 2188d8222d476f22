/*
 * test_address.c - address and page arithmetic, and the hash's bucket/tag split.
 */
#include <ember.h>

#include "core/address.h"
#include "core/hash.h"
#include "test_util.h"

int main(int argc, char **argv)
{
	tu_init("test_address", argc, argv);
	const unsigned bits = 16;
	CHECK(em_page_of(0, bits) == 0 && em_page_of(65535, bits) == 0 && em_page_of(65536, bits) == 1,
	      "page_of");
	CHECK(em_page_floor(65537, bits) == 65536 && em_page_floor(65536, bits) == 65536, "floor");
	CHECK(em_page_ceil(65537, bits) == 131072 && em_page_ceil(65536, bits) == 65536 &&
		      em_page_ceil(0, bits) == 0,
	      "ceil");
	CHECK(em_align_up(1, 8) == 8 && em_align_up(8, 8) == 8 && em_align_up(0, 8) == 0, "align_up");
	CHECK(em_align_down(4097, 4096) == 4096, "align_down");
	CHECK(EM_LOG_START > EM_ADDR_NONE && EM_ADDR_MASK == 0xffffffffffffULL, "constants");
	/* tags are 14 bits and spread: 4096 keys hit most of the 16384 tags' quarter */
	static unsigned char seen[1 << 14];
	unsigned distinct = 0;
	for (uint64_t k = 0; k < 4096; k++) {
		uint64_t h = em_hash(&k, sizeof(k));
		uint32_t t = em_hash_tag(h);
		CHECK(t < (1u << 14), "tag fits 14 bits");
		if (!seen[t]++)
			distinct++;
	}
	CHECK(distinct > 3500, "tags spread (%u distinct of 4096)", distinct);
	printf("ok\n");
	return 0;
}
