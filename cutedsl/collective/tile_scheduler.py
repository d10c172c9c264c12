"""Tile schedulers: which output tile(s) a CTA computes (CUTLASS ``TileScheduler``).

:class:`TileScheduler` is the non-persistent one: one ``tile_m x tile_n`` output tile per CTA,
found from ``%ctaid`` — ``x`` walks N, ``y`` walks M (so CTAs next to each other in launch order
share A rows in L2), ``z`` is free for a kernel's own use (e.g. split-K). A GEMM kernel names
its scheduler in ``GemmKernel.scheduler_cls``; the Device layer launches exactly ``grid()``.

Host side: :meth:`TileScheduler.grid` (Python ints). IR side (inside a kernel body):
:meth:`TileScheduler.tile_origin` gives the tile's first row and column ``(m0, n0)`` as
unsigned i32 values.
"""
from __future__ import annotations

from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class TileScheduler:
    """One output tile per CTA: tile ``(blockIdx.y, blockIdx.x)`` of the ``M x N`` output.

    ``tile_m``/``tile_n``: tile extent in elements (rows of D, columns of D)."""

    def __init__(self, tile_m: int, tile_n: int):
        self.tile_m, self.tile_n = tile_m, tile_n

    def tiles(self, m: int, n: int) -> tuple:
        """Output tiles ``(along M, along N)`` of an ``m x n`` problem."""
        return ceil_div(m, self.tile_m), ceil_div(n, self.tile_n)

    def grid(self, m: int, n: int, k: int = 0) -> tuple:
        """CTAs ``(x, y, z)`` to launch: ``(tiles along N, tiles along M, 1)``."""
        tm, tn = self.tiles(m, n)
        return (tn, tm, 1)

    def tile_origin(self) -> tuple:
        """IR: ``(m0, n0)``, the first row and column of this CTA's tile (unsigned i32)."""
        return cir.block_idx("y") * self.tile_m, cir.block_idx("x") * self.tile_n
