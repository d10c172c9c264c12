"""Kernels: CTA programs that compose collectives and atoms (SAXPY, single-tile, multistage,
warp-specialized, cooperative and ping-pong GEMM) on one warp-specialized skeleton (roles,
register budgets, plan then build: :mod:`.skeleton`)."""
from .base import Kernel
from .skeleton import Role, SkeletonKernel
from .scale_copy import ScaleCopyKernel
from .saxpy import HelloKernel, SaxpyKernel, TmaSaxpyKernel
from .gemm import GemmKernel, MultistageGemmKernel, SingleTileGemmKernel
from .warp_specialized import CooperativeGemmKernel, PingpongGemmKernel, WarpSpecializedGemmKernel

__all__ = ["Kernel", "Role", "SkeletonKernel", "ScaleCopyKernel", "HelloKernel", "SaxpyKernel", "TmaSaxpyKernel",
           "GemmKernel", "MultistageGemmKernel", "SingleTileGemmKernel", "WarpSpecializedGemmKernel", "CooperativeGemmKernel", "PingpongGemmKernel"]
