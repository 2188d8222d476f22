"""ember.torch: embedding tables larger than memory for PyTorch trainers.

``EmbeddingBagCollection`` is an ``nn.Module`` over Ember's lookahead embedding cache:
its tables live in an Ember store, a bounded cache of rows sits in memory, and the
cache's oracle sees the trainer's future batches (``pipeline``) so that the rows of
batch i+k are fetched while batch i trains. Its forward takes per-feature ids with
offsets (or lengths), as ``nn.EmbeddingBag`` does, and returns pooled embeddings with
autograd. The optimizer is fused into backward (as FBGEMM's tables do): backward
computes each lookup's row gradient and applies SGD, Adagrad or row-wise Adagrad to
the cached rows in place (optimizer state is stored beside each row), then hands the
batch back. The module has no dense parameters for its tables.

With ``device="cuda"`` the cache keeps its slots in GPU memory (an ember_gpu arena):
forward makes PyTorch's current stream wait for the batch's rows (no host wait),
gathers them from the arena as a CUDA tensor and pools on the GPU; backward applies
SGD or Adagrad with one scatter-apply kernel on the same stream, and the batch is
handed back with an event recorded there.

This is the only module of the package that imports torch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .cache import EmbeddingCache, Table
from .errors import StateError, TooBig

__all__ = ["EmbeddingBagConfig", "EmbeddingBagCollection", "Jagged"]

_ESTATE = -30011
_ETOOBIG = -30003


@dataclasses.dataclass(frozen=True)
class EmbeddingBagConfig:
    """One table of an EmbeddingBagCollection (TorchRec's config, in short).

    name: the table's name (state_dict keys, export_table).
    num_embeddings, embedding_dim: rows and float32 elements per row.
    pooling: "sum" or "mean", as nn.EmbeddingBag's mode.
    storage: "fp32" or "fp16": how rows are kept in the store (the cache computes in fp32).
    feature_names: the features looked up in this table (default: [name]).
    init_scale: rows never written start uniform in [-init_scale, init_scale)
        (0: sqrt(1 / num_embeddings), TorchRec's default); init_seed seeds it.
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    pooling: str = "sum"
    storage: str = "fp32"
    feature_names: Optional[Tuple[str, ...]] = None
    init_scale: float = 0.0
    init_seed: Optional[int] = None

    def __post_init__(self) -> None:
        if self.pooling not in ("sum", "mean"):
            raise ValueError(f"table {self.name!r}: pooling must be 'sum' or 'mean'")
        if self.storage not in ("fp32", "fp16"):
            raise ValueError(f"table {self.name!r}: storage must be 'fp32' or 'fp16'")
        if self.feature_names is not None:
            object.__setattr__(self, "feature_names", tuple(self.feature_names))

    @property
    def features(self) -> Tuple[str, ...]:
        return self.feature_names if self.feature_names else (self.name,)


@dataclasses.dataclass
class Jagged:
    """One feature's lookups for a batch of B bags: values (int64, all lookups) and
    either offsets (int64 (B,), each bag's start, as nn.EmbeddingBag) or lengths
    (int64 (B,))."""

    values: torch.Tensor
    offsets: Optional[torch.Tensor] = None
    lengths: Optional[torch.Tensor] = None


_OPTIMIZERS = {"sgd": "none", "adagrad": "adagrad", "rowwise_adagrad": "rowwise_adagrad"}


def _parse_optimizer(opt: Any) -> Tuple[str, float, float]:
    """("sgd", lr) | ("adagrad", lr[, eps]) | ("rowwise_adagrad", lr[, eps])."""
    if not isinstance(opt, (tuple, list)) or not opt or opt[0] not in _OPTIMIZERS:
        raise ValueError("optimizer must be ('sgd', lr), ('adagrad', lr[, eps]) or "
                         "('rowwise_adagrad', lr[, eps])")
    name = opt[0]
    if len(opt) < 2 or len(opt) > (2 if name == "sgd" else 3):
        raise ValueError(f"optimizer {name!r}: wrong number of hyper-parameters")
    lr = float(opt[1])
    eps = float(opt[2]) if len(opt) > 2 else 1e-10
    if not math.isfinite(lr) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"optimizer {name!r}: lr and eps must be finite (eps >= 0)")
    return name, lr, eps


def _feature(name: str, x: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """(values int64 (n,), offsets int64 (B,)) of one feature, checked."""
    if isinstance(x, Jagged):
        values, offsets, lengths = x.values, x.offsets, x.lengths
        if (offsets is None) == (lengths is None):
            raise ValueError(f"feature {name!r}: give offsets or lengths (one of them)")
    elif isinstance(x, (tuple, list)) and len(x) == 2:
        values, offsets, lengths = x[0], x[1], None
    elif isinstance(x, torch.Tensor) and x.dim() == 2:
        b, l = x.shape
        values = x.reshape(-1)
        offsets = torch.arange(0, b * l, l, dtype=torch.int64) if l else torch.zeros(b, dtype=torch.int64)
        lengths = None
    else:
        raise TypeError(f"feature {name!r}: expected (ids, offsets), Jagged or a 2-D ids tensor, "
                        f"got {type(x).__name__}")
    values = torch.as_tensor(values)
    if values.dtype != torch.int64:
        raise ValueError(f"feature {name!r}: ids must be int64, got {values.dtype}")
    if values.dim() != 1:
        raise ValueError(f"feature {name!r}: ids must be 1-D, got shape {tuple(values.shape)}")
    if lengths is not None:
        lengths = torch.as_tensor(lengths)
        if lengths.dtype != torch.int64 or lengths.dim() != 1:
            raise ValueError(f"feature {name!r}: lengths must be 1-D int64")
        bad = (lengths < 0).nonzero()
        if len(bad):
            raise ValueError(f"feature {name!r}: lengths[{int(bad[0])}] is negative")
        if int(lengths.sum()) != values.numel():
            raise ValueError(f"feature {name!r}: lengths sum to {int(lengths.sum())}, "
                             f"ids hold {values.numel()}")
        offsets = torch.zeros_like(lengths)
        if lengths.numel() > 1:
            torch.cumsum(lengths[:-1], 0, out=offsets[1:])
    else:
        offsets = torch.as_tensor(offsets)
        if offsets.dtype != torch.int64 or offsets.dim() != 1:
            raise ValueError(f"feature {name!r}: offsets must be 1-D int64")
        if offsets.numel() and int(offsets[0]) != 0:
            raise ValueError(f"feature {name!r}: offsets[0] must be 0, got {int(offsets[0])}")
        if offsets.numel() > 1:
            bad = (offsets[1:] < offsets[:-1]).nonzero()
            if len(bad):
                i = int(bad[0]) + 1
                raise ValueError(f"feature {name!r}: offsets[{i}] = {int(offsets[i])} is below "
                                 f"offsets[{i - 1}]")
        if offsets.numel() and int(offsets[-1]) > values.numel():
            raise ValueError(f"feature {name!r}: offsets[{offsets.numel() - 1}] = "
                             f"{int(offsets[-1])} is past the {values.numel()} ids")
    return values.contiguous(), offsets.contiguous()


def _table_named(configs: Sequence[EmbeddingBagConfig],
                 name: str) -> Tuple[int, EmbeddingBagConfig]:
    """The index and config of the table called name (KeyError if none): the
    collections' read_rows, write_rows and export_table look tables up by name."""
    for t, cfg in enumerate(configs):
        if cfg.name == name:
            return t, cfg
    raise KeyError(f"no table named {name!r}")


def _load_tables(module: Any, state_dict: Mapping[str, Any], prefix: str, strict: bool,
                 missing_keys: List[str], unexpected_keys: List[str], error_msgs: List[str],
                 write: Callable[[int, EmbeddingBagConfig, torch.Tensor, Optional[torch.Tensor]],
                                 None]) -> None:
    """load_state_dict for the tables of a collection (`module.configs`, `module.cache`):
    every table's weight (and optimizer state) checked against its config, then
    handed to write(t, cfg, weight, state) to go through the cache."""
    mine = set()
    for t, cfg in enumerate(module.configs):
        wkey = f"{prefix}tables.{cfg.name}.weight"
        skey = f"{prefix}tables.{cfg.name}.optimizer_state"
        mine.update((wkey, skey))
        sf = module.cache.tables[t].state_floats
        if wkey not in state_dict:
            missing_keys.append(wkey)
            continue
        w = state_dict[wkey]
        if tuple(w.shape) != (cfg.num_embeddings, cfg.embedding_dim):
            error_msgs.append(f"{wkey}: shape {tuple(w.shape)}, expected "
                              f"{(cfg.num_embeddings, cfg.embedding_dim)}")
            continue
        st = state_dict.get(skey)
        if sf and st is None:
            missing_keys.append(skey)
        if st is not None and tuple(st.shape) != (cfg.num_embeddings, sf):
            error_msgs.append(f"{skey}: shape {tuple(st.shape)}, expected "
                              f"{(cfg.num_embeddings, sf)}")
            continue
        write(t, cfg, w, st)
    if strict:
        pre = f"{prefix}tables."
        for k in state_dict:
            if k.startswith(pre) and k not in mine:
                unexpected_keys.append(k)


class _Lookup(torch.autograd.Function):
    """Pooled rows of an acquired batch; backward applies the fused optimizer to the
    batch's rows and releases the batch."""

    @staticmethod
    def forward(ctx, step: "_Step", placeholder: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.step = step
        return tuple(step.pooled)

    @staticmethod
    def backward(ctx, *grads: Optional[torch.Tensor]) -> Tuple[None, None]:
        step: _Step = ctx.step
        ctx.step = None
        step.backward(grads)
        return None, None


def _pool_source(mem: torch.Tensor, slots: torch.Tensor,
                 dim: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The indices and weight that F.embedding_bag pools a part's lookups from.

    mem is the slot arena, (nslots, width). When width is a multiple of the table's
    dim the arena is seen, zero-copy, as rows of dim floats (slot s's row is view
    row s * (width // dim)), so embedding_bag reads the cache in place, as
    nn.EmbeddingBag reads its weight; otherwise the part's rows are gathered first.
    """
    width = mem.shape[1]
    if width % dim == 0 and mem.is_contiguous():
        k = width // dim
        return (slots if k == 1 else slots * k), mem.view(-1, dim)
    rows = mem.narrow(1, 0, dim).index_select(0, slots)
    return torch.arange(slots.numel(), dtype=torch.int64, device=slots.device), rows


class _Step:
    """One acquired batch of an EmbeddingBagCollection: its features, the pooled
    outputs, and what backward needs."""

    def __init__(self, ebc: "EmbeddingBagCollection", batch: Any,
                 feats: List[Tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.ebc = ebc
        self.batch = batch
        self.feats = feats
        self.pooled: List[torch.Tensor] = []
        if ebc._gpu:
            self._forward_device(batch, feats)
            return
        mem = ebc.cache.memory
        for p, (_, offsets) in enumerate(feats):
            cfg = ebc._part_cfg[p]
            idx, weight = _pool_source(mem, batch.part_slots(p), cfg.embedding_dim)
            self.pooled.append(F.embedding_bag(idx, weight, offsets, mode=cfg.pooling))

    def _forward_device(self, batch: Any, feats: List[Tuple[torch.Tensor, torch.Tensor]]) -> None:
        """GPU slots: the rows gathered from the arena on the current stream, after it
        waited for the batch's `ready`."""
        ebc = self.ebc
        dev = ebc._torch_device()
        batch.wait(ebc._stream())
        dm = batch.device_memory
        if dev.type == "cuda":
            mem = torch.as_tensor(dm, device=dev)
        else:  # the host backend: the arena is host memory
            mem = torch.from_numpy(np.asarray(dm))
        slots = batch.slots.to(dev)
        offs = batch.offsets
        for p, (_, offsets) in enumerate(feats):
            cfg = ebc._part_cfg[p]
            a, b = int(offs[p]), int(offs[p + 1])
            idx, weight = _pool_source(mem, slots[a:b], cfg.embedding_dim)
            self.pooled.append(F.embedding_bag(idx, weight, offsets.to(dev), mode=cfg.pooling))
        del mem, dm  # the arena view lives no longer than forward

    def _row_grads(self, p: int, g: torch.Tensor, dev: torch.device) -> torch.Tensor:
        """Part p's gradient per lookup, from its pooled outputs' gradient g."""
        values, offsets = self.feats[p]
        n = values.numel()
        cfg = self.ebc._part_cfg[p]
        offsets = offsets.to(dev)
        nb = offsets.numel()
        lengths = torch.diff(offsets, append=torch.tensor([n], dtype=torch.int64, device=dev))
        bag = torch.repeat_interleave(torch.arange(nb, dtype=torch.int64, device=dev), lengths)
        g = g.to(device=dev, dtype=torch.float32)
        if cfg.pooling == "mean":
            g = g / lengths.clamp(min=1).to(torch.float32).unsqueeze(1)
        return g.index_select(0, bag)

    def _backward_device(self, grads: Sequence[Optional[torch.Tensor]]) -> None:
        """GPU slots: one (nlookups, arena dim) gradient, zero-padded, one scatter-apply."""
        ebc = self.ebc
        batch = self.batch
        dev = ebc._torch_device()
        full = torch.zeros(batch.nlookups, batch.arena_dim, dtype=torch.float32, device=dev)
        offs = batch.offsets
        for p, g in enumerate(grads):
            a, b = int(offs[p]), int(offs[p + 1])
            if g is None or a == b:
                continue
            dim = ebc._part_cfg[p].embedding_dim
            full[a:b, :dim] = self._row_grads(p, g, dev)
        batch.apply_device(full, ebc.lr, ebc.eps, optimizer=ebc._gpu_opt, stream=ebc._stream())
        del full  # freed on the stream that used it: reuse is ordered after the kernel

    def backward(self, grads: Sequence[Optional[torch.Tensor]]) -> None:
        if self.batch is None or self.batch.released:
            raise StateError(_ESTATE, "backward ran twice over one Ember batch, or after the "
                             "batch was handed back (a later forward releases an earlier batch)")
        ebc = self.ebc
        if ebc._gpu:
            self._backward_device(grads)
            ebc._release(self, dirty=True)
            return
        for p, g in enumerate(grads):
            if g is None:
                continue
            values, offsets = self.feats[p]
            n = values.numel()
            if n == 0:
                continue
            cfg = ebc._part_cfg[p]
            nb = offsets.numel()
            lengths = torch.diff(offsets, append=torch.tensor([n], dtype=torch.int64))
            bag = torch.repeat_interleave(torch.arange(nb, dtype=torch.int64), lengths)
            g = g.to(torch.float32)
            if cfg.pooling == "mean":
                g = g / lengths.clamp(min=1).to(torch.float32).unsqueeze(1)
            row_grads = g.index_select(0, bag).contiguous()
            self.batch.apply(p, row_grads, ebc.lr, ebc.eps, ebc.weight_decay)
        ebc._release(self, dirty=True)


class EmbeddingBagCollection(nn.Module):
    """Pooled embedding lookups of many tables, the tables in an Ember store.

    tables: the tables (EmbeddingBagConfig); each feature of each table is one input.
    store: an open ember.Store that holds the tables' rows.
    cache_rows: rows the in-memory cache holds over all tables (a batch may name at
        most this many distinct rows).
    lookahead: batches the pipeline reads ahead of the one training.
    optimizer: ("sgd", lr), ("adagrad", lr[, eps]) or ("rowwise_adagrad", lr[, eps]),
        applied to the rows in backward; weight_decay: L2 added to the gradient.
    prefetch_batches, prefetch_depth: the cache's (0: defaults).
    device: "cpu" (slots in host memory) or "cuda" / "cuda:N": the cache's slots in
        GPU memory, outputs on that device, the optimizer run on the GPU ("sgd" or
        "adagrad"; no weight decay). gpu_backend: ember_gpu's backend for
        device="cuda": "auto", "cuda", or "host" (the GPU-slot path in host memory
        with CPU tensors: the same code without a GPU, for tests).

    forward(features) takes {feature name: (ids int64 (n,), offsets int64 (B,))} (or a
    Jagged with lengths, or a 2-D (B, L) ids tensor) and returns {feature name: float32
    (B, dim)} in the tables' order. In training (grad enabled), backward of the outputs
    updates the rows and releases the batch; otherwise forward releases it at once.
    """

    def __init__(self, tables: Sequence[EmbeddingBagConfig], store: Any, cache_rows: int,
                 lookahead: int = 8, optimizer: Any = ("sgd", 0.01), weight_decay: float = 0.0,
                 prefetch_batches: int = 0, prefetch_depth: int = 0, device: Any = "cpu",
                 gpu_backend: str = "auto") -> None:
        super().__init__()
        tables = tuple(tables)
        if not tables:
            raise ValueError("an EmbeddingBagCollection needs at least one table")
        if int(lookahead) < 1:
            raise ValueError("lookahead must be at least 1")
        opt, self.lr, self.eps = _parse_optimizer(optimizer)
        self.weight_decay = float(weight_decay)
        if not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise ValueError("weight_decay must be finite and >= 0")
        self.optimizer_name = opt
        dev = torch.device(device)
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        self._gpu = dev.type == "cuda"
        self._gpu_index = dev.index if dev.index is not None else 0
        self._dev: Optional[torch.device] = None if self._gpu else dev
        if self._gpu:
            if opt not in ("sgd", "adagrad"):
                raise ValueError(f"optimizer {opt!r}: on the GPU every table shares one "
                                 "optimizer, 'sgd' or 'adagrad'")
            if self.weight_decay:
                raise ValueError("weight_decay is not supported with device='cuda'")
            if not self.lr > 0:
                raise ValueError("lr must be > 0 with device='cuda'")
        self._gpu_opt = "adagrad" if opt == "adagrad" else "sgd"
        self.device = dev
        self.configs = tables
        self.lookahead = int(lookahead)
        self.feature_names: List[str] = []
        self._part_table: List[int] = []
        self._part_cfg: List[EmbeddingBagConfig] = []
        for t, cfg in enumerate(tables):
            for f in cfg.features:
                if f in self.feature_names:
                    raise ValueError(f"feature {f!r} appears twice")
                self.feature_names.append(f)
                self._part_table.append(t)
                self._part_cfg.append(cfg)
        specs = []
        for t, cfg in enumerate(tables):
            scale = cfg.init_scale or math.sqrt(1.0 / cfg.num_embeddings)
            seed = cfg.init_seed if cfg.init_seed is not None else 0x9E3779B97F4A7C15 ^ t
            specs.append(Table(cfg.name, cfg.num_embeddings, cfg.embedding_dim,
                               storage=cfg.storage, optimizer=_OPTIMIZERS[opt],
                               init="uniform", init_scale=scale, init_seed=seed))
        self.store = store
        # window: the pipeline's lookahead, the batch training and one spare.
        self.cache = EmbeddingCache(store, specs, capacity=int(cache_rows),
                                    window=self.lookahead + 2,
                                    prefetch_batches=int(prefetch_batches),
                                    prefetch_depth=int(prefetch_depth), arrays="torch",
                                    **({"slots": "gpu", "gpu_backend": gpu_backend,
                                        "gpu_device": self._gpu_index} if self._gpu else {}))
        # The outputs need an input that requires grad for backward to run; the
        # tables themselves are not parameters (FBGEMM's placeholder tensor).
        self._placeholder = torch.zeros(0, requires_grad=True)
        self._held: Optional[_Step] = None
        self._pipeline: Optional[_Pipeline] = None
        self._unacquired = 0  # pushed by forward (no pipeline), acquire interrupted

    # ---- forward ----

    def _features(self, features: Mapping[str, Any]) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        if not isinstance(features, Mapping):
            raise TypeError("features must be a mapping {feature name: ids}")
        unknown = set(features) - set(self.feature_names)
        if unknown:
            raise ValueError(f"unknown features: {sorted(unknown)}")
        out = []
        for f in self.feature_names:
            if f not in features:
                raise ValueError(f"feature {f!r} is missing")
            out.append(_feature(f, features[f]))
        return out

    def forward(self, features: Mapping[str, Any]) -> Dict[str, torch.Tensor]:
        self._check_open()
        self._release_held()
        self._drain_unacquired()
        pipe = self._pipeline
        if pipe is not None:
            feats, number = pipe._next_expected(features)
        else:
            feats = self._features(features)
            number = self.cache._c.push(_parts(self, feats))
            self._unacquired += 1
        batch = self.cache.acquire()  # KeyboardInterrupt here: the batch stays pushed
        if pipe is not None:
            pipe._took()
        else:
            self._unacquired -= 1
        if batch.number != number:
            self._release_batch(batch, dirty=False)
            raise StateError(_ESTATE, f"the cache handed out batch {batch.number} where "
                             f"batch {number} was expected: batches were pushed to the "
                             "cache outside this module")
        try:
            step = _Step(self, batch, feats)
        except BaseException:
            self._release_batch(batch, dirty=False)
            raise
        if torch.is_grad_enabled() and self.training:
            self._held = step
            outs = _Lookup.apply(step, self._placeholder)
        else:
            outs = step.pooled
            self._release(step, dirty=False)
        return dict(zip(self.feature_names, outs))

    def _torch_device(self) -> torch.device:
        """Where the tensors of a batch live: the CPU, or (GPU slots) the arena's CUDA
        device, or the CPU on ember_gpu's host backend. Known after the first acquire."""
        if self._dev is None:
            cuda = self.cache.device_info()["backend"] == "cuda"
            self._dev = torch.device("cuda", self._gpu_index) if cuda else torch.device("cpu")
        return self._dev

    def _stream(self) -> Optional[int]:
        """PyTorch's current stream on the arena's device (GPU slots on CUDA), else None."""
        if self._gpu and self._torch_device().type == "cuda":
            return torch.cuda.current_stream(self._dev).cuda_stream
        return None

    def _release_batch(self, batch: Any, dirty: bool) -> None:
        if self._gpu:
            batch.release(dirty=dirty, done_stream=self._stream())
        else:
            batch.release(dirty=dirty)
        if self._pipeline is not None:
            self._pipeline._released()

    def _release(self, step: _Step, dirty: bool) -> None:
        if self._held is step:
            self._held = None
        batch, step.batch = step.batch, None
        if batch is not None and not batch.released:
            self._release_batch(batch, dirty)

    def _drain_unacquired(self) -> None:
        """Batches pushed by a forward whose acquire was interrupted go back unchanged."""
        while self._unacquired:
            batch = self.cache.acquire()
            self._unacquired -= 1
            batch.release(dirty=False)  # never read: nothing of the trainer's in flight

    def _release_held(self) -> None:
        """A batch whose outputs were never backpropagated goes back unchanged."""
        if self._held is not None:
            self._release(self._held, dirty=False)

    # ---- the lookahead pipeline ----

    def pipeline(self, batches: Iterable[Any],
                 sparse: Optional[Callable[[Any], Mapping[str, Any]]] = None) -> Iterator[Any]:
        """Yield `batches` in order while a loader thread reads `lookahead` batches
        ahead and pushes their ids, so the cache fetches rows ahead of training.

        sparse: the batch's features mapping (default: the batch is that mapping).
        Call forward once per yielded batch with those features (a batch without a
        forward is skipped: its rows are not changed). A forward with other features
        raises StateError. Leaving the loop early drops the batches read ahead.
        """
        self._check_open()
        if self._pipeline is not None:
            raise StateError(_ESTATE, "a pipeline over this collection is already running")
        return _Pipeline(self, batches, sparse or (lambda b: b)).run()

    # ---- rows, state_dict and checkpoints ----

    def _quiet(self) -> None:
        """No batch acquired (read_rows, write_rows and flush need that)."""
        self._check_open()
        self._release_held()

    def _table(self, name: str) -> Tuple[int, EmbeddingBagConfig]:
        return _table_named(self.configs, name)

    def read_rows(self, name: str, ids: Any, state: bool = False) -> Any:
        """float32 (n, dim) rows `ids` of table `name` as the next batch sees them
        (state=True: and their optimizer state)."""
        self._quiet()
        return self.cache.read_rows(self._table(name)[0], torch.as_tensor(ids), state=state)

    def write_rows(self, name: str, ids: Any, rows: torch.Tensor,
                   state: Optional[torch.Tensor] = None) -> None:
        self._quiet()
        self.cache.write_rows(self._table(name)[0], torch.as_tensor(ids), rows, state)

    def export_table(self, name: str, max_bytes: Optional[int] = None,
                     chunk_rows: int = 65536) -> torch.Tensor:
        """float32 (num_embeddings, dim): the whole table, read through the cache.

        Raises ember.TooBig when it needs more than max_bytes (default: half the
        memory available now)."""
        t, cfg = self._table(name)
        need = cfg.num_embeddings * cfg.embedding_dim * 4
        if max_bytes is None:
            max_bytes = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        if need > max_bytes:
            raise TooBig(_ETOOBIG, f"table {name!r} needs {need} bytes, more than "
                         f"{max_bytes}")
        return self._read_table(t, cfg, False, chunk_rows)[0]

    def _read_table(self, t: int, cfg: EmbeddingBagConfig, state: bool,
                    chunk_rows: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        self._quiet()
        n, dim = cfg.num_embeddings, cfg.embedding_dim
        sf = self.cache.tables[t].state_floats
        out = torch.empty(n, dim, dtype=torch.float32)
        st = torch.empty(n, sf, dtype=torch.float32) if state and sf else None
        for a in range(0, n, chunk_rows):
            b = min(n, a + chunk_rows)
            ids = torch.arange(a, b, dtype=torch.int64)
            if st is not None:
                rows, s = self.cache.read_rows(t, ids, state=True)
                st[a:b] = s
            else:
                rows = self.cache.read_rows(t, ids)
            out[a:b] = rows
        return out, st

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # nn.Module's hook
        for t, cfg in enumerate(self.configs):
            rows, st = self._read_table(t, cfg, True, 65536)
            destination[f"{prefix}tables.{cfg.name}.weight"] = rows
            if st is not None:
                destination[f"{prefix}tables.{cfg.name}.optimizer_state"] = st

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        self._quiet()

        def write(t: int, cfg: EmbeddingBagConfig, w: torch.Tensor,
                  st: Optional[torch.Tensor]) -> None:
            for a in range(0, cfg.num_embeddings, 65536):
                b = min(cfg.num_embeddings, a + 65536)
                ids = torch.arange(a, b, dtype=torch.int64)
                self.cache.write_rows(t, ids, w[a:b].to(torch.float32),
                                      None if st is None else st[a:b].to(torch.float32))

        _load_tables(self, state_dict, prefix, strict, missing_keys, unexpected_keys,
                     error_msgs, write)

    def flush(self) -> None:
        """Write every updated row back to the store."""
        self._quiet()
        self.cache.flush()

    def checkpoint(self) -> int:
        """Flush and take a store checkpoint; returns its id. A reopen of the store
        recovers the tables (and their optimizer state) as of this call."""
        self.flush()
        return self.store.checkpoint()

    def stats(self):
        return self.cache.stats()

    # ---- lifetime ----

    def _check_open(self) -> None:
        if self.cache.closed:
            raise StateError(_ESTATE, "the EmbeddingBagCollection is closed")

    def close(self) -> None:
        """Release any batch, flush and close the cache (twice is fine)."""
        if self.cache.closed:
            return
        if self._pipeline is not None:
            self._pipeline.stop()
        self._release_held()
        self._drain_unacquired()
        self.cache.close()

    def extra_repr(self) -> str:
        tabs = ", ".join(f"{c.name}({c.num_embeddings}x{c.embedding_dim},{c.pooling})"
                         for c in self.configs)
        return f"tables=[{tabs}], optimizer={self.optimizer_name}, lookahead={self.lookahead}"


def _parts(ebc: EmbeddingBagCollection, feats: List[Tuple[torch.Tensor, torch.Tensor]]) -> list:
    """The cache's push parts: (table, ids, feature name) per feature."""
    return [(ebc._part_table[p], values.numpy(), ebc.feature_names[p])
            for p, (values, _) in enumerate(feats)]


class _Pipeline:
    """The lookahead loader: a thread that reads batches ahead and pushes their ids,
    and the generator that yields them to the trainer in order.

    Invariants:
      1. Batches pushed and not released <= lookahead + 1 (the permits of `room`,
         taken by the loader before a push, given back by each release), so a push
         never finds the cache's window (lookahead + 2) full.
      2. `expected` lists, in push order, the features of the batches yielded and not
         yet forwarded; forward takes the head (_next_expected) and checks it got the
         same features.
      3. When the generator ends (exhausted, broken out of, or failed), the loader is
         stopped and every batch pushed and not acquired is acquired and released
         unchanged, so the cache is left with nothing pushed.
    """

    _END = object()

    def __init__(self, ebc: EmbeddingBagCollection, batches: Iterable[Any],
                 sparse: Callable[[Any], Mapping[str, Any]]) -> None:
        self.ebc = ebc
        self.batches = batches
        self.sparse = sparse
        self.room = threading.Semaphore(ebc.lookahead + 1)
        self.queue: "queue.Queue[Any]" = queue.Queue()
        self.stop_flag = threading.Event()
        self.expected: List[Tuple[Any, List[Tuple[torch.Tensor, torch.Tensor]], int]] = []
        self.pushed = 0          # batches the loader pushed
        self.acquired = 0        # batches forward (or a skip) acquired
        self.thread: Optional[threading.Thread] = None
        self.base = 0            # the cache's number of this pipeline's first batch

    # -- loader thread --

    def _load(self) -> None:
        try:
            for item in self.batches:
                if self.stop_flag.is_set():
                    return
                feats = self.ebc._features(self.sparse(item))
                while not self.room.acquire(timeout=0.05):
                    if self.stop_flag.is_set():
                        return
                if self.stop_flag.is_set():
                    return
                number = self.ebc.cache._c.push(_parts(self.ebc, feats))
                self.pushed += 1
                self.queue.put((item, feats, number))
            self.queue.put(self._END)
        except BaseException as e:  # handed to the trainer's thread
            self.queue.put(e)

    # -- trainer thread --

    def _released(self) -> None:
        self.room.release()

    def _next_expected(self, features: Mapping[str, Any]) -> Tuple[list, int]:
        if not self.expected:
            raise StateError(_ESTATE, "forward without a batch from the pipeline: call "
                             "forward once per batch it yields")
        raw, feats, number = self.expected[0]
        if features is not raw:
            mine = self.ebc._features(features)
            same = len(mine) == len(feats) and all(
                torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(mine, feats))
            if not same:
                raise StateError(_ESTATE, f"forward got features other than those of the "
                                 f"next batch the pipeline pushed (batch {number}): batches "
                                 "must be trained in the order the pipeline yields them")
        return feats, number

    def _took(self) -> None:
        """forward acquired the batch at the head of `expected`."""
        self.expected.pop(0)
        self.acquired += 1

    def _skip_unforwarded(self) -> None:
        """Yielded batches that got no forward go back unchanged."""
        while self.expected:
            self.ebc._release_held()
            batch = self.ebc.cache.acquire()
            self._took()
            self.ebc._release_batch(batch, dirty=False)

    def run(self) -> Iterator[Any]:
        ebc = self.ebc
        ebc._release_held()
        ebc._pipeline = self
        self.thread = threading.Thread(target=self._load, name="ember-lookahead", daemon=True)
        self.thread.start()
        try:
            while True:
                entry = self.queue.get()
                if entry is self._END:
                    break
                if isinstance(entry, BaseException):
                    raise entry
                item, feats, number = entry
                self.expected.append((self.sparse(item), feats, number))
                yield item
                self._skip_unforwarded()
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop the loader and hand back every batch it pushed (invariant 3)."""
        if self.ebc._pipeline is not self:
            return
        self.stop_flag.set()
        if self.thread is not None:
            self.thread.join()
        self.expected.clear()
        ebc = self.ebc
        try:
            ebc._release_held()
            while self.acquired < self.pushed:
                batch = ebc.cache.acquire()
                self.acquired += 1
                batch.release(dirty=False)
        finally:
            ebc._pipeline = None


def __getattr__(name: str) -> Any:
    """ShardedEmbeddingBagCollection and ShardError live in ember.sharded (imported on
    first use: it imports torch.distributed)."""
    if name in ("ShardedEmbeddingBagCollection", "ShardError"):
        from . import sharded
        return getattr(sharded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
