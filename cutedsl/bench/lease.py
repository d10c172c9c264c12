"""One GPU lease, within a time budget: the driver behind ``scripts/gpu_run.sh``.

A lease gives a session about 15 minutes of device time, machine start included, and one
command at most 10; so the run must finish in about 6 minutes and leave room for a rerun
(docs/gpu-lease.md). The driver keeps one deadline (``--budget`` seconds from its start,
default ``$GPU_RUN_BUDGET_S`` or 360) and runs the steps in order, each a subprocess of the
device's own Python on the bundle (``CUTEDSL_CACHE_DIR`` = the bundle's cache, no MLIR):

1. ``env``: the bundle verified (every kernel loads, the sources match);
2. ``tests``: ``pytest -m gpu`` on the plan's test files (every kernel family bit-identical
   with the emulator; torch / cupy / DLPack operands; the torch op);
3. ``bench``: the plan's problems against cuBLAS (:mod:`.lease_bench`);
4. ``attention``: the attention forward against SDPA's flash and cuDNN backends at seqlen 4k and
   16k, head dim 128, causal and not (:mod:`.attention_bench`) -- skipped with "no attention
   kernels in this bundle" for a bundle whose plan has none;
5. ``startup``: launch overhead per call, cold-start and load times (:mod:`.startup`).

Before a step the driver reads the clock: a step whose minimum time no longer fits is skipped
(recorded with the seconds left); otherwise it gets up to its own maximum, less the minimum of
the steps after it. A step past its limit gets SIGINT (pytest then writes its report), then
SIGKILL 10 s later. Everything lands flat in ``--out`` (the device tool brings back 8 files):
``gpu_run.log`` (every step's output), ``summary.json`` (device, clocks as read before and
after, each step's status, seconds, limit and seconds left), ``gpu_tests.xml``, ``bench.json``,
``bench.csv``, ``startup.json``, ``attention.json``. The end of the output
is a short table of all of it.

``--dry-run``: the emulator instead of the GPU (the ``gpu`` tests with the emulator as their
``cuda`` fixture, the problems at their tiny dry shapes): a test of the run, no measurement.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs

from .lease_report import report

DEFAULT_BUDGET_S = 360
GRACE_S = 10                #: between SIGINT and SIGKILL of a step past its limit
OUT_FILES = ("gpu_run.log", "summary.json", "gpu_tests.xml", "bench.json", "bench.csv", "startup.json",
             "attention.json")


@attrs.frozen
class Step:
    """``min_s``: the least time the step needs to give a result (else it is skipped);
    ``max_s``: the most it may take."""
    name: str
    min_s: int
    max_s: int


STEPS = (Step("env", 10, 60), Step("tests", 60, 170), Step("bench", 45, 170), Step("attention", 30, 60),
         Step("startup", 20, 60))


class Lease:
    """The state of one run: bundle, output folder, deadline, the steps' records."""

    def __init__(self, bundle, out, *, budget_s: float, dry: bool, python: str = sys.executable, steps=None):
        self.bundle, self.out = Path(bundle).resolve(), Path(out).resolve()
        self.dry, self.python, self.budget = dry, python, float(budget_s)
        self.t0 = time.time()
        self.deadline = self.t0 + self.budget
        self.manifest = json.loads((self.bundle / "manifest.json").read_text())
        self.wanted = [s for s in STEPS if steps is None or s.name in steps]
        self.records = []
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = self.out / "gpu_run.log"
        self.log.write_text("")
        from .runner import nvidia_smi
        self.summary = {"date_utc": _now(), "dry_run": dry, "budget_s": self.budget, "host": platform.node(),
                        "python": f"{platform.python_version()} {python}", "packages": _versions(),
                        "mlir_importable": _has_module("mlir"), "nvidia_smi_before": nvidia_smi(),
                        "bundle": {k: self.manifest.get(k) for k in ("plan", "arch", "created_utc", "source_hash",
                                                                     "size_bytes")} |
                        {"kernels": len(self.manifest.get("entries", []))}, "steps": self.records}

    # -- the steps' commands -------------------------------------------------------------
    def command(self, name: str, limit: float):
        """``(argv, extra env)`` of a step, or ``(None, why)`` when there is nothing to run."""
        py, b, o = self.python, str(self.bundle), self.out
        backend = "sim" if self.dry else "cuda"
        if name == "env":
            return [py, "-m", "cutedsl", "bundle", "--out", b, "--verify"], {}
        if name == "tests":
            tests = self.manifest.get("tests") or []
            if self.dry:            # the plan's emulator-sized subset, where it names one
                tests = self.manifest.get("dry_tests", tests)
            if not tests:
                return None, "the bundle's plan has no gpu tests"
            timeout = ["--timeout", "90", "--timeout-method", "thread"] if _has_module("pytest_timeout") else []
            env = {"CUTEDSL_TEST_SIM_SEEDS": "0"} | ({"CUTEDSL_TEST_GPU_ON_SIM": "1"} if self.dry else {})
            return [py, "-m", "pytest", "-v", "-rfEs", "-p", "no:cacheprovider", "-m", "gpu", *timeout,
                    f"--junitxml={o / 'gpu_tests.xml'}", *tests], env
        if name == "bench":
            return [py, "-m", "cutedsl.bench.lease_bench", "--bundle", b, "--backend", backend, "--deadline",
                    f"{time.time() + limit - GRACE_S:.1f}", "--json", str(o / "bench.json"), "--csv",
                    str(o / "bench.csv")], {}
        if name == "attention":
            if not self.manifest.get("attention"):
                return None, "no attention kernels in this bundle"
            return [py, "-m", "cutedsl.bench.attention_bench", "--bundle", b, "--backend", backend, "--deadline",
                    f"{time.time() + limit - GRACE_S:.1f}", "--json", str(o / "attention.json")], {}
        if name == "startup":
            return [py, "-m", "cutedsl.bench.startup", "--bundle", b, "--backend", backend, "--json",
                    str(o / "startup.json")], {}
        raise ValueError(f"unknown step {name!r}")

    # -- running -------------------------------------------------------------------------
    def run(self) -> int:
        for i, step in enumerate(self.wanted):
            self.records.append(self._step(step, self.wanted[i + 1:]))
            self.write_summary()
        from .runner import nvidia_smi
        self.summary["nvidia_smi_after"] = nvidia_smi()
        self.summary["used_s"] = round(time.time() - self.t0, 1)
        self.write_summary()
        print(report(self.out))
        return 0 if all(r["status"] in ("ok", "skipped") for r in self.records) else 1

    def _step(self, step: Step, later) -> dict:
        left = round(self.deadline - time.time(), 1)      # the record and the message say the same
        rec = {"step": step.name, "left_s": left, "min_s": step.min_s}
        cmd, extra = self.command(step.name, 0)
        if cmd is None:
            return rec | {"status": "skipped", "why": extra}
        if left < step.min_s:
            return rec | {"status": "skipped", "why": f"needs {step.min_s} s, {left:.0f} s left"}
        reserve = sum(s.min_s for s in later if self.command(s.name, 0)[0] is not None)
        limit = min(step.max_s, left, max(step.min_s, left - reserve))
        cmd, extra = self.command(step.name, limit)
        rec["limit_s"] = round(limit, 1)
        with self.log.open("a") as f:
            f.write(f"=== {_now()} step {step.name} (limit {limit:.0f} s, {left:.0f} s left): {' '.join(cmd)}\n")
        t = time.time()
        rc, timed_out = _run(cmd, {**os.environ, **extra}, self.log, limit)
        rec.update(seconds=round(time.time() - t, 1), rc=rc,
                   status="timeout" if timed_out else "ok" if rc == 0 else "failed")
        with self.log.open("a") as f:
            f.write(f"=== step {step.name}: {rec['status']} (exit {rc}) after {rec['seconds']} s\n")
        return rec

    def write_summary(self):
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str))


def _run(cmd, env, log: Path, limit: float) -> tuple:
    """Run ``cmd`` in its own process group, output appended to ``log``; past ``limit`` s:
    SIGINT, then SIGKILL after :data:`GRACE_S`. Returns ``(exit status, timed out)``."""
    with log.open("a") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            return p.wait(timeout=max(limit, 1)), False
        except subprocess.TimeoutExpired:
            pass
        for sig, wait in ((signal.SIGINT, GRACE_S), (signal.SIGKILL, 5)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                return p.wait(timeout=wait), True
            except subprocess.TimeoutExpired:
                continue
        return p.wait(), True


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _has_module(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _versions() -> dict:
    from importlib import metadata
    out = {}
    for name in ("numpy", "torch", "cupy-cuda13x", "cupy-cuda12x", "cuda-bindings", "cuda-python", "pytest",
                 "pytest-timeout", "attrs", "ml_dtypes"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cutedsl.bench.lease", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True, help="a bundle folder (python -m cutedsl bundle)")
    ap.add_argument("--out", required=True, help="where the results go (flat: at most 8 files)")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("GPU_RUN_BUDGET_S", DEFAULT_BUDGET_S)),
                    help="seconds for the whole run (default $GPU_RUN_BUDGET_S or 360)")
    ap.add_argument("--dry-run", action="store_true", help="the emulator instead of a GPU (a test of the run)")
    ap.add_argument("--steps", default=None, help="comma list of " + ", ".join(s.name for s in STEPS))
    ap.add_argument("--python", default=sys.executable, help="the interpreter the steps run with")
    args = ap.parse_args(argv)
    steps = None
    if args.steps:
        steps = [s.strip() for s in args.steps.split(",") if s.strip()]
        bad = [s for s in steps if s not in {st.name for st in STEPS}]
        if bad:
            ap.error(f"--steps: unknown {', '.join(bad)}; choose from {', '.join(s.name for s in STEPS)}")
    if not (Path(args.bundle) / "manifest.json").is_file():
        ap.error(f"--bundle: {args.bundle} holds no manifest.json (build one: python -m cutedsl bundle --out DIR)")
    return Lease(args.bundle, args.out, budget_s=args.budget, dry=args.dry_run, python=args.python,
                 steps=steps).run()


if __name__ == "__main__":
    sys.exit(main())
