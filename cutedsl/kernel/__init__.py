"""Kernels: CTA programs that compose collectives and atoms (SAXPY, single-tile, multistage,
warp-specialized, cooperative and ping-pong GEMM)."""
from .base import Kernel
from .saxpy import HelloKernel, SaxpyKernel, TmaSaxpyKernel
from .gemm import GemmKernel, MultistageGemmKernel, SingleTileGemmKernel
from .warp_specialized import CooperativeGemmKernel, PingpongGemmKernel, WarpSpecializedGemmKernel

__all__ = ["Kernel", "HelloKernel", "SaxpyKernel", "TmaSaxpyKernel", "GemmKernel", "MultistageGemmKernel",
           "SingleTileGemmKernel", "WarpSpecializedGemmKernel", "CooperativeGemmKernel", "PingpongGemmKernel"]
