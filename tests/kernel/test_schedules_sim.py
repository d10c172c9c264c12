"""Warp-specialized, cooperative and ping-pong GEMMs run for real (compiled PTX on the
emulator) through the public API: ``GemmConfig(schedule=..., cluster=..., sm_count=...)``, on
shapes that are not tile multiples, with fresh random inputs. Small-integer inputs with f32
output must match the float64 reference exactly."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.dtypes import dtype as _dtype
from cutedsl.problem import GemmProblem

SCHEDULES = ["warp_specialized", "cooperative", "pingpong"]
CLUSTERS = [(1, 1), (2, 1), (1, 2)]
TILES = [(64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 256)]
TOL = {"f16": 2e-3, "bf16": 1e-2}


def valid_tiles(schedule):
    if schedule == "cooperative":
        return [t for t in TILES if t[0] == 128]
    if schedule == "pingpong":
        return [t for t in TILES if t[0] * t[1] <= 128 * 128]
    return TILES


def run(cfg, m, n, k, rng, backend, integer=True):
    npd = _dtype(cfg.dtype).numpy
    if integer:      # small integers: every partial sum is exact in f32
        a, b = (rng.integers(-4, 5, s).astype(npd) for s in ((m, k), (k, n)))
    else:
        a, b = (rng.standard_normal(s, dtype=np.float32).astype(npd) for s in ((m, k), (k, n)))
    bt = b
    if cfg.b_major == "K":           # the kernel reads B K-major: pass a (K, N) view of (N, K) storage
        bt = np.ascontiguousarray(b.T).T
    d = Gemm(cfg, backend)(a, bt)
    assert d.shape == (m, n) and d.dtype == _dtype(cfg.out_dtype).numpy
    ref = a.astype(np.float64) @ b.astype(np.float64)
    what = f"{cfg} m={m} n={n} k={k} seed {rng.seed_value}"
    if cfg.out_dtype == "f32" and integer:
        assert np.array_equal(d.astype(np.float64), ref), what
    else:
        err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
        assert err < TOL.get(cfg.out_dtype, 2e-5), f"max rel err {err:.3e}: {what}"


@pytest.mark.parametrize("cluster", CLUSTERS, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_schedule_and_cluster(schedule, cluster, rng, sim):
    """3 x 3 output tiles (odd counts per cluster, the last ones partial), 3 k-tiles through 2
    stages (the ring wraps, the last k-tile partial), and 2 SMs: persistent CTAs loop over
    several tiles."""
    cm, cn = cluster
    m = 256 + int(rng.integers(1, 128))
    n = 256 + int(rng.integers(1, 128))
    k = 128 + int(rng.integers(1, 64))
    cfg = GemmConfig(tile=(128, 128, 64), stages=2, schedule=schedule, cluster=cluster, sm_count=2)
    grid = Gemm(cfg, sim).kernel.grid(GemmProblem(m, n, k))
    if schedule == "warp_specialized":        # one CTA per tile, cluster tiles rounded up
        assert grid == (-(-3 // cm) * cm * -(-3 // cn) * cn, 1, 1)
    else:                                     # persistent: 2 SMs' worth of CTAs
        assert grid == (2, 1, 1)
    run(cfg, m, n, k, rng, sim)


@pytest.mark.parametrize("cluster", [(2, 2), (4, 1), (1, 4)], ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("schedule,tile", [("warp_specialized", (64, 128)), ("cooperative", (128, 64)),
                                           ("pingpong", (64, 64))], ids=lambda x: x if isinstance(x, str) else
                         f"{x[0]}x{x[1]}")
def test_clusters_of_four(schedule, tile, cluster, rng, sim):
    """Four CTAs per cluster: 2x2 multicasts A and B (each CTA loads a quarter of the stage
    and receives the rest), 4x1 / 1x4 one operand to four CTAs; 5 x 5 tiles (partial cluster
    tiles at both edges), 8 SMs (two persistent clusters), B K-major on 4x1."""
    tm, tn = tile
    m = 4 * tm + int(rng.integers(1, tm))
    n = 4 * tn + int(rng.integers(1, tn))
    cfg = GemmConfig(tile=(tm, tn, 64), stages=2, schedule=schedule, cluster=cluster, sm_count=8,
                     b_major="K" if cluster == (4, 1) else "MN")
    run(cfg, m, n, 64 * 2 + int(rng.integers(1, 64)), rng, sim)


@pytest.mark.parametrize("cluster", CLUSTERS, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("schedule,tile", [(s, t) for s in SCHEDULES for t in valid_tiles(s) if t != (128, 128)],
                         ids=lambda x: x if isinstance(x, str) else f"{x[0]}x{x[1]}")
def test_every_tile_one_k_tile_small_n(schedule, tile, cluster, rng, sim):
    """Every tile a schedule accepts (128x128: above) on every cluster (bf16 on 1x2); M spans
    two tiles (second partial), N is smaller than one tile (a 1x2 cluster's second CTA has no
    tile in range) and K is a single partial k-tile."""
    tm, tn = tile
    cfg = GemmConfig(tile=(tm, tn, 64), stages="auto", schedule=schedule, sm_count=1, cluster=cluster,
                     dtype="bf16" if cluster == (1, 2) else "f16")
    run(cfg, tm + int(rng.integers(1, tm)), int(rng.integers(1, tn)), int(rng.integers(1, 65)), rng, sim)


@pytest.mark.parametrize("schedule,dtype,out,b_major,epilogue,cluster", [
    ("warp_specialized", "bf16", "bf16", "K", "tma", (1, 1)),
    ("cooperative", "f16", "f16", "N", "global", (1, 1)),
    ("cooperative", "bf16", "f32", "K", "tma", (1, 2)),
    ("pingpong", "bf16", "f32", "K", "tma", (2, 1)),
    ("pingpong", "f16", "bf16", "N", "global", (1, 2)),
])
def test_dtypes_layouts_epilogues(schedule, dtype, out, b_major, epilogue, cluster, rng, sim):
    cfg = GemmConfig(dtype=dtype, out_dtype=out, tile=(128, 64, 64), stages=3, schedule=schedule,
                     b_major=b_major, epilogue=epilogue, cluster=cluster, sm_count=3)
    run(cfg, 150 + int(rng.integers(0, 150)), 77 + int(rng.integers(0, 100)), 200, rng, sim,
        integer=out == "f32")


def test_one_tile_many_ctas_and_tiny_problem(rng, sim):
    """A 1 x 1 problem on a 2x1 cluster: one CTA of the cluster has no tile in range (it still
    loads zeros and multicasts its A/B slices); grid never exceeds the cluster tiles."""
    cfg = GemmConfig(tile=(64, 64, 64), stages=2, schedule="pingpong", cluster=(2, 1))
    assert Gemm(cfg, sim).kernel.grid(GemmProblem(1, 1, 1)) == (2, 1, 1)
    run(cfg, 1, 1, 1, rng, sim)


def _chaos_backend(seed):
    from cutedsl.sim import SimBackend
    return SimBackend(chaos=seed)


@pytest.mark.parametrize("schedule,cluster", [("warp_specialized", (2, 1)), ("cooperative", (1, 2)),
                                              ("pingpong", (1, 1)), ("pingpong", (2, 1))])
def test_adversarial_interleavings(schedule, cluster, rng):
    """Random warp interleavings and late asynchronous completion (the emulator's adversarial
    mode) must not change the result: ordering bugs show up here as races, deadlocks or
    wrong numbers."""
    be = _chaos_backend(int(rng.integers(1, 2 ** 31)))
    cfg = GemmConfig(tile=(128, 64, 64), stages=2, schedule=schedule, cluster=cluster, sm_count=2)
    run(cfg, 150 + int(rng.integers(0, 60)), 130 + int(rng.integers(0, 60)), 200, rng, be)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_split_k_slices_by_subclassing(schedule, rng, sim):
    """``k_tile_range`` splits K between CTAs (grid z) and ``AtomicAddEpilogue`` sums the
    slices; a slice with no k-tiles (more slices than k-tiles) contributes zeros, no hang."""
    from cutedsl.collective import AtomicAddEpilogue
    from cutedsl.ir import block_idx, select

    base = GemmConfig(schedule=schedule, epilogue="global")._kernel_cls()

    class SplitK(base):
        epilogue_cls = AtomicAddEpilogue
        persistent = False                   # one tile per CTA, slices along grid z

        def grid(self, problem):
            return (*self.scheduler.grid(problem)[:2], 3)

        def k_tile_range(self, k_tiles):
            per = (k_tiles + 2) // 3
            first = block_idx("z") * per
            end = select(first + per < k_tiles, first + per, k_tiles)
            return first, select(first < k_tiles, end - first, 0)

    m, n, k = 150, 70, 64 * 2 - 5            # 2 k-tiles over 3 slices: the last slice is empty
    a = rng.integers(-4, 5, (m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (k, n)).astype(np.float16)
    d = Gemm(GemmConfig(tile=(128, 64, 64), stages=2, schedule=schedule, epilogue="global"), sim,
             kernel=SplitK)(a, b)
    assert np.array_equal(d, a.astype(np.float64) @ b.astype(np.float64)), f"seed {rng.seed_value}"


def test_raster_auto_walks_the_longer_dimension(rng, sim):
    """``raster="auto"`` (the default): a problem with more tile columns than rows runs the
    raster-N kernel (a variant compiled on first need), a tall one the raster-M kernel."""
    from cutedsl.runtime.arrays import TensorView
    cfg = GemmConfig(tile=(64, 64, 64), stages=2, schedule="pingpong", sm_count=2)
    assert cfg.raster == "auto"
    g = Gemm(cfg, sim)
    wide = [TensorView.of(np.zeros(s, np.float16), nm) for s, nm in (((70, 64), "a"), ((64, 300), "b"))]
    tall = [TensorView.of(np.zeros(s, np.float16), nm) for s, nm in (((300, 64), "a"), ((64, 70), "b"))]
    assert g._layout_changes(*wide) == {"raster": "N"} and g._layout_changes(*tall) == {}
    assert g.variant(raster="N").kernel.scheduler.raster == "N" and g.kernel.scheduler.raster == "M"
    run(cfg, 70, 300, 100, rng, sim)           # wide: through the N variant
    run(cfg, 300, 70, 100, rng, sim)           # tall: the M kernel
