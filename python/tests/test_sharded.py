"""ember.sharded: ShardedEmbeddingBagCollection over gloo trains like one process.

Ranks are processes of torch.multiprocessing (forkserver, torch preloaded) joined by
gloo over 127.0.0.1. The reference is the single-process EmbeddingBagCollection on the
global batches; each rank trains on its share of every global batch, with the loss
of its samples divided by the global batch size, so that the gradients summed over
ranks are the single-process ones. Losses (all-reduced) and final tables (gathered
from the shards) must agree to fp32 rounding for 1, 2 and 4 ranks. Some steps are
uneven: the first ranks' samples name only rows of rank 1, the last ranks' bags are
empty, and one step gives the last rank no sample at all. A rank killed mid-epoch
makes the others fail with ShardError within the gloo timeout, and a restart from
the last global checkpoint ends with the uninterrupted run's tables. Every launch has
a deadline and kills its children.
"""

import datetime
import os
import shutil
import signal
import socket
import time
import traceback

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.multiprocessing as tmp  # noqa: E402

import ember  # noqa: E402
from ember.sharded import ShardError, ShardedEmbeddingBagCollection  # noqa: E402
from ember.torch import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402

SEED = int(os.environ.get("EMBER_TEST_SEED", "2468"))
SCALE = max(0.01, float(os.environ.get("EMBER_TEST_SCALE", "1") or 1))
STEPS = max(10, int(16 * SCALE))
GLOBAL_B = 8
DIM = 8
MAX_BAG = 3
CACHE_ROWS = 130  # a tenth of the rows: evictions and write-backs happen
GLOO_TIMEOUT = 10  # seconds: a collective with a dead rank fails within this
LAUNCH_DEADLINE = 90
OPT = ("adagrad", 0.1)
STORE = dict(log_memory=8 << 20, index_buckets=1 << 10)
UNEVEN_TARGET, UNEVEN_EMPTY, NO_SAMPLES = 2, 3, 4  # the uneven steps


def setup_module(module):
    print(f"seed {SEED} scale {SCALE} steps {STEPS}")


def configs():
    return [EmbeddingBagConfig("t0", 600, DIM, pooling="sum"),
            EmbeddingBagConfig("t1", 400, DIM, pooling="mean", feature_names=["t1a", "t1b"]),
            EmbeddingBagConfig("t2", 300, DIM, pooling="sum")]


FEATURES = (("t0", 600), ("t1a", 400), ("t1b", 400), ("t2", 300))


def samples(step):
    """The global batch of a step: per sample, per feature, its ids; and the labels."""
    rng = np.random.default_rng(SEED * 1000 + step)
    out = []
    for i in range(GLOBAL_B):
        bags = {}
        for f, n in FEATURES:
            k = int(rng.integers(0, MAX_BAG + 1))
            ids = (rng.zipf(1.3, size=k) * 7919 % n).astype(np.int64)
            if step == UNEVEN_TARGET and i < GLOBAL_B // 2:
                ids = (ids // 4) * 4 + 1  # rows of rank 1 (of 2 or 4 ranks)
                ids[ids >= n] -= 4
            if step == UNEVEN_EMPTY and i >= GLOBAL_B // 2:
                ids = ids[:0]
            bags[f] = ids
        out.append(bags)
    y = rng.standard_normal(GLOBAL_B).astype(np.float32)
    return out, y


def shares(step, world):
    """Sample ranges of each rank (the last rank gets none at NO_SAMPLES)."""
    if world > 1 and step == NO_SAMPLES:
        cuts = np.linspace(0, GLOBAL_B, world).round().astype(int).tolist() + [GLOBAL_B]
    else:
        cuts = [GLOBAL_B * r // world for r in range(world + 1)]
    return [(cuts[r], cuts[r + 1]) for r in range(world)]


def batch_of(step, lo, hi):
    """(features, labels) of samples lo..hi of a step, as EmbeddingBagCollection takes."""
    smp, y = samples(step)
    feats = {}
    for f, _ in FEATURES:
        bags = [smp[i][f] for i in range(lo, hi)]
        lengths = [len(b) for b in bags]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) \
            if bags else np.zeros(0, np.int64)
        ids = np.concatenate(bags).astype(np.int64) if bags else np.zeros(0, np.int64)
        feats[f] = (torch.from_numpy(ids), torch.from_numpy(offsets))
    return feats, torch.from_numpy(y[lo:hi].copy())


def head():
    g = torch.Generator().manual_seed(SEED)
    return torch.randn(len(FEATURES) * DIM, generator=g) / 4


def local_loss(pooled, y):
    x = torch.cat([pooled[f] for f, _ in FEATURES], dim=1)
    return ((x @ head() - y) ** 2).sum() / GLOBAL_B


def reference(tmp_path):
    """Losses and final tables of the single-process collection, and the file of its
    initial tables (the shards start from them: their own init depends on the world)."""
    store = ember.Store(str(tmp_path / "ref"), **STORE)
    ebc = EmbeddingBagCollection(configs(), store, cache_rows=CACHE_ROWS, lookahead=3,
                                 optimizer=OPT)
    init = str(tmp_path / "init.pt")
    torch.save(ebc.state_dict(), init)
    losses = []
    for step in range(STEPS):
        feats, y = batch_of(step, 0, GLOBAL_B)
        loss = local_loss(ebc(feats), y)
        loss.backward()
        losses.append(float(loss))
    sd = ebc.state_dict()
    ebc.close()
    store.close()
    return losses, sd, init


# ---- the ranks ----

def _train(ebc, rank, world, start, stop, args):
    """Steps start..stop-1: direct forwards for the first half, the pipeline after."""
    losses = []
    mid = max(start, min(stop, STEPS // 2))

    def one(step, feats, y):
        loss = local_loss(ebc(feats), y)
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append((step, float(total)))
        every = args.get("checkpoint_every")
        if every and (step + 1) % every == 0:
            ebc.checkpoint(extra={"step": step + 1})
        if args.get("kill_at") == step and rank == args.get("kill_rank"):
            os.kill(os.getpid(), signal.SIGKILL)

    for step in range(start, mid):
        lo, hi = shares(step, world)[rank]
        one(step, *batch_of(step, lo, hi))
    items = [(step, batch_of(step, *shares(step, world)[rank])) for step in range(mid, stop)]
    for step, (feats, y) in ebc.pipeline(items, sparse=lambda b: b[1][0]):
        one(step, feats, y)
    return losses


def _bad_inputs(ebc, rank, world):
    """Misuse raises on every rank, and the ranks stay in step."""
    feats, _ = batch_of(0, *shares(0, world)[rank])
    bad = dict(feats)
    if rank == world - 1:
        bad["t2"] = (torch.tensor([1, 300]), torch.tensor([0]))
    try:
        ebc(bad)
        raise AssertionError("a bad id was accepted")
    except ValueError as e:  # the bad rank
        assert rank == world - 1 and "ids[1]: 300 is out of range" in str(e), e
    except ShardError as e:  # the others
        assert rank != world - 1 and "failed to load" in str(e), e
    # a pipeline whose rank world-1 fails at its second batch
    items = [batch_of(0, *shares(0, world)[rank]), bad, feats]
    seen = 0
    try:
        for f in ebc.pipeline(items, sparse=lambda b: b[0] if isinstance(b, tuple) else b):
            with torch.no_grad():
                ebc(f[0] if isinstance(f, tuple) else f)
            seen += 1
        raise AssertionError("the pipeline did not fail")
    except (ValueError, ShardError) as e:
        assert isinstance(e, ValueError) == (rank == world - 1), e
    assert seen == 1
    # leaving a pipeline early, and an eval forward, keep the ranks in step
    before = ebc.export_table("t0")
    for f in ebc.pipeline([feats, feats, feats]):
        with torch.no_grad():
            out = ebc(f)
        break
    assert set(out) == {f for f, _ in FEATURES} and out["t0"].shape[0] == feats["t0"][1].numel()
    ebc.eval()
    ebc(feats)
    ebc.train()
    torch.testing.assert_close(ebc.export_table("t0"), before, rtol=0, atol=0)


def _bad_args(path):
    """Bad constructor arguments raise before any store is opened."""
    for kw, match in ((dict(cache_rows=0), "cache_rows"), (dict(lookahead=0), "lookahead"),
                      (dict(store_options={"close_checkpoint": True}), "set by the collection"),
                      (dict(optimizer=("adam", 0.1)), "optimizer")):
        args = dict(cache_rows=10)
        args.update(kw)
        try:
            ShardedEmbeddingBagCollection(configs(), path, **args)
            raise AssertionError(f"{kw} was accepted")
        except ValueError as e:
            assert match in str(e), e
    assert not os.path.exists(os.path.join(path, "rank-0"))


def _worker(rank, world, port, path, out_dir, args):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    result = {"rank": rank}
    t_last = time.monotonic()
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=GLOO_TIMEOUT))
        if world == 1:
            _bad_args(path + "-bad")
        ebc = ShardedEmbeddingBagCollection(configs(), path, cache_rows=CACHE_ROWS,
                                            lookahead=3, optimizer=OPT, store_options=STORE)
        extra = ebc.checkpoint_info.get("extra") or {}
        start = int(extra.get("step", 0))
        result["start"] = start
        result["table_rows"] = [t.rows for t in ebc.cache.tables]
        if start == 0:
            ebc.load_state_dict(torch.load(args["init"]))
        t_last = time.monotonic()
        result["losses"] = _train(ebc, rank, world, start, STEPS, args)
        t_last = time.monotonic()
        result["state"] = ebc.state_dict()
        result["timings"] = ebc.timings()
        if args.get("bad_inputs"):
            _bad_inputs(ebc, rank, world)
        ebc.close()
        dist.destroy_process_group()
    except BaseException as e:
        result["error"] = f"{type(e).__name__}: {e}"
        result["error_type"] = type(e).__name__
        result["error_after"] = time.monotonic() - t_last
        result["trace"] = traceback.format_exc()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, path, out_dir, **args):
    """Run `world` ranks; every rank's result (or None for one that wrote none)."""
    os.makedirs(out_dir, exist_ok=True)
    ctx = tmp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "numpy", "ember.sharded"])
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, str(path), str(out_dir), args))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + LAUNCH_DEADLINE
    try:
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
    finally:
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert not hung, f"ranks {hung} still ran after {LAUNCH_DEADLINE} s"
    out = []
    for r in range(world):
        f = os.path.join(out_dir, f"rank{r}.pt")
        out.append(torch.load(f) if os.path.exists(f) else None)
        if os.path.exists(f):
            os.remove(f)
    return out, [p.exitcode for p in procs]


def check_like_reference(results, ref_losses, ref_sd, init, first_step=0):
    for res in results:
        assert "error" not in res, res.get("trace")
        got = dict(res["losses"])
        assert sorted(got) == list(range(first_step, STEPS))
        for step, loss in got.items():
            assert loss == pytest.approx(ref_losses[step], rel=2e-5, abs=1e-6), f"step {step}"
        assert set(res["state"]) == set(ref_sd)
        for k, v in ref_sd.items():
            torch.testing.assert_close(res["state"][k], v, rtol=1e-5, atol=1e-6, msg=k)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("reference"))


def test_uneven_steps_are_uneven():
    """The data really has the uneven steps the module docstring promises."""
    for world in (2, 4):
        lo, hi = shares(UNEVEN_TARGET, world)[0]
        ids = torch.cat([v for v, _ in batch_of(UNEVEN_TARGET, lo, hi)[0].values()])
        assert ids.numel() > 0 and bool((ids % world == 1).all())
        lo, hi = shares(UNEVEN_EMPTY, world)[world - 1]
        assert all(v.numel() == 0 for v, _ in batch_of(UNEVEN_EMPTY, lo, hi)[0].values())
        lo, hi = shares(NO_SAMPLES, world)[world - 1]
        assert lo == hi


@pytest.mark.parametrize("world", [1, 2, 4])
def test_trains_like_one_process(tmp_path, ref, world):
    results, codes = launch(world, tmp_path / "shards", tmp_path / "out", init=ref[2],
                            bad_inputs=(world == 2))
    assert codes == [0] * world, [r and r.get("trace") for r in results]
    check_like_reference(results, *ref)
    for r, res in enumerate(results):  # a rank's cache holds its local rows only
        assert res["table_rows"] == [(n - r + world - 1) // world for n in (600, 400, 300)]
        tm = res["timings"]
        assert tm["steps"] == STEPS
        if world > 1:  # every rank sent ids and rows to the others
            assert tm["bytes_sent"]["ids"] > 0 and tm["bytes_sent"]["rows"] > 0
    for r in range(world):
        assert os.path.exists(tmp_path / "shards" / f"rank-{r}" / "ember.super")


def test_killed_rank_and_restart(tmp_path, ref):
    path, out = tmp_path / "shards", tmp_path / "out"
    kill_at = STEPS // 2 + 1  # in the pipeline's half, after the checkpoint at STEPS//2
    every = max(1, STEPS // 4)
    results, codes = launch(2, path, out, init=ref[2], checkpoint_every=every, kill_at=kill_at,
                            kill_rank=1)
    assert codes[1] == -signal.SIGKILL, codes
    survivor = results[0]
    print("survivor:", survivor and survivor.get("error"), survivor and survivor.get("error_after"))
    assert survivor is not None and survivor.get("error_type") == "ShardError", survivor
    assert "failed" in survivor["error"] and "rank 0 of 2" in survivor["error"], survivor["error"]
    assert survivor["error_after"] < GLOO_TIMEOUT + 20, survivor["error_after"]
    last = (kill_at + 1) // every * every
    # a restart with the same world size resumes at the last global checkpoint
    results, codes = launch(2, path, out, checkpoint_every=every)
    assert codes == [0, 0], [r and r.get("trace") for r in results]
    assert [r["start"] for r in results] == [last, last]
    check_like_reference(results, *ref, first_step=last)
    # another world size, then a missing rank's directory: clear errors on every rank
    results, codes = launch(1, path, out)
    assert "written by a collection of [2] ranks; this process group has 1" in \
        results[0]["error"], results[0]
    shutil.rmtree(path / "rank-1")
    results, codes = launch(2, path, out)
    for res in results:
        assert res["error_type"] == "ShardError" and "ranks [1] found no store" in res["error"], res


def test_needs_a_process_group(tmp_path):
    assert not dist.is_initialized()
    with pytest.raises(ShardError, match="not initialised"):
        ShardedEmbeddingBagCollection(configs(), str(tmp_path), cache_rows=10)
