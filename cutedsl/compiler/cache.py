"""On-disk cache of compiled kernels, keyed by the code identity of the kernel + toolchain versions.

Layout: ``<root>/<key>/<toolchain>/kernel.{json,ptx,cubin}``. ``key`` hashes the kernel name
and config, the library's code-generating sources and the user code that builds the kernel
(:mod:`cutedsl.compiler.identity`); ``toolchain`` hashes the MLIR/LLVM/ptxas/nvdisasm
versions. On a machine without the toolchain (a GPU box without MLIR) any toolchain entry of
the key is used, which is how kernels compiled elsewhere are run.

Robustness: an entry is published atomically (written to a private temporary directory, then
renamed into place), so readers see no entry or a complete one and concurrent writers (threads
or processes) never fail — when a valid entry is already there the new copy is dropped — and
callers missing the same key wait for one builder (a per-key ``flock``) instead of all compiling. Every
file and the metadata itself carry SHA-256 checksums; an entry that fails them is re-checked
under a per-key ``flock`` (it may have just been replaced) and then removed and rebuilt (a
``CacheError`` where no toolchain can rebuild it). A cache directory that cannot be written
(read-only, a path under a file) makes the process keep kernels in memory, with one warning.

Ownership: the cache deletes only what it wrote (:mod:`cutedsl.compiler.cache_layout`: the
root marker, the entry layout, the private scratch names). ``clear``, the sweep of killed
writers' leftovers and ``info`` act on entries alone; anything else in the root is listed by
``info`` as "not cache entries" and never followed, renamed or removed; ``clear`` on a
directory without the marker removes nothing and says why.

Root: ``$CUTEDSL_CACHE_DIR`` or ``~/.cache/cutedsl``; ``CUTEDSL_CACHE=off`` turns caching off.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

import attrs

from .. import envvars
from ..errors import CacheError
from .artifact import CompiledKernel
from .cache_layout import (_KEY_RE, _TC_RE,
                           _TMP, MARKER, TUNING, _delete_artifact_dir, _real_dir, _real_file, is_entry_dir,
                           clear_blocker, drop_if_empty, remove_entry, scan_root, sweep, write_marker)
from .identity import library_hash

try:
    import fcntl
except ImportError:             # pragma: no cover - not POSIX: no cross-process lock
    fcntl = None

CACHE_ENV = "CUTEDSL_CACHE_DIR"
SWITCH_ENV = "CUTEDSL_CACHE"
_WARNED_SWITCH: set = set()     # CUTEDSL_CACHE values already warned about
BUILD_WAIT_S = 600              # longest wait for another process compiling the same kernel
KEY_COVERS = ("kernel name and config; the library's code-generating sources (dtypes, arch, problem, ir, compiler, "
              "atom, collective, kernel); every class outside cutedsl in the MRO of the kernel and "
              "its collectives (mainloop, epilogue, tile scheduler), their plain data attributes, the source "
              "of their modules and of the user modules those import; toolchain versions (MLIR, LLVM, ptxas, nvdisasm)")

# process-wide state per cache root: kernels kept in memory once the root proved unwritable
_LOCK = threading.Lock()
_MEMORY: dict = {}              # (root, key) -> CompiledKernel
_UNWRITABLE: dict = {}          # root -> reason


def source_hash() -> str:
    """SHA-256 over the library sources that determine generated code (see ``identity``)."""
    return library_hash()


def caching_enabled() -> bool:
    """False when ``CUTEDSL_CACHE`` is ``off`` (or 0/false/no): compile every time, write nothing.
    ``on``/1/true/yes or unset: on. Any other value: on, with one warning naming the accepted values."""
    try:
        on = envvars.get(SWITCH_ENV)
    except envvars.EnvVarError as e:
        raw = os.environ.get(SWITCH_ENV)
        if raw not in _WARNED_SWITCH:
            _WARNED_SWITCH.add(raw)
            warnings.warn(f"{e}; caching stays on", stacklevel=3)
        return True
    return on is not False


@functools.lru_cache(maxsize=None)
def toolchain_hash() -> str | None:
    """Hash of the toolchain versions, or None where no toolchain is installed."""
    try:
        import importlib.util
        if importlib.util.find_spec("mlir") is None:
            return None
        from .toolchain import versions
        v = versions()
    except Exception:   # noqa: BLE001 - no usable toolchain here
        return None
    return hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:16]


def config_key(config: dict) -> str:
    """Key of a plain config dict (no user code): config + library sources."""
    blob = json.dumps({"config": config, "source": library_hash()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class _Blocked(OSError):
    """The path of one entry is taken by something the cache did not write (a symlink, a foreign
    directory): that kernel is kept in memory, the rest of the cache works."""


@attrs.frozen
class ClearReport:
    """What :meth:`KernelCache.clear` did: ``removed`` entries; ``kept``: paths in the root that
    are not cache entries (left untouched); ``refused``: why nothing was removed, or None."""
    removed: int
    kept: list
    refused: str | None = None


class KernelCache:
    """A cache directory; ``get_or_build(key, build)`` is the one call kernels use.

    ``key`` is a key string (:func:`cutedsl.compiler.identity.kernel_key`) or a config dict."""

    def __init__(self, root=None):
        self.root = Path(root or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cutedsl")

    @staticmethod
    def _key(key) -> str:
        return key if isinstance(key, str) else config_key(key)

    # -- lookup --------------------------------------------------------------------
    def _candidates(self, key: str, tc: str | None) -> list:
        base = self.root / key
        if tc is not None:
            return [base / tc]
        found = []
        try:
            for p in base.iterdir():
                if _TC_RE.fullmatch(p.name) and _real_dir(p):
                    with contextlib.suppress(OSError):
                        found.append((p.lstat().st_mtime, p))
        except OSError:
            return []
        return [p for _, p in sorted(found, reverse=True)]

    def _lookup(self, key: str) -> tuple:
        """``(kernel or None, problem or None)``."""
        mem = _MEMORY.get((str(self.root), key))
        if mem is not None:
            return mem, None
        problem = None
        for d in self._candidates(key, toolchain_hash()):
            if not is_entry_dir(d):
                if os.path.lexists(d):
                    problem = problem or f"{d} is not a cache entry"
                continue
            k, why = self._load(d, key)
            if k is not None:
                return k, None
            problem = problem or why
        return None, problem

    def _load(self, d: Path, key: str) -> tuple:
        try:
            k = CompiledKernel.load(d)
            if k.key != key:
                raise CacheError(f"{d}: key mismatch (stale entry)")
            return k, None
        except CacheError as e:
            if isinstance(e.__cause__, PermissionError):
                return None, f"unreadable entry ({e})"
            first = e
        # the entry may have been replaced while we read it: look again under the key's lock
        with self._lock(d.parent, quiet=True):
            try:
                k = CompiledKernel.load(d)
                if k.key == key:
                    return k, None
            except CacheError:
                pass
            if not (d / "kernel.json").exists():
                return None, None
            warnings.warn(f"discarding corrupt cache entry: {first}", stacklevel=4)
            self._remove(d)
        return None, f"corrupt entry discarded ({first})"

    def get(self, key) -> CompiledKernel | None:
        """The cached kernel for ``key`` or None; a corrupt entry is deleted (warning)."""
        return self._lookup(self._key(key))[0]

    # -- publish -------------------------------------------------------------------
    def put(self, key, kernel: CompiledKernel) -> CompiledKernel:
        """Store ``kernel`` under ``key``; returns it with its ``key`` set. Never fails for an
        unwritable directory (the kernel is kept in memory, one warning per process)."""
        import attrs
        key = self._key(key)
        tc = toolchain_hash()
        if tc is None:
            raise CacheError("cannot store a kernel without a toolchain fingerprint")
        kernel = attrs.evolve(kernel, key=key)
        for attempt in (0, 1):
            if str(self.root) in _UNWRITABLE:
                break
            try:
                self._publish(key, tc, kernel)
                return kernel
            except _Blocked as e:
                warnings.warn(f"kernel cache entry {e.filename} is taken by something the cache did not "
                              f"write ({e.strerror}); it is left alone and this kernel is kept in memory "
                              f"for this process", stacklevel=3)
                break
            except FileNotFoundError as e:   # a concurrent ``clear`` removed the key's directory
                if attempt:
                    self._unwritable(e)
            except OSError as e:
                self._unwritable(e)
        with _LOCK:
            _MEMORY[(str(self.root), key)] = kernel
        return kernel

    def _publish(self, key: str, tc: str, kernel: CompiledKernel) -> None:
        base = self.root / key
        self.root.mkdir(parents=True, exist_ok=True)
        self._mark()
        self._clear_blocker(base)
        if os.path.lexists(base) and not _real_dir(base):
            raise _Blocked(errno.EEXIST, "a symlink or special file", str(base))
        base.mkdir(exist_ok=True)
        self._sweep(base)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP, dir=base))
        try:
            os.chmod(tmp, 0o755)        # mkdtemp makes 0700; a shared cache is read by others
            kernel.save(tmp)
            dst = base / tc
            self._clear_blocker(dst)
            if os.path.lexists(dst) and not is_entry_dir(dst):
                raise _Blocked(errno.EEXIST, "not a cache entry", str(dst))
            try:
                os.rename(tmp, dst)     # atomic: readers see no entry or a complete one
                return
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise
            with self._lock(base):      # dst exists: keep a valid one, replace a broken one
                try:
                    if CompiledKernel.load(dst).key == key:
                        return          # a concurrent writer published the same kernel
                except CacheError:
                    pass
                if not self._remove(dst):
                    raise _Blocked(errno.EEXIST, "a broken entry that cannot be removed", str(dst))
                os.rename(tmp, dst)
        finally:
            if os.path.lexists(tmp):    # nothing left when the rename happened
                _delete_artifact_dir(tmp)

    def _mark(self) -> None:
        write_marker(self.root)

    def _clear_blocker(self, p: Path) -> None:
        clear_blocker(self.root, p)

    _remove = staticmethod(remove_entry)
    _sweep = staticmethod(sweep)
    _drop_if_empty = staticmethod(drop_if_empty)

    def _unwritable(self, err: OSError) -> None:
        root = str(self.root)
        with _LOCK:
            if root in _UNWRITABLE:
                return
            _UNWRITABLE[root] = str(err)
        warnings.warn(f"kernel cache directory {root} cannot be written ({err.strerror or err}); "
                      f"compiled kernels are kept in memory for this process — set {CACHE_ENV} to a "
                      f"writable directory", stacklevel=4)

    @contextlib.contextmanager
    def _lock(self, base: Path, quiet: bool = False, name: str = ".lock", wait_s: float | None = None):
        """Exclusive ``flock`` on ``<base>/<name>`` (threads and processes); ``quiet``: go on
        without the lock when the directory cannot hold one (read-only cache); ``wait_s``: go
        on without it after that many seconds (a holder that hangs cannot block us forever)."""
        fd = None
        if fcntl is not None:
            try:
                fd = os.open(base / name, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                if not quiet:
                    raise
        try:
            if fd is not None and wait_s is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            elif fd is not None:
                deadline = time.monotonic() + wait_s
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.02)
            yield
        finally:
            if fd is not None:
                os.close(fd)

    # -- the call kernels use -------------------------------------------------------
    def get_or_build(self, key, build) -> tuple:
        """Return ``(kernel, hit)``; on a miss call ``build()`` (-> CompiledKernel) and store it.
        Concurrent callers for the same missing key (threads, processes) build it once.

        Raises ``CacheError`` on a miss where no toolchain is installed."""
        key = self._key(key)
        k, problem = self._lookup(key)
        if k is not None:
            return k, True
        if toolchain_hash() is None:
            why = f" ({problem})" if problem else ""
            raise CacheError(f"kernel {key} is not in the cache at {self.root}{why} and this machine "
                             f"has no MLIR toolchain to compile it: compile it elsewhere into the cache "
                             f"(CUTEDSL_CACHE_DIR) and copy the directory here")
        base = self.root / key
        with contextlib.suppress(OSError):
            base.mkdir(parents=True, exist_ok=True)
        # one builder per key: processes (and threads) asking for the same missing kernel wait
        # for the first one's entry instead of all compiling it
        try:
            with self._lock(base, quiet=True, name=".build.lock", wait_s=BUILD_WAIT_S):
                k, _ = self._lookup(key)
                if k is not None:
                    return k, True
                return self.put(key, build()), False
        except BaseException:
            self._drop_if_empty(base)   # a failed build leaves no entry directory behind
            raise

    # -- maintenance ----------------------------------------------------------------
    def scan(self) -> tuple:
        """``(entry directories, paths that are not cache entries)`` under the root
        (:func:`cache_layout.scan`)."""
        return scan_root(self.root)

    def entries(self) -> list:
        """One dict per stored entry: ``key``, ``toolchain``, ``kernel``, ``config``, ``bytes``,
        ``path``, ``user_modules`` (user code in its key, recorded when it was built)."""
        out = []
        for d in self.scan()[0]:
            try:
                meta = json.loads((d / "kernel.json").read_text())
                size = sum(f.lstat().st_size for f in d.iterdir())
            except (OSError, ValueError):
                meta, size = None, 0
            ok = isinstance(meta, dict) and isinstance(meta.get("meta"), dict)
            user = (meta["meta"].get("user_code") or {}) if ok else {}
            out.append({"key": d.parent.name, "toolchain": d.name, "path": str(d), "bytes": size,
                        "kernel": meta.get("entry") if ok else None,
                        "config": meta["meta"].get("config") if ok else None,
                        "user_modules": sorted(user.get("modules", {})) + sorted(user.get("code", {}))})
        return out

    def info(self) -> dict:
        """Location, entries, total size and what the key covers (for ``python -m cutedsl cache info``)."""
        ents = self.entries()
        other = [str(p) for p in self.scan()[1]]
        versions = None
        if toolchain_hash() is not None:
            from .toolchain import versions as _versions
            versions = _versions()
        return {"toolchain_versions": versions, "root": str(self.root), "enabled": caching_enabled(),
                "unwritable": self._why_unwritable(), "entries": len(ents),
                "bytes": sum(e["bytes"] for e in ents), "library_hash": library_hash(),
                "toolchain_hash": toolchain_hash(), "key_covers": KEY_COVERS, "list": ents,
                "marked": _real_file(self.root / MARKER), "not_entries": other}

    def _why_unwritable(self) -> str | None:
        """Why this root cannot be written (its nearest existing ancestor is no writable
        directory), without creating anything; None when it can."""
        p = self.root.absolute()
        while not p.exists() and p != p.parent:
            p = p.parent
        if not p.is_dir():
            return f"{p} is not a directory"
        return None if os.access(p, os.W_OK | os.X_OK) else f"{p} is not writable"

    def clear(self) -> ClearReport:
        """Delete every cache entry, the tuning record and killed writers' leftovers; nothing
        else is touched.

        A root without the ``CUTEDSL_CACHE`` marker is not treated as a cache: nothing is removed
        and ``refused`` says why. Paths that are not entries are listed in ``kept``."""
        with _LOCK:
            for k in [k for k in _MEMORY if k[0] == str(self.root)]:
                del _MEMORY[k]
        entries, other = self.scan()
        if not _real_file(self.root / MARKER):
            if not entries and not other:
                return ClearReport(0, [])
            return ClearReport(0, [str(p) for p in other + entries],
                               refused=f"{self.root} has no {MARKER} marker file, so it is not a cutedsl kernel "
                                       f"cache (or one written before cutedsl kept a marker): nothing removed; "
                                       f"delete it by hand if it is one")
        removed = sum(self._remove(d) for d in entries)
        if _real_file(self.root / TUNING):          # cutedsl.tune's winners go with the kernels
            with contextlib.suppress(OSError):
                os.unlink(self.root / TUNING)
        for kd in {d.parent for d in entries} | {p for p in self._key_dirs()}:
            self._sweep(kd, max_age_s=0)
            self._drop_if_empty(kd)
        self._sweep(self.root, max_age_s=0)
        entries_left, other = self.scan()
        with contextlib.suppress(OSError):
            if not entries_left and [p.name for p in self.root.iterdir()] == [MARKER]:
                os.unlink(self.root / MARKER)   # an empty cache leaves an empty directory
        return ClearReport(removed, [str(p) for p in other])

    def _key_dirs(self) -> list:
        with contextlib.suppress(OSError):
            return [p for p in self.root.iterdir() if _KEY_RE.fullmatch(p.name) and _real_dir(p)]
        return []


def default_cache() -> KernelCache:
    return KernelCache()
