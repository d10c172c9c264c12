"""WGMMA with A from registers (PTX ``wgmma.mma_async`` "RS" form) and the A-operand fragment.

``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16} {d}, {a0, a1, a2, a3}, b-desc,
scale-d, imm-scale-a, imm-scale-b, imm-trans-b`` (PTX ISA 9.7.15.5.2): A is 64 x 16 per
instruction, held as four ``.f16x2``/``.bf16x2`` registers per thread; B is a shared-memory
matrix descriptor as in the SS form (:class:`~cutedsl.atom.wgmma.WarpgroupMMA`), K- or MN-major.
This is how FlashAttention-3 computes ``O += P V``: P never leaves registers.

A fragment (PTX ISA 9.7.15.5.1, register fragment of matrix A for m64nNk16): value ``v`` (0..7)
of thread ``t`` is element ``(16*(t//32) + (t%32)//4 + 8*((v//2) % 2), 8*(v//4) + 2*(t%4) + v%2)``,
values ``2r`` / ``2r+1`` packed low / high in register ``r``. That is, value for value, the
accumulator fragment's registers ``8j .. 8j+7`` of columns ``16j .. 16j+15`` (PTX ISA
9.7.15.5.1, D matrix), so :meth:`AFragment.from_accumulator` only rounds pairs
(``cvt.rn.{f16x2,bf16x2}.f32``): no data moves between threads.

8-bit A (e4m3/e5m2, ``m64nNk32``; PTX ISA 9.7.15.5.1.1): four consecutive K values per register,
so the conversion from the accumulator moves bytes -- :mod:`cutedsl.atom.fp8_fragment` gives the
exact order (a quad exchange, two ``shfl`` and four ``prmt`` per row and 32 columns) or the
shuffle-free "permuted" order for a B whose K rows are permuted alike (FlashAttention-3's V^T).
8-bit B is K-major only (the ISA transposes 16-bit operands only).

LLVM 22's ``nvvm.wgmma.mma_async`` takes A as a 64-bit descriptor only (its verifier rejects
registers), so this atom emits the instruction as inline PTX; callers never see the choice.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..ir._lazy import lazy
from .cvt import FP8
from .fp8_fragment import ORDERS, accumulator_to_fp8
from .mma_traits import mma_traits
from .wgmma import ATOM_M, FRAG_PAIR, Accumulator, Descriptor, WarpgroupMMA

ir = lazy("mlir.ir")
llvm = lazy("mlir.dialects.llvm")
V = lazy("cutedsl.ir.values")
stm = lazy("cutedsl.atom.stmatrix")

A_REGS = 4          #: 32-bit registers of one k-step (64 x 16 16-bit elements over 128 threads)
REG_TYPES = ("f16", "bf16", *FP8)


class AFragment:
    """The A operand of a register-A WGMMA: ``regs[b][j]`` = the 4 packed i32 registers of
    64-row block ``b`` and k-step ``j`` (16 columns of K for f16/bf16, 32 for e4m3/e5m2) of this
    thread. Shape: ``64 * m_blocks`` x ``k_step * k_steps`` per warpgroup. ``k_order``: "exact", or
    "permuted" when column l of each 32-step is the source's column ``K_PERMUTATION[l]``
    (:mod:`~cutedsl.atom.fp8_fragment`; B's K rows must be permuted alike)."""

    def __init__(self, regs, dtype: str, k_order: str = "exact"):
        if dtype not in REG_TYPES:
            raise ConfigError(f"AFragment dtype must be one of {REG_TYPES}, got {dtype!r}")
        self.regs = [[list(step) for step in blk] for blk in regs]
        if any(len(step) != A_REGS for blk in self.regs for step in blk):
            raise ValueError(f"each k-step of an A fragment is {A_REGS} i32 registers")
        if k_order not in ORDERS:
            raise ConfigError(f"AFragment k_order must be one of {ORDERS}, got {k_order!r}")
        self.dtype, self.k_order = dtype, k_order

    @property
    def m_blocks(self) -> int:
        return len(self.regs)

    @property
    def k_steps(self) -> int:
        return len(self.regs[0])

    @property
    def k(self) -> int:
        """K extent in elements (``k_step`` = 16 or 32 per step)."""
        return self.k_steps * mma_traits(self.dtype).k_step

    @classmethod
    def from_accumulator(cls, acc: Accumulator, dtype: str, k_order: str = "exact") -> "AFragment":
        """The A fragment of the ``64*m_blocks x n`` matrix an f32 accumulator holds (K = n),
        rounded to nearest even: f16/bf16 pairs by ``cvt.rn.{dtype}x2.f32`` (``n`` a multiple of
        16, registers taken value for value); e4m3/e5m2 by ``cvt.rn.satfinite.{dtype}x2.f32``
        (``n`` a multiple of 32) and re-packed in ``k_order`` "exact" (quad exchange) or
        "permuted" (none; see :mod:`~cutedsl.atom.fp8_fragment`). Raises ``ConfigError`` for
        another dtype or order, or an ``n`` that does not fill whole k-steps."""
        if dtype not in REG_TYPES:
            raise ConfigError(f"AFragment.from_accumulator: dtype must be one of {REG_TYPES}, got {dtype!r}")
        if k_order not in ORDERS:
            raise ConfigError(f"AFragment.from_accumulator: k_order must be one of {ORDERS}, got {k_order!r}")
        k_step = mma_traits(dtype).k_step
        if acc.n % k_step:
            raise ConfigError(f"AFragment.from_accumulator: the accumulator's N = {acc.n} must be a multiple "
                              f"of {k_step} (one k{k_step} step of {dtype} A)")
        if dtype in FP8:
            return cls(accumulator_to_fp8(acc, dtype, k_order), dtype, k_order)
        per_step = A_REGS * FRAG_PAIR           # accumulator registers of one 16-column k-step
        regs = []
        for b in range(acc.m_blocks):
            steps = []
            for j in range(acc.regs // per_step):
                base = per_step * j
                steps.append([stm.pack_b16x2(acc.get(b, base + 2 * r), acc.get(b, base + 2 * r + 1), dtype)
                              for r in range(A_REGS)])
            regs.append(steps)
        return cls(regs, dtype)


class WarpgroupMMARegA(WarpgroupMMA):
    """``wgmma.mma_async`` with A from registers (:class:`AFragment`) and B from shared memory:
    ``m`` (64 or 128) x ``n`` (8..256, step 8) per k-tile (64 of K for f16/bf16, 128 for
    e4m3/e5m2), ``dtype`` for both operands, f32 accumulation, B ``b_major`` ``"K"``/``"MN"``
    (None: whatever the B buffer declares; 8-bit B is K-major only). Raises ``ConfigError`` for
    another type, ``ValueError`` for shapes or majors the PTX ISA has no instruction for (see
    :class:`WarpgroupMMA`)."""

    def __init__(self, m: int, n: int, dtype: str = "f16", b_major: str | None = None):
        if dtype not in REG_TYPES:
            raise ConfigError(f"WarpgroupMMARegA dtype must be one of {REG_TYPES}, got {dtype!r}")
        super().__init__(m, n, dtype, b_major=b_major)

    @property
    def label(self) -> str:
        return f"WarpgroupMMARegA m{self.m}n{self.n}k{self.traits.k_step}"

    def _asm(self, layout) -> tuple:
        nd = self.n // FRAG_PAIR
        d = ", ".join(f"${i}" for i in range(nd))
        # operands: nd outputs, nd inputs tied to them, then A's registers, B's descriptor, scale-d
        x = 2 * nd
        a = ", ".join(f"${x + r}" for r in range(A_REGS))
        t = self.dtype
        # 8-bit types have no imm-trans-b (PTX ISA 9.7.15.5.2: transpose is for 16-bit types only)
        trans = "" if t in FP8 else f", {1 if layout.major == 'MN' else 0}"
        # scale-d is a predicate operand: set it from an i32 (0: D = A B, ignoring the input)
        asm = ("{\n\t.reg .pred p;\n\t" f"setp.ne.b32 p, ${x + A_REGS + 1}, 0;\n\t"
               f"wgmma.mma_async.sync.aligned.m{ATOM_M}n{self.n}k{self.traits.k_step}.f32.{t}.{t} "
               f"{{{d}}}, {{{a}}}, ${x + A_REGS}, p, 1, 1{trans};\n\t}}")
        cons = ",".join(["=f"] * nd + [str(i) for i in range(nd)] + ["r"] * A_REGS + ["l", "r"])
        return asm, cons

    def mma(self, acc: Accumulator, a: AFragment, b, accumulate=True, k_tile: int = 0, *, fence: bool = True,
            commit: bool = True) -> Accumulator:
        """Issue one k-tile: ``m_blocks x 4`` instructions m64n``n``k16 (k32 for 8-bit) reading
        k-steps ``4*k_tile .. 4*k_tile+3`` of ``a`` and the B tile ``b`` (``SmemTile`` of ``n x``
        k-tile elements, checked by :meth:`operand_layout`, or a ``Descriptor``), preceded by
        ``wgmma.fence`` (required after the A registers were written) and followed by
        ``commit``; the caller waits (:meth:`wait`) before reusing ``a``'s registers or reading
        the result. ``accumulate=False``: ``scale-d = 0`` for the first k-step. ``fence=False`` /
        ``commit=False`` leave the fence / commit out (several k-tiles in one commit group).
        Raises ``ConfigError`` when ``a`` does not fit (type, blocks, K)."""
        tr = self.traits
        if not isinstance(a, AFragment):
            raise ConfigError(f"{self.label} operand A must be an AFragment (registers), not {type(a).__name__}")
        if a.dtype != self.dtype or a.m_blocks != self.m_blocks:
            raise ConfigError(f"{self.label} ({self.dtype}, {self.m_blocks} m-block(s)) got an A fragment of "
                              f"{a.dtype}, {a.m_blocks} m-block(s)")
        if not isinstance(k_tile, int) or not 0 <= k_tile or (k_tile + 1) * tr.k_steps > a.k_steps:
            raise ConfigError(f"{self.label}: k_tile {k_tile!r} is outside the A fragment's K = {a.k} "
                              f"({a.k // tr.k_tile} k-tiles of {tr.k_tile})")
        db = b if isinstance(b, Descriptor) else self.descriptor(b, "B")
        asm, cons = self._asm(db.layout)
        acc_type, nd = self.acc_type, self.n // FRAG_PAIR
        f32 = ir.F32Type.get()
        if fence:
            self.fence()
        structs = list(acc.structs)
        b_at = db.stepper()
        for j in range(tr.k_steps):
            dbj = b_at(db.layout.k_step_offset(j))
            scale = V.i32(1 if (accumulate or j) else 0)
            for blk in range(self.m_blocks):
                d = [llvm.extractvalue(f32, structs[blk], [i]) for i in range(nd)]
                ops = d + list(a.regs[blk][k_tile * tr.k_steps + j]) + [dbj, scale]
                structs[blk] = llvm.inline_asm(acc_type, ops, asm, cons, has_side_effects=True)
        if commit:
            self.commit()
        return Accumulator(structs, self.n)


__all__ = ["AFragment", "WarpgroupMMARegA", "A_REGS", "REG_TYPES"]
