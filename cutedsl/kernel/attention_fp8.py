"""fp8 (e4m3) attention forward on Hopper: FlashAttention-3's fp8 path on the same kernel.

What differs from :class:`~cutedsl.kernel.attention.AttentionFwdKernel` (everything else -- work
units, masks, online softmax, overlap and ping-pong, GQA, varlen -- is the same code):

* operands (:class:`~cutedsl.collective.attention_fp8.AttentionOperandsFp8`): 8-bit WGMMA reads
  B K-major only, so V goes through a raw TMA ring and is transposed into V^T by the producer
  warpgroup's warps 1..3 (96 threads) while warp 0's first thread issues the TMA loads; the
  K tile is 128 elements, so head dims 64 (padded by TMA's zero fill), 128 and 256 and 128-key
  KV blocks; P is the shuffle-free "permuted" e4m3 fragment, matched by V^T's column order;
* O is bf16 (FlashAttention-3's fp8 output), stored by guarded global stores;
* descales (FlashAttention-3's ``q_descale`` / ``k_descale`` / ``v_descale``, per tensor or per
  (batch, kv_head)): the host writes a table ``(batch, kv_heads, 2)`` f32 of ``(q_descale *
  k_descale, v_descale)`` (:meth:`descale_table`; per-tensor values broadcast); each MMA thread
  reads its unit's pair once and folds the first into the softmax's scale (``exp_scale``, or
  ``softmax_scale`` / ``softcap_scale`` where a softcap or score_mod applies the scale before the
  exponent) and the second into O's final ``1 / row sum``;
* register budgets are FlashAttention-3's (producer 24, MMA warpgroups 240): the transposer warps
  run a loop of ``ldmatrix.trans`` / 4 ``prmt`` / ``stmatrix`` units (16 keys x 32 head-dim bytes
  per warp) and fit (0 spills for head dims 64, 128, 256).

Parameters: the base kernel's, then ``descale`` (pointer to the f32 table).
"""
from __future__ import annotations

import numpy as np

from ..collective.attention_fp8 import AttentionOperandsFp8
from ..collective.pipeline import PipelineState
from ..compiler.artifact import ParamSpec as Param
from ..errors import one_of
from ..ir._lazy import lazy
from .attention import BLOCK_M, MMA_WARPGROUPS, STAGES, AttentionFwdKernel, head_dim_reason

cir = lazy("cutedsl.ir")

FP8_DTYPES = ("e4m3",)
FP8_HEAD_DIMS = (64, 128, 256)
TMA_WARP = 0                #: the producer warp whose first thread issues the loads; the others transpose


class AttentionFwdFp8Kernel(AttentionFwdKernel):
    """See the module docstring. Raises ``ConfigError`` for what it cannot build (:meth:`reason`)."""

    name = "attention_fwd_fp8"
    DTYPES = FP8_DTYPES
    HEAD_DIMS = FP8_HEAD_DIMS
    BLOCK_N_FOR = {}                      #: 128 keys for every head dim: one 8-bit K tile of P V
    O_DTYPE, O_TMA = "bf16", False

    @classmethod
    def reason(cls, head_dim, dtype, overlap=True, pingpong=True) -> str | None:
        if head_dim not in FP8_HEAD_DIMS:
            return (f"head_dim must be {one_of(FP8_HEAD_DIMS, quote=False)} for fp8 (multiples of the 128-element "
                    f"8-bit K tile, 64 padded), got {head_dim!r}" if head_dim_reason(head_dim) is None
                    else head_dim_reason(head_dim))
        if dtype not in FP8_DTYPES:
            return f"dtype must be {one_of(FP8_DTYPES)} for the fp8 kernel, got {dtype!r}"
        return AttentionFwdKernel.reason(head_dim, "bf16", overlap, pingpong)     # the schedule rules

    @property
    def transposers(self) -> int:
        return (self.arch.warps_per_warpgroup - 1) * self.arch.warp_threads

    def make_operands(self, head_dim: int):
        return AttentionOperandsFp8(head_dim, BLOCK_M, self.block_n, STAGES, self.dtype, self.varlen,
                                    consumer_warps=MMA_WARPGROUPS * self.arch.warps_per_warpgroup,
                                    transposers=self.transposers)

    def params(self) -> list:
        return super().params() + [Param("descale", "ptr", dtype="f32")]

    @staticmethod
    def descale_table(problem, descales=(1.0, 1.0, 1.0)) -> np.ndarray:
        """Host: the ``descale`` table, f32 ``(batch, kv_heads, 2)``: ``(q * k, v)`` per sequence and
        K/V head, from ``descales = (q, k, v)``, each a positive float (per tensor) or a float array
        of shape ``(batch, kv_heads)`` (FlashAttention-3's), the product taken in float64."""
        shape = (problem.batch, problem.kv_heads)
        qd, kd, vd = (np.broadcast_to(np.asarray(x, np.float64), shape) for x in descales)
        return np.ascontiguousarray(np.stack([qd * kd, vd], axis=-1), np.float32)

    def consumer(self, ops, args, batch, head, *rest) -> None:
        """The base consumer with this unit's descales folded into the scales it reads."""
        kv_heads = args.heads // args.group
        entry = cir.GlobalPtr(args.descale, "f32")
        at = (batch * kv_heads + head // args.group) * 2
        qk, vd = entry.load(cir.i64(at)), entry.load(cir.i64(at + 1))
        super().consumer(ops, _DescaledArgs(args, qk, vd, self.softmax.scale_in_exponent), batch, head, *rest)

    def producer_role(self, ops, args, batch, head, q_row, k_start, rng, thread) -> None:
        """Thread 0 of warp :data:`TMA_WARP` loads; warps 1.. transpose every visited V block."""
        from ..ir import If
        warp = thread // self.arch.warp_threads
        with If(thread.eq(TMA_WARP * self.arch.warp_threads)):
            self.producer(ops, args, batch, head, q_row, k_start, rng)
        with If(warp > TMA_WARP):
            t = thread - (TMA_WARP + 1) * self.arch.warp_threads
            loop = cir.Loop(0, rng.count, carry=PipelineState(STAGES).carry(), counter="i32")
            for _it, carried in loop:
                st = PipelineState.from_carry(STAGES, carried)
                self.operands.transpose(ops, st, t)
                loop.next(*st.advance().carry())

    def output_scale(self, inv, args):
        return [[x * args.v_descale for x in blk] for blk in inv]


class _DescaledArgs:
    """The kernel's arguments seen by one unit's consumer: the scales times ``q * k`` descale
    (``exp_scale`` when the softmax scale rides in the exponent, else ``softmax_scale`` and
    ``softcap_scale``: the score is scaled before softcap / score_mod) and ``v_descale``."""

    def __init__(self, args, qk, v_descale, in_exponent: bool):
        self._args, self.v_descale = args, v_descale
        names = ("exp_scale",) if in_exponent else ("softmax_scale", "softcap_scale")
        self._scaled = {n: getattr(args, n) * qk for n in names if hasattr(args, n)}

    def __getattr__(self, name):
        scaled = self.__dict__.get("_scaled", {})
        return scaled[name] if name in scaled else getattr(self._args, name)


__all__ = ["AttentionFwdFp8Kernel", "FP8_DTYPES", "FP8_HEAD_DIMS"]
