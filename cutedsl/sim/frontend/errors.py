"""Exceptions raised by the PTX emulator (all derive from :class:`cutedsl.errors.CuteDSLError`).

* :class:`PTXParseError` - the PTX text is malformed (raised at load time, with the line).
* :class:`UnsupportedInstruction` - an opcode or modifier the emulator does not implement
  (raised at load time, never half-way through a launch).
* :class:`SimLaunchError` - launch arguments do not match the kernel (params, block, cluster, smem).
* :class:`DeadlockError` - no warp can make progress; the message lists every blocked warp.
  :class:`LivelockError` (a subclass) - warps run without progress (spinning, or a stretch of
  ``progress_limit`` warp-instructions with no synchronisation).
* :class:`TimeLimitExceeded` - the wall-clock limit passed; :class:`GridTooLarge` (a subclass,
  also a :class:`SimLaunchError`) - a grid that cannot finish within it, refused before starting.
* :class:`MemoryAccessError` - out-of-bounds or misaligned access, with address, PTX line,
  CTA/thread and the nearest allocation.
* :class:`InstructionBudgetExceeded` - the launch executed more warp-instructions than allowed.
* :class:`RaceError` - the optional race checker found an unordered access.
* :class:`UninitializedReadError` - initcheck: a read of memory nothing wrote.
* :class:`SimRuntimeError` - any other misuse detected while executing (bad tensor map,
  non-converged ``.aligned`` instruction, trap, ...).
"""
from __future__ import annotations

from ...errors import CuteDSLError, LaunchError


class SimError(CuteDSLError):
    """Base class of emulator errors."""


class PTXParseError(SimError, ValueError):
    """Malformed PTX; the message gives the line number (and the source line the PTX's line table
    names for it, ``src``) and text."""

    def __init__(self, msg: str, line: int = 0, text: str = "", src: str = ""):
        self.line = line
        self.text = text
        self.msg = msg
        self.src = src
        super().__init__(self._format())

    def _format(self) -> str:
        if not self.line:
            return self.msg
        at = f"PTX line {self.line} ({self.src})" if self.src else f"PTX line {self.line}"
        return f"{at}: {self.msg}" + (f"\n    {self.text.strip()}" if self.text else "")

    def add_source(self, src: str) -> None:
        """Name the source line ``src`` (from the PTX's line table) beside the PTX line."""
        if src and not self.src:
            self.src = src
            self.args = (self._format(),)


class UnsupportedInstruction(PTXParseError):
    """An instruction, modifier or operand form the emulator does not implement."""


class SimLaunchError(SimError, LaunchError):
    """The launch configuration or parameter buffer does not match the kernel."""


class SimRuntimeError(SimError, RuntimeError):
    """A misuse detected while executing (with the PTX line when known)."""


class DeadlockError(SimRuntimeError):
    """No warp can progress and no asynchronous operation is pending."""


class MemoryAccessError(SimRuntimeError):
    """Out-of-bounds, misaligned or unmapped memory access."""


class InstructionBudgetExceeded(SimRuntimeError):
    """More warp-instructions executed than the configured budget."""


class RaceError(SimRuntimeError):
    """An access that is not ordered by the required synchronisation (race checker)."""


class TimeLimitExceeded(SimRuntimeError):
    """A launch ran longer than the emulator's wall-clock limit (``time_limit`` seconds)."""


class GridTooLarge(TimeLimitExceeded, SimLaunchError):
    """A launch whose grid the emulator cannot finish within ``time_limit``: refused before it
    starts (also a :class:`SimLaunchError`)."""


class UninitializedReadError(SimRuntimeError):
    """Initcheck: a read of memory nothing wrote (shared memory or tensor memory since the CTA
    started, global memory since it was allocated); the message names the read and the
    declaration or allocation."""


class LivelockError(DeadlockError):
    """The live warps keep executing but make no progress: their state repeats, or the launch ran
    ``progress_limit`` warp-instructions with no synchronisation, warp exit or cluster start."""
