"""cutedsl: CUTLASS-style Hopper (sm_90a) tensor-core kernels built from Python layers that emit MLIR.

Layers (lower never imports higher): ``cutedsl.ir`` (foundation: values, control flow,
kernel definition, shared-memory planner) and ``cutedsl.compiler``; ``cutedsl.atom`` (TMA,
mbarrier, WGMMA); ``cutedsl.collective`` (pipelines, mainloops, epilogues);
``cutedsl.kernel`` (SAXPY, GEMMs); ``cutedsl.runtime`` (backends, device arrays, DLPack,
workspaces, the one launch binding); ``cutedsl.device`` (front ends: config, validation, policy).
``cutedsl.sim`` is the PTX emulator backend (below the Device layer, beside the runtime).

``import cutedsl`` is cheap: MLIR is imported only when something is built or compiled.
"""
__version__ = "0.1.0"

_LAZY = {
    "GemmConfig": "cutedsl.device.gemm",
    "Gemm": "cutedsl.device.gemm",
    "GroupedGemm": "cutedsl.device.grouped",
    "Attention": "cutedsl.device.attention",
    "AttentionConfig": "cutedsl.device.attention_config",
    "AttentionBackward": "cutedsl.device.attention_bwd",
    "CompiledKernel": "cutedsl.compiler.artifact",
    "get_backend": "cutedsl.runtime.selection",
    "load": "cutedsl.device.export",
    "tune": "cutedsl.device.tune",
}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'cutedsl' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(mod), name)


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
