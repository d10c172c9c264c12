"""Global-memory races between clusters (issue 21): a weak access of one cluster and a
conflicting weak access of another are a RaceError unless a gpu-scope release by the first
is acquired by the second (st.release / ld.acquire, atomics, fence.acq_rel around relaxed
accesses); atomics, equal-value stores and accesses of earlier launches are not races. One
run finds the bug whatever the interleaving (the planted rows pass or fail in eager mode and
under adversarial seeds alike)."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, load_ptx
from simkit import kernel

# CTA 0 writes data[1..32] (plain stores), then sets the flag at data[0] ({PUBLISH});
# CTA 1 waits for the flag ({WAIT}) and copies data[1..32] to data[33..64] (plain loads)
HANDOFF = """
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %ctaid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tsetp.ne.u32 %p1, %r2, 0;
\t@%p1 bra CONSUMER;
\tadd.u32 %r3, %r1, 100;
\tst.global.u32 [%rd3+4], %r3;
\tbar.sync 0;
\tsetp.ne.u32 %p2, %r1, 0;
\t@%p2 bra END;
{PUBLISH}
\tbra END;
CONSUMER:
\tsetp.ne.u32 %p2, %r1, 0;
\t@%p2 bra READ;
SPIN:
{WAIT}
\tsetp.eq.u32 %p3, %r4, 0;
\t@%p3 bra SPIN;
READ:
\tbar.sync 0;
\tld.global.u32 %r5, [%rd3+4];
\tst.global.u32 [%rd3+132], %r5;
END:
"""

GOOD = {
    "release/acquire": ("\tst.release.gpu.global.u32 [%rd1], 1;", "\tld.acquire.gpu.global.u32 %r4, [%rd1];"),
    "fences around relaxed": ("\tfence.acq_rel.gpu;\n\tst.relaxed.gpu.global.u32 [%rd1], 1;",
                              "\tld.relaxed.gpu.global.u32 %r4, [%rd1];\n\tfence.acq_rel.gpu;"),
    "atomics": ("\tred.release.gpu.global.add.u32 [%rd1], 1;",
                "\tatom.acquire.gpu.global.or.b32 %r4, [%rd1], 0;"),
    "membar.gl": ("\tmembar.gl;\n\tst.volatile.global.u32 [%rd1], 1;", "\tld.volatile.global.u32 %r4, [%rd1];\n\tmembar.gl;"),
}
BAD = {
    "no acquire (relaxed wait)": ("\tst.release.gpu.global.u32 [%rd1], 1;",
                                  "\tld.relaxed.gpu.global.u32 %r4, [%rd1];"),
    "no release (relaxed flag)": ("\tst.relaxed.gpu.global.u32 [%rd1], 1;",
                                  "\tld.acquire.gpu.global.u32 %r4, [%rd1];"),
    "cta-scope release": ("\tst.release.cta.global.u32 [%rd1], 1;", "\tld.acquire.cta.global.u32 %r4, [%rd1];"),
    "fence before the wait, not after": ("\tfence.acq_rel.gpu;\n\tst.relaxed.gpu.global.u32 [%rd1], 1;",
                                         "\tfence.acq_rel.gpu;\n\tld.relaxed.gpu.global.u32 %r4, [%rd1];"),
}


def run(publish, wait, chaos=None):
    emu = Emulator(chaos=chaos)
    prog = load_ptx(kernel(HANDOFF.replace("{PUBLISH}", publish).replace("{WAIT}", wait)))
    out = emu.to_device(np.zeros(65, np.uint32))
    emu.launch(prog, 2, 32, [out])
    return emu.to_host(out, (65,), np.uint32)


@pytest.mark.parametrize("chaos", [None, 3])
@pytest.mark.parametrize("name", list(GOOD))
def test_synchronised_handoff_is_no_race(name, chaos):
    r = run(*GOOD[name], chaos=chaos)
    assert (r[33:] == np.arange(100, 132)).all()


@pytest.mark.parametrize("chaos", [None, 3])
@pytest.mark.parametrize("name", list(BAD))
def test_unsynchronised_handoff_is_a_race(name, chaos):
    with pytest.raises(RaceError, match=r"(?s)data race on global memory .*byte offset \d+\):\n    (write|read) by "
                                        r"cluster [01] at PTX line \d+: (st|ld)\.global\.u32.*\n    (read|write) by "
                                        r"cluster [01] .*missing: a release by the first cluster"):
        run(*BAD[name], chaos=chaos)


SHARED_WORD = """
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %ctaid.x;
\tmov.u32 %r2, {VALUE};
\tst.global.u32 [%rd1], %r2;
\tred.relaxed.gpu.global.add.u32 [%rd1+4], 1;
"""


def test_equal_values_and_atomics_are_not_races():
    """Every CTA stores the same word with the same value (benign) and adds to one counter
    (atomic): no report; a second launch reading what the first wrote is ordered by the
    kernel boundary."""
    emu = Emulator()
    out = emu.to_device(np.zeros(2, np.uint32))
    emu.launch(load_ptx(kernel(SHARED_WORD.replace("{VALUE}", "7"))), 8, 32, [out])
    assert list(emu.to_host(out, (2,), np.uint32)) == [7, 8 * 32]
    emu.launch(load_ptx(kernel(SHARED_WORD.replace("{VALUE}", "7"))), 8, 32, [out])
    with pytest.raises(RaceError, match="data race on global memory"):      # different values: a race
        emu.launch(load_ptx(kernel(SHARED_WORD.replace("{VALUE}", "%r1"))), 8, 32, [out])


def test_stream_k_without_its_semaphore_wait_is_reported(monkeypatch):
    """The planted bug the emulator's numbers alone missed: a stream-K reduction that reads
    the workspace without waiting for the semaphore."""
    from cutedsl import Gemm, GemmConfig
    import cutedsl.atom as atom
    monkeypatch.setattr(atom, "wait_flag", lambda *a, **k: None)
    cfg = GemmConfig(schedule="cooperative", tile=(128, 64, 64), stages=3, sm_count=4, decomposition="stream-k")
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (300, 64 * 7 - 5)).astype(np.float16)
    b = rng.integers(-4, 5, (64 * 7 - 5, 100)).astype(np.float16)
    with pytest.raises(RaceError, match=r"(?s)data race on global memory.*(st|ld)\.global\.v4\.b32.*"
                                        r"(ld|st)\.global\.v4\.b32"):
        Gemm(cfg, Emulator().backend, cache=False)(a, b)


# one thread copies 16 bytes of shared memory to global memory through the async proxy
# (cp.async.bulk), commits the bulk group, {WAIT}s, and reads the global bytes back
BULK_STORE = """
\t.shared .align 16 .b8 buf[16];
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tsetp.ne.u32 %p1, %r1, 0;
\t@%p1 bra END;
\tmov.u32 %r2, buf;
\tmov.u32 %r3, 42;
\tst.shared.v4.u32 [%r2], {%r3, %r1, %r1, %r1};
\tfence.proxy.async.shared::cta;
\tcp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r2], 16;
\tcp.async.bulk.commit_group;
{WAIT}
\tld.global.u32 %r4, [%rd1];
\tst.global.u32 [%rd1+16], %r4;
END:
"""


@pytest.mark.parametrize("wait,race", [("\tcp.async.bulk.wait_group 0;", False),
                                       ("\tcp.async.bulk.wait_group.read 0;", True), ("", True)])
def test_async_proxy_global_write_needs_its_wait_group(wait, race):
    """A bulk copy's global write is complete only after a wait_group (not .read) covering its
    group: a generic load before that is a race even in the issuing thread."""
    emu = Emulator()
    prog = load_ptx(kernel(BULK_STORE.replace("{WAIT}", wait)))
    out = emu.to_device(np.zeros(8, np.uint32))
    if race:
        with pytest.raises(RaceError, match=r"(?s)async-proxy write \(TMA store / bulk copy\) by cluster 0 at PTX "
                                            r"line \d+: cp\.async\.bulk\.global.*read by cluster 0 .*missing: "
                                            r"cp\.async\.bulk\.wait_group \(not \.read\)"):
            emu.launch(prog, 1, 32, [out])
    else:
        emu.launch(prog, 1, 32, [out])
        assert emu.to_host(out, (8,), np.uint32)[4] == 42


@pytest.mark.parametrize("fence,race", [
    ("\tfence.proxy.async.shared::cta;", False),
    ("\tfence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;", False),   # one-way, release
    ("\tfence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster;", True),   # the wrong way
    ("", True),
])
def test_one_way_proxy_fences(fence, race):
    """The shared-memory source of a bulk copy written by st.shared needs a proxy fence toward
    the async proxy: fence.proxy.async, or the one-way .release form; the .acquire form orders
    the other direction and does not do."""
    emu = Emulator()
    body = BULK_STORE.replace("\tfence.proxy.async.shared::cta;", fence).replace("{WAIT}", "\tcp.async.bulk.wait_group 0;")
    prog = load_ptx(kernel(body))
    out = emu.to_device(np.zeros(8, np.uint32))
    if race:
        with pytest.raises(RaceError, match="missing: a fence.proxy.async after the generic-proxy write"):
            emu.launch(prog, 1, 32, [out])
    else:
        emu.launch(prog, 1, 32, [out])
        assert emu.to_host(out, (8,), np.uint32)[4] == 42


# CTA 0 writes data[1..32] with plain stores and publishes the flag data[0] ({WFENCE} before the
# release); CTA 1 acquires the flag ({RFENCE} after it) and TMA-loads data[1..32] into shared
# memory, then copies them to data[33..64]
TMA_HANDOFF = """
\t.shared .align 128 .b8 buf[128];
\t.shared .align 8 .b8 bar[8];
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %ctaid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tsetp.ne.u32 %p1, %r2, 0;
\t@%p1 bra CONSUMER;
\tadd.u32 %r3, %r1, 100;
\tst.global.u32 [%rd3+4], %r3;
\tbar.sync 0;
\tsetp.ne.u32 %p2, %r1, 0;
\t@%p2 bra END;
{WFENCE}
\tst.release.gpu.global.u32 [%rd1], 1;
\tbra END;
CONSUMER:
\tmov.u32 %r10, bar;
\tmov.u32 %r11, buf;
\tsetp.ne.u32 %p2, %r1, 0;
\t@%p2 bra LOADED;
\tmbarrier.init.shared.b64 [%r10], 1;
SPIN:
\tld.acquire.gpu.global.u32 %r4, [%rd1];
\tsetp.eq.u32 %p3, %r4, 0;
\t@%p3 bra SPIN;
{RFENCE}
\tmbarrier.arrive.expect_tx.shared.b64 _, [%r10], 128;
\tmov.u32 %r12, 1;
\tcp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%r11], [p_tm, {%r12}], [%r10];
LOADED:
\tbar.sync 0;
\t{
\t.reg .pred P1;
\tLAB_WAIT:
\tmbarrier.try_wait.parity.shared.b64 P1, [%r10], 0;
\t@P1 bra.uni DONE;
\tbra.uni LAB_WAIT;
\tDONE:
\t}
\tshl.b32 %r13, %r1, 2;
\tadd.u32 %r14, %r11, %r13;
\tld.shared.u32 %r5, [%r14];
\tst.global.u32 [%rd3+132], %r5;
END:
"""


def run_tma_handoff(wfence="", rfence="", chaos=None):
    emu = Emulator(chaos=chaos)
    body = TMA_HANDOFF.replace("{WFENCE}", wfence).replace("{RFENCE}", rfence)
    prog = load_ptx(kernel(body, params=("out", "tm"), ptypes={"tm": ".align 64 .b8"}).replace(".b8 p_tm", ".b8 p_tm[128]"))
    out = emu.to_device(np.zeros(65, np.uint32))
    tm = emu.tensor_map(out, (65,), "f32", (32,))
    emu.launch(prog, 2, 32, [out, tm])
    return emu.to_host(out, (65,), np.uint32)


@pytest.mark.parametrize("chaos", [None, 2])
@pytest.mark.parametrize("wfence,rfence", [("", "\tfence.proxy.async.global;"), ("\tfence.proxy.async;", ""),
                                           ("", "\tfence.proxy.async;")])
def test_tma_load_of_generic_writes_with_a_proxy_fence(wfence, rfence, chaos):
    """A TMA load of bytes another cluster wrote with st.global: ordered by release -> acquire,
    and made visible to the async proxy by fence.proxy.async(.global) on either side."""
    r = run_tma_handoff(wfence, rfence, chaos)
    assert (r[33:] == np.arange(100, 132)).all()


@pytest.mark.parametrize("rfence", ["", "\tfence.proxy.async.shared::cta;"])
def test_tma_load_of_generic_writes_without_a_proxy_fence_is_a_race(rfence):
    """Without the proxy fence (or with one restricted to shared memory) the TMA load may read
    stale bytes: reported in one eager run, naming the generic store and the TMA load."""
    with pytest.raises(RaceError, match=r"(?s)data race on global memory .*\n    generic write by cluster 0 at PTX "
                                        r"line \d+: st\.global\.u32.*\n    TMA load \(async proxy\) by cluster 1 "
                                        r"\(CTA \(1, 0, 0\)\) at PTX line \d+: cp\.async\.bulk\.tensor.*missing: "
                                        r"fence\.proxy\.async"):
        run_tma_handoff(rfence=rfence)
