"""mbar_targets (cutedsl/sim/engines/mbarrier_object.py): the shared-memory mbarrier addresses of a
warp's lanes -> [(CTA, offset, lane count)]. One address for every lane (the usual case) is decoded
as a Python int; lanes on different barriers are counted per barrier; a generic address outside the
shared window, a misaligned offset and an offset past the CTA's shared memory are errors."""
import numpy as np
import pytest

from cutedsl.sim.engines.mbarrier_object import mbar_targets
from cutedsl.sim.frontend.errors import SimRuntimeError
from cutedsl.sim.machine.memory import SHARED_WIN


class _Ins:
    def where(self):
        return "PTX line 7: mbarrier.arrive"


class _Cta:
    rank = 0
    smem_size = 1024


class _Warp:
    cta = _Cta()


W, INS = _Warp(), _Ins()


@pytest.mark.parametrize("a", [SHARED_WIN + 64, np.full(32, SHARED_WIN + 64, np.uint64),
                               np.array([SHARED_WIN + 64], np.uint64)])
def test_one_barrier_for_every_lane(a):
    ((cta, off, n),) = mbar_targets(W, a, "generic", INS, None)
    assert cta is W.cta and off == 64 and n == (32 if getattr(a, "shape", ()) == (32,) else 1)


def test_lanes_on_two_barriers_are_counted_per_barrier():
    a = np.array([72] * 5 + [64] * 27, np.uint64)
    got = mbar_targets(W, a, "shared::cta", INS, None)
    assert [(off, n) for _c, off, n in got] == [(64, 27), (72, 5)]
    got = mbar_targets(W, a + np.uint64(SHARED_WIN), "generic", INS, None)
    assert [(off, n) for _c, off, n in got] == [(64, 27), (72, 5)]


@pytest.mark.parametrize("a", [64, np.array([SHARED_WIN + 64, 64], np.uint64)])
def test_a_generic_address_outside_the_shared_window_is_an_error(a):
    with pytest.raises(SimRuntimeError, match="mbarrier operand is not a shared-memory address\n    at PTX line 7"):
        mbar_targets(W, a, "generic", INS, None)


@pytest.mark.parametrize("off", [12, 1024])
def test_a_misaligned_or_out_of_range_offset_is_an_error(off):
    with pytest.raises(SimRuntimeError, match=f"mbarrier address offset {off} is misaligned or outside shared "
                                              r"memory \(1024 B\)"):
        mbar_targets(W, off, "shared::cta", INS, None)
