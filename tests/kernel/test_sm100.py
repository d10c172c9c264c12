"""Blackwell (sm_100a, issue 24): the talk's single-tile tcgen05 GEMM from the library's layers --
the real compiled sm_100a PTX on the emulator (the only place it can run here), shapes that are
not tile multiples, fresh small-integer inputs (every partial sum exact, so the f32 result must
equal the float64 reference bit for bit); its SASS (UTC*MMA per k-tile, no spills); the
instruction and shared-memory descriptors against the emulator's independent decoders; and
the up-front errors of configs sm_100a cannot run yet."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError
from cutedsl.collective.tmem_epilogue import EPILOGUE_COLUMNS

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
      "e5m2": ml_dtypes.float8_e5m2, "tf32": np.float32}
#: elements per k-tile of 128 bytes (one 128-byte swizzle row of K)
K_TILE = {"f16": 64, "bf16": 64, "e4m3": 128, "e5m2": 128, "tf32": 32}


def run(cfg, m, n, k, rng, backend, l=None):
    lead = (l,) if l else ()
    a = rng.integers(-4, 5, lead + (m, k)).astype(NP[cfg.dtype])
    b = rng.integers(-4, 5, lead + (k, n)).astype(NP[cfg.b_dtype or cfg.dtype])
    if cfg.b_major == "K":          # memory order picks the layout: keep the config's
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    d = Gemm(cfg, backend)(a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    what = f"{cfg} m={m} n={n} k={k}"
    if cfg.out_dtype == "f32":
        assert np.array_equal(d.astype(np.float64), ref), what
    else:
        assert np.array_equal(d, ref.astype(np.float32).astype(d.dtype)), what


@pytest.mark.parametrize("dtype,b_dtype,tile_n,b_major,out", [
    ("f16", None, 128, "MN", "f32"),
    ("bf16", None, 64, "K", "bf16"),
    ("f16", None, 256, "K", "f16"),
    ("e4m3", "e5m2", 128, "K", "f32"),
    ("tf32", None, 128, "K", "f32"),
])
def test_single_tile_exact(dtype, b_dtype, tile_n, b_major, out, rng, sim):
    """2 x 2 tiles (the last ones partial), 3 k-tiles (the last partial)."""
    k_tile = K_TILE[dtype]
    cfg = GemmConfig(arch="sm_100a", schedule="single_tile", dtype=dtype, b_dtype=b_dtype, out_dtype=out,
                     tile=(128, tile_n, k_tile), b_major=b_major)
    assert cfg.epilogue == "global"                 # sm_100a's default store
    m = 128 + int(rng.integers(1, 128))
    n = tile_n + int(rng.integers(1, tile_n))
    k = 2 * k_tile + int(rng.integers(1, k_tile))
    run(cfg, m, n, k, rng, sim)


def test_single_tile_batched_and_fused(rng, sim):
    """A batch of 2 with bias + relu fused into the TMEM epilogue."""
    cfg = GemmConfig(arch="sm_100a", schedule="single_tile", epilogue=["bias:col", "relu", "global"],
                     batched=True)
    m, n, k = 100, 70, 90
    a = rng.integers(-4, 5, (2, m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (2, k, n)).astype(np.float16)
    bias = rng.integers(-9, 10, n).astype(np.float32)
    d = Gemm(cfg, sim)(a, b, bias=bias)
    ref = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)) + bias, 0)
    assert np.array_equal(d.astype(np.float64), ref)


def test_k_shorter_than_one_k_step(rng, sim):
    """K = 3: one k-tile, mostly TMA zero fill."""
    run(GemmConfig(arch="sm_100a", schedule="single_tile"), 70, 50, 3, rng, sim)


@pytest.mark.parametrize("dtype,opcode", [("f16", "UTCHMMA"), ("e4m3", "UTCQMMA"), ("tf32", "UTCHMMA")])
def test_sass_has_tcgen05_mma_per_k_step_and_no_spills(dtype, opcode):
    cfg = GemmConfig(arch="sm_100a", schedule="single_tile", dtype=dtype)
    k = cfg.kernel().compile()
    r = k.resources
    h = r.sass
    assert h.get(opcode) == 4                       # one k-tile = 4 k-steps of 32 bytes
    assert h.get("UTCBAR") == 2 and h.get("LDTM") == 128 // EPILOGUE_COLUMNS    # commits; TMEM loads
    assert "HGMMA" not in h and "QGMMA" not in h
    assert r.spill_stores == r.spill_loads == 0 and r.registers <= 128
    assert k.ptx.count("tcgen05.mma.cta_group::1.kind::") == 4


def test_descriptors_match_the_emulator_decoders():
    """The atom's instruction and shared-memory descriptors decode, in the emulator's independent
    decoders, to the fields they were built from."""
    from cutedsl.atom.tcgen05 import instr_descriptor, smem_descriptor_bits
    from cutedsl.atom.wgmma import SmemMatrix
    from cutedsl.sim.instructions.tcgen05_mma import decode_idesc
    from cutedsl.sim.engines.wgmma_layout import decode_desc_sm100
    f = decode_idesc(instr_descriptor(128, 256, "bf16", "f16", "K", "MN"), "f16")
    assert (f["m"], f["n"], f["a_type"], f["b_type"], f["mn_a"], f["mn_b"]) == (128, 256, "bf16", "f16", 0, 1)
    f = decode_idesc(instr_descriptor(128, 64, "e4m3", "e5m2"), "f8f6f4")
    assert (f["a_type"], f["b_type"]) == ("e4m3", "e5m2")
    for major in ("K", "MN"):
        lay = SmemMatrix(128, "f16", major)
        assert decode_desc_sm100(smem_descriptor_bits(0x4400, lay)) == (0x4400, lay.lbo, lay.sbo, 0, 128)


@pytest.mark.parametrize("kw,match", [
    (dict(schedule="multistage"), r"schedule 'multistage' has no sm_100a kernel \(yet\); sm_100a has "
                                  r"'single_tile' or 'warp_specialized'"),
    (dict(schedule="cooperative"), r"schedule 'cooperative' has no sm_100a kernel"),
    (dict(schedule="warp_specialized", stages=1), r"stages must be 2\.\.7"),
    (dict(schedule="single_tile", epilogue="tma", out_dtype="e4m3", dtype="e4m3"),
     r"the sm_100a TMA-store epilogue writes f32, f16 or bf16 and has no beta \* C"),
    (dict(schedule="single_tile", tile=(64, 128, 64)), r"tile BLOCK_M must be 128, got 64"),
    (dict(schedule="single_tile", dtype="tf32", b_major="MN"), r"tf32 operands must be K-major"),
])
def test_configs_sm100a_cannot_run_yet(kw, match):
    with pytest.raises(ConfigError, match=match):
        GemmConfig(arch="sm_100a", **kw)


def test_for_problem_and_backend_choice():
    """The model picks sm_100a's persistent kernel (on a small problem its 64-row tiles: one
    CTA's M = 64 MMA); without an sm_100a GPU the run goes to the emulator."""
    from cutedsl.runtime.selection import resolve
    cfg = GemmConfig.for_problem(300, 200, 100, arch="sm_100a")
    assert (cfg.schedule, cfg.epilogue, cfg.tile, cfg.mma_sm) == ("warp_specialized", "global", (64, 64, 64), 1)
    assert GemmConfig.for_problem(4096, 4096, 4096, arch="sm_100a").tile == (128, 256, 64)
    assert "sm_100a's persistent tcgen05 kernel" in cfg.explain()
    be, why = resolve("auto", "sm_100a")
    assert be.name == "sim" and "sm_100a kernels need a sm_100a GPU" in why


# -- the persistent warp-specialized kernel --------------------------------------------------

@pytest.mark.parametrize("dtype,tile_n,b_major,cluster,out", [
    ("f16", 128, "MN", (1, 1), "f32"),
    ("bf16", 256, "K", (1, 1), "bf16"),
    ("f16", 64, "K", (2, 1), "f32"),
    ("e4m3", 128, "K", (1, 2), "f16"),
    ("f16", 128, "MN", (2, 2), "f32"),
    ("tf32", 128, "K", (2, 1), "f32"),
])
def test_warp_specialized_exact(dtype, tile_n, b_major, cluster, out, rng, sim):
    """2 SMs for 3 x 3 tiles or more (every CTA runs several tiles through both accumulator
    buffers), 3 k-tiles through 2 stages, partial tiles everywhere."""
    k_tile = K_TILE[dtype]
    cfg = GemmConfig(arch="sm_100a", schedule="warp_specialized", dtype=dtype, out_dtype=out,
                     tile=(128, tile_n, k_tile), b_major=b_major, cluster=cluster, stages=2, sm_count=2)
    m = 2 * 128 * cluster[0] + int(rng.integers(1, 128))
    n = 2 * tile_n * cluster[1] + int(rng.integers(1, tile_n))
    k = 2 * k_tile + int(rng.integers(1, k_tile))
    run(cfg, m, n, k, rng, sim)


def test_warp_specialized_batched_fused(rng, sim):
    cfg = GemmConfig(arch="sm_100a", epilogue=["scale_a:row", "bias:col", "relu", "global"], batched=True, sm_count=3)
    assert cfg.schedule == "warp_specialized"       # sm_100a's default
    m, n, k = 150, 140, 70
    a = rng.integers(-4, 5, (3, m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (k, n)).astype(np.float16)      # shared by the batch
    sa = rng.integers(-2, 3, m).astype(np.float32)
    bias = rng.integers(-9, 10, n).astype(np.float32)
    d = Gemm(cfg, sim)(a, b, scale_a=sa, bias=bias)
    ref = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)) * sa[:, None] + bias, 0)
    assert np.array_equal(d.astype(np.float64), ref)


def _planted(release_first: bool = False, no_acc_wait: bool = False):
    """A kernel with one synchronisation removed from the epilogue side."""
    from cutedsl.kernel.warp_specialized_sm100 import Sm100WarpSpecializedGemmKernel

    class Planted(Sm100WarpSpecializedGemmKernel):
        def epilogue_loop(self, args, smem, accp, tmem):
            if release_first:           # release the buffer before reading it
                real = accp.consumer_release
                accp.consumer_wait = (lambda wait: (lambda st: (wait(st), real(st))))(accp.consumer_wait)
                accp.consumer_release = lambda st: None
            if no_acc_wait:             # read the accumulator without waiting for its commit
                accp.consumer_wait = lambda st: None
            return super().epilogue_loop(args, smem, accp, tmem)
    return Planted


@pytest.mark.parametrize("kw,match", [
    (dict(release_first=True), r"data race on tensor memory lane \d+ column \d+"),
    (dict(no_acc_wait=True), r"data race on tensor memory lane \d+ column \d+"),
])
def test_planted_tmem_bugs_are_reported(kw, match, rng):
    """The next tile's MMA overwriting an accumulator the epilogue has not read yet, and the
    epilogue's tcgen05.ld before the commit's mbarrier wait: each reported in one eager run."""
    from cutedsl.sim import RaceError, SimBackend
    cfg = GemmConfig(arch="sm_100a", tile=(128, 64, 64), stages=2, sm_count=1)
    a = rng.integers(-4, 5, (300, 100)).astype(np.float16)
    b = rng.integers(-4, 5, (100, 200)).astype(np.float16)
    with pytest.raises(RaceError, match=match):
        Gemm(cfg, SimBackend(), kernel=_planted(**kw))(a, b)


@pytest.mark.parametrize("kw,mma_budget,producer_budget", [
    (dict(), 42, 33), (dict(cluster=(2, 1), mma_sm=2), 42, 33)])
def test_warp_specialized_sass(kw, mma_budget, producer_budget):
    """Per k-tile (128 x 256, B K-major): the MMA warp's loop issues the 4 UTCHMMA straight (no
    loop around each, no branch: an elect.sync per instruction keeps the loop uniform) and the
    release commit, and the producer warp's loop its 2 UTMALDG (ptxas unrolls it: counted per
    k-tile); the MMA loop within CuTe DSL's (42, 1SM) and the producer within 10 % of CUTLASS
    4.2's (30) -- docs/measurements.md; no spills, no register-to-uniform moves."""
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    k = GemmConfig(arch="sm_100a", tile=(128, 256, 64), stages=4, b_major="K", **kw).kernel().compile()
    r = k.resources
    assert r.spill_stores == r.spill_loads == 0
    loop = kernel_hot_loop(k, "UTCHMMA")
    h = loop["histogram"]
    assert h.get("UTCHMMA") == 4 and h.get("UTCBAR") == 1 and h.get("SYNCS") == 1 and "ELECT" not in h, loop
    assert loop["instructions"] <= mma_budget, loop
    assert not {"R2UR", "BSSY", "ELECT"} & set(h), loop
    prod = kernel_hot_loop(k, "UTMALDG")
    k_tiles = prod["histogram"]["UTMALDG"] / 2          # A and B boxes per k-tile
    assert k_tiles in (1, 2) and prod["instructions"] / k_tiles <= producer_budget, prod
    assert "R2UR" not in prod["histogram"], prod         # the ring state stays uniform


# -- CTA pairs: the 2SM kernel (cta_group::2) ----------------------------------------------

@pytest.mark.parametrize("dtype,tile_n,b_major,out", [
    ("f16", 128, "MN", "f32"),
    ("bf16", 64, "K", "bf16"),
    ("e5m2", 256, "K", "f32"),
    ("tf32", 128, "K", "f32"),
])
def test_cta_pair_kernel_exact(dtype, tile_n, b_major, out, rng, sim):
    """mma_sm=2 on a 2x1 cluster: 256 x tile_n per pair, each CTA loading its 128 A rows and
    tile_n / 2 B rows into its own ring, both completing on the even CTA's barriers; 4 SMs
    (2 pairs) for 3 x 3 pair tiles or more; ragged edges."""
    k_tile = K_TILE[dtype]
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, out_dtype=out, tile=(128, tile_n, k_tile), b_major=b_major,
                     cluster=(2, 1), mma_sm=2, stages=2, sm_count=4)
    m = 2 * 256 + int(rng.integers(1, 256))
    n = 2 * tile_n + int(rng.integers(1, tile_n))
    k = 2 * k_tile + int(rng.integers(1, k_tile))
    run(cfg, m, n, k, rng, sim)


def test_cta_pair_sass_and_smem():
    """The pair's MMA loop issues UTCHMMA.2CTA and releases by UTCBAR.2CTA.MULTICAST; each CTA's
    B stage is half the 1SM kernel's (more stages fit)."""
    from cutedsl.compiler import toolchain
    one = GemmConfig(arch="sm_100a", tile=(128, 256, 64), cluster=(2, 1))
    two = GemmConfig(arch="sm_100a", tile=(128, 256, 64), cluster=(2, 1), mma_sm=2)
    assert two.kernel().mainloop.b_tile_rows == 128 and two.resolved_stages() > one.resolved_stages()
    k = GemmConfig(arch="sm_100a", tile=(128, 256, 64), cluster=(2, 1), mma_sm=2, stages=4).kernel().compile()
    text = toolchain.sass(k.cubin)
    ops = {ln.split()[1] for ln in text.splitlines() if "UTC" in ln and len(ln.split()) > 1}
    assert {"UTCHMMA.2CTA", "UTCBAR.2CTA.MULTICAST"} <= ops, ops
    assert k.resources.spill_stores == 0 and "cta_group::2" in k.ptx


@pytest.mark.parametrize("kw,match", [
    (dict(mma_sm=2), r"mma_sm=2 \(one MMA shared by a CTA pair: 256 or 128 rows\) runs on cluster \(2, 1\)"),
    (dict(mma_sm=2, cluster=(2, 1), tile=(128, 64, 64), b_major="MN"), r"tile_n / 2 = 32 columns per CTA"),
    (dict(mma_sm=2, schedule="single_tile"), r"mma_sm=2 \(a CTA-pair MMA\) needs arch='sm_100a' and "
                                             r"schedule='warp_specialized'"),
    (dict(mma_sm=3), r"mma_sm must be 1 or 2"),
])
def test_cta_pair_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        GemmConfig(arch="sm_100a", **kw)


# -- block-scaled MX (MXFP8) -----------------------------------------------------------------

def mx_operands(rng, m, n, k, dtype):
    """Small integers on the element grid and factors near 1 (E8M0 2^-3..2^3, UE4M3 0.5..2): every
    product and partial sum has few significant bits, well inside f32's exact range, so the GEMM
    is exact."""
    from cutedsl.device import mx
    npt = mx.ELEMENTS[mx.MX_DTYPES[dtype]][0]
    qa = rng.integers(-4, 5, (m, k)).astype(npt)
    qb = rng.integers(-4, 5, (n, k)).astype(npt)
    return qa, qb, mx.random_scales(rng, m, k, dtype), mx.random_scales(rng, n, k, dtype)


@pytest.mark.parametrize("dtype,k_tile", [("mxfp8", 128), ("mxfp8-e5m2", 128), ("mxfp4", 256), ("nvfp4", 256)])
def test_mx_gemm_exact(dtype, k_tile, rng, sim):
    """Block-scaled: each stage brings A's and B's 512-byte scale atoms by TMA (MXFP4: two per
    operand, its k-tile is 256; NVFP4: four, a factor per 16), the MMA warp copies them to TMEM
    (tcgen05.cp) and issues kind::mxf8f6f4.block_scale (MXFP4: kind::mxf4 on packed e2m1, two
    factors per instruction; NVFP4: kind::mxf4nvf4.block16, four UE4M3 factors) with the blocks'
    factor bytes; 2 x 2 tiles (ragged) on 2 SMs, 3 k-tiles (the last partial: K not a multiple
    of 32 either -- odd, for the 4-bit types: half a byte of padding)."""
    from cutedsl.device import mx
    m = 128 + int(rng.integers(1, 128))
    n = 128 + int(rng.integers(1, 128))
    k = 2 * k_tile + 2 * int(rng.integers(1, 50)) + 1
    qa, qb, sa, sb = mx_operands(rng, m, n, k, dtype)
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, stages=2, sm_count=2)
    assert (cfg.tile, cfg.b_major, cfg.schedule) == ((128, 128, k_tile), "K", "warp_specialized")
    d = Gemm(cfg, sim)(qa, qb.T, a_scales=mx.pack_scales(sa, dtype), b_scales=mx.pack_scales(sb, dtype))
    ref = mx.dequantize(qa, sa, dtype) @ mx.dequantize(qb, sb, dtype).T
    assert np.array_equal(d.astype(np.float64), ref)


def test_mx_host_helpers_round_trip_and_layout(rng):
    from cutedsl.device import mx
    x = rng.standard_normal((150, 200)) * 3
    q, s = mx.quantize(x)
    assert q.dtype == mx.ELEMENTS["e4m3"][0] and s.shape == (150, 7) and s.dtype == np.uint8
    err = np.abs(mx.dequantize(q, s) - x)
    blockmax = np.repeat(np.abs(np.pad(x, ((0, 0), (0, 24)))).reshape(150, 7, 32).max(2), 32, axis=1)[:, :200]
    assert (err <= blockmax / 8 + 1e-12).all()        # e4m3: 3 mantissa bits, saturation at 448 of < 512
    p = mx.pack_scales(s)
    assert p.shape == (mx.packed_rows(150, 200), 128) == (16, 128)
    flat = p.reshape(-1, 512)
    for i, j in ((0, 0), (37, 5), (149, 6), (130, 3)):
        atom = (i // 128) * 2 + j // 4
        assert flat[atom][(i % 32) * 16 + (i % 128 // 32) * 4 + j % 4] == s[i, j]
    with pytest.raises(Exception, match=r"scales must be a 2-D uint8 array of factor codes \(rows, blocks\), or 3-D "
                                        r"for a batch, got float32"):
        mx.pack_scales(s.astype(np.float32))


def test_mx_errors(rng):
    from cutedsl.device import mx
    from cutedsl.errors import ArgumentError
    with pytest.raises(ConfigError, match=r"dtype 'mxfp8' \(block-scaled MX inputs\) needs a block-scaled kernel"):
        GemmConfig(dtype="mxfp8")
    with pytest.raises(ConfigError, match=r"built for tile 128 x 128 \(per CTA; a CTA pair with mma_sm=2: 256 x 128\)"):
        GemmConfig(arch="sm_100a", dtype="mxfp8", tile=(128, 256, 128))
    qa, qb, sa, sb = mx_operands(rng, 100, 100, 64, "mxfp8")
    g = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp8", stages=2), "sim")
    with pytest.raises(ArgumentError, match=r"a_scales must have shape \(sfa_rows, 128\) = \(4, 128\) for this "
                                            r"problem, got \(100, 2\)"):
        g(qa, qb.T, a_scales=sa, b_scales=mx.pack_scales(sb))
    with pytest.raises(ArgumentError, match=r"missing epilogue argument 'b_scales'"):
        g(qa, qb.T, a_scales=mx.pack_scales(sa))


@pytest.mark.parametrize("dtype,mma,cps,anchor_mma", [
    ("mxfp8", "UTCQMMA", 2, 64), ("mxfp6", "UTCQMMA", 2, 64), ("mxfp4", "UTCOMMA", 4, 55),
    ("nvfp4", "UTCOMMA", 8, 67)])
def test_mx_sass(dtype, mma, cps, anchor_mma):
    """The MMA warp's loop per k-tile: the factor atoms' UTCCP (MXFP8 one per operand, MXFP4 two),
    4 block-scaled MMAs (UTCQMMA for kind::mxf8f6f4, UTCOMMA for kind::mxf4), the release, with
    no branch and no register-to-uniform move; the MMA and the producer loop (4 UTMALDG: A, B
    and their factors) within 10 % of CuTe DSL's block-scaled sm100 GEMM of the same tile
    (``anchor_mma``; producer 44: docs/measurements.md; MXFP6 is the same kind::mxf8f6f4 loop,
    held to MXFP8's anchor); no spills."""
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    k = GemmConfig(arch="sm_100a", dtype=dtype, stages=4).kernel().compile()
    loop = kernel_hot_loop(k, mma)
    h = loop["histogram"]
    assert (h.get("UTCCP"), h.get(mma), h.get("UTCBAR")) == (cps, 4, 1), h
    assert not {"R2UR", "BSSY", "ELECT"} & set(h), loop
    assert loop["instructions"] <= 1.1 * anchor_mma, loop
    prod = kernel_hot_loop(k, "UTMALDG")
    assert prod["histogram"]["UTMALDG"] == 4 and prod["instructions"] <= 1.1 * 44, prod
    assert k.resources.spill_stores == 0


def test_mxfp4_host_helpers(rng):
    """e2m1 quantisation (emax 2: every block's largest value lands in [4, 8) before saturating at
    6), nibble packing (element 2i low), and the scale packing of whole 2-atom k-tiles."""
    from cutedsl.device import mx
    x = rng.standard_normal((130, 300)) * 5
    q, s = mx.quantize(x, "mxfp4")
    assert q.dtype == mx.ELEMENTS["e2m1"][0] and s.shape == (130, 10)
    amax = np.abs(np.pad(x, ((0, 0), (0, 20)))).reshape(130, 10, 32).max(2)
    assert np.array_equal(s.astype(int) - 127, np.floor(np.log2(amax)).astype(int) - 2)
    p = mx.pack_fp4(q)
    assert p.shape == (130, 150) and p.dtype == np.uint8
    codes = q.view(np.uint8) & 0xF
    assert p[7, 11] == codes[7, 22] | codes[7, 23] << 4
    assert mx.pack_fp4(q[:, :3]).shape == (130, 2) and mx.pack_fp4(q[:, :3])[0, 1] == codes[0, 2]
    # 10 blocks = 2.5 atoms per row block: padded to whole k-tiles of 2 atoms (4 per row block)
    assert mx.pack_scales(s, "mxfp4").shape == (mx.packed_rows(130, 300, "mxfp4"), 128) == (2 * 4 * 4, 128)
    assert mx.pack_scales(s).shape == (2 * 3 * 4, 128)
    with pytest.raises(Exception, match=r"pack_fp4 takes ml_dtypes.float4_e2m1fn values, got float64"):
        mx.pack_fp4(x)
    with pytest.raises(Exception, match=r"block-scaled dtype must be one of mxfp8, mxfp8-e5m2, mxfp6, mxfp6-e3m2, "
                                        r"mxfp4, nvfp4, e4m3, e5m2, e2m3, e3m2, e2m1, got 'e4m2'"):
        mx.quantize(x, "e4m2")


def test_mxfp4_errors(rng):
    from cutedsl.device import mx
    with pytest.raises(ConfigError, match=r"packed e2m1 multiplies packed e2m1 only \(tcgen05.mma.kind::mxf4\), "
                                          r"got e2m1 x e4m3"):
        GemmConfig(arch="sm_100a", dtype="mxfp4", b_dtype="mxfp8")
    with pytest.raises(ConfigError, match=r"BLOCK_K must be 256"):
        GemmConfig(arch="sm_100a", dtype="mxfp4", tile=(128, 128, 128))
    qa, qb, sa, sb = mx_operands(rng, 100, 100, 64, "mxfp4")
    g = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp4", stages=2), "sim")
    with pytest.raises(ArgumentTypeError, match=r"a has dtype float32, the config expects e2m1"):
        g(qa.astype(np.float32), qb.T, a_scales=mx.pack_scales(sa, "mxfp4"), b_scales=mx.pack_scales(sb, "mxfp4"))
    with pytest.raises(ArgumentError, match=r"a_scales must have shape \(sfa_rows, 128\) = \(8, 128\)"):
        g(qa, qb.T, a_scales=mx.pack_scales(sa), b_scales=mx.pack_scales(sb, "mxfp4"))


def test_nvfp4_host_helpers(rng):
    """NVFP4: one UE4M3 factor per 16 elements, the block's amax / 6 rounded to e4m3 (so the
    block's largest element lands near 6); four atoms per 256-element k-tile, padded with 1.0
    (0x38: E8M0's 127 would be an e4m3 NaN)."""
    from cutedsl.device import mx
    x = rng.standard_normal((130, 300)) * 5
    q, s = mx.quantize(x, "nvfp4")
    assert q.dtype == mx.ELEMENTS["e2m1"][0] and s.shape == (130, 19) and s.dtype == np.uint8
    amax = np.abs(np.pad(x, ((0, 0), (0, 4)))).reshape(130, 19, 16).max(2)
    assert np.array_equal(s, (amax / 6).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    err = np.abs(mx.dequantize(q, s, "nvfp4") - x)
    assert (err <= np.repeat(amax, 16, axis=1)[:, :300] / 4).all()      # e2m1's coarsest gap is 2 of 6
    p = mx.pack_scales(s, "nvfp4")
    assert p.shape == (mx.packed_rows(130, 300, "nvfp4"), 128) == (2 * 8 * 4, 128)
    flat = p.reshape(-1, 512)
    assert flat[0][(5 % 32) * 16 + 2] == s[5, 2] and flat[7][511] == 0x38    # the padding of the 2nd k-tile
    assert mx.blocks(300, "nvfp4") == 19 and mx.blocks(300) == 10
    with pytest.raises(ConfigError, match=r"NVFP4 with NVFP4\): dtype 'nvfp4', b_dtype 'mxfp4'"):
        GemmConfig(arch="sm_100a", dtype="nvfp4", b_dtype="mxfp4")


def test_tf32_drops_the_low_mantissa_bits(rng, sim):
    """tf32 (kind::tf32): f32 operands with their 13 low mantissa bits ignored by the tensor core,
    products exact, one f32 rounding per instruction (the emulator's model): the result matches
    float64 over the truncated inputs to f32 rounding, and differs from the untruncated product."""
    cfg = GemmConfig(arch="sm_100a", dtype="tf32", sm_count=2)
    m, n, k = 150, 70, 45
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = np.ascontiguousarray(rng.standard_normal((n, k)).astype(np.float32)).T      # K-major B
    d = Gemm(cfg, sim)(a, b).astype(np.float64)

    def tf32(x):
        return (np.ascontiguousarray(x).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    ref = tf32(a) @ tf32(b)
    assert np.max(np.abs(d - ref)) <= 1e-5 * np.max(np.abs(ref))
    assert np.max(np.abs(d - a.astype(np.float64) @ b.astype(np.float64))) > 1e-4
