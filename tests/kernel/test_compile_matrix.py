"""Every kernel x tile x stage configuration compiles for sm_90a with 0 spills and the expected
SASS; configurations that cannot fit raise before compiling."""
import pytest

from cutedsl.collective import GlobalEpilogue, TmaStoreEpilogue
from cutedsl.errors import SharedMemoryError
from cutedsl.kernel import MultistageGemmKernel, SaxpyKernel, SingleTileGemmKernel, TmaSaxpyKernel

TILES = [(64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 256)]


def check_clean(k):
    r = k.resources
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack == 0, r
    assert not [m for m in r.ptxas_messages if "C7517" in m or "C7519" in m or "C7508" in m], r.ptxas_messages
    return r


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize("stages", range(1, 8))
def test_multistage_gemm_configs(tile, stages):
    tm, tn = tile
    kern = MultistageGemmKernel(tm, tn, stages=stages)
    try:
        plan = kern.smem_plan()
    except SharedMemoryError as e:
        assert "232448 B limit" in str(e)
        assert (tm * 64 + tn * 64) * 2 * stages + kern.epilogue.smem_bytes > 200_000
        return
    k = kern.compile()
    r = check_clean(k)
    assert k.dynamic_smem == plan.dynamic_bytes and r.smem_bytes <= 232448
    wg = kern.warpgroups
    per_ktile = (tm // wg // 64) * 4                      # m64nNk16 instructions per k-tile and warpgroup
    # LLVM peels the first k-tile (zero accumulator), so the body appears once or twice
    assert r.sass["HGMMA"] in (per_ktile, 2 * per_ktile)
    boxes = 1 + tn // 64                                  # A box + B boxes per stage
    assert r.sass["UTMALDG"] == (stages + 1) * boxes      # prologue fills every stage, one refill site
    # one TMA store per 64-row x 128-byte epilogue sub-tile of a warpgroup
    assert r.sass["UTMASTG"] == (tm // wg // 64) * (tn // kern.epilogue.epi_n) and k.block == (128 * wg, 1, 1)


def test_flagship_config_sass():
    """128x128x64, f16: 8 HGMMA per k-tile (64x128x16 x 2 m-blocks x 4 k-steps), 3 UTMALDG per stage."""
    k = MultistageGemmKernel(128, 128, stages=4).compile()
    r = check_clean(k)
    body = [l for l in k.ptx.splitlines() if "wgmma.mma_async" in l]
    assert all("m64n128k16.f32.f16.f16" in l for l in body)
    assert r.sass["HGMMA"] == 16 and r.sass["UTMALDG"] == 15 and r.registers <= 168


@pytest.mark.parametrize("b_major", ["MN", "K"])
@pytest.mark.parametrize("dtype,out", [("f16", "f16"), ("bf16", "bf16"), ("bf16", "f32")])
@pytest.mark.parametrize("epilogue", [GlobalEpilogue, TmaStoreEpilogue])
def test_dtype_layout_epilogue_variants(b_major, dtype, out, epilogue):
    k = MultistageGemmKernel(128, 128, 3, dtype, out, b_major, epilogue).compile()
    r = check_clean(k)
    assert r.sass["HGMMA"] in (8, 16)
    assert ("UTMASTG" in r.sass) == (epilogue is TmaStoreEpilogue)
    assert ("STG" in r.sass) == (epilogue is GlobalEpilogue)


@pytest.mark.parametrize("tile", [t for t in TILES if t[0] * t[1] <= 128 * 128], ids=str)
def test_single_tile_configs(tile):
    k = SingleTileGemmKernel(*tile).compile()
    r = check_clean(k)
    assert r.sass["HGMMA"] == tile[0] // 64 * 4 and r.sass["UTMALDG"] == 1 + tile[1] // 64


def test_saxpy_kernels():
    r = check_clean(SaxpyKernel().compile())
    assert r.sass["LDG"] == 2 and r.sass["STG"] == 1
    r = check_clean(TmaSaxpyKernel().compile())
    assert r.sass["UTMALDG"] == 2 and r.sass["UTMASTG"] == 1


def test_invalid_kernel_parameters():
    with pytest.raises(ValueError, match="tile_m"):
        MultistageGemmKernel(96, 128)
    with pytest.raises(ValueError, match="stages"):
        MultistageGemmKernel(128, 128, stages=8)
    with pytest.raises(TypeError, match="Epilogue subclass"):
        MultistageGemmKernel(128, 128, epilogue=object)
