"""The epilogue of an attention forward: ``O / l`` rounded to the input type and stored to global
memory, and the log-sum-exp (f32) of each query row.

Two ways to store O (FlashAttention's layouts: dense (batch, seqlen_q, heads, head_dim_v), varlen
(total_q, heads, head_dim_v)):

* ``tma=True`` (dense inputs; FlashAttention-3's epilogue): each MMA warpgroup writes its
  ``64 x head_dim_v`` rows of ``O / l`` into 128-byte-swizzled shared tiles with
  :func:`~cutedsl.atom.operand_store.store_operand` (``stmatrix``; the layout of a K-major WGMMA A
  tile, which is also a TMA box's), ``fence.proxy.async``, a named barrier over the warpgroup, and
  one thread TMA-stores one ``64 x 64`` box per 64 columns (PTX ISA 9.7.9.27
  ``cp.async.bulk.tensor``, shared -> global); the tensor map (dimensions (batch, heads,
  seqlen_q, d), like Q's) clips rows past ``seqlen_q``. The tiles are the warpgroup's own rows of
  Q's shared buffer: every WGMMA that read them has completed (``wgmma.wait_group``) and Q is
  loaded once per CTA, so no extra shared memory is needed. The storing thread waits for the
  stores to have read shared memory (``cp.async.bulk.wait_group.read 0``) before its CTA exits.
* ``tma=False`` (packed sequences, varlen): guarded global stores (``st.global.b32`` of an
  f16x2/bf16x2 pair of adjacent columns, the pairs an accumulator fragment holds, PTX ISA
  9.7.15.5.1): a tensor map has one extent per dimension, so a TMA box would write rows of the
  next sequence of the packed batch; per-sequence tensor maps would cost one encoding per
  sequence on the host. Rows past the sequence are never written.

LSE (dense (batch, heads, seqlen_q), varlen (heads, total_q)) is stored by one lane per quad (the
four lanes sharing a row), guarded by the sequence length.
"""
from __future__ import annotations

import attrs

from ..atom.fragment_rows import row_half
from ..atom.mma_traits import ATOM_M, mma_traits
from ..atom.stmatrix import pack_b16x2
from ..atom.wgmma import FRAG_COLS, FRAG_PAIR, FRAG_QUAD, WgmmaFragment
from ..compiler.artifact import TensorMapSpec
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")

#: named barriers of the TMA epilogue: ids EPILOGUE_BARRIER + warpgroup (the main loop's ping-pong
#: uses 1 and 2)
EPILOGUE_BARRIER = 3


@attrs.frozen
class EpilogueRows:
    """Where one work unit's rows go, IR values: ``o_row0`` (the global row, in units of
    ``heads`` rows of O, of the sequence's row 0: ``batch * seqlen_q`` dense, ``cu_seqlens_q[b]``
    varlen), ``lse_base`` (element of LSE of the head's sequence row 0), ``head``, ``heads``,
    ``row0`` (the warpgroup's first row within the sequence), ``seqlen_q``; for the TMA store
    ``batch`` and the warpgroup index ``wg`` (its shared tiles)."""
    o_row0: object
    lse_base: object
    head: object
    heads: object
    row0: object
    seqlen_q: object
    batch: object = None
    wg: object = None


class AttentionEpilogue:
    """``head_dim_v`` columns of ``dtype`` (f16/bf16) per O row; ``warpgroup_threads``; ``tma``:
    store O by TMA through shared memory (dense inputs), else by guarded global stores;
    ``padded``: the accumulator's columns (``head_dim_v`` rounded up to whole 64-column k-tiles:
    the columns past ``head_dim_v`` are clipped by the tensor map or skipped by the guard)."""

    def __init__(self, head_dim_v: int, dtype: str, warpgroup_threads: int, tma: bool = False,
                 padded: int | None = None):
        self.dv, self.dtype, self.wg_threads, self.tma = head_dim_v, dtype, warpgroup_threads, bool(tma)
        self.padded = padded or head_dim_v
        self.traits = mma_traits(dtype)

    def tensor_maps(self) -> list:
        """O's tensor map (TMA store only): boxes of ``64 rows x 64`` columns of one (batch, head)."""
        t = self.traits
        return [TensorMapSpec("o", t.tma_dtype, (1, 1, ATOM_M, t.k_box), swizzle=t.swizzle)] if self.tma else []

    def store(self, o, inv, lse, rows: EpilogueRows, o_arg, lse_ptr, smem=None) -> None:
        """Store ``o`` (an ``Accumulator``) times ``inv[b][h]`` and ``lse[b][h]`` for this
        warpgroup's rows; ``o_arg`` / ``lse_ptr`` are the kernel's O (tensor map with
        :attr:`tma`, else pointer) and LSE pointer parameters; ``smem``: the bound plan holding
        Q's buffer ``"q"`` (TMA store)."""
        t = cir.thread_idx() % self.wg_threads
        r0, c0 = WgmmaFragment.thread_base(t)
        r0, c0 = V.i32(r0), V.i32(c0)
        o = o.map_regs(lambda x, b, i: x * inv[b][row_half(i)])
        if self.tma:
            self._store_tma(o, rows, o_arg, smem, t)
        else:
            self._store_global(o, rows, o_arg, r0, c0)
        lse_out = cir.GlobalPtr(lse_ptr, "f32")
        for b in range(o.m_blocks):
            for h in range(len(lse[b])):
                dr, _ = WgmmaFragment.offset(b, FRAG_PAIR * h)
                row = rows.row0 + r0 + dr
                with cir.If((row < rows.seqlen_q) & (t % FRAG_QUAD).eq(0)):
                    lse_out.store(cir.i64(rows.lse_base + row), lse[b][h])

    def _store_global(self, o, rows: EpilogueRows, o_ptr, r0, c0) -> None:
        out = cir.GlobalPtr(o_ptr, "u32")         # one f16x2 / bf16x2 pair per store
        row_stride = cir.i64(rows.heads) * self.dv
        for b in range(o.m_blocks):
            for i in range(0, o.regs, FRAG_PAIR):
                dr, dc = WgmmaFragment.offset(b, i)
                row = rows.row0 + r0 + dr
                pair = pack_b16x2(o.get(b, i), o.get(b, i + 1), self.dtype)
                ok = row < rows.seqlen_q
                if self.padded > self.dv and dc + FRAG_COLS > self.dv:     # may be a padding column
                    ok = ok & (c0 + dc < self.dv)
                with cir.If(ok):
                    off = (cir.i64(rows.o_row0 + row) * row_stride + cir.i64(rows.head) * self.dv
                           + cir.i64(c0 + dc))
                    out.store(off // FRAG_PAIR, pair)

    def _tiles(self, smem, wg) -> list:
        tr = self.traits
        return [smem["q"].tile(kt).sub(wg * tr.tile_bytes(ATOM_M), (ATOM_M, tr.k_box))
                for kt in range(self.padded // tr.k_tile)]

    def _store_tma(self, o, rows: EpilogueRows, o_map, smem, t) -> None:
        from ..atom.operand_store import store_operand
        from ..atom.sync import NamedBarrier, fence_proxy_async
        from ..atom.tma import TmaCopy, bulk_commit_group, bulk_wait_group
        tr = self.traits
        tiles = self._tiles(smem, rows.wg)
        fence_proxy_async()            # the WGMMAs (async proxy) read these tiles last: order our writes after
        for kt, tile in enumerate(tiles):
            store_operand(o, tile, "A", col0=kt * tr.k_tile, warpgroup_thread=t)
        fence_proxy_async()            # the writes, before the TMA (async proxy) reads them
        NamedBarrier(EPILOGUE_BARRIER + rows.wg, self.wg_threads).sync()
        tma = TmaCopy(self.tensor_maps()[0], o_map)
        with cir.If(t.eq(0) & (rows.row0 < rows.seqlen_q)):
            for kt, tile in enumerate(tiles):
                tma.store(tile, (rows.batch, rows.head, rows.row0, kt * tr.k_box))
            bulk_commit_group()
            bulk_wait_group(0, read=True)


__all__ = ["AttentionEpilogue", "EpilogueRows", "EPILOGUE_BARRIER"]
