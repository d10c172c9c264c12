"""``st.async`` into a peer CTA's shared memory completing on its mbarrier, vector registers
(``.reg .v4``), and ``mapa`` of ranks the cluster does not have -- what CuTe DSL's 2-CTA tile
scheduler emits (tests/sim/test_cute_dsl_fixtures.py runs it whole)."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, SimRuntimeError, load_ptx
from simkit import kernel, mbarrier_wait

DECL = "\t.shared .align 8 .b8 bars[16];\n\t.shared .align 16 .b8 buf[16];\n"
PRE = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r5, %cluster_ctarank;
\tmov.u32 %r40, bars;
\tmov.u32 %r41, buf;
\tsetp.eq.u32 %p10, %r1, 0;
\tsetp.eq.u32 %p11, %r5, 1;
\tand.pred %p12, %p10, %p11;
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\t@%p12 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r40], 16;
\tbarrier.cluster.arrive.release.aligned;
\tbarrier.cluster.wait.acquire.aligned;
"""
#: rank 0's thread 0 sends four words to rank 1's buf, completing on rank 1's barrier
SEND = """
\tsetp.eq.u32 %p13, %r5, 0;
\tand.pred %p14, %p10, %p13;
\tmapa.shared::cluster.u32 %r7, %r41, 1;
\tmapa.shared::cluster.u32 %r8, %r40, 1;
\t{
\t.reg .v4 .b32 v;
\tadd.u32 v.x, %r1, 11;
\tmov.b32 v.y, 22;
\tmov.b32 v.z, 33;
\tmov.b32 v.w, 44;
\t@%p14 st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%r7], v, [%r8];
\t}
"""
STORE = """
\tld.shared.v4.u32 {%r20, %r21, %r22, %r23}, [%r41];
\tmul.wide.u32 %rd4, %r5, 16;
\tadd.s64 %rd5, %rd1, %rd4;
\t@%p10 st.global.v4.u32 [%rd5], {%r20, %r21, %r22, %r23};
"""
DIRECTIVES = ".explicitcluster\n.reqnctapercluster 2, 1, 1"


def run(body, **kw):
    emu = Emulator(**kw)
    prog = load_ptx(kernel(PRE + body, decls=DECL, directives=DIRECTIVES))
    out = emu.to_device(np.zeros(8, np.uint32))
    emu.launch(prog, 2, 32, [out])
    return emu.to_host(out, (2, 4), np.uint32)


RECEIVE = "\t@%p11 bra RECV;\n\tbra.uni END;\nRECV:\n" + mbarrier_wait("%r40") + STORE + "END:\n"


@pytest.mark.sim_kernel
def test_st_async_lands_in_the_peer_and_completes_its_mbarrier(sim_seed):
    out = run(SEND + RECEIVE)
    assert out[1].tolist() == [11, 22, 33, 44] and out[0].tolist() == [0, 0, 0, 0]


def test_reading_without_the_mbarrier_wait_is_a_race():
    # the cluster barrier orders rank 0's thread before rank 1's, not its asynchronous store
    body = SEND + "\tbarrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" \
        "\t@%p11 bra RECV;\n\tbra.uni END;\nRECV:\n" + STORE + "END:\n" + "\t@%p11 bra W2;\n\tbra.uni E2;\nW2:\n" \
        + mbarrier_wait("%r40") + "E2:\n"
    with pytest.raises(RaceError, match=r"asynchronous stores \(st\.async of warp 0(.|\n)*st\.async\.shared::cluster"):
        run(body)


def test_st_async_mbarrier_must_be_in_the_destination_cta():
    body = SEND.replace("mapa.shared::cluster.u32 %r8, %r40, 1;", "mov.u32 %r8, %r40;")
    with pytest.raises(SimRuntimeError, match=r"st\.async: the mbarrier \(CTA rank 0\) must be in the "
                                              r"destination's CTA \(rank 1\)"):
        run(body + RECEIVE)


def test_st_async_refuses_what_it_does_not_have():
    from cutedsl.sim import UnsupportedInstruction
    bad = SEND.replace(".mbarrier::complete_tx::bytes", "")
    with pytest.raises(UnsupportedInstruction, match=r"st\.async completes on an mbarrier"):
        run(bad)


def test_vector_register_components_and_brace_use():
    # .reg .v2 with .r/.g aliases; the bare name stands for {v.x, v.y}
    body = """
\t{
\t.reg .v2 .u32 q;
\tmov.u32 q.r, 7;
\tadd.u32 q.g, q.x, 1;
\tmul.wide.u32 %rd4, %r1, 8;
\tadd.s64 %rd5, %rd1, %rd4;
\tst.global.v2.u32 [%rd5], q;
\t}
"""
    emu = Emulator()
    out = emu.to_device(np.zeros(64, np.uint32))
    emu.launch(load_ptx(kernel("\tld.param.u64 %rd1, [p_out];\n\tmov.u32 %r1, %tid.x;\n" + body)), 1, 32, [out])
    assert emu.to_host(out, (32, 2), np.uint32).tolist() == [[7, 8]] * 32


def test_mapa_of_a_missing_rank_is_reported_where_it_is_used():
    # every lane maps its lane id (CuTe DSL's pattern); only lanes below the cluster size may use it
    body = """
\tmov.u32 %r6, %laneid;
\tmapa.shared::cluster.u32 %r9, %r41, %r6;
\tsetp.lt.u32 %p15, %r6, 2;
\t@%p15 ld.shared::cluster.u32 %r10, [%r9];
\tbarrier.cluster.arrive.release.aligned;
\tbarrier.cluster.wait.acquire.aligned;
"""
    # (the kernel reads the peers' buf without writing it: initcheck off, the test is about ranks)
    run(body, initcheck=False)              # lanes 0 and 1 read the two CTAs' buf: fine
    with pytest.raises(SimRuntimeError, match=r"rank 2"):
        run(body.replace("setp.lt.u32 %p15, %r6, 2;", "setp.lt.u32 %p15, %r6, 3;"), initcheck=False)
