"""Online softmax at one thread per query row (FlashAttention-4 on sm_100a): a softmax thread holds
its whole row of ``S`` (loaded from tensor memory by ``tcgen05.ld``), so row maxima and sums need
no shuffles.

Per KV block, on the f32 scores of one row (:class:`RowScores`, the accumulator interface the
mask and the score transform of :class:`~cutedsl.collective.attention_softmax.OnlineSoftmax` read):

* the block's row maximum by a tree of three-input ``max.f32`` (:func:`~cutedsl.ir.fmath.max3`;
  SASS FMNMX3);
* the reference maximum ``m_ref``: FlashAttention-4 keeps a *stale* maximum while the new one
  exceeds it by at most :data:`RESCALE_THRESHOLD` (in log2 units of the scaled scores) -- P is
  then at most ``2^threshold``, harmless in f32 and in the 16-bit P, and O and the row sum stay
  consistent because both use the same reference; only when it grows further is ``m_ref``
  updated and O rescaled (:attr:`TmemRowSoftmax.rescale` tells the caller);
* ``P = exp2(S * k - m_ref * k)`` (``k = softmax_scale * log2 e`` folded in: one ``fma.rn.f32x2``
  per two elements and one ``ex2.approx`` per element), the correction ``exp2((m_old - m_ref) k)``
  and the row sum ``l' = l * corr + sum P`` (a tree of ``add.rn.f32x2``);
* :meth:`TmemRowSoftmax.finalize`: ``1 / l`` and ``LSE = (m_ref k + log2 l) ln 2`` (natural log);
  a row with no key (``l = 0``) gets ``1/l = 0`` and ``LSE = +inf``.
"""
from __future__ import annotations

import attrs

from ..ir._lazy import lazy
from .attention_softmax import LN2, OnlineSoftmax

V = lazy("cutedsl.ir.values")
F = lazy("cutedsl.ir.fmath")
FX = lazy("cutedsl.ir.fexp2")

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


def row_max(values, start):
    """The maximum of ``start`` and ``values`` (f32 IR) by a tree of three-input maxima."""
    level = [start] + list(values)
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 2, 3):
            nxt.append(F.max3(level[i], level[i + 1], level[i + 2]))
        rest = len(level) % 3
        if rest == 2:
            nxt.append(F.fmax(level[-2], level[-1]))
        elif rest == 1:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def row_sum(values):
    """The sum of ``values`` (f32 IR) by a tree of ``add.rn.f32x2`` on pairs (FADD2), then one
    add of the last pair's halves."""
    pairs = [(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
    tail = [values[-1]] if len(values) % 2 else []
    if not pairs:
        return tail[0]
    while len(pairs) > 1:
        nxt = [F.add_x2(pairs[i], pairs[i + 1]) for i in range(0, len(pairs) - 1, 2)]
        pairs = nxt + ([pairs[-1]] if len(pairs) % 2 else [])
    total = pairs[0][0] + pairs[0][1]
    return total + tail[0] if tail else total


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
    """The online softmax of one row per thread (see the module docstring); ``softcap`` as
    :class:`OnlineSoftmax` (its :meth:`~OnlineSoftmax.scores`), ``score_mod``: the kernel's hooks
    rewrite the scores.
    ``threshold``: :data:`RESCALE_THRESHOLD`, or 0 to rescale whenever the maximum grows."""

    def __init__(self, softcap: bool = False, threshold: float = RESCALE_THRESHOLD, score_mod: bool = False,
                 exp2_poly: int = 0):
        super().__init__(softcap, score_mod)
        self.threshold = float(threshold)
        self.exp2_poly = int(exp2_poly)

    @staticmethod
    def poly_pairs(pairs: int, poly: int) -> frozenset:
        """Which of a row's ``pairs`` exponent pairs take the polynomial when ``poly`` exponentials
        do: ``poly / 2`` pairs spread evenly (Bresenham), so MUFU and FMA work interleave."""
        k = poly // 2
        return frozenset(q for q in range(pairs) if (q + 1) * k // pairs != q * k // pairs)

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
        p = []
        k2, nms2 = (exp_scale, exp_scale), (-ms, -ms)
        poly = self.poly_pairs(s.regs // 2, self.exp2_poly)
        for i in range(0, s.regs - 1, 2):           # the exponents two at a time (FFMA2)
            e = F.fma_x2((s.values[i], s.values[i + 1]), k2, nms2)
            p += list(FX.exp2_poly_x2(e)) if i // 2 in poly else [F.exp2(x) for x in e]
        if s.regs % 2:
            p.append(F.exp2(F.fma(s.values[-1], exp_scale, -ms)))
        return p, RowState(m_ref, F.fma(state.row_sum, corr, row_sum(p))), corr, grew

    @staticmethod
    def finalize_row(state: RowState, exp_scale) -> tuple:
        """``(inv, lse)`` of one row: ``1 / l`` (0 for an empty row) and the natural LSE
        (``+inf`` for an empty row)."""
        total = state.row_sum
        empty = total.eq(0.0)
        inv = V.select(empty, F._f32(0.0), F.rcp_approx(total))
        lse = F.fma(state.m_ref, exp_scale, F.log2_approx(total)) * LN2
        return inv, V.select(empty, F._f32(float("inf")), lse)


__all__ = ["TmemRowSoftmax", "RowScores", "RowState", "RESCALE_THRESHOLD", "row_max", "row_sum"]
