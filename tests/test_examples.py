"""Every example runs as a user runs it and prints what it checked (emulator here, GPU where present)."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
#: every example runs kernels on the emulator: rerun under the adversarial seeds of --sim-seeds
pytestmark = pytest.mark.sim_kernel


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_and_checks(name):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checked" in r.stdout




def test_no_example_encodes_tensor_maps_or_packs_parameters():
    """Issue 38: user code launches through ``cutedsl.runtime.launch`` (or a front end); no tensor-map
    or parameter bytes are built by hand."""
    for name in EXAMPLES:
        text = (ROOT / "examples" / name).read_text()
        assert "encode_tensor_map" not in text and "pack_params" not in text, name
