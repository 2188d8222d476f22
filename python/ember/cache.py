"""ember.EmbeddingCache: Ember's lookahead embedding cache, typed (over ``_ember.Cache``).

A trainer pushes future batches (per table, int64 row ids), acquires each batch once
its rows are resident in the cache's slots, reads and updates those rows in place
(zero-copy: the slots are one float32 ``(nslots, stride)`` array), and releases it.
Updated rows are written back to the store behind the trainer's back, and every read
sees every earlier update, exactly as if the trainer read and wrote the store in
batch order. ``include/ember_cache.h`` is the contract underneath.

Threads: one loader thread may push while one trainer thread acquires, applies and
releases (the two roles of the C cache); ``stats()`` may be called from any thread.

GPU slots (``slots="gpu"``): the slots are an ember_gpu arena (device memory on the
CUDA backend; host memory on the host backend, which runs the same calls everywhere).
A batch then gives ``device_memory`` (``__cuda_array_interface__`` or, host backend,
``__array_interface__``), ``wait(stream)``, ``apply_device(grads, ...)`` and
``release(dirty, done_stream=stream)``; streams are raw ``cudaStream_t`` handles (an
int, or a ``torch.cuda.Stream``).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _ember
from .errors import StateError

__all__ = ["Table", "EmbeddingCache", "Batch", "CacheStats"]

# ember_cache.h's enums, by name.
_STORAGE = {"fp32": 0, "fp16": 1}
_OPTIMIZER = {"none": 0, "sgd": 0, "adagrad": 1, "rowwise_adagrad": 2}
_TABLE_INIT = {"cache": 0, "zero": 1, "uniform": 2}
_CACHE_INIT = {"zero": 0, "uniform": 1}
_SLOTS = {"host": 0, "gpu": 1}
_GPU_BACKEND = {"auto": 0, "host": 1, "cuda": 2}
_GPU_OPT = {"sgd": 1, "adagrad": 2}
_ESTATE = -30011


@dataclasses.dataclass(frozen=True)
class Table:
    """One embedding table of a cache.

    name: what error messages and the per-table calls use.
    rows: row ids are 0 .. rows-1 (at most 2^48).
    dim: float32 elements per row.
    storage: "fp32" or "fp16" (how rows are kept in the store; slots hold fp32).
    optimizer: the state kept beside each row: "none" (SGD), "adagrad" (dim
        accumulators) or "rowwise_adagrad" (one per row).
    init: the value of a row the store does not hold: "cache" (the cache's init),
        "zero", or "uniform" (in [-init_scale, init_scale) from init_seed).
    """

    name: str
    rows: int
    dim: int
    storage: str = "fp32"
    optimizer: str = "none"
    init: str = "cache"
    init_scale: float = 0.0
    init_seed: int = 0

    def __post_init__(self) -> None:
        if self.storage not in _STORAGE:
            raise ValueError(f"table {self.name!r}: storage must be one of {sorted(_STORAGE)}")
        if self.optimizer not in _OPTIMIZER:
            raise ValueError(f"table {self.name!r}: optimizer must be one of {sorted(_OPTIMIZER)}")
        if self.init not in _TABLE_INIT:
            raise ValueError(f"table {self.name!r}: init must be one of {sorted(_TABLE_INIT)}")
        if int(self.rows) <= 0 or int(self.dim) <= 0:
            raise ValueError(f"table {self.name!r}: rows and dim must be positive")

    @property
    def state_floats(self) -> int:
        """fp32 values of optimizer state after each row."""
        return {0: 0, 1: self.dim, 2: 1}[_OPTIMIZER[self.optimizer]]

    def _c_spec(self) -> Tuple[int, int, int, int, int, float, int]:
        return (int(self.rows), int(self.dim), _STORAGE[self.storage],
                _OPTIMIZER[self.optimizer], _TABLE_INIT[self.init],
                float(self.init_scale), int(self.init_seed))


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """A snapshot of a cache's counters since open (ember_cache_stats)."""

    batches_pushed: int
    batches_planned: int
    batches_released: int
    lookups: int
    unique_rows: int
    hits: int
    rows_fetched: int
    rows_absent: int
    rows_evicted: int
    rows_written_back: int
    bytes_fetched: int
    bytes_written_back: int
    wait_ns: int
    prefetch_idle_ns: int
    prefetch_busy_ns: int
    plan_ns: int
    fetch_rounds: int
    resident: int
    capacity: int

    @property
    def hit_rate(self) -> float:
        """Distinct rows of planned batches found resident, over all distinct rows."""
        return self.hits / self.unique_rows if self.unique_rows else 0.0


IdsLike = Any  # a 1-D int64 array (numpy, torch, or any buffer), or (values, offsets)


def _wants_torch(mode: str) -> bool:
    if mode == "torch":
        return True
    if mode == "numpy":
        return False
    return "torch" in sys.modules


def _ids_buffer(ids: Any) -> Any:
    """The flat int64 ids of one table's lookups, without a copy where possible.

    Accepts a 1-D array or tensor, or a (values, offsets) pair (jagged: the lookups
    are the values). dtype and range are checked by the extension, which names the
    table and position.
    """
    if isinstance(ids, tuple) and len(ids) == 2:
        ids = ids[0]
    mod = type(ids).__module__
    if mod.startswith("torch"):
        if ids.device.type != "cpu":
            ids = ids.cpu()
        ids = ids.detach()
        if not ids.is_contiguous():
            ids = ids.contiguous()
        return ids.numpy()
    if isinstance(ids, (list, range)):
        return np.asarray(ids, dtype=np.int64)
    return ids


class Batch:
    """An acquired batch: valid until release(); afterwards every use raises StateError.

    number: the batch's number (0 for the first pushed).
    slots: int64 (nlookups,): the slot of every lookup, parts one after another.
    offsets: int64 (nparts + 1,): part p's lookups are slots[offsets[p]:offsets[p+1]].
    memory: float32 (nslots, stride): the cache's slots (zero-copy; a row of table t
        is memory[s, :dim], its optimizer state follows). Only the batch's rows may be
        written, and only until release.
    Arrays are numpy, or torch tensors (zero-copy, torch.from_numpy) when the cache
    was opened with arrays="torch" (or "auto" with torch imported).
    """

    __slots__ = ("_cache", "_view", "_number", "_slots", "_offsets", "_tables", "_alive",
                 "_devmem", "_nlookups")

    def __init__(self, cache: "EmbeddingCache", view: Any) -> None:
        self._cache = cache
        self._view = view
        self._number = int(view.batch)
        slots = np.asarray(view.slots)
        offsets = np.asarray(view.offsets)
        if cache._torch:
            import torch
            slots = torch.from_numpy(slots)
            offsets = torch.from_numpy(offsets)
        self._slots = slots
        self._offsets = offsets
        self._tables = tuple(view.tables)
        self._alive = True
        self._devmem = None
        self._nlookups = int(len(slots))

    def _check(self) -> None:
        if not self._alive:
            raise StateError(_ESTATE, f"batch {self._number} was released")

    def _check_gpu(self) -> None:
        self._check()
        if not self._cache.gpu_slots:
            raise ValueError("the cache's slots are in host memory (slots='host'): the "
                             "device calls need slots='gpu'")

    @property
    def number(self) -> int:
        self._check()
        return self._number

    @property
    def nparts(self) -> int:
        self._check()
        return len(self._tables)

    @property
    def tables(self) -> Tuple[int, ...]:
        """The table index of each part."""
        self._check()
        return self._tables

    @property
    def slots(self) -> Any:
        self._check()
        return self._slots

    @property
    def offsets(self) -> Any:
        self._check()
        return self._offsets

    @property
    def memory(self) -> Any:
        self._check()
        return self._cache.memory

    # ---- GPU slots ----

    @property
    def device_memory(self) -> Any:
        """GPU slots: the arena, float32 (nslots, stride), as an object exposing
        ``__cuda_array_interface__`` (v3, stream None: order your stream with wait()
        first) on the CUDA backend, ``__array_interface__`` on the host backend
        (numpy.asarray reads it in place). Slot s's row is [s, :dim]; a narrower
        table's row is followed by zeros (keep them zero), then the Adagrad state.
        Its interfaces raise StateError after release; the cache refuses to close
        while the object lives."""
        self._check_gpu()
        if self._devmem is None:
            self._devmem = self._cache._c.device_memory(self._view)
        return self._devmem

    @property
    def nlookups(self) -> int:
        self._check()
        return self._nlookups

    @property
    def arena_dim(self) -> int:
        """GPU slots: floats per row of the arena (the widest table's dim): the width
        of apply_device's gradient rows."""
        self._check_gpu()
        return self._cache.device_info()["dim"]

    def wait(self, stream: Any = None) -> None:
        """GPU slots: make `stream` (a cudaStream_t handle, 0 = the legacy default
        stream, or a torch.cuda.Stream) wait until the batch's rows are in the arena,
        without blocking the host (CUDA). stream None, or the host backend: the host
        waits."""
        self._check_gpu()
        self._cache._c.wait(self._view, _stream_handle(stream))

    def apply_device(self, grads: Any, lr: float, eps: float = 0.0,
                     optimizer: Optional[str] = None, stream: Any = None) -> None:
        """GPU slots: apply SGD or Adagrad to the batch's rows on the device.

        grads: float32 (nlookups, arena_dim), C-contiguous, one gradient row per
        lookup (parts one after another, as slots), a narrower table's rows padded
        with zeros; an object exposing __cuda_array_interface__ (CUDA backend) or
        __array_interface__ (host backend; torch CPU tensors too), or a raw device
        pointer (int). Gradients of one row are summed in lookup order, then the row
        is updated once (ember_gpu_scatter_apply_grouped with the batch's groups).
        optimizer: "sgd" or "adagrad" (None: as the tables keep state); lr > 0.
        stream: the stream to run on (after the batch's `ready`); None: the stream
        of the gradients' __cuda_array_interface__ if it names one, else Ember's
        own stream after the default stream, and the call waits for it. The
        gradients' memory must stay valid until the stream has run the update (a
        tensor made on that stream is). ValueError for a bad shape, dtype,
        layout or a NULL pointer.
        """
        self._check_gpu()
        if optimizer is not None and optimizer not in _GPU_OPT:
            raise ValueError(f"optimizer must be one of {sorted(_GPU_OPT)}")
        info = self._cache.device_info()
        ptr, istream, keep = _device_rows(grads, self._nlookups, info["dim"],
                                          info["backend"] == "cuda", self._cache.gpu_device)
        handle = _stream_handle(stream)
        if handle is None:
            handle = istream
        self._cache._c.apply_device(self._view, ptr, float(lr), float(eps),
                                    _GPU_OPT[optimizer] if optimizer else 0, handle)
        del keep

    def release(self, dirty: bool = True, done_stream: Any = None) -> None:
        """Hand the batch back; dirty=False says its rows were not changed.

        GPU slots: done_stream is the stream of the trainer's last work on the
        batch's rows (an event is recorded there and the cache orders its later
        copies after it, without blocking); None: that work has completed, or ran
        on Ember's stream or the default stream, which the call waits for."""
        self._check()
        self._cache._c.release(self._view, bool(dirty), _stream_handle(done_stream))
        self._alive = False
        self._view = None
        self._devmem = None

    def part_slots(self, part: int) -> Any:
        """int64 (n,): the slots of part `part`'s lookups, in the order pushed."""
        self._check()
        if not 0 <= part < len(self._tables):
            raise IndexError(f"part {part} out of range (batch has {len(self._tables)})")
        a, b = int(self._offsets[part]), int(self._offsets[part + 1])
        return self._slots[a:b]

    def rows(self, part: int) -> Any:
        """float32 (n, dim): a copy of the rows of part `part`'s lookups."""
        slots = self.part_slots(part)
        dim = self._cache.tables[self._tables[part]].dim
        mem = self._cache.memory
        if self._cache._torch:
            return mem.narrow(1, 0, dim).index_select(0, slots)
        return mem[slots, :dim]

    def apply(self, part: int, grads: Any, lr: float, eps: float = 0.0,
              weight_decay: float = 0.0) -> None:
        """Apply the table's optimizer to part `part`'s rows in place.

        grads: float32 (n, dim), one gradient row per lookup of the part, in lookup
        order; gradients of lookups of the same row are summed, then each row is
        updated once (ember_cache_apply: SGD, Adagrad or row-wise Adagrad).
        """
        self._check()
        if type(grads).__module__.startswith("torch"):
            grads = grads.detach()
            if grads.device.type != "cpu":
                grads = grads.cpu()
            grads = grads.contiguous().numpy()
        self._cache._c.apply(self._view, int(part), grads, float(lr), float(eps),
                             float(weight_decay))

    @property
    def released(self) -> bool:
        return not self._alive

    def __enter__(self) -> "Batch":
        self._check()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._alive:
            self.release(dirty=exc_type is None)

    def __repr__(self) -> str:
        state = "released" if not self._alive else f"{len(self._tables)} parts"
        return f"<ember.Batch {self._number} ({state})>"


class EmbeddingCache:
    """A bounded set of embedding rows in memory over an Ember store, kept ahead of
    the trainer by an oracle that knows the batches pushed (include/ember_cache.h).

    store: an open ember.Store.
    tables: the tables (ember.Table), in the order parts name them by index.
    capacity: rows the cache holds at most over all tables (0: 1% of all rows, at
        least 1024). One batch may name at most this many distinct rows.
    window: batches pushed and not yet released at most (0: 100).
    prefetch_batches: batches planned ahead of the trainer (0: window / 4, 1..8).
    prefetch_depth: keys per batched store read or write (0: 1024).
    init, init_scale, init_seed: the value of rows the store does not hold, for
        tables whose init is "cache": "zero" or "uniform".
    arrays: "numpy", "torch", or "auto" (torch tensors when torch is imported).
    slots: "host" (the default) or "gpu": the slots in an ember_gpu arena, used
        through Batch.device_memory, wait, apply_device and release(done_stream)
        (memory and apply are for host slots). The tables must share one optimizer,
        "none" (SGD) or "adagrad".
    gpu_backend: with GPU slots, "auto" (CUDA when built with it and the device
        exists, else host), "cuda", or "host" (plain memory and worker threads:
        the same calls without a GPU). gpu_device: the CUDA device ordinal.
    """

    def __init__(self, store: Any, tables: Sequence[Table], capacity: int = 0,
                 window: int = 0, prefetch_batches: int = 0, prefetch_depth: int = 0,
                 init: str = "zero", init_scale: float = 0.0, init_seed: int = 0,
                 arrays: str = "auto", slots: str = "host", gpu_backend: str = "auto",
                 gpu_device: int = 0) -> None:
        tables = tuple(tables)
        if not tables:
            raise ValueError("a cache needs at least one table")
        for t in tables:
            if not isinstance(t, Table):
                raise TypeError(f"tables must be ember.Table, not {type(t).__name__}")
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise ValueError("table names must be distinct")
        if init not in _CACHE_INIT:
            raise ValueError(f"init must be one of {sorted(_CACHE_INIT)}")
        if arrays not in ("numpy", "torch", "auto"):
            raise ValueError("arrays must be 'numpy', 'torch' or 'auto'")
        if slots not in _SLOTS:
            raise ValueError(f"slots must be one of {sorted(_SLOTS)}")
        if gpu_backend not in _GPU_BACKEND:
            raise ValueError(f"gpu_backend must be one of {sorted(_GPU_BACKEND)}")
        if int(gpu_device) < 0:
            raise ValueError("gpu_device must be >= 0")
        gpu = slots == "gpu"
        if not gpu and (gpu_backend != "auto" or int(gpu_device) != 0):
            raise ValueError("gpu_backend and gpu_device need slots='gpu'")
        if gpu:
            opts = {t.optimizer.replace("sgd", "none") for t in tables}
            if len(opts) > 1 or opts & {"rowwise_adagrad"}:
                raise ValueError("GPU slots need every table to keep the same optimizer "
                                 "state, 'none' (SGD) or 'adagrad'")
        self.store = store
        self.tables: Tuple[Table, ...] = tables
        self._index = {t.name: i for i, t in enumerate(tables)}
        self._torch = _wants_torch(arrays)
        self._memory = None
        self.gpu_slots = gpu
        self.gpu_device = int(gpu_device)
        self._device_info = None
        self._c = _ember.Cache(
            store._db, [t._c_spec() for t in tables], names=names,
            capacity=int(capacity), window=int(window),
            prefetch_batches=int(prefetch_batches), prefetch_depth=int(prefetch_depth),
            init=_CACHE_INIT[init], init_scale=float(init_scale), init_seed=int(init_seed),
            slots=_SLOTS[slots], gpu_backend=_GPU_BACKEND[gpu_backend] if gpu else 0,
            gpu_device=int(gpu_device) if gpu else 0)
        store._children.add(self)  # store.close() closes (flushes) the cache first

    # ---- tables ----

    def table_index(self, table: Union[int, str]) -> int:
        """The index of a table given by name or index."""
        if isinstance(table, str):
            try:
                return self._index[table]
            except KeyError:
                raise KeyError(f"no table named {table!r}") from None
        t = int(table)
        if not 0 <= t < len(self.tables):
            raise IndexError(f"table {t} out of range (cache has {len(self.tables)})")
        return t

    # ---- the loader's role ----

    def push(self, batch: Union[Mapping[str, IdsLike], Sequence[IdsLike],
                                Iterable[Tuple[Union[int, str], IdsLike]]]) -> int:
        """Hand over a future batch; returns its number.

        batch: per table, its lookups' int64 ids, as a 1-D array/tensor or a jagged
        (values, offsets) pair: either a mapping {table name: ids}, a sequence with
        one entry per table (in table order), or a list of (table, ids) pairs (a
        table may appear in several parts). Raises ValueError naming the table and
        position of a bad id (wrong dtype or shape, negative, >= rows); nothing is
        pushed then. ember.Again when `window` batches are pushed and not released.
        """
        parts = []
        if isinstance(batch, Mapping):
            for name, ids in batch.items():
                t = self.table_index(name)
                parts.append((t, _ids_buffer(ids), self.tables[t].name))
        else:
            items = list(batch)
            pairs = all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (int, str))
                        for x in items) and len(items) > 0
            if pairs:
                for table, ids in items:
                    t = self.table_index(table)
                    parts.append((t, _ids_buffer(ids), self.tables[t].name))
            else:
                if len(items) != len(self.tables):
                    raise ValueError(f"a batch given as a sequence needs one entry per table "
                                     f"({len(self.tables)}), got {len(items)}")
                for t, ids in enumerate(items):
                    parts.append((t, _ids_buffer(ids), self.tables[t].name))
        return self._c.push(parts)

    # ---- the trainer's role ----

    def acquire(self, wait: bool = True) -> Optional[Batch]:
        """The oldest pushed batch not yet acquired, once its rows are resident.

        wait=False: None when its rows are not resident yet. StateError when a batch
        is already acquired or none is pushed. Ctrl-C while waiting raises
        KeyboardInterrupt and leaves the batch not acquired.
        """
        view = self._c.acquire(bool(wait))
        if view is None:
            return None
        return Batch(self, view)

    def device_info(self) -> dict:
        """GPU slots, after the first acquire: the arena's {"backend": "cuda" or
        "host", "dim", "state_floats", "stride", "nslots", "ptr"}."""
        if self._device_info is None:
            self._device_info = self._c.gpu_info()
        return self._device_info

    @property
    def memory(self) -> Any:
        """float32 (nslots, stride): the slots, zero-copy (after the first acquire).

        While this array (or a tensor over it) is alive, close() raises BusyError.
        """
        if self._memory is None:
            mem = np.asarray(self._c.memory())
            if self._torch:
                import torch
                mem = torch.from_numpy(mem)
            self._memory = mem
        return self._memory

    def flush(self) -> None:
        """Write every updated row back to the store (before a checkpoint)."""
        self._c.flush()

    def read_rows(self, table: Union[int, str], ids: Any, state: bool = False) -> Any:
        """float32 (n, dim): rows `ids` of `table` as the next batch would see them.

        state=True: also their optimizer state, (rows, state (n, state_floats)).
        Not while a batch is acquired (StateError).
        """
        t = self.table_index(table)
        rows, st = self._c.read_rows(t, _ids_buffer(ids), bool(state))
        rows = np.asarray(rows)
        if state:
            st = np.asarray(st)
        if self._torch:
            import torch
            rows = torch.from_numpy(rows)
            if state:
                st = torch.from_numpy(st)
        return (rows, st) if state else rows

    def write_rows(self, table: Union[int, str], ids: Any, rows: Any,
                   state: Any = None) -> None:
        """Write rows `ids` of `table` (float32 (n, dim)) and optionally their state
        (float32 (n, state_floats); None keeps it) through the cache and the store."""
        t = self.table_index(table)
        self._c.write_rows(t, _ids_buffer(ids), _float_buffer(rows),
                           None if state is None else _float_buffer(state))

    # ---- any thread ----

    def stats(self) -> CacheStats:
        return CacheStats(**self._c.stats())

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        """Flush and close (twice is fine). BusyError while a zero-copy view of the
        slots exists outside this object, or a call runs in another thread."""
        self._memory = None
        self._c.close()

    def __enter__(self) -> "EmbeddingCache":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.tables)} tables"
        return f"<ember.EmbeddingCache ({state})>"


def _stream_handle(stream: Any) -> Optional[int]:
    """A cudaStream_t as an int: None, an int, or an object with .cuda_stream (a
    torch.cuda.Stream)."""
    if stream is None:
        return None
    if hasattr(stream, "cuda_stream"):
        stream = stream.cuda_stream
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"a stream must be an int handle, a torch.cuda.Stream or None, not "
                        f"{type(stream).__name__}")
    if stream < 0:
        raise ValueError(f"stream handle {stream} is negative")
    return stream


def _device_rows(grads: Any, n: int, dim: int, cuda: bool,
                 device: int) -> Tuple[int, Optional[int], Any]:
    """(pointer, the interface's stream or None, object to keep alive) of float32
    (n, dim) C-contiguous gradients, checked; ValueError / TypeError otherwise."""
    if isinstance(grads, bool):
        raise TypeError("grads must be an array, a tensor or a device pointer (int)")
    if isinstance(grads, int):
        if grads <= 0 and n > 0:
            raise ValueError("grads: NULL (or negative) device pointer")
        return grads, None, None
    keep = grads
    if type(grads).__module__.startswith("torch"):
        grads = grads.detach()
        keep = grads
        if grads.device.type == "cuda":
            if not cuda:
                raise ValueError("grads: a CUDA tensor, but the slots are host memory "
                                 "(host backend)")
            if grads.device.index is not None and grads.device.index != device:
                raise ValueError(f"grads: on cuda:{grads.device.index}, the slots on "
                                 f"cuda:{device}")
        elif not cuda:
            grads = grads.numpy()
            keep = grads
    if cuda:
        if not hasattr(grads, "__cuda_array_interface__"):
            raise ValueError("grads: the slots are device memory: give a CUDA array "
                             "(__cuda_array_interface__) or a device pointer")
        ai = grads.__cuda_array_interface__
    else:
        if not hasattr(grads, "__array_interface__"):
            raise TypeError(f"grads: expected an array exposing __array_interface__ (host "
                            f"backend), got {type(grads).__name__}")
        ai = grads.__array_interface__
    shape = tuple(ai["shape"])
    if ai.get("typestr") not in ("<f4", "=f4"):
        raise ValueError(f"grads: dtype must be float32 ('<f4'), got {ai.get('typestr')!r}")
    if shape != (n, dim):
        raise ValueError(f"grads: shape must be ({n}, {dim}) (nlookups, arena dim), got "
                         f"{shape}")
    strides = ai.get("strides")
    if strides is not None and ((n > 1 and tuple(strides) != (dim * 4, 4)) or
                                (dim > 1 and strides[1] != 4)):
        raise ValueError(f"grads: must be C-contiguous, got strides {tuple(strides)}")
    if ai.get("mask") is not None:
        raise ValueError("grads: masked arrays are not supported")
    ptr = int(ai["data"][0]) if ai.get("data") is not None else 0
    if n > 0 and ptr == 0:
        raise ValueError("grads: NULL data pointer")
    stream = ai.get("stream") if cuda else None
    if stream is not None:
        stream = {1: 0}.get(int(stream), int(stream))  # 1: the legacy default stream
    return ptr, stream, keep


def _float_buffer(x: Any) -> Any:
    if type(x).__module__.startswith("torch"):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        return x.contiguous().numpy()
    return x
