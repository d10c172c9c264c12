"""Replay of a lost wake-up: `bar.sync` run as a lockstep batch (registry.each_warp) left the
elected MMA lane of the sm_100a single-tile GEMM waiting on a phase already complete, reported as a
deadlock, under adversarial seed 1 with the inputs of session seed 1694453610 (found by a full
run). bar.sync is now stepped per warp (cutedsl/sim/instructions/sync.py); this replays that run."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_readme_epilogue_replay_of_the_lost_wakeup():
    pytest.importorskip("mlir")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/kernel/test_sm100_epilogue.py::test_readme_epilogue_subclass_runs_on_sm100",
                        "--rng-seed", "1694453610"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert r.returncode == 0 and "6 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
