"""ember.EmbeddingCache: the typed cache API over _ember.Cache (numpy only).

Rows are read and updated in place through the zero-copy slot memory and must read
back through the store; bad ids are ValueErrors naming the table and position with
nothing pushed; closed caches and released batches raise StateError; Ctrl-C while
acquire waits leaves the batch not acquired.
"""

import _thread
import os
import threading
import time

import numpy as np
import pytest

import ember
from ember.cache import EmbeddingCache, Table

SEED = int(os.environ.get("EMBER_TEST_SEED", "1234"))
SCALE = max(0.01, float(os.environ.get("EMBER_TEST_SCALE", "1") or 1))
STORE_OPTS = dict(log_memory=16 << 20, index_buckets=1 << 12)


def setup_module(module):
    print(f"seed {SEED} scale {SCALE}")


@pytest.fixture
def store(tmp_path):
    s = ember.Store(str(tmp_path / "store"), **STORE_OPTS)
    yield s
    s.close()


def two_tables(**kw):
    return [Table("user", rows=1000, dim=4, **kw), Table("item", rows=300, dim=8, **kw)]


def open_cache(store, tables=None, **kw):
    kw.setdefault("capacity", 256)
    kw.setdefault("arrays", "numpy")
    return EmbeddingCache(store, tables or two_tables(), **kw)


def test_rows_update_in_place_and_read_back(store):
    rng = np.random.default_rng(SEED)
    cache = open_cache(store, init="uniform", init_scale=0.5, init_seed=7)
    expect = {"user": cache.read_rows("user", np.arange(1000)),
              "item": cache.read_rows("item", np.arange(300))}
    assert np.all(np.abs(expect["user"]) <= 0.5) and np.any(expect["user"] != 0)
    steps = max(4, int(40 * SCALE))
    for step in range(steps):
        u = rng.integers(0, 1000, size=50, dtype=np.int64)
        i = rng.integers(0, 300, size=20, dtype=np.int64)
        assert cache.push({"user": u, "item": i}) == step
        b = cache.acquire()
        assert b.number == step and b.nparts == 2 and b.tables == (0, 1)
        mem = b.memory
        assert mem.dtype == np.float32 and mem.ndim == 2
        for part, (name, ids) in enumerate((("user", u), ("item", i))):
            dim = cache.tables[part].dim
            got = b.rows(part)
            np.testing.assert_array_equal(got, expect[name][ids])
            for s in np.unique(b.part_slots(part)):
                mem[s, :dim] += 1.0  # each distinct row once
            for r in np.unique(ids):
                expect[name][r] += 1.0
        b.release()
    st = cache.stats()
    assert st.batches_released == steps and st.rows_evicted > 0
    cache.flush()
    np.testing.assert_array_equal(cache.read_rows("user", np.arange(1000)), expect["user"])
    np.testing.assert_array_equal(cache.read_rows(1, np.arange(300)), expect["item"])
    del mem, b
    cache.close()
    again = open_cache(store, init="uniform", init_scale=0.5, init_seed=7)
    np.testing.assert_array_equal(again.read_rows("user", np.arange(1000)), expect["user"])
    again.close()


def test_apply_sgd_sums_duplicates(store):
    cache = open_cache(store, tables=[Table("t", rows=10, dim=3)])
    ids = np.array([4, 2, 4, 4], dtype=np.int64)
    cache.push([ids])
    b = cache.acquire()
    grads = np.arange(12, dtype=np.float32).reshape(4, 3)
    b.apply(0, grads, lr=0.5)
    b.release()
    rows = cache.read_rows("t", np.array([4, 2, 0]))
    np.testing.assert_allclose(rows[0], -0.5 * (grads[0] + grads[2] + grads[3]))
    np.testing.assert_allclose(rows[1], -0.5 * grads[1])
    np.testing.assert_array_equal(rows[2], 0)
    cache.close()


def test_write_rows_and_state(store):
    cache = open_cache(store, tables=[Table("a", rows=50, dim=4, optimizer="adagrad"),
                                      Table("b", rows=50, dim=2, optimizer="rowwise_adagrad",
                                            storage="fp16")])
    assert cache.tables[0].state_floats == 4 and cache.tables[1].state_floats == 1
    ids = np.array([3, 7, 3], dtype=np.int64)
    rows = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    state = np.full((3, 4), 2.0, dtype=np.float32)
    cache.write_rows("a", ids, rows, state)
    got, st = cache.read_rows("a", ids, state=True)
    np.testing.assert_array_equal(got[0], rows[2])  # duplicates applied in order
    np.testing.assert_array_equal(got[1], rows[1])
    np.testing.assert_array_equal(st, 2.0)
    half = np.array([[1 / 3, 2 / 3]], dtype=np.float32)
    cache.write_rows("b", [5], half)
    np.testing.assert_array_equal(cache.read_rows("b", [5]), half.astype(np.float16).astype(np.float32))
    with pytest.raises(ValueError, match="no optimizer state|shape"):
        cache.write_rows("a", ids, rows, np.zeros((3, 1), np.float32))
    with pytest.raises(ValueError, match=r"rows: shape"):
        cache.write_rows("a", ids, rows[:2])
    with pytest.raises(ValueError, match=r"dtype"):
        cache.write_rows("a", ids, rows.astype(np.float64))
    cache.close()


@pytest.mark.parametrize("bad, match", [
    (np.array([1, 2], dtype=np.int32), r"feature 'item'.*dtype must be int64"),
    (np.zeros((2, 2), dtype=np.int64), r"feature 'item'.*1-D"),
    (np.array([0, 1, 2, -1], dtype=np.int64), r"feature 'item'.*ids\[3\]: -1 is out of range"),
    (np.array([0, 300], dtype=np.int64), r"feature 'item'.*ids\[1\]: 300 is out of range"),
    (np.array([0.5]), r"feature 'item'.*dtype"),
])
def test_bad_ids_push_nothing(store, bad, match):
    cache = open_cache(store)
    good = np.array([1, 2, 3], dtype=np.int64)
    with pytest.raises(ValueError, match=match):
        cache._c.push([(0, good, "user"), (1, bad, "item")])
    with pytest.raises(ValueError, match=match.replace("feature", "table")):
        cache.push({"user": good, "item": bad})
    assert cache._c.pushed == 0 and cache.stats().batches_pushed == 0
    with pytest.raises(ember.StateError):
        cache.acquire()  # nothing pushed
    assert cache.push({"user": good}) == 0  # the cache still works
    assert cache.acquire().number == 0
    cache.close()


def test_other_bad_arguments(store):
    with pytest.raises(ValueError):
        EmbeddingCache(store, [])
    with pytest.raises(ValueError):
        EmbeddingCache(store, [Table("a", 10, 2), Table("a", 10, 2)])
    with pytest.raises(ValueError):
        Table("a", 10, 2, storage="bf16")
    with pytest.raises(ember.InvalidArgument):
        EmbeddingCache(store, two_tables(), window=4, prefetch_batches=5)
    cache = open_cache(store)
    with pytest.raises(KeyError):
        cache.push({"nobody": np.arange(3)})
    with pytest.raises(ValueError, match="one entry per table"):
        cache.push([np.arange(3)])
    with pytest.raises(ember.TooBig):  # more distinct rows than the capacity
        cache.push({"user": np.arange(257, dtype=np.int64)})
    cache.push({"user": np.arange(3, dtype=np.int64)})
    b = cache.acquire()
    with pytest.raises(ValueError, match=r"grads: shape must be \(3, 4\)"):
        b.apply(0, np.zeros((3, 5), np.float32), lr=0.1)
    with pytest.raises(ValueError, match="part 1 out of range"):
        b.apply(1, np.zeros((3, 4), np.float32), lr=0.1)
    with pytest.raises(ValueError, match="lr must be finite"):
        b.apply(0, np.zeros((3, 4), np.float32), lr=float("nan"))
    with pytest.raises(ember.StateError):
        cache.read_rows("user", [1])  # a batch is acquired
    with pytest.raises(ember.StateError):
        cache.acquire()  # one at a time
    b.release()
    cache.close()


def test_released_batch_and_closed_cache(store):
    cache = open_cache(store)
    cache.push({"user": np.array([5, 6], dtype=np.int64)})
    b = cache.acquire()
    slots = b.slots
    b.release(dirty=False)
    assert b.released
    for use in (lambda: b.slots, lambda: b.number, lambda: b.memory, lambda: b.part_slots(0),
                lambda: b.apply(0, np.zeros((2, 4), np.float32), 0.1), b.release):
        with pytest.raises(ember.StateError, match="released"):
            use()
    assert slots.dtype == np.int64 and len(slots) == 2
    mem = cache.memory
    with pytest.raises(ember.BusyError):
        cache.close()  # a zero-copy view of the slots is alive
    del mem
    cache.close()
    cache.close()
    assert cache.closed
    for use in (lambda: cache.push({"user": [1]}), cache.acquire, cache.flush, cache.stats,
                lambda: cache.read_rows("user", [1]), lambda: cache.memory):
        with pytest.raises(ember.StateError, match="closed"):
            use()


def test_dropped_batch_is_released(store):
    cache = open_cache(store)
    cache.push({"user": np.array([1], dtype=np.int64)})
    cache.push({"user": np.array([2], dtype=np.int64)})
    b = cache.acquire()
    mem = cache.memory
    mem[int(b.slots[0]), :4] = 3.0
    del b  # handed back dirty
    assert cache.acquire().number == 1
    del mem
    cache.close()


def test_keyboard_interrupt_in_acquire(store):
    """Ctrl-C while acquire waits for a slow prefetch raises KeyboardInterrupt and
    leaves the batch pushed and not acquired."""
    rows = max(20000, int(400000 * SCALE))
    cache = EmbeddingCache(store, [Table("big", rows=rows, dim=64, init="uniform")],
                           capacity=rows, arrays="numpy")
    cache.push({"big": np.arange(rows, dtype=np.int64)})
    entering = threading.Event()

    def interrupt():
        entering.wait()
        time.sleep(0.002)
        _thread.interrupt_main()

    t = threading.Thread(target=interrupt)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        entering.set()
        cache.acquire()
    t.join()
    assert cache.stats().wait_ns > 0
    b = cache.acquire()  # still there, and acquirable once resident
    assert b.number == 0 and len(b.slots) == rows
    b.release(dirty=False)
    cache.close()


def test_concurrent_push_from_a_loader_thread(store):
    """One thread pushes while this one acquires and updates: every update lands."""
    rng = np.random.default_rng(SEED + 1)
    steps = max(10, int(200 * SCALE))
    batches = [rng.integers(0, 1000, size=40, dtype=np.int64) for _ in range(steps)]
    cache = open_cache(store, tables=[Table("t", rows=1000, dim=2)], window=8)
    room = threading.Semaphore(8)
    ready = threading.Semaphore(0)  # acquire with nothing pushed is a StateError
    failures = []

    def loader():
        try:
            for ids in batches:
                room.acquire()
                cache.push({"t": ids})
                ready.release()
        except BaseException as e:  # reported below
            failures.append(e)
            ready.release()

    th = threading.Thread(target=loader)
    th.start()
    counts = np.zeros(1000, np.float32)
    for step in range(steps):
        ready.acquire()
        assert not failures
        b = cache.acquire()
        assert b.number == step
        mem = b.memory
        for s in np.unique(b.part_slots(0)):
            mem[s, 0] += 1
        counts[np.unique(batches[step])] += 1
        b.release()
        room.release()
    th.join()
    assert not failures
    np.testing.assert_array_equal(cache.read_rows("t", np.arange(1000))[:, 0], counts)
    del mem
    cache.close()


def test_store_close_flushes_and_closes_its_caches(tmp_path):
    path = str(tmp_path / "s")
    store = ember.Store(path, **STORE_OPTS)
    cache = open_cache(store)
    ids = np.array([3, 5, 5], dtype=np.int64)
    cache.push({"user": ids, "item": np.array([1], dtype=np.int64)})
    b = cache.acquire()
    mem = b.memory
    mem[b.part_slots(0), :4] = 2.5  # part 0: the rows of table "user" (dim 4)
    del mem  # a live view of the slots would make close() raise BusyError
    b.release(dirty=True)
    store.close()  # closes (flushes) the cache first, then the store
    assert cache.closed and store.closed
    with pytest.raises(ember.StateError):
        cache.push({"user": ids, "item": ids})
    with ember.Store(path, **STORE_OPTS) as again:
        cache2 = open_cache(again)
        got = cache2.read_rows("user", np.array([3, 5], dtype=np.int64))
        assert np.all(got == 2.5)
        cache2.close()


def test_push_reads_ids_in_place_and_keeps_no_reference(store):
    """push reads an int64 array in place (no copy of its own): the cache has copied
    the ids when push returns, so changing the array afterwards changes nothing."""
    rng = np.random.default_rng(SEED)
    cache = open_cache(store)
    ids = rng.permutation(1000)[:50].astype(np.int64)
    vals = rng.standard_normal((50, 4)).astype(np.float32)
    cache.write_rows("user", ids, vals)
    arr = ids.copy()
    seq = ids.tolist()  # a sequence: read through a copy
    cache.push({"user": arr})
    cache.push({"user": seq})
    arr[:] = 999
    seq[:] = [998] * len(seq)
    for _ in range(2):
        b = cache.acquire()
        np.testing.assert_array_equal(b.rows(0), vals)
        b.release(dirty=False)
    cache.close()
