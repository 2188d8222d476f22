#!/usr/bin/env python3
"""bench_memmap.py - a DLRM training step (CPU) with tables larger than memory:
Ember against numpy.memmap, both held to the same memory budget.

The same model (examples/dlrm_synthetic.py's DLRM), the same seeded Criteo-like
batches and the same initial tables, stored two ways on a disk-backed directory:

  ember   an Ember store with every row; ember.torch.EmbeddingBagCollection over it
          (a cache of --cache-mb of rows, the lookahead pipeline pushing batches from
          a loader thread, SGD fused into backward);
  memmap  what a user would write without Ember: the tables in one float32
          numpy.memmap file; each step gathers the batch's distinct rows of each
          table from the memmap (np.unique, fancy indexing), trains them as the
          weight of F.embedding_bag (the same pooling as nn.EmbeddingBag), applies
          SGD to them and writes them back to the memmap.

Each run is a child process. It imports torch, builds the model and generates the
batches, evicts the data files from the page cache (fsync, posix_fadvise
DONTNEED), then moves itself into a fresh child memory cgroup limited to
--budget-mb and only then opens the store or the memmap: everything the run
allocates or reads from there on (the store's memory, the cache, the page cache of
the data files, the gathered rows) is charged to that cgroup and held to the
budget; what the interpreter, torch and the model held before the move stays
charged to the parent (cgroup v1 moves no charges unless
memory.move_charge_at_immigrate is set; cgroup v2 never does). The tables are
several times the budget. Rounds alternate the order (ember first, then memmap
first); reported: the median step time of each, over rounds of medians, and the
memmap / ember ratio.

    PYTHONPATH=build/release/python python3 bench/python/bench_memmap.py --dir /var/tmp
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))


# ---- memory cgroup -----------------------------------------------------------------

def cgroup_enter(budget: int, name: str) -> str:
    """Create a child memory cgroup of this process's own, limited to `budget`
    bytes, and move this process into it. Returns its path; raises OSError when
    cgroups cannot be used here."""
    v1 = v2 = None
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrls.split(","):
                v1 = path
            elif ctrls == "":
                v2 = path
    if v1 is not None and os.path.isdir("/sys/fs/cgroup/memory"):
        parent = "/sys/fs/cgroup/memory" + v1.rstrip("/")
        limit_file, procs = "memory.limit_in_bytes", "cgroup.procs"
    elif v2 is not None:
        parent = "/sys/fs/cgroup" + v2.rstrip("/")
        limit_file, procs = "memory.max", "cgroup.procs"
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            if "memory" not in f.read().split():
                raise OSError("no memory controller in the cgroup v2 hierarchy")
    else:
        raise OSError("no memory cgroup")
    path = os.path.join(parent, name)
    os.mkdir(path)
    with open(os.path.join(path, limit_file), "w") as f:
        f.write(str(budget))
    with open(os.path.join(path, procs), "w") as f:
        f.write(str(os.getpid()))
    return path


def cgroup_peak(path: str) -> int:
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        p = os.path.join(path, name)
        if os.path.exists(p):
            with open(p) as f:
                return int(f.read())
    return -1


def cgroup_remove(path: str) -> None:
    """Move the caller back to the parent and remove the cgroup."""
    with open(os.path.join(os.path.dirname(path), "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.1)


def evict(paths) -> None:
    """Write back and drop the files' pages from the page cache."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def data_files(args) -> list:
    out = [os.path.join(args.data, "tables.f32")]
    for d, _, fs in os.walk(os.path.join(args.data, "store")):
        out += [os.path.join(d, f) for f in fs]
    return out


# ---- the data ----------------------------------------------------------------------

def store_opts(args) -> dict:
    """ember-cache-bench's store options for a memory budget of --store-mb."""
    from bench_cache_loop import store_options
    return store_options(args.tables * args.rows, args.dim, args.store_mb)


def init_rows(t: int, a: int, b: int, dim: int, rows: int):
    import numpy as np
    r = np.arange(a, b, dtype=np.int64)
    j = np.arange(dim, dtype=np.int64)
    h = (r[:, None] * 2654435761 + j[None, :] * 40503 + t * 97) % 2001
    return ((h.astype(np.float32) / 1000.0 - 1.0) * np.float32((1.0 / rows) ** 0.5))


def setup(args) -> None:
    """The memmap file and the store, holding the same initial tables."""
    import numpy as np
    import ember
    os.makedirs(args.data, exist_ok=True)
    mm = np.memmap(os.path.join(args.data, "tables.f32"), dtype=np.float32, mode="w+",
                   shape=(args.tables * args.rows, args.dim))
    store = ember.Store(os.path.join(args.data, "store"), truncate=True, **store_opts(args))
    step = 1 << 16
    for t in range(args.tables):
        for a in range(0, args.rows, step):
            b = min(a + step, args.rows)
            vals = init_rows(t, a, b, args.dim, args.rows)
            mm[t * args.rows + a:t * args.rows + b] = vals
            store.put_batch((np.int64(t) << 48) | np.arange(a, b, dtype=np.int64), vals)
    mm.flush()
    del mm
    store.compact(force=True)
    store.close()


# ---- a run (child process) ---------------------------------------------------------

def child(args) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    import ember
    from ember.torch import EmbeddingBagCollection
    from dlrm_synthetic import DLRM, Stream, table_configs

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfgs = table_configs(args.tables, args.rows, args.dim)
    names = [c.name for c in cfgs]
    stream = Stream(args.tables, args.rows, args.batch, args.seed)
    batches = [stream.next_batch() for _ in range(args.warmup + args.steps)]
    R = args.rows

    class MemmapBags(nn.Module):
        """The tables in a memmap: gather, train, write back."""

        def __init__(self, mm) -> None:
            super().__init__()
            self.mm = mm
            self.live = []

        def forward(self, sparse):
            out = {}
            self.live = []
            for t, name in enumerate(names):
                ids, offsets = sparse[name]
                u, inv = np.unique(ids.numpy(), return_inverse=True)
                w = torch.from_numpy(self.mm[t * R + u]).requires_grad_()
                out[name] = F.embedding_bag(torch.from_numpy(inv), w, offsets, mode="mean")
                self.live.append((t * R + u, w))
            return out

        def step(self, lr: float) -> None:
            with torch.no_grad():
                for rows, w in self.live:
                    w -= lr * w.grad
                    self.mm[rows] = w.numpy()
            self.live = []

    mm_path = os.path.join(args.data, "tables.f32")
    evict(data_files(args))
    cg = cgroup_enter(args.budget_mb << 20, f"ember-bench-{os.getpid()}") if args.cgroup else None
    store = ebc = mm = None
    if args.child == "ember":
        store = ember.Store(os.path.join(args.data, "store"), create=False,
                            **store_opts(args))
        cache_rows = (args.cache_mb << 20) // (4 * args.dim)
        ebc = EmbeddingBagCollection(cfgs, store, cache_rows=cache_rows,
                                     lookahead=args.lookahead, optimizer=("sgd", args.lr))
        emb = ebc
        it = ebc.pipeline(batches, sparse=lambda b: b[1])
    else:
        mm = np.memmap(mm_path, dtype=np.float32, mode="r+", shape=(args.tables * R, args.dim))
        emb = MemmapBags(mm)
        it = iter(batches)
    model = DLRM(emb, names, args.dim)
    dense = [p for n, p in model.named_parameters() if not n.startswith("embeddings.")]
    opt = torch.optim.SGD(dense, lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    times, losses = [], []
    for step, (x, sparse, labels) in enumerate(it):
        t0 = time.perf_counter()
        loss = loss_fn(model(x, sparse), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if mm is not None:
            emb.step(args.lr)
        t1 = time.perf_counter()
        losses.append(float(loss))
        if step >= args.warmup:
            times.append(t1 - t0)
    out = {"kind": args.child, "median_ms": 1e3 * statistics.median(times),
           "mean_ms": 1e3 * statistics.fmean(times),
           "p90_ms": 1e3 * sorted(times)[int(0.9 * (len(times) - 1))],
           "first_loss": losses[0], "last_loss": statistics.fmean(losses[-10:])}
    if ebc is not None:
        st = ebc.stats()
        out.update(hit_rate=st.hit_rate, rows_fetched=st.rows_fetched,
                   wait_s=st.wait_ns / 1e9, cache_rows=st.capacity)
        ebc.close()
        store.close()
    else:
        mm.flush()
        del emb, mm
    if cg:
        out["cgroup_peak_bytes"] = cgroup_peak(cg)
        st = os.path.join(cg, "memory.stat")
        if os.path.exists(st):  # what was charged at the end: anonymous and page cache
            with open(st) as f:
                kv = dict(line.split() for line in f)
            out["cgroup_end"] = {k: int(kv[k]) for k in ("rss", "cache", "anon", "file")
                                 if k in kv}
        cgroup_remove(cg)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--rows", type=int, default=500000, help="rows per table")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=40, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget-mb", type=int, default=64,
                    help="memory cgroup limit for what the run allocates after setup")
    ap.add_argument("--cache-mb", type=int, default=24, help="Ember: the cache's slots")
    ap.add_argument("--store-mb", type=int, default=16, help="Ember: the store's memory_budget")
    ap.add_argument("--lookahead", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-cgroup", dest="cgroup", action="store_false",
                    help="no memory cgroup (the page cache is only dropped before each run)")
    ap.add_argument("--dir", default="/var/tmp", help="a disk-backed directory")
    ap.add_argument("--data-dir", default=None,
                    help="keep the tables here and reuse them (runs train them further)")
    ap.add_argument("--json", default="bench_memmap.json")
    ap.add_argument("--child", choices=("ember", "memmap"), help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return {}
    keep = args.data_dir is not None
    tmp = args.data_dir if keep else tempfile.mkdtemp(prefix="ember-memmap-", dir=args.dir)
    args.data = tmp
    try:
        t0 = time.perf_counter()
        done = os.path.join(tmp, "setup.json")
        want = {k: getattr(args, k) for k in ("tables", "rows", "dim", "store_mb")}
        if not (keep and os.path.exists(done) and json.load(open(done)) == want):
            setup(args)
            with open(done, "w") as f:
                json.dump(want, f)
        setup_s = time.perf_counter() - t0
        table_mb = args.tables * args.rows * args.dim * 4 / 2**20
        print(f"setup {setup_s:.1f} s: {args.tables} tables x {args.rows} rows x {args.dim} fp32 "
              f"= {table_mb:.0f} MiB, budget {args.budget_mb} MiB "
              f"({table_mb / args.budget_mb:.1f}x)", flush=True)
        res = {"ember": [], "memmap": []}
        base = []
        for k in ("tables", "rows", "dim", "batch", "steps", "warmup", "budget_mb", "cache_mb",
                  "store_mb", "lookahead", "lr", "threads", "seed", "dir"):
            base += ["--" + k.replace("_", "-"), str(getattr(args, k))]
        if not args.cgroup:
            base.append("--no-cgroup")
        for r in range(args.rounds):
            order = ("ember", "memmap") if r % 2 == 0 else ("memmap", "ember")
            for kind in order:
                cmd = [sys.executable, os.path.abspath(__file__), *base, "--child", kind,
                       "--data", tmp, "--json", ""]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    raise RuntimeError(f"{kind} run failed (rc {p.returncode}):\n"
                                       f"{p.stdout}\n{p.stderr}")
                o = json.loads(p.stdout.strip().splitlines()[-1])
                res[kind].append(o)
                print(f"  round {r} {kind:<7} median {o['median_ms']:8.2f} ms/step, "
                      f"peak {o.get('cgroup_peak_bytes', -1) / 2**20:.0f} MiB", flush=True)
        med = {k: statistics.median(o["median_ms"] for o in v) for k, v in res.items()}
        ratio = med["memmap"] / med["ember"]
        print(f"\nDLRM step, tables {table_mb:.0f} MiB on disk ({args.dir}), "
              f"{'memory cgroup of ' + str(args.budget_mb) + ' MiB' if args.cgroup else 'no cgroup'}"
              f", batch {args.batch}, {args.steps} timed steps after {args.warmup}, "
              f"{args.rounds} rounds alternating")
        print(f"{'run':<8} {'median ms':>10} {'min':>8} {'max':>8} {'loss last':>10} "
              f"{'peak MiB':>9}")
        for k, v in res.items():
            ms = [o["median_ms"] for o in v]
            peak = max(o.get("cgroup_peak_bytes", -1) for o in v) / 2**20
            print(f"{k:<8} {med[k]:>10.2f} {min(ms):>8.2f} {max(ms):>8.2f} "
                  f"{statistics.median(o['last_loss'] for o in v):>10.4f} {peak:>9.0f}")
        print(f"memmap / ember median step time: {ratio:.2f}x")
        report = {"config": {k: v for k, v in vars(args).items() if k != "data"},
                  "setup_s": setup_s, "results": res, "median_ms": med,
                  "ratio_memmap_over_ember": ratio, "machine": platform.machine(),
                  "cpus": os.cpu_count(), "load_at_end": os.getloadavg()}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
            print(f"wrote {args.json}")
        return report
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
