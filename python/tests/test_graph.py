"""ember.graph: import, orderings, the epoch iterator, write-back and sampling.

Each test prints its seed (EMBER_TEST_SEED replays one); EMBER_TEST_SCALE scales
the graphs' sizes.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import ember
import ember.graph as eg
from ember import _ember

SCALE = float(os.environ.get("EMBER_TEST_SCALE", "1"))


@pytest.fixture
def seed():
    s = int(os.environ.get("EMBER_TEST_SEED", random.randrange(1 << 32)))
    print(f"seed {s}")
    return s


@pytest.fixture
def store(tmp_path):
    db = ember.Store(str(tmp_path / "store"), log_memory=64 << 20, index_buckets=1 << 12)
    yield db
    db.close()


def random_edges(rng, n, m):
    """m edges over n nodes, a few nodes with many (a skew like the C tests')."""
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    hub = rng.random(m) < 0.25
    src[hub] = rng.integers(0, min(n, 16), hub.sum())
    return src.astype(np.int64), dst.astype(np.int64)


def pairs(src, dst, n):
    """Edges as sorted int64 keys src * n + dst (a multiset to compare)."""
    return np.sort(np.asarray(src, np.int64) * n + np.asarray(dst, np.int64))


def make_graph(store, rng, n=300, m=4000, p=8, dim=4, name="g", **kw):
    n = max(16, int(n * SCALE))
    m = max(64, int(m * SCALE))
    src, dst = random_edges(rng, n, m)
    g = eg.import_edges(store, name, (src, dst), p, dim=dim, num_nodes=n, chunk_bytes=64 << 10,
                        seed=int(rng.integers(1 << 30)), **kw)
    return g, src, dst


@pytest.mark.parametrize("kind,p,c", [("beta", 8, 4), ("beta", 8, 2), ("beta", 7, 3),
                                      ("beta", 4, 4), ("comet", 8, 4), ("comet", 16, 8)])
def test_epoch_trains_every_edge_once(store, seed, kind, p, c):
    rng = np.random.default_rng(seed)
    g, src, dst = make_graph(store, rng, p=p)
    want = pairs(src, dst, g.num_nodes)
    for epoch in range(2):
        got, states = [], 0
        for state in g.epoch(buffer_partitions=c, ordering=kind, batch_size=97, seed=seed,
                             epoch=epoch, as_torch=False):
            states += 1
            resident = set(int(x) for x in state.partitions)
            n_state = 0
            for edges in state:
                assert edges.dtype == np.int64 and edges.shape[1] == 2
                assert 1 <= len(edges) <= 97
                parts = edges // g.partition_size
                assert all(int(x) in resident for x in parts.ravel())
                got.append(edges)
                n_state += len(edges)
            assert n_state == state.num_edges
        e = np.concatenate(got)
        orig = pairs(g.to_original(e[:, 0]), g.to_original(e[:, 1]), g.num_nodes)
        np.testing.assert_array_equal(orig, want)
        with eg.ordering(kind, p, c, seed=seed, epoch=epoch) as o:
            assert states == o.num_states
    g.close()


def test_import_file_and_arrays_agree(store, seed, tmp_path):
    rng = np.random.default_rng(seed)
    src, dst = random_edges(rng, 100, 700)
    path = tmp_path / "edges.txt"
    with open(path, "w") as f:
        f.write("# comment\n\n")
        for a, b in zip(src, dst):
            f.write(f"{a} {b}\n")
    ga = eg.import_edges(store, "a", (src, dst), 4, dim=3, num_nodes=100, seed=5)
    gf = eg.import_edges(store, "f", str(path), 4, dim=3, num_nodes=100, seed=5)
    gn = eg.import_edges(store, "n", np.stack([src, dst], 1), 4, dim=3, num_nodes=100, seed=5)
    for g in (ga, gf, gn):
        assert (g.num_nodes, g.num_edges, g.num_partitions, g.dim) == (100, 700, 4, 3)
        e = g.edges()
        np.testing.assert_array_equal(
            pairs(g.to_original(e[:, 0]), g.to_original(e[:, 1]), 100), pairs(src, dst, 100))
        np.testing.assert_array_equal(g.to_new(g.to_original(np.arange(100))), np.arange(100))
    np.testing.assert_array_equal(ga.read_nodes(), gf.read_nodes())
    for g in (ga, gf, gn):
        g.close()


def test_import_node_data_and_relations(store, seed):
    rng = np.random.default_rng(seed)
    src, dst = random_edges(rng, 50, 300)
    rel = rng.integers(0, 3, 300)
    rows = rng.standard_normal((50, 6)).astype(np.float32)
    g = eg.import_edges(store, "g", (src, dst), 3, dim=6, rel=rel, node_data=rows)
    assert g.relations == int(rel.max()) + 1
    stored = g.read_nodes()
    np.testing.assert_array_equal(stored[g.to_new(np.arange(50))], rows)
    e = g.edges()
    key = lambda s, d, r: np.sort((np.asarray(s) * 50 + np.asarray(d)) * 3 + np.asarray(r))
    np.testing.assert_array_equal(
        key(g.to_original(e[:, 0]), g.to_original(e[:, 1]), e[:, 2]), key(src, dst, rel))
    g.close()


def test_updates_written_back_and_read_next_epoch(store, seed):
    rng = np.random.default_rng(seed)
    g, src, dst = make_graph(store, rng, p=8, dim=3, init="zero")
    n = g.num_nodes
    deg = np.zeros(n, np.float32)
    np.add.at(deg, g.to_new(src), 1)
    np.add.at(deg, g.to_new(dst), 1)
    with g.buffer(3, seed=seed) as buf:
        for state in buf.epoch("beta", batch_size=128, seed=seed, as_torch=False):
            for edges in state:
                ends = edges.reshape(-1)
                state.update(ends, np.ones((len(ends), 3), np.float32))
        # the next epoch (another ordering) reads back what the last one wrote
        for state in buf.epoch("comet", batch_size=128, seed=seed, epoch=1, as_torch=False):
            ids = state.node_ids
            rows = state.embeddings()
            np.testing.assert_array_equal(rows, np.repeat(deg[ids][:, None], 3, 1))
            some = ids[rng.integers(0, len(ids), 20)]
            np.testing.assert_array_equal(state.embeddings(some)[:, 0], deg[some])
            state.update(some[:1], np.full((1, 3), 7, np.float32), mode="set")
            deg[some[:1]] = 7
    np.testing.assert_array_equal(g.read_nodes(), np.repeat(deg[:, None], 3, 1))
    g.close()


@pytest.mark.parametrize("direction", ["in", "out", "both"])
def test_sampled_neighbours_are_real(store, seed, direction):
    rng = np.random.default_rng(seed)
    g, _, _ = make_graph(store, rng, p=6, dim=2)
    e = g.edges()
    edge_set = set(zip(e[:, 0].tolist(), e[:, 1].tolist()))
    fan = (5, 3)
    with g.buffer(3, all_edges=True, seed=seed) as buf:
        for state in buf.epoch("beta", seed=seed, as_torch=False):
            resident = set(int(x) for x in state.partitions)
            roots = rng.choice(state.node_ids, size=min(20, len(state.node_ids)), replace=False)
            s = state.sample(roots, fan, direction=direction, seed=seed, rows=True)
            nodes = s.nodes
            assert len(set(nodes.tolist())) == len(nodes)
            np.testing.assert_array_equal(nodes[:len(roots)], roots)
            assert s.hop_offsets[0] == 0 and s.hop_offsets[-1] == len(nodes)
            assert all(int(x) // g.partition_size in resident for x in nodes)
            for layer in range(len(fan)):
                lo, hi = s.edge_offsets[layer], s.edge_offsets[layer + 1]
                hop = set(nodes[s.hop_offsets[layer]:s.hop_offsets[layer + 1]].tolist())
                per_node = {}
                for d, sn in zip(s.edge_dst[lo:hi].tolist(), s.edge_src[lo:hi].tolist()):
                    u, v = int(nodes[d]), int(nodes[sn])
                    assert u in hop
                    if direction == "in":
                        assert (v, u) in edge_set
                    elif direction == "out":
                        assert (u, v) in edge_set
                    else:
                        assert (v, u) in edge_set or (u, v) in edge_set
                    per_node[u] = per_node.get(u, 0) + 1
                assert all(k <= fan[layer] for k in per_node.values())
            np.testing.assert_array_equal(s.rows, state.embeddings(nodes))
            assert s.edge_index.shape == (2, s.edge_offsets[-1])
    g.close()


def test_orderings(seed):
    for p, c in [(8, 4), (10, 3), (16, 8)]:
        with eg.ordering("beta", p, c, seed=seed) as o:
            assert o.num_swaps == eg.beta_swaps(p, c) >= eg.lower_bound(p, c)
            st, sw, bs = o.states(), o.swaps(), o.bucket_states()
            assert st.shape == (o.num_states, c) and sw.shape == (o.num_states - 1, 3)
            for s in range(1, o.num_states):
                slot, ev, ld = sw[s - 1]
                assert st[s - 1, slot] == ev and st[s, slot] == ld
            for i in range(p):
                for j in range(p):
                    assert i in st[bs[i, j]] and j in st[bs[i, j]]
    with eg.ordering("sequential", 8, 4, train=[5, 2]) as o:
        st = o.states()
        assert (st[:, 0] == 5).all() and (st[:, 1] == 2).all()
        assert (o.bucket_states() >= -1).all()


def test_torch_outputs(store, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    g, _, _ = make_graph(store, rng, p=4, dim=2)
    with g.buffer(2, all_edges=True) as buf:
        for state in buf.epoch("beta", batch_size=50, as_torch=True):
            edges = next(iter(state))
            assert isinstance(edges, torch.Tensor) and edges.dtype == torch.int64
            rows = state.embeddings(edges[:, 0])
            assert rows.dtype == torch.float32 and rows.shape == (len(edges), 2)
            state.update(edges[:, 0], torch.zeros_like(rows))
            s = state.sample(edges[:3, 0], (4,))
            assert isinstance(s.nodes, torch.Tensor) and s.edge_index.shape[0] == 2
    g.close()
