"""Every public entry point answers wrong names and types with a CuteDSLError subclass that keeps
the ValueError/TypeError base (issue 29 item 6)."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.device.saxpy import saxpy
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError, ConfigTypeError, CuteDSLError
from cutedsl.sim import Emulator, PTXParseError, SimBackend

CASES = [
    ("GemmConfig(foo=1)", lambda be: GemmConfig(foo=1), ConfigTypeError,
     r"^GemmConfig\(\): got an unexpected keyword argument 'foo'; it accepts dtype, out_dtype, tile, stages"),
    ("GemmConfig(*30 values)", lambda be: GemmConfig(*range(30)), ConfigTypeError, r"too many positional arguments"),
    ("Gemm(cfg, foo=1)", lambda be: Gemm(GemmConfig(), "none", foo=1), ArgumentTypeError,
     r"^Gemm\(\): got an unexpected keyword argument 'foo'; it accepts config, backend, epilogue, kernel, cache"),
    ("SimBackend(foo=1)", lambda be: SimBackend(foo=1), ArgumentTypeError, r"^SimBackend\(\): got an unexpected"),
    ("Emulator(foo=1)", lambda be: Emulator(foo=1), ArgumentTypeError, r"it accepts budget, race_check"),
    ("Emulator(budget=-5)", lambda be: Emulator(budget=-5), ArgumentError, r"budget must be a positive int"),
    ("Emulator().load(bytes)", lambda be: Emulator().load(b"\x80not ptx"), PTXParseError, r"not UTF-8"),
    ("saxpy('a', x, y)", lambda be: saxpy("a", np.ones(4, np.float32), np.ones(4, np.float32), backend=be),
     ArgumentTypeError, r"alpha must be a float, got str"),
    ("alloc('x')", lambda be: be.alloc("x"), ArgumentTypeError, r"nbytes must be an int number of bytes"),
    ("alloc(-1)", lambda be: be.alloc(-1), ArgumentError, r"nbytes must be >= 0, got -1"),
    ("Gemm()('a', 'b')", lambda be: Gemm(GemmConfig(), be)("a", "b"), ArgumentTypeError, r"^a: unsupported array type str"),
]


@pytest.mark.parametrize("what,call,err,match", CASES, ids=[c[0] for c in CASES])
def test_public_entry_points_raise_cutedsl_errors(what, call, err, match):
    with pytest.raises(err, match=match) as e:
        call(SimBackend())
    assert isinstance(e.value, CuteDSLError)
    if issubclass(err, ConfigTypeError):
        assert isinstance(e.value, (TypeError, ConfigError))


def test_pointer_parameter_given_a_str_is_an_argument_type_error():
    """It used to escape as struct.error."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent / "sim"))
    from simkit import kernel
    emu = Emulator()
    prog = emu.load(kernel(""))
    with pytest.raises(ArgumentTypeError, match=r"parameter p_out \(\.u64\) needs an int"):
        emu.launch(prog, 1, 32, ["oops"])
    with pytest.raises(ArgumentError, match=r"does not fit"):
        emu.launch(prog, 1, 32, [1 << 70])


def test_attrs_evolve_of_a_config_still_validates_names():
    import attrs
    cfg = GemmConfig()
    assert attrs.evolve(cfg, stages=2).stages == 2
    with pytest.raises(ConfigTypeError, match="unexpected keyword argument 'stagez'"):
        attrs.evolve(cfg, stagez=2)


# -- issue 40: tracebacks from deep inside, errors of the wrong type ------------------------------

@pytest.mark.parametrize("tile,match", [("x", r"tile must be a tuple \(BLOCK_M, BLOCK_N, BLOCK_K\) of ints, got 'x'"),
                                        ((0, 0, 0), r"tile must be three positive ints .*got \(0, 0, 0\)"),
                                        ((64, 64), r"tile must be three positive ints .*got \(64, 64\)")])
def test_auto_gemm_with_a_bad_tile_is_a_config_error(tile, match):
    """It was an IndexError / ZeroDivisionError inside the model."""
    with pytest.raises(ConfigError, match=match):
        Gemm("auto", tile=tile)
    with pytest.raises(ConfigError, match=match):
        GemmConfig.for_problem(256, 256, 64, tile=tile)


@pytest.mark.parametrize("value", [1e40, -1e39, float("inf"), float("nan"), np.float64("inf")])
def test_scalar_parameter_out_of_f32_range_is_refused_before_compiling(value):
    """alpha=1e40 was an OverflowError packing the parameter, after compiling; inf/nan ran."""
    g = Gemm(GemmConfig(tile=(64, 64, 64), fusion=["alpha"]), "sim")

    def no_compile(**kw):
        raise AssertionError("compiled before the scalar was checked")
    g.kernel.compile = no_compile
    a = np.ones((70, 64), np.float16)
    with pytest.raises(ArgumentError, match=r"^alpha must be finite and fit an f32 kernel parameter "
                                            r"\(\|alpha\| <= 3.4028235e\+38\), got "):
        g(a, np.ones((64, 70), np.float16), alpha=value)


def test_integer_scalar_parameters_are_range_checked():
    from cutedsl.compiler.artifact import ParamSpec
    from cutedsl.runtime.params import scalar
    assert scalar(ParamSpec("x", "i32"), 2 ** 31 - 1) == 2 ** 31 - 1
    with pytest.raises(ArgumentError, match=r"x must fit a i32 kernel parameter \(-2147483648..2147483647\), got 2147483648"):
        scalar(ParamSpec("x", "i32"), 2 ** 31)
    with pytest.raises(ArgumentError, match=r"u must fit a u32 kernel parameter \(0..4294967295\), got -1"):
        scalar(ParamSpec("u", "u32"), -1)
    assert scalar(ParamSpec("f", "f32"), 3.4028234663852886e38) == 3.4028234663852886e38


def test_auto_gemm_with_float64_operands_names_the_operands():
    """It said "the WGMMA atom takes ..." (a ConfigError about the config)."""
    with pytest.raises(ArgumentTypeError, match=r"^a has dtype f64: Gemm\('auto'\) takes operands of 'f16', 'bf16'"):
        Gemm("auto", "sim")(np.ones((64, 64)), np.ones((64, 64)))
    with pytest.raises(ArgumentTypeError, match=r"^b has dtype f32: Gemm\('auto'\) takes operands of"):
        Gemm("auto", "sim")(np.ones((64, 64), np.float16), np.ones((64, 64), np.float32))


@pytest.mark.parametrize("kw,named", [({"limit": 0}, "limit"), ({"limit": True}, "limit"), ({"iters": 0}, "iters"),
                                      ({"warmup": -1}, "warmup")])
def test_tune_names_the_argument(kw, named):
    from cutedsl import tune
    with pytest.raises(ArgumentError, match=rf"^tune: {named} must be"):
        tune(64, 64, 64, "f16", backend="sim", **kw)


def test_zero_stride_view_too_big_to_copy_is_refused_before_copying():
    """A 2^20 x 2^20 broadcast view is 2 bytes in memory; its copy (2 TiB) was a numpy
    MemoryError."""
    from cutedsl.runtime.params import host_memory_bytes
    a = np.broadcast_to(np.float16(1), (2 ** 20, 2 ** 20))
    if host_memory_bytes() is None or host_memory_bytes() >= a.nbytes:
        pytest.skip("this machine could copy 2 TiB")
    with pytest.raises(ArgumentError, match=r"^a: its copy would take 2048.0 GiB \(\(1048576, 1048576\) x 2 B\) "
                                            r"\(a broadcast / zero-stride view: each element is copied\)"):
        Gemm(GemmConfig(tile=(64, 64, 64)), "sim")(a, np.ones((2 ** 20, 64), np.float16))
