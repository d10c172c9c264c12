"""Device layer: the front ends (``Gemm``, ``GroupedGemm``, SAXPY) and their policy -- configs,
validation, choice of config, tuning, export. Backends, device arrays and the launch live in
the layer below, :mod:`cutedsl.runtime`; ``Backend``, ``get_backend`` ... are re-exported here.

Importing it needs numpy (+ cuda-python for the CUDA backend), never MLIR; compiled kernels
come from the cache or are compiled on first use."""
from ..runtime.backend import Backend, DeviceBuffer, check_tensor_map, SMEM_LIMIT
from ..runtime.selection import get_backend, resolve
from .gemm import Gemm, GemmConfig, gemm

__all__ = ["Backend", "DeviceBuffer", "check_tensor_map", "SMEM_LIMIT", "get_backend", "resolve",
           "Gemm", "GemmConfig", "gemm"]
