"""ember.EmbeddingCache with GPU slots (slots="gpu"), and EmbeddingBagCollection on them.

Every check runs on ember_gpu's host backend (gpu_backend="host": the arena is host
memory, exported through __array_interface__), so it runs on any machine; the same
checks run on the CUDA backend with CUDA tensors when ember was built with CUDA and
torch sees a GPU (skipped otherwise):

  - the rows read through device_memory equal read_rows (narrower tables padded
    with zeros);
  - apply_device (one grouped scatter-apply) leaves the rows and Adagrad state the
    host-slot cache's apply leaves, over batches with duplicates and evictions;
  - bad gradients (shape, dtype, layout, NULL, wrong device), a wrong optimizer or
    lr are ValueErrors and change nothing;
  - a released batch's device views raise StateError; the cache refuses to close
    while a device view (or an array over it) lives;
  - EmbeddingBagCollection(device="cuda") trains like nn.EmbeddingBag.
"""

import os

import numpy as np
import pytest

import ember
from ember import _ember
from ember.cache import EmbeddingCache, Table

SEED = int(os.environ.get("EMBER_TEST_SEED", "2468"))
SCALE = max(0.01, float(os.environ.get("EMBER_TEST_SCALE", "1") or 1))
STORE_OPTS = dict(log_memory=16 << 20, index_buckets=1 << 12)

try:
    import torch
except ImportError:  # the host-backend checks need numpy only
    torch = None


def cuda_usable():
    return bool(_ember.have_cuda()) and torch is not None and torch.cuda.is_available()


BACKENDS = ["host", pytest.param("cuda", marks=pytest.mark.skipif(
    not cuda_usable(), reason="ember built without CUDA, or torch sees no GPU"))]


def setup_module(module):
    print(f"seed {SEED} scale {SCALE} have_cuda {_ember.have_cuda()}")


@pytest.fixture
def stores(tmp_path):
    made = []

    def make(name="store"):
        s = ember.Store(str(tmp_path / name), **STORE_OPTS)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()  # twice is fine


def tables(optimizer="none"):
    return [Table("user", rows=500, dim=4, optimizer=optimizer, init="uniform",
                  init_scale=0.5, init_seed=3),
            Table("item", rows=300, dim=8, optimizer=optimizer, init="uniform",
                  init_scale=0.5, init_seed=4)]


def gpu_cache(store, backend, optimizer="none", **kw):
    kw.setdefault("capacity", 128)
    kw.setdefault("window", 4)
    return EmbeddingCache(store, tables(optimizer), arrays="numpy", slots="gpu",
                          gpu_backend=backend, **kw)


def stream_of(backend):
    return torch.cuda.current_stream().cuda_stream if backend == "cuda" else None


def arena_rows(batch, backend):
    """The arena as a host numpy array (a copy on CUDA), after the batch's ready."""
    batch.wait(stream_of(backend))
    dm = batch.device_memory
    if backend == "cuda":
        assert hasattr(dm, "__cuda_array_interface__") and not hasattr(dm, "__array_interface__")
        cai = dm.__cuda_array_interface__
        assert cai["typestr"] == "<f4" and cai["version"] == 3 and cai["stream"] is None
        return torch.as_tensor(dm, device="cuda").cpu().numpy()
    assert not hasattr(dm, "__cuda_array_interface__")
    return np.asarray(dm).copy()


def to_backend(a, backend):
    return torch.from_numpy(np.ascontiguousarray(a)).cuda() if backend == "cuda" else a


def random_batch(rng, dup=True):
    u = rng.integers(0, 500, size=24, dtype=np.int64)
    i = rng.integers(0, 300, size=16, dtype=np.int64)
    if dup:
        u[:6] = u[6:12]  # duplicates within a part
    return {"user": u, "item": i}


@pytest.mark.parametrize("backend", BACKENDS)
def test_device_memory_rows_equal_read_rows(stores, backend):
    rng = np.random.default_rng(SEED)
    cache = gpu_cache(stores(), backend)
    for step in range(max(3, int(12 * SCALE))):
        batch = random_batch(rng)
        want = {n: cache.read_rows(n, ids) for n, ids in batch.items()}
        cache.push(batch)
        b = cache.acquire()
        info = cache.device_info()
        assert info["backend"] == backend and info["dim"] == 8 and b.arena_dim == 8
        mem = arena_rows(b, backend)
        assert mem.shape == (info["nslots"], info["stride"])
        assert b.slots.dtype == np.int64 and len(b.slots) == b.nlookups == 40
        for p, (name, ids) in enumerate(batch.items()):
            slots = b.part_slots(p)
            dim = cache.tables[p].dim
            np.testing.assert_array_equal(mem[slots, :dim], want[name])
            assert np.all(mem[slots, dim:8] == 0), "a narrower row's padding is not zero"
        b.release(dirty=False, done_stream=stream_of(backend))
    cache.close()


def run_pair(stores, backend, optimizer, lr, eps, steps):
    """The same batches and gradients through a host-slot cache (apply per part) and
    a GPU-slot cache (one apply_device); both caches returned, open."""
    rng = np.random.default_rng(SEED + 1)
    host = EmbeddingCache(stores("host"), tables(optimizer), capacity=96, window=4,
                          arrays="numpy")
    dev = gpu_cache(stores("gpu"), backend, optimizer, capacity=96)
    opt = "adagrad" if optimizer == "adagrad" else "sgd"
    for _ in range(steps):
        batch = random_batch(rng)
        host.push(batch)
        dev.push(batch)
        grads = [rng.standard_normal((len(ids), t.dim)).astype(np.float32)
                 for ids, t in zip(batch.values(), host.tables)]
        hb = host.acquire()
        for p, g in enumerate(grads):
            hb.apply(p, g, lr, eps)
        hb.release()
        db = dev.acquire()
        full = np.zeros((db.nlookups, db.arena_dim), np.float32)
        for p, g in enumerate(grads):
            a, b = int(db.offsets[p]), int(db.offsets[p + 1])
            full[a:b, :g.shape[1]] = g
        db.apply_device(to_backend(full, backend), lr, eps, optimizer=opt,
                        stream=stream_of(backend))
        db.release(done_stream=stream_of(backend))
    return host, dev


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimizer, lr, eps", [("none", 0.3, 0.0), ("adagrad", 0.1, 1e-8)])
def test_apply_device_equals_host_apply(stores, backend, optimizer, lr, eps):
    steps = max(6, int(30 * SCALE))
    host, dev = run_pair(stores, backend, optimizer, lr, eps, steps)
    assert dev.stats().rows_evicted > 0 and dev.stats().rows_written_back > 0
    for t in host.tables:
        ids = np.arange(t.rows, dtype=np.int64)
        if optimizer == "adagrad":
            hr, hs = host.read_rows(t.name, ids, state=True)
            dr, ds = dev.read_rows(t.name, ids, state=True)
            np.testing.assert_allclose(ds, hs, rtol=1e-6, atol=1e-7)
        else:
            hr, dr = host.read_rows(t.name, ids), dev.read_rows(t.name, ids)
        np.testing.assert_allclose(dr, hr, rtol=1e-6, atol=1e-7)
        assert np.any(dr != t_init(t, ids)), "nothing was updated"
    host.close()
    dev.close()


def t_init(t, ids):
    """Rows as a fresh cache over an empty store reads them (the tables' init)."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        s = ember.Store(d, **STORE_OPTS)
        c = EmbeddingCache(s, tables(t.optimizer), capacity=64, arrays="numpy")
        rows = c.read_rows(t.name, ids)
        c.close()
        s.close()
    return rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_gradients_change_nothing(stores, backend):
    rng = np.random.default_rng(SEED + 2)
    cache = gpu_cache(stores(), backend, "adagrad")
    batch = random_batch(rng)
    before = {n: cache.read_rows(n, ids, state=True) for n, ids in batch.items()}
    cache.push(batch)
    b = cache.acquire()
    n, d = b.nlookups, b.arena_dim
    good = np.zeros((n, d), np.float32) + 1
    s = stream_of(backend)
    bad = [(np.zeros((n, d - 1), np.float32), "shape"),
           (np.zeros((n + 1, d), np.float32), "shape"),
           (np.zeros((n, d)), "float32"),
           (np.zeros((n, d), np.float16), "float32")]
    bad = [(to_backend(g, backend), m) for g, m in bad]
    if backend == "cuda":
        bad += [(torch.zeros(d, n, device="cuda").t(), "contiguous"),
                (torch.zeros(n, 2 * d, device="cuda")[:, ::2], "contiguous")]
    else:
        bad += [(np.asfortranarray(good), "contiguous"),
                (np.zeros((n, 2 * d), np.float32)[:, ::2], "contiguous")]
    bad += [(0, "NULL"), (-5, "NULL")]
    for g, match in bad:
        with pytest.raises(ValueError, match=match):
            b.apply_device(g, 0.1, stream=s)
    with pytest.raises(ValueError, match="optimizer"):
        b.apply_device(to_backend(good, backend), 0.1, optimizer="sgd", stream=s)
    for lr in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="lr"):
            b.apply_device(to_backend(good, backend), lr, stream=s)
    with pytest.raises(TypeError):
        b.apply_device("grads", 0.1)
    with pytest.raises(TypeError):
        b.wait(stream="0")
    if backend == "host" and torch is not None and torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA tensor"):
            b.apply_device(torch.zeros(n, d, device="cuda"), 0.1)
    if backend == "cuda":
        with pytest.raises(ValueError, match="CUDA array"):
            b.apply_device(good, 0.1, stream=s)  # host memory for device slots
    b.release(dirty=False, done_stream=s)
    for name, ids in batch.items():
        rows, st = cache.read_rows(name, ids, state=True)
        np.testing.assert_array_equal(rows, before[name][0])
        np.testing.assert_array_equal(st, before[name][1])
    cache.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_released_batch_and_close_with_live_views(stores, backend):
    rng = np.random.default_rng(SEED + 3)
    cache = gpu_cache(stores(), backend)
    cache.push(random_batch(rng))
    cache.push(random_batch(rng))
    b = cache.acquire()
    dm = b.device_memory
    assert dm is b.device_memory and dm.shape[1] == cache.device_info()["stride"]
    b.release(dirty=False, done_stream=stream_of(backend))
    for use in (lambda: b.device_memory, lambda: b.wait(), lambda: b.arena_dim,
                lambda: b.apply_device(1, 0.1), lambda: b.release(),
                lambda: dm.__cuda_array_interface__ if backend == "cuda"
                else dm.__array_interface__):
        with pytest.raises(ember.StateError):
            use()
    if backend == "host":
        with pytest.raises(ember.StateError):
            np.asarray(dm)
    else:  # torch may probe the interface with an error-swallowing hasattr
        with pytest.raises((ember.StateError, TypeError, RuntimeError, ValueError)):
            torch.as_tensor(dm, device="cuda")
    with pytest.raises(ember.BusyError):
        cache.close()
    del dm
    b2 = cache.acquire()
    if backend == "host":
        arr = np.asarray(b2.device_memory)   # the array holds the view
    else:
        arr = torch.as_tensor(b2.device_memory, device="cuda")
    b2.release(dirty=False, done_stream=stream_of(backend))
    with pytest.raises(ember.BusyError):
        cache.close()
    del arr
    cache.close()
    cache.close()
    with pytest.raises(ember.StateError):
        b2.device_memory


def test_slot_options_and_host_slot_refusals(stores):
    store = stores()
    with pytest.raises(ValueError, match="slots"):
        EmbeddingCache(store, tables(), slots="device")
    with pytest.raises(ValueError, match="gpu_backend"):
        EmbeddingCache(store, tables(), slots="gpu", gpu_backend="rocm")
    with pytest.raises(ValueError, match="need slots='gpu'"):
        EmbeddingCache(store, tables(), gpu_backend="host")
    with pytest.raises(ValueError, match="gpu_device"):
        EmbeddingCache(store, tables(), slots="gpu", gpu_device=-1)
    with pytest.raises(ValueError, match="same optimizer"):
        EmbeddingCache(store, [Table("a", 10, 4), Table("b", 10, 4, optimizer="adagrad")],
                       slots="gpu", gpu_backend="host")
    with pytest.raises(ValueError, match="same optimizer"):
        EmbeddingCache(store, [Table("a", 10, 4, optimizer="rowwise_adagrad")], slots="gpu",
                       gpu_backend="host")
    assert isinstance(_ember.have_cuda(), bool)
    if not _ember.have_cuda():
        with pytest.raises(ember.InvalidArgument):
            EmbeddingCache(store, tables(), slots="gpu", gpu_backend="cuda")

    host = EmbeddingCache(store, tables(), capacity=64, arrays="numpy")
    host.push({"user": np.arange(4, dtype=np.int64)})
    b = host.acquire()
    with pytest.raises(ValueError, match="host memory"):
        b.device_memory
    with pytest.raises(ValueError, match="host memory"):
        b.wait()
    with pytest.raises(ValueError, match="host memory"):
        b.release(done_stream=0)
    b.release()
    host.close()

    dev = gpu_cache(store, "host")
    with pytest.raises(ember.StateError):
        dev.device_info()  # known after the first acquire
    dev.push({"user": np.arange(4, dtype=np.int64)})
    b = dev.acquire()
    with pytest.raises(ValueError, match="device_memory"):
        b.memory
    with pytest.raises(ember.InvalidArgument):
        b.apply(0, np.zeros((4, 4), np.float32), 0.1)  # ember_cache_apply: host slots only
    b.wait()
    b.apply_device(np.zeros((4, 8), np.float32), 0.1)
    b.release()
    dev.close()


# ---- EmbeddingBagCollection(device="cuda") -------------------------------------------

TORCH_BACKENDS = [pytest.param("host", marks=pytest.mark.skipif(torch is None,
                                                                reason="no torch")),
                  BACKENDS[1]]


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
@pytest.mark.parametrize("optimizer", [("sgd", 0.5), ("adagrad", 0.1)])
def test_collection_on_gpu_slots_trains_like_torch(tmp_path, backend, optimizer):
    import test_torch as tt
    from ember.torch import EmbeddingBagCollection

    dev = torch.device("cuda" if backend == "cuda" else "cpu")
    steps = max(10, int(60 * SCALE))
    batches = tt.make_batches(SEED, steps)
    w = tt.head().to(dev)
    store = ember.Store(str(tmp_path / "store"), **STORE_OPTS)
    ebc = EmbeddingBagCollection(tt.configs(), store, cache_rows=sum(tt.ROWS) // 10,
                                 lookahead=4, optimizer=optimizer, device="cuda",
                                 gpu_backend=backend)
    ref = tt.Reference(ebc, optimizer)
    for bag in ref.bags:
        bag.to(dev)
    params = [b.weight for b in ref.bags]
    ref.opt = (torch.optim.SGD(params, lr=ref.lr) if optimizer[0] == "sgd"
               else torch.optim.Adagrad(params, lr=ref.lr, eps=ref.eps))
    for step, (feats, y) in enumerate(ebc.pipeline(batches, sparse=lambda b: b[0])):
        dfeats = {k: (v.to(dev), o.to(dev)) for k, (v, o) in feats.items()}
        out = ebc(feats)
        assert all(t.device.type == dev.type for t in out.values())
        loss = tt.loss_of(out, y.to(dev), w)
        loss.backward()
        want = ref.step(dfeats, y.to(dev), w)
        assert float(loss) == pytest.approx(want, rel=1e-5, abs=1e-6), f"step {step}"
    st = ebc.stats()
    assert st.rows_evicted > 0 and st.rows_written_back > 0, st
    assert st.batches_released == steps
    for cfg, bag in zip(ebc.configs, ref.bags):
        torch.testing.assert_close(ebc.export_table(cfg.name), bag.weight.detach().cpu(),
                                   rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # eval: forward releases the batch at once
        ebc.eval()
        out = ebc(batches[0][0])
        assert out["t0"].shape == (tt.BATCH, tt.DIM)
    ebc.close()
    store.close()


def test_collection_device_options(tmp_path):
    if torch is None:
        pytest.skip("no torch")
    from ember.torch import EmbeddingBagCollection, EmbeddingBagConfig
    store = ember.Store(str(tmp_path / "store"), **STORE_OPTS)
    cfg = [EmbeddingBagConfig("t", 100, 4)]
    with pytest.raises(ValueError, match="optimizer"):
        EmbeddingBagCollection(cfg, store, 50, optimizer=("rowwise_adagrad", 0.1),
                               device="cuda", gpu_backend="host")
    with pytest.raises(ValueError, match="weight_decay"):
        EmbeddingBagCollection(cfg, store, 50, weight_decay=0.1, device="cuda",
                               gpu_backend="host")
    with pytest.raises(ValueError, match="device"):
        EmbeddingBagCollection(cfg, store, 50, device="meta")
    store.close()
