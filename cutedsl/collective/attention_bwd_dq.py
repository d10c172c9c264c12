"""dQ of the attention backward through shared memory and one bulk reduction per query block
(FlashAttention-3/4's ``flash_bwd_sm90`` scheme): the MMA warpgroup writes its ``dQ = dS K``
fragment into shared memory in *fragment order* (16-byte vector stores, no bank conflicts) and one
thread adds the whole ``block_m x head_dim`` f32 block into the dQ workspace with one
``cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32`` (PTX ISA cp.reduce.async.bulk),
instead of ``block_m * head_dim / 2`` ``red.global.add.v2.f32`` spread over the threads.

Workspace layout: ``(heads, blocks, block_m * head_dim)`` f32 -- one slab per (query head, query
block of a sequence), each in fragment order: element ``(row, col)`` of the block lies at
:meth:`DqStaging.slot_of` ``(row, col)``; the postprocess
(:class:`~cutedsl.kernel.attention_bwd_prepost.AttentionBwdPostprocessKernel`) undoes the
permutation. Fragment order: chunk ``c`` of ``chunk_cols`` columns (one ``dQ`` WGMMA), then the
thread's 4-register group ``g`` (registers ``4g .. 4g + 3``), then the warpgroup thread ``t``,
then the 4 registers -- so lane ``l`` of a warp stores 16 bytes at ``16 l`` past its warp's
base for every group (one conflict-free 512-byte wavefront per warp).

Completion (PTX ISA cp.async.bulk.commit_group / wait_group): the issuing thread commits a bulk
group per block and waits ``wait_group.read 0`` before the warpgroup rewrites the staging buffer
(then a named barrier hands that on), and ``wait_group.read 0`` before the CTA exits.
"""
from __future__ import annotations

from ..atom.bulk_reduce import ALIGN, bulk_reduce_add
from ..atom.wgmma import FRAG_COLS, FRAG_PAIR, FRAG_QUAD, FRAG_ROW_STEP, FRAG_WARP_ROWS
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")
llvm = lazy("mlir.dialects.llvm")

F32_BYTES = 4
VEC = 2 * FRAG_PAIR         #: f32 registers per vector store (two adjacent column pairs: 16 bytes)
BUFFER = "dq"               #: the staging buffer's name in the shared-memory plan


class DqStaging:
    """``block_m`` x ``head_dim`` f32 dQ block staged in fragment order; ``chunk_cols``: columns
    per dQ WGMMA (a chunk), ``warpgroup_threads``, ``warp_threads``."""

    def __init__(self, head_dim: int, block_m: int, chunk_cols: int, warpgroup_threads: int, warp_threads: int):
        if head_dim % chunk_cols or chunk_cols % FRAG_COLS:
            raise ValueError(f"dQ staging: head_dim {head_dim} must be a multiple of the chunk width {chunk_cols}, "
                             f"itself a multiple of {FRAG_COLS}")
        self.head_dim, self.block_m, self.chunk_cols = head_dim, block_m, chunk_cols
        self.threads, self.warp_threads = warpgroup_threads, warp_threads
        self.chunks = head_dim // chunk_cols
        self.groups = block_m * chunk_cols // warpgroup_threads // VEC     # 4-register groups per thread per chunk
        self.block_elems = block_m * head_dim
        self.nbytes = self.block_elems * F32_BYTES  # one bulk reduction (a multiple of 16)

    @classmethod
    def for_kernel(cls, head_dim: int, block_m: int, dtype: str, arch=None) -> "DqStaging":
        """The staging of the attention backward's dK/dV kernel for ``dtype`` on ``arch`` (its dQ
        chunks are one MN box of the MMA traits wide): the dK/dV kernel and the postprocess
        both build it here, so the permutation has one definition."""
        from ..arch import DEFAULT, get_arch
        from ..atom.mma_traits import mma_traits
        a = get_arch(arch or DEFAULT)
        return cls(head_dim, block_m, mma_traits(dtype).mn_box, a.warpgroup_threads, a.warp_threads)

    def plan(self, plan) -> None:
        plan.buffer(BUFFER, (self.block_elems,), "f32", align=ALIGN)

    # -- the permutation (Python ints or IR integers) ---------------------------------------
    def slot(self, t, i, chunk):
        """Element index in the block of register ``i`` (0 .. chunk_cols / 2 - 1) of warpgroup
        thread ``t`` in chunk ``chunk``."""
        return ((chunk * self.groups + i // VEC) * self.threads + t) * VEC + i % VEC

    def slot_of(self, row, col):
        """Element index in the block of dQ element ``(row, col)`` (the inverse of the WGMMA
        D fragment, :func:`~cutedsl.atom.wgmma.fragment_coords`)."""
        chunk, cc = col // self.chunk_cols, col % self.chunk_cols
        w, rr = row // FRAG_WARP_ROWS, row % FRAG_WARP_ROWS
        t = w * self.warp_threads + (rr % FRAG_ROW_STEP) * FRAG_QUAD + (cc % FRAG_COLS) // FRAG_PAIR
        i = (cc // FRAG_COLS) * VEC + (rr // FRAG_ROW_STEP) * FRAG_PAIR + cc % FRAG_PAIR
        return self.slot(t, i, chunk)

    # -- IR ------------------------------------------------------------------------------
    def store(self, smem, dq, chunk: int, wt) -> None:
        """Write accumulator ``dq`` (one ``block_m x chunk_cols`` chunk, IR) of warpgroup thread
        ``wt`` into the staging buffer (``st.shared.v4.f32``)."""
        base = V.i32(smem[BUFFER].address())
        for g in range(self.groups):
            addr = base + V.i32(self.slot(wt, g * VEC, chunk) * F32_BYTES)
            vals = [dq.get(0, g * VEC + j) for j in range(VEC)]
            regs = ", ".join(f"${j + 1}" for j in range(VEC))
            llvm.inline_asm(None, [addr, *vals], f"st.shared.v{VEC}.f32 [$0], {{{regs}}};", "r," + ",".join("f" * VEC),
                            has_side_effects=True)

    def send(self, smem, workspace, block) -> None:
        """One thread: add the staged block into slab ``block`` (IR integer) of ``workspace``
        (the f32 pointer parameter) and commit the bulk group. The caller fenced the generic
        stores toward the async proxy (``fence.proxy.async``) and synchronised the warpgroup."""
        from ..atom.tma import bulk_commit_group
        ws = cir.GlobalPtr(workspace, "f32")
        bulk_reduce_add(ws.address(cir.i64(block) * self.block_elems), smem[BUFFER].address(), self.nbytes, "f32")
        bulk_commit_group()


__all__ = ["DqStaging", "BUFFER", "VEC"]
