"""Architectures share collectives by composition, not by subclassing each other (issue 38):
no sm_100a collective has an sm_90a one in its MRO, and both GEMM mainloops hold the same
operand-ring configuration of the operand loader."""
import importlib
import inspect

import pytest

#: modules whose collectives are built on sm_90a's WGMMA (its descriptors, fragments, waits)
SM90 = ("tma_wgmma", "mainloop", "warp_specialized", "epilogue_tma")
#: modules whose collectives are built on sm_100a's tcgen05 / TMEM / cluster launch control
SM100 = ("tcgen05_mainloop", "tmem_epilogue", "tmem_epilogue_tma", "clc_scheduler")
#: known remaining inheritance, each still true (the list must shrink when one is fixed)
KNOWN = {"TmemTmaStoreEpilogue": "the sm_100a TMA-store epilogue still subclasses the sm_90a TmaStoreEpilogue"}


def _classes(names):
    for name in names:
        mod = importlib.import_module(f"cutedsl.collective.{name}")
        for obj in vars(mod).values():
            if inspect.isclass(obj) and obj.__module__ == mod.__name__:
                yield obj


def _sm90_bases(cls):
    return [b for b in cls.__mro__[1:] if b.__module__.rpartition(".")[2] in SM90]


@pytest.mark.parametrize("cls", list(_classes(SM100)), ids=lambda c: c.__name__)
def test_no_sm100_collective_inherits_an_sm90_one(cls):
    bases = _sm90_bases(cls)
    if cls.__name__ in KNOWN:
        assert bases, f"{cls.__name__} no longer inherits sm_90a code: remove it from KNOWN"
        return
    assert not bases, f"{cls.__name__} inherits the sm_90a collective(s) {[b.__name__ for b in bases]}"


def test_the_check_sees_sm90_classes():
    """The scan is not vacuous: it finds the sm_90a mainloops and their shared base, and the
    sm_100a mainloop is among the classes checked."""
    sm90 = {c.__name__ for c in _classes(SM90)}
    assert {"TmaWgmmaMainloop", "MultistageMainloop", "WarpSpecializedMainloop"} <= sm90
    from cutedsl.collective.warp_specialized import WarpSpecializedMainloop
    assert _sm90_bases(WarpSpecializedMainloop)[0].__name__ == "TmaWgmmaMainloop"
    assert "Tcgen05Mainloop" in {c.__name__ for c in _classes(SM100)}


@pytest.mark.parametrize("kw", [dict(), dict(b_major="K", cluster=(2, 1)), dict(a_major="MN", tile_n=256),
                                dict(dtype="e4m3", b_major="K", cluster=(1, 2)), dict(batched=True)])
def test_both_mainloops_hold_the_same_ring(kw):
    """The sm_90a and sm_100a mainloops' rings: same operands, boxes, buffers and bytes (the
    loader's transaction bytes are the GEMM's stage bytes)."""
    from cutedsl.arch import SM100A
    from cutedsl.collective.tcgen05_mainloop import Tcgen05Mainloop
    from cutedsl.collective.warp_specialized import WarpSpecializedMainloop
    from cutedsl.ir import SmemPlan
    kw = {"tile_m": 128, "tile_n": 128, "stages": 3, **kw}
    rings = [WarpSpecializedMainloop(**kw).ring, Tcgen05Mainloop(**kw, arch=SM100A).ring]
    for r in rings:
        assert r.loader.rings["ab"].tx_bytes == r.stage_bytes
    plans = []
    for r in rings:
        plans.append(SmemPlan())
        r.plan(plans[-1])
    assert plans[0].buffers == plans[1].buffers and list(plans[0]._barriers) == ["full", "empty"]
    assert [(s.param, s.box) for s in rings[0].tensor_maps()] == [(s.param, s.box) for s in rings[1].tensor_maps()]


def test_block_scaled_and_pair_rings():
    """Block-scaled: the factor atoms are operands of the same ring (one full barrier, one
    transaction count); a CTA pair: each CTA's ring holds half of B's N rows."""
    from cutedsl.arch import SM100A
    from cutedsl.collective.tcgen05_mainloop import Tcgen05Mainloop
    mx = Tcgen05Mainloop(128, 128, 2, "e4m3", "K", arch=SM100A, block_scaled="mx")
    assert list(mx.ring.operands) == ["a", "b", "sfa", "sfb"]
    assert [s.param for s in mx.tensor_maps()] == ["a", "b", "a_scales", "b_scales"]
    assert mx.ring.loader.rings["ab"].tx_bytes == mx.stage_bytes == 128 * 128 * 2 + mx.sf_stage_bytes > 128 * 128 * 2
    pair = Tcgen05Mainloop(128, 256, 2, "f16", "MN", cluster=(2, 1), arch=SM100A, mma_sm=2)
    assert pair.ring.operands["b"].box == (64, 64) and pair.ring.operands["b"].boxes == 2
    assert pair.ring.operands["b"].slices == 1 and pair.ring.operands["a"].slices == 1
    assert pair.ring.loader.rings["ab"].tx_bytes == (128 + 128) * 128 and pair.pair_stage_bytes == (256 + 256) * 128
