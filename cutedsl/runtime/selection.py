"""Backend selection: ``auto`` | ``cuda`` | ``sim`` | ``none``."""
from __future__ import annotations

import threading

from ..errors import ArgumentError, ArgumentTypeError, NoDeviceError

BACKENDS = ("auto", "cuda", "sim", "none")

_instances = {}
#: Serialises the first construction of each backend: concurrent first calls from several
#: threads must share one backend object (memory allocated in one backend is unknown to another).
_lock = threading.Lock()


def _make(name: str):
    """The process-wide backend object for ``name`` (created once, thread-safe)."""
    b = _instances.get(name)
    if b is None:
        with _lock:
            b = _instances.get(name)
            if b is None:
                b = _instances[name] = _construct(name)
    return b


def _construct(name: str):
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


def check_backend_arg(backend) -> str:
    """Validate a ``backend=`` argument up front: a name from ``BACKENDS`` (``ArgumentError``
    otherwise) or an object implementing the ``Backend`` interface (``ArgumentTypeError``
    otherwise). Returns the backend's name."""
    if isinstance(backend, str):
        if backend not in BACKENDS:
            raise ArgumentError(f"backend must be one of {', '.join(map(repr, BACKENDS))} or a Backend "
                                f"object, got {backend!r}")
        return backend
    missing = [m for m in ("alloc", "free", "load", "launch", "encode_tensor_map") if not hasattr(backend, m)]
    if missing:
        raise ArgumentTypeError(f"backend must be one of {', '.join(map(repr, BACKENDS))} or a Backend "
                                f"object; {type(backend).__name__} lacks {', '.join(missing)}")
    return getattr(backend, "name", "?")


#: the architecture the CUDA backend drives (its available() accepts only that GPU)
CUDA_ARCH = "sm_90a"


def resolve(name: str = "auto", arch: str | None = None) -> tuple:
    """Return ``(backend or None, reason)``. ``auto``: a Hopper GPU if present, else the
    emulator, else None (nothing can execute). ``arch``: the kernels' target; kernels for an
    architecture the CUDA backend does not drive (sm_100a) go to the emulator under ``auto``."""
    check_backend_arg(name)
    if name == "none":
        return None, "backend 'none' requested: nothing is executed"
    if name in ("cuda", "sim"):
        return _make(name), ""
    from .cuda import CudaBackend
    if arch not in (None, CUDA_ARCH):
        why = f"{arch} kernels need a {arch} GPU, and the CUDA backend drives {CUDA_ARCH} (Hopper) GPUs"
    else:
        ok, why = CudaBackend.available()
        if ok:
            return _make("cuda"), ""
    try:
        return _make("sim"), f"no GPU ({why}); using the PTX emulator"
    except NoDeviceError as e:
        return None, f"no GPU ({why}) and {e}: nothing is executed"


def get_backend(name: str = "auto", arch: str | None = None):
    """The backend object for ``name`` (and kernels of ``arch``, see :func:`resolve`); raises
    ``NoDeviceError`` when none can execute."""
    b, why = resolve(name, arch)
    if b is None:
        raise NoDeviceError(why)
    return b
