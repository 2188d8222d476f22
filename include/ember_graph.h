/*
 * ember_graph.h - Ember's out-of-core graph partition buffer (Marius++ style):
 * import of edge lists into partitions stored through the Ember store, partition
 * orderings (BETA, COMET, sequential) and their simulator, a bounded buffer of
 * partitions with background prefetch and write-back, training examples, and
 * multi-hop neighbourhood sampling.
 *
 * (Being written: the orderings section and the buffer section below are filled in
 * by separate changes.)
 */
#ifndef EMBER_GRAPH_H
#define EMBER_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== orderings ================================================================ */

/* ==== end of orderings ========================================================= */

/* ==== import, buffer, examples, sampling ======================================= */

/* ==== end of import, buffer, examples, sampling ================================ */

#ifdef __cplusplus
}
#endif

#endif /* EMBER_GRAPH_H */
