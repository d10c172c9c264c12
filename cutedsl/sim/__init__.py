"""Functional emulator of NVIDIA Hopper (sm_90a) PTX on the CPU (numpy + ml_dtypes).

Public API:

* :class:`SimBackend` - the Device-layer backend (``name = "sim"``): memory, tensor maps,
  ``load(CompiledKernel)``, ``launch(handle, grid, params, block=, cluster=, smem=)``.
* :class:`Emulator` - convenience API for tests: ``load(ptx)``, ``to_device``, ``to_host``,
  ``tensor_map``, ``launch(program, grid, block, args)``.
* :func:`load_ptx` - parse + decode PTX text into a :class:`Program` (cached by hash).
* Errors: :class:`PTXParseError`, :class:`UnsupportedInstruction`, :class:`SimLaunchError`,
  :class:`DeadlockError`, :class:`MemoryAccessError`, :class:`InstructionBudgetExceeded`,
  :class:`RaceError`, :class:`TimeLimitExceeded`, :class:`SimRuntimeError`, :class:`LivelockError`,
  :class:`GridTooLarge`, :class:`UninitializedReadError` (all :class:`cutedsl.errors.CuteDSLError`).

See ``docs/emulator.md`` for the architecture, fidelity model and limits.
"""
from . import handlers  # noqa: F401  (registers every instruction handler)
from .backend import Emulator, SimBackend, SimModule, pack_arg
from .frontend.errors import (DeadlockError, GridTooLarge, InstructionBudgetExceeded, LivelockError,
                     MemoryAccessError, PTXParseError, RaceError, SimError, SimLaunchError, SimRuntimeError,
                     TimeLimitExceeded, UninitializedReadError, UnsupportedInstruction)
from .frontend.loader import load_ptx
from .frontend.program import Program
from .machine.scheduler import DEFAULT_BUDGET, Launch
from .frontend.limits import DEFAULT_LIMITS, SimLimits

__all__ = ["SimBackend", "Emulator", "SimModule", "pack_arg", "load_ptx", "Program", "Launch",
           "DEFAULT_BUDGET", "DEFAULT_LIMITS", "SimLimits", "SimError", "PTXParseError", "UnsupportedInstruction", "SimLaunchError",
           "SimRuntimeError", "DeadlockError", "MemoryAccessError", "InstructionBudgetExceeded",
           "RaceError", "TimeLimitExceeded", "LivelockError", "GridTooLarge", "UninitializedReadError"]
