"""FlashAttention-3-style attention backward on Hopper (sm_90a): the dK/dV kernel, composed from
the library's atoms and collectives (the preprocessing of ``D`` and the dQ conversion are
:mod:`cutedsl.kernel.attention_bwd_prepost`).

One CTA per work unit ``(KV block, K/V head, batch)`` (grid ``(ceil(seqlen_k / 64), kv_heads,
batch)``), two warpgroups (256 threads):

* the producer (the last warpgroup; ``setmaxnreg.dec`` to 24): one thread loads K and V of the
  KV block once, then Q and dO of every query block the mask leaves, for each query head of
  the K/V head's group (GQA), through a ring of stages
  (:class:`~cutedsl.collective.attention_bwd_operands.AttentionBwdOperands`);
* the MMA warpgroup (``setmaxnreg.inc`` to 240): per query block ``S^T``, ``dP^T``, ``P^T``,
  ``dS^T``, ``dV += P^T dO``, ``dK += dS^T Q``, ``dQ = dS K`` staged in shared memory and added
  into an f32 workspace by one bulk reduction per query block
  (:class:`~cutedsl.collective.attention_bwd_mainloop.AttentionBwdMainloop`,
  :class:`~cutedsl.collective.attention_bwd_dq.DqStaging`); then ``dK *
  softmax_scale`` and ``dV`` rounded and stored (the forward's
  :class:`~cutedsl.collective.attention_epilogue.AttentionEpilogue`, rows past ``seqlen_k``
  never written). dK and dV of a K/V head sum over its query heads in registers, so GQA needs
  no dK/dV workspace.

Compile-time variants: ``head_dim`` (64, 128), ``dtype`` (f16, bf16), ``local`` (a causal or
sliding-window band), ``varlen`` (packed sequences), ``deterministic`` (dQ added in a fixed
order through per-query-block semaphores). Parameters: ``q``, ``k``, ``v``, ``do`` (tensor
maps), ``dk``, ``dv`` (``dtype`` outputs), ``dq_accum`` (f32, zeroed, ``(heads, dq_blocks, 64 *
head_dim)`` slabs in fragment order: :meth:`AttentionBwdKernel.dq_accum_blocks`),
``lse``, ``dpsum`` (f32, the forward's LSE and ``D``), ``seqlen_q``, ``seqlen_k`` (varlen: the
maxima), ``heads``, ``group``, ``dq_blocks``, ``exp_scale`` (``softmax_scale * log2 e``), ``softmax_scale``,
then per variant ``left``, ``right``, ``cu_seqlens_q``, ``cu_seqlens_k``, ``total_q``,
``semaphores`` (u32, zeroed, ``batch * heads * ceil(seqlen_q / 64)``).
"""
from __future__ import annotations

import math

from ..arch import DEFAULT, get_arch
from ..collective.attention_bwd_mainloop import AttentionBwdMainloop, BwdUnit
from ..collective.attention_bwd_operands import AttentionBwdOperands
from ..collective.attention_epilogue import AttentionEpilogue, EpilogueRows
from ..collective.attention_mask import sequence_bounds, unbounded
from ..compiler.artifact import ParamSpec as Param
from ..compiler.identity import qualname
from ..errors import ConfigError, one_of
from ..ir._lazy import lazy
from .base import Kernel

cir = lazy("cutedsl.ir")

HEAD_DIMS = (64, 128)
DTYPES = ("bf16", "f16")
BLOCK_M = 64                       #: queries per query block
BLOCK_N = 64                       #: keys per KV block (one CTA)
STAGES = 2                         #: Q/dO ring depth
PRODUCER_REGS, MMA_REGS = 24, 240  #: setmaxnreg budgets
#: .maxnreg at launch: 65536 / 256 threads would be 256, past ptxas' 255 (it would ignore it); the
#: forward's 168 leaves the producer's 144 x 128 freed registers for the MMA warpgroup's 72 x 128
LAUNCH_REGS = 168
#: why a head dimension is refused (named, not a generic message)
NOT_YET = {256: "dK and dV accumulators of 64 x 256 f32 are 256 registers per thread of the one MMA "
                "warpgroup, past the 255 a thread can hold; not built",
           96: "a 96-wide head is one 64-element k-tile plus half of one (a 64-byte swizzle tile); not built"}


def head_dim_reason(head_dim) -> str | None:
    if head_dim in HEAD_DIMS:
        return None
    why = NOT_YET.get(head_dim, "")
    return (f"head_dim must be {one_of(HEAD_DIMS, quote=False)} for the attention backward, got {head_dim!r}"
            + (f": {why}" if why else ""))


class AttentionBwdKernel(Kernel):
    """See the module docstring. Raises ``ConfigError`` for a head dimension or dtype it cannot
    build (:meth:`reason`)."""

    name = "attention_bwd"
    mma_atom = "wgmma"
    HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N = HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N

    @classmethod
    def reason(cls, head_dim, dtype) -> str | None:
        """Why this kernel cannot be built for these values, or None."""
        why = head_dim_reason(head_dim)
        if why:
            return why
        if dtype not in DTYPES:
            return f"dtype must be {one_of(DTYPES)} (P and dS are f16/bf16 register A operands), got {dtype!r}"
        return None

    def __init__(self, head_dim: int = 128, dtype: str = "bf16", *, local: bool = False, varlen: bool = False,
                 deterministic: bool = False, arch=None):
        why = self.reason(head_dim, dtype)
        if why:
            raise ConfigError(f"{type(self).__name__}: {why}")
        self.arch = get_arch(arch or DEFAULT)
        self.arch.require(self.mma_atom, type(self).__name__)
        self.head_dim, self.dtype = head_dim, dtype
        self.local, self.varlen, self.deterministic = bool(local), bool(varlen), bool(deterministic)
        wg = self.arch.warpgroup_threads
        self.threads = 2 * wg
        self.operands = AttentionBwdOperands(head_dim, BLOCK_M, BLOCK_N, STAGES, dtype, self.varlen,
                                             consumer_warps=self.arch.warps_per_warpgroup)
        self.mainloop = AttentionBwdMainloop(self.operands, self.local, self.deterministic, wg)
        self.epilogue = AttentionEpilogue(head_dim, dtype, wg)

    def config(self) -> dict:
        return {"arch": self.arch.name, "head_dim": self.head_dim, "dtype": self.dtype, "local": self.local,
                "varlen": self.varlen, "deterministic": self.deterministic, "block": [BLOCK_M, BLOCK_N],
                "stages": STAGES, "class": qualname(type(self))}

    # -- host contract ---------------------------------------------------------------------
    def params(self) -> list:
        ps = [Param(n, "tensormap") for n in ("q", "k", "v", "do")]
        ps += [Param("dk", "ptr", dtype=self.dtype, output=True), Param("dv", "ptr", dtype=self.dtype, output=True),
               Param("dq_accum", "ptr", dtype="f32", output=True), Param("lse", "ptr", dtype="f32"),
               Param("dpsum", "ptr", dtype="f32"), Param("seqlen_q", "i32"), Param("seqlen_k", "i32"),
               Param("heads", "i32"), Param("group", "i32"), Param("dq_blocks", "i32"), Param("exp_scale", "f32"),
               Param("softmax_scale", "f32")]
        if self.local:
            ps += [Param("left", "i32"), Param("right", "i32")]
        if self.varlen:
            ps += [Param("cu_seqlens_q", "ptr", dtype="i32"), Param("cu_seqlens_k", "ptr", dtype="i32"),
                   Param("total_q", "i32")]
        if self.deterministic:
            ps.append(Param("semaphores", "ptr", dtype="u32", output=True))
        return ps

    def grid(self, problem) -> tuple:
        """CTAs for an ``AttentionProblem`` (varlen: ``seqlen_k`` is the longest sequence)."""
        return (max(1, -(-problem.seqlen_k // BLOCK_N)), problem.kv_heads, problem.batch)

    def query_blocks(self, problem) -> int:
        """Query blocks per (batch, head): the semaphores' stride."""
        return max(1, -(-problem.seqlen_q // BLOCK_M))

    @staticmethod
    def dq_accum_blocks(problem, total_q: int | None = None) -> int:
        """Host: workspace slabs per query head (``dq_blocks``): dense ``batch * ceil(seqlen_q /
        64)``; varlen (``total_q`` tokens) ``total_q // 64 + batch`` -- sequence ``b`` starts at
        slab ``cu_seqlens_q[b] // 64 + b``, past the previous sequence's last."""
        if total_q is not None:
            return total_q // BLOCK_M + problem.batch
        return problem.batch * max(1, -(-problem.seqlen_q // BLOCK_M))

    def dq_accum_shape(self, problem, total_q: int | None = None) -> tuple:
        """Host: the f32 workspace's shape ``(heads, dq_blocks, 64 * head_dim)``."""
        return (problem.heads, self.dq_accum_blocks(problem, total_q), BLOCK_M * self.head_dim)

    def zero_filled_outputs(self) -> tuple:
        return ("dq_accum",) + (("semaphores",) if self.deterministic else ())

    def tensor_map_extent(self, shape, strides) -> tuple:
        """Host: ``(shape, strides)`` of a Q/K/V/dO tensor map over an operand of numpy
        ``shape`` / byte ``strides`` in FlashAttention's layout."""
        return self.operands.map_extent(tuple(shape), tuple(strides), self.varlen)

    def scalar_values(self, problem, softmax_scale: float, window=(-1, -1), total_q: int | None = None) -> dict:
        """Host: the scalar parameters for ``problem`` (an ``AttentionProblem``), the scale, the
        band ``window = (left, right)`` (``-1``: unbounded) and, varlen, the packed ``total_q``."""
        vals = {"seqlen_q": problem.seqlen_q, "seqlen_k": problem.seqlen_k, "heads": problem.heads,
                "group": problem.group, "dq_blocks": self.dq_accum_blocks(problem, total_q), "exp_scale": softmax_scale / math.log(2.0), "softmax_scale": softmax_scale}
        if self.local:
            far = unbounded(problem.seqlen_q, problem.seqlen_k)
            vals["left"], vals["right"] = (far if w < 0 else w for w in window)
        return vals

    # -- IR ------------------------------------------------------------------------------------
    def define(self):
        from mlir.dialects import gpu
        from ..atom import warpgroup_reg_alloc, warpgroup_reg_dealloc
        from ..ir import If, KernelBuilder, SmemPlan, block_idx, thread_idx
        plan = SmemPlan(limit=self.arch.smem_per_cta)
        self.operands.plan(plan)
        self.mainloop.dq.plan(plan)
        kb = KernelBuilder(self.name, self.params(), block=(self.threads, 1, 1), arch=self.arch,
                           max_registers=min(LAUNCH_REGS, self.arch.launch_regs(self.threads)))
        wg_threads = self.arch.warpgroup_threads
        with kb.build() as args:
            smem = plan.bind()
            tid = thread_idx()
            leader = tid.eq(0)
            nb, kv_head, batch = (cir.i32(block_idx(d)) for d in ("x", "y", "z"))
            ops = self.operands.bind(smem, args, leader)
            self.operands.prefetch(ops, predicate=leader)
            gpu.barrier()
            q_start, k_start, seqlen_q, seqlen_k = sequence_bounds(args, batch, self.varlen)
            n0 = nb * BLOCK_N
            left, right = (args.left, args.right) if self.local else (0, 0)
            with If(n0 < seqlen_k):            # a KV block past its (shorter) sequence: nothing to do
                rng = self.mainloop.query_blocks(n0, seqlen_q, seqlen_k, left, right)
                wg = tid // wg_threads
                with If(wg.eq(1)):
                    warpgroup_reg_dealloc(PRODUCER_REGS)
                    with If((tid % wg_threads).eq(0)):
                        self.producer(ops, args, batch, kv_head, q_start, k_start, n0, rng)
                with If(wg.eq(0)):
                    warpgroup_reg_alloc(MMA_REGS)
                    self.consumer(ops, args, batch, kv_head, nb, n0, q_start, k_start, seqlen_q, seqlen_k,
                                  left, right, rng)
        return kb, plan.dynamic_bytes, self.operands.tensor_maps()

    def _lead(self, batch, head) -> tuple:
        return (head,) if self.varlen else (batch, head)

    def producer(self, ops, args, batch, kv_head, q_start, k_start, n0, rng) -> None:
        """One thread: K and V once, then Q and dO of query blocks ``n_min .. n_max - 1`` of
        ``rng`` for each query head of the group."""
        from ..collective.pipeline import PipelineState
        self.operands.load_kv(ops, self._lead(batch, kv_head), k_start + n0)
        outer = cir.Loop(0, args.group, carry=PipelineState(STAGES).carry())
        for g, c in outer:
            head = kv_head * args.group + cir.i32(g)
            loop = cir.Loop(0, rng.count, carry=list(c))
            for it, carried in loop:
                st = PipelineState.from_carry(STAGES, carried)
                m = rng.n_min + cir.i32(it)
                self.operands.load_qdo(ops, st, self._lead(batch, head), q_start + m * BLOCK_M)
                loop.next(*st.advance().carry())
            outer.next(*loop.results)

    def consumer(self, ops, args, batch, kv_head, nb, n0, q_start, k_start, seqlen_q, seqlen_k, left, right,
                 rng) -> None:
        """The MMA warpgroup: wait for K and V, run the main loop over the group's query heads,
        store ``dK * softmax_scale`` and ``dV``."""
        heads, group = args.heads, args.group
        m_blocks = (args.seqlen_q + (BLOCK_M - 1)) // BLOCK_M

        def unit_of(g):
            head = kv_head * group + g
            if self.varlen:
                seq_block0, lse_base = q_start // BLOCK_M + batch, head * args.total_q + q_start
            else:
                seq_block0, lse_base = batch * m_blocks, (batch * heads + head) * seqlen_q
            sem = (batch * heads + head) * m_blocks if self.deterministic else None
            return BwdUnit(batch, head, nb, n0, seqlen_q, seqlen_k, left, right, head * args.dq_blocks + seq_block0,
                           lse_base, heads,
                           args.exp_scale, args.lse, args.dpsum, args.dq_accum, sem,
                           getattr(args, "semaphores", None))
        self.operands.wait_kv(ops)
        dk, dv = self.mainloop.run(ops, unit_of, group, rng)
        k_row0 = k_start if self.varlen else batch * seqlen_k
        rows = EpilogueRows(k_row0, 0, kv_head, heads // group, n0, seqlen_k)
        none = [[] for _ in range(dk.m_blocks)]          # no LSE to store
        self.epilogue.store(dk, [[args.softmax_scale] * 2] * dk.m_blocks, none, rows, args.dk, None)
        self.epilogue.store(dv, [[1.0] * 2] * dv.m_blocks, none, rows, args.dv, None)


__all__ = ["AttentionBwdKernel", "HEAD_DIMS", "DTYPES", "BLOCK_M", "BLOCK_N", "head_dim_reason"]
