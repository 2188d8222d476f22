"""ember.Store: Ember's key-value store (docs/python.md).

A ``Store`` is safe to share between threads: each thread gets its own session on
the store (``ember_session``), opened at its first call and closed when the thread
ends or the store closes. Every call that can wait or touch the disk releases the
GIL.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
import weakref
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple, Union

from . import _ember
from .errors import StateError, from_code

__all__ = ["Store", "CheckpointInfo", "VerifyReport", "TierStats", "Stats",
           "RecoveryInfo"]

BytesLike = Union[bytes, bytearray, memoryview]


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """One complete checkpoint (ember_checkpoint_info)."""
    id: int
    time_unix: int
    hot_begin: int
    hot_end: int
    cold_begin: int
    cold_end: int
    index_entries: int


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What verify() checked (ember_verify_report); ``ok`` when errors == 0."""
    records: int
    bytes: int
    chunks: int
    errors: int
    first_error: str

    @property
    def ok(self) -> bool:
        return self.errors == 0


@dataclasses.dataclass(frozen=True)
class TierStats:
    """One log's figures (ember_tier_stats)."""
    records: int
    bytes_memory: int
    bytes_disk: int
    reads_memory: int
    reads_disk: int
    compactions: int
    compaction_bytes_written: int


@dataclasses.dataclass(frozen=True)
class Stats:
    """A snapshot of the store's counters since open (ember_stats)."""
    hot: TierStats
    cold: TierStats
    read_cache_hits: int
    read_cache_bytes: int
    cold_cache_hits: int
    cold_cache_bytes: int
    index_bytes: int
    cold_index_bytes: int
    chunk_log_bytes_disk: int
    user_reads: int
    user_writes: int
    user_bytes_written: int
    disk_reads: int
    disk_bytes_read: int
    compaction_disk_reads: int
    compaction_bytes_read: int
    compaction_bytes_written: int
    tombstones_dropped: int
    compaction_assists: int
    write_amplification: float
    read_amplification: float
    cold_index_bytes_per_key: float
    cold_lookups: int
    cold_chunk_reads: int
    cold_record_reads: int
    disk_reads_per_cold_lookup: float


@dataclasses.dataclass(frozen=True)
class RecoveryInfo:
    """What the open recovered (ember_recovery_info)."""
    checkpoint_id: int
    records_replayed: int
    checkpoints_skipped: int
    detail: str


class _ThreadSession:
    """Holds one thread's session in the store's threading.local; closes it when
    the thread's local data dies (the thread ended)."""

    __slots__ = ("session", "__weakref__")

    def __init__(self, session: "_ember.Session") -> None:
        self.session = session

    def __del__(self) -> None:
        try:
            self.session.close()
        except Exception:
            pass


class Store:
    """An open Ember store in directory ``path``.

    Keyword options mirror ``ember_options`` (include/ember.h); 0 means the default:
    log_memory, mutable_fraction, index_buckets, page_size, io_queue_depth,
    log_segment_bytes, memory_budget, hot_disk_budget, cold_disk_budget,
    cold_log_memory, cold_index_chunks, cold_chunk_bytes, read_cache_memory,
    cold_cache_memory (``_ember.COLD_CACHE_OFF``: none), checkpoint_interval_ms,
    read_cache_admit (``_ember.READ_CACHE_ADMIT_FIRST`` or ``READ_CACHE_ADMIT_SECOND``).
    The flags: ``create`` (False: the directory must hold a store already),
    ``truncate`` (EMBER_OPEN_TRUNCATE), ``read_only`` (EMBER_OPEN_READONLY),
    ``prewrite_log`` (EMBER_OPEN_PREWRITE_LOG), ``close_checkpoint`` (False:
    EMBER_OPEN_NO_CLOSE_CHECKPOINT, close takes no final checkpoint). Recovery lines (log_fn) go to
    stderr. An unknown keyword is a TypeError, a bad value ember.InvalidArgument.

    Keys are bytes-like, 1 .. 64 KiB; values bytes-like, up to 16 MiB (less with a
    small log_memory: ember.TooBig).
    """

    def __init__(self, path: Union[str, os.PathLike], *, create: bool = True,
                 truncate: bool = False, read_only: bool = False,
                 prewrite_log: bool = False, close_checkpoint: bool = True,
                 **options: Any) -> None:
        self._db = None
        self._lock = threading.Lock()
        self._sessions: "weakref.WeakSet[_ember.Session]" = weakref.WeakSet()
        self._walks: "weakref.WeakSet[_ember.Walk]" = weakref.WeakSet()
        # objects over this store (caches) that close() closes first
        self._children: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._local = threading.local()
        for name, flag in (("create", create), ("truncate", truncate),
                           ("read_only", read_only), ("prewrite_log", prewrite_log),
                           ("close_checkpoint", close_checkpoint)):
            if not isinstance(flag, bool):
                raise TypeError("%s: expected a bool, got %s" % (name, type(flag).__name__))
        known = _ember.Db.option_names()
        for name in options:
            if name not in known or name == "flags":
                raise TypeError("Store() got an unexpected keyword argument %r" % name)
        path = os.fspath(path)
        if not create and not os.path.exists(os.path.join(path, "ember.super")):
            raise from_code(-errno.ENOENT, "no Ember store in %s" % path)
        flags = ((_ember.OPEN_TRUNCATE if truncate else 0)
                 | (_ember.OPEN_READONLY if read_only else 0)
                 | (_ember.OPEN_PREWRITE_LOG if prewrite_log else 0)
                 | (0 if close_checkpoint else _ember.OPEN_NO_CLOSE_CHECKPOINT))
        self.path = path
        self._db = _ember.Db(path, flags=flags, **options)

    # ---- life ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._db is None or self._db.closed

    @property
    def read_only(self) -> bool:
        return self._live().readonly

    def close(self) -> None:
        """Close the caches opened over this store (flushing them), every thread's
        session, any open iterate(), then the store. Twice is fine. BusyError while
        another thread is in a call."""
        db = self._db
        if db is None or db.closed:
            return
        for c in list(self._children):
            c.close()
        for w in list(self._walks):
            w.close()
        with self._lock:
            sessions = list(self._sessions)
        for s in sessions:
            s.close()
        db.close()

    def __enter__(self) -> "Store":
        self._live()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<ember.Store %r%s>" % (getattr(self, "path", "?"),
                                       " closed" if self.closed else "")

    def _live(self) -> "_ember.Db":
        db = self._db
        if db is None or db.closed:
            raise StateError(-30011, "the store is closed")
        return db

    def _session(self) -> "_ember.Session":
        """This thread's session, opened at its first use."""
        db = self._live()
        holder = getattr(self._local, "holder", None)
        if holder is None or holder.session.closed:
            s = _ember.Session(db)
            with self._lock:
                self._sessions.add(s)
            holder = _ThreadSession(s)
            self._local.holder = holder
        return holder.session

    # ---- keys and values -------------------------------------------------------

    def get(self, key: BytesLike, default: Any = None) -> Any:
        """The value of key as bytes, or default when absent."""
        try:
            return self._session().get(key)
        except KeyError:
            self._live()
            return default

    def put(self, key: BytesLike, value: BytesLike) -> None:
        """Insert or replace key -> value."""
        self._session().put(key, value)

    def delete(self, key: BytesLike) -> None:
        """Delete key (absent keys are fine)."""
        self._session().delete(key)

    def get_batch(self, keys: Union[Sequence[BytesLike], Any]) -> list:
        """Values of many keys at once (disk reads in flight together): a list of
        bytes, None where absent. keys: a sequence of bytes-likes, or an array of
        fixed-size keys: 1-D (each element one key: int64 (n,) gives 8-byte keys)
        or uint8 (n, k)."""
        return self._session().get_batch(keys)

    def put_batch(self, keys: Union[Sequence[BytesLike], Any],
                  values: Union[Sequence[BytesLike], Any]) -> None:
        """Many puts at once, in order; keys and values as in get_batch (values of
        an array are its rows). Raises the first failed put's error after the
        others were written (each put is atomic, the batch is not)."""
        self._session().put_batch(keys, values)

    def __getitem__(self, key: BytesLike) -> bytes:
        return self._session().get(key)  # NotFound is a KeyError

    def __setitem__(self, key: BytesLike, value: BytesLike) -> None:
        self.put(key, value)

    def __delitem__(self, key: BytesLike) -> None:
        s = self._session()
        s.get(key)  # KeyError when absent, as a mapping does
        s.delete(key)

    def __contains__(self, key: BytesLike) -> bool:
        try:
            self._session().get(key)
        except KeyError:
            return False
        return True

    def iterate(self) -> Iterator[Tuple[bytes, bytes]]:
        """Yield (key, value) for every live key, in no particular order. The walk
        runs on a thread of its own, in chunks; while the generator is open the
        store refuses checkpoint(), compact(), checkpoints(), close() from this
        thread's point of view (BusyError) and a second iterate(). Close the
        generator (or exhaust it) to end the walk."""
        w = _ember.Walk(self._live())
        self._walks.add(w)
        try:
            while True:
                chunk = w.next_chunk()
                if not chunk:
                    return
                for kv in chunk:
                    if w.closed:  # the store closed meanwhile
                        raise StateError(-30011, "the iteration is closed")
                    yield kv
        finally:
            w.close()

    def __iter__(self) -> Iterator[bytes]:
        for k, _ in self.iterate():
            yield k

    # ---- durability and figures -------------------------------------------------

    def checkpoint(self) -> int:
        """Take a checkpoint; returns its id."""
        return self._live().checkpoint()

    def checkpoints(self) -> list:
        """The complete checkpoints, newest first ([CheckpointInfo])."""
        return [CheckpointInfo(*t) for t in self._live().checkpoints()]

    def compact(self, force: bool = True) -> None:
        """Run compaction now on this thread."""
        self._live().compact(bool(force))

    def verify(self) -> VerifyReport:
        """Read every record and chunk back and check it; a report (ok or not)."""
        return VerifyReport(*self._live().verify())

    def stats(self) -> Stats:
        """The store's counters."""
        d = self._live().stats()
        d["hot"] = TierStats(**d["hot"])
        d["cold"] = TierStats(**d["cold"])
        return Stats(**d)

    def recovery(self) -> RecoveryInfo:
        """What this open recovered."""
        return RecoveryInfo(*self._live().recovery())
