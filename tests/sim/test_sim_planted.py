"""Planted synchronisation bugs: the library's multistage GEMM (TMA loads, 6 stages, empty/full
mbarriers, wgmma, TMA-store epilogue) with exactly one synchronisation step removed from its
PTX. Each test shows which mechanism catches the bug - the happens-before race detector in
one eager run, or the adversarial mode (``chaos=SEED``) by a wrong result or a deadlock - and,
where that is the point, that a plain eager run without the detector does not."""
import re

import numpy as np
import pytest

from cutedsl.sim import DeadlockError, RaceError, SimBackend, SimRuntimeError
from simkit import fixture
from test_sim_kernels import NP, run_gemm

NAME = "gemm_ms_128x128_f16_tma"


@pytest.fixture(autouse=True)
def _modes_chosen_per_run(monkeypatch):
    # every launch here names its mode (chaos=None is eager): a process-wide CUTEDSL_SIM_CHAOS
    # must not turn the eager runs into adversarial ones
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


SEEDS = range(1, 9)


def planted(pattern, count=1, which=0):
    """The fixture's PTX without the ``which``-th of the ``count`` lines matching ``pattern``."""
    ptx, _meta = fixture(NAME)
    lines = ptx.split("\n")
    hits = [i for i, ln in enumerate(lines) if re.search(pattern, ln)]
    assert len(hits) == count, hits
    del lines[hits[which]]
    return "\n".join(lines)


def operands():
    s = fixture(NAME)[1]["shape"]
    rng = np.random.default_rng(11)
    a = rng.integers(-3, 4, (s["m"], s["k"])).astype(NP[s["dtype"]])
    b = rng.integers(-3, 4, (s["k"], s["n"])).astype(NP[s["dtype"]])
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def correct(ptx, **opts):
    a, b, ref = operands()
    out, _el, _be = run_gemm(NAME, a, b, SimBackend(**opts), ptx=ptx)
    return np.array_equal(out.astype(np.float64), ref)


def wrong_under_some_seed(ptx):
    """The first seed (of SEEDS) under which the kernel gives a wrong result, or None."""
    return next((s for s in SEEDS if not correct(ptx, race_check=False, chaos=s)), None)


def test_missing_wait_before_reading_the_accumulator():
    ptx = planted(r"wgmma\.wait_group\.sync\.aligned\s+0;")
    assert correct(ptx, race_check=False)                 # eager completion hides it
    with pytest.raises(RaceError, match=r"(?s)wgmma accumulator register %r\d+ .*wgmma\.mma_async.*"
                                        r"accessed by .*st\.shared.*wgmma\.wait_group covering"):
        correct(ptx)
    assert wrong_under_some_seed(ptx) is not None    # late accumulator writes: wrong result


def test_slot_refilled_before_the_consumers_released_it():
    # consumers arrive on the empty barrier without the covering wgmma.wait_group 1: the producer
    # refills a stage that no warp of the warpgroup knows the wgmma has finished reading
    # (the second of the two: the mainloop's, not the first k-tile's)
    ptx = planted(r"wgmma\.wait_group\.sync\.aligned\s+1;", 2, 1)
    assert correct(ptx, race_check=False)
    with pytest.raises(RaceError, match=r"(?s)read by .*wgmma of warpgroup 0.*write by .*TMA unit.*"
                                        r"wgmma\.wait_group covering that wgmma group"):
        correct(ptx)
    assert wrong_under_some_seed(ptx) is not None    # late operand reads see the refill


def test_epilogue_smem_released_before_wait_group_read():
    # the epilogue stores the tile in two halves through one buffer: without the first
    # wait_group.read, the second half's st.shared may overwrite what the first store still reads
    ptx = planted(r"cp\.async\.bulk\.wait_group\.read\s+0;", 2, 0)
    assert correct(ptx, race_check=False)
    with pytest.raises(RaceError, match=r"(?s)read by .*bulk copies of warp 0.*cp\.async\.bulk\.tensor\.2d\.global.*"
                                        r"write by .*st\.shared.*wait_group\.read covering that bulk group"):
        correct(ptx)
    assert wrong_under_some_seed(ptx) is not None    # the store reads reassigned smem


def test_missing_proxy_fence_before_the_tma_store():
    ptx = planted(r"fence\.proxy\.async\.shared::cta;", 2, 0)
    # the data is right in every mode: only the detector's proxy rule sees the bug
    assert correct(ptx, race_check=False)
    assert correct(ptx, race_check=False, chaos=1)
    with pytest.raises(RaceError, match=r"(?s)write by .*st\.shared.*read by .*bulk copies of warp 0.*"
                                        r"TMA store source.*fence\.proxy\.async after the generic-proxy write"):
        correct(ptx)


def test_consumer_that_skips_its_release_deadlocks_with_the_seed_named():
    ptx = planted(r"mbarrier\.arrive\.shared\.b64\s+%rd\d+, \[%rd\d+\];")
    with pytest.raises(DeadlockError, match=r"(?s)deadlock.*seed 3; replay with CUTEDSL_SIM_CHAOS=3.*"
                                            r"mbarrier\.try_wait.*__mbarrier_0"):
        correct(ptx, chaos=3)


# -- planted in other kernels (issue #39): a shipped sm_100 GEMM and a hand-written SS wgmma ----

CUTE = "cute_dsl_gemm_sm100_1sm"        # quack 0.6.5's GemmSm100 compiled by CuTe DSL 4.8.1


def cute_planted(old, new, count=1):
    from test_cute_dsl_fixtures import fixture as cute_fixture
    text, _meta = cute_fixture(CUTE)
    assert text.count(old) == count, text.count(old)
    return text.replace(old, new)


def cute_run(ptx, **opts):
    from test_cute_dsl_fixtures import run_dense
    out, ref = run_dense(CUTE, 200, 136, 72, np.random.default_rng(1), 1, ptx=ptx, **opts)
    return np.array_equal(out, ref)


def test_missing_tcgen05_wait_ld_before_the_accumulator_is_rewritten():
    # the epilogue releases its TMEM accumulator (mbarrier.arrive to the MMA warp) after its
    # tcgen05.ld without tcgen05.wait::ld: the next tile's MMA may overwrite columns still being read
    ptx = cute_planted("\ttcgen05.wait::ld.sync.aligned;\n", "")
    assert cute_run(ptx, race_check=False)                  # loads complete at issue here
    assert cute_run(ptx, race_check=False, chaos=1)
    with pytest.raises(RaceError, match=r"(?s)read by .*tcgen05\.ld unit of warp \d.*write by .*tcgen05 unit.*"
                                        r"tcgen05\.mma.*missing: a tcgen05\.wait::ld.*rule tcgen05-ld-without-wait"):
        cute_run(ptx)
    assert cute_run(ptx, allow=("tcgen05-ld-without-wait",))    # the rule's own opt-out


def test_barrier_thread_count_mismatch():
    # the epilogue warps arrive at named barrier 7 counting 128 threads while the warps that
    # sync on it count 160 (the scheduler warp included): reported in every mode
    ptx = cute_planted("\tbar.arrive 7, 160;", "\tbar.arrive 7, 128;")
    for opts in ({}, {"race_check": False}, {"race_check": False, "chaos": 2}):
        with pytest.raises(SimRuntimeError, match=r"barrier 7: thread count (128 differs from 160|160 differs "
                                                  r"from 128) used by other warps in this generation"):
            cute_run(ptx, **opts)


def test_ss_wgmma_reading_other_warps_stores_without_a_barrier():
    # the four warps store the operands and each fences, but no barrier orders the other warps'
    # stores before each warp's wgmma.mma_async (.sync is per warp, PTX ISA 9.7.15.5.2)
    from test_sim_race_rules import run_ss, ss_kernel
    ptx = ss_kernel(sync="")
    for opts in ({"race_check": False}, {"race_check": False, "seed": 1}):
        got, want = run_ss(ptx, **opts)
        assert np.array_equal(got, want)                    # the warps meet at the wgmma here
    with pytest.raises(RaceError, match=r"(?s)write by .*st\.shared.*read by .*wgmma of warpgroup 0.*"
                                        r"rule wgmma-warpgroup-barrier"):
        run_ss(ptx)
