"""Block masks: which KV blocks of each query block a mask_mod skips, keeps whole or cuts
(FlexAttention's ``BlockMask``), computed on the host from the mask_mod's numpy evaluation.

A query block is ``block_m`` consecutive queries, a KV block ``block_n`` consecutive keys (the
kernel's BLOCK_M / BLOCK_N tile). Among the pairs inside the problem (``q_idx < seqlen_q``,
``kv_idx < seqlen_k``; the kernel masks padding itself) a block is

* ``SKIP`` (0): the mask keeps none -- the kernel does not load or multiply it;
* ``PARTIAL`` (1): it keeps some -- the kernel evaluates the mask per element;
* ``FULL`` (2): it keeps all -- the kernel runs it without the mask (``apply(..., mask=False)``).

Arrays (int32, C-contiguous; ``Bm`` is 1 when the mask does not depend on the batch, else
``batch``; ``Hm`` likewise for heads -- numpy broadcasting of the mask_mod's result tells):

=======================  =========================  ==========================================
name                     shape                      contents
=======================  =========================  ==========================================
``kind``                 ``(Bm, Hm, QB, KB)``       SKIP / PARTIAL / FULL of each block
``kv_num_blocks``        ``(Bm, Hm, QB)``           number of PARTIAL KV blocks of a query block
``kv_indices``           ``(Bm, Hm, QB, KB)``       their indices, ascending; entries past the
                                                    count are 0
``full_kv_num_blocks``   ``(Bm, Hm, QB)``           number of FULL KV blocks
``full_kv_indices``      ``(Bm, Hm, QB, KB)``       their indices, ascending, then 0
=======================  =========================  ==========================================

``QB = ceil(seqlen_q / block_m)``, ``KB = ceil(seqlen_k / block_n)``. In a kernel, query block
``qb`` of ``(batch, head)`` is row ``r = batch * batch_stride + head * head_stride + qb`` of the
``(Bm * Hm * QB)`` count arrays and of the ``(Bm * Hm * QB, KB)`` index arrays
(:class:`BlockMaskView`; the strides are 0 along a broadcast dimension).
"""
from __future__ import annotations

import numpy as np

from ..compiler.artifact import ParamSpec as Param
from ..errors import ArgumentError
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")

SKIP, PARTIAL, FULL = 0, 1, 2
#: kernel parameters of a block mask (:meth:`BlockMask.values` fills them)
ARRAYS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")
SCALARS = ("block_mask_batch_stride", "block_mask_head_stride", "block_mask_kv_blocks")


def block_mask_params() -> list:
    """The ``Param`` list a block-sparse attention kernel declares: four i32 arrays, then the
    batch stride, head stride (rows) and KV blocks per row as i32 scalars."""
    return [Param(n, "ptr", dtype="i32") for n in ARRAYS] + [Param(n, "i32") for n in SCALARS]


def _compact(sel: np.ndarray) -> tuple:
    """``(count, indices)`` of the True entries of ``sel`` along its last axis (ascending, then 0)."""
    num = sel.sum(-1).astype(np.int32)
    order = np.argsort(~sel, axis=-1, kind="stable").astype(np.int32)
    return num, np.where(np.arange(sel.shape[-1]) < num[..., None], order, 0).astype(np.int32)


class BlockMask:
    """The classification of every (query block, KV block) of a problem; see the module
    docstring for the arrays. Build with :func:`build_block_mask`."""

    def __init__(self, kind: np.ndarray, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int):
        self.kind = np.ascontiguousarray(kind, np.int32)
        self.block_m, self.block_n, self.seqlen_q, self.seqlen_k = block_m, block_n, seqlen_q, seqlen_k
        self.kv_num_blocks, self.kv_indices = _compact(self.kind == PARTIAL)
        self.full_kv_num_blocks, self.full_kv_indices = _compact(self.kind == FULL)

    @property
    def shape(self) -> tuple:
        """``(Bm, Hm, QB, KB)``."""
        return self.kind.shape

    def strides(self) -> tuple:
        """``(batch_stride, head_stride)`` in rows (0 along a broadcast dimension)."""
        bm, hm, qb, _ = self.shape
        return (hm * qb if bm > 1 else 0), (qb if hm > 1 else 0)

    def values(self) -> dict:
        """Host values of :func:`block_mask_params` by name."""
        out = {n: np.ascontiguousarray(getattr(self, n)) for n in ARRAYS}
        bs, hs = self.strides()
        return {**out, "block_mask_batch_stride": bs, "block_mask_head_stride": hs,
                "block_mask_kv_blocks": self.shape[3]}

    def restrict(self, kinds: np.ndarray) -> "BlockMask":
        """This mask intersected with ``kinds`` (``(QB, KB)``, e.g. a kernel's own band,
        :meth:`AttentionMask.block_kinds`): a block is SKIP when either skips it, FULL when both
        keep it whole, else PARTIAL (the codes are ordered so that this is the minimum)."""
        return BlockMask(np.minimum(self.kind, np.asarray(kinds, np.int32)[None, None]), self.block_m,
                         self.block_n, self.seqlen_q, self.seqlen_k)

    def block_kind(self, batch: int, head: int, q_block: int, kv_block: int) -> int:
        """SKIP, PARTIAL or FULL of one block (batch / head broadcast where the mask does)."""
        bm, hm = self.shape[:2]
        return int(self.kind[batch if bm > 1 else 0, head if hm > 1 else 0, q_block, kv_block])

    def block_skippable(self, batch: int, head: int, q_blocks, kv_blocks) -> bool:
        """True when the mask keeps nothing in query blocks ``q_blocks`` x KV blocks ``kv_blocks``
        (``range`` objects or ``(start, stop)`` pairs) of ``(batch, head)``."""
        bm, hm = self.shape[:2]
        qs, ks = (slice(*r) if isinstance(r, tuple) else slice(r.start, r.stop) for r in (q_blocks, kv_blocks))
        return bool(np.all(self.kind[batch if bm > 1 else 0, head if hm > 1 else 0, qs, ks] == SKIP))

    def check(self, block_m: int, block_n: int, problem) -> None:
        """``ArgumentError`` unless this mask was built for a kernel with these tiles and this
        problem (an ``AttentionProblem`` or dict: batch, heads, seqlen_q, seqlen_k)."""
        get = (lambda n: problem[n]) if isinstance(problem, dict) else (lambda n: getattr(problem, n))
        want = (block_m, block_n, get("seqlen_q"), get("seqlen_k"))
        have = (self.block_m, self.block_n, self.seqlen_q, self.seqlen_k)
        if want != have:
            raise ArgumentError(f"block mask built for (block_m, block_n, seqlen_q, seqlen_k) = {have}, the kernel "
                                f"runs {want}: build it with build_block_mask(..., block_m={block_m}, "
                                f"block_n={block_n}) for this problem")
        bm, hm = self.shape[:2]
        if bm not in (1, get("batch")) or hm not in (1, get("heads")):
            raise ArgumentError(f"block mask covers (batch, heads) = ({bm}, {hm}); the problem has "
                                f"({get('batch')}, {get('heads')})")


def build_block_mask(mask_mod, problem, block_m: int, block_n: int, args=None,
                     max_elements: int = 1 << 24) -> BlockMask:
    """The :class:`BlockMask` of ``mask_mod`` (a ``MaskMod``, a callable, or ``AttentionHooks``
    whose mask_mod is used) on ``problem`` (``AttentionProblem`` or dict: batch, heads,
    seqlen_q, seqlen_k) for ``block_m x block_n`` tiles. ``args``: the hooks' parameter arrays
    by name (e.g. ``doc_ids``). The mask is evaluated with numpy on whole query blocks at a time,
    at most about ``max_elements`` pairs per evaluation. Raises ``ArgumentError`` for block sizes
    that are not positive ints, ``HookError`` for a mask_mod that does not return predicates."""
    from .attention_hooks import AttentionHooks, host_keep
    # only the mask's own parameters are needed (not a score_mod's)
    hooks = AttentionHooks(mask_mod=mask_mod.mask_mod if isinstance(mask_mod, AttentionHooks) else mask_mod)
    if hooks.mask_mod is None:
        raise ArgumentError("build_block_mask needs a mask_mod")
    for name, v in (("block_m", block_m), ("block_n", block_n)):
        if not isinstance(v, int) or v <= 0:
            raise ArgumentError(f"{name} must be a positive int (the kernel's tile), got {v!r}")
    ctx = hooks.host_context(args or {}, problem)
    B, H, SQ, SK = (int(getattr(ctx, n)) for n in ("batch", "heads", "seqlen_q", "seqlen_k"))
    QB, KB = -(-SQ // block_m), -(-SK // block_n)
    b = np.arange(B).reshape(B, 1, 1, 1)
    h = np.arange(H).reshape(1, H, 1, 1)
    kv = np.arange(SK).reshape(1, 1, 1, SK)
    rows = max(block_m, max_elements // max(1, B * H * SK) // block_m * block_m)
    anys, alls = [], []
    for q0 in range(0, SQ, rows):
        q1 = min(SQ, q0 + rows)
        keep = host_keep(hooks.mask_mod, b, h, np.arange(q0, q1).reshape(1, 1, -1, 1), kv, ctx)
        keep = np.broadcast_to(keep, np.broadcast_shapes(keep.shape, (1, 1, q1 - q0, SK)))
        nq = -(-(q1 - q0) // block_m)
        pad = ((0, 0), (0, 0), (0, nq * block_m - (q1 - q0)), (0, KB * block_n - SK))
        blocks = (keep.shape[0], keep.shape[1], nq, block_m, KB, block_n)
        # padding rows/columns lie outside the problem: neutral for "any kept" and "all kept"
        anys.append(np.pad(keep, pad, constant_values=False).reshape(blocks).any(axis=(3, 5)))
        alls.append(np.pad(keep, pad, constant_values=True).reshape(blocks).all(axis=(3, 5)))
    bm, hm = max(a.shape[0] for a in anys), max(a.shape[1] for a in anys)
    cat = lambda xs: np.concatenate([np.broadcast_to(x, (bm, hm) + x.shape[2:]) for x in xs], axis=2)  # noqa: E731
    a, full = cat(anys), cat(alls)
    kind = np.where(a, np.where(full, FULL, PARTIAL), SKIP)
    return BlockMask(kind, block_m, block_n, SQ, SK)


class BlockMaskView:
    """IR: a block mask read in a kernel whose parameters include :func:`block_mask_params`
    (``args``: the kernel's namespace). Rows and indices are i32 Scalars."""

    def __init__(self, args):
        self.args = args

    def row(self, batch, head, q_block):
        """Row of ``(batch, head, q_block)`` in the count / index arrays."""
        a = self.args
        return cir.i32(batch) * a.block_mask_batch_stride + cir.i32(head) * a.block_mask_head_stride + \
            cir.i32(q_block)

    def count(self, row, full: bool = False):
        """PARTIAL (``full=False``) or FULL KV blocks of the query block at ``row``."""
        return cir.GlobalPtr(getattr(self.args, ARRAYS[2 if full else 0]), "i32").load(row)

    def index(self, row, i, full: bool = False):
        """The ``i``-th (``i < count``) PARTIAL or FULL KV block index of ``row``."""
        ptr = cir.GlobalPtr(getattr(self.args, ARRAYS[3 if full else 1]), "i32")
        return ptr.load(cir.i64(row) * cir.i64(self.args.block_mask_kv_blocks) + cir.i64(cir.i32(i)))


class SparseBlocks:
    """IR: the KV blocks one query block visits under a block mask, in the interface of
    :class:`~cutedsl.collective.attention_mask.BlockRange` (so the attention main loop and
    producer run it unchanged). Visit numbers ``v`` count down from ``n_max - 1`` as a band's
    blocks do: ``[u_hi, n_max)`` are the PARTIAL blocks (masked, FlexAttention's
    ``kv_indices``, visited in ascending order), ``[0, u_hi)`` the FULL ones (unmasked,
    ``full_kv_indices``); :meth:`block` maps a visit to its KV block. ``view``: a
    :class:`BlockMaskView`; ``row``: the query block's row (:meth:`BlockMaskView.row`)."""

    def __init__(self, view: "BlockMaskView", row):
        self.view, self.row = view, row
        self.u_hi = view.count(row, full=True)
        self.n_max = self.u_hi + view.count(row)
        self.n_min = self.u_lo = 0

    @property
    def count(self):
        return self.n_max

    def block(self, v, masked=None):
        """KV block of visit ``v`` (IR i32); ``masked`` True/False: ``v`` is known to be a
        PARTIAL / FULL visit (one load), None: either (two loads and a select; each index is
        kept inside the row so both loads stay in bounds)."""
        from .attention_mask import _max
        part = lambda: self.view.index(self.row, self.n_max - 1 - v)              # noqa: E731
        full = lambda: self.view.index(self.row, _max(self.u_hi - 1 - v, 0), full=True)   # noqa: E731
        if masked is not None:
            return part() if masked else full()
        return cir.select(cir.i32(v) >= self.u_hi, part(), full())


__all__ = ["BlockMask", "BlockMaskView", "SparseBlocks", "build_block_mask", "block_mask_params", "SKIP", "PARTIAL", "FULL"]
