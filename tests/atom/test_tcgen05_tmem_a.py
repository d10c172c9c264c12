"""tcgen05.mma with A in tensor memory (FlashAttention-4's ``O += P V``; PTX ISA 9.7.16.10.9, the
``[d], [a-tmem], b-desc`` form) and the ``tcgen05.st`` atom that writes A there
(:func:`~cutedsl.atom.tmem_fragment.store_columns`), run on the emulator against numpy float64:
each thread writes its row of A (16-bit pairs packed little-endian into 32-bit columns) with
``tcgen05.st`` + ``wait::st``, one thread issues two k-tiles from TMEM A and TMA-loaded B (K- and
MN-major), D comes back through ``tcgen05.ld``. Race checks on (the default), eager and adversarial."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.atom.tcgen05 import Umma
from cutedsl.testing import build_kernel, load_operands, operand_buffer, rounded, run_kernel

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
K_TILES = 2
K = 64 * K_TILES
A_COL = 128                     #: A's columns in the allocation (D at column 0)
CHUNK = 32


def _kernel(n, dtype, b_major):
    from cutedsl.atom import MBarriers, TmaCopy
    from cutedsl.atom.tcgen05 import TensorMemory
    from cutedsl.atom.tmem_fragment import TmemFragment, store_columns
    from cutedsl.ir import SmemPlan
    from cutedsl.ir.smem_tile import static_word
    plan = SmemPlan()
    spec = operand_buffer(plan, "b", n, dtype, b_major, K_TILES)
    plan.barriers("bar", 1)
    plan.barriers("mma", 1)

    def body(args, smem):
        import cutedsl.ir as cir
        from mlir.dialects import gpu
        tid = cir.thread_idx()
        leader = tid.eq(0)
        done = MBarriers(smem.barriers("mma"), 1)
        done.init(0, 1, predicate=leader)
        load_operands(smem, [(TmaCopy(spec, args.b), "b", n, b_major, K_TILES)])   # (its barrier orders the init)
        tmem = TensorMemory(static_word("tmem_address"), 256)
        with cir.If((tid // 32).eq(0)):
            tmem.alloc()
        TensorMemory.fence_before()
        gpu.barrier()
        TensorMemory.fence_after()
        base = tmem.address()
        words = cir.GlobalPtr(args.a, "i32")                      # row tid of A: K / 2 packed pairs
        store_columns(base + A_COL, 0, [words.load(cir.i64(tid * (K // 2) + c)) for c in range(K // 2)])
        TensorMemory.fence_before()
        gpu.barrier()
        with cir.If(leader):
            TensorMemory.fence_after()
            mma = Umma(128, n, dtype, b_major)
            for kt in range(K_TILES):
                mma.mma_tmem_a(base, base + A_COL + kt * (64 // 2), smem["b"].tile(kt), accumulate=kt > 0)
            mma.commit(done.address(0))
        done.wait(0, 0)
        TensorMemory.fence_after()
        out = cir.GlobalPtr(args.out, "f32")
        for c0 in range(0, n, CHUNK):
            frag = TmemFragment.load(base, c0, CHUNK)
            for i in range(CHUNK):
                out.store(cir.i64(tid * n + c0 + i), frag.get(0, i))
        TensorMemory.fence_before()
        gpu.barrier()
        with cir.If((tid // 32).eq(0)):
            TensorMemory.fence_after()
            tmem.dealloc(base)
    kern = build_kernel(body, params=(("a", "ptr"), ("b", "tensormap"), ("out", "ptr")), plan=plan, arch="sm_100a")
    return kern, spec


@pytest.mark.sim_kernel
@pytest.mark.parametrize("n,dtype,b_major", [(64, "bf16", "MN"), (128, "f16", "K")])
def test_tmem_a_mma_on_emulator(n, dtype, b_major, rng):
    kern, spec = _kernel(n, dtype, b_major)
    lines = [line for line in kern.ptx.splitlines() if "tcgen05.mma" in line]
    assert len(lines) == 4 * K_TILES and all("], [" in line for line in lines)      # every one reads [a-tmem]
    assert kern.ptx.count("tcgen05.st.sync.aligned.32x32b.x64") == 1 and "tcgen05.wait::st" in kern.ptx
    a, a64 = rounded(rng, (128, K), NP[dtype])
    bmat, b64 = rounded(rng, (K, n), NP[dtype])
    glob = np.ascontiguousarray(bmat.T if b_major == "K" else bmat)
    from cutedsl.sim import Emulator
    emu = Emulator()
    tmap = emu.tensor_map(emu.to_device(glob), glob.shape, dtype, spec.box, swizzle=spec.swizzle)
    out = np.zeros((128, n), np.float32)
    run_kernel(kern, [a.view(np.int32), tmap, out], emu=emu)
    want = a64 @ b64
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_tmem_a_refusals():
    with pytest.raises(ValueError, match=r"A in tensor memory is built for 128 rows per CTA \(M = 128 with cta_group 1, M = 256 with cta_group 2\)"):
        Umma(64, 64, "bf16").mma_tmem_a(None, None, None)
    with pytest.raises(ValueError, match=r"128 rows per CTA .*got tcgen05.mma.cta_group::2 m128n64k16 bf16"):
        Umma(128, 64, "bf16", cta_group=2).mma_tmem_a(None, None, None)      # a pair's M = 128: 64 rows each
    from cutedsl.atom.tmem_fragment import store_columns
    with pytest.raises(ValueError, match="tcgen05.st 32x32b stores a power of two 1..128 columns, got 3"):
        store_columns(None, 0, [None] * 3)


def _pair_kernel(n, dtype):
    """A CTA pair (cluster of 2): CTA ``r`` writes rows ``128 r ..`` of A into its own tensor
    memory and TMA-loads B's N rows ``r n / 2 ..`` (K-major); after a cluster barrier the even
    CTA's thread 0 issues ``tcgen05.mma.cta_group::2`` (M = 256) from [a-tmem], its commit
    multicast to both CTAs; each CTA reads its 128 rows of D back."""
    from mlir.dialects import gpu
    from cutedsl.atom import MBarriers, TmaCopy
    from cutedsl.atom.cluster import cluster_sync, cta_rank
    from cutedsl.atom.tcgen05 import TensorMemory
    from cutedsl.atom.tmem_fragment import TmemFragment, store_columns
    from cutedsl.ir import SmemPlan
    from cutedsl.ir.smem_tile import static_word
    plan = SmemPlan()
    spec = operand_buffer(plan, "b", n // 2, dtype, "K", K_TILES)
    plan.barriers("bar", 1)
    plan.barriers("mma", 1)

    def body(args, smem):
        import cutedsl.ir as cir
        tid, rank = cir.thread_idx(), cir.i32(cta_rank())
        leader = tid.eq(0)
        bar, done = MBarriers(smem.barriers("bar"), 1), MBarriers(smem.barriers("mma"), 1)
        bar.init(0, 1, predicate=leader)
        done.init(0, 1, predicate=leader)
        bar.fence_init()
        tmem = TensorMemory(static_word("tmem_address"), 256, cta_group=2)
        with cir.If((tid // 32).eq(0)):
            tmem.alloc()
        TensorMemory.fence_before()
        cluster_sync()                          # barriers and allocations of both CTAs made
        TensorMemory.fence_after()
        tma = TmaCopy(spec, args.b)
        with cir.If(leader):                    # this CTA's half of B's N rows
            bar.arrive_expect_tx(0, tma.box_bytes * K_TILES)
            for kt in range(K_TILES):
                tma.load(smem["b"].tile(kt), bar, 0, (rank * (n // 2), cir.i32(kt * 64)))
        bar.wait(0, 0)
        base = tmem.address()
        words = cir.GlobalPtr(args.a, "i32")   # row 128 r + tid of A: K / 2 packed pairs
        row = rank * 128 + cir.i32(tid)
        store_columns(base + A_COL, 0, [words.load(cir.i64(row * (K // 2) + c)) for c in range(K // 2)])
        TensorMemory.fence_before()
        cluster_sync()                          # both CTAs' A rows stored and B halves landed
        with cir.If(leader & (rank % 2).eq(0)):
            TensorMemory.fence_after()
            mma = Umma(256, n, dtype, "K", cta_group=2)
            for kt in range(K_TILES):
                mma.mma_tmem_a(base, base + A_COL + kt * (64 // 2), smem["b"].tile(kt), accumulate=kt > 0)
            mma.commit(done.address(0), cir.u32(3))
        done.wait(0, 0)
        TensorMemory.fence_after()
        out = cir.GlobalPtr(args.out, "f32")
        for c0 in range(0, n, CHUNK):
            frag = TmemFragment.load(base, c0, CHUNK)
            for i in range(CHUNK):
                out.store(cir.i64(row * n + c0 + i), frag.get(0, i))
        TensorMemory.fence_before()
        cluster_sync()                          # no CTA frees columns the pair's MMA may still use
        with cir.If((tid // 32).eq(0)):
            TensorMemory.fence_after()
            tmem.dealloc(base)
        gpu.barrier()
    kern = build_kernel(body, params=(("a", "ptr"), ("b", "tensormap"), ("out", "ptr")), plan=plan, arch="sm_100a",
                        cluster=(2, 1, 1))
    return kern, spec


@pytest.mark.sim_kernel
def test_tmem_a_pair_mma_on_emulator(rng):
    """cta_group::2 with A in tensor memory (FlashAttention-4's 2-CTA ``P V``): M = 256 from the two
    CTAs' tensor memories, B's N halves from their shared memories, D's rows into each CTA's own."""
    n, dtype = 128, "bf16"
    kern, spec = _pair_kernel(n, dtype)
    lines = [line for line in kern.ptx.splitlines() if "tcgen05.mma" in line]
    assert len(lines) == 4 * K_TILES and all("tcgen05.mma.cta_group::2" in x and "], [" in x for x in lines)
    a, a64 = rounded(rng, (256, K), NP[dtype])
    bmat, b64 = rounded(rng, (K, n), NP[dtype])
    glob = np.ascontiguousarray(bmat.T)                           # (n, K): K-major B
    from cutedsl.sim import Emulator
    emu = Emulator()
    tmap = emu.tensor_map(emu.to_device(glob), glob.shape, dtype, spec.box, swizzle=spec.swizzle)
    out = np.zeros((256, n), np.float32)
    run_kernel(kern, [a.view(np.int32), tmap, out], emu=emu, grid=2)
    want = a64 @ b64
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
