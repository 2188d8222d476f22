/*
 * graph_int.h - what the partition buffer's own files share (not public).
 *
 * The stored layout (docs/graph.md has the tables):
 *   key    "eg" | name length (1 byte) | name | kind (1 byte) | a | b | chunk
 *          (a, b, chunk: big-endian u32, so one graph's keys sort by kind, a, b)
 *   kinds  'm' metadata (a = b = chunk = 0), 'c' bucket counts (a = 0, chunk) and
 *          training counts per partition (a = 1),
 *          'n' node data (a = partition, chunk), 'e' edge bucket (a = src partition,
 *          b = dst partition, chunk), 't' training nodes (a = partition, chunk)
 *   values node data: rows of dim little-endian float32, rows_per_chunk rows per
 *          chunk; edge buckets: 12-byte records (src local u32, rel u32, dst local
 *          u32), edges_per_chunk per chunk, sorted by (src, dst, rel); bucket counts:
 *          p*p u64 (row-major), counts_per_chunk per chunk; training nodes: u32
 *          local ids, ascending.
 *
 * The permutation of node ids is a keyed Feistel network over the smallest
 * 2^(2h) >= num_nodes, cycle-walked back into [0, num_nodes): a bijection that needs
 * only its key (the metadata's perm_seed), so import and readers need no table.
 */
#ifndef EMBER_GRAPH_INT_H
#define EMBER_GRAPH_INT_H

#include <ember_graph.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define GRAPH_META_MAGIC 0x485041524742454dull /* "MEBGRAPH" little-endian */
#define GRAPH_META_VERSION 1u
#define GRAPH_KEY_MAX (3 + EMBER_GRAPH_MAX_NAME + 1 + 12)
#define GRAPH_EDGE_BYTES 12u /* stored edge record */

enum { GK_META = 'm', GK_COUNTS = 'c', GK_NODES = 'n', GK_EDGES = 'e', GK_TRAIN = 't' };

/* The metadata value: little-endian, 128 bytes (docs/graph.md). */
struct graph_meta {
	uint64_t magic;
	uint32_t version;
	uint32_t flags;
	uint64_t num_nodes;
	uint64_t num_edges;
	uint64_t partition_size;
	uint64_t train_nodes;
	uint64_t perm_seed;
	uint32_t partitions;
	uint32_t dim;
	uint32_t relations;
	uint32_t chunk_bytes;
	uint32_t rows_per_chunk;
	uint32_t edges_per_chunk;
	uint32_t counts_per_chunk;
	uint32_t train_per_chunk;
	uint8_t reserved[32];
	uint64_t checksum; /* XXH3-64 of the 120 bytes before it */
};
_Static_assert(sizeof(struct graph_meta) == 128, "graph_meta is 128 bytes");

struct graph_perm {
	uint64_t n;      /* domain [0, n) */
	uint32_t half;   /* bits per Feistel half */
	uint64_t mask;
	uint64_t keys[4];
};

struct ember_graph {
	ember_db *db;
	char name[EMBER_GRAPH_MAX_NAME + 1];
	size_t name_len;
	struct graph_meta meta;
	struct graph_perm perm;
	uint64_t *counts;        /* p*p edges per bucket */
	uint64_t *train_counts;  /* per partition: training nodes stored (0s if none) */
	atomic_int buffers;      /* open buffers (relaxed: a use count checked at close) */
};

/* graph.c */
size_t graph_key(uint8_t *out, const char *name, size_t name_len, int kind, uint32_t a,
		 uint32_t b, uint32_t chunk);
void graph_perm_init(struct graph_perm *pm, uint64_t n, uint64_t seed);
uint64_t graph_perm_fwd(const struct graph_perm *pm, uint64_t x);
uint64_t graph_perm_inv(const struct graph_perm *pm, uint64_t y);
void graph_meta_seal(struct graph_meta *m);
int graph_meta_check(const struct graph_meta *m);
/* Rows of partition `part` (the last one may be short, some may be empty). */
uint64_t graph_part_rows(const struct graph_meta *m, uint32_t part);
uint32_t graph_chunks(uint64_t items, uint32_t per_chunk);
/* The uniform initialiser's value of (seed, node, d), in [-scale, scale]. */
float graph_init_value(uint64_t seed, uint64_t node, uint32_t d, float scale);

/* Monotonic seconds. */
double graph_now(void);
/* Read `nchunks` chunks of one value kind into dst (a contiguous buffer of `bytes`),
 * chunk i at dst + i * chunk_cap, every chunk checked to be exactly its expected
 * length (the last is `bytes - (nchunks-1) * chunk_cap`). Many reads in flight
 * (one ember_get_batch). */
int graph_read_chunks(ember_graph *g, ember_session *s, int kind, uint32_t a, uint32_t b,
		      void *dst, uint64_t bytes, uint32_t chunk_cap);


/* ---- the buffer (buffer.c; read by sampler.c) --------------------------------------- */

#define GRAPH_NONE UINT32_MAX
/* A training example, gathered from its bucket when the state's examples are built
 * (ahead, by the updater), so next_batch reads them in order: local ids of both
 * ends, the relation, and t, the index of its bucket in the state's base table. */
struct graph_example {
	uint32_t src, dst, rel, t;
};

/* First node ids of a bucket's two partitions (i * ps, j * ps). */
struct graph_ex_base {
	uint64_t src, dst;
};
/* Reader threads: a second one starts the next loads while the first one's batch is
 * still in flight (and overlaps one batch's copies with the other's I/O). */
#define GRAPH_READERS 2

enum { SLOT_FREE = 0, SLOT_LOADING, SLOT_RESIDENT };
enum { BK_FREE = 0, BK_LOADING, BK_READY };

/* One partition slot. Fields other than data are guarded by the buffer's lock. */
struct slot {
	float *data;        /* partition_size x dim floats */
	uint32_t part;      /* the partition the data holds or will hold; GRAPH_NONE */
	uint32_t write_part;/* while writing: the partition being written (the slot may
			       already be taken for the next partition meanwhile) */
	uint8_t state;      /* SLOT_* */
	bool valid;         /* data holds `part` (a FREE slot may be reclaimed) */
	bool dirty;         /* changed since read or last written */
	bool writing;       /* queued for or in write-back: data must not change */
	bool write_queued;  /* the writer has not taken it yet */
	bool load_queued;   /* the reader has not taken it yet */
	bool need_read;     /* LOADING: read from the store (else a reclaim) */
	uint64_t write_after; /* queued for writing: the writer takes it once upd_applied
				 reaches this (the update job outstanding at the
				 eviction, which may still add to its rows) */
};

/* One edge bucket held in memory. Guarded like slots; the arrays are written by the
 * reader before it marks the entry READY, then only read until it is freed. */
struct bucket_ent {
	uint32_t bucket;     /* i * p + j; GRAPH_NONE when free */
	uint8_t state;       /* BK_* */
	bool load_queued;
	uint64_t count;
	uint32_t *edges;     /* count x (src local, rel, dst local), sorted by src */
	uint32_t *csr_off;   /* rows(i) + 1: out-edges of src local s are edges
				[csr_off[s], csr_off[s+1]) */
	uint32_t *csc_off;   /* rows(j) + 1 */
	uint32_t *csc_src;   /* count: src local ids grouped by dst local id */
	uint64_t bytes;      /* memory held */
};

/* One bucket of a state's examples (update.c). */
struct graph_prep_item {
	uint64_t entry; /* in ents */
	uint64_t count;
};

/* The outstanding asynchronous update (update.c). */
struct graph_upd_job {
	float *const *rowp;  /* n resolved row addresses (the buffer's upd_rowp) */
	const float *rows;   /* the caller's n x dim floats */
	size_t n;
	int mode;         /* EMBER_GRAPH_UPDATE_* */
};

struct ember_graph_buffer {
	ember_graph *g;
	ember_graph_buffer_options o;
	uint32_t p, c, nslots, dim;
	uint64_t ps;          /* partition size (rows) */
	uint64_t ps_magic;    /* 2^64 / ps rounded up: node / ps without a divide
				 (graph_buf_part), exact for node ids < 2^32 */
	uint64_t slot_bytes;
	uint64_t budget;      /* 0: none */
	bool all_edges, read_only;

	pthread_mutex_t mu;
	pthread_cond_t cv_reader, cv_writer, cv_done, cv_update;
	pthread_t readers[GRAPH_READERS], writer, updater;
	bool updater_started;
	uint32_t nreaders;    /* reader threads started */
	bool threads_started;
	bool stop;
	int error;            /* first background error (sticky) */
	int ready;            /* threads that have opened their session */

	struct slot *slots;
	uint32_t *part_slot;  /* p: slot holding (or loading) the partition, GRAPH_NONE */
	struct bucket_ent *ents;
	uint32_t nents;       /* (max(horizon, 1) + 1) x c^2: the states k .. k+ahead */
	uint64_t plan_need;   /* memory set_plan's budget check counted for the plan,
				  all but update_async's row pointers (trainer only) */
	uint32_t bucket_ahead; /* states after the current one whose buckets are read
				  ahead: the horizon when the plan's budget check
				  allows it (training mode), else 1 (set_plan) */
	uint32_t *bucket_ent; /* p*p: entry of a held bucket, GRAPH_NONE */

	/* the plan */
	bool have_plan;
	uint32_t nstates;
	uint32_t *states;       /* nstates x c */
	uint32_t *bucket_state; /* p x p */
	uint32_t *first_state;  /* p: first state holding the partition (NC), or NONE */
	int64_t cur;            /* index of the current state; -1 before the first */

	/* the current state (trainer thread; read by samplers between swaps) */
	bool have_state;
	uint32_t *cur_parts;    /* c */
	int32_t *part_pos;      /* p: position in cur_parts, or -1 */
	float **cur_data;       /* c: slot data of cur_parts[i] */
	struct bucket_ent **cur_bk; /* c x c: bucket (cur_parts[i], cur_parts[j]) or NULL */
	struct graph_example *examples; /* this state's, shuffled */
	struct graph_ex_base *ex_base;  /* c * c: examples[].t -> its bucket's bases */
	uint64_t nexamples, ex_pos, ex_cap;
	/* the next state's examples, built ahead by the updater thread (update.c,
	 * "Examples ahead"; under mu but ex_next's and ex_base_next's contents and
	 * prep_list) */
	struct graph_example *ex_next; /* ex_cap */
	struct graph_ex_base *ex_base_next; /* c * c */
	uint64_t nex_next;
	int64_t prep_want;      /* state the updater is asked to build, -1 */
	int64_t prep_done;      /* state whose examples ex_next holds, -1 */
	bool prep_busy;         /* the updater is building prep_want's */
	struct graph_prep_item *prep_list; /* c * c: the buckets being built */
	uint64_t ex_rng[4];     /* the example shuffles' generator (its builder's) */
	uint32_t *train_all;    /* all training nodes, local ids grouped by partition */
	uint64_t *train_off;    /* p + 1 */
	uint64_t *nodes_ex;     /* this state's training nodes (new ids), shuffled */
	uint64_t nnodes_ex, nodes_pos, nodes_cap;
	uint64_t rng[4];

	/* the asynchronous update (update.c; under mu) */
	struct graph_upd_job upd;
	bool upd_busy;
	uint64_t upd_set;        /* jobs handed to the updater so far */
	uint64_t upd_applied;    /* jobs it has applied (= upd_set when not busy) */
	float **upd_rowp;        /* upd_cap addresses, the trainer's while not busy */
	size_t upd_cap;
	atomic_uint upd_pending; /* = upd_busy, for lock-free readers (update.c, 5) */

	atomic_int samplers;     /* open samplers (relaxed: a use count checked at close) */

	ember_graph_buffer_stats st;
};

/* buffer.c: account d bytes of buffer memory (under mu); shuffle a[0..n). */
void graph_mem_add(ember_graph_buffer *b, int64_t d);
void graph_shuffle64(uint64_t *rng, uint64_t *a, uint64_t n);

/* update.c: the updater thread. start after the other threads; join after
 * buffer_stop set stop (it finishes its job first); free its memory at the end.
 * drain waits until the outstanding asynchronous update is applied (_locked: mu
 * held). */
int graph_upd_start(ember_graph_buffer *b);
void graph_upd_join(ember_graph_buffer *b);
void graph_upd_free(ember_graph_buffer *b);
void graph_upd_drain(ember_graph_buffer *b);
void graph_upd_drain_locked(ember_graph_buffer *b);
/* update.c, under mu, trainer: make b->examples state k's (taken from the updater
 * or built here), then ask the updater for state k+1's. */
void graph_examples_enter(ember_graph_buffer *b, int64_t k);
void graph_examples_ahead(ember_graph_buffer *b, int64_t k);

/* The partition of node v: v / b->ps, by a multiply when v < 2^32 (Lemire's
 * fastdiv: exact for 32-bit numerators and divisors), else by a divide. */
static inline uint64_t graph_buf_part(const ember_graph_buffer *b, uint64_t v)
{
	if ((v >> 32) || !b->ps_magic)
		return v / b->ps;
	return (uint64_t)(((unsigned __int128)b->ps_magic * v) >> 64);
}

#endif
