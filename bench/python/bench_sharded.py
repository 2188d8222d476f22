#!/usr/bin/env python3
"""bench_sharded.py - DLRM training steps with the tables sharded over 1, 2, 4 ranks.

The same global batches (examples/dlrm_synthetic.py's seeded Criteo-like stream and
DLRM model) are trained by world sizes 1, 2 and 4 on this machine: processes of
torch.multiprocessing joined by gloo over 127.0.0.1, each rank training its slice of
every global batch with an ember.sharded.ShardedEmbeddingBagCollection (row-wise
Adagrad fused into backward, lookahead pipeline, a cache of --cache-fraction of the
rows each rank owns) and all-reducing the dense gradients.

Reported per world size (timed steps after warm-up; rank 0's clock, the ranks move
in lock-step):
  step ms        median step time (forward, backward, both optimizers); mean too
                 (lookup + comm + compute = the mean step)
  rows/s         lookups of the global batch per second
  lookup         cache push, acquire, row gather and apply (the owner's side)
  comm           the all-to-alls (counts, ids, rows, gradients) plus the dense
                 all-reduce; includes waiting for the slowest rank
  compute        the rest: routing, pooling, the dense model
  KiB sent/rank  bytes each rank sends to the others per step (mean over ranks)
  ideal          ids plus rows plus gradients of the distinct remote rows each
                 rank's batch needs (8 + 8 * dim bytes each), no more; and the same
                 counted per lookup (what is sent without de-duplication)

    PYTHONPATH=build/release/python python3 bench/python/bench_sharded.py
    ... --worlds 1,2,4 --tables 8 --rows 100000 --batch 2048 --steps 30 --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from dlrm_synthetic import DLRM, Stream, table_configs  # noqa: E402


def slice_batch(b, lo, hi, total):
    d, sparse, y = b
    cut = {}
    for f, (ids, offs) in sparse.items():
        end = int(offs[hi]) if hi < total else ids.numel()
        cut[f] = (ids[int(offs[lo]):end], offs[lo:hi] - offs[lo])
    return d[lo:hi], cut, y[lo:hi]


def ideal_bytes(sparse, rank, world, dim):
    """(distinct remote rows, remote lookups) of one rank's batch."""
    distinct = lookups = 0
    for f, (ids, _) in sparse.items():
        remote = ids[ids % world != rank]
        lookups += remote.numel()
        distinct += torch.unique(remote).numel()
    return distinct * (8 + 8 * dim), lookups * (8 + 8 * dim)


def worker(rank, world, port, args, path, out):
    torch.set_num_threads(1)
    from ember.sharded import ShardedEmbeddingBagCollection
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(args.seed)
    cfgs = table_configs(args.tables, args.rows, args.dim)
    cache_rows = int(args.cache_fraction * args.tables * args.rows / world)
    ebc = ShardedEmbeddingBagCollection(cfgs, path, cache_rows=cache_rows,
                                        lookahead=args.lookahead,
                                        optimizer=("rowwise_adagrad", 0.1),
                                        store_options={"log_memory": 64 << 20})
    model = DLRM(ebc, [c.name for c in cfgs], args.dim)
    dense = list(model.parameters())
    opt = torch.optim.Adagrad(dense, lr=0.05)
    stream = Stream(args.tables, args.rows, args.batch, args.seed)
    total = args.warmup + args.steps
    lo, hi = args.batch * rank // world, args.batch * (rank + 1) // world
    batches = [slice_batch(stream.next_batch(), lo, hi, args.batch) for _ in range(total)]
    lookups = sum(int(o[0].numel()) for o in batches[0][1].values())
    ideal = [ideal_bytes(b[1], rank, world, args.dim) for b in batches[args.warmup:]]
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    steps, marks = [], []
    allreduce_s = 0.0
    for i, (d, sparse, y) in enumerate(ebc.pipeline(batches, sparse=lambda b: b[1])):
        if i == args.warmup:
            dist.barrier()
            marks.append((ebc.timings(), allreduce_s))
        t0 = time.perf_counter()
        loss = loss_fn(model(d, sparse), y) / args.batch
        opt.zero_grad()
        loss.backward()
        t1 = time.perf_counter()
        for p in dense:
            dist.all_reduce(p.grad)
        allreduce_s += time.perf_counter() - t1
        opt.step()
        if i >= args.warmup:
            steps.append(time.perf_counter() - t0)
    marks.append((ebc.timings(), allreduce_s))
    (a, ar0), (b, ar1) = marks
    n = len(steps)
    res = {
        "rank": rank, "steps": steps,
        "seconds": {k: (b["seconds"][k] - a["seconds"][k]) / n for k in a["seconds"]},
        "allreduce": (ar1 - ar0) / n,
        "bytes": {k: (b["bytes_sent"][k] - a["bytes_sent"][k]) / n for k in a["bytes_sent"]},
        "ideal_distinct": sum(x[0] for x in ideal) / n,
        "ideal_lookups": sum(x[1] for x in ideal) / n,
        "local_lookups": lookups,
        "hit_rate": ebc.stats().hit_rate,
    }
    ebc.close()
    dist.destroy_process_group()
    torch.save(res, os.path.join(out, f"rank{rank}.pt"))


def run(world, args, base):
    ctx = tmp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "numpy"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = os.path.join(base, f"w{world}")
    out = os.path.join(base, f"out{world}")
    os.makedirs(out)
    procs = [ctx.Process(target=worker, args=(r, world, port, args, path, out))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(args.deadline)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"world {world}: ranks exited {[p.exitcode for p in procs]}")
    ranks = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(world)]
    r0 = ranks[0]
    step = statistics.median(r0["steps"])
    mean_step = statistics.fmean(r0["steps"])  # the split below is of the mean step
    glob_lookups = sum(r["local_lookups"] for r in ranks)  # of the first global batch
    mean = lambda f: sum(f(r) for r in ranks) / world  # noqa: E731
    sec = r0["seconds"]
    comm = sec["comm"] + r0["allreduce"]
    return {
        "world": world,
        "step_ms": 1000 * step,
        "p90_ms": 1000 * sorted(r0["steps"])[int(0.9 * (len(r0["steps"]) - 1))],
        "rows_per_s": glob_lookups / step,
        "lookup_ms": 1000 * sec["lookup"],
        "comm_ms": 1000 * comm,
        "a2a_ms": 1000 * sec["comm"],
        "allreduce_ms": 1000 * r0["allreduce"],
        "mean_step_ms": 1000 * mean_step,
        "compute_ms": 1000 * (mean_step - sec["lookup"] - comm),
        "bytes_sent_per_rank": mean(lambda r: sum(r["bytes"].values())),
        "bytes_by_kind": {k: mean(lambda r, k=k: r["bytes"][k]) for k in r0["bytes"]},
        "ideal_distinct_per_rank": mean(lambda r: r["ideal_distinct"]),
        "ideal_lookups_per_rank": mean(lambda r: r["ideal_lookups"]),
        "lookups_per_rank": mean(lambda r: r["local_lookups"]),
        "hit_rate": mean(lambda r: r["hit_rate"]),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1024, help="global batch")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lookahead", type=int, default=4)
    ap.add_argument("--cache-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=900)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ember-sharded-", dir=args.dir) as base:
        for w in [int(x) for x in args.worlds.split(",")]:
            rows.append(run(w, args, base))
            r = rows[-1]
            print(f"world {w}: {r['step_ms']:.1f} ms/step", flush=True)
    print(f"\n{args.tables} tables x {args.rows} rows x {args.dim}, global batch {args.batch}, "
          f"{args.steps} timed steps, {os.cpu_count()} CPUs ({platform.machine()})")
    print(f"{'world':>5} {'step ms':>8} {'mean':>7} {'rows/s':>9} {'lookup':>7} {'comm':>7} "
          f"{'(a2a':>6} {'allred)':>7} {'compute':>8} {'KiB/rank':>9} {'ideal':>7} "
          f"{'per-lookup':>10} {'hit':>5}")
    for r in rows:
        print(f"{r['world']:>5} {r['step_ms']:>8.1f} {r['mean_step_ms']:>7.1f} {r['rows_per_s']:>9.0f} "
              f"{r['lookup_ms']:>7.1f} {r['comm_ms']:>7.1f} {r['a2a_ms']:>6.1f} "
              f"{r['allreduce_ms']:>7.1f} {r['compute_ms']:>8.1f} "
              f"{r['bytes_sent_per_rank'] / 1024:>9.1f} {r['ideal_distinct_per_rank'] / 1024:>7.1f} "
              f"{r['ideal_lookups_per_rank'] / 1024:>10.1f} {r['hit_rate']:>5.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
