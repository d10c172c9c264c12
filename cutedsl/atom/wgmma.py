"""WGMMA atom: warpgroup matrix multiply-accumulate from shared memory (PTX ``wgmma.mma_async``).

A warpgroup (4 consecutive warps, 128 threads) computes ``D[M x N] += A[M x K] @ B[K x N]``
with A and B in shared memory, described by 64-bit *matrix descriptors* (PTX ISA "Matrix
Descriptor Format"): start address >> 4 in bits 0-13, leading-dimension byte offset (LBO)
>> 4 in bits 16-29, stride byte offset (SBO) >> 4 in bits 32-45, swizzle mode in bits 62-63
(1 = 128-byte swizzle).

Supported here: f16/bf16 inputs (A K-major; B MN-major, ``imm-trans-b = 1``, or K-major) and
e4m3/e5m2 inputs, mixed too (A and B K-major: the ISA transposes 16-bit operands only); f32
accumulators; 128-byte swizzle; a k-tile is one swizzle row of K (64 16-bit, 128 8-bit
elements). Instruction shape m64nNk16 (16-bit) / m64nNk32 (fp8); M = 64 x ``m_blocks`` per
warpgroup.

Operands are shared-memory tiles (``SmemTile``, ``smem["a"].tile(stage)``), never raw
addresses: the descriptors (swizzle mode, LBO, SBO, B transpose) are derived from the buffer's
declared layout (dtype, swizzle, major, shape), and a layout these descriptors cannot describe
is a ``LayoutError`` at build time naming the operand and the buffer.

Why ``nvvm.wgmma.mma_async`` and not ``nvgpu.warpgroup.mma``: LLVM 22's nvgpu lowering
advances the B descriptor as if B were N-major even when it is K-major (silently wrong), and
its ``warpgroup.mma.store`` misplaces rows for M > 64 unless N == 128 (see
docs/design-notes.md). Owning the descriptors keeps every supported layout correct; callers
never see this choice.

Shared-memory layouts the descriptors assume (what a TMA box with 128-byte swizzle writes):

* K-major tile ``[R rows x 64]`` (16-bit): row r at ``r * 128`` B; 8-row core groups
  1024 B apart (SBO = 1024); k-step j (16 elements) starts ``32 * j`` B further (the swizzle
  XOR on absolute address bits finds the chunks); a 64-row block starts ``8192`` B further.
* MN-major tile ``[64 (K) x R]`` stored as ``R / 64`` boxes ``[64 x 64]`` of 8 KiB back to
  back: LBO = 8192 (next 64 columns), SBO = 1024 (next 8 K-rows); k-step j starts
  ``2048 * j`` B further.
"""
from __future__ import annotations

from ..arch import DEFAULT
from .mma_traits import ATOM_M, mma_traits, operand_pair_reason
from ..ir._lazy import lazy
from .wgmma_descriptor import (ADDR_MASK, ADDR_SHIFT, SWIZZLE_FIELD, Descriptor, SmemMatrix,  # noqa: F401
                               assemble_descriptor, descriptor_bits, descriptor_lo, make_descriptor)

ir = lazy("mlir.ir")
llvm, nvvm = lazy("mlir.dialects.llvm"), lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")

# the accumulator fragment of m64nNk* (PTX ISA "wgmma D fragment"): each warp owns 16 rows,
# each lane quad 2 adjacent columns of 8-column groups, registers alternate rows r and r + 8
FRAG_WARP_ROWS, FRAG_QUAD, FRAG_PAIR, FRAG_COLS, FRAG_ROW_STEP = 16, 4, 2, 8, 8


def fragment_coords(t: int, i: int) -> tuple:
    """(row, col) in the 64 x N tile of f32 accumulator register ``i`` of warpgroup thread ``t``.

    PTX ISA "wgmma 64xNx16 D fragment": row = 16*(t//32) + (t%32)//4 + 8*((i//2)%2),
    col = 8*(i//4) + 2*(t%4) + i%2, for t in [0, 128), i in [0, N/2).
    """
    w, lane = divmod(t, DEFAULT.warp_threads)
    return (FRAG_WARP_ROWS * w + lane // FRAG_QUAD + FRAG_ROW_STEP * ((i // FRAG_PAIR) % 2),
            FRAG_COLS * (i // (2 * FRAG_PAIR)) + FRAG_PAIR * (t % FRAG_QUAD) + (i % FRAG_PAIR))


class WgmmaFragment:
    """Register layout of one warpgroup's f32 accumulator (PTX ISA "wgmma D fragment"):
    ``m_blocks`` blocks of ``atom_m`` rows x ``n`` columns, ``n / 2`` registers per thread per
    block. Epilogues read element coordinates from this object, not from formulas of their own,
    so an accumulator with another layout (Blackwell's tensor memory read by ``tcgen05.ld``) is
    another layout object with the same methods."""

    def __init__(self, n: int, m_blocks: int = 1):
        self.n, self.m_blocks = n, m_blocks

    @property
    def regs(self) -> int:
        """Registers per thread per block."""
        return self.n // FRAG_PAIR

    @staticmethod
    def coords(t: int, b: int, i: int) -> tuple:
        """Host: ``(row, col)`` of register ``i`` of block ``b`` of warpgroup thread ``t``."""
        r, c = fragment_coords(t, i)
        return ATOM_M * b + r, c

    @staticmethod
    def thread_base(warpgroup_thread=None) -> tuple:
        """IR ``(row, col)`` of this thread's first element; add :meth:`offset` per register.
        ``warpgroup_thread`` defaults to ``tid.x % warpgroup size``."""
        a = DEFAULT
        t = V.thread_idx() % a.warpgroup_threads if warpgroup_thread is None else warpgroup_thread
        return ((t // a.warp_threads) * FRAG_WARP_ROWS + (t % a.warp_threads) // FRAG_QUAD,
                (t % FRAG_QUAD) * FRAG_PAIR)

    @staticmethod
    def offset(b: int, i: int) -> tuple:
        """Constant ``(row, col)`` offset of register ``i`` of block ``b`` from the thread base."""
        return (ATOM_M * b + FRAG_ROW_STEP * ((i // FRAG_PAIR) % 2),
                FRAG_COLS * (i // (2 * FRAG_PAIR)) + (i % FRAG_PAIR))


class Accumulator:
    """The f32 accumulator fragment of one warpgroup: ``m_blocks`` LLVM structs of ``n // 2``
    f32 registers per thread; register ``i`` of block ``b`` holds element
    ``(64*b + row, col)`` with ``(row, col) = fragment_coords(t, i)``, ``t = tid % 128``
    (the warpgroup's thread)."""

    def __init__(self, structs, n: int):
        self.structs = list(structs)
        self.n = n

    @property
    def m_blocks(self) -> int:
        return len(self.structs)

    @property
    def regs(self) -> int:
        return self.layout.regs

    @property
    def layout(self) -> WgmmaFragment:
        """Where each register's element lives (:class:`WgmmaFragment`)."""
        return WgmmaFragment(self.n, self.m_blocks)

    def get(self, b: int, i: int) -> Scalar:
        return V.Scalar(llvm.extractvalue(ir.F32Type.get(), self.structs[b], [i]))

    def thread_coords(self, warpgroup_thread=None) -> tuple:
        """IR (row, col) base of this thread: add ``fragment_coords(0, i)``-style constants per
        register (see :meth:`coords`). ``warpgroup_thread`` defaults to ``tid.x % 128``."""
        return WgmmaFragment.thread_base(warpgroup_thread)

    @staticmethod
    def reg_offset(b: int, i: int) -> tuple:
        """Constant (row, col) offset of register ``i`` of block ``b`` from the thread base."""
        return WgmmaFragment.offset(b, i)

    def lazy_map(self, fn, base=None) -> "MappedAccumulator":
        """Like :meth:`map`, but ``fn`` is applied when an element is read (:meth:`get`): a
        store that reads the fragment sub-tile by sub-tile then computes each element right
        before storing it, keeping few extra values live (read each element once)."""
        return MappedAccumulator(self, fn, base or self.thread_coords())

    def pinned(self) -> "Accumulator":
        """The same registers passed through an empty ``asm volatile`` (CUTLASS's
        ``warpgroup_fence_operand``): reads of the result stay after the ``wgmma.wait_group``
        that precedes this call -- the compiler may not hoist arithmetic on an accumulator
        above the wait that makes it valid. Emits no instruction."""
        out = []
        for s in self.structs:
            ty, nd = s.type, self.regs
            cons = ",".join(["=f"] * nd + [str(i) for i in range(nd)])
            ops = [llvm.extractvalue(ir.F32Type.get(), s, [i]) for i in range(nd)]
            out.append(llvm.inline_asm(ty, ops, "", cons, has_side_effects=True))
        return Accumulator(out, self.n)

    def map_regs(self, fn) -> "Accumulator":
        """New accumulator with ``fn(value, b, i)`` applied to register ``i`` of block ``b``
        (Python ints: the caller derives what it needs from :meth:`reg_offset`)."""
        out = []
        for b, s in enumerate(self.structs):
            for i in range(self.regs):
                s = llvm.insertvalue(s, fn(self.get(b, i), b, i), [i])
            out.append(s)
        return Accumulator(out, self.n)

    def map(self, fn, base=None) -> "Accumulator":
        """New accumulator with ``fn(value, row, col)`` applied to every element (f32 -> f32);
        ``row``/``col`` are IR i32 coordinates in the warpgroup's M x N tile."""
        r0, c0 = base or self.thread_coords()
        out = []
        for b, s in enumerate(self.structs):
            for i in range(self.regs):
                dr, dc = self.reg_offset(b, i)
                v = fn(self.get(b, i), r0 + dr, c0 + dc)
                s = llvm.insertvalue(s, v, [i])
            out.append(s)
        return Accumulator(out, self.n)


class MappedAccumulator(Accumulator):
    """An accumulator whose elements are ``fn(value, row, col)`` of another's, computed at
    :meth:`get` (see :meth:`Accumulator.lazy_map`); every IR read emits ``fn`` again."""

    def __init__(self, acc: Accumulator, fn, base):
        super().__init__(acc.structs, acc.n)
        self._src, self._fn, self._base = acc, fn, base

    def get(self, b: int, i: int) -> Scalar:
        dr, dc = self.reg_offset(b, i)
        return self._fn(self._src.get(b, i), self._base[0] + dr, self._base[1] + dc)


from .smem_operands import SmemOperands  # noqa: E402  (it imports this module's names)


class WarpgroupMMA(SmemOperands):
    """``wgmma.mma_async`` for one warpgroup: ``m`` (64 or 128) x ``n`` (8..256, step 8) per
    k-tile (``traits.k_tile`` elements of K), A of ``dtype`` (f16/bf16/e4m3/e5m2), B of
    ``b_dtype`` (default ``dtype``; e4m3 and e5m2 may mix), f32 accumulation; A ``a_major``
    (``"K"``, or ``"MN"`` for 16-bit types: M-major, ``imm-trans-a``); B ``b_major`` (``"MN"`` --
    16-bit only -- or ``"K"``; None: whatever the B buffer declares).
    Raises ``ValueError`` for shapes, type pairs or majors the PTX ISA has no instruction for."""

    #: M per warpgroup: one or two m64 blocks (more would exceed the register file)
    M_BLOCKS = (1, 2)
    descriptor_cls = Descriptor
    N_STEP, N_MAX = 8, 256      #: PTX ISA: n = 8..256 in steps of 8 (f16/bf16 with f32 accumulators)

    def __init__(self, m: int, n: int, dtype: str = "f16", b_major: str | None = None, b_dtype: str | None = None,
                 a_major: str = "K"):
        if m % ATOM_M or m // ATOM_M not in self.M_BLOCKS:
            raise ValueError(f"warpgroup M must be {' or '.join(str(ATOM_M * b) for b in self.M_BLOCKS)}, got {m}")
        if not (self.N_STEP <= n <= self.N_MAX and n % self.N_STEP == 0):
            raise ValueError(f"WGMMA N must be a multiple of {self.N_STEP} in {self.N_STEP}..{self.N_MAX}, got {n}")
        if b_major not in (None, "K", "MN"):
            raise ValueError(f"b_major must be 'K', 'MN' or None, got {b_major!r}")
        b_dtype = b_dtype or dtype
        why = operand_pair_reason(dtype, b_dtype)
        if why:
            raise ValueError(why)
        self.traits = mma_traits(dtype)     #: K tile, K step, swizzle, majors (B's width is A's)
        if b_major is not None and b_major not in self.traits.majors_b:
            raise ValueError(f"WGMMA reads {dtype} operands K-major only (the PTX ISA transposes 16-bit "
                             f"operands only), got b_major {b_major!r}")
        if a_major not in self.traits.majors_a:
            raise ValueError(f"WGMMA reads {dtype} operand A {' or '.join(self.traits.majors_a)}-major, "
                             f"got a_major {a_major!r}")
        self.m, self.n, self.dtype, self.b_dtype, self.b_major = m, n, dtype, b_dtype, b_major
        self.a_major = a_major

    @property
    def label(self) -> str:
        return f"WarpgroupMMA m{self.m}n{self.n}k{self.traits.k_step}"

    @property
    def acc_type(self) -> ir.Type:
        """``!llvm.struct`` of ``n / 2`` f32: one 64-row block of the accumulator fragment."""
        return ir.Type.parse("!llvm.struct<(" + ", ".join(["f32"] * (self.n // FRAG_PAIR)) + ")>")

    @property
    def m_blocks(self) -> int:
        return self.m // ATOM_M

    def zero(self) -> Accumulator:
        """An all-zero accumulator (``llvm.mlir.zero``)."""
        return Accumulator([llvm.mlir_zero(self.acc_type) for _ in range(self.m_blocks)], self.n)

    def undef(self) -> Accumulator:
        """An accumulator with undefined contents, for ``mma(..., accumulate=False)``."""
        return Accumulator([llvm.mlir_undef(self.acc_type) for _ in range(self.m_blocks)], self.n)

    @staticmethod
    def fence() -> None:
        """``wgmma.fence.sync.aligned``: order prior register/smem writes before the next mma."""
        nvvm.wgmma_fence_aligned()

    @staticmethod
    def commit() -> None:
        """``wgmma.commit_group.sync.aligned``: close the group of issued mmas."""
        nvvm.wgmma_commit_group_sync_aligned()

    @staticmethod
    def wait(n: int = 0) -> None:
        """``wgmma.wait_group.sync.aligned n``: wait until at most ``n`` groups are pending."""
        nvvm.wgmma_wait_group_sync_aligned(n)

    def mma(self, acc: Accumulator, a, b, accumulate=True, *, fence: bool = True, commit: bool = True) -> Accumulator:
        """Issue one k-tile (64 of K): ``m_blocks x 4`` instructions m64n``n``k16, preceded by
        ``wgmma.fence`` and followed by ``commit``; the caller waits (:meth:`wait`).
        ``fence=False`` / ``commit=False`` leave those out, so that several k-tiles (a head
        dimension of 128 is two) form one commit group, which one ``wait_group`` counts.

        ``a``/``b``: ``SmemTile`` of the A tile ``[m x 64]`` (K-major) and the B tile
        (``n x 64`` elements, K- or MN-major), checked by :meth:`operand_layout`; or
        ``Descriptor`` values from :meth:`descriptor` (moved per stage by a mainloop).
        ``accumulate=False`` ignores the incoming accumulator for the first k-step
        (``scale-d = 0``).
        """
        da = a if isinstance(a, Descriptor) else self.descriptor(a, "A")
        db = b if isinstance(b, Descriptor) else self.descriptor(b, "B")
        a_layout, b_layout = da.layout, db.layout
        tr = self.traits
        shape = ir.Attribute.parse(f"#nvvm.shape<m = {ATOM_M}, n = {self.n}, k = {tr.k_step}>")
        ta = ir.Attribute.parse(f"#nvvm.wgmma_type<{self.dtype}>")
        tb = ir.Attribute.parse(f"#nvvm.wgmma_type<{self.b_dtype}>")
        f32 = ir.Attribute.parse("#nvvm.wgmma_type<f32>")
        one = ir.Attribute.parse("#nvvm.wgmma_scale_in<one>")
        # NVVM layouts: A row = K-major, col = M-major (imm-trans-a); B row = N-major (imm-trans-b)
        la = ir.Attribute.parse("#nvvm.mma_layout<%s>" % ("col" if a_layout.major == "MN" else "row"))
        lb = ir.Attribute.parse("#nvvm.mma_layout<%s>" % ("row" if b_layout.major == "MN" else "col"))
        if fence:
            self.fence()
        acc_type = self.acc_type
        structs = list(acc.structs)
        # k-step / m-block offsets move only the start-address field
        a_at, b_at = da.stepper(), db.stepper()
        for j in range(tr.k_steps):
            dbj = b_at(b_layout.k_step_offset(j))
            for blk in range(self.m_blocks):
                daj = a_at(a_layout.k_step_offset(j) + a_layout.block_offset(blk))
                scale = "one" if (accumulate or j) else "zero"
                structs[blk] = nvvm.wgmma_mma_async(
                    acc_type, structs[blk], daj, dbj, shape, ta, tb, f32,
                    ir.Attribute.parse(f"#nvvm.wgmma_scale_out<{scale}>"), one, one, la, lb)
        if commit:
            self.commit()
        return Accumulator(structs, self.n)
