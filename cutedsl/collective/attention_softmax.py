"""Online softmax in registers (FlashAttention-2/3): the running row maximum and row sum of a
query block over its KV blocks, the rescale of O, and the final 1/sum and log-sum-exp.

Per KV block, on the f32 scores ``S`` of one warpgroup's WGMMA accumulator (rows as
:mod:`cutedsl.atom.fragment_rows` describes them):

* :meth:`OnlineSoftmax.scores` -- FlashAttention's score transform: with ``softcap``,
  ``c * tanh(S * scale / c)`` (``tanh.approx.f32``); then a FlexAttention ``score_mod``
  (:class:`~cutedsl.collective.attention_hooks.BoundHooks`, passed by the main loop) sees the
  scaled score in natural-log units;
* :meth:`OnlineSoftmax.update` -- ``m' = max(m, rowmax S)`` (in the thread, then over the quad
  with two ``shfl.sync.bfly``), ``P = exp2(S * k - m' * k)`` (one ``fma`` and one
  ``ex2.approx`` per element, ``k = softmax_scale * log2(e)`` folded into the exponent), the
  correction ``exp2((m - m') * k)``, and the thread's partial row sum ``l' = l * corr + sum
  P`` -- the quad reduction of the sum waits until :meth:`finalize`, as in FlashAttention-3;
* :meth:`OnlineSoftmax.finalize` -- ``1 / l`` and ``LSE = (m * k + log2 l) * ln 2`` (natural
  log of the scaled scores); a row whose every key was masked (``m = -inf``) gets ``1/l = 0``
  (so O = 0) and ``LSE = +inf``.

A fully masked row keeps ``m = -inf``; exponents then use 0 in its place (FlashAttention's
``Check_inf``), so no ``-inf - -inf`` NaN appears.
"""
from __future__ import annotations

import math

import attrs

from ..atom.fragment_rows import ROW_HALVES, _tree, quad_allreduce, row_half
from ..ir._lazy import lazy

V = lazy("cutedsl.ir.values")
F = lazy("cutedsl.ir.fmath")
llvm = lazy("mlir.dialects.llvm")

LN2 = math.log(2.0)


@attrs.frozen
class SoftmaxParams:
    """IR f32 values of the softmax: ``exp_scale`` (what multiplies a transformed score in the
    exponent base 2: ``softmax_scale * log2 e``, or ``log2 e`` once the scale was applied by
    softcap / score_mod), ``softmax_scale``, and with softcap ``softcap`` and ``softcap_scale``
    (``softmax_scale / softcap``)."""
    exp_scale: object
    softmax_scale: object = None
    softcap: object = None
    softcap_scale: object = None


@attrs.frozen
class SoftmaxState:
    """Per thread: ``row_max[b][h]`` (the running maximum of the transformed scores, same in
    the four lanes of a quad) and ``row_sum[b][h]`` (this thread's partial sum of P)."""
    row_max: list
    row_sum: list

    def carry(self) -> list:
        return [x for blk in self.row_max for x in blk] + [x for blk in self.row_sum for x in blk]

    @classmethod
    def from_carry(cls, values, m_blocks: int) -> "SoftmaxState":
        n = m_blocks * ROW_HALVES
        vals = list(values)

        def split(xs):
            return [xs[b * ROW_HALVES:(b + 1) * ROW_HALVES] for b in range(m_blocks)]
        return cls(split(vals[:n]), split(vals[n:2 * n]))


class OnlineSoftmax:
    """See the module docstring. ``softcap``: the kernel applies FlashAttention's softcap;
    ``score_mod``: the kernel's hooks rewrite the scores (:meth:`scores` gets them as ``mod``)."""

    def __init__(self, softcap: bool = False, score_mod: bool = False):
        self.softcap, self.has_score_mod = bool(softcap), bool(score_mod)

    @property
    def scale_in_exponent(self) -> bool:
        """Whether ``softmax_scale`` stays folded into the exponent (no softcap, no score_mod):
        then the host passes ``exp_scale = softmax_scale * log2 e``, else ``log2 e``."""
        return not (self.softcap or self.has_score_mod)

    @staticmethod
    def initial(m_blocks: int) -> SoftmaxState:
        """m = -inf, l = 0 for every row of the thread."""
        return SoftmaxState([[F._f32(float("-inf")) for _ in range(ROW_HALVES)] for _ in range(m_blocks)],
                            [[F._f32(0.0) for _ in range(ROW_HALVES)] for _ in range(m_blocks)])

    def scores(self, s, params: SoftmaxParams, mod=None):
        """The transformed scores of accumulator ``s`` (see the module docstring); ``mod(x, b,
        i)``: the score_mod of register ``i`` of block ``b`` on its scaled score ``x`` (f32 IR),
        given when :attr:`has_score_mod`."""
        if self.softcap:
            cap, cs = params.softcap, params.softcap_scale
            s = s.map_regs(lambda x, b, i: cap * F.tanh_approx(x * cs))
        if self.has_score_mod:
            pre = (lambda x: x) if self.softcap else (lambda x: x * params.softmax_scale)
            s = s.map_regs(lambda x, b, i: mod(pre(x), b, i))
        return s

    @staticmethod
    def _safe(m):
        # a row with every key masked so far: its exponents use 0 (no -inf - -inf)
        return V.select(m.eq(float("-inf")), F._f32(0.0), m)

    def update(self, s, state: SoftmaxState, exp_scale) -> tuple:
        """``(P, new state, correction[b][h])`` for the transformed scores ``s`` (an
        ``Accumulator``); the caller multiplies O by the correction before adding ``P V``."""
        new_max, corr, scaled = [], [], []
        for b in range(s.m_blocks):
            mb, cb, sb = [], [], []
            for h in range(ROW_HALVES):
                mine = [s.get(b, i) for i in range(s.regs) if row_half(i) == h]
                m_old = state.row_max[b][h]
                m = quad_allreduce(_tree([m_old] + mine, F.fmax), F.fmax)
                ms = self._safe(m) * exp_scale
                mb.append(m)
                sb.append(ms)
                cb.append(F.exp2(F.fma(m_old, exp_scale, -ms)))
            new_max.append(mb)
            corr.append(cb)
            scaled.append(sb)
        p = s.map_regs(lambda x, b, i: F.exp2(F.fma(x, exp_scale, -scaled[b][row_half(i)])))
        sums = []
        for b in range(s.m_blocks):
            sums.append([state.row_sum[b][h] * corr[b][h]
                         + _tree([p.get(b, i) for i in range(p.regs) if row_half(i) == h], lambda x, y: x + y)
                         for h in range(ROW_HALVES)])
        return p, SoftmaxState(new_max, sums), corr

    @staticmethod
    def rescale(o, factors):
        """``o`` (an ``Accumulator``) with each row multiplied by ``factors[b][h]``."""
        return o.map_regs(lambda x, b, i: x * factors[b][row_half(i)])

    def finalize(self, state: SoftmaxState, exp_scale) -> tuple:
        """``(inv[b][h], lse[b][h])``: the factor O is multiplied by (``1 / l``, 0 for an
        empty row) and the natural log-sum-exp of each row (``+inf`` for an empty row). The
        row sums are reduced over the quad here (two ``shfl.sync.bfly`` per row)."""
        inv, lse = [], []
        for b, (mb, lb) in enumerate(zip(state.row_max, state.row_sum)):
            ib, eb = [], []
            for m, part in zip(mb, lb):
                total = quad_allreduce(part, lambda x, y: x + y)
                empty = total.eq(0.0)
                ib.append(V.select(empty, F._f32(0.0), F.rcp_approx(total)))
                val = (F.fma(m, exp_scale, F.log2_approx(total))) * LN2
                eb.append(V.select(empty, F._f32(float("inf")), val))
            inv.append(ib)
            lse.append(eb)
        return inv, lse


__all__ = ["OnlineSoftmax", "SoftmaxParams", "SoftmaxState", "LN2"]
