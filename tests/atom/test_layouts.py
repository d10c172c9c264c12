"""Layouts travel with buffers: shared-memory buffers declare dtype, swizzle and major; TMA
copies and WGMMA descriptors are checked against them while the kernel is built."""
import pytest

from cutedsl.atom import TmaCopy, WarpgroupMMA
from cutedsl.compiler import TensorMapSpec
from cutedsl.errors import LayoutError
from cutedsl.ir import KernelBuilder, Param, SmemPlan


def in_kernel(plan, body):
    """Run ``body(smem, args)`` inside a kernel with tensor-map parameter ``t``."""
    kb = KernelBuilder("k", [Param("t", "tensormap")], block=(128,))
    with kb.build() as args:
        body(plan.bind(), args)
    return kb


def operand_plan(a_swizzle=128, b_major="MN", b_dtype="f16"):
    plan = SmemPlan()
    plan.buffer("a", (64, 64), "f16", swizzle=a_swizzle, major="K")
    plan.buffer("b", (64, 64), b_dtype, swizzle=128, major=b_major)
    return plan


def test_buffer_declares_its_layout():
    plan = SmemPlan()
    a = plan.buffer("a", (128, 64), "f16", stages=2, swizzle=128, major="K")
    assert (a.swizzle, a.major, a.align, a.offset % 1024) == (128, "K", 1024, 0)   # swizzle atom alignment
    assert a.describe() == "buffer 'a' (f16 [128, 64], swizzle 128 B, K-major)"
    assert plan.buffer("e", (8, 8), "f32").swizzle == 0


@pytest.mark.parametrize("kw,msg", [
    (dict(swizzle=48), r"swizzle 48 must be one of \(0, 32, 64, 128\)"),
    (dict(swizzle=128, align=128), "a 128-byte swizzle repeats every 1024 B; align 128"),
    (dict(swizzle=64), "rows of 128 B are wider than the 64-byte swizzle span"),
    (dict(major="N"), "major must be 'K', 'MN' or None"),
])
def test_bad_layout_declarations(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SmemPlan().buffer("a", (64, 64), "f16", **kw)


@pytest.mark.parametrize("spec,problem", [
    (TensorMapSpec("t", "f16", (64, 64)), r"swizzle 0 B != 128 B"),
    (TensorMapSpec("t", "bf16", (64, 64), swizzle=128), r"dtype bf16 != f16"),
    (TensorMapSpec("t", "f16", (32, 64), swizzle=128), r"box \[32, 64\] != tile \[64, 64\]"),
])
def test_tma_load_checks_tensor_map_against_buffer(spec, problem):
    def body(smem, args):
        from cutedsl.atom import MBarriers  # noqa: F401 - the check fires before the barrier is used
        TmaCopy(spec, args.t).load(smem["a"].tile(), None, 0, (0, 0))
    with pytest.raises(LayoutError, match=rf"TMA load: tensor map 't' \(.*\) does not match shared buffer 'a' "
                                          rf"\(f16 \[64, 64\], swizzle 128 B, K-major\): {problem}"):
        in_kernel(operand_plan(), body)


def test_tma_store_checks_too():
    plan = SmemPlan()
    plan.buffer("d", (64, 32), "f32")
    with pytest.raises(LayoutError, match=r"TMA store: .* swizzle 128 B\) does not match shared buffer 'd'"):
        in_kernel(plan, lambda smem, args: TmaCopy(TensorMapSpec("t", "f32", (64, 32), swizzle=128),
                                                   args.t).store(smem["d"].tile(), (0, 0)))


def test_wgmma_derives_descriptors_from_buffers():
    def body(smem, args):
        mma = WarpgroupMMA(64, 64, "f16")
        assert mma.operand_layout(smem["b"].tile(), "B").major == "MN"
        mma.mma(mma.zero(), smem["a"].tile(), smem["b"].tile())
    ir = str(in_kernel(operand_plan(), body).module)
    assert ir.count("nvvm.wgmma.mma_async") == 4 and ir.count("B[<f16>, <one>, <row>]") == 4   # MN-major B


def test_wgmma_k_steps_are_64_bit_adds_on_one_opaque_descriptor():
    """One k-tile's descriptors: each operand's descriptor assembled once behind an opaque
    ``mov.b64`` (LLVM cannot fold the constant high word into the steps), then one 64-bit add of
    the k-step offset >> 4 per k-step (ptxas: one UIADD3.64 each); a rematerialized descriptor is
    already whole behind its own opaque ``mov.b64`` (``wide``) and steps from it; offsets that are
    no multiple of 16 are refused."""
    import re

    def body(smem, args):
        mma = WarpgroupMMA(64, 64, "f16")
        mma.mma(mma.zero(), smem["a"].tile(), smem["b"].tile())
        b = mma.descriptor(smem["b"].tile(), "B")
        assert b.wide is None and b.rematerialized().wide is not None
        with pytest.raises(ValueError, match="descriptor offsets are multiples of 16 B, got 8"):
            b.stepper()(8)
    ir = str(in_kernel(operand_plan(), body).module)
    opaque = re.findall(r"(%\d+) = llvm.inline_asm \"mov.b64 \$0, \$1;\", \"=l,l\"", ir)
    assert len(opaque) == 2, ir
    consts = dict(re.findall(r"(%c\w+) = arith.constant (\d+) : i64", ir))
    steps = {(base, int(consts[c])) for base, c in re.findall(r"= arith.addi (%\d+), (%c\w+) : i64", ir)}
    # A (K-major): k16 steps of 32 B -> +2, +4, +6; B (MN-major, 64 x 64 f16): k16 steps of 2 KiB -> +128 ...
    assert {o for b, o in steps if b == opaque[1]} == {2, 4, 6}, steps
    assert {o for b, o in steps if b == opaque[0]} == {128, 256, 384}, steps


@pytest.mark.parametrize("plan_kw,problem", [
    (dict(a_swizzle=0), r"operand A \(64 x 64, 128-B swizzle\) does not match shared buffer 'a' "
                        r"\(f16 \[64, 64\], swizzle 0 B, K-major\): swizzle 0 B"),
    (dict(b_major="K"), r"operand B .* buffer 'b' .*: K-major, needs MN-major"),
    (dict(b_major=None), r"operand B .*: the buffer declares no major"),
    (dict(b_dtype="bf16"), r"operand B .*: dtype bf16 != f16"),
])
def test_wgmma_layout_mismatch_is_a_build_time_error(plan_kw, problem):
    def body(smem, args):
        mma = WarpgroupMMA(64, 64, "f16", b_major="MN")
        mma.mma(mma.zero(), smem["a"].tile(), smem["b"].tile())
    with pytest.raises(LayoutError, match=problem):
        in_kernel(operand_plan(**plan_kw), body)


def test_wgmma_refuses_raw_addresses_and_misaligned_sub_tiles():
    def body(smem, args):
        mma = WarpgroupMMA(64, 64, "f16")
        with pytest.raises(TypeError, match="operand A must be a shared-memory tile"):
            mma.mma(mma.zero(), smem["a"].address(), smem["b"].tile())
        with pytest.raises(LayoutError, match="offsets into a 128-byte swizzled buffer must be multiples of 1024 B"):
            smem["a"].tile(byte_offset=512)
        with pytest.raises(LayoutError, match=r"tile \[32, 64\] is not 64 x 64"):
            mma.mma(mma.zero(), smem["a"].tile(shape=(32, 64)), smem["b"].tile())
    in_kernel(operand_plan(), body)


def test_sub_tiles_stay_inside_their_stage():
    def body(smem, args):
        b = smem["b"].tile(1)
        assert b.sub(8192, shape=(64, 64)).shape == (64, 64)          # the second 64x64 box
        with pytest.raises(LayoutError, match=r"sub-tile \[64, 64\] at byte 16384 of buffer 'b' .* lies outside "
                                              r"its 16384-byte stage"):
            b.sub(16384, shape=(64, 64))
        b.sub(args.s)                                                  # dynamic offsets are the caller's
    plan = SmemPlan()
    plan.buffer("b", (128, 64), "f16", stages=2, swizzle=128, major="MN")
    kb = KernelBuilder("k", [Param("s", "i32")], block=(128,))
    with kb.build() as args:
        body(plan.bind(), args)


def test_anchored_descriptors_are_one_constant_from_the_origin():
    """Descriptor.anchored: a tile's descriptor as the opaque origin descriptor plus one i64
    constant ((static offset >> 4) + its LBO bits); tiles track their build-time offset
    (SmemTile.static); a layout with another high word or a misaligned offset is refused."""
    import re

    from cutedsl.atom.wgmma_descriptor import Descriptor, descriptor_anchor

    def body(smem, args):
        mma = WarpgroupMMA(64, 64, "f16")
        a, b = smem["a"].tile(), smem["b"].tile()
        assert (a.static, b.static, b.sub(1024, (32, 64)).static) == (0, 8192, 9216)
        anchor = descriptor_anchor(a.origin_address(), mma.operand_layout(a, "A"))
        d = Descriptor.anchored(anchor, mma.operand_layout(b, "B"), b.static)
        lbo = mma.operand_layout(b, "B").lbo >> 4
        assert d.wide_off == (8192 >> 4) + (lbo << 16) and d.wide is anchor[0]
        with pytest.raises(ValueError, match="non-negative multiples of 16 B, got 8"):
            Descriptor.anchored(anchor, mma.operand_layout(b, "B"), 8)
        with pytest.raises(ValueError, match="high word"):
            Descriptor.anchored((anchor[0], 0), mma.operand_layout(b, "B"), 0)     # an anchor of another SBO
    ir = str(in_kernel(operand_plan(), body).module)
    assert len(re.findall(r"llvm.inline_asm has_side_effects \"mov.b64 \$0, \$1;\"", ir)) == 1, ir
