"""The parsed PTX module's records and the text helpers the parser and the decoder share.

:class:`Module` (entries, module variables, ``.func`` names, ``.file`` line table) holds
:class:`Entry` kernels whose bodies are :class:`Item` records; :class:`Var` and :class:`Param`
are declarations. :func:`parse_var` reads one declaration, :func:`split_top` splits operand
lists, :func:`strip_comments` removes comments keeping line numbers. Line tables follow PTX ISA
11.5.2 (``.file``) and 11.5.3 (``.loc``). :mod:`cutedsl.sim.frontend.parser` scans the text.
"""
from __future__ import annotations

import re

import attrs

from .errors import PTXParseError

# -- data ------------------------------------------------------------------------------

TYPE_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
              "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "f32x2": 8, "tf32": 4,
              "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16, "pred": 1,
              "e4m3": 1, "e5m2": 1, "e4m3x2": 2, "e5m2x2": 2}


@attrs.define
class Var:
    """A variable declaration (``.shared``/``.global``/``.const``/``.local``/``.param``)."""
    space: str
    name: str
    type: str
    size: int          #: bytes (0 for unsized / extern arrays)
    align: int
    count: int         #: elements; -1 for ``[]``
    init: list | None = None
    line: int = 0
    extern: bool = False


@attrs.define
class Param:
    """One entry parameter: ``size`` bytes at ``offset`` of the parameter buffer."""
    name: str
    type: str
    size: int
    align: int
    offset: int = 0
    is_ptr: bool = False
    line: int = 0


@attrs.define
class Item:
    """A body item: kind in {'open', 'close', 'label', 'stmt', 'dir'}."""
    kind: str
    line: int
    text: str = ""
    name: str = ""
    #: the ``.loc`` in force: ``(file id, line, inlined_at)`` with ``inlined_at`` the same
    #: triple of the call site (or None); None where no ``.loc`` preceded
    loc: tuple | None = None


@attrs.define
class Entry:
    name: str
    params: list
    directives: dict
    items: list
    line: int = 0

    @property
    def param_size(self) -> int:
        if not self.params:
            return 0
        p = self.params[-1]
        return p.offset + p.size


@attrs.define
class Module:
    version: str = ""
    target: str = ""
    address_size: int = 64
    entries: dict = attrs.field(factory=dict)
    variables: list = attrs.field(factory=list)
    funcs: dict = attrs.field(factory=dict)    #: name -> line (declared/defined .func)
    files: dict = attrs.field(factory=dict)    #: ``.file`` id -> path (line tables)

    def source(self, loc) -> str:
        """``path:line`` of an :attr:`Item.loc` (``, inlined at path:line`` for an inlined call,
        as Triton's line tables write them); "" when unknown. Paths inside the working
        directory are shown relative to it."""
        if loc is None:
            return ""
        f, ln, inl = loc
        path = self.files.get(f)
        if path is None or ln <= 0:
            return ""
        out = f"{_show_path(path)}:{ln}"
        at = self.source(inl) if inl is not None else ""
        return f"{out}, inlined at {at}" if at else out


def _show_path(path: str) -> str:
    import os
    try:
        rel = os.path.relpath(path)
    except ValueError:          # another drive (Windows)
        return path
    return path if rel.startswith("..") else rel


_LOC = re.compile(r"\.loc\s+(\d+)\s+(\d+)(?:\s+(\d+))?(?:.*?inlined_at\s+(\d+)\s+(\d+))?")
_FILE = re.compile(r'\.file\s+(\d+)\s+"((?:[^"\\]|\\.)*)"')


def parse_loc(text: str):
    """``.loc file line [col][, function_name f, inlined_at file line col]`` -> Item.loc, or None."""
    m = _LOC.match(text.strip())
    if not m:
        return None
    inl = (int(m.group(4)), int(m.group(5)), None) if m.group(4) else None
    return int(m.group(1)), int(m.group(2)), inl


def parse_file(text: str, files: dict) -> None:
    """``.file id "path"[, timestamp, size]`` into ``files``."""
    m = _FILE.match(text.strip())
    if m:
        files[int(m.group(1))] = m.group(2).replace('\\"', '"')


# -- helpers ---------------------------------------------------------------------------

_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"[^"]*(?:"|\Z)', re.S)


def _keep_lines(m) -> str:
    t = m.group(0)
    if t[0] == '"':
        return t
    return "\n" * t.count("\n")


def strip_comments(text: str) -> str:
    """Remove ``//`` and ``/* */`` comments (not inside strings), keeping newlines so line numbers
    stay valid. One regular-expression pass: linear in the text."""
    return _COMMENT_OR_STRING.sub(_keep_lines, text)


def split_top(s: str, sep: str = ",") -> list:
    """Split ``s`` at ``sep`` outside brackets/braces/parentheses; strips parts."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    last = "".join(cur).strip()
    if last or parts:
        parts.append(last)
    return parts


IDENT = r"[$%A-Za-z_][\w$]*"


def parse_var(text: str, line: int, default_space: str | None = None) -> Var:
    """Parse ``.shared .align 8 .b8 name[16] = {...}`` (without the trailing ';')."""
    init = None
    if "=" in text:
        text, rhs = text.split("=", 1)
        rhs = rhs.strip()
        if rhs.startswith("{"):
            rhs = rhs.strip("{} \n\t")
            init = [_parse_int_literal(x) for x in split_top(rhs) if x]
        else:
            init = [_parse_int_literal(rhs)]
    toks = text.split()
    space, align, typ, extern = default_space, 0, None, False
    name_tok = None
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == ".align":
            align = int(toks[i + 1])
            i += 2
            continue
        if t in (".extern", ".visible", ".weak"):
            extern = extern or t == ".extern"
        elif t in (".shared", ".global", ".const", ".local", ".param", ".reg"):
            space = t[1:]
        elif t.startswith(".shared::"):
            space = "shared"
        elif t.startswith(".") and t[1:] in TYPE_SIZES:
            typ = t[1:]
        elif t.startswith(".v") and t[2:].isdigit():
            pass
        elif t == ".ptr" or t.startswith(".global") and typ:
            pass
        elif not t.startswith("."):
            name_tok = " ".join(toks[i:])
            break
        i += 1
    if typ is None or name_tok is None or space is None:
        raise PTXParseError("cannot parse variable declaration", line, text)
    m = re.fullmatch(r"(" + IDENT + r")\s*(\[\s*(\d*)\s*\])?", name_tok.strip())
    if not m:
        raise PTXParseError("cannot parse variable name", line, text)
    esize = TYPE_SIZES[typ]
    if m.group(2) is None:
        count = 1
    elif m.group(3) == "":
        count = -1
    else:
        count = int(m.group(3))
    if count == -1 and init is not None:
        count = len(init)
    size = esize * count if count > 0 else 0
    return Var(space, m.group(1), typ, size, align or esize, count, init, line, extern)


def _parse_int_literal(s: str) -> int:
    s = s.strip()
    neg = s.startswith("-")
    if neg:
        s = s[1:]
    if s.lower().startswith("0x"):
        v = int(s[2:].rstrip("Uu"), 16)
    else:
        v = int(s.rstrip("Uu"))
    return -v if neg else v
