"""Grouped GEMM: G problems of different M, N, K in one persistent launch (CUTLASS
``GroupProblemShape`` with ``PersistentTileSchedulerSm90Group``; the work Triton's persistent
grouped kernels and mixture-of-experts layers do). Two collectives:

* :class:`GroupedTileScheduler` -- the work units of all groups. The host lays the groups out
  in a table of i32 rows ``(m, n, k, first unit)`` (:data:`GROUP_FIELDS` per group,
  :func:`group_table`): group ``g`` owns the linear work units ``first[g] .. first[g + 1] - 1``,
  one per cluster tile of its ``m x n`` output, rasterized inside the group as the persistent
  scheduler rasterizes one problem. Cluster ``c`` of ``P`` runs units ``c, c + P, ...`` of all
  groups; a unit finds its group by binary search over the table (``scf.while``, log2 G
  loads) and carries it as the work tile's ``l`` (the group index, as CUTLASS puts the group
  in L), with the group's own k-tile count. Empty groups own no units (the host leaves M = 0,
  N = 0 and K = 0 groups out of the launch).
* :class:`GroupedProblems` -- the problem visitor a persistent GEMM kernel holds in place of
  one problem's ``m, n, k`` parameters (``groups_cls`` of
  :class:`~cutedsl.kernel.warp_specialized.WarpSpecializedGemmKernel`): it owns the scheduler
  above and declares what a grouped launch adds -- the per-group tensor-map table, D's
  addresses for the ``global`` epilogue, how a work tile's group binds its A/B maps, its
  M, N, K and its D. Architecture-independent: the sm_90a and sm_100a kernels hold the same one.
"""
from __future__ import annotations

import attrs
import numpy as np

from ..compiler.artifact import ParamSpec as Param
from ..ir._lazy import lazy
from ..problem import GemmProblem
from .epilogue import EpilogueContext
from .tile_scheduler import PersistentTileScheduler, WorkTile, ceil_div

cir = lazy("cutedsl.ir")
ir, llvm = lazy("mlir.ir"), lazy("mlir.dialects.llvm")

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
        self.bind_cluster()

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


MAP_ORDER = ("a", "b", "d")    #: tensor maps per group in the ``maps`` table
MAP_BYTES = 128                #: one CUtensorMap (PTX ISA: a tensor map is 128 bytes)


@attrs.frozen
class GroupedProblem:
    """IR: a grouped problem shape bound in a kernel body (what ``bind_problem`` returns for a
    grouped kernel, where a single-problem kernel returns its ``GemmProblem``): ``groups`` (G,
    unsigned i32), ``units`` (work units of all groups); :meth:`group` gives group ``g``'s
    ``GemmProblem`` (IR i32 ``m, n, k``; ``l`` 1), the problem of every work tile whose ``l`` is ``g``."""
    groups: object
    units: object
    scheduler: object

    def group(self, g) -> GemmProblem:
        return GemmProblem(*self.scheduler.group_problem(g))


class _GroupArgs:
    """The kernel arguments as a group's epilogue sees them: ``d``, ``m``, ``n``, ``k`` are the group's."""

    def __init__(self, args, **override):
        self._args, self._override = args, override

    def __getattr__(self, name):
        return self._override[name] if name in self._override else getattr(self._args, name)


class GroupedProblems:
    """The problem visitor of a grouped GEMM (see the module docstring), held by the kernel.

    ``tile_m`` / ``tile_n`` (elements), ``k_tile`` (elements of K per k-tile), ``cluster``
    ``(cluster_m, cluster_n)``, ``d_kind`` the epilogue's kind (``"tma"``: D through the table's
    third map; ``"global"``: D's address per group in ``d_ptrs``); ``raster`` / ``swizzle`` /
    ``sm_count`` / ``persistent`` go to its :class:`GroupedTileScheduler` (:attr:`scheduler`).

    What it declares:

    * :meth:`kernel_params` -- ``maps`` (u8 pointer to G rows of :data:`MAP_ORDER` tensor maps of
      :data:`MAP_BYTES` each, encoded on the host before the launch: TMA reads them through their
      generic addresses; no ``fence.proxy.tensormap`` is needed, as nothing writes them while the
      grid runs -- PTX ISA, memory consistency model: tensormap proxy), ``d_ptrs`` (u64 pointer,
      ``global`` epilogue only), the epilogue's scalar parameters, then the scheduler's
      ``problems``, ``groups``, ``units``;
    * :meth:`map_specs` -- the ``TensorMapSpec`` of each map in a table row (the host encodes them);
    * per work tile (group ``wt.l``): :meth:`unit_operands` (the group's A and B maps),
      :meth:`epilogue_context` (its M, N for clipping, K, and its D), :meth:`bind` (the
      :class:`GroupedProblem`).

    :meth:`reason` says what a kernel must not combine with it."""

    MAP_ORDER, MAP_BYTES = MAP_ORDER, MAP_BYTES
    scheduler_cls = GroupedTileScheduler

    def __init__(self, tile_m: int, tile_n: int, k_tile: int, cluster=(1, 1), d_kind: str = "tma", *,
                 raster: str = "M", swizzle: int = 1, sm_count=None, persistent: bool = True):
        if d_kind not in ("tma", "global"):
            raise ValueError(f"d_kind must be 'tma' or 'global', got {d_kind!r}")
        self.tile_m, self.tile_n, self.k_tile, self.cluster = tile_m, tile_n, k_tile, tuple(cluster)
        self.d_kind = d_kind
        self.scheduler = self.scheduler_cls(tile_m, tile_n, raster, swizzle, sm_count, self.cluster,
                                            persistent=persistent)
        self._maps = self._d_ptrs = self._problem = None

    @staticmethod
    def reason(*, decomposition="data-parallel", splits=None, batched=False, epilogue_params=(),
               tile_scheduler="static", block_scaled=False) -> str | None:
        """Why a kernel with these features cannot be grouped, or None: the units are whole
        tiles of one group (no stream-K / split-K, no batch: a batch is groups), per-group
        arrays are not in the tables (scalar epilogue arguments only), the units are fixed
        (the static persistent scheduler, not cluster launch control) and a row of the table
        holds A, B and D maps only (no block-scale factors)."""
        if decomposition != "data-parallel" or splits is not None:
            return f"a grouped GEMM runs whole tiles: decomposition must be 'data-parallel', got {decomposition!r}"
        if batched:
            return "a grouped GEMM is not batched: give each batch as its own group"
        arrays = [p.name for p in epilogue_params if p.kind in ("ptr", "tensormap")]
        if arrays:
            return (f"a grouped GEMM takes scalar epilogue arguments only (alpha, scales, activations), "
                    f"not the arrays {arrays}")
        if tile_scheduler != "static":
            return (f"a grouped GEMM walks its groups' units with the static persistent scheduler: "
                    f"tile_scheduler must be 'static', got {tile_scheduler!r}")
        if block_scaled:
            return ("a grouped GEMM takes no block-scaled (MX) inputs yet (a row of its table holds A, B and "
                    "D maps, not the scale factors'): use an f16, bf16, fp8 or tf32 dtype")
        return None

    # -- host ----------------------------------------------------------------------
    def kernel_params(self, epilogue_params=()) -> list:
        """The kernel's parameters (``ParamSpec``), the epilogue's ``epilogue_params`` in place."""
        d = [Param("d_ptrs", "ptr", dtype="u64")] if self.d_kind == "global" else []
        return [Param("maps", "ptr", dtype="u8")] + d + list(epilogue_params) + self.scheduler.kernel_params()

    def host_params(self) -> list:
        """Names of the parameters the grouped front end fills (not the caller): the tables."""
        return ["maps", "d_ptrs"]

    def units_grid(self, units: int) -> tuple:
        """CTAs ``(x, 1, 1)`` for ``units`` work units of all groups (persistent: at most what
        the SMs hold)."""
        s = self.scheduler
        return (s.clusters_for(units) * s.cluster_size, 1, 1)

    @staticmethod
    def map_specs(tensor_maps) -> dict:
        """The ``TensorMapSpec`` of each map of a table row, by name (:data:`MAP_ORDER` order),
        out of the kernel's ``tensor_maps`` (mainloop's and epilogue's)."""
        specs = {t.param: t for t in tensor_maps}
        return {name: specs[name] for name in MAP_ORDER if name in specs}

    # -- IR ------------------------------------------------------------------------
    def map_address(self, maps, g, name: str):
        """IR: the generic address (``!llvm.ptr``) of group ``g``'s tensor map ``name`` in the
        table at ``maps`` (a TMA instruction's ``tensorMap`` operand may be the generic address of
        a map in global memory: PTX ISA, ``cp.async.bulk.tensor``)."""
        slot = MAP_ORDER.index(name)
        ptr = cir.GlobalPtr(maps, "i8").address(cir.i64(cir.u32(g)) * (len(MAP_ORDER) * MAP_BYTES) + slot * MAP_BYTES)
        return llvm.addrspacecast(ir.Type.parse("!llvm.ptr"), ptr)

    def operand_atoms(self, mainloop, args) -> tuple:
        """IR: group 0's A and B ``TmaCopy`` atoms (the maps the kernel prefetches), made by
        ``mainloop.atoms_over`` (the architecture's kind of TMA issue)."""
        return mainloop.atoms_over(self.map_address(args.maps, 0, "a"), self.map_address(args.maps, 0, "b"))

    def bind(self, args) -> GroupedProblem:
        """IR, once per kernel: bind the scheduler (this CTA's cluster coordinates, the table)
        and the maps table; returns the :class:`GroupedProblem`."""
        self.scheduler.bind(None, self.k_tile)
        self.scheduler.bind_params(args)
        self._maps = args.maps
        self._d_ptrs = args.d_ptrs if self.d_kind == "global" else None
        self._problem = GroupedProblem(self.scheduler.groups, self.scheduler.total, self.scheduler)
        return self._problem

    def unit_operands(self, mainloop, ops, wt):
        """``ops`` with group ``wt.l``'s A and B maps (what the producer loads work tile ``wt`` from)."""
        a, b = mainloop.atoms_over(self.map_address(self._maps, wt.l, "a"), self.map_address(self._maps, wt.l, "b"))
        return attrs.evolve(ops, tma_a=a, tma_b=b)

    def epilogue_context(self, args, smem, wt, row_base, wg) -> EpilogueContext:
        """The :class:`EpilogueContext` of work tile ``wt``: its group's M, N (clipping), K and D
        (its map, or its address from ``d_ptrs``), seen by the epilogue as ``ctx.args.d``/``m``/``n``/``k``."""
        problem = self._problem.group(wt.l)
        m, n, k = problem.m, problem.n, problem.k
        if self.d_kind == "global":
            addr = cir.GlobalPtr(self._d_ptrs, "u64").load(wt.l)
            d = llvm.inttoptr(ir.Type.parse("!llvm.ptr<1>"), addr)
        else:
            d = self.map_address(self._maps, wt.l, "d")
        return EpilogueContext(wt.m0, wt.n0, m, n, _GroupArgs(args, d=d, m=m, n=n, k=k), smem, row_base,
                               warpgroup=wg, problem=problem)


__all__ = ["GroupedTileScheduler", "GroupedProblems", "GroupedProblem", "group_table", "GROUP_FIELDS",
           "MAX_GROUPS", "MAP_ORDER", "MAP_BYTES"]
