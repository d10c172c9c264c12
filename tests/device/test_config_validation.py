"""Device layer: configs and operands are rejected before any launch, naming argument and limit."""
import numpy as np
import pytest

from cutedsl.device import Gemm, GemmConfig, check_tensor_map
from cutedsl.compiler.artifact import TensorMapSpec
from cutedsl.errors import (ArgumentError, ArgumentTypeError, ConfigError, NoDeviceError,
                            SharedMemoryError, TensorMapError)


@pytest.mark.parametrize("kw,match", [
    (dict(dtype="f32"), "dtype must be 'f16', 'bf16', 'e4m3', 'e5m2', 'tf32', 'mxfp8', 'mxfp8-e5m2', 'mxfp6', 'mxfp6-e3m2', 'mxfp4' or 'nvfp4'"),
    (dict(out_dtype="f64"), "out_dtype"),
    (dict(tile=(96, 128, 64)), "BLOCK_M must be 64 or 128"),
    (dict(tile=(128, 192, 64)), "BLOCK_N must be 64, 128 or 256"),
    (dict(tile=(128, 128, 32)), "BLOCK_K must be 64"),
    (dict(tile=(128, 128)), r"\(BLOCK_M, BLOCK_N, BLOCK_K\)"),
    (dict(stages=0), "stages must be 'auto' or an int in 1..7"),
    (dict(stages=8), "1..7"),
    (dict(schedule="persistent"), "schedule"),
    (dict(b_major="M"), "b_major"),
    (dict(epilogue="smem"), "epilogue"),
    (dict(schedule="single_tile", tile=(128, 256, 64)), "255-register limit"),
    (dict(schedule="single_tile", stages=3), "exactly one stage"),
    # wrong types name the field (they used to pass validation and fail deep in IR building)
    (dict(stages=True), r"stages must be 'auto' or an int in 1..7, got True \(bool\)"),
    (dict(stages=2.0), r"stages .* got 2.0 \(float\)"),
    (dict(stages="3"), r"stages must be 'auto' or an int in 1..7, got '3'"),
    (dict(stages=None), r"stages .* got None"),
    (dict(tile=(128.0, 128, 64)), r"tile must be a tuple \(BLOCK_M, BLOCK_N, BLOCK_K\) of ints.*128.0 is a float"),
    (dict(tile=(128, 128, True)), r"tile .* of ints.*True is a bool"),
    (dict(tile=None), r"tile must be a tuple .* got None"),
    (dict(tile="128x128x64"), r"tile must be a tuple .* got '128x128x64'"),
    (dict(tile=128), r"tile must be a tuple .* got 128"),
    (dict(dtype=16), r"dtype must be a string, got 16 \(int\)"),
    (dict(dtype=np.array(["f16", "f16"])), r"dtype must be a string"),
    (dict(out_dtype=None), r"out_dtype must be a string"),
    (dict(epilogue=3), r"epilogue must be a string"),
    (dict(epilogue=["tma", "global"]), r"more than one store kind"),
    (dict(epilogue=["bias:diag"]), r"unknown epilogue node .bias:diag."),
    (dict(epilogue=["alpha", "scale_a", "alpha"]), r"both read the argument .alpha."),
    (dict(b_major=b"N"), r"b_major must be a string"),
    (dict(schedule="pingpong", swizzle=2.0), r"swizzle must be 1, 2, 4 or 8, got 2.0"),
    (dict(schedule="pingpong", swizzle=True), r"swizzle must be 1, 2, 4 or 8, got True"),
    (dict(schedule="cooperative", cluster=(2.0, 1)), r"cluster must be one of .* got \(2.0, 1\)"),
    # one stage deadlocked warp-specialized kernels (or failed to place the epilogue in A)
    (dict(schedule="warp_specialized", stages=1), r"gemm_warp_specialized: stages must be 2..7 .* got 1"),
    (dict(schedule="warp_specialized", tile=(128, 256, 64), stages=1), r"stages must be 2..7"),
    (dict(schedule="cooperative", stages=1), r"gemm_cooperative: stages must be 2..7"),
    (dict(schedule="pingpong", tile=(64, 128, 64), stages=1), r"gemm_pingpong: stages must be 2..7"),
])
def test_bad_configs(kw, match):
    with pytest.raises(ConfigError, match=match):
        GemmConfig(**kw)


def test_numpy_integers_are_accepted_as_plain_ints():
    c = GemmConfig(tile=np.array([64, 128, 64]), stages=np.int32(2))
    assert c.tile == (64, 128, 64) and c.stages == 2
    assert all(type(x) is int for x in c.tile) and type(c.stages) is int
    assert c == GemmConfig(tile=(64, 128, 64), stages=2)
    c = GemmConfig(schedule="pingpong", cluster=np.array([2, 1]), swizzle=np.int64(4))
    assert type(c.swizzle) is int and all(type(x) is int for x in c.cluster)
    assert c == GemmConfig(schedule="pingpong", cluster=(2, 1), swizzle=4)
    c = GemmConfig(schedule="pingpong", sm_count=np.int64(3))
    assert type(c.sm_count) is int and c == GemmConfig(schedule="pingpong", sm_count=3)
    for bad in (np.float64(3), True, np.bool_(True), 3.0):
        with pytest.raises(ConfigError, match="sm_count must be None or an int in 1..4096"):
            GemmConfig(schedule="pingpong", sm_count=bad)


def test_unknown_backend_fails_at_construction():
    with pytest.raises(ArgumentError, match=r"backend must be one of 'auto', 'cuda', 'sim', 'none' .* got 'foo'"):
        Gemm(GemmConfig(), backend="foo")
    with pytest.raises(ArgumentTypeError, match="int lacks alloc"):
        Gemm(GemmConfig(), backend=3)


@pytest.mark.parametrize("kw,match", [
    (dict(cache="dir"), r"cache must be a KernelCache, None or False, got 'dir'"),
    (dict(cache=True), r"cache must be a KernelCache, None or False, got True"),
    (dict(dump_dir=3), r"dump_dir must be a directory path \(str or os.PathLike\) or None, got 3"),
])
def test_bad_compile_arguments_fail_at_construction(kw, match):
    with pytest.raises(ArgumentTypeError, match=match):
        Gemm(GemmConfig(), backend="none", **kw)


def test_grid_past_hardware_limits_is_refused_before_anything_runs():
    """M = 10,000,000 with 128-row tiles needs 78,125 CTAs on gridDim.y (limit 65,535). The
    check comes before compiling, allocating or touching a backend ('none' would raise)."""
    g = Gemm(GemmConfig(), backend="none")
    a = np.broadcast_to(np.float16(1), (10_000_000, 64))     # no memory behind it
    b = np.ones((64, 64), np.float16)
    with pytest.raises(ArgumentError, match=r"M=10000000, N=64, K=64 with 128x128 tiles needs "
                                            r"gridDim.y = 78125 CTAs; the hardware allows 1..65535 on y"):
        g(a, b)
    assert g.grid(65535 * 128, 1000, 64) == (8, 65535, 1)
    with pytest.raises(ArgumentError, match="gridDim.y = 65536"):
        g.grid(65535 * 128 + 1, 1000, 64)


def test_config_that_cannot_fit_shared_memory():
    with pytest.raises(SharedMemoryError, match="232448 B limit"):
        GemmConfig(tile=(128, 256, 64), stages=6)
    assert GemmConfig(tile=(128, 256, 64)).resolved_stages() == 4
    assert GemmConfig().resolved_stages() == 6
    assert GemmConfig(tile=(64, 64, 64), epilogue="global").resolved_stages() == 7


@pytest.mark.parametrize("schedule", ["multistage", "warp_specialized", "cooperative", "pingpong"])
@pytest.mark.parametrize("tile", [(64, 64, 64), (128, 128, 64), (128, 256, 64), (64, 256, 64)])
def test_auto_stages_sized_by_one_kernel(schedule, tile, monkeypatch):
    """``stages="auto"`` is the deepest ring whose plan fits, sized by one kernel's smem plan
    as a function of the stage count (no kernel per candidate): the same count a kernel built
    with each stage count would accept, and a config builds at most two kernels."""
    from cutedsl.kernel.gemm import GemmKernel
    why = GemmConfig(schedule=schedule)._kernel_cls().can_implement(GemmConfig(tile=tile))
    if why:
        pytest.skip(why)            # e.g. no 64-row split for cooperative, no 128x256 ping-pong
    built = []
    init = GemmKernel.__init__
    monkeypatch.setattr(GemmKernel, "__init__", lambda self, *a, **kw: (built.append(1), init(self, *a, **kw))[1])
    cfg = GemmConfig(tile=tile, schedule=schedule)
    assert len(built) <= 2
    got = cfg.resolved_stages()
    cls = cfg._kernel_cls()
    fits = []
    for s in getattr(cls, "STAGES", range(1, 8)):
        try:
            GemmConfig(tile=tile, schedule=schedule, stages=s)
            fits.append(s)
        except SharedMemoryError:
            pass
    assert got == max(fits)
    k = cfg.kernel()
    assert k.smem_plan().total_bytes <= 232448 and k.stages == got
    if got < 7:
        with pytest.raises(SharedMemoryError, match="232448 B limit"):
            k.smem_plan(got + 1)


def test_config_is_frozen_and_parses_tiles():
    c = GemmConfig()
    with pytest.raises(Exception):
        c.dtype = "bf16"
    assert GemmConfig.parse_tile("64x256x64") == (64, 256, 64)
    with pytest.raises(ConfigError):
        GemmConfig.parse_tile("big")


def f16(*shape):
    return np.ones(shape, np.float16)


@pytest.mark.parametrize("a,b,exc,match", [
    (f16(4, 8), f16(9, 4), ArgumentError, r"a.shape\[-1\] \(8\) != b.shape\[-2\] \(9\)"),
    (f16(4, 8, 1), f16(8, 4), ArgumentError, r"a.shape\[-1\] \(1\) != b.shape\[-2\] \(8\)"),
    (f16(2, 4, 8, 1), f16(8, 4), ArgumentError, r"a must be 2-D \(or 3-D: \(L, rows, cols\) for a batch\)"),
    (f16(4), f16(8, 4), ArgumentError, "a must be 2-D"),
    (f16(3, 4, 8), f16(2, 8, 4), ArgumentError, "batch sizes differ: a has 3, b has 2"),
    (f16(0, 8), f16(8, 4), ArgumentError, "zero-size"),
    (f16(4, 8), f16(8, 0), ArgumentError, "zero-size"),
    (np.ones((4, 8), np.float32), f16(8, 4), ArgumentTypeError, "a has dtype float32, the config expects f16"),
    (f16(4, 8), np.ones((8, 4), np.int32), ArgumentTypeError, "b has dtype int32"),
])
def test_bad_operands_raise_before_launch(a, b, exc, match):
    g = Gemm(GemmConfig(), backend="none")           # no backend is touched before validation
    with pytest.raises(exc, match=match):
        g(a, b)


def test_no_gpu_is_reported_cleanly():
    from cutedsl.runtime.cuda import CudaBackend
    ok, why = CudaBackend.available()
    if ok:
        pytest.skip("a GPU is present")
    assert why
    with pytest.raises(NoDeviceError, match="CUDA backend unavailable"):
        CudaBackend()


SPEC = TensorMapSpec("a", "f16", (128, 64), swizzle=128)


@pytest.mark.parametrize("addr,shape,strides,match", [
    (8, (256, 64), (128, 2), "not 16-byte aligned"),
    (0, (256, 64), (130, 2), "multiple of 16 B"),
    (0, (256, 64), (128, 4), "innermost dimension must be contiguous"),
    (0, (2 ** 33, 64), (128, 2), r"TMA allows 1..2\^32"),
    (0, (256, 64, 2), (256, 4, 2), "rank 3 but the box has rank 2"),
    (0, (2 ** 20, 2 ** 30), (2 ** 41, 2), r"past TMA's limit 2\^40"),
])
def test_tensor_map_rules(addr, shape, strides, match):
    with pytest.raises(TensorMapError, match=match):
        check_tensor_map(SPEC, addr, shape, strides)


def test_tensor_map_strides_may_nest():
    """As the driver takes them (cuda.h: multiples of 16 B below 2^40, no order): the block-scale
    factor map of CuTe DSL / CUTLASS -- 512-byte atoms (256 u16) of a row block K-atom by K-atom,
    row blocks 3 atoms apart -- steps 512 B along K inside a 1536-byte row-block stride."""
    spec = TensorMapSpec("sfa", "u16", (1, 1, 1, 256))
    enc = check_tensor_map(spec, 0, (1, 3, 2, 256), (4 * 1536, 512, 1536, 2))     # (L, rk, rm, atom)
    assert enc.dims == (256, 2, 3, 1) and enc.strides == (1536, 512, 4 * 1536)


def test_tensor_map_box_rules():
    with pytest.raises(TensorMapError, match="TMA allows 1..256"):
        check_tensor_map(TensorMapSpec("x", "f32", (512,)), 0, (1024,), (4,))
    with pytest.raises(TensorMapError, match="larger than the 64-byte swizzle span"):
        check_tensor_map(TensorMapSpec("x", "f16", (8, 64), swizzle=64), 0, (8, 64), (128, 2))
    with pytest.raises(TensorMapError, match="multiple of 16 B"):
        check_tensor_map(TensorMapSpec("x", "f16", (8, 4)), 0, (8, 64), (128, 2))
    enc = check_tensor_map(SPEC, 1 << 20, (1000, 520), (1040, 2))
    assert enc.dims == (520, 1000) and enc.strides == (1040,) and enc.box == (64, 128)


def test_config_asks_the_layers_for_what_they_implement(monkeypatch):
    """Issue 19: the dtype list is the MMA atom's, the output types the epilogue's, the tile lists
    and schedule rules each kernel's (can_implement); the config keeps no copy of them."""
    from cutedsl.atom import mma_traits as mt
    from cutedsl.device import config as C
    from cutedsl.kernel import CooperativeGemmKernel, MultistageGemmKernel, SingleTileGemmKernel
    assert C.DTYPES == tuple(mt.ELEMENT_BYTES) + tuple(mt.MX_DTYPES) and C.STAGES == range(1, 8)
    assert MultistageGemmKernel.can_implement(GemmConfig()) is None
    assert "BLOCK_N must be 64, 128 or 256, got 96" in MultistageGemmKernel.can_implement(
        _Cfg(tile=(128, 96, 64)))
    assert "exactly one stage" in SingleTileGemmKernel.can_implement(_Cfg(stages=3))
    assert "stages must be 2..7" in CooperativeGemmKernel.can_implement(_Cfg(stages=1))
    assert "is too small to split over 2" in CooperativeGemmKernel.can_implement(_Cfg(tile=(64, 128, 64)))
    # a kernel that implements more tiles is accepted without touching the config's code
    monkeypatch.setattr(MultistageGemmKernel, "TILE_N", (64, 96, 128, 256))
    assert MultistageGemmKernel.can_implement(_Cfg(tile=(128, 96, 64))) is None


class _Cfg:
    """The fields can_implement reads, without GemmConfig's own validation."""
    def __init__(self, **kw):
        self.tile, self.dtype, self.out_dtype, self.stages, self.cluster = (128, 128, 64), "f16", "f32", "auto", (1, 1)
        self.b_major, self.b_dtype = "MN", None
        self.__dict__.update(kw)


def test_arch_is_a_config_field_passed_down():
    """Issue 19: the architecture object comes from the config; sm_100a (issue 24) picks its own
    kernels, and an unknown architecture is refused by name."""
    from cutedsl.arch import SM90A, SM100A
    k = GemmConfig(schedule="pingpong").kernel()
    assert k.arch is SM90A and k.config()["arch"] == "sm_90a" and k.mainloop.arch is SM90A
    k = GemmConfig(arch="sm_100a", schedule="single_tile").kernel()
    assert k.arch is SM100A and k.config()["arch"] == "sm_100a" and k.mma_atom == "tcgen05"
    assert GemmConfig(arch="sm_100a").schedule == "warp_specialized"      # the architecture's defaults
    with pytest.raises(ConfigError, match="schedule 'multistage' has no sm_100a kernel"):
        GemmConfig(arch="sm_100a", schedule="multistage")
    with pytest.raises(ConfigError, match="arch must be one of 'sm_90a', 'sm_100a', got 'sm_120a'"):
        GemmConfig(arch="sm_120a")


def test_packed_4bit_tensor_map_rules():
    """16U4_ALIGN8B / the ALIGN16B types as cuda.h lists their rules: dims in elements (a
    multiple of 2, resp. 128), no element stride (innermost 0), ALIGN16B boxes 128 wide with
    32-byte aligned address and strides."""
    spec = TensorMapSpec("a", "16u4_align8b", (128, 256), swizzle=128)
    enc = check_tensor_map(spec, 0, (300, 512), (256, 0))
    assert enc.dims == (512, 300) and enc.box == (256, 128)
    for shape, strides, addr, sp, match in [
        ((300, 511), (256, 0), 0, spec, r"innermost dimension 511 must be a multiple of 2"),
        ((300, 512), (256, 1), 0, spec, r"have no byte stride: pass 0"),
        ((300, 512), (256, 0), 0, TensorMapSpec("a", "16u4_align8b", (128, 16)), r"multiple of 16 bytes"),
        ((300, 512), (256, 0), 16, TensorMapSpec("a", "16u6_align16b", (128, 128)), r"not 32-byte aligned"),
        ((300, 512), (400, 0), 0, TensorMapSpec("a", "16u6_align16b", (128, 128)), r"multiple of 32 B"),
        ((300, 512), (384, 0), 0, TensorMapSpec("a", "16u4_align16b", (128, 64)), r"must be 128 elements"),
    ]:
        with pytest.raises(TensorMapError, match=match):
            check_tensor_map(sp, addr, shape, strides)


def test_emulator_encodes_the_packed_types_with_their_row_bytes():
    """Default strides of a packed map: its rows are its packed bytes (tests/sim/test_sim_tma.py
    runs loads through all three types)."""
    from cutedsl.sim import Emulator
    emu = Emulator()
    buf = emu.alloc(128 * 384)
    emu.tensor_map(buf, (128, 512), "16u4_align8b", (128, 256), swizzle=128)            # rows of 256 B
    emu.tensor_map(buf, (128, 512), "16u6_align16b", (128, 128), swizzle=128)           # rows of 384 B
    with pytest.raises(TensorMapError, match=r"innermost dimension 400 must be a multiple of 128 for 16u4_align16b"):
        emu.tensor_map(buf, (128, 400), "16u4_align16b", (128, 128))    # 400 elements need dim % 128
