"""FlashAttention-3-style attention backward on Hopper (sm_90a): the dK/dV kernel, composed from
the library's atoms and collectives (the preprocessing of ``D`` and the dQ conversion are
:mod:`cutedsl.kernel.attention_bwd_prepost`).

One CTA per work unit ``(KV block, K/V head, batch)`` (grid ``(ceil(seqlen_k / block_n), kv_heads,
batch)``), a producer and ``mma_warpgroups`` MMA warpgroups of 64 keys each (``block_n`` = 64 or
128 keys; 256 or 384 threads; default two at head dim 128 as FA3/FA4, one at 64), as roles of the
warp-specialized skeleton (:class:`~cutedsl.kernel.skeleton.SkeletonKernel`: ``mma`` and
``producer``, their ``setmaxnreg`` budgets, a KV block past its sequence skipping both in
``roles_scope``):

* the producer (the last warpgroup; ``setmaxnreg.dec`` to 24): one thread loads K and V of the
  KV block once, then Q and dO of every query block the mask leaves, for each query head of
  the K/V head's group (GQA), through a ring of stages, with the block's LSE and D (one 512-byte
  ``cp.async.bulk`` from the preprocess's padded ``stats`` workspace on the same barrier)
  (:class:`~cutedsl.collective.attention_bwd_operands.AttentionBwdOperands`); its warp 1 is the
  dQ writer: per query block one bulk reduction of the staged dQ (and deterministic mode's
  semaphore wait), handed the buffer by named barriers;
* each MMA warpgroup (``setmaxnreg.inc`` to 240): per query block ``S^T``, ``dP^T``, ``P^T``,
  ``dS^T``, ``dV += P^T dO``, ``dK += dS^T Q`` for its 64 keys, and ``dQ = dS K`` staged in
  shared memory and added into an f32 workspace by one bulk reduction per query block (with two
  warpgroups neither reduces a partial dQ: both put their dS in one ``[64 x 128]`` tile and each
  computes half of dQ's 64-column chunks over all 128 keys)
  (:class:`~cutedsl.collective.attention_bwd_mainloop.AttentionBwdMainloop`,
  :class:`~cutedsl.collective.attention_bwd_dq.DqStaging`); then ``dK *
  softmax_scale`` and ``dV`` rounded and stored (the forward's
  :class:`~cutedsl.collective.attention_epilogue.AttentionEpilogue`, rows past ``seqlen_k``
  never written). dK and dV of a K/V head sum over its query heads in registers, so GQA needs
  no dK/dV workspace.

Compile-time variants: ``head_dim`` (64, 128), ``dtype`` (f16, bf16), ``mma_warpgroups`` (1, or 2
at head dim 128), ``local`` (a causal or
sliding-window band), ``varlen`` (packed sequences), ``deterministic`` (dQ added in a fixed
order through per-query-block semaphores). Parameters: ``q``, ``k``, ``v``, ``do`` (tensor
maps), ``dk``, ``dv`` (``dtype`` outputs), ``dq_accum`` (f32, zeroed, ``(heads, dq_blocks, 64 *
head_dim)`` slabs in fragment order: :meth:`AttentionBwdKernel.dq_accum_blocks`),
``stats`` (f32, ``(heads, dq_blocks, 2, 64)``: per query block the forward's LSE times log2 e,
then ``D``, 0 past the sequence, written by the preprocess), ``seqlen_q``, ``seqlen_k`` (varlen: the
maxima), ``heads``, ``group``, ``dq_blocks``, ``exp_scale`` (``softmax_scale * log2 e``), ``softmax_scale``,
then per variant ``left``, ``right``, ``cu_seqlens_q``, ``cu_seqlens_k``, ``total_q``,
``semaphores`` (u32, zeroed, ``batch * heads * ceil(seqlen_q / 64)``).
"""
from __future__ import annotations

import contextlib
import math

from ..arch import DEFAULT, get_arch
from ..collective.attention_bwd_mainloop import DQ_WRITER_WARP, AttentionBwdMainloop, BwdUnit
from ..collective.attention_bwd_operands import AttentionBwdOperands
from ..collective.attention_epilogue import AttentionEpilogue, EpilogueRows
from ..collective.attention_mask import sequence_bounds, unbounded
from ..compiler.artifact import ParamSpec as Param
from ..compiler.identity import qualname
from ..errors import ConfigError, one_of
from ..ir._lazy import lazy
from .skeleton import Role, SkeletonKernel

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")

HEAD_DIMS = (64, 128)
DTYPES = ("bf16", "f16")
BLOCK_M = 64                       #: queries per query block
BLOCK_N = 64                       #: keys per MMA warpgroup (a CTA's KV block: 64 per MMA warpgroup)
MMA_WARPGROUPS = {64: 1, 128: 2}   #: default MMA warpgroups per head dim
STAGES = 2                         #: Q/dO ring depth
#: .maxnreg at launch, the forward's: with 384 threads 65536 / 384 rounded down to 8 (the producer's
#: 144 x 128 freed registers fund the two MMA warpgroups' 72 x 256); with 256 threads 65536 / 256
#: would be 256, past ptxas' 255 (it would ignore it)
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


class AttentionBwdKernel(SkeletonKernel):
    """See the module docstring. Raises ``ConfigError`` for a head dimension, dtype or MMA warpgroup
    count it cannot build (:meth:`reason`; default counts :data:`MMA_WARPGROUPS`)."""

    name = "attention_bwd"
    mma_atom = "wgmma"
    HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N = HEAD_DIMS, DTYPES, BLOCK_M, BLOCK_N
    dispatch_order = ("producer", "mma")

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
                 deterministic: bool = False, mma_warpgroups: int | None = None, arch=None):
        why = self.reason(head_dim, dtype)
        if why:
            raise ConfigError(f"{type(self).__name__}: {why}")
        wgs = MMA_WARPGROUPS[head_dim] if mma_warpgroups is None else mma_warpgroups
        if wgs not in (1, 2) or (head_dim // BLOCK_N) % wgs:
            raise ConfigError(f"{type(self).__name__}: mma_warpgroups must be 1 or 2 (64 keys each; 2 splits "
                              f"dQ's 64-column chunks, so head_dim 128), got {mma_warpgroups!r} at head_dim "
                              f"{head_dim}")
        self.arch = get_arch(arch or DEFAULT)
        self.arch.require(self.mma_atom, type(self).__name__)
        if self.arch.attention_wgmma_regs is None:
            raise ConfigError(f"{type(self).__name__}: {self.arch.name} gives no attention_wgmma_regs (the MMA and "
                              f"producer warpgroups' setmaxnreg budgets)")
        self.head_dim, self.dtype = head_dim, dtype
        self.local, self.varlen, self.deterministic = bool(local), bool(varlen), bool(deterministic)
        wg = self.arch.warpgroup_threads
        self.mma_wgs, self.block_n = wgs, wgs * BLOCK_N
        self.operands = AttentionBwdOperands(head_dim, BLOCK_M, self.block_n, STAGES, dtype, self.varlen,
                                             consumer_warps=wgs * self.arch.warps_per_warpgroup)
        self.mainloop = AttentionBwdMainloop(self.operands, self.local, self.deterministic, wg, self.arch.warp_threads)
        self.epilogue = AttentionEpilogue(head_dim, dtype, wg)

    def config(self) -> dict:
        return {"arch": self.arch.name, "head_dim": self.head_dim, "dtype": self.dtype, "local": self.local,
                "varlen": self.varlen, "deterministic": self.deterministic, "block": [BLOCK_M, self.block_n],
                "stages": STAGES, "class": qualname(type(self))}

    # -- host contract ---------------------------------------------------------------------
    def params(self) -> list:
        ps = [Param(n, "tensormap") for n in ("q", "k", "v", "do")]
        ps += [Param("dk", "ptr", dtype=self.dtype, output=True), Param("dv", "ptr", dtype=self.dtype, output=True),
               Param("dq_accum", "ptr", dtype="f32", output=True), Param("stats", "ptr", dtype="f32"),
               Param("seqlen_q", "i32"), Param("seqlen_k", "i32"),
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
        return (max(1, -(-problem.seqlen_k // self.block_n)), problem.kv_heads, problem.batch)

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

    def stats_shape(self, problem, total_q: int | None = None) -> tuple:
        """Host: the f32 ``stats`` workspace's shape ``(heads, dq_blocks, 2 * 64)`` (the
        preprocess writes every slab the kernel reads: no zeroing)."""
        return (problem.heads, self.dq_accum_blocks(problem, total_q), self.operands.stat_elems)

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

    # -- plan (the warp-specialized skeleton) ---------------------------------------------------
    def roles(self) -> tuple:
        """The MMA warpgroups, then the producer, with ``arch.attention_wgmma_regs`` budgets
        (``setmaxnreg.inc`` to 240, ``.dec`` to 24 on sm_90a)."""
        mma, producer = self.arch.attention_wgmma_regs       # FlashAttention-3's 240 / 24 on sm_90a
        return (Role.warpgroups("mma", self.mma_wgs, regs=mma), Role.warpgroups("producer", regs=producer))

    @property
    def launch_registers(self) -> int:
        return min(LAUNCH_REGS, self.arch.launch_regs((self.mma_wgs + 1) * self.arch.warpgroup_threads))

    def declare_smem(self, plan, stages=None) -> None:
        self.operands.plan(plan)
        self.mainloop.dq.plan(plan)

    def tensor_maps(self) -> list:
        return self.operands.tensor_maps()

    # -- IR hooks ------------------------------------------------------------------------------
    def setup(self, b) -> None:
        """The TMA atoms and the K/V and Q/dO pipelines (barriers initialised by thread 0)."""
        b.ops = self.operands.bind(b.smem, b.args, b.leader)
        self.operands.prefetch(b.ops, predicate=b.leader)
        b.init_fenced = True                  # TmaPipeline.init ends with fence.mbarrier_init

    def bind(self, b) -> None:
        """The work unit: KV block ``nb`` (its first key ``n0``) of K/V head ``kv_head`` of
        ``batch``, the sequence's bounds and band, and its query-block ranges."""
        from ..ir import block_idx
        args = b.args
        b.nb, b.kv_head, b.batch = (cir.i32(block_idx(d)) for d in ("x", "y", "z"))
        b.q_start, b.k_start, b.seqlen_q, b.seqlen_k = sequence_bounds(args, b.batch, self.varlen)
        b.n0 = b.nb * self.block_n
        b.left, b.right = (args.left, args.right) if self.local else (0, 0)

    @contextlib.contextmanager
    def roles_scope(self, b):
        """The roles run only for a KV block inside its sequence (a shorter varlen sequence's
        blocks past its end do nothing); ``b.rng``: the query blocks both roles walk."""
        with cir.If(b.n0 < b.seqlen_k):
            b.rng = self.mainloop.query_blocks(b.n0, b.seqlen_q, b.seqlen_k, b.left, b.right)
            yield

    def role_producer(self, b, index) -> None:
        """Thread 0 of the producer warpgroup loads; its warp ``DQ_WRITER_WARP`` writes dQ
        (:meth:`~cutedsl.collective.attention_bwd_mainloop.AttentionBwdMainloop.write_dq`)."""
        from ..ir import If
        t = b.tid % self.arch.warpgroup_threads
        with If(t.eq(0)):
            self.producer(b.ops, b.args, b.batch, b.kv_head, b.q_start, b.k_start, b.n0, b.rng)
        with If((t // self.arch.warp_threads).eq(DQ_WRITER_WARP)):
            self.mainloop.write_dq(b.ops, self._unit_of(b), b.args.group, b.rng, t % self.arch.warp_threads)

    def _unit_of(self, b):
        """``g -> BwdUnit`` of query head ``g`` of the K/V head's group (IR i32)."""
        args, heads, group = b.args, b.args.heads, b.args.group
        m_blocks = (args.seqlen_q + (BLOCK_M - 1)) // BLOCK_M

        def unit_of(g):
            head = b.kv_head * group + g
            sem = (b.batch * heads + head) * m_blocks if self.deterministic else None
            return BwdUnit(b.batch, head, b.nb, b.n0, b.seqlen_q, b.seqlen_k, b.left, b.right,
                           self._slab0(args, b.batch, head, b.q_start), heads, args.exp_scale, args.dq_accum, sem,
                           getattr(args, "semaphores", None))
        return unit_of

    def role_mma(self, b, index) -> None:
        # one body for every MMA warpgroup (two copies in one function make ptxas serialize the
        # WGMMAs, C7511): the warpgroup's key offset is a runtime value, made warp-uniform (shfl
        # from lane 0, as CUTLASS's canonical_warp_group_idx) so what derives from it can live in
        # uniform registers
        w = V.warp_uniform(index) if self.mma_wgs > 1 else 0
        self.consumer(b.ops, b.args, b.batch, b.kv_head, b.n0, b.k_start, b.seqlen_k, self._unit_of(b), b.rng, w)

    def _lead(self, batch, head) -> tuple:
        return (head,) if self.varlen else (batch, head)

    def _slab0(self, args, batch, head, q_start):
        """The workspace slab (dQ and stats) of query block 0 of (``batch``, ``head``):
        :meth:`dq_accum_blocks`' layout."""
        from .attention_bwd_prepost import first_slab
        return head * args.dq_blocks + first_slab(batch, q_start, args.seqlen_q, self.varlen)

    def producer(self, ops, args, batch, kv_head, q_start, k_start, n0, rng) -> None:
        """One thread: K and V once, then Q, dO, LSE and D of query blocks ``n_min .. n_max - 1``
        of ``rng`` for each query head of the group."""
        from ..collective.pipeline import PipelineState
        self.operands.load_kv(ops, self._lead(batch, kv_head), k_start + n0)
        outer = cir.Loop(0, args.group, carry=PipelineState(STAGES).carry())
        for g, c in outer:
            head = kv_head * args.group + cir.i32(g)
            slab0 = self._slab0(args, batch, head, q_start)
            loop = cir.Loop(0, rng.count, carry=list(c))
            for it, carried in loop:
                st = PipelineState.from_carry(STAGES, carried)
                m = rng.n_min + cir.i32(it)
                self.operands.load_qdo(ops, st, self._lead(batch, head), q_start + m * BLOCK_M, args.stats,
                                       slab0 + m)
                loop.next(*st.advance().carry())
            outer.next(*loop.results)

    def consumer(self, ops, args, batch, kv_head, n0, k_start, seqlen_k, unit_of, rng, w=0) -> None:
        """MMA warpgroup ``w``: wait for K and V, run the main loop over the group's query heads
        (``unit_of``: :meth:`_unit_of`), store ``dK * softmax_scale`` and ``dV`` of its 64 keys."""
        heads, group = args.heads, args.group
        self.operands.wait_kv(ops)
        dk, dv = self.mainloop.run(ops, unit_of, group, rng, w)
        k_row0 = k_start if self.varlen else batch * seqlen_k
        rows = EpilogueRows(k_row0, 0, kv_head, heads // group, n0 + w * BLOCK_N, seqlen_k)
        none = [[] for _ in range(dk.m_blocks)]          # no LSE to store
        self.epilogue.store(dk, [[args.softmax_scale] * 2] * dk.m_blocks, none, rows, args.dk, None)
        self.epilogue.store(dv, [[1.0] * 2] * dv.m_blocks, none, rows, args.dv, None)


__all__ = ["AttentionBwdKernel", "HEAD_DIMS", "DTYPES", "BLOCK_M", "BLOCK_N", "head_dim_reason"]
