"""Backend selection: ``auto`` | ``cuda`` | ``sim`` | ``none``."""
from __future__ import annotations

import functools

from ..errors import NoDeviceError

BACKENDS = ("auto", "cuda", "sim", "none")


@functools.lru_cache(maxsize=None)
def _make(name: str):
    if name == "cuda":
        from .cuda import CudaBackend
        return CudaBackend()
    if name == "sim":
        try:
            from ..sim import SimBackend
        except ImportError as e:
            raise NoDeviceError(f"the PTX emulator backend is not available: {e}") from None
        return SimBackend()
    raise ValueError(name)


def resolve(name: str = "auto") -> tuple:
    """Return ``(backend or None, reason)``. ``auto``: a Hopper GPU if present, else the
    emulator, else None (nothing can execute)."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "none":
        return None, "backend 'none' requested: nothing is executed"
    if name in ("cuda", "sim"):
        return _make(name), ""
    from .cuda import CudaBackend
    ok, why = CudaBackend.available()
    if ok:
        return _make("cuda"), ""
    try:
        return _make("sim"), f"no GPU ({why}); using the PTX emulator"
    except NoDeviceError as e:
        return None, f"no GPU ({why}) and {e}: nothing is executed"


def get_backend(name: str = "auto"):
    """The backend object for ``name``; raises ``NoDeviceError`` when none can execute."""
    b, why = resolve(name)
    if b is None:
        raise NoDeviceError(why)
    return b
