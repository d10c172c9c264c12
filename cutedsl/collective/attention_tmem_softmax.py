"""Online softmax at one thread per query row (FlashAttention-4 on sm_100a): a softmax thread holds
its whole row of ``S`` (loaded from tensor memory by ``tcgen05.ld``), so row maxima and sums need
no shuffles.

Per KV block, on the f32 scores of one row (:class:`RowScores`, the accumulator interface the
mask and the score transform of :class:`~cutedsl.collective.attention_softmax.OnlineSoftmax` read):

* the block's row maximum by a tree of three-input ``max.f32`` (PTX ISA 9.7.3 max: ``max.f32 d,
  a, b, c``, sm_100 with PTX 8.8; SASS FMNMX3);
* the reference maximum ``m_ref``: FlashAttention-4 keeps a *stale* maximum while the new one
  exceeds it by at most :data:`RESCALE_THRESHOLD` (in log2 units of the scaled scores) -- P is
  then at most ``2^threshold``, harmless in f32 and in the 16-bit P, and O and the row sum stay
  consistent because both use the same reference; only when it grows further is ``m_ref``
  updated and O rescaled (:attr:`TmemRowSoftmax.rescale` tells the caller);
* ``P = exp2(S * k - m_ref * k)`` (``k = softmax_scale * log2 e`` folded in: one ``fma`` and one
  ``ex2.approx`` per element), the correction ``exp2((m_old - m_ref) k)`` and the row sum ``l' =
  l * corr + sum P``;
* :meth:`TmemRowSoftmax.finalize`: ``1 / l`` and ``LSE = (m_ref k + log2 l) ln 2`` (natural log);
  a row with no key (``l = 0``) gets ``1/l = 0`` and ``LSE = +inf``.
"""
from __future__ import annotations

import attrs

from ..ir._lazy import lazy
from .attention_softmax import LN2, OnlineSoftmax

V = lazy("cutedsl.ir.values")
F = lazy("cutedsl.ir.fmath")
llvm = lazy("mlir.dialects.llvm")
ir = lazy("mlir.ir")

#: FlashAttention-4's threshold: O is rescaled only when the row maximum grew by more than this
#: (log2 units of the scaled scores, i.e. P up to 2^8 in between)
RESCALE_THRESHOLD = 8.0


class RowScores:
    """One thread's row of a score block: ``values`` (f32 IR), column ``i`` of the block in
    register ``i``; the accumulator interface (``m_blocks``, ``regs``, ``get``, ``map_regs``)."""

    m_blocks = 1

    def __init__(self, values):
        self.values = list(values)

    @property
    def regs(self) -> int:
        return len(self.values)

    def get(self, b: int, i: int):
        return self.values[i]

    def map_regs(self, fn) -> "RowScores":
        return RowScores([fn(x, 0, i) for i, x in enumerate(self.values)])


def max3(a, b, c):
    """``max.f32 d, a, b, c`` (PTX ISA 9.7.3.x max, three inputs: sm_100, PTX 8.8)."""
    f32 = ir.F32Type.get()
    return V.Scalar(llvm.inline_asm(f32, [a, b, c], "max.f32 $0, $1, $2, $3;", "=f,f,f,f", has_side_effects=False))


def row_max(values, start):
    """The maximum of ``start`` and ``values`` (f32 IR) by a tree of three-input maxima."""
    level = [start] + list(values)
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 2, 3):
            nxt.append(max3(level[i], level[i + 1], level[i + 2]))
        rest = len(level) % 3
        if rest == 2:
            nxt.append(F.fmax(level[-2], level[-1]))
        elif rest == 1:
            nxt.append(level[-1])
        level = nxt
    return level[0]


@attrs.frozen
class RowState:
    """Per thread (its row): ``m_ref`` -- the reference maximum the row's P and O use (-inf
    before any kept key); ``row_sum`` -- the sum of P against it."""
    m_ref: object
    row_sum: object

    def carry(self) -> list:
        return [self.m_ref, self.row_sum]

    @classmethod
    def from_carry(cls, values) -> "RowState":
        return cls(*list(values)[:2])


class TmemRowSoftmax(OnlineSoftmax):
    """The online softmax of one row per thread (see the module docstring); ``softcap`` and the
    ``score_mod`` hook as :class:`OnlineSoftmax` (its :meth:`~OnlineSoftmax.scores`).
    ``threshold``: :data:`RESCALE_THRESHOLD`, or 0 to rescale whenever the maximum grows."""

    def __init__(self, softcap: bool = False, threshold: float = RESCALE_THRESHOLD):
        super().__init__(softcap)
        self.threshold = float(threshold)

    @staticmethod
    def initial_row() -> RowState:
        return RowState(F._f32(float("-inf")), F._f32(0.0))

    def update_row(self, s: RowScores, state: RowState, exp_scale) -> tuple:
        """``(P values, new state, corr, grew)`` for one row's transformed scores ``s``:
        ``corr`` multiplies O (1 when the reference stayed), ``grew`` (i1) says it moved."""
        m_new = row_max(s.values, state.m_ref)
        m_old = state.m_ref
        # grow past the threshold, or leave -inf (the first kept key): a new reference
        jump = (self._safe(m_new) - self._safe(m_old)) * exp_scale
        grew = (jump > self.threshold) | m_old.eq(float("-inf"))
        m_ref = V.select(grew, m_new, m_old)
        ms = self._safe(m_ref) * exp_scale
        corr = V.select(grew, F.exp2(F.fma(m_old, exp_scale, -ms)), F._f32(1.0))
        p = [F.exp2(F.fma(x, exp_scale, -ms)) for x in s.values]
        total = p[0]
        for x in p[1:]:
            total = total + x
        return p, RowState(m_ref, F.fma(state.row_sum, corr, total)), corr, grew

    @staticmethod
    def finalize_row(state: RowState, exp_scale) -> tuple:
        """``(inv, lse)`` of one row: ``1 / l`` (0 for an empty row) and the natural LSE
        (``+inf`` for an empty row)."""
        total = state.row_sum
        empty = total.eq(0.0)
        inv = V.select(empty, F._f32(0.0), F.rcp_approx(total))
        lse = F.fma(state.m_ref, exp_scale, F.log2_approx(total)) * LN2
        return inv, V.select(empty, F._f32(float("inf")), lse)


__all__ = ["TmemRowSoftmax", "RowScores", "RowState", "RESCALE_THRESHOLD", "max3", "row_max"]
