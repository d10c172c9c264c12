"""Atoms: descriptor bits, fragment layout, and the PTX each atom emits."""
import pytest

from cutedsl.atom.wgmma import SmemMatrix, descriptor_bits, fragment_coords


def test_descriptor_fields_match_ptx_isa():
    a = SmemMatrix(128, "f16", "K")
    d = descriptor_bits(0x2400, a)
    assert d & 0x3FFF == 0x2400 >> 4                 # start address >> 4
    assert (d >> 16) & 0x3FFF == 1                   # LBO 16 B (unused for swizzled K-major)
    assert (d >> 32) & 0x3FFF == 1024 >> 4           # SBO: 8 rows x 128 B
    assert (d >> 49) & 7 == 0 and d >> 62 == 1       # base offset 0, 128-byte swizzle
    b = SmemMatrix(256, "bf16", "MN")
    d = descriptor_bits(0x8000, b)
    assert (d >> 16) & 0x3FFF == 8192 >> 4           # LBO: next 64 columns (8 KiB box)
    assert b.k_step_offset(3) == 3 * 2048 and a.k_step_offset(3) == 96 and a.block_offset(1) == 8192


def test_operand_layout_rules():
    with pytest.raises(ValueError, match="f16, bf16, e4m3, e5m2 or tf32 operands, got .f32."):
        SmemMatrix(64, "f32")
    with pytest.raises(ValueError, match="e4m3 operands are K-major only"):
        SmemMatrix(128, "e4m3", "MN")
    f8 = SmemMatrix(128, "e4m3")          # a k-tile is one 128-B row: 128 elements, k32 steps
    assert f8.traits.k_tile == 128 and f8.traits.k_step == 32 and f8.traits.k_steps == 4
    assert f8.k_step_offset(3) == 96 and f8.block_offset(1) == 8192 and f8.sbo == 1024
    with pytest.raises(ValueError, match="multiple of 64"):
        SmemMatrix(96, "f16", "MN")


@pytest.mark.parametrize("n", [8, 64, 128, 256])
def test_fragment_layout_is_a_bijection(n):
    seen = {fragment_coords(t, i) for t in range(128) for i in range(n // 2)}
    assert seen == {(r, c) for r in range(64) for c in range(n)}
    # thread 0 holds (0,0),(0,1),(8,0),(8,1),(0,8)... (PTX ISA wgmma D fragment figure)
    assert [fragment_coords(0, i) for i in range(6)] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9)]
    assert fragment_coords(37, 2) == (16 + 1 + 8, 2)


def _compile(kernel):
    k = kernel.compile(use_cache=False)
    return k


def _norm(ptx):
    return " ".join(ptx.split())


def test_mbarrier_and_tma_ptx():
    from cutedsl.kernel import TmaSaxpyKernel
    ptx = _norm(_compile(TmaSaxpyKernel()).ptx)
    assert "mbarrier.init.shared.b64" in ptx
    assert "mbarrier.arrive.expect_tx.shared.b64" in ptx
    assert "mbarrier.try_wait.parity.shared.b64" in ptx
    assert "fence.mbarrier_init.release.cluster" in ptx
    assert ptx.count("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 2
    assert "cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group" in ptx
    assert "fence.proxy.async.shared::cta" in ptx
    assert "cp.async.bulk.commit_group" in ptx and "cp.async.bulk.wait_group.read 0" in ptx
    assert "prefetch.tensormap" not in ptx   # TMA SAXPY does not prefetch


@pytest.mark.parametrize("b_major,trans_b", [("MN", "1"), ("K", "0")])
def test_wgmma_ptx_layouts(b_major, trans_b):
    from cutedsl.kernel import SingleTileGemmKernel
    from cutedsl.collective import GlobalEpilogue
    k = _compile(SingleTileGemmKernel(64, 64, "bf16", "f32", b_major, GlobalEpilogue))
    lines = [l for l in k.ptx.splitlines() if "wgmma.mma_async" in l]
    assert len(lines) == 4 and all("m64n64k16.f32.bf16.bf16" in l for l in lines)
    # operand tail: scale-d, imm-scale-a, imm-scale-b, imm-trans-a (K-major A = 0), imm-trans-b
    assert all(l.replace(" ", "").endswith(f"1,1,0,{trans_b};") for l in lines)
    assert "wgmma.fence.sync.aligned" in k.ptx and "wgmma.commit_group.sync.aligned" in k.ptx
    assert "wgmma.wait_group.sync.aligned 0" in _norm(k.ptx)
    assert k.resources.sass["HGMMA"] == 4 and k.resources.ptxas_messages == ()


def test_mma_traits_derive_every_operand_size():
    """Issue 19: K tile = swizzle bytes / element bytes; the sizes the layers used to write down."""
    from cutedsl.atom.mma_traits import mma_traits
    from cutedsl.errors import ConfigError
    t = mma_traits("bf16")
    assert (t.elem_bytes, t.k_tile, t.k_step, t.k_steps, t.mn_box) == (2, 64, 16, 4, 64)
    assert (t.row_bytes, t.mn_box_bytes, t.core_group_bytes, t.tile_bytes(128)) == (128, 8192, 1024, 16384)
    assert (t.majors_a, t.majors_b) == (("K", "MN"), ("K", "MN"))
    assert (mma_traits("f16", 64).k_tile, mma_traits("f16", 32).k_tile) == (32, 16)
    lay = SmemMatrix(128, "f16", "MN")
    assert (lay.lbo, lay.sbo, lay.k_step_offset(1), lay.tile_bytes) == (8192, 1024, 2048, 16384)
    assert (SmemMatrix(128).k_step_offset(3), SmemMatrix(128).block_offset(1)) == (96, 8192)
    f8 = mma_traits("e4m3")
    assert (f8.elem_bytes, f8.k_tile, f8.k_step, f8.k_steps, f8.tile_bytes(128)) == (1, 128, 32, 4, 16384)
    assert (f8.majors_a, f8.majors_b) == (("K",), ("K",))
    tf = mma_traits("tf32")
    assert (tf.elem_bytes, tf.k_tile, tf.k_step, tf.k_steps, tf.majors_b) == (4, 32, 8, 4, ("K",))
    with pytest.raises(ConfigError, match="takes f16, bf16, e4m3, e5m2 or tf32 operands, got 'f32'"):
        mma_traits("f32")
    with pytest.raises(ConfigError, match="swizzle must be one of"):
        mma_traits("f16", 16)


def test_arch_object():
    from cutedsl.arch import SM90A, get_arch
    from cutedsl.errors import ConfigError
    assert get_arch("sm_90a") is SM90A and SM90A.launch_regs(384) == 168 and SM90A.warps_per_warpgroup == 4
    from cutedsl.arch import SM100A
    assert get_arch("sm_100a") is SM100A and "tcgen05" in SM100A.atoms and "wgmma" not in SM100A.atoms
    with pytest.raises(ConfigError, match="arch must be one of 'sm_90a', 'sm_100a', got 'sm_120a'"):
        get_arch("sm_120a")
    with pytest.raises(ConfigError, match="needs tcgen05, which sm_90a does not have"):
        SM90A.require("tcgen05")
    with pytest.raises(ConfigError, match="needs wgmma, which sm_100a does not have"):
        SM100A.require("wgmma")


def test_fragment_layout_object_matches_the_isa_table():
    """Epilogues read coordinates from the accumulator's layout object (issue 19)."""
    from cutedsl.atom import WgmmaFragment
    f = WgmmaFragment(64, m_blocks=2)
    assert f.regs == 32
    assert {f.coords(t, b, i) for t in range(128) for b in range(2) for i in range(32)} == \
        {(r, c) for r in range(128) for c in range(64)}
    base = (16 * (37 // 32) + (37 % 32) // 4, (37 % 4) * 2)
    for b, i in ((0, 0), (1, 5), (0, 30)):
        dr, dc = f.offset(b, i)
        assert (base[0] + dr, base[1] + dc) == f.coords(37, b, i)
