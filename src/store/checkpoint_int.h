/*
 * checkpoint_int.h - what the checkpoint files share and nothing else includes:
 * the checkpoint state (struct ckpt) and the checkpoints directory's helpers.
 *   checkpoint.c       taking a checkpoint; its protocol (design notes 1-8)
 *   checkpoint_dir.c   paths, listing, reading and removing checkpoint directories
 *   checkpoint_meta.c  the meta block's format
 *   recovery.c         choosing a checkpoint, loading it and replaying the log
 */
#ifndef EMBER_STORE_CHECKPOINT_INT_H
#define EMBER_STORE_CHECKPOINT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/checkpoint.h"
#include "store/compact.h"
#include "store/store_int.h"

struct ckpt {
	pthread_mutex_t mu; /* one checkpoint at a time; guards last, have_last */
	_Atomic int active; /* a checkpoint holds pass_mu */
	struct ckpt_meta last;
	int have_last;
	/* guarded by the compactor's pass_mu */
	uint64_t floor[3];    /* punch nothing at or above (aligned begin of last) */
	uint64_t released[3]; /* punched below this */
	/* recovery: the files of the chosen checkpoint, until ckpt_apply */
	uint64_t *index_words;
	size_t index_cap;
	uint64_t *table_words;
	size_t table_cap;
	char chosen[32];
	/* background thread */
	pthread_t thread;
	pthread_mutex_t tmu;
	pthread_cond_t tcv;
	int stop, started;
};

/* The file and the log of a compaction kind (COMPACT_HOT, _COLD, _CHUNKS). */
static inline struct em_file *ck_kind_file(struct ember_db *db, int kind)
{
	return kind == COMPACT_HOT ? &db->hot_file : kind == COMPACT_COLD ? &db->cold_file
									   : &db->chunk_file;
}

static inline struct hlog *ck_kind_hlog(struct ember_db *db, int kind)
{
	return kind == COMPACT_HOT ? db->hot : kind == COMPACT_COLD ? db->cold : db->chunks;
}

/* ---- checkpoint_meta.c ---------------------------------------------------------- */

/* Do two geometries agree in every field? */
int ck_geometry_equal(const struct store_geometry *a, const struct store_geometry *b);

/* ---- checkpoint_dir.c ----------------------------------------------------------- */

/* dir/checkpoints[/name[/file]] into a fresh string (em_free(.., 0)); NULL: memory. */
char *ck_path(struct ember_db *db, const char *name, const char *file);
/* Remove one checkpoint directory: 0 (gone), 1 (stays, without its meta) or an
 * error (its meta stays: still a checkpoint). */
int ck_remove_dir(struct ember_db *db, const char *name);
/* Remove every checkpoint directory but keep (a name; "" keeps none). Returns 0
 * or the first error. */
int ck_remove_others(struct ember_db *db, const char *keep);
/* fn(arg, name) for every checkpoint directory name, newest first, until fn
 * returns nonzero, which is returned. Returns 0 when the names run out, or the
 * listing's error. */
int ck_each_name(struct ember_db *db, int (*fn)(void *arg, const char *name), void *arg);
/* Read a whole file of at most max bytes into an aligned buffer (em_free(.., 0)):
 * 0 with *out and *len, EMBER_ECORRUPT when it is larger, or an error. */
int ck_read_file(struct em_ring *ring, const char *path, uint64_t max, uint8_t **out,
		 size_t *len);
/* Read and parse checkpoint name's meta: 0, -ENOENT (no meta: partial), or an
 * error (ckpt_meta_parse's, or the read's). */
int ck_read_meta(struct ember_db *db, struct em_ring *ring, const char *name,
		 struct ckpt_meta *m);
/* Does m's id name the directory name? */
int ck_meta_is_named(const struct ckpt_meta *m, const char *name);
/* Does the error mean a checkpoint is damaged (recovery moves on to an older one)? */
int ck_is_damage(int rc);

#endif
