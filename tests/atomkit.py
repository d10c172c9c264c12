"""Helpers for atom tests: build a tiny kernel around a body, compile it, run it on the emulator."""
from __future__ import annotations

import numpy as np


def build(body, params=(("out", "ptr"),), block=(128, 1, 1), plan=None, **kw):
    """Compile a one-kernel module whose body is ``body(args, smem)``; returns the CompiledKernel.
    ``plan`` is an optional ``SmemPlan`` (bound before the body runs)."""
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import KernelBuilder, Param
    kb = KernelBuilder("atom_test", [Param(*p) for p in params], block=block, **kw)
    with kb.build() as args:
        smem = plan.bind() if plan is not None else None
        body(args, smem)
    return compile_kernel(kb, dynamic_smem=plan.dynamic_bytes if plan is not None else 0)


def norm(ptx: str) -> str:
    return " ".join(ptx.split())


def run(kernel, args, grid=1, cluster=(1, 1, 1), emu=None):
    """Launch the compiled ``kernel`` on the emulator with ``args`` (numpy arrays become device
    buffers); returns the list of device buffers / values and the emulator."""
    from cutedsl.sim import Emulator
    emu = emu or Emulator()
    prog = emu.load(kernel.ptx)
    dev = [emu.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    emu.launch(prog, grid=grid, block=kernel.block, args=dev, cluster=cluster, smem=kernel.dynamic_smem)
    return dev, emu


# -- WGMMA operands through TMA (tests of the MMA atoms) ---------------------------------

def operand_buffer(plan, name, rows, dtype, major, k_tiles=1):
    """Declare the shared buffer of a WGMMA operand with ``rows`` (M or N) rows, ``k_tiles``
    stages of one k-tile each, laid out as a 128-B-swizzled TMA box writes it; returns the
    TensorMapSpec of its box. Global layout: K-major operands are (rows, K) row-major,
    MN-major ones (K, rows)."""
    from cutedsl.atom.mma_traits import mma_traits
    from cutedsl.compiler import TensorMapSpec
    t = mma_traits(dtype)
    shape = ((rows // t.mn_box) * t.k_tile, t.mn_box) if major == "MN" else (rows, t.k_tile)
    plan.buffer(name, shape, dtype, stages=k_tiles, swizzle=t.swizzle, major=major)
    box = (t.k_tile, t.mn_box) if major == "MN" else (rows, t.k_tile)
    return TensorMapSpec(name, dtype, box, swizzle=t.swizzle)


def load_operands(smem, loads):
    """Thread 0 TMA-loads every k-tile of each operand ``(TmaCopy, name, rows, major, k_tiles)``
    on mbarrier group ``"bar"``; every thread waits for them. Needs ``plan.barriers("bar", 1)``."""
    from mlir.dialects import gpu
    from cutedsl.atom import MBarriers
    from cutedsl.atom.mma_traits import mma_traits
    from cutedsl.ir import If, thread_idx
    leader = thread_idx().eq(0)
    bar = MBarriers(smem.barriers("bar"), 1)
    bar.init(0, 1, predicate=leader)
    bar.fence_init()
    gpu.barrier()
    with If(leader):
        total = sum(tma.box_bytes * (rows // mma_traits(tma.spec.dtype).mn_box if major == "MN" else 1) * kts
                    for tma, _n, rows, major, kts in loads)
        bar.arrive_expect_tx(0, total)
        for tma, name, rows, major, kts in loads:
            t = mma_traits(tma.spec.dtype)
            for kt in range(kts):
                if major == "MN":
                    for j in range(rows // t.mn_box):
                        dst = smem[name].tile(kt, shape=tma.spec.box, byte_offset=j * tma.box_bytes)
                        tma.load(dst, bar, 0, (kt * t.k_tile, j * t.mn_box))
                else:
                    tma.load(smem[name].tile(kt), bar, 0, (0, kt * t.k_tile))
    bar.wait(0, 0)


def store_accumulator(acc, ptr, ld):
    """Every element of ``acc`` (f32 fragment) to ``ptr`` (a GlobalPtr of f32, row pitch ``ld``)."""
    import cutedsl.ir as cir
    r0, c0 = acc.thread_coords()
    for b in range(acc.m_blocks):
        for i in range(acc.regs):
            dr, dc = acc.reg_offset(b, i)
            ptr.store(cir.i64((r0 + dr) * ld + c0 + dc), acc.get(b, i))


def accumulator_from(ptr, mma, ld):
    """An accumulator of ``mma`` holding ``ptr[row * ld + col]`` (f32) at each element."""
    import cutedsl.ir as cir
    acc = mma.zero()
    return acc.map(lambda _v, r, c: ptr.load(cir.i64(r * ld + c)))


def rounded(rng, shape, np_dtype, scale=1.0):
    """Fresh standard-normal values rounded to ``np_dtype`` (what the kernel sees) and as float64."""
    x = (rng.standard_normal(shape) * scale).astype(np_dtype)
    return x, x.astype(np.float64)
