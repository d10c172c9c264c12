"""The epilogue side of a tcgen05 kernel: the accumulator in tensor memory handed to any
:class:`~cutedsl.collective.epilogue.Epilogue` column chunk by column chunk.

Each chunk is one ``tcgen05.ld.32x32b`` (+ ``wait::ld``) per warp of its lane quarter into a
:class:`~cutedsl.atom.tmem_fragment.TmemFragment` -- the accumulator interface epilogues and fused
nodes read -- then stored. :data:`EPILOGUE_COLUMNS` columns per chunk: with 32, ptxas 13.5
spills one value around ``tcgen05.dealloc`` at 72 registers; 16 and 64 do not.
"""
from __future__ import annotations

from ..atom.tmem_fragment import TmemFragment, lane_columns
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")
ir, llvm, vector = lazy("mlir.ir"), lazy("mlir.dialects.llvm"), lazy("mlir.dialects.vector")

EPILOGUE_COLUMNS = 16       #: accumulator columns per tcgen05.ld (registers per thread per chunk)
EPILOGUE_THREADS = 128      #: the four warps that read the accumulator's lane quarters
VEC = 4                     #: f32 per workspace access (16 bytes)


def store_accumulator(epilogue, taddr, tile_n: int, ctx, after_last_load=None, transform=None,
                      split: str | None = None) -> None:
    """IR, by four consecutive warps: store the ``128 x tile_n`` f32 accumulator at TMEM address
    ``taddr`` (i32) through ``epilogue`` with context ``ctx``. ``after_last_load()`` runs once
    the last chunk is in registers (e.g. release the buffer to the MMAs before its store);
    ``transform(value, row, col)`` is applied to every element first. ``split``: a 64-row
    accumulator whose second ``tile_n / 2`` columns lie in other lanes
    (:data:`~cutedsl.atom.tmem_fragment.SPLITS`). An epilogue that
    stores from tensor memory itself (``store_tmem``, e.g. the TMA-store one) is handed the
    whole job (``ValueError`` unless it was configured with the same ``split``)."""
    if hasattr(epilogue, "store_tmem"):
        have = getattr(epilogue, "split", None)
        if have != split:
            raise ValueError(f"{type(epilogue).__name__} was configured for split={have!r}, the accumulator has "
                             f"split={split!r}")
        return epilogue.store_tmem(taddr, tile_n, ctx, after_last_load, transform)
    width = lane_columns(tile_n, split)
    cols = min(EPILOGUE_COLUMNS, width)
    for c0 in range(0, width, cols):
        frag = TmemFragment.load(taddr, c0, cols, split, width)
        if transform is not None:
            frag = frag.lazy_map(transform)
        if after_last_load is not None and c0 + cols == width:
            after_last_load()
        epilogue.store(frag, ctx)


def store_partial(epilogue, taddr, tile_n: int, ctx, after_last_load, reduction, wt, barrier_id: int) -> None:
    """IR, by the four epilogue warps: the stream-K / split-K piece ``wt`` of a tile whose
    ``128 x tile_n`` accumulator is at TMEM address ``taddr`` -- the fix-up of
    :class:`~cutedsl.collective.stream_k.PartialTileReduction` on tensor-memory rows. A piece
    after the tile's first waits until the tile's workspace slot holds the pieces before it
    (its thread 0 spins on the slot's semaphore, then named barrier ``barrier_id``) and adds
    them chunk by chunk as it loads; the piece ending the tile stores the sum through
    ``epilogue`` (one with ``store_tmem``, the TMA-store one, loads the chunks itself and adds
    them through its ``chunk`` hook) and resets the semaphore; any other writes it to the slot (each thread its
    row, 16-byte vectors), then barrier and a release of the semaphore = its last k-tile. The
    accumulator is released after the last chunk's load either way (``after_last_load``)."""
    from ..atom import NamedBarrier, wait_flag
    from ..atom.tmem_fragment import quarter_row
    kb, ke = wt.k_first, wt.k_first + wt.k_count
    prev, final = cir.u32(kb).ne(0), cir.u32(ke).eq(wt.k_total)
    leader = (cir.thread_idx() % EPILOGUE_THREADS).eq(0)
    bar = NamedBarrier(barrier_id, EPILOGUE_THREADS)
    slot = cir.u32(wt.slot)
    locks, ws = cir.GlobalPtr(ctx.args.locks, "u32"), cir.GlobalPtr(ctx.args.workspace, "f32")
    row = cir.i64(slot) * (reduction.tile_m * tile_n) + cir.i64(quarter_row()) * tile_n
    with cir.If(prev):                  # the pieces before this one are in the slot
        with cir.If(leader):
            wait_flag(locks, slot, cir.u32(kb))
        bar.sync()
    cols = min(EPILOGUE_COLUMNS, tile_n)
    v4 = ir.VectorType.get([VEC], ir.F32Type.get())

    def chunks(store):
        for c0 in range(0, tile_n, cols):
            frag = TmemFragment.load(taddr, c0, cols)
            if after_last_load is not None and c0 + cols == tile_n:
                after_last_load()
            frag = _add_partial(frag, prev, ws, row + c0)
            if store:
                epilogue.store(frag, ctx)
            else:
                for q in range(cols // VEC):
                    ws.store_vec(row + c0 + q * VEC, vector.from_elements(v4, frag.values[q * VEC:(q + 1) * VEC]))
    with cir.If(final):
        if hasattr(epilogue, "store_tmem"):     # an epilogue that loads the chunks itself (TMA store)
            epilogue.store_tmem(taddr, tile_n, ctx, after_last_load,
                                chunk=lambda frag, c0: _add_partial(frag, prev, ws, row + c0))
        else:
            chunks(True)
        with cir.If(leader & prev):
            locks.store(slot, cir.u32(0))    # ready for the next launch
    with cir.If(~final):
        chunks(False)
        bar.sync()
        with cir.If(leader):
            locks.store_release(slot, cir.u32(ke))


def _add_partial(frag, prev, ws, index):
    """``frag`` plus the workspace's ``frag.regs`` values at element ``index`` (i64) where
    ``prev`` holds, else ``frag`` itself."""
    br = cir.If(prev, results=[v.type for v in frag.values])
    with br.then_():
        out = []
        for q in range(frag.regs // VEC):
            vec = ws.load_vec(index + q * VEC, VEC)
            out += [cir.Scalar(llvm.extractelement(vec, cir.i32(x))) + frag.values[q * VEC + x] for x in range(VEC)]
        br.yield_(*out)
    with br.else_():
        br.yield_(*frag.values)
    return TmemFragment([cir.Scalar(v) for v in br.results], frag.col0)


__all__ = ["store_accumulator", "store_partial", "EPILOGUE_COLUMNS"]
