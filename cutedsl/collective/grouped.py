"""Grouped GEMM scheduling: G problems of different M, N, K in one persistent launch (CUTLASS
``GroupProblemShape`` with ``PersistentTileSchedulerSm90Group``; the work Triton's persistent
grouped kernels and mixture-of-experts layers do).

The host lays the groups out in a table of i32 rows ``(m, n, k, first unit)``
(:data:`GROUP_FIELDS` per group, :func:`group_table`): group ``g`` owns the linear work units
``first[g] .. first[g + 1] - 1``, one per cluster tile of its ``m x n`` output, rasterized
inside the group as the persistent scheduler rasterizes one problem. Cluster ``c`` of ``P``
runs units ``c, c + P, ...`` of all groups; a unit finds its group by binary search over
the table (``scf.while``, log2 G loads) and carries it as the work tile's ``l`` (the group
index, as CUTLASS puts the group in L), with the group's own k-tile count. Empty groups own
no units (the host leaves M = 0, N = 0 and K = 0 groups out of the launch).
"""
from __future__ import annotations

import numpy as np

from ..compiler.artifact import ParamSpec as Param
from ..ir._lazy import lazy
from .tile_scheduler import PersistentTileScheduler, WorkTile, ceil_div

cir = lazy("cutedsl.ir")

GROUP_FIELDS = 4    #: i32 per group in the table: m, n, k, first unit
MAX_GROUPS = 65536  #: groups per launch at most


def group_table(shapes, tile_m: int, tile_n: int, cluster=(1, 1)) -> tuple:
    """``(table, units)``: the i32 ``(G, 4)`` table of ``shapes`` (``(m, n, k)`` per group, each
    >= 1) -- ``m, n, k, first unit`` -- and the total number of work units (cluster tiles)."""
    table = np.zeros((len(shapes), GROUP_FIELDS), np.int32)
    first = 0
    for g, (m, n, k) in enumerate(shapes):
        table[g] = (m, n, k, first)
        first += ceil_div(ceil_div(m, tile_m), cluster[0]) * ceil_div(ceil_div(n, tile_n), cluster[1])
    return table, first


class GroupedTileScheduler(PersistentTileScheduler):
    """The persistent scheduler over the work units of all groups (see the module docstring);
    constructor as :class:`PersistentTileScheduler`. Kernel parameters ``groups`` (G), ``units``
    (total work units) and ``problems`` (the table)."""

    def kernel_params(self) -> list:
        return [Param("problems", "ptr", dtype="i32"), Param("groups", "i32"), Param("units", "i32")]

    # -- host ----------------------------------------------------------------------
    def grid(self, problem) -> tuple:
        """CTAs for a launch whose ``problem.l`` counts the work units of all groups."""
        return (max(1, self.clusters_for(problem.l)) * self.cluster_size, 1, 1)

    # -- IR ------------------------------------------------------------------------
    def bind(self, problem, k_tile: int) -> None:
        """This CTA's cluster coordinates (the problems come from :meth:`bind_params`)."""
        self.problem, self.k_tile, self._k_tiles = problem, k_tile, None
        cs = self.cluster_size
        bid = cir.block_idx()
        self.rank = bid % cs if cs > 1 else 0
        self.cluster_id = bid // cs if cs > 1 else bid
        self.n_clusters = cir.grid_dim() // cs if cs > 1 else cir.grid_dim()

    @property
    def k_tiles(self):
        """No problem-wide count: every work tile carries its group's (``WorkTile.k_total``)."""
        return cir.u32(0)

    def bind_params(self, args) -> None:
        self.table = cir.GlobalPtr(args.problems, "i32")
        self.groups, self.total = args.groups.unsigned(), args.units.unsigned()

    def work_count(self):
        if not self.persistent:
            return cir.u32(1)
        return (self.total - self.cluster_id + (self.n_clusters - 1)) // self.n_clusters

    def field(self, g, i: int):
        """IR: field ``i`` (0 m, 1 n, 2 k, 3 first unit) of group ``g`` (unsigned i32)."""
        return self.table.load(g * GROUP_FIELDS + i).unsigned()

    def group_of(self, unit):
        """IR: the group owning work unit ``unit``: the last ``g`` with ``first[g] <= unit``
        (an empty group shares its first unit with the next one, which is then the last)."""
        def body(lo, hi):
            mid = (lo + hi) // 2
            take = self.field(mid, 3) <= unit
            return cir.select(take, mid, lo), cir.select(take, hi, mid)
        lo, _ = cir.While([cir.u32(0), self.groups], cond=lambda lo, hi: hi - lo > 1, body=body).results
        return lo

    def work_tile(self, i=0, k_tile_range=None) -> WorkTile:
        """Unit ``i`` of this cluster: its group ``g`` (as ``l``), the tile inside the group's
        ``m x n`` output, and all ``ceil(k / k_tile)`` k-tiles of the group's K."""
        unit = self.cluster_id + cir.u32(i) * self.n_clusters if self.persistent else self.cluster_id
        g = self.group_of(unit)
        m, n, k = (self.field(g, f) for f in range(3))
        ct_m = (m + (self.tile_m - 1)) // self.tile_m
        ct_n = (n + (self.tile_n - 1)) // self.tile_n
        if self.cluster_m > 1:
            ct_m = (ct_m + (self.cluster_m - 1)) // self.cluster_m
        if self.cluster_n > 1:
            ct_n = (ct_n + (self.cluster_n - 1)) // self.cluster_n
        m0, n0 = self.unit_origin(unit - self.field(g, 3), ct_m, ct_n)
        kt = (k + (self.k_tile - 1)) // self.k_tile
        return WorkTile(m0, n0, g, cir.u32(0), kt, True, k_total=kt)

    def group_problem(self, g) -> tuple:
        """IR: ``(m, n, k)`` of group ``g``."""
        return tuple(self.field(g, f) for f in range(3))


__all__ = ["GroupedTileScheduler", "group_table", "GROUP_FIELDS", "MAX_GROUPS"]
