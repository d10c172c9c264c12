"""Helpers for atom tests: build a tiny kernel around a body, compile it, run it on the emulator."""
from __future__ import annotations

import numpy as np


def build(body, params=(("out", "ptr"),), block=(128, 1, 1), plan=None, **kw):
    """Compile a one-kernel module whose body is ``body(args, smem)``; returns the CompiledKernel.
    ``plan`` is an optional ``SmemPlan`` (bound before the body runs)."""
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import KernelBuilder, Param
    kb = KernelBuilder("atom_test", [Param(*p) for p in params], block=block, **kw)
    with kb.build() as args:
        smem = plan.bind() if plan is not None else None
        body(args, smem)
    return compile_kernel(kb, dynamic_smem=plan.dynamic_bytes if plan is not None else 0)


def norm(ptx: str) -> str:
    return " ".join(ptx.split())


def run(kernel, args, grid=1, cluster=(1, 1, 1), emu=None):
    """Launch the compiled ``kernel`` on the emulator with ``args`` (numpy arrays become device
    buffers); returns the list of device buffers / values and the emulator."""
    from cutedsl.sim import Emulator
    emu = emu or Emulator()
    prog = emu.load(kernel.ptx)
    dev = [emu.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    emu.launch(prog, grid=grid, block=kernel.block, args=dev, cluster=cluster, smem=kernel.dynamic_smem)
    return dev, emu
