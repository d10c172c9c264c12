"""fma.rn.f32 (cutedsl/sim/engines/numerics.py fma_f32, PTX ISA 9.7.3.6: a*b + c rounded once)
on random and hard operands -- exact ties after the f64 sum, f32 subnormal results, cancellations,
zeros of both signs -- against exact rational arithmetic and against the previous formulation
of the same algorithm (which checked its two conditions with separate ``.any()`` calls)."""
from fractions import Fraction

import numpy as np

from cutedsl.sim.engines import numerics as nm


def _previous_fma_rn(a, b, c):
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    cc = np.asarray(c, np.float64)
    s = p + cc
    bits = s.view(np.int64)
    mag1 = (bits & np.int64(0x7FFFFFFFFFFFFFFF)).view(np.uint64) - np.uint64(1)
    if not ((bits & 0x1FFFFFFF) == 0x10000000).any() and not (mag1 < nm._F32_NORMAL_M1).any():
        return s.astype(np.float32)
    s, e = nm.two_sum(p, cc)
    return nm.round_odd_f64(s, e).astype(np.float32)


def _operands(rng, n):
    """(a, b, c) float32 arrays of ``n``: wide exponents, ties, subnormal results, cancellations."""
    def wide(k):
        bits = rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32)
        e = rng.integers(66, 189, k, dtype=np.uint32)           # products and sums stay finite f32
        return ((bits & np.uint32(0x807FFFFF)) | (e << 23)).view(np.float32)
    a, b, c = wide(n), wide(n), wide(n)
    q = n // 4
    # cancellation: c = -RN(a*b) leaves the product's rounding error, often an f32 subnormal
    c[:q] = -(a[:q].astype(np.float64) * b[:q]).astype(np.float32)
    # ties: short mantissas give an exact product p; c = 1 and p = (2k + 1) 2^-24 is a midpoint
    k = rng.integers(0, 1 << 10, q)
    a[q:2 * q] = ((2 * k + 1) * 2.0 ** -24).astype(np.float32)
    b[q:2 * q] = rng.choice(np.array([1.0, -1.0, 0.5, 2.0], np.float32), q)
    c[q:2 * q] = rng.choice(np.array([1.0, -1.0, 2.0, 4.0], np.float32), q)
    # tiny results: products near 2^-126 and below
    a[2 * q:3 * q] = (rng.standard_normal(q) * 2.0 ** -70).astype(np.float32)
    b[2 * q:3 * q] = (rng.standard_normal(q) * 2.0 ** -60).astype(np.float32)
    c[2 * q:3 * q] = (rng.standard_normal(q) * 2.0 ** -128).astype(np.float32)
    c[3 * q:3 * q + 8] = np.float32(0.0)
    c[3 * q + 8:3 * q + 16] = np.float32(-0.0)
    a[3 * q + 16:3 * q + 24] = np.float32(0.0)
    return a, b, c


def _exact_rn32(x, y, z):
    v = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    lo = np.float32(float(v))
    cands = [lo, np.nextafter(lo, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf))]
    return min(cands, key=lambda t: (abs(Fraction(float(t)) - v), int(np.array(t).view(np.uint32)) & 1))


def test_matches_previous_formulation():
    rng = np.random.default_rng(5)
    for _ in range(4):
        a, b, c = _operands(rng, 1 << 16)
        with np.errstate(all="ignore"):
            got, want = nm.fma_f32(a, b, c), _previous_fma_rn(a, b, c)
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        # the same in the 2-D rows of a fused group, and per 32-lane row (rows of one kind, so
        # that some take the fast path and others the exact one)
        with np.errstate(all="ignore"):
            g2 = nm.fma_f32(a.reshape(-1, 128), b.reshape(-1, 128), c.reshape(-1, 128))
        assert np.array_equal(g2.reshape(-1).view(np.uint32), want.view(np.uint32))
        for i in range(0, len(a), 32):
            r = slice(i, i + 32)
            with np.errstate(all="ignore"):
                row = nm.fma_f32(a[r], b[r], c[r])
            assert np.array_equal(row.view(np.uint32), want[r].view(np.uint32)), i


def test_matches_exact_rounding():
    rng = np.random.default_rng(6)
    a, b, c = _operands(rng, 2048)
    with np.errstate(all="ignore"):
        got = nm.fma_f32(a, b, c)
    want = [_exact_rn32(x, y, z) for x, y, z in zip(a, b, c)]
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.float32(g).view(np.uint32) == np.float32(w).view(np.uint32) or (g == 0 and w == 0), i
    # signed zeros: RN of an exact zero sum is +0 unless both addends are -0
    z = nm.fma_f32(np.float32([0.0, -0.0, 1.0, -1.0]), np.float32([1.0, 1.0, 0.0, 0.0]),
                   np.float32([-0.0, -0.0, -0.0, -0.0]))
    assert np.signbit(z).tolist() == [False, True, False, True]
