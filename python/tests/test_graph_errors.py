"""ember.graph and _ember's graph types: bad inputs raise before any C call (and
change nothing), closed objects raise StateError, parents refuse to close under
their children, and threads sharing a buffer wait for each other."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember
import ember.graph as eg
from ember import _ember


@pytest.fixture
def store(tmp_path):
    db = ember.Store(str(tmp_path / "store"), log_memory=64 << 20, index_buckets=1 << 12)
    yield db
    db.close()


@pytest.fixture
def graph(store):
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 64, 500), rng.integers(0, 64, 500)
    g = eg.import_edges(store, "g", (src, dst), 4, dim=2, num_nodes=64, init="zero")
    yield g
    g.close()


def test_import_bad_inputs(store, tmp_path):
    src = np.arange(10)
    with pytest.raises(ValueError):
        eg.import_edges(store, "", (src, src), 2)
    with pytest.raises(ValueError):
        eg.import_edges(store, "x" * 65, (src, src), 2)
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", (src, src), 0)
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", (src, src), 2, dim=0)
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", (src, src[:5]), 2)
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", (src - 1, src), 2)
    with pytest.raises(TypeError):
        eg.import_edges(store, "g", (src * 0.5, src), 2)
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", np.zeros((4, 3), np.int64), 2)
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", (src, src), 2, num_nodes=5)
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", (src, src), 2, init="gaussian")
    with pytest.raises(ValueError):
        eg.import_edges(store, "g", (src, src), 2, dim=3, node_data=np.zeros((10, 2)))
    with pytest.raises(TypeError):
        eg.import_edges(object(), "g", (src, src), 2)
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2\n3 x\n")
    with pytest.raises(ember.Corrupt) as ei:
        eg.import_edges(store, "g", str(bad), 2)
    assert "line 2" in str(ei.value)
    with pytest.raises(ember.NotFound):  # nothing was created by the failures
        eg.Graph(store, "g")
    g = eg.import_edges(store, "g", (src, src), 2)
    with pytest.raises(ember.Exists):
        eg.import_edges(store, "g", (src, src), 2)
    g.close()


def test_ordering_bad_inputs():
    for args in [("beta", 1, 1), ("beta", 4, 5), ("beta", 5000, 4), ("beta", 4, 1)]:
        with pytest.raises(ValueError):
            eg.ordering(*args)
    with pytest.raises(ValueError):
        eg.ordering("alpha", 8, 4)
    with pytest.raises(ValueError):
        eg.ordering("sequential", 8, 4, train=[9])
    with pytest.raises(ValueError):
        eg.ordering("sequential", 8, 2, train=[0, 1, 2])
    with pytest.raises(ember.InvalidArgument):
        eg.ordering("comet", 8, 4, comet_group=3)
    with pytest.raises(TypeError):
        _ember.Ordering("8", 4, 0)
    o = eg.ordering("beta", 8, 4)
    o.close()
    o.close()
    for call in (o.states, o.swaps, o.bucket_states):
        with pytest.raises(ember.StateError):
            call()


def test_buffer_bad_inputs(graph):
    with pytest.raises(ValueError):
        graph.buffer(5)
    with pytest.raises(ValueError):
        graph.buffer(0)
    with pytest.raises(ValueError):
        _ember.Buffer(graph._g, 2, flags=0x80)
    with pytest.raises(TypeError):
        _ember.Buffer(object(), 2)
    with graph.buffer(2) as buf:
        with pytest.raises(ValueError):
            buf.set_ordering(eg.ordering("beta", 8, 2))
        with pytest.raises(ValueError):
            buf.set_plan(np.array([[0, 4]]), np.zeros(16, np.int64))
        with pytest.raises(ValueError):
            buf.set_plan(np.array([[0, 1]]), np.zeros(15, np.int64))
        with pytest.raises(ValueError):
            buf.set_plan(np.array([[0, 1]]), np.full(16, 3, np.int64))
        # a bucket assigned to a state without its partitions: the C check
        with pytest.raises(ember.InvalidArgument):
            buf.set_plan(np.array([[0, 1]]), np.zeros(16, np.int64))
        with pytest.raises(ember.StateError):  # no plan yet
            buf.next_state()
        plan_states = np.array([[0, 1], [2, 3], [0, 2], [1, 3], [0, 3], [1, 2]])
        bucket = np.full((4, 4), -1, np.int64)
        for s, (a, b) in enumerate(plan_states):
            for i, j in [(a, a), (a, b), (b, a), (b, b)]:
                if bucket[i, j] < 0:
                    bucket[i, j] = s
        buf.set_plan(plan_states, bucket)
        state = buf.next_state(batch_size=16, as_torch=False)
        assert list(state.partitions) == [0, 1]
        outside = graph.partition_nodes(3)[:2]
        inside = state.node_ids[:2]
        before = state.embeddings(inside)
        with pytest.raises(ember.InvalidArgument):
            state.update(np.concatenate([inside, outside]), np.ones((4, 2), np.float32))
        np.testing.assert_array_equal(state.embeddings(inside), before)  # nothing written
        with pytest.raises(ValueError):
            state.update(inside, np.ones((2, 3), np.float32))
        with pytest.raises(ValueError):
            state.update(inside, np.ones((3, 2), np.float32))
        with pytest.raises(TypeError):
            state.update(inside, np.ones((2, 2), np.int32))
        with pytest.raises(ValueError):
            state.update(inside, np.ones((2, 2), np.float32), mode="mul")
        with pytest.raises(ValueError):
            state.embeddings(np.array([graph.num_nodes]))
        with pytest.raises(ValueError):
            state.embeddings(np.array([-1]))
        with pytest.raises(TypeError):
            state.embeddings(np.array([0.5]))
        with pytest.raises(ember.InvalidArgument):
            state.embeddings(outside)
        with pytest.raises(ValueError):
            buf._b.next_batch(0)
        with pytest.raises(ValueError):
            _ember.Buffer.update(buf._b, inside, np.ones((2, 2), np.float32), 9)
        with pytest.raises(ValueError):  # not opened with all_edges
            state.sample(inside)
        # a state is valid until the next one
        state2 = buf.next_state(as_torch=False)
        with pytest.raises(ember.StateError):
            state.embeddings(inside)
        with pytest.raises(ember.StateError):
            state.batch()
        assert state2.index == 1


def test_sampler_bad_inputs_and_busy(graph):
    buf = graph.buffer(2, all_edges=True)
    with pytest.raises(ValueError):
        _ember.Sampler(buf._b, [])
    with pytest.raises(ValueError):
        _ember.Sampler(buf._b, [1] * 9)
    with pytest.raises(ValueError):
        _ember.Sampler(buf._b, [1], 3)
    with pytest.raises(ValueError):
        _ember.Sampler(buf._b, [-1])
    s = _ember.Sampler(buf._b, [2])
    with pytest.raises(ember.StateError):  # no state yet
        s.run(np.array([0]))
    with pytest.raises(ember.StateError):
        s.gather()
    states = list(buf.epoch("beta", as_torch=False))
    assert states
    with pytest.raises(ValueError):
        s.run(np.array([graph.num_nodes]))
    with pytest.raises(ember.BusyError):  # a sampler is open on it
        buf._b.close()
    assert not buf.closed
    with pytest.raises(ember.BusyError):  # a buffer is open on it
        graph.close()
    s.close()
    s.close()
    with pytest.raises(ember.StateError):
        s.run(np.array([0]))
    buf.close()
    buf.close()
    assert buf.closed


def test_closed_objects(store):
    g = eg.import_edges(store, "g", (np.arange(8), np.arange(8)[::-1]), 2, dim=2)
    buf = g.buffer(2)
    buf.close()
    for call in (buf.flush, buf.stats, lambda: buf._b.next_batch(4),
                 lambda: buf._b.gather(np.array([0])), lambda: buf._b.next_state(),
                 lambda: buf.set_ordering(eg.ordering("beta", 2, 2))):
        with pytest.raises(ember.StateError):
            call()
    with pytest.raises(ember.BusyError):  # the store refuses to close under a graph
        store.close()
    g.close()
    g.close()
    for call in (g.to_new, g.to_original):
        with pytest.raises(ember.StateError):
            call(np.array([0]))
    for call in (lambda: g.bucket(0, 0), lambda: g.read_nodes(0, 1), g._g.info,
                 lambda: g.buffer(2)):
        with pytest.raises(ember.StateError):
            call()


def test_threads_share_a_buffer(graph):
    """Gathers and samples from four threads while the trainer updates: calls wait
    for each other (the buffer's lock), and every row read is a whole one."""
    with graph.buffer(2, all_edges=True) as buf:
        errors = []
        for state in buf.epoch("beta", as_torch=False):
            ids = state.node_ids
            stop = threading.Event()

            def reader():
                try:
                    while not stop.is_set():
                        rows = state.embeddings(ids)
                        # each update adds 1 to both columns together
                        assert (rows[:, 0] == rows[:, 1]).all()
                        state.sample(ids[:4], (3,))
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=reader) for _ in range(4)]
            for t in threads:
                t.start()
            for edges in state:
                state.update(edges[:, 0], np.ones((len(edges), 2), np.float32))
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors
