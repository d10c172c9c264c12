"""The epilogue side of a tcgen05 kernel: the accumulator in tensor memory handed to any
:class:`~cutedsl.collective.epilogue.Epilogue` column chunk by column chunk.

Each chunk is one ``tcgen05.ld.32x32b`` (+ ``wait::ld``) per warp of its lane quarter into a
:class:`~cutedsl.atom.tcgen05.TmemFragment` -- the accumulator interface epilogues and fused
nodes read -- then stored. :data:`EPILOGUE_COLUMNS` columns per chunk: with 32, ptxas 13.5
spills one value around ``tcgen05.dealloc`` at 72 registers; 16 and 64 do not.
"""
from __future__ import annotations

from ..atom.tcgen05 import TmemFragment

EPILOGUE_COLUMNS = 16       #: accumulator columns per tcgen05.ld (registers per thread per chunk)


def store_accumulator(epilogue, taddr, tile_n: int, ctx, after_last_load=None, transform=None) -> None:
    """IR, by four consecutive warps: store the ``128 x tile_n`` f32 accumulator at TMEM address
    ``taddr`` (i32) through ``epilogue`` with context ``ctx``. ``after_last_load()`` runs once
    the last chunk is in registers (e.g. release the buffer to the MMAs before its store);
    ``transform(value, row, col)`` is applied to every element first. An epilogue that stores
    from tensor memory itself (``store_tmem``, e.g. the TMA-store one) is handed the whole job."""
    if hasattr(epilogue, "store_tmem"):
        return epilogue.store_tmem(taddr, tile_n, ctx, after_last_load, transform)
    cols = min(EPILOGUE_COLUMNS, tile_n)
    for c0 in range(0, tile_n, cols):
        frag = TmemFragment.load(taddr, c0, cols)
        if transform is not None:
            frag = frag.lazy_map(transform)
        if after_last_load is not None and c0 + cols == tile_n:
            after_last_load()
        epilogue.store(frag, ctx)


__all__ = ["store_accumulator", "EPILOGUE_COLUMNS"]
