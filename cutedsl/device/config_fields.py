"""The converters and checks of single ``GemmConfig`` fields (:mod:`cutedsl.device.config`): ints
that are not bools, the tile triple, the stage count, the problem sizes ``for_problem`` and
``can_implement`` take, and the defaults that follow from the dtype (BLOCK_K, B's major).
Each raises ``ConfigError`` naming the field, what it accepts and what it got. Imports no MLIR."""
from __future__ import annotations

import numbers

import numpy as np

from ..atom.mma_traits import ELEMENT_BITS, element_type, mma_traits
from ..collective.tma_wgmma import TmaWgmmaMainloop
from ..errors import ConfigError

STAGES = TmaWgmmaMainloop.STAGES                #: pipeline depths of the mainloops


def is_int(v) -> bool:
    """An integer that is not a bool (numpy integers included); floats such as 128.0 are not."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def tile(v) -> tuple:
    """Converter of ``GemmConfig.tile``: a sequence of three ints, as plain ints."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ConfigError(f"tile must be a tuple (BLOCK_M, BLOCK_N, BLOCK_K) of ints, got {v!r}")
    v = tuple(v)
    bad = [x for x in v if not is_int(x)]
    if bad:
        raise ConfigError(f"tile must be a tuple (BLOCK_M, BLOCK_N, BLOCK_K) of ints, got {v!r} "
                          f"({bad[0]!r} is a {type(bad[0]).__name__})")
    return tuple(int(x) for x in v)


def k_tile(dtype) -> int:
    """The default BLOCK_K: one 128-byte swizzle row of ``dtype`` (64 when the dtype is unknown:
    the dtype check then names the problem)."""
    dtype = element_type(dtype)
    return mma_traits(dtype).k_tile if isinstance(dtype, str) and dtype in ELEMENT_BITS else 64


def default_b_major(dtype) -> str:
    """B's default layout: MN-major (a row-major (K, N) array) where the MMA can read it, else K."""
    dtype = element_type(dtype)
    known = isinstance(dtype, str) and dtype in ELEMENT_BITS
    return "MN" if not known or "MN" in mma_traits(dtype).majors_b else "K"


def stages(v):
    """Converter of ``GemmConfig.stages``: ``"auto"`` or a plain int (bools and floats refused)."""
    if isinstance(v, str) and v == "auto":
        return v
    if not is_int(v) or v not in STAGES:
        raise ConfigError(f"stages must be 'auto' or an int in {STAGES.start}..{STAGES.stop - 1}, got {v!r}"
                          + ("" if is_int(v) or isinstance(v, str) else f" ({type(v).__name__})"))
    return int(v)


def problem_sizes(m, n, k, l, who: str) -> tuple:
    """``(m, n, k, l)`` as plain ints (``m`` may be a ``GemmProblem``); ``ConfigError`` naming
    a size that is not a positive int."""
    from ..problem import GemmProblem
    if isinstance(m, GemmProblem):
        if (n, k) != (None, None):
            raise ConfigError(f"{who}: give a GemmProblem or m, n, k, not both")
        m, n, k, l = m
    for name, v in (("m", m), ("n", n), ("k", k), ("l", l)):
        if not is_int(v) or v < 1:
            raise ConfigError(f"{who}: {name} must be a positive int, got {v!r}")
    return int(m), int(n), int(k), int(l)


__all__ = ["is_int", "tile", "k_tile", "default_b_major", "stages", "problem_sizes", "STAGES"]
