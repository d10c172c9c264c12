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
    # the test kit builds kernels from atoms and runs them on the emulator: below the layers it tests
    "testing": ("cutedsl.device", "cutedsl.kernel", "cutedsl.collective"),
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


def _calls_of(attr: str):
    """``file:line`` of each call ``<anything>.<attr>(...)`` in the library."""
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr:
                yield f"{f.relative_to(PKG)}:{node.lineno}"


def test_parameters_are_packed_in_one_place():
    """Every kernel launches through the runtime's binding: ``pack_params`` is called only there."""
    calls = list(_calls_of("pack_params"))
    assert len(calls) == 1 and calls[0].startswith("runtime/binding.py:"), calls


#: a kernel's collectives: the Device layer asks the kernel's host contract instead
COLLECTIVES = {"scheduler", "epilogue", "mainloop", "reduction"}


def _kernel_internals(tree):
    """``(line, text)`` of each ``<kernel>.<collective>`` or ``getattr(<kernel>, "<collective>")``,
    where ``<kernel>`` is a name or attribute naming a kernel (``kernel``, ``self.kernel``,
    ``kern_obj``...)."""
    def names_kernel(v):
        n = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else ""
        return "kern" in n
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in COLLECTIVES and names_kernel(node.value):
            yield node.lineno, ast.unparse(node)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and names_kernel(node.args[0])
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in COLLECTIVES):
            yield node.lineno, ast.unparse(node)


def test_the_device_layer_never_reaches_into_a_kernels_collectives():
    bad = [f"{f.relative_to(PKG)}:{line} {text}" for f in sorted((PKG / "device").rglob("*.py"))
           for line, text in _kernel_internals(ast.parse(f.read_text()))]
    assert bad == []


def test_the_collective_scan_sees_each_spelling():
    src = ("sched = self.kernel.scheduler\nself.kernel.scheduler.sm_count = 3\nx = kern_obj.epilogue.kind\n"
           "getattr(self.kernel, 'reduction', None)\ncfg.epilogue\nself.kernel.host_params()\n")
    assert sorted(line for line, _ in _kernel_internals(ast.parse(src))) == [1, 2, 3, 4]
