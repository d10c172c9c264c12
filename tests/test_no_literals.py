"""Issue 19: no element size, K tile, swizzle, warpgroup size or register budget written as a
literal in the atom, collective or kernel layers: they come from the MMA traits
(``atom/mma_traits.py``) and the architecture object (``cutedsl/arch.py``). Module- and
class-level named constants (an ISA table, a supported-values list) are the one place such a
number may be written; function bodies use the names."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "cutedsl"
FILES = sorted(p for d in ("atom", "collective", "kernel") for p in (ROOT / d).glob("*.py"))
#: 64: a K tile / an m64 block; 128: a swizzle row / a warpgroup; 1024, 2048, 8192: strides
#: derived from them; 40, 232, 168: register budgets
FORBIDDEN = {64, 128, 1024, 2048, 8192, 40, 232, 168}
#: ``swizzle=``/``align=`` keywords must be given a name, never a number
NAMED_KEYWORDS = {"swizzle"}
SIZE_WORDS = ("tile", "k_tile", "rows", "nbytes", "K_TILE", "tile_m", "tile_n")


def _offences(path: pathlib.Path) -> list:
    tree = ast.parse(path.read_text())
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        defaults = {id(d) for d in fn.args.defaults + fn.args.kw_defaults if d is not None}
        for node in ast.walk(fn):
            where = f"{path.relative_to(ROOT.parent)}:{getattr(node, 'lineno', '?')}"
            if (isinstance(node, ast.Constant) and type(node.value) is int and node.value in FORBIDDEN
                    and id(node) not in defaults):
                out.append(f"{where}: literal {node.value}")
            if isinstance(node, ast.keyword) and node.arg in NAMED_KEYWORDS and isinstance(node.value, ast.Constant):
                out.append(f"{where}: {node.arg}={node.value.value!r}")
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
                    and any(isinstance(s, ast.Constant) and s.value == 2 for s in (node.left, node.right))):
                other = ast.unparse(node.right if isinstance(node.left, ast.Constant) else node.left)
                if any(w in other for w in SIZE_WORDS):
                    out.append(f"{where}: element size written as '* 2' in {ast.unparse(node)}")
            if isinstance(node, ast.Name) and node.id in ("K_TILE", "K_STEP"):
                out.append(f"{where}: {node.id}")
    return out


def test_no_literal_sizes_in_atom_collective_kernel_code():
    found = [o for p in FILES for o in _offences(p)]
    assert found == [], "numbers that belong to the MMA traits or the Arch object:\n" + "\n".join(found)


@pytest.mark.parametrize("snippet,what", [("def f(t):\n    return t.rows * 64 * 2\n", "literal 64"),
                                          ("def f(p):\n    p.buffer('a', swizzle=128)\n", "swizzle=128"),
                                          ("def f(x):\n    return x.tile_m * 2\n", "'* 2'")])
def test_the_check_finds_what_it_forbids(tmp_path, snippet, what):
    f = ROOT / "atom" / "_probe_tmp.py"
    try:
        f.write_text(snippet)
        assert any(what in o for o in _offences(f))
    finally:
        f.unlink()
