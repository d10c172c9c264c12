"""The epilogue of a FlashAttention-4-style forward: O from tensor memory, one thread per row.

Thread ``t`` of the storing warpgroup (the correction warpgroup, as FlashAttention-4's) owns query row
``row0 + t`` (TMEM lane ``t``): it loads its
row of O in :data:`CHUNK`-column pieces (``tcgen05.ld.32x32b`` + ``wait::ld``), multiplies by
``1 / l``, rounds pairs to f16/bf16 (``cvt.rn.*x2.f32``) and writes them with 16-byte global
stores (``st.global.v4.b32``: 8 elements; a row of O is ``head_dim`` contiguous elements in
FlashAttention's layouts), then its LSE (f32). Rows past ``seqlen_q`` store nothing (dense and
packed layouts alike, as :class:`~cutedsl.collective.attention_epilogue.AttentionEpilogue`). A unit
with no KV block (``count = 0``) stores O = 0 without reading tensor memory the MMAs never wrote.
"""
from __future__ import annotations

from ..atom.stmatrix import pack_b16x2
from ..atom.tmem_fragment import TmemFragment
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")
ir, vector = lazy("mlir.ir"), lazy("mlir.dialects.vector")

CHUNK = 32                  #: O columns per tcgen05.ld
VEC_WORDS = 4               #: 32-bit words per global store (16 bytes)


class TmemAttentionEpilogue:
    """``head_dim`` columns of ``dtype`` (f16/bf16) per O row; ``threads`` (one per row)."""

    def __init__(self, head_dim: int, dtype: str, threads: int = 128):
        self.dv, self.dtype, self.threads = head_dim, dtype, threads

    def store(self, o_addr, count, inv, lse, rows, o_ptr, lse_ptr) -> None:
        """Store this thread's row: O at TMEM ``o_addr`` (i32) times ``inv``, and ``lse``;
        ``rows``: an :class:`~cutedsl.collective.attention_epilogue.EpilogueRows` (``row0`` =
        the unit's first row); ``count``: the unit's KV blocks (IR i32)."""
        t = cir.i32(cir.thread_idx() % self.threads)
        row = rows.row0 + t
        out = cir.GlobalPtr(o_ptr, "u32")
        i32 = ir.IntegerType.get_signless(32)
        base = (cir.i64(rows.o_row0 + row) * cir.i64(rows.heads) + cir.i64(rows.head)) * (self.dv // 2)
        live = row < rows.seqlen_q
        for c0 in range(0, self.dv, CHUNK):
            br = cir.If(count > 0, results=["i32"] * (CHUNK // 2))
            with br.then_():
                frag = TmemFragment.load(o_addr, c0, CHUNK)
                br.yield_(*[pack_b16x2(frag.values[i] * inv, frag.values[i + 1] * inv, self.dtype)
                            for i in range(0, CHUNK, 2)])
            with br.else_():
                br.yield_(*[V.i32(0)] * (CHUNK // 2))
            words = list(br.results)
            with cir.If(live):
                for w in range(0, CHUNK // 2, VEC_WORDS):
                    vec = vector.from_elements(ir.VectorType.get([VEC_WORDS], i32), words[w:w + VEC_WORDS])
                    out.store_vec(base + (c0 // 2 + w), vec)
        with cir.If(live):
            cir.GlobalPtr(lse_ptr, "f32").store(cir.i64(rows.lse_base + row), lse)


__all__ = ["TmemAttentionEpilogue", "CHUNK"]
