"""PTX front end: text -> :class:`Module` of entries with raw statements.

Handles what LLVM's NVPTX backend emits: ``.version/.target/.address_size``, module-level
variables (``.global``/``.shared``/``.const`` with alignment, arrays and initialisers),
``.extern .func`` declarations, ``.entry`` kernels with ``.param`` lists and performance
directives, and entry bodies made of declarations, labels, (predicated) instructions and
nested ``{ ... }`` scopes (inline-asm blocks with their own ``.reg`` and labels).

The parser only splits text into the records of :mod:`cutedsl.sim.frontend.ptxmodule`;
:mod:`cutedsl.sim.frontend.program` decodes instructions.

**Line tables** (PTX ISA 11.5.2 ``.file``, 11.5.3 ``.loc``): ``.file N "path"`` directives fill
:attr:`Module.files`; each body statement keeps the ``.loc`` in force before it
(:attr:`Item.loc`: ``(file, line, inlined_at)``), so that emulator errors name the source line
(the Python line that built the instruction, for this project's compiler and Triton alike).
"""
from __future__ import annotations

import re

from .errors import PTXParseError
from .ptxmodule import (IDENT, Entry, Item, Module, Param, parse_file, parse_loc, parse_var, split_top,
                        strip_comments)
from .ptxmodule import TYPE_SIZES  # noqa: F401  (re-exported: instruction modules import it from here)

_LABEL = re.compile(r"([$A-Za-z_][\w$]*)\s*:(?!:)")


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
    m = re.match(r"(?:\.(?:visible|weak|extern)\s+)*\.entry\s+(" + IDENT + r")\s*(\((.*?)\))?(.*)$", head, re.S)
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
