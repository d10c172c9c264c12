"""The GEMM problem shape (M, N, K, L), from the device layer to the epilogue (no MLIR).

``D[l] (M x N) = A[l] (M x K) @ B[l] (K x N)`` for ``l`` in ``0 .. L-1`` (CUTLASS's
``ProblemShape`` MNKL). ``L`` is 1 today; batched and grouped GEMMs add their ``L`` here
instead of new arguments through every layer. On the host the fields are Python ints (what
``grid()`` receives); inside a kernel body :meth:`GemmProblem.from_args` holds the IR i32
values of the kernel parameters (``l`` a Python 1 while kernels take no batch parameter).
"""
from __future__ import annotations

import attrs


@attrs.frozen
class GemmProblem:
    """``m``, ``n``, ``k`` (elements) and ``l`` (batch count); ints on the host, IR values in a kernel."""
    m: object
    n: object
    k: object
    l: object = 1

    def tiles(self, tile_m: int, tile_n: int) -> tuple:
        """Host: output tiles ``(along M, along N)`` of one batch."""
        return -(-self.m // tile_m), -(-self.n // tile_n)

    @classmethod
    def from_args(cls, args) -> "GemmProblem":
        """IR: the problem from a GEMM kernel's ``m``, ``n``, ``k`` (and ``l``, if any) parameters."""
        return cls(args.m, args.n, args.k, getattr(args, "l", 1))

    def __iter__(self):            # m, n, k, l = problem
        return iter((self.m, self.n, self.k, self.l))


@attrs.frozen
class AttentionProblem:
    """The attention problem shape, FlashAttention's: ``batch`` sequences of ``seqlen_q`` queries
    and ``seqlen_k`` keys, ``heads`` query heads sharing ``kv_heads`` K/V heads (GQA/MQA:
    ``heads % kv_heads == 0``; query head ``h`` reads K/V head ``h // (heads // kv_heads)``),
    ``head_dim`` elements per Q/K row and ``head_dim_v`` per V/O row. Varlen problems
    (``cu_seqlens``) give the longest sequences as ``seqlen_q`` / ``seqlen_k`` and ``batch`` the
    number of sequences. Ints on the host, IR values in a kernel."""
    batch: object
    seqlen_q: object
    seqlen_k: object
    heads: object
    kv_heads: object
    head_dim: object
    head_dim_v: object = None

    def __attrs_post_init__(self):
        if self.head_dim_v is None:
            object.__setattr__(self, "head_dim_v", self.head_dim)

    @property
    def group(self):
        """Query heads per K/V head (1: multi-head, ``heads``: multi-query)."""
        return self.heads // self.kv_heads

    def q_blocks(self, block_m: int):
        """Host: query blocks of ``block_m`` rows per (sequence, head)."""
        return -(-self.seqlen_q // block_m)


def attention_flops(seqlen_q: int, seqlen_k: int, heads: int, head_dim: int, head_dim_v: int | None = None,
                    causal: bool = False, window=None) -> int:
    """FLOPs of one sequence's forward pass as FlashAttention counts them: two matrix products,
    ``2 * sq * sk * (d + dv) * heads``, times the fraction of (query, key) pairs the mask keeps
    (counted exactly for causal / sliding-window masks, aligned bottom-right)."""
    dv = head_dim if head_dim_v is None else head_dim_v
    if not causal and window is None:
        pairs = seqlen_q * seqlen_k
    else:
        left, right = (-1, 0) if window is None else window
        if causal:
            right = 0 if right < 0 else min(right, 0)
        shift = seqlen_k - seqlen_q
        pairs = 0
        for i in range(seqlen_q):
            lo = 0 if left < 0 else max(0, i + shift - left)
            hi = seqlen_k - 1 if right < 0 else min(seqlen_k - 1, i + shift + right)
            pairs += max(0, hi - lo + 1)
    return 2 * pairs * (head_dim + dv) * heads
