"""The PTX carries the Python line that built each instruction (``.file`` / ``.loc``, PTX ISA
11.5: debugging directives), as ``nvcc -lineinfo`` writes them: line tables only, code unchanged."""
import re

import pytest

from cutedsl.compiler.locations import builder_line, line_tables_only, without_line_tables
from cutedsl.ir import If, KernelBuilder, Param, block_idx, thread_idx
from cutedsl.ir.gmem import GlobalPtr

LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+", re.M)
FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', re.M)


def _lines_before(ptx: str, opcode: str) -> list:
    """``(file, line)`` of the ``.loc`` in force at each instruction starting with ``opcode``."""
    files = dict(FILE.findall(ptx))
    out, cur = [], None
    for line in ptx.splitlines():
        m = LOC.match(line)
        if m:
            cur = (files[m.group(1)], int(m.group(2)))
        elif line.strip().startswith(opcode):
            out.append(cur)
    return out


def _user_kernel():
    kb = KernelBuilder("user_saxpy", [Param("x", "ptr"), Param("y", "ptr"), Param("n", "i32"), Param("alpha", "f32")])
    with kb.build() as a:
        i = block_idx() * 128 + thread_idx()
        x, y = GlobalPtr(a.x, "f32"), GlobalPtr(a.y, "f32")
        with If(i < a.n.unsigned()):
            y.store(i, a.alpha * x.load(i) + y.load(i))     # THE STORE LINE
    return kb


def test_user_kernel_instructions_name_the_users_line():
    """An atom-composed kernel: its global store is located at the test's own line (the frames
    of cutedsl.ir, which emitted it, are skipped)."""
    from cutedsl.compiler import compile_kernel
    ptx = compile_kernel(_user_kernel()).ptx
    src = open(__file__).read().splitlines()
    store_line = next(i for i, s in enumerate(src, 1) if s.rstrip().endswith("# THE STORE LINE"))
    stores = _lines_before(ptx, "st.global")
    assert stores == [(__file__, store_line)], stores
    assert ".target sm_90a\n" in ptx and ".section" not in ptx      # line tables only: no DWARF, no ', debug'


def test_library_kernel_lines_are_collectives_not_plumbing():
    """A warp-specialized GEMM: every wgmma names a collective's line; no instruction is located in
    cutedsl/ir or cutedsl/atom (the emitters), and the .file table lists the collective modules."""
    from cutedsl import GemmConfig
    kern = GemmConfig(schedule="warp_specialized").kernel()
    ptx = kern.compile(cache=False).ptx
    files = [f for _, f in FILE.findall(ptx)]
    assert any(f.endswith("collective/tma_wgmma.py") for f in files), files
    assert not [f for f in files if "/cutedsl/ir/" in f or "/cutedsl/atom/" in f], files
    mmas = _lines_before(ptx, "wgmma.mma_async")
    assert mmas and all(f.endswith(("collective/tma_wgmma.py", "collective/warp_specialized.py")) for f, _ in mmas), mmas


def test_line_tables_leave_the_code_alone():
    """Removing the line tables gives the same code as lowering with no locations at all, and ptxas
    makes identical SASS of both (the emulator and the GPU run the same instructions)."""
    from mlir import ir
    from cutedsl.compiler import lowering
    from cutedsl.compiler.toolchain import ptxas, sass

    def ptx_of(strip_locations: bool):
        kb = _user_kernel()
        if strip_locations:
            with kb.context:
                kb.module.operation.walk(lambda op: (setattr(op, "location", ir.Location.unknown()),
                                                     ir.WalkResult.ADVANCE)[1])
        return lowering.lower_to_ptx(kb.module)["ptx"]
    with_lines, without = ptx_of(False), ptx_of(True)
    assert __file__ in with_lines and __file__ not in without
    assert without_line_tables(with_lines) == without_line_tables(without)
    norm = lambda c: re.sub(r"/\*[0-9a-f]{4}\*/", "", sass(c))      # noqa: E731
    assert norm(ptxas(with_lines)[0]) == norm(ptxas(without)[0])


def test_line_tables_only_strips_dwarf_and_debug_target():
    ptx = (".version 8.3\n.target sm_90a, debug\n.address_size 64\n\tret;\n\t.file\t1 \"/a.py\"\n"
           "\t.section\t.debug_abbrev\n\t{\n.b8 1\n.b8 0\n\t}\n\t.section\t.debug_macinfo\t{\t}\n")
    assert line_tables_only(ptx) == ".version 8.3\n.target sm_90a\n.address_size 64\n\tret;\n\t.file\t1 \"/a.py\"\n"


@pytest.mark.parametrize("chain,want", [
    (["/x/cutedsl/ir/values.py", "/x/cutedsl/atom/wgmma.py", "/x/cutedsl/collective/m.py", "/u/k.py"], 2),
    (["/x/cutedsl/ir/values.py", "/u/k.py"], 1),
    (["/x/cutedsl/ir/values.py"], 0),
])
def test_builder_line_skips_emitter_frames(chain, want, monkeypatch):
    from mlir import ir
    import cutedsl.compiler.locations as L
    monkeypatch.setattr(L, "_PLUMBING", ("/x/cutedsl/ir/", "/x/cutedsl/atom/"))
    with ir.Context():
        frames = [ir.Location.file(f, 10 + i, 1) for i, f in enumerate(chain)]
        loc = frames[-1]
        for f in reversed(frames[:-1]):
            loc = ir.Location.callsite(f, [loc])
        assert builder_line(loc) == (chain[want], 10 + want, 1)
        assert builder_line(ir.Location.unknown()) is None
