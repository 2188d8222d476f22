/*
 * ember_graph.h - Ember's out-of-core graph partition buffer (Marius++ style):
 * import of edge lists into partitions stored through the Ember store, partition
 * orderings (BETA, COMET, sequential) and their simulator, a bounded buffer of
 * partitions with background prefetch and write-back, training examples, and
 * multi-hop neighbourhood sampling.
 *
 * Design notes: docs/graph.md (import, stored layout, buffer, sampling) and
 * docs/graph_orderings.md.
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

/*
 * Partition orderings: which c of the p node partitions the buffer holds, state by
 * state, during one epoch, and in which state each edge bucket (i, j) is trained.
 * docs/graph_orderings.md explains the constructions and why they are correct.
 *
 * A state is the list of the c resident partition ids in slot order. State 0 is the
 * buffer's first fill (c loads); state s >= 1 differs from state s-1 in exactly one
 * slot: one partition evicted, one loaded (a "swap"). So an epoch has states - 1
 * swaps, and the buffer can prefetch the partitions of the next states one by one.
 *
 *   EMBER_GRAPH_ORDERING_BETA        (Marius): every pair of partitions (and every
 *       partition with itself) is resident together in at least one state; exactly
 *       (p-c) + (x+1)[(p-c) - x(c-1)/2] swaps, x = floor((p-c)/(c-1)); partition
 *       labels are shuffled per (seed, epoch). Bucket (i, j) is assigned to the
 *       FIRST state in which i and j are both resident (the state whose swap made
 *       the pair meet: work spreads evenly over the swaps, and the randomness comes
 *       from the labels, as in Marius).
 *   EMBER_GRAPH_ORDERING_COMET       (MariusGNN): physical partitions are grouped at
 *       random (per seed, epoch) into logical partitions of `comet_group` physical
 *       ones; BETA runs over the logical partitions with a buffer of c/comet_group
 *       logical slots, and each logical swap is carried out as comet_group physical
 *       swaps (slot by slot). Bucket (i, j) is assigned to a state drawn uniformly at
 *       random among ALL states in which both i and j are resident.
 *   EMBER_GRAPH_ORDERING_SEQUENTIAL  (node classification): the t training-node
 *       partitions (options.train, 1 <= t <= c) stay resident in slots 0..t-1 of
 *       every state; the other c-t slots start with a random fill and then walk the
 *       remaining partitions in a random order, evicting the oldest. Guarantees:
 *       every state holds every training partition; if t < c every partition is
 *       resident in at least one state (p-c swaps), so every bucket with a training
 *       partition at one end is co-resident somewhere; two non-training partitions
 *       are co-resident only if they lie within c-t of each other in the walk. A
 *       bucket is assigned to the first state where both ends are resident, or to
 *       EMBER_GRAPH_ORDERING_NO_STATE when there is none. If t == c there is one
 *       state and the other partitions are never resident.
 *
 * Thread-safety: an ember_graph_ordering never changes after create, so any number
 * of threads may read it at once. Destroy it once, after every reader is done.
 * Pointers it returns stay valid until destroy. All calls are pure functions of
 * their arguments: the same (p, c, kind, options) give the same ordering.
 */

/* The largest p accepted (an ordering keeps p*p bucket entries). */
#define EMBER_GRAPH_ORDERING_MAX_PARTITIONS 4096u
/* bucket_state of a bucket never trained in this epoch (SEQUENTIAL only). */
#define EMBER_GRAPH_ORDERING_NO_STATE UINT32_MAX

typedef enum ember_graph_ordering_kind {
	EMBER_GRAPH_ORDERING_BETA = 0,
	EMBER_GRAPH_ORDERING_COMET = 1,
	EMBER_GRAPH_ORDERING_SEQUENTIAL = 2,
} ember_graph_ordering_kind;

typedef struct ember_graph_ordering_options {
	/* Random seed; the ordering is a function of (seed, epoch). Default 0. */
	uint64_t seed;
	/* Epoch number: a new epoch draws new labels, groups and bucket states. */
	uint64_t epoch;
	/*
	 * COMET: physical partitions per logical partition. It must divide p and c,
	 * with c/comet_group >= 2. 0 = the largest divisor g of gcd(p, c) with
	 * c/g >= 4 (1 when c < 8 or none fits; g == 1 is BETA over physical
	 * partitions with random bucket states). Ignored by the other kinds.
	 */
	uint32_t comet_group;
	/*
	 * SEQUENTIAL: the partitions holding training nodes, n_train of them
	 * (1 <= n_train <= c, distinct, each < p), kept in slots 0..n_train-1 in this
	 * order. Copied by create; the caller keeps its array. Ignored by BETA, COMET.
	 */
	const uint32_t *train;
	uint32_t n_train;
} ember_graph_ordering_options;

/* Fill *opts with the defaults (all zero). */
void ember_graph_ordering_options_default(ember_graph_ordering_options *opts);

typedef struct ember_graph_ordering ember_graph_ordering;

/*
 * Build the ordering of one epoch for p partitions and a buffer of c of them
 * (2 <= c <= p <= EMBER_GRAPH_ORDERING_MAX_PARTITIONS; c == p gives one state).
 * kind is an ember_graph_ordering_kind; opts may be NULL (defaults). Returns
 * EMBER_EINVAL for out == NULL, p, c or kind out of range, a bad comet_group or
 * train array; EMBER_ENOMEM. On failure *out is NULL. Cost: O(states * c + p*p)
 * time and memory.
 */
int ember_graph_ordering_create(uint32_t p, uint32_t c, int kind,
				const ember_graph_ordering_options *opts,
				ember_graph_ordering **out);

/* Free the ordering (NULL is fine). */
void ember_graph_ordering_destroy(ember_graph_ordering *ord);

typedef struct ember_graph_ordering_info {
	uint32_t partitions;   /* p */
	uint32_t capacity;     /* c */
	int kind;              /* ember_graph_ordering_kind */
	uint32_t comet_group;  /* COMET: physical partitions per logical one; else 1 */
	uint32_t states;       /* number of states, >= 1 */
	uint64_t swaps;        /* states - 1 */
	uint64_t lower_bound;  /* ceil((p(p-1)/2 - c(c-1)/2) / (c-1)): any all-pairs ordering */
	uint64_t assigned;     /* buckets assigned to a state (p*p but for SEQUENTIAL) */
} ember_graph_ordering_info;

/* Describe the ordering. EMBER_EINVAL if ord or out is NULL. */
int ember_graph_ordering_info_get(const ember_graph_ordering *ord,
				  ember_graph_ordering_info *out);

/*
 * *slots = the c partition ids resident in state s, in slot order (valid until
 * destroy). EMBER_EINVAL if ord or slots is NULL or s >= states.
 */
int ember_graph_ordering_state(const ember_graph_ordering *ord, uint32_t s,
			       const uint32_t **slots);

/* The swap that turns state s-1 into state s. */
typedef struct ember_graph_swap {
	uint32_t slot;    /* the slot that changes */
	uint32_t evicted; /* partition leaving (resident in state s-1) */
	uint32_t loaded;  /* partition arriving (resident in state s) */
} ember_graph_swap;

/* *out = the swap into state s, 1 <= s < states; else EMBER_EINVAL. */
int ember_graph_ordering_swap(const ember_graph_ordering *ord, uint32_t s,
			      ember_graph_swap *out);

/*
 * *state = the state edge bucket (src, dst) is trained in (both partitions are
 * resident there), or EMBER_GRAPH_ORDERING_NO_STATE (SEQUENTIAL only). EMBER_EINVAL
 * if src or dst >= p or a pointer is NULL.
 */
int ember_graph_ordering_bucket_state(const ember_graph_ordering *ord, uint32_t src,
				      uint32_t dst, uint32_t *state);

/*
 * The buckets assigned to state s: *buckets points to *n bucket ids
 * (src * p + dst), ascending, valid until destroy (*buckets may be NULL when *n is
 * 0). Every bucket id appears under at most one state. EMBER_EINVAL if a pointer
 * is NULL or s >= states.
 */
int ember_graph_ordering_state_buckets(const ember_graph_ordering *ord, uint32_t s,
				       const uint32_t **buckets, uint32_t *n);

/*
 * *out = BETA's swap count (p-c) + (x+1)[(p-c) - x(c-1)/2], x = floor((p-c)/(c-1)),
 * for 2 <= c <= p (p may exceed EMBER_GRAPH_ORDERING_MAX_PARTITIONS here, up to
 * 2^31); else EMBER_EINVAL.
 */
int ember_graph_ordering_beta_swaps(uint32_t p, uint32_t c, uint64_t *out);

/*
 * *out = ceil((p(p-1)/2 - c(c-1)/2) / (c-1)): no ordering that makes every pair
 * co-resident needs fewer swaps (the first fill covers c(c-1)/2 pairs, each swap at
 * most c-1 new ones). Same ranges as ember_graph_ordering_beta_swaps.
 */
int ember_graph_ordering_lower_bound(uint32_t p, uint32_t c, uint64_t *out);

/*
 * The ordering simulator: the I/O an ordering costs, epoch by epoch.
 *
 * Model (docs/graph_orderings.md): epoch e uses the ordering with options.epoch =
 * opts.epoch + e. The buffer starts empty; at an epoch's start it loads the
 * partitions of state 0 that are not already resident (evicting as many), then makes
 * the ordering's swaps. Partitions read = those loads + swaps. With
 * features_only == 0 (learnable embeddings) every evicted partition is dirty and
 * written, and so is every resident one after the last epoch; with features_only
 * nothing is written. Buckets read: bucket_reads == 0 counts each assigned bucket
 * once (link prediction examples); 1 counts every bucket when its two partitions
 * become co-resident (an in-buffer graph for sampling, rebuilt at each swap).
 */
typedef struct ember_graph_sim_options {
	uint32_t epochs;          /* 0 = 1 */
	uint64_t partition_bytes; /* size of one node partition */
	uint64_t bucket_bytes;    /* size of one edge bucket */
	int features_only;        /* 1: node data is read-only, nothing written */
	int bucket_reads;         /* 0: assigned buckets once; 1: in-buffer graph */
} ember_graph_sim_options;

void ember_graph_sim_options_default(ember_graph_sim_options *opts);

typedef struct ember_graph_sim_epoch {
	uint64_t swaps;              /* the ordering's swaps (states - 1) */
	uint64_t lower_bound;        /* ember_graph_ordering_lower_bound(p, c) */
	uint64_t first_loads;        /* loads of state 0 (c in the first epoch) */
	uint64_t partitions_read;    /* first_loads + swaps */
	uint64_t partitions_written; /* dirty evictions (+ final flush) */
	uint64_t buckets_read;
	uint64_t bytes_read;         /* partitions_read * partition_bytes + buckets_read * bucket_bytes */
	uint64_t bytes_written;      /* partitions_written * partition_bytes */
} ember_graph_sim_epoch;

/*
 * Simulate sim->epochs epochs of the ordering (p, c, kind, ord_opts) and write one
 * ember_graph_sim_epoch per epoch to out[0 .. epochs-1]. ord_opts and sim may be
 * NULL (defaults). EMBER_EINVAL for what create rejects, out == NULL or
 * out_len < epochs; EMBER_ENOMEM.
 */
int ember_graph_ordering_simulate(uint32_t p, uint32_t c, int kind,
				  const ember_graph_ordering_options *ord_opts,
				  const ember_graph_sim_options *sim,
				  ember_graph_sim_epoch *out, uint32_t out_len);


/* ==== end of orderings ========================================================= */

/* ==== import, buffer, examples, sampling ======================================= */

/*
 * Graphs stored in an Ember store
 * -------------------------------
 * ember_graph_import() turns an edge list into a graph named `name` inside an open
 * store: node ids are permuted at random (a seeded bijection, so the mapping needs
 * no table), the new ids are cut into `p` node partitions of contiguous ids, and
 * the edges into `p x p` edge buckets (bucket (i, j) holds the edges from partition
 * i to partition j). Node data (`dim` floats per node) and edge buckets are stored
 * as chunked values (at most chunk_bytes each), plus a small metadata record that
 * is written last. docs/graph.md has the key and value formats.
 *
 * Objects and threads
 * -------------------
 *   ember_graph          an imported graph, opened from a store. Immutable after
 *                        open: any thread may call the ember_graph_* readers at once
 *                        (each opens a store session of its own for the call).
 *                        Close it after every buffer on it is closed.
 *   ember_graph_buffer   c partitions in memory, driven through one epoch after
 *                        another by a plan. One trainer thread at a time calls its
 *                        functions; threads of its own read and write partitions,
 *                        and apply asynchronous updates, in the background.
 *                        Close it after every sampler on it is closed.
 *   ember_graph_sampler  neighbourhood sampling over the buffer's current state.
 *                        Each sampler belongs to one thread; several samplers may
 *                        run at once on one buffer, but never during
 *                        ember_graph_buffer_next_state(), _update() or
 *                        _update_async() on it (the trainer orders those calls with
 *                        its samplers); while an asynchronous update is applied in
 *                        the background they may run (their gather waits for it).
 *
 * Every call returns 0 or a negative EMBER_E* code (or -errno for a file the OS
 * refused); destructors accept NULL.
 */

typedef struct ember_graph ember_graph;
typedef struct ember_graph_buffer ember_graph_buffer;
typedef struct ember_graph_sampler ember_graph_sampler;

#define EMBER_GRAPH_MAX_PARTITIONS 1024u     /* p */
#define EMBER_GRAPH_MAX_NAME 64u             /* bytes of a graph's name */
#define EMBER_GRAPH_MAX_DIM 65536u           /* floats per node */
#define EMBER_GRAPH_MAX_LAYERS 8u            /* sampler layers */
#define EMBER_GRAPH_NO_STATE UINT32_MAX      /* a bucket no state trains */

/* One edge, in new (permuted) node ids. */
typedef struct ember_graph_edge {
	uint64_t src;
	uint64_t dst;
	uint32_t rel;      /* relation type; 0 for an edge list without relations */
	uint32_t reserved; /* 0 */
} ember_graph_edge;

/* What ember_graph_info_get() reports. */
typedef struct ember_graph_info {
	uint64_t num_nodes;      /* ids 0 .. num_nodes-1, original and new */
	uint64_t num_edges;
	uint64_t partition_size; /* nodes per partition (the last one may hold fewer) */
	uint64_t train_nodes;    /* training nodes recorded (0: every node trains) */
	uint32_t partitions;     /* p */
	uint32_t dim;            /* floats per node */
	uint32_t relations;      /* 1 + the largest relation id (1 without relations) */
	uint32_t chunk_bytes;    /* largest stored value */
} ember_graph_info;

/* ember_graph_import_options.format */
enum {
	EMBER_GRAPH_TEXT = 0,   /* lines "src dst" or "src rel dst" (decimal); '#' starts a
				   comment line; blank lines are skipped */
	EMBER_GRAPH_BINARY = 1, /* little-endian uint64 records of binary_fields values */
};

/* ember_graph_import_options.init: how node data starts. */
enum {
	EMBER_GRAPH_INIT_UNIFORM = 0, /* uniform in [-init_scale, init_scale], from seed */
	EMBER_GRAPH_INIT_ZERO = 1,
	EMBER_GRAPH_INIT_FILE = 2,    /* node_data_path: num_nodes x dim little-endian
					 float32, in original id order */
};

/*
 * Progress of an import: phase is "scan", "sort", "merge", "nodes" or "train";
 * done of total units (bytes of input for scan and sort, edges for merge,
 * partitions for nodes). Called from the importing thread, at most a few times a
 * second per phase and once at each phase's end.
 */
typedef void (*ember_graph_progress_fn)(void *arg, const char *phase, uint64_t done,
					uint64_t total);

typedef struct ember_graph_import_options {
	/* Required: partitions (1 .. EMBER_GRAPH_MAX_PARTITIONS) and dim
	 * (1 .. EMBER_GRAPH_MAX_DIM). */
	uint32_t partitions;
	uint32_t dim;
	/* EMBER_GRAPH_TEXT (default) or EMBER_GRAPH_BINARY. */
	uint32_t format;
	/* Binary form: 2 (src, dst; default) or 3 (src, rel, dst) uint64s per record. */
	uint32_t binary_fields;
	/* Nodes: 0 means 1 + the largest id seen (the input is then read twice); else
	 * an id >= num_nodes is a malformed line. */
	uint64_t num_nodes;
	/* Seed of the permutation and of the uniform initialiser. Default 0 is a seed
	 * like any other. */
	uint64_t seed;
	/* EMBER_GRAPH_INIT_* (default uniform) and its scale (default 0.1). */
	uint32_t init;
	float init_scale;
	/* With EMBER_GRAPH_INIT_FILE: the node data file (required then). */
	const char *node_data_path;
	/* Optional: training nodes for node classification, one original id per line
	 * (text, '#' comments and blank lines allowed; a file that names no node is
	 * malformed, since 0 training nodes means every node trains). Kept in memory
	 * during import (8 to 32 bytes per training node, however often the file
	 * repeats one). */
	const char *train_nodes_path;
	/* Directory for sorted run files (default $TMPDIR or /tmp); they are removed
	 * before the call returns. */
	const char *tmp_dir;
	/* Memory for sorting edges, in bytes (16 per edge in a run): edge lists that do
	 * not fit are sorted in runs and merged. At least 1 MiB; default 64 MiB. The
	 * import's other memory is one chunk per value being written, p x p x 8 bytes
	 * of bucket counts, and the training nodes. */
	uint64_t memory_budget;
	/* Largest stored value: 64 KiB .. EMBER_MAX_VALUE_LEN, default 4 MiB. The store
	 * must accept values this large (see ember_options.log_memory). */
	uint32_t chunk_bytes;
	/* Optional progress callback. */
	ember_graph_progress_fn progress;
	void *progress_arg;
} ember_graph_import_options;

/* Fill *opts with the defaults (partitions and dim are left 0: set them). */
void ember_graph_import_options_default(ember_graph_import_options *opts);

/* What an import did, or where its input was malformed. */
typedef struct ember_graph_import_result {
	uint64_t error_line;  /* malformed input: its 1-based line (text) or record
				 (binary) number, in the file named by error_file; else 0 */
	char error_file[16];  /* "edges", "train nodes" or "node data" */
	char error[112];      /* what was wrong (also set for other failures) */
	uint64_t num_nodes;
	uint64_t num_edges;
	uint32_t runs;        /* sorted runs written to tmp_dir (0: sorted in memory) */
	uint32_t merge_passes;/* merge passes over run files before the final one */
	uint64_t bytes_stored;/* value bytes written to the store */
} ember_graph_import_result;

/*
 * Import the edge list at edges_path as graph `name` (1 .. EMBER_GRAPH_MAX_NAME
 * bytes) in db. Opens a session of its own for the call. res may be NULL.
 *
 * Returns 0; EMBER_EINVAL for bad arguments; EMBER_EEXIST if db already holds a
 * graph of that name; EMBER_ECORRUPT for malformed input (a line that is not two or
 * three non-negative decimal integers, a line with another field count than the
 * first, an id past num_nodes, a binary file cut inside a record, a node data file
 * of the wrong size), with res->error_line saying where; -errno when a file cannot
 * be read or written; a store error (EMBER_ETOOBIG: the store's values are smaller
 * than chunk_bytes). A failed import leaves no metadata record, so the graph does
 * not exist (its chunks may remain until overwritten by a later import).
 */
int ember_graph_import(ember_db *db, const char *name, const char *edges_path,
		       const ember_graph_import_options *opts,
		       ember_graph_import_result *res);

/* Open graph `name` of db. EMBER_ENOTFOUND if there is none; EMBER_ECORRUPT if its
 * metadata fails its checks. */
int ember_graph_open(ember_db *db, const char *name, ember_graph **g);

/* Close a graph (its buffers must be closed first: EMBER_EBUSY). Accepts NULL. */
int ember_graph_close(ember_graph *g);

int ember_graph_info_get(const ember_graph *g, ember_graph_info *out);

/* The permutation: original id -> new id, and back. EMBER_EINVAL past num_nodes. */
int ember_graph_node_to_new(const ember_graph *g, uint64_t original, uint64_t *new_id);
int ember_graph_node_to_original(const ember_graph *g, uint64_t new_id,
				 uint64_t *original);

/* Edges in bucket (i, j) (edges from partition i to partition j). */
int ember_graph_bucket_size(const ember_graph *g, uint32_t i, uint32_t j,
			    uint64_t *edges);

/* Read bucket (i, j) from the store into out (cap edges), sorted by (src, dst).
 * *n is set to the bucket's size; EMBER_ERANGE if cap is smaller. */
int ember_graph_read_bucket(ember_graph *g, uint32_t i, uint32_t j,
			    ember_graph_edge *out, size_t cap, size_t *n);

/* Read the stored node data of nodes [first, first + count) (new ids) into out
 * (count x dim floats). Data a buffer holds dirty is not seen until it is written
 * back (ember_graph_buffer_flush). */
int ember_graph_read_nodes(ember_graph *g, uint64_t first, uint64_t count, float *out);

/*
 * Plans and the buffer
 * --------------------
 * A plan is one epoch: num_states buffer states of `capacity` partitions each
 * (state k's partitions in slot order at states[k * capacity ...]), and the state
 * that trains each edge bucket (bucket_state[i * p + j], or EMBER_GRAPH_NO_STATE),
 * which must hold both of the bucket's partitions. An ordering (BETA, COMET,
 * sequential) produces one; any other source works too. The buffer copies it.
 */
typedef struct ember_graph_plan {
	uint32_t partitions;          /* p: the graph's */
	uint32_t capacity;            /* c: the buffer's */
	uint32_t num_states;
	const uint32_t *states;       /* num_states x capacity distinct-per-state ids */
	const uint32_t *bucket_state; /* p x p */
} ember_graph_plan;

/*
 * The same from an ordering (see the orderings section): its states and bucket
 * assignment become the plan. The ordering may be destroyed after the call.
 */
int ember_graph_buffer_set_ordering(ember_graph_buffer *b, const ember_graph_ordering *ord);

/* ember_graph_buffer_options.flags */
#define EMBER_GRAPH_BUFFER_READ_ONLY 0x1u /* never write node data back: updates
					     are allowed and dropped at eviction */
#define EMBER_GRAPH_BUFFER_ALL_EDGES 0x2u /* hold every bucket whose partitions are
					     both resident, with CSR and CSC views
					     (the sampler needs this) */

typedef struct ember_graph_buffer_options {
	/* Required: c, partitions resident per state (1 .. p). */
	uint32_t capacity;
	/* Extra slots into which the partitions of the next states are read while the
	 * current state trains: up to prefetch_slots states ahead while free slots
	 * last (a partition that finds none is read at its swap). Partitions a state
	 * within that horizon needs stay resident across the states that lack them.
	 * Default 1; EMBER_GRAPH_BUFFER_NO_PREFETCH for none. */
	uint32_t prefetch_slots;
	/* EMBER_GRAPH_BUFFER_* flags. */
	uint32_t flags;
	/* Must be 0. (The batch size is the cap each next_batch call passes.) */
	uint32_t reserved;
	/* Bytes the buffer may hold: slots (partition_size x dim x 4 each), edge buckets
	 * (12 bytes per edge) and their views (8 bytes per edge + 8 per node per bucket),
	 * the shuffled examples (32 bytes per edge of the largest state: its array and
	 * the next state's, built ahead, 16 bytes an example), the training nodes (4
	 * bytes each) and update_async's row pointers (8 bytes per node of its largest
	 * call). Open
	 * fails with EMBER_ENOSPC if c slots do not fit; fewer prefetch slots are used
	 * when they do not all fit; set_plan fails with EMBER_ENOSPC if a plan's edges
	 * do not (nor, until next_state(0) frees them, beside the buckets the last
	 * plan's last state still holds), and reads buckets as many states ahead as
	 * there are prefetch slots only when those fit too (else one state ahead).
	 * 0: no limit. */
	uint64_t memory_budget;
	/* Seed of the example shuffles. */
	uint64_t seed;
} ember_graph_buffer_options;

#define EMBER_GRAPH_BUFFER_NO_PREFETCH UINT32_MAX

void ember_graph_buffer_options_default(ember_graph_buffer_options *opts);

/* Counters since open (ember_graph_buffer_stats_get). */
typedef struct ember_graph_buffer_stats {
	uint64_t states;             /* states entered */
	uint64_t partitions_loaded;  /* partitions made resident (read or reclaimed) */
	uint64_t partitions_read;    /* of which read from the store */
	uint64_t partitions_reclaimed;/* found still in memory after their eviction */
	uint64_t partitions_written; /* dirty evictions and flushes written back */
	uint64_t clean_evictions;    /* evictions that wrote nothing */
	uint64_t reads_after_write;  /* loads that waited for their own write-back */
	uint64_t buckets_read;
	uint64_t bytes_read;         /* node data and edges read from the store */
	uint64_t bytes_written;      /* node data written back */
	uint64_t memory_bytes;       /* what the buffer holds now */
	uint64_t memory_peak;
	uint32_t slots;              /* c + prefetch slots in use */
	uint32_t reserved;
	double wait_seconds;         /* trainer time in next_state waiting for I/O */
	double read_seconds;         /* background time spent in reads */
	double write_seconds;        /* background time spent in writes */
	double update_seconds;       /* time spent applying updates (the trainer's and,
					for update_async, the updater thread's) */
	double update_wait_seconds;  /* trainer time waiting for an asynchronous update
					to be applied (see ember_graph_buffer_update_async) */
	uint64_t updates_async;      /* updates applied by the updater thread */
	uint64_t states_prepared;    /* states whose examples the updater thread
					gathered and shuffled ahead of next_state */
} ember_graph_buffer_stats;

/* Open a buffer on g (it starts empty). EMBER_ENOSPC: see memory_budget. */
int ember_graph_buffer_open(ember_graph *g, const ember_graph_buffer_options *opts,
			    ember_graph_buffer **b);

/* Write back every dirty partition, stop the background threads and free the
 * buffer. Returns the first background error, if any. Its samplers must be
 * closed first: EMBER_EBUSY (nothing done) while one is open. Accepts NULL. */
int ember_graph_buffer_close(ember_graph_buffer *b);

/*
 * Give the buffer the next epoch's plan (copied). Valid when no plan is set or the
 * previous one has run out (next_state returned EMBER_ENOTFOUND); EMBER_ESTATE
 * otherwise. EMBER_EINVAL for a plan that does not match the graph and buffer (a
 * state with repeated or out-of-range partitions, a bucket assigned to a state that
 * lacks one of its partitions). The first state's partitions start loading at
 * once, and its buckets too where they fit beside those the last plan still holds
 * (else next_state(0) reads them, once it has freed those).
 */
int ember_graph_buffer_set_plan(ember_graph_buffer *b, const ember_graph_plan *plan);

/* The current state, as next_state leaves it. Pointers stay valid until the next
 * next_state or close. */
typedef struct ember_graph_state {
	uint32_t index;              /* in the plan */
	uint32_t capacity;
	const uint32_t *partitions;  /* capacity ids, in slot order */
	uint64_t edges;              /* training edges next_batch yields in this state */
	uint64_t nodes;              /* training nodes next_nodes yields in this state */
} ember_graph_state;

/*
 * Move to the plan's next state: evict the partitions that neither it nor the
 * states read ahead for need (writing back the dirty ones in the background), wait
 * for its partitions and edges, then start reading the states after it (see
 * prefetch_slots). Fills *st (may be NULL). Returns EMBER_ENOTFOUND when the plan has
 * no more states (the resident partitions stay, and stay current), EMBER_ESTATE with
 * no plan, or the first error a background read or write met (EMBER_EIO,
 * EMBER_ECORRUPT for a chunk missing or of the wrong size, a store error), after
 * which next_state, set_plan, flush and close return it: close the buffer.
 */
int ember_graph_buffer_next_state(ember_graph_buffer *b, ember_graph_state *st);

/*
 * Training examples of the current state: the edges of the buckets assigned to it,
 * in a shuffled order, up to cap per call. *n = 0 when the state has no more. Each
 * edge of the epoch is returned exactly once.
 */
int ember_graph_buffer_next_batch(ember_graph_buffer *b, ember_graph_edge *out,
				  size_t cap, size_t *n);

/*
 * Node classification: the training nodes (new ids) of the partitions this state
 * is the first in the plan to hold, shuffled, up to cap per call; *n = 0 when done.
 * Each training node of the epoch is returned exactly once.
 */
int ember_graph_buffer_next_nodes(ember_graph_buffer *b, uint64_t *out, size_t cap,
				  size_t *n);

/* ember_graph_buffer_update modes */
enum {
	EMBER_GRAPH_UPDATE_ADD = 0, /* row += value (scatter-add; repeated nodes add up) */
	EMBER_GRAPH_UPDATE_SET = 1, /* row = value (the last of repeated nodes wins) */
};

/*
 * Write n rows (n x dim floats) into the nodes given (new ids, each in a partition
 * of the current state) and mark their partitions dirty. EMBER_EINVAL, with nothing
 * written, if any node is not in the current state or n x dim x 4 overflows size_t;
 * EMBER_ESTATE without a state. Applied in the call, after an outstanding
 * asynchronous update.
 */
int ember_graph_buffer_update(ember_graph_buffer *b, size_t n, const uint64_t *nodes,
			      const float *rows, int mode);

/*
 * The same, applied in the background: the call checks the nodes (same errors,
 * nothing written on error), marks their partitions dirty and hands the update to
 * the buffer's updater thread, which reads rows[] IN PLACE (no copy) while the
 * trainer goes on (next_batch, its compute, even next_state: a partition the update
 * touches is written back only after it is applied). One asynchronous update is
 * outstanding at most: the caller must leave rows[] unchanged until the next of
 * these calls on b returns, each of which first waits for it to be applied:
 * update_async, update, update_sync, flush, gather, close (and
 * ember_graph_sampler_gather, ember_graph_device_send, which read node data).
 * nodes[] is not read after the call returns. So a trainer alternates two row
 * arrays, or calls update_sync before reusing one. Updates land in call order, as
 * if each were applied at its call. The time the trainer spends waiting for one is
 * stats.update_wait_seconds. Uses n x 8 bytes of the buffer's memory (counted in
 * memory_bytes and memory_budget): where the budget leaves no room for them beside
 * what the plan may hold at its peak, the update is applied in the call instead,
 * as ember_graph_buffer_update does (and stats.updates_async does not count it);
 * EMBER_ENOMEM where n x 8 overflows size_t.
 */
int ember_graph_buffer_update_async(ember_graph_buffer *b, size_t n, const uint64_t *nodes,
				    const float *rows, int mode);

/* Wait until the outstanding asynchronous update (if any) has been applied.
 * EMBER_EINVAL for NULL. */
int ember_graph_buffer_update_sync(ember_graph_buffer *b);

/* Copy the rows of n nodes of the current state into out (n x dim floats), after
 * an outstanding asynchronous update is applied. */
int ember_graph_buffer_gather(ember_graph_buffer *b, size_t n, const uint64_t *nodes,
			      float *out);

/* Write back every dirty resident partition and wait for all writes (they stay
 * resident, clean). */
int ember_graph_buffer_flush(ember_graph_buffer *b);

int ember_graph_buffer_stats_get(ember_graph_buffer *b, ember_graph_buffer_stats *out);

/*
 * Sampling
 * --------
 * Multi-hop neighbourhood sampling over the edges the buffer holds in its current
 * state (needs EMBER_GRAPH_BUFFER_ALL_EDGES). Roots are hop 0. Layer l samples the
 * neighbours of the nodes of hop l only: a node reached again is not sampled again
 * (its sample from an earlier layer is reused), and each node appears once in the
 * output. Neighbours that are new at layer l form hop l + 1.
 */

/* ember_graph_sampler_options.direction: whose edges are a node's neighbours. */
enum {
	EMBER_GRAPH_SAMPLE_IN = 0,   /* sources of edges into the node (default) */
	EMBER_GRAPH_SAMPLE_OUT = 1,  /* destinations of the node's edges */
	EMBER_GRAPH_SAMPLE_BOTH = 2, /* both (a node linked both ways counts twice) */
};

typedef struct ember_graph_sampler_options {
	uint32_t layers;                          /* 1 .. EMBER_GRAPH_MAX_LAYERS */
	uint32_t fanouts[EMBER_GRAPH_MAX_LAYERS]; /* per layer; 0 means all neighbours */
	uint32_t direction;                       /* EMBER_GRAPH_SAMPLE_* */
	uint32_t reserved;
	uint64_t seed;
} ember_graph_sampler_options;

void ember_graph_sampler_options_default(ember_graph_sampler_options *opts);

/*
 * One sample. Local ids index nodes[]. Arrays belong to the sampler and stay valid
 * until its next run or close.
 *   nodes[num_nodes]          unique new ids; roots first (in the order given, less
 *                             repeats), then hop 1, hop 2, ...
 *   hop_offsets[layers + 2]   hop h is nodes[hop_offsets[h] .. hop_offsets[h + 1])
 *   edge_offsets[layers + 1]  layer l's edges are [edge_offsets[l], edge_offsets[l+1])
 *   edge_dst[], edge_src[]    one sampled edge each: edge_dst is a node of hop l
 *                             whose neighbourhood was sampled, edge_src the sampled
 *                             neighbour (for SAMPLE_OUT it is the edge's head)
 */
typedef struct ember_graph_sample {
	size_t num_nodes;
	const uint64_t *nodes;
	const size_t *hop_offsets;
	const size_t *edge_offsets;
	const uint32_t *edge_dst;
	const uint32_t *edge_src;
	uint32_t layers;
	uint32_t reserved;
} ember_graph_sample;

int ember_graph_sampler_open(ember_graph_buffer *b, const ember_graph_sampler_options *opts,
			     ember_graph_sampler **s);
void ember_graph_sampler_close(ember_graph_sampler *s);

/* Sample around n roots (new ids in the current state; EMBER_EINVAL otherwise, or
 * without EMBER_GRAPH_BUFFER_ALL_EDGES). */
int ember_graph_sampler_run(ember_graph_sampler *s, size_t n, const uint64_t *roots,
			    ember_graph_sample *out);

/*
 * Gather the data of the last sample's nodes into staging (cap_rows rows of dim
 * floats, e.g. pinned memory the caller then copies to the GPU), in local id order.
 * EMBER_ERANGE if cap_rows < num_nodes.
 */
int ember_graph_sampler_gather(ember_graph_sampler *s, float *staging, size_t cap_rows);

/* ==== end of import, buffer, examples, sampling ================================ */

/* ==== samples to a device (ember_gpu) ========================================== */

/*
 * Sending a sample to a device
 * ----------------------------
 * A sampled batch goes to the GPU (or ember_gpu's host backend) through ember_gpu's
 * staging pipeline (include/ember_gpu.h, docs/gpu.md; docs/graph.md section
 * "Samples to a device"): the sample's node rows are gathered from the buffer's
 * partitions straight into pinned staging buffers, together with its ids, hop
 * offsets and edges, and each filled staging buffer is copied host -> device on
 * the caller's stream; an event recorded after the last copy is what the consumer
 * waits on (ember_gpu_stream_wait_event), never the host.
 *
 * The device image of one sample is one block of device memory the CALLER owns
 * (ember_gpu_mem_alloc on the same context), at least
 * ember_graph_sample_device_bytes() long; the library never allocates or frees it.
 * Sections, each starting at a multiple of 64 bytes from the block's start:
 *
 *   section        elements                       type
 *   rows           num_nodes x dim                float (local id order)
 *   nodes          num_nodes                      uint64_t new ids
 *   hop_offsets    layers + 2                     uint64_t
 *   edge_offsets   layers + 1                     uint64_t
 *   edge_dst       num_edges                      uint32_t local ids
 *   edge_src       num_edges                      uint32_t local ids
 *
 * Objects and threads
 * -------------------
 *   ember_graph_device  a ring of pinned staging buffers (an ember_gpu_staging it
 *                       owns) on one ember_gpu context. Any number of threads may
 *                       send through one at once, each on its own stream or on a
 *                       shared one. A send holds at most one staging buffer at a
 *                       time and releases it against the copy's stream, so a ring
 *                       of any size serves any number of threads without deadlock;
 *                       with fewer buffers than copies in flight, sends wait (on
 *                       the host, inside the call) for an older copy to finish.
 *                       Close it after every send returned, before ember_gpu_close.
 * A send reads the buffer's current state like ember_graph_sampler_gather: it may
 * run while samplers and other sends run on the buffer, never during
 * ember_graph_buffer_next_state() or _update(). ember_graph_device_update is a buffer
 * update: the trainer thread's, never while samplers or sends run on the buffer.
 */
typedef struct ember_gpu ember_gpu;               /* include/ember_gpu.h */
typedef struct ember_gpu_stream ember_gpu_stream;
typedef struct ember_gpu_event ember_gpu_event;
typedef struct ember_graph_device ember_graph_device;

typedef struct ember_graph_device_options {
	/* Bytes per pinned staging buffer, >= 1; a sample larger than one buffer is
	 * sent in several copies. Default 4 MiB. */
	size_t staging_bytes;
	/* Staging buffers in the ring, 1 .. 1024. Default 4. */
	uint32_t staging_buffers;
	/* Must be 0. */
	uint32_t reserved;
} ember_graph_device_options;

void ember_graph_device_options_default(ember_graph_device_options *opts);

/*
 * Open a sender on gpu (opts may be NULL: defaults). EMBER_EINVAL for NULL gpu or
 * out, or options out of range; EMBER_ENOMEM. On failure *out is NULL.
 */
int ember_graph_device_open(ember_gpu *gpu, const ember_graph_device_options *opts,
			    ember_graph_device **out);

/*
 * Wait for the copies still reading its staging buffers, then free the sender.
 * Must not race with a send or ember_graph_device_update on it. Accepts NULL.
 */
int ember_graph_device_close(ember_graph_device *d);

/* Where one sample landed: device pointers into the caller's block (sections as
 * in the table above; a pointer of an empty section is still inside the block). */
typedef struct ember_graph_device_sample {
	float *rows;
	uint64_t *nodes;
	uint64_t *hop_offsets;
	uint64_t *edge_offsets;
	uint32_t *edge_dst;
	uint32_t *edge_src;
	uint64_t num_nodes;
	uint64_t num_edges;
	uint32_t layers;
	uint32_t dim;
	size_t bytes;          /* bytes of the block the image uses */
} ember_graph_device_sample;

/*
 * *bytes = the size of sample's device image with rows of dim floats. EMBER_EINVAL
 * for NULL pointers, dim 0 or above EMBER_GRAPH_MAX_DIM, layers 0 or above
 * EMBER_GRAPH_MAX_LAYERS; EMBER_ERANGE when the size does not fit size_t.
 */
int ember_graph_sample_device_bytes(const ember_graph_sample *sample, uint32_t dim,
				    size_t *bytes);

/*
 * Send `sample` (as ember_graph_sampler_run returned it, or any sample of the same
 * shape whose nodes are in b's current state) to the device block dst (dst_bytes
 * long), with its rows taken from b's current state. The copies go on `stream`
 * (typically an H2D stream: ember_gpu_stream_get(gpu, EMBER_GPU_STREAM_H2D, i) or a
 * stream of the caller's) and `ready` is recorded on it after the last one; *out
 * (may be NULL) receives the device pointers. The call returns once the copies are
 * enqueued: the consumer makes its stream wait on `ready` before reading the block.
 * The sample's arrays may be reused as soon as the call returns (they were copied
 * into staging memory).
 *
 * Reusing a block: the copies into dst are ordered only after the work already on
 * `stream`. If a consumer may still read dst from an earlier send, make `stream`
 * wait on the consumer's event first (ember_gpu_stream_wait_event), or keep two
 * blocks and alternate.
 *
 * Returns 0; EMBER_EINVAL for NULL pointers, a malformed sample (offsets not
 * ascending from 0 to num_nodes / the edge count, a local id >= num_nodes), a node
 * id past the graph, or a stream or event of another context than d's;
 * EMBER_ERANGE if dst_bytes is smaller than the image
 * (ember_graph_sample_device_bytes); EMBER_ESTATE if b has no current state or a
 * node is not resident in it (the buffer moved on since the sample was taken);
 * EMBER_EIO from the device. All of these but two are found before anything is
 * enqueued; an event of another context is found at the last copy and a device
 * error at any copy, so earlier copies may have been enqueued. dst is not checked:
 * it must be device memory of d's context. After an error the block's contents are
 * unspecified and `ready` may not have been recorded; the sender stays usable
 * (every staging buffer it took is released).
 */
int ember_graph_device_send(ember_graph_device *d, ember_graph_buffer *b,
			    const ember_graph_sample *sample, ember_gpu_stream *stream,
			    void *dst, size_t dst_bytes, ember_gpu_event *ready,
			    ember_graph_device_sample *out);

/*
 * The way back: n rows of dim floats (n x dim, packed) in device memory `rows`
 * are copied device -> host through the sender's staging buffers on `stream`
 * (typically a D2H stream) and written into the nodes given (new ids in b's current
 * state) with ember_graph_buffer_update(mode): scatter-add or overwrite, marking
 * their partitions dirty. Rows are applied in order, so SET keeps the last of
 * repeated nodes and ADD sums them, as for ember_graph_buffer_update. The copies
 * wait only for what is already on `stream`: if a kernel on another stream wrote
 * `rows`, make `stream` wait on its event first. Blocking: returns once every row
 * has been applied. Copies are as large as the staging buffers allow (whole rows);
 * EMBER_ERANGE if one row (dim x 4 bytes) is larger than a staging buffer.
 * EMBER_EINVAL, with nothing written, for NULL pointers, a bad mode, or a node that
 * is not in the current state (as ember_graph_buffer_update); EMBER_ESTATE without
 * a current state. A device error (EMBER_EIO) after some rows were applied leaves
 * those rows applied.
 */
int ember_graph_device_update(ember_graph_device *d, ember_graph_buffer *b,
			      ember_gpu_stream *stream, size_t n, const uint64_t *nodes,
			      const float *rows, int mode);

/* ==== end of samples to a device =============================================== */

#ifdef __cplusplus
}
#endif

#endif /* EMBER_GRAPH_H */
