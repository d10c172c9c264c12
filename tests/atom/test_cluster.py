"""Cluster atoms: rank/ids, mapa, barrier.cluster, remote mbarrier arrival and TMA multicast —
emitted PTX/SASS, and a 2-CTA-cluster kernel that uses all of them on the emulator."""
import numpy as np
import pytest

from cutedsl.atom import cluster
from cutedsl.compiler.artifact import TensorMapSpec
from cutedsl.testing import build_kernel, normalize_ptx, run_kernel

BOX = (16, 32)          # f32 rows x cols multicast by rank 0 to both CTAs of the cluster
SPEC = TensorMapSpec("src", "f32", BOX, swizzle=0)


def _plan():
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("tile", BOX, "f32", align=128)
    plan.buffer("x", (128,), "i32")
    plan.barriers("full", 1)
    plan.barriers("remote", 1)
    plan.barriers("sig", 1)
    return plan


def _cluster_kernel(args, smem):
    """Per CTA of a (2, 1) cluster: init barriers, cluster sync; every thread stores
    ``tid + 1000 * rank + 1`` into the *peer's* x[tid] through mapa and arrives on the peer's
    "remote" barrier; rank 0 multicasts rows ``16 * clusterid ..`` of src to both CTAs (each CTA
    arms its own full barrier); lane r of every warp signals CTA r's "sig" barrier through a
    predicated remote arrival; each CTA waits for all three and copies tile and x to global; a
    final cluster sync keeps both CTAs alive until the peer is done with their memory."""
    from mlir.dialects import llvm, memref
    import cutedsl.ir as cir
    from cutedsl.atom import MBarriers, TmaCopy
    tid = cir.thread_idx()
    leader = tid.eq(0)
    rank = cluster.cta_rank()
    full = MBarriers(smem.barriers("full"), 1)
    remote = MBarriers(smem.barriers("remote"), 1)
    sig = MBarriers(smem.barriers("sig"), 1)
    full.init(0, 1, predicate=leader)
    remote.init(0, 128, predicate=leader)
    sig.init(0, 8, predicate=leader)              # lane r of each of the 2 x 4 warps signals CTA r
    MBarriers.fence_init()
    cluster.cluster_sync()                          # peers' barriers are initialised before use
    peer = rank ^ 1
    xaddr = smem["x"].address() + cir.i64(tid) * 4
    llvm.store(cir.i32(tid + rank * 1000 + 1), cluster.mapa(cir.i32(xaddr), peer))
    remote.arrive_cluster(0, peer)
    lane = cir.lane_id()
    sig.arrive_cluster(0, lane, predicate=lane < 2)   # predicated: lanes >= 2 (no such CTA) do not
    tma = TmaCopy(SPEC, args.src)
    with cir.If(leader):
        full.arrive_expect_tx(0, tma.box_bytes)
    with cir.If(leader & rank.eq(0)):
        mask = cluster.multicast_mask((2, 1), "x")
        tma.load(smem["tile"].view(), full, 0, (cluster.cluster_id("x") * BOX[0], 0), multicast_mask=mask)
    full.wait(0, 0)
    remote.wait(0, 0)
    sig.wait(0, 0)
    cta = cir.block_idx()
    out, outx = cir.GlobalPtr(args.out, "f32"), cir.GlobalPtr(args.outx, "i32")
    tile = smem["tile"].view()
    per = BOX[0] * BOX[1] // 128
    for j in range(per):
        e = tid * per + j
        v = cir.Scalar(memref.load(tile, [cir.index(e // BOX[1]), cir.index(e % BOX[1])]))
        out.store(cir.i64(cta * (BOX[0] * BOX[1]) + e), v)
    outx.store(cir.i64(cta * 128 + tid), cir.Scalar(memref.load(smem["x"].view(), [cir.index(tid)])))
    cluster.cluster_sync()


PARAMS = (("src", "tensormap"), ("out", "ptr"), ("outx", "ptr"))


@pytest.fixture(scope="module")
def cluster_kernel():
    return build_kernel(_cluster_kernel, params=PARAMS, plan=_plan(), cluster=(2, 1, 1))


def test_cluster_ptx_and_sass(cluster_kernel):
    k = cluster_kernel
    ptx = normalize_ptx(k.ptx)
    assert ".reqnctapercluster 2, 1, 1" in ptx
    assert "%cluster_ctarank" in ptx and "%clusterid.x" in ptx and "%cluster_ctaid.y" in ptx
    assert "mapa.shared::cluster.u64" in ptx and "st.shared::cluster.b32" in ptx
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64 _," in ptx
    assert "@p mapa.shared::cluster.u32 remote" in ptx
    assert "@p mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];" in ptx
    assert ptx.count("barrier.cluster.arrive.aligned;") == 2 and ptx.count("barrier.cluster.wait.aligned;") == 2
    assert ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
            in ptx)
    s = k.resources.sass
    assert s.get("UTMALDG") == 1 and s.get("UCGABAR_ARV") == 2 and s.get("UCGABAR_WAIT") == 2
    assert k.resources.spill_stores == 0


@pytest.mark.sim_kernel
def test_cluster_kernel_on_emulator(cluster_kernel, rng):
    from cutedsl.sim import Emulator
    emu = Emulator()
    grid = 4                                        # two clusters of two CTAs
    src = rng.integers(-100, 100, (grid // 2 * BOX[0] + 5, BOX[1])).astype(np.float32)
    dsrc = emu.to_device(src)
    tmap = emu.tensor_map(dsrc, src.shape, "f32", BOX)
    out = np.zeros((grid, *BOX), np.float32)
    outx = np.zeros((grid, 128), np.int32)
    run_kernel(cluster_kernel, [tmap, out, outx], grid=(grid, 1, 1), cluster=(2, 1, 1), emu=emu)
    got, gotx = out, outx
    for cta in range(grid):
        c = cta // 2
        assert np.array_equal(got[cta], src[c * BOX[0]:(c + 1) * BOX[0]]), cta
        peer_rank = (cta % 2) ^ 1
        assert np.array_equal(gotx[cta], np.arange(128) + 1000 * peer_rank + 1), cta


@pytest.mark.sim_kernel
def test_multicast_mask_values():
    """Masks for every CTA of a (2, 2) and a (4, 1) cluster, evaluated on the emulator."""
    import cutedsl.ir as cir

    def body(args, smem):
        out = cir.GlobalPtr(args.out, "i32")
        for i, (shape, along) in enumerate([((2, 2), "x"), ((2, 2), "y"), ((4, 1), "x"), ((1, 4), "y")]):
            for x in range(shape[0]):
                for y in range(shape[1]):
                    m = cluster.multicast_mask(shape, along, (cir.u32(x), cir.u32(y)))
                    out.store(cir.i64(i * 16 + x + y * shape[0]), m.to("i32", signed=False))
    k = build_kernel(body)
    got = np.zeros(64, np.int32)
    run_kernel(k, [got])
    assert list(got[0:4]) == [0b0011, 0b0011, 0b1100, 0b1100]      # (2,2) along x: rows of the cluster
    assert list(got[16:20]) == [0b0101, 0b1010, 0b0101, 0b1010]    # (2,2) along y: columns
    assert list(got[32:36]) == [0b1111] * 4 and list(got[48:52]) == [0b1111] * 4


def test_cluster_atom_errors():
    with pytest.raises(ValueError, match="cluster shape .* must have 1..16 CTAs"):
        cluster.multicast_mask((4, 8), "x")
    with pytest.raises(ValueError, match="multicast axis must be 'x' or 'y'"):
        cluster.multicast_mask((2, 1), "z")
    with pytest.raises(ValueError, match="cluster dimension must be one of"):
        cluster.cta_id("w")


def test_remote_arrival_scope_and_its_membars():
    """``arrive_cluster(scope=)``: ``.release.cluster`` makes ptxas fence (MEMBAR) at each
    arrival, the default ``.release.cta`` form CUTLASS's pipelines release operand stages with
    does not (the cluster syncs around them fence in both)."""
    import cutedsl.ir as cir
    from cutedsl.atom import MBarriers
    from cutedsl.ir import SmemPlan

    def body(args, smem):
        bars = MBarriers(smem.barriers("b"), 1)
        bars.init(0, 2, predicate=cir.thread_idx().eq(0))
        MBarriers.fence_init()
        cluster.cluster_sync()
        bars.arrive_cluster(0, cluster.cta_rank() ^ 1, scope=scope)
        bars.arrive_cluster(0, cluster.cta_rank() ^ 1, predicate=cir.lane_id().eq(0), scope=scope)
        cluster.cluster_sync()

    membars = {}
    for scope in ("cluster", "cta"):
        plan = SmemPlan()
        plan.barriers("b", 1)
        k = build_kernel(body, params=(("out", "ptr"),), plan=plan, cluster=(2, 1, 1))
        sem = ".release.cluster" if scope == "cluster" else ""
        assert k.ptx.count(f"mbarrier.arrive{sem}.shared::cluster.b64 _,") == 2, scope
        membars[scope] = k.resources.sass.get("MEMBAR", 0)
    assert membars["cluster"] >= membars["cta"] + 2, membars
    with pytest.raises(ValueError, match="scope must be 'cta' or 'cluster'"):
        MBarriers.arrive_cluster(None, 0, 0, scope="gpu")
