"""Exception types raised by cutedsl.

Every error a user can cause derives from :class:`CuteDSLError`. Argument and
configuration errors also derive from ``ValueError``/``TypeError`` so generic
handlers keep working.
"""


class CuteDSLError(Exception):
    """Base class of all cutedsl errors."""


class ConfigError(CuteDSLError, ValueError):
    """A kernel configuration cannot be built (tile, stages, dtype, shared memory, registers)."""


class ConfigTypeError(ConfigError, TypeError):
    """A configuration names a field that does not exist, or gives too many positional values."""


class HookError(ConfigError, TypeError):
    """An attention ``score_mod`` / ``mask_mod`` hook cannot be built into a kernel: a wrong
    signature, a wrong return type, or an operation hooks do not support. The message names the
    hook (and where it is defined) and the fix; raised while the kernel is built."""


class ArgumentError(CuteDSLError, ValueError):
    """A launch argument is invalid (shape, dtype, stride, alignment, TMA limits).

    The message names the argument and the limit it breaks.
    """


class ArgumentTypeError(CuteDSLError, TypeError):
    """A launch argument has the wrong Python/array type or dtype."""


class TensorMapError(ArgumentError):
    """A TMA tensor map cannot be encoded (the rules of ``cuTensorMapEncodeTiled``)."""


class SharedMemoryError(ConfigError):
    """A shared-memory plan exceeds the 232,448-byte (227 KB) opt-in limit of sm_90."""


class LayoutError(CuteDSLError, ValueError):
    """A shared-memory buffer's layout (dtype, swizzle, major, shape) disagrees with an atom
    that uses it (a TMA tensor map, a WGMMA descriptor); raised while building the kernel and
    naming both sides."""


class IRError(CuteDSLError):
    """Building or verifying MLIR failed; the message names the op and the Python line that built it."""


class CompileError(CuteDSLError):
    """The pass pipeline, ptxas or nvdisasm failed (also when MLIR aborted the worker process)."""


class DumpError(CuteDSLError):
    """A requested dump (IR, PTX, SASS) could not be written."""


class CacheError(CuteDSLError):
    """A compiled-kernel cache entry is unreadable (it is rebuilt where possible)."""


class NoDeviceError(CuteDSLError, RuntimeError):
    """The requested backend has no usable device (no NVIDIA driver, no GPU, not sm_90)."""


class LaunchError(CuteDSLError, RuntimeError):
    """A driver or emulator call failed during module load, launch or copy."""


def checked_arguments(error=None):
    """Decorator for a public callable (a function or an ``__init__``): arguments that do not
    bind to its signature (an unknown keyword, too many positional values, a missing one) raise
    ``error`` (default :class:`ArgumentTypeError`) naming the callable and its accepted names,
    instead of Python's bare ``TypeError``."""
    import functools
    import inspect

    def deco(fn):
        sig = inspect.signature(fn)
        names = [p for p in sig.parameters if p != "self" and sig.parameters[p].kind not in (
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        owner = fn.__qualname__.removesuffix(".__init__")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                sig.bind(*args, **kwargs)
            except TypeError as e:
                why = str(e).split("() ", 1)[-1] if "() " in str(e) else str(e)
                raise (error or ArgumentTypeError)(f"{owner}(): {why}; it accepts {', '.join(names)}") from None
            return fn(*args, **kwargs)
        return wrapper
    return deco


def one_of(values, quote: bool = True) -> str:
    """``'a', 'b' or 'c'`` (``quote=False``: ``1, 2 or 4``): the accepted values in a message."""
    q = [repr(v) if quote else str(v) for v in values]
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} or {q[-1]}"
