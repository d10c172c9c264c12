"""fp8 (e4m3) attention forward on Hopper: FlashAttention-3's fp8 path on the same kernel.

What differs from :class:`~cutedsl.kernel.attention.AttentionFwdKernel` (everything else -- work
units, masks, online softmax, overlap and ping-pong, GQA, varlen -- is the same code):

* operands (:class:`~cutedsl.collective.attention_fp8.AttentionOperandsFp8`): 8-bit WGMMA reads
  B K-major only, so V goes through a raw TMA ring and is transposed into V^T by the producer
  warpgroup's warps 1..3 (96 threads) while warp 0's first thread issues the TMA loads; the
  K tile is 128 elements, so head dims 64 (padded by TMA's zero fill), 128 and 256 and 128-key
  KV blocks; P is the shuffle-free "permuted" e4m3 fragment, matched by V^T's column order;
* O is bf16 (FlashAttention-3's fp8 output), stored by guarded global stores;
* descales (FlashAttention-3's ``q_descale`` / ``k_descale`` / ``v_descale``, per tensor): the
  host folds ``q_descale * k_descale`` into the softmax scale (:meth:`scalar_values`), the
  kernel multiplies O's final ``1 / row sum`` by the ``v_descale`` parameter (f32);
* register budgets are FlashAttention-3's (producer 24, MMA warpgroups 240): the transposers run a
  loop of 4 x 4-byte units whose addresses are a few shifts of the counter, and fit (0 spills for
  head dims 64, 128, 256; an unrolled transpose spilled at 40).

Parameters: the base kernel's, then ``v_descale`` (f32).
"""
from __future__ import annotations

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
        return super().params() + [Param("v_descale", "f32")]

    def scalar_values(self, problem, softmax_scale: float, softcap=None, window=(-1, -1), descales=(1.0, 1.0, 1.0)):
        """Host: as the base kernel's, with ``descales = (q, k, v)`` (positive floats): S's true
        scale is ``softmax_scale * q * k`` and O's ``1 / l`` is multiplied by ``v``."""
        qd, kd, vd = (float(x) for x in descales)
        vals = super().scalar_values(problem, softmax_scale * qd * kd, softcap, window)
        vals["v_descale"] = vd
        return vals

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


__all__ = ["AttentionFwdFp8Kernel", "FP8_DTYPES", "FP8_HEAD_DIMS"]
