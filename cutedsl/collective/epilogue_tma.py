"""The TMA-store epilogue (CUTLASS's sm90 TMA epilogue): registers -> 128-byte-swizzled shared
sub-tiles -> TMA store; see :class:`TmaStoreEpilogue`. Split from :mod:`.epilogue` (which
re-exports it) to keep each file readable in one go."""
from __future__ import annotations

import attrs

from ..arch import DEFAULT
from ..atom.cvt import FP8, pack_fp8x2
from ..atom.mma_traits import ATOM_M, CORE_ROWS, DEFAULT_SWIZZLE
from ..atom.tma import TmaCopy, bulk_commit_group, bulk_wait_group
from ..atom.wgmma import FRAG_COLS, FRAG_QUAD, FRAG_ROW_STEP, FRAG_WARP_ROWS
from ..compiler.artifact import ParamSpec as Param, TensorMapSpec
from ..dtypes import dtype as _dtype
from ..ir._lazy import lazy
from .epilogue import Epilogue, EpilogueContext

ir, llvm, vector = lazy("mlir.ir"), lazy("mlir.dialects.llvm"), lazy("mlir.dialects.vector")
cir = lazy("cutedsl.ir")


class TmaStoreEpilogue(Epilogue):
    """Registers -> swizzled shared-memory sub-tiles -> TMA store (CUTLASS sm90 TMA epilogue).

    The tile a warpgroup holds (``64 * m_blocks`` rows x ``tile_n``) is stored in sub-tiles of
    ``64 x epi_n`` elements, ``epi_n`` = one 128-byte swizzle row (64 f16/bf16, 32 f32). Per
    sub-tile, every thread of the warpgroup writes its fragment into a 128-byte-swizzled
    buffer — ``stmatrix.m8n8.x4`` for 16-bit outputs, ``st.shared.v2.f32`` for f32, both
    free of bank conflicts (each 8-row group of a write hits 8 different 16-byte chunks) —
    then ``fence.proxy.async``, a named barrier over the warpgroup, and its thread 0 issues
    the TMA store (the tensor map clips rows >= M and columns >= N) and commits it as one
    bulk group. Sub-tiles rotate over ``buffers`` buffers per warpgroup: before the barrier
    of sub-tile ``s`` thread 0 waits (``cp.async.bulk.wait_group.read buffers - 2``) until
    the store of sub-tile ``s + 1 - buffers`` has read its buffer, the one sub-tile ``s + 1``
    overwrites, so one barrier per sub-tile suffices (with ``buffers == 1``: a second wait +
    barrier before each write). The ring continues across calls (a persistent kernel's next
    tile), since the sub-tiles per call are a multiple of the buffer count.

    Options (constructor keywords, or :meth:`configure` from a kernel):

    * ``buffers`` (1..8): sub-tile buffers per warpgroup (at most; :attr:`ring` is the
      largest count <= ``buffers`` dividing the sub-tiles per call);
    * ``warpgroups``: warpgroups that store concurrently, each with its own buffers and
      named barrier ``barrier_id + ctx.warpgroup``;
    * ``alias``: name of a shared buffer of the kernel's plan (e.g. the mainloop's ``"a"``
      stages) to place the sub-tile buffers in instead of a dedicated one. Only where the
      schedule makes that safe: no TMA load or WGMMA may touch it any more (a non-persistent
      kernel after its mainloop). The epilogue then first synchronises all ``warpgroups``
      on named barrier ``barrier_id + warpgroups`` so no warpgroup overwrites operands
      another one's WGMMAs still read;
    * ``barrier_id``: first named barrier id used (default 8; ids below are the kernel's);
    * ``defer_tail``: leave the final ``wait_group.read 0`` to the kernel
      (:meth:`store_tail`, after a persistent tile loop); by default every :meth:`store`
      ends with it, so no CTA exits while a TMA store still reads its shared memory.

    Raises ``ValueError`` for options outside these rules; :meth:`plan` raises it when the
    aliased buffer is missing or too small.
    """

    kind = "tma"
    OPTIONS = ("buffers", "warpgroups", "alias", "barrier_id", "defer_tail")
    SUB_M = ATOM_M                #: rows per sub-tile (one m64 block of the accumulator)
    ROW_BYTES = DEFAULT_SWIZZLE   #: bytes per sub-tile row = the 128-byte swizzle span
    CHUNK = 16                    #: bytes of one swizzle chunk (the XOR permutes 16-B chunks)
    STMATRIX_COLS = 16            #: 16-bit columns one stmatrix.x4 stores (two 8x8 matrices wide)
    arch = DEFAULT

    def __init__(self, tile_m: int, tile_n: int, out_dtype: str = "f32", *, buffers: int = 2,
                 warpgroups: int = 1, alias: str | None = None, barrier_id: int = 8, defer_tail: bool = False):
        super().__init__(tile_m, tile_n, out_dtype)
        self.epi_n = self.ROW_BYTES // _dtype(out_dtype).nbytes
        if tile_n % self.epi_n:
            raise ValueError(f"tile_n {tile_n} must be a multiple of the {self.epi_n}-column epilogue sub-tile")
        self.buffers, self.warpgroups, self.alias = 2, 1, None
        self.barrier_id, self.defer_tail = 8, False
        self.configure(buffers=buffers, warpgroups=warpgroups, alias=alias, barrier_id=barrier_id,
                       defer_tail=defer_tail)

    def configure(self, *, buffers=None, warpgroups=None, alias=None, barrier_id=None, defer_tail=None):
        """Set options (see the class docstring); ``None`` keeps the current value. Returns self."""
        buffers = self.buffers if buffers is None else buffers
        warpgroups = self.warpgroups if warpgroups is None else warpgroups
        barrier_id = self.barrier_id if barrier_id is None else barrier_id
        alias = self.alias if alias is None else (alias or None)      # "" clears it
        if not 1 <= buffers <= 8:
            raise ValueError(f"epilogue buffers must be 1..8, got {buffers}")
        if warpgroups not in (1, 2, 3):
            raise ValueError(f"epilogue warpgroups must be 1..3, got {warpgroups}")
        last = barrier_id + warpgroups - 1 + (alias is not None)      # per warpgroup (+ one over all)
        if barrier_id < 0 or last > 15:
            raise ValueError(f"epilogue named barriers {barrier_id}..{last} exceed ids 0..15")
        self.buffers, self.warpgroups, self.barrier_id, self.alias = buffers, warpgroups, barrier_id, alias
        if defer_tail is not None:
            self.defer_tail = defer_tail
        return self

    # -- static description --------------------------------------------------------
    @property
    def sub_tile_bytes(self) -> int:
        return self.SUB_M * self.ROW_BYTES

    @property
    def ring(self) -> int:
        """Sub-tile buffers per warpgroup actually used: the largest count <= ``buffers``
        dividing the sub-tiles of a warpgroup's ``tile_m / warpgroups`` rows (a warpgroup
        storing more rows stores a multiple of that)."""
        subs = max(1, self.tile_m // self.warpgroups // self.SUB_M) * (self.tile_n // self.epi_n)
        return max(d for d in range(1, self.buffers + 1) if subs % d == 0)

    @property
    def smem_bytes(self) -> int:
        """Shared memory the sub-tile buffers take (all warpgroups)."""
        return self.warpgroups * self.ring * self.sub_tile_bytes

    def d_param(self) -> Param:
        return Param("d", "tensormap")

    def tensor_maps(self) -> list:
        lead = (1,) if self.batched else ()        # rank-3 (L, M, N) map, one batch per box
        src = [self.source().spec()] if self.source() else []
        return [TensorMapSpec("d", self.out_dtype, lead + (self.SUB_M, self.epi_n), swizzle=self.ROW_BYTES)] + src

    def source(self):
        """The :class:`~cutedsl.collective.epilogue_source.TmaSource` loading C by TMA when a
        fused node adds ``beta * C`` (None otherwise)."""
        from .epilogue_source import TmaSource
        from .fusion import AddC
        dts = [nd.dtype for nd in self.fusion if isinstance(nd, AddC)]
        return TmaSource(dts[0], self.SUB_M, self.epi_n, self.warpgroups, self.batched) if dts else None

    def kernel_params(self) -> list:
        """The base's, with C as a tensor map when it is loaded by TMA."""
        ps = super().kernel_params()
        if self.source() is None:
            return ps
        return [attrs.evolve(p, kind="tensormap") if p.name == "c" and p.kind == "ptr" else p for p in ps]

    def init(self, smem, leader) -> None:
        if self.source() is not None:
            self.source().init(smem, leader)

    def plan(self, plan) -> None:
        """A dedicated ``"epilogue"`` buffer (``warpgroups x buffers`` sub-tiles, 1024-B
        aligned as the swizzle needs), or a check that the aliased buffer can hold them."""
        if self.source() is not None:
            self.source().plan(plan)
        if self.alias is None:
            plan.buffer("epilogue", (self.SUB_M, self.epi_n), self.out_dtype, self.warpgroups * self.ring,
                        swizzle=self.ROW_BYTES)
            return
        buf = plan.buffers.get(self.alias)
        if buf is None:
            raise ValueError(f"epilogue alias {self.alias!r} names no buffer of the plan ({sorted(plan.buffers)})")
        atom = CORE_ROWS * self.ROW_BYTES       # the swizzle pattern repeats every 8 rows
        if buf.nbytes < self.smem_bytes or buf.align < atom:
            raise ValueError(f"epilogue alias {self.alias!r} ({buf.nbytes} B, align {buf.align}) cannot hold "
                             f"{self.smem_bytes} B of {atom}-B aligned sub-tiles")

    # -- IR ------------------------------------------------------------------------
    def _sub_tiles(self, acc) -> list:
        return [(b, c) for b in range(acc.m_blocks) for c in range(self.tile_n // self.epi_n)]

    def _buffer(self, ctx, slot):
        """(i64 shared address, TMA store source) of sub-tile buffer ``slot`` of this
        warpgroup: a tile of the ``"epilogue"`` buffer (checked against the tensor map), or a
        raw view into the aliased buffer (whose declared dtype is the mainloop's)."""
        idx = ctx.warpgroup * self.ring + slot if self.warpgroups > 1 else slot
        if self.alias is None:
            buf = ctx.smem["epilogue"]
            return buf.address(idx), buf.tile(idx)
        buf = ctx.smem[self.alias]
        off = idx * self.sub_tile_bytes
        shape = ((1,) if self.batched else ()) + (self.SUB_M, self.epi_n)
        return buf.address(0) + cir.i64(off), buf.view(0, shape=shape, dtype=self.out_dtype, byte_offset=off)

    def store(self, acc, ctx: EpilogueContext) -> None:
        from ..atom.sync import NamedBarrier, fence_proxy_async
        base = acc.layout.thread_base()
        acc = self._visit_all(acc, ctx, base)
        tma = TmaCopy(self.tensor_maps()[0], ctx.args.d)
        wg_threads = self.arch.warpgroup_threads
        wt = cir.thread_idx() % wg_threads
        leader = wt.eq(0)
        wg_bar = NamedBarrier(self.barrier_id + ctx.warpgroup if self.warpgroups > 1 else self.barrier_id, wg_threads)
        if self.alias is not None:     # every warpgroup's WGMMAs are done with the aliased operands
            NamedBarrier(self.barrier_id + self.warpgroups, wg_threads * self.warpgroups).sync()
        subs = self._sub_tiles(acc)
        ring = self.ring
        if len(subs) % ring:
            raise ValueError(f"the epilogue's {ring} sub-tile buffers must divide the {len(subs)} sub-tiles of a "
                             f"{self.SUB_M * acc.m_blocks}-row accumulator (planned for "
                             f"{self.tile_m // self.warpgroups} rows)")
        write = (self._write_b16 if self.out_dtype in ("f16", "bf16") else
                 self._write_b8 if self.out_dtype in FP8 else self._write_f32)
        lane_base = self._lane_offsets(wt)
        source, wg_idx = self.source(), (ctx.warpgroup if self.warpgroups > 1 else 0)
        for s, (b, c) in enumerate(subs):
            addr, view = self._buffer(ctx, s % ring)
            if source is not None:     # C of this sub-tile, by TMA (read by the fused node)
                ctx.c_tile = source.load(ctx, s, ctx.m0 + ctx.row_base + self.SUB_M * b, ctx.n0 + c * self.epi_n,
                                         leader, wg_idx)
            if ring == 1:      # the only buffer: its previous store must have read it
                with cir.If(leader):
                    bulk_wait_group(0, read=True)
                wg_bar.sync()
            write(acc, b, c, addr, lane_base)
            fence_proxy_async()        # generic smem writes -> visible to the TMA (async proxy)
            if ring > 1:       # the buffer sub-tile s + 1 writes must have been read
                with cir.If(leader):
                    bulk_wait_group(ring - 2, read=True)
            wg_bar.sync()
            with cir.If(leader):
                lead = (ctx.l,) if self.batched else ()
                tma.store(view, lead + (ctx.m0 + ctx.row_base + self.SUB_M * b, ctx.n0 + c * self.epi_n))
                bulk_commit_group()
        if source is not None:
            source.finish(ctx, len(subs), leader, wg_idx)
            ctx.c_tile = None
        if not self.defer_tail:
            self.store_tail()

    def store_tail(self) -> None:
        """Thread 0 of each warpgroup waits until its TMA stores have read shared memory
        (``cp.async.bulk.wait_group.read 0``); call once after the last :meth:`store` when
        ``defer_tail`` is set."""
        with cir.If((cir.thread_idx() % self.arch.warpgroup_threads).eq(0)):
            bulk_wait_group(0, read=True)

    def _lane_offsets(self, wt):
        """Per-thread constants of the swizzled write addresses: ``(row byte offset, chunk x)``.

        16-bit (stmatrix x4): lane ``l`` addresses row ``16 w + 8 (q % 2) + l % 8`` (``q = l //
        8``) and 16-byte chunk ``(2 j + q // 2) ^ (row % 8)`` for column group ``j``, i.e.
        ``2 j ^ x`` with ``x = (q // 2) ^ (l % 8)``. f32: lane ``l`` writes row ``16 w + l // 4``
        (and ``+ 8``), chunk ``(2 j + (l % 4) // 2) ^ (l // 4)`` = ``2 j ^ x`` plus ``8 (l % 2)``
        bytes, for column block ``j`` of 8."""
        w, lane = wt // self.arch.warp_threads, wt % self.arch.warp_threads
        rows_w, ck = FRAG_WARP_ROWS, self.CHUNK
        if self.out_dtype in ("f16", "bf16"):
            q = lane // CORE_ROWS
            row = w * rows_w + (q % 2) * CORE_ROWS + lane % CORE_ROWS
            x = (q // 2) ^ (lane % CORE_ROWS)
            return row * self.ROW_BYTES + x * ck, None
        row = w * rows_w + lane // FRAG_QUAD
        if self.out_dtype in FP8:      # 2 bytes per lane: 8 columns (one fragment block) per 8 bytes
            return row * self.ROW_BYTES + (lane % FRAG_QUAD) * 2, (lane // FRAG_QUAD) * ck
        x = ((lane % FRAG_QUAD) // 2) ^ (lane // FRAG_QUAD)
        return row * self.ROW_BYTES + (lane % 2) * (ck // 2), x * ck

    def _write_b16(self, acc, b, c, addr, lane_base):
        """Sub-tile (block ``b``, columns ``c * 64 ..``) of a 16-bit output: 4 ``stmatrix.x4``
        per warp, one per 16-column group; register pairs ``8 J .. 8 J + 7`` of group ``J``."""
        from ..atom.stmatrix import pack_b16x2, stmatrix
        row_x = lane_base[0]
        groups = self.epi_n // self.STMATRIX_COLS
        for j in range(groups):
            jj = c * groups + j
            regs = [pack_b16x2(acc.get(b, 8 * jj + 2 * k), acc.get(b, 8 * jj + 2 * k + 1), self.out_dtype)
                    for k in range(4)]
            # (row, chunk ^ 2j): the chunk XOR only flips bits 5-6 of the row's byte offset
            stmatrix(addr + cir.i64(row_x ^ (2 * self.CHUNK * j)), regs)

    def _write_f32(self, acc, b, c, addr, lane_base):
        """Sub-tile (block ``b``, columns ``c * 32 ..``) of an f32 output: per 8-column block
        ``j`` two ``st.shared.v2.f32`` (rows ``r`` and ``r + 8``)."""
        row_off, x16 = lane_base
        ptr_t = ir.Type.parse("!llvm.ptr<3>")
        v2 = ir.VectorType.get([2], ir.F32Type.get())
        blocks = self.epi_n // FRAG_COLS
        for j in range(blocks):
            cb = c * blocks + j
            off = row_off + (x16 ^ (2 * self.CHUNK * j))
            for half in range(2):
                i = 4 * cb + 2 * half
                vec = vector.from_elements(v2, [acc.get(b, i), acc.get(b, i + 1)])
                a = addr + cir.i64(off + half * FRAG_ROW_STEP * self.ROW_BYTES)
                llvm.store(vec, llvm.inttoptr(ptr_t, cir.i32(a)), alignment=8)

    def _write_b8(self, acc, b, c, addr, lane_base):
        """Sub-tile (block ``b``, columns ``c * 128 ..``) of an fp8 output: per 8-column block
        ``j`` two ``st.shared.b16`` of a converted pair (rows ``r`` and ``r + 8``); the pair
        sits at byte ``2 (l % 4)`` of the block, in 16-byte chunk ``(j // 2) ^ (r % 8)``."""
        row_off, x16 = lane_base
        ptr_t = ir.Type.parse("!llvm.ptr<3>")
        blocks = self.epi_n // FRAG_COLS
        for j in range(blocks):
            cb = c * blocks + j
            off = row_off + (x16 ^ (self.CHUNK * (j // 2))) + (FRAG_COLS * (j % 2))
            for half in range(2):
                i = 4 * cb + 2 * half
                pair = pack_fp8x2(acc.get(b, i), acc.get(b, i + 1), self.out_dtype)
                a = addr + cir.i64(off + half * FRAG_ROW_STEP * self.ROW_BYTES)
                llvm.store(pair, llvm.inttoptr(ptr_t, cir.i32(a)), alignment=2)
