"""Every example runs as a user runs it and prints what it checked (emulator here, GPU where present)."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_and_checks(name):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checked" in r.stdout


