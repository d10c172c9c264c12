"""Atom harnesses: wrap a few atoms in a one-kernel module, compile it, run it on the emulator
with numpy arrays and get the arrays back -- the unit test of a layer built from atoms, without
a front end.

>>> def body(args, smem):                        # args: the kernel's parameters by name
...     out = cir.GlobalPtr(args.out, "i32")
...     out.store(cir.i64(cir.thread_idx()), cir.thread_idx())
>>> k = build_kernel(body, params=[("out", "ptr")], block=(128, 1, 1))
>>> out = np.zeros(128, np.int32)
>>> run_kernel(k, [out])                          # ``out`` now holds what the kernel stored

Building needs MLIR and ptxas (``pip install cutedsl[compile]``); running needs only the
emulator. No pytest here: the harnesses work from a script as well as from a test.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError


def build_kernel(body, params=(("out", "ptr"),), *, block=(128, 1, 1), plan=None, name: str = "atom_test",
                 tensor_maps=(), **options):
    """Compile the kernel ``name`` whose body is ``body(args, smem)`` into a ``CompiledKernel``.

    ``params``: ``(name, kind)`` pairs or :class:`cutedsl.ir.Param` (kinds as ``Param`` takes
    them: ``"ptr"``, ``"tensormap"``, ``"i32"``, ...); ``body`` gets them as attributes of
    ``args``. ``block``: threads per CTA ``(x, y, z)``. ``plan``: an optional
    :class:`cutedsl.ir.SmemPlan`; it is bound before the body runs, ``smem`` is the bound plan
    (``None`` without a plan) and its dynamic bytes are requested at launch. ``tensor_maps``:
    ``TensorMapSpec`` of the ``tensormap`` parameters (needed only to launch through
    ``cutedsl.runtime.launch``; :func:`run_kernel` takes encoded maps). ``options``: the rest
    of :class:`cutedsl.ir.KernelBuilder`'s keywords (``cluster``, ``max_registers``, ``arch``,
    ...). Raises what ``KernelBuilder`` and ``compile_kernel`` raise (``IRError``,
    ``CompileError``, ``LayoutError`` from an atom refusing its operands).
    """
    from ..compiler import compile_kernel
    from ..ir import KernelBuilder, Param
    ps = [p if isinstance(p, Param) else Param(*p) for p in params]
    kb = KernelBuilder(name, ps, block=block, **options)
    with kb.build() as args:
        smem = plan.bind() if plan is not None else None
        body(args, smem)
    return compile_kernel(kb, dynamic_smem=plan.dynamic_bytes if plan is not None else 0,
                          tensor_maps=tensor_maps)


def run_kernel(kernel, args, *, grid=1, cluster=None, emu=None):
    """Launch the ``CompiledKernel`` ``kernel`` once on the emulator and wait for it.

    ``args``: one value per kernel parameter, in order. A numpy array is copied to a fresh
    device buffer and, after the launch, copied back into the same array (when writable: the
    kernel may store through any pointer), so outputs are read from the arrays passed in.
    Anything else goes to the kernel as it is: a ``DeviceBuffer`` (e.g. from
    ``emu.to_device``), a tensor map (``bytes`` from ``emu.tensor_map``), an int or a float.
    ``grid``: CTAs, an int or ``(x, y, z)``; ``cluster``: CTAs per cluster (default: the
    kernel's own). ``emu``: the :class:`cutedsl.sim.Emulator` to run on (default: a fresh one,
    in adversarial mode when ``CUTEDSL_SIM_CHAOS`` is set -- see
    :func:`cutedsl.testing.seeds.adversarial`).

    Returns the emulator (``emu.backend.last_launch`` has the instruction count and time).
    Raises ``ArgumentError`` for a wrong number of arguments (before anything is copied), and
    the emulator's errors (``RaceError``, ``DeadlockError``, ``MemoryAccessError``, ...) for a
    kernel that breaks a PTX rule.
    """
    from ..sim import Emulator
    names = [p.name for p in kernel.params]
    if len(args) != len(names):
        raise ArgumentError(f"kernel {kernel.entry!r} takes {len(names)} arguments ({', '.join(names)}), "
                            f"got {len(args)}: pass one value per parameter, in order")
    emu = emu or Emulator()
    dev = [emu.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    emu.launch(emu.load(kernel.ptx), grid=grid, block=kernel.block, args=dev,
               cluster=tuple(cluster or kernel.cluster), smem=kernel.dynamic_smem)
    for a, d in zip(args, dev):
        if isinstance(a, np.ndarray) and a.flags.writeable:
            a[...] = emu.to_host(d, a.shape, a.dtype)
    return emu


def normalize_ptx(ptx: str) -> str:
    """``ptx`` with every run of whitespace made one space, so a test can look for an
    instruction's text (``"wgmma.fence.sync.aligned;"``) whatever the indentation."""
    return " ".join(ptx.split())


def rounded(rng, shape, np_dtype, scale: float = 1.0):
    """``(x, x64)``: standard-normal values times ``scale`` rounded to ``np_dtype`` (what the
    kernel sees, e.g. ``np.float16`` or ``ml_dtypes.float8_e4m3fn``) and the same values as
    float64 (for the numpy reference)."""
    x = (rng.standard_normal(shape) * scale).astype(np_dtype)
    return x, x.astype(np.float64)
