"""ember.Store: round trips, batches, iterate, checkpoints, read-only opens,
threads, bad input, garbage collection and leaks."""

import errno
import gc
import os
import random
import shutil
import tempfile
import threading

import numpy as np
import pytest

import ember
from ember import _ember
from conftest import SMALL, scaled


def seed() -> int:
    s = int(os.environ.get("EMBER_TEST_SEED", random.randrange(1 << 30)))
    print("seed=%d" % s)
    return s


# ---- round trips ------------------------------------------------------------------

def test_round_trip(store):
    store.put(b"k", b"v")
    assert store.get(b"k") == b"v"
    assert store[b"k"] == b"v"
    store[bytearray(b"k2")] = memoryview(b"value two")
    assert store[b"k2"] == b"value two"
    assert b"k" in store and b"absent" not in store
    assert store.get(b"absent") is None and store.get(b"absent", 7) == 7
    with pytest.raises(KeyError):
        store[b"absent"]
    with pytest.raises(ember.NotFound):
        store[b"absent"]
    del store[b"k"]
    assert b"k" not in store
    with pytest.raises(KeyError):
        del store[b"k"]
    store.delete(b"never there")  # absent keys are fine
    store.put(b"empty", b"")
    assert store[b"empty"] == b""


def test_value_sizes(store):
    rng = random.Random(seed())
    want = {}
    for size in [0, 1, 511, 512, 513, 4096, 100_000, 1 << 20]:
        v = rng.randbytes(size)
        k = b"size%d" % size
        store.put(k, v)
        want[k] = v
    for k, v in want.items():
        assert store[k] == v
    assert store.get_batch(list(want)) == list(want.values())


def test_batches(store):
    rng = random.Random(seed())
    n = scaled(2000)
    keys = [b"key-%d" % i for i in range(n)]
    vals = [rng.randbytes(rng.randrange(0, 2000)) for _ in range(n)]
    store.put_batch(keys, vals)
    got = store.get_batch(keys + [b"absent"])
    assert got[:-1] == vals and got[-1] is None
    assert store.get_batch([]) == []
    store.put_batch([], [])


def test_batches_arrays(store):
    n = scaled(500)
    ids = np.arange(n, dtype=np.int64) * 3
    rows = np.random.default_rng(seed()).integers(0, 255, (n, 64), dtype=np.uint8)
    store.put_batch(ids, rows)
    got = store.get_batch(ids)
    assert all(got[i] == rows[i].tobytes() for i in range(n))
    assert store[ids[5].tobytes()] == rows[5].tobytes()
    # uint8 (n, k) keys
    kb = np.frombuffer(ids.tobytes(), dtype=np.uint8).reshape(n, 8)
    assert store.get_batch(kb) == got
    # 'S' fixed-size keys
    sk = np.array([b"a%03d" % i for i in range(10)], dtype="S4")
    store.put_batch(sk, [b"x"] * 10)
    assert store[b"a007"] == b"x"


def test_iterate(store):
    n = scaled(5000)
    want = {b"it%d" % i: b"v%d" % (i * 7) for i in range(n)}
    store.put_batch(list(want), list(want.values()))
    store.delete(b"it0")
    del want[b"it0"]
    got = dict(store.iterate())
    assert got == want
    assert sorted(store) == sorted(want)


def test_iterate_abandoned(store):
    store.put_batch([b"a%d" % i for i in range(3000)], [b"x" * 100] * 3000)
    it = store.iterate()
    next(it)
    with pytest.raises(ember.BusyError):
        store.checkpoint()
    with pytest.raises(ember.BusyError):
        next(store.iterate())
    it.close()
    store.checkpoint()
    it = store.iterate()
    next(it)
    del it
    gc.collect()
    store.checkpoint()
    it = store.iterate()
    next(it)
    store.close()  # closes the walk first
    with pytest.raises(ember.StateError):
        next(it)


def test_checkpoints_reopen(store_dir):
    with ember.Store(store_dir, **SMALL) as s:
        s.put_batch([b"c%d" % i for i in range(100)], [b"v%d" % i for i in range(100)])
        id1 = s.checkpoint()
        s.put(b"after", b"1")
        id2 = s.checkpoint()
        assert id2 > id1
        cps = s.checkpoints()
        assert cps and cps[0].id == id2 and isinstance(cps[0], ember.store.CheckpointInfo)
        r = s.verify()
        assert r.ok and r.records >= 101
        st = s.stats()
        assert st.user_writes >= 101 and st.hot.records >= 101
    with ember.Store(store_dir, **SMALL) as s:
        assert s.recovery().checkpoint_id >= id2  # close may take one more
        assert s[b"c42"] == b"v42" and s[b"after"] == b"1"
    with ember.Store(store_dir, truncate=True, **SMALL) as s:
        assert b"c42" not in s


def test_close_without_checkpoint(store_dir):
    """close_checkpoint=False: the reopen recovers the last explicit checkpoint."""
    with ember.Store(store_dir, close_checkpoint=False, **SMALL) as s:
        s.put(b"k", b"1")
        s.checkpoint()
        s.put(b"k", b"2")
        s.put(b"later", b"x")
    with ember.Store(store_dir, **SMALL) as s:
        assert s[b"k"] == b"1" and b"later" not in s
        s.put(b"k", b"3")
    with ember.Store(store_dir, **SMALL) as s:  # the default close checkpoints
        assert s[b"k"] == b"3"
    with pytest.raises(TypeError):
        ember.Store(store_dir, close_checkpoint=0)


def test_read_only(store_dir):
    with ember.Store(store_dir, **SMALL) as s:
        s.put(b"k", b"v")
        s.checkpoint()
    with ember.Store(store_dir, read_only=True) as r1, \
            ember.Store(store_dir, read_only=True) as r2:
        assert r1.read_only and r1[b"k"] == b"v" and r2[b"k"] == b"v"
        with pytest.raises(ember.ReadOnly):
            r1.put(b"k", b"w")
        with pytest.raises(ember.ReadOnly):
            r1.checkpoint()
        with pytest.raises(ember.BusyError):
            ember.Store(store_dir, **SMALL)  # a writer is excluded


def test_create_false(tmp_path):
    with pytest.raises(ember.SystemError_) as e:
        ember.Store(str(tmp_path / "none"), create=False)
    assert e.value.errno == errno.ENOENT and isinstance(e.value, OSError)
    with ember.Store(str(tmp_path / "one"), **SMALL):
        pass
    with ember.Store(str(tmp_path / "one"), create=False):
        pass


def test_threads(store):
    threads, per = 8, scaled(2000)
    errs = []

    def work(t):
        try:
            rng = random.Random(t)
            mine = {}
            for i in range(per):
                k = b"t%d-%d" % (t, rng.randrange(per))
                v = rng.randbytes(rng.randrange(1, 300))
                store.put(k, v)
                mine[k] = v
                if i % 7 == 0:
                    assert store[k] == v
            ks = list(mine)
            assert store.get_batch(ks) == [mine[k] for k in ks]
        except BaseException as e:  # reported by the main thread
            errs.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs
    gc.collect()  # the threads' sessions closed with their locals
    assert len(store._sessions) <= 1


# ---- bad input ----------------------------------------------------------------------

def test_bad_options(store_dir):
    with pytest.raises(TypeError):
        ember.Store(store_dir, no_such_option=1)
    with pytest.raises(TypeError):
        ember.Store(store_dir, flags=1)
    with pytest.raises(TypeError):
        ember.Store(store_dir, log_memory="big")
    with pytest.raises(TypeError):
        ember.Store(store_dir, log_memory=1.5)
    with pytest.raises(TypeError):
        ember.Store(store_dir, read_only=1)
    with pytest.raises(ember.InvalidArgument):
        ember.Store(store_dir, log_memory=-1)
    with pytest.raises(ember.InvalidArgument):
        ember.Store(store_dir, page_size=1 << 40)
    with pytest.raises(ember.InvalidArgument):
        ember.Store(store_dir, mutable_fraction=1.5)
    with pytest.raises(ember.InvalidArgument):
        ember.Store(store_dir, page_size=12345)  # the library's own check
    with pytest.raises(ember.InvalidArgument):
        ember.Store(store_dir, io_queue_depth=100000)
    with pytest.raises(ember.InvalidArgument):
        ember.Store(store_dir, page_size=64 << 10, read_cache_memory=512 << 10,
                    read_cache_admit=2)
    with pytest.raises(ember.InvalidArgument):
        ember.Store("")
    with ember.Store(store_dir, **SMALL) as s:  # nothing was left behind
        s.put(b"k", b"v")


@pytest.mark.parametrize("admit,rule", [(_ember.READ_CACHE_ADMIT_FIRST, "dcc"),
                                        (_ember.READ_CACHE_ADMIT_SECOND, "ddc")])
def test_read_cache_admit(store_dir, admit, rule):
    """A reopened store reads from disk; once other keys' reads have filled the read
    cache, it copies a record on its first or its second disk read, as
    read_cache_admit says (before, on the first either way)."""
    opts = dict(log_memory=1 << 20, page_size=64 << 10, index_buckets=1 << 10,
                read_cache_memory=512 << 10, read_cache_admit=admit)
    keys, tested = 6000, 1000

    def value(k):
        return b"v%d" % k * 16

    with ember.Store(store_dir, truncate=True, **opts) as s:
        for k in range(keys):
            s.put(b"key%d" % k, value(k))
    with ember.Store(store_dir, **opts) as s:
        assert s.stats().read_cache_bytes == (512 << 10) + (8192 if admit else 0)

        def pattern(k, n):
            got = ""
            for _ in range(n):
                before = s.stats().read_cache_hits
                assert s[b"key%d" % k] == value(k)
                got += "c" if s.stats().read_cache_hits > before else "d"
            return got

        assert pattern(0, 3) == "dcc"  # room in the cache: copied at once
        for k in range(tested, keys):  # read once each: the cache fills
            assert s[b"key%d" % k] == value(k)
        for k in range(13, tested, 13):
            assert pattern(k, len(rule)) == rule, k


def test_bad_keys_values(store):
    for bad in ["str", 5, None, 1.5, [b"a"]]:
        with pytest.raises(TypeError):
            store.put(bad, b"v")
        with pytest.raises(TypeError):
            store.get(bad)
        with pytest.raises(TypeError):
            store.delete(bad)
    with pytest.raises(TypeError):
        store.put(b"k", "str")
    with pytest.raises(ember.InvalidArgument):
        store.put(b"", b"v")
    with pytest.raises(ember.TooBig):
        store.put(b"k" * (_ember.MAX_KEY_LEN + 1), b"v")
    with pytest.raises(ember.TooBig):
        store.put(b"k", bytes(_ember.MAX_VALUE_LEN + 1))
    with pytest.raises(ValueError):
        store.put(np.arange(10)[::2], b"v")  # not contiguous
    # batches
    with pytest.raises(TypeError):
        store.get_batch(b"abc")
    with pytest.raises(TypeError):
        store.get_batch("abc")
    with pytest.raises(TypeError):
        store.get_batch([b"a", 3])
    with pytest.raises(TypeError):
        store.put_batch([b"a"], ["x"])
    with pytest.raises(ValueError):
        store.put_batch([b"a", b"b"], [b"x"])
    with pytest.raises(ValueError):
        store.get_batch(np.zeros((2, 2, 2), dtype=np.uint8))
    with pytest.raises(ember.TooBig):
        store.put_batch([b"ok", b"k" * (_ember.MAX_KEY_LEN + 1)], [b"1", b"2"])
    assert b"ok" not in store  # an invalid batch writes nothing
    assert list(store.iterate()) == []


def test_closed(store_dir):
    s = ember.Store(store_dir, **SMALL)
    s.put(b"k", b"v")
    s.close()
    s.close()
    assert s.closed
    for call in (lambda: s.get(b"k"), lambda: s.put(b"k", b"v"), lambda: s[b"k"],
                 lambda: s.delete(b"k"), lambda: b"k" in s, lambda: s.get_batch([b"k"]),
                 lambda: s.put_batch([b"k"], [b"v"]), lambda: next(s.iterate()),
                 s.checkpoint, s.checkpoints, s.verify, s.stats, s.compact, s.recovery):
        with pytest.raises(ember.StateError):
            call()
    with pytest.raises(ember.StateError):
        with s:
            pass


def test_raw_types_misuse(store_dir):
    db = _ember.Db(store_dir, **SMALL)
    sess = _ember.Session(db)
    with pytest.raises(ember.BusyError):
        db.close()  # a session is open
    sess.close()
    sess.close()
    with pytest.raises(ember.StateError):
        sess.get(b"k")
    db.close()
    with pytest.raises(ember.StateError):
        _ember.Session(db)
    with pytest.raises(ember.StateError):
        _ember.Walk(db)
    with pytest.raises(TypeError):
        _ember.Session(object())


# ---- garbage collection and leaks ----------------------------------------------------

def test_gc_unclosed(store_dir):
    s = ember.Store(store_dir, **SMALL)
    s.put(b"k", b"v")
    s.checkpoint()
    it = s.iterate()
    next(it)
    del s, it
    gc.collect()
    with ember.Store(store_dir, **SMALL) as s2:  # the LOCK was released
        assert s2[b"k"] == b"v"


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def test_no_leak_open_close(tmp_path):
    """10,000 open / session / read / close cycles (every 100th writes, so that close
    checkpoints) leave the process's RSS where it was, give or take allocator slack."""
    opts = dict(log_memory=1 << 20, page_size=64 << 10, index_buckets=64,
                cold_log_memory=1 << 20, cold_index_chunks=4, io_queue_depth=4,
                cold_cache_memory=_ember.COLD_CACHE_OFF)
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else str(tmp_path)
    path = tempfile.mkdtemp(prefix="ember-leak-", dir=base)
    cycles = scaled(10000)

    def cycle(i):
        with ember.Store(path, **opts) as s:
            if i % 100 == 0:
                s.put(b"k", b"v%d" % i)
            assert s[b"k"].startswith(b"v")

    try:
        for i in range(min(200, cycles)):  # warm up the allocators
            cycle(i)
        gc.collect()
        before = rss_kib()
        for i in range(cycles):
            cycle(i)
        gc.collect()
        grown = rss_kib() - before
    finally:
        shutil.rmtree(path, ignore_errors=True)
    print("rss grew %d KiB over %d open/close cycles" % (grown, cycles))
    assert grown < 8 * 1024 + cycles // 16, grown
