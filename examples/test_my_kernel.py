"""Unit-testing your own atom-composed kernel with ``cutedsl.testing`` on the emulator.

The kernel: row sums of an (M, N) f32 matrix, N <= 64. Each CTA TMA-loads one 32 x 64 box of
rows into shared memory (an mbarrier counts the bytes), and threads 0..31 each add up one row
and store it if the row exists. TMA zero-fills the columns past N and the rows past M
(PTX ISA, cp.async.bulk.tensor: out-of-bound elements are filled with zeros), so the sums are
exact for small-integer inputs, whatever M and N.

Run it as a test file (``pytest examples/test_my_kernel.py``: the module enables the plugin,
so it works outside this repository's tests) or as a script (``python
examples/test_my_kernel.py`` runs pytest on itself and prints "checked"). Every test that uses
the ``sim`` fixture or the ``sim_kernel`` marker runs eagerly and under the emulator's
adversarial seeds 1..N (``--sim-seeds N``); a failure names the ``rng`` seed to replay.
"""
import numpy as np
import pytest

from cutedsl.testing import build_kernel, normalize_ptx, run_kernel

pytest_plugins = ["cutedsl.testing.plugin"]     # in a conftest.py for a whole test suite

BOX = (32, 64)          # rows x columns of f32 per CTA


def row_sum_kernel():
    """``out[r] = sum(x[r, :])``; parameters ``src`` (tensor map of x), ``out`` (f32 pointer,
    written), ``m`` (rows). Grid: ``(1, ceil(M / 32), 1)``."""
    from mlir.dialects import gpu, memref

    import cutedsl.ir as cir
    from cutedsl.atom import MBarriers, TmaCopy
    from cutedsl.compiler import TensorMapSpec
    spec = TensorMapSpec("src", "f32", BOX)
    plan = cir.SmemPlan()
    plan.buffer("tile", BOX, "f32")
    plan.barriers("bar", 1)

    def body(args, smem):
        tid = cir.thread_idx()
        bar = MBarriers(smem.barriers("bar"), 1)
        bar.init(0, 1, predicate=tid.eq(0))
        bar.fence_init()
        gpu.barrier()
        tma, tile = TmaCopy(spec, args.src), smem["tile"].tile()
        r0 = cir.block_idx("y") * BOX[0]
        with cir.If(tid.eq(0)):
            bar.arrive_expect_tx(0, tma.box_bytes)
            tma.load(tile, bar, 0, (r0, 0))
        bar.wait(0, 0)
        row = r0 + tid
        with cir.If((tid < BOX[0]) & (row < args.m.unsigned())):
            view, acc = tile.memref(), cir.f32(0.0)
            for c in range(BOX[1]):
                acc = acc + cir.Scalar(memref.load(view, [cir.index(tid), cir.index(c)]))
            cir.GlobalPtr(args.out, "f32").store(cir.i64(row), acc)

    params = [cir.Param("src", "tensormap"), cir.Param("out", "ptr", output=True), cir.Param("m", "i32")]
    return build_kernel(body, params, block=(128, 1, 1), plan=plan, name="row_sum", tensor_maps=[spec])


@pytest.fixture(scope="module")
def kernel():
    return row_sum_kernel()


def test_instructions(kernel):
    """The PTX holds one 2-D TMA load and the mbarrier wait; ptxas spills nothing."""
    ptx = normalize_ptx(kernel.ptx)
    assert ptx.count("cp.async.bulk.tensor.2d") == 1 and "mbarrier.try_wait" in ptx
    assert kernel.resources.spill_stores == 0


@pytest.mark.parametrize("m,n", [(70, 50), (32, 64), (5, 1)])
def test_row_sums(kernel, sim, rng, m, n):
    """On the session's emulator backend through ``cutedsl.runtime.launch`` (it pads x's rows
    to TMA's 16-byte pitch and encodes the map from the kernel's spec), eager and adversarial,
    against numpy float64. ``out`` is a device array: a compiled kernel does not record which
    pointers it writes, so launch copies back only tensor-map operands."""
    from cutedsl.runtime import arrays, launch
    x = rng.integers(-8, 9, (m, n)).astype(np.float32)
    out = arrays.to_device(sim, np.full(m, np.nan, np.float32))
    launch(kernel, (1, -(-m // BOX[0]), 1), src=x, out=out, m=m, backend=sim)
    assert np.array_equal(arrays.to_host(out), x.astype(np.float64).sum(axis=1)), rng


@pytest.mark.sim_kernel
def test_row_sums_with_run_kernel(kernel, rng):
    """The same through ``run_kernel`` and an encoded tensor map: the output array passed in
    holds the result; rows past M keep their value."""
    from cutedsl.sim import Emulator
    emu = Emulator()
    m, n = 45, 36                                  # rows of 144 B: TMA needs 16-B pitches
    x = rng.integers(-8, 9, (m, n)).astype(np.float32)
    tmap = emu.tensor_map(emu.to_device(x), x.shape, "f32", BOX)
    out = np.full(m + 3, -1.0, np.float32)
    run_kernel(kernel, [tmap, out, m], grid=(1, 2, 1), emu=emu)
    assert np.array_equal(out[:m], x.astype(np.float64).sum(axis=1)), rng
    assert np.all(out[m:] == -1.0)


if __name__ == "__main__":
    import sys
    rc = pytest.main([__file__, "-q", "-p", "no:cacheprovider"])
    if rc != 0:
        sys.exit(int(rc))
    print("checked: the row-sum kernel's tests pass on the emulator, eager and adversarial")
