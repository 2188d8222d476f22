#!/usr/bin/env python3
"""DLRM on a Criteo-like synthetic stream, its embedding tables in an Ember store.

The model is DLRM's: a bottom MLP over 13 dense features, one pooled embedding per
sparse feature (ember.torch.EmbeddingBagCollection: the tables live in the store, an
in-memory cache of a tenth of their rows is kept ahead of training by the lookahead
pipeline, and the embedding optimizer runs inside backward), the pairwise dot-product
interaction, and a top MLP to one logit. The stream is synthetic: Zipf-skewed ids
(hot ids scattered over each table, as in Criteo), and labels drawn from a hidden
logistic model of the ids and dense features, so there is something to learn: the
printed loss goes down.

    python3 examples/dlrm_synthetic.py                  # a few seconds
    python3 examples/dlrm_synthetic.py --steps 2000 --rows 1000000

Needs the ember package on PYTHONPATH (build/release/python after tools/build).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from typing import Dict, Iterator, List, Tuple

import numpy as np
import torch
from torch import nn

import ember
from ember.torch import EmbeddingBagCollection, EmbeddingBagConfig

DENSE = 13


def mlp(sizes: List[int], last_act: bool) -> nn.Sequential:
    layers: List[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """Bottom MLP, embeddings (any module mapping features to {name: (B, dim)}),
    dot interaction, top MLP. Dense parameters only: the tables are the embedding
    module's business."""

    def __init__(self, embeddings: nn.Module, features: List[str], dim: int) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.features = features
        self.bottom = mlp([DENSE, 64, dim], last_act=True)
        n = len(features) + 1
        self.pairs = torch.triu_indices(n, n, offset=1)
        self.top = mlp([dim + n * (n - 1) // 2, 64, 1], last_act=False)

    def forward(self, dense: torch.Tensor, sparse: Dict[str, Tuple[torch.Tensor, torch.Tensor]]
                ) -> torch.Tensor:
        x = self.bottom(dense)
        pooled = self.embeddings(sparse)
        z = torch.stack([x] + [pooled[f] for f in self.features], dim=1)  # (B, n, dim)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


class DenseBags(nn.Module):
    """The same tables as plain in-memory nn.EmbeddingBag (sparse gradients)."""

    def __init__(self, tables: List[EmbeddingBagConfig]) -> None:
        super().__init__()
        self.bags = nn.ModuleDict({t.name: nn.EmbeddingBag(t.num_embeddings, t.embedding_dim,
                                                           mode=t.pooling, sparse=True)
                                   for t in tables})
        for b in self.bags.values():
            nn.init.uniform_(b.weight, -math.sqrt(1 / b.num_embeddings),
                             math.sqrt(1 / b.num_embeddings))

    def forward(self, sparse):
        return {name: bag(*sparse[name]) for name, bag in self.bags.items()}


class Stream:
    """Criteo-like batches: (dense (B, 13) float32, {feature: (ids, offsets)}, labels).

    Ids are Zipf(alpha) ranks mapped through a fixed permutation per table; each
    sample has 1..max_bag ids per feature. Labels: Bernoulli(sigmoid(logit)) with
    logit = sum over features of a hidden score of each id (mean over the bag) +
    dense . v, so the model can learn the hidden scores."""

    def __init__(self, tables: int, rows: int, batch: int, seed: int, alpha: float = 1.05,
                 max_bag: int = 2) -> None:
        self.tables, self.rows, self.batch = tables, rows, batch
        self.alpha, self.max_bag = alpha, max_bag
        self.rng = np.random.default_rng(seed)
        hidden = np.random.default_rng(seed ^ 0x5EED)
        self.perm = [hidden.permutation(rows) for _ in range(tables)]
        self.score = [hidden.normal(0, 2.0, rows).astype(np.float32) for _ in range(tables)]
        self.v = hidden.normal(0, 0.5, DENSE).astype(np.float32)

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, dict, torch.Tensor]]:
        while True:
            yield self.next_batch()

    def next_batch(self):
        b, rng = self.batch, self.rng
        dense = rng.standard_normal((b, DENSE)).astype(np.float32)
        logit = dense @ self.v
        sparse = {}
        for t in range(self.tables):
            lengths = rng.integers(1, self.max_bag + 1, size=b)
            ranks = (rng.zipf(self.alpha, size=int(lengths.sum())) - 1) % self.rows
            ids = self.perm[t][ranks].astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            logit += np.add.reduceat(self.score[t][ids], offsets) / lengths
            sparse[f"f{t}"] = (torch.from_numpy(ids), torch.from_numpy(offsets))
        p = 1 / (1 + np.exp(-logit / math.sqrt(self.tables)))
        labels = (rng.random(b) < p).astype(np.float32)
        return torch.from_numpy(dense), sparse, torch.from_numpy(labels)


def table_configs(tables: int, rows: int, dim: int) -> List[EmbeddingBagConfig]:
    return [EmbeddingBagConfig(f"f{t}", rows, dim, pooling="mean") for t in range(tables)]


def main(argv=None) -> Dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--rows", type=int, default=20000, help="rows per table")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--cache-fraction", type=float, default=0.1)
    ap.add_argument("--lookahead", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.1, help="embedding Adagrad's lr")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default=None, help="store directory (default: a temporary one)")
    ap.add_argument("--print-every", type=int, default=50)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    tmp = None
    path = args.dir
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="ember-dlrm-")
        path = os.path.join(tmp.name, "store")
    cfgs = table_configs(args.tables, args.rows, args.dim)
    cache_rows = max(1, int(args.cache_fraction * args.tables * args.rows))
    print(f"DLRM: {args.tables} tables x {args.rows} rows x {args.dim} in Ember, cache "
          f"{cache_rows} rows ({args.cache_fraction:.0%}), batch {args.batch}, "
          f"lookahead {args.lookahead}, seed {args.seed}")
    store = ember.Store(path, log_memory=64 << 20)
    ebc = EmbeddingBagCollection(cfgs, store, cache_rows=cache_rows, lookahead=args.lookahead,
                                 optimizer=("rowwise_adagrad", args.lr))
    model = DLRM(ebc, [c.name for c in cfgs], args.dim)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    loss_fn = nn.BCEWithLogitsLoss()
    stream = Stream(args.tables, args.rows, args.batch, args.seed)
    batches = (stream.next_batch() for _ in range(args.steps))
    window: List[float] = []
    first = last = float("nan")
    t0 = time.perf_counter()
    for step, (dense, sparse, labels) in enumerate(ebc.pipeline(batches, sparse=lambda b: b[1])):
        loss = loss_fn(model(dense, sparse), labels)
        opt.zero_grad()
        loss.backward()  # also updates the embedding rows in the cache
        opt.step()
        window.append(float(loss))
        if (step + 1) % args.print_every == 0 or step + 1 == args.steps:
            avg = sum(window) / len(window)
            if math.isnan(first):
                first = avg
            last = avg
            print(f"step {step + 1:6d}  loss {avg:.4f}")
            window = []
    elapsed = time.perf_counter() - t0
    st = ebc.stats()
    ebc.checkpoint()
    ebc.close()
    store.close()
    if tmp is not None:
        tmp.cleanup()
    print(f"loss {first:.4f} -> {last:.4f} in {args.steps} steps, {elapsed:.1f} s "
          f"({1000 * elapsed / max(1, args.steps):.1f} ms/step)")
    print(f"cache: hit rate {st.hit_rate:.1%}, {st.rows_fetched} rows fetched, "
          f"{st.rows_evicted} evicted, {st.rows_written_back} written back, "
          f"acquire waited {st.wait_ns / 1e9:.2f} s")
    return {"first_loss": first, "last_loss": last, "seconds": elapsed}


if __name__ == "__main__":
    main()
