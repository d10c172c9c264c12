"""Compiler: pass pipeline -> PTX -> cubin (ptxas) -> SASS report (nvdisasm), the compiled
artifact and its on-disk cache. Importing this package does not import MLIR; only
``compile_kernel`` does."""
from .artifact import CompiledKernel, KernelResources, ParamSpec, TensorMapSpec
from .cache import KernelCache, default_cache


def compile_kernel(*args, **kwargs):
    """See :func:`cutedsl.compiler.compile.compile_kernel`."""
    from .compile import compile_kernel as _ck
    return _ck(*args, **kwargs)


__all__ = ["CompiledKernel", "KernelResources", "ParamSpec", "TensorMapSpec", "KernelCache",
           "default_cache", "compile_kernel"]
