"""Race verdicts as named PTX ISA rules with narrow opt-outs (issue #39 items 4 and 5).

* An SS ``wgmma.mma_async`` whose shared-memory operands all four warps of the warpgroup wrote
  with ``st.shared``, each then ``fence.proxy.async``: with a barrier across the warps before the
  MMA it is correct; without one it is reported (rule ``wgmma-warpgroup-barrier``, PTX ISA
  9.7.15.5.2: ``.sync`` waits for the threads of one warp only) -- the emulator's own meeting of
  the four warps at the instruction orders nothing in the ISA.
* FlashAttention-4's ``tcgen05.ld`` -> ``tcgen05.st`` on the same columns without
  ``tcgen05.wait::ld`` (rule ``tcgen05-ld-without-wait``, 9.7.16.6.4.2, 9.7.16.8.5).
* Every report names its rule and section; ``SimBackend(allow=(rule,))`` accepts that rule
  alone (others still report); an unknown rule id is refused naming the known ones.
"""
import numpy as np
import pytest

from cutedsl.errors import ArgumentError
from cutedsl.sim import Emulator, RaceError, SimBackend, load_ptx
from cutedsl.sim.checks.rules import RULES
from simkit import kernel

# 128 threads (one warpgroup). The shared-memory images of A (64 x 16 f16, K-major, no swizzle:
# element (m, k) at (k // 8) * 1024 + m * 16 + (k % 8) * 2) and B (8 x 16, the same layout at
# byte 4096) come from global memory: thread t copies bytes 16 t + 2048 j (j = 0..2), so every
# warp writes part of both operands. {WRITERS}: which threads copy. Then each writer fences
# (fence.proxy.async), {SYNC}, and the warpgroup issues one m64n8k16 MMA (D = A B) and stores D.
SS_WGMMA = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_img];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r10, smem;
\t{WRITERS}
\tmov.u32 %r2, 0;
$L_copy:
\tshl.b32 %r3, %r2, 11;
\tmad.lo.u32 %r4, %r1, 16, %r3;
{INNER}
\tadd.u32 %r2, %r2, 1;
\tsetp.lt.u32 %p2, %r2, 3;
\t@%p2 bra $L_copy;
$L_written:
\tfence.proxy.async.shared::cta;
\t{SYNC}
\tcvt.u64.u32 %rd10, %r10;
\tshr.u64 %rd11, %rd10, 4;
\tor.b64 %rd12, %rd11, {DESC};
\tadd.s64 %rd13, %rd12, 256;
\tsetp.ne.u32 %p3, %r1, %r1;
\twgmma.fence.sync.aligned;
\twgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f1, %f2, %f3, %f4}, %rd12, %rd13, %p3, 1, 1, 0, 0;
\twgmma.commit_group.sync.aligned;
\twgmma.wait_group.sync.aligned 0;
\tmul.wide.u32 %rd20, %r1, 16;
\tadd.s64 %rd21, %rd1, %rd20;
\tst.global.v4.f32 [%rd21], {%f1, %f2, %f3, %f4};
"""
INNER = """\tcvt.u64.u32 %rd3, %r4;
\tadd.s64 %rd4, %rd2, %rd3;
\tld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd4];
\tadd.u32 %r5, %r10, %r4;
\tst.shared.v4.u32 [%r5], {%r20, %r21, %r22, %r23};"""
# one warp copies everything: 128 chunks of 16 bytes x 3, 32 lanes -> 12 rounds
INNER_ONE_WARP = """\tmov.u32 %r6, 0;
$L_w0:
\tshl.b32 %r7, %r6, 9;
\tadd.u32 %r8, %r4, %r7;
\tcvt.u64.u32 %rd3, %r8;
\tadd.s64 %rd4, %rd2, %rd3;
\tld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd4];
\tadd.u32 %r5, %r10, %r8;
\tst.shared.v4.u32 [%r5], {%r20, %r21, %r22, %r23};
\tadd.u32 %r6, %r6, 1;
\tsetp.lt.u32 %p4, %r6, 4;
\t@%p4 bra $L_w0;"""
#: no swizzle (bits 62-63 = 0), LBO = 1024 B (K direction), SBO = 128 B (8-row groups), >> 4
DESC = (128 >> 4) << 32 | (1024 >> 4) << 16
BARRIER = "bar.sync 1, 128;"


def ss_kernel(sync=BARRIER, one_warp=False):
    writers = ("setp.ge.u32 %p1, %r1, 32;\n\t@%p1 bra $L_written;" if one_warp else "")
    body = (SS_WGMMA.replace("{WRITERS}", writers).replace("{INNER}", INNER_ONE_WARP if one_warp else INNER)
            .replace("{SYNC}", sync).replace("{DESC}", str(DESC)))
    return kernel(body, params=("out", "img"), decls="\t.shared .align 1024 .b8 smem[6144];")


def images(rng):
    A = rng.integers(-4, 5, (64, 16)).astype(np.float16)
    B = rng.integers(-4, 5, (8, 16)).astype(np.float16)      # (N, K)
    img = np.zeros(6144, np.uint8)
    for k in range(16):
        for m in range(64):
            o = (k // 8) * 1024 + m * 16 + (k % 8) * 2
            img[o:o + 2] = np.frombuffer(A[m, k].tobytes(), np.uint8)
        for n in range(8):
            o = 4096 + (k // 8) * 1024 + n * 16 + (k % 8) * 2
            img[o:o + 2] = np.frombuffer(B[n, k].tobytes(), np.uint8)
    return A, B, img


def fragment(out):
    """m64n8 f32 D fragment (128 threads x 4) -> 64 x 8 (PTX ISA wgmma D layout)."""
    D = np.zeros((64, 8), np.float32)
    for t in range(128):
        for i in range(4):
            D[16 * (t // 32) + (t % 32) // 4 + 8 * (i // 2), 2 * (t % 4) + (i % 2)] = out[t, i]
    return D


def run_ss(ptx, seed=None, **opts):
    A, B, img = images(np.random.default_rng(3))
    emu = Emulator(chaos=seed, **opts)
    out = emu.to_device(np.zeros((128, 4), np.float32))
    emu.launch(load_ptx(ptx), 1, 128, [out, emu.to_device(img)])
    return fragment(emu.to_host(out, (128, 4), np.float32)), A.astype(np.float64) @ B.astype(np.float64).T


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_ss_wgmma_after_fences_and_a_warpgroup_barrier_is_correct(seed):
    got, want = run_ss(ss_kernel(), seed)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("one_warp", [False, True])
def test_ss_wgmma_without_the_warpgroup_barrier_is_reported(one_warp):
    """All four warps (or warp 0 alone) wrote and fenced, nothing orders the other warps' wgmma
    after those writes: reported under its own rule, naming the writer and the wgmma."""
    with pytest.raises(RaceError, match=r"(?s)write by CTA .*warp \d .*st\.shared.*read by CTA .*wgmma of "
                                        r"warpgroup 0.*wgmma operand.*missing: a barrier across the warpgroup.*"
                                        r"rule wgmma-warpgroup-barrier \(PTX ISA 9\.7\.15\.5\.2"):
        run_ss(ss_kernel(sync="", one_warp=one_warp))


def test_ss_wgmma_rule_opt_out_accepts_only_that_rule():
    got, want = run_ss(ss_kernel(sync=""), allow=("wgmma-warpgroup-barrier",))
    assert np.array_equal(got, want)
    # the barrier present but the fences gone: a different rule, still reported under the opt-out
    no_fence = ss_kernel().replace("\tfence.proxy.async.shared::cta;\n", "")
    with pytest.raises(RaceError, match=r"missing: a fence\.proxy\.async after the generic-proxy write(.|\n)*"
                                        r"rule proxy-fence \(PTX ISA 8\.6 Proxies"):
        run_ss(no_fence, allow=("wgmma-warpgroup-barrier",))


# -- tcgen05.ld -> tcgen05.st on the same columns (FlashAttention-4's S -> P in TMEM) -------------
from test_sim_tmem import FREE, QUARTER_LANE, ROUNDTRIP, SM100, PTXAS_SM100  # noqa: E402
from cutedsl.compiler.toolchain import ptxas  # noqa: E402

REWRITE = """\tadd.u32 %r30, %r13, 1000;
\tadd.u32 %r31, %r14, 1000;
\tadd.u32 %r32, %r15, 1000;
\tadd.u32 %r33, %r16, 1000;
{WAIT}\ttcgen05.st.sync.aligned.32x32b.x4.b32 [%r7], {%r30, %r31, %r32, %r33};
\ttcgen05.wait::st.sync.aligned;
\ttcgen05.ld.sync.aligned.32x32b.x4.b32 {%r13, %r14, %r15, %r16}, [%r7];
\ttcgen05.wait::ld.sync.aligned;
"""


def ld_then_st(wait: bool):
    body = ROUNDTRIP.replace("\ttcgen05.wait::ld.sync.aligned;\n", REWRITE.replace(
        "{WAIT}", "\ttcgen05.wait::ld.sync.aligned;\n" if wait else ""), 1)
    body = body.replace("{FREE}", FREE).replace("{COLS}", "32").replace("{LANE}", QUARTER_LANE)
    text = kernel(body).replace(kernel("").split("\n.visible")[0], SM100.rstrip("\n"), 1)
    ptxas(text, arch=PTXAS_SM100)
    return load_ptx(text)


def run_tmem(prog, **opts):
    emu = Emulator(**opts)
    out = emu.to_device(np.zeros(128 * 4, np.uint32))
    emu.launch(prog, 1, 128, [out])
    return emu.to_host(out, (128, 4), np.uint32)


def want_rewritten():
    t = np.arange(128)
    return (100 * (t // 32) + t % 32)[:, None] + np.arange(4) + 1000


def test_tcgen05_st_over_loaded_columns_needs_wait_ld():
    assert np.array_equal(run_tmem(ld_then_st(wait=True)), want_rewritten())
    with pytest.raises(RaceError, match=r"(?s)read by CTA .*tcgen05\.ld unit of warp \d.*write by CTA .*"
                                        r"tcgen05\.st unit of warp \d.*missing: a tcgen05\.wait::ld.*"
                                        r"rule tcgen05-ld-without-wait \(PTX ISA 9\.7\.16\.6\.4\.2"):
        run_tmem(ld_then_st(wait=False))
    assert np.array_equal(run_tmem(ld_then_st(wait=False), allow=("tcgen05-ld-without-wait",)), want_rewritten())


# -- the API ------------------------------------------------------------------------------------

def test_unknown_rule_is_refused_naming_the_rules():
    with pytest.raises(ArgumentError, match=r"allow: unknown race rule 'tcgen05-ld'; the rules are barrier, "
                                            r"proxy-fence, .*tcgen05-ld-without-wait"):
        SimBackend(allow=("tcgen05-ld",))
    assert SimBackend(allow="barrier").allow == frozenset({"barrier"})


def test_every_rule_cites_a_ptx_isa_section():
    for r in RULES.values():
        assert any(ch.isdigit() for ch in r.isa) or "Memory Consistency" in r.isa, r.id
        assert r.missing and r.id == r.id.lower()
