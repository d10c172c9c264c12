"""A wgmma chain's operand gather by 16-byte chunk (cutedsl/sim/engines/wgmma_layout.gather_plan /
gather): on the operand layouts the descriptors give (every swizzle, K- and MN-major, 16- and
8-bit elements) it gives the element gather's array exactly, gathering by chunk where the
elements run in aligned 16-byte chunks and element by element elsewhere; and a chain's stacked
products over such layouts are each MMA's own product, bit for bit. Register A's gather from
the whole register file (wgmma_layout.a_reg_index) against the fragment map of PTX ISA
9.7.15.5.1.1 (wgmma_layout.a_reg_map), value by value."""
from types import SimpleNamespace

import numpy as np
import pytest

from cutedsl.sim.engines.wgmma_acc import MmaOp, _plan, products
from cutedsl.sim.engines.wgmma_layout import a_reg_index, a_reg_map, gather, gather_plan, load_operand, operand_addrs

SMEM = 1 << 16


def _desc(start, lbo, sbo, layout):
    """An sm_90 shared-memory descriptor (layout: 0 none, 1 128B, 2 64B, 3 32B swizzle)."""
    return (start >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (layout << 62)


def _ei(layout, rows, k, esize, mn_major, start=0):
    span = {0: 0, 1: 128, 2: 64, 3: 32}[layout]
    lbo, sbo = (2048, 4096) if mn_major else (128, 8 * max(span, 16))
    return operand_addrs(_desc(start, lbo, sbo, layout), rows, k, esize, mn_major)[2]


@pytest.mark.parametrize("esize", [2, 1])
@pytest.mark.parametrize("layout", [0, 1, 2, 3])
def test_gather_by_chunk_is_the_element_gather(esize, layout):
    rng = np.random.default_rng(layout + 4 * esize)
    sv = rng.integers(0, 1 << (8 * esize), SMEM // esize).astype(np.dtype(f"u{esize}"))
    k = 32 // esize
    a = _ei(layout, 64, k, esize, False)                      # K-major A: runs along K
    b = _ei(layout, 128, k, esize, layout != 0, start=8192)   # B in (K, N) order: runs along N when MN-major
    parts = [a.reshape(-1), b.T.reshape(-1)]
    plan = gather_plan(parts, esize)
    want = np.take(sv, np.concatenate(parts))
    got = gather(sv, plan)
    assert got.dtype == sv.dtype and np.array_equal(got, want)
    assert plan[0][0]                                          # A by chunk
    if layout:
        assert len(plan) == 1 and len(plan[0][1]) == len(want) * esize // 16     # B too: one chunk gather
    else:                                                      # K-major B read along N: by element
        assert [c for c, _ in plan] == [True, False]


def test_runs_off_the_chunk_grid_or_short_are_gathered_by_element():
    sv = np.arange(4096, dtype=np.uint16)
    plan = gather_plan([np.arange(3, 19), np.arange(64, 76), np.arange(128, 144)], 2)
    assert [c for c, _ in plan] == [False, True]               # the first two joined; the third by chunk
    assert np.array_equal(plan[1][1], [16, 17])
    assert np.array_equal(gather(sv, plan), np.concatenate([np.arange(3, 19), np.arange(64, 76), np.arange(128, 144)]))


def test_chunked_products_equal_each_mma():
    """8 MMAs (4 k-steps, 2 m64 halves sharing B) on a 128B-swizzled K-major A and MN-major B,
    f16 bit patterns of every finite exponent: each stacked product is the MMA's own."""
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 0x7C00, SMEM // 2).astype(np.uint16)
    bits |= rng.integers(0, 2, SMEM // 2).astype(np.uint16) << 15

    class Cta:
        sv = {2: bits}
        launch = SimpleNamespace(plans={})
    ops = []
    for step in range(4):
        b_ei = _ei(1, 128, 16, 2, True, start=32768 + 32 * step)
        for half in range(2):
            a_ei = _ei(1, 64, 16, 2, False, start=8192 * half + 32 * step)
            ops.append(MmaOp((half,), None, 0, 0, 128, True, 1.0, None, a_ei, 2, np.float16, b_ei, 2, np.float16,
                             ("form", step, half)))
    r, plan, _k = _plan(ops)
    assert r == 2 and [c for c, _ in plan] == [True]           # one chunk gather for the chain
    got = products(Cta, ops)
    for i, op in enumerate(ops):
        own = load_operand(Cta, op.a_ei, 2, np.float16) @ load_operand(Cta, op.b_ei, 2, np.float16).T
        assert np.array_equal(got[i].view(np.uint64), own.view(np.uint64)), i


@pytest.mark.parametrize("esize", [2, 1])
def test_register_a_index_follows_the_fragment_map(esize):
    rng = np.random.default_rng(esize)
    regs = rng.integers(0, 1 << 32, (40, 256), dtype=np.uint64).astype(np.uint32)
    aidx, lo = [7, 3, 12, 30], 128
    per, k = 4 // esize, 32 // esize
    mm, kk = a_reg_map(esize)                   # (thread, value v) -> (row, k)
    want = np.zeros((64, k), np.uint32)
    for t in range(128):
        for v in range(mm.shape[1]):
            word = int(regs[aidx[v // per], lo + t])
            want[mm[t, v], kk[t, v]] = (word >> (8 * esize * (v % per))) & ((1 << (8 * esize)) - 1)
    got = np.take(regs.reshape(-1).view(np.uint16 if esize == 2 else np.uint8), a_reg_index(aidx, lo, 256, esize))
    assert np.array_equal(got.reshape(64, k).astype(np.uint32), want)
