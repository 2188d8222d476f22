"""Shared fixtures: a small store in a temporary directory; the test scale."""

import os

import pytest

import ember

SMALL = dict(log_memory=16 << 20, index_buckets=1 << 12, cold_log_memory=8 << 20,
             cold_index_chunks=1 << 8)


def scale() -> float:
    """EMBER_TEST_SCALE (default 1): sizes shrink by it under slow builds."""
    try:
        return max(0.01, float(os.environ.get("EMBER_TEST_SCALE", "1")))
    except ValueError:
        return 1.0


def scaled(n: int) -> int:
    return max(1, int(n * scale()))


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def store(store_dir):
    s = ember.Store(store_dir, **SMALL)
    yield s
    s.close()
