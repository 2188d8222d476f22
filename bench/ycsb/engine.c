/*
 * engine.c - the table of engines compiled into ember-ycsb.
 */
#include "engine.h"

#include <string.h>

const ycsb_engine *const ycsb_engines[] = {
	&ycsb_engine_ember,
#ifdef HAVE_ROCKSDB
	&ycsb_engine_rocksdb,
#endif
#ifdef HAVE_LMDB
	&ycsb_engine_lmdb,
#endif
	NULL,
};

const ycsb_engine *ycsb_engine_find(const char *name)
{
	for (size_t i = 0; ycsb_engines[i] != NULL; i++)
		if (strcmp(ycsb_engines[i]->name, name) == 0)
			return ycsb_engines[i];
	return NULL;
}
