"""Grouped GEMM kernels: the persistent warp-specialized schedules over G problems of
different M, N, K (CUTLASS's sm90 grouped GEMM; see :mod:`cutedsl.collective.grouped`).

Same producer, consumers, pipeline, mainloop and epilogue as :mod:`.warp_specialized`; what
changes is where a work tile's operands come from. The host encodes three tensor maps per
group (A, B, D; :data:`MAP_ORDER`) into a global table (``maps``, 128 bytes each, read by TMA
through their generic addresses -- written before the launch, so no tensormap fence is needed,
PTX ISA tensor-map access) and the problem table (``problems``); per work tile the producer
swaps in the group's A/B maps (:meth:`GroupedGemmMixin.unit_operands`) and the epilogue
stores through the group's D map with the group's M and N (for the ``global`` epilogue: D's
address from ``d_ptrs``). Parameters: ``maps``, [``d_ptrs``], scalar epilogue arguments,
``problems``, ``groups``, ``units``.
"""
from __future__ import annotations

import attrs

from ..collective.epilogue import EpilogueContext
from ..collective.grouped import GroupedTileScheduler
from ..compiler.artifact import ParamSpec as Param
from ..ir._lazy import lazy
from ..problem import GemmProblem
from .warp_specialized import CooperativeGemmKernel, PingpongGemmKernel

cir = lazy("cutedsl.ir")
ir, llvm = lazy("mlir.ir"), lazy("mlir.dialects.llvm")

MAP_ORDER = ("a", "b", "d")    #: tensor maps per group in the ``maps`` table
MAP_BYTES = 128                #: one CUtensorMap


class _GroupArgs:
    """The kernel arguments as a group's epilogue sees them: ``d`` is the group's."""

    def __init__(self, args, **override):
        self._args, self._override = args, override

    def __getattr__(self, name):
        return self._override[name] if name in self._override else getattr(self._args, name)


class GroupedGemmMixin:
    """Turns a persistent warp-specialized kernel into its grouped form (see the module
    docstring). Refuses (``ValueError``) a batch, a decomposition other than data-parallel and
    fused nodes that take arrays (per-group arrays are not supported; scalars are)."""

    def make_scheduler(self):
        if self.decomposition != "data-parallel" or self.splits is not None:
            raise ValueError(f"a grouped GEMM runs whole tiles: decomposition must be 'data-parallel', "
                             f"got {self.decomposition!r}")
        if self.batched:
            raise ValueError("a grouped GEMM is not batched: give each batch as its own group")
        arrays = [p.name for p in self.epilogue.kernel_params() if p.kind in ("ptr", "tensormap")]
        if arrays:
            raise ValueError(f"a grouped GEMM takes scalar epilogue arguments only (alpha, scales, "
                             f"activations), not the arrays {arrays}")
        raster, swizzle, sm_count = self._schedule
        return GroupedTileScheduler(self.tile_m, self.tile_n, raster, swizzle, sm_count, self.cluster,
                                    persistent=self.persistent)

    @property
    def k_varies(self) -> bool:
        return True

    def params(self):
        d = [Param("d_ptrs", "ptr", dtype="u64")] if self.epilogue.kind == "global" else []
        return [Param("maps", "ptr", dtype="u8")] + d + self.epilogue.kernel_params() + self.scheduler.kernel_params()

    def host_params(self) -> list:
        """The scheduler's group table and the per-group tables, filled by ``GroupedGemm``."""
        return super().host_params() + ["maps", "d_ptrs"]

    def d_by_tensor_map(self) -> bool:
        """True when each group's D is a tensor map in the table (else an address in ``d_ptrs``)."""
        return self.epilogue.kind == "tma"

    def units_grid(self, units: int) -> tuple:
        """CTAs ``(x, 1, 1)`` for ``units`` work units of all groups (persistent: at most what
        the SMs hold)."""
        s = self.scheduler
        return (s.clusters_for(units) * s.cluster_size, 1, 1)

    def map_specs(self) -> dict:
        """The ``TensorMapSpec`` of each map in a group's row of the table, by name."""
        specs = {t.param: t for t in self.mainloop.tensor_maps() + self.epilogue.tensor_maps()}
        return {name: specs[name] for name in MAP_ORDER if name in specs}

    def _map(self, maps, g, name):
        """IR: the generic address (``!llvm.ptr``) of group ``g``'s tensor map ``name``."""
        slot = MAP_ORDER.index(name)
        ptr = cir.GlobalPtr(maps, "i8").address(cir.i64(cir.u32(g)) * (len(MAP_ORDER) * MAP_BYTES) + slot * MAP_BYTES)
        return llvm.addrspacecast(ir.Type.parse("!llvm.ptr"), ptr)

    def operand_atoms(self, args):
        """Group 0's A and B maps (what the kernel prefetches)."""
        from ..atom import TmaCopy
        specs = self.map_specs()
        return TmaCopy(specs["a"], self._map(args.maps, 0, "a")), TmaCopy(specs["b"], self._map(args.maps, 0, "b"))

    def bind_problem(self, args):
        """IR: bind the group tables (no problem-wide M, N, K); returns None."""
        self.scheduler.bind(None, self.traits.k_tile)
        self.scheduler.bind_params(args)
        self._maps = args.maps
        return None

    def unit_operands(self, ops, wt):
        """The group's A and B maps for work tile ``wt`` (group ``wt.l``)."""
        from ..atom import TmaCopy
        specs = self.map_specs()
        return attrs.evolve(ops, tma_a=TmaCopy(specs["a"], self._map(self._maps, wt.l, "a")),
                            tma_b=TmaCopy(specs["b"], self._map(self._maps, wt.l, "b")))

    def epilogue_context(self, args, smem, wt, row_base, wg) -> EpilogueContext:
        """The group's M, N (clipping) and D (its map, or its address for ``global``)."""
        m, n, k = self.scheduler.group_problem(wt.l)
        if self.epilogue.kind == "global":
            addr = cir.GlobalPtr(args.d_ptrs, "u64").load(wt.l)
            d = llvm.inttoptr(ir.Type.parse("!llvm.ptr<1>"), addr)
        else:
            d = self._map(self._maps, wt.l, "d")
        return EpilogueContext(wt.m0, wt.n0, m, n, _GroupArgs(args, d=d, m=m, n=n, k=k), smem, row_base,
                               warpgroup=wg, problem=GemmProblem(m, n, k))


class GroupedCooperativeGemmKernel(GroupedGemmMixin, CooperativeGemmKernel):
    """The cooperative schedule over groups."""
    name = "gemm_grouped_cooperative"


class GroupedPingpongGemmKernel(GroupedGemmMixin, PingpongGemmKernel):
    """The ping-pong schedule over groups."""
    name = "gemm_grouped_pingpong"


#: the grouped kernel of each persistent schedule
GROUPED = {"cooperative": GroupedCooperativeGemmKernel, "pingpong": GroupedPingpongGemmKernel}

__all__ = ["GroupedCooperativeGemmKernel", "GroupedPingpongGemmKernel", "GroupedGemmMixin", "GROUPED",
           "MAP_ORDER", "MAP_BYTES"]
