"""Bulk reduction atom (``cp.reduce.async.bulk.global.shared::cta.bulk_group.add``): its PTX and
SASS, and on the emulator: two CTAs of 64 threads each stage 64 f32 in shared memory and one
thread per CTA adds them into the same global array (predicated issue), against numpy float64."""
import numpy as np
import pytest

from cutedsl.atom.bulk_reduce import bulk_reduce_add
from cutedsl.testing import build_kernel, normalize_ptx, run_kernel


def _kernel(args, smem):
    from mlir.dialects import gpu, memref
    import cutedsl.ir as cir
    from cutedsl.atom import bulk_commit_group, bulk_wait_group, fence_proxy_async
    t = cir.thread_idx()
    cta = cir.i32(cir.block_idx("x"))
    src = cir.GlobalPtr(args.src, "f32")
    buf = smem["buf"].view(shape=(64,), dtype="f32")
    memref.store(src.load(cir.i64(cta * 64 + t)), buf, [cir.index(t)])
    fence_proxy_async()            # the generic stores before the async-proxy read
    gpu.barrier()
    out = cir.GlobalPtr(args.out, "f32")
    bulk_reduce_add(out.address(cir.i64(4)), smem["buf"].address(), 256, "f32", predicate=t.eq(0))
    bulk_commit_group()
    bulk_wait_group(0, read=False)


@pytest.mark.sim_kernel
def test_bulk_reduce_add_of_two_ctas_on_emulator(rng):
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("buf", (64,), "f32")
    k = build_kernel(_kernel, params=(("src", "ptr"), ("out", "ptr")), block=(64, 1, 1), plan=plan)
    ptx = normalize_ptx(k.ptx)
    assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == 1
    assert "cp.async.bulk.wait_group 0" in ptx
    assert k.resources.sass.get("UBLKRED") == 1, k.resources.sass       # the bulk reduction unit
    src = (rng.standard_normal(128) * 10).astype(np.float32)
    out = (rng.standard_normal(72)).astype(np.float32)
    want = out.astype(np.float64)
    want[4:68] += src[:64].astype(np.float64) + src[64:].astype(np.float64)
    run_kernel(k, [src, out], grid=(2, 1, 1))
    # each element is out + a + b in f32 in some order: within two roundings of float64
    np.testing.assert_allclose(out, want, rtol=2 ** -22, atol=1e-6)


def test_bulk_reduce_add_refuses_bad_arguments():
    with pytest.raises(ValueError, match=r"dtype must be one of .* got 'f8'"):
        bulk_reduce_add(None, None, 16, "f8")
    with pytest.raises(ValueError, match=r"size must be a positive multiple of 16 bytes, got 24"):
        bulk_reduce_add(None, None, 24)
