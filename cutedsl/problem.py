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
