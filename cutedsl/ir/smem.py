"""Shared-memory planner: declare buffers and barriers, get typed views; no byte offsets by hand.

::

    plan = SmemPlan()
    a = plan.buffer("a", (128, 64), "f16", stages=4, swizzle=128, major="K")   # 4 x 16 KiB
    full = plan.barriers("full", 4)
    plan.total_bytes                                                # checked against 232,448 B
    ...
    with kb.build() as args:
        smem = plan.bind()
        t = smem["a"].tile(stage)         # SmemTile: layout + place, what TMA and WGMMA take
        tile = smem["a"].view(stage)      # memref<128x64xf16, workgroup>, stage: int or IR value
        addr = smem["a"].address(stage)   # i64 shared-window byte address
        grp = smem.barriers("full")       # !nvgpu.mbarrier.group value (wrapped by atom.MBarriers)

Buffers live in dynamic shared memory. Because PTX only guarantees 16-byte alignment of the
dynamic window (static shared variables such as mbarriers come first), the plan adds
``max_align - 16`` bytes of slack and ``bind()`` rounds the base up at run time, so buffers
declared with ``align=1024`` (128-byte-swizzled TMA/WGMMA tiles) really are 1024-B aligned.
mbarriers are ``nvgpu`` barrier groups in static shared memory (8 bytes each).

Layouts travel with buffers: a buffer declares its element type, its ``swizzle`` (bytes: the
TMA/WGMMA swizzle span, 0 for none) and, for MMA operands, its ``major`` (``"K"`` or ``"MN"``).
The atoms that touch a tile of it (``TmaCopy``, ``WarpgroupMMA``) check these against their own
tensor map / descriptor and raise ``LayoutError`` naming both sides at build time.
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT
from ..dtypes import dtype as _dtype
from ..errors import SharedMemoryError

SWIZZLES = (0, 32, 64, 128)   #: swizzle spans in bytes (TMA ``CU_TENSOR_MAP_SWIZZLE_*``)

SMEM_LIMIT = DEFAULT.smem_per_cta   #: sm_90a opt-in dynamic shared memory per CTA (bytes), 227 KiB
_DYN_BASE_ALIGN = 16     #: alignment PTX gives ``__dynamic_shmem__0``


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@attrs.frozen
class SmemBuffer:
    """A declared buffer: ``stages`` copies of a row-major ``shape`` tile of ``dtype``; offsets
    in bytes. Its layout: ``swizzle`` (0/32/64/128 B) and ``major`` (``"K"``, ``"MN"`` or None
    for a buffer that is no MMA operand)."""
    name: str
    shape: tuple
    dtype: str
    stages: int
    align: int
    offset: int          #: from the aligned base
    stage_bytes: int     #: distance between stages (tile bytes rounded up to ``align``)
    swizzle: int = 0     #: swizzle span in bytes (0: none)
    major: str = None    #: ``"K"`` / ``"MN"`` for WGMMA operands, else None

    def describe(self) -> str:
        """``buffer 'a' (f16 [128, 64], swizzle 128 B, K-major)``, for error messages."""
        major = f", {self.major}-major" if self.major else ""
        return (f"buffer {self.name!r} ({self.dtype} [{', '.join(map(str, self.shape))}], "
                f"swizzle {self.swizzle} B{major})")

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

    def buffer(self, name: str, shape, dtype: str, stages: int = 1, align: int | None = None, *,
               swizzle: int = 0, major: str | None = None) -> SmemBuffer:
        """Declare ``stages`` tiles of ``shape`` x ``dtype``; ``align`` in bytes (power of two,
        >= 16; default 128, and at least the 8-row swizzle atom ``8 * swizzle``: 1024 for 128 B).

        ``swizzle``: 0, 32, 64 or 128 — the swizzle span in bytes of whatever writes the tile
        (a TMA tensor map) and reads it (WGMMA descriptors); a swizzled tile's rows
        (``shape[-1] * element size``) must not exceed the span. ``major``: ``"K"`` or ``"MN"``
        for a WGMMA operand (which dimension is contiguous), None otherwise.

        Raises ``ValueError`` for a bad declaration, ``SharedMemoryError`` when the plan would
        exceed the limit.
        """
        if swizzle not in SWIZZLES:
            raise ValueError(f"buffer {name!r}: swizzle {swizzle} must be one of {SWIZZLES} (bytes)")
        if major not in (None, "K", "MN"):
            raise ValueError(f"buffer {name!r}: major must be 'K', 'MN' or None, got {major!r}")
        if align is None:
            align = max(128, 8 * swizzle)
        elif align < 8 * swizzle:
            raise ValueError(f"buffer {name!r}: a {swizzle}-byte swizzle repeats every {8 * swizzle} B; "
                             f"align {align} must be at least that")
        if swizzle and shape and int(shape[-1]) * _dtype(dtype).nbytes > swizzle:
            raise ValueError(f"buffer {name!r}: rows of {int(shape[-1]) * _dtype(dtype).nbytes} B are wider "
                             f"than the {swizzle}-byte swizzle span")
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
        tile = SmemBuffer(name, shape, _dtype(dtype).name, stages, align, off, 0, swizzle, major)
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

    def bind(self, groups=None) -> "BoundSmem":
        """Emit the dynamic shared memory base (aligned at run time) and the barrier groups
        (``groups``: those :meth:`barrier_groups` emitted before, shared).

        Must be called inside a kernel body (``KernelBuilder.build``).
        """
        from .smem_tile import bind
        return bind(self, groups)

    def barrier_groups(self) -> dict:
        """Emit only the barrier groups (static shared symbols), for :meth:`bind` calls in
        several branches -- e.g. one per warpgroup after its ``setmaxnreg``, so that no dynamic
        base address stays live (or spilled) across the ``setmaxnreg``."""
        from .smem_tile import barrier_groups
        return barrier_groups(self)
