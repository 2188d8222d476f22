/*
 * hash.h - the key hash, and how the hash index splits it.
 *
 * XXH3-64 of the key bytes. The low bits choose the bucket (hash & mask); the top
 * 14 bits are the entry's tag, so two keys in one bucket share an entry only when
 * their tags collide (1 in 16384), and then a record chain holds both.
 */
#ifndef EMBER_CORE_HASH_H
#define EMBER_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static inline uint64_t em_hash(const void *key, size_t len) { return XXH3_64bits(key, len); }

static inline uint32_t em_hash_tag(uint64_t hash) { return (uint32_t)(hash >> 50); }

#endif
