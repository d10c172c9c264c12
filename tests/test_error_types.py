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
