"""The emulator's package layout (docs/emulator.md, "Architecture"): ``cutedsl/sim`` is cut into
ranked subpackages and imports only go downward, read from the source with ``ast`` (function-level
imports included):

    frontend (0) < checks (1) < machine (2) < engines (3) < instructions (4) < package root (5)

A module may import its own rank or lower ones; an instruction module imports no other instruction
module (they share code through the engines and the machine, and dispatch to each other's
operations through ``registry.subhandler``)."""
import ast
import importlib.util
from pathlib import Path

import pytest

import cutedsl.sim

SIM = Path(cutedsl.sim.__file__).resolve().parent
PKG = "cutedsl.sim"
RANKS = {"frontend": 0, "checks": 1, "machine": 2, "engines": 3, "instructions": 4}
ROOT_MODULES = {"__init__", "backend", "handlers"}      #: rank 5: the public API and handler registration
ROOT_RANK = 5


def _modules() -> dict:
    """Dotted module name -> source path, for every module of the package."""
    out = {}
    for p in sorted(SIM.rglob("*.py")):
        parts = p.relative_to(SIM).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PKG, *parts))] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set:
    """Absolute names of the modules ``name`` imports, anywhere in the file (``from pkg import x``
    counts as importing ``pkg.x`` when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else node.module
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in MODULES else base)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _rank(name: str):
    """Rank of a module of the package (None: a subpackage's ``__init__``, which imports nothing)."""
    rel = name[len(PKG) + 1:].split(".") if name != PKG else ["__init__"]
    if rel[0] in RANKS:
        return RANKS[rel[0]] if len(rel) > 1 else None
    assert len(rel) == 1 and rel[0] in ROOT_MODULES, f"{name} is in no rank subpackage"
    return ROOT_RANK


def _sim_edges():
    for m, deps in sorted(GRAPH.items()):
        for d in sorted(deps):
            if d == PKG or d.startswith(PKG + "."):
                yield m, d


def test_the_checker_sees_the_real_import_graph():
    """The parser resolves relative, ``from . import`` and function-level imports (a checker that
    saw no edges would pass anything)."""
    g = GRAPH
    assert "cutedsl.sim.engines.async_engine" in g["cutedsl.sim.instructions.tma"]
    assert "cutedsl.sim.engines.numerics" in g["cutedsl.sim.instructions.arith"]          # from ..engines import numerics
    assert "cutedsl.sim.machine.named_barriers" in g["cutedsl.sim.machine.machine"]        # inside CTA.on_exit
    assert "cutedsl.sim.instructions.tmem" in g["cutedsl.sim.handlers"]
    assert len(list(_sim_edges())) > 150


def test_every_module_has_a_rank():
    for m in MODULES:
        _rank(m)
    for sub in RANKS:
        assert f"{PKG}.{sub}" in MODULES, f"subpackage {sub} lost its __init__.py"


def test_imports_only_go_down_the_ranks():
    bad = [f"{m} (rank {_rank(m)}) imports {d} (rank {_rank(d)})"
           for m, d in _sim_edges() if _rank(d) is not None and _rank(d) > _rank(m)]
    assert not bad, "\n".join(bad)


def test_no_instruction_module_imports_another():
    inst = f"{PKG}.instructions."
    bad = [f"{m} imports {d}" for m, d in _sim_edges() if m.startswith(inst) and d.startswith(inst)]
    assert not bad, "\n".join(bad) + "\n(move what they share into engines/ or machine/)"


def test_handlers_imports_every_instruction_module_and_each_registers():
    """Registration is by import: a module that ``handlers.py`` misses would leave its opcodes
    unknown (``UnsupportedInstruction`` at load time)."""
    inst = sorted(m for m in MODULES if m.startswith(f"{PKG}.instructions."))
    missing = [m for m in inst if m not in GRAPH[f"{PKG}.handlers"]]
    assert not missing, f"handlers.py does not import {missing}"
    for m in inst:
        tree = ast.parse(MODULES[m].read_text())
        decos = {d.func.id for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.decorator_list
                 if isinstance(d, ast.Call) and isinstance(d.func, ast.Name)}
        assert decos & {"handler", "subhandler"}, f"{m} registers no decoder"


def test_the_emulator_imports_nothing_of_the_device_layer():
    bad = [f"{m} imports {d}" for m, deps in sorted(GRAPH.items()) for d in sorted(deps)
           if d == "cutedsl.device" or d.startswith("cutedsl.device.")]
    assert not bad, "\n".join(bad)
