"""Layout of the kernel cache on disk, and what the cache may touch (its ownership rules).

``<root>/CUTEDSL_CACHE`` marks a root the cache wrote into; an entry is
``<root>/<key: 24 hex digits>/<toolchain: 16 hex digits>/`` -- a real directory (never a
symlink) holding ``kernel.json`` and no file but the artifact's own. Writers' temporary
directories and removed entries awaiting deletion carry private prefixes and hold only
artifact files. The cache acts on these alone (``cache.KernelCache``); everything else under
the root belongs to someone else and is left untouched.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
import warnings
from pathlib import Path

MARKER = "CUTEDSL_CACHE"        # root marker: written with the first entry, required by ``clear``
TUNING = "tuning.json"          # measured winners of cutedsl.tune, per device (with the marker)
_MARKER_TEXT = ("cutedsl kernel cache. Entries are <key>/<toolchain>/kernel.{json,ptx,cubin};\n"
                "`python -m cutedsl cache clear` removes those and nothing else in this directory.\n")
_KEY_RE = re.compile(r"[0-9a-f]{24}")        # identity.kernel_key / config_key
_TC_RE = re.compile(r"[0-9a-f]{16}")         # toolchain_hash
_ENTRY_FILES = frozenset({"kernel.json", "kernel.ptx", "kernel.cubin"})
_PARTIAL_JSON = re.compile(r"\.kernel\.json\.\d+")   # CompiledKernel.save's temporary json
_LOCKS = frozenset({".lock", ".build.lock"})
_TMP, _TRASH = ".cutedsl-tmp-", ".cutedsl-trash-"   # private names: a user's ``.tmp-x`` is never ours


def _real_dir(p: Path) -> bool:
    """A directory that is not a symlink (``lstat``: links are never followed)."""
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)
    except OSError:
        return False


def _real_file(p: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False


def _holds_only_artifact_files(d: Path, need_json: bool) -> bool:
    """``d`` is a real directory whose children are all regular files of a compiled-kernel
    artifact (``kernel.{json,ptx,cubin}`` and ``save``'s temporary json); ``need_json``: and it
    has ``kernel.json``."""
    if not _real_dir(d):
        return False
    try:
        with os.scandir(d) as it:
            kids = list(it)
    except OSError:
        return False
    for e in kids:
        if not (e.name in _ENTRY_FILES or _PARTIAL_JSON.fullmatch(e.name)) or not e.is_file(follow_symlinks=False):
            return False
    return not need_json or any(e.name == "kernel.json" for e in kids)


def is_entry_dir(d: Path) -> bool:
    """True when ``d`` has a cache entry's layout: a real directory named by a toolchain hash
    (16 hex digits) holding ``kernel.json`` and no file but the artifact's own."""
    return bool(_TC_RE.fullmatch(d.name)) and _holds_only_artifact_files(d, need_json=True)


def _is_scratch(p: Path) -> bool:
    """A writer's temporary directory or a removed entry awaiting deletion (our names, our files)."""
    return p.name.startswith((_TMP, _TRASH)) and _holds_only_artifact_files(p, need_json=False)


def _delete_artifact_dir(d: Path) -> bool:
    """Unlink the artifact's own files in ``d`` and remove it; anything else keeps it (False)."""
    with contextlib.suppress(OSError), os.scandir(d) as it:
        for e in it:
            if (e.name in _ENTRY_FILES or _PARTIAL_JSON.fullmatch(e.name)) and e.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(e.path)
    try:
        os.rmdir(d)
        return True
    except OSError:
        return False


def scan_root(root: Path) -> tuple:
    """``(entry directories, paths that are not cache entries)`` under ``root``. Entries are
    recognised by layout (:func:`is_entry_dir` under a key directory of 24 hex digits); the
    marker, the tuning record, lock files and writers' scratch are the cache's own and in
    neither list."""
    entries, other = [], []
    try:
        kids = sorted(root.iterdir())
    except OSError:
        return entries, other
    for p in kids:
        if (p.name in (MARKER, TUNING) and _real_file(p)) or _is_scratch(p):
            continue
        if not (_KEY_RE.fullmatch(p.name) and _real_dir(p)):
            other.append(p)
            continue
        try:
            sub = sorted(p.iterdir())
        except OSError:
            other.append(p)
            continue
        for q in sub:
            if is_entry_dir(q):
                entries.append(q)
            elif not ((q.name in _LOCKS and _real_file(q)) or _is_scratch(q)):
                other.append(q)
    return entries, other


STALE_S = 600       #: a private temp dir older than this belongs to a killed writer


def write_marker(root: Path) -> None:
    """Write the root marker once: ``clear`` acts only on a root that has it."""
    m = root / MARKER
    if not os.path.lexists(m):
        with contextlib.suppress(FileExistsError):
            fd = os.open(m, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(_MARKER_TEXT)


def clear_blocker(root: Path, p: Path) -> None:
    """A regular file (or an empty directory) at an entry's own path -- a name only the cache
    makes, in a root carrying its marker -- is a broken entry of ours: discard it with a
    warning naming it. Symlinks and non-empty directories are never touched."""
    if not _real_file(root / MARKER):
        return
    try:
        if _real_file(p):
            remove = os.unlink
        elif _real_dir(p) and p.parent != root and not os.listdir(p):
            remove = os.rmdir
        else:
            return
    except OSError:             # unreadable: left alone, reported as taken by _publish
        return
    with contextlib.suppress(FileNotFoundError):
        remove(p)
        what = "a file" if remove is os.unlink else "an empty directory"
        warnings.warn(f"kernel cache entry {p} was blocked by {what}; discarded and rebuilt", stacklevel=6)


def remove_entry(d: Path) -> bool:
    """Move the entry ``d`` aside atomically (readers never see half of it), then delete its
    files. Only a directory with an entry's layout is touched; returns whether it went."""
    if not is_entry_dir(d):
        return False
    trash = d.parent / f"{_TRASH}{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    try:
        os.rename(d, trash)
    except OSError:
        return False
    _delete_artifact_dir(trash)
    return True


def sweep(base: Path, max_age_s: float = STALE_S) -> None:
    """Delete the temp/trash dirs of writers that were killed (older than ``max_age_s``)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for p in base.iterdir():
            with contextlib.suppress(OSError):
                if _is_scratch(p) and now - p.lstat().st_mtime >= max_age_s:
                    _delete_artifact_dir(p)


def drop_if_empty(base: Path) -> None:
    """Remove a key directory that holds nothing but the cache's own lock files."""
    with contextlib.suppress(OSError):
        if _real_dir(base) and all(p.name in _LOCKS and _real_file(p) for p in base.iterdir()):
            for p in base.iterdir():
                p.unlink()
            base.rmdir()
