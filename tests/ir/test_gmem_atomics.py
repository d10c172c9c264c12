"""``GlobalPtr.atomic_add``: the PTX reductions it emits (f32, f16x2, bf16x2), its type errors,
and their effect when several CTAs add into the same elements (run on the emulator)."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.compiler import compile_kernel
from cutedsl.ir import GlobalPtr, KernelBuilder, Param, f32, thread_idx


def reduction_kernel():
    kb = KernelBuilder("reductions", [Param("x", "ptr"), Param("h", "ptr"), Param("g", "ptr")], block=(32,))
    with kb.build() as args:
        t = thread_idx()
        GlobalPtr(args.x, "f32").atomic_add(t, f32(0.5) + t.to("f32"))                # x[t] += t + 0.5
        one = (f32(1.0) + t.to("f32"))
        GlobalPtr(args.h, "f16").atomic_add(t * 2, (one.to("f16"), (one * 2.0).to("f16")))
        GlobalPtr(args.g, "bf16").atomic_add(t * 2, (one.to("bf16"), (one * 2.0).to("bf16")))
    return compile_kernel(kb)


def test_ptx_and_sass_of_each_variant(sim):
    ck = reduction_kernel()
    for op in ("red.global.add.f32 [", "red.global.add.noftz.f16x2 [", "red.global.add.noftz.bf16x2 ["):
        assert ck.ptx.count(op) == 1, op
    assert ck.resources.sass["REDG"] == 3 and "ATOMG" not in ck.resources.sass
    # three CTAs add into the same 32 elements
    from cutedsl.runtime import arrays
    x = arrays.to_device(sim, np.ones(32, np.float32))
    h = arrays.to_device(sim, np.ones(64, np.float16))
    g = arrays.to_device(sim, np.ones(64, ml_dtypes.bfloat16))
    sim.launch(sim.load(ck), (3, 1, 1), ck.pack_params({"x": x.ptr, "h": h.ptr, "g": g.ptr}), block=ck.block)
    sim.synchronize()
    t = np.arange(32)
    assert np.array_equal(arrays.to_host(x), 1 + 3 * (t + 0.5))
    pairs = np.stack([1 + 3 * (t + 1), 1 + 6 * (t + 1)], axis=1).reshape(-1)
    assert np.array_equal(arrays.to_host(h).astype(np.float64), pairs.astype(np.float16).astype(np.float64))
    # bf16 keeps 8 significant bits: every partial sum here (integers <= 193) is exact
    assert np.array_equal(arrays.to_host(g).astype(np.float64), pairs)


def test_type_errors():
    kb = KernelBuilder("bad", [Param("x", "ptr")], block=(32,))
    with kb.build() as args:
        with pytest.raises(TypeError, match="atomic_add of f16 into a f32 pointer"):
            GlobalPtr(args.x, "f32").atomic_add(0, f32(1.0).to("f16"))
        with pytest.raises(TypeError, match="takes two f16 values, got f32 and f32"):
            GlobalPtr(args.x, "f16").atomic_add(0, (f32(1.0), f32(2.0)))
        with pytest.raises(TypeError, match="atomic_add supports f32, f16 and bf16 pointers, not i32"):
            GlobalPtr(args.x, "i32").atomic_add(0, thread_idx())
        with pytest.raises(ValueError, match="adds a pair at an even index, got 3"):
            GlobalPtr(args.x, "bf16").atomic_add(3, (f32(1.0).to("bf16"), f32(2.0).to("bf16")))
        with pytest.raises(TypeError, match="tuple of 2 or 4"):
            GlobalPtr(args.x, "f32").atomic_add(0, (f32(1.0), f32(2.0), f32(3.0)))
        with pytest.raises(ValueError, match="index aligned to 4, got 2"):
            GlobalPtr(args.x, "f32").atomic_add(2, (f32(1.0),) * 4)


def test_vector_f32_reductions(sim):
    """A tuple of 2 or 4 f32 is one ``red.global.add.v2/.v4.f32`` (REDG.E.ADD.F32x2 / x4 in the
    SASS); three CTAs add into the same elements."""
    kb = KernelBuilder("vred", [Param("x", "ptr")], block=(32,))
    with kb.build() as args:
        t = thread_idx()
        v = f32(0.5) + t.to("f32")
        GlobalPtr(args.x, "f32").atomic_add(t * 4, (v, v * 2.0, v * 3.0, v * 4.0))
        GlobalPtr(args.x, "f32").atomic_add(t * 2 + 128, (v, -v))
    ck = compile_kernel(kb)
    assert ck.ptx.count("red.global.add.v4.f32 [") == 1 and ck.ptx.count("red.global.add.v2.f32 [") == 1
    assert ck.resources.sass["REDG"] == 2
    from cutedsl.runtime import arrays
    x = arrays.to_device(sim, np.zeros(192, np.float32))
    sim.launch(sim.load(ck), (3, 1, 1), ck.pack_params({"x": x.ptr}), block=ck.block)
    sim.synchronize()
    got, v = arrays.to_host(x), np.arange(32) + 0.5
    assert np.array_equal(got[:128].reshape(32, 4), 3 * v[:, None] * np.arange(1, 5))
    assert np.array_equal(got[128:].reshape(32, 2), 3 * np.stack([v, -v], axis=1))
