"""Ahead-of-time export of a compiled GEMM: ``gemm.save(path)`` / ``cutedsl.load(path)``.

A saved GEMM is a directory: ``cutedsl.json`` (format, cutedsl version, the ``GemmConfig``, the
cache key) and ``kernel/`` (the compiled kernel's ``kernel.json``, ``kernel.ptx``,
``kernel.cubin``, each checksummed, as the cache stores them). :func:`load` rebuilds the
``Gemm`` from the config -- pure Python, no MLIR -- and uses the saved kernel instead of
compiling, so a machine with only numpy and cuda-python (or the emulator) runs it. The kernel
object's parameters and launch shape must match the saved artifact's (they do for the same
cutedsl sources; a mismatch is refused, naming both), so a stale export never launches with
the wrong argument layout.

Only a ``Gemm`` built from a config alone can be saved (a user epilogue or kernel class is
code, which the export does not carry).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ArgumentError, CacheError

FORMAT = 1
MANIFEST = "cutedsl.json"


def save(gemm, path) -> Path:
    """Write ``gemm``'s compiled kernel (compiling it first if needed) and config to directory
    ``path`` (created); returns it. ``ArgumentError`` for a Gemm with a user epilogue/kernel."""
    from .. import __version__
    if getattr(gemm, "_custom", False):
        raise ArgumentError("save(): only a Gemm built from a GemmConfig alone can be exported (a user epilogue "
                            "or kernel class is code the export does not carry)")
    cfg = gemm.config.fields()
    if any(not isinstance(nd, str) for nd in cfg["fusion"]):
        raise ArgumentError("save(): a user EpilogueNode (no string spec) is code the export does not carry")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    k = gemm.compiled
    k.save(path / "kernel")
    manifest = {"format": FORMAT, "kind": "gemm", "cutedsl": __version__, "config": cfg, "key": k.key}
    (path / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=list) + "\n")
    return path


def load(path, backend="auto"):
    """The ``Gemm`` saved at ``path`` (see module docstring), on ``backend``. Raises
    ``CacheError`` for a missing, malformed or tampered export, or one whose parameters do not
    match what this cutedsl builds for its config."""
    from ..compiler.artifact import CompiledKernel
    from .config import GemmConfig
    from .gemm import Gemm
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise CacheError(f"{path} is not a saved cutedsl GEMM (no readable {MANIFEST}: {e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("kind") != "gemm":
        raise CacheError(f"{path}/{MANIFEST}: unknown export format {manifest.get('format') if isinstance(manifest, dict) else manifest!r}")
    try:
        cfg = GemmConfig(**manifest["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CacheError(f"{path}/{MANIFEST}: its config does not load ({e})") from None
    kern = CompiledKernel.load(path / "kernel")          # checksums: CacheError when tampered
    g = Gemm(cfg, backend)
    want = [(p.name, p.kind) for p in g.kernel.params()]
    got = [(p.name, p.kind) for p in kern.params]
    if want != got or kern.entry != g.kernel.name:
        raise CacheError(f"{path}: the saved kernel {kern.entry}({', '.join(n for n, _ in got)}) does not match what "
                         f"this cutedsl builds for its config, {g.kernel.name}({', '.join(n for n, _ in want)}): "
                         f"export it again with this version")
    g._compiled = kern
    return g


__all__ = ["save", "load"]
