"""Tile schedulers: which output tile(s) a CTA computes (CUTLASS ``TileScheduler``).

:class:`TileScheduler` is the non-persistent one: one ``tile_m x tile_n`` output tile per CTA,
found from ``%ctaid`` — ``x`` walks N, ``y`` walks M (so CTAs next to each other in launch order
share A rows in L2), ``z`` is free for a kernel's own use (e.g. split-K). A GEMM kernel names
its scheduler in ``GemmKernel.scheduler_cls``; the Device layer launches exactly ``grid()``.

These are the GEMM instances of the problem-generic work-unit protocol
(:mod:`~cutedsl.collective.work_unit`: ``grid``, ``bind``, ``work_loop``, ``work_unit``): their
unit record is :class:`WorkTile`, their unit space the output tiles (rasterized, in clusters,
over the batch). **The GEMM side of the protocol** (plain, persistent, split-K; CUTLASS's
``get_grid_shape`` / ``get_current_work`` / ``WorkTileInfo``):

* host: :meth:`~TileScheduler.grid` ``(problem)`` — the CTAs to launch for a
  :class:`~cutedsl.problem.GemmProblem` (M, N, K, L as Python ints);
* IR: :meth:`~TileScheduler.bind` ``(problem, k_tile)`` once per kernel, then
  :meth:`~TileScheduler.work_count` units of work for this CTA, and for unit ``i`` one
  :class:`WorkTile` from :meth:`~TileScheduler.work_tile` — tile origin ``(m0, n0)``, batch
  ``l``, k-tile range ``(k_first, k_count)`` and ``valid``. A kernel asks for the work tile once
  per unit of work, so a scheduler that varies the K range per unit (stream-K) is a subclass.
  The pieces a subclass overrides: :meth:`~TileScheduler.tile_origin` (which tile) and
  :meth:`~TileScheduler.k_tile_range` (which k-tiles).

:class:`PersistentTileScheduler` — static persistent, with rasterization and clusters (CUTLASS
``PersistentTileSchedulerSm90``).

Output tiles (``tile_m x tile_n``) are grouped into *cluster tiles* of ``cluster_m x
cluster_n`` tiles; a cluster tile is the unit of work of one cluster (its CTAs work in
lockstep on neighbouring tiles; tiles past the problem edge inside a cluster tile compute on
TMA's zero fill and store nothing). The launch is one-dimensional: ``grid = (clusters x
cluster size, 1, 1)``, clusters of ``(cluster size, 1, 1)`` CTAs; CTA rank ``r`` in its cluster
sits at ``(rm, rn) = (r % cluster_m, r // cluster_m)``.

* persistent (default): ``clusters = min(cluster tiles, sm_count * ctas_per_sm // cluster
  size)``; cluster ``c`` runs cluster tiles ``c, c + clusters, c + 2 clusters, ...``.
* ``persistent=False``: one cluster per cluster tile (each CTA runs exactly one tile).

Rasterization: ``raster="M"`` walks along M (consecutive work units change the M tile
first), ``"N"`` along N; ``swizzle`` ``s`` in {1, 2, 4, 8} walks strips of ``s`` tiles across
the other dimension (offset inside the strip fastest), so ``s`` consecutive units share A or
B tiles in L2. The last strip may be narrower.
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT_SM_COUNT
from ..ir._lazy import lazy
from .work_unit import PersistentScheduler, UnitScheduler

cir = lazy("cutedsl.ir")


@attrs.frozen
class WorkTile:
    """One unit of GEMM work (CUTLASS ``WorkTileInfo``; the GEMM's work-unit record): output tile origin ``(m0, n0)`` in elements,
    batch index ``l``, the k-tiles ``k_first .. k_first + k_count - 1`` to reduce (``k_count``
    may be 0: the accumulator stays zero) and ``valid`` (False: past the last unit, nothing to
    do). Each field is an IR i32/i1 value or a Python int/bool. A scheduler that splits a
    tile's K over several units (stream-K, split-K) also sets ``k_total`` and ``slot``."""
    m0: object
    n0: object
    l: object = 0
    k_first: object = 0
    k_count: object = 0
    valid: object = True
    #: k-tiles of the whole tile (None: ``k_first + k_count`` covers all of them); a stream-K
    #: or split-K piece covers part of them and is reduced with the tile's other pieces
    k_total: object = None
    #: the reduction workspace slot of a tile split into pieces (IR i32; None: not split)
    slot: object = None


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for Python ints (``b`` > 0)."""
    return -(-a // b)


class TileScheduler(UnitScheduler):
    """One output tile per CTA: tile ``(blockIdx.y, blockIdx.x)`` of the ``M x N`` output.

    ``tile_m``/``tile_n``: tile extent in elements (rows of D, columns of D). A kernel over a
    batch sets :attr:`batched`: the batch index is then ``blockIdx.z`` (grid z = L)."""

    #: set by a batched kernel: the work tiles span the problem's L batches
    batched = False

    def __init__(self, tile_m: int, tile_n: int):
        super().__init__(None)
        self.tile_m, self.tile_n = tile_m, tile_n

    def tiles(self, m: int, n: int) -> tuple:
        """Output tiles ``(along M, along N)`` of an ``m x n`` problem."""
        return ceil_div(m, self.tile_m), ceil_div(n, self.tile_n)

    # -- host ----------------------------------------------------------------------
    def grid(self, problem) -> tuple:
        """CTAs ``(x, y, z)`` to launch for ``problem`` (a ``GemmProblem``): ``(tiles along N,
        tiles along M, L)`` (L: 1 unless :attr:`batched`)."""
        tm, tn = self.tiles(problem.m, problem.n)
        return (tn, tm, problem.l if self.batched else 1)

    def partial_tiles(self, problem) -> int:
        """Host: output tiles of ``problem`` whose K is split over several units of work, each
        needing a workspace slot for its partial sums (0 here; see :mod:`.stream_k`)."""
        return 0

    # -- IR ------------------------------------------------------------------------
    def bind(self, problem, k_tile: int) -> None:
        """Once per kernel: ``problem`` (``GemmProblem`` of IR i32 values) and the K extent of a
        k-tile (elements); :attr:`k_tiles` is emitted where first needed."""
        self.problem, self.k_tile, self._k_tiles = problem, k_tile, None

    @property
    def k_tiles(self):
        """IR: k-tiles of the problem, ``ceil(K / k_tile)`` (unsigned i32)."""
        if self._k_tiles is None:
            kt = self.k_tile
            self._k_tiles = (self.problem.k.unsigned() + kt - 1) // kt
        return self._k_tiles

    def work_unit(self, i=0) -> WorkTile:
        """The work-unit protocol's record of unit ``i``: its :class:`WorkTile`."""
        return self.work_tile(i)

    def work_tile(self, i=0, k_tile_range=None) -> WorkTile:
        """The :class:`WorkTile` of this CTA's unit ``i``; ``k_tile_range`` (a kernel's hook,
        default :meth:`k_tile_range`) decides its k-tiles."""
        m0, n0 = self.tile_origin(i)
        first, count = (k_tile_range or self.k_tile_range)(self.k_tiles)
        return WorkTile(m0, n0, self.batch_index(i), first, count, True)

    def batch_index(self, i=0):
        """IR: the batch ``l`` of this CTA's unit ``i``: ``blockIdx.z`` when :attr:`batched`, else 0."""
        return cir.block_idx("z") if self.batched else 0

    def tile_origin(self, i=0) -> tuple:
        """IR: ``(m0, n0)``, the first row and column of this CTA's tile (unsigned i32)."""
        return cir.block_idx("y") * self.tile_m, cir.block_idx("x") * self.tile_n

    def k_tile_range(self, k_tiles) -> tuple:
        """IR: ``(first, count)``, the k-tiles this CTA reduces out of the problem's ``k_tiles``
        (unsigned i32): all of them here. A split-K scheduler overrides it (e.g. from
        ``blockIdx.z``, with :meth:`grid` launching the splits; CUTLASS's split-K / stream-K
        schedulers own the k ranges the same way)."""
        return 0, k_tiles


RASTERS = ("M", "N")
SWIZZLES = (1, 2, 4, 8)


class PersistentTileScheduler(PersistentScheduler, TileScheduler):
    """See module docstring. ``tile_m``/``tile_n`` in elements; ``sm_count`` SMs (None:
    :data:`DEFAULT_SM_COUNT`); ``cluster`` ``(cluster_m, cluster_n)``; ``ctas_per_sm``
    co-resident CTAs per SM (1 for the large-smem GEMMs). Raises ``ValueError`` for a raster
    or swizzle outside :data:`RASTERS` / :data:`SWIZZLES` or a non-positive SM count."""

    def __init__(self, tile_m: int, tile_n: int, raster: str = "M", swizzle: int = 1, sm_count=None,
                 cluster=(1, 1), persistent: bool = True, ctas_per_sm: int = 1):
        if raster not in RASTERS:
            raise ValueError(f"raster must be one of {RASTERS}, got {raster!r}")
        if swizzle not in SWIZZLES:
            raise ValueError(f"swizzle must be one of {SWIZZLES}, got {swizzle!r}")
        PersistentScheduler.__init__(self, None, sm_count, 1, persistent, ctas_per_sm)
        self.tile_m, self.tile_n = tile_m, tile_n
        self.raster, self.swizzle = raster, swizzle
        self.cluster_m, self.cluster_n = tuple(cluster)

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster, ``cluster_m * cluster_n``."""
        return self.cluster_m * self.cluster_n

    def config(self) -> dict:
        """What the generated code depends on (``sm_count`` only changes the grid)."""
        return {"raster": self.raster, "swizzle": self.swizzle, "cluster": [self.cluster_m, self.cluster_n],
                "persistent": self.persistent}

    # -- host ----------------------------------------------------------------------
    def cluster_tiles(self, m: int, n: int) -> tuple:
        """``(cluster tiles along M, along N)`` for an ``m x n`` output."""
        return (ceil_div(ceil_div(m, self.tile_m), self.cluster_m), ceil_div(ceil_div(n, self.tile_n), self.cluster_n))

    def clusters(self, m: int, n: int, l: int = 1) -> int:
        """Clusters launched for ``l`` batches of an ``m x n`` output."""
        cm, cn = self.cluster_tiles(m, n)
        return self.clusters_for(cm * cn * (l if self.batched else 1))

    def host_count(self, problem) -> int:
        """Work units (cluster tiles, of every batch when :attr:`batched`) of ``problem``."""
        cm, cn = self.cluster_tiles(problem.m, problem.n)
        return cm * cn * (problem.l if self.batched else 1)

    def unit_coords(self, unit: int, m: int, n: int) -> tuple:
        """Cluster-tile ``(m, n)`` of linear work unit ``unit`` (host reference of the
        rasterization the kernel emits)."""
        ctm, ctn = self.cluster_tiles(m, n)
        minor_n, major_n = (ctn, ctm) if self.raster == "M" else (ctm, ctn)
        s = self.swizzle
        strip, r = divmod(unit, major_n * s)
        w = min(s, minor_n - strip * s)
        minor, major = strip * s + r % w, r // w
        return (major, minor) if self.raster == "M" else (minor, major)

    def cta_tiles(self, cta: int, m: int, n: int) -> list:
        """Origins ``(m0, n0)`` of the tiles CTA ``cta`` (linear block index) runs, in order
        (host reference of :meth:`work_count` / :meth:`tile_origin`)."""
        cs = self.cluster_size
        cid, rank, ncl = cta // cs, cta % cs, self.clusters(m, n)
        ctm, ctn = self.cluster_tiles(m, n)
        units = range(cid, ctm * ctn, ncl) if self.persistent else [cid]
        rm, rn = rank % self.cluster_m, rank // self.cluster_m
        out = []
        for u in units:
            cm, cn = self.unit_coords(u, m, n)
            out.append(((cm * self.cluster_m + rm) * self.tile_m, (cn * self.cluster_n + rn) * self.tile_n))
        return out

    # -- IR ------------------------------------------------------------------------
    def bind(self, problem, k_tile: int) -> None:
        """Emit this CTA's coordinates for ``problem`` (IR i32 ``m``, ``n``); call once per kernel."""
        TileScheduler.bind(self, problem, k_tile)
        m, n = problem.m, problem.n
        self.bind_cluster()
        tiles_m = (m.unsigned() + (self.tile_m - 1)) // self.tile_m
        tiles_n = (n.unsigned() + (self.tile_n - 1)) // self.tile_n
        self.ct_m = (tiles_m + (self.cluster_m - 1)) // self.cluster_m if self.cluster_m > 1 else tiles_m
        self.ct_n = (tiles_n + (self.cluster_n - 1)) // self.cluster_n if self.cluster_n > 1 else tiles_n
        self.per_batch = self.ct_m * self.ct_n
        # the linear work index walks the tiles of batch 0, then batch 1, ... (CUTLASS's L mode)
        self.total = self.per_batch * problem.l.unsigned() if self.batched else self.per_batch

    def _raster(self, unit, ct_m=None, ct_n=None):
        """Cluster-tile ``(m, n)`` coordinates of linear work unit ``unit`` in a grid of
        ``ct_m x ct_n`` cluster tiles (default: the problem's)."""
        ct_m = self.ct_m if ct_m is None else ct_m
        ct_n = self.ct_n if ct_n is None else ct_n
        minor_n, major_n = (ct_n, ct_m) if self.raster == "M" else (ct_m, ct_n)
        if self.swizzle == 1:
            minor, major = unit // major_n, unit % major_n
        else:
            s = self.swizzle
            strip = unit // (major_n * s)
            r = unit % (major_n * s)
            left = minor_n - strip * s
            w = cir.select(left < s, left, cir.u32(s))
            minor, major = strip * s + r % w, r // w
        return (major, minor) if self.raster == "M" else (minor, major)

    def batch_index(self, i=0):
        """IR: the batch of this CTA's ``i``-th tile (0 unless :attr:`batched`)."""
        return self.unit_batch(self._unit(i))

    def tile_origin(self, i=0):
        """Element coordinates ``(m0, n0)`` (IR i32) of this CTA's ``i``-th tile (IR i32 or 0)."""
        return self.unit_origin(self._unit(i))

    def unit_batch(self, unit):
        """IR: the batch of linear work unit ``unit`` (cluster tiles of batch 0 first; 0 unless
        :attr:`batched`)."""
        return unit // self.per_batch if self.batched else 0

    def unit_origin(self, unit, ct_m=None, ct_n=None):
        """IR: element coordinates ``(m0, n0)`` of this CTA's tile in linear work unit
        ``unit`` (a cluster tile, rasterized over ``ct_m x ct_n`` cluster tiles, default the
        problem's)."""
        if self.batched:
            unit = unit % self.per_batch
        cm, cn = self._raster(unit, ct_m, ct_n)
        rm, rn = (self.rank % self.cluster_m, self.rank // self.cluster_m) if self.cluster_size > 1 else (0, 0)
        tm = cm * self.cluster_m + rm if self.cluster_m > 1 else cm
        tn = cn * self.cluster_n + rn if self.cluster_n > 1 else cn
        return tm * self.tile_m, tn * self.tile_n


__all__ = ["TileScheduler", "PersistentTileScheduler", "WorkTile", "DEFAULT_SM_COUNT", "RASTERS", "SWIZZLES",
           "ceil_div"]
