"""Extra GEMM arguments are checked like ``a``/``b``: unknown keywords, declared shape and dtype
of pointer parameters, and an epilogue class that disagrees with the config."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import GlobalEpilogue, TmaStoreEpilogue
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError
from cutedsl.ir import GlobalPtr, Param, select
from cutedsl.kernel import MultistageGemmKernel


class AddBias(TmaStoreEpilogue):
    def extra_params(self):
        return [Param("bias", "ptr", shape=("n",), dtype="f32")]

    def visit(self, value, row, col, ctx):
        col = select(col < ctx.n.unsigned(), col, 0)
        return value + GlobalPtr(ctx.args.bias, "f32").load(col)


class GlobalAddBias(GlobalEpilogue):
    extra_params, visit = AddBias.extra_params, AddBias.visit


def operands(rng, m=70, n=50, k=64):
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
    return a, b


def test_unknown_keyword_lists_accepted_names(rng, sim):
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim, epilogue=AddBias)
    a, b = operands(rng)
    with pytest.raises(ArgumentError,
                       match=r"unknown keyword argument\(s\) 'bais'; this GEMM accepts: a, b, out, bias"):
        gemm(a, b, bais=np.zeros(50, np.float32))
    with pytest.raises(ArgumentError, match=r"unknown keyword argument\(s\) 'alpha'; this GEMM accepts: a, b, out$"):
        Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim)(a, b, alpha=2.0)


def test_declared_shape_and_dtype_of_a_pointer_parameter(rng, sim):
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim, epilogue=AddBias)
    a, b = operands(rng)
    with pytest.raises(ArgumentError, match=r"bias must have shape \(n,\) = \(50,\) for this problem, got \(49,\)"):
        gemm(a, b, bias=np.zeros(49, np.float32))
    with pytest.raises(ArgumentTypeError, match="bias has dtype f16, the kernel expects f32"):
        gemm(a, b, bias=np.zeros(50, np.float16))
    bias = rng.standard_normal(50, dtype=np.float32)
    d = gemm(a, b, bias=bias[::1])
    ref = a.astype(np.float64) @ b.astype(np.float64) + bias
    assert np.max(np.abs(d - ref)) / np.max(np.abs(ref)) < 2e-5


def test_a_value_that_is_no_array_names_its_argument(rng, sim):
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim, epilogue=AddBias)
    a, b = operands(rng)
    for kw, name, typ in ((dict(a=None, b=b, bias=np.zeros(50, np.float32)), "a", "NoneType"),
                          (dict(a=a, b=3.0, bias=np.zeros(50, np.float32)), "b", "float"),
                          (dict(a=a, b=b, bias=1.0), "bias", "float")):
        with pytest.raises(ArgumentTypeError, match=rf"^{name}: unsupported array type {typ}: pass a numpy array"):
            gemm(**kw)


def test_declared_parameter_rejects_strided_device_array(rng, sim):
    from cutedsl.runtime import arrays
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim, epilogue=AddBias)
    a, b = operands(rng)
    dev = arrays.to_device(sim, np.zeros(100, np.float32))
    strided = arrays.DeviceArray(dev.ptr, (50,), (8,), dev.dtype, sim, dev)
    with pytest.raises(ArgumentError, match="bias must be C-contiguous"):
        gemm(a, b, bias=strided)


def test_param_shape_only_for_pointers():
    with pytest.raises(ValueError, match="shape/dtype/output can only be declared for a ptr"):
        Param("alpha", "f32", dtype="f32")
    with pytest.raises(ValueError, match="shape/dtype/output can only be declared for a ptr"):
        Param("alpha", "f32", output=True)
    with pytest.raises(ValueError, match="shape entries are positive ints or size names"):
        Param("bias", "ptr", shape=(0,))
    with pytest.raises(ValueError, match="shape entries are positive ints or size names"):
        Param("bias", "ptr", shape=("no such",))


@pytest.mark.parametrize("cfg_epilogue,cls,kind", [("global", AddBias, "tma"), ("tma", GlobalAddBias, "global")])
def test_epilogue_class_must_match_config(cfg_epilogue, cls, kind):
    with pytest.raises(ConfigError, match=f"epilogue {cls.__name__} is a '{kind}' epilogue but "
                                          f"GemmConfig.epilogue is '{cfg_epilogue}'"):
        Gemm(GemmConfig(epilogue=cfg_epilogue), epilogue=cls)


class GlobalBiasKernel(MultistageGemmKernel):
    epilogue_cls = GlobalAddBias


def test_kernel_epilogue_class_must_match_config(rng, sim):
    with pytest.raises(ConfigError, match="GlobalBiasKernel.epilogue_cls GlobalAddBias is a 'global' epilogue"):
        Gemm(GemmConfig(), kernel=GlobalBiasKernel)
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2, epilogue="global"), sim, kernel=GlobalBiasKernel)
    a, b = operands(rng, 90, 70, 100)
    bias = rng.standard_normal(70, dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64) + bias
    assert np.max(np.abs(gemm(a, b, bias=bias) - ref)) / np.max(np.abs(ref)) < 2e-5


class AddC(GlobalEpilogue):
    """D = A @ B + C, C an (M, N) f32 array read through a declared pointer parameter."""

    def extra_params(self):
        return [Param("c", "ptr", shape=("m", "n"), dtype="f32")]

    def visit(self, value, row, col):
        m, n = self.ctx.m.unsigned(), self.ctx.n.unsigned()
        inside = (row < m) & (col < n)                      # partial tiles: never read past C
        idx = select(inside, row * n + col, 0)
        return value + GlobalPtr(self.args.c, "f32").load(idx)


def test_short_or_f16_c_is_refused_and_a_right_c_is_added(rng, sim):
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2, epilogue="global"), sim, epilogue=AddC)
    a, b = operands(rng, 90, 70, 100)
    with pytest.raises(ArgumentError,
                       match=r"c must have shape \(m, n\) = \(90, 70\) for this problem, got \(89, 70\)"):
        gemm(a, b, c=np.zeros((89, 70), np.float32))
    with pytest.raises(ArgumentTypeError, match="c has dtype f16, the kernel expects f32"):
        gemm(a, b, c=np.zeros((90, 70), np.float16))
    c = rng.standard_normal((90, 70), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64) + c
    assert np.max(np.abs(gemm(a, b, c=c) - ref)) / np.max(np.abs(ref)) < 2e-5
