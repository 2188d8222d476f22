"""ember.sharded: an EmbeddingBagCollection sharded row-wise over torch.distributed ranks.

``ShardedEmbeddingBagCollection`` (also ``ember.torch.ShardedEmbeddingBagCollection``)
splits the rows of every table over the ranks of a process group: rank r keeps the
rows it owns in its own Ember store and cache (directory ``<path>/rank-<r>``), and
the collectives of the group it is given move ids, rows and gradients between ranks.
It opens no sockets of its own and runs no thread that calls a collective: every
collective runs on the caller's thread, in the same order on every rank.

The row-to-rank map is cyclic: row ``i`` of every table lives on rank ``i % world``,
where it is local row ``i // world``. It is a function of the row id and the world
size only (stable across runs and restarts with the same world size), costs one
integer division per lookup, gives every rank a dense range of local rows (so a
rank's cache and store are sized by its own rows: the cache keeps a word per row of
its tables), and spreads every run of consecutive ids evenly; ids that are
frequency-ranked (hot ids first, as many pipelines number them) would all land on
rank 0 with a block map. A rank's rows start from its own uniform init (a function of
the table's seed, the rank and the local row), so the initial tables depend on the
world size: load_state_dict starts every world size from the same rows.

One training step (all collectives are ``all_to_all_single`` with split sizes, which
gloo supports in torch 1.13, and nccl):

1. route: each rank splits the ids of its local batch by owner, part by part
   (a part is one feature); counts go to every owner (W * (P + 1) int64: P counts and
   a status per destination), then the ids themselves.
2. The owner pushes one cache batch per global step whose part p holds, for every
   source rank in rank order, that rank's ids of part p in its own order: the
   lookups of the single-process collection's global batch that it owns, in the
   same order. The lookahead pipeline does this ``lookahead`` steps ahead, so the
   owner's oracle sees the future of every rank.
3. lookup: the owner acquires the batch, gathers the rows and sends them back; the
   requester puts them into lookup order and pools them with ``F.embedding_bag``
   (the same rows in the same order: the same pooled values as one process).
4. backward: the requester turns each bag's gradient into one row gradient per
   lookup (exactly as ``EmbeddingBagCollection``), sends them to the owners in the
   order of the ids, with one flag per part saying whether the part had a gradient;
   the owner applies the fused optimizer part by part (duplicates summed in lookup
   order, as one process does) and releases the batch.

Gradients are summed over ranks, not averaged: a loss whose embedding gradients
should equal the single-process collection's over the global batch is each rank's
share of the global loss (``sum over local samples / global batch size``).

docs/sharding.md has the contract, the checkpoint protocol and the sizing notes.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .cache import EmbeddingCache, Table
from .errors import StateError
from .store import Store
from .torch import (_OPTIMIZERS, EmbeddingBagConfig, _feature, _load_tables, _parse_optimizer,
                    _table_named)

__all__ = ["ShardedEmbeddingBagCollection", "ShardError", "owner_of"]

_ESTATE = -30011
META_KEY = b"ember.sharded.meta"  # not 8 bytes long: never a row's key
_OK, _END, _FAILED = 1, 0, -1


class ShardError(RuntimeError):
    """A sharded collection's ranks disagree or a collective failed (a rank died, or
    did not answer within the process group's timeout). After a failed collective
    the collection is broken: every later call raises this again; close() works."""


def owner_of(ids: torch.Tensor, world: int) -> torch.Tensor:
    """The rank that owns each row id (the cyclic map: id % world)."""
    return torch.remainder(ids, world)


class _Route:
    """One rank's local batch split by owner: for part p, perm[p] orders its lookups
    by owner (stable), counts[d, p] of them go to rank d."""

    def __init__(self, feats: List[Tuple[torch.Tensor, torch.Tensor]], world: int) -> None:
        self.feats = feats
        nparts = len(feats)
        self.perm: List[torch.Tensor] = []
        self.counts = torch.zeros(world, nparts, dtype=torch.int64)
        chunks: List[List[torch.Tensor]] = [[] for _ in range(world)]
        for p, (values, _) in enumerate(feats):
            own = owner_of(values, world)
            if world == 1:
                perm = torch.arange(values.numel(), dtype=torch.int64)
            else:
                perm = torch.sort(own, stable=True)[1]
            cnt = torch.bincount(own, minlength=world)
            self.perm.append(perm)
            self.counts[:, p] = cnt
            local = torch.div(values.index_select(0, perm), world, rounding_mode="floor")
            for d, piece in enumerate(torch.split(local, cnt.tolist())):
                chunks[d].append(piece)
        self.send_ids = torch.cat([x for d in range(world) for x in chunks[d]]) if nparts \
            else torch.zeros(0, dtype=torch.int64)


class _Owned:
    """What an owner holds for one global step: per part, the ids it received (source
    rank order) and recv[s, p], how many came from rank s."""

    def __init__(self, parts: List[torch.Tensor], recv: torch.Tensor, number: int) -> None:
        self.parts = parts
        self.recv = recv
        self.number = number


class _Pending:
    """A pushed global step: this rank's route of its local batch and what it owns."""

    def __init__(self, raw: Any, route: _Route, owned: _Owned) -> None:
        self.raw = raw
        self.route = route
        self.owned = owned


class _ShardedLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, step: "_ShardedStep", placeholder: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.step = step
        return tuple(step.pooled)

    @staticmethod
    def backward(ctx, *grads: Optional[torch.Tensor]) -> Tuple[None, None]:
        step: _ShardedStep = ctx.step
        ctx.step = None
        step.backward(grads)
        return None, None


class _ShardedStep:
    """One global step on this rank: the owner's acquired batch and the requester's
    pooled outputs."""

    def __init__(self, ebc: "ShardedEmbeddingBagCollection", pend: _Pending, batch: Any) -> None:
        self.ebc = ebc
        self.pend = pend
        self.batch = batch
        self.pooled: List[torch.Tensor] = []
        world, cfgs = ebc.world, ebc._part_cfg
        t0 = time.perf_counter()
        mem = ebc.cache.memory
        owned = pend.owned
        # rows of each part, in the order the ids came (source rank after source rank)
        pieces: List[List[torch.Tensor]] = [[] for _ in range(world)]
        for p, cfg in enumerate(cfgs):
            slots = batch.part_slots(p)
            rows = mem.narrow(1, 0, cfg.embedding_dim).index_select(0, slots)
            for s, piece in enumerate(torch.split(rows, owned.recv[:, p].tolist())):
                pieces[s].append(piece.reshape(-1))
        send = torch.cat([x for s in range(world) for x in pieces[s]])
        dims = torch.tensor([c.embedding_dim for c in cfgs], dtype=torch.int64)
        out_split = (pend.route.counts * dims).sum(1).tolist()
        in_split = (owned.recv * dims).sum(1).tolist()
        t1 = time.perf_counter()
        ebc._time["lookup"] += t1 - t0
        got = ebc._exchange(send, out_split, in_split, "rows")
        t2 = time.perf_counter()
        # back into each part's lookup order, then pooled as the single-process module
        route = pend.route
        per_src = torch.split(got, out_split)
        chunks: List[List[torch.Tensor]] = [[] for _ in cfgs]
        for d in range(world):
            sizes = (route.counts[d] * dims).tolist()
            for p, piece in enumerate(torch.split(per_src[d], sizes)):
                chunks[p].append(piece.view(-1, cfgs[p].embedding_dim))
        for p, cfg in enumerate(cfgs):
            values, offsets = route.feats[p]
            rows = torch.empty(values.numel(), cfg.embedding_dim, dtype=torch.float32)
            rows[route.perm[p]] = torch.cat(chunks[p])
            idx = torch.arange(values.numel(), dtype=torch.int64)
            self.pooled.append(F.embedding_bag(idx, rows, offsets, mode=cfg.pooling))
        ebc._time["compute"] += time.perf_counter() - t2

    def backward(self, grads: Sequence[Optional[torch.Tensor]]) -> None:
        ebc = self.ebc
        if self.batch is None or self.batch.released:
            raise StateError(_ESTATE, "backward ran twice over one Ember batch, or after the "
                             "batch was handed back (a later forward releases an earlier batch)")
        t0 = time.perf_counter()
        world, cfgs, route = ebc.world, ebc._part_cfg, self.pend.route
        nparts = len(cfgs)
        flags = torch.zeros(nparts, dtype=torch.float32)
        per_dest: List[List[torch.Tensor]] = [[] for _ in range(world)]
        for p, cfg in enumerate(cfgs):
            values, offsets = route.feats[p]
            n, dim = values.numel(), cfg.embedding_dim
            g = grads[p] if p < len(grads) else None
            if g is None or n == 0:
                rg = torch.zeros(n, dim, dtype=torch.float32)
            else:
                flags[p] = 1.0
                nb = offsets.numel()
                lengths = torch.diff(offsets, append=torch.tensor([n], dtype=torch.int64))
                bag = torch.repeat_interleave(torch.arange(nb, dtype=torch.int64), lengths)
                g = g.to(torch.float32)
                if cfg.pooling == "mean":
                    g = g / lengths.clamp(min=1).to(torch.float32).unsqueeze(1)
                rg = g.index_select(0, bag).index_select(0, route.perm[p])
            for d, piece in enumerate(torch.split(rg, route.counts[:, p].tolist())):
                per_dest[d].append(piece.reshape(-1))
        send = torch.cat([x for d in range(world) for x in [flags] + per_dest[d]])
        dims = torch.tensor([c.embedding_dim for c in cfgs], dtype=torch.int64)
        in_split = ((route.counts * dims).sum(1) + nparts).tolist()
        owned = self.pend.owned
        out_split = ((owned.recv * dims).sum(1) + nparts).tolist()
        t1 = time.perf_counter()
        ebc._time["compute"] += t1 - t0
        got = ebc._exchange(send, out_split, in_split, "grads")
        t2 = time.perf_counter()
        has = torch.zeros(nparts, dtype=torch.bool)
        parts: List[List[torch.Tensor]] = [[] for _ in cfgs]
        for s, block in enumerate(torch.split(got, out_split)):
            has |= block[:nparts] != 0
            sizes = (owned.recv[s] * dims).tolist()
            for p, piece in enumerate(torch.split(block[nparts:], sizes)):
                parts[p].append(piece.view(-1, cfgs[p].embedding_dim))
        for p in range(nparts):
            if bool(has[p]) and owned.parts[p].numel():
                self.batch.apply(p, torch.cat(parts[p]).contiguous(), ebc.lr, ebc.eps,
                                 ebc.weight_decay)
        ebc._release(self, dirty=True)
        ebc._time["lookup"] += time.perf_counter() - t2


class ShardedEmbeddingBagCollection(nn.Module):
    """EmbeddingBagCollection's tables sharded row-wise over a torch.distributed group.

    tables: EmbeddingBagConfig, as EmbeddingBagCollection (every rank passes the same).
    path: a directory; this rank's store is ``<path>/rank-<rank>`` (a local disk of
        each machine, or a shared one). When every rank finds its store there, the
        collection resumes from their last global checkpoint; when none does, it
        starts anew; anything else is a ShardError on every rank.
    cache_rows: rows of this rank's cache (over all tables).
    process_group: the group whose ranks share the tables (default: the world).
        Every rank of it must construct the collection and then call forward,
        backward, pipeline steps, checkpoint, state_dict and export_table in the same
        order: they are collectives.
    lookahead, optimizer, weight_decay, prefetch_batches, prefetch_depth: as
        EmbeddingBagCollection.
    store_options: ember.Store options of each rank's store (close_checkpoint and
        checkpoint_interval_ms are set by the collection: its stores checkpoint only
        when checkpoint() is called, so that they stay in step).

    forward(features) takes this rank's local batch (as EmbeddingBagCollection) and
    returns its pooled rows; backward of the outputs sends the gradients to the
    owners, whose caches apply the fused optimizer.
    """

    def __init__(self, tables: Sequence[EmbeddingBagConfig], path: str, cache_rows: int,
                 process_group: Any = None, lookahead: int = 8,
                 optimizer: Any = ("sgd", 0.01), weight_decay: float = 0.0,
                 prefetch_batches: int = 0, prefetch_depth: int = 0,
                 store_options: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise ShardError("torch.distributed is not initialised: call "
                             "init_process_group first (the collection uses its group)")
        tables = tuple(tables)
        if not tables:
            raise ValueError("a ShardedEmbeddingBagCollection needs at least one table")
        if int(lookahead) < 1:
            raise ValueError("lookahead must be at least 1")
        if int(cache_rows) < 1:
            raise ValueError("cache_rows must be at least 1")
        opt, self.lr, self.eps = _parse_optimizer(optimizer)
        self.weight_decay = float(weight_decay)
        if not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise ValueError("weight_decay must be finite and >= 0")
        self.optimizer_name = opt
        self.configs = tables
        self.lookahead = int(lookahead)
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        # nccl moves CUDA tensors only: the exchanges go through the rank's current
        # device there; gloo (and mpi) take the CPU tensors as they are.
        self._device = torch.device("cpu")
        if dist.get_backend(process_group) == "nccl":
            self._device = torch.device("cuda", torch.cuda.current_device())
        self.feature_names: List[str] = []
        self._part_table: List[int] = []
        self._part_cfg: List[EmbeddingBagConfig] = []
        for t, cfg in enumerate(tables):
            if cfg.num_embeddings >= 1 << 48:
                raise ValueError(f"table {cfg.name!r}: at most 2^48 rows")
            for f in cfg.features:
                if f in self.feature_names:
                    raise ValueError(f"feature {f!r} appears twice")
                self.feature_names.append(f)
                self._part_table.append(t)
                self._part_cfg.append(cfg)
        self._broken: Optional[str] = None
        self._time = {"lookup": 0.0, "comm": 0.0, "compute": 0.0}
        self._bytes = {"ids": 0, "rows": 0, "grads": 0, "counts": 0}
        self._steps = 0
        self.path = os.fspath(path)
        self.store_path = os.path.join(self.path, f"rank-{self.rank}")
        opts = dict(store_options or {})
        for k in ("close_checkpoint", "checkpoint_interval_ms", "create", "truncate", "read_only"):
            if k in opts:
                raise ValueError(f"store_options: {k!r} is set by the collection")
        self.checkpoint_info = self._open_store(opts)
        self.seq = int(self.checkpoint_info["seq"])
        specs = []
        for t, cfg in enumerate(tables):
            scale = cfg.init_scale or math.sqrt(1.0 / cfg.num_embeddings)
            seed = cfg.init_seed if cfg.init_seed is not None else 0x9E3779B97F4A7C15 ^ t
            # local rows: each rank's rows get their own stream of initial values
            seed = (seed + 0x632BE59BD9B4E019 * (self.rank + 1)) % (1 << 64)
            specs.append(Table(cfg.name, max(1, self._local_rows(cfg)), cfg.embedding_dim,
                               storage=cfg.storage, optimizer=_OPTIMIZERS[opt],
                               init="uniform", init_scale=scale, init_seed=seed))
        try:
            self.cache = EmbeddingCache(self.store, specs, capacity=int(cache_rows),
                                        window=self.lookahead + 2,
                                        prefetch_batches=int(prefetch_batches),
                                        prefetch_depth=int(prefetch_depth), arrays="torch")
        except BaseException:
            self.store.close()
            raise
        self._placeholder = torch.zeros(0, requires_grad=True)
        self._held: Optional[_ShardedStep] = None
        self._pipeline: Optional[_ShardedPipeline] = None
        self._unacquired = 0

    # ---- stores and their agreement ----

    def _tables_meta(self) -> list:
        return [[c.name, c.num_embeddings, c.embedding_dim, c.pooling, c.storage,
                 list(c.features), c.init_scale, c.init_seed] for c in self.configs] + \
            [self.optimizer_name]

    def _open_store(self, opts: Dict[str, Any]) -> Dict[str, Any]:
        """Open this rank's store and check, with every rank, that the stores belong
        together: all present (resume) or none (a new run), written by this many
        ranks, at the same global checkpoint, with the same tables."""
        exists = os.path.exists(os.path.join(self.store_path, "ember.super"))
        flags = self._gather_ints([1 if exists else 0])
        have = [r for r in range(self.world) if flags[r][0]]
        if have and len(have) != self.world:
            missing = [r for r in range(self.world) if not flags[r][0]]
            raise ShardError(f"rank {self.rank}: ranks {missing} found no store under "
                             f"{self.path!r} (rank-<r> directories) while ranks {have} did: "
                             "a rank's directory is missing, so the tables cannot be "
                             "resumed; restore it, or start anew in an empty directory")
        os.makedirs(self.store_path, exist_ok=True)
        self.store = Store(self.store_path, close_checkpoint=False, checkpoint_interval_ms=0,
                           **opts)
        try:
            meta = {"seq": 0, "world": self.world, "rank": self.rank,
                    "tables": self._tables_meta(), "extra": None}
            raw = self.store.get(META_KEY)
            if raw is not None:
                meta = json.loads(bytes(raw).decode())
            world_bad = 1 if meta["world"] != self.world or meta["rank"] != self.rank else 0
            tables_bad = 1 if meta["tables"] != json.loads(json.dumps(self._tables_meta())) else 0
            info = self._gather_ints([int(meta["seq"]), int(meta["world"]), world_bad,
                                      tables_bad])
            if any(x[2] for x in info):
                worlds = sorted({x[1] for x in info})
                raise ShardError(f"rank {self.rank}: the stores under {self.path!r} were "
                                 f"written by a collection of {worlds} ranks; this process "
                                 f"group has {self.world} (resharding is not supported: "
                                 "restart with the same world size)")
            if any(x[3] for x in info):
                raise ShardError(f"rank {self.rank}: the stores under {self.path!r} hold "
                                 "other tables (names, sizes, pooling, storage or optimizer "
                                 "differ from this collection's)")
            seqs = [x[0] for x in info]
            if len(set(seqs)) != 1:
                raise ShardError(f"rank {self.rank}: the ranks' stores hold different global "
                                 f"checkpoints {dict(enumerate(seqs))}: the last checkpoint "
                                 "did not complete on every rank")
            return meta
        except BaseException:
            self.store.close()
            raise

    # ---- collectives ----

    def _fail(self, what: str, e: BaseException) -> ShardError:
        self._broken = (f"rank {self.rank} of {self.world}: the collective '{what}' failed "
                        f"(another rank died, or did not answer within the process group's "
                        f"timeout): {type(e).__name__}: {e}")
        return ShardError(self._broken)

    def _check_ok(self) -> None:
        if self._broken is not None:
            raise ShardError(self._broken)

    def _exchange(self, send: torch.Tensor, out_split: List[int], in_split: List[int],
                  what: str) -> torch.Tensor:
        """all_to_all_single: in_split[d] elements of send go to rank d; out_split[s]
        come from rank s."""
        self._check_ok()
        out = torch.empty(sum(out_split), dtype=send.dtype)
        t0 = time.perf_counter()
        try:
            if self.world == 1:
                out.copy_(send)
            elif self._device.type == "cpu":
                dist.all_to_all_single(out, send.contiguous(), out_split, in_split,
                                       group=self.group)
            else:
                dev_out = torch.empty(out.numel(), dtype=send.dtype, device=self._device)
                dist.all_to_all_single(dev_out, send.to(self._device), out_split, in_split,
                                       group=self.group)
                out.copy_(dev_out)
        except RuntimeError as e:
            raise self._fail(what, e) from e
        self._time["comm"] += time.perf_counter() - t0
        self._bytes[what] += (send.numel() - in_split[self.rank]) * send.element_size()
        return out

    def _gather_ints(self, values: List[int]) -> List[List[int]]:
        """Every rank's values (all_gather of int64)."""
        self._check_ok()
        mine = torch.tensor(values, dtype=torch.int64)
        if self.world == 1:
            return [values]
        return [x.tolist() for x in self._all_gather(mine)]

    def _all_gather(self, mine: torch.Tensor) -> List[torch.Tensor]:
        mine = mine.to(self._device)
        out = [torch.empty_like(mine) for _ in range(self.world)]
        try:
            dist.all_gather(out, mine, group=self.group)
        except RuntimeError as e:
            raise self._fail("all_gather", e) from e
        return [x.cpu() for x in out]

    def _push_step(self, raw: Any, route: Optional[_Route], status: int) -> Tuple[int, Optional[_Pending]]:
        """One routing round (a collective): every rank's status and, when every rank
        has a batch, the ids to their owners and the owner's cache push.

        Returns (the agreed status, the pending step). Statuses: _OK on every rank
        pushes; _END on every rank ends; otherwise every rank raises ShardError
        (the failing rank's loader raised its own error before)."""
        world, nparts = self.world, len(self._part_cfg)
        header = torch.zeros(world, nparts + 1, dtype=torch.int64)
        header[:, 0] = status
        if route is not None:
            header[:, 1:] = route.counts
        got = self._exchange(header.reshape(-1), [nparts + 1] * world, [nparts + 1] * world,
                             "counts").view(world, nparts + 1)
        statuses = got[:, 0].tolist()
        if any(s == _FAILED for s in statuses):
            bad = [r for r, s in enumerate(statuses) if s == _FAILED]
            if status == _FAILED:
                return _FAILED, None
            raise ShardError(f"rank {self.rank}: the batches of ranks {bad} failed to load "
                             "(their loader raised: see their error)")
        if any(s == _END for s in statuses):
            if all(s == _END for s in statuses):
                return _END, None
            ended = [r for r, s in enumerate(statuses) if s == _END]
            raise ShardError(f"rank {self.rank}: ranks {ended} ran out of batches while the "
                             "others had more: every rank must train the same number of steps")
        recv = got[:, 1:].contiguous()
        assert route is not None
        ids = self._exchange(route.send_ids, recv.sum(1).tolist(), route.counts.sum(1).tolist(),
                             "ids")
        t0 = time.perf_counter()
        per_src = torch.split(ids, recv.sum(1).tolist())
        chunks: List[List[torch.Tensor]] = [[] for _ in range(nparts)]
        for s in range(world):
            for p, piece in enumerate(torch.split(per_src[s], recv[s].tolist())):
                chunks[p].append(piece)
        parts = [torch.cat(c) if c else torch.zeros(0, dtype=torch.int64) for c in chunks]
        number = self.cache._c.push([(self._part_table[p], parts[p].numpy(),
                                      self.feature_names[p]) for p in range(nparts)])
        self._time["lookup"] += time.perf_counter() - t0
        return _OK, _Pending(raw, route, _Owned(parts, recv, number))

    # ---- forward ----

    def _features(self, features: Mapping[str, Any]) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        if not isinstance(features, Mapping):
            raise TypeError("features must be a mapping {feature name: ids}")
        unknown = set(features) - set(self.feature_names)
        if unknown:
            raise ValueError(f"unknown features: {sorted(unknown)}")
        out = []
        for p, f in enumerate(self.feature_names):
            if f not in features:
                raise ValueError(f"feature {f!r} is missing")
            values, offsets = _feature(f, features[f])
            n = self._part_cfg[p].num_embeddings
            if values.numel():
                lo, hi = int(values.min()), int(values.max())
                if lo < 0 or hi >= n:
                    i = int(((values < 0) | (values >= n)).nonzero()[0])
                    raise ValueError(f"feature {f!r} (table {self._part_cfg[p].name!r}) "
                                     f"ids[{i}]: {int(values[i])} is out of range [0, {n})")
            out.append((values, offsets))
        return out

    def route(self, features: Mapping[str, Any]) -> _Route:
        """The local batch checked and split by owner (no collective)."""
        return _Route(self._features(features), self.world)

    def forward(self, features: Mapping[str, Any]) -> Dict[str, torch.Tensor]:
        self._check_open()
        self._release_held()
        pipe = self._pipeline
        if pipe is not None:
            pend = pipe._next_expected(features)
        else:
            self._drain_unacquired()
            try:
                route, status = self.route(features), _OK
            except (ValueError, TypeError):
                self._push_step(None, None, _FAILED)  # the others fail too, not hang
                raise
            status, pend = self._push_step(features, route, status)
            self._unacquired += 1
        batch = self.cache.acquire()
        if pipe is not None:
            pipe._took()
        else:
            self._unacquired -= 1
        if batch.number != pend.owned.number:
            batch.release(dirty=False)
            raise StateError(_ESTATE, f"the cache handed out batch {batch.number} where "
                             f"batch {pend.owned.number} was expected")
        try:
            step = _ShardedStep(self, pend, batch)
        except BaseException:
            self._release_batch(batch, dirty=False)
            raise
        self._steps += 1
        if torch.is_grad_enabled() and self.training:
            self._held = step
            outs = _ShardedLookup.apply(step, self._placeholder)
        else:
            outs = step.pooled
            self._release(step, dirty=False)
        return dict(zip(self.feature_names, outs))

    def _release_batch(self, batch: Any, dirty: bool) -> None:
        batch.release(dirty=dirty)
        if self._pipeline is not None:
            self._pipeline._released()

    def _release(self, step: _ShardedStep, dirty: bool) -> None:
        if self._held is step:
            self._held = None
        batch, step.batch = step.batch, None
        if batch is not None and not batch.released:
            self._release_batch(batch, dirty)

    def _release_held(self) -> None:
        if self._held is not None:
            self._release(self._held, dirty=False)

    def _drain_unacquired(self) -> None:
        while self._unacquired:
            batch = self.cache.acquire()
            self._unacquired -= 1
            batch.release(dirty=False)

    # ---- the lookahead pipeline ----

    def pipeline(self, batches: Iterable[Any],
                 sparse: Optional[Callable[[Any], Mapping[str, Any]]] = None) -> Iterator[Any]:
        """Yield this rank's `batches` in order while the ids of the next `lookahead`
        steps of every rank are already pushed to their owners' caches.

        A loader thread reads and routes this rank's batches ahead (no collective);
        the routing rounds run on the trainer's thread between steps. Every rank must
        give the same number of batches (else ShardError on every rank); a batch
        that fails to load (bad ids) raises its error on its rank and ShardError on
        the others, at that batch.
        """
        self._check_open()
        if self._pipeline is not None:
            raise StateError(_ESTATE, "a pipeline over this collection is already running")
        return _ShardedPipeline(self, batches, sparse or (lambda b: b)).run()

    # ---- tables, state_dict, checkpoints ----

    def _quiet(self) -> None:
        self._check_open()
        self._release_held()

    def _table(self, name: str) -> Tuple[int, EmbeddingBagConfig]:
        return _table_named(self.configs, name)

    def _local_rows(self, cfg: EmbeddingBagConfig) -> int:
        """Rows of table cfg this rank owns: ids rank, rank + world, ..."""
        return max(0, (cfg.num_embeddings - self.rank + self.world - 1) // self.world)

    def owned_ids(self, name: str) -> torch.Tensor:
        """The row ids of table `name` this rank owns."""
        _, cfg = self._table(name)
        return torch.arange(self.rank, cfg.num_embeddings, self.world, dtype=torch.int64)

    def read_local_rows(self, name: str, ids: Any, state: bool = False) -> Any:
        """Rows `ids` (owned by this rank) of table `name`, read through this rank's
        cache (no collective)."""
        self._quiet()
        t, cfg = self._table(name)
        ids = torch.as_tensor(ids, dtype=torch.int64)
        if ids.numel() and bool((owner_of(ids, self.world) != self.rank).any()):
            raise ValueError(f"table {name!r}: ids not owned by rank {self.rank}")
        return self.cache.read_rows(t, torch.div(ids, self.world, rounding_mode="floor"),
                                    state=state)

    def _gather_table(self, t: int, cfg: EmbeddingBagConfig, state: bool
                      ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The whole table on every rank (a collective: all_gather of the shards)."""
        self._quiet()
        n, dim, world = cfg.num_embeddings, cfg.embedding_dim, self.world
        sf = self.cache.tables[t].state_floats if state else 0
        width = dim + sf
        per = (n + world - 1) // world
        mine = torch.zeros(per, width, dtype=torch.float32)
        ids = torch.arange(self._local_rows(cfg), dtype=torch.int64)  # local ids
        for a in range(0, ids.numel(), 65536):
            chunk = ids[a:a + 65536]
            if sf:
                rows, st = self.cache.read_rows(t, chunk, state=True)
                mine[a:a + chunk.numel(), :dim] = rows
                mine[a:a + chunk.numel(), dim:] = st
            else:
                mine[a:a + chunk.numel(), :dim] = self.cache.read_rows(t, chunk)
        if world == 1:
            full = mine
        else:
            parts = self._all_gather(mine)
            full = torch.stack(parts, dim=1).reshape(per * world, width)[:n]
        full = full.contiguous()
        return full[:, :dim].contiguous(), (full[:, dim:].contiguous() if sf else None)

    def export_table(self, name: str) -> torch.Tensor:
        """float32 (num_embeddings, dim): the whole table, on every rank (a
        collective: every rank reads its rows and all_gathers them)."""
        t, cfg = self._table(name)
        return self._gather_table(t, cfg, False)[0]

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for t, cfg in enumerate(self.configs):
            rows, st = self._gather_table(t, cfg, True)
            destination[f"{prefix}tables.{cfg.name}.weight"] = rows
            if st is not None:
                destination[f"{prefix}tables.{cfg.name}.optimizer_state"] = st

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        """Every rank takes the whole state dict and writes the rows it owns."""
        self._quiet()

        def write(t: int, cfg: EmbeddingBagConfig, w: torch.Tensor,
                  st: Optional[torch.Tensor]) -> None:
            ids = self.owned_ids(cfg.name)
            for a in range(0, ids.numel(), 65536):
                chunk = ids[a:a + 65536]
                local = torch.div(chunk, self.world, rounding_mode="floor")
                self.cache.write_rows(t, local, w[chunk].to(torch.float32),
                                      None if st is None else st[chunk].to(torch.float32))

        _load_tables(self, state_dict, prefix, strict, missing_keys, unexpected_keys,
                     error_msgs, write)

    def checkpoint(self, extra: Any = None) -> int:
        """A global checkpoint (a collective): every rank flushes its cache, records
        the checkpoint's number (and `extra`, any JSON value: the step, say) in its
        store and takes a store checkpoint; the ranks then check they agree. Returns
        the number, which a restarted collection finds in checkpoint_info["seq"]
        (with "extra"). Writes after the last global checkpoint are dropped at close.
        """
        self._quiet()
        self._gather_ints([self.seq])  # every rank is here: nothing is in flight
        seq = self.seq + 1
        self.cache.flush()
        meta = {"seq": seq, "world": self.world, "rank": self.rank,
                "tables": self._tables_meta(), "extra": extra}
        self.store.put(META_KEY, json.dumps(meta).encode())
        self.store.checkpoint()
        seqs = [x[0] for x in self._gather_ints([seq])]
        if len(set(seqs)) != 1:
            raise ShardError(f"rank {self.rank}: ranks took different checkpoints {seqs}")
        self.seq = seq
        self.checkpoint_info = meta
        return seq

    def flush(self) -> None:
        """Write this rank's updated rows back to its store (no collective)."""
        self._quiet()
        self.cache.flush()

    def stats(self):
        """This rank's cache statistics."""
        return self.cache.stats()

    def timings(self) -> Dict[str, Any]:
        """This rank's seconds in lookup (cache push, acquire, gather, apply),
        communication (the all-to-alls) and compute (routing, pooling, gradients),
        and the bytes it sent to other ranks, by kind, since the collection opened."""
        return {"seconds": dict(self._time), "bytes_sent": dict(self._bytes),
                "steps": self._steps}

    # ---- lifetime ----

    def _check_open(self) -> None:
        if self.cache.closed:
            raise StateError(_ESTATE, "the ShardedEmbeddingBagCollection is closed")
        self._check_ok()

    def close(self) -> None:
        """Close this rank's cache and store without a checkpoint (no collective):
        a reopen resumes from the last global checkpoint. Twice is fine."""
        if not self.cache.closed:
            if self._pipeline is not None:
                self._pipeline.stop()
            try:  # local: acquire and release what is pushed, no collective
                self._release_held()
                self._drain_unacquired()
            finally:
                self.cache.close()
        if not self.store.closed:
            self.store.close()

    def extra_repr(self) -> str:
        tabs = ", ".join(f"{c.name}({c.num_embeddings}x{c.embedding_dim},{c.pooling})"
                         for c in self.configs)
        return (f"tables=[{tabs}], rank={self.rank}/{self.world}, optimizer="
                f"{self.optimizer_name}, lookahead={self.lookahead}")


class _ShardedPipeline:
    """A loader thread reads and routes this rank's batches ahead (local work only);
    the trainer's thread runs the routing rounds (collectives) between steps.

    Invariants:
      1. Pushed and not released <= lookahead + 1 (the cache's window is
         lookahead + 2): a round runs after the batch trained is released.
      2. `pending` holds, in order, the pushed steps not yet acquired; forward takes
         the head and checks its features are the yielded batch's.
      3. Every rank runs the same rounds: a round's statuses are every rank's, so
         all ranks stop pushing at the same step (end or a failed load).
      4. At the end (exhausted, broken out of, failed) the loader stops and every
         pushed step not acquired is acquired and released unchanged.
    """

    def __init__(self, ebc: ShardedEmbeddingBagCollection, batches: Iterable[Any],
                 sparse: Callable[[Any], Mapping[str, Any]]) -> None:
        self.ebc = ebc
        self.batches = batches
        self.sparse = sparse
        self.queue: "queue.Queue[Any]" = queue.Queue(maxsize=ebc.lookahead + 1)
        self.stop_flag = threading.Event()
        self.pending: List[Tuple[Any, _Pending]] = []
        self.yielded: List[_Pending] = []
        self.pushed = 0
        self.acquired = 0
        self.thread: Optional[threading.Thread] = None
        self.done = False
        self.error: Optional[BaseException] = None

    def _put(self, x: Any) -> bool:
        while not self.stop_flag.is_set():
            try:
                self.queue.put(x, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def _load(self) -> None:
        try:
            for item in self.batches:
                if self.stop_flag.is_set():
                    return
                route = self.ebc.route(self.sparse(item))
                if not self._put((item, route)):
                    return
            self._put(None)
        except BaseException as e:  # the round says so to every rank
            self._put(e)

    def _round(self) -> None:
        """Push one more step (a collective), unless the pipeline is done."""
        if self.done:
            return
        entry = self.queue.get()
        if entry is None:
            status, pend = self.ebc._push_step(None, None, _END)
        elif isinstance(entry, BaseException):
            self.ebc._push_step(None, None, _FAILED)
            self.done, self.error = True, entry
            return
        else:
            try:
                status, pend = self.ebc._push_step(entry[0], entry[1], _OK)
            except ShardError as e:
                self.done, self.error = True, e
                return
        if status != _OK:
            self.done = True
            return
        self.pushed += 1
        self.pending.append((entry[0], pend))

    def _released(self) -> None:
        pass

    def _next_expected(self, features: Mapping[str, Any]) -> _Pending:
        if not self.yielded:
            raise StateError(_ESTATE, "forward without a batch from the pipeline: call "
                             "forward once per batch it yields")
        pend = self.yielded[0]
        if features is not pend.raw:
            mine = self.ebc._features(features)
            feats = pend.route.feats
            same = len(mine) == len(feats) and all(
                torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(mine, feats))
            if not same:
                raise StateError(_ESTATE, f"forward got features other than those of the "
                                 f"next batch the pipeline pushed (batch {pend.owned.number}): "
                                 "batches must be trained in the order the pipeline yields them")
        return pend

    def _took(self) -> None:
        self.yielded.pop(0)
        self.acquired += 1

    def _skip_unforwarded(self) -> None:
        while self.yielded:
            self.ebc._release_held()
            batch = self.ebc.cache.acquire()
            self._took()
            batch.release(dirty=False)

    def run(self) -> Iterator[Any]:
        ebc = self.ebc
        ebc._release_held()
        ebc._drain_unacquired()
        ebc._pipeline = self
        self.thread = threading.Thread(target=self._load, name="ember-sharded-lookahead",
                                       daemon=True)
        self.thread.start()
        try:
            for _ in range(ebc.lookahead + 1):
                self._round()
            while self.pending:
                item, pend = self.pending.pop(0)
                pend.raw = self.sparse(item)
                self.yielded.append(pend)
                yield item
                ebc._release_held()
                self._skip_unforwarded()
                self._round()
            if self.error is not None:
                raise self.error
        finally:
            self.stop()

    def stop(self) -> None:
        if self.ebc._pipeline is not self:
            return
        self.stop_flag.set()
        if self.thread is not None:
            self.thread.join()
        self.yielded.clear()
        self.pending.clear()
        ebc = self.ebc
        try:
            if not ebc.cache.closed:
                ebc._release_held()
                while self.acquired < self.pushed:
                    batch = ebc.cache.acquire()
                    self.acquired += 1
                    batch.release(dirty=False)
        finally:
            ebc._pipeline = None
