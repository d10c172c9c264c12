"""Device layer: configs, validation, tensor-map encoding, backends, launch and timing.

Importing it needs numpy (+ cuda-python for the CUDA backend), never MLIR; compiled kernels
come from the cache or are compiled on first use."""
from .backend import Backend, DeviceBuffer, check_tensor_map, SMEM_LIMIT
from .selection import get_backend, resolve
from .gemm import Gemm, GemmConfig, gemm

__all__ = ["Backend", "DeviceBuffer", "check_tensor_map", "SMEM_LIMIT", "get_backend", "resolve",
           "Gemm", "GemmConfig", "gemm"]
