"""Device-resident MXFP4 / NVFP4 operands (issue 24): ``mx.to_device`` packs e2m1 once into an
``e2m1x2`` device array (two per byte, torch's float4_e2m1fn_x2 layout) that ``Gemm`` reads in
place; the checks that keep a packed operand from being misread."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.device import mx
from cutedsl.runtime import arrays
from cutedsl.errors import ArgumentError, ArgumentTypeError


def operands(rng, m, n, k, dtype):
    """Small integers on the e2m1 grid and random factors: every product exact in f32."""
    qa = rng.integers(-4, 5, (m, k)).astype(ml_dtypes.float4_e2m1fn)
    qb = rng.integers(-4, 5, (n, k)).astype(ml_dtypes.float4_e2m1fn)
    return qa, qb, mx.random_scales(rng, m, k, dtype), mx.random_scales(rng, n, k, dtype)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("dtype", ["mxfp4", "nvfp4"])
def test_device_resident_fp4_matches_host_and_reference(dtype, rng, sim):
    """A and a weight stored (N, K) packed on the device once (odd K: one zero element added),
    B passed as ``w.T``; two calls on the same device operands; the result stays on the device,
    bit-identical to the host-operand call and exact against the dequantized product."""
    m, n, k = 128 + int(rng.integers(1, 128)), 128 + int(rng.integers(1, 15)) * 8, 257 + 2 * int(rng.integers(0, 60))
    qa, qb, sa, sb = operands(rng, m, n, k, dtype)
    g = Gemm(GemmConfig(arch="sm_100a", dtype=dtype, stages=2, sm_count=2), sim)
    da, dw = mx.to_device(g.backend, qa), mx.to_device(g.backend, qb)
    assert (da.dtype.name, da.shape, da.strides[-1], da.strides[0] % 16) == ("e2m1x2", (m, (k + 1) // 2), 1, 0)
    scales = dict(a_scales=mx.pack_scales(sa, dtype), b_scales=mx.pack_scales(sb, dtype))
    ref = mx.dequantize(qa, sa, dtype) @ mx.dequantize(qb, sb, dtype).T
    host = g(qa, qb.T, **scales)
    for _ in range(2):
        d = g(da, dw.T, **scales)
        assert isinstance(d, arrays.DeviceArray)
        got = arrays.to_host(d)
        assert np.array_equal(got, host) and np.array_equal(got.astype(np.float64), ref), rng.seed_value


def test_packed_operand_checks(rng, sim):
    """Pairs along N instead of K, pairs that are not contiguous, a K that disagrees with the
    other operand's, one-per-byte e2m1 / e2m3 device arrays, a non-e2m1 array for to_device:
    each refused by name, before any launch."""
    m, n, k = 64, 128, 128
    qa, qb, sa, sb = operands(rng, m, n, k, "mxfp4")
    g = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp4", stages=2), sim)
    scales = dict(a_scales=mx.pack_scales(sa, "mxfp4"), b_scales=mx.pack_scales(sb, "mxfp4"))
    da, dw = mx.to_device(g.backend, qa), mx.to_device(g.backend, qb)
    with pytest.raises(ArgumentError, match=r"b: a e2m1x2 operand's packed pairs must run along K \(K-major\), "
                                            r"got strides \(64, 1\) B for shape \(128, 128\)"):
        g(da, dw, **scales)                               # the (N, K) weight without .T: pairs along N
    with pytest.raises(ArgumentError, match=r"b: a e2m1x2 array \(2 e2m1 per byte\) must be contiguous along its "
                                            r"last or second-last axis \(byte stride 1\), got strides \(2, 64\) B"):
        g(da, dw.view(shape=(n, k // 4), strides=(64, 2)).T, **scales)
    odd = mx.to_device(g.backend, qa[:, :k - 1])
    with pytest.raises(ArgumentError, match=r"a.shape\[-1\] \(128\) != b.shape\[-2\] \(127\): inner dimensions "
                                            r"must match \(a is e2m1x2 device storage \(K = 2 x its bytes; "
                                            r"mx.to_device pads an odd K by one zero element\)\)"):
        g(odd, qb[:, :k - 1].T, **scales)
    with pytest.raises(ArgumentTypeError, match=r"a: e2m1 operands are taken as host \(numpy\) arrays, one element "
                                                r"per byte, packed on the way to the device \(or a device array from "
                                                r"cutedsl.device.mx.to_device\); got a device array of e2m1"):
        g(arrays.to_device(g.backend, qa), dw.T, **scales)
    q6 = qa.astype(ml_dtypes.float6_e2m3fn)
    g6 = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp6", stages=2), sim)
    with pytest.raises(ArgumentTypeError, match=r"a: e2m3 operands are taken as host \(numpy\) arrays, one element "
                                                r"per byte, packed on the way to the device; got a device array"):
        g6(arrays.to_device(g6.backend, q6), q6.T, a_scales=scales["a_scales"], b_scales=scales["a_scales"])
    with pytest.raises(ArgumentTypeError, match=r"mx.to_device\(backend, q\) packs ml_dtypes.float4_e2m1fn values "
                                                r"\(MXFP4 / NVFP4 elements\), got float6_e2m3fn"):
        mx.to_device(g.backend, q6)


def test_device_array_transposes(sim):
    """DeviceArray.T (2-D) and .mT (last two axes) swap shape and strides without a copy."""
    x = arrays.to_device(sim, np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    assert (x.mT.shape, x.mT.strides, x.mT.ptr) == ((2, 4, 3), (48, 4, 16), x.ptr)
    y = arrays.to_device(sim, np.arange(6, dtype=np.float16).reshape(2, 3))
    assert (y.T.shape, y.T.strides) == ((3, 2), (2, 6)) and y.T.T == y
    with pytest.raises(ArgumentError, match=r"T is the transpose of a 2-D array, got shape \(2, 3, 4\)"):
        x.T
    with pytest.raises(ArgumentError, match=r"mT needs a 2-D or 3-D array, got shape \(5,\)"):
        arrays.to_device(sim, np.zeros(5, np.float32)).mT


def test_torch_float4_x2_is_read_as_packed_pairs():
    """A CUDA tensor of torch.float4_e2m1fn_x2 (shape in bytes) is described as e2m1x2 storage
    and viewed as e2m1 elements, K = 2 x its last extent (a stand-in for the CUDA tensor: no GPU
    here; the real one answers the same four calls)."""
    import torch

    class FakeCudaTensor:              # what arrays.describe asks of a torch CUDA tensor
        __module__ = "torch.fake"
        is_cuda = True
        dtype = torch.float4_e2m1fn_x2
        shape = (100, 80)

        def data_ptr(self):
            return 0x7000_0000

        def stride(self):
            return (80, 1)

    v = arrays.TensorView.of(FakeCudaTensor(), "b")
    assert (v.dtype.name, v.raw_dtype, v.shape, v.strides, v.packed, v.framework) == \
        ("e2m1", "e2m1x2", (100, 160), (80, 1), 2, "torch")
