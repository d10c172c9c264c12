"""A wgmma chain's stacked products (cutedsl/sim/engines/wgmma_acc.products) against each MMA's own
``A @ B`` (the form the per-instruction path computes, B a transposed view of its (N, K) gather),
bit for bit, on random f16 / bf16 bit patterns of every finite exponent: the chain gathers B in
(K, N) order, gathers a B that consecutive MMAs share once and broadcasts it, and stacks A tiles
from registers -- none of which may change a bit of a product."""
import ml_dtypes
from types import SimpleNamespace

import numpy as np
import pytest

from cutedsl.sim.engines.wgmma_acc import MmaOp, _b_repeat, products
from cutedsl.sim.engines.wgmma_layout import load_operand, widen

N, K = 128, 16


class _Cta:
    """What products() reads of a CTA: shared memory as 2-byte elements, its launch's plan table."""

    def __init__(self, words):
        self.sv = {2: words}
        self.launch = SimpleNamespace(plans={})


def _finite_bits(rng, n, dt):
    """Random finite bit patterns of the 16-bit float type ``dt`` (both signs, every exponent)."""
    exp_max = 0x7C00 if dt == np.float16 else 0x7F80
    b = rng.integers(0, exp_max, n).astype(np.uint16)
    return b | (rng.integers(0, 2, n).astype(np.uint16) << 15)


def _op(a_ei, b_ei, dt, A=None, form=None):
    return MmaOp((0,), None, 0, 0, N, True, 1.0, A, a_ei, 2, dt, b_ei, 2, dt, form)


def _own(cta, op):
    """The per-instruction product: A (64, K) @ B.T with B gathered (N, K)."""
    A = op.A if op.A is not None else load_operand(cta, op.a_ei, 2, op.dta)
    return A @ load_operand(cta, op.b_ei, 2, op.dtb).T


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("shared", [1, 2, 4])
def test_stacked_products_equal_each_mma(dt, shared):
    rng = np.random.default_rng(7 + shared)
    n = 8
    cta = _Cta(_finite_bits(rng, n * (64 + N) * K, dt))
    perm = rng.permutation(len(cta.sv[2]))
    a_eis = [perm[i * 64 * K:(i + 1) * 64 * K].reshape(64, K) for i in range(n)]
    off = n * 64 * K
    b_eis = [perm[off + i * N * K:off + (i + 1) * N * K].reshape(N, K) for i in range(n // shared)]
    ops = [_op(a_eis[i], b_eis[i // shared], dt) for i in range(n)]
    assert _b_repeat(ops) == shared
    got = products(cta, ops)
    assert got.shape == (n, 64, N)
    for i, op in enumerate(ops):
        assert np.array_equal(got[i].view(np.uint64), _own(cta, op).view(np.uint64)), i


def test_register_a_products_equal_each_mma():
    rng = np.random.default_rng(3)
    n = 4
    cta = _Cta(_finite_bits(rng, n * N * K, np.float16))
    b_eis = [np.arange(i * N * K, (i + 1) * N * K).reshape(N, K)[::-1] for i in range(n)]
    ops = [_op(None, b, np.float16, _finite_bits(rng, 64 * K, np.float16).view(np.float16)
               .astype(np.float64).reshape(64, K)) for b in b_eis]
    got = products(cta, ops)
    for i, op in enumerate(ops):
        assert np.array_equal(got[i].view(np.uint64), _own(cta, op).view(np.uint64)), i


@pytest.mark.parametrize("dt,zero_exp,size", [
    (np.float16, True, None), (np.float16, False, None), (np.float16, True, 1024), (ml_dtypes.bfloat16, True, None),
    (ml_dtypes.float8_e4m3fn, True, None), (ml_dtypes.float8_e5m2, True, None)])
def test_widen_is_the_types_own_cast_on_every_bit_pattern(dt, zero_exp, size):
    # widen against numpy's / ml_dtypes' cast, bit for bit, infinities and NaN payloads included,
    # the operand's shape kept: every pattern (f16 then by the table: zeros and subnormals among
    # them), only the f16 patterns of a nonzero exponent (then by its cast), or every pattern in
    # operands of 1,024 values (a register-A tile: by the cast)
    bits = np.dtype(dt).itemsize * 8
    v = np.arange(1 << bits, dtype=np.dtype(f"u{bits // 8}"))[::-1]
    if not zero_exp:
        v = v[v & 0x7C00 != 0]
    v = v[:len(v) // 8 * 8].reshape(-1, 8)
    if size is not None:
        v = v.reshape(-1, size // 8, 8)
        with np.errstate(invalid="ignore"):
            for part in v:
                assert np.array_equal(widen(part, dt).view(np.uint64), part.view(dt).astype(np.float64).view(np.uint64))
        return
    with np.errstate(invalid="ignore"):         # ml_dtypes' NaNs warn as they are cast (a launch ignores it)
        got = widen(v, dt)
        want = v.view(dt).astype(np.float64)
    assert got.dtype == np.float64 and got.shape == v.shape
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


def test_a_cached_plan_serves_the_next_chain_of_the_same_forms():
    """The plan is cached by the MMAs' forms (the issuing instruction and its descriptors): a
    second chain of the same forms on other shared-memory values, and one of register-A MMAs
    (new A tiles each time), give their own per-MMA products."""
    rng = np.random.default_rng(12)
    n = 4
    a_eis = [np.arange(i * 64 * K, (i + 1) * 64 * K).reshape(64, K) for i in range(n)]
    b_eis = [np.arange((n * 64 + i * N) * K, (n * 64 + (i + 1) * N) * K).reshape(N, K) for i in range(n // 2)]
    forms, forms_r = [object() for _ in range(n)], [object() for _ in range(n)]
    size = n * 64 * K + n * N * K
    for _ in range(2):
        cta = _Cta(_finite_bits(rng, size, np.float16))
        ops = [_op(a_eis[i], b_eis[i // 2], np.float16, form=forms[i]) for i in range(n)]
        got = products(cta, ops)
        for i, op in enumerate(ops):
            assert np.array_equal(got[i].view(np.uint64), _own(cta, op).view(np.uint64)), i
        ops = [_op(None, b_eis[i // 2], np.float16, _finite_bits(rng, 64 * K, np.float16).view(np.float16)
                   .astype(np.float64).reshape(64, K), form=forms_r[i]) for i in range(n)]
        got = products(cta, ops)
        assert isinstance(got, np.ndarray)
        for i, op in enumerate(ops):
            assert np.array_equal(got[i].view(np.uint64), _own(cta, op).view(np.uint64)), i


def test_b_repeat_needs_every_group_whole():
    b0, b1 = np.zeros((N, K), np.intp), np.ones((N, K), np.intp)
    a = np.zeros((64, K), np.intp)
    pattern = lambda bs: [_op(a, b, np.float16) for b in bs]       # noqa: E731
    assert _b_repeat(pattern([b0, b0, b1, b1])) == 2
    assert _b_repeat(pattern([b0, b1, b0, b1])) == 1             # interleaved: no consecutive sharing
    assert _b_repeat(pattern([b0, b0, b0, b1])) == 1             # groups of unequal size
    assert _b_repeat(pattern([b0, b0, b1, b0])) == 1
    assert _b_repeat(pattern([b0, b0, b0, b0])) == 4


def test_gemm_chains_give_the_per_mma_bits():
    """A GEMM with real-valued f16 inputs on a shape that is not a tile multiple: eager mode
    (MMAs chained per lockstep run: stacked products, pairs rounded at once) against the
    adversarial mode (each MMA computed alone, deferred), bit for bit -- and against float64."""
    from cutedsl import Gemm, GemmConfig
    from cutedsl.sim.backend import SimBackend

    rng = np.random.default_rng(11)
    m, n, k = 200, 136, 200
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-6, 6, (m, k))).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    eager = np.asarray(Gemm(GemmConfig(), backend=SimBackend())(a, b))
    per_mma = np.asarray(Gemm(GemmConfig(), backend=SimBackend(chaos=3))(a, b))
    assert eager.dtype == np.float32
    assert np.array_equal(eager.view(np.uint32), per_mma.view(np.uint32))
    # one f32 rounding per k16 step: |D - A B| <= (k / 16) 2^-24 (|A| |B|), elementwise
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert (np.abs(eager - a64 @ b64) <= (k / 16) * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64))).all()
