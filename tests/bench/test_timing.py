"""Statistics and timers of the benchmark harness, without a GPU: the CUDA-event timer runs
against a recording fake of the driver API."""
import math

import pytest

from cutedsl.bench import timing
from cutedsl.errors import LaunchError


def test_median_geomean_tflops():
    assert timing.median([3.0, 1.0, 2.0]) == 2.0
    assert timing.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError, match="median of no values"):
        timing.median([])
    assert timing.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert timing.geomean([2.0, None, float("nan"), 0.0, 8.0]) == pytest.approx(4.0)   # non-values ignored
    assert timing.geomean([None]) is None
    assert timing.tflops(1000, 1000, 1000, 1.0) == pytest.approx(2.0)      # 2e9 FLOP in 1 ms
    assert timing.tflops(10, 10, 10, None) is None and timing.tflops(10, 10, 10, 0.0) is None


def test_rotation_is_round_robin_and_timed_continues_after_warmup():
    warm, timed = timing.rotation(3, 4, 5)
    assert warm == [0, 1, 2, 0] and timed == [1, 2, 0, 1, 2]
    assert all(a != b for a, b in zip(timed, timed[1:]))
    assert timing.rotation(1, 0, 3) == ([], [0, 0, 0])
    with pytest.raises(ValueError):
        timing.rotation(0, 1, 1)


def test_sets_needed_exceeds_three_l2_within_budget():
    l2 = 50 << 20
    assert timing.sets_needed(10 << 20, l2, 1 << 40) == 8                  # capped at max_sets
    assert timing.sets_needed(40 << 20, l2, 1 << 40) == math.ceil(150 / 40)
    assert timing.sets_needed(1 << 30, l2, 1 << 40) == 1                   # one set already evicts L2
    assert timing.sets_needed(40 << 20, l2, 80 << 20) == 2                 # memory budget wins
    assert timing.sets_needed(40 << 20, 0, 1 << 40) == 1                   # no L2 known: no rotation


class FakeDriver:
    """Records event calls; elapsed time of pair i is (i + 1) ms."""

    class CUresult:
        CUDA_SUCCESS = 0

    CUstream = int

    def __init__(self, fail_on=None):
        self.log, self.n, self.fail_on = [], 0, fail_on

    def cuEventCreate(self, flags):
        self.n += 1
        return 0, self.n

    def cuEventRecord(self, ev, stream):
        self.log.append(("record", ev, stream))
        return (1,) if self.fail_on == "record" else (0,)

    def cuEventSynchronize(self, ev):
        self.log.append(("sync", ev))
        return (0,)

    def cuEventElapsedTime(self, a, b):
        return 0, float((a + 1) // 2)

    def cuEventDestroy(self, ev):
        self.log.append(("destroy", ev))
        return (0,)


def test_event_timer_brackets_each_call_and_synchronises_once():
    drv = FakeDriver()
    t = timing.EventTimer(drv)
    order = []
    fns = [lambda i=i: order.append(("fn", i)) or drv.log.append(("fn", i)) for i in range(3)]
    ms = t.time(fns, between=lambda: drv.log.append(("flush",)))
    assert ms == [1.0, 2.0, 3.0]
    assert drv.log == [("flush",), ("record", 1, 0), ("fn", 0), ("record", 2, 0),
                       ("flush",), ("record", 3, 0), ("fn", 1), ("record", 4, 0),
                       ("flush",), ("record", 5, 0), ("fn", 2), ("record", 6, 0), ("sync", 6)]
    t.time(fns[:2])                     # events are reused, not re-created
    assert drv.n == 6
    t.close()
    assert [e for e in drv.log if e[0] == "destroy"] == [("destroy", i) for i in range(1, 7)]


def test_event_timer_raises_on_driver_error():
    with pytest.raises(LaunchError, match="cuEventRecord failed"):
        timing.EventTimer(FakeDriver(fail_on="record")).time([lambda: None])


def test_wall_timer_synchronises_after_each_call():
    clock = iter([0.0, 0.002, 1.0, 1.005])
    syncs = []
    t = timing.WallTimer(synchronize=lambda: syncs.append(1), clock=lambda: next(clock))
    assert t.time([lambda: None, lambda: None]) == pytest.approx([2.0, 5.0])
    assert len(syncs) == 2
