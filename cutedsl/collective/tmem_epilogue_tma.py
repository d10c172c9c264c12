"""The TMA-store epilogue of a tcgen05 kernel (CUTLASS's sm100 TMA epilogue): tensor memory ->
registers -> 128-byte-swizzled shared sub-tiles -> TMA store, each epilogue warp on its own.

See :class:`TmemTmaStoreEpilogue`. The sm_90 variant (:mod:`.epilogue_tma`) stages a
warpgroup's wgmma fragments; here every thread holds one accumulator row (``tcgen05.ld.32x32b``:
lane ``l`` of warp ``w`` row ``32 (w % 4) + l``), so a warp owns 32 whole rows and stores them
without waiting for the others.
"""
from __future__ import annotations

import functools

from ..atom.cvt import FP8
from ..atom.tcgen05 import QUARTER_LANES, QUARTERS
from ..atom.tmem_fragment import TmemFragment, check_split, lane_columns
from ..atom.tma import TmaCopy, bulk_commit_group, bulk_wait_group
from ..compiler.artifact import TensorMapSpec
from ..ir._lazy import lazy
from .epilogue_tma import TmaStoreEpilogue
from .tmem_epilogue import EPILOGUE_COLUMNS

ir, llvm, vector, nvvm = lazy("mlir.ir"), lazy("mlir.dialects.llvm"), lazy("mlir.dialects.vector"), \
    lazy("mlir.dialects.nvvm")
cir = lazy("cutedsl.ir")

FULL_WARP = 0xFFFFFFFF
VECTOR_WORDS = 4            #: 32-bit words of one st.shared.v4 (one 16-byte swizzle chunk)


class TmemTmaStoreEpilogue(TmaStoreEpilogue):
    """D from tensor memory through shared memory and TMA stores, warp by warp.

    Each of the four epilogue warps stores its lane quarter (32 rows) of the tile in sub-tiles
    of ``32 x epi_n`` (one 128-byte swizzle row: 32 f32 or 64 f16/bf16 columns): per column
    chunk (:data:`~cutedsl.collective.tmem_epilogue.EPILOGUE_COLUMNS` columns, one
    ``tcgen05.ld``) every thread writes its row's values with ``st.shared.v4`` into the
    128-byte-swizzled buffer (chunk ``c ^ (row % 8)``: the 8 rows of a group hit 8 different
    16-byte chunks), and after the sub-tile's last chunk ``fence.proxy.async``,
    ``bar.warp.sync`` and lane 0 issues the TMA store (the tensor map clips rows >= M and
    columns >= N) as one bulk group. Sub-tiles rotate over ``ring`` buffers per warp; before
    writing a buffer lane 0 waits (``cp.async.bulk.wait_group.read ring - 1``) until the store
    that last used it has read it. Fused nodes (bias, activation, scaling, ``visit``) apply to
    each element as they do everywhere, except ``beta * C`` (its TMA source is the sm_90
    epilogue's): ``ValueError``. Output f32, f16 or bf16. Options: ``buffers`` (1..8, per
    warp), ``defer_tail`` (leave the final wait to the kernel: :meth:`store_tail`), ``split``
    (a 64-row accumulator, :data:`~cutedsl.atom.tmem_fragment.SPLITS`: ``"warp"`` -- a CTA
    pair's M = 128, warp ``q`` stores rows ``32 (q % 2)..`` of column half ``q // 2``;
    ``"lane"`` -- one CTA's M = 64, warp ``q`` holds rows ``16 q..`` of both column halves, staged
    as the sub-tile's two 16-row halves and stored as two boxes).
    """

    SUB_M = QUARTER_LANES           #: rows per sub-tile: one warp's lane quarter
    OPTIONS = ("buffers", "defer_tail", "split")
    split = None
    WARPS = QUARTERS                #: the epilogue warps (one lane quarter each)

    def __init__(self, tile_m: int, tile_n: int, out_dtype: str = "f32", *, buffers: int = 2,
                 defer_tail: bool = False, **_ignored):
        if out_dtype in FP8:
            raise ValueError(f"the sm_100a TMA-store epilogue writes f32, f16 or bf16, not {out_dtype}")
        super().__init__(tile_m, tile_n, out_dtype, buffers=buffers, defer_tail=defer_tail)

    @property
    def box_m(self) -> int:
        """Rows of one TMA store: the sub-tile's, or half of them (``split="lane"``)."""
        return self.SUB_M // 2 if self.split == "lane" else self.SUB_M

    @classmethod
    def split_reason(cls, tile_n: int, out_dtype: str, split) -> str | None:
        """Why a ``tile_n``-column accumulator of layout ``split`` cannot be stored in this
        epilogue's ``epi_n``-column sub-tiles of ``out_dtype`` (a 64-row one walks ``tile_n / 2``
        columns per warp), or None."""
        from ..dtypes import dtype as _dtype
        width, epi_n = lane_columns(tile_n, split), cls.ROW_BYTES // _dtype(out_dtype).nbytes
        if width % epi_n:
            return (f"with BLOCK_M 64 the sm_100a TMA-store epilogue stores BLOCK_N / 2 = {width} columns per warp in "
                    f"{epi_n}-column sub-tiles of {out_dtype}: use BLOCK_N >= {2 * epi_n} or epilogue='global'")
        return None

    def configure(self, **opts):
        super().configure(**{k: v for k, v in opts.items() if k != "split"})
        if "split" in opts:
            check_split(opts["split"])
            why = self.split_reason(self.tile_n, self.out_dtype, opts["split"])
            if why:
                raise ValueError(why)
            self.split = opts["split"]
        return self

    @property
    def ring(self) -> int:
        """Sub-tile buffers per warp: the largest count <= ``buffers`` dividing the sub-tiles
        (``epi_n`` of the columns a warp walks) it stores per tile."""
        subs = lane_columns(self.tile_n, self.split) // self.epi_n
        return max(d for d in range(1, self.buffers + 1) if subs % d == 0)

    @property
    def smem_bytes(self) -> int:
        return self.WARPS * self.ring * self.sub_tile_bytes

    def tensor_maps(self) -> list:
        lead = (1,) if self.batched else ()
        return [TensorMapSpec("d", self.out_dtype, lead + (self.box_m, self.epi_n), swizzle=self.ROW_BYTES)]

    def source(self):
        from .fusion import AddC
        if any(isinstance(nd, AddC) for nd in self.fusion):
            raise ValueError("beta * C (AddC) is not built for the sm_100a TMA-store epilogue: use "
                             "epilogue='global'")
        return None

    def plan(self, plan) -> None:
        self.source()
        plan.buffer("epilogue", (self.SUB_M, self.epi_n), self.out_dtype, self.WARPS * self.ring,
                    swizzle=self.ROW_BYTES)

    def store(self, acc, ctx) -> None:
        raise TypeError("TmemTmaStoreEpilogue stores from tensor memory: store_tmem(taddr, tile_n, ctx)")

    # -- IR ------------------------------------------------------------------------
    def store_tmem(self, taddr, tile_n: int, ctx, after_last_load=None, transform=None, chunk=None) -> None:
        """IR, by the four epilogue warps: load the ``128 x tile_n`` f32 accumulator at TMEM
        address ``taddr`` chunk by chunk and store it (as
        :func:`~cutedsl.collective.tmem_epilogue.store_accumulator`, whose arguments these are;
        ``chunk(fragment, first column)`` -> fragment runs on each loaded chunk first, e.g. the
        stream-K fix-up adding the tile's other pieces)."""
        from ..atom.sync import fence_proxy_async
        tma = TmaCopy(self.tensor_maps()[0], ctx.args.d)
        t = cir.thread_idx()
        lane = t % self.arch.warp_threads
        quarter = (t // self.arch.warp_threads) % self.WARPS
        leader = lane.eq(0)
        row_off = lane * self.ROW_BYTES                      # this thread's row in the sub-tile
        x = (lane % 8) * self.CHUNK                          # its swizzle: chunk ^ (row % 8)
        chunk_cols = min(EPILOGUE_COLUMNS, self.epi_n)
        ring, buf = self.ring, ctx.smem["epilogue"]
        width = lane_columns(tile_n, self.split)
        if self.split and chunk is not None:
            raise ValueError("the stream-K fix-up is built for 128-row accumulators")
        for s in range(width // self.epi_n):
            slot = quarter * ring + (s % ring)
            with cir.If(leader):            # the store that used this buffer last has read it
                bulk_wait_group(ring - 1, read=True)
            nvvm.bar_warp_sync(cir.u32(FULL_WARP))
            addr = buf.address(slot)
            for c0 in range(s * self.epi_n, (s + 1) * self.epi_n, chunk_cols):
                frag = TmemFragment.load(taddr, c0, chunk_cols, self.split, width)
                if chunk is not None:
                    frag = chunk(frag, c0)
                if transform is not None:
                    frag = frag.lazy_map(transform)
                frag = self._visit_all(frag, ctx, frag.layout.thread_base())
                if after_last_load is not None and c0 + chunk_cols == width:
                    after_last_load()
                self._write_row(frag, c0 % self.epi_n, addr, row_off, x)
            fence_proxy_async()             # generic smem writes -> visible to the TMA (async proxy)
            nvvm.bar_warp_sync(cir.u32(FULL_WARP))
            with cir.If(leader):
                lead = (ctx.l,) if self.batched else ()
                for src, row, col in self._boxes(buf.tile(slot), quarter, width):
                    tma.store(src, lead + (ctx.m0 + row, ctx.n0 + col + s * self.epi_n))
                bulk_commit_group()
        if not self.defer_tail:
            self.store_tail()

    def _boxes(self, tile, quarter, width) -> list:
        """``(shared source, first row, first column)`` in the tile of each TMA store of warp
        ``quarter``'s sub-tile (see the class docstring's ``split``)."""
        if self.split == "warp":
            return [(tile, quarter % 2 * self.SUB_M, quarter // 2 * width)]
        if self.split == "lane":                # rows 0..15: the first column half, 16..31: the second
            half = self.box_m
            shape = (half, self.epi_n)
            return [(tile.sub(0, shape), quarter * half, 0),
                    (tile.sub(half * self.ROW_BYTES, shape), quarter * half, width)]
        return [(tile, quarter * self.SUB_M, 0)]

    def store_tail(self) -> None:
        """Lane 0 of each epilogue warp waits until its TMA stores have read shared memory."""
        with cir.If((cir.thread_idx() % self.arch.warp_threads).eq(0)):
            bulk_wait_group(0, read=True)

    def _write_row(self, frag, col, addr, row_off, x) -> None:
        """This thread's ``frag.regs`` values (columns ``col ..`` of the sub-tile, converted to
        the output type) into its row: one ``st.shared.v4.b32`` per 16-byte chunk."""
        from ..atom.stmatrix import pack_b16x2
        esize = self.ROW_BYTES // self.epi_n
        per_chunk = self.CHUNK // esize
        ptr_t = ir.Type.parse("!llvm.ptr<3>")
        v4 = ir.VectorType.get([VECTOR_WORDS], ir.IntegerType.get_signless(32))
        for j in range(frag.regs // per_chunk):
            i0 = j * per_chunk
            if esize == 4:
                words = [llvm.bitcast(ir.IntegerType.get_signless(32), frag.get(0, i0 + k)) for k in range(VECTOR_WORDS)]
            else:
                words = [pack_b16x2(frag.get(0, i0 + 2 * k), frag.get(0, i0 + 2 * k + 1), self.out_dtype)
                         for k in range(VECTOR_WORDS)]
            chunk = (col * esize) // self.CHUNK + j
            off = row_off + (x ^ (chunk * self.CHUNK))
            a = addr + cir.i64(off)
            llvm.store(vector.from_elements(v4, words), llvm.inttoptr(ptr_t, cir.i32(a)), alignment=16)


def for_tcgen05(epilogue_cls):
    """The epilogue class a tcgen05 kernel builds for ``epilogue_cls``: the TMA-store epilogue
    as :class:`TmemTmaStoreEpilogue`; a user subclass of the sm_90 :class:`TmaStoreEpilogue`
    (the README's recipe: ``visit`` / ``extra_params`` hooks) rebased onto it, so one subclass
    serves both architectures; any other class as it is. A subclass that overrides what the
    sm_90 store is made of (``store``, ``plan``, its ``_write_*`` steps, ...) cannot be rebased:
    ``ConfigError`` naming those members, with the fix (subclass ``TmemTmaStoreEpilogue``)."""
    if epilogue_cls is TmaStoreEpilogue:
        return TmemTmaStoreEpilogue
    if issubclass(epilogue_cls, TmaStoreEpilogue) and not issubclass(epilogue_cls, TmemTmaStoreEpilogue):
        return _rebased(epilogue_cls)
    return epilogue_cls


@functools.cache
def _rebased(cls):
    """``cls`` (a user subclass of the sm_90 TMA-store epilogue) with the tcgen05 store under
    its hooks: the class ``(cls, TmemTmaStoreEpilogue)`` under ``cls``'s own name and module (the
    kernel cache keys on ``cls``, which stays in the MRO). Cached, so every build gets the same
    class."""
    from ..errors import ConfigError
    internal = set(vars(TmaStoreEpilogue)) | set(vars(TmemTmaStoreEpilogue))
    own = {name for k in cls.__mro__[:cls.__mro__.index(TmaStoreEpilogue)]
           if not k.__module__.startswith("cutedsl.") for name in vars(k)}
    clash = sorted(n for n in own & internal if not (n.startswith("__") and n.endswith("__")))
    if clash:
        raise ConfigError(f"{cls.__name__} overrides {', '.join(clash)} of the sm_90 TmaStoreEpilogue, which the "
                          f"sm_100a kernel replaces (it stores from tensor memory): subclass "
                          f"cutedsl.collective.TmemTmaStoreEpilogue for arch='sm_100a', or override only visit / "
                          f"extra_params")
    return type(cls.__name__, (cls, TmemTmaStoreEpilogue),
                {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})


__all__ = ["TmemTmaStoreEpilogue", "for_tcgen05"]
