"""PTX front end: text -> :class:`Module` of entries with raw statements.

Handles what LLVM's NVPTX backend emits: ``.version/.target/.address_size``, module-level
variables (``.global``/``.shared``/``.const`` with alignment, arrays and initialisers),
``.extern .func`` declarations, ``.entry`` kernels with ``.param`` lists and performance
directives, and entry bodies made of declarations, labels, (predicated) instructions and
nested ``{ ... }`` scopes (inline-asm blocks with their own ``.reg`` and labels).

The parser only splits text; :mod:`cutedsl.sim.frontend.program` decodes instructions.

**Line tables** (PTX ISA 11.5.2 ``.file``, 11.5.3 ``.loc``): ``.file N "path"`` directives fill
:attr:`Module.files`; each body statement keeps the ``.loc`` in force before it
(:attr:`Item.loc`: ``(file, line, inlined_at)``), so that emulator errors name the source line
(the Python line that built the instruction, for this project's compiler and Triton alike).
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


_LABEL = re.compile(r"([$A-Za-z_][\w$]*)\s*:(?!:)")
_WS = re.compile(r"\s+")
_IDENT = r"[$%A-Za-z_][\w$]*"


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
    m = re.fullmatch(r"(" + _IDENT + r")\s*(\[\s*(\d*)\s*\])?", name_tok.strip())
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


# -- top level -------------------------------------------------------------------------

class _Cursor:
    def __init__(self, text: str):
        self.t = text
        self.i = 0
        self.line = 1

    def skip_ws(self):
        t, n = self.t, len(self.t)
        i = self.i
        while i < n and t[i] in " \t\r\n":
            if t[i] == "\n":
                self.line += 1
            i += 1
        self.i = i

    def eof(self):
        return self.i >= len(self.t)

    def take_until(self, chars: str) -> str:
        """Text up to (not including) the first char in ``chars`` at depth 0 of ()[]."""
        t, n, i, depth = self.t, len(self.t), self.i, 0
        start = i
        while i < n:
            c = t[i]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c in chars and depth <= 0:
                break
            elif c == "{" and depth <= 0 and "{" not in chars:
                depth += 1
            elif c == "}" and depth > 0:
                depth -= 1
            i += 1
        s = t[start:i]
        self.line += s.count("\n")
        self.i = i
        return s

    def rest_of_line(self) -> str:
        j = self.t.find("\n", self.i)
        j = len(self.t) if j < 0 else j
        s = self.t[self.i:j]
        self.i = j
        return s


def parse_module(text: str, max_statements: int | None = None) -> Module:
    """Parse a PTX module. Raises :class:`PTXParseError` with the line on malformed input, and
    as soon as the entry bodies hold more than ``max_statements`` statements (``SimLimits.statements``)."""
    src = strip_comments(text)
    cur = _Cursor(src)
    mod = Module()
    lines = text.splitlines()

    def line_text(ln):
        return lines[ln - 1] if 0 < ln <= len(lines) else ""

    while True:
        cur.skip_ws()
        if cur.eof():
            break
        ln = cur.line
        if src.startswith(".version", cur.i):
            mod.version = cur.rest_of_line().split()[1]
        elif src.startswith(".target", cur.i):
            mod.target = cur.rest_of_line().split(None, 1)[1].strip()
        elif src.startswith(".address_size", cur.i):
            mod.address_size = int(cur.rest_of_line().split()[1])
        elif re.match(r"\.(loc|file)\s", src[cur.i:cur.i + 6]):
            parse_file(cur.rest_of_line(), mod.files)
        elif src.startswith(".section", cur.i):
            cur.take_until("{")
            _skip_braced(cur)
        else:
            head = cur.take_until(";{")
            if not cur.eof() and src[cur.i] == "{" and "=" in head:
                head += cur.take_until(";")
            if cur.eof():
                raise PTXParseError("unexpected end of text", ln, line_text(ln))
            hs = head.strip()
            words = hs.split()
            if ".entry" in words or ".func" in words:
                if src[cur.i] == ";":      # declaration only
                    cur.i += 1
                    name = _func_name(hs)
                    mod.funcs[name] = ln
                    continue
                if ".func" in words:
                    name = _func_name(hs)
                    mod.funcs[name] = ln
                    _skip_braced(cur)
                    continue
                ent = _parse_entry_head(hs, ln, line_text)
                cur.i += 1   # '{'
                ent.items = _scan_body(cur, lines, mod.files, max_statements)
                if max_statements is not None:
                    max_statements -= len(ent.items)
                mod.entries[ent.name] = ent
            elif src[cur.i] == "{":
                raise PTXParseError("unexpected '{' at module level", ln, line_text(ln))
            else:
                cur.i += 1
                if any(w in (".global", ".shared", ".const") for w in words):
                    mod.variables.append(parse_var(hs, ln))
                elif hs.startswith(".pragma") or not hs:
                    pass
                else:
                    raise PTXParseError("unsupported module-level statement", ln, line_text(ln))
    return mod


def _func_name(head: str) -> str:
    s = re.sub(r"\([^)]*\)", " ", head)  # drop parameter lists
    words = [w for w in s.split() if not w.startswith(".")]
    return words[-1] if words else "?"


def _skip_braced(cur: _Cursor):
    cur.skip_ws()
    if cur.eof() or cur.t[cur.i] != "{":
        return
    depth = 0
    t = cur.t
    while cur.i < len(t):
        c = t[cur.i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                cur.i += 1
                return
        elif c == "\n":
            cur.line += 1
        cur.i += 1


_DIRECTIVE_ARGS = {".reqntid", ".maxntid", ".reqnctapercluster", ".minnctapersm", ".maxnreg",
                   ".maxclusterrank", ".explicitcluster", ".noreturn", ".blocksareclusters"}


def _parse_entry_head(head: str, line: int, line_text) -> Entry:
    m = re.match(r"(?:\.(?:visible|weak|extern)\s+)*\.entry\s+(" + _IDENT + r")\s*(\((.*?)\))?(.*)$", head, re.S)
    if not m:
        raise PTXParseError("cannot parse .entry header", line, line_text(line))
    name = m.group(1)
    params = []
    if m.group(3) and m.group(3).strip():
        off = 0
        for ptext in split_top(m.group(3)):
            ptext = " ".join(ptext.split())
            v = parse_var(ptext, line, "param")
            is_ptr = ".ptr" in ptext.split()
            size = v.size
            # the .align of a .ptr parameter is the alignment of the memory it points to (PTX
            # ISA, kernel parameter attributes), not of the parameter: that is its natural one
            align = size if is_ptr else v.align
            off = (off + align - 1) // align * align
            params.append(Param(v.name, v.type, size, align, off, is_ptr, line))
            off += size
    directives = {}
    tail = m.group(4).strip()
    toks = re.findall(r"\.\w+|[\d]+", tail)
    cur_d = None
    for t in toks:
        if t.startswith("."):
            if t not in _DIRECTIVE_ARGS and t != ".pragma":
                raise PTXParseError(f"unsupported entry directive {t}", line, line_text(line))
            cur_d = t[1:]
            directives[cur_d] = []
        elif cur_d is not None:
            directives[cur_d].append(int(t))
    for k in ("reqntid", "maxntid", "reqnctapercluster"):
        if k in directives:
            v = list(directives[k]) + [1, 1]
            directives[k] = tuple(v[:3])
    for k in ("minnctapersm", "maxnreg", "maxclusterrank"):
        if k in directives and directives[k]:
            directives[k] = directives[k][0]
    return Entry(name, params, directives, [], line)


def _scan_body(cur: _Cursor, lines, files: dict, limit: int | None = None) -> list:
    """Scan an entry body after its opening brace up to the matching close; statements carry
    the ``.loc`` in force (a ``.loc`` holds until the next one, across labels and scopes)."""
    items = []
    loc = None
    depth = 1
    t = cur.t
    n = len(t)
    while True:
        cur.skip_ws()
        if cur.eof():
            raise PTXParseError("unterminated entry body", cur.line)
        c = t[cur.i]
        ln = cur.line
        if c == "{":
            items.append(Item("open", ln))
            depth += 1
            cur.i += 1
            continue
        if c == "}":
            depth -= 1
            cur.i += 1
            if depth == 0:
                return items
            items.append(Item("close", ln))
            continue
        if re.match(r"\.(loc|file)\s", t[cur.i:cur.i + 6]):
            d = cur.rest_of_line()
            if d.startswith(".loc"):
                loc = parse_loc(d)
            else:
                parse_file(d, files)
            continue
        m = _LABEL.match(t, cur.i)
        if m:
            items.append(Item("label", ln, name=m.group(1)))
            cur.i = m.end()
            continue
        s = cur.take_until(";}")
        if cur.i >= n or t[cur.i] != ";":
            raise PTXParseError("statement without ';'", ln, lines[ln - 1] if ln <= len(lines) else s)
        cur.i += 1
        s = " ".join(s.split())
        if not s:
            continue
        items.append(Item("dir" if s.startswith(".") else "stmt", ln, s, loc=loc))
        if limit is not None and len(items) > limit:
            raise PTXParseError(f"more than {limit} statements in the module's entries: the emulator's limit "
                                f"(raise it with SimLimits(statements=...))", ln)
