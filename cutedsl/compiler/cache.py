"""On-disk cache of compiled kernels, keyed by config + library source + toolchain versions.

Layout: ``<root>/<key>/<toolchain>/kernel.{json,ptx,cubin}`` where ``key`` hashes the kernel
config and the source of the code-generating packages (``ir``, ``compiler``, ``atom``,
``collective``, ``kernel``) and ``toolchain`` hashes the MLIR/LLVM/ptxas/nvdisasm versions.
On a machine without the toolchain (a GPU box without MLIR) any toolchain entry of the key is
used, which is how kernels compiled elsewhere are run. A corrupt or unreadable entry is
removed and rebuilt (when a builder is given). Root: ``$CUTEDSL_CACHE_DIR`` or
``~/.cache/cutedsl``.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

from ..errors import CacheError
from .artifact import CompiledKernel

CACHE_ENV = "CUTEDSL_CACHE_DIR"
_PKG = Path(__file__).resolve().parent.parent
_CODEGEN = ("ir", "compiler", "atom", "collective", "kernel")


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """SHA-256 over the source files that determine generated code."""
    h = hashlib.sha256()
    files = [_PKG / "dtypes.py"] + sorted(p for d in _CODEGEN for p in (_PKG / d).rglob("*.py"))
    for p in files:
        h.update(str(p.relative_to(_PKG)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


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
    blob = json.dumps({"config": config, "source": source_hash()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class KernelCache:
    """A cache directory; ``get_or_build(config, build)`` is the one call kernels use."""

    def __init__(self, root=None):
        self.root = Path(root or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cutedsl")

    def _entry_dir(self, key: str, tc: str | None) -> Path | None:
        d = self.root / key
        if tc is not None:
            return d / tc
        if not d.is_dir():
            return None
        cands = sorted((p for p in d.iterdir() if (p / "kernel.json").is_file()),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        return cands[0] if cands else None

    def get(self, config: dict) -> CompiledKernel | None:
        """The cached kernel for ``config`` or None; a corrupt entry is deleted (warning)."""
        key = config_key(config)
        d = self._entry_dir(key, toolchain_hash())
        if d is None or not (d / "kernel.json").is_file():
            return None
        try:
            k = CompiledKernel.load(d)
        except CacheError as e:
            warnings.warn(f"discarding corrupt cache entry: {e}", stacklevel=2)
            shutil.rmtree(d, ignore_errors=True)
            return None
        if k.key != key:
            warnings.warn(f"discarding stale cache entry {d} (key mismatch)", stacklevel=2)
            shutil.rmtree(d, ignore_errors=True)
            return None
        return k

    def put(self, config: dict, kernel: CompiledKernel) -> CompiledKernel:
        import attrs
        key = config_key(config)
        tc = toolchain_hash()
        if tc is None:
            raise CacheError("cannot store a kernel without a toolchain fingerprint")
        kernel = attrs.evolve(kernel, key=key)
        tmp = self.root / key / f".tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        kernel.save(tmp)
        dst = self.root / key / tc
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)
        return kernel

    def get_or_build(self, config: dict, build) -> tuple:
        """Return ``(kernel, hit)``; on a miss call ``build()`` (-> CompiledKernel) and store it."""
        k = self.get(config)
        if k is not None:
            return k, True
        if toolchain_hash() is None:
            raise CacheError(f"kernel {config} is not in the cache at {self.root} and this machine "
                             f"has no MLIR toolchain to compile it: compile it elsewhere into the cache "
                             f"(CUTEDSL_CACHE_DIR) and copy the directory here")
        return self.put(config, build()), False


def default_cache() -> KernelCache:
    return KernelCache()
