"""HeldTiles._repeats (cutedsl/sim/engines/wgmma_acc.py): the k-steps of a chain after its first group
run as one add and one f32 cast per group. Against run_chain with the shortcut switched off (every
group through the per-MMA addend and put), the held tiles, their registers and every warp's
lazy_bits are the same, bit for bit: on random f16 patterns, with a negated product, a first group
without scale-d, an independent MMA after the repeats (cast on its own after them, with them without),
and a held tile of another accumulator on registers of the group (written back first)."""
from types import SimpleNamespace

import numpy as np
import pytest

from cutedsl.sim.engines.wgmma_acc import HeldTiles, MmaOp

N, K = 128, 16


class _Warp:
    def __init__(self, wid):
        self.wid, self.lazy_bits, self.held = wid, 0, None


class _Cta:
    def __init__(self, rng):
        bits = rng.integers(0, 0x7C00, 1 << 16).astype(np.uint16) | (rng.integers(0, 2, 1 << 16).astype(np.uint16) << 15)
        self.sv = {2: bits}
        self.launch = SimpleNamespace(plans={})
        self.mma_chains = []
        # 256 32-bit registers of 128 threads, holding f32 values (the accumulators' start)
        self.files = {"r": rng.standard_normal((256, 128)).astype(np.float32).view(np.uint32)}


def _mask(idx):
    return sum(1 << int(i) for i in idx)


def _op(rng, acc, sign=1.0, scale_d=True, a_regs=None):
    """An m64n128k16 f16 MMA onto accumulator ``acc`` (registers 64 acc .. 64 acc + 63); A from
    shared memory, or from registers ``a_regs`` (4 of them; the (64, K) tile random f16 values)."""
    didx = np.arange(64 * acc, 64 * acc + 64)
    a_ei = rng.integers(0, 1 << 16, (64, K))
    b_ei = rng.integers(0, 1 << 16, (N, K))
    bits = _mask(didx)
    if a_regs is None:
        return MmaOp(tuple(didx.tolist()), didx, bits, bits, N, scale_d, sign, None, a_ei, 2, np.float16, b_ei, 2,
                     np.float16)
    A = rng.standard_normal((64, K)).astype(np.float16).astype(np.float64)
    return MmaOp(tuple(didx.tolist()), didx, bits, bits | _mask(a_regs), N, scale_d, sign, A, None, 2, np.float16,
                 b_ei, 2, np.float16)


def _spy(monkeypatch):
    """Record the end of every _repeats call (the MMAs it ran up to)."""
    ends = []
    real = HeldTiles._repeats

    def spy(self, *a):
        j, r = real(self, *a)
        ends.append(j)
        return j, r
    monkeypatch.setattr(HeldTiles, "_repeats", spy)
    return ends


def _run(ops, seed, monkeypatch, shortcut, pre=None):
    cta = _Cta(np.random.default_rng(seed))
    warps = [_Warp(i) for i in range(4)]
    held = HeldTiles(cta, warps)
    if pre is not None:
        held.put(*pre)
    with monkeypatch.context() as m:
        if not shortcut:
            m.setattr(HeldTiles, "_repeats", lambda self, ops, i, j, prods, r: (j, r))
        for op in ops:
            held.queue(op)
        held.run_chain()
    tiles = {k: (t[0].tolist(), t[1].view(np.uint32).copy(), t[2], t[3]) for k, t in held.tiles.items()}
    return tiles, [w.lazy_bits for w in warps], cta.files["r"].copy()


def _same(a, b):
    (ta, la, ra), (tb, lb, rb) = a, b
    assert ta.keys() == tb.keys() and la == lb and np.array_equal(ra, rb)
    for k in ta:
        assert ta[k][0] == tb[k][0] and ta[k][2:] == tb[k][2:]
        assert np.array_equal(ta[k][1], tb[k][1]), k


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("first_scale_d", [True, False])
@pytest.mark.parametrize("tail", [False, True])
def test_repeated_groups_match_the_per_mma_path(monkeypatch, sign, first_scale_d, tail):
    rng = np.random.default_rng(5)
    ops = []
    for step in range(4):
        ops += [_op(rng, 0, sign, first_scale_d or step), _op(rng, 1, sign, first_scale_d or step)]
    if tail:
        ops.append(_op(rng, 2, sign))      # another accumulator, independent of the group
    _same(_run(ops, 9, monkeypatch, True), _run(ops, 9, monkeypatch, False))


def test_a_tile_sharing_group_registers_is_written_back_first(monkeypatch):
    """Another accumulator's held tile on registers 32-95 (half of each group accumulator's): the
    first group's addends write it back to the registers (and read accumulator 1's start from
    them), after which no other tile owns a group register and the repeats take the shortcut."""
    rng = np.random.default_rng(6)
    ops = [_op(rng, q) for _ in range(3) for q in (0, 1)]
    didx = np.arange(32, 96)
    other = (("other",), didx, np.random.default_rng(1).standard_normal((64, N)).astype(np.float32), N,
             _mask(didx))
    ends = _spy(monkeypatch)
    got = _run(ops, 3, monkeypatch, True, pre=other)
    assert ends == [6]           # groups 2 and 3 by the shortcut
    assert ("other",) not in got[0]
    monkeypatch.undo()
    _same(got, _run(ops, 3, monkeypatch, False, pre=other))


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("a_from_regs", [False, True])
def test_one_accumulator_chains_match_the_per_mma_path(monkeypatch, sign, a_from_regs):
    """8 MMAs on one accumulator, the first without scale-d (S = Q K^T), or each with its own
    register A (O += P V): the first rounded alone, the other 7 by the shortcut."""
    rng = np.random.default_rng(8)
    ops = [_op(rng, 0, sign, step > 0 or a_from_regs, np.arange(128 + 4 * step, 132 + 4 * step) if a_from_regs
               else None) for step in range(8)]
    ends = _spy(monkeypatch)
    got = _run(ops, 4, monkeypatch, True)
    assert ends == [8]
    monkeypatch.undo()
    _same(got, _run(ops, 4, monkeypatch, False))


def test_a_tile_owning_a_later_register_a_ends_the_shortcut_there(monkeypatch):
    """A held tile of another accumulator on registers 140-203 (register A of the 4th MMA is
    140-143): the shortcut stops before that MMA; its addend writes the tile back, and the rest
    repeat."""
    rng = np.random.default_rng(2)
    ops = [_op(rng, 0, a_regs=np.arange(128 + 4 * step, 132 + 4 * step)) for step in range(6)]
    didx = np.arange(140, 204)
    other = (("other",), didx, np.random.default_rng(1).standard_normal((64, N)).astype(np.float32), N,
             _mask(didx))
    ends = _spy(monkeypatch)
    got = _run(ops, 5, monkeypatch, True, pre=other)
    assert ends == [3, 6]
    assert ("other",) not in got[0]
    monkeypatch.undo()
    _same(got, _run(ops, 5, monkeypatch, False, pre=other))
