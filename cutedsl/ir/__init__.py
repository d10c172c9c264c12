"""IR foundation: typed values with Python operators, structured control flow, kernel
definition and the shared-memory planner. Importing this package imports MLIR."""
from .values import (Scalar, const, index, i32, u32, i64, f32, select, to_type, mlir_type,
                     thread_idx, block_idx, block_dim, grid_dim, lane_id, warp_idx)
from .control import Loop, If
from .kernel import KernelBuilder, Param
from .smem import SmemPlan, SmemBuffer, BarrierGroup

__all__ = ["Scalar", "const", "index", "i32", "u32", "i64", "f32", "select", "to_type", "mlir_type",
           "thread_idx", "block_idx", "block_dim", "grid_dim", "lane_id", "warp_idx",
           "Loop", "If", "KernelBuilder", "Param", "SmemPlan", "SmemBuffer", "BarrierGroup"]
