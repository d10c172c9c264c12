"""GEMM kernel hooks: new algorithms as subclasses (collective class attributes, the k-tile
range of a CTA, an overridden grid / tile scheduler) run through ``Gemm(config, kernel=...)``
on the emulator, on shapes that are not tile multiples, bit-exact with small-integer inputs."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import (AtomicAddEpilogue, GlobalEpilogue, MultistageMainloop, TileScheduler,
                                TmaStoreEpilogue)
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError
from cutedsl.ir import block_idx
from cutedsl.kernel import GemmKernel, MultistageGemmKernel, SingleTileGemmKernel
from cutedsl.problem import GemmProblem


def ints(rng, *shape):
    return rng.integers(-4, 5, shape).astype(np.float16)


class SecondHalfOfK(MultistageGemmKernel):
    """Reduces only over the upper half of the k-tiles."""

    def k_tile_range(self, k_tiles):
        half = k_tiles // 2
        return half, k_tiles - half


class TilesDownColumns(TileScheduler):
    """blockIdx.x walks M and blockIdx.y walks N (the transpose of the default)."""

    def grid(self, problem):
        tiles_m, tiles_n = self.tiles(problem.m, problem.n)
        return (tiles_m, tiles_n, 1)

    def tile_origin(self, i=0):
        return block_idx("x") * self.tile_m, block_idx("y") * self.tile_n


class ColumnOrderSingleTile(SingleTileGemmKernel):
    scheduler_cls = TilesDownColumns


def test_class_attributes_name_the_collectives():
    k = MultistageGemmKernel(64, 64, 2)
    assert isinstance(k, GemmKernel)
    assert type(k.mainloop) is MultistageGemmKernel.mainloop_cls is MultistageMainloop
    assert type(k.epilogue) is TmaStoreEpilogue and type(k.scheduler) is TileScheduler
    assert type(MultistageGemmKernel(64, 64, 2, epilogue=GlobalEpilogue).epilogue) is GlobalEpilogue
    assert k.grid(GemmProblem(150, 70, 10)) == (2, 3, 1)


@pytest.mark.parametrize("stages", [1, 3])
def test_k_tile_range_override(stages, rng, sim):
    m, n, k = 150, 70, 64 * 5 - 24                   # 5 k-tiles, the last partial: CTAs do tiles 2..4
    a, b = ints(rng, m, k), ints(rng, k, n)
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=stages), sim, kernel=SecondHalfOfK)
    assert isinstance(gemm.kernel, SecondHalfOfK) and gemm.kernel.stages == stages
    d = gemm(a, b)
    assert np.array_equal(d, a[:, 128:].astype(np.float64) @ b[128:].astype(np.float64))


@pytest.mark.parametrize("epilogue", ["global", "tma"])
def test_overridden_scheduler_grid_is_launched(epilogue, rng, sim):
    m, n, k = 150, 70, 100                            # 3 x 2 tiles: a wrong grid leaves tiles unwritten
    a, b = ints(rng, m, k), ints(rng, k, n)
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), schedule="single_tile", epilogue=epilogue), sim,
                kernel=ColumnOrderSingleTile)
    assert gemm.kernel.grid(GemmProblem(m, n, k)) == (3, 2, 1)
    assert np.array_equal(gemm(a, b), a.astype(np.float64) @ b.astype(np.float64))


def test_subclass_does_not_share_the_base_cache_entry():
    base = MultistageGemmKernel(64, 64, 2).config()
    sub = SecondHalfOfK(64, 64, 2).config()
    assert base["class"] != sub["class"]


def test_kernel_argument_must_be_a_gemm_kernel():
    with pytest.raises(ArgumentTypeError, match="kernel must be a GemmKernel subclass"):
        Gemm(GemmConfig(), kernel=MultistageMainloop)
    with pytest.raises(ConfigError, match=r"ColumnOrderSingleTile has no pipeline stages .* got GemmConfig\(stages=3\)"):
        Gemm(GemmConfig(stages=3), kernel=ColumnOrderSingleTile)


class EmptyGrid(MultistageGemmKernel):
    def grid(self, problem):
        return (0, 1, 1)


def test_bad_grid_is_rejected_before_launch(rng, sim):
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim, kernel=EmptyGrid)
    with pytest.raises(ArgumentError,
                       match=r"gridDim\.x = 0 CTAs \(EmptyGrid\.grid\(\)\); the hardware allows 1\.\.2147483647"):
        gemm(ints(rng, 70, 64), ints(rng, 64, 70))


class OneKTilePerCta(MultistageGemmKernel):
    """Split-K in the extreme: CTA z reduces k-tile z only and adds it into D atomically."""
    epilogue_cls = AtomicAddEpilogue

    def grid(self, problem):
        return (*super().grid(problem)[:2], -(-problem.k // 64))

    def k_tile_range(self, k_tiles):
        return block_idx("z"), 1


def test_atomic_add_epilogue_reduces_split_k_partials(rng, sim):
    from cutedsl.runtime import arrays
    m, n, k = 100, 50, 64 * 3 - 7                     # 2 x 1 partial tiles, 3 partial sums per element
    a, b = ints(rng, m, k), ints(rng, k, n)
    gemm = Gemm(GemmConfig(tile=(64, 64, 64), stages=2, epilogue="global"), sim, kernel=OneKTilePerCta)
    assert gemm.kernel.grid(GemmProblem(m, n, k)) == (1, 2, 3)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(gemm(a, b), ref)
    out = arrays.to_device(sim, np.full((m, n), 7.0, np.float32))        # D is zero-filled first
    launch, result = gemm.prepare(a, b, out=out)
    launch()
    launch()                                                             # ... before every launch
    assert np.array_equal(arrays.to_host(result()), ref)
    sass = gemm.compiled.resources.sass
    assert sass.get("REDG", 0) == 32 and "STG" not in sass                # 64x64 tile / 128 threads


def test_atomic_add_epilogue_is_f32_only():
    with pytest.raises(ConfigError, match="^OneKTilePerCta: AtomicAddEpilogue reduces in f32: out_dtype must be f32, "
                                          "got f16$"):
        Gemm(GemmConfig(out_dtype="f16", epilogue="global"), kernel=OneKTilePerCta)


@pytest.mark.parametrize("schedule,cluster", [("multistage", (1, 1)), ("warp_specialized", (1, 1)),
                                              ("pingpong", (2, 1))])
def test_one_load_stage_hook_issues_every_stage_fill(schedule, cluster):
    """``load_stage`` is the one place a stage's TMA boxes are issued, by the multistage and
    the warp-specialized mainloops alike (clusters included): a subclass overriding it sees
    every fill site, with the absolute k-tile."""
    cfg = GemmConfig(tile=(128, 64, 64), stages=2, schedule=schedule, cluster=cluster)
    base = cfg._kernel_cls()
    calls = []

    class Spy(base.mainloop_cls):
        def load_stage(self, ops, pipeline, state, k_tile, m0, n0, predicate=None):
            calls.append((type(state.index), predicate is not None))
            super().load_stage(ops, pipeline, state, k_tile, m0, n0, predicate)

    class Kernel(base):
        mainloop_cls = Spy

    k = cfg.kernel(kernel_cls=Kernel)
    k.define()
    # multistage: 2 prologue fills + the refill in the loop, each predicated on the elected
    # lane; warp-specialized: the producer loop's one fill site (inside the producer thread's branch)
    assert len(calls) == (3 if schedule == "multistage" else 1), calls
    assert all(pred == (schedule == "multistage") for _, pred in calls), calls


@pytest.mark.parametrize("base", [MultistageGemmKernel, SingleTileGemmKernel],
                         ids=lambda c: c.__name__)
def test_plan_extra_hook_and_one_smem_plan(base):
    """Every GEMM kernel has one ``smem_plan`` (mainloop + epilogue + ``plan_extra``), so a
    subclass's own buffers are planned (and checked against the 227 KiB limit) the same way
    for every schedule; the single-tile kernel declares its slot there too."""
    from cutedsl.errors import SharedMemoryError
    from cutedsl.kernel.warp_specialized import PingpongGemmKernel

    class Extra(base):
        extra = 4096

        def plan_extra(self, plan):
            super().plan_extra(plan)
            plan.buffer("scratch", (self.extra,), "f32")

    k = Extra(128, 128, epilogue=TmaStoreEpilogue)
    plan = k.smem_plan()
    assert "scratch" in plan.buffers and "epilogue" in plan.buffers
    assert {"a", "b"} <= set(plan.buffers)
    assert plan.total_bytes >= base(128, 128, epilogue=TmaStoreEpilogue).smem_plan().total_bytes + 4 * 4096
    Extra.extra = 60 * 1024                    # 240 KiB more: past the limit
    with pytest.raises(SharedMemoryError, match="232448 B limit"):
        Extra(128, 128).smem_plan()
    # the ping-pong kernel's ordered barrier (4 mbarriers) beside 3 full + 3 empty ones
    assert PingpongGemmKernel(128, 128, stages=3).smem_plan().static_bytes == 8 * (3 + 3 + 4)


class UpperHalfOfKScheduler(TileScheduler):
    """A scheduler that gives every CTA the upper half of the k-tiles only."""

    def k_tile_range(self, k_tiles):
        half = k_tiles // 2
        return half, k_tiles - half


@pytest.mark.parametrize("base", [MultistageGemmKernel, SingleTileGemmKernel], ids=lambda c: c.__name__)
def test_scheduler_decides_the_k_tile_range(base, rng, sim):
    """``GemmKernel.k_tile_range`` asks the tile scheduler, so split-K-like schedules are
    scheduler subclasses (``examples/splitk_by_subclassing.py``)."""
    class Kernel(base):
        scheduler_cls = UpperHalfOfKScheduler

    m, n, k = 70, 100, 64 * 5 - 24                   # 5 k-tiles, the last partial: tiles 2..4 count
    a, b = ints(rng, m, k), ints(rng, k, n)
    schedule = "multistage" if base is MultistageGemmKernel else "single_tile"
    d = Gemm(GemmConfig(tile=(64, 64, 64), stages=1, schedule=schedule), sim, kernel=Kernel)(a, b)
    assert np.array_equal(d, a[:, 128:].astype(np.float64) @ b[128:].astype(np.float64))


def test_one_scheduler_protocol_hands_out_work_tiles():
    """Issue 19: every scheduler takes a GemmProblem on the host and hands the kernel one
    WorkTile (m0, n0, l, k range, valid) per unit of work."""
    from cutedsl.collective.tile_scheduler import PersistentTileScheduler, WorkTile
    p = GemmProblem(300, 200, 130)
    assert (p.m, p.n, p.k, p.l) == (300, 200, 130, 1) and tuple(p) == (300, 200, 130, 1)
    assert p.tiles(128, 64) == (3, 4)
    assert TileScheduler(128, 64).grid(p) == (4, 3, 1)
    assert PersistentTileScheduler(128, 64, sm_count=5).grid(p) == (5, 1, 1)
    s = TileScheduler(128, 64)
    s.bind(GemmProblem(None, None, None), 64)
    s._k_tiles = 7                                   # as if emitted: a Python stand-in for the IR value
    s.tile_origin = lambda i=0: (10 * i, 20 * i)
    assert s.work_tile(2) == WorkTile(20, 40, 0, 0, 7, True)
    assert s.work_tile(1, lambda kt: (kt - 3, 3)) == WorkTile(10, 20, 0, 4, 3, True)


def test_a_grid_override_of_the_old_protocol_is_a_clear_error():
    class OldGrid(TileScheduler):
        def grid(self, m, n, k=0):
            return (1, 1, 1)

    class K(MultistageGemmKernel):
        scheduler_cls = OldGrid
    with pytest.raises(ConfigError, match=r"OldGrid.grid\(self, m, n, k\) uses the old protocol: grid\(\) now "
                                          r"takes one GemmProblem"):
        K(64, 64, 2)


def test_collectives_keep_no_launch_state():
    """Issue 19: mainloop device methods take the bound operands, the pipeline and the state and
    return the state; building a kernel leaves nothing of the launch on the collective objects,
    and the warp-specialized mainloop has none of the multistage loop's methods."""
    from cutedsl.collective import MultistageMainloop, WarpSpecializedMainloop
    for cfg in (GemmConfig(tile=(128, 64, 64), stages=2), GemmConfig(schedule="pingpong", cluster=(2, 1))):
        k = cfg.kernel()
        before = dict(vars(k.mainloop))
        k.define()
        assert vars(k.mainloop) == before
    for name in ("setup", "load", "prologue", "mainloop", "run", "tail"):
        assert hasattr(MultistageMainloop, name) and not hasattr(WarpSpecializedMainloop, name), name
