"""examples/dlrm_synthetic.py runs at a tiny size and its loss goes down."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_dlrm_synthetic_tiny(tmp_path):
    import ember
    env = dict(os.environ)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))
    env["PYTHONPATH"] = pkg + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.join(ROOT, "examples", "dlrm_synthetic.py"),
           "--steps", "120", "--batch", "64", "--tables", "8", "--rows", "2000",
           "--print-every", "40", "--seed", "3", "--dir", str(tmp_path / "store")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    print(out.stdout, out.stderr)
    assert out.returncode == 0
    m = re.search(r"loss ([0-9.]+) -> ([0-9.]+) in 120 steps", out.stdout)
    assert m, out.stdout
    assert float(m.group(2)) < float(m.group(1))
    assert re.search(r"[1-9][0-9]* evicted", out.stdout)


def test_dlrm_distributed_one_rank(tmp_path):
    """examples/dlrm_distributed.py without torchrun (one rank) trains and resumes."""
    import ember
    env = dict(os.environ)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))
    env["PYTHONPATH"] = pkg + os.pathsep + env.get("PYTHONPATH", "")
    env["MASTER_PORT"] = "0"
    base = [sys.executable, os.path.join(ROOT, "examples", "dlrm_distributed.py"),
            "--batch", "64", "--tables", "4", "--rows", "2000", "--print-every", "40",
            "--checkpoint-every", "40", "--seed", "3", "--dir", str(tmp_path / "shards")]
    out = subprocess.run(base + ["--steps", "80"], env=env, capture_output=True, text=True,
                         timeout=300)
    print(out.stdout, out.stderr)
    assert out.returncode == 0
    m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", out.stdout)
    assert m and float(m.group(2)) < float(m.group(1)), out.stdout
    out = subprocess.run(base + ["--steps", "120"], env=env, capture_output=True, text=True,
                         timeout=300)
    print(out.stdout, out.stderr)
    assert out.returncode == 0 and "from step 80" in out.stdout, out.stdout
