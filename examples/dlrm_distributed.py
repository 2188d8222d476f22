#!/usr/bin/env python3
"""DLRM with its embedding tables sharded row-wise over torch.distributed ranks.

examples/dlrm_synthetic.py's model and Criteo-like stream, with the tables in an
ember.sharded.ShardedEmbeddingBagCollection: each rank keeps the rows it owns (row i
on rank i % world) in its own Ember store and cache under <dir>/rank-<r>, and the
collectives move ids, rows and gradients. Every rank draws the same global batch
from the seeded stream and trains its slice of it; each rank's loss is its samples'
share of the global mean, and the dense gradients are all-reduced (summed), so every
gradient is the one-process gradient of the global batch (the embedding rows' initial
values depend on the world size: each rank draws its own). A global checkpoint is taken every
--checkpoint-every steps; a restart with the same world size and --dir resumes there.

One machine, N processes (gloo on CPU; --backend nccl where each rank has a GPU):

    PYTHONPATH=build/release/python torchrun --nproc_per_node=4 \\
        examples/dlrm_distributed.py --dir /data/dlrm --steps 400

Several machines: the same command on each, with the machine count, this machine's
index and a rendezvous address every machine reaches (the first machine's):

    torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 \\
        --rdzv_backend=c10d --rdzv_endpoint=10.0.0.1:29500 --rdzv_id=dlrm1 \\
        examples/dlrm_distributed.py --dir /data/dlrm     # node_rank=1 on the other

(Debian's torch 1.13 under Python 3.11: add --redirects 1 --tee 1 to torchrun, whose
parsing of its default 0 fails there. --dir may be a local disk of each machine: a rank only opens <dir>/rank-<r>. A
restart must give every rank the same rank number, so keep --nproc_per_node and the
node ranks.) Without torchrun (RANK and WORLD_SIZE unset) it runs as one rank.
README.md's section on sharding sizes rows, cache, memory and disk per rank.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dlrm_synthetic import DLRM, Stream, table_configs  # noqa: E402
from ember.sharded import ShardedEmbeddingBagCollection  # noqa: E402


def init(backend: str, timeout_s: int) -> None:
    if "RANK" not in os.environ:  # not under torchrun: one rank
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29511"))
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    # the timeout bounds how long the other ranks wait for a dead one
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))


def dense_file(path: str, rank: int, step: int) -> str:
    return os.path.join(path, f"dense-rank{rank}-step{step}.pt")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256, help="global batch (all ranks)")
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--rows", type=int, default=20000, help="rows per table")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--cache-fraction", type=float, default=0.1,
                    help="each rank's cache, as a fraction of the rows it owns")
    ap.add_argument("--lookahead", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.1, help="embedding row-wise Adagrad's lr")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", required=True, help="the shards' directory (rank-<r> inside)")
    ap.add_argument("--checkpoint-every", type=int, default=100)
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--timeout", type=int, default=60, help="collective timeout, seconds")
    ap.add_argument("--print-every", type=int, default=50)
    args = ap.parse_args(argv)
    init(args.backend, args.timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    cfgs = table_configs(args.tables, args.rows, args.dim)
    cache_rows = max(1, int(args.cache_fraction * args.tables * args.rows / world))
    ebc = ShardedEmbeddingBagCollection(cfgs, args.dir, cache_rows=cache_rows,
                                        lookahead=args.lookahead,
                                        optimizer=("rowwise_adagrad", args.lr),
                                        store_options={"log_memory": 64 << 20})
    model = DLRM(ebc, [c.name for c in cfgs], args.dim)
    dense = [p for p in model.parameters()]
    opt = torch.optim.Adagrad(dense, lr=0.05)
    start = int((ebc.checkpoint_info.get("extra") or {}).get("step", 0))
    if start:  # the dense model and its optimizer, as this rank saved them then
        saved = torch.load(dense_file(args.dir, rank, start))
        model.bottom.load_state_dict(saved["bottom"])
        model.top.load_state_dict(saved["top"])
        opt.load_state_dict(saved["opt"])
    if rank == 0:
        print(f"DLRM over {world} ranks: {args.tables} tables x {args.rows} rows x {args.dim}, "
              f"~{args.tables * args.rows // world} rows and a cache of {cache_rows} per rank, "
              f"global batch {args.batch}, from step {start}")
    stream = Stream(args.tables, args.rows, args.batch, args.seed)
    for _ in range(start):
        stream.next_batch()  # the stream is seeded: skip the steps already trained
    lo, hi = args.batch * rank // world, args.batch * (rank + 1) // world

    def local(b):
        d, sparse, y = b
        cut = {}
        for f, (ids, offs) in sparse.items():
            end = int(offs[hi]) if hi < args.batch else ids.numel()
            cut[f] = (ids[int(offs[lo]):end], offs[lo:hi] - offs[lo])
        return d[lo:hi], cut, y[lo:hi]

    batches = (local(stream.next_batch()) for _ in range(start, args.steps))
    loss_fn = nn.BCEWithLogitsLoss(reduction="sum")
    window, first, last = [], float("nan"), float("nan")
    t0 = time.perf_counter()
    for step, (d, sparse, y) in enumerate(ebc.pipeline(batches, sparse=lambda b: b[1]),
                                          start=start):
        loss = loss_fn(model(d, sparse), y) / args.batch  # this rank's share
        opt.zero_grad()
        loss.backward()  # the embedding rows are updated by their owners here
        for p in dense:
            dist.all_reduce(p.grad)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        window.append(float(total))
        if (step + 1) % args.checkpoint_every == 0:
            # every rank holds the same dense model: each saves its own copy (a local
            # --dir per machine works); model.state_dict() would also gather the tables
            torch.save({"bottom": model.bottom.state_dict(), "top": model.top.state_dict(),
                        "opt": opt.state_dict()}, dense_file(args.dir, rank, step + 1))
            ebc.checkpoint(extra={"step": step + 1})
        if (step + 1) % args.print_every == 0 or step + 1 == args.steps:
            avg = sum(window) / len(window)
            first = avg if math.isnan(first) else first
            last, window = avg, []
            if rank == 0:
                print(f"step {step + 1:6d}  loss {avg:.4f}")
    elapsed = time.perf_counter() - t0
    tm = ebc.timings()
    if rank == 0:
        n = max(1, tm["steps"])
        sec = tm["seconds"]
        print(f"loss {first:.4f} -> {last:.4f}, {1000 * elapsed / n:.1f} ms/step on rank 0 "
              f"(lookup {1000 * sec['lookup'] / n:.1f}, communication "
              f"{1000 * sec['comm'] / n:.1f}, embedding compute {1000 * sec['compute'] / n:.1f}"
              f"), {sum(tm['bytes_sent'].values()) / n / 1024:.1f} KiB sent per step")
    ebc.close()
    dist.destroy_process_group()
    return {"first_loss": first, "last_loss": last, "seconds": elapsed}


if __name__ == "__main__":
    main()
