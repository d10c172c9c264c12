"""Layering of the runtime (issue 38): the emulator and the runtime sit below the Device layer.

Every import in a module -- at the top or inside a function, relative or absolute -- is
resolved to its absolute module name and checked against the packages the module's layer
may not import (DESIGN.md: a lower layer never imports a higher one)."""
import ast
import pathlib
import sys

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "cutedsl"

FORBIDDEN = {
    "sim": ("cutedsl.device",),                                            # sim imports cutedsl.runtime
    "runtime": ("cutedsl.device", "cutedsl.kernel", "cutedsl.collective"),
}


def imported_modules(path: pathlib.Path):
    """``(line, absolute module name)`` for each import in ``path`` (``from a import b``
    yields ``a`` and ``a.b``: b may be a submodule)."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    package = list(rel.parts[:-1])          # the package a relative import starts from
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            yield node.lineno, mod
            for a in node.names:
                yield node.lineno, f"{mod}.{a.name}"


def violations(layer: str) -> list:
    bad = []
    for f in sorted((PKG / layer).rglob("*.py")):
        for line, mod in imported_modules(f):
            if any(mod == p or mod.startswith(p + ".") for p in FORBIDDEN[layer]):
                bad.append(f"{f.relative_to(PKG)}:{line} imports {mod}")
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_never_imports_the_layers_above(layer):
    assert violations(layer) == []


def test_the_resolver_sees_relative_absolute_and_lazy_imports(tmp_path, monkeypatch):
    """The scan would catch each spelling of a forbidden import (else the tests above could not fail)."""
    fake = tmp_path / "cutedsl"
    (fake / "sim" / "sub").mkdir(parents=True)
    (fake / "sim" / "sub" / "m.py").write_text(
        "from ...device import arrays\n"
        "def f():\n    import cutedsl.device.gemm\n"
        "from cutedsl import device\n"
        "from ...runtime.backend import Backend\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    got = sorted(v.split(":", 1)[1] for v in violations("sim"))
    assert got == ["1 imports cutedsl.device", "1 imports cutedsl.device.arrays", "3 imports cutedsl.device.gemm",
                   "4 imports cutedsl.device"]
