/*
 * test_alloc_choice.c - the allocator the library's em_* calls use in a program
 * built here: jemalloc with -Dallocator=jemalloc (the programs link it and
 * src/core/alloc.c finds it at run time), libc otherwise; and the calls work from
 * several threads, aligned and zeroed as asked.
 */
#include "test_util.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "ember.h"

static void *churn(void *arg)
{
	tu_rng r;
	void *held[64] = {0};
	size_t sizes[64] = {0};
	tu_rng_seed(&r, tu_seed() + (uintptr_t)arg);
	for (uint64_t i = 0; i < tu_scaled(200000); i++) {
		unsigned k = (unsigned)tu_rng_below(&r, 64);
		if (held[k]) {
			CHECK(((unsigned char *)held[k])[0] == (unsigned char)k, "slot %u clobbered", k);
			em_free(held[k], sizes[k]);
			held[k] = NULL;
			continue;
		}
		sizes[k] = (size_t)tu_rng_range(&r, 1, 70000);
		if (tu_rng_chance(&r, 1, 3)) {
			size_t align = (size_t)1 << tu_rng_range(&r, 3, 13);
			held[k] = em_alloc_aligned(align, sizes[k]);
			CHECK(held[k] && ((uintptr_t)held[k] & (align - 1)) == 0, "aligned %zu", align);
		} else if (tu_rng_chance(&r, 1, 2)) {
			held[k] = em_zalloc(sizes[k]);
			CHECK(held[k], "zalloc");
			for (size_t b = 0; b < sizes[k]; b += 997)
				CHECK(((unsigned char *)held[k])[b] == 0, "zalloc not zero at %zu", b);
		} else {
			held[k] = em_alloc(sizes[k]);
			CHECK(held[k], "alloc");
		}
		((unsigned char *)held[k])[0] = (unsigned char)k;
	}
	for (unsigned k = 0; k < 64; k++)
		em_free(held[k], sizes[k]);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[4];
	tu_init("alloc_choice", argc, argv);
#ifdef EMBER_USE_JEMALLOC
	CHECK(em_alloc_uses_jemalloc() == 1, "a program linked with jemalloc uses libc");
#else
	CHECK(em_alloc_uses_jemalloc() == 0, "-Dallocator=libc uses jemalloc");
#endif
	for (uintptr_t t = 0; t < 4; t++)
		CHECK(pthread_create(&th[t], NULL, churn, (void *)t) == 0, "pthread_create");
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);
	printf("alloc_choice: %s\n", em_alloc_uses_jemalloc() ? "jemalloc" : "libc");
	return 0;
}
