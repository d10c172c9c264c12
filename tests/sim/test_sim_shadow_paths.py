"""The race shadow's shortcuts give the per-word verdicts: whole-block writes judged per 1 KiB
block, and a lockstep run's queued wgmma operand reads judged at once (checks/shadow.py)."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, load_ptx
from cutedsl.sim.checks.hb import HB
from cutedsl.sim.checks.shadow import Shadow
from cutedsl.sim.machine.machine import CTA, Cluster
from cutedsl.sim.machine.scheduler import Launch
from simkit import kernel


def setup(nwarps=2, smem=8192):
    ln = Launch(load_ptx(kernel("")), Emulator().backend.gmem, 1, 32 * nwarps, [bytes(8)], smem=smem)
    cl = Cluster(0)
    cl.ctas.append(CTA(ln, (0, 0, 0), cl, 0, (0, 0, 0)))
    hb = cl.hb = HB(cl)
    return hb, Shadow(cl.ctas[0], hb), cl.ctas[0].warps


def tma(hb, w, i):
    """A TMA agent of warp ``w`` (unit ``i``) issuing its first load: (agent, its (vc, pvc))."""
    a = hb.agent(("tma", 0, w.wid, 0, 8 * i), "tma", w.cta, w.wid, f"TMA unit {i}")
    return a.idx, hb.async_op([w], a.idx, 1)


def test_whole_block_writes_unordered_with_the_last_box_are_races():
    hb, sh, (w0, w1) = setup()
    a0, op0 = tma(hb, w0, 0)
    sh.write(slice(256, 768), a0, 1, op0[0], 3, True, "TMA load")        # two whole 1 KiB blocks
    assert (sh.blk_w[1:3] == (a0 << 32) | 1).all()
    a1, op1 = tma(hb, w1, 1)                                             # knows nothing of a0
    with pytest.raises(RaceError, match=r"(?s)byte offset 1024\):.*TMA unit 0.*TMA unit 1"):
        sh.write(slice(256, 512), a1, 1, op1[0], 5, True, "TMA load")


def test_whole_block_writes_ordered_after_the_last_box_pass_and_take_the_block():
    hb, sh, (w0, w1) = setup()
    a0, op0 = tma(hb, w0, 0)
    sh.write(slice(256, 768), a0, 1, op0[0], 3, True, "TMA load")
    hb.acquire(w1, op0)                                                  # w1 observed the load
    a1, op1 = tma(hb, w1, 1)
    sh.write(slice(256, 512), a1, 1, op1[0], 5, True, "TMA load")
    assert sh.blk_w[1] == (a1 << 32) | 1 and sh.blk_w[2] == (a0 << 32) | 1
    sh._settle(slice(256, 768))                                          # (kept as block epochs until needed)
    assert (sh.w_agent[256:512] == a1).all() and (sh.w_pc[512:768] == 3).all()


def test_a_block_written_in_part_since_is_checked_word_by_word():
    hb, sh, (w0, w1) = setup()
    a0, op0 = tma(hb, w0, 0)
    sh.write(slice(256, 512), a0, 1, op0[0], 3, True, "TMA load")
    hb.acquire(w0, op0)
    hb.acquire(w1, op0)
    hb.release(w0)                                                       # w0's next epoch: w1 does not know it
    sh.write(np.array([300]), w0.agent, int(hb.warp_vc(w0)[w0.agent]), hb.warp_vc(w0), 7, False, "st.shared")
    assert sh.blk_w[1] < 0                                               # mixed now
    a1, op1 = tma(hb, w1, 1)                                             # knows the box, not the store
    with pytest.raises(RaceError, match=r"(?s)byte offset 1200\):\n    write by .*warp 0 .*\n    write by .*TMA unit 1"):
        sh.write(slice(256, 512), a1, 1, op1[0], 5, True, "TMA load")


def queued(hb, sh, w_issue, reads):
    """Queue wgmma operand reads ``(words, pc)`` of warpgroup agent 'wgmma' at clock 1."""
    a = hb.agent(("wgmma", 0, 0), "wgmma", sh.cta, 0, "wgmma of warpgroup 0").idx
    vc, pvc = hb.collective_op([w_issue], a, 1)
    for words, pc in reads:
        words = np.asarray(words)
        sh.read_later(words, np.unique(words >> 8), a, 1, vc, pvc, pc, "wgmma operand", (vc, pvc))
    return a


def test_queued_reads_of_known_boxes_keep_each_words_last_pc():
    hb, sh, (w0, w1) = setup()
    a0, op0 = tma(hb, w0, 0)
    sh.write(slice(256, 768), a0, 1, op0[0], 3, True, "TMA load")
    hb.acquire(w1, op0)
    a = queued(hb, sh, w1, [(np.arange(256, 300), 10), (np.arange(290, 320), 11), (np.arange(600, 610), 12)])
    assert sh.pending and (sh.r_pc == 0).all()                          # nothing recorded yet
    sh.flush_reads()
    c = sh.cols[a]
    assert not sh.pending
    assert (sh.r_pc[c, 256:290] == 10).all() and (sh.r_pc[c, 290:320] == 11).all()
    assert (sh.r_pc[c, 600:610] == 12).all() and (sh.r_clock[c, [256, 319, 609]] == 1).all()
    assert sh.r_clock[c, 320:600].sum() == 0


def test_queued_reads_of_scattered_words_keep_each_words_last_pc():
    # more than a few contiguous runs: recorded through the word ids instead of slices
    hb, sh, (w0, w1) = setup()
    a0, op0 = tma(hb, w0, 0)
    sh.write(slice(256, 768), a0, 1, op0[0], 3, True, "TMA load")
    hb.acquire(w1, op0)
    a = queued(hb, sh, w1, [(np.arange(256, 300, 2), 10), (np.arange(280, 320, 3), 11)])
    sh.flush_reads()
    c = sh.cols[a]
    want = np.zeros(sh.n, np.int32)
    want[np.arange(256, 300, 2)] = 10
    want[np.arange(280, 320, 3)] = 11
    assert (sh.r_pc[c] == want).all() and ((sh.r_clock[c] == 1) == (want > 0)).all()


def test_a_queued_read_of_an_unknown_write_names_its_own_pc():
    hb, sh, (w0, w1) = setup()
    a0, op0 = tma(hb, w0, 0)
    sh.write(slice(256, 512), a0, 1, op0[0], 3, True, "TMA load")       # w1 never observes it
    sh.write(np.arange(600, 610), w1.agent, 1, hb.warp_vc(w1), 2, False, "st.shared")
    hb.fence_proxy(w1)                                                   # its own stores: fenced
    queued(hb, sh, w1, [(np.arange(600, 610), 0), (np.arange(300, 310), 1)])
    code = sh.cta.launch.code
    with pytest.raises(RaceError) as e:
        sh.flush_reads()
    assert "byte offset 1200)" in str(e.value) and f"at {code[1].where()} (wgmma operand)" in str(e.value)
    assert sh.r_clock[:, 600:610].any()                                  # the first read was recorded


def test_any_other_access_records_the_queued_reads_first():
    hb, sh, (w0, w1) = setup()
    a0, op0 = tma(hb, w0, 0)
    sh.write(slice(256, 512), a0, 1, op0[0], 3, True, "TMA load")
    hb.acquire(w1, op0)
    queued(hb, sh, w1, [(np.arange(256, 300), 10)])
    a1, op1 = tma(hb, w1, 1)                  # a new box over the operand before the wgmma is known done
    with pytest.raises(RaceError, match=r"(?s)byte offset 1024\):.*read by .*wgmma.*write by .*TMA unit 1"):
        sh.write(slice(256, 512), a1, 1, op1[0], 5, True, "TMA load")
