"""Fidelity on Blackwell PTX this project did not write: CuTe DSL's sm_100a GEMMs on the emulator.

The PTX under ``tests/sim/cute_dsl_ptx/`` is quack-kernels' ``GemmSm100`` -- a persistent
warp-specialized tcgen05 GEMM written in NVIDIA's CuTe DSL 4.8.1 (derived from CUTLASS's CuTe DSL
Blackwell examples, which the wheels do not ship) -- compiled for sm_100a without a GPU by
``tests/sim/cute_dsl_ptx/generate_fixtures.py`` (CuTe DSL is not needed here). Each test packs
the kernel's parameters the way CuTe DSL's host launcher does (the TiledMMA's runtime state, a
tensor map and the coordinate tensor's shape per operand, the static scheduler's tile counts and
fast-divmod pairs), launches the fixture's grid and cluster with race checks on, on shapes that
are not tile multiples with small-integer inputs, and checks D bit for bit against numpy in
float64: TMA loads (128-byte swizzle), ``tcgen05.alloc`` / ``mma`` / ``commit`` (1 CTA and CTA
pairs: ``cta_group::2`` with 128 and 64 rows per CTA), ``tcgen05.ld``, the epilogue's
``st.shared`` + TMA store, named barriers, and the persistent tile loop.
"""
import json
import pathlib
import re

import numpy as np
import pytest

from cutedsl.sim import Emulator

HERE = pathlib.Path(__file__).parent / "cute_dsl_ptx"
DENSE = ["cute_dsl_gemm_sm100_1sm", "cute_dsl_gemm_sm100_2sm", "cute_dsl_gemm_sm100_pair_m128",
         "cute_dsl_gemm_sm100_clc"]
MX = ["cute_dsl_gemm_sm100_mxfp8", "cute_dsl_gemm_sm100_nvfp4", "cute_dsl_gemm_sm100_mxfp8_2sm"]
SMEM = 232448           #: sm_100's largest dynamic shared memory per CTA (the launcher asks the kernel's own)
SWIZZLE = 8             #: the scheduler's raster group (quack's max_swizzle_size argument)


def fixture(name):
    return (HERE / f"{name}.ptx").read_text(), json.loads((HERE / f"{name}.json").read_text())


def cdiv(a, b):
    return -(-a // b)


def fast_divmod(d: int) -> tuple:
    """CuTe DSL's FastDivmod of divisor ``d`` as its host function computes it: ``(multiplier,
    shift)`` with ``q = mulhi(x, multiplier) >> shift`` (multiplier 0: ``d`` is 1)."""
    s = max(31 - (32 - ((d - 1) & 0xFFFFFFFF).bit_length()), 0)
    return ((1 << (s + 32)) + d - 1) // d & 0xFFFFFFFF, s


def scheduler_params(tiles_m: int, tiles_n: int, batches: int, swizzle: int = SWIZZLE) -> list:
    """The static persistent scheduler's 17 i32 parameters in the kernel's order (the fixture
    IR's host function, transcribed): cluster-tile counts, raster order, and the fast-divmod
    pairs of the tile count, the raster group and its remainder and stride."""
    total = tiles_m * tiles_n
    n_major = cdiv(tiles_n, swizzle) * swizzle <= cdiv(tiles_m, swizzle) * swizzle
    major, minor = (tiles_n, tiles_m) if n_major else (tiles_m, tiles_n)
    group = min(swizzle, major)
    rem = major % group
    stride = group * minor
    rem1 = rem if rem > 0 else 1
    return [tiles_m, tiles_n, batches, int(n_major), *fast_divmod(total), total, major // group,
            *fast_divmod(group), group, *fast_divmod(rem1), rem1, *fast_divmod(stride), stride]


def i32s(*v) -> bytes:
    return np.array(v, np.int32).tobytes()


def run_dense(name, m, n, k, rng, ctas=2, ptx=None, sm_count=None, launch_info=None, **emu_opts):
    """Launch fixture ``name`` on ``m x n x k`` (A: m x k, B: n x k, both K-major f16 small
    integers; D: m x n f32) with ``ctas`` persistent clusters (static scheduler) or one per
    tile (cluster launch control; ``sm_count`` SMs make the rest wait to be launched or
    cancelled); returns ``(D, reference)``."""
    text, meta = fixture(name)
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (n, k)).astype(np.float16)
    emu = Emulator(**({"sm_count": sm_count} if sm_count else {}), **emu_opts)
    prog = emu.load(ptx or text, meta["entry"])
    da, db, dd = emu.to_device(a), emu.to_device(b), emu.alloc(m * n * 4)
    (ak, am), (bk, bn), (dn, dm) = meta["boxes"]
    maps = [emu.tensor_map(da, (1, m, k), "f16", (1, am, ak), swizzle=128),
            emu.tensor_map(db, (1, n, k), "f16", (1, bn, bk), swizzle=128),
            emu.tensor_map(dd, (1, m, n), "f32", (1, dm, dn), swizzle=128)]
    tiles_m, tiles_n = cdiv(m, meta["mma_tile"][0]), cdiv(n, meta["mma_tile"][1])   # cluster tiles
    # the TiledMMA's runtime state (accumulate / negate flags; its size per atom): all clear
    args = [bytes(prog.params[0].size), maps[0], i32s(m, k, 1), maps[1], i32s(n, k, 1), maps[2], i32s(m, n, 1),
            *scheduler_params(tiles_m, tiles_n, 1)]
    info = launch(emu, prog, meta, tiles_m, tiles_n, args, ctas)
    if launch_info is not None:
        launch_info.update(info)
    return emu.to_host(dd, (m, n), np.float32), a.astype(np.float64) @ b.astype(np.float64).T


def launch(emu, prog, meta, tiles_m, tiles_n, args, ctas):
    cluster = tuple(meta["cluster"])
    if meta["scheduler"] == "clc":      # the launcher's grid: every tile
        grid = (cluster[0] * tiles_m * tiles_n, 1, 1)
    else:                               # persistent: at most the clusters that fit
        grid = (cluster[0], 1, min(tiles_m * tiles_n, ctas))
    return emu.launch(prog, grid=grid, block=tuple(meta["block"]), args=args, cluster=cluster, smem=SMEM)


#: block-scaled fixtures: (element, factor block along K, factor codes to draw from, element values)
SCALED = {"cute_dsl_gemm_sm100_mxfp8": ("e4m3", 32, (126, 127, 128), range(-4, 5)),
          "cute_dsl_gemm_sm100_mxfp8_2sm": ("e4m3", 32, (126, 127, 128), range(-4, 5)),
          # UE4M3 codes of 0.5, 1, 2 per 16 packed e2m1 values (two per byte)
          "cute_dsl_gemm_sm100_nvfp4": ("e2m1", 16, (0x30, 0x38, 0x40), (-4, -3, -2, -1, 0, 1, 2, 3, 4))}


def sf_map(emu, buf, gbasis, rows_blocks, k_atoms, split=1):
    """The 4-D u16 tensor map CuTe DSL reads an operand's packed factors through, from its
    ``gbasis``: one 512-byte atom (256 u16) innermost, then the row-block and K-atom modes in
    the order the basis names them (A's: ``1@1@0`` row block, ``1@1@1`` K atom; B's i16 view:
    K atom, row block), then the batch; the box spans ``X`` atoms along K where the basis says.
    ``split`` 2: a CTA pair's B factors, each CTA loading half an atom (at u16 coordinate
    rank x 128, into its half of the buffer) and multicasting it to both."""
    strides = {"rows": k_atoms * 512, "k": 512}
    m = re.fullmatch(r"\(\(2,4,32\),(\d+),1,1\):\(\([^)]*\),(1@1@[01]),(1@1@[01]),1@2\)", gbasis)
    if m:
        modes = ["rows" if x == "1@1@0" else "k" for x in m.group(2, 3)]
        box = (1, 1, int(m.group(1)), 256) if modes[0] == "k" else (1, int(m.group(1)), 1, 256)
    else:
        m = re.fullmatch(r"\(256,(\d+),1,1\):\(1@0,1@1,1@2,1@3\)", gbasis)
        modes, box = ["k", "rows"], (1, 1, int(m.group(1)), 256 // split)
    size = {"rows": rows_blocks, "k": k_atoms}
    shape = (1, size[modes[1]], size[modes[0]], 256)            # numpy order: batch, mode 2, mode 1, atom
    st = (rows_blocks * k_atoms * 512, strides[modes[1]], strides[modes[0]], 2)
    return emu.tensor_map(buf, shape, "u16", box, strides=st)


def run_block_scaled(name, m, n, k, rng, ctas=2):
    """A block-scaled fixture on ``m x n x k``: A (m x k) and B (n x k) K-major small values of
    the element type (e4m3, or e2m1 packed two per byte and moved by 16U4_ALIGN8B tensor maps),
    factors per block of K packed as CUTLASS's 512-byte atoms (``cutedsl.device.mx.pack_scales``:
    128 rows x 4 factors; a row block's atoms K-atom by K-atom, padded to whole k-tiles), read
    through 4-D u16 tensor maps whose row-block stride nests outside the K-atom one; D bf16.
    Returns ``(D as float64, the exactly scaled product rounded to bf16)``."""
    import ml_dtypes
    from cutedsl.device import mx
    text, meta = fixture(name)
    element, block, codes, values = SCALED[name]
    dtype = "nvfp4" if element == "e2m1" else "mxfp8"
    et = mx.ELEMENTS[element][0]
    a = rng.choice(values, (m, k)).astype(et)
    b = rng.choice(values, (n, k)).astype(et)
    sa = rng.choice(codes, (m, cdiv(k, block))).astype(np.uint8)
    sb = rng.choice(codes, (n, cdiv(k, block))).astype(np.uint8)
    ref = mx.dequantize(a, sa, dtype) @ mx.dequantize(b, sb, dtype).T
    emu = Emulator()
    prog = emu.load(text, meta["entry"])
    if element == "e2m1":
        da, db, tdt = emu.to_device(mx.pack_fp4(a)), emu.to_device(mx.pack_fp4(b)), "16u4_align8b"
    else:
        da, db, tdt = emu.to_device(a.view(np.uint8)), emu.to_device(b.view(np.uint8)), element
    dd = emu.alloc(m * n * 2)
    psa, psb = mx.pack_scales(sa, dtype), mx.pack_scales(sb, dtype)
    rm, rn, rk = cdiv(m, 128), cdiv(n, 128), psa.size // 512 // cdiv(m, 128)
    assert psb.size == rn * rk * 512
    (ak, am), (bk, bn), _, _, (dn, dm) = meta["boxes"]
    sw, gb = meta["swizzles"], meta["gbasis"]
    sfa = sf_map(emu, emu.to_device(psa), gb[2], rm, rk)
    sfb = sf_map(emu, emu.to_device(psb), gb[3], rn, rk, split=meta["cluster"][0])
    maps = [emu.tensor_map(da, (1, m, k), tdt, (1, am, ak), swizzle=sw[0]),
            emu.tensor_map(db, (1, n, k), tdt, (1, bn, bk), swizzle=sw[1]), sfa, sfb,
            emu.tensor_map(dd, (1, m, n), "bf16", (1, dm, dn), swizzle=sw[4])]
    tiles_m, tiles_n = cdiv(m, meta["mma_tile"][0]), cdiv(n, meta["mma_tile"][1])
    args = [bytes(prog.params[0].size), maps[0], i32s(m, k, 1), maps[1], i32s(n, k, 1), maps[2], i32s(rm, rk, 1),
            maps[3], i32s(rk, rn, 1), maps[4], i32s(m, n, 1), *scheduler_params(tiles_m, tiles_n, 1)]
    launch(emu, prog, meta, tiles_m, tiles_n, args, ctas)
    out = emu.to_host(dd, (m, n), np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    return out, ref.astype(ml_dtypes.bfloat16).astype(np.float64)


def test_fixture_metadata_matches_ptx():
    for name in DENSE + MX:
        ptx, meta = fixture(name)
        assert f".visible .entry {meta['entry']}(" in ptx and ".target sm_100a" in ptx, name
        params = re.findall(rf"^\s*\.param (.*) {meta['entry']}_param_\d+(\[\d+\])?,?$", ptx, re.M)
        # TiledMMA state, (tensor map, coordinate shape) per operand (MX: A, B, SFA, SFB, D), the
        # scheduler's 17 i32
        maps = len(meta["boxes"])
        assert [size for _, size in params[1:1 + 2 * maps]] == ["[128]", "[12]"] * maps, name
        assert len(params) == 1 + 2 * maps + 17 and all(t == ".u32" for t, _ in params[1 + 2 * maps:]), name
        assert f".reqntid {meta['block'][0]}" in ptx and meta["cute_dsl_version"] == "4.8.1", name


@pytest.mark.sim_kernel
@pytest.mark.parametrize("name,shape,ctas", [
    ("cute_dsl_gemm_sm100_1sm", (200, 136, 200), 2),       # 2 x 2 tiles (ragged M, N), K tail of 8
    ("cute_dsl_gemm_sm100_1sm", (129, 8, 8), 1),           # one k-tile, mostly out of bounds
    ("cute_dsl_gemm_sm100_2sm", (300, 264, 136), 2),       # 2 x 2 pair tiles on 2 pairs
    ("cute_dsl_gemm_sm100_pair_m128", (200, 136, 72), 1),  # 2 x 2 pair tiles (64 rows per CTA) on 1 pair
])
def test_dense_gemm_bit_exact(name, shape, ctas, rng, sim_seed):
    ptx, _ = fixture(name)
    for needle in ("tcgen05.alloc", "tcgen05.mma", "tcgen05.commit", "tcgen05.ld.sync.aligned.32x32b",
                   "cp.async.bulk.tensor.3d.global.shared::cta", "elect.sync"):
        assert needle in ptx, needle
    out, ref = run_dense(name, *shape, rng, ctas)
    assert np.array_equal(out, ref), f"input seed {rng.seed_value}, chaos seed {sim_seed}"


@pytest.mark.sim_kernel
@pytest.mark.parametrize("sm_count", [1, 2, 132])
def test_cluster_launch_control_gemm_bit_exact(sm_count, rng, sim_seed):
    """CuTe DSL's dynamic persistent GEMM: one CTA per tile is launched, and each running CTA's
    scheduler warp asks ``clusterlaunchcontrol.try_cancel`` for an unstarted one's tile. On 1
    or 2 SMs most CTAs never start (their tiles are done by the running ones); on 132 every CTA
    starts and each request fails. Every tile exactly once either way (bit-exact D)."""
    ptx, _ = fixture("cute_dsl_gemm_sm100_clc")
    for needle in ("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes",
                   "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128", ".reg .b128"):
        assert needle in ptx, needle
    info = {}
    out, ref = run_dense("cute_dsl_gemm_sm100_clc", 520, 392, 72, rng, sm_count=sm_count, launch_info=info)
    assert np.array_equal(out, ref), f"input seed {rng.seed_value}, chaos seed {sim_seed}"
    assert info["clusters_started"] + info["clusters_cancelled"] == 5 * 4, info
    if sm_count == 132:
        assert info["clusters_cancelled"] == 0, info
    elif sim_seed is None:              # eager: every request succeeds while a tile waits
        assert info["clusters_started"] == sm_count, info
    else:                               # some requests fail, and those clusters run themselves
        assert info["clusters_cancelled"] > 0, info


@pytest.mark.sim_kernel
@pytest.mark.parametrize("name,shape", [("cute_dsl_gemm_sm100_mxfp8", (200, 136, 208)),
                                        ("cute_dsl_gemm_sm100_mxfp8", (129, 72, 64)),
                                        ("cute_dsl_gemm_sm100_nvfp4", (200, 136, 320)),
                                        ("cute_dsl_gemm_sm100_nvfp4", (72, 264, 64)),
                                        ("cute_dsl_gemm_sm100_mxfp8_2sm", (300, 200, 208))])
def test_block_scaled_gemm_bit_exact(name, shape, rng, sim_seed):
    """CuTe DSL's block-scaled GEMMs (MXFP8: ``kind::mxf8f6f4.block_scale``; NVFP4: packed e2m1 by
    16U4_ALIGN8B maps, ``kind::mxf4nvf4.block_scale.block16`` with UE4M3 factors): the factors'
    atoms TMA-loaded through nested 4-D maps, ``tcgen05.cp`` into TMEM, the scaled MMAs; bf16 D
    equal to the exactly scaled product rounded once (ragged M, N and K tails). The CTA pair's
    (cta_group::2): each CTA's factors copied into its own TMEM by the even CTA's
    ``tcgen05.cp.cta_group::2``, the 256-row scaled MMA."""
    ptx, _ = fixture(name)
    for needle in (".block_scale", ".32x128b.warpx4", "cp.async.bulk.tensor.4d"):
        assert needle in ptx, needle
    out, ref = run_block_scaled(name, *shape, rng)
    assert np.array_equal(out, ref), f"input seed {rng.seed_value}, chaos seed {sim_seed}"
