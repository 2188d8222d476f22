"""The README's Python examples run as written (their store paths moved into a
temporary directory), so the first code a user copies works."""

import os
import re
import subprocess
import sys

import pytest

import ember

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_python_examples():
    assert len(readme_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_python_example_runs(index, tmp_path):
    code = readme_blocks()[index]
    if "import torch" in code:
        pytest.importorskip("torch")
    code = re.sub(r'"/tmp/([A-Za-z0-9_.-]+)"', lambda m: repr(str(tmp_path / m.group(1))), code)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ)  # the package under test, wherever the tests found it
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))
    env["PYTHONPATH"] = pkg + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
