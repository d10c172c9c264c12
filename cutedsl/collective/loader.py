"""The operand loader: named TMA operands filling shared memory, each in a stage ring or
loaded once (the load side of CUTLASS's ``CollectiveMma``; FlashAttention's ``load_Q`` /
``load_K`` / ``load_V`` with their own pipelines).

Three pieces, all static descriptions until a kernel body binds them:

* :class:`TmaOperand` -- one tensor map and the shared-memory tile it fills per stage: a
  ``rows x cols`` tile (global order: ``cols`` contiguous) loaded as ``cols / box_cols`` boxes
  stacked in shared memory (a row wider than the swizzle span is split into boxes one span wide:
  an MN-major GEMM operand, a 128-column head dimension of 16-bit elements), optionally in row
  blocks of ``box_rows`` rows, each block's boxes stacked before the next block's (an MN-major
  operand holding several MMA k-tiles per stage: attention's V, one k-tile of keys per block),
  and optionally sliced by rows over ``slices`` CTAs of a cluster, each loading ``rows / slices``
  rows and multicasting them to the others (PTX ISA 9.7.9.25.5.1, ``cp.async.bulk.tensor`` with
  ``.multicast::cluster``). Its buffer holds ``tiles`` tiles per stage (one per MMA k-tile where
  a stage holds several: the descriptors step through them with one stride).
* :class:`TmaRing` -- operands that travel together: ``stages`` slots, each with one *full*
  mbarrier armed with the bytes of all its operands and one *empty* mbarrier the consumers
  release it on (:class:`~cutedsl.collective.pipeline.TmaPipeline`); ``stages=None`` loads once
  (one slot, a full barrier, no empty one unless ``release=True``).
* :class:`OperandLoader` -- the rings of one kernel: declares their buffers and barriers
  (:meth:`~OperandLoader.plan`), their tensor maps (:meth:`~OperandLoader.tensor_maps`), binds
  the TMA atoms (:meth:`~OperandLoader.bind` -> :class:`BoundOperands`), makes each ring's
  pipeline (:meth:`~OperandLoader.pipeline`), issues one operand's boxes into a slot
  (:meth:`~OperandLoader.load`) or fills a whole slot as a producer (:meth:`~OperandLoader.fill`).

The GEMM's A/B ring (with the block-scale factors on sm_100a) is one configuration
(:class:`~cutedsl.collective.gemm_operands.GemmOperandRing`); attention's Q once plus a K ring
and a V ring is another::

    q = TmaOperand("q", "f16", rows=128, cols=128, box_cols=64, swizzle=128, major="K", lead=2)
    k = TmaOperand("k", "f16", rows=128, cols=128, box_cols=64, swizzle=128, major="K", lead=2)
    v = TmaOperand("v", "f16", rows=128, cols=128, box_cols=64, swizzle=128, major="MN", lead=2)
    loader = OperandLoader(TmaRing("q", (q,)), TmaRing("k", (k,), stages=2), TmaRing("v", (v,), stages=2))
"""
from __future__ import annotations

import attrs

from ..compiler.artifact import TensorMapSpec
from ..errors import ConfigError
from .pipeline import PipelineState, TmaPipeline


def _positive(name):
    def check(inst, attr, value):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"TmaOperand {inst.name!r}: {name} must be a positive int, got {value!r}")
    return check


@attrs.frozen
class TmaOperand:
    """One TMA operand (see the module docstring).

    ``name``: its shared-memory buffer; ``param``: its tensor-map kernel parameter (default
    ``name``); ``dtype``: the buffer's element type; ``tma_dtype``: the tensor map's (default
    ``dtype``; a 6-bit GEMM operand's maps are packed, its buffers padded). ``rows`` x ``cols``:
    the elements one stage holds, ``cols`` contiguous in global memory; ``box_cols``: the inner
    extent of one box (default ``cols``; must divide it); ``box_rows``: the rows of one box
    (default ``rows``; must divide it): row block ``r``'s ``cols / box_cols`` boxes lie after
    those of blocks ``0 .. r - 1``; ``tiles``: the buffer's tiles per stage (default 1: a tile is
    the stage, :attr:`stage_shape`), which must divide the boxes, each tile holding ``boxes / tiles``
    of them (:attr:`tile_shape`) -- one per MMA k-tile: a K-major operand's column boxes, an
    MN-major one's row blocks. ``swizzle``: bytes (0, 32, 64, 128),
    of the tensor map and of the buffer; ``major``: "K" / "MN" for an MMA operand's buffer (its
    descriptors check it), None otherwise. ``slices``: CTAs of a cluster sharing the tile, each
    loading ``rows / slices`` rows (slice ``r`` at rows ``r * rows / slices``) and multicasting
    them; ``lead``: leading tensor-map dimensions before ``(row, col)`` with box extent 1 (a batch,
    a head: their coordinates come with each load); ``align``: the buffer's alignment in bytes
    (default: the plan's). Raises ``ConfigError`` for extents that do not divide, and for row
    blocks of a sliced operand (not built)."""
    name: str
    dtype: str
    rows: int = attrs.field(validator=_positive("rows"))
    cols: int = attrs.field(validator=_positive("cols"))
    box_cols: int = attrs.field(default=None)
    swizzle: int = 0
    major: str | None = None
    slices: int = attrs.field(default=1, validator=_positive("slices"))
    lead: int = 0
    tma_dtype: str = attrs.field(default=None)
    param: str = attrs.field(default=None)
    align: int | None = None
    box_rows: int = attrs.field(default=None)
    tiles: int = attrs.field(default=1, validator=_positive("tiles"))

    def __attrs_post_init__(self):
        for field, default in (("box_cols", self.cols), ("box_rows", self.rows), ("tma_dtype", self.dtype),
                               ("param", self.name)):
            if getattr(self, field) is None:
                object.__setattr__(self, field, default)
        for field, whole in (("box_cols", "cols"), ("box_rows", "rows")):
            v = getattr(self, field)
            if not isinstance(v, int) or v < 1 or getattr(self, whole) % v:
                raise ConfigError(f"TmaOperand {self.name!r}: {field} {v!r} must divide {whole} "
                                  f"{getattr(self, whole)}")
        if self.rows % self.slices:
            raise ConfigError(f"TmaOperand {self.name!r}: {self.slices} slices must divide rows {self.rows}")
        if self.slices > 1 and self.box_rows != self.rows:
            raise ConfigError(f"TmaOperand {self.name!r}: row blocks (box_rows {self.box_rows} < rows {self.rows}) "
                              f"of an operand sliced over {self.slices} CTAs are not built; use one of them")
        if self.boxes % self.tiles:
            raise ConfigError(f"TmaOperand {self.name!r}: tiles {self.tiles} must divide its {self.boxes} boxes")

    @property
    def col_boxes(self) -> int:
        """Boxes across the columns of one row block."""
        return self.cols // self.box_cols

    @property
    def boxes(self) -> int:
        """Boxes per stage, stacked in the buffer: box ``j`` holds columns ``(j % col_boxes) *
        box_cols ..`` of row block ``j // col_boxes``."""
        return self.rows // self.box_rows * self.col_boxes

    @property
    def box(self) -> tuple:
        """One CTA's box ``(box_rows / slices, box_cols)`` (elements, outermost first)."""
        return (self.box_rows // self.slices, self.box_cols)

    @property
    def stage_shape(self) -> tuple:
        """One stage's boxes stacked, ``(boxes * box_rows, box_cols)``."""
        return (self.boxes * self.box_rows, self.box_cols)

    @property
    def tile_shape(self) -> tuple:
        """The buffer's tile: ``boxes / tiles`` boxes stacked (the stage when ``tiles`` is 1)."""
        return (self.boxes // self.tiles * self.box_rows, self.box_cols)

    @property
    def element_bytes(self) -> int:
        from ..dtypes import dtype
        return dtype(self.dtype).nbytes

    @property
    def stage_bytes(self) -> int:
        """Bytes one stage of this CTA receives: every slice (its own and its peers' multicasts)."""
        return self.rows * self.cols * self.element_bytes

    def spec(self) -> TensorMapSpec:
        """The tensor map: box :attr:`box` behind ``lead`` unit dimensions, :attr:`swizzle`."""
        return TensorMapSpec(self.param, self.tma_dtype, (1,) * self.lead + self.box, swizzle=self.swizzle)

    def offset(self, j: int, slice_=0):
        """Byte offset of box ``j`` of slice ``slice_`` (int or IR i32) in the stage: slice ``r``
        sits ``r`` slices into every box."""
        box_off = j * self.box_rows * self.box_cols * self.element_bytes
        if self.slices == 1:
            return box_off
        off = slice_ * (self.rows // self.slices * self.box_cols * self.element_bytes)
        return off + box_off if box_off else off

    def coords(self, j: int, row0, col0, slice_=0) -> tuple:
        """Global ``(row, col)`` of box ``j`` of slice ``slice_`` of the tile whose first element is
        at ``(row0, col0)`` (ints or IR i32)."""
        block, c = divmod(j, self.col_boxes)
        if block:
            row0 = row0 + block * self.box_rows
        return (row0 + slice_ * (self.rows // self.slices), col0 + self.box_cols * c if c else col0)

    def in_tile(self, j: int, slice_=0) -> tuple:
        """``(tile within the stage, byte offset in that tile)`` of box ``j`` of slice ``slice_``."""
        per = self.boxes // self.tiles
        return j // per, self.offset(j % per, slice_)

    def placement(self, j: int, row0, col0, slice_=0) -> tuple:
        """``(byte offset in the stage's tile, (row, col))`` of box ``j`` of slice ``slice_``."""
        return self.offset(j, slice_), self.coords(j, row0, col0, slice_)


@attrs.frozen
class TmaRing:
    """Operands loaded together into ``stages`` slots (see the module docstring); ``stages=None``:
    loaded once (one slot). ``release``: the slot has an empty barrier its consumers release it
    on (default: a ring has, a load-once slot has not); ``barrier_names``: the ``(full, empty)``
    barrier groups (default ``"<name>_full"``, ``"<name>_empty"``)."""
    name: str
    operands: tuple = attrs.field(converter=tuple)
    stages: int | None = None
    release: bool = attrs.field(default=None)
    barrier_names: tuple = attrs.field(default=None)

    def __attrs_post_init__(self):
        if self.release is None:
            object.__setattr__(self, "release", self.stages is not None)
        if self.barrier_names is None:
            object.__setattr__(self, "barrier_names", (f"{self.name}_full", f"{self.name}_empty"))
        if not self.operands:
            raise ConfigError(f"TmaRing {self.name!r} has no operands")
        if self.stages is not None and (not isinstance(self.stages, int) or self.stages < 1):
            raise ConfigError(f"TmaRing {self.name!r}: stages must be None (load once) or an int >= 1, "
                              f"got {self.stages!r}")

    @property
    def slots(self) -> int:
        return self.stages or 1

    @property
    def tx_bytes(self) -> int:
        """Transaction bytes a slot's full barrier is armed with: all its operands."""
        return sum(op.stage_bytes for op in self.operands)


@attrs.frozen
class BoundOperands:
    """A loader bound in a kernel body: the bound shared memory and each operand's ``TmaCopy``
    atom by operand name."""
    smem: object
    atoms: dict


class OperandLoader:
    """The rings of one kernel (see the module docstring). Raises ``ConfigError`` when two
    operands or rings share a name."""

    def __init__(self, *rings: TmaRing):
        self.rings = {r.name: r for r in rings}
        self.operands = {op.name: op for r in rings for op in r.operands}
        if len(self.rings) != len(rings) or len(self.operands) != sum(len(r.operands) for r in rings):
            raise ConfigError(f"operand loader: ring and operand names must be unique, got "
                              f"{[(r.name, [o.name for o in r.operands]) for r in rings]}")

    def ring_of(self, operand: str) -> TmaRing:
        return next(r for r in self.rings.values() if any(o.name == operand for o in r.operands))

    # -- static description ----------------------------------------------------------
    def plan(self, plan, stages=None) -> None:
        """Declare every ring's buffers (one per operand, :attr:`TmaOperand.stage_shape` per slot),
        then its full (and empty) barriers, ring by ring, in a ``SmemPlan`` (an operand of ``tiles``
        tiles per stage declares ``tiles`` buffer tiles per slot: slot ``s`` is tiles ``s * tiles ..``). ``stages``: an int
        overriding the slot count of every ring that is not load-once (how ``stages="auto"``
        sizes a GEMM ring), or a dict by ring name."""
        for r in self.rings.values():
            n = stages.get(r.name) if isinstance(stages, dict) else (stages if r.stages else None)
            n = n or r.slots
            for op in r.operands:
                kw = {} if op.align is None else {"align": op.align}
                plan.buffer(op.name, op.tile_shape, op.dtype, n * op.tiles, swizzle=op.swizzle, major=op.major, **kw)
            plan.barriers(r.barrier_names[0], n)
            if r.release:
                plan.barriers(r.barrier_names[1], n)

    def tensor_maps(self) -> list:
        """Every operand's ``TensorMapSpec``, ring by ring."""
        return [op.spec() for r in self.rings.values() for op in r.operands]

    # -- IR ------------------------------------------------------------------------
    def bind(self, smem, args=None, maps: dict | None = None, direct: bool = False) -> BoundOperands:
        """IR: the ``TmaCopy`` atoms over the kernel's tensor-map parameters (``args.<param>``), or
        only those of the operands in ``maps`` (by operand name: kernel parameters, or generic
        addresses of maps in global memory); ``direct``: issue through the NVVM op with 32-bit
        shared addresses (``TmaCopy``)."""
        from ..atom.tma import TmaCopy
        if maps is None:
            maps = {name: getattr(args, op.param) for name, op in self.operands.items()}
        return BoundOperands(smem, {name: TmaCopy(self.operands[name].spec(), src, direct=direct)
                                    for name, src in maps.items()})

    def pipeline(self, smem, ring: str, consumers: int = 0, cluster=(1, 1), stages: int | None = None,
                 extra_tx: int = 0) -> TmaPipeline:
        """IR: ring ``ring``'s :class:`TmaPipeline` over its bound barriers (``consumers``: arrivals
        releasing a slot per CTA; ``cluster``: as ``TmaPipeline``; ``extra_tx``: bytes the
        kernel's own copies add to each slot beside the ring's boxes, e.g. a non-tensor bulk
        load on the same barrier). Initialise it with ``init``."""
        from ..atom.mbarrier import MBarriers
        r = self.rings[ring]
        n = stages or r.slots
        empty = MBarriers(smem.barriers(r.barrier_names[1]), n) if r.release else None
        return TmaPipeline(MBarriers(smem.barriers(r.barrier_names[0]), n), r.tx_bytes + extra_tx, empty, consumers,
                           cluster)

    def load(self, bound: BoundOperands, barriers, index, operand: str, origin, lead=(), slice_=0, mask=None,
             predicate=None) -> None:
        """IR: issue operand ``operand``'s boxes into slot ``index`` (IR i32 or int), completing on
        mbarrier ``index`` of ``barriers`` (an ``MBarriers``, armed by the caller): the tile whose
        first element is at global ``origin`` = ``(row, col)`` (IR i32 or ints) behind the ``lead``
        coordinates; with slices, this CTA's slice ``slice_`` multicast to the CTAs in ``mask``
        (IR i16, ``cutedsl.atom.cluster.multicast_mask``). Only where ``predicate`` holds."""
        op = self.operands[operand]
        if len(lead) != op.lead:
            raise ConfigError(f"operand {operand!r} has {op.lead} leading tensor-map coordinates, got {len(lead)}")
        for j in range(op.boxes):
            t, off = op.in_tile(j, slice_)
            dst = bound.smem[operand].tile(index * op.tiles + t if op.tiles > 1 else index).sub(off, op.box)
            coords = op.coords(j, origin[0], origin[1], slice_)
            bound.atoms[operand].load(dst, barriers, index, tuple(lead) + coords, multicast_mask=mask,
                                      predicate=predicate)

    def fill(self, bound: BoundOperands, pipeline: TmaPipeline, state: PipelineState, ring: str, origins: dict,
             leads: dict | None = None, predicate=None) -> None:
        """IR, the producer of ring ``ring``: wait until slot ``state`` was released (a ring with
        empty barriers), arm its full barrier with the ring's bytes and load every operand's tile
        at ``origins[name]`` (``leads[name]``: its leading coordinates), where ``predicate`` holds
        (one thread, or an ``ElectEach`` lane). ``ConfigError`` when an operand has no origin."""
        missing = [op.name for op in self.rings[ring].operands if op.name not in origins]
        if missing:
            raise ConfigError(f"fill of ring {ring!r}: no origin for operand(s) {missing}; pass origins[name] = (row, col)")
        pipeline.producer_acquire(state)
        pipeline.producer_expect(state, predicate=predicate)
        for op in self.rings[ring].operands:
            self.load(bound, pipeline.full, state.index, op.name, origins[op.name],
                      (leads or {}).get(op.name, ()), predicate=predicate)


__all__ = ["TmaOperand", "TmaRing", "OperandLoader", "BoundOperands"]
