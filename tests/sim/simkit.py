"""Helpers for the emulator tests: the PTX-snippet harness of ``cutedsl.testing.ptx`` under the
names these tests use, plus what belongs to this repository (its committed PTX fixtures, the
TMA read-back snippet)."""
from __future__ import annotations

import json
import pathlib

from cutedsl.testing.ptx import HEADER, REG_OF, REGS, WIDTH, mbarrier_wait  # noqa: F401  (re-exported)
from cutedsl.testing.ptx import ptx_kernel as kernel
from cutedsl.testing.ptx import run_alu as alu

__all__ = ["HERE", "PTX_DIR", "HEADER", "REGS", "REG_OF", "WIDTH", "mbarrier_wait", "kernel", "alu", "fixture",
           "spy", "COPY_OUT"]

HERE = pathlib.Path(__file__).parent
PTX_DIR = HERE / "ptx"


def fixture(name: str):
    """(ptx text, meta dict) of a committed PTX fixture."""
    return (PTX_DIR / f"{name}.ptx").read_text(), json.loads((PTX_DIR / f"{name}.json").read_text())


def spy(monkeypatch, owner, name, record) -> list:
    """Wrap ``owner.name`` (a function or method) so that every call still runs it and appends
    ``record(args, result)`` to the list returned: what a fixture sees the emulator do."""
    seen = []
    orig = getattr(owner, name)

    def wrapper(*args):
        result = orig(*args)
        seen.append(record(args, result))
        return result
    monkeypatch.setattr(owner, name, wrapper)
    return seen


#: Copies ``%r22`` bytes of shared memory at ``%r41`` to the global pointer ``%rd1``, 4 bytes
#: per thread per step with 128 threads (``%r1`` = tid.x); used to read back a TMA destination.
COPY_OUT = """
\tshl.b32 %r50, %r1, 2;
$L_copy:
\tsetp.ge.u32 %p5, %r50, %r22;
\t@%p5 bra $L_copied;
\tadd.s32 %r51, %r41, %r50;
\tld.shared.u32 %r52, [%r51];
\tcvt.u64.u32 %rd20, %r50;
\tadd.s64 %rd21, %rd1, %rd20;
\tst.global.u32 [%rd21], %r52;
\tadd.s32 %r50, %r50, 512;
\tbra.uni $L_copy;
$L_copied:
"""
