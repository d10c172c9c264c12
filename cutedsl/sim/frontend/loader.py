"""Loading PTX text into a decoded :class:`~cutedsl.sim.frontend.program.Program`: parse, decode, cache
by content, and answer any malformed input with the emulator's own errors.

:func:`load_ptx` accepts ``str`` or UTF-8 ``bytes``; declarations past the
:class:`~cutedsl.sim.frontend.limits.SimLimits` are refused before anything is allocated (in the
decoder); a Python error the parser or decoder did not anticipate on untrusted text becomes a
:class:`PTXParseError` naming the line it had reached.
"""
from __future__ import annotations

import hashlib

from .errors import PTXParseError
from .limits import DEFAULT_LIMITS
from .parser import parse_module
from .program import Program, decode_entry

_CACHE = {}


def load_ptx(text: str, entry: str | None = None, limits=None) -> Program:
    """Parse and decode PTX ``text``; returns the :class:`Program` of ``entry`` (default: the
    only/first entry). Cached by the SHA-256 of the text. Raises :class:`PTXParseError` /
    :class:`UnsupportedInstruction` with the PTX line, also for declarations beyond ``limits``
    (:class:`~cutedsl.sim.frontend.limits.SimLimits`, default ``DEFAULT_LIMITS``) and for text that is
    no PTX module the emulator can decode (the error names the line it reached)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise PTXParseError(f"PTX text is not UTF-8: {e}") from None
    if not isinstance(text, str):
        raise PTXParseError(f"PTX text must be a str, got {type(text).__name__}")
    limits = DEFAULT_LIMITS if limits is None else limits
    key = hashlib.sha256(text.encode()).hexdigest()
    ck = (key, entry, limits)
    p = _CACHE.get(ck)
    if p is not None:
        return p
    mod = _guarded(parse_module, text, limits.statements)
    if not mod.entries:
        raise PTXParseError("no .entry in PTX text")
    if entry is None:
        ent = next(iter(mod.entries.values()))
    elif entry in mod.entries:
        ent = mod.entries[entry]
    else:
        raise PTXParseError(f"no entry {entry!r}; entries: {', '.join(mod.entries)}")
    p = _guarded(decode_entry, mod, ent, key, limits)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[ck] = p
    return p


def _guarded(fn, *args):
    """Run a parse/decode step; a Python error inside it (malformed operands the decoder did
    not anticipate) becomes a :class:`PTXParseError`: untrusted text never escapes as
    ``IndexError``/``KeyError``/``ValueError``. The error names the innermost PTX line the
    decoder had reached (from the traceback's ``it``/``ins``/``line`` locals)."""
    try:
        return fn(*args)
    except PTXParseError:
        raise
    except (IndexError, KeyError, ValueError, TypeError, AttributeError, OverflowError, ZeroDivisionError,
            RecursionError, UnicodeError) as e:
        line, text, src = _where(e.__traceback__)
        raise PTXParseError(f"cannot decode ({type(e).__name__}: {e})", line, text, src) from None


def _where(tb) -> tuple:
    line, text, src = 0, "", ""
    while tb is not None:
        loc = tb.tb_frame.f_locals
        for name in ("ins", "it"):
            o = loc.get(name)
            if o is not None and isinstance(getattr(o, "line", None), int) and getattr(o, "text", None):
                line, text = o.line, o.text
                src = getattr(o, "src", "") if isinstance(getattr(o, "src", ""), str) else ""
        if isinstance(loc.get("ln"), int) and callable(loc.get("line_text")):
            line, text, src = loc["ln"], loc["line_text"](loc["ln"]), ""
        tb = tb.tb_next
    return line, text, src
