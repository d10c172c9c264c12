"""Composing kernels directly from atoms, no collective involved.

1. A 2-D scaled copy ``out = 2 * in`` through TMA: load one 32x64 f32 box per CTA, scale it
   in shared memory, fence, TMA-store it.
2. One GEMM tile per CTA, ``D = A @ B`` (f16 in, f32 out): TMA -> WGMMA -> TMA store. The
   shared-memory buffers declare their layout (swizzle, major); the TMA copies and the WGMMA
   descriptors are checked against it while the kernel is built, so a tensor map without the
   128-byte swizzle the WGMMA operands need is refused instead of computing garbage.

Shapes are runtime (tensor maps); edges are zero-filled and clipped. ``cutedsl.runtime.launch``
runs a compiled kernel from arrays and scalars given by parameter name: it copies numpy arrays
to the device and back, encodes each tensor map from the kernel's ``TensorMapSpec`` and packs
the parameters.
"""
import numpy as np
from mlir.dialects import gpu, memref

from cutedsl.atom import (Accumulator, MBarriers, TmaCopy, WarpgroupMMA, bulk_commit_group, bulk_wait_group,
                          tma_store_fence)
from cutedsl.compiler import TensorMapSpec, compile_kernel
from cutedsl.runtime import get_backend, launch
from cutedsl.errors import LayoutError
from cutedsl.ir import If, KernelBuilder, Loop, Param, SmemPlan, block_idx, index, thread_idx

be = get_backend("auto")
rng = np.random.default_rng()


def start(plan, leader):
    """Bind shared memory, initialise the one mbarrier; returns (smem, barrier)."""
    smem = plan.bind()
    bar = MBarriers(smem.barriers("bar"), 1)
    bar.init(0, 1, predicate=leader)
    bar.fence_init()
    gpu.barrier()
    return smem, bar


def store_tile(tma, tile, coords, leader):
    """Generic smem writes -> async proxy -> one thread TMA-stores ``tile``."""
    tma_store_fence()
    gpu.barrier()
    with If(leader):
        tma.store(tile, coords)
        bulk_commit_group()
        bulk_wait_group(0)


# -- 1. scaled copy --------------------------------------------------------------------
BOX = (32, 64)
src_spec, dst_spec = TensorMapSpec("src", "f32", BOX), TensorMapSpec("dst", "f32", BOX)
plan = SmemPlan()
plan.buffer("tile", BOX, "f32")
plan.barriers("bar", 1)
kb = KernelBuilder("scaled_copy", [Param("src", "tensormap"), Param("dst", "tensormap")], block=(128,))
with kb.build() as args:
    tid = thread_idx()
    smem, bar = start(plan, tid.eq(0))
    src, dst = TmaCopy(src_spec, args.src), TmaCopy(dst_spec, args.dst)
    r0, c0 = block_idx("y") * BOX[0], block_idx("x") * BOX[1]
    tile = smem["tile"].tile()
    with If(tid.eq(0)):
        bar.arrive_expect_tx(0, src.box_bytes)
        src.load(tile, bar, 0, (r0, c0))
    bar.wait(0, 0)
    view = tile.memref()
    for i in range(BOX[0] * BOX[1] // 128):           # 16 elements per thread
        e = tid + i * 128
        r, c = index(e // BOX[1]), index(e % BOX[1])
        memref.store(memref.load(view, [r, c]) * 2.0, view, [r, c])
    store_tile(dst, tile, (r0, c0), tid.eq(0))
ck = compile_kernel(kb, dynamic_smem=plan.dynamic_bytes, tensor_maps=[src_spec, dst_spec])
print(f"compiled: {ck.resources.registers} registers, SASS {ck.resources.sass.get('UTMALDG')} UTMALDG, "
      f"{ck.resources.sass.get('UTMASTG')} UTMASTG")
x = rng.standard_normal((70, 100), dtype=np.float32)     # 3 x 2 boxes, both edges partial
y = np.zeros_like(x)
launch(ck, (2, 3, 1), src=x, dst=y, backend=be)
assert np.array_equal(y, 2 * x)
print(f"checked: scaled copy of a 70x100 array through TMA on {be.name!r} is exact")


# -- 2. GEMM tile: TMA -> WGMMA -> TMA store ----------------------------------------------
TM, TN = 64, 64


def gemm_tile_kernel(ab_swizzle=128):
    """D[M, N] = A[M, K] @ B (B given as B^T (N, K) row-major: K-major); one tile per CTA."""
    specs = [TensorMapSpec("a", "f16", (TM, 64), swizzle=ab_swizzle),
             TensorMapSpec("b", "f16", (TN, 64), swizzle=ab_swizzle), TensorMapSpec("d", "f32", (TM, TN))]
    plan = SmemPlan()
    plan.buffer("a", (TM, 64), "f16", swizzle=128, major="K")     # what the WGMMA descriptors read
    plan.buffer("b", (TN, 64), "f16", swizzle=128, major="K")
    plan.buffer("d", (TM, TN), "f32")
    plan.barriers("bar", 1)
    params = [Param("a", "tensormap"), Param("b", "tensormap"), Param("d", "tensormap"), Param("k", "i32")]
    kb = KernelBuilder("gemm_tile", params, block=(128,))
    with kb.build() as args:
        leader = thread_idx().eq(0)
        smem, bar = start(plan, leader)
        ta, tb, td = (TmaCopy(s, p) for s, p in zip(specs, (args.a, args.b, args.d)))
        a, b, d = smem["a"].tile(), smem["b"].tile(), smem["d"].tile()
        m0, n0 = block_idx("y") * TM, block_idx("x") * TN
        mma = WarpgroupMMA(TM, TN, "f16")
        loop = Loop(0, (args.k.unsigned() + 63) // 64, carry=mma.zero().structs)
        for kt, structs in loop:
            with If(leader):
                bar.arrive_expect_tx(0, ta.box_bytes + tb.box_bytes)
                ta.load(a, bar, 0, (m0, kt * 64))
                tb.load(b, bar, 0, (n0, kt * 64))
            bar.wait(0, kt & 1)                          # one barrier phase per k-tile
            acc = mma.mma(Accumulator(structs, TN), a, b)
            mma.wait(0)
            gpu.barrier()                                # every warp done reading before the refill
            loop.next(*acc.structs)
        acc = Accumulator(loop.results, TN)
        r0, c0 = acc.thread_coords()
        view = d.memref()
        for i in range(acc.regs):                        # accumulator fragment -> smem tile
            dr, dc = acc.reg_offset(0, i)
            memref.store(acc.get(0, i), view, [index(r0 + dr), index(c0 + dc)])
        store_tile(td, d, (m0, n0), leader)
    return compile_kernel(kb, dynamic_smem=plan.dynamic_bytes, tensor_maps=specs)


try:
    gemm_tile_kernel(ab_swizzle=0)                       # the trap: unswizzled maps feeding WGMMA
    raise AssertionError("a swizzle mismatch was not caught")
except LayoutError as e:
    print(f"refused at build time: {e}")
ck = gemm_tile_kernel()
m, n, k = 100, 90, 200                                   # 2 x 2 tiles and 4 k-tiles, all partial
a = rng.integers(-4, 5, (m, k)).astype(np.float16)
bt = rng.integers(-4, 5, (n, k)).astype(np.float16)
d = np.zeros((m, n), np.float32)
launch(ck, (2, 2, 1), a=a, b=bt, d=d, k=k, backend=be)
assert np.array_equal(d, a.astype(np.float64) @ bt.T.astype(np.float64))
print(f"checked: TMA -> WGMMA -> TMA store GEMM {m}x{n}x{k} is exact on {be.name!r} "
      f"({ck.resources.sass.get('HGMMA')} HGMMA)")
