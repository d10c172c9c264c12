"""FlashAttention-4-style attention forward on Blackwell (sm_100a): S, P and O in tensor memory,
two Q tiles per CTA, one warp issuing every ``tcgen05.mma``, softmax at one thread per row, a
separate correction warpgroup -- on the warp-specialized skeleton
(:class:`~cutedsl.kernel.skeleton.SkeletonKernel`), composed from the library's atoms and
collectives, sharing the Hopper kernel's operands, masks, score transform and host parameters (no
subclass of it, nor of a GEMM).

One CTA per work unit ``(query block of 256 rows, head, batch)`` (grid ``(ceil(seqlen_q / 256),
heads, batch)``), sixteen warps (512 threads, four warpgroups; FlashAttention-4's ``setmaxnreg``
budgets, :attr:`~cutedsl.arch.Arch.attention_regs`: 184 / 80 / 64, .maxnreg 128 at launch):

* warpgroups 0 and 1, the softmax warpgroups (role ``softmax``, 184 registers): warpgroup ``g``
  owns Q tile ``g`` (rows ``128 g ..``), thread ``t`` its row ``t`` (TMEM lane ``t``); per KV block
  it reads S, masks, runs the online softmax (a share of the exponentials by the FMA-pipe
  polynomial, ``exp2_poly``: :mod:`cutedsl.ir.fexp2`), hands the row's correction factor to the
  correction warpgroup and writes P back over S
  (:meth:`~cutedsl.collective.attention_tmem_mainloop.TmemAttentionMainloop.softmax_block`);
  at the end ``1 / l`` and the LSE;
* warpgroup 2, the correction warpgroup (role ``correction``, 80 registers): per block and tile
  it rescales O in tensor memory where a row's maximum moved past FlashAttention-4's threshold
  (only in a warp with such a row), before the next ``P V``, then stores O times ``1 / l`` and the
  LSE (:class:`~cutedsl.collective.attention_tmem_correction.TmemCorrection`,
  :class:`~cutedsl.collective.attention_tmem_epilogue.TmemAttentionEpilogue`);
* warpgroup 3 (role ``mma``, 64 registers): warp 12, the MMA warp, allocates the tensor memory
  (two S/P and two O regions: 512 columns at head dim 128) and issues both tiles' ``S = Q K^T``
  and ``O += P V`` (A = P from tensor memory), interleaved so that the tensor core runs one
  tile's MMAs while the other's softmax works
  (:meth:`~cutedsl.collective.attention_tmem_mainloop.TmemAttentionMainloop.mma_loop`); warp 13,
  the producer: one thread loads Q (256 rows) once, then K and V of every KV block the mask
  leaves, each through its own ring (:class:`~cutedsl.collective.attention_operands.AttentionOperands`);
  warps 14 and 15 only complete the warpgroup ``setmaxnreg`` needs.

Thread 0 initialises every barrier inside its own branch and each role binds its shared memory,
barriers and work unit after its ``setmaxnreg`` (a value made before it and used after it is kept
across -- or spilled: see :data:`DISPATCH_ORDER`).

Both tiles visit the same KV blocks (the mask's block range of the 256 rows); a row of tile 0
with no key in a block the range keeps for tile 1 sees an all-masked block, which the online
softmax takes as P = 0.

Compile-time variants as the Hopper kernel's: ``head_dim`` (64, 128), ``dtype`` (f16, bf16),
``local`` (causal / sliding window, with whole-block skipping), ``softcap``, ``varlen``, and
``hooks`` (an :class:`~cutedsl.collective.attention_hooks.AttentionHooks`, FlexAttention's
score_mod / mask_mod, as on sm_90a: score_mod on every visited block at each thread's (batch,
head, row, key), mask_mod in the PARTIAL blocks; with a mask_mod the host's block mask of this
kernel's 256 x 128 blocks (:meth:`block_mask`) lists the blocks to visit and SKIP blocks are never
loaded; varlen with hooks is refused). The parameters are the Hopper kernel's (:meth:`params`);
the grid counts 256-row units.

``cta_pair`` (FlashAttention-4's 2-CTA forward; head dim 128, dense, non-causal, no hooks --
:meth:`AttentionFwdSm100Kernel.cta_pair_reason`): clusters of two CTAs along x, CTAs ``2 i`` and
``2 i + 1`` of query blocks ``2 i`` and ``2 i + 1``, whose tile ``g`` together form the 256 rows of
one ``cta_group::2`` MMA issued by the even CTA's MMA warp (the odd CTA's MMA warp idles). Each CTA
keeps its rows of S, P and O in its own tensor memory (allocated with ``cta_group::2``), loads its
Q, half of each K block's keys and half of V's columns
(:class:`~cutedsl.collective.attention_operands.AttentionOperands` with ``pair``; the loads complete
on the even CTA's barriers); the MMA warp's commits are multicast to both CTAs, and the softmax and
correction threads of both arrive on the even CTA's ``p_full`` / ``o_ready``. Both CTAs visit every
KV block (the band of a non-causal call does not depend on the query rows) and work while the even
CTA has rows: the odd CTA past the sequence computes on TMA's zero-filled Q and stores nothing.
"""
from __future__ import annotations

import attrs

from ..arch import get_arch
from ..collective.attention_block_mask import BlockMaskView, SparseBlocks, build_block_mask
from ..collective.attention_epilogue import EpilogueRows
from ..collective.attention_hooks import AttentionHooks
from ..collective.attention_mainloop import UnitContext
from ..collective.attention_mask import AttentionMask, sequence_bounds
from ..collective.attention_operands import AttentionOperands
from ..collective.attention_softmax import SoftmaxParams
from ..collective.attention_tmem_correction import RowStats, TmemCorrection
from ..collective.attention_tmem_epilogue import TmemAttentionEpilogue
from ..collective.attention_tmem_mainloop import TmemAttentionMainloop
from ..collective.attention_tmem_softmax import RESCALE_THRESHOLD, RowState, TmemRowSoftmax
from ..collective.gemm_operands import CTA_PAIR
from ..compiler.identity import qualname
from ..errors import ConfigError, one_of
from ..ir._lazy import lazy
from . import attention as hopper
from .skeleton import Role, SkeletonKernel

cir = lazy("cutedsl.ir")

HEAD_DIMS = (64, 128)
PAIR_HEAD_DIMS = (128,)           #: head dims of the CTA-pair variant (V split in whole 64-column boxes)
DTYPES = ("bf16", "f16")
TILE_M = 128                      #: query rows per Q tile: the tcgen05 MMA's M, one per TMEM lane
Q_TILES = 2                       #: Q tiles per CTA (FlashAttention-4's two softmax warpgroups)
BLOCK_M = Q_TILES * TILE_M        #: query rows per work unit
BLOCK_N = 128                     #: keys per KV block
STAGES = 2                        #: K and V ring depth
MMA_WARP, PRODUCER_WARP = 12, 13  #: the warps of the last warpgroup that issue the MMAs and load
WARPS = 16                        #: four whole warpgroups (setmaxnreg is per warpgroup)
#: role branch order per head dimension (spills measured with ptxas 13.5, bytes stored / loaded, each
#: role reading seqlen_k through an opaque move, :meth:`AttentionFwdSm100Kernel.unit`):
#: 128 -- 0 / 0 (mma, correction, softmax: 8 / 28; softmax first: 8 / 8; without the opaque move 4 / 12);
#: 64 -- 0 / 0 (mma, softmax, correction: 16 / 40)
DISPATCH_ORDER = {128: ("mma", "softmax", "correction"), 64: ("mma", "correction", "softmax")}
NOT_YET = {256: "two Q tiles (256 x 256), two K and two V stages of 128 x 256 16-bit elements are 384 KiB of shared "
                "memory (sm_100a has 227 KiB per CTA), and two S and two O regions 768 of the 512 tensor-memory "
                "columns: a 256-wide head needs one Q tile, one-stage rings or a split V; not built"}


def reason(head_dim, dtype) -> str | None:
    """Why the sm_100a kernel cannot be built for these values, or None."""
    if head_dim not in HEAD_DIMS:
        why = NOT_YET.get(head_dim) or hopper.NOT_YET.get(head_dim, "")
        return (f"head_dim must be {one_of(HEAD_DIMS, quote=False)} on sm_100a, got {head_dim!r}"
                + (f": {why}" if why else ""))
    if dtype not in DTYPES:
        return f"dtype must be {one_of(DTYPES)} (P is a 16-bit tensor-memory A operand), got {dtype!r}"
    return None


@attrs.frozen
class Unit:
    """One CTA's work unit (IR values): sequence starts and lengths, first query row, band
    extents, ``live`` (i1: it has rows) and the mask's ``rng``."""
    q_start: object
    k_start: object
    seqlen_q: object
    seqlen_k: object
    m0: object
    left: object
    right: object
    live: object
    rng: object


class AttentionFwdSm100Kernel(SkeletonKernel):
    """See the module docstring. ``threshold``: the correction threshold (log2 units; 0 rescales
    O whenever a row maximum grows; None: the class's :attr:`THRESHOLD`). ``exp2_poly``: how many
    of a row's 128 exponentials per KV block the polynomial evaluates on the FMA pipes (an even int
    0..128; None: :attr:`EXP2_POLY`). Raises ``ConfigError`` for a head dimension or dtype it
    cannot build (:func:`reason`) or a bad ``exp2_poly`` (:meth:`exp2_poly_reason`). ``cta_pair``:
    the CTA-pair variant (module docstring); ``ConfigError`` where :meth:`cta_pair_reason` says why
    not."""

    name = "attention_fwd_sm100"
    mma_atom = "tcgen05"
    mask_cls = AttentionMask
    softmax_cls = TmemRowSoftmax
    HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N = HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N
    THRESHOLD = RESCALE_THRESHOLD     #: FlashAttention-4's correction threshold (a subclass may change it)
    #: exponentials per row and KV block on the FMA pipes by default (FlashAttention-4: 23 of 128)
    EXP2_POLY = 24

    # the host contract is the Hopper kernel's: the same parameters, maps and scalars
    params = hopper.AttentionFwdKernel.params
    tensor_map_extent = hopper.AttentionFwdKernel.tensor_map_extent
    scalar_values = hopper.AttentionFwdKernel.scalar_values

    @classmethod
    def reason(cls, head_dim, dtype, overlap=True, pingpong=True) -> str | None:
        return reason(head_dim, dtype)

    @classmethod
    def exp2_poly_reason(cls, exp2_poly) -> str | None:
        """Why ``exp2_poly`` (exponentials per row and KV block on the FMA pipes) cannot be built."""
        if isinstance(exp2_poly, bool) or not isinstance(exp2_poly, int) or exp2_poly % 2 \
                or not 0 <= exp2_poly <= BLOCK_N:
            return (f"exp2_poly must be an even int in 0..{BLOCK_N} (exponentials of a row's {BLOCK_N}-key block "
                    f"evaluated in pairs by the polynomial; 0: all on MUFU), got {exp2_poly!r}")
        return None

    def __init__(self, head_dim: int = 128, dtype: str = "bf16", *, local: bool = False, softcap: bool = False,
                 varlen: bool = False, arch="sm_100a", threshold: float | None = None, hooks=None,
                 exp2_poly: int | None = None, cta_pair: bool = False):
        why = reason(head_dim, dtype) or self.exp2_poly_reason(self.EXP2_POLY if exp2_poly is None else exp2_poly)
        if not why and cta_pair:
            why = self.cta_pair_reason(head_dim, local, varlen, hooks)
        if why:
            raise ConfigError(f"{type(self).__name__}: {why}")
        self.cta_pair = bool(cta_pair)
        self.exp2_poly = self.EXP2_POLY if exp2_poly is None else exp2_poly
        self.hooks = hooks if isinstance(hooks, AttentionHooks) else AttentionHooks() if hooks is None else None
        if self.hooks is None:
            raise ConfigError(f"{type(self).__name__}: hooks must be an AttentionHooks, got {type(hooks).__name__}")
        why = hopper.hooks_reason(self.hooks)
        if why:
            raise ConfigError(f"{type(self).__name__}: {why}")
        if varlen and self.hooks.hooks():
            raise ConfigError(f"{type(self).__name__}: score_mod / mask_mod with packed sequences (varlen) are not "
                              f"built (as on sm_90a): pad the sequences to a dense batch")
        self.arch = get_arch(arch)
        self.arch.require(self.mma_atom, type(self).__name__)
        self.head_dim, self.dtype = head_dim, dtype
        self.o_dtype = dtype                    # O in the inputs' type (the shared host parameters read it)
        self.local, self.softcap, self.varlen = bool(local), bool(softcap), bool(varlen)
        self.threshold = float(self.THRESHOLD if threshold is None else threshold)
        self.block_sparse = self.hooks.has_mask     # a mask_mod: the host's block mask lists the KV blocks
        # K and V slots are released by one tcgen05.commit each
        self.tile_threads = self.arch.warpgroup_threads        # one softmax thread per row of a tile
        self.operands = AttentionOperands(head_dim, BLOCK_M, BLOCK_N, STAGES, dtype, self.varlen, consumer_warps=1,
                                          pair=self.cta_pair)
        self.mask = self.mask_cls(BLOCK_M, BLOCK_N, self.local)
        self.softmax = self.softmax_cls(self.softcap, self.threshold, score_mod=self.hooks.score_mod is not None,
                                        exp2_poly=self.exp2_poly)
        self.mainloop = TmemAttentionMainloop(self.operands, self.mask, self.softmax, self.tile_threads, Q_TILES)
        self.epilogue = TmemAttentionEpilogue(head_dim, dtype, self.tile_threads)
        self.stats = RowStats(Q_TILES, self.tile_threads)
        self.correction = TmemCorrection(head_dim, self.mainloop.tmem.o)
        #: setmaxnreg budgets from the architecture (Arch.attention_regs, FlashAttention-4's):
        #: softmax, correction, MMA / producer warpgroup; .maxnreg at launch is what the CTA's 512
        #: threads may hold together (the layout checks the budgets fit the SM's registers).
        self.launch_regs = self.arch.launch_regs(WARPS * self.arch.warp_threads)
        self.layout()

    @staticmethod
    def cta_pair_reason(head_dim, local=False, varlen=False, hooks=None) -> str | None:
        """Why the CTA-pair variant (``cta_pair``) cannot be built for these values, or None: it
        is built for the dense non-causal forward at head dim 128 (FlashAttention-4's 2-CTA case),
        where the pair's two CTAs visit the same KV blocks."""
        has_hooks = hooks is not None and (not isinstance(hooks, AttentionHooks) or hooks.hooks())
        if head_dim not in PAIR_HEAD_DIMS:
            return (f"cta_pair=True is built for head_dim {one_of(PAIR_HEAD_DIMS, quote=False)} (each CTA loads half "
                    f"of V's columns: whole 64-column boxes), got {head_dim}; use cta_pair=False")
        for on, what in ((local, "a causal or sliding-window band"), (varlen, "packed sequences (varlen)"),
                         (has_hooks, "score_mod / mask_mod hooks")):
            if on:
                return (f"cta_pair=True (one cta_group::2 MMA for two CTAs' query blocks, which must visit the same "
                        f"KV blocks) is built for the dense non-causal forward, not with {what}; use cta_pair=False")
        return None

    @property
    def cluster_ctas(self) -> int:
        """2 for a CTA pair (a cluster of two along x), else 1."""
        return CTA_PAIR if self.cta_pair else 1

    def block_mask(self, problem, window=(-1, -1), args=None):
        """Host, block-sparse kernels: the hooks' ``BlockMask`` over this kernel's 256 x 128
        blocks, intersected with the band's (as
        :meth:`~cutedsl.kernel.attention.AttentionFwdKernel.block_mask`)."""
        sizes = {"batch": problem.batch, "heads": problem.heads, "seqlen_q": problem.seqlen_q,
                 "seqlen_k": problem.seqlen_k}
        bm = build_block_mask(self.hooks, sizes, BLOCK_M, BLOCK_N, args)
        vals = self.scalar_values(problem, 1.0, window=window)
        return bm.restrict(self.mask.block_kinds(problem.seqlen_q, problem.seqlen_k, vals.get("left", 0),
                                                 vals.get("right", 0)))

    def grid(self, problem) -> tuple:
        """CTAs for an ``AttentionProblem`` (varlen: ``seqlen_q`` is the longest sequence): one
        per 256 query rows (a pair: rounded up to whole pairs)."""
        blocks = max(1, -(-problem.seqlen_q // BLOCK_M))
        if self.cta_pair:
            blocks += blocks % CTA_PAIR
        return (blocks, problem.heads, problem.batch)

    def config(self) -> dict:
        return {"arch": self.arch.name, "head_dim": self.head_dim, "dtype": self.dtype, "local": self.local,
                "softcap": self.softcap, "varlen": self.varlen, "threshold": self.threshold, "exp2_poly": self.exp2_poly,
                "block": [BLOCK_M, BLOCK_N], "q_tiles": Q_TILES, "stages": STAGES,
                **({"cta_pair": True} if self.cta_pair else {}),
                "setmaxnreg": list(self.arch.attention_regs), "class": qualname(type(self)),
                "mask": qualname(self.mask_cls), "softmax": qualname(self.softmax_cls), "hooks": self.hooks.identity()}

    # -- plan (skeleton) --------------------------------------------------------------------
    def roles(self) -> tuple:
        """Two softmax warpgroups, the correction warpgroup, the MMA / producer warpgroup, with
        FlashAttention-4's ``setmaxnreg`` budgets (:attr:`~cutedsl.arch.Arch.attention_regs`)."""
        soft, corr, other = self.arch.attention_regs
        return (Role.warpgroups("softmax", Q_TILES, regs=soft), Role.warpgroups("correction", 1, regs=corr),
                Role.warpgroups("mma", 1, regs=other))

    @property
    def dispatch_order(self) -> tuple:
        """The order of the role branches in the code (not in time: each warpgroup runs one).
        LLVM and ptxas hoist values several roles compute alike (barrier addresses; ``-seqlen_k``
        until each role read ``seqlen_k`` opaquely) above the dispatch and keep them live through
        the branches before their last user, each under its own setmaxnreg budget;
        :data:`DISPATCH_ORDER` holds the order that measured the fewest spills per head dimension."""
        return DISPATCH_ORDER[self.head_dim]

    @property
    def launch_registers(self) -> int:
        return self.launch_regs

    def declare_smem(self, plan, stages=None) -> None:
        self.operands.plan(plan)
        self.mainloop.plan(plan)

    def tensor_maps(self) -> list:
        return self.operands.tensor_maps()

    # -- IR hooks ---------------------------------------------------------------------------
    def setup(self, b) -> None:
        """Thread 0 initialises every barrier and prefetches the tensor maps; the MMA warp
        allocates the tensor memory."""
        # inside a branch, not predicated at the kernel entry: the barrier addresses made here
        # then do not dominate the roles' own, and no role keeps (or spills) them across its
        # setmaxnreg -- each rematerialises its static addresses after it
        with cir.If(b.leader):
            ops = self.operands.bind(b.smem, b.args, None)      # its init ends with fence.mbarrier_init
            self.mainloop.init(self.mainloop.bind(b.smem), None)
            self.operands.prefetch(ops)
        b.init_fenced = True
        self.alloc_tensor_memory(b, self.mainloop.tmem.columns, warp=MMA_WARP,
                                 cta_group=CTA_PAIR if self.cta_pair else 1)

    def _role_context(self, b):
        """What a role needs, made after its ``setmaxnreg`` (a value made before it and used after
        it is kept -- or spilled -- across: ptxas 13.5 put local loads into the MMA loop): the
        shared memory bound again, the hand-off barriers, the TMEM address, the work unit."""
        from ..ir import block_idx
        smem = b.smem.rebind()
        qb, head, batch = (cir.i32(block_idx(d)) for d in ("x", "y", "z"))
        return smem, self.mainloop.bind(smem), b.tmem.address(), (qb, head, batch)

    def role_softmax(self, b, g) -> None:
        """Softmax warpgroup ``g`` (IR i32): Q tile ``g``'s rows."""
        smem, bars, taddr, (qb, head, batch) = self._role_context(b)
        u = self.unit(b.args, qb, head, batch)
        with cir.If(u.live):
            self.softmax_warps(bars, taddr, b.args, batch, head, u, g)

    def role_correction(self, b, index) -> None:
        """The correction warpgroup: O's rescaling per block, then both tiles' epilogues."""
        smem, bars, taddr, (qb, head, batch) = self._role_context(b)
        u = self.unit(b.args, qb, head, batch)
        with cir.If(u.live):
            self.correction_warps(bars, taddr, b.args, batch, head, u)

    def role_mma(self, b, index) -> None:
        """Warp 12 issues the MMAs, lane 0 of warp 13 loads; warps 14 and 15 idle (setmaxnreg
        is per warpgroup). Each warp makes its own context inside its branch: values shared by
        the two branches were kept in uniform registers through the MMA loop and spilled."""
        from ..ir import thread_idx
        from ..ir.values import warp_uniform
        tid = thread_idx()
        warp = warp_uniform(tid // self.arch.warp_threads)
        # the MMA warp not inside a branch on ``live``: there ptxas treats its loop as
        # possibly divergent and moves every descriptor to uniform registers per MMA
        issuer = warp.eq(MMA_WARP)
        if self.cta_pair:                   # the pair's even CTA issues the MMAs of both
            from ..atom.cluster import cta_rank
            issuer = issuer & (cta_rank() % CTA_PAIR).eq(0)
        with cir.If(issuer):
            smem, bars, taddr, (qb, head, batch) = self._role_context(b)
            ops = self.operands.bind(smem, b.args, None, init=False)
            u = self.unit(b.args, qb, head, batch)
            self.mainloop.mma_loop(ops, bars, taddr, cir.select(u.live, u.rng.count, cir.i32(0)), u.live)
        with cir.If(warp.eq(PRODUCER_WARP) & (tid % self.arch.warp_threads).eq(0)):
            smem, bars, taddr, (qb, head, batch) = self._role_context(b)
            ops = self.operands.bind(smem, b.args, None, init=False)
            u = self.unit(b.args, qb, head, batch)
            with cir.If(u.live):
                self.producer(ops, b.args, batch, head, u.m0 + u.q_start, u.k_start, u.rng)

    def unit(self, args, qb, head, batch) -> Unit:
        """The work unit of CTA ``(qb, head, batch)``: its sequence (varlen: from the
        ``cu_seqlens`` arrays), first row ``m0``, band extents, whether it has rows (``live``)
        and the mask's block range of its 256 rows."""
        q_start, k_start, seqlen_q, seqlen_k = sequence_bounds(args, batch, self.varlen)
        if not self.varlen:     # each role derives its own bounds (-seqlen_k of the block count, ...):
            # LLVM hoisted those every role computes alike above the role dispatch, and ptxas spilled
            # them across the setmaxnreg of the roles before their user (4 B / 12 B at head dim 128)
            seqlen_k = cir.opaque(seqlen_k)
        m0 = qb * BLOCK_M
        # a pair works while its even CTA has rows: both CTAs feed and take every MMA
        live = ((qb & ~1) * BLOCK_M if self.cta_pair else m0) < seqlen_q
        left, right = (args.left, args.right) if self.local else (0, 0)
        if self.block_sparse:                   # the host's block mask lists the KV blocks to visit
            view = BlockMaskView(args)
            rng = SparseBlocks(view, view.row(batch, head, qb))
        else:
            rng = self.mask.block_range(m0, seqlen_q, seqlen_k, left, right)
        return Unit(q_start, k_start, seqlen_q, seqlen_k, m0, left, right, live, rng)

    def _lead(self, batch, head) -> tuple:
        return (head,) if self.varlen else (batch, head)

    def producer(self, ops, args, batch, head, q_row, k_start, rng) -> None:
        """One thread: Q once, then K and V of blocks ``n_max - 1`` down to ``n_min``."""
        from ..collective.pipeline import PipelineState
        self.operands.load_q(ops, self._lead(batch, head), q_row)
        kv_lead = self._lead(batch, head // args.group)
        loop = cir.Loop(0, rng.count, carry=PipelineState(STAGES).carry())
        for it, carried in loop:
            st = PipelineState.from_carry(STAGES, carried)
            j = rng.block(rng.n_max - 1 - cir.i32(it)) if self.block_sparse else rng.n_max - 1 - cir.i32(it)
            self.operands.load_kv(ops, st, kv_lead, k_start + j * BLOCK_N)
            loop.next(*st.advance().carry())

    def softmax_warps(self, bars, taddr, args, batch, head, u: Unit, g) -> None:
        """Softmax warpgroup ``g`` (IR i32; Q tile ``g``, rows ``m0 + 128 g ..``): every KV block in
        the mask's three ranges (masked, unmasked, masked), then the epilogue."""
        ml = self.mainloop
        params = SoftmaxParams(args.exp_scale, getattr(args, "softmax_scale", None), getattr(args, "softcap", None),
                               getattr(args, "softcap_scale", None))
        seqlen_q, q_start, rng = u.seqlen_q, u.q_start, u.rng
        row0 = u.m0 + g * TILE_M
        bound = None
        if self.hooks.hooks():
            from ..ir import grid_dim
            sizes = {"batch": cir.i32(grid_dim("z")), "heads": args.heads, "seqlen_q": seqlen_q, "seqlen_k": u.seqlen_k}
            bound = self.hooks.bind(args, sizes)
        ctx = UnitContext(batch, head, row0, seqlen_q, u.seqlen_k, u.left, u.right, params, g, bound)
        state, n = self.softmax.initial_row(), cir.i32(0)
        for lo, hi, masked in ((rng.u_hi, rng.n_max, True), (rng.u_lo, rng.u_hi, False), (rng.n_min, rng.u_lo, True)):
            loop = cir.Loop(0, hi - lo, carry=state.carry() + [n])
            for it, carried in loop:
                st, n = RowState.from_carry(carried), carried[2]
                v = hi - 1 - cir.i32(it)
                j = rng.block(v, masked) if self.block_sparse else v
                st = ml.softmax_block(bars, self.stats, taddr, ctx, st, n, j, masked, g)
                loop.next(*(st.carry() + [n + 1]))
            res = list(loop.results)
            state, n = RowState.from_carry(res), res[2]
        inv, lse = self.softmax.finalize_row(state, args.exp_scale)
        self.stats.put(g, RowStats.INV, inv)         # the correction warpgroup stores O and the LSE
        self.stats.put(g, RowStats.LSE, lse)
        bars.stats_full.arrive(g)

    def correction_warps(self, bars, taddr, args, batch, head, u: Unit) -> None:
        """The correction warpgroup (thread ``t``: row ``t`` of each tile): every block's
        rescaling of O (:class:`~cutedsl.collective.attention_tmem_correction.TmemCorrection`),
        then per tile O times ``1 / l`` and the LSE to global memory."""
        count = u.rng.count
        self.correction.loop(bars, self.stats, taddr, count)
        if self.varlen:
            o_row0, lse_base = u.q_start, head * args.total_q + u.q_start
        else:
            o_row0, lse_base = batch * u.seqlen_q, (batch * args.heads + head) * u.seqlen_q
        for g in range(Q_TILES):
            inv, lse = self.correction.final(bars, self.stats, count, g)
            rows = EpilogueRows(o_row0, lse_base, head, args.heads, u.m0 + g * TILE_M, u.seqlen_q)
            self.epilogue.store(self.mainloop.tile_address(taddr, self.mainloop.tmem.o, g), count, inv, lse, rows,
                                args.o, args.lse)


__all__ = ["AttentionFwdSm100Kernel", "HEAD_DIMS", "DTYPES", "BLOCK_M", "BLOCK_N", "TILE_M", "Q_TILES", "reason"]
