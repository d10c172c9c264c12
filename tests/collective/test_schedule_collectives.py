"""Collectives of the warp-specialized schedules: pipeline state skipping, cluster arrival
counts, the ordered barrier, and the persistent tile scheduler (host reference and the IR it
emits, run on the emulator)."""
import numpy as np
import pytest

from cutedsl.collective.tile_scheduler import DEFAULT_SM_COUNT, PersistentTileScheduler
from cutedsl.collective.pipeline import PipelineState
from cutedsl.ir import SmemPlan
from cutedsl.problem import GemmProblem


@pytest.mark.parametrize("stages", [1, 3, 4, 7])
def test_advance_by_matches_repeated_advance(stages):
    for start in range(2 * stages + 1):
        s0 = PipelineState.at(stages, start)
        for n in (0, 2, stages, 3 * stages + 1):
            s = s0
            for _ in range(n):
                s = s.advance()
            ref = PipelineState.at(stages, start + n)
            assert (s.index, s.phase) == (ref.index, ref.phase)


def _build(body, params, plan=None, block=(128, 1, 1), cluster=None):
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import KernelBuilder, Param
    kb = KernelBuilder("t", [Param(*p) for p in params], block=block, cluster=cluster)
    with kb.build() as args:
        smem = plan.bind() if plan is not None else None
        body(args, smem)
    return kb, compile_kernel(kb, dynamic_smem=plan.dynamic_bytes if plan is not None else 0)


def _run(kernel, args, grid, cluster=(1, 1, 1)):
    from cutedsl.sim import Emulator
    emu = Emulator()
    dev = [emu.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    emu.launch(emu.load(kernel.ptx), grid=grid, block=kernel.block, args=dev, cluster=cluster,
               smem=kernel.dynamic_smem)
    return emu, dev


def test_advance_by_in_ir_on_the_emulator(rng):
    """``advance_by(n)`` with IR ``n`` equals the host formula for every start state."""
    from cutedsl.ir import GlobalPtr, i32, thread_idx
    stages = 5

    def body(a, _):
        t = thread_idx()
        st = PipelineState.at(stages, t).advance_by(a.n)
        out = GlobalPtr(a.out, "i32")
        out.store(t * 2, i32(st.index))
        out.store(t * 2 + 1, i32(st.phase))

    _, k = _build(body, [("out", "ptr"), ("n", "i32")], block=(32, 1, 1))
    n = int(rng.integers(0, 40))
    emu, (out, _) = _run(k, [np.zeros(64, np.int32), n], 1)
    got = emu.to_host(out, (32, 2), np.int32)
    ref = [(PipelineState.at(stages, t + n).index, PipelineState.at(stages, t + n).phase) for t in range(32)]
    assert got.tolist() == [list(r) for r in ref], f"n={n}"


@pytest.mark.parametrize("cluster,count", [((1, 1), 4), ((2, 1), 8), ((1, 2), 8)])
def test_cluster_pipeline_empty_arrival_counts(cluster, count):
    """Empty barriers expect one arrival per consumer warp of every CTA in the cluster row and
    column; releases become remote arrivals (mapa + mbarrier.arrive.shared::cluster)."""
    from cutedsl.atom import MBarriers
    from cutedsl.collective import TmaPipeline
    from cutedsl.ir import thread_idx
    plan = SmemPlan()
    plan.barriers("full", 2)
    plan.barriers("empty", 2)

    def body(a, smem):
        p = TmaPipeline(MBarriers(smem.barriers("full"), 2), 1024, MBarriers(smem.barriers("empty"), 2),
                        consumers=4, cluster=cluster)
        assert p.peers == cluster[0] + cluster[1] - 1
        p.init(thread_idx().eq(0))
        p.sync_after_init()
        p.consumer_release_warp(PipelineState(2))

    cs = cluster[0] * cluster[1]
    _, k = _build(body, [("n", "i32")], plan, cluster=(cs, 1, 1) if cs > 1 else None)
    ptx = " ".join(k.ptx.split())
    inits = [l for l in k.ptx.splitlines() if "mbarrier.init" in l]
    assert len(inits) == 4                                  # 2 full, then 2 empty barriers
    full_reg, empty_reg = (l.split(",")[-1].strip(" ;") for l in (inits[0], inits[2]))
    assert f"mov.b32 {full_reg}, 1;" in ptx and f"mov.b32 {empty_reg}, {count};" in ptx
    if cs > 1:
        # CTA scope (CUTLASS's consumer_release): a cluster-scope release costs MEMBARs per k-tile
        assert "mapa.shared::cluster" in k.ptx and "@p mbarrier.arrive.shared::cluster.b64 _, [remote];" in k.ptx
        assert ".release.cluster.shared::cluster" not in k.ptx
        assert "barrier.cluster.arrive" in k.ptx and "barrier.cluster.wait" in k.ptx
    else:
        assert "mapa" not in k.ptx and "bar.sync" in k.ptx


def test_ordered_sequence_barrier_alternates_groups_on_the_emulator():
    """Two warps take turns through an OrderedSequenceBarrier (depth 1, length 2): the order of
    their appends to a log in global memory is 0, 1, 0, 1, ... whatever the scheduling."""
    from cutedsl.atom import MBarriers
    from cutedsl.collective import OrderedSequenceBarrier
    from cutedsl.ir import GlobalPtr, If, Loop, i32, thread_idx
    from mlir.dialects import gpu
    plan = SmemPlan()
    plan.barriers("order", 2)
    plan.buffer("pos", (1,), "i32", align=16)
    turns = 4

    def body(a, smem):
        from mlir.dialects import memref
        t = thread_idx()
        g = t // 32
        ob = OrderedSequenceBarrier(MBarriers(smem.barriers("order"), 2), depth=1, length=2, arrivals=32)
        ob.init(t.eq(0))
        MBarriers.fence_init()
        view = smem["pos"].view()
        zero = i32(0).to("index")
        with If(t.eq(0)):
            memref.store(i32(0), view, [zero])
        gpu.barrier()
        log = GlobalPtr(a.out, "i32")
        loop = Loop(0, turns)
        for i in loop:
            ob.wait(0, g, i)
            with If((t % 32).eq(0)):
                p = memref.load(view, [zero])
                log.store(p, i32(g))
                memref.store(p + 1, view, [zero])
            ob.arrive(0, g)

    _, k = _build(body, [("out", "ptr")], plan, block=(64, 1, 1))
    emu, (out,) = _run(k, [np.full(2 * turns, -1, np.int32)], 1)
    assert emu.to_host(out, (2 * turns,), np.int32).tolist() == [0, 1] * turns


# -- persistent tile scheduler ------------------------------------------------------------

@pytest.mark.parametrize("raster", ["M", "N"])
@pytest.mark.parametrize("swizzle", [1, 2, 4, 8])
@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2)])
def test_host_rasterization_covers_every_tile_once(raster, swizzle, cluster):
    for m, n, sms in ((1000, 700, 5), (64, 64, 132), (900, 2000, 7), (130, 70, 1)):
        s = PersistentTileScheduler(64, 128, raster, swizzle, sms, cluster)
        grid = s.grid(GemmProblem(m, n, 1))
        assert grid[1:] == (1, 1) and grid[0] % s.cluster_size == 0
        tiles = [t for c in range(grid[0]) for t in s.cta_tiles(c, m, n)]
        ctm, ctn = s.cluster_tiles(m, n)
        assert len(tiles) == len(set(tiles)) == ctm * ctn * s.cluster_size
        assert grid[0] == min(ctm * ctn, max(1, sms // s.cluster_size)) * s.cluster_size


def test_grid_sizes_and_raster_orders():
    s = PersistentTileScheduler(128, 128)
    assert s.grid(GemmProblem(128 * 20, 128 * 20, 1)) == (DEFAULT_SM_COUNT, 1, 1)      # 400 tiles, 132 SMs
    assert s.grid(GemmProblem(100, 100, 1)) == (1, 1, 1)
    assert PersistentTileScheduler(128, 128, persistent=False).grid(GemmProblem(128 * 20, 128 * 20, 1)) == (400, 1, 1)
    assert PersistentTileScheduler(128, 128, sm_count=7, cluster=(2, 1)).grid(GemmProblem(10 ** 4, 10 ** 4, 1)) == (6, 1, 1)
    # raster M walks down M first; raster N with swizzle 2 walks a 2-row strip along N
    assert [PersistentTileScheduler(64, 64, "M", persistent=False).cta_tiles(c, 192, 128)[0] for c in range(4)] \
        == [(0, 0), (64, 0), (128, 0), (0, 64)]
    assert [PersistentTileScheduler(64, 64, "N", 2, persistent=False).cta_tiles(c, 256, 192)[0] for c in range(5)] \
        == [(0, 0), (64, 0), (0, 64), (64, 64), (0, 128)]
    with pytest.raises(ValueError, match="raster"):
        PersistentTileScheduler(64, 64, "K")
    with pytest.raises(ValueError, match="swizzle"):
        PersistentTileScheduler(64, 64, "M", 3)
    with pytest.raises(ValueError, match="sm_count"):
        PersistentTileScheduler(64, 64, sm_count=0)


@pytest.mark.parametrize("raster,swizzle,cluster,persistent", [
    ("M", 1, (1, 1), True), ("N", 2, (1, 1), True), ("M", 4, (2, 1), True), ("N", 8, (1, 2), True),
    ("N", 1, (2, 1), False)])
def test_emitted_schedule_matches_host_reference(raster, swizzle, cluster, persistent, rng):
    """The kernel-side work_count/tile_origin give exactly the host reference's tiles, in
    order, for every CTA (random problem size, small SM count so CTAs loop)."""
    from cutedsl.ir import GlobalPtr, If, Loop, block_idx, i32, thread_idx
    sms = int(rng.integers(1, 6))
    m, n = int(rng.integers(1, 700)), int(rng.integers(1, 700))
    s = PersistentTileScheduler(64, 64, raster, swizzle, sms, cluster, persistent=persistent)
    grid = s.grid(GemmProblem(m, n, 1))[0]
    most = max(len(s.cta_tiles(c, m, n)) for c in range(grid)) + 1     # room for one stray write

    def body(a, _):
        s.bind(GemmProblem(a.m, a.n, None), 64)
        out = GlobalPtr(a.out, "i32")
        cta = block_idx() * (2 * most)
        with If(thread_idx().eq(0)):
            loop = Loop(0, s.work_count())
            for i in loop:
                m0, n0 = s.tile_origin(i)
                out.store(cta + i * 2, i32(m0))
                out.store(cta + i * 2 + 1, i32(n0))

    cs = s.cluster_size
    _, k = _build(body, [("out", "ptr"), ("m", "i32"), ("n", "i32")], block=(32, 1, 1),
                  cluster=(cs, 1, 1) if cs > 1 else None)
    emu, (out, _, _) = _run(k, [np.full(grid * 2 * most, -1, np.int32), m, n], grid, (cs, 1, 1))
    got = emu.to_host(out, (grid, most, 2), np.int32)
    for c in range(grid):
        ref = s.cta_tiles(c, m, n)
        assert [tuple(x) for x in got[c, :len(ref)]] == ref, (c, m, n, sms)
        assert (got[c, len(ref):] == -1).all()
