"""All four operand layouts (issue 20): A K- or M-major, B K- or N-major, for 16-bit types, on
every schedule; the layout follows the operands (numpy order for host arrays, strides for
device arrays) without a transposing copy. Compiled kernels on the emulator, shapes that are
not tile multiples, random integer inputs (the result must equal the float64 reference)."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.runtime import arrays


def ints(rng, shape, order="C", dt=np.float16):
    return np.asarray(rng.integers(-3, 4, shape).astype(dt), order=order)


@pytest.mark.parametrize("schedule,tile,cluster", [
    ("multistage", (128, 256), (1, 1)), ("single_tile", (64, 128), (1, 1)), ("warp_specialized", (128, 128), (1, 2)),
    ("cooperative", (128, 128), (2, 1)), ("pingpong", (64, 128), (2, 1))])
def test_four_layouts_on_every_schedule(schedule, tile, cluster, rng, sim):
    tm, tn = tile
    g = Gemm(GemmConfig(schedule=schedule, tile=(tm, tn, 64), cluster=cluster, sm_count=2, dtype="bf16"), sim)
    m, n, k = tm + int(rng.integers(1, tm)), tn + int(rng.integers(1, 64)), 64 + int(rng.integers(1, 64))
    for a_order, b_order in (("F", "C"), ("F", "F"), ("C", "F"), ("C", "C")):
        a, b = ints(rng, (m, k), a_order, "bfloat16"), ints(rng, (k, n), b_order, "bfloat16")
        d = g(a, b)
        assert np.array_equal(d, a.astype(np.float64) @ b.astype(np.float64)), (a_order, b_order, rng.seed_value)
    # the variants that ran: A M-major for F-ordered a, B K-major for F-ordered b
    assert set(g._variants) == {(("a_major", "MN"),), (("a_major", "MN"), ("b_major", "K")), (("b_major", "K"),)}
    import re
    trans = re.compile(r"wgmma\.mma_async[^;]*p, 1,\s+1, (\d),\s+(\d);")     # ..., imm-trans-a, imm-trans-b
    assert set(trans.findall(g.variant(a_major="MN").compiled.ptx)) == {("1", "1")}      # A M-major, B N-major
    assert set(trans.findall(g.variant(a_major="MN", b_major="K").compiled.ptx)) == {("1", "0")}
    assert set(trans.findall(g.compiled.ptx)) == {("0", "1")}


def test_device_operands_choose_their_layout_without_copies(rng, sim):
    """A is the transpose view of a (K, M) device array, B of an (N, K) one: the call runs the
    M-major-A / K-major-B kernel straight on them (no staging copy)."""
    m, n, k = 104, 90, 136                   # 16-byte rows of the (K, M) and (N, K) storage
    at, bt = ints(rng, (k, m)), ints(rng, (n, k))
    a_dev, b_dev = arrays.to_device(sim, at), arrays.to_device(sim, bt)
    a = a_dev.view(shape=(m, k), strides=(2, 2 * m))
    b = b_dev.view(shape=(k, n), strides=(2, 2 * k))
    out = arrays.empty(sim, (m, n), "f32", pitch_align=16)
    g = Gemm(GemmConfig(schedule="pingpong", tile=(64, 64, 64)), sim)
    g(a, b, out=out)
    assert np.array_equal(arrays.to_host(out), at.T.astype(np.float64) @ bt.T.astype(np.float64))
    assert (("a_major", "MN"), ("b_major", "K")) in g._variants


def test_fp8_keeps_k_major_and_copies(rng, sim):
    """WGMMA reads 8-bit operands K-major only: an F-ordered fp8 A is copied, not switched."""
    import ml_dtypes
    a = ints(rng, (70, 128), "F", ml_dtypes.float8_e4m3fn)
    b = ints(rng, (128, 40), "C", ml_dtypes.float8_e4m3fn)
    g = Gemm(GemmConfig(dtype="e4m3"), sim)
    assert np.array_equal(g(a, b), a.astype(np.float64) @ b.astype(np.float64)) and not g._variants


def test_a_major_errors():
    from cutedsl.errors import ConfigError
    with pytest.raises(ConfigError, match="e4m3 operand A must be K-major .* got a_major='MN'"):
        GemmConfig(dtype="e4m3", a_major="MN")
    with pytest.raises(ConfigError, match="a_major must be 'K' or 'MN'"):
        GemmConfig(a_major="M")
