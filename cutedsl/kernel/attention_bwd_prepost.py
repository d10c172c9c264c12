"""The two small kernels around the attention backward's dK/dV kernel (FlashAttention-2/3's
``flash_bwd_preprocess`` / ``flash_bwd_postprocess``), plain CUDA-core code, one thread per row or
pair, one CTA per (query block, head, batch):

* :class:`AttentionBwdPreprocessKernel` -- ``D = rowsum(dO * O)`` (f32) per (token, head), the
  term of ``dS = P * (dP - D)`` that needs the whole row of O, written with the forward's LSE
  (times log2 e) into a padded ``stats`` workspace of one 512-byte slab per query block, so the
  dK/dV kernel's producer copies a block's 64 + 64 values with one ``cp.async.bulk``
  (FlashAttention-3 pads its ``LSE_log2`` and ``dPsum`` to whole blocks the same way);
* :class:`AttentionBwdPostprocessKernel` -- ``dQ = dQ_accum * softmax_scale`` rounded to f16/bf16
  (the dK/dV kernel adds unscaled f32 partial sums into ``dQ_accum``, one slab per query block
  in WGMMA fragment order; this kernel undoes that permutation, as FlashAttention-3/4's
  postprocess does).

Layouts are FlashAttention's: O, dO and dQ (batch, seqlen_q, heads, d) or packed (total_q, heads,
d), C-contiguous; the LSE (batch, heads, seqlen_q) or (heads, total_q). Both workspaces have one
slab per (query head, query block of a sequence): ``dq_blocks`` slabs per head, dense ``batch *
ceil(seqlen_q / 64)``, varlen ``total_q // 64 + batch`` with sequence ``b`` from slab
``cu_seqlens_q[b] // 64 + b`` (:func:`sequence_slabs`).
"""
from __future__ import annotations

from ..compiler.artifact import ParamSpec as Param
from ..errors import ConfigError, one_of
from ..ir._lazy import lazy
from .base import Kernel

cir = lazy("cutedsl.ir")
llvm = lazy("mlir.dialects.llvm")

THREADS = 128           #: threads per CTA of the postprocess
BLOCK_M = 64            #: queries per dQ workspace slab (the dK/dV kernel's query block)
VEC_BYTES = 16          #: bytes of one vector load (ld.global.v4.b32 / v8 of 16-bit)
DTYPES = ("bf16", "f16")


def _check(cls, head_dim, dtype) -> None:
    if dtype not in DTYPES:
        raise ConfigError(f"{cls.__name__}: dtype must be {one_of(DTYPES)}, got {dtype!r}")
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % (VEC_BYTES // 2):
        raise ConfigError(f"{cls.__name__}: head_dim must be a positive multiple of {VEC_BYTES // 2} (16-byte "
                          f"vector loads), got {head_dim!r}")


def sequence_slabs(a, batch, varlen: bool) -> tuple:
    """IR ``(q_start, seqlen, seq_block0)`` of sequence ``batch``: its first token, its length
    and the workspace slab of its query block 0 (module docstring), from the kernel parameters
    ``a`` (``seqlen_q``; varlen ``cu_seqlens_q``)."""
    if varlen:
        cu = cir.GlobalPtr(a.cu_seqlens_q, "i32")
        q_start = cu.load(cir.i64(batch))
        return q_start, cu.load(cir.i64(batch + 1)) - q_start, first_slab(batch, q_start, a.seqlen_q, True)
    return batch * a.seqlen_q, a.seqlen_q, first_slab(batch, None, a.seqlen_q, False)


def first_slab(batch, q_start, seqlen_q, varlen: bool):
    """IR: the slab of sequence ``batch``'s query block 0 within a head's ``dq_blocks`` (module
    docstring): varlen ``q_start // 64 + batch`` (``q_start``: its first token), dense ``batch *
    ceil(seqlen_q / 64)``. The one definition the three backward kernels share."""
    if varlen:
        return q_start // BLOCK_M + batch
    return batch * ((seqlen_q + BLOCK_M - 1) // BLOCK_M)


class AttentionBwdPreprocessKernel(Kernel):
    """``D[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d]`` in f32, and the stats workspace
    ``(heads, dq_blocks, 2, 64)`` f32: per query block ``LSE * log2 e`` then ``D``, 0 for rows
    past the sequence (P and dS vanish there: the dK/dV kernel masks those queries, dO is 0).
    One thread per row of a query block (grid ``(ceil(seqlen_q / 64), heads, batch)``, varlen
    ``seqlen_q`` the longest sequence). Parameters: ``o``, ``do`` (``dtype`` pointers), ``lse``
    (f32, the forward's), ``stats`` (f32, output), ``seqlen_q``, ``heads``, ``dq_blocks``, varlen
    ``cu_seqlens_q`` (i32) and ``total_q``. Raises ``ConfigError`` for a dtype or head dimension
    it cannot read."""

    name = "attention_bwd_preprocess"

    def __init__(self, head_dim: int, dtype: str = "bf16", *, varlen: bool = False):
        _check(type(self), head_dim, dtype)
        self.head_dim, self.dtype, self.varlen = head_dim, dtype, bool(varlen)

    def config(self) -> dict:
        return {"head_dim": self.head_dim, "dtype": self.dtype, "varlen": self.varlen}

    def params(self) -> list:
        ps = [Param("o", "ptr", dtype=self.dtype), Param("do", "ptr", dtype=self.dtype), Param("lse", "ptr", dtype="f32"),
              Param("stats", "ptr", dtype="f32", output=True), Param("seqlen_q", "i32"), Param("heads", "i32"),
              Param("dq_blocks", "i32")]
        if self.varlen:
            ps += [Param("cu_seqlens_q", "ptr", dtype="i32"), Param("total_q", "i32")]
        return ps

    def grid(self, problem) -> tuple:
        return (max(1, -(-problem.seqlen_q // BLOCK_M)), problem.heads, problem.batch)

    def define(self):
        from ..collective.attention_bwd_mainloop import LOG2E
        from ..ir import KernelBuilder
        kb = KernelBuilder(self.name, self.params(), block=(BLOCK_M, 1, 1))
        lanes = VEC_BYTES // 2
        with kb.build() as a:
            r = cir.i32(cir.thread_idx())
            m, h, b = (cir.i32(cir.block_idx(x)) for x in ("x", "y", "z"))
            q_start, seqlen, seq_block0 = sequence_slabs(a, b, self.varlen)
            with cir.If(m * BLOCK_M < seqlen):          # a block past this (shorter) sequence: no slab
                q = m * BLOCK_M + r
                ok = q < seqlen
                row = q_start + cir.select(ok, q, seqlen - 1)   # rows past the sequence read a valid row
                o, do = cir.GlobalPtr(a.o, self.dtype), cir.GlobalPtr(a.do, self.dtype)
                base = (cir.i64(row) * cir.i64(a.heads) + cir.i64(h)) * self.head_dim
                acc = []
                for j in range(0, self.head_dim, lanes):
                    vo, vd = o.load_vec(base + j, lanes), do.load_vec(base + j, lanes)
                    for x in range(lanes):
                        eo = cir.Scalar(llvm.extractelement(vo, cir.i32(x))).to("f32")
                        ed = cir.Scalar(llvm.extractelement(vd, cir.i32(x))).to("f32")
                        acc.append(eo * ed)
                while len(acc) > 1:                     # pairwise: short dependency chains
                    acc = [acc[k] + acc[k + 1] if k + 1 < len(acc) else acc[k] for k in range(0, len(acc), 2)]
                lse_at = h * a.total_q + row if self.varlen else (b * a.heads + h) * a.seqlen_q + (row - q_start)
                lse = cir.GlobalPtr(a.lse, "f32").load(cir.i64(lse_at))
                zero = cir.f32(0.0)
                slab = cir.i64(h * a.dq_blocks + seq_block0 + m) * (2 * BLOCK_M) + cir.i64(r)
                out = cir.GlobalPtr(a.stats, "f32")
                out.store(slab, cir.select(ok, lse * LOG2E, zero))
                out.store(slab + BLOCK_M, cir.select(ok, acc[0], zero))
        return kb, 0, []


class AttentionBwdPostprocessKernel(Kernel):
    """``dq[token, head, :] = dq_accum[...] * scale`` rounded to ``dtype`` (``cvt.rn``): reads the
    dK/dV kernel's workspace of ``(heads, dq_blocks, 64 * head_dim)`` f32 slabs, each one query
    block in fragment order (:class:`~cutedsl.collective.attention_bwd_dq.DqStaging`), and writes
    dQ in FlashAttention's layout. One CTA per (query block, head, batch) (grid ``(ceil(seqlen_q
    / 64), heads, batch)``; varlen: ``seqlen_q`` the longest sequence), two elements per thread
    and step (an 8-byte load, one ``st.global.b32``); rows past the sequence are not written.

    Parameters: ``dq_accum`` (f32), ``dq`` (``dtype``, output), ``seqlen_q``, ``heads``,
    ``dq_blocks`` (slabs per head), ``scale`` (f32), varlen ``cu_seqlens_q`` (i32). Raises
    ``ConfigError`` for a dtype or head dimension it cannot read."""

    name = "attention_bwd_postprocess"

    def __init__(self, head_dim: int = 128, dtype: str = "bf16", *, varlen: bool = False):
        _check(type(self), head_dim, dtype)
        from ..collective.attention_bwd_dq import DqStaging
        self.head_dim, self.dtype, self.varlen = head_dim, dtype, bool(varlen)
        self.staging = DqStaging.for_kernel(head_dim, BLOCK_M, dtype)

    def config(self) -> dict:
        return {"head_dim": self.head_dim, "dtype": self.dtype, "varlen": self.varlen}

    def params(self) -> list:
        ps = [Param("dq_accum", "ptr", dtype="f32"), Param("dq", "ptr", dtype=self.dtype, output=True),
              Param("seqlen_q", "i32"), Param("heads", "i32"), Param("dq_blocks", "i32"), Param("scale", "f32")]
        if self.varlen:
            ps.append(Param("cu_seqlens_q", "ptr", dtype="i32"))
        return ps

    def grid(self, problem) -> tuple:
        return (max(1, -(-problem.seqlen_q // BLOCK_M)), problem.heads, problem.batch)

    def define(self):
        from ..atom.stmatrix import pack_b16x2
        from ..ir import KernelBuilder
        kb = KernelBuilder(self.name, self.params(), block=(THREADS, 1, 1))
        d, st = self.head_dim, self.staging
        half = d // 2                           # column pairs per row
        with kb.build() as a:
            t = cir.i32(cir.thread_idx())
            m, h, b = (cir.i32(cir.block_idx(x)) for x in ("x", "y", "z"))
            q_start, seqlen, seq_block0 = sequence_slabs(a, b, self.varlen)
            slab = cir.i64(h * a.dq_blocks + seq_block0 + m) * st.block_elems
            acc, out = cir.GlobalPtr(a.dq_accum, "f32"), cir.GlobalPtr(a.dq, "u32")
            with cir.If(m * BLOCK_M < seqlen):
                for it in cir.Loop(0, BLOCK_M * half // THREADS):
                    pair = cir.i32(it) * THREADS + t
                    r, c = pair // half, (pair % half) * 2
                    q = m * BLOCK_M + r
                    with cir.If(q < seqlen):
                        v = acc.load_vec(slab + cir.i64(st.slot_of(r, c)), 2)
                        lo, hi = (cir.Scalar(llvm.extractelement(v, cir.i32(x))) * a.scale for x in range(2))
                        dst = (cir.i64(q_start + q) * cir.i64(a.heads) + cir.i64(h)) * half + cir.i64(pair % half)
                        out.store(dst, pack_b16x2(lo, hi, self.dtype))
        return kb, 0, []


__all__ = ["AttentionBwdPreprocessKernel", "AttentionBwdPostprocessKernel", "sequence_slabs", "first_slab"]
