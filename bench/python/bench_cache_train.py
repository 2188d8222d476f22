#!/usr/bin/env python3
"""bench_cache_train.py - a DLRM training step (CPU) with its tables in Ember vs in memory.

Two runs of the same model (examples/dlrm_synthetic.py's DLRM: bottom MLP, pooled
embeddings of every sparse feature, dot interaction, top MLP) over the same seeded
Criteo-like stream (Zipf-skewed ids):

  ember   the tables in an Ember store, an EmbeddingBagCollection whose cache holds
          a tenth of the rows (tables 10x the cache), the lookahead pipeline pushing
          batches from a loader thread, SGD fused into backward;
  memory  plain nn.EmbeddingBag tables in memory (sparse gradients), torch.optim.SGD
          over them (the baseline: no I/O, no cache).

A step is forward, backward and both optimizers' steps. Reported per run: the median
and p90 step time over the timed steps (after warm-up), the Ember/memory ratio, and
for Ember the fraction of step time the trainer spent waiting in acquire (rows not
resident yet), with the cache's hit rate and traffic. Prints a table and writes JSON.
--rounds N runs both N times, alternating which goes first; the step medians are
then the medians over rounds (the other figures: the median round's).

    PYTHONPATH=build/release/python python3 bench/python/bench_cache_train.py
    ... --tables 26 --rows 1000000 --batch 2048 --steps 300 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import ember  # noqa: E402
from ember.torch import EmbeddingBagCollection  # noqa: E402
from dlrm_synthetic import DLRM, DenseBags, Stream, table_configs  # noqa: E402


def run(kind: str, args, path: str) -> dict:
    torch.manual_seed(args.seed)
    cfgs = table_configs(args.tables, args.rows, args.dim)
    names = [c.name for c in cfgs]
    stream = Stream(args.tables, args.rows, args.batch, args.seed)
    total = args.warmup + args.steps
    batches = [stream.next_batch() for _ in range(total)]  # generated before timing
    store = ebc = None
    if kind == "ember":
        store = ember.Store(path, log_memory=args.log_memory << 20)
        cache_rows = int(args.cache_fraction * args.tables * args.rows)
        ebc = EmbeddingBagCollection(cfgs, store, cache_rows=cache_rows,
                                     lookahead=args.lookahead, optimizer=("sgd", args.lr))
        emb = ebc
        it = ebc.pipeline(batches, sparse=lambda b: b[1])
        extra_opt = None
    else:
        emb = DenseBags(cfgs)
        it = iter(batches)
        extra_opt = torch.optim.SGD(emb.parameters(), lr=args.lr)
    model = DLRM(emb, names, args.dim)
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("embeddings.")]
    opt = torch.optim.SGD(dense_params, lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    times, losses = [], []
    wait0 = 0
    t_timed = 0.0
    for step, (dense, sparse, labels) in enumerate(it):
        if step == args.warmup:
            wait0 = ebc.stats().wait_ns if ebc else 0
            t_timed = time.perf_counter()
        t0 = time.perf_counter()
        loss = loss_fn(model(dense, sparse), labels)
        opt.zero_grad()
        if extra_opt:
            extra_opt.zero_grad()
        loss.backward()
        opt.step()
        if extra_opt:
            extra_opt.step()
        t1 = time.perf_counter()
        losses.append(float(loss))
        if step >= args.warmup:
            times.append(t1 - t0)
    wall = time.perf_counter() - t_timed
    out = {"kind": kind, "median_ms": 1000 * statistics.median(times),
           "p90_ms": 1000 * sorted(times)[int(0.9 * (len(times) - 1))],
           "mean_ms": 1000 * statistics.fmean(times), "wall_s": wall,
           "first_loss": losses[0], "last_loss": statistics.fmean(losses[-20:])}
    if ebc is not None:
        st = ebc.stats()
        out.update(acquire_wait_fraction=(st.wait_ns - wait0) / 1e9 / max(sum(times), 1e-9),
                   hit_rate=st.hit_rate, rows_fetched=st.rows_fetched,
                   rows_evicted=st.rows_evicted, rows_written_back=st.rows_written_back,
                   cache_rows=st.capacity)
        ebc.close()
        store.close()
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--rows", type=int, default=50000, help="rows per table")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=60, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--cache-fraction", type=float, default=0.1)
    ap.add_argument("--lookahead", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--log-memory", type=int, default=64, help="store log memory, MiB")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds, alternating the order (memory first, then ember first)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default="bench_cache_train.json")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory(prefix="ember-bench-", dir=args.dir)
    rounds = {"memory": [], "ember": []}
    for r in range(args.rounds):
        order = ("memory", "ember") if r % 2 == 0 else ("ember", "memory")
        for kind in order:
            o = run(kind, args, os.path.join(tmp.name, f"store{r}"))
            rounds[kind].append(o)
            if args.rounds > 1:
                print(f"  round {r} {kind:<7} median {o['median_ms']:8.2f} ms/step", flush=True)
    tmp.cleanup()
    # each run's figures: the round whose median step is the median of the rounds'
    results = []
    for kind in ("memory", "ember"):
        rs = sorted(rounds[kind], key=lambda o: o["median_ms"])
        m = dict(rs[len(rs) // 2])
        m["median_ms"] = statistics.median(o["median_ms"] for o in rs)
        m["rounds_median_ms"] = [o["median_ms"] for o in rounds[kind]]
        results.append(m)
    mem, emb = results
    ratio = emb["median_ms"] / mem["median_ms"]
    per_round = [e["median_ms"] / m["median_ms"]
                 for m, e in zip(rounds["memory"], rounds["ember"])]
    print(f"DLRM step, CPU: {args.tables} tables x {args.rows} rows x {args.dim}, batch "
          f"{args.batch}, cache {args.cache_fraction:.0%} of rows, lookahead {args.lookahead}, "
          f"{args.steps} timed steps after {args.warmup}, torch threads "
          f"{torch.get_num_threads()}, {args.rounds} round(s), medians")
    print(f"{'run':<8} {'median ms':>10} {'p90 ms':>8} {'loss first':>11} {'loss last':>10}"
          f" {'acquire wait':>13} {'hit rate':>9}")
    for r in results:
        wait = f"{r['acquire_wait_fraction']:.1%}" if "acquire_wait_fraction" in r else "-"
        hit = f"{r['hit_rate']:.1%}" if "hit_rate" in r else "-"
        print(f"{r['kind']:<8} {r['median_ms']:>10.2f} {r['p90_ms']:>8.2f} "
              f"{r['first_loss']:>11.4f} {r['last_loss']:>10.4f} {wait:>13} {hit:>9}")
    print(f"ember / memory median step time: {ratio:.2f}x (per round: "
          f"{', '.join(f'{x:.2f}' for x in per_round)})")
    report = {"config": vars(args), "results": results, "ratio_median": ratio,
              "ratio_per_round": per_round, "rounds": rounds,
              "torch": torch.__version__, "ember": ember.__version__,
              "machine": platform.machine(), "cpus": os.cpu_count()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
