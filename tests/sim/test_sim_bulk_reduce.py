"""``cp.reduce.async.bulk.global.shared::cta.bulk_group`` on the emulator (PTX ISA 9.7.9.25.4.2):
values against numpy float64, the rounding and flush-to-zero of ``.add.f32``, the operand rules,
and the race rules of the async proxy (source read until ``wait_group.read``, destination in
flight until ``wait_group``; reductions of several CTAs into one array are atomic), in eager mode
and under adversarial seeds."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, load_ptx
from cutedsl.sim.frontend.errors import MemoryAccessError, PTXParseError, SimRuntimeError, UnsupportedInstruction
from simkit import kernel

# every CTA: thread t stores inp[ctaid * 128 + t] (as {TYPE} words) into buf[t]; thread 0 reduces
# {SIZE} bytes of buf into out + {OFF}, commits, {WAIT}s, then runs {AFTER}
REDUCE = """
\t.shared .align 16 .b8 buf[1024];
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tld.param.u64 %rd2, [p_inp];
\tcvta.to.global.u64 %rd2, %rd2;
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %ctaid.x;
\tmad.lo.u32 %r3, %r2, 128, %r1;
\tmul.wide.u32 %rd3, %r3, {W};
\tadd.s64 %rd3, %rd2, %rd3;
\tld.global.{LT} {REG}, [%rd3];
\tmov.u32 %r5, buf;
\tmad.lo.u32 %r6, %r1, {W}, %r5;
\tst.shared.{LT} [%r6], {REG};
\tfence.proxy.async.shared::cta;
\tbar.sync 0;
\tsetp.ne.u32 %p1, %r1, 0;
\t@%p1 bra END;
\tcp.reduce.async.bulk.global.shared::cta.bulk_group.{OP} [%rd1+{OFF}], [%r5], {SIZE};
\tcp.async.bulk.commit_group;
{WAIT}
{AFTER}
END:
"""


WAIT = "\tcp.async.bulk.wait_group 0;"


def ptx(op="add.f32", lt="f32", w=4, size=512, off=0, wait=WAIT, after="") -> str:
    reg = {4: "%r4", 8: "%rd4", 2: "%rs4"}[w]
    body = (REDUCE.replace("{OP}", op).replace("{LT}", lt).replace("{W}", str(w)).replace("{REG}", reg)
            .replace("{SIZE}", str(size)).replace("{OFF}", str(off)).replace("{WAIT}", wait).replace("{AFTER}", after))
    return kernel(body, params=("out", "inp"))


def run(op="add.f32", lt="f32", w=4, inp=None, init=None, ctas=1, size=512, off=0, wait=WAIT, after="", chaos=None):
    emu = Emulator(chaos=chaos)
    prog = load_ptx(ptx(op, lt, w, size, off, wait, after))
    d_out, d_inp = emu.to_device(init), emu.to_device(inp)
    emu.launch(prog, ctas, 128, [d_out, d_inp])
    return emu.to_host(d_out, init.shape, init.dtype)


@pytest.mark.parametrize("chaos", [None, 1, 7])
def test_f32_add_of_four_ctas_matches_float64(chaos):
    """Four CTAs reduce 128 f32 each into the same 128-word array (offset 64 B into it):
    dyadic values, so every order of the f32 sums gives the float64 result exactly; no race
    is reported (each element's reduction is a relaxed.gpu atomic)."""
    rng = np.random.default_rng(3)
    inp = (rng.integers(-64, 64, 4 * 128) / 8).astype(np.float32)
    init = (rng.integers(-64, 64, 144) / 4).astype(np.float32)
    got = run(inp=inp, init=init, ctas=4, off=64, chaos=chaos)
    want = init.astype(np.float64)
    want[16:144] += inp.reshape(4, 128).astype(np.float64).sum(0)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_f32_add_rounds_to_nearest_even_and_flushes_subnormals():
    """PTX ISA 9.7.9.25.4.2: ``.add`` rounds to nearest even; ``.add.f32`` flushes subnormal
    inputs and results to sign-preserving zero."""
    sub = np.float32(1e-40)                      # subnormal in f32
    init = np.zeros(128, np.float32)
    inp = np.zeros(128, np.float32)
    init[:6] = [1.0, 1.0, sub, -sub, 1.0, 2.0 ** -126]
    inp[:6] = [2.0 ** -24, 3 * 2.0 ** -24, 0.0, -0.0, sub, -(2.0 ** -126) * 1.5]
    got = run(inp=inp, init=init, size=512)
    assert got[0] == np.float32(1.0)                     # the tie to the even 1.0
    assert got[1] == np.float32(1.0 + 2.0 ** -22)        # the tie to the even mantissa, upwards
    assert got[2] == 0 and not np.signbit(got[2])        # subnormal + 0 -> +0
    assert got[3] == 0 and np.signbit(got[3])            # -subnormal + -0: flushed to -0 + -0 = -0
    assert got[4] == np.float32(1.0)                     # a subnormal input counts as 0
    assert got[5] == 0 and np.signbit(got[5])            # -2^-127 is subnormal: -0


def test_bf16_add_noftz_rounds_once():
    """``.add.noftz.bf16``: each sum rounded once to bf16 (nearest even), subnormals kept."""
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    rng = np.random.default_rng(5)
    inp = rng.standard_normal(128).astype(bf)
    init = rng.standard_normal(256).astype(bf)
    init[0], inp[0] = bf(1e-39), bf(1e-39)                # bf16 subnormals are preserved
    got = run(op="add.noftz.bf16", lt="b16", w=2, inp=inp, init=init, size=256)
    want = init.copy()
    want[:128] = (init[:128].astype(np.float64) + inp.astype(np.float64)).astype(np.float32).astype(bf)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert got[0].astype(np.float64) > 0


@pytest.mark.parametrize("op,fn", [
    ("add.u32", lambda a, b: a + b), ("min.u32", np.minimum), ("max.s32", np.maximum),
    ("inc.u32", lambda a, b: np.where(a >= b, 0, a + 1)),
    ("dec.u32", lambda a, b: np.where((a == 0) | (a > b), b, a - 1)),
    ("and.b32", np.bitwise_and), ("or.b32", np.bitwise_or), ("xor.b32", np.bitwise_xor)])
def test_integer_operations(op, fn):
    rng = np.random.default_rng(11)
    dt = np.int32 if op.endswith("s32") else np.uint32
    inp = rng.integers(0, 50, 128).astype(dt)
    init = rng.integers(0, 50, 128).astype(dt)
    init[:3] = [0, 49, 7]
    got = run(op=op, lt="b32", inp=inp, init=init)
    np.testing.assert_array_equal(got, fn(init, inp).astype(dt))


@pytest.mark.parametrize("op,msg", [
    ("add.s64", r"\.add does not take \.s64"),
    ("add.f16", r"\.add\.f16 requires \.noftz"),
    ("min.f32", r"\.min does not take \.f32")])
def test_invalid_operation_type_pairs_are_refused_at_decode(op, msg):
    with pytest.raises(PTXParseError, match=msg):
        load_ptx(ptx(op))


def test_unemulated_forms_are_named():
    body = ptx().replace("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1+0], [%r5], 512;",
                         "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32 "
                         "[%r5], [%r5], 16, [%r5];")
    with pytest.raises(UnsupportedInstruction, match=r"\.shared::cluster \(mbarrier completion\) is not emulated"):
        load_ptx(body)


@pytest.mark.parametrize("size,off,err,msg", [
    (8, 0, SimRuntimeError, r"size 8 is not a positive multiple of 16"),
    (16, 8, SimRuntimeError, r"destination 0x[0-9a-f]+ is not 16-byte aligned"),
    (512, 16, MemoryAccessError, r"destination .* is not inside one global allocation"),
    (1040, 0, MemoryAccessError, r"source \[0, 1040\) overruns the CTA's 1024 B of shared memory")])
def test_bad_sizes_and_addresses(size, off, err, msg):
    inp, init = np.zeros(128, np.float32), np.zeros(128, np.float32)
    with pytest.raises(err, match=msg):
        run(inp=inp, init=init, size=size, off=off)


# a generic write of the source buffer by the issuing thread after the reduction
REWRITE_SOURCE = "\tst.shared.u32 [%r5], %r1;"


@pytest.mark.parametrize("chaos", [None, 3])
@pytest.mark.parametrize("wait,race", [("\tcp.async.bulk.wait_group.read 0;", False),
                                       ("\tcp.async.bulk.wait_group 0;", False), ("", True)])
def test_source_rewritten_before_wait_group_read_is_a_race(wait, race, chaos):
    """The source is read by the async proxy until a ``wait_group.read`` covers the bulk group:
    a generic write before it is a race in any run (planted bug); after it the result holds the
    old source values."""
    inp = np.arange(128, dtype=np.float32)
    init = np.ones(128, np.float32)
    if race:
        with pytest.raises(RaceError, match=r"(?s)cp\.reduce\.async\.bulk.*st\.shared\.u32"):
            run(inp=inp, init=init, wait=wait, after=REWRITE_SOURCE, chaos=chaos)
    else:
        got = run(inp=inp, init=init, wait=wait, after=REWRITE_SOURCE, chaos=chaos)
        np.testing.assert_array_equal(got, init + inp)


# the issuing thread reads the destination back with a plain load and stores it past the array
READ_BACK = "\tld.global.f32 %f1, [%rd1];\n\tst.global.f32 [%rd1+512], %f1;"


@pytest.mark.parametrize("wait,race", [("\tcp.async.bulk.wait_group 0;", False),
                                       ("\tcp.async.bulk.wait_group.read 0;", True), ("", True)])
def test_destination_read_before_wait_group_is_a_race(wait, race):
    """The reduction's global writes are done only after a ``wait_group`` (not ``.read``)
    covering its group: a weak load before it races with the reduction still in flight."""
    inp = np.full(128, 2.0, np.float32)
    init = np.ones(129, np.float32)
    if race:
        with pytest.raises(RaceError, match=r"(?s)async-proxy reduction \(cp\.reduce\.async\.bulk\) at PTX line \d+"
                                            r".*weak read by cluster 0.*missing: cp\.async\.bulk\.wait_group "
                                            r"\(not \.read\)"):
            run(inp=inp, init=init, wait=wait, after=READ_BACK)
    else:
        got = run(inp=inp, init=init, wait=wait, after=READ_BACK)
        assert got[0] == 3.0 and got[128] == 3.0


def test_adversarial_mode_defers_the_additions_until_wait_group():
    """Under the adversarial mode the additions land late: a run whose read-back does wait gets
    the sum under every seed (the deferral is bounded by wait_group)."""
    inp = np.full(128, 2.0, np.float32)
    init = np.ones(129, np.float32)
    for seed in (1, 2, 5):
        got = run(inp=inp, init=init, wait="\tcp.async.bulk.wait_group 0;", after=READ_BACK, chaos=seed)
        assert got[0] == 3.0 and got[128] == 3.0
