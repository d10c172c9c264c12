"""f32 -> f16 round to nearest even by integer operations (cutedsl/sim/engines/numerics.py,
f32_to_f16_bits: what cvt.rn.f16.f32 and cvt.rn.f16x2.f32 compute, PTX ISA 9.7.9.21) against
numpy's float16 cast: every exponent, random and boundary mantissas, ties, signed zeros,
infinities, the largest finite f16 and the subnormal range."""
import numpy as np

from cutedsl.sim.engines.numerics import f32_to_f16_bits, f64_to


def f32_patterns():
    rng = np.random.default_rng(7)
    exp = np.arange(0, 255, dtype=np.uint32)                   # every exponent but NaN/inf's
    mant = rng.integers(0, 1 << 23, (255, 4000), dtype=np.uint32)
    # boundaries of the 13 dropped bits: just below, at and above the tie, with even and odd kept bits
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFFFF, 0x7FF000, 0x7FE000],
                   np.uint32)
    mant = np.concatenate([mant, np.broadcast_to(low, (255, len(low)))], axis=1)
    bits = (exp[:, None] << 23) | mant
    bits = np.concatenate([bits.reshape(-1), np.array([0x7F800000], np.uint32)])       # +inf
    return np.concatenate([bits, bits | np.uint32(0x80000000)])                          # both signs


def test_matches_numpy_cast_on_every_exponent():
    x = f32_patterns().view(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    got = f32_to_f16_bits(x)
    assert got.dtype == np.uint32 and got.max() <= 0xFFFF
    assert np.array_equal(got.astype(np.uint16), want)


def test_edge_values():
    x = np.array([65504.0, 65519.996, 65520.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -24,
                  2.0 ** -25 + 2.0 ** -40, -0.0, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11], np.float32)
    assert [hex(v) for v in f32_to_f16_bits(x)] == [
        "0x7bff", "0x7bff", "0x7c00", "0x400", "0x1", "0x0", "0x2", "0x1", "0x8000", "0x3c00", "0x3c02"]


def test_f64_to_uses_it_and_keeps_nans():
    x = np.array([1.0, np.nan, 3e-6], np.float32)
    assert f32_to_f16_bits(x) is None                   # a NaN: the caller's general path
    r = f64_to(x, np.float16)
    assert r.dtype == np.float16 and np.isnan(r[1]) and r[0] == 1.0 and r[2] == np.float16(3e-6)
