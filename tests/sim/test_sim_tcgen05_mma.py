"""tcgen05.mma in the emulator (issue 23): a one-tile GEMM in hand-written sm_100a PTX (assembled by
the pinned ptxas first) over every input kind, both majors, each swizzle, A from shared or tensor
memory, M = 64 and 128, checked exactly against numpy on small-integer inputs; the instruction
and shared-memory descriptors' field checks; commit completion and the TMEM race checks."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, SimRuntimeError
from cutedsl.sim.instructions.tcgen05_mma import d_lanes, decode_idesc
from cutedsl.sim.engines.wgmma_layout import decode_desc_sm100
import tc05kit as kit

FMT = {"f16": (np.float16, 0), "bf16": (ml_dtypes.bfloat16, 1), "tf32": (np.float32, 2),
       "e4m3": (ml_dtypes.float8_e4m3fn, 0), "e5m2": (ml_dtypes.float8_e5m2, 1),
       "u8": (np.uint8, 0), "s8": (np.int8, 1)}
KIND = {"f16": "f16", "bf16": "f16", "tf32": "tf32", "e4m3": "f8f6f4", "e5m2": "f8f6f4", "u8": "i8", "s8": "i8"}


def ints(rng, shape, t):
    lo, hi = {"u8": (0, 16), "s8": (-8, 8)}.get(t, (-3, 4))
    return rng.integers(lo, hi, shape).astype(FMT[t][0])


def run_tile(a, b, *, kind, at, bt, m, n, span=128, b_mn=False, a_tmem=False, enable=kit.ENABLE_ACC,
             sat=0, emu=None, **kw):
    """D (m x n) computed by the one-tile kernel for A (m x K) and B (n x K)."""
    emu = emu or Emulator()
    kb = a.shape[1] * a.dtype.itemsize
    ksteps = kb // 32
    a_img, alo, aso, astep = kit.kmajor_image(a, span)
    if b_mn == "128b32":
        b_img, blo, bso, bstep = kit.mnmajor_base32b_image(b)
        bspan = "128b32"
    elif b_mn:
        b_img, blo, bso, bstep = kit.mnmajor_image(b, 128)
        bspan = 128
    else:
        b_img, blo, bso, bstep = kit.kmajor_image(b, span)
        bspan = span
    d = 2 if kind == "i8" else 1
    idesc = kit.idesc(m, n, d=d, a=FMT[at][1], b=FMT[bt][1], mn_b=int(bool(b_mn)), sat=sat)
    at_rows = np.zeros((128, kb), np.uint8)
    at_rows[:m] = np.ascontiguousarray(a).view(np.uint8).reshape(m, kb)
    prog = kit.load(kind=kind, a_tmem=a_tmem, enable=enable, **kw)
    bufs = [emu.to_device(x) for x in (a_img, b_img, at_rows.reshape(-1))]
    out = emu.to_device(np.zeros(128 * n, np.uint32))
    emu.launch(prog, 1, 128, bufs + [out, len(a_img), len(b_img), idesc, kit.smem_desc(alo, aso, span),
                                     kit.smem_desc(blo, bso, bspan), ksteps, astep >> 4, bstep >> 4, n],
               smem=0)
    raw = emu.to_host(out, (128, n), np.uint32)[d_lanes(m)]
    return raw.view(np.int32) if kind == "i8" else raw.view(np.float32)


def ref(a, b, dtype):
    """A B^T in float64 (small integers: exact in every input type, tf32 included)."""
    return a.astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("t,m,n,span", [
    ("f16", 128, 64, 128), ("bf16", 64, 32, 0), ("f16", 128, 256, 64), ("tf32", 128, 32, 128),
    ("e4m3", 128, 48, 128), ("e5m2", 64, 8, 32), ("s8", 128, 16, 128), ("u8", 64, 24, 0),
])
def test_one_tile_gemm_exact(t, m, n, span):
    """D = A B^T over K = span bytes (4 MMAs; without swizzle 128 bytes), accumulating from the
    second MMA on; every D element exact."""
    rng = np.random.default_rng(hash((t, m, n)) & 0xFFFF)
    esize = np.dtype(FMT[t][0]).itemsize
    k = (span or 128) // esize
    a, b = ints(rng, (m, k), t), ints(rng, (n, k), t)
    got = run_tile(a, b, kind=KIND[t], at=t, bt=t, m=m, n=n, span=span)
    want = ref(a, b, t)
    assert np.array_equal(got.astype(np.float64), want)


@pytest.mark.parametrize("t", ["f16", "tf32", "e4m3", "s8"])
def test_mn_major_b(t):
    """B given MN-major (bit 16): N = one 128-byte swizzle row."""
    rng = np.random.default_rng(7)
    esize = np.dtype(FMT[t][0]).itemsize
    n, k = 128 // esize, 128 // esize
    a, b = ints(rng, (128, k), t), ints(rng, (n, k), t)
    got = run_tile(a, b, kind=KIND[t], at=t, bt=t, m=128, n=n, b_mn=True)
    assert np.array_equal(got.astype(np.float64), ref(a, b, t))


def test_a_from_tensor_memory():
    """The .ts form: A stored row by row into TMEM columns 256.. by tcgen05.st, B from shared."""
    rng = np.random.default_rng(3)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (64, 64), "f16")
    got = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=64, a_tmem=True)
    assert np.array_equal(got.astype(np.float64), ref(a, b, "f16"))


def test_enable_input_d_accumulates_onto_tmem():
    """enable-input-d false on every MMA: each overwrites D, so only the last K step remains."""
    rng = np.random.default_rng(11)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (32, 64), "f16")
    last = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=32, enable="setp.ne.u32 %p7, 0, 0;")
    assert np.array_equal(last.astype(np.float64), ref(a[:, 48:], b[:, 48:], "f16"))


def test_scale_input_d_and_negate():
    """scale-input-d 1 halves D before each accumulation: D = ((A0 B0)/2 + A1 B1)/2 + ..."""
    rng = np.random.default_rng(5)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    mma = "tcgen05.mma.cta_group::1.kind::f16 [%r42], %rd12, %rd13, %r52, %p7, 1;"
    got = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, mma=mma)
    want = np.zeros((128, 16))
    for s in range(4):
        blk = slice(16 * s, 16 * s + 16)
        want = (want / 2 if s else 0) + ref(a[:, blk], b[:, blk], "f16")
    assert np.array_equal(got.astype(np.float64), want.astype(np.float32).astype(np.float64))


def test_disable_output_lane_mask():
    """Bit i of mask register j keeps lane 32 j + i unwritten."""
    rng = np.random.default_rng(9)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    mma = ("mov.u32 %r60, 0x80000001; mov.u32 %r61, 0; mov.u32 %r62, 0; mov.u32 %r63, 0xFFFFFFFF;\n"
           "\ttcgen05.mma.cta_group::1.kind::f16 [%r42], %rd12, %rd13, %r52, {%r60, %r61, %r62, %r63}, %p7;")
    got = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, mma=mma)
    want = ref(a, b, "f16")
    off = np.zeros(128, bool)
    off[[0, 31]] = True
    off[96:] = True
    assert (got[off] == 0).all() and np.array_equal(got[~off].astype(np.float64), want[~off])


# every warp stores 0x7FFFFF00 into its quarter of D's 16 columns before the MMAs
PRELOAD = ("\tadd.u32 %r44, %r42, %r43;\n",
           "\tadd.u32 %r44, %r42, %r43;\n\tmov.u32 %r60, 0x7FFFFF00;\n"
           "\ttcgen05.st.sync.aligned.32x32b.x8.b32 [%r44], {%r60, %r60, %r60, %r60, %r60, %r60, %r60, %r60};\n"
           "\tadd.u32 %r61, %r44, 8;\n"
           "\ttcgen05.st.sync.aligned.32x32b.x8.b32 [%r61], {%r60, %r60, %r60, %r60, %r60, %r60, %r60, %r60};\n"
           "\ttcgen05.wait::st.sync.aligned;\n\tbar.sync 0;\n")


@pytest.mark.parametrize("sat", [0, 1])
def test_integer_accumulation_wraps_or_saturates(sat):
    """kind::i8 onto a D preloaded near 2^31 (tcgen05.st): s32 wraps, or clamps with bit 3."""
    a = np.full((128, 128), 127, np.int8)
    b = np.full((16, 128), 127, np.int8)
    got = run_tile(a, b, kind="i8", at="s8", bt="s8", m=128, n=16, enable="setp.ne.u32 %p7, 1, 0;", sat=sat,
                   patch=[PRELOAD])
    total = 0x7FFFFF00 + 127 * 127 * 128
    want = 2 ** 31 - 1 if sat else total - 2 ** 32
    assert (got == want).all()


# -- descriptor decoding --------------------------------------------------------------------

def test_idesc_fields():
    f = decode_idesc(kit.idesc(128, 256, a=1, b=0, mn_a=1, neg_b=1), "f16")
    assert (f["m"], f["n"], f["a_type"], f["b_type"], f["mn_a"], f["mn_b"], f["neg_b"]) == \
        (128, 256, "bf16", "f16", 1, 0, 1)


@pytest.mark.parametrize("word,kind,match", [
    (kit.idesc(32, 64), "f16", r"M \(bits 24-28\) = 32; cta_group::1 takes 64 or 128"),
    (kit.idesc(256, 64), "f16", r"M \(bits 24-28\) = 256; cta_group::1 takes 64 or 128"),
    (kit.idesc(128, 40), "f16", r"N \(bits 17-22\) = 40; M = 128 takes N = 16\.\.256 in steps of 16"),
    (kit.idesc(128, 64, a=2), "f16", r"A format \(bits 7-9\) 2 is none of 0 f16, 1 bf16"),
    (kit.idesc(128, 64, d=0), "f16", r"D format \(bits 4-5\) f16 is not f32 \(an f16 accumulator"),
    (kit.idesc(128, 64, d=1), "i8", r"D format \(bits 4-5\) f32 is not s32"),
    (kit.idesc(128, 64, a=5, b=0, mn_a=1), "f8f6f4", r"A is e2m1, which must be K-major \(transpose bit 15"),
    (kit.idesc(128, 64) | 4, "f16", r"sparsity bit 2"),
    (kit.idesc(128, 64, sat=1), "f16", r"saturate \(bit 3\) is for kind::i8 only"),
])
def test_idesc_errors(word, kind, match):
    with pytest.raises(SimRuntimeError, match=match):
        decode_idesc(word, kind)


def test_idesc_of_cta_pairs():
    assert decode_idesc(kit.idesc(256, 256), "f16", group=2)["m"] == 256
    assert decode_idesc(kit.idesc(128, 64), "f16", group=2)["m"] == 128
    with pytest.raises(SimRuntimeError, match=r"M \(bits 24-28\) = 64; cta_group::2 takes 128 or 256"):
        decode_idesc(kit.idesc(64, 64), "f16", group=2)


def test_pair_m128_accumulator_layout():
    """A CTA pair's M = 128 MMA: each CTA's 64 rows at lanes 0..63 for the first half of the
    columns and 64..127 for the second (what CuTe DSL's epilogue reads; the fixture test runs it)."""
    from cutedsl.sim.instructions.tcgen05_mma import d_layout
    lane, col = d_layout(64, 128, 2)
    assert (lane[5, 3], col[5, 3]) == (5, 3) and (lane[5, 64 + 3], col[5, 64 + 3]) == (64 + 5, 3)
    assert len(set(zip(lane.ravel().tolist(), col.ravel().tolist()))) == 64 * 128 and col.max() == 63
    lane1, col1 = d_layout(64, 96, 1)        # M = 64 on one CTA: first half of each lane quarter
    assert lane1[17, 0] == 32 + 1 and col1[17, 95] == 95


def test_smem_descriptor_fields():
    d = kit.smem_desc(16, 1024, 128) | (0x1230 >> 4)
    assert decode_desc_sm100(d) == (0x1230, 16, 1024, 0, 128)
    assert decode_desc_sm100(kit.smem_desc(128, 256, 0))[4] == 0
    with pytest.raises(SimRuntimeError, match=r"bits 46-48 must hold the constant 0b001 .*sm_90 wgmma"):
        decode_desc_sm100(1 << 62)              # an sm_90 128B descriptor
    from cutedsl.sim.engines.wgmma_layout import SW128_BASE32B
    assert decode_desc_sm100(1 << 46 | 1 << 61)[4] == SW128_BASE32B
    with pytest.raises(SimRuntimeError, match=r"swizzle field \(bits 61-63\) 3 is invalid \(0 none, 1 128B with "
                                              r"32-byte atoms, 2 128B, 4 64B, 6 32B\)"):
        decode_desc_sm100(1 << 46 | 3 << 61)


def test_bad_descriptor_in_a_kernel_names_the_line():
    rng = np.random.default_rng(1)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    with pytest.raises(SimRuntimeError, match=r"tcgen05\.mma: instruction descriptor .* M \(bits 24-28\) = 0"
                                              r"(.|\n)*at PTX line \d+"):
        run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16,
                 mma="tcgen05.mma.cta_group::1.kind::f16 [%r42], %rd12, %rd13, 16, %p7;")


# -- completion and races ------------------------------------------------------------------

def test_adversarial_mode_gives_the_same_bits():
    rng = np.random.default_rng(21)
    a, b = ints(rng, (128, 64), "bf16"), ints(rng, (64, 64), "bf16")
    want = run_tile(a, b, kind="f16", at="bf16", bt="bf16", m=128, n=64)
    for seed in (1, 2, 3):
        got = run_tile(a, b, kind="f16", at="bf16", bt="bf16", m=128, n=64, emu=Emulator(chaos=seed))
        assert np.array_equal(got, want)


def test_reading_d_before_the_commit_wait_is_a_race():
    """Planted bug: the epilogue's tcgen05.ld without waiting for the commit's mbarrier phase."""
    rng = np.random.default_rng(2)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    # eager order: warps 1-3 load before thread 0 issues the MMA (reported at the MMA); in other
    # interleavings the load comes after it (reported at the load)
    with pytest.raises(RaceError, match=r"data race on tensor memory lane \d+ column \d+ \(CTA \(0, 0, 0\)\)"
                                        r"(.|\n)*tcgen05 unit of thread 0, tensor core \(tcgen05\)(.|\n)*"
                                        r"missing: a (tcgen05\.commit|tcgen05\.wait::ld by the loading warp)"):
        run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, wait=False)


def test_mma_reading_shared_memory_without_the_proxy_fence_is_a_race():
    """Operands written with st.shared reach tcgen05.mma (async proxy) only after fence.proxy.async."""
    rng = np.random.default_rng(4)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    text = kit.mma_ptx(patch=[("\tfence.proxy.async.shared::cta;\n", "")])
    from cutedsl.sim import load_ptx
    emu = Emulator()
    with pytest.raises(RaceError, match=r"tcgen05\.mma operand(.|\n)*fence\.proxy\.async"):
        a_img, alo, aso, _s = kit.kmajor_image(a, 128)
        b_img, blo, bso, _s = kit.kmajor_image(b, 128)
        bufs = [emu.to_device(x) for x in (a_img, b_img, np.zeros(16, np.uint8))]
        out = emu.to_device(np.zeros(128 * 16, np.uint32))
        emu.launch(load_ptx(text), 1, 128, bufs + [out, len(a_img), len(b_img), kit.idesc(128, 16),
                                                   kit.smem_desc(alo, aso, 128), kit.smem_desc(blo, bso, 128),
                                                   4, 2, 2, 16])


def test_reading_d_after_issue_without_the_commit_wait_names_the_commit():
    """Every warp loads after thread 0 issued (a bar.sync orders the issue, not the completion)."""
    rng = np.random.default_rng(2)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    with pytest.raises(RaceError, match=r"write by CTA \(0, 0, 0\) tcgen05 unit of thread 0(.|\n)*"
                                        r"read by CTA \(0, 0, 0\) tcgen05\.ld unit of warp \d(.|\n)*missing: a tcgen05\.commit"):
        run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, wait=False, before_wait="\tbar.sync 0;")


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_accumulator_reused_before_the_epilogue_released_it(seed):
    """Planted bug: the next tile's MMA overwrites D while other warps may still load it; issued
    after the epilogue's barrier (the release) it is correct."""
    rng = np.random.default_rng(6)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    emu = Emulator(chaos=seed)
    with pytest.raises(RaceError, match=r"data race on tensor memory(.|\n)*(tcgen05 unit of thread 0(.|\n)*"
                                        r"tcgen05\.ld|tcgen05\.ld(.|\n)*tcgen05 unit of thread 0)"):
        run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, after_load=kit.REUSE, emu=emu)
    got = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16,
                   after_sync=kit.REUSE + "\n" + kit.REUSE_DONE, emu=Emulator(chaos=seed))
    assert np.array_equal(got.astype(np.float64), ref(a, b, "f16"))


def test_releasing_the_accumulator_without_wait_ld_is_a_race():
    """The epilogue's barrier orders its tcgen05.ld before the next MMA only after tcgen05.wait::ld
    (the registers themselves are usable at once: see docs/emulator.md, tcgen05.ld verdict)."""
    rng = np.random.default_rng(8)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    with pytest.raises(RaceError, match=r"tcgen05\.ld unit of warp \d(.|\n)*missing: a tcgen05\.wait::ld"):
        run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, after_sync=kit.REUSE + "\n" + kit.REUSE_DONE,
                 patch=[("\ttcgen05.wait::ld.sync.aligned;\n", "")])


# -- CTA pairs (cta_group::2) ---------------------------------------------------------------

def run_pair(a, b, n, span=128, emu=None, wait=True, kind="f16"):
    """D (256 x n) of the 2-CTA kernel: CTA r holds A rows 128 r.. and B rows (N) n/2 r.."""
    from cutedsl.sim import load_ptx
    emu = emu or Emulator()
    imgs = [kit.kmajor_image(a[128 * r:128 * (r + 1)], span) for r in range(2)]
    bimgs = [kit.kmajor_image(b[n // 2 * r:n // 2 * (r + 1)], span) for r in range(2)]
    na, nb = len(imgs[0][0]), len(bimgs[0][0])
    _i, alo, aso, astep = imgs[0]
    _j, blo, bso, bstep = bimgs[0]
    prog = load_ptx(kit.pair_ptx(kind, wait=wait))
    bufs = [emu.to_device(np.concatenate([imgs[0][0], imgs[1][0]])),
            emu.to_device(np.concatenate([bimgs[0][0], bimgs[1][0]])), emu.to_device(np.zeros(16, np.uint8))]
    out = emu.to_device(np.zeros(256 * n, np.uint32))
    ksteps = a.shape[1] * a.dtype.itemsize // 32
    emu.launch(prog, 2, 128, bufs + [out, na, nb, kit.idesc(256, n), kit.smem_desc(alo, aso, span),
                                     kit.smem_desc(blo, bso, span), ksteps, astep >> 4, bstep >> 4, n],
               cluster=(2, 1, 1))
    return emu.to_host(out, (256, n), np.uint32).view(np.float32)


@pytest.mark.parametrize("n", [32, 256])
def test_cta_pair_mma_splits_a_and_b_between_the_ctas(n):
    """cta_group::2, M = 256: the even CTA issues; A's rows 128 r.. and B's N/2 r.. rows come from
    CTA r's shared memory (the same offsets), D rows 128 r.. land in CTA r's tensor memory (CUTLASS
    SM100_MMA_*_2x1SM layouts); the commit's multicast completes both CTAs' barriers."""
    rng = np.random.default_rng(n)
    a, b = ints(rng, (256, 64), "f16"), ints(rng, (n, 64), "f16")
    got = run_pair(a, b, n)
    assert np.array_equal(got.astype(np.float64), ref(a, b, "f16"))
    for seed in (1, 2):
        assert np.array_equal(run_pair(a, b, n, emu=Emulator(chaos=seed)), got)


def test_cta_pair_peer_reading_before_the_commit_is_a_race():
    rng = np.random.default_rng(5)
    a, b = ints(rng, (256, 64), "f16"), ints(rng, (32, 64), "f16")
    with pytest.raises(RaceError, match=r"data race on tensor memory lane \d+ column \d+ \(CTA \((0|1), 0, 0\)\)"):
        run_pair(a, b, 32, wait=False)


def test_cta_pair_mma_from_the_odd_cta_is_refused():
    with pytest.raises(SimRuntimeError, match=r"issued by the even CTA of a pair"):
        decode_pair_error()


def decode_pair_error():
    """Launch the pair kernel with the roles swapped: the odd CTA issues."""
    from cutedsl.sim import load_ptx
    text = kit.pair_ptx().replace("\tsetp.eq.u32 %p8, %r57, 0;\n", "\tsetp.eq.u32 %p8, %r57, 1;\n")
    emu = Emulator()
    z = emu.to_device(np.zeros(1 << 16, np.uint8))
    emu.launch(load_ptx(text), 2, 128, [z, z, z, emu.to_device(np.zeros(256 * 32, np.uint32)), 16, 16,
                                        kit.idesc(256, 32), kit.smem_desc(16, 1024, 128),
                                        kit.smem_desc(16, 1024, 128), 1, 2, 2, 32], cluster=(2, 1, 1))


# -- block-scaled MMA (MXFP8) and tcgen05.cp --------------------------------------------------

@pytest.mark.parametrize("at,bt,seed", [("e4m3", "e4m3", None), ("e5m2", "e4m3", None), ("e4m3", "e5m2", 3)])
def test_mxfp8_block_scaled_mma_with_tcgen05_cp(at, bt, seed):
    """D = sum over 4 blocks of 32 K: A * 2^(sfa - 127) x B * 2^(sfb - 127), scales copied from
    shared memory by tcgen05.cp (512-byte atoms), one scale byte per block (the sf ids); exact."""
    from cutedsl.sim import load_ptx
    rng = np.random.default_rng(17)
    n = 64
    a, b = ints(rng, (128, 128), at), ints(rng, (n, 128), bt)
    sfa = rng.integers(120, 135, (128, 4)).astype(np.uint8)
    sfb = rng.integers(120, 135, (n, 4)).astype(np.uint8)
    a_img, alo, aso, astep = kit.kmajor_image(a, 128)
    b_img, blo, bso, bstep = kit.kmajor_image(b, 128)
    sfa_off, sfb_off = len(b_img), len(b_img) + 512
    b_all = kit.pad(np.concatenate([b_img, kit.sf_atom(sfa), kit.sf_atom(sfb)]))
    text = kit.mx_ptx("mxf8f6f4.block_scale.scale_vec::1X", sfa_off, sfb_off)
    idesc = 1 << 23 | FMT[at][1] << 7 | FMT[bt][1] << 10 | (n >> 3) << 17 | (128 >> 4) << 24
    emu = Emulator(chaos=seed)
    bufs = [emu.to_device(x) for x in (a_img, b_all, np.zeros(16, np.uint8))]
    out = emu.to_device(np.zeros(128 * n, np.uint32))
    emu.launch(load_ptx(text), 1, 128, bufs + [out, len(a_img), len(b_all), idesc, kit.smem_desc(alo, aso, 128),
                                               kit.smem_desc(blo, bso, 128), 4, astep >> 4, bstep >> 4, n])
    got = emu.to_host(out, (128, n), np.uint32).view(np.float32).astype(np.float64)
    want = np.zeros((128, n))
    for j in range(4):             # one f32 rounding per instruction (block), as the emulator's exact mode
        blk = slice(32 * j, 32 * j + 32)
        want = (want + (a[:, blk].astype(np.float64) * np.ldexp(1.0, sfa[:, j:j + 1].astype(int) - 127)) @
                (b[:, blk].astype(np.float64) * np.ldexp(1.0, sfb[:, j:j + 1].astype(int) - 127)).T
                ).astype(np.float32).astype(np.float64)
    assert np.array_equal(got, want)


def test_block_scaled_idesc_errors():
    from cutedsl.sim.engines.tcgen05_scale import decode_idesc_scaled
    base = 1 << 23 | (64 >> 3) << 17 | (128 >> 4) << 24
    assert decode_idesc_scaled(base | 2 << 29 | 3 << 4, "mxf8f6f4")["a_sf"] == 2
    with pytest.raises(SimRuntimeError, match=r"scale format bit 23 = 0 \(UE4M3\): UE4M3 factors need "
                                              r"kind::mxf4nvf4 with scale_vec::4X"):
        decode_idesc_scaled(base & ~(1 << 23), "mxf8f6f4")
    assert decode_idesc_scaled(base | 5 << 7, "mxf8f6f4")["a_type"] == "e2m1"


def test_tcgen05_cp_lane_maps():
    from cutedsl.sim.instructions.tcgen05_cp import lane_map
    (src, dst), = lane_map("128x128b", None)
    assert (src == dst).all() and len(src) == 128
    quarters = {int(d[0]) // 32 for _s, d in lane_map("32x128b", "warpx4")}
    assert quarters == {0, 1, 2, 3}
    pairs = [(int(s[0]), int(d[0])) for s, d in lane_map("64x128b", "warpx2::02_13")]
    assert pairs == [(0, 0), (0, 64), (32, 32), (32, 96)]


def test_tf32_mn_major_b_in_the_128b_base32b_layout():
    """tf32 B MN-major (32 columns = 128 bytes) in 128B_BASE32B (descriptor layout type 1; CuTe
    ``Swizzle<2,5,2>``: 32-byte granules permuted by the K row within 4-row atoms), the image
    built here independently of the emulator's address function: D exact."""
    rng = np.random.default_rng(12)
    a, b = ints(rng, (128, 32), "tf32"), ints(rng, (32, 32), "tf32")
    got = run_tile(a, b, kind="tf32", at="tf32", bt="tf32", m=128, n=32, b_mn="128b32")
    assert np.array_equal(got.astype(np.float64), ref(a, b, "tf32"))
    from cutedsl.sim.engines.wgmma_layout import operand_addrs
    from cutedsl.sim.engines.wgmma_layout import decode_desc_sm100
    with pytest.raises(SimRuntimeError, match=r"128B_BASE32B swizzle is for MN-major operands only"):
        operand_addrs(1 << 46 | 1 << 61, 128, 8, 4, False, decode_desc_sm100)


def test_missing_fence_after_thread_sync_in_the_strict_mode():
    """Planted bug (issue 23): the next tile's MMA issued after the epilogue's release barrier
    but without tcgen05.fence::after_thread_sync. With SimBackend(strict_tcgen05_fences=True)
    the barrier does not order the MMA's accumulator writes after the other warps' tcgen05.ld:
    reported in one eager run; with the fence it runs to the exact result. (Off by default:
    CUTLASS's, CuTe DSL's and Triton's sm_100 GEMMs omit the fence -- docs/emulator.md.)"""
    from cutedsl.sim import SimBackend
    rng = np.random.default_rng(6)
    a, b = ints(rng, (128, 64), "f16"), ints(rng, (16, 64), "f16")
    after = kit.REUSE + "\n" + kit.REUSE_DONE
    strict = Emulator(SimBackend(strict_tcgen05_fences=True))
    with pytest.raises(RaceError, match=r"data race on tensor memory(.|\n)*tcgen05\.fence::after_thread_sync"):
        run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, after_sync=after, emu=strict)
    got = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, emu=Emulator(SimBackend(strict_tcgen05_fences=True)),
                   after_sync="\ttcgen05.fence::after_thread_sync;\n" + after)
    assert np.array_equal(got.astype(np.float64), ref(a, b, "f16"))
    got = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=16, after_sync=after)     # default: accepted
    assert np.array_equal(got.astype(np.float64), ref(a, b, "f16"))
