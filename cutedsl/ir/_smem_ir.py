"""IR side of the shared-memory planner (imported by ``SmemPlan.bind``)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import gpu, memref, nvgpu

from .values import Scalar, index, to_type

_WG = "#gpu.address_space<workgroup>"


def memref_type(shape, dtype: str) -> ir.Type:
    from ..dtypes import dtype as _dt
    return ir.Type.parse(f"memref<{'x'.join(map(str, shape))}x{_dt(dtype).mlir}, {_WG}>")


class BoundBuffer:
    """A declared buffer inside a kernel: typed views and addresses per stage."""

    def __init__(self, bound, buf):
        self._bound, self.buf = bound, buf

    def byte_offset(self, stage=0):
        """Offset of ``stage`` from the dynamic base (index value); ``stage`` int or IR integer."""
        b = self.buf
        if isinstance(stage, int):
            if not 0 <= stage < b.stages:
                raise IndexError(f"buffer {b.name!r} has {b.stages} stages, asked for {stage}")
            return self._bound.base + index(b.offset + stage * b.stage_bytes)
        return self._bound.base + index(b.offset) + index(stage) * index(b.stage_bytes)

    def view(self, stage=0, shape=None, dtype=None, byte_offset: int = 0):
        """A ``memref`` view of one stage (static shape ``shape``/``dtype``, default the tile's).

        ``byte_offset`` (Python int or IR integer, bytes) selects a sub-tile inside the stage.
        """
        b = self.buf
        shape = tuple(shape or b.shape)
        ty = memref_type(shape, dtype or b.dtype)
        off = self.byte_offset(stage)
        if not isinstance(byte_offset, int) or byte_offset:
            off = off + index(byte_offset)
        return memref.view(ty, self._bound.raw, off, [])

    def address(self, stage=0, byte_offset: int = 0) -> Scalar:
        """The shared-window byte address (i64) of ``stage`` (+ ``byte_offset``)."""
        a = to_type(self._bound.base_address + self.byte_offset(stage), "i64")
        return a + byte_offset if byte_offset else a


class BoundSmem:
    def __init__(self, plan):
        self.plan = plan
        self.raw = gpu.dynamic_shared_memory(ir.Type.parse(f"memref<?xi8, {_WG}>"))
        addr = Scalar(memref.extract_aligned_pointer_as_index(self.raw))
        self.base_address = addr
        a = plan._max_align
        # byte shift that rounds the dynamic base up to the largest declared alignment
        self.base = (index(0) - addr) & (a - 1) if a > 16 else index(0)
        self._groups = {}
        for name, g in plan._barriers.items():
            t = ir.Type.parse(f"!nvgpu.mbarrier.group<memorySpace = {_WG}, num_barriers = {g.count}>")
            self._groups[name] = nvgpu.mbarrier_create(t)

    def __getitem__(self, name) -> BoundBuffer:
        return BoundBuffer(self, self.plan._buffers[name])

    def barriers(self, name):
        """The ``!nvgpu.mbarrier.group`` value of barrier group ``name``."""
        return self._groups[name]


def bind(plan) -> BoundSmem:
    return BoundSmem(plan)
