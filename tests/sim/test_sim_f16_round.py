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


def _previous_bits(x):
    """The integer-only rounding that f32_to_f16_bits replaced (13 dropped mantissa bits rounded
    half to even, the exponent rebiased; below 2^-14 the f32 sum with 0.5 gives the subnormal
    count; from 2^16 up infinity): an independent reference for the randomized comparison."""
    u = x.view(np.uint32)
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    r = ((a + (0x0FFF + ((a >> 13) & 1))) >> 13) - (112 << 10)
    sub = a < (113 << 23)
    f = (a.view(np.float32) + np.float32(0.5)).view(np.uint32) - np.uint32(0x3F000000)
    r = np.where(sub, f, r)
    r = np.where(a >= (143 << 23), np.uint32(0x7C00), r)
    return r | sign


def test_matches_previous_rounding_on_random_patterns():
    rng = np.random.default_rng(11)
    for i in range(8):
        bits = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
        if i % 2:               # exponents around f16's range: zero, subnormal, normal, overflow
            bits = (bits & np.uint32(0x807FFFFF)) | (rng.integers(98, 146, bits.size, dtype=np.uint32) << 23)
        bits = bits[(bits & 0x7FFFFFFF) <= 0x7F800000]            # no NaN
        x = bits.view(np.float32)
        got = f32_to_f16_bits(x)
        assert got.dtype == np.uint32 and np.array_equal(got, _previous_bits(x))
        # 2-D (instructions x lanes, as a fused cvt group passes them) and non-contiguous rows
        y = x[: 1 << 17].reshape(-1, 64)
        assert np.array_equal(f32_to_f16_bits(y), _previous_bits(y.copy()))
        assert np.array_equal(f32_to_f16_bits(y[:, ::2]), _previous_bits(y[:, ::2].copy()))


def test_every_nan_is_detected():
    for payload in (1, 2, 0x1FFF, 0x2000, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF):
        for sign in (0, 0x80000000):
            x = np.array([1.0, 0.0, 2.0 ** -20, 70000.0], np.float32)
            x = np.concatenate([x, np.array([0x7F800000 | payload | sign], np.uint32).view(np.float32)])
            with np.errstate(invalid="ignore"):     # a signaling NaN in an f32 addition (launches
                assert f32_to_f16_bits(x) is None, hex(payload | sign)     # run under errstate ignore)
    assert f32_to_f16_bits(np.array([np.inf, -np.inf], np.float32)).tolist() == [0x7C00, 0xFC00]
