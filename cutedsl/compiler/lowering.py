"""MLIR module -> PTX -> cubin, in a forked worker so that an MLIR abort cannot kill the caller.

Pass pipeline (the expansion of ``gpu-lower-to-nvvm-pipeline`` for a device-only module,
split so that TMA tensor-map parameters can be marked ``byval`` grid constants after the
kernel became an ``llvm.func``):

1. ``convert-nvgpu-to-nvvm, gpu-kernel-outlining, convert-vector-to-scf, convert-scf-to-cf,
   convert-nvvm-to-llvm, convert-func-to-llvm, expand-strided-metadata,
   nvvm-attach-target{chip=sm_90a features=+ptx83 O=3}, lower-affine, convert-arith-to-llvm,
   convert-index-to-llvm, canonicalize, cse, gpu.module(convert-gpu-to-nvvm, canonicalize,
   cse, reconcile-unrealized-casts)``
2. tensor-map arguments get ``{llvm.byval = !llvm.array<128 x i8>, llvm.align = 64,
   nvvm.grid_constant}`` (PTX ``.param .align 64 .b8 p[128]``, what CUTLASS's
   ``__grid_constant__ CUtensorMap`` compiles to);
3. every op's location flattened to the Python line that built it (:mod:`.locations`), then
   ``ensure-debug-info-scope-on-llvm-func{emission-kind=LineTablesOnly}`` and
   ``gpu-module-to-binary{format=isa}`` -> PTX (with ``.file`` / ``.loc`` line tables), read
   from the ``gpu.binary`` object attribute.

PTX ISA 8.3 is requested: ``fence.proxy.tensormap`` (descriptor fence) needs >= 8.3.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import tempfile
import time

from ..arch import DEFAULT
from ..errors import CompileError
from .locations import DI_PASS, flatten as flatten_locations, line_tables_only

STAGE1 = ("builtin.module(convert-nvgpu-to-nvvm, gpu-kernel-outlining, convert-vector-to-scf, "
          "convert-scf-to-cf, convert-nvvm-to-llvm, convert-func-to-llvm, expand-strided-metadata, "
          "nvvm-attach-target{{chip={chip} features={feat} O=3}}, lower-affine, convert-arith-to-llvm, "
          "convert-index-to-llvm{{index-bitwidth=64}}, canonicalize, cse, "
          "gpu.module(convert-gpu-to-nvvm, canonicalize, cse, reconcile-unrealized-casts))")
STAGE2 = ("builtin.module({di}, gpu-module-to-binary{{format=isa}}, canonicalize, cse, "
          "reconcile-unrealized-casts)")


def _lower(module, byval_args, want_ir: bool, arch=DEFAULT) -> dict:
    """Run the pipeline on ``module`` in this process; returns ``{"ptx", "ir_after"?}``."""
    from mlir import ir, passmanager
    from mlir.dialects import gpu
    from .diagnostics import format_diagnostics
    ctx = module.context
    with ctx:
        try:
            passmanager.PassManager.parse(STAGE1.format(chip=arch.chip, feat=arch.ptx_features)).run(module.operation)
            gmod = module.body.operations[0]
            funcs = [op for op in gmod.regions[0].blocks[0].operations if op.operation.name == "llvm.func"
                     and "gpu.kernel" in op.attributes]
            for f in funcs:
                n = _num_args(f)
                attrs = []
                for i in range(n):
                    if i in byval_args:
                        attrs.append(ir.Attribute.parse(
                            "{llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}"))
                    else:
                        attrs.append(ir.DictAttr.get({}))
                f.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
            ir_after = str(module) if want_ir else None
            flatten_locations(module)
            passmanager.PassManager.parse(STAGE2.format(di=DI_PASS)).run(module.operation)
        except ir.MLIRError as e:
            raise CompileError("MLIR pass pipeline failed:\n" + format_diagnostics(e)) from None
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                obj = gpu.ObjectAttr(op.attributes["objects"][0])
                return {"ptx": line_tables_only(obj.object.decode()), "ir_after": ir_after}
    raise CompileError("the pass pipeline produced no gpu.binary")


def _num_args(func) -> int:
    # the llvm.func type prints as !llvm.func<void (ptr, ptr<1>, i32)>
    return len(func.regions[0].blocks[0].arguments)


def lower_to_ptx(module, byval_args=(), *, want_ir=False, isolate=True, arch=DEFAULT) -> dict:
    """Lower a verified kernel module to PTX.

    ``byval_args``: indices of tensor-map arguments; ``arch``: the target (:mod:`cutedsl.arch`). With ``isolate`` (default) the passes run
    in a forked child: if MLIR aborts (assertions, ``LLVM ERROR``) the child dies, and a
    ``CompileError`` carries its stderr; the caller's process is unharmed. The caller's
    module is left unchanged in that case (lowering happens on the child's copy).
    Returns ``{"ptx": str, "ir_after": str | None, "seconds": float}``.
    """
    t0 = time.perf_counter()
    if not isolate or not hasattr(os, "fork"):
        out = _lower(module, set(byval_args), want_ir, arch)
        out["seconds"] = time.perf_counter() - t0
        return out
    with tempfile.TemporaryFile() as errf, tempfile.TemporaryFile() as outf:
        pid = os.fork()
        if pid == 0:   # child: lower, write JSON, never return into the caller's code
            code = 0
            try:
                os.dup2(errf.fileno(), 2)
                # an abort is the expected failure here: no "Fatal Python error" traceback from
                # a faulthandler the parent enabled (pytest does) on the parent's stderr
                faulthandler.disable()
                try:
                    res = {"ok": True, **_lower(module, set(byval_args), want_ir, arch)}
                except CompileError as e:
                    res = {"ok": False, "error": str(e)}
                except BaseException as e:  # noqa: BLE001 - report anything to the parent
                    res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                outf.write(json.dumps(res).encode())
                outf.flush()
            except BaseException:  # noqa: BLE001
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        errf.seek(0)
        stderr = errf.read().decode(errors="replace").strip()
        outf.seek(0)
        raw = outf.read()
    if os.WIFSIGNALED(status) or not raw:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        why = f"killed by {signal.Signals(sig).name}" if sig else f"exit status {os.WEXITSTATUS(status)}"
        raise CompileError(f"MLIR aborted while lowering ({why}); this is an MLIR assertion or "
                           f"LLVM ERROR, contained in a worker process:\n{stderr or '(no message)'}")
    res = json.loads(raw)
    if not res["ok"]:
        raise CompileError(res["error"] + (f"\n{stderr}" if stderr else ""))
    return {"ptx": res["ptx"], "ir_after": res.get("ir_after"), "seconds": time.perf_counter() - t0}
