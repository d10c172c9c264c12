"""Kernels: CTA programs that compose collectives and atoms (SAXPY, single-tile and
multistage GEMM)."""
from .base import Kernel
from .saxpy import HelloKernel, SaxpyKernel, TmaSaxpyKernel
from .gemm import GemmKernel, MultistageGemmKernel, SingleTileGemmKernel

__all__ = ["Kernel", "HelloKernel", "SaxpyKernel", "TmaSaxpyKernel", "GemmKernel", "MultistageGemmKernel",
           "SingleTileGemmKernel"]
