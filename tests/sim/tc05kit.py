"""A one-tile tcgen05 GEMM in hand-written sm_100a PTX for the emulator's tcgen05.mma tests, and
the host-side shared-memory images of its operands, built from the canonical layouts as the PTX
ISA draws them (independently of the emulator's own address functions)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from cutedsl.compiler.toolchain import ptxas
from cutedsl.sim import load_ptx
from cutedsl.testing.ptx import header
from simkit import kernel, mbarrier_wait

SM100 = header("sm_100a", "8.7")
PTXAS_SM100 = SimpleNamespace(chip="sm_100a")
PARAMS = ("a", "b", "at", "out", "na", "nb", "idesc", "adesc", "bdesc", "ksteps", "astep", "bstep", "n")
PTYPES = {"na": ".u32", "nb": ".u32", "idesc": ".u32", "ksteps": ".u32", "astep": ".u32", "bstep": ".u32",
          "n": ".u32"}

# 128 threads. Copy the A and B images (na, nb bytes) into shared memory, 16 B per thread and step;
# {A_TMEM}: each thread also stores its row of `at` (ksteps x 32 bytes) into TMEM columns 256..;
# warp 0 allocates 512 columns; thread 0 issues `ksteps` MMAs (descriptor starts advanced by
# astep/bstep 16-byte units, enable-input-d {ENABLE}) and commits; {BEFORE_WAIT} runs before every
# thread waits for the commit's phase; each warp loads its lane quarter of D (n columns, 8 at a
# time) into out[row * n + col]; warp 0 frees the columns.
BODY = """
\t.shared .align 1024 .b8 smem_a[32768];
\t.shared .align 1024 .b8 smem_b[32768];
\t.shared .align 8 .b64 bar;
\t.shared .align 4 .b32 slot;
\tld.param.u64 %rd1, [p_a];
\tcvta.to.global.u64 %rd1, %rd1;
\tld.param.u64 %rd2, [p_b];
\tcvta.to.global.u64 %rd2, %rd2;
\tld.param.u64 %rd3, [p_out];
\tcvta.to.global.u64 %rd3, %rd3;
\tld.param.u64 %rd4, [p_at];
\tcvta.to.global.u64 %rd4, %rd4;
\tld.param.u32 %r50, [p_na];
\tld.param.u32 %r51, [p_nb];
\tld.param.u32 %r52, [p_idesc];
\tld.param.u64 %rd10, [p_adesc];
\tld.param.u64 %rd11, [p_bdesc];
\tld.param.u32 %r53, [p_ksteps];
\tld.param.u32 %r54, [p_astep];
\tld.param.u32 %r55, [p_bstep];
\tld.param.u32 %r56, [p_n];
\tmov.u32 %r1, %tid.x;
\tshr.u32 %r2, %r1, 5;
\tand.b32 %r3, %r1, 31;
\tmov.u32 %r10, smem_a;
\tmov.u32 %r11, smem_b;
\tmov.u32 %r40, bar;
\tmov.u32 %r41, slot;
\tshl.b32 %r4, %r1, 4;
\tmov.u32 %r5, %r4;
COPY_A:
\tsetp.ge.u32 %p1, %r5, %r50;
\t@%p1 bra COPY_B0;
\tcvt.u64.u32 %rd5, %r5;
\tadd.s64 %rd6, %rd1, %rd5;
\tld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd6];
\tadd.u32 %r6, %r10, %r5;
\tst.shared.v4.u32 [%r6], {%r20, %r21, %r22, %r23};
\tadd.u32 %r5, %r5, 2048;
\tbra COPY_A;
COPY_B0:
\tmov.u32 %r5, %r4;
COPY_B:
\tsetp.ge.u32 %p1, %r5, %r51;
\t@%p1 bra COPIED;
\tcvt.u64.u32 %rd5, %r5;
\tadd.s64 %rd6, %rd2, %rd5;
\tld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd6];
\tadd.u32 %r6, %r11, %r5;
\tst.shared.v4.u32 [%r6], {%r20, %r21, %r22, %r23};
\tadd.u32 %r5, %r5, 2048;
\tbra COPY_B;
COPIED:
\tsetp.eq.u32 %p2, %r2, 0;
\tsetp.eq.u32 %p3, %r1, 0;
\t@!%p2 bra ALLOCATED;
\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r41], 512;
ALLOCATED:
\t@%p3 mbarrier.init.shared::cta.b64 [%r40], 1;
\tfence.proxy.async.shared::cta;
\tbar.sync 0;
\ttcgen05.fence::after_thread_sync;
\tld.shared.u32 %r42, [%r41];
\tshl.b32 %r43, %r2, 21;
\tadd.u32 %r44, %r42, %r43;
{A_TMEM}
\t@!%p3 bra ISSUED;
\tmov.u32 %r7, 0;
ISSUE:
\tsetp.ge.u32 %p4, %r7, %r53;
\t@%p4 bra ISSUE_DONE;
\tmul.lo.u32 %r8, %r7, %r54;
\tcvt.u64.u32 %rd7, %r8;
\tshr.u32 %r9, %r10, 4;
\tcvt.u64.u32 %rd8, %r9;
\tadd.s64 %rd12, %rd10, %rd7;
\tadd.s64 %rd12, %rd12, %rd8;
\tmul.lo.u32 %r8, %r7, %r55;
\tcvt.u64.u32 %rd7, %r8;
\tshr.u32 %r9, %r11, 4;
\tcvt.u64.u32 %rd8, %r9;
\tadd.s64 %rd13, %rd11, %rd7;
\tadd.s64 %rd13, %rd13, %rd8;
\tshl.b32 %r12, %r7, 3;
\tadd.u32 %r13, %r42, 256;
\tadd.u32 %r13, %r13, %r12;
\t{ENABLE}
\t{MMA}
\tadd.u32 %r7, %r7, 1;
\tbra ISSUE;
ISSUE_DONE:
\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r40];
ISSUED:
{BEFORE_WAIT}
{WAIT}
\ttcgen05.fence::after_thread_sync;
\tmov.u32 %r14, 0;
LOAD:
\tsetp.ge.u32 %p5, %r14, %r56;
\t@%p5 bra LOADED;
\tadd.u32 %r15, %r44, %r14;
\ttcgen05.ld.sync.aligned.32x32b.x8.b32 {%r20, %r21, %r22, %r23, %r24, %r25, %r26, %r27}, [%r15];
\ttcgen05.wait::ld.sync.aligned;
\tmad.lo.u32 %r16, %r1, %r56, %r14;
\tmul.wide.u32 %rd14, %r16, 4;
\tadd.s64 %rd15, %rd3, %rd14;
\tst.global.v4.u32 [%rd15], {%r20, %r21, %r22, %r23};
\tst.global.v4.u32 [%rd15+16], {%r24, %r25, %r26, %r27};
\tadd.u32 %r14, %r14, 8;
\tbra LOAD;
LOADED:
{AFTER_LOAD}
\ttcgen05.fence::before_thread_sync;
\tbar.sync 0;
{AFTER_SYNC}
\t@!%p2 bra END;
\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r42, 512;
\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
END:
"""

# each thread stores row 32 * warp + lane of `at` (ksteps * 8 columns) at TMEM lane of its quarter,
# columns 256.. (8 columns per step)
A_TMEM = """
\tmov.u32 %r30, 0;
\tshl.b32 %r31, %r53, 5;
\tmul.lo.u32 %r32, %r1, %r31;
ST_A:
\tsetp.ge.u32 %p6, %r30, %r53;
\t@%p6 bra ST_A_DONE;
\tshl.b32 %r33, %r30, 5;
\tadd.u32 %r34, %r32, %r33;
\tcvt.u64.u32 %rd16, %r34;
\tadd.s64 %rd17, %rd4, %rd16;
\tld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd17];
\tld.global.v4.u32 {%r24, %r25, %r26, %r27}, [%rd17+16];
\tshl.b32 %r35, %r30, 3;
\tadd.u32 %r36, %r44, 256;
\tadd.u32 %r36, %r36, %r35;
\ttcgen05.st.sync.aligned.32x32b.x8.b32 [%r36], {%r20, %r21, %r22, %r23, %r24, %r25, %r26, %r27};
\tadd.u32 %r30, %r30, 1;
\tbra ST_A;
ST_A_DONE:
\ttcgen05.wait::st.sync.aligned;
\ttcgen05.fence::before_thread_sync;
\tbar.sync 0;
\ttcgen05.fence::after_thread_sync;
"""

ENABLE_ACC = "setp.ne.u32 %p7, %r7, 0;"
#: thread 0 issues one more MMA into the same accumulator columns (the next tile's first MMA)
REUSE = "\t@%p3 tcgen05.mma.cta_group::1.kind::f16 [%r42], %rd12, %rd13, %r52, 0;"
#: ... and commits it and waits for it (phase 1) before warp 0 frees the columns
REUSE_DONE = ("\t@%p3 tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r40];\n"
              + mbarrier_wait("%r40", 1))


def mma_ptx(kind="f16", a_tmem=False, enable=ENABLE_ACC, mma=None, before_wait="", wait=True, after_load="",
            after_sync="", patch=(), version="8.7"):
    """PTX text (``.version version``) of the one-tile kernel (with the (old, new) text
    replacements ``patch``), checked by the pinned ptxas for sm_100a."""
    a = "[%r13]" if a_tmem else "%rd12"
    mma = mma or f"tcgen05.mma.cta_group::1.kind::{kind} [%r42], {a}, %rd13, %r52, %p7;"
    body = (BODY.replace("{A_TMEM}", A_TMEM if a_tmem else "").replace("{ENABLE}", enable)
            .replace("{MMA}", mma).replace("{BEFORE_WAIT}", before_wait)
            .replace("{WAIT}", mbarrier_wait("%r40", 0) if wait else "")
            .replace("{AFTER_LOAD}", after_load).replace("{AFTER_SYNC}", after_sync))
    for old, new in patch:
        assert old in body
        body = body.replace(old, new)
    text = kernel(body, params=PARAMS, ptypes=PTYPES, target="sm_100a", version=version)
    ptxas(text, arch=PTXAS_SM100)
    return text


def load(**kw):
    return load_ptx(mma_ptx(**kw))


# -- host images of the canonical layouts ---------------------------------------------------

def swz(addr, span):
    """The swizzle XOR on absolute shared addresses (span 0, 32, 64, 128 bytes)."""
    if not span:
        return addr
    return addr ^ (((addr >> 7) & (span // 16 - 1)) << 4)


def kmajor_image(x: np.ndarray, span: int):
    """(bytes, LBO, SBO, start advance per 32-byte K step) of a K-major (rows x K) operand: with a
    swizzle, each row's K bytes (exactly ``span`` of them) at ``row * span`` in 8-row atoms
    (SBO = 8 * span); without, 8x16-byte core matrices, consecutive along K (LBO = 128 B) and then
    along the rows (SBO = K bytes * 8)."""
    rows, k = x.shape
    raw = np.ascontiguousarray(x).view(np.uint8).reshape(rows, -1)
    kb = raw.shape[1]
    r = np.arange(rows)[:, None]
    b = np.arange(kb)[None, :]
    if span:
        assert kb == span
        off = swz(r * span + b, span)
        lbo, sbo, step = 16, 8 * span, 32
    else:
        off = (r % 8) * 16 + (r // 8) * (kb * 8) + (b // 16) * 128 + b % 16
        lbo, sbo, step = 128, kb * 8, 256
    img = np.zeros(int(off.max()) + 1, np.uint8)
    img[off] = raw
    return pad(img), lbo, sbo, step


def mnmajor_image(x: np.ndarray, span: int = 128):
    """(bytes, LBO, SBO, start advance per 32-byte K step) of an MN-major operand given as
    (rows = MN, K) whose MN extent is one swizzle row (``span`` bytes): K row ``k`` of the atom
    at ``(k % 8) * span``, 8-row groups at SBO = 8 * span."""
    mn, k = x.shape
    xt = np.ascontiguousarray(x.T).view(np.uint8).reshape(k, -1)     # (K, MN bytes)
    assert xt.shape[1] == span
    kk = np.arange(k)[:, None]
    b = np.arange(span)[None, :]
    off = swz((kk % 8) * span + (kk // 8) * 8 * span + b, span)
    img = np.zeros(int(off.max()) + 1, np.uint8)
    img[off] = xt
    esize = x.dtype.itemsize
    return pad(img), 8 * span * 4, 8 * span, (32 // esize // 8) * 8 * span


def mnmajor_base32b_image(x: np.ndarray):
    """(bytes, LBO, SBO, start advance per 32-byte K step) of an MN-major operand (rows = MN, K)
    of 128 MN bytes in the 128B_BASE32B layout (CUTLASS ``Layout_MN_SW128_32B_Atom``: CuTe
    ``Swizzle<2,5,2>`` over 128-byte K rows in 4-row atoms): K row ``k`` at ``(k % 4) * 128``,
    4-row groups at SBO = 512, the 32-byte granule ``g`` of row ``k`` at ``g ^ (k % 4)``."""
    mn, k = x.shape
    xt = np.ascontiguousarray(x.T).view(np.uint8).reshape(k, -1)     # (K, 128 MN bytes)
    assert xt.shape[1] == 128
    kk = np.arange(k)[:, None]
    b = np.arange(128)[None, :]
    off = (kk // 4) * 512 + (kk % 4) * 128 + ((b // 32) ^ (kk % 4)) * 32 + b % 32
    img = np.zeros(int(off.max()) + 1, np.uint8)
    img[off] = xt
    esize = x.dtype.itemsize
    return pad(img), 0, 512, (32 // esize // 4) * 512


def pad(img):
    return np.concatenate([img, np.zeros(-len(img) % 2048, np.uint8)])


LAYOUT = {0: 0, 128: 2, 64: 4, 32: 6, "128b32": 1}


def smem_desc(lbo: int, sbo: int, span: int) -> int:
    """An sm_100 shared-memory descriptor with start address 0 (the kernel adds smem >> 4)."""
    return (lbo >> 4) << 16 | (sbo >> 4) << 32 | 1 << 46 | LAYOUT[span] << 61


def idesc(m, n, d=1, a=0, b=0, mn_a=0, mn_b=0, neg_a=0, neg_b=0, sat=0):
    return (sat << 3 | d << 4 | a << 7 | b << 10 | neg_a << 13 | neg_b << 14 | mn_a << 15 | mn_b << 16
            | (n >> 3) << 17 | (m >> 4) << 24)


# -- the CTA-pair variant (cta_group::2) -----------------------------------------------------

def pair_ptx(kind="f16", wait=True):
    """The one-tile kernel for a 2-CTA cluster with ``cta_group::2``: CTA ``r`` copies image ``r``
    of A (its 128 rows) and of B (its N/2 rows) -- ``na`` / ``nb`` bytes each, back to back in
    ``a`` / ``b`` -- into the same shared offsets; both allocate (cta_group::2); the even CTA's
    thread 0 issues the M = 256 MMAs and commits them to the barrier of both CTAs (multicast);
    every thread waits and stores its CTA's rows to ``out[(128 r + row) * n + col]``."""
    text = mma_ptx(kind, wait=wait, mma=f"tcgen05.mma.cta_group::2.kind::{kind} [%r42], %rd12, %rd13, %r52, %p7;",
                   patch=[
        ("\tcvta.to.global.u64 %rd2, %rd2;\n",
         "\tcvta.to.global.u64 %rd2, %rd2;\n\tmov.u32 %r57, %cluster_ctarank;\n\tld.param.u32 %r50, [p_na];\n"
         "\tld.param.u32 %r51, [p_nb];\n\tmul.wide.u32 %rd20, %r57, %r50;\n\tadd.s64 %rd1, %rd1, %rd20;\n"
         "\tmul.wide.u32 %rd21, %r57, %r51;\n\tadd.s64 %rd2, %rd2, %rd21;\n"),
        ("tcgen05.alloc.cta_group::1", "tcgen05.alloc.cta_group::2"),
        ("\tfence.proxy.async.shared::cta;\n\tbar.sync 0;\n",
         "\tfence.proxy.async.shared::cta;\n\tfence.mbarrier_init.release.cluster;\n"
         "\tbarrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n"),
        ("\t@!%p3 bra ISSUED;\n", "\tsetp.eq.u32 %p8, %r57, 0;\n\tand.pred %p9, %p3, %p8;\n\t@!%p9 bra ISSUED;\n"),
        ("\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r40];\n",
         "\tmov.u16 %rs1, 3;\n\ttcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster"
         ".b64 [%r40], %rs1;\n"),
        ("\tmad.lo.u32 %r16, %r1, %r56, %r14;\n",
         "\tmad.lo.u32 %r58, %r57, 128, %r1;\n\tmad.lo.u32 %r16, %r58, %r56, %r14;\n"),
        # the pair frees its tensor memory only when both CTAs are done with it (CUTLASS's 2-SM
        # kernels sync the cluster before the dealloc): the peer's MMA writes both CTAs' TMEM
        ("\t@!%p2 bra END;\n\ttcgen05.dealloc.cta_group::1",
         "\tbarrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n"
         "\t@!%p2 bra END;\n\ttcgen05.dealloc.cta_group::2"),
        ("\ttcgen05.relinquish_alloc_permit.cta_group::1", "\ttcgen05.relinquish_alloc_permit.cta_group::2"),
    ])
    return text


# -- block-scaled MMAs: scale-factor atoms copied by tcgen05.cp ------------------------------

def sf_atom(scales):
    """CUTLASS's 512-byte scale-factor atom of 128 rows x 4 blocks: byte (r % 32) * 16 + (r // 32) * 4 + j."""
    rows, blocks = scales.shape
    out = np.zeros(512, np.uint8)
    r = np.arange(rows)[:, None]
    j = np.arange(blocks)[None, :]
    out[(r % 32) * 16 + (r // 32) * 4 + j] = scales
    return out


#: thread 0 copies the A and B scale atoms (at smem_b + {SFA_OFF} / {SFB_OFF}) into TMEM columns
#: 256 and 260 (32x128b.warpx4: replicated to every lane quarter) before the MMAs
SF_COPY = ("\tmov.u32 %r7, 0;\nISSUE:",
           "\tadd.u32 %r70, %r11, {SFA_OFF};\n\tshr.u32 %r70, %r70, 4;\n\tcvt.u64.u32 %rd30, %r70;\n"
           "\tor.b64 %rd30, %rd30, 0x0000400800000000;\n\tadd.u32 %r71, %r42, 256;\n"
           "\ttcgen05.cp.cta_group::1.32x128b.warpx4 [%r71], %rd30;\n"
           "\tadd.u32 %r72, %r11, {SFB_OFF};\n\tshr.u32 %r72, %r72, 4;\n\tcvt.u64.u32 %rd31, %r72;\n"
           "\tor.b64 %rd31, %rd31, 0x0000400800000000;\n\tadd.u32 %r73, %r42, 260;\n"
           "\ttcgen05.cp.cta_group::1.32x128b.warpx4 [%r73], %rd31;\n\tmov.u32 %r7, 0;\nISSUE:")


def mx_ptx(kind_mods: str, sfa_off: int, sfb_off: int, sf_per_step: int = 1, version: str = "8.7"):
    """The one-tile kernel with the scale atoms copied to TMEM and, per k-step ``j``, the MMA
    ``tcgen05.mma.cta_group::1.kind::{kind_mods}`` whose scale-factor ids are ``j * sf_per_step``
    (instruction descriptor bits 29-30 and 4-5)."""
    sh = {1: 0, 2: 1, 4: 2}[sf_per_step]
    mma = (f"shl.b32 %r74, %r7, {29 + sh}; shl.b32 %r75, %r7, {4 + sh}; or.b32 %r76, %r52, %r74; "
           f"or.b32 %r76, %r76, %r75;\n\ttcgen05.mma.cta_group::1.kind::{kind_mods} [%r42], %rd12, %rd13, %r76, "
           f"[%r71], [%r73], %p7;")
    patch = [(SF_COPY[0], SF_COPY[1].replace("{SFA_OFF}", str(sfa_off)).replace("{SFB_OFF}", str(sfb_off)))]
    return mma_ptx("f8f6f4", mma=mma, patch=patch, version=version)
