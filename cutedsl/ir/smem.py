"""Shared-memory planner: declare buffers and barriers, get typed views; no byte offsets by hand.

::

    plan = SmemPlan()
    a = plan.buffer("a", (128, 64), "f16", stages=4, align=1024)   # 4 x 16 KiB
    full = plan.barriers("full", 4)
    plan.total_bytes                                                # checked against 232,448 B
    ...
    with kb.build() as args:
        smem = plan.bind()
        tile = smem["a"].view(stage)      # memref<128x64xf16, workgroup>, stage: int or IR value
        addr = smem["a"].address(stage)   # i64 shared-window byte address (for WGMMA descriptors)
        grp = smem.barriers("full")       # !nvgpu.mbarrier.group value (wrapped by atom.MBarriers)

Buffers live in dynamic shared memory. Because PTX only guarantees 16-byte alignment of the
dynamic window (static shared variables such as mbarriers come first), the plan adds
``max_align - 16`` bytes of slack and ``bind()`` rounds the base up at run time, so buffers
declared with ``align=1024`` (128-byte-swizzled TMA/WGMMA tiles) really are 1024-B aligned.
mbarriers are ``nvgpu`` barrier groups in static shared memory (8 bytes each).
"""
from __future__ import annotations

import attrs

from ..dtypes import dtype as _dtype
from ..errors import SharedMemoryError

SMEM_LIMIT = 232448      #: sm_90 opt-in dynamic shared memory per CTA (bytes), 227 KiB
_DYN_BASE_ALIGN = 16     #: alignment PTX gives ``__dynamic_shmem__0``


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@attrs.frozen
class SmemBuffer:
    """A declared buffer: ``stages`` copies of a ``shape`` tile of ``dtype``; offsets in bytes."""
    name: str
    shape: tuple
    dtype: str
    stages: int
    align: int
    offset: int          #: from the aligned base
    stage_bytes: int     #: distance between stages (tile bytes rounded up to ``align``)

    @property
    def tile_bytes(self) -> int:
        n = _dtype(self.dtype).nbytes
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.stage_bytes * self.stages


@attrs.frozen
class BarrierGroup:
    """A declared group of ``count`` mbarriers (8 bytes each, static shared memory)."""
    name: str
    count: int


class SmemPlan:
    """Collects buffer and barrier declarations; sizes are known before any IR is built."""

    def __init__(self, limit: int = SMEM_LIMIT):
        self.limit = limit
        self._buffers: dict = {}
        self._barriers: dict = {}
        self._end = 0
        self._max_align = _DYN_BASE_ALIGN

    def buffer(self, name: str, shape, dtype: str, stages: int = 1, align: int = 128) -> SmemBuffer:
        """Declare ``stages`` tiles of ``shape`` x ``dtype``; ``align`` in bytes (power of two, >= 16).

        Raises ``SharedMemoryError`` when the plan would exceed the limit.
        """
        if name in self._buffers or name in self._barriers:
            raise ValueError(f"shared-memory name {name!r} declared twice")
        if align < 16 or align & (align - 1):
            raise ValueError(f"buffer {name!r}: align {align} must be a power of two >= 16")
        if stages < 1:
            raise ValueError(f"buffer {name!r}: stages must be >= 1, got {stages}")
        shape = tuple(int(s) for s in shape)
        if any(s < 1 for s in shape):
            raise ValueError(f"buffer {name!r}: shape {shape} has a non-positive dimension")
        off = _round_up(self._end, align)
        tile = SmemBuffer(name, shape, _dtype(dtype).name, stages, align, off, 0)
        buf = attrs.evolve(tile, stage_bytes=_round_up(tile.tile_bytes, align))
        old = (self._end, self._max_align)
        self._end = off + buf.nbytes
        self._max_align = max(self._max_align, align)
        if self.total_bytes > self.limit:
            self._end, self._max_align = old
            raise SharedMemoryError(
                f"shared memory plan needs {self.total_bytes_with(buf)} B after adding buffer {name!r} "
                f"({stages} x {buf.stage_bytes} B), past the {self.limit} B limit of sm_90 (227 KiB)")
        self._buffers[name] = buf
        return buf

    def total_bytes_with(self, buf) -> int:
        end = _round_up(self._end, buf.align) + buf.nbytes
        return end + max(self._max_align, buf.align) - _DYN_BASE_ALIGN + self.static_bytes

    def barriers(self, name: str, count: int) -> BarrierGroup:
        """Declare a group of ``count`` mbarriers."""
        if name in self._buffers or name in self._barriers:
            raise ValueError(f"shared-memory name {name!r} declared twice")
        if count < 1:
            raise ValueError(f"barrier group {name!r}: count must be >= 1")
        g = BarrierGroup(name, count)
        self._barriers[name] = g
        if self.total_bytes > self.limit:
            del self._barriers[name]
            raise SharedMemoryError(f"shared memory plan past the {self.limit} B limit after barriers {name!r}")
        return g

    @property
    def buffers(self) -> dict:
        return dict(self._buffers)

    @property
    def dynamic_bytes(self) -> int:
        """Bytes of dynamic shared memory to request at launch (slack for base alignment included)."""
        if not self._buffers:
            return 0
        return self._end + self._max_align - _DYN_BASE_ALIGN

    @property
    def static_bytes(self) -> int:
        """Bytes of static shared memory (mbarriers; each group is 8-byte aligned)."""
        return sum(8 * g.count for g in self._barriers.values())

    @property
    def total_bytes(self) -> int:
        return self.dynamic_bytes + self.static_bytes

    def bind(self) -> "BoundSmem":
        """Emit the dynamic shared memory base (aligned at run time) and the barrier groups.

        Must be called inside a kernel body (``KernelBuilder.build``).
        """
        from ._smem_ir import bind
        return bind(self)
