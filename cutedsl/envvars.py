"""Every environment variable cutedsl reads, parsed and validated in one place.

Each variable has one parser here; the modules that use a value ask :func:`get` (so a bad value
is reported the same way wherever it is read) and the CLI calls :func:`check_all` at start-up,
before anything is compiled, so a typo is one line naming the variable, not a failure after a
minute of compiling.

| variable | meaning | values |
|---|---|---|
| ``CUTEDSL_CACHE_DIR`` | kernel cache directory | a path (default ``~/.cache/cutedsl``) |
| ``CUTEDSL_CACHE`` | caching on/off | on/off, 1/0, true/false, yes/no |
| ``CUTEDSL_DUMP_DIR`` | write IR/PTX/SASS of each compile there | a path |
| ``CUTEDSL_SIM_TIME_LIMIT`` | emulator wall-clock limit per launch | seconds > 0 (default 60) |
| ``CUTEDSL_SIM_PROGRESS_LIMIT`` | emulator livelock limit: warp-instructions a launch may run with no synchronisation, warp exit or cluster start | an integer > 0 (default 2,000,000) |
| ``CUTEDSL_SIM_CHAOS`` | emulator adversarial-mode seed | an integer |
| ``CUTEDSL_SIM_INITCHECK`` | emulator initcheck (reads of memory nothing wrote) | on/off, 1/0, ... (default on) |
| ``CUTEDSL_BACKEND`` | where ``cutedsl.torch.attention`` runs when the call names no ``backend``: ``sim`` runs CPU tensors on the PTX emulator | auto, cuda, sim (default auto) |
"""
from __future__ import annotations

import os

from .errors import CuteDSLError


class EnvVarError(CuteDSLError, ValueError):
    """An environment variable has a value cutedsl cannot use; the message names it and what it
    accepts."""

    def __init__(self, name: str, value: str, message: str):
        super().__init__(f"{name}={value!r} {message}")
        self.name = name


CACHE_OFF = ("off", "0", "false", "no")
CACHE_ON = ("on", "1", "true", "yes", "")


def _path(name, v):
    return v or None


def _switch(name, v):
    s = v.strip().lower()
    if s in CACHE_OFF:
        return False
    if s in CACHE_ON:
        return True
    raise EnvVarError(name, v, "is not understood (accepted: on, off, 1, 0, true, false, yes, no)")


def _seconds(name, v):
    s = v.strip()
    if not s:
        return None
    try:
        t = float(s)
    except ValueError:
        raise EnvVarError(name, v, "is not a number of seconds") from None
    if not t > 0 or t != t or t == float("inf"):
        raise EnvVarError(name, v, "must be a finite number of seconds > 0")
    return t


def _count(name, v):
    s = v.strip().replace("_", "")
    if not s:
        return None
    try:
        n = int(s)
    except ValueError:
        raise EnvVarError(name, v, "is not an integer") from None
    if n <= 0:
        raise EnvVarError(name, v, "must be an integer > 0")
    return n


def _seed(name, v):
    s = v.strip()
    if not s:
        return None
    try:
        return int(s)
    except ValueError:
        raise EnvVarError(name, v, "is not an integer seed") from None


#: the backends CUTEDSL_BACKEND may name (a torch op must run somewhere: no "none")
TORCH_BACKENDS = ("auto", "cuda", "sim")


def _backend(name, v):
    s = v.strip().lower()
    if not s:
        return None
    if s not in TORCH_BACKENDS:
        raise EnvVarError(name, v, f"is not a backend (accepted: {', '.join(TORCH_BACKENDS)})")
    return s


VARIABLES = {
    "CUTEDSL_CACHE_DIR": _path,
    "CUTEDSL_CACHE": _switch,
    "CUTEDSL_DUMP_DIR": _path,
    "CUTEDSL_SIM_TIME_LIMIT": _seconds,
    "CUTEDSL_SIM_CHAOS": _seed,
    "CUTEDSL_SIM_PROGRESS_LIMIT": _count,
    "CUTEDSL_SIM_INITCHECK": _switch,
    "CUTEDSL_BACKEND": _backend,
}


def get(name: str):
    """The parsed value of ``name`` (None when unset); :class:`EnvVarError` for a bad value."""
    v = os.environ.get(name)
    return None if v is None else VARIABLES[name](name, v)


def check_all() -> None:
    """Parse every variable that is set; the first bad one raises :class:`EnvVarError`."""
    for name in VARIABLES:
        get(name)
