"""The layer test kit: unit-test kernels composed from atoms on the PTX emulator.

* :mod:`~cutedsl.testing.atoms` -- :func:`build_kernel` (a one-kernel module around a body
  of atoms, compiled), :func:`run_kernel` (run it on the emulator with numpy arrays, which
  hold the results afterwards), :func:`normalize_ptx`, :func:`rounded`;
* :mod:`~cutedsl.testing.wgmma` -- WGMMA operands through TMA into swizzled shared memory and
  accumulator fragments to / from global memory (:func:`operand_buffer`,
  :func:`load_operands`, :func:`store_accumulator`, :func:`accumulator_from`);
* :mod:`~cutedsl.testing.ptx` -- hand-written PTX snippets as kernels (:func:`ptx_kernel`,
  :func:`mbarrier_wait`) and one instruction per thread (:func:`run_alu`);
* :mod:`~cutedsl.testing.seeds` -- :class:`SeededRng`, the adversarial-mode seeds
  (:func:`sim_seeds`, :func:`adversarial`);
* :mod:`cutedsl.testing.plugin` -- the pytest plugin (fixtures ``sim``, ``sim_seed``,
  ``rng``; option ``--sim-seeds``; marker ``sim_kernel``): ``pytest_plugins =
  ["cutedsl.testing.plugin"]`` in a ``conftest.py``.

Only the plugin imports pytest; ``import cutedsl`` imports none of this. Building kernels
needs MLIR (``cutedsl[compile]``); running them needs only numpy.
"""
from .atoms import build_kernel, normalize_ptx, rounded, run_kernel
from .ptx import HEADER, REGS, mbarrier_wait, ptx_kernel, run_alu
from .seeds import SeededRng, adversarial, seed_id, sim_seeds
from .wgmma import accumulator_from, load_operands, operand_buffer, store_accumulator

__all__ = ["build_kernel", "run_kernel", "normalize_ptx", "rounded", "operand_buffer", "load_operands",
           "store_accumulator", "accumulator_from", "ptx_kernel", "mbarrier_wait", "run_alu", "HEADER", "REGS",
           "SeededRng", "sim_seeds", "seed_id", "adversarial"]
