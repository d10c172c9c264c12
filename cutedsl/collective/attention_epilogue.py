"""The epilogue of an attention forward: ``O / l`` rounded to the input type and stored to global
memory, and the log-sum-exp (f32) of each query row.

Stores are guarded global stores (``st.global.b32`` of an f16x2/bf16x2 pair of adjacent
columns, the pairs a WGMMA accumulator fragment holds; PTX ISA 9.7.15.5.1): rows past the
sequence are never written, in dense and in packed (varlen) layouts alike -- a TMA store would
clip a dense batch at its ``seqlen_q`` but write a varlen box into the next sequence.

Layouts (FlashAttention's): O dense (batch, seqlen_q, heads, head_dim_v), varlen (total_q,
heads, head_dim_v); LSE dense (batch, heads, seqlen_q), varlen (heads, total_q). One lane per
quad (the four lanes sharing a row) stores a row's LSE.
"""
from __future__ import annotations

import attrs

from ..atom.fragment_rows import row_half
from ..atom.stmatrix import pack_b16x2
from ..atom.wgmma import FRAG_PAIR, FRAG_QUAD, WgmmaFragment
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")


@attrs.frozen
class EpilogueRows:
    """Where one work unit's rows go, IR values: ``o_row0`` (the global row, in units of
    ``heads`` rows of O, of the sequence's row 0: ``batch * seqlen_q`` dense, ``cu_seqlens_q[b]``
    varlen), ``lse_base`` (element of LSE of the head's sequence row 0), ``head``, ``heads``,
    ``row0`` (the warpgroup's first row within the sequence), ``seqlen_q``."""
    o_row0: object
    lse_base: object
    head: object
    heads: object
    row0: object
    seqlen_q: object


class AttentionEpilogue:
    """``head_dim_v`` columns of ``dtype`` (f16/bf16) per O row; ``warpgroup_threads``."""

    def __init__(self, head_dim_v: int, dtype: str, warpgroup_threads: int):
        self.dv, self.dtype, self.wg_threads = head_dim_v, dtype, warpgroup_threads

    def store(self, o, inv, lse, rows: EpilogueRows, o_ptr, lse_ptr) -> None:
        """Store ``o`` (an ``Accumulator``) times ``inv[b][h]`` and ``lse[b][h]`` for this
        warpgroup's rows; ``o_ptr`` / ``lse_ptr`` are the kernel's pointer parameters."""
        t = cir.thread_idx() % self.wg_threads
        r0, c0 = WgmmaFragment.thread_base(t)
        r0, c0 = V.i32(r0), V.i32(c0)
        out = cir.GlobalPtr(o_ptr, "u32")         # one f16x2 / bf16x2 pair per store
        lse_out = cir.GlobalPtr(lse_ptr, "f32")
        row_stride = cir.i64(rows.heads) * self.dv
        for b in range(o.m_blocks):
            for i in range(0, o.regs, FRAG_PAIR):
                dr, dc = WgmmaFragment.offset(b, i)
                row = rows.row0 + r0 + dr
                f = inv[b][row_half(i)]
                pair = pack_b16x2(o.get(b, i) * f, o.get(b, i + 1) * f, self.dtype)
                with cir.If(row < rows.seqlen_q):
                    off = (cir.i64(rows.o_row0 + row) * row_stride + cir.i64(rows.head) * self.dv
                           + cir.i64(c0 + dc))
                    out.store(off // FRAG_PAIR, pair)
            for h in range(len(lse[b])):
                dr, _ = WgmmaFragment.offset(b, FRAG_PAIR * h)
                row = rows.row0 + r0 + dr
                with cir.If((row < rows.seqlen_q) & (t % FRAG_QUAD).eq(0)):
                    lse_out.store(cir.i64(rows.lse_base + row), lse[b][h])


__all__ = ["AttentionEpilogue", "EpilogueRows"]
