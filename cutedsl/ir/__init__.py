"""IR foundation: typed values with Python operators, structured control flow, kernel
definition and the shared-memory planner.

Names are resolved lazily: ``cutedsl.ir.smem`` (the planner's arithmetic) needs no MLIR;
``KernelBuilder``, ``Scalar``, ``Loop`` ... import MLIR on first use.
"""
import importlib

_EXPORTS = {
    "values": ["Scalar", "const", "index", "i32", "u32", "i64", "f32", "select", "to_type", "mlir_type",
               "thread_idx", "block_idx", "block_dim", "grid_dim", "lane_id", "warp_idx", "shfl_xor", "opaque"],
    "control": ["Loop", "If", "While"],
    "kernel": ["KernelBuilder"],
    "smem": ["SmemPlan", "SmemBuffer", "BarrierGroup"],
    "smem_tile": ["SmemTile"],
    "gmem": ["GlobalPtr"],
}
_WHERE = {n: m for m, names in _EXPORTS.items() for n in names}
__all__ = sorted([*_WHERE, "Param"])


def __getattr__(name):
    if name == "Param":         # a plain record (no MLIR): kernels list their parameters on GPU-only boxes too
        from ..compiler.artifact import ParamSpec
        return ParamSpec
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'cutedsl.ir' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
