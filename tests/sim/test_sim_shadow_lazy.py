"""Whole-block writes kept as their blocks' epochs (checks/shadow.py: ``Shadow.lazy``, written back
word by word by ``_settle`` when a per-word access needs them) against the general path
(``Shadow.shortcuts`` False: every access judged and recorded word by word): random sequences of
TMA boxes (whole and partial blocks), generic stores and loads, batched warp stores, async-proxy
reads and synchronisation give the same race reports, the same return values and, once settled,
the same shadow state."""
import numpy as np
import pytest

from cutedsl.sim import RaceError
from cutedsl.sim.frontend.errors import UninitializedReadError
from test_sim_shadow_paths import setup

_STATE = ("w_agent", "w_clock", "w_pc", "w_async", "r_clock", "r_pc", "col_agent", "blk_read", "blk_w",
          "blk_wasync")


def _run(seed, shortcuts, initcheck):
    """Play the random sequence ``seed`` on a fresh shadow; (outcome of each step, final state)."""
    rng = np.random.default_rng(seed)
    hb, sh, warps = setup(nwarps=4, smem=16384)
    sh.shortcuts = shortcuts
    if not shortcuts:                   # the general path: every word's state kept from the start
        sh._settle(slice(0, sh.n))
    sh.initcheck = initcheck
    nblk = sh.n >> 8                    # whole 1 KiB blocks inside the shadow
    units = [hb.agent(("tma", 0, w.wid, 0, 8 * i), "tma", w.cta, w.wid, f"TMA unit {i}")
             for i, w in enumerate(warps[:3])]
    snaps = []
    out = []
    for step in range(200):
        op = int(rng.integers(0, 6)) if step % 2 == 0 else 6 if rng.random() < 0.6 else 7   # access, then sync
        w = warps[int(rng.integers(0, len(warps)))]
        pc = int(rng.integers(0, 50))
        vc = hb.warp_vc(w)
        try:
            if op <= 1:                                 # a TMA box: whole blocks, or not
                a = units[int(rng.integers(0, len(units)))]
                b0 = int(rng.integers(0, nblk))
                b1 = int(rng.integers(b0 + 1, nblk + 1))
                lo, hi = b0 << 8, b1 << 8
                if op == 1:
                    lo, hi = lo + int(rng.integers(0, 200)), hi - int(rng.integers(0, 50))
                a.n += 1
                snap = hb.async_op([warps[a.wid]], a.idx, a.n)
                snaps.append(snap)
                sh.write(slice(lo, hi), a.idx, a.n, snap[0], pc, True, "TMA load")
                r = None
            elif op == 2:                               # a generic store
                lo = int(rng.integers(0, sh.n - 304))          # a few words near each other
                words = np.unique(rng.integers(lo, lo + 300, int(rng.integers(1, 64))))
                sh.write(words, w.agent, int(vc[w.agent]), vc, pc, False, "st.shared")
                r = None
            elif op == 3:                               # a generic load
                lo = int(rng.integers(0, sh.n - 304))
                words = rng.integers(lo, lo + 300, int(rng.integers(1, 64)))
                sh.read(words, w.agent, int(vc[w.agent]), vc, w.pvc, pc, False, "ld.shared")
                r = None
            elif op == 4:                               # an async-proxy read (a TMA store's source)
                b0 = int(rng.integers(0, nblk))
                words = slice(b0 << 8, min((b0 << 8) + int(rng.integers(1, 512)), sh.n - 4))
                a = hb.agent(("bulk", 0, w.wid), "bulk", w.cta, w.wid, f"bulk copies of warp {w.wid}")
                rvc, rpvc = hb.async_op([w], a.idx, 1)
                blocks = np.arange(words.start >> 8, ((words.stop - 1) >> 8) + 1) if rng.integers(0, 2) else None
                sh.read(words, a.idx, 1, rvc, rpvc, pc, True, "TMA store source", blocks)
                r = None
            elif op == 5:                               # a batched store of two warps
                ws = [warps[0], warps[1]]
                base = int(rng.integers(0, sh.n - 600))
                words = np.arange(base, base + 512)
                owner = None
                wpc = pc
                if rng.integers(0, 2):          # a cached plan's read-only arrays (warpbatch)
                    owner = np.repeat(np.arange(2), 256)
                    if rng.integers(0, 2):      # in store order, a PC per word (one contiguous run)
                        perm = rng.permutation(512)
                        words, owner = words[perm], owner[perm]
                        wpc = rng.integers(0, 50, 512).astype(np.int32)
                        wpc.flags.writeable = False
                    words.flags.writeable = owner.flags.writeable = False
                r = sh.write_warps(words, ws, wpc, owner)
            elif op == 6:                               # a barrier: everyone learns everything
                for x in warps:
                    snaps.append(hb.release(x))
                for x in warps:
                    for s in snaps:
                        hb.acquire(x, s)
                    for b in hb.agents:
                        if b.kind == "bulk":
                            hb.observe(x, b.idx, 1)         # its wait_group.read, then the barrier
                    if rng.integers(0, 2):
                        hb.fence_proxy(x)
                r = None
            else:                                       # one warp learns one earlier operation
                if snaps:
                    hb.acquire(w, snaps[int(rng.integers(0, len(snaps)))])
                if rng.integers(0, 2):
                    hb.fence_proxy(w)
                r = None
            out.append((step, op, r))
        except (RaceError, UninitializedReadError) as e:
            out.append((step, op, str(e)))
    sh._settle(slice(0, sh.n))
    assert not sh.lazy.any()
    return out, [getattr(sh, k).copy() for k in _STATE]


@pytest.mark.parametrize("initcheck", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_lazy_whole_block_writes_match_the_per_word_path(seed, initcheck):
    fast, fstate = _run(seed, True, initcheck)
    slow, sstate = _run(seed, False, initcheck)
    assert fast == slow
    for k, x, y in zip(_STATE, fstate, sstate):
        assert np.array_equal(x, y), k
    assert any(isinstance(r, str) for _s, _o, r in fast)             # the sequences do report races
    assert sum(r is None for _s, o, r in fast if o == 0) >= 5          # and whole boxes pass


def test_a_box_is_kept_as_its_blocks_epoch_until_a_word_is_needed():
    hb, sh, (w0, w1) = setup()
    a = hb.agent(("tma", 0, 0, 0, 0), "tma", w0.cta, 0, "TMA unit 0")
    op = hb.async_op([w0], a.idx, 1)
    sh.write(slice(256, 768), a.idx, 1, op[0], 3, True, "TMA load")
    assert sh.lazy.all() and sh.blk_w[1] == (a.idx << 32) | 1           # no word written yet
    hb.acquire(w1, op)
    vc = hb.warp_vc(w1)
    sh.write(np.array([300]), w1.agent, int(vc[w1.agent]), vc, 7, False, "st.shared")   # a word of block 1
    assert not sh.lazy[1] and sh.lazy[2] and sh.lazy[0] and sh.blk_w[1] < 0
    assert (sh.w_agent[256:512] == np.where(np.arange(256, 512) == 300, w1.agent, a.idx)).all()
    assert (sh.w_pc[256:512] == np.where(np.arange(256, 512) == 300, 7, 3)).all()
    assert (sh.w_async[256:512] == (np.arange(256, 512) != 300)).all()
    sh._settle(slice(0, 256))                                         # never written: no writer
    assert (sh.w_agent[:256] == -1).all() and (sh.w_clock[:256] == 0).all() and not sh.w_async[:256].any()


@pytest.mark.parametrize("hold_view", [False, True])
def test_reader_columns_grow_keeping_their_reads(hold_view):
    """A third reading agent grows the reader rows (resized in place, or copied while a view of
    them is alive): the first two columns keep their reads, the new ones start at zero."""
    hb, sh, (w0, w1) = setup()
    sh.initcheck = False                                # (reads of never-written words)
    units = [hb.agent(("bulk", 0, i), "bulk", w0.cta, 0, f"bulk {i}") for i in range(3)]
    for i, a in enumerate(units[:2]):
        sh.read(np.arange(10 * i, 10 * i + 5), a.idx, 3 + i, hb.warp_vc(w0), w0.pvc, 7 + i, False, "ld.shared")
    assert sh.r_clock.shape[0] == 2
    view = sh.r_clock[0] if hold_view else None
    sh.read(np.arange(40, 45), units[2].idx, 9, hb.warp_vc(w0), w0.pvc, 11, False, "ld.shared")
    assert sh.r_clock.shape[0] == 4 and sh.r_pc.shape[0] == 4 and len(sh.col_agent) == 4
    want = np.zeros((4, sh.n), np.int32)
    want[0, 0:5], want[1, 10:15], want[2, 40:45] = 3, 4, 9
    assert np.array_equal(sh.r_clock, want)
    assert (sh.r_pc[1, 10:15] == 8).all() and (sh.r_pc[2, 40:45] == 11).all() and sh.r_pc[3].sum() == 0
    if hold_view:
        assert (view[0:5] == 3).all()                   # the old rows, untouched


def _plan(a):
    a = np.array(a)
    a.flags.writeable = False       # a cached plan's array (read-only, owning its data)
    return a


def test_a_store_plan_is_a_run_only_when_its_words_are_distinct_and_contiguous():
    """``_sorted_run`` (Shadow.write_warps' slice path) takes a permutation of one contiguous range,
    sorted with its owners and PCs; a plan whose span is as long as it but that repeats a word (two
    lanes' sub-word stores to one word) has a hole, and goes to the general path."""
    from cutedsl.sim.checks.shadow_blocks import _sorted_run
    words, owner, pc = _plan([7, 5, 6, 4]), _plan([0, 1, 2, 3]), _plan([10, 11, 12, 13])
    sl, o, p = _sorted_run(words, owner, pc)
    assert sl == slice(4, 8) and o.tolist() == [3, 1, 2, 0] and p.tolist() == [13, 11, 12, 10]
    assert _sorted_run(_plan([4, 4, 6]), _plan([0, 1, 2]), _plan([1, 2, 3])) is None    # span 3, a hole at 5
    assert _sorted_run(_plan([4, 6, 7]), _plan([0, 1, 2]), _plan([1, 2, 3])) is None    # not contiguous
    assert _sorted_run(np.array([4, 5]), _plan([0, 1]), _plan([1, 2])) is None          # not a plan's array
