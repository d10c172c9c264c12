"""TMA atom: tensor-map descriptors and bulk tensor copies (PTX ``cp.async.bulk.tensor``).

Host side, a :class:`~cutedsl.compiler.artifact.TensorMapSpec` fixes dtype, box, swizzle and
out-of-bounds fill; the Device layer encodes the full ``CUtensorMap`` per call and passes it
by value (``__grid_constant__``). Device side, :class:`TmaCopy` wraps the kernel parameter:

* ``load(dst, barriers, i, coords)``: tile load into shared memory, completing ``box_bytes``
  transaction bytes on mbarrier ``i`` (out-of-bounds elements are filled, and counted);
* ``store(src, coords)``: tile store from shared memory; out-of-bounds elements are not
  written. Before it: generic smem writes need :func:`tma_store_fence` and a CTA barrier;
  after it: :func:`bulk_commit_group` and :func:`bulk_wait_group`;
* ``prefetch()``: ``prefetch.tensormap``; ``fence_descriptor()``: the acquire fence a
  tensor map written to global memory by the host needs (not needed for grid constants).

The shared-memory side is an ``SmemTile`` (``smem["a"].tile(stage)``): its buffer's dtype and
swizzle and the tile's shape must equal the tensor map's dtype, swizzle and box, else
``LayoutError`` naming both (a 128-B-swizzled WGMMA operand filled through an unswizzled map
would otherwise compute garbage silently). A raw ``memref`` is accepted unchecked.

Coordinates are given outermost first (numpy order: ``(row, col)``, or ``(l, row, col)`` for a
batched rank-3 map whose box is ``(1, rows, cols)`` over a 2-D tile), in elements; the atom
reverses them into TMA's innermost-first order.
"""
from __future__ import annotations

from ..ir._lazy import lazy

ir = lazy("mlir.ir")
S = lazy("cutedsl.ir.smem_tile")
builtin, nvgpu, nvvm = lazy("mlir.dialects.builtin"), lazy("mlir.dialects.nvgpu"), lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")

from ..compiler.artifact import TensorMapSpec
from ..dtypes import PACKED_TMA, dtype as _dtype
from ..errors import LayoutError
from .sync import fence_proxy_async

_SWZ = {0: "none", 32: "swizzle_32b", 64: "swizzle_64b", 128: "swizzle_128b"}
_L2 = {0: "none", 64: "l2promo_64b", 128: "l2promo_128b", 256: "l2promo_256b"}


def descriptor_type(spec: TensorMapSpec) -> ir.Type:
    """The ``!nvgpu.tensormap.descriptor`` type of ``spec`` (box as a workgroup memref,
    swizzle, L2 promotion, OOB fill)."""
    shape = "x".join(map(str, spec.box))
    elt = "i8" if spec.dtype in PACKED_TMA else _dtype(spec.dtype).mlir    # a padded 6-bit box: one byte each
    return ir.Type.parse(
        f"!nvgpu.tensormap.descriptor<tensor = memref<{shape}x{elt}, "
        f"#gpu.address_space<workgroup>>, swizzle = {_SWZ[spec.swizzle]}, l2promo = {_L2[spec.l2promo]}, "
        f"oob = {spec.oob}, interleave = none>")


def check_tile(spec: TensorMapSpec, tile, what: str = "TMA copy"):
    """The ``memref`` of ``tile`` after checking it against ``spec`` (dtype, swizzle, box);
    ``tile`` may also be a raw ``memref`` (returned unchecked). Raises ``LayoutError``."""
    if not isinstance(tile, S.SmemTile):
        return tile
    bad = []
    # a packed sub-byte map fills a byte buffer (16U6_ALIGN16B: one element per byte there)
    smem_type = "u8" if spec.dtype in PACKED_TMA else _dtype(spec.dtype).name
    if smem_type != tile.dtype:
        bad.append(f"dtype {smem_type} != {tile.dtype}")
    if spec.swizzle != tile.swizzle:
        bad.append(f"swizzle {spec.swizzle} B != {tile.swizzle} B")
    box = tuple(spec.box)
    lead = len(box) - len(tile.shape)          # a batch (L) dimension of extent 1 in the box
    if lead < 0 or box[lead:] != tile.shape or any(x != 1 for x in box[:lead]):
        bad.append(f"box {list(spec.box)} != tile {list(tile.shape)}")
    if bad:
        raise LayoutError(f"{what}: tensor map {spec.param!r} ({spec.dtype} box "
                          f"{list(spec.box)}, swizzle {spec.swizzle} B) does not match shared "
                          f"{tile.describe()}: {'; '.join(bad)}")
    return tile.memref(shape=box) if lead else tile.memref()


class TmaCopy:
    """Device-side handle of one tensor map (a ``tensormap`` kernel parameter)."""

    def __init__(self, spec: TensorMapSpec, param, direct: bool = False):
        self.spec = spec
        self.param = param
        #: issue loads through the NVVM op with 32-bit shared addresses (see :meth:`load`)
        self.direct = direct
        self.desc = builtin.unrealized_conversion_cast([descriptor_type(spec)], [param])

    @property
    def box_bytes(self) -> int:
        """Bytes one box moves (the transaction bytes of a load, OOB fill included)."""
        return self.spec.box_bytes

    def _coords(self, coords):
        coords = list(coords)
        if len(coords) != self.spec.rank:
            raise ValueError(f"tensor map {self.spec.param!r} has rank {self.spec.rank}, got {len(coords)} coordinates")
        return [V.index(c) for c in reversed(coords)]

    def load(self, dst, barriers, i, coords, multicast_mask=None, predicate=None) -> None:
        """Load the box at ``coords`` into ``dst`` (an ``SmemTile`` checked against the tensor
        map, or a raw ``memref`` of the box shape), signalling mbarrier ``i`` of ``barriers``
        (an ``MBarriers``).

        ``multicast_mask`` (IR i16, or a Python int 1..0xFFFF; see
        :func:`cutedsl.atom.cluster.multicast_mask`): ``.multicast::cluster`` — the box is
        written into the same shared-memory offset of every CTA of the cluster whose rank bit
        is set, and each of those CTAs' mbarrier ``i`` (same offset) receives the box's
        transaction bytes; each receiver must have armed its own barrier with them."""
        if isinstance(multicast_mask, int):
            if not 1 <= multicast_mask <= 0xFFFF:
                raise ValueError(f"TMA multicast mask 0x{multicast_mask:x} must name 1..16 CTA ranks "
                                 f"(1..0xffff)")
            multicast_mask = V.const(multicast_mask, "i16")
        if self.direct or getattr(barriers, "cta_group", 1) == 2:
            return self._load_direct(dst, barriers, i, coords, multicast_mask, predicate)
        dst = check_tile(self.spec, dst, "TMA load")
        nvgpu.tma_async_load(dst, barriers.group, self.desc, self._coords(coords), barriers._idx(i),
                             multicast_mask=multicast_mask, predicate=predicate)

    def _load_direct(self, dst, barriers, i, coords, multicast_mask, predicate) -> None:
        """The load through ``nvvm.cp.async.bulk.tensor.shared.cluster.global`` with 32-bit shared
        addresses of the box and of barrier ``i`` at ``barriers.address(i)``: with a
        :class:`~cutedsl.atom.mbarrier.PairLeaderBarriers` ``.cta_group::2`` (the CTA pair's even
        CTA's barrier; the nvgpu op has no CTA group), and for ``direct`` atoms, whose loops
        ptxas then builds from 32-bit uniform addresses (the nvgpu lowering passes 64-bit
        generic ones, re-made from the shared window every k-tile)."""
        from mlir.dialects import llvm
        check_tile(self.spec, dst, "TMA load")
        coords = list(coords)
        if len(coords) != self.spec.rank:
            raise ValueError(f"tensor map {self.spec.param!r} has rank {self.spec.rank}, got {len(coords)} coordinates")
        dptr = llvm.inttoptr(ir.Type.parse("!llvm.ptr<7>"), V.to_type(dst.address(), "i32", signed=False))
        bptr = llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), barriers.address(i))
        pair = getattr(barriers, "cta_group", 1) == 2
        crd = [V.to_type(c, "i32") if not isinstance(c, int) else V.i32(c) for c in reversed(coords)]

        def issue():
            nvvm.cp_async_bulk_tensor_shared_cluster_global(
                dptr, self.param, crd, bptr, [], multicast_mask=multicast_mask,
                group=ir.Attribute.parse("#nvvm.cta_group<cta_2>") if pair else None)
        # a branch, not the op's predicate operand: LLVM 22 lowers the predicated form without
        # its .cta_group::2 (the emulator refuses the result: the barrier is the peer's)
        from .sync import elected
        with elected(predicate):
            issue()

    def store(self, src, coords, predicate=None) -> None:
        """Store ``src`` (an ``SmemTile`` checked against the tensor map, or a raw ``memref``
        of the box shape) to the box at ``coords``."""
        src = check_tile(self.spec, src, "TMA store")
        nvgpu.tma_async_store(src, self.desc, self._coords(coords), predicate=predicate)

    def prefetch(self, predicate=None) -> None:
        """``prefetch.tensormap``: bring the descriptor into the cache before the first load
        (where ``predicate``, IR i1, holds; usually one thread)."""
        nvgpu.tma_prefetch_descriptor(self.desc, predicate=predicate)

    def fence_descriptor(self) -> None:
        """``fence.proxy.tensormap::generic.acquire``: needed before using a tensor map that
        was written to global memory (not for the ``__grid_constant__`` parameters here)."""
        nvgpu.tma_fence_descriptor(self.desc)


def tma_store_fence() -> None:
    """``fence.proxy.async.shared::cta``: order this thread's generic shared-memory writes
    before later async-proxy reads (TMA store, WGMMA operands); see
    :func:`cutedsl.atom.sync.fence_proxy_async`."""
    fence_proxy_async()


def bulk_commit_group() -> None:
    """``cp.async.bulk.commit_group``: close the group of this thread's pending bulk stores."""
    nvvm.cp_async_bulk_commit_group()


def bulk_wait_group(n: int = 0, read: bool = True) -> None:
    """``cp.async.bulk.wait_group[.read] n``: wait until at most ``n`` groups are pending
    (``read``: only until their shared-memory sources may be reused)."""
    nvvm.cp_async_bulk_wait_group(n, read=ir.UnitAttr.get() if read else None)


BULK_ALIGN = 16     #: bytes: addresses and size of a non-tensor bulk copy (PTX ISA cp.async.bulk)


def bulk_load(dst, src, size: int, barriers, i) -> None:
    """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes``: copy ``size``
    contiguous bytes from global ``src`` (an ``!llvm.ptr<1>``, e.g. ``GlobalPtr.address(i)``)
    to shared ``dst`` (shared-window byte address, IR integer), completing ``size``
    transaction bytes on mbarrier ``i`` of ``barriers`` (an ``MBarriers``; the caller armed
    it with them). No tensor map: both addresses and ``size`` must be multiples of 16 (PTX
    ISA 9.7.9.25.4.1, cp.async.bulk); ``ValueError`` for a size that is not. The copy is in
    the async proxy, like a TMA load: a waiter on the barrier's phase sees the bytes."""
    from mlir.dialects import llvm
    if size <= 0 or size % BULK_ALIGN:
        raise ValueError(f"bulk_load: size must be a positive multiple of {BULK_ALIGN} bytes, got {size}")
    dptr = llvm.inttoptr(ir.Type.parse("!llvm.ptr<7>"), V.to_type(dst, "i32", signed=False))
    bptr = llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), barriers.address(i))
    nvvm.cp_async_bulk_shared_cluster_global(dptr, src, bptr, V.i32(size))
