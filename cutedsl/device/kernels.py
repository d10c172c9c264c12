"""Which kernels each architecture has: the one place a new architecture's schedules are listed
(``GemmConfig`` asks it; configs, ``Gemm``, the CLI, bench and cache are shared). Imports no MLIR."""
from __future__ import annotations

#: the epilogue kind and schedule a config gets when it names none, per architecture (default
#: "tma" and "multistage")
DEFAULT_EPILOGUE = {"sm_100a": "global"}
DEFAULT_SCHEDULE = {"sm_100a": "warp_specialized"}


def kernel_classes(arch: str) -> dict:
    """{schedule: kernel class} of an architecture: sm_90a's wgmma kernels, sm_100a's tcgen05
    ones (the architecture is a set of atoms and a mainloop/epilogue choice; configs, Gemm, CLI,
    bench and cache are shared)."""
    from ..kernel import gemm, single_tile_sm100 as sm100, warp_specialized as ws
    from ..kernel.warp_specialized_sm100 import Sm100WarpSpecializedGemmKernel
    if arch == "sm_100a":
        return {"single_tile": sm100.Sm100SingleTileGemmKernel, "warp_specialized": Sm100WarpSpecializedGemmKernel}
    return {"multistage": gemm.MultistageGemmKernel, "single_tile": gemm.SingleTileGemmKernel,
            "warp_specialized": ws.WarpSpecializedGemmKernel, "cooperative": ws.CooperativeGemmKernel,
            "pingpong": ws.PingpongGemmKernel}


__all__ = ["kernel_classes", "DEFAULT_EPILOGUE", "DEFAULT_SCHEDULE"]
