"""Compile a built kernel module into a :class:`CompiledKernel` with its resource report."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from ..arch import DEFAULT
from ..errors import DumpError
from . import toolchain
from .artifact import CompiledKernel, KernelResources
from .lowering import lower_to_ptx

DUMP_ENV = "CUTEDSL_DUMP_DIR"

#: Process-wide lock held while a kernel's IR is built and compiled. The MLIR Python bindings
#: are not thread-safe (contexts, value casters and the forked lowering worker share process
#: state): two threads building IR at once produce mismatched types. Reentrant, so a caller that
#: already holds it (``Kernel.compile`` around ``define()``) can call :func:`compile_kernel`.
COMPILE_LOCK = threading.RLock()


def _dump_dir(dump_dir):
    d = dump_dir if dump_dir is not None else os.environ.get(DUMP_ENV) or None
    if d is None:
        return None
    d = Path(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".cutedsl-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise DumpError(f"cannot write dumps to {str(d)!r}: {e}") from None
    return d


def compile_kernel(kb, *, dynamic_smem: int = 0, tensor_maps=(), meta=None, dump_dir=None,
                   isolate: bool = True) -> CompiledKernel:
    """Lower, assemble and disassemble the module built by ``kb`` (a ``KernelBuilder``).

    ``dynamic_smem``: bytes requested at launch; ``tensor_maps``: ``TensorMapSpec`` for the
    ``tensormap`` parameters; ``meta``: JSON-able dict stored with the artifact;
    ``dump_dir`` (or env ``CUTEDSL_DUMP_DIR``): write ``<entry>.before.mlir``,
    ``<entry>.after.mlir``, ``.ptx``, ``.sass``, ``.ptxas.log`` there (``DumpError`` if it
    cannot). Raises ``CompileError`` for pipeline/ptxas/nvdisasm failures. Thread-safe: holds
    :data:`COMPILE_LOCK`.
    """
    with COMPILE_LOCK:
        return _compile_kernel(kb, dynamic_smem, tensor_maps, meta, dump_dir, isolate)


def _compile_kernel(kb, dynamic_smem, tensor_maps, meta, dump_dir, isolate) -> CompiledKernel:
    t0 = time.perf_counter()
    if kb.module is None:
        raise ValueError("the KernelBuilder has no module yet: build it first")
    dd = _dump_dir(dump_dir)
    name = kb.name
    if dd:
        (dd / f"{name}.before.mlir").write_text(str(kb.module))
    byval = [i for i, p in enumerate(kb.params) if p.kind == "tensormap"]
    arch = getattr(kb, "arch", None) or DEFAULT
    lowered = lower_to_ptx(kb.module, byval, want_ir=dd is not None, isolate=isolate, arch=arch)
    ptx = lowered["ptx"]
    cubin, info, messages, log = toolchain.ptxas(ptx, arch=arch)
    hist = None                 # the SASS histogram is disassembled when first read (resources)
    if dd:
        sass_text = toolchain.sass(cubin)
        hist = toolchain.sass_histogram(sass_text)
        (dd / f"{name}.after.mlir").write_text(lowered["ir_after"] or "")
        (dd / f"{name}.ptx").write_text(ptx)
        (dd / f"{name}.sass").write_text(sass_text)
        (dd / f"{name}.ptxas.log").write_text(log)
    res = KernelResources(registers=info["registers"], spill_stores=info["spill_stores"],
                          spill_loads=info["spill_loads"], stack=info["stack"],
                          static_smem=info["static_smem"], dynamic_smem=dynamic_smem,
                          sass=hist, ptxas_messages=messages)
    return CompiledKernel(entry=name, ptx=ptx, cubin=cubin, params=kb.param_specs, block=kb.block,
                          cluster=kb.cluster or (1, 1, 1), dynamic_smem=dynamic_smem,
                          tensor_maps=tensor_maps, resources=res,
                          compile_seconds=time.perf_counter() - t0, meta=dict(meta or {}))
