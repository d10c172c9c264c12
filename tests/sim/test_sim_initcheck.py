"""Initcheck (issue #40 item 7): reads of shared memory no write reached since the CTA started,
and the tensor core's reads of tensor memory nothing defined, are errors naming the read and the
declaration; on in the tests (tests/conftest.py), off by ``initcheck=False`` /
``CUTEDSL_SIM_INITCHECK=0``. Legitimate patterns (TMA zero fill, ``enable-input-d`` false, a
``tensormap.replace`` of a map nothing wrote) are not reported."""
import os

import numpy as np
import pytest

from cutedsl.sim import Emulator, SimLaunchError, UninitializedReadError, load_ptx

import tc05kit as kit
from simkit import kernel
from test_sim_tcgen05_mma import run_tile

HERE = os.path.relpath(__file__)

# thread t stores word t of buf (only the first {n} threads), then after a barrier reads word t
SHARED = """
\t.shared .align 16 .b8 buf[512];
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tshl.b32 %r2, %r1, 2;
\tmov.u32 %r3, buf;
\tadd.s32 %r4, %r3, %r2;
\tsetp.lt.u32 %p1, %r1, {n};
\t@%p1 st.shared.u32 [%r4], %r1;
\tbar.sync 0;
\tld.shared.u32 %r5, [%r4];
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r5;
"""


def _shared(n):
    return load_ptx(kernel(SHARED.format(n=n)))


def test_initcheck_is_on_in_the_tests():
    assert os.environ.get("CUTEDSL_SIM_INITCHECK") == "1"


def test_read_of_never_written_shared_memory_names_the_read_and_the_declaration():
    emu = Emulator()
    out = emu.to_device(np.zeros(128, np.uint32))
    emu.launch(_shared(128), 1, 128, [out])                    # every word written first: fine
    assert emu.to_host(out, (128,), np.uint32).tolist() == list(range(128))
    ptx = SHARED.format(n=96)
    decl = 1 + kernel(ptx).splitlines().index("\t.shared .align 16 .b8 buf[512];")
    with pytest.raises(UninitializedReadError, match=(
            r"(?s)uninitialized read of shared memory buf\+384 \(CTA \(0, 0, 0\), byte offset 384\):.*"
            r"read by CTA \(0, 0, 0\) warp 3 \(threads 96-127\), generic proxy, at PTX line \d+: "
            r"ld\.shared\.u32 %r5, \[%r4\].*static shared variable buf \(512 B, declared at PTX line "
            + str(decl) + r"\).*SimBackend\(initcheck=False\) / CUTEDSL_SIM_INITCHECK=0")):
        emu.launch(_shared(96), 1, 128, [out])


def test_switches(monkeypatch):
    out = Emulator().to_device(np.zeros(128, np.uint32))
    emu = Emulator(initcheck=False)
    emu.launch(_shared(96), 1, 128, [emu.to_device(np.zeros(128, np.uint32))])
    monkeypatch.setenv("CUTEDSL_SIM_INITCHECK", "0")
    emu = Emulator()
    emu.launch(_shared(96), 1, 128, [emu.to_device(np.zeros(128, np.uint32))])
    with pytest.raises(UninitializedReadError):                 # the option wins over the variable
        Emulator(initcheck=True).launch(_shared(96), 1, 128, [out])
    monkeypatch.setenv("CUTEDSL_SIM_INITCHECK", "maybe")
    with pytest.raises(SimLaunchError, match="CUTEDSL_SIM_INITCHECK='maybe' is not understood"):
        Emulator().launch(_shared(96), 1, 128, [out])
    with pytest.raises(TypeError, match="initcheck must be True, False or None"):
        Emulator(initcheck="yes")


def _python_race_free_body(a, smem):
    from mlir.dialects import memref
    from cutedsl.ir import If, Scalar, index, thread_idx
    from cutedsl.ir.gmem import GlobalPtr
    buf = smem["w"].view(0)
    t = thread_idx()
    with If(t < 32):
        memref.store(t.to("f32"), buf, [index(t)])
    v = Scalar(memref.load(buf, [index(t)]))                   # UNINIT READ (threads 32-63)
    GlobalPtr(a.y, "f32").store(t, v)


def test_report_names_the_python_line_of_the_read():
    """A kernel built here reads shared words only half of its threads wrote (and no barrier is
    needed for the own-warp words): the report names this file's line."""
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import KernelBuilder, Param, SmemPlan
    plan = SmemPlan()
    plan.buffer("w", (64,), "f32")
    kb = KernelBuilder("uninit", [Param("y", "ptr")], block=(64, 1, 1))
    with kb.build() as a:
        _python_race_free_body(a, plan.bind())
    k = compile_kernel(kb, dynamic_smem=plan.dynamic_bytes)
    emu = Emulator()
    src = open(__file__).read().splitlines()
    line = next(i for i, s in enumerate(src, 1) if s.rstrip().endswith("# UNINIT READ (threads 32-63)"))
    with pytest.raises(UninitializedReadError, match=rf"(?s)warp 1 .*\({HERE}:{line}\): ld\.shared.*"
                                                     r"dynamic shared memory \(\d+ B given by the launch"):
        emu.launch(emu.load(k.ptx), 1, 64, [emu.to_device(np.zeros(64, np.float32))], smem=k.dynamic_smem)


def test_accumulating_mma_into_undefined_tensor_memory_is_reported():
    """tcgen05.alloc leaves the columns undefined: the first MMA must not accumulate
    (enable-input-d false, what the kit's kernel does); accumulating from the first MMA reads D
    nothing wrote."""
    rng = np.random.default_rng(5)
    a, b = rng.integers(-3, 4, (128, 64)).astype(np.float16), rng.integers(-3, 4, (64, 64)).astype(np.float16)
    got = run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=64)
    assert np.array_equal(got.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64).T)
    with pytest.raises(UninitializedReadError, match=r"(?s)uninitialized read of tensor memory lane 0 column 0 .*"
                                                     r"tcgen05\.mma D.*allocated by tcgen05\.alloc"):
        run_tile(a, b, kind="f16", at="f16", bt="f16", m=128, n=64, enable="setp.eq.u32 %p7, %r7, %r7;")
    assert kit.ENABLE_ACC.startswith("setp.ne")
