"""Kernel definition: one ``gpu.module`` holding one ``gpu.func`` kernel.

::

    kb = KernelBuilder("saxpy", [Param("x", "ptr"), Param("y", "ptr"), Param("n", "i32"),
                                 Param("alpha", "f32")], block=(128, 1, 1))
    with kb.build() as args:
        i = block_idx() * 128 + thread_idx()
        ...
    kb.module        # verified ir.Module, ready for cutedsl.compiler.compile_kernel

Parameter kinds (PTX ``.param``): ``tensormap`` — a 128-byte ``CUtensorMap`` passed by value
as a ``__grid_constant__`` (the kernel sees a generic ``!llvm.ptr`` to it; the compiler marks
it ``byval`` after lowering); ``ptr`` — a global address (``!llvm.ptr<1>``); ``i32``, ``u32``,
``i64``, ``f32`` — scalars. Kernel attributes: ``nvvm.reqntid`` (exact block size),
``nvvm.cluster_dim`` (``.reqnctapercluster``), ``nvvm.minctasm``, ``nvvm.maxnreg``.
"""
from __future__ import annotations

import contextlib
import types

from mlir import ir
from mlir.dialects import gpu

from ..arch import DEFAULT, get_arch
from ..compiler.artifact import ParamSpec
from ..compiler.diagnostics import format_diagnostics
from ..errors import IRError
from .values import Scalar, register_casters

_ARG_TYPES = {"tensormap": "!llvm.ptr", "ptr": "!llvm.ptr<1>", "i32": "i32", "u32": "i32",
              "i64": "i64", "f32": "f32"}


#: a kernel parameter: ``name`` and ``kind`` (see module docstring)
Param = ParamSpec


class KernelBuilder:
    """Builds the module of one kernel; see the module docstring.

    ``block`` is threads per CTA (x, y, z), at most 1024 in total; ``cluster`` CTAs per
    cluster or ``None``; ``min_ctas_per_sm`` sets ``.minnctapersm``; ``max_registers`` sets
    ``.maxnreg``; ``arch`` (an :class:`~cutedsl.arch.Arch` or its name, default sm_90a) is the
    target :func:`~cutedsl.compiler.compile_kernel` lowers and assembles for. Raises ``IRError`` when the finished module does not verify.
    """

    def __init__(self, name: str, params, *, block=(128, 1, 1), cluster=None,
                 min_ctas_per_sm=None, max_registers=None, arch=None):
        self.name = name
        self.arch = get_arch(arch or DEFAULT)     #: the target the compiler lowers for
        self.params = tuple(p if isinstance(p, Param) else Param(*p) for p in params)
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate kernel parameter names in {names}")
        self.block = tuple(block) + (1,) * (3 - len(block))
        n = self.block[0] * self.block[1] * self.block[2]
        if not 1 <= n <= 1024:
            raise ValueError(f"block {self.block} has {n} threads; a CTA has 1..1024")
        self.cluster = None if cluster is None else tuple(cluster) + (1,) * (3 - len(cluster))
        self.min_ctas_per_sm = min_ctas_per_sm
        self.max_registers = max_registers
        register_casters()
        self.context = ir.Context()
        self.context.enable_multithreading(False)   # the compiler forks; keep the process single-threaded
        self.module = None

    @property
    def param_specs(self) -> tuple:
        return tuple(ParamSpec(p.name, p.kind) for p in self.params)

    @contextlib.contextmanager
    def build(self):
        """Context manager: yields the kernel arguments as a namespace (``args.<name>``)."""
        with self.context, ir.loc_tracebacks(), ir.Location.unknown():
            module = ir.Module.create()
            module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
            with ir.InsertionPoint(module.body):
                gm = gpu.GPUModuleOp("cutedsl_kernels")
                gm.bodyRegion.blocks.append()
                with ir.InsertionPoint(gm.bodyRegion.blocks[0]):
                    ftype = ir.FunctionType.get([ir.Type.parse(_ARG_TYPES[p.kind]) for p in self.params], [])
                    f = gpu.GPUFuncOp(ir.TypeAttr.get(ftype), sym_name=self.name, kernel=True)
                    a = f.attributes
                    a["nvvm.reqntid"] = ir.Attribute.parse("array<i32: %d, %d, %d>" % self.block)
                    if self.cluster:
                        a["nvvm.cluster_dim"] = ir.Attribute.parse("array<i32: %d, %d, %d>" % self.cluster)
                    if self.min_ctas_per_sm:
                        a["nvvm.minctasm"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32),
                                                                self.min_ctas_per_sm)
                    if self.max_registers:
                        a["nvvm.maxnreg"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32),
                                                               self.max_registers)
                    entry = f.add_entry_block()
                    ns = types.SimpleNamespace()
                    for p, v in zip(self.params, entry.arguments):
                        if p.kind in ("i32", "u32", "i64", "f32"):
                            v = Scalar(v, signed=p.kind != "u32")
                        setattr(ns, p.name, v)
                    with ir.InsertionPoint(entry):
                        try:
                            yield ns
                        except ir.MLIRError as e:   # an op builder rejected its operands
                            raise IRError(f"kernel {self.name!r}: building IR failed:\n"
                                          f"{format_diagnostics(e)}") from None
                        gpu.ReturnOp([])
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                raise IRError(f"kernel {self.name!r} does not verify:\n{format_diagnostics(e)}") from None
            self.module = module


def current_cta_threads():
    """Threads per CTA of the kernel being built at the current insertion point (the product of
    its ``nvvm.reqntid``), or None outside a :class:`KernelBuilder` body or without that
    attribute. Atoms use it to refuse, at build time, a barrier that waits for more threads
    than the CTA has."""
    try:
        op = ir.InsertionPoint.current.block.owner
    except (ValueError, RuntimeError):
        return None
    while op is not None and op.operation.name != "gpu.func":    # .operation: an OpView's name is its symbol
        op = op.operation.parent
    if op is None or "nvvm.reqntid" not in op.operation.attributes:
        return None
    n = 1
    for x in ir.DenseI32ArrayAttr(op.operation.attributes["nvvm.reqntid"]):
        n *= x
    return n

