"""``python -m cutedsl info``: what this machine can do with cutedsl, in one report.

Versions (cutedsl, Python, numpy, the MLIR bindings and LLVM tools, ptxas, nvdisasm,
cuda-python), the NVIDIA driver and device if any, the kernel cache (directory, entries, size,
whether it can be written) and which backends are usable and, where one is not, why. Nothing
here compiles or launches anything; each probe that fails says why instead of raising.
"""
from __future__ import annotations

import platform
import sys


def _pkg_version(name: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _driver() -> dict:
    """Driver version and device 0 (name, compute capability, SMs), or why there is none."""
    from .runtime.cuda import CudaBackend
    ok, why = CudaBackend.available()
    out = {"usable": ok, "why_not": why or None}
    try:
        from cuda.bindings import driver as drv
        err, ver = drv.cuDriverGetVersion()
        if int(err) == 0:
            out["driver"] = f"{ver // 1000}.{ver % 1000 // 10}"
        err, dev = drv.cuDeviceGet(0)
        if int(err) == 0:
            err, name = drv.cuDeviceGetName(64, dev)
            if int(err) == 0:
                out["device"] = name.split(b"\0", 1)[0].decode()
            a = drv.CUdevice_attribute
            _, sms = drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
            _, major = drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
            _, minor = drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
            out.update(sm_count=sms, compute_capability=f"{major}.{minor}")
    except Exception:   # noqa: BLE001 - no cuda-python / no driver: ``why_not`` says so
        pass
    return out


def _toolchain() -> dict:
    """MLIR/LLVM package versions and ptxas/nvdisasm, or why compiling is not possible here."""
    import importlib.util
    if importlib.util.find_spec("mlir") is None:
        return {"usable": False, "why_not": "the MLIR Python bindings are not installed (pip install "
                                            "'cutedsl[compile]'): kernels run only from a cache or bundle"}
    try:
        from .compiler.toolchain import versions
        return {"usable": True, "why_not": None, **versions()}
    except Exception as e:     # noqa: BLE001 - ptxas/nvdisasm wheels missing
        return {"usable": False, "why_not": f"{type(e).__name__}: {e}"}


def _cache() -> dict:
    from .compiler.cache import KernelCache, caching_enabled
    c = KernelCache()
    entries = c.entries()
    return {"dir": str(c.root), "enabled": caching_enabled(), "entries": len(entries),
            "bytes": sum(e["bytes"] for e in entries), "not_entries": len(c.scan()[1]),
            "unwritable": c._why_unwritable()}


def collect() -> dict:
    """The report as a dict (see module docstring)."""
    from . import __version__
    from .arch import ARCHS
    drv = _driver()
    tc = _toolchain()
    backends = {
        "cuda": {"usable": drv["usable"], "why_not": drv["why_not"]},
        "sim": {"usable": True, "why_not": None},
        "none": {"usable": True, "why_not": None},
    }
    return {"cutedsl": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "numpy": _pkg_version("numpy"), "ml_dtypes": _pkg_version("ml_dtypes"),
            "cuda-python": _pkg_version("cuda-python"), "cuda-bindings": _pkg_version("cuda-bindings"),
            "toolchain": tc, "gpu": drv, "cache": _cache(), "backends": backends, "archs": list(ARCHS)}


def print_report(rep: dict, out=sys.stdout) -> None:
    p = lambda *a: print(*a, file=out)       # noqa: E731
    p(f"cutedsl {rep['cutedsl']}  (Python {rep['python']}, {rep['platform']})")
    p(f"  numpy {rep['numpy']}, ml_dtypes {rep['ml_dtypes']}, cuda-python {rep['cuda-python']}")
    tc = rep["toolchain"]
    if tc["usable"]:
        p("  compile: yes  (" + ", ".join(f"{k} {v}" for k, v in tc.items() if k not in ("usable", "why_not")) + ")")
    else:
        p(f"  compile: no   ({tc['why_not']})")
    g = rep["gpu"]
    if "device" in g:
        p(f"  GPU: {g['device']} (compute {g.get('compute_capability')}, {g.get('sm_count')} SMs), "
          f"driver {g.get('driver', '?')}")
    else:
        p(f"  GPU: none ({g['why_not']})")
    c = rep["cache"]
    state = "off (CUTEDSL_CACHE)" if not c["enabled"] else ("not writable: " + c["unwritable"] if c["unwritable"]
                                                            else "writable")
    p(f"  cache: {c['dir']}  {c['entries']} entries, {c['bytes'] / 1e6:.2f} MB, {state}"
      + (f"; {c['not_entries']} paths there are not cache entries" if c["not_entries"] else ""))
    p(f"  archs: {', '.join(rep['archs'])}")
    for name, b in rep["backends"].items():
        p(f"  backend {name}: " + ("usable" if b["usable"] else f"unusable ({b['why_not']})"))
