"""The work-unit protocol beyond GEMM (issue 38): an attention problem's units -- (query block,
head, sequence, split) over an ``AttentionProblem`` -- handed out by the problem-generic
persistent scheduler (and its one-unit-per-CTA base) that the GEMM schedulers are instances of.
A tiny kernel writes the coordinates of every unit each CTA walks (``work_loop`` + ``work_unit``);
on the emulator (eager and adversarial) every unit appears exactly once, in the host reference's
order per CTA, on shapes that are not block multiples, with the causal longest-first order."""
import numpy as np
import pytest

from cutedsl.collective.work_unit import AttentionUnits, PersistentScheduler, UnitScheduler
from cutedsl.problem import AttentionProblem


def _run(kern, args, grid=1, cluster=None, emu=None):
    """Launch on the emulator with numpy arguments as device buffers; returns them and the emulator."""
    from cutedsl.sim import Emulator
    from cutedsl.testing import run_kernel
    emu = emu or Emulator()
    dev = [emu.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    run_kernel(kern, dev, grid=grid, cluster=cluster, emu=emu)
    return dev, emu


def problem(batch, seqlen_q, heads):
    return AttentionProblem(batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_q, heads=heads, kv_heads=1, head_dim=64)


def test_host_units_cover_the_problem_once():
    p = problem(2, 200, 3)                       # 200 rows: 4 query blocks of 64, the last partial
    units = AttentionUnits(64)
    assert units.host_count(p) == 4 * 3 * 2
    seen = [units.host_unit(i, p) for i in range(units.host_count(p))]
    assert sorted(seen) == [(q, h, b, 0) for q in range(4) for h in range(3) for b in range(2)]
    # longest first: the last query block (the most keys under a causal mask) leads
    lpt = AttentionUnits(64, longest_first=True)
    order = [lpt.host_unit(i, p)[0] for i in range(lpt.host_count(p))]
    assert order == sorted(order, reverse=True) and order[0] == 3
    split = AttentionUnits(64, splits=3)
    assert [split.host_unit(i, p) for i in range(4)] == [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 1, 0, 0)]
    s = PersistentScheduler(units, sm_count=5)
    assert s.grid(p) == (5, 1, 1) and sorted(u for c in range(5) for u in s.cta_units(c, p)) == list(range(24))
    assert PersistentScheduler(units, sm_count=4, cluster_size=2).grid(p) == (4, 1, 1)
    assert PersistentScheduler(units, persistent=False, cluster_size=2).grid(p) == (48, 1, 1)
    assert UnitScheduler(units).grid(p) == (24, 1, 1)


@pytest.mark.parametrize("kw,msg", [(dict(block_m=0), "block_m must be a positive int, got 0"),
                                    (dict(block_m=64, splits=0), "splits must be a positive int, got 0")])
def test_unit_space_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        AttentionUnits(**kw)


def _walk_kernel(sched, most, cluster_size):
    from cutedsl.testing import build_kernel as build
    import cutedsl.ir as cir

    def body(a, _):
        sched.bind(problem(a.batch, a.seqlen_q, a.heads))
        out = cir.GlobalPtr(a.out, "i32")
        base = cir.block_idx() * (4 * most)
        with cir.If(cir.thread_idx().eq(0)):
            def visit(i, carried):
                u = sched.work_unit(i)
                at = base + carried[0] * 4
                for f, v in enumerate((u.q_block, u.head, u.batch, u.split)):
                    out.store(at + f, cir.i32(v))
                return [carried[0] + 1]
            sched.work_loop([cir.u32(0)], visit)
    params = (("out", "ptr"), ("batch", "i32"), ("seqlen_q", "i32"), ("heads", "i32"))
    return build(body, params=params, block=(32, 1, 1), cluster=(cluster_size, 1, 1) if cluster_size > 1 else None)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("make", [
    lambda: PersistentScheduler(AttentionUnits(64, longest_first=True), sm_count=5),
    lambda: PersistentScheduler(AttentionUnits(128), sm_count=3, cluster_size=2),
    lambda: PersistentScheduler(AttentionUnits(64, splits=2), sm_count=7),
    lambda: UnitScheduler(AttentionUnits(64, longest_first=True)),
], ids=["persistent-lpt", "persistent-cluster2", "persistent-splits", "one-per-cta"])
def test_every_unit_once_on_the_emulator(make, rng, sim_seed):
    sched = make()
    p = problem(int(rng.integers(1, 4)), int(rng.integers(65, 400)), int(rng.integers(1, 5)))
    total = sched.host_count(p)
    grid = sched.grid(p)[0]
    cs = getattr(sched, "cluster_size", 1)
    walks = [sched.cta_units(c, p) for c in range(grid)] if isinstance(sched, PersistentScheduler) \
        else [[c] for c in range(grid)]
    most = max(len(w) for w in walks) + 1            # room for one stray unit per CTA
    kern = _walk_kernel(sched, most, cs)
    dev, emu = _run(kern, [np.full(grid * most * 4, -1, np.int32), p.batch, p.seqlen_q, p.heads],
                   grid=grid, cluster=(cs, 1, 1))
    got = emu.to_host(dev[0], (grid, most, 4), np.int32)
    units = sched.units
    for c, walk in enumerate(walks):
        want = [units.host_unit(u, p) for u in walk]
        assert [tuple(x) for x in got[c, :len(walk)]] == want, (c, p)
        assert (got[c, len(walk):] == -1).all(), (c, p)
    # each CTA of a cluster runs its cluster's units; every unit exactly once per CTA rank
    for rank in range(cs):
        seen = sorted(tuple(x) for c in range(rank, grid, cs) for x in got[c] if x[0] >= 0)
        assert seen == sorted(units.host_unit(u, p) for u in range(total)), (rank, p)


def test_grid_form_launches_the_unit_space():
    """The grid form (one CTA per unit, the sm_90a attention forward's launch): the host grid is
    (q blocks, heads, batch) -- at least one query block --, and orders or splits that need a
    scheduler's linear walk are refused by name."""
    assert AttentionUnits(64).grid(problem(2, 200, 3)) == (4, 3, 2)
    assert AttentionUnits(128).grid(problem(1, 0, 5)) == (1, 5, 1)
    for kw in (dict(longest_first=True), dict(splits=2)):
        with pytest.raises(ValueError, match="the grid form runs units in launch order with no split"):
            AttentionUnits(64, **kw).grid(problem(1, 64, 1))


@pytest.mark.sim_kernel
def test_grid_unit_reads_the_cta_index(sim_seed):
    """IR: every CTA of a (3, 2, 2) launch reads its unit (q_block, head, batch) from blockIdx."""
    from cutedsl.testing import build_kernel as build
    import cutedsl.ir as cir
    units = AttentionUnits(64)
    grid = units.grid(problem(2, 150, 2))

    def body(a, _):
        u = units.grid_unit()
        out = cir.GlobalPtr(a.out, "i32")
        at = ((u.batch * 2 + u.head) * 3 + u.q_block) * 3
        with cir.If(cir.thread_idx().eq(0)):
            for f, v in enumerate((u.q_block, u.head, u.batch)):
                out.store(at + f, v)
    kern = build(body, params=(("out", "ptr"),), block=(32, 1, 1))
    dev, emu = _run(kern, [np.full(12 * 3, -1, np.int32)], grid=grid)
    got = emu.to_host(dev[0], (2, 2, 3, 3), np.int32)
    assert grid == (3, 2, 2)
    for b in range(2):
        for h in range(2):
            for q in range(3):
                assert tuple(got[b, h, q]) == (q, h, b)
