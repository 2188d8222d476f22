"""ember.torch: EmbeddingBagCollection over Ember trains exactly like torch.

The reference is plain nn.EmbeddingBag tables (dense, in memory) with torch.optim.SGD
or torch.optim.Adagrad (row-wise Adagrad written out), started from the rows Ember
holds (read through the cache, so the init does not matter). With a cache of 10% of
the rows (evictions and write-backs happen), the loss at every step and the final
tables must agree to fp32 rounding, also across a checkpoint, close and reopen; fp16
storage to fp16 rounding. Misuse of the pipeline and bad ids raise clear errors.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ember  # noqa: E402
from ember.torch import EmbeddingBagCollection, EmbeddingBagConfig, Jagged  # noqa: E402

SEED = int(os.environ.get("EMBER_TEST_SEED", "4321"))
SCALE = max(0.01, float(os.environ.get("EMBER_TEST_SCALE", "1") or 1))
STORE_OPTS = dict(log_memory=16 << 20, index_buckets=1 << 12)
ROWS = (600, 400, 300)
DIM = 8
BATCH = 8
MAX_BAG = 4


def setup_module(module):
    print(f"seed {SEED} scale {SCALE}")


def configs(pooling=("sum", "mean", "sum"), storage="fp32"):
    return [EmbeddingBagConfig(f"t{k}", n, DIM, pooling=pooling[k], storage=storage)
            for k, n in enumerate(ROWS)]


def zipf_ids(rng, n, size):
    """Zipf-skewed ids in [0, n), hot ids scattered over the table."""
    perm = np.random.default_rng(n).permutation(n)
    return perm[(rng.zipf(1.2, size=size) - 1) % n].astype(np.int64)


def make_batches(seed, steps):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        feats = {}
        for k, n in enumerate(ROWS):
            lengths = rng.integers(0, MAX_BAG + 1, size=BATCH)
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            ids = zipf_ids(rng, n, int(lengths.sum()))
            feats[f"t{k}"] = (torch.from_numpy(ids), torch.from_numpy(offsets))
        y = torch.from_numpy(rng.standard_normal(BATCH).astype(np.float32))
        out.append((feats, y))
    return out


def head():
    """A fixed linear read-out so that every lookup gets a distinct gradient."""
    g = torch.Generator().manual_seed(SEED)
    return torch.randn(len(ROWS) * DIM, generator=g) / 4


def loss_of(pooled, y, w):
    x = torch.cat([pooled[f"t{k}"] for k in range(len(ROWS))], dim=1)
    return ((x @ w - y) ** 2).mean()


class Reference:
    """Dense nn.EmbeddingBag tables with a torch optimizer, from Ember's initial rows."""

    def __init__(self, ebc, optimizer):
        self.bags = []
        for cfg in ebc.configs:
            bag = torch.nn.EmbeddingBag(cfg.num_embeddings, cfg.embedding_dim, mode=cfg.pooling)
            with torch.no_grad():
                bag.weight.copy_(ebc.export_table(cfg.name))
            self.bags.append(bag)
        params = [b.weight for b in self.bags]
        self.kind, self.lr = optimizer[0], optimizer[1]
        self.eps = optimizer[2] if len(optimizer) > 2 else 1e-10
        if self.kind == "sgd":
            self.opt = torch.optim.SGD(params, lr=self.lr)
        elif self.kind == "adagrad":
            self.opt = torch.optim.Adagrad(params, lr=self.lr, eps=self.eps)
        else:  # row-wise Adagrad, as FBGEMM: one accumulator per row
            self.opt = None
            self.acc = [torch.zeros(p.shape[0]) for p in params]

    def step(self, feats, y, w):
        pooled = {f"t{k}": bag(*feats[f"t{k}"]) for k, bag in enumerate(self.bags)}
        loss = loss_of(pooled, y, w)
        for b in self.bags:
            b.weight.grad = None
        loss.backward()
        if self.opt is not None:
            self.opt.step()
        else:
            with torch.no_grad():
                for b, acc in zip(self.bags, self.acc):
                    g = b.weight.grad
                    acc += (g * g).mean(dim=1)
                    b.weight -= self.lr * g / (acc.sqrt() + self.eps).unsqueeze(1)
        return float(loss)


def ember_step(ebc, feats, y, w):
    loss = loss_of(ebc(feats), y, w)
    loss.backward()
    return float(loss)


def open_ebc(store, optimizer, cfgs=None, lookahead=4):
    cfgs = cfgs or configs()
    return EmbeddingBagCollection(cfgs, store, cache_rows=sum(ROWS) // 10, lookahead=lookahead,
                                  optimizer=optimizer)


def compare(ebc, ref, rtol, atol):
    for cfg, bag in zip(ebc.configs, ref.bags):
        torch.testing.assert_close(ebc.export_table(cfg.name), bag.weight.detach(),
                                   rtol=rtol, atol=atol)


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "store")


@pytest.mark.parametrize("optimizer", [("sgd", 0.5), ("adagrad", 0.1), ("rowwise_adagrad", 0.1)])
def test_trains_like_torch(store_path, optimizer):
    steps = max(10, int(60 * SCALE))
    batches = make_batches(SEED, steps)
    w = head()
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, optimizer)
    ref = Reference(ebc, optimizer)
    for step, (feats, y) in enumerate(ebc.pipeline(batches, sparse=lambda b: b[0])):
        got = ember_step(ebc, feats, y, w)
        want = ref.step(feats, y, w)
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), f"step {step}"
    st = ebc.stats()
    assert st.rows_evicted > 0 and st.rows_written_back > 0, st
    assert st.batches_released == steps
    compare(ebc, ref, rtol=1e-5, atol=1e-6)
    if optimizer[0] != "sgd":  # the optimizer state beside the rows matches torch's
        sd = ebc.state_dict()
        for k, cfg in enumerate(ebc.configs):
            st_rows = sd[f"tables.{cfg.name}.optimizer_state"]
            if optimizer[0] == "adagrad":
                want = ref.opt.state[ref.bags[k].weight]["sum"]
            else:
                want = ref.acc[k].unsqueeze(1)
            torch.testing.assert_close(st_rows, want, rtol=1e-5, atol=1e-7)
    ebc.close()
    store.close()


@pytest.mark.parametrize("optimizer", [("sgd", 0.5), ("adagrad", 0.1)])
def test_mixed_dims_train_like_torch(store_path, optimizer):
    """Tables of dims 8, 4 and 6 in one cache (its rows 8 floats wide, then the
    Adagrad state): forward pools a table whose dim divides the row width straight
    from the slots (every row, or every second one: dims 8 and 4) and gathers the
    dim-6 table's rows first; all three train as nn.EmbeddingBag does."""
    dims = (8, 4, 6)
    cfgs = [EmbeddingBagConfig(f"t{k}", n, d, pooling=("sum", "mean", "sum")[k])
            for k, (n, d) in enumerate(zip(ROWS, dims))]
    g = torch.Generator().manual_seed(SEED + 7)
    w = torch.randn(sum(dims), generator=g) / 4
    batches = make_batches(SEED + 7, max(10, int(40 * SCALE)))
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, optimizer, cfgs=cfgs)
    ref = Reference(ebc, optimizer)
    for step, (feats, y) in enumerate(ebc.pipeline(batches, sparse=lambda b: b[0])):
        got = ember_step(ebc, feats, y, w)
        want = ref.step(feats, y, w)
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), f"step {step}"
    assert ebc.stats().rows_evicted > 0
    compare(ebc, ref, rtol=1e-5, atol=1e-6)
    ebc.close()
    store.close()


def test_direct_forward_without_pipeline(store_path):
    batches = make_batches(SEED + 1, max(5, int(20 * SCALE)))
    w = head()
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, ("sgd", 0.3))
    ref = Reference(ebc, ("sgd", 0.3))
    for feats, y in batches:
        assert ember_step(ebc, feats, y, w) == pytest.approx(ref.step(feats, y, w), rel=1e-5,
                                                             abs=1e-6)
    compare(ebc, ref, rtol=1e-5, atol=1e-6)
    ebc.close()
    store.close()


@pytest.mark.parametrize("optimizer", [("sgd", 0.5), ("adagrad", 0.1)])
def test_reopen_from_checkpoint_mid_training(store_path, optimizer):
    steps = max(10, int(40 * SCALE))
    batches = make_batches(SEED + 2, steps)
    w = head()
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, optimizer)
    ref = Reference(ebc, optimizer)
    half = steps // 2
    for feats, y in ebc.pipeline(batches[:half], sparse=lambda b: b[0]):
        assert ember_step(ebc, feats, y, w) == pytest.approx(ref.step(feats, y, w), rel=1e-5,
                                                             abs=1e-6)
    ebc.checkpoint()
    ebc.close()
    store.close()
    store = ember.Store(store_path, create=False, **STORE_OPTS)
    ebc = open_ebc(store, optimizer)
    compare(ebc, ref, rtol=1e-5, atol=1e-6)
    for feats, y in ebc.pipeline(batches[half:], sparse=lambda b: b[0]):
        assert ember_step(ebc, feats, y, w) == pytest.approx(ref.step(feats, y, w), rel=1e-5,
                                                             abs=1e-6)
    compare(ebc, ref, rtol=1e-5, atol=1e-6)
    ebc.close()
    store.close()


def test_fp16_storage_within_fp16_rounding(store_path):
    steps = max(10, int(40 * SCALE))
    batches = make_batches(SEED + 3, steps)
    w = head()
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, ("sgd", 0.5), cfgs=configs(storage="fp16"))
    ref = Reference(ebc, ("sgd", 0.5))
    for feats, y in ebc.pipeline(batches, sparse=lambda b: b[0]):
        got, want = ember_step(ebc, feats, y, w), ref.step(feats, y, w)
        assert got == pytest.approx(want, rel=2e-3, abs=1e-4)
    assert ebc.stats().rows_written_back > 0
    # every write-back rounds to fp16 (relative 2^-11); a row goes back a few times
    compare(ebc, ref, rtol=4e-3, atol=1e-4)
    ebc.close()
    store.close()


def test_pipeline_misuse_and_skips(store_path):
    batches = make_batches(SEED + 4, 6)
    w = head()
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, ("sgd", 0.5), lookahead=2)
    ref = Reference(ebc, ("sgd", 0.5))
    it = ebc.pipeline(batches, sparse=lambda b: b[0])
    feats, y = next(it)
    with pytest.raises(ember.StateError, match="other than those of the next batch"):
        ebc(batches[1][0])  # not the batch the pipeline yielded
    with pytest.raises(ember.StateError, match="already running"):
        ebc.pipeline(batches)
    ember_step(ebc, feats, y, w)
    ref.step(feats, y, w)
    with pytest.raises(ember.StateError, match="forward without a batch"):
        ebc(feats)  # twice for one yielded batch
    next(it)  # batch 1 gets no forward: skipped, unchanged
    feats, y = next(it)
    copy = {k: (v[0].clone(), v[1].clone()) for k, v in feats.items()}
    assert ember_step(ebc, copy, y, w) == pytest.approx(ref.step(feats, y, w), rel=1e-5,
                                                        abs=1e-6)  # equal features are fine
    it.close()  # leaving early drops the batches read ahead
    compare(ebc, ref, rtol=1e-5, atol=1e-6)
    assert ebc.cache._c.pushed == ebc.stats().batches_released
    feats, y = batches[5]
    assert ember_step(ebc, feats, y, w) == pytest.approx(ref.step(feats, y, w), rel=1e-5,
                                                         abs=1e-6)
    out = ebc(feats)  # a forward whose outputs never see backward...
    with torch.no_grad():
        ebc(feats)  # ...goes back unchanged at the next forward
    del out
    compare(ebc, ref, rtol=1e-5, atol=1e-6)
    ebc.close()
    with pytest.raises(ember.StateError, match="closed"):
        ebc(feats)
    store.close()


def test_loader_errors_reach_the_trainer(store_path):
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, ("sgd", 0.1))
    good = make_batches(SEED + 5, 3)
    bad = dict(good[1][0])
    bad["t2"] = (torch.tensor([0, 5, 300, 1]), torch.tensor([0, 2]))
    seen = 0
    with pytest.raises(ValueError, match=r"feature 't2'.*ids\[2\]: 300 is out of range"):
        for feats, y in ebc.pipeline([good[0], (bad, None), good[2]], sparse=lambda b: b[0]):
            ember_step(ebc, feats, y, head())
            seen += 1
    assert seen == 1
    assert ebc.cache._c.pushed == 1 == ebc.stats().batches_released
    ebc.close()
    store.close()


@pytest.mark.parametrize("feature, match", [
    ((torch.tensor([1, 2], dtype=torch.int32), torch.tensor([0])), "feature 't0': ids must be int64"),
    ((torch.tensor([[1, 2]]), torch.tensor([0])), "feature 't0': ids must be 1-D"),
    ((torch.tensor([1, -2, 3]), torch.tensor([0])), r"feature 't0'.*ids\[1\]: -2 is out of range"),
    ((torch.tensor([1, 600]), torch.tensor([0])), r"feature 't0'.*ids\[1\]: 600 is out of range"),
    ((torch.tensor([1, 2]), torch.tensor([0, 3])), r"feature 't0': offsets\[1\] = 3 is past"),
    ((torch.tensor([1, 2]), torch.tensor([1])), r"feature 't0': offsets\[0\] must be 0"),
    ((torch.tensor([1, 2, 3]), torch.tensor([0, 2, 1])), r"feature 't0': offsets\[2\] = 1 is below"),
    (Jagged(torch.tensor([1, 2]), lengths=torch.tensor([1, -1, 2])), r"lengths\[1\] is negative"),
])
def test_bad_features(store_path, feature, match):
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, ("sgd", 0.1))
    feats = dict(make_batches(SEED, 1)[0][0])
    feats["t0"] = feature
    with pytest.raises(ValueError, match=match):
        ebc(feats)
    assert ebc.cache._c.pushed == 0
    with pytest.raises(ValueError, match="missing"):
        ebc({"t1": feats["t1"]})
    ebc.close()
    store.close()


def test_inputs_like_embedding_bag(store_path):
    """2-D ids, offsets and lengths all pool as nn.EmbeddingBag does."""
    store = ember.Store(store_path, **STORE_OPTS)
    cfgs = [EmbeddingBagConfig("a", 50, 4, pooling="mean", feature_names=["a1", "a2"])]
    ebc = EmbeddingBagCollection(cfgs, store, cache_rows=40, optimizer=("sgd", 0.1))
    ebc.eval()
    weight = ebc.export_table("a")
    ref = torch.nn.EmbeddingBag(50, 4, mode="mean", _weight=weight.clone())
    ids2d = torch.tensor([[1, 2, 3], [4, 4, 5]])
    values, lengths = torch.tensor([7, 8, 9]), torch.tensor([2, 0, 1])
    out = ebc({"a1": ids2d, "a2": Jagged(values, lengths=lengths)})
    torch.testing.assert_close(out["a1"], ref(ids2d), rtol=0, atol=0)
    torch.testing.assert_close(out["a2"], ref(values, torch.tensor([0, 2, 2])), rtol=0, atol=0)
    assert ebc.stats().batches_released == 1  # eval: released at once, rows unchanged
    torch.testing.assert_close(ebc.export_table("a"), weight, rtol=0, atol=0)
    ebc.close()
    store.close()


def test_state_dict_round_trip(store_path, tmp_path):
    batches = make_batches(SEED + 6, 8)
    w = head()
    store = ember.Store(store_path, **STORE_OPTS)
    ebc = open_ebc(store, ("adagrad", 0.1))
    for feats, y in ebc.pipeline(batches[:4], sparse=lambda b: b[0]):
        ember_step(ebc, feats, y, w)
    sd = ebc.state_dict()
    assert set(sd) == {f"tables.t{k}.{x}" for k in range(3) for x in ("weight", "optimizer_state")}
    losses = [ember_step(ebc, f, y, w) for f, y in batches[4:]]
    ebc.load_state_dict(sd)  # back to step 4: the same losses again
    assert [ember_step(ebc, f, y, w) for f, y in batches[4:]] == pytest.approx(losses, rel=1e-6)
    with pytest.raises(RuntimeError, match="shape"):
        bad = dict(sd)
        bad["tables.t0.weight"] = torch.zeros(3, DIM)
        ebc.load_state_dict(bad)
    with pytest.raises(RuntimeError, match="Unexpected"):
        ebc.load_state_dict({**sd, "tables.t9.weight": torch.zeros(1)})
    with pytest.raises(ember.TooBig):
        ebc.export_table("t0", max_bytes=100)
    ebc.close()
    store.close()
