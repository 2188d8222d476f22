"""examples/gnn_link_prediction.py runs at a tiny size and its loss goes down."""

from __future__ import annotations

import importlib.util
import os

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                       "gnn_link_prediction.py")


def test_link_prediction_example_learns(capsys):
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("gnn_link_prediction", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    losses = mod.main(["--scale", "9", "--edge-factor", "8", "--partitions", "4",
                       "--buffer", "2", "--epochs", "4", "--batch", "256"])
    out = capsys.readouterr().out
    print(out)
    assert len(losses) == 4 and "epoch 3: loss" in out
    assert losses[-1] < losses[0]
