/*
 * abi.h - public structs across library versions (docs/abi.md).
 *
 * A public options or stats struct only grows at its end. The caller says how many
 * bytes of it it knows: an options struct in its leading struct_size field (set by
 * the *_default() call), a stats struct through the size the header's macro passes
 * (sizeof as the caller was compiled). These two copy between the caller's struct
 * and the library's own, so that neither side reads or writes past the smaller.
 */
#ifndef EMBER_CORE_ABI_H
#define EMBER_CORE_ABI_H

#include <ember.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * Copy a caller's input struct of caller_size bytes over the first bytes of the
 * library's (lib, lib_size bytes, already holding what missing fields mean). A
 * caller's struct larger than the library's is accepted only if every byte past
 * lib_size is zero: a nonzero one asks for something this library does not have
 * (EMBER_EINVAL). caller_size 0 is EMBER_EINVAL.
 */
static inline int abi_struct_in(void *lib, size_t lib_size, const void *caller,
				size_t caller_size)
{
	if (caller_size == 0)
		return EMBER_EINVAL;
	if (caller_size > lib_size) {
		const uint8_t *extra = (const uint8_t *)caller + lib_size;
		for (size_t i = 0; i < caller_size - lib_size; i++)
			if (extra[i])
				return EMBER_EINVAL;
	}
	memcpy(lib, caller, caller_size < lib_size ? caller_size : lib_size);
	return 0;
}

/*
 * Copy the library's filled output struct (lib, lib_size bytes) into the caller's
 * of caller_size bytes: as much as both have; the rest of a larger caller's struct
 * is zeroed (figures this library does not produce).
 */
static inline void abi_struct_out(void *caller, size_t caller_size, const void *lib,
				  size_t lib_size)
{
	size_t n = caller_size < lib_size ? caller_size : lib_size;
	memcpy(caller, lib, n);
	if (caller_size > n)
		memset((uint8_t *)caller + n, 0, caller_size - n);
}

#endif
