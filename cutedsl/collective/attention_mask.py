"""Attention masks at two grains: which KV blocks a query block visits (whole-block skipping)
and which (query, key) pairs of a visited block are kept (FlashAttention-2/3's ``Mask``).

Every mask here is a band, aligned to the bottom-right corner when ``seqlen_q != seqlen_k``
(FlashAttention's convention): query row ``i`` (0-based within its sequence) may attend key
``j`` when ``j < seqlen_k`` and, for a *local* kernel, ``i + shift - left <= j <= i + shift +
right`` with ``shift = seqlen_k - seqlen_q``. Causal is ``right = 0`` with an unbounded left;
a sliding window ``(left, right)`` sets both; the host turns "unbounded" (``-1``) into
:func:`unbounded` so the kernel compares against plain integers. Keys past ``seqlen_k`` (the
ragged last block) are masked in every kernel.

Block ranges (:meth:`AttentionMask.block_range`) are written once for Python ints (the host:
tests, FLOP counts) and IR i32 values (the kernel): blocks ``[n_min, n_max)`` hold every key a
query of ``[m0, m0 + block_m)`` may attend (blocks outside are never loaded nor computed);
``[u_lo, u_hi)`` inside it are the blocks no query of the block has masked, which the mainloop
runs without the per-element mask. A kernel visits blocks from ``n_max - 1`` down, as
FlashAttention-3 does, so the masked blocks at the diagonal come first.

Elements (:meth:`AttentionMask.row_keep_bits`, :meth:`AttentionMask.apply_bits`): per query row of
the thread, one i32 keep mask over its elements in the WGMMA accumulator fragment -- the right edge
and ``seqlen_k`` one limit, the left edge (two-sided windows only, :attr:`AttentionMask.left_edge`)
a second mask anded in -- then one bit test and select per element (SASS: R2P + FSEL), instead of a
compare per element and edge. ``causal`` kernels (no left edge) skip the left edge altogether.

A FlexAttention ``mask_mod`` (:mod:`cutedsl.collective.attention_hooks`) joins at both grains:
:meth:`AttentionMask.apply` ands its per-element predicate (``keep``) into the band, and
:meth:`AttentionMask.block_kinds` gives the band's blocks as SKIP / PARTIAL / FULL for the host
to intersect with the mask_mod's block mask
(:meth:`~cutedsl.collective.attention_block_mask.BlockMask.restrict`).
"""
from __future__ import annotations

import attrs
import numpy as np

from ..ir._lazy import lazy

V = lazy("cutedsl.ir.values")
F = lazy("cutedsl.ir.fmath")
llvm = lazy("mlir.dialects.llvm")

NEG_INF = float("-inf")


def unbounded(seqlen_q: int, seqlen_k: int) -> int:
    """A window extent that bounds nothing for sequences up to these lengths (what ``-1``
    becomes on the host): ``seqlen_q + seqlen_k`` keeps ``i + shift - left < 0`` and ``i + shift
    + right >= seqlen_k`` for every row ``i``."""
    return seqlen_q + seqlen_k


def _is_py(*xs) -> bool:
    return all(isinstance(x, int) for x in xs)


def _min(a, b):
    return min(a, b) if _is_py(a, b) else V.select(V.i32(a) < V.i32(b), V.i32(a), V.i32(b))


def _max(a, b):
    return max(a, b) if _is_py(a, b) else V.select(V.i32(a) > V.i32(b), V.i32(a), V.i32(b))


def _clamp(x, lo, hi):
    return _min(_max(x, lo), hi)


def _cdiv(a, b: int):
    return -((-a) // b)


@attrs.frozen
class BlockRange:
    """KV blocks of one query block, visited downwards: ``[u_hi, n_max)`` masked, ``[u_lo,
    u_hi)`` unmasked, ``[n_min, u_lo)`` masked (``n_min <= u_lo <= u_hi <= n_max``). Ints on the
    host, IR i32 (signed) in a kernel."""
    n_min: object
    n_max: object
    u_lo: object
    u_hi: object

    @property
    def count(self):
        return self.n_max - self.n_min

    def block(self, v, masked=None):
        """The KV block visited as ``v`` (``n_min <= v < n_max``): ``v`` itself for a band
        (``masked``: which range ``v`` lies in, when the caller knows; unused here)."""
        return v


ROW_BITS = 32      #: bits of one per-row keep mask (an i32): a thread holds at most 32 columns of a row


def _shl_ones(n):
    """IR i32 ``0xffffffff << n`` with PTX's shift semantics (PTX ISA 9.7.8.7 ``shl``: the
    amount is unsigned and amounts past 32 give 0 -- LLVM's ``shl`` would make them poison)."""
    from mlir import ir
    return V.Scalar(llvm.inline_asm(ir.IntegerType.get_signless(32), [V.i32(n)], "shl.b32 $0, -1, $1;", "=r,r"))


def bits_from(n):
    """IR i32 with bits ``n .. 31`` set (``n`` an IR i32 of any value: all for ``n <= 0``, none
    for ``n >= 32``). Two instructions."""
    return _shl_ones(_max(V.i32(n), V.i32(0)))


def bits_below(n):
    """IR i32 with bits ``0 .. n-1`` set (``n`` any i32: none for ``n <= 0``, all for ``n >= 32``)."""
    return ~bits_from(n)


class AttentionMask:
    """The band mask of a kernel with ``block_m`` query rows and ``block_n`` keys per block;
    ``local``: the band has a left/right edge (causal or a sliding window), else only keys
    past ``seqlen_k`` are masked; ``causal`` (with ``local``): the left edge is unbounded
    (causal, or a window ``(-1, right)``; the host passes :func:`unbounded` as ``left``), so the
    element mask compares with the right edge only and no block is masked for the left edge."""

    def __init__(self, block_m: int, block_n: int, local: bool = False, causal: bool = False):
        if causal and not local:
            raise ValueError("AttentionMask: causal=True is a local band (pass local=True)")
        self.block_m, self.block_n, self.local, self.causal = block_m, block_n, bool(local), bool(causal)

    @property
    def left_edge(self) -> bool:
        """Whether the element mask compares with a left edge (a two-sided window)."""
        return self.local and not self.causal

    def block_range(self, m0, seqlen_q, seqlen_k, left=0, right=0) -> BlockRange:
        """The :class:`BlockRange` of the query block starting at row ``m0`` (ints or IR i32;
        ``left``/``right``: the band's extents, used when :attr:`local`)."""
        bn = self.block_n
        m_last = _min(m0 + self.block_m, seqlen_q) - 1
        if self.local:
            shift = seqlen_k - seqlen_q
            n_max = _max(_cdiv(_min(seqlen_k, m_last + shift + right + 1), bn), 0)
            right_end = _min(seqlen_k // bn, (m0 + shift + right + 1) // bn)    # blocks below: no right edge
            if self.causal:                                                     # (left is unbounded)
                n_min = left_start = 0
            else:
                n_min = _min(_max((m0 + shift - left) // bn, 0), n_max)
                left_start = _cdiv(m_last + shift - left, bn)                   # blocks from here: no left edge
        else:
            n_max, n_min = _cdiv(seqlen_k, bn), 0
            right_end, left_start = seqlen_k // bn, 0
        u_hi = _clamp(right_end, n_min, n_max)
        u_lo = _clamp(left_start, n_min, u_hi)
        return BlockRange(n_min, n_max, u_lo, u_hi)

    def block_kinds(self, seqlen_q: int, seqlen_k: int, left: int = 0, right: int = 0) -> np.ndarray:
        """Host: int32 ``(ceil(seqlen_q / block_m), ceil(seqlen_k / block_n))``, each block 0
        (SKIP: outside :meth:`block_range`), 1 (PARTIAL: visited with the element mask) or 2
        (FULL: visited unmasked) -- the codes of :mod:`~cutedsl.collective.attention_block_mask`."""
        qb, kb = _cdiv(seqlen_q, self.block_m), _cdiv(seqlen_k, self.block_n)
        out = np.zeros((qb, kb), np.int32)
        for i in range(qb):
            r = self.block_range(i * self.block_m, seqlen_q, seqlen_k, left, right)
            out[i, r.n_min:r.n_max] = 1
            out[i, r.u_lo:r.u_hi] = 2
        return out

    # -- IR: the elements of one block -------------------------------------------------
    def row_limits(self, row, seqlen_q, seqlen_k, n0, left, right) -> tuple:
        """IR ``(lo, hi)``: the kept keys of query ``row`` in the block starting at key ``n0``
        are the block columns ``lo <= c < hi`` (i32, relative to ``n0``)."""
        hi = V.i32(seqlen_k)
        lo = V.i32(0)
        if self.local:
            shift = seqlen_k - seqlen_q
            hi = _min(hi, row + shift + right + 1)
            lo = row + shift - left
        return lo - n0, hi - n0

    def row_keep_bits(self, row, seqlen_q, seqlen_k, n0, left, right, c0, per_row: int):
        """IR i32: bit ``p`` set when the thread's element at row position ``p``
        (:func:`~cutedsl.atom.fragment_rows.row_position`) of query ``row`` is kept, in the block
        starting at key ``n0``; ``c0``: the thread's base column in the WGMMA accumulator
        fragment; ``per_row`` (<= 32): the thread's elements per row. A handful of integer
        instructions per row -- the right edge and ``seqlen_k`` are one limit
        (:meth:`row_limits`), the left edge (a two-sided window only) a second mask anded in."""
        if per_row > ROW_BITS:
            raise ValueError(f"row_keep_bits: {per_row} elements per row exceed the {ROW_BITS}-bit row mask "
                             f"(block_n <= 128)")
        from ..atom.fragment_rows import row_columns_below
        from ..atom.wgmma import FRAG_COLS, FRAG_PAIR
        # The counts are taken at n0 = 0 and moved by the block: n0 is a multiple of FRAG_COLS,
        # so it shifts every row's count by FRAG_PAIR * n0 / FRAG_COLS exactly. The counts at 0
        # are loop-invariant (hoisted out of the KV loop); per block one subtraction, linear in
        # the block index, is left instead of the count's four instructions.
        lo, hi = self.row_limits(row, seqlen_q, seqlen_k, 0, left, right)
        step = (V.i32(n0) >> (FRAG_COLS.bit_length() - 1)) * FRAG_PAIR
        bits = bits_below(row_columns_below(hi - c0) - step)
        if self.left_edge:
            bits = bits & bits_from(row_columns_below(lo - c0) - step)
        return bits

    def apply_bits(self, s, bits, keep=None):
        """``s`` (an ``Accumulator`` in the WGMMA fragment layout) with masked elements set to
        ``-inf``: ``bits[b][h]`` from :meth:`row_keep_bits` for row half ``h`` of block ``b``;
        ``keep(b, i)``: a mask_mod's IR i1 (or Python bool) for register ``i``, anded in. One
        bit test and one select per element (ptxas turns the bit tests of one mask word into
        ``R2P``: seven predicates per instruction)."""
        from ..atom.fragment_rows import row_half, row_position

        def one(x, b, i):
            return _kept(((bits[b][row_half(i)] >> row_position(i)) & 1).ne(0), x, keep, b, i)
        # row by row in bit order: the tests of one mask word sit together for R2P; where both
        # rows share one word (no band), the two selects of each bit sit together instead
        shared = all(bb[0] is bb[1] for bb in bits)
        order = (lambda i: (row_position(i), row_half(i))) if shared else (lambda i: (row_half(i), row_position(i)))
        out = {(b, i): one(s.get(b, i), b, i) for b in range(s.m_blocks) for i in sorted(range(s.regs), key=order)}
        return s.map_regs(lambda x, b, i: out[b, i])

    def apply(self, s, rows, cols, limits, keep=None):
        """``s`` (an ``Accumulator`` of scores) with masked elements set to ``-inf``.
        ``rows(b, i)``/``cols(b, i)``: which of the thread's row limits and which block column
        register ``i`` of block ``b`` holds (``cols`` relative to the block start, IR i32 or int
        offsets from the thread's base); ``limits[b][h]`` from :meth:`row_limits`; ``keep(b,
        i)``: a mask_mod's IR i1 (or Python bool) for the element, anded in."""
        def one(x, b, i):
            lo, hi = limits[b][rows(b, i)]
            c = cols(b, i)
            ok = c < hi
            if self.local:
                ok = ok & (c >= lo)
            return _kept(ok, x, keep, b, i)
        return s.map_regs(one)


__all__ = ["AttentionMask", "BlockRange", "bits_below", "bits_from", "unbounded", "ROW_BITS"]



def _kept(ok, x, keep, b, i):
    """IR: score ``x`` where the band test ``ok`` (i1) and a mask_mod's ``keep(b, i)`` (IR i1 or
    a Python bool; None: no mask_mod) hold, else ``-inf``."""
    if keep is not None:
        extra = keep(b, i)
        if extra is False:
            return F._f32(NEG_INF)
        if extra is not True:
            ok = ok & extra
    return V.select(ok, x, F._f32(NEG_INF))

def sequence_bounds(args, batch, varlen: bool) -> tuple:
    """IR: ``(q_start, k_start, seqlen_q, seqlen_k)`` of sequence ``batch``: its first query and
    key rows and lengths from the kernel's ``cu_seqlens_q`` / ``cu_seqlens_k`` (varlen: packed
    sequences, FlashAttention's cumulative offsets), else ``(0, 0)`` and the ``seqlen_q`` /
    ``seqlen_k`` parameters every sequence shares. Every attention kernel's work unit starts here."""
    if not varlen:
        return 0, 0, args.seqlen_q, args.seqlen_k
    from ..ir.gmem import GlobalPtr
    cq, ck = GlobalPtr(args.cu_seqlens_q, "i32"), GlobalPtr(args.cu_seqlens_k, "i32")
    q_start, k_start = cq.load(batch), ck.load(batch)
    return q_start, k_start, cq.load(batch + 1) - q_start, ck.load(batch + 1) - k_start

