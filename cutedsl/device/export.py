"""Ahead-of-time export of a compiled kernel: ``gemm.save(path)`` / ``cutedsl.load(path)``.

The export goes through the config protocol (:mod:`cutedsl.device.config_protocol`): the
manifest's ``kind`` is the config's family (``"gemm"``) and ``config`` its ``to_dict()``;
:func:`load` looks the family up in the registry, reads the config with its ``from_dict`` and
builds the family's front end (``Gemm`` for ``"gemm"``); the code here depends on no family.

A saved GEMM is a directory: ``cutedsl.json`` (the manifest: format, cutedsl version, the
``GemmConfig``, the cache key, the SHA-256 of ``kernel/kernel.json`` and of the manifest itself)
and ``kernel/`` (the compiled kernel's ``kernel.json``, ``kernel.ptx``, ``kernel.cubin``, each
checksummed, as the cache stores them; ``kernel.json`` records the kernel config the code was
generated for). :func:`load` rebuilds the ``Gemm`` from the config -- pure Python, no MLIR --
and uses the saved kernel instead of compiling, so a machine with only numpy and cuda-python
(or the emulator) runs it.

What :func:`load` checks, so that an edited or stale export never computes a wrong answer:
the manifest's checksum and the kernel's (an edit of either is refused), then everything the
kernel was built for, re-derived from the manifest's config and compared with what the saved
kernel records: the kernel config field by field (architecture, tile, element and output
dtypes, majors, stages, schedule classes...), the entry name, the parameter layout (names
and kinds in order) and the PTX ``.target`` the toolchain compiled for. A mismatch is a
``CacheError`` naming the field and both values.

Only a ``Gemm`` built from a config alone can be saved (a user epilogue or kernel class is
code, which the export does not carry). :func:`save` writes only into a new or empty folder,
or one holding an export of ours (which it replaces): it never overwrites a file it did not
write.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from ..errors import ArgumentError, ArgumentTypeError, CacheError, ConfigError
from .config_protocol import config_family, family_names

FORMAT = 2      #: manifest layout; 2 added the manifest's and the kernel's checksums
MANIFEST = "cutedsl.json"
KERNEL_DIR = "kernel"
_KERNEL_FILES = ("kernel.json", "kernel.ptx", "kernel.cubin")
_TARGET = re.compile(r"^\s*\.target\s+(\w+)", re.M)


def _digest(manifest: dict) -> str:
    """SHA-256 of the manifest's canonical JSON, without its own checksum."""
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _path(path, who: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"{who}: path must be a directory path (str or os.PathLike), got {path!r}")
    return Path(path)


def _is_export(path: Path) -> bool:
    """Whether directory ``path`` holds an export this module wrote (any format)."""
    try:
        m = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and m.get("kind") in family_names() and isinstance(m.get("format"), int)


def _check_target(path: Path) -> None:
    """``ArgumentError`` unless ``path`` is new, an empty folder or an export of ours."""
    if not path.exists() and not path.is_symlink():
        up = next((p for p in path.absolute().parents if p.exists()), None)
        if up is not None and not up.is_dir():
            raise ArgumentError(f"save(path): {str(up)!r} (in {str(path)!r}) is not a folder; give a path whose "
                                f"existing part is a folder")
        return
    if not path.is_dir():
        raise ArgumentError(f"save(path): {str(path)!r} exists and is not a folder; give a new path (it is "
                            f"created) or an empty folder")
    if any(path.iterdir()) and not _is_export(path):
        raise ArgumentError(f"save(path): the folder {str(path)!r} is not empty and holds no cutedsl export "
                            f"({MANIFEST}); save into a new or empty folder (an export of ours is replaced)")
    kdir = path / KERNEL_DIR
    if kdir.is_symlink() or (kdir.exists() and not kdir.is_dir()):
        raise ArgumentError(f"save(path): {str(kdir)!r} is not a folder this export wrote; save elsewhere")
    stray = sorted(p.name for p in kdir.iterdir() if p.name not in _KERNEL_FILES) if kdir.is_dir() else []
    if stray:
        raise ArgumentError(f"save(path): {str(kdir)!r} holds files this export did not write ({', '.join(stray)}); "
                            f"save elsewhere")


def save(gemm, path) -> Path:
    """Write ``gemm``'s compiled kernel (compiling it first if needed) and config to directory
    ``path`` (created; or an existing empty folder, or an export of ours, replaced); returns it.
    ``ArgumentError`` for a Gemm with a user epilogue/kernel, or a ``path`` that is a file or a
    folder holding something else; ``ArgumentTypeError`` for a ``path`` that is no path."""
    from .. import __version__
    path = _path(path, "save()")
    if getattr(gemm, "_custom", False):
        raise ArgumentError("save(): only a Gemm built from a GemmConfig alone can be exported (a user epilogue "
                            "or kernel class is code the export does not carry)")
    try:
        ident = gemm.config.identity()       # the family and its fields, as JSON
    except ConfigError as e:                 # e.g. a user EpilogueNode: code, not data
        raise ArgumentError(f"save(): {e}") from None
    _check_target(path)
    k = gemm.compiled
    try:
        path.mkdir(parents=True, exist_ok=True)
        k.save(path / KERNEL_DIR)
    except OSError as e:
        raise ArgumentError(f"save(path): cannot write the export to {str(path)!r}: {e}") from None
    manifest = {"format": FORMAT, "kind": ident["family"], "cutedsl": __version__, "config": ident["fields"],
                "key": k.key,
                "kernel_sha256": hashlib.sha256((path / KERNEL_DIR / "kernel.json").read_bytes()).hexdigest()}
    manifest = json.loads(json.dumps(manifest, default=list))        # as load() will see it
    manifest["sha256"] = _digest(manifest)
    tmp = path / f".{MANIFEST}.{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path / MANIFEST)       # written last: it marks a complete export
    return path


def _read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise CacheError(f"{path} is not a saved cutedsl GEMM (no readable {MANIFEST}: {e})") from None
    if not isinstance(manifest, dict) or manifest.get("kind") not in family_names():
        raise CacheError(f"{path}/{MANIFEST}: not a cutedsl GEMM export (kind "
                         f"{manifest.get('kind') if isinstance(manifest, dict) else None!r}; this cutedsl reads "
                         f"{', '.join(map(repr, family_names()))})")
    if manifest.get("format") != FORMAT:
        raise CacheError(f"{path}/{MANIFEST}: export format {manifest.get('format')!r}, this cutedsl reads "
                         f"{FORMAT}: export it again with this version")
    if manifest.get("sha256") != _digest(manifest):
        raise CacheError(f"{path}/{MANIFEST}: checksum mismatch (the manifest was edited or is corrupt): "
                         f"export it again")
    try:
        kj = (path / KERNEL_DIR / "kernel.json").read_bytes()
    except OSError as e:
        raise CacheError(f"{path}: cannot read the saved kernel ({e})") from None
    if hashlib.sha256(kj).hexdigest() != manifest.get("kernel_sha256"):
        raise CacheError(f"{path}/{KERNEL_DIR}/kernel.json is not the kernel {MANIFEST} was saved with "
                         f"(checksum mismatch): export it again")
    return manifest


def _canonical(v):
    return json.loads(json.dumps(v, sort_keys=True, default=list))


def mismatches(gemm, kern) -> list:
    """``[(field, saved, derived)]``: where the saved kernel ``kern`` was built for something
    other than what the front end ``gemm`` (rebuilt from the manifest's config; any family:
    ``config``, ``kernel``) derives: each kernel config
    field, the entry, the parameter layout, the PTX target. Empty when they agree."""
    saved = _canonical(kern.meta.get("config"))
    want = _canonical(gemm.kernel.config())
    out = []
    if not isinstance(saved, dict):
        out.append(("config", saved, want))
    else:
        out += [(f, saved.get(f), want.get(f)) for f in sorted(set(saved) | set(want)) if saved.get(f) != want.get(f)]
    if kern.entry != gemm.kernel.name:
        out.append(("entry", kern.entry, gemm.kernel.name))
    got = [f"{p.name}:{p.kind}" for p in kern.params]
    params = [f"{p.name}:{p.kind}" for p in gemm.kernel.params()]
    if got != params:
        out.append(("parameters", ", ".join(got), ", ".join(params)))
    target = _TARGET.search(kern.ptx)
    arch = getattr(gemm.config, "arch", None)
    if target is None or target.group(1) != arch:
        out.append(("PTX .target", target.group(1) if target else None, arch))
    return out


def load(path, backend="auto"):
    """The front end (a ``Gemm`` for a GEMM export) saved at ``path`` (see module docstring), on
    ``backend``. Raises
    ``CacheError`` for a missing, malformed, edited or stale export (naming the field that
    disagrees with what this cutedsl builds for the saved config), ``ArgumentTypeError`` for a
    ``path`` that is no path."""
    from ..compiler.artifact import CompiledKernel
    path = _path(path, "cutedsl.load()")
    manifest = _read_manifest(path)
    family = config_family(manifest["kind"])
    try:
        cfg = family.from_dict(manifest["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CacheError(f"{path}/{MANIFEST}: its config does not load ({e})") from None
    kern = CompiledKernel.load(path / KERNEL_DIR)          # checksums: CacheError when tampered
    g = family.front_end()(cfg, backend)
    bad = mismatches(g, kern)
    if bad:
        what = "; ".join(f"{f}: saved kernel {s!r}, config gives {w!r}" for f, s, w in bad)
        raise CacheError(f"{path}: the saved kernel does not match what this cutedsl builds for its config "
                         f"({what}): export it again with this version")
    g._compiled = kern
    return g


__all__ = ["save", "load"]
