"""Fused epilogue nodes (issue 20): D = act(alpha * acc * scales + beta * C + bias), an aux
output, fp8 outputs -- the compiled kernels on the emulator against the nodes' float64 model,
on every schedule and both stores, shapes that are not tile multiples, fresh random inputs."""
import attrs
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import fusion as F
from cutedsl.dtypes import dtype as _dtype
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError


def run_fused(cfg, m, n, k, rng, backend, integer=False):
    if integer:
        a = rng.integers(-3, 4, (m, k)).astype(_dtype(cfg.dtype).numpy)
        b = rng.integers(-3, 4, (k, n)).astype(_dtype(cfg.dtype).numpy)
    else:
        a = rng.standard_normal((m, k), dtype=np.float32).astype(_dtype(cfg.dtype).numpy)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(_dtype(cfg.dtype).numpy)
    g = Gemm(cfg, backend)
    args = F.random_args(g.kernel.epilogue.kernel_params(), m, n, rng)
    d = g(a, b, **args)
    model = dict(args)
    ref = F.reference(cfg.fusion, a.astype(np.float64) @ b.astype(np.float64), model, cfg.out_dtype)
    return d, ref, args, model


def rel(got, ref):
    return float(np.max(np.abs(np.asarray(got).astype(np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("schedule,nodes,out", [
    ("multistage", ["alpha", "beta", "bias:col", "gelu"], "f32"),
    ("single_tile", ["scale_a:row", "scale_b:col", "bias:row", "aux", "gelu_tanh", "global"], "f32"),
    ("warp_specialized", ["scale_a", "scale_b", "silu"], "bf16"),
    ("cooperative", ["beta:f32", "bias:col:bf16", "aux", "relu"], "f16"),
    ("pingpong", ["alpha", "clamp:-4:8", "global"], "f32"),
])
def test_nodes_on_every_schedule(schedule, nodes, out, rng, sim):
    tile = (128, 128, 64) if schedule != "single_tile" else (64, 128, 64)
    cfg = GemmConfig(schedule=schedule, out_dtype=out, epilogue=nodes, tile=tile, sm_count=2)
    assert cfg.epilogue == ("global" if "global" in nodes else "tma")
    m, n, k = 130 + int(rng.integers(0, 100)), 140 + int(rng.integers(0, 100)), 100 + int(rng.integers(0, 60))
    d, ref, args, model = run_fused(cfg, m, n, k, rng, sim)
    tol = {"f32": 2e-6, "bf16": 8e-3, "f16": 1e-3}[out]
    assert rel(d, ref) < tol, (rel(d, ref), cfg, rng.seed_value)
    if "aux" in nodes:                        # the numpy array given for the output was filled
        assert rel(args["aux"], model["_aux"]) < tol


@pytest.mark.parametrize("out", ["e4m3", "e5m2"])
@pytest.mark.parametrize("schedule,epilogue", [("multistage", "tma"), ("cooperative", "global"),
                                               ("pingpong", "tma")])
def test_fp8_outputs_round_and_saturate(out, schedule, epilogue, rng, sim):
    """Integer inputs: every accumulator is exact, and alpha = 512 (a power of two) keeps it
    exact, so each stored byte must be exactly the f32 value rounded to nearest even and
    saturated (the values reach past e4m3's 448 and e5m2's 57344)."""
    cfg = GemmConfig(schedule=schedule, out_dtype=out, epilogue=["alpha", epilogue], tile=(128, 128, 64),
                     sm_count=2)
    m, n, k = 150 + int(rng.integers(0, 50)), 260 + int(rng.integers(0, 50)), 130
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    d = Gemm(cfg, sim)(a, b, alpha=512.0)
    ref = 512.0 * (a.astype(np.float64) @ b.astype(np.float64))
    npd = _dtype(out).numpy
    top = float(ml_dtypes.finfo(npd).max)
    want = np.clip(ref, -top, top).astype(np.float32).astype(npd)
    assert d.dtype == npd and np.abs(ref).max() > top and (np.abs(ref) < top).any()
    assert np.array_equal(d.view(np.uint8), want.view(np.uint8)), rng.seed_value


def test_specs_round_trip_and_config_fields():
    nodes = F.parse_nodes("alpha, scale_a:row, scale_b:col, beta:bf16, bias:row:f16, aux, clamp:-1.5:2, gelu")
    assert [F.parse_node(nd.spec()) for nd in nodes] == list(nodes)
    assert F.parse_node("gelu_erf") == F.Activation("gelu")
    cfg = GemmConfig(epilogue=["bias:col", "gelu_tanh", "global"])
    assert cfg.epilogue == "global" and cfg.fusion == (F.Bias("col"), F.Activation("gelu_tanh"))
    assert cfg.fields()["fusion"] == ["bias:col", "gelu_tanh"] and GemmConfig(**cfg.fields()) == cfg
    k = cfg.kernel()
    assert [p.name for p in k.params()] == ["a", "b", "d", "bias", "m", "n", "k"]
    assert k.cache_key()[0] != GemmConfig(epilogue=["bias:col", "gelu", "global"]).kernel().cache_key()[0]


@pytest.mark.parametrize("kw,err,match", [
    (dict(epilogue=["relu"], fusion=["gelu"]), ConfigError, "either in epilogue=.* or in fusion"),
    (dict(fusion=["clamp:2:1"]), ConfigError, "clamp needs lo <= hi"),
    (dict(fusion=["bias"]), ConfigError, "unknown epilogue node 'bias'"),
    (dict(fusion=[3]), ConfigError, "EpilogueNode or a string"),
    (dict(fusion=["scale_a", "scale_a:row"]), ConfigError, "both read the argument 'scale_a'"),
])
def test_config_errors(kw, err, match):
    with pytest.raises(err, match=match):
        GemmConfig(**kw)


def test_accumulating_epilogue_refuses_nodes():
    from cutedsl.collective import AtomicAddEpilogue
    with pytest.raises(ValueError, match="adds partial sums into D: fused epilogue nodes"):
        AtomicAddEpilogue(128, 128).fuse([F.Activation("relu")])


def test_call_arguments_checked_before_launch(sim):
    g = Gemm(GemmConfig(epilogue=["alpha", "bias:col", "aux"]), sim)
    a, b = np.ones((20, 16), np.float16), np.ones((16, 24), np.float16)
    good = dict(alpha=1.0, bias=np.zeros(24, np.float32), aux=np.zeros((20, 24), np.float32))
    with pytest.raises(ArgumentError, match=r"bias must have shape \(n,\) = \(24,\) for this problem, got \(20,\)"):
        g(a, b, **{**good, "bias": np.zeros(20, np.float32)})
    with pytest.raises(ArgumentTypeError, match="alpha must be a real number .*got '2'"):
        g(a, b, **{**good, "alpha": "2"})
    with pytest.raises(ArgumentError, match="aux is an output: pass a writable C-contiguous numpy array"):
        g(a, b, **{**good, "aux": np.zeros((24, 20), np.float32).T})
    with pytest.raises(ArgumentError, match="missing epilogue argument 'aux'"):
        g(a, b, alpha=1.0, bias=good["bias"])
    d = g(a, b, **good)
    assert np.array_equal(d, np.full((20, 24), 16.0)) and np.array_equal(good["aux"], d)


@attrs.frozen
class Square(F.EpilogueNode):
    """A user node: v * v (no parameters)."""

    def apply(self, value, row, col, ctx):
        return value * value

    def reference(self, value, args, out_dtype):
        return value * value


def test_user_node(rng, sim):
    cfg = GemmConfig(fusion=(F.ScaleBy("alpha"), Square()), schedule="pingpong", tile=(64, 64, 64))
    assert cfg.fields()["fusion"] == ["alpha", Square()]
    d, ref, _, _ = run_fused(cfg, 70, 90, 40, rng, sim)
    assert rel(d, ref) < 1e-6


def test_fusion_adds_nothing_to_the_main_loop():
    """bias + gelu live in the epilogue: the consumer main loop's SASS is the plain one's."""
    from cutedsl.compiler import toolchain
    from cutedsl.compiler.sass_loops import hot_loop
    plain = GemmConfig(schedule="cooperative", tile=(128, 256, 64)).kernel().compile()
    fused = GemmConfig(schedule="cooperative", tile=(128, 256, 64), epilogue=["bias:col", "gelu"]).kernel().compile()
    f, p = hot_loop(toolchain.sass(fused.cubin)), hot_loop(toolchain.sass(plain.cubin))
    assert f["instructions"] == p["instructions"]   # nodes run per sub-tile at the store (lazy_map); ptxas may
    # still pick IMAD.MOV for a MOV
    assert {k: f["histogram"].get(k) for k in ("HGMMA", "SYNCS", "BAR", "WARPGROUP")} == \
        {k: p["histogram"].get(k) for k in ("HGMMA", "SYNCS", "BAR", "WARPGROUP")}
    assert fused.resources.spill_stores == 0


def test_cli_fused_epilogue_check(capsys):
    import json
    from cutedsl.cli import main
    rc = main(["gemm", "--m", "90", "--n", "70", "--k", "64", "--schedule", "multistage", "--backend", "sim",
               "--scale", "rowcol", "--beta", "0.5", "--bias", "col", "--aux", "--act", "gelu", "--check", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and rep["passed"] and rep["fusion"] == ["scale_a:row", "scale_b:col", "beta", "bias:col", "aux",
                                                           "gelu"]


@pytest.mark.parametrize("schedule,tile,out,c_dtype", [
    ("pingpong", (64, 64), "f16", "f32"),          # one sub-tile per call (odd): the extra phase
    ("cooperative", (128, 128), "f32", "bf16"),    # two warpgroups, each its own C buffer
    ("multistage", (64, 128), "e4m3", "f16"),
])
def test_c_is_loaded_by_tma_in_the_tma_epilogue(schedule, tile, out, c_dtype, rng):
    """With the TMA store, C is a tensor map read per sub-tile into shared memory (one SM:
    a persistent CTA walks every tile, so the mbarrier phases carry across calls); random
    interleavings and late async completion (the emulator's adversarial mode) included."""
    from cutedsl.sim import SimBackend
    cfg = GemmConfig(schedule=schedule, tile=tile + (64,), out_dtype=out, epilogue=[f"beta:{c_dtype}"], sm_count=1)
    g = Gemm(cfg, SimBackend(chaos=int(rng.integers(1, 2 ** 31))))
    kern = g.kernel
    assert [(p.name, p.kind) for p in kern.params() if p.name == "c"] == [("c", "tensormap")]
    assert [t.param for t in kern.epilogue.tensor_maps()] == ["d", "c"]
    m, n, k = 2 * tile[0] + 17, 2 * tile[1] + 9, 70
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    c = rng.integers(-8, 9, (m, n)).astype(_dtype(c_dtype).numpy)
    d = g(a, b, beta=0.5, c=c)
    ref = a.astype(np.float64) @ b.astype(np.float64) + 0.5 * c.astype(np.float64)
    if out in ("e4m3", "e5m2"):
        top = float(ml_dtypes.finfo(_dtype(out).numpy).max)
        want = np.clip(ref, -top, top).astype(np.float32).astype(_dtype(out).numpy)
        assert np.array_equal(d.view(np.uint8), want.view(np.uint8))
    else:
        assert np.array_equal(d.astype(np.float64), ref.astype(_dtype(out).numpy).astype(np.float64))
    with pytest.raises(ConfigError, match="beta's C must be f32, f16 or bf16"):
        GemmConfig(epilogue=["beta:e4m3"])
