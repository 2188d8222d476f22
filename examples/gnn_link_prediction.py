#!/usr/bin/env python3
"""Link prediction through Ember's partition buffer.

An R-MAT graph (Graph500's a=0.57, b=0.19, c=0.19) is generated in numpy and
imported into a store as p node partitions; each node has a learnable embedding
stored with the graph. Training walks the BETA ordering with c partitions resident:
each state's edges are scored by the dot product of their ends' embeddings against
negatives drawn from the resident nodes (logistic loss), and the gradient steps are
written back through the buffer, which stores each partition when it leaves.

    python3 examples/gnn_link_prediction.py [--scale 12] [--epochs 5] ...

Prints the loss of every epoch (it goes down) and how often a true edge outscores
a random pair at the end.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch

import ember
import ember.graph as eg


def rmat(scale: int, edge_factor: int, rng: np.random.Generator,
         a: float = 0.57, b: float = 0.19, c: float = 0.19) -> tuple[np.ndarray, np.ndarray]:
    """Graph500 R-MAT: 2^scale nodes, edge_factor * 2^scale edges (no self loops)."""
    m = edge_factor << scale
    src = np.zeros(m, np.int64)
    dst = np.zeros(m, np.int64)
    for bit in range(scale):
        r = rng.random(m)
        right = (r >= a) & (r < a + b) | (r >= a + b + c)   # quadrants b and d
        down = r >= a + b                                   # quadrants c and d
        src |= down.astype(np.int64) << bit
        dst |= right.astype(np.int64) << bit
    keep = src != dst
    return src[keep], dst[keep]


def train(args: argparse.Namespace) -> list[float]:
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    src, dst = rmat(args.scale, args.edge_factor, rng)
    n = 1 << args.scale
    with tempfile.TemporaryDirectory(prefix="ember-lp-") as tmp:
        store = ember.Store(os.path.join(tmp, "store"), log_memory=64 << 20)
        t0 = time.perf_counter()
        g = eg.import_edges(store, "rmat", (src, dst), args.partitions, dim=args.dim,
                            num_nodes=n, seed=args.seed, init_scale=0.1,
                            chunk_bytes=1 << 20)
        print(f"imported {g.num_edges} edges over {n} nodes into {g.num_partitions} "
              f"partitions in {time.perf_counter() - t0:.2f} s")
        losses = []
        with g.buffer(args.buffer, seed=args.seed) as buf:
            for epoch in range(args.epochs):
                t0 = time.perf_counter()
                total, count, wins = 0.0, 0, 0
                for state in buf.epoch("beta", batch_size=args.batch, seed=args.seed,
                                       epoch=epoch, as_torch=True):
                    resident = state.node_ids
                    for edges in state:
                        loss, w = step(state, edges, resident, args)
                        total += loss * len(edges)
                        count += len(edges)
                        wins += w
                losses.append(total / max(count, 1))
                print(f"epoch {epoch}: loss {losses[-1]:.4f}, true edge outscores a "
                      f"random pair {wins / max(count, 1):.1%} "
                      f"({time.perf_counter() - t0:.2f} s)")
        g.close()
        store.close()
    return losses


def step(state: eg.State, edges: torch.Tensor, resident: torch.Tensor,
         args: argparse.Namespace) -> tuple[float, int]:
    """One SGD step on a batch: positives are the edges, negatives replace each
    edge's destination by a random resident node."""
    neg = resident[torch.randint(len(resident), (len(edges) * args.negatives,))]
    nodes, inverse = torch.unique(torch.cat([edges[:, 0], edges[:, 1], neg]),
                                  return_inverse=True)
    emb = state.embeddings(nodes).clone().requires_grad_(True)
    b = len(edges)
    s, d, ng = inverse[:b], inverse[b:2 * b], inverse[2 * b:].view(b, args.negatives)
    pos = (emb[s] * emb[d]).sum(1)
    negs = (emb[s].unsqueeze(1) * emb[ng]).sum(2)
    # summed, so that each row's step does not shrink with the batch size
    loss = torch.nn.functional.softplus(-pos).sum() + \
        torch.nn.functional.softplus(negs).mean(1).sum()
    loss.backward()
    state.update(nodes, -args.lr * emb.grad)  # added to the stored rows
    return float(loss) / b, int((pos.detach() > negs.detach()[:, 0]).sum())


def main(argv: list[str] | None = None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=12, help="log2 of the node count")
    p.add_argument("--edge-factor", type=int, default=8)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--buffer", type=int, default=4, help="partitions resident (c)")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--negatives", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    return train(p.parse_args(argv))


if __name__ == "__main__":
    main()
