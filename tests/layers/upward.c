/*
 * upward.c - a log-layer file that includes a store header. Compiled with the log
 * layer's include path it must fail (the store is above the log); with the store
 * layer's it must compile (tests/layers/meson.build).
 */
#include "store/store_int.h"

int layers_upward_probe(void);
int layers_upward_probe(void) { return (int)sizeof(struct ember_db); }
