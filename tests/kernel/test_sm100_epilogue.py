"""The epilogue side of the sm_100a kernels: the TMA-store epilogue (registers -> swizzled
shared sub-tiles -> TMA store, each epilogue warp on its own rows) and the tcgen05 fences every
kernel places around its thread synchronisations (checked by the emulator's strict rule)."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.errors import ConfigError
from test_sm100 import run


@pytest.mark.sim_kernel
@pytest.mark.parametrize("kw", [dict(), dict(tile=(128, 256, 64), cluster=(2, 1), mma_sm=2),
                                dict(schedule="single_tile", tile=(128, 128, 64))])
def test_kernels_order_tensor_memory_by_the_tcgen05_fences(kw, rng, sim_seed):
    """Every sm_100a kernel here fences its thread synchronisations (tcgen05.fence::after_thread_sync
    after each barrier wait before its next tcgen05 operation): clean and exact under the
    emulator's strict fence rule (docs/emulator.md), which CuTe DSL's GEMMs do not pass."""
    from cutedsl.sim import SimBackend
    a = rng.integers(-3, 4, (300, 200)).astype(np.float16)
    b = rng.integers(-3, 4, (200, 264)).astype(np.float16)
    out = Gemm(GemmConfig(arch="sm_100a", **kw), SimBackend(strict_tcgen05_fences=True))(a, b)
    assert np.array_equal(np.asarray(out, np.float64), a.astype(np.float64) @ b.astype(np.float64)), rng.seed_value


# -- the TMA-store epilogue (registers -> swizzled shared sub-tiles -> TMA store, per warp) ----

@pytest.mark.parametrize("stages", [2, 6])
def test_tma_store_epilogue_lanes_wait_for_the_storing_lane(stages, rng, sim):
    """One SM, two tiles of one k-tile each: each warp's lane 0 issues the TMA store of a
    sub-tile while lanes 1.. wait at bar.warp.sync before writing the buffer again. (Before the
    emulator modelled bar.warp.sync, lanes 1.. ran ahead: a race report or wrong numbers.)"""
    cfg = GemmConfig(arch="sm_100a", epilogue="tma", out_dtype="f32", tile=(128, 128, 64), stages=stages, sm_count=1)
    run(cfg, 256, 128, 64, rng, sim)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("out,tile_n,kw", [
    ("f32", 128, dict()),
    ("bf16", 256, dict()),
    ("f16", 64, dict(cluster=(2, 1))),
    ("f32", 256, dict(cluster=(2, 1), mma_sm=2)),
    ("bf16", 128, dict(schedule="single_tile", stages=1)),
])
def test_tma_store_epilogue_exact(out, tile_n, kw, rng, sim):
    """epilogue='tma' on every sm_100a kernel: the persistent ones on 2 SMs for several tiles
    per CTA (the sub-tile buffers' ring runs on across tiles), the talk's single-tile one; partial
    tiles clipped by the tensor map."""
    kw = {"stages": 2, "sm_count": 2, **kw}
    cfg = GemmConfig(arch="sm_100a", epilogue="tma", out_dtype=out, tile=(128, tile_n, 64), **kw)
    cm = kw.get("cluster", (1, 1))[0]
    m = 2 * 128 * cm + int(rng.integers(1, 128))
    n = 2 * tile_n + int(rng.integers(1, tile_n // 8)) * 8
    run(cfg, m, n, 3 * 64 + int(rng.integers(1, 64)), rng, sim)


@pytest.mark.sim_kernel
def test_tma_store_epilogue_batched_and_fused(rng, sim):
    """A batch of 3 (rank-3 tensor map, one batch per box) with row scaling, bias and relu."""
    cfg = GemmConfig(arch="sm_100a", epilogue=["scale_a:row", "bias:col", "relu", "tma"], batched=True, sm_count=3,
                     stages=2)
    m, n, k = 150, 136, 70
    a = rng.integers(-4, 5, (3, m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (k, n)).astype(np.float16)
    sa = rng.integers(-2, 3, m).astype(np.float32)
    bias = rng.integers(-9, 10, n).astype(np.float32)
    d = Gemm(cfg, sim)(a, b, scale_a=sa, bias=bias)
    ref = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)) * sa[:, None] + bias, 0)
    assert np.array_equal(d.astype(np.float64), ref)


@pytest.mark.parametrize("out,stores", [("f32", 8), ("bf16", 4)])
def test_tma_store_epilogue_sass(out, stores):
    """128 x 256: per tile each epilogue warp issues one UTMASTG per 128-byte column sub-tile
    (256 f32 / 32, 256 bf16 / 64) after 16-byte st.shared (STS.128) of its rows; no STG, no spills."""
    import collections
    import re
    from cutedsl.compiler.toolchain import sass
    k = GemmConfig(arch="sm_100a", epilogue="tma", out_dtype=out, tile=(128, 256, 64), stages=4,
                   b_major="K").kernel().compile()
    ops = collections.Counter(re.findall(r"\b(UTMASTG|STS\.128|STG)\b", sass(k.cubin)))
    assert ops["UTMASTG"] == stores and ops["STS.128"] == 256 * (4 if out == "f32" else 2) // 16, ops
    assert ops["STG"] == 0 and k.resources.spill_stores == 0


def test_tma_store_epilogue_refusals():
    with pytest.raises(ConfigError, match=r"the sm_100a TMA-store epilogue writes f32, f16 or bf16, not e4m3"):
        GemmConfig(arch="sm_100a", epilogue="tma", dtype="e4m3", out_dtype="e4m3")
    with pytest.raises(ConfigError, match=r"beta \* C is not built for the sm_100a TMA-store epilogue"):
        GemmConfig(arch="sm_100a", epilogue=["beta", "tma"])


# -- the README's epilogue-subclassing recipe on sm_100a ------------------------------------

def _bias_relu_class():
    from cutedsl.collective import TmaStoreEpilogue
    from cutedsl.ir import GlobalPtr, Param, select

    class BiasReluEpilogue(TmaStoreEpilogue):
        def extra_params(self):
            return [Param("bias", "ptr", shape=("n",), dtype="f32")]

        def visit(self, value, row, col, ctx):
            col = select(col < ctx.n.unsigned(), col, 0)
            v = value + GlobalPtr(ctx.args.bias, "f32").load(col)
            return select(v > 0.0, v, 0.0)
    return BiasReluEpilogue


@pytest.mark.sim_kernel
@pytest.mark.parametrize("kw", [dict(), dict(out_dtype="bf16", tile=(128, 128, 64), sm_count=1),
                                dict(schedule="single_tile", stages=1)])
def test_readme_epilogue_subclass_runs_on_sm100(kw, rng, sim, sim_seed):
    """A TmaStoreEpilogue subclass written for sm_90a (visit + extra_params) is rebased onto the
    tcgen05 TMA-store epilogue: exact on ragged shapes (it was an IndexError in the fragment)."""
    cls = _bias_relu_class()
    m, n, k = 130 + int(rng.integers(0, 120)), 72 + 8 * int(rng.integers(0, 20)), 64 + int(rng.integers(1, 130))
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    bias = rng.integers(-40, 40, n).astype(np.float32)
    d = Gemm(GemmConfig(arch="sm_100a", epilogue="tma", **kw), sim, epilogue=cls)(a, b, bias=bias)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0.0)
    if kw.get("out_dtype") == "bf16":
        # the exact sums are integers; bf16 keeps 8 significant bits, so from 256 up the store
        # rounds them (to nearest even): compare with that rounding, not the exact value
        ref = ref.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(np.asarray(d, np.float64), ref), rng.seed_value


def test_epilogue_subclass_overriding_the_sm90_store_is_refused_on_sm100():
    from cutedsl.collective import TmaStoreEpilogue

    class MyStore(TmaStoreEpilogue):
        def store(self, acc, ctx):
            return super().store(acc, ctx)

        def _write_f32(self, *a):
            pass
    with pytest.raises(ConfigError, match=r"MyStore overrides _write_f32, store of the sm_90 TmaStoreEpilogue.*"
                                          r"subclass cutedsl.collective.TmemTmaStoreEpilogue"):
        Gemm(GemmConfig(arch="sm_100a", epilogue="tma"), "none", epilogue=MyStore).compiled
