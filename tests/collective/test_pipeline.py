"""Collectives: pipeline state arithmetic, TMA pipeline barriers, epilogue planning."""
import pytest

from cutedsl.collective import PipelineState, TmaStoreEpilogue, GlobalEpilogue
from cutedsl.ir import SmemPlan


@pytest.mark.parametrize("stages", [1, 2, 3, 7])
def test_pipeline_state_advance_matches_iteration_formula(stages):
    s = PipelineState(stages)
    for it in range(3 * stages + 2):
        ref = PipelineState.at(stages, it)
        assert (s.index, s.phase) == (ref.index, ref.phase) == (it % stages, (it // stages) & 1)
        s = s.advance()


def test_pipeline_state_in_ir_and_wait():
    from cutedsl.atom import MBarriers
    from cutedsl.collective import TmaPipeline
    from cutedsl.ir import KernelBuilder, Loop, Param, thread_idx
    plan = SmemPlan()
    plan.barriers("full", 3)
    plan.barriers("empty", 3)
    kb = KernelBuilder("pipe", [Param("n", "i32")])
    with kb.build() as a:
        smem = plan.bind()
        pipe = TmaPipeline(MBarriers(smem.barriers("full"), 3), 4096,
                           MBarriers(smem.barriers("empty"), 3), consumers=1)
        pipe.init(thread_idx().eq(0))
        loop = Loop(0, a.n, carry=PipelineState(3).carry())
        for i, carried in loop:
            st = PipelineState.from_carry(3, carried)
            pipe.producer_acquire(st)
            pipe.producer_expect(st)
            pipe.consumer_wait(st)
            pipe.consumer_release(st)
            loop.next(*st.advance().carry())
    ir = str(kb.module)
    assert ir.count("nvgpu.mbarrier.try_wait.parity") == 2 and "nvgpu.mbarrier.arrive.expect_tx" in ir
    assert "nvgpu.mbarrier.arrive " in ir and "arith.select" in ir


def test_epilogue_plans():
    e = TmaStoreEpilogue(128, 256, "f32")
    # sub-tiles are 64 rows x one 128-byte swizzle row; two buffers per warpgroup by default
    assert e.epi_n == 32 and e.tensor_maps()[0].box == (64, 32) and e.tensor_maps()[0].swizzle == 128
    assert TmaStoreEpilogue(64, 256, "f16").epi_n == 64
    plan = SmemPlan()
    e.plan(plan)
    assert plan.buffers["epilogue"].nbytes == 2 * 64 * 128 and plan.buffers["epilogue"].align == 1024
    e.configure(warpgroups=2, buffers=4)
    assert e.smem_bytes == 2 * 4 * 8192
    g = GlobalEpilogue(64, 64, "bf16")
    assert g.d_param().kind == "ptr" and g.tensor_maps() == []
    with pytest.raises(ValueError, match="f32, f16, bf16, e4m3 or e5m2, got f64"):
        GlobalEpilogue(64, 64, "f64")
