"""Shared-memory planner: offsets, alignment, stage strides, the 227 KiB limit, IR views."""
import pytest

from cutedsl.errors import SharedMemoryError
from cutedsl.ir import KernelBuilder, Param, SmemPlan
from cutedsl.ir.smem import SMEM_LIMIT


def test_layout_and_sizes():
    plan = SmemPlan()
    a = plan.buffer("a", (128, 64), "f16", stages=3, align=1024)
    b = plan.buffer("b", (10,), "f32", stages=2, align=128)
    plan.barriers("full", 3)
    assert (a.offset, a.stage_bytes, a.nbytes) == (0, 16384, 49152)
    assert b.offset == 49152 and b.stage_bytes == 128          # 40 B rounded up to the alignment
    assert plan.dynamic_bytes == 49152 + 256 + 1024 - 16       # slack to align the base at run time
    assert plan.static_bytes == 24
    assert plan.total_bytes == plan.dynamic_bytes + 24


def test_limit_raises_before_compiling():
    plan = SmemPlan()
    plan.buffer("a", (128, 64), "f16", stages=12, align=1024)          # 192 KiB
    with pytest.raises(SharedMemoryError, match=f"{SMEM_LIMIT} B limit"):
        plan.buffer("b", (128, 64), "f16", stages=3, align=1024)       # + 48 KiB
    assert "b" not in plan.buffers                  # a failed declaration leaves the plan unchanged


@pytest.mark.parametrize("bad", [dict(align=24), dict(stages=0), dict(shape=(0, 4))])
def test_bad_declarations(bad):
    kw = dict(name="x", shape=(4, 4), dtype="f16", stages=1, align=128) | bad
    with pytest.raises(ValueError):
        SmemPlan().buffer(**kw)


def test_views_and_addresses_in_ir():
    plan = SmemPlan()
    plan.buffer("a", (128, 64), "f16", stages=2, align=1024)
    plan.barriers("bar", 2)
    kb = KernelBuilder("k", [Param("s", "i32")])
    with kb.build() as args:
        smem = plan.bind()
        smem["a"].view(1)
        smem["a"].view(args.s, shape=(64, 64), byte_offset=8192)
        smem["a"].address(args.s)
        smem.barriers("bar")
        with pytest.raises(IndexError):
            smem["a"].view(2)
    ir = str(kb.module)
    assert "gpu.dynamic_shared_memory" in ir and "memref.view" in ir
    assert "memref<128x64xf16, #gpu.address_space<workgroup>>" in ir
    assert "nvgpu.mbarrier.create" in ir and "num_barriers = 2" in ir
