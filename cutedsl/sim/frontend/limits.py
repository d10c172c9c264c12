"""Resource limits of one emulation: what untrusted PTX may make the emulator allocate.

Checked when the PTX is loaded (declarations) and when a launch is set up (the memory of the
CTAs that are live together), always *before* anything is allocated, so a hostile or mutated
module (``.reg .b32 %q<2000000000>;``, ``.local .b8 big[4000000000];``) is a
:class:`PTXParseError` / :class:`SimLaunchError` naming the declaration and the limit, never a
``MemoryError`` or a killed process.

The defaults leave a wide margin over real compilers' output: the largest declarations among
the project's kernels and the Triton 3.9 fixtures are 438 ``.b32``, 181 ``.pred`` and 155
``.b64`` registers and 8 bytes of ``.local`` per thread (measured 2026-11-24); the hardware's
own limits are 255 registers per thread after allocation, 512 KiB of local memory per thread
and 227 KiB of shared memory per CTA.

Override per backend (``SimBackend(limits=SimLimits(registers=10**6))``) or per load
(``load_ptx(text, limits=...)``).
"""
from __future__ import annotations

import attrs

from ...errors import ArgumentError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _positive(inst, att, v):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ArgumentError(f"SimLimits.{att.name} must be a positive int, got {v!r}")


@attrs.frozen
class SimLimits:
    """``registers``: declared virtual registers per register class (``.pred``, 16-, 32-,
    64-bit) in one entry; ``local_bytes``: ``.local`` (and call-parameter) bytes per thread;
    ``global_var_bytes``: all module-scope ``.global``/``.const`` variables together;
    ``memory_bytes``: what one launch may hold at once for the CTAs that run together
    (register files, local memory and shared memory of one cluster); ``statements``: body
    statements (instructions and declarations) of one module, counted while parsing so that a
    huge text is refused in seconds, before decoding (the largest real kernels measured have
    under 7,000)."""
    registers: int = attrs.field(default=1 << 18, validator=_positive)
    local_bytes: int = attrs.field(default=512 * KiB, validator=_positive)
    global_var_bytes: int = attrs.field(default=1 * GiB, validator=_positive)
    memory_bytes: int = attrs.field(default=4 * GiB, validator=_positive)
    statements: int = attrs.field(default=200_000, validator=_positive)


DEFAULT_LIMITS = SimLimits()

# bytes per register of each class in a warp's register file (32 lanes)
REG_BYTES = {"p": 1, "h": 2, "r": 4, "d": 8}


def warp_bytes(nregs: dict, local_size: int, callparam_size: int) -> int:
    """Bytes one warp's state takes: register files (32 lanes) + local and call-param memory."""
    regs = sum(32 * max(n, 1) * REG_BYTES[c] for c, n in nregs.items())
    return regs + 32 * (local_size + callparam_size) + 64


def fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
