"""FlashAttention-3-style attention forward on Hopper (sm_90a), composed from the library's atoms
and collectives -- its own problem, work unit and main loop, no GEMM subclass -- on the
warp-specialized kernel skeleton (:class:`~cutedsl.kernel.skeleton.SkeletonKernel`: roles with
register budgets, a shared-memory plan, then the skeleton's one ``define()``).

One CTA per work unit ``(query block, head, batch)``
(:class:`~cutedsl.collective.work_unit.AttentionUnits` in its grid form: grid
``(ceil(seqlen_q / block_m), heads, batch)``, the unit read from the CTA index), three
warpgroups (384 threads), two roles with ``Arch.attention_wgmma_regs`` budgets:

* ``producer`` (the last warpgroup; ``setmaxnreg.dec`` to 24): one thread loads Q once, then K
  and V of every KV block the mask leaves, each through its own ring
  (:class:`~cutedsl.collective.attention_operands.AttentionOperands`, a configuration of the
  generic :class:`~cutedsl.collective.loader.OperandLoader`);
* ``mma``, two warpgroups sharing one body with their index (``setmaxnreg.inc`` to 240), 64
  query rows each: ``S = Q K^T``, online softmax, ``O += P V``
  (:class:`~cutedsl.collective.attention_mainloop.AttentionMainloop`, optionally overlapped
  inside a warpgroup and ping-ponged between the two), then the epilogue
  (:class:`~cutedsl.collective.attention_epilogue.AttentionEpilogue`).

Skeleton hooks: ``setup`` binds the unit, the operands (barriers initialised and fenced by the
pipelines) and prefetches the tensor maps; ``bind`` the sequence bounds (varlen: from
``cu_seqlens``) and the band; ``roles_scope`` skips a query block past its (shorter) sequence and
computes the KV blocks both roles walk (:meth:`AttentionFwdKernel.kv_blocks`). The unit's key
range -- the band's block range, or the host block mask's list when block-sparse -- is the
mask's (``attention_mask``, ``attention_block_mask``), not the scheduler's: it depends on the
mask, the hooks and (varlen) the sequence, like a GEMM work tile's k range on its problem. No
persistent scheduler: carrying the K/V ring state and reloading Q across units, with the O
store through Q's shared tiles finished first, is not built.

Compile-time variants: ``head_dim`` (64, 96 -- run as 128 with TMA's zero fill --, 128, 256 -- with
64-key KV blocks, :data:`BLOCK_N_FOR`), ``dtype`` (f16, bf16), ``local`` (a causal or
sliding-window band; with ``causal`` its left edge is unbounded -- causal or window ``(-1, right)``
-- and the element mask compares with the right edge only), ``softcap``, ``varlen`` (packed sequences with ``cu_seqlens``),
``overlap``/``pingpong``. Everything else (lengths, heads, scale, window extents) is a kernel
argument. Hooks: ``hooks`` (an :class:`~cutedsl.collective.attention_hooks.AttentionHooks`:
FlexAttention's ``score_mod`` / ``mask_mod``) are called per accumulator element between ``S``
and the softmax, on the scaled score (natural-log units; the softmax's ``log2 e`` comes after),
with ``batch``, the query ``head``, and ``q_idx`` / ``kv_idx`` within the sequence. With a
mask_mod the kernel is block-sparse: the host's block mask (the mask_mod's, intersected with the
band's own blocks, :meth:`AttentionFwdKernel.block_mask`) lists per (batch, head, query block)
the PARTIAL KV blocks (run with the band and the mask_mod per element) and the FULL ones (run
unmasked); SKIP blocks are never loaded. Varlen with hooks is refused (``ConfigError``).

Parameters: ``q``, ``k``, ``v`` (tensor maps), ``o`` (dense: a tensor map, O is stored by TMA through
Q's shared tiles; varlen: ptr, ``dtype``, guarded stores), ``lse`` (ptr, f32),
``seqlen_q``, ``seqlen_k`` (dense: the lengths; varlen: unused maxima), ``heads``, ``group``
(``heads / kv_heads``), ``exp_scale`` (f32), then per variant ``softmax_scale``, ``softcap``,
``softcap_scale``, ``left``, ``right``, ``cu_seqlens_q``, ``cu_seqlens_k``, ``total_q``, the
hooks' own parameters (``hooks.kernel_params()``) and with a mask_mod the block mask's
(:func:`~cutedsl.collective.attention_block_mask.block_mask_params`).
"""
from __future__ import annotations

import contextlib
import math

from ..arch import DEFAULT, get_arch
from ..atom.mma_traits import ATOM_M, mma_traits
from ..collective.attention_block_mask import BlockMaskView, SparseBlocks, block_mask_params, build_block_mask
from ..collective.attention_epilogue import AttentionEpilogue, EpilogueRows
from ..collective.attention_hooks import AttentionHooks
from ..collective.attention_mainloop import AttentionMainloop, UnitContext
from ..collective.attention_mask import AttentionMask, sequence_bounds, unbounded
from ..collective.attention_operands import AttentionOperands
from ..collective.attention_softmax import OnlineSoftmax, SoftmaxParams
from ..collective.work_unit import AttentionUnits
from ..compiler.artifact import ParamSpec as Param
from ..compiler.identity import qualname
from ..errors import ConfigError, one_of
from ..ir._lazy import lazy
from .skeleton import Role, SkeletonKernel

cir = lazy("cutedsl.ir")

HEAD_DIMS = (64, 96, 128, 256)    #: head dimensions implemented (Q/K and V alike)
DTYPES = ("bf16", "f16")
MMA_WARPGROUPS = 2                #: MMA warpgroups per CTA, ``ATOM_M`` query rows each
BLOCK_M = MMA_WARPGROUPS * ATOM_M  #: query rows per work unit
BLOCK_N = 128                     #: keys per KV block (FlashAttention-3's for head dim 128)
#: smaller KV blocks by head dimension: beside a 64 x 256 f32 O (128 registers per thread) S and P
#: of 128 keys would not fit the 240-register budget, nor two K/V stages of 128 x 256 the shared
#: memory; FlashAttention-3 takes 80 keys, here the V tiles hold whole 64-key k-tiles
BLOCK_N_FOR = {256: 64}
STAGES = 2                        #: K and V ring depth
#: why a head dimension is refused (named, not a generic message)
NOT_YET: dict = {}


def padded_head_dim(head_dim: int, k_tile: int = 64) -> int:
    """The head dimension the kernel's tiles cover: a whole number of 64-element k-tiles (96 runs
    as 128: TMA fills Q/K/V columns 96..127 with zeros, which add nothing to ``Q K^T`` and give O
    columns the tensor map / the store guard never write)."""
    return -(-head_dim // k_tile) * k_tile


#: every parameter name the kernel declares in some variant: a hook's parameters must differ
OWN_PARAMS = ("q", "k", "v", "o", "lse", "seqlen_q", "seqlen_k", "heads", "group", "exp_scale", "softmax_scale",
              "softcap", "softcap_scale", "left", "right", "cu_seqlens_q", "cu_seqlens_k", "total_q")


def hooks_reason(hooks: AttentionHooks, reserved=()) -> str | None:
    """Why the kernel cannot take ``hooks`` (a parameter named like one of its own, or like a
    name in ``reserved``, e.g. the front end's call options), or None."""
    taken = set(OWN_PARAMS) | {p.name for p in block_mask_params()} | set(reserved)
    for h in hooks.hooks():
        for p in h.params():
            if p.name in taken:
                return (f"{h.describe()} declares parameter {p.name!r}, a name the attention kernel or its call "
                        f"already uses ({', '.join(sorted(taken))}): rename it")
    return None


def head_dim_reason(head_dim) -> str | None:
    if head_dim in HEAD_DIMS:
        return None
    why = NOT_YET.get(head_dim, "")
    return (f"head_dim must be {one_of(HEAD_DIMS, quote=False)} (the attention kernel's tiles), "
            f"got {head_dim!r}" + (f": {why}" if why else ""))


class AttentionFwdKernel(SkeletonKernel):
    """See the module docstring. Raises ``ConfigError`` for a head dimension, dtype or schedule
    it cannot build (:meth:`reason`)."""

    name = "attention_fwd"
    mma_atom = "wgmma"
    mask_cls = AttentionMask
    softmax_cls = OnlineSoftmax
    HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N = HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N
    BLOCK_N_FOR = BLOCK_N_FOR
    O_DTYPE, O_TMA = None, True         #: O's type (None: the inputs') and whether dense O is a TMA store

    @classmethod
    def reason(cls, head_dim, dtype, overlap=True, pingpong=True) -> str | None:
        """Why this kernel cannot be built for these values, or None."""
        why = head_dim_reason(head_dim)
        if why:
            return why
        if dtype not in cls.DTYPES:
            return f"dtype must be {one_of(cls.DTYPES)} (P is an f16/bf16 register A operand), got {dtype!r}"
        if pingpong and not overlap:
            return "pingpong=True needs overlap=True (the warpgroups take turns at the overlapped GEMM issue points)"
        return None

    def __init__(self, head_dim: int = 128, dtype: str = "bf16", *, local: bool = False, causal: bool = False,
                 softcap: bool = False, varlen: bool = False, overlap: bool = True, pingpong: bool = True, arch=None, hooks=None):
        why = self.reason(head_dim, dtype, overlap, pingpong)
        if why:
            raise ConfigError(f"{type(self).__name__}: {why}")
        self.hooks = hooks if isinstance(hooks, AttentionHooks) else AttentionHooks() if hooks is None else None
        if self.hooks is None:
            raise ConfigError(f"{type(self).__name__}: hooks must be an AttentionHooks, got {type(hooks).__name__}")
        why = hooks_reason(self.hooks)
        if why:
            raise ConfigError(f"{type(self).__name__}: {why}")
        if varlen and self.hooks.hooks():
            raise ConfigError(f"{type(self).__name__}: score_mod / mask_mod with packed sequences (varlen) are not "
                              f"built: a hook's tensors are shaped by one seqlen_q / seqlen_k and its block mask by "
                              f"one problem; pad the sequences to a dense batch (with a mask_mod for the padding)")
        self.arch = get_arch(arch or DEFAULT)
        self.arch.require(self.mma_atom, type(self).__name__)
        if self.arch.attention_wgmma_regs is None:
            raise ConfigError(f"{type(self).__name__}: {self.arch.name} gives no attention_wgmma_regs (the MMA and "
                              f"producer warpgroups' setmaxnreg budgets); set them on its Arch")
        self.head_dim, self.dtype = head_dim, dtype
        if causal and not local:
            raise ConfigError(f"{type(self).__name__}: causal=True is a local band whose left edge is unbounded: "
                              f"pass local=True with it")
        self.local, self.causal = bool(local), bool(causal)
        self.softcap, self.varlen = bool(softcap), bool(varlen)
        self.overlap, self.pingpong = bool(overlap), bool(pingpong)
        self.traits = mma_traits(dtype)
        wg = self.arch.warpgroup_threads
        # plan, then build each collective once
        self.units = AttentionUnits(BLOCK_M)
        self.block_n = self.BLOCK_N_FOR.get(head_dim, BLOCK_N)
        self.o_dtype = self.O_DTYPE or dtype
        padded = padded_head_dim(head_dim, self.traits.k_tile)
        self.operands = self.make_operands(padded)
        self.mask = self.mask_cls(BLOCK_M, self.block_n, self.local, self.causal)
        self.softmax = self.softmax_cls(self.softcap, score_mod=self.hooks.score_mod is not None)
        self.block_sparse = self.hooks.has_mask
        self.mainloop = AttentionMainloop(self.operands, self.mask, self.softmax, self.overlap, self.pingpong,
                                          MMA_WARPGROUPS, wg)
        self.epilogue = AttentionEpilogue(head_dim, self.o_dtype, wg, tma=self.O_TMA and not self.varlen,
                                          padded=padded)
        self.layout()                           # the roles' budget checks, before any IR

    def make_operands(self, head_dim: int):
        """The operands collective for the padded ``head_dim``."""
        return AttentionOperands(head_dim, BLOCK_M, self.block_n, STAGES, self.dtype, self.varlen,
                                 consumer_warps=MMA_WARPGROUPS * self.arch.warps_per_warpgroup)

    def config(self) -> dict:
        return {"arch": self.arch.name, "head_dim": self.head_dim, "dtype": self.dtype, "local": self.local,
                "causal": self.causal, "softcap": self.softcap, "varlen": self.varlen, "overlap": self.overlap, "pingpong": self.pingpong,
                "block": [BLOCK_M, self.block_n], "stages": STAGES, "class": qualname(type(self)),
                "mask": qualname(self.mask_cls), "softmax": qualname(self.softmax_cls),
                "hooks": self.hooks.identity()}

    # -- host contract ---------------------------------------------------------------------
    def params(self) -> list:
        ps = [Param("q", "tensormap"), Param("k", "tensormap"), Param("v", "tensormap"),
              Param("o", "tensormap") if getattr(self.epilogue, "tma", False) else
              Param("o", "ptr", dtype=self.o_dtype, output=True),
              Param("lse", "ptr", dtype="f32", output=True),
              Param("seqlen_q", "i32"), Param("seqlen_k", "i32"), Param("heads", "i32"), Param("group", "i32"),
              Param("exp_scale", "f32")]
        if self.softmax.has_score_mod:
            ps.append(Param("softmax_scale", "f32"))
        if self.softcap:
            ps += [Param("softcap", "f32"), Param("softcap_scale", "f32")]
        if self.local:
            ps += [Param("left", "i32"), Param("right", "i32")]
        if self.varlen:
            ps += [Param("cu_seqlens_q", "ptr", dtype="i32"), Param("cu_seqlens_k", "ptr", dtype="i32"),
                   Param("total_q", "i32")]
        ps += self.hooks.kernel_params()
        if self.block_sparse:
            ps += block_mask_params()
        return ps

    def grid(self, problem) -> tuple:
        """CTAs for an ``AttentionProblem`` (varlen: ``seqlen_q`` is the longest sequence): one per unit."""
        return self.units.grid(problem)

    def tensor_map_extent(self, shape, strides) -> tuple:
        """Host: ``(shape, strides)`` of the Q/K/V tensor maps over an operand of numpy
        ``shape`` / byte ``strides`` in FlashAttention's layout (heads before the sequence)."""
        return self.operands.map_extent(tuple(shape), tuple(strides), self.varlen)

    def scalar_values(self, problem, softmax_scale: float, softcap=None, window=(-1, -1)) -> dict:
        """Host: the scalar parameters for ``problem`` (an ``AttentionProblem`` of ints), the
        scale, the softcap and the band ``window = (left, right)`` (``-1``: unbounded)."""
        vals = {"seqlen_q": problem.seqlen_q, "seqlen_k": problem.seqlen_k, "heads": problem.heads,
                "group": problem.group}
        log2e = 1.0 / math.log(2.0)
        vals["exp_scale"] = softmax_scale * log2e if self.softmax.scale_in_exponent else log2e
        if self.softmax.has_score_mod:
            vals["softmax_scale"] = softmax_scale
        if self.softcap:
            vals["softcap"], vals["softcap_scale"] = float(softcap), softmax_scale / float(softcap)
        if self.local:
            far = unbounded(problem.seqlen_q, problem.seqlen_k)
            vals["left"], vals["right"] = (far if w < 0 else w for w in window)
        return vals

    def block_mask(self, problem, window=(-1, -1), args=None):
        """Host, block-sparse kernels: the ``BlockMask`` of the hooks' mask_mod on ``problem``
        (an ``AttentionProblem``; ``args``: the mask_mod's parameters by name, numpy) for this
        kernel's tiles, intersected with the band's own blocks (``window`` as in
        :meth:`scalar_values`): its :meth:`~BlockMask.values` are the block mask parameters."""
        sizes = {"batch": problem.batch, "heads": problem.heads, "seqlen_q": problem.seqlen_q,
                 "seqlen_k": problem.seqlen_k}
        bm = build_block_mask(self.hooks, sizes, BLOCK_M, self.block_n, args)
        far = unbounded(problem.seqlen_q, problem.seqlen_k)
        left, right = (far if w < 0 else w for w in window) if self.local else (0, 0)
        return bm.restrict(self.mask.block_kinds(problem.seqlen_q, problem.seqlen_k, left, right))

    # -- plan (the skeleton's) --------------------------------------------------------------
    #: the producer's branch (setmaxnreg.dec) is emitted before the MMA warpgroups' (.inc)
    dispatch_order = ("producer", "mma")

    def roles(self) -> tuple:
        """Two MMA warpgroups (one body, told their index), then the producer warpgroup; budgets
        ``arch.attention_wgmma_regs`` (240 / 24)."""
        mma, producer = self.arch.attention_wgmma_regs
        return Role.warpgroups("mma", MMA_WARPGROUPS, regs=mma), Role.warpgroups("producer", regs=producer)

    @property
    def launch_registers(self) -> int:
        """``.maxnreg`` at launch: what 384 threads can have (168); setmaxnreg moves the producer's to
        the MMA warpgroups."""
        return self.arch.launch_regs(self.arch.warpgroup_threads * (MMA_WARPGROUPS + 1))

    def declare_smem(self, plan, stages=None) -> None:
        """Q, the K and V rings and their barriers (``stages`` is fixed: :data:`STAGES`)."""
        self.operands.plan(plan)

    def tensor_maps(self) -> list:
        return self.operands.tensor_maps() + self.epilogue.tensor_maps()

    # -- build (the skeleton's hooks) -----------------------------------------------------------
    def setup(self, b) -> None:
        """The unit (CTA index), the operands' atoms and barriers (initialised by thread 0; the K and
        V pipelines fence the inits), the tensor maps prefetched."""
        leader = b.leader
        b.unit = self.units.grid_unit()
        b.ops = self.operands.bind(b.smem, b.args, leader)
        self.operands.prefetch(b.ops, predicate=leader)
        b.init_fenced = True

    def bind(self, b) -> None:
        """The unit's sequence (varlen: its offsets and lengths), first query row and band."""
        b.q_start, b.k_start, b.seqlen_q, b.seqlen_k = sequence_bounds(b.args, b.unit.batch, self.varlen)
        b.m0 = b.unit.q_block * BLOCK_M
        b.left, b.right = (b.args.left, b.args.right) if self.local else (0, 0)

    @contextlib.contextmanager
    def roles_scope(self, b):
        """The roles run only for a query block inside its sequence (a shorter varlen sequence's
        blocks past its end do nothing); ``b.blocks``: the KV blocks both roles walk."""
        with cir.If(b.m0 < b.seqlen_q):
            b.blocks = self.kv_blocks(b)
            yield

    def kv_blocks(self, b):
        """The unit's KV blocks: the host's block mask row when block-sparse (a
        :class:`~cutedsl.collective.attention_block_mask.SparseBlocks`), else the band's
        :meth:`~cutedsl.collective.attention_mask.AttentionMask.block_range`."""
        u = b.unit
        if self.block_sparse:
            view = BlockMaskView(b.args)
            return SparseBlocks(view, view.row(u.batch, u.head, u.q_block))
        return self.mask.block_range(b.m0, b.seqlen_q, b.seqlen_k, b.left, b.right)

    def role_producer(self, b, index) -> None:
        """The producer warpgroup (:meth:`producer_role`: by default its first thread issues every load)."""
        self.producer_role(b.ops, b.args, b.unit.batch, b.unit.head, b.m0 + b.q_start, b.k_start, b.blocks,
                           b.tid % self.arch.warpgroup_threads)

    def role_mma(self, b, wg) -> None:
        """MMA warpgroup ``wg`` (0 or 1, i32): query rows ``m0 + 64 wg ..`` (:meth:`consumer`)."""
        self.consumer(b.ops, b.args, b.unit.batch, b.unit.head, cir.i32(wg), b.m0, b.q_start, b.seqlen_q,
                      b.seqlen_k, b.left, b.right, b.blocks)

    def _lead(self, batch, head) -> tuple:
        return (head,) if self.varlen else (batch, head)

    def producer_role(self, ops, args, batch, head, q_row, k_start, rng, thread) -> None:
        """The producer warpgroup (``thread``: its thread index): thread 0 loads."""
        with cir.If(thread.eq(0)):
            self.producer(ops, args, batch, head, q_row, k_start, rng)

    def producer(self, ops, args, batch, head, q_row, k_start, rng) -> None:
        """One thread: Q once, then K and V of blocks ``n_max - 1`` down to ``n_min``."""
        from ..collective.pipeline import PipelineState
        self.operands.load_q(ops, self._lead(batch, head), q_row)
        kv_lead = self._lead(batch, head // args.group)
        loop = cir.Loop(0, rng.count, carry=PipelineState(STAGES).carry(), counter="i32")
        for it, carried in loop:
            st = PipelineState.from_carry(STAGES, carried)
            j = rng.block(rng.n_max - 1 - cir.i32(it))
            self.operands.load_kv(ops, st, kv_lead, k_start + j * self.block_n)
            loop.next(*st.advance().carry())

    def consumer(self, ops, args, batch, head, wg, m0, q_start, seqlen_q, seqlen_k, left, right, rng) -> None:
        """An MMA warpgroup: wait for Q, run the main loop (none when no KV block is left:
        O = 0, LSE = +inf), store O and LSE."""
        from ..atom.wgmma import Accumulator
        from ..collective.attention_softmax import SoftmaxState
        sm_params = SoftmaxParams(args.exp_scale, getattr(args, "softmax_scale", None),
                                  getattr(args, "softcap", None), getattr(args, "softcap_scale", None))
        row0 = m0 + wg * ATOM_M
        bound = None
        if self.hooks.hooks():
            from ..ir import grid_dim
            sizes = {"batch": cir.i32(grid_dim("z")), "heads": args.heads, "seqlen_q": seqlen_q, "seqlen_k": seqlen_k}
            bound = self.hooks.bind(args, sizes)
        ctx = UnitContext(batch, head, row0, seqlen_q, seqlen_k, left, right, sm_params, wg, bound)
        ops.q_bar.wait(0, 0)
        zero, init = self.mainloop.pv.zero(), self.softmax.initial(1)
        types = [s.type for s in zero.structs] + [x.type for x in init.carry()]
        br = cir.If(rng.count > 0, results=types)
        with br.then_():
            o, sm = self.mainloop.run(ops, ctx, rng)
            br.yield_(*(o.structs + sm.carry()))
        with br.else_():
            zero, init = self.mainloop.pv.zero(), self.softmax.initial(1)
            br.yield_(*(zero.structs + init.carry()))
        res = list(br.results)
        o = Accumulator(res[:zero.m_blocks], zero.n)
        sm = SoftmaxState.from_carry(res[zero.m_blocks:], zero.m_blocks)
        inv, lse = self.softmax.finalize(sm, args.exp_scale)
        inv = self.output_scale(inv, args)
        if self.varlen:
            o_row0, lse_base = q_start, head * args.total_q + q_start
        else:
            o_row0, lse_base = batch * seqlen_q, (batch * args.heads + head) * seqlen_q
        rows = EpilogueRows(o_row0, lse_base, head, args.heads, row0, seqlen_q, batch, wg)
        self.epilogue.store(o, inv, lse, rows, args.o, args.lse, ops.smem)

    def output_scale(self, inv, args):
        """The per-row factors O is multiplied by (``inv[b][h]``: 1 / row sum)."""
        return inv


__all__ = ["AttentionFwdKernel", "HEAD_DIMS", "DTYPES", "BLOCK_M", "BLOCK_N", "BLOCK_N_FOR", "OWN_PARAMS", "padded_head_dim", "head_dim_reason",
           "hooks_reason"]
