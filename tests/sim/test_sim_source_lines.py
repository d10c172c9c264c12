"""Emulator errors name the Python line that built each instruction involved (issue #39): the PTX's
line tables (``.file`` / ``.loc``, PTX ISA 11.5.2-11.5.3) are kept per instruction and printed
beside the PTX line, for this project's kernels and foreign PTX (Triton) alike."""
import os
import re

import numpy as np
import pytest

from cutedsl.sim import Emulator, load_ptx
from cutedsl.sim.frontend.errors import DeadlockError, MemoryAccessError, RaceError, UnsupportedInstruction

from simkit import HEADER, REGS

HERE = os.path.relpath(__file__)


def _line(tag: str) -> int:
    """The line of this file that ends with the comment ``# <tag>``."""
    src = open(__file__).read().splitlines()
    return next(i for i, s in enumerate(src, 1) if s.rstrip().endswith(f"# {tag}"))


def _compile(name, params, body, block=(64, 1, 1), plan=None):
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import KernelBuilder, Param
    kb = KernelBuilder(name, [Param(*p) for p in params], block=block)
    with kb.build() as a:
        smem = plan.bind() if plan is not None else None
        body(a, smem)
    return compile_kernel(kb, dynamic_smem=plan.dynamic_bytes if plan is not None else 0)


def _oob_body(a, smem):
    from cutedsl.ir import block_idx, thread_idx
    from cutedsl.ir.gmem import GlobalPtr
    i = block_idx() * 64 + thread_idx()
    x, y = GlobalPtr(a.x, "f32"), GlobalPtr(a.y, "f32")
    y.store(i, x.load(i + 1000))        # PLANTED OOB LOAD


def test_memory_error_names_the_python_line_of_the_load():
    """A planted out-of-bounds load in a kernel built here: the report names this file's line."""
    k = _compile("oob", [("x", "ptr"), ("y", "ptr")], _oob_body)
    emu = Emulator()
    prog = emu.load(k.ptx)
    x, y = emu.to_device(np.zeros(64, np.float32)), emu.to_device(np.zeros(64, np.float32))
    with pytest.raises(MemoryAccessError) as e:
        emu.launch(prog, grid=1, block=64, args=[x, y])
    want = f"{HERE}:{_line('PLANTED OOB LOAD')}"
    assert re.search(r"at PTX line \d+ \(" + re.escape(want) + r"\): ld\.global", str(e.value)), str(e.value)


def _race_body(a, smem):
    from mlir.dialects import memref
    from cutedsl.ir import If, Scalar, index, thread_idx
    from cutedsl.ir.gmem import GlobalPtr
    buf = smem["w"].view(0)
    t = thread_idx()
    with If(t < 32):
        memref.store(t.to("f32"), buf, [index(t)])                  # RACE WRITE
    with If(t >= 32):
        v = Scalar(memref.load(buf, [index(t - 32)]))              # RACE READ
        GlobalPtr(a.y, "f32").store(t, v)


def test_race_report_names_both_python_lines():
    """Warp 0 writes shared memory that warp 1 reads with no barrier between: the race report
    names the Python line of the write and of the read."""
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("w", (32,), "f32")
    k = _compile("race", [("y", "ptr")], _race_body, plan=plan)
    emu = Emulator()
    prog = emu.load(k.ptx)
    y = emu.to_device(np.zeros(64, np.float32))
    with pytest.raises(RaceError) as e:
        emu.launch(prog, grid=1, block=64, args=[y], smem=k.dynamic_smem)
    msg = str(e.value)
    assert f"({HERE}:{_line('RACE WRITE')}): st.shared" in msg, msg
    assert f"({HERE}:{_line('RACE READ')}): ld.shared" in msg, msg


FOREIGN = HEADER + """.visible .entry k(.param .u64 p_out)
{
""" + REGS + """\t.loc\t1 7 3
\tld.param.u64 %rd1, [p_out];
\t.loc\t2 41 9, function_name $L__info_string0, inlined_at 1 12 5
\tld.global.u32 %r1, [%rd1+4096];
\t.loc\t1 13 1
\tret;
}
\t.file\t1 "/tmp/user/kernel.py"
\t.file\t2 "/tmp/lib/standard.py"
"""


def test_foreign_line_tables_after_the_body_and_inlined_calls():
    """Triton writes its ``.file`` table after the entry and ``.loc ... inlined_at``: both are read,
    and the report names the inlined line and its call site."""
    prog = load_ptx(FOREIGN)
    assert [i.src for i in prog.code[:3]] == ["/tmp/user/kernel.py:7",
                                              "/tmp/lib/standard.py:41, inlined at /tmp/user/kernel.py:12",
                                              "/tmp/user/kernel.py:13"]
    emu = Emulator()
    out = emu.to_device(np.zeros(4, np.uint32))
    with pytest.raises(MemoryAccessError, match=r"at PTX line 16 \(/tmp/lib/standard\.py:41, inlined at "
                                                r"/tmp/user/kernel\.py:12\): ld\.global\.u32"):
        emu.launch(emu.load(FOREIGN), grid=1, block=32, args=[out])


def test_unsupported_instruction_names_the_source_line_at_load():
    with pytest.raises(UnsupportedInstruction, match=r"PTX line 16 \(/tmp/lib/standard\.py:41, inlined at "
                                                     r"/tmp/user/kernel\.py:12\): unsupported instruction 'frobnicate'"):
        load_ptx(FOREIGN.replace("ld.global.u32 %r1, [%rd1+4096]", "frobnicate.u32 %r1"))


def test_deadlock_report_names_the_source_line_of_each_blocked_warp():
    ptx = (HEADER + ".visible .entry k(.param .u64 p_out)\n{\n" + REGS +
           "\t.loc 1 30 0\n\tmov.u32 %r1, %tid.x;\n\tsetp.lt.u32 %p1, %r1, 32;\n"
           "\t.loc 1 31 0\n\t@%p1 bar.sync 1, 64;\n\t.loc 1 32 0\n\tret;\n}\n\t.file 1 \"/tmp/dl.py\"\n")
    emu = Emulator()
    with pytest.raises(DeadlockError, match=r"warp 0 lanes 0-31 at PTX line \d+ \(/tmp/dl\.py:31\): @%p1 bar\.sync"):
        emu.launch(emu.load(ptx), grid=1, block=64, args=[emu.to_device(np.zeros(1, np.uint32))])


def test_ptx_without_line_tables_reads_as_before():
    prog = load_ptx(FOREIGN.replace("\t.loc", "//.loc"))
    assert all(i.src == "" for i in prog.code)
    assert prog.code[1].where().startswith("PTX line 16: ld.global.u32")
