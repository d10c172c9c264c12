"""IR side of the shared-memory planner (imported by ``SmemPlan.bind``)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import gpu, memref, nvgpu

from .values import Scalar, index, to_type

_WG = "#gpu.address_space<workgroup>"


def memref_type(shape, dtype: str) -> ir.Type:
    from ..dtypes import dtype as _dt
    return ir.Type.parse(f"memref<{'x'.join(map(str, shape))}x{_dt(dtype).mlir}, {_WG}>")


class SmemTile:
    """A tile of a declared shared-memory buffer, inside a kernel: the buffer's layout
    (``buffer``: an ``SmemBuffer`` with dtype, swizzle, major) plus where the tile lies
    (``offset``: index-typed bytes from the dynamic base; ``static``: the same as a Python int
    while every part of it is known when the kernel is built, else None) and its static
    row-major ``shape``.

    This is what the atoms take (``TmaCopy.load/store``, ``WarpgroupMMA.mma``): they check the
    layout against their tensor map / descriptor and derive addresses from it.
    """

    def __init__(self, bound, buffer, offset, shape, within=0, static=None):
        self._bound, self.buffer, self.offset, self.shape = bound, buffer, offset, tuple(shape)
        self._within = within      # static byte offset inside the stage, None once dynamic
        self.static = static

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def swizzle(self) -> int:
        return self.buffer.swizzle

    @property
    def major(self):
        return self.buffer.major

    @property
    def nbytes(self) -> int:
        from ..dtypes import dtype as _dt
        n = _dt(self.dtype).nbytes
        for s in self.shape:
            n *= s
        return n

    def describe(self) -> str:
        """The buffer's description, with this tile's shape when it is a sub-tile."""
        d = self.buffer.describe()
        return d if self.shape == self.buffer.shape else f"{d} tile [{', '.join(map(str, self.shape))}]"

    def sub(self, byte_offset=0, shape=None) -> "SmemTile":
        """The tile ``byte_offset`` bytes further (Python int or IR integer), of ``shape``
        (default: this tile's). A static offset into a swizzled buffer must be a multiple of
        the swizzle atom (``8 * swizzle`` bytes) so that the pattern stays aligned, and a
        statically placed sub-tile must lie inside the stage (``LayoutError`` otherwise)."""
        from ..errors import LayoutError
        out = SmemTile(self._bound, self.buffer, self.offset, shape or self.shape, None)
        if not isinstance(byte_offset, int):
            out.offset = self.offset + index(byte_offset)
            return out
        out.static = None if self.static is None else self.static + byte_offset
        atom = 8 * self.swizzle
        if atom and byte_offset % atom:
            raise LayoutError(f"sub-tile at byte offset {byte_offset} of {self.describe()}: offsets into a "
                              f"{self.swizzle}-byte swizzled buffer must be multiples of {atom} B")
        if self._within is not None:
            out._within = self._within + byte_offset
            if out._within < 0 or out._within + out.nbytes > self.buffer.tile_bytes:
                raise LayoutError(f"sub-tile [{', '.join(map(str, out.shape))}] at byte {out._within} of "
                                  f"{self.buffer.describe()} lies outside its {self.buffer.tile_bytes}-byte stage")
        if byte_offset:
            out.offset = self.offset + index(byte_offset)
        return out

    def memref(self, dtype=None, shape=None):
        """A ``memref`` view of the tile (``memref<shape x dtype, workgroup>``); ``shape`` may
        add leading unit dimensions (a rank-3 TMA box ``(1, rows, cols)`` of a 2-D tile)."""
        if shape is not None:
            shape = tuple(shape)
            lead = len(shape) - len(self.shape)
            if lead < 0 or shape[lead:] != self.shape or any(x != 1 for x in shape[:lead]):
                raise ValueError(f"a view of tile {list(self.shape)} may only add leading 1s, got {list(shape)}")
        return memref.view(memref_type(shape or self.shape, dtype or self.dtype), self._bound.raw, self.offset, [])

    def address(self) -> Scalar:
        """The shared-window byte address (i64) of the tile."""
        return to_type(self._bound.base_address + self.offset, "i64")

    def origin_address(self) -> Scalar:
        """The shared-window byte address (i64) of the buffers' aligned origin, :attr:`static`
        bytes before this tile (when known)."""
        return to_type(self._bound.base_address + self._bound.base, "i64")


SWIZZLE_UNIT = 16      #: bytes of the chunk a swizzle moves as a whole
SWIZZLE_ROW = 128      #: the swizzle's row: the chunk index XORs with bits 7.. of the address


def swizzle_offset(offset, swizzle: int):
    """The byte at which a ``swizzle``-byte swizzled tile (TMA ``CU_TENSOR_MAP_SWIZZLE_*``,
    WGMMA descriptor layout modes) holds what an unswizzled one holds at ``offset`` (Python int
    or unsigned IR integer, from a ``8 * swizzle``-byte aligned tile start): the 16-byte chunk
    index (bits 4..) XOR the 128-byte row index (bits 7..), both ``log2(swizzle / 16)`` bits
    wide (CuTe ``Swizzle<3,4,3>`` for 128 B, ``<2,4,3>`` for 64 B, ``<1,4,3>`` for 32 B). 0: no
    swizzle."""
    if not swizzle:
        return offset
    mask = swizzle // SWIZZLE_UNIT - 1
    shift = SWIZZLE_ROW.bit_length() - SWIZZLE_UNIT.bit_length()
    return offset ^ (((offset >> shift) & (mask * SWIZZLE_UNIT)))


class BoundBuffer:
    """A declared buffer inside a kernel: tiles (:class:`SmemTile`), typed views and
    addresses per stage."""

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

    def tile(self, stage=0, shape=None, byte_offset=0) -> SmemTile:
        """The :class:`SmemTile` of ``stage`` (int or IR integer), ``byte_offset`` bytes in
        (see :meth:`SmemTile.sub`), of ``shape`` (default: the declared tile shape)."""
        static = self.buf.offset + stage * self.buf.stage_bytes if isinstance(stage, int) else None
        t = SmemTile(self._bound, self.buf, self.byte_offset(stage), self.buf.shape, static=static)
        return t.sub(byte_offset, shape) if (byte_offset or shape) else t

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
    def __init__(self, plan, groups=None):
        self.plan = plan
        self.raw = gpu.dynamic_shared_memory(ir.Type.parse(f"memref<?xi8, {_WG}>"))
        addr = Scalar(memref.extract_aligned_pointer_as_index(self.raw))
        self.base_address = addr
        a = plan._max_align
        # byte shift that rounds the dynamic base up to the largest declared alignment
        self.base = (index(0) - addr) & (a - 1) if a > 16 else index(0)
        self._groups = barrier_groups(plan) if groups is None else groups

    def __getitem__(self, name) -> BoundBuffer:
        return BoundBuffer(self, self.plan._buffers[name])

    def barriers(self, name):
        """The ``!nvgpu.mbarrier.group`` value of barrier group ``name``."""
        return self._groups[name]

    def rebind(self) -> "BoundSmem":
        """The same plan and barrier groups with the dynamic base emitted again at the insertion
        point: e.g. in each warpgroup's branch after its ``setmaxnreg``, so that no base address
        made before it stays live (or spilled) across it."""
        return BoundSmem(self.plan, self._groups)


def barrier_groups(plan) -> dict:
    """Emit the plan's barrier groups (static shared symbols): ``{name: !nvgpu.mbarrier.group}``."""
    out = {}
    for name, g in plan._barriers.items():
        t = ir.Type.parse(f"!nvgpu.mbarrier.group<memorySpace = {_WG}, num_barriers = {g.count}>")
        out[name] = nvgpu.mbarrier_create(t)
    return out


def bind(plan, groups=None) -> BoundSmem:
    return BoundSmem(plan, groups)


def static_word(name: str) -> Scalar:
    """The shared address (unsigned i32) of a 4-byte word in *static* shared memory (``.shared
    .align 4 .b32 name``), declared once in the kernel's module. Its address is a link-time
    constant ptxas rematerialises wherever it is used (a slot in the dynamic buffer costs the
    run-time base alignment, which ptxas may keep live -- or spill -- through a whole kernel);
    e.g. the slot ``tcgen05.alloc`` writes the tensor-memory address to."""
    return static_words(name, 1)


def static_words(name: str, count: int) -> Scalar:
    """The shared address (unsigned i32) of ``count`` 4-byte words in static shared memory
    (``.shared .align 4 .b8 name[4 * count]``), declared once per module (a second call with the
    same name and count reuses it; another count is a ``ValueError``). Why static: see
    :func:`static_word`."""
    from mlir.dialects import llvm
    blk = ir.InsertionPoint.current.block
    op = blk.owner
    while op is not None and op.name != "gpu.module":
        op = op.parent
    if op is None:
        raise RuntimeError("static_word must be called inside a kernel body (KernelBuilder.build)")
    body = op.regions[0].blocks[0]
    i32 = ir.IntegerType.get_signless(32)
    ty = i32 if count == 1 else ir.Type.parse(f"!llvm.array<{count} x i32>")
    old = [o for o in body.operations if getattr(o, "sym_name", None) is not None and o.sym_name.value == name]
    if old and str(ir.TypeAttr(old[0].attributes["global_type"]).value) != str(ty):
        raise ValueError(f"static shared symbol {name!r} holds another type than {ty}")
    if not old:
        with ir.InsertionPoint.at_block_begin(body):
            llvm.GlobalOp(ty, name, ir.Attribute.parse("#llvm.linkage<internal>"), alignment=4, addr_space=3)
    p = llvm.AddressOfOp(ir.Type.parse("!llvm.ptr<3>"), name).result
    return Scalar(llvm.ptrtoint(i32, p), signed=False)


class StaticArray:
    """``count`` f32 words in static shared memory (:func:`static_words`), read and written by
    element index (IR i32): e.g. per-row values one warpgroup hands another through an
    mbarrier. ``ld.shared.f32`` / ``st.shared.f32``."""

    def __init__(self, name: str, count: int):
        self.name, self.count = name, count

    def _ptr(self, i):
        from mlir.dialects import llvm
        a = static_words(self.name, self.count) + to_type(i, "i32", signed=False) * 4
        return llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), a)

    def load(self, i) -> Scalar:
        from mlir.dialects import llvm
        return Scalar(llvm.load(ir.F32Type.get(), self._ptr(i)))

    def store(self, i, value) -> None:
        from mlir.dialects import llvm
        llvm.store(value, self._ptr(i))
