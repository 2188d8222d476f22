#!/usr/bin/env python3
"""bench_cache_loop.py - the trainer loop over ember.EmbeddingCache against ember-cache-bench.

Two drivers of the same cache over the same trace, side by side:

  c       ember-cache-bench --parts train --lru 0: its trainer (C) pushes batches in
          line until the window is full (EMBER_EAGAIN), acquires the next one, adds
          0.001 to element 0 of the row of every lookup (duplicates add again),
          "computes" (sleeps --compute-us, 0 here) and releases it dirty;
  python  the same loop through ember.EmbeddingCache: push (ids converted to int64
          inside the loop, as the C driver converts them to uint64) until
          ember.Again, acquire, the same update (numpy: per slot, 0.001 times its
          lookup count), release. --push thread pushes from a loader thread instead.

Both build a fresh store with every row (the options of ember-cache-bench's
loaded_store: data larger than the store's memory budget, loaded and compacted)
and time the loop only, from after the cache's open to the last release. The
trace is the C driver's: it writes it with --dump-trace and this script reads it
(docs/cache.md, "Trace files"). Rounds alternate the order (C first, then Python
first); the figures are medians per batch and the ratio python / c.

--compute-ms: the second mode, a synthetic compute per step (busy: spin on the
clock holding the GIL, one core, as a CPU trainer would use it; sleep: a GPU-like
step that leaves the CPU free), Python only; reports the time acquire waited (the
cache's stats: wait_ns) over the step time, after the pipeline filled.
"auto" runs at 1x and 1.5x the fetch time per batch (the prefetcher's busy time
per batch of the first compute-0 run).

    PYTHONPATH=build/release/python python3 bench/python/bench_cache_loop.py
    ... --rounds 5 --batches 40 --compute-ms auto --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import ember

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILL = 8  # batches the pipeline takes to fill, as ember-cache-bench counts them


def read_trace(path: str):
    """(rows (ntables,) uint64, ids (nbatches, ntables, batch_size) uint32)."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw[:8].tobytes() != b"EMBTRACE":
        raise ValueError(f"{path}: not a trace file")
    version, ntables, bs, nb = struct.unpack_from("<4I", raw, 8)
    if version != 1:
        raise ValueError(f"{path}: trace version {version}")
    rows = np.frombuffer(raw, dtype="<u8", count=ntables, offset=64)
    off = 64 + 8 * ntables
    n = nb * ntables * bs
    if raw.size != off + 4 * n + 8:
        raise ValueError(f"{path}: wrong size")
    ids = np.frombuffer(raw, dtype="<u4", count=n, offset=off).reshape(nb, ntables, bs)
    return rows.copy(), ids


def pow2_floor(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def store_options(total_rows: int, dim: int, mem_mb: int) -> dict:
    """ember-cache-bench's loaded_store options."""
    budget = mem_mb << 20
    rec = 32 + 8 + ((dim * 4 + 7) & ~7)
    page = pow2_floor(budget // 256)
    buckets = pow2_floor(budget // 4 // 64)
    return dict(page_size=min(max(page, 64 << 10), 1 << 20), memory_budget=budget,
                index_buckets=buckets, hot_disk_budget=buckets * 4 * rec,
                cold_disk_budget=8 * total_rows * rec,
                cold_index_chunks=pow2_floor(max(total_rows // 32, 1)) * 2)


def load_store(path: str, rows: np.ndarray, dim: int, mem_mb: int) -> ember.Store:
    """A fresh store holding every row (row r's element j: ((r + j) % 7) * 0.01, as
    ember-cache-bench loads it), compacted."""
    total = int(rows.sum())
    store = ember.Store(path, truncate=True, **store_options(total, dim, mem_mb))
    j = np.arange(dim, dtype=np.int64)
    step = 1024  # ember-cache-bench's put batches: the same records in the same order
    for t, n in enumerate(rows.tolist()):
        for a in range(0, n, step):
            r = np.arange(a, min(a + step, n), dtype=np.int64)
            keys = (np.int64(t) << 48) | r
            vals = (((r[:, None] + j[None, :]) % 7).astype(np.float32) * np.float32(0.01))
            store.put_batch(keys, vals)
    store.compact(force=True)
    return store


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def run_python(args, rows, ids, path, compute_s=0.0, kind="busy") -> dict:
    nb, ntables, bs = ids.shape
    total = int(rows.sum())
    cap = int(args.capacity_frac * float(total))
    t_load = time.perf_counter()
    store = load_store(path, rows, args.dim, args.mem_budget)
    load_s = time.perf_counter() - t_load
    tables = [ember.Table(f"t{t}", int(rows[t]), args.dim) for t in range(ntables)]
    cache = ember.EmbeddingCache(store, tables, capacity=cap, window=args.window,
                                 arrays="numpy")
    names = [t.name for t in tables]
    step = 0.0 if compute_s <= 0 else compute_s
    pause = busy if kind == "busy" else time.sleep

    def batch_of(b: int) -> list:
        return [(t, ids[b, t].astype(np.int64)) for t in range(ntables)]

    pushed = 0
    loader = None
    ready = threading.Semaphore(0)
    failed = []
    if args.push == "thread":
        def load() -> None:
            try:
                for b in range(nb):
                    parts = batch_of(b)
                    while True:
                        try:
                            cache.push(parts)
                            break
                        except ember.Again:
                            time.sleep(0.0002)
                    ready.release()
            except BaseException as e:  # noqa: BLE001 - reported in the trainer
                failed.append(e)
                ready.release()
        loader = threading.Thread(target=load, name="ember-loader")
    acq = []
    split = {"convert": 0.0, "push": 0.0, "update": 0.0, "release": 0.0}
    wait_fill = 0
    t0 = time.perf_counter()
    if loader:
        loader.start()
    for b in range(nb):
        if loader:
            ready.acquire()
            if failed:
                raise failed[0]
        else:
            tp = time.perf_counter()
            while pushed < nb:
                parts = batch_of(pushed)
                tc = time.perf_counter()
                split["convert"] += tc - tp
                try:
                    cache.push(parts)
                except ember.Again:
                    break
                finally:
                    tp = time.perf_counter()
                    split["push"] += tp - tc
                pushed += 1
        if b == FILL:
            wait_fill = cache.stats().wait_ns
            t_fill = time.perf_counter()
        ta = time.perf_counter()
        batch = cache.acquire()
        tb = time.perf_counter()
        acq.append(tb - ta)
        mem = cache.memory
        cnt = np.bincount(batch.slots, minlength=0)
        hit = np.flatnonzero(cnt)
        mem[hit, 0] += cnt[hit].astype(np.float32) * np.float32(0.001)
        tc = time.perf_counter()
        split["update"] += tc - tb
        if step:
            pause(step)
        tc = time.perf_counter()
        batch.release()
        split["release"] += time.perf_counter() - tc
    wall = time.perf_counter() - t0
    if loader:
        loader.join()
    st = cache.stats()
    after = wall - (t_fill - t0) if nb > FILL else 0.0
    out = {"driver": "python", "push": args.push, "compute_ms": 1e3 * step, "compute": kind,
           "wall_s": wall, "ms_per_batch": 1e3 * wall / nb,
           "wait_ms_per_batch": st.wait_ns / 1e6 / nb,
           "wait_fraction": st.wait_ns / 1e9 / wall,
           "wait_fraction_after_fill": ((st.wait_ns - wait_fill) / 1e9 / after) if after else 0.0,
           "acquire_ms_median": 1e3 * statistics.median(acq),
           "fetch_ms_per_batch": st.prefetch_busy_ns / 1e6 / nb,
           "plan_ms_per_batch": st.plan_ns / 1e6 / nb,
           "rows_fetched": st.rows_fetched, "rows_written_back": st.rows_written_back,
           "hit_rate": st.hit_rate, "capacity": st.capacity, "load_s": load_s,
           "acquire_ms_per_batch": 1e3 * sum(acq) / nb}
    out.update({f"{k}_ms_per_batch": 1e3 * v / nb for k, v in split.items()})
    del mem
    cache.close()
    store.close()
    return out


def run_c(args, path: str, trace_path: str | None) -> dict:
    js = path + ".json"
    cmd = [args.bench, "--parts", "train", "--lru", "0", "--batch-size", str(args.batch_size),
           "--batches", str(args.batches), "--scale", str(args.scale), "--dim", str(args.dim),
           "--capacity-frac", str(args.capacity_frac), "--window", str(args.window),
           "--mem-budget", str(args.mem_budget), "--seed", str(args.seed),
           "--skew", str(args.skew), "--compute-us", "0", "--dir", path, "--json", js]
    if trace_path:
        cmd += ["--dump-trace", trace_path]
    os.makedirs(path, exist_ok=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    with open(js) as f:
        kv = {d["key"]: d["value"] for d in json.load(f)}
    wall = kv["compute0_oracle_wall_s"]
    return {"driver": "c", "wall_s": wall, "ms_per_batch": 1e3 * wall / args.batches,
            "wait_ms_per_batch": kv["compute0_oracle_wait_ms"],
            "rows_fetched": kv["compute0_oracle_fetched"],
            "plan_ms_per_batch": kv["compute0_oracle_plan_ms"], "stdout": p.stdout}


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "release", "bench", "cache",
                                                    "ember-cache-bench"))
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--scale", type=float, default=0.05, help="Criteo table sizes x scale")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--capacity-frac", type=float, default=0.1)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--mem-budget", type=int, default=8, help="store memory budget, MiB")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skew", type=float, default=1.05)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--push", choices=("inline", "thread"), default="inline")
    ap.add_argument("--compute-ms", default="",
                    help="comma list of step computes (ms) or 'auto'; empty: loop mode only")
    ap.add_argument("--compute", choices=("busy", "sleep"), default="busy")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default="bench_cache_loop.json")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="ember-loop-", dir=args.dir)
    trace = os.path.join(tmp, "trace.bin")
    cs, ps, order = [], [], []
    try:
        rows = ids = None
        for r in range(args.rounds):
            first = "c" if r % 2 == 0 else "python"
            for drv in (first, "python" if first == "c" else "c"):
                d = os.path.join(tmp, f"{drv}{r}")
                if drv == "c":
                    cs.append(run_c(args, d, trace if ids is None else None))
                    if ids is None:
                        rows, ids = read_trace(trace)
                else:
                    ps.append(run_python(args, rows, ids, d))
                shutil.rmtree(d, ignore_errors=True)
                order.append(drv)
                last = (cs if drv == "c" else ps)[-1]
                print(f"  round {r} {drv:<6} {last['ms_per_batch']:8.2f} ms/batch "
                      f"(wait {last['wait_ms_per_batch']:.2f} ms/batch)", flush=True)
        nb, ntables, bs = ids.shape
        total = int(rows.sum())
        ratio = med(ps, "ms_per_batch") / med(cs, "ms_per_batch")
        ratios = [p["ms_per_batch"] / c["ms_per_batch"] for p, c in zip(ps, cs)]
        print(f"\ncache loop: {nb} batches of {bs} x {ntables} tables, {total} rows x {args.dim} "
              f"fp32, cache {int(args.capacity_frac * total)} rows, window {args.window}, "
              f"store budget {args.mem_budget} MiB; push {args.push}; {args.rounds} rounds, "
              f"order alternating")
        print(f"{'driver':<8} {'median ms/batch':>16} {'min':>8} {'max':>8} "
              f"{'wait ms/batch':>14} {'plan ms/batch':>14}")
        for name, rs in (("c", cs), ("python", ps)):
            v = [x["ms_per_batch"] for x in rs]
            print(f"{name:<8} {statistics.median(v):>16.2f} {min(v):>8.2f} {max(v):>8.2f} "
                  f"{med(rs, 'wait_ms_per_batch'):>14.2f} {med(rs, 'plan_ms_per_batch'):>14.2f}")
        print(f"python / c, medians: {ratio:.3f}x (per round: "
              f"{', '.join(f'{x:.3f}' for x in ratios)})")
        print("python's loop, ms/batch (medians): " + ", ".join(
            f"{k} {med(ps, k + '_ms_per_batch'):.2f}"
            for k in ("convert", "push", "acquire", "update", "release")))
        modes = []
        if args.compute_ms:
            fetch = med(ps, "fetch_ms_per_batch")
            if args.compute_ms == "auto":
                computes = [fetch, 1.5 * fetch]
            else:
                computes = [float(x) for x in args.compute_ms.split(",")]
            print(f"\ncompute mode ({args.compute}): fetch time {fetch:.2f} ms/batch "
                  f"(prefetcher busy time per batch, compute 0)")
            print(f"{'compute ms':>10} {'step ms':>8} {'wait/step':>10} {'after fill':>11} "
                  f"{'acquire ms (median)':>20}")
            for cm in computes:
                rs = []
                for r in range(args.rounds):
                    d = os.path.join(tmp, f"compute{r}")
                    rs.append(run_python(args, rows, ids, d, cm / 1e3, args.compute))
                    shutil.rmtree(d, ignore_errors=True)
                m = {"compute_ms": cm, "rounds": rs,
                     "ms_per_batch": med(rs, "ms_per_batch"),
                     "wait_fraction": med(rs, "wait_fraction"),
                     "wait_fraction_after_fill": med(rs, "wait_fraction_after_fill"),
                     "acquire_ms_median": med(rs, "acquire_ms_median")}
                modes.append(m)
                print(f"{cm:>10.2f} {m['ms_per_batch']:>8.2f} {m['wait_fraction']:>10.2%} "
                      f"{m['wait_fraction_after_fill']:>11.2%} {m['acquire_ms_median']:>20.3f}")
        for c in cs:
            c.pop("stdout", None)
        report = {"config": vars(args), "order": order, "c": cs, "python": ps,
                  "c_median_ms_per_batch": med(cs, "ms_per_batch"),
                  "python_median_ms_per_batch": med(ps, "ms_per_batch"),
                  "ratio_median": ratio, "ratio_per_round": ratios, "compute_modes": modes,
                  "ember": ember.__version__, "machine": platform.machine(),
                  "cpus": os.cpu_count(), "load_at_end": os.getloadavg()}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
            print(f"wrote {args.json}")
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
