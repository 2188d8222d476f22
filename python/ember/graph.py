"""ember.graph: graphs whose node data is larger than memory, trained through
Ember's partition buffer (include/ember_graph.h, docs/graph.md).

An edge list is imported into a store as ``p`` node partitions and ``p x p`` edge
buckets (node ids are permuted: the graph's "new" ids). A buffer keeps ``c`` of the
partitions in memory and moves through the states of an ordering (BETA, COMET,
sequential); each state trains the edges of the buckets assigned to it, so every
edge is trained exactly once per epoch. Rows updated in a state are written back
to the store when their partition leaves the buffer.

    g = ember.graph.import_edges(store, "social", (src, dst), num_partitions=16, dim=64)
    for state in g.epoch(buffer_partitions=4, ordering="beta", batch_size=4096):
        for edges in state:                    # int64 (n, 2), new ids
            rows = state.embeddings(edges[:, 0])  # float32 (n, dim)
            ...
            state.update(edges[:, 0], grad_rows)  # added to the stored rows

Arrays come back as numpy arrays, or as torch tensors when ``as_torch`` is True
(default None: torch tensors when torch is already imported). This module never
imports torch itself unless asked to.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

import numpy as np

from . import _ember
from .errors import StateError

__all__ = ["import_edges", "Graph", "Ordering", "ordering", "Buffer", "State", "Sample",
           "beta_swaps", "lower_bound"]

_KINDS = {"beta": _ember.GRAPH_ORDERING_BETA, "comet": _ember.GRAPH_ORDERING_COMET,
          "sequential": _ember.GRAPH_ORDERING_SEQUENTIAL}
_INITS = {"uniform": _ember.GRAPH_INIT_UNIFORM, "zero": _ember.GRAPH_INIT_ZERO}
_DIRECTIONS = {"in": _ember.GRAPH_SAMPLE_IN, "out": _ember.GRAPH_SAMPLE_OUT,
               "both": _ember.GRAPH_SAMPLE_BOTH}
_MODES = {"add": _ember.GRAPH_UPDATE_ADD, "set": _ember.GRAPH_UPDATE_SET}

Array = Any  # numpy.ndarray or torch.Tensor


def _db(store: Any) -> Any:
    """The _ember.Db under an ember.Store (or the Db itself)."""
    return getattr(store, "_db", store)


def _out(a: np.ndarray, as_torch: Optional[bool]) -> Array:
    if as_torch is None:
        as_torch = "torch" in sys.modules
    if not as_torch:
        return a
    import torch  # only when asked for, or already imported
    return torch.from_numpy(a)


def _i64(buf: bytearray, *shape: int) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.int64).reshape(*shape)


def _as_ids(x: Any, what: str) -> np.ndarray:
    """A 1-D int64 numpy array from ids (numpy, torch CPU tensors, sequences)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{what}: must be 1-D, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise TypeError(f"{what}: ids must be integers, got dtype {a.dtype}")
    if a.size and a.min() < 0:
        raise ValueError(f"{what}[{int(np.argmin(a))}] = {int(a.min())} is negative")
    return np.ascontiguousarray(a, dtype=np.int64)


def _choice(table: dict, value: str, what: str) -> int:
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(f"{what} must be one of {sorted(table)}, got {value!r}") from None


# ---- import -------------------------------------------------------------------------


def import_edges(store: Any, name: str,
                 edges: Union[str, os.PathLike, Tuple[Array, Array], Array],
                 num_partitions: int, *, dim: int = 16, num_nodes: int = 0,
                 rel: Optional[Array] = None, format: str = "text", seed: int = 0,
                 init: str = "uniform", init_scale: float = 0.1,
                 node_data: Optional[Array] = None, train_nodes: Optional[Array] = None,
                 tmp_dir: Optional[str] = None, memory_budget: int = 0,
                 chunk_bytes: int = 0) -> "Graph":
    """Import an edge list into `store` as graph `name` and open it.

    edges: a path to an edge-list file (``format`` "text": lines "src dst" or
    "src rel dst"; "binary": little-endian uint64 records of 2 or 3 fields, with
    3 when ``rel`` is True), or ``(src, dst)`` integer arrays of equal length, or an
    (n, 2) integer array; arrays are written to a temporary binary edge file under
    ``tmp_dir``, which ember_graph_import reads (``rel``: relation ids per edge).
    num_nodes: 0 means 1 + the largest id. node_data: float32 (num_nodes, dim) rows in
    original id order (else ``init``: "uniform" in [-init_scale, init_scale], or
    "zero"). train_nodes: original ids of the training nodes (node classification).
    Returns the opened Graph. Raises ValueError/TypeError on bad arguments and the
    ember.Error subclass of the C code otherwise (Exists when the name is taken,
    Corrupt for a malformed file, with its line in the message).
    """
    if not isinstance(name, str) or not name:
        raise ValueError("name must be a non-empty str")
    if not isinstance(num_partitions, int) or not 1 <= num_partitions <= _ember.GRAPH_MAX_PARTITIONS:
        raise ValueError(f"num_partitions must be in [1, {_ember.GRAPH_MAX_PARTITIONS}]")
    if not isinstance(dim, int) or not 1 <= dim <= _ember.GRAPH_MAX_DIM:
        raise ValueError(f"dim must be in [1, {_ember.GRAPH_MAX_DIM}]")
    fmt = _choice({"text": _ember.GRAPH_TEXT, "binary": _ember.GRAPH_BINARY}, format, "format")
    init_code = _choice(_INITS, init, "init")
    work = tempfile.mkdtemp(prefix="ember-graph-", dir=tmp_dir)
    try:
        fields = 3 if rel is True else 2
        if isinstance(edges, (str, os.PathLike)):
            path = os.fspath(edges)
            if rel is not None and rel is not True:
                raise ValueError("rel arrays go with src/dst arrays, not with a file")
        else:
            path, fields, nmax = _write_edges(edges, rel, work)
            fmt = _ember.GRAPH_BINARY
            if num_nodes and nmax >= num_nodes:
                raise ValueError(f"edge end {nmax} is not below num_nodes = {num_nodes}")
        node_path = None
        if node_data is not None:
            rows = np.ascontiguousarray(np.asarray(node_data), dtype="<f4")
            if rows.ndim != 2 or rows.shape[1] != dim:
                raise ValueError(f"node_data: must have shape (num_nodes, {dim}), got {rows.shape}")
            if num_nodes and rows.shape[0] != num_nodes:
                raise ValueError(f"node_data: has {rows.shape[0]} rows, num_nodes is {num_nodes}")
            num_nodes = num_nodes or rows.shape[0]
            node_path = os.path.join(work, "nodes.f32")
            rows.tofile(node_path)
            init_code = _ember.GRAPH_INIT_FILE
        train_path = None
        if train_nodes is not None:
            t = _as_ids(train_nodes, "train_nodes")
            if t.size == 0:
                raise ValueError("train_nodes: empty (leave it None: every node trains)")
            train_path = os.path.join(work, "train.txt")
            np.savetxt(train_path, t, fmt="%d")
        _ember.graph_import(_db(store), name, path, num_partitions, dim, format=fmt,
                            binary_fields=fields, num_nodes=num_nodes, seed=seed,
                            init=init_code, init_scale=float(init_scale),
                            node_data_path=node_path, train_nodes_path=train_path,
                            tmp_dir=work, memory_budget=memory_budget,
                            chunk_bytes=chunk_bytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Graph(store, name)


def _write_edges(edges: Any, rel: Any, work: str) -> Tuple[str, int, int]:
    """Write arrays as the binary edge format; returns (path, fields, largest id)."""
    if isinstance(edges, tuple) or isinstance(edges, list):
        if len(edges) != 2:
            raise ValueError("edges: expected (src, dst)")
        src, dst = _as_ids(edges[0], "src"), _as_ids(edges[1], "dst")
    else:
        a = np.asarray(edges.detach().cpu().numpy() if hasattr(edges, "detach") else edges)
        if a.ndim != 2 or a.shape[1] != 2:
            raise ValueError(f"edges: expected shape (n, 2), got {a.shape}")
        src, dst = _as_ids(a[:, 0], "src"), _as_ids(a[:, 1], "dst")
    if src.shape != dst.shape:
        raise ValueError(f"src and dst differ in length: {src.size} and {dst.size}")
    cols = [src, dst]
    if rel is not None:
        r = _as_ids(rel, "rel")
        if r.shape != src.shape:
            raise ValueError("rel must have one entry per edge")
        cols = [src, r, dst]
    rec = np.stack(cols, axis=1).astype("<u8")
    path = os.path.join(work, "edges.bin")
    rec.tofile(path)
    nmax = int(max(src.max(), dst.max())) if src.size else -1
    return path, len(cols), nmax


# ---- orderings ----------------------------------------------------------------------


class Ordering:
    """One epoch's partition ordering: which c of p partitions are resident in each
    state, and which state trains each edge bucket. Immutable; close() frees it."""

    def __init__(self, kind: str, p: int, c: int, *, seed: int = 0, epoch: int = 0,
                 comet_group: int = 0, train: Optional[Sequence[int]] = None) -> None:
        self.kind = kind
        self._o = _ember.Ordering(p, c, _choice(_KINDS, kind, "kind"), seed=seed,
                                  epoch=epoch, comet_group=comet_group, train=train)
        info = self._o.info()
        self.partitions: int = info["partitions"]
        self.capacity: int = info["capacity"]
        self.num_states: int = info["states"]
        self.num_swaps: int = info["swaps"]
        self.lower_bound: int = info["lower_bound"]
        self.comet_group: int = info["comet_group"]

    def states(self) -> np.ndarray:
        """int64 (states, c): each state's partitions in slot order."""
        return _i64(self._o.states(), self.num_states, self.capacity)

    def swaps(self) -> np.ndarray:
        """int64 (states - 1, 3): (slot, evicted, loaded) into states 1, 2, ..."""
        return _i64(self._o.swaps(), self.num_states - 1, 3)

    def bucket_states(self) -> np.ndarray:
        """int64 (p, p): the state that trains bucket (i, j), or -1 for none."""
        return _i64(self._o.bucket_states(), self.partitions, self.partitions)

    def close(self) -> None:
        self._o.close()

    def __enter__(self) -> "Ordering":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def ordering(kind: str, p: int, c: int, **kw: Any) -> Ordering:
    """An Ordering of `kind` ("beta", "comet", "sequential") for p partitions and a
    buffer of c; keywords: seed, epoch, comet_group, train (see Ordering)."""
    return Ordering(kind, p, c, **kw)


def beta_swaps(p: int, c: int) -> int:
    """BETA's swap count for p partitions and a buffer of c."""
    return _ember.ordering_beta_swaps(p, c)


def lower_bound(p: int, c: int) -> int:
    """The fewest swaps any ordering that makes every pair co-resident needs."""
    return _ember.ordering_lower_bound(p, c)


# ---- graphs -------------------------------------------------------------------------


class Graph:
    """An imported graph, opened from a store. Node ids in every call are the
    graph's new (permuted) ids unless a method says otherwise; ``to_new`` and
    ``to_original`` map between the two."""

    def __init__(self, store: Any, name: str) -> None:
        self.store = store  # keeps the store alive
        self.name = name
        self._g = _ember.Graph(_db(store), name)
        info = self._g.info()
        self.num_nodes: int = info["num_nodes"]
        self.num_edges: int = info["num_edges"]
        self.num_partitions: int = info["partitions"]
        self.partition_size: int = info["partition_size"]
        self.dim: int = info["dim"]
        self.relations: int = info["relations"]
        self.train_nodes: int = info["train_nodes"]

    def to_new(self, ids: Array) -> np.ndarray:
        """Original ids -> new ids (int64)."""
        return np.frombuffer(self._g.map(_as_ids(ids, "ids"), True), np.int64)

    def to_original(self, ids: Array) -> np.ndarray:
        """New ids -> original ids (int64)."""
        return np.frombuffer(self._g.map(_as_ids(ids, "ids"), False), np.int64)

    def partition_nodes(self, p: int) -> np.ndarray:
        """The new ids of partition p (int64)."""
        if not 0 <= p < self.num_partitions:
            raise ValueError(f"partition {p} is outside [0, {self.num_partitions})")
        lo = min(p * self.partition_size, self.num_nodes)
        return np.arange(lo, min(lo + self.partition_size, self.num_nodes), dtype=np.int64)

    def bucket(self, i: int, j: int) -> np.ndarray:
        """int64 (n, 3): the (src, dst, rel) edges from partition i to j, new ids."""
        return _i64(self._g.read_bucket(i, j), -1, 3)

    def edges(self) -> np.ndarray:
        """int64 (num_edges, 3): every edge (src, dst, rel) in new ids, bucket by bucket."""
        p = self.num_partitions
        parts = [self.bucket(i, j) for i in range(p) for j in range(p)]
        return np.concatenate(parts) if parts else np.empty((0, 3), np.int64)

    def read_nodes(self, first: int = 0, count: Optional[int] = None) -> np.ndarray:
        """float32 (count, dim): stored rows of new ids [first, first + count). Rows a
        buffer holds dirty are seen once written back (close or flush)."""
        if count is None:
            count = self.num_nodes - first
        if first < 0 or count < 0:
            raise ValueError("first and count must be non-negative")
        return np.frombuffer(self._g.read_nodes(first, count), np.float32).reshape(count, self.dim)

    def buffer(self, buffer_partitions: int, *, prefetch_slots: Optional[int] = None,
               all_edges: bool = False, read_only: bool = False, memory_budget: int = 0,
               seed: int = 0) -> "Buffer":
        """Open a partition buffer of `buffer_partitions` (c) resident partitions."""
        return Buffer(self, buffer_partitions, prefetch_slots=prefetch_slots,
                      all_edges=all_edges, read_only=read_only,
                      memory_budget=memory_budget, seed=seed)

    def epoch(self, buffer_partitions: int, *, ordering: str = "beta", batch_size: int = 4096,
              seed: int = 0, epoch: int = 0, comet_group: int = 0, all_edges: bool = False,
              prefetch_slots: Optional[int] = None, memory_budget: int = 0,
              as_torch: Optional[bool] = None) -> Iterator["State"]:
        """One epoch through a buffer opened for it and closed after it (which writes
        every update back): yields each State, whose iteration yields its edges in
        batches. For several epochs, keep one buffer: ``Graph.buffer(c).epoch(...)``."""
        buf = self.buffer(buffer_partitions, prefetch_slots=prefetch_slots,
                          all_edges=all_edges, memory_budget=memory_budget, seed=seed)
        try:
            yield from buf.epoch(ordering=ordering, batch_size=batch_size, seed=seed,
                                 epoch=epoch, comet_group=comet_group, as_torch=as_torch)
        finally:
            buf.close()

    @property
    def closed(self) -> bool:
        return self._g.closed

    def close(self) -> None:
        """Close the graph (BusyError while a buffer on it is open)."""
        self._g.close()

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- the buffer ---------------------------------------------------------------------


class Buffer:
    """c partitions of a graph in memory, driven through epochs by orderings. One
    thread trains through it at a time (calls from other threads wait)."""

    def __init__(self, graph: Graph, capacity: int, *, prefetch_slots: Optional[int] = None,
                 all_edges: bool = False, read_only: bool = False, memory_budget: int = 0,
                 seed: int = 0) -> None:
        flags = (_ember.GRAPH_BUFFER_ALL_EDGES if all_edges else 0) | \
                (_ember.GRAPH_BUFFER_READ_ONLY if read_only else 0)
        self.graph = graph
        self.capacity = capacity
        self.all_edges = all_edges
        self._b = _ember.Buffer(graph._g, capacity, prefetch_slots=prefetch_slots,
                                flags=flags, memory_budget=memory_budget, seed=seed)
        self._gen = 0  # bumped at each next_state: a State is valid while it matches
        self._samplers: dict = {}

    def set_ordering(self, ordering: Ordering) -> None:
        """The next epoch's plan from an Ordering of (p, c) matching the buffer."""
        self._b.set_ordering(ordering._o)

    def set_plan(self, states: Array, bucket_state: Array) -> None:
        """The next epoch's plan: states int64 (S, c), bucket_state int64 (p, p) or
        (p*p,) with -1 for a bucket no state trains."""
        s = np.ascontiguousarray(np.asarray(states), dtype=np.int64)
        b = np.ascontiguousarray(np.asarray(bucket_state), dtype=np.int64).reshape(-1)
        self._b.set_plan(s, b)

    def next_state(self, batch_size: int = 4096, as_torch: Optional[bool] = None) -> Optional["State"]:
        """Move to the plan's next state (waiting for its partitions); None at the end."""
        r = self._b.next_state()
        self._gen += 1
        if r is None:
            return None
        index, parts, edges, nodes = r
        return State(self, self._gen, index, np.frombuffer(parts, np.int64), edges, nodes,
                     batch_size, as_torch)

    def epoch(self, ordering: Union[str, Ordering] = "beta", *, batch_size: int = 4096,
              seed: int = 0, epoch: int = 0, comet_group: int = 0,
              as_torch: Optional[bool] = None) -> Iterator["State"]:
        """Set an ordering (a kind, built for this epoch, or an Ordering) and yield
        each State of the epoch."""
        if isinstance(ordering, Ordering):
            self.set_ordering(ordering)
        else:
            with Ordering(ordering, self.graph.num_partitions, self.capacity, seed=seed,
                          epoch=epoch, comet_group=comet_group) as o:
                self.set_ordering(o)
        while True:
            state = self.next_state(batch_size, as_torch)
            if state is None:
                return
            yield state

    def sampler(self, fanouts: Sequence[int], direction: str = "in", seed: int = 0) -> "_ember.Sampler":
        """The buffer's sampler for (fanouts, direction, seed), opened once."""
        key = (tuple(int(f) for f in fanouts), direction, seed)
        s = self._samplers.get(key)
        if s is None:
            s = _ember.Sampler(self._b, list(key[0]), _choice(_DIRECTIONS, direction, "direction"),
                               seed)
            self._samplers[key] = s
        return s

    def flush(self) -> None:
        """Write back every dirty resident partition."""
        self._b.flush()

    def stats(self) -> dict:
        return self._b.stats()

    @property
    def closed(self) -> bool:
        return self._b.closed

    def close(self) -> None:
        """Close the samplers, write back dirty partitions and free the buffer."""
        for s in self._samplers.values():
            s.close()
        self._samplers.clear()
        self._b.close()

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class Sample:
    """A multi-hop neighbourhood. nodes: new ids, roots first, then hop 1, 2, ...;
    hop h is nodes[hop_offsets[h]:hop_offsets[h+1]]; layer l's edges are
    [edge_offsets[l], edge_offsets[l+1]) of edge_dst (the sampled node) and edge_src
    (its neighbour), both local ids (indices into nodes). rows: float32
    (len(nodes), dim) when asked for."""
    nodes: Array
    hop_offsets: Array
    edge_offsets: Array
    edge_dst: Array
    edge_src: Array
    rows: Optional[Array] = None

    @property
    def edge_index(self) -> Array:
        """(2, E) local ids: row 0 the neighbour (message source), row 1 the sampled
        node, as torch_geometric's edge_index."""
        if isinstance(self.edge_src, np.ndarray):
            return np.stack([self.edge_src, self.edge_dst])
        import torch
        return torch.stack([self.edge_src, self.edge_dst])


class State:
    """One state of an epoch: its resident partitions, its training edges (iterate
    it for batches of (n, 2) int64 new ids) and the resident nodes' rows. Valid
    until the buffer moves to the next state (then its methods raise StateError)."""

    def __init__(self, buf: Buffer, gen: int, index: int, partitions: np.ndarray,
                 num_edges: int, num_nodes: int, batch_size: int,
                 as_torch: Optional[bool]) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError("batch_size must be a positive int")
        self._buf = buf
        self._gen = gen
        self.index = index
        self.partitions = partitions
        self.num_edges = num_edges
        self.num_train_nodes = num_nodes
        self.batch_size = batch_size
        self.as_torch = as_torch

    def _check(self) -> None:
        if self._buf._gen != self._gen:
            raise StateError(detail=f"state {self.index} is no longer the buffer's current state")

    def batch(self, cap: Optional[int] = None, with_rel: bool = False) -> Optional[Array]:
        """The next batch of up to cap (default batch_size) edges, int64 (n, 2)
        (n, 3) with relation ids with_rel); None when the state has no more."""
        self._check()
        e = _i64(self._buf._b.next_batch(cap or self.batch_size), -1, 3)
        if len(e) == 0:
            return None
        return _out(np.ascontiguousarray(e if with_rel else e[:, :2]), self.as_torch)

    def __iter__(self) -> Iterator[Array]:
        while True:
            e = self.batch()
            if e is None:
                return
            yield e

    def train_nodes(self, cap: Optional[int] = None) -> Optional[Array]:
        """Node classification: the next batch of training nodes this state is the
        first to hold (int64); None when done."""
        self._check()
        v = np.frombuffer(self._buf._b.next_nodes(cap or self.batch_size), np.int64)
        return None if len(v) == 0 else _out(v, self.as_torch)

    @property
    def node_ids(self) -> Array:
        """int64: the new ids of every resident node, partition by partition in slot order."""
        g = self._buf.graph
        return _out(np.concatenate([g.partition_nodes(int(p)) for p in self.partitions]),
                    self.as_torch)

    def embeddings(self, nodes: Optional[Array] = None) -> Array:
        """float32 (n, dim): the current rows of nodes (new ids, resident in this
        state), or of every resident node (in node_ids order) when nodes is None."""
        self._check()
        ids = _as_ids(self.node_ids if nodes is None else nodes, "nodes")
        rows = np.frombuffer(self._buf._b.gather(ids), np.float32).reshape(len(ids), -1)
        return _out(rows, self.as_torch)

    def update(self, nodes: Array, rows: Array, mode: str = "add") -> None:
        """Write rows (float32 (n, dim)) into nodes (new ids of this state): "add"
        (scatter-add; repeated nodes add up) or "set" (the last repeat wins). The
        partitions are written back to the store when they leave the buffer."""
        self._check()
        ids = _as_ids(nodes, "nodes")
        if hasattr(rows, "detach"):
            rows = rows.detach().cpu().numpy()
        r = np.asarray(rows)
        if r.dtype.kind != "f":
            raise TypeError(f"rows: dtype must be floating, got {r.dtype}")
        r = np.ascontiguousarray(r, dtype=np.float32)
        self._buf._b.update(ids, r, _choice(_MODES, mode, "mode"))

    def sample(self, roots: Array, fanouts: Sequence[int] = (10, 10), *,
               direction: str = "in", seed: int = 0, rows: bool = False) -> Sample:
        """Multi-hop neighbourhoods of roots (new ids of this state) over the edges
        the buffer holds (needs a buffer opened with all_edges=True); rows=True also
        gathers the sampled nodes' rows."""
        self._check()
        if not self._buf.all_edges:
            raise ValueError("sampling needs a buffer opened with all_edges=True")
        s = self._buf.sampler(fanouts, direction, seed)
        nodes, hops, eoff, dst, src = s.run(_as_ids(roots, "roots"))
        f = lambda b: _out(np.frombuffer(b, np.int64), self.as_torch)
        smp = Sample(f(nodes), f(hops), f(eoff), f(dst), f(src))
        if rows:
            g = np.frombuffer(s.gather(), np.float32).reshape(-1, self._buf.graph.dim)
            smp.rows = _out(g, self.as_torch)
        return smp
