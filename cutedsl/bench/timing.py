"""Timers and statistics of the sweep.

:class:`EventTimer` times launches with CUDA events (driver API) on the legacy default stream,
which is where ``CudaBackend`` launches and where torch/cupy run cuBLAS by default. Every
iteration is bracketed by its own start/stop event pair and the whole batch is enqueued before
one synchronisation, so the host's launch cost does not land inside a pair as long as the GPU
is kept busy ahead of it: the optional ``between`` callable (an L2 flush: a memset of a buffer
larger than L2) runs before each pair, which both empties L2 and gives the host time to enqueue
the next launch (the method of ``triton.testing.do_bench``).

:class:`WallTimer` is for the emulator: host wall time, one synchronise per launch; it times the
harness, not a GPU, and its numbers are never reported as kernel times.
"""
from __future__ import annotations

import math
import statistics
import time

from ..errors import LaunchError


def median(values) -> float:
    """Median of a non-empty sequence (mean of the middle two for an even count)."""
    values = list(values)
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def geomean(values) -> float | None:
    """Geometric mean of the positive finite values; None when there are none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def tflops(m: int, n: int, k: int, ms: float | None) -> float | None:
    """2*M*N*K floating-point operations over ``ms`` milliseconds, in TFLOP/s."""
    if ms is None or ms <= 0:
        return None
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def _check(drv, res, what):
    err = res[0] if isinstance(res, tuple) else res
    if err != drv.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"{what} failed: {err!r}")
    if isinstance(res, tuple) and len(res) > 1:
        return res[1]
    return None


class EventTimer:
    """Per-launch milliseconds from pairs of CUDA events (``cuEventRecord`` on stream 0).

    ``drv`` is ``cuda.bindings.driver`` (or a fake with the same functions, for tests).
    """

    kind = "cuda-events"

    def __init__(self, drv):
        self.drv = drv
        self._events = []

    def _pairs(self, n):
        while len(self._events) < n:
            a = _check(self.drv, self.drv.cuEventCreate(0), "cuEventCreate")
            b = _check(self.drv, self.drv.cuEventCreate(0), "cuEventCreate")
            self._events.append((a, b))
        return self._events[:n]

    def time(self, fns, between=None) -> list:
        """Run ``fns[i]()`` bracketed by event pair i (``between()`` before each pair); one
        synchronisation at the end. Returns milliseconds per call, in order."""
        drv = self.drv
        pairs = self._pairs(len(fns))
        stream = drv.CUstream(0)          # the legacy default stream, where the launches go
        for fn, (start, stop) in zip(fns, pairs):
            if between is not None:
                between()
            _check(drv, drv.cuEventRecord(start, stream), "cuEventRecord")
            fn()
            _check(drv, drv.cuEventRecord(stop, stream), "cuEventRecord")
        if pairs:
            _check(drv, drv.cuEventSynchronize(pairs[-1][1]), "cuEventSynchronize")
        return [float(_check(drv, drv.cuEventElapsedTime(a, b), "cuEventElapsedTime")) for a, b in pairs]

    def close(self):
        for a, b in self._events:
            self.drv.cuEventDestroy(a)
            self.drv.cuEventDestroy(b)
        self._events = []


class WallTimer:
    """Host wall-clock milliseconds per call, synchronising after each (emulator, tests)."""

    kind = "wall-clock"

    def __init__(self, synchronize=lambda: None, clock=time.perf_counter):
        self.synchronize, self.clock = synchronize, clock

    def time(self, fns, between=None) -> list:
        out = []
        for fn in fns:
            if between is not None:
                between()
            t = self.clock()
            fn()
            self.synchronize()
            out.append((self.clock() - t) * 1e3)
        return out

    def close(self):
        pass


def rotation(n_sets: int, warmup: int, iters: int) -> tuple:
    """Indices of the input set used by each warm-up and each timed launch: round-robin, the
    timed launches continuing where the warm-up stopped, so consecutive launches never reuse
    the set the previous one just pulled into L2 (when ``n_sets`` > 1)."""
    if n_sets < 1 or warmup < 0 or iters < 1:
        raise ValueError(f"need n_sets >= 1, warmup >= 0, iters >= 1; got {n_sets}, {warmup}, {iters}")
    seq = [i % n_sets for i in range(warmup + iters)]
    return seq[:warmup], seq[warmup:]


def sets_needed(bytes_per_set: int, l2_bytes: int, budget_bytes: int, max_sets: int = 8) -> int:
    """How many input sets to rotate so that together they exceed 3x L2 (an input set is then
    evicted before its next use), at most ``max_sets`` and within ``budget_bytes``."""
    if bytes_per_set <= 0:
        raise ValueError("bytes_per_set must be positive")
    want = max(1, math.ceil(3 * l2_bytes / bytes_per_set)) if l2_bytes > 0 else 1
    fit = max(1, budget_bytes // bytes_per_set)
    return int(min(want, fit, max_sets))


def lease_step_parser(prog: str, description: str, bundle_help: str):
    """The options every lease timing step takes (``python -m cutedsl.bench.lease_bench``,
    ``.attention_bench``): ``--bundle`` (required), ``--backend`` cuda|sim, ``--deadline``
    (``time.time()`` after which nothing new starts), ``--iters`` / ``--warmup`` (launches),
    ``--json`` (required). Returns the ``argparse.ArgumentParser`` for the step to extend."""
    import argparse
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--bundle", required=True, help=bundle_help)
    ap.add_argument("--backend", choices=["cuda", "sim"], default="cuda")
    ap.add_argument("--deadline", type=float, default=None, help="time.time() after which nothing new starts")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", required=True)
    return ap
