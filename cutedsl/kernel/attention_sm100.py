"""FlashAttention-4-style attention forward on Blackwell (sm_100a): S, P and O in tensor memory,
one warp issuing every ``tcgen05.mma``, softmax at one thread per row -- composed from the
library's atoms and collectives, sharing the Hopper kernel's operands, masks, score transform and
host contract (no subclass of it, nor of a GEMM).

One CTA per work unit ``(query block of 128 rows, head, batch)`` (grid ``(ceil(seqlen_q / 128),
heads, batch)``), six warps (192 threads):

* warps 0-3, the softmax warpgroup: thread ``t`` owns query row ``t`` (TMEM lane ``t``); per KV
  block it reads S, masks, runs the online softmax, corrects O where the row maximum moved past
  FlashAttention-4's threshold and writes P back to tensor memory
  (:meth:`~cutedsl.collective.attention_tmem_mainloop.TmemAttentionMainloop.softmax_block`); then
  the epilogue (:class:`~cutedsl.collective.attention_tmem_epilogue.TmemAttentionEpilogue`);
* warp 4, the MMA warp: allocates the tensor memory (S 128 + P 64 + O ``head_dim`` columns); one
  elected lane issues ``S = Q K^T`` and ``O += P V`` (A = P from tensor memory) for every block
  (:meth:`~cutedsl.collective.attention_tmem_mainloop.TmemAttentionMainloop.mma_loop`);
* warp 5, the producer: one thread loads Q once, then K and V of every KV block the mask leaves,
  each through its own ring (:class:`~cutedsl.collective.attention_operands.AttentionOperands`).

Compile-time variants as the Hopper kernel's: ``head_dim`` (64, 128), ``dtype`` (f16, bf16),
``local`` (causal / sliding window, with whole-block skipping), ``softcap``, ``varlen``. The
parameters are the Hopper kernel's (:meth:`params`).
"""
from __future__ import annotations

from ..arch import get_arch
from ..collective.attention_epilogue import EpilogueRows
from ..collective.attention_hooks import AttentionHooks
from ..collective.attention_mainloop import UnitContext
from ..collective.attention_mask import AttentionMask
from ..collective.attention_operands import AttentionOperands
from ..collective.attention_softmax import SoftmaxParams
from ..collective.attention_tmem_epilogue import TmemAttentionEpilogue
from ..collective.attention_tmem_mainloop import TmemAttentionMainloop
from ..collective.attention_tmem_softmax import RESCALE_THRESHOLD, RowState, TmemRowSoftmax
from ..compiler.identity import qualname
from ..errors import ConfigError, one_of
from ..ir._lazy import lazy
from . import attention as hopper
from .base import Kernel

cir = lazy("cutedsl.ir")

HEAD_DIMS = (64, 128)
DTYPES = ("bf16", "f16")
BLOCK_M = 128                     #: query rows per work unit: the tcgen05 MMA's M, one per TMEM lane
BLOCK_N = 128                     #: keys per KV block
STAGES = 2                        #: K and V ring depth
SOFTMAX_WARPS, MMA_WARP, PRODUCER_WARP = 4, 4, 5
WARPS = 6
NOT_YET = {256: "Q, two K and two V stages of 128 x 256 16-bit elements are 320 KiB of shared memory (sm_100a "
                "has 227 KiB per CTA): a 256-wide head needs one-stage rings or a split V; not built"}
assert BLOCK_M == hopper.BLOCK_M   # the shared host contract (grid) counts 128-row units


def reason(head_dim, dtype) -> str | None:
    """Why the sm_100a kernel cannot be built for these values, or None."""
    if head_dim not in HEAD_DIMS:
        why = NOT_YET.get(head_dim) or hopper.NOT_YET.get(head_dim, "")
        return (f"head_dim must be {one_of(HEAD_DIMS, quote=False)} on sm_100a, got {head_dim!r}"
                + (f": {why}" if why else ""))
    if dtype not in DTYPES:
        return f"dtype must be {one_of(DTYPES)} (P is a 16-bit tensor-memory A operand), got {dtype!r}"
    return None


class AttentionFwdSm100Kernel(Kernel):
    """See the module docstring. ``threshold``: the correction threshold (log2 units; 0 rescales
    O whenever a row maximum grows; None: the class's :attr:`THRESHOLD`). Raises ``ConfigError`` for a head dimension or dtype it
    cannot build (:func:`reason`)."""

    name = "attention_fwd_sm100"
    mma_atom = "tcgen05"
    mask_cls = AttentionMask
    softmax_cls = TmemRowSoftmax
    HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N = HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N
    THRESHOLD = RESCALE_THRESHOLD     #: FlashAttention-4's correction threshold (a subclass may change it)

    # the host contract is the Hopper kernel's: the same parameters, grid, maps and scalars
    params = hopper.AttentionFwdKernel.params
    grid = hopper.AttentionFwdKernel.grid
    tensor_map_extent = hopper.AttentionFwdKernel.tensor_map_extent
    scalar_values = hopper.AttentionFwdKernel.scalar_values

    @classmethod
    def reason(cls, head_dim, dtype, overlap=True, pingpong=True) -> str | None:
        return reason(head_dim, dtype)

    def __init__(self, head_dim: int = 128, dtype: str = "bf16", *, local: bool = False, softcap: bool = False,
                 varlen: bool = False, arch="sm_100a", threshold: float | None = None):
        why = reason(head_dim, dtype)
        if why:
            raise ConfigError(f"{type(self).__name__}: {why}")
        self.arch = get_arch(arch)
        self.arch.require(self.mma_atom, type(self).__name__)
        self.head_dim, self.dtype = head_dim, dtype
        self.local, self.softcap, self.varlen = bool(local), bool(softcap), bool(varlen)
        self.threshold = float(self.THRESHOLD if threshold is None else threshold)
        self.hooks = AttentionHooks()                 # no score_mod / mask_mod on sm_100a yet
        self.block_sparse = False
        wt = self.arch.warp_threads
        self.threads = WARPS * wt
        self.softmax_threads = SOFTMAX_WARPS * wt
        # K and V slots are released by one tcgen05.commit each
        self.operands = AttentionOperands(head_dim, BLOCK_M, BLOCK_N, STAGES, dtype, self.varlen, consumer_warps=1)
        self.mask = self.mask_cls(BLOCK_M, BLOCK_N, self.local)
        self.softmax = self.softmax_cls(self.softcap, self.threshold)
        self.mainloop = TmemAttentionMainloop(self.operands, self.mask, self.softmax, self.softmax_threads)
        self.epilogue = TmemAttentionEpilogue(head_dim, dtype, self.softmax_threads)

    def config(self) -> dict:
        return {"arch": self.arch.name, "head_dim": self.head_dim, "dtype": self.dtype, "local": self.local,
                "softcap": self.softcap, "varlen": self.varlen, "threshold": self.threshold,
                "block": [BLOCK_M, BLOCK_N], "stages": STAGES, "class": qualname(type(self)),
                "mask": qualname(self.mask_cls), "softmax": qualname(self.softmax_cls)}

    # -- IR ------------------------------------------------------------------------------------
    def define(self):
        from mlir.dialects import gpu
        from ..atom.tcgen05 import TensorMemory
        from ..ir import If, KernelBuilder, SmemPlan, block_idx, thread_idx
        from ..ir.smem_tile import static_word
        from ..ir.values import warp_uniform
        plan = SmemPlan(limit=self.arch.smem_per_cta)
        self.operands.plan(plan)
        self.mainloop.plan(plan)
        kb = KernelBuilder(self.name, self.params(), block=(self.threads, 1, 1), arch=self.arch)
        wt = self.arch.warp_threads
        with kb.build() as args:
            smem = plan.bind()
            tid = thread_idx()
            leader = tid.eq(0)
            warp = warp_uniform(tid // wt)
            qb, head, batch = (cir.i32(block_idx(d)) for d in ("x", "y", "z"))
            ops = self.operands.bind(smem, args, leader)
            bars = self.mainloop.bind(smem, leader)
            self.operands.prefetch(ops, predicate=leader)
            tmem = TensorMemory(static_word("tmem_address"), self.mainloop.tmem.columns)
            with If(warp.eq(MMA_WARP)):
                tmem.alloc()
                tmem.relinquish()
            TensorMemory.fence_before()
            gpu.barrier()                        # barrier inits and the TMEM address are visible
            TensorMemory.fence_after()
            taddr = tmem.address()
            if self.varlen:
                cq, ck = cir.GlobalPtr(args.cu_seqlens_q, "i32"), cir.GlobalPtr(args.cu_seqlens_k, "i32")
                q_start, k_start = cq.load(batch), ck.load(batch)
                seqlen_q, seqlen_k = cq.load(batch + 1) - q_start, ck.load(batch + 1) - k_start
            else:
                q_start = k_start = 0
                seqlen_q, seqlen_k = args.seqlen_q, args.seqlen_k
            m0 = qb * BLOCK_M
            left, right = (args.left, args.right) if self.local else (0, 0)
            with If(m0 < seqlen_q):            # a query block past its (shorter) sequence: nothing to do
                rng = self.mask.block_range(m0, seqlen_q, seqlen_k, left, right)
                with If(warp.eq(PRODUCER_WARP) & (tid % wt).eq(0)):
                    self.producer(ops, args, batch, head, m0 + q_start, k_start, rng)
                with If(warp.eq(MMA_WARP)):
                    self.mainloop.mma_loop(ops, bars, taddr, rng.count)
                with If(warp < SOFTMAX_WARPS):
                    self.softmax_warps(bars, taddr, args, batch, head, m0, q_start, seqlen_q, seqlen_k,
                                       left, right, rng)
            TensorMemory.fence_before()
            gpu.barrier()                        # every tensor-memory access is done
            with If(warp.eq(MMA_WARP)):
                TensorMemory.fence_after()
                tmem.dealloc(taddr)
        return kb, plan.dynamic_bytes, self.operands.tensor_maps()

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
            self.operands.load_kv(ops, st, kv_lead, k_start + (rng.n_max - 1 - cir.i32(it)) * BLOCK_N)
            loop.next(*st.advance().carry())

    def softmax_warps(self, bars, taddr, args, batch, head, m0, q_start, seqlen_q, seqlen_k, left, right,
                      rng) -> None:
        """Warps 0-3: every KV block in the mask's three ranges (masked, unmasked, masked), then
        the epilogue."""
        ml = self.mainloop
        params = SoftmaxParams(args.exp_scale, getattr(args, "softmax_scale", None), getattr(args, "softcap", None),
                               getattr(args, "softcap_scale", None))
        ctx = UnitContext(batch, head, m0, seqlen_q, seqlen_k, left, right, params, 0)
        state, n = self.softmax.initial_row(), cir.i32(0)
        for lo, hi, masked in ((rng.u_hi, rng.n_max, True), (rng.u_lo, rng.u_hi, False), (rng.n_min, rng.u_lo, True)):
            loop = cir.Loop(0, hi - lo, carry=state.carry() + [n])
            for it, carried in loop:
                st, n = RowState.from_carry(carried), carried[2]
                st = ml.softmax_block(bars, taddr, ctx, st, n, hi - 1 - cir.i32(it), masked)
                loop.next(*(st.carry() + [n + 1]))
            res = list(loop.results)
            state, n = RowState.from_carry(res), res[2]
        ml.finish(bars, rng.count)
        inv, lse = self.softmax.finalize_row(state, args.exp_scale)
        if self.varlen:
            o_row0, lse_base = q_start, head * args.total_q + q_start
        else:
            o_row0, lse_base = batch * seqlen_q, (batch * args.heads + head) * seqlen_q
        rows = EpilogueRows(o_row0, lse_base, head, args.heads, m0, seqlen_q)
        self.epilogue.store(taddr + ml.tmem.o, rng.count, inv, lse, rows, args.o, args.lse)


__all__ = ["AttentionFwdSm100Kernel", "HEAD_DIMS", "DTYPES", "BLOCK_M", "BLOCK_N", "reason"]
