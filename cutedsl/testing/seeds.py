"""Seeds for emulator tests: fresh random inputs whose seed is kept for the report, and the
adversarial-mode seeds a kernel test reruns under.

The emulator's adversarial mode (``CUTEDSL_SIM_CHAOS=<seed>``, docs/emulator.md "Adversarial
mode") runs the same PTX under random warp interleavings and late completion of asynchronous
operations (TMA, WGMMA, tcgen05, mbarrier transactions) -- every ordering the PTX memory model
allows (PTX ISA 8 "Memory Consistency Model"). A correct kernel gives bit-identical integer
results under every seed; a missing wait or a wrong barrier phase shows up as a deadlock or
wrong numbers under some seed. Eager mode (no seed) runs each warp as far as it can go.

Nothing here imports pytest (``cutedsl.testing.plugin`` turns these into fixtures).
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from ..errors import ArgumentError

#: environment variable the emulator reads at each launch for its adversarial-mode seed
CHAOS_ENV = "CUTEDSL_SIM_CHAOS"


class SeededRng(np.random.Generator):
    """A ``numpy.random.Generator`` (PCG64, same stream as ``np.random.default_rng(seed)``) that
    remembers its seed: ``seed_value`` (an int) for assertion messages, and its ``repr`` names it,
    so ``assert ok, rng`` reports what to replay. ``seed=None`` draws a fresh 32-bit seed from
    the OS, so every run sees new inputs."""

    def __init__(self, seed: int | None = None):
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ArgumentError(f"seed must be a non-negative int or None, got {seed!r}")
        super().__init__(np.random.PCG64(int(seed)))
        self.seed_value = int(seed)

    def __repr__(self):
        return f"SeededRng(seed={self.seed_value})"

    __str__ = __repr__


def sim_seeds(n: int) -> list:
    """The runs of an emulator kernel test: ``None`` (eager mode) then adversarial seeds 1..n.
    ``n = 0`` gives eager mode only. Raises ``ArgumentError`` for a negative or non-int ``n``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ArgumentError(f"the number of adversarial seeds must be an int >= 0, got {n!r}")
    return [None] + list(range(1, int(n) + 1))


def seed_id(seed: int | None) -> str:
    """Test-id text of a run: ``"eager"`` or ``"chaos<seed>"``."""
    return "eager" if seed is None else f"chaos{seed}"


def chaos_fixed_by_environment() -> bool:
    """True when ``CUTEDSL_SIM_CHAOS`` is already set: a fixed seed chosen by whoever runs the
    tests, which per-test seeds must leave alone."""
    return bool(os.environ.get(CHAOS_ENV, "").strip())


@contextlib.contextmanager
def adversarial(seed: int | None):
    """Run the body with the emulator's adversarial mode at ``seed`` (``None``: eager mode) for
    every launch that does not pass its own ``chaos=`` (subprocesses included: it is set in
    ``os.environ``); the previous value is restored on exit.

    >>> for seed in sim_seeds(3):
    ...     with adversarial(seed):
    ...         run_kernel(k, [x, out])
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ArgumentError(f"seed must be an int or None (eager), got {seed!r}")
    old = os.environ.get(CHAOS_ENV)
    if seed is None:
        os.environ.pop(CHAOS_ENV, None)
    else:
        os.environ[CHAOS_ENV] = str(int(seed))
    try:
        yield seed
    finally:
        if old is None:
            os.environ.pop(CHAOS_ENV, None)
        else:
            os.environ[CHAOS_ENV] = old
