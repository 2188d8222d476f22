/*
 * cpu.h - what spin loops ask of the CPU, one definition per architecture.
 *
 * cpu_relax() goes in the body of a loop that waits for another thread's store
 * (a record's seqlock, a tentative index entry): it tells the core it is spinning,
 * which on x86 (`pause`) avoids the memory-order misspeculation at the loop's exit
 * and yields the pipeline to a sibling hyperthread, and on aarch64 (`yield`) hints
 * the same to an SMT core or a hypervisor. Elsewhere it is a compiler barrier only,
 * so the loop still re-reads memory. It orders nothing: the loops keep their atomics.
 */
#ifndef EMBER_CORE_CPU_H
#define EMBER_CORE_CPU_H

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

#endif
