"""Grouped GEMM kernels: the persistent warp-specialized schedules over G problems of
different M, N, K (CUTLASS's grouped GEMM; see :mod:`cutedsl.collective.grouped`).

Each is its schedule's kernel holding a :class:`~cutedsl.collective.grouped.GroupedProblems`
problem visitor (``groups_cls``; the kernel's hooks ask it, see
:class:`~cutedsl.kernel.warp_specialized.WarpSpecializedGemmKernel`): same producer, consumers
(or MMA and epilogue warps), pipeline, mainloop and epilogue; what changes is where a work
tile's operands come from. The host encodes three tensor maps per group (A, B, D;
:data:`MAP_ORDER`) into a global table (``maps``, 128 bytes each, read by TMA through their
generic addresses) and the problem table (``problems``); per work tile the producer swaps in
the group's A/B maps and the epilogue stores through the group's D map with the group's M and
N (for the ``global`` epilogue: D's address from ``d_ptrs``). Parameters: ``maps``,
[``d_ptrs``], scalar epilogue arguments, ``problems``, ``groups``, ``units``.

sm_90a: :class:`GroupedCooperativeGemmKernel`, :class:`GroupedPingpongGemmKernel`; sm_100a:
:class:`Sm100GroupedGemmKernel` (the tcgen05 persistent kernel: TMA warp, MMA warp, epilogue
warps, accumulator in tensor memory; ``mma_sm`` 1 or 2). :func:`grouped_kernels` lists them by
architecture and schedule.
"""
from __future__ import annotations

from ..collective.grouped import MAP_BYTES, MAP_ORDER, GroupedProblems
from .warp_specialized import CooperativeGemmKernel, PingpongGemmKernel
from .warp_specialized_sm100 import Sm100WarpSpecializedGemmKernel


class GroupedCooperativeGemmKernel(CooperativeGemmKernel):
    """The cooperative schedule over groups (sm_90a)."""
    name = "gemm_grouped_cooperative"
    groups_cls = GroupedProblems


class GroupedPingpongGemmKernel(PingpongGemmKernel):
    """The ping-pong schedule over groups (sm_90a)."""
    name = "gemm_grouped_pingpong"
    groups_cls = GroupedProblems


class Sm100GroupedGemmKernel(Sm100WarpSpecializedGemmKernel):
    """The sm_100a persistent warp-specialized kernel over groups (static tile scheduler; not
    block-scaled)."""
    name = "gemm_grouped_sm100"
    groups_cls = GroupedProblems


#: the grouped kernel of each persistent schedule, per architecture
GROUPED_BY_ARCH = {"sm_90a": {"cooperative": GroupedCooperativeGemmKernel, "pingpong": GroupedPingpongGemmKernel},
                   "sm_100a": {"warp_specialized": Sm100GroupedGemmKernel}}
#: sm_90a's (the table before sm_100a had one)
GROUPED = GROUPED_BY_ARCH["sm_90a"]


def grouped_kernels(arch: str) -> dict:
    """``{schedule: grouped kernel class}`` of architecture ``arch`` (empty for one without)."""
    return GROUPED_BY_ARCH.get(arch, {})


__all__ = ["GroupedCooperativeGemmKernel", "GroupedPingpongGemmKernel", "Sm100GroupedGemmKernel", "GROUPED",
           "GROUPED_BY_ARCH", "grouped_kernels", "MAP_ORDER", "MAP_BYTES"]
