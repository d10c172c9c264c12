"""Python source locations for the PTX: every op's location becomes the one Python line that
built it, so the PTX carries ``.file`` / ``.loc`` directives (PTX ISA 11.5.2 / 11.5.3: debugging
directives) that the emulator's reports and ``cuda-gdb``/Nsight's line tables read.

The IR is built under ``mlir.ir.loc_tracebacks()``: each op holds the Python traceback that created
it as nested ``callsite`` locations of file *ranges*. LLVM's line tables want one file:line:col per
instruction (and MLIR 22's ``ensure-debug-info-scope-on-llvm-func`` crashes on range locations), so
before lowering each location is flattened to the innermost frame that is not the IR plumbing:
frames in :mod:`cutedsl.ir`, :mod:`cutedsl.atom` (one instruction family each: the interesting
line is the collective's or kernel's that called the atom, or the user's), the MLIR bindings and
the Python standard library are skipped; where every frame is plumbing the innermost is kept.
"""
from __future__ import annotations

import os
import re
import sysconfig

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # .../cutedsl
_PLUMBING = tuple(os.path.join(_HERE, d) + os.sep for d in ("ir", "atom"))
_STDLIB = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
#: emission kind of the debug info the lowering attaches (line tables only: no variables, no
#: change to the code ptxas generates)
EMISSION = "LineTablesOnly"
DI_PASS = f"ensure-debug-info-scope-on-llvm-func{{emission-kind={EMISSION}}}"


def _frames(loc) -> list:
    """The file locations of ``loc``'s traceback, innermost first."""
    out, todo = [], [loc]
    while todo:
        cur = todo.pop(0)
        if cur.is_a_callsite():
            todo[:0] = [cur.callee, cur.caller]
        elif cur.is_a_file():
            out.append(cur)
        elif cur.is_a_fused():
            todo[:0] = list(cur.locations)
        elif cur.is_a_name():
            todo.insert(0, cur.child_loc)
    return out


def _plumbing(filename: str) -> bool:
    if filename.startswith(_PLUMBING) or f"{os.sep}mlir{os.sep}" in filename:
        return True
    return os.path.realpath(filename).startswith(_STDLIB) and "site-packages" not in filename


def builder_line(loc):
    """``(filename, line, col)`` of the Python line that built an op with location ``loc``
    (see the module docstring), or None for an unknown location."""
    frames = _frames(loc)
    if not frames:
        return None
    pick = next((f for f in frames if not _plumbing(f.filename)), frames[0])
    return pick.filename, pick.start_line, pick.start_col


def flatten(module) -> None:
    """Give every op and block argument of ``module`` the plain ``file:line:col`` location of
    :func:`builder_line` (in place; unknown locations stay unknown). Call inside the module's
    context."""
    from mlir import ir
    memo = {}

    def flat(loc):
        key = str(loc)
        if key not in memo:
            at = builder_line(loc)
            memo[key] = ir.Location.file(*at) if at else ir.Location.unknown()
        return memo[key]

    def visit(op):
        op.location = flat(op.location)
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    arg = ir.BlockArgument(arg)       # a value caster may have wrapped it
                    arg.set_location(flat(arg.location))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


_TARGET_DEBUG = re.compile(r"^(\.target\s+[^\n]*?),\s*debug\s*$", re.M)
_DEBUG_SECTION = re.compile(r"^[ \t]*\.section[ \t]+\.debug_\w+\s*\{[^}]*\}[ \t]*\n?", re.M)


def line_tables_only(ptx: str) -> str:
    """``ptx`` as ``nvcc -lineinfo`` writes it: its ``.file`` / ``.loc`` directives kept, the
    DWARF ``.section .debug_*`` blocks and the ``.target ..., debug`` flag (which NVPTX adds for
    any debug info, and which makes ptxas refuse optimisation: "Optimized debugging not
    supported") removed. Line tables do not change the code ptxas generates."""
    return _DEBUG_SECTION.sub("", _TARGET_DEBUG.sub(r"\1", ptx))


_LINE_TABLE = re.compile(r"^(?:[ \t]*\.(?:loc|file)\b.*|\$L__(?:func_begin|func_end|tmp)\d+:)[ \t]*\n", re.M)


def without_line_tables(ptx: str) -> str:
    """``ptx`` without its line tables (``.loc`` / ``.file`` directives and the labels NVPTX
    places for them): the code alone, e.g. to compare two builds whose Python lines moved."""
    return _LINE_TABLE.sub("", ptx)


__all__ = ["builder_line", "flatten", "line_tables_only", "without_line_tables", "DI_PASS"]
