"""Decode context: operand decoding for the PTX decoder (:mod:`cutedsl.sim.frontend.program`).

A :class:`DecodeCtx` is what every instruction decoder receives: it resolves register names
per brace :class:`Scope` (innermost first), labels, symbols and immediates, and turns operand
text into :class:`~cutedsl.sim.frontend.ptxtypes.Op` records and the read/write closures the decoded
instructions call. Errors name the PTX line (``PTXParseError`` / ``UnsupportedInstruction``).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from .errors import PTXParseError, UnsupportedInstruction
from .fusion import Post, vector_form
from .ptxmodule import split_top
from .ptxtypes import CLASS_BITS, NP, SPECIAL, VIEW, Op, _F32_RE, _F64_RE, _FLT_RE, _INT_RE, bits_of, imm_array, kind_of

if TYPE_CHECKING:
    from .program import Program


# -- decode context ----------------------------------------------------------------------

class Scope:
    __slots__ = ("id", "parent", "regs", "labels", "vectors", "branchtargets")

    def __init__(self, sid, parent):
        self.id, self.parent = sid, parent
        self.regs = {}
        self.labels = {}
        self.branchtargets = {}  #: ``tlist: .branchtargets L0, L1;`` -> (pc of the directive, [L0, L1])
        self.vectors = {}       #: vector register name (``.reg .v4 .s32 v``) -> its component names


class DecodeCtx:
    """State while decoding one entry; handlers build closures through its helpers."""

    def __init__(self, prog: "Program"):
        self.prog = prog
        self.scope = None
        self.ins = None
        self.mods = []
        self.ops = []

    # errors
    def unsupported(self, msg: str):
        raise UnsupportedInstruction(msg, self.ins.line, self.ins.text)

    def bad(self, msg: str):
        raise PTXParseError(msg, self.ins.line, self.ins.text)

    def vector(self, op, writer, readers):
        """The instruction being decoded computes ``writer(op(*readers))`` elementwise: record
        its :class:`~cutedsl.sim.frontend.fusion.VecForm` so that fused blocks may run it."""
        vector_form(self.ins, op, writer, readers)

    # lookups
    def _lookup(self, table: str, name: str):
        """``name`` in the named table of the innermost scope that declares it, or None."""
        s = self.scope
        while s is not None:
            v = getattr(s, table).get(name)
            if v is not None:
                return v
            s = s.parent
        return None

    def lookup_reg(self, name: str):
        return self._lookup("regs", name)

    def lookup_vector(self, name: str):
        return self._lookup("vectors", name)

    def lookup_label(self, name: str) -> int:
        pc = self._lookup("labels", name)
        if pc is None:
            self.bad(f"unknown label {name!r}")
        return pc

    # operand parsing
    def operand(self, s: str) -> Op:
        s = s.strip()
        if not s:
            self.bad("empty operand")
        if s == "_":
            return Op("sink")
        if s[0] == "[":
            return self._address(s)
        if s[0] == "{":
            inner = s[1:-1].strip()
            return Op("vec", items=[self.operand(x) for x in split_top(inner)] if inner else [])
        neg = False
        if s[0] == "!":
            neg, s = True, s[1:].strip()
        if s[0] == "-" and s[1:2] == "%":
            self.unsupported("negated register operand")
        r = self.lookup_reg(s)
        if r is not None:
            if r[0] == "r":
                self.ins.rbits |= 1 << r[1]
            return Op("reg", cls=r[0], idx=r[1], name=s, neg=neg)
        vec = self.lookup_vector(s)
        if vec is not None:             # a vector register names its components in order
            return Op("vec", items=[self.operand(c) for c in vec])
        if SPECIAL.match(s):
            return Op("sreg", name=s)
        m = _F32_RE.match(s)
        if m:
            return Op("fimm", value=("f32", int(m.group(1), 16)))
        m = _F64_RE.match(s)
        if m:
            return Op("fimm", value=("f64", int(m.group(1), 16)))
        if _INT_RE.match(s):
            t = s.rstrip("Uu")
            neg_i = t.startswith("-")
            t = t.lstrip("-")
            if t[:2].lower() == "0x":
                v = int(t, 16)
            elif len(t) > 1 and t[0] == "0":
                v = int(t, 8)
            else:
                v = int(t)
            v = -v if neg_i else v
            return Op("imm", value=v)
        if _FLT_RE.match(s):
            return Op("fimm", value=float(s))
        if s in self.prog.symbols:
            return Op("sym", name=s)
        if s.startswith("%"):
            self.bad(f"undeclared register {s}")
        return Op("label", name=s)

    def _address(self, s: str) -> Op:
        inner = s[1:-1].strip()
        parts = split_top(inner)
        if len(parts) == 2:                      # [tmap, {c0, c1}]
            base = self.operand(parts[0])
            coords = self.operand(parts[1])
            if coords.kind != "vec":
                self.bad("tensor coordinates must be a brace list")
            return Op("addr", base=base, offset=0, coords=coords.items)
        m = re.fullmatch(r"([^+\-]+?)\s*(?:([+-])\s*(-?(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)
        if not m:
            self.bad(f"cannot parse address {s}")
        b = m.group(1).strip()
        off = 0
        if m.group(3):
            off = int(m.group(3), 0)
            if m.group(2) == "-":
                off = -off
        if _INT_RE.match(b):
            return Op("addr", base=None, offset=int(b, 0) + off)
        return Op("addr", base=self.operand(b), offset=off)

    # readers / writers
    def rd(self, op, t: str):
        """Closure ``w -> array[32] | scalar`` of numpy type ``NP[t]`` for a source operand.
        Register and constant readers carry ``vec_src`` (:mod:`cutedsl.sim.frontend.fusion`)."""
        return self._rd(op, t)

    def _rd(self, op, t: str):
        if isinstance(op, str):
            op = self.operand(op)
        k = op.kind
        dt = NP[t]
        if k == "imm" or k == "fimm":
            v = imm_array(op.value, t)
            return _src(lambda w: v, ("c", v))
        if k == "sreg":
            name = op.name
            if dt.itemsize == 4 and dt.kind == "u":
                return lambda w: w.sreg(name)
            return lambda w: np.asarray(w.sreg(name)).astype(dt)
        if k == "sym":
            addr = self.sym_addr(op.name)
            if dt.itemsize != 8:
                return lambda w: np.asarray(addr(w)).astype(dt)
            return addr if dt == np.uint64 else (lambda w: np.asarray(addr(w)).astype(dt))
        if k != "reg":
            self.bad(f"operand {op.name or k} cannot be read as .{t}")
        cls, idx = op.cls, op.idx
        if t == "pred" or cls == "p":
            if not (t == "pred" and cls == "p"):
                self.bad(f"predicate/{t} mismatch for {op.name}")
            if op.neg:
                return _src(lambda w: ~w.p[idx], ("r", "p", "p", idx, _NOT))
            return _src(lambda w: w.p[idx], ("r", "p", "p", idx, None))
        if op.neg:
            self.bad("'!' only applies to predicates")
        rbits = CLASS_BITS[cls]
        tb = bits_of(t)
        kd = kind_of(t)
        if tb == rbits:
            if (cls, kd) in VIEW:
                name = VIEW[(cls, kd)]
            else:
                name = VIEW[(cls, "u")]
                return _src(lambda w: getattr(w, name)[idx].view(dt), ("r", cls, name, idx, _view(dt)))
            tag = ("r", cls, name, idx, None)
            if name == "u32":
                return _src(lambda w: w.u32[idx], tag)
            if name == "u64":
                return _src(lambda w: w.u64[idx], tag)
            if name == "f32":
                return _src(lambda w: w.f32[idx], tag)
            if name == "s32":
                return _src(lambda w: w.s32[idx], tag)
            return _src(lambda w: getattr(w, name)[idx], tag)
        uname = VIEW[(cls, "u")]
        if tb < rbits:                                 # truncate
            ut = np.dtype(f"u{tb // 8}")
            if dt == ut:
                return _src(lambda w: getattr(w, uname)[idx].astype(ut), ("r", cls, uname, idx, _astype(ut)))
            return _src(lambda w: getattr(w, uname)[idx].astype(ut).view(dt),
                        ("r", cls, uname, idx, _astype_view(ut, dt)))
        # wider type than the register: extend
        if kd == "s":
            sname = VIEW[(cls, "s")]
            return _src(lambda w: getattr(w, sname)[idx].astype(dt), ("r", cls, sname, idx, _astype(dt)))
        if kd == "u":
            return _src(lambda w: getattr(w, uname)[idx].astype(dt), ("r", cls, uname, idx, _astype(dt)))
        self.bad(f"register {op.name} ({rbits} bits) is too narrow for .{t}")

    def wr(self, op, t: str):
        """Writer pair ``(full, comp)`` for a destination operand.

        ``full(w, mask, v)`` writes ``v`` (``[32]`` array or scalar) to the lanes in ``mask``
        (``None`` = all 32); ``comp(w, mask, v)`` writes one value per active lane.
        """
        if isinstance(op, str):
            op = self.operand(op)
        if op.kind == "sink":
            nop = lambda w, m, v: None
            return nop, nop
        if op.kind != "reg":
            self.bad(f"destination must be a register, got {op.name or op.kind}")
        cls, idx = op.cls, op.idx
        kd = kind_of(t)
        pre = None
        if cls == "p" or t == "pred":
            if not (cls == "p" and t == "pred"):
                self.bad(f"predicate/{t} mismatch for {op.name}")
            name = "p"
        else:
            tb, rb = bits_of(t), CLASS_BITS[cls]
            if (cls, kd) in VIEW and tb == rb:
                name = VIEW[(cls, kd)]
            elif kd in ("s", "u"):
                name = VIEW[(cls, kd)]
            elif tb == rb:              # a float type the class has no view of: its bits
                name = VIEW[(cls, "u")]
                pre = _asarray_view(NP[t], np.dtype(f"u{rb // 8}"))
            else:
                self.bad(f"cannot write .{t} into register {op.name}")
        return _writers(cls, name, idx, pre)

    def sym_addr(self, name: str):
        """Closure ``w -> address`` (uint64 scalar) of a symbol in its own state space."""
        sym = self.prog.symbols[name]
        space, val = sym
        if space == "shared_dyn":           # shared addresses carry the CTA's cluster rank (memory.py)
            return lambda w: np.uint64(w.cta.dyn_base) | w.cta.rank_bits
        if space == "global":
            return lambda w: np.uint64(w.launch.global_addr(name))
        v = np.uint64(val)
        if space == "shared":
            return lambda w: v | w.cta.rank_bits
        return lambda w: v

    def addr(self, op):
        """Closure ``w -> uint64 address(es)`` for an ``[base+off]`` operand."""
        if isinstance(op, str):
            op = self.operand(op)
        if op.kind != "addr":
            self.bad("expected an address operand [..]")
        off = op.offset
        b = op.base
        if b is None:
            v = np.uint64(off & (2 ** 64 - 1))
            return lambda w: v
        if b.kind == "sym":
            f = self.sym_addr(b.name)
            if off == 0:
                return f
            o = np.uint64(off & (2 ** 64 - 1))
            return lambda w: f(w) + o
        if b.kind != "reg" or b.cls not in ("r", "d"):
            self.bad(f"unsupported address base {b.name}")
        f = self.rd(b, "u64")
        if off == 0:
            return f
        o = np.uint64(off & (2 ** 64 - 1))
        return lambda w: f(w) + o

    def label(self, name: str) -> int:
        return self.lookup_label(name)

    def branch_targets(self, name: str) -> list:
        """The PCs of the labels that ``.branchtargets`` list ``name`` names (PTX ISA 9.7.12.4
        brx.idx: the directive must be defined in the function before the ``brx.idx`` using it,
        and refer to labels of the function)."""
        s = self.scope
        while s is not None and name not in s.branchtargets:
            s = s.parent
        if s is None:
            self.bad(f"{name!r} is not the label of a .branchtargets directive in scope (PTX ISA 9.7.12.4)")
        pc, names = s.branchtargets[name]
        if pc > self.ins.pc:
            self.bad(f".branchtargets {name!r} is defined after this brx.idx; the ISA requires it before "
                     f"its use (PTX ISA 9.7.12.4)")
        here = self.scope
        self.scope = s
        try:
            return [self.lookup_label(n) for n in names]
        finally:
            self.scope = here


# -- program -----------------------------------------------------------------------------


# -- writers and the fusion tags ------------------------------------------------------------

def _writers(cls, name, idx, pre):
    """``(full, comp)`` writers of register ``idx`` of view ``name``; ``pre`` (a
    :class:`~cutedsl.sim.frontend.fusion.Post` or None) converts the value first. ``full``
    carries ``vec_dst`` for :mod:`cutedsl.sim.frontend.fusion`."""
    conv = pre.fn if pre is not None else None

    def writer(masked):
        def put(w, m, v):
            if conv is not None:
                v = conv(v)
            if m is None:
                getattr(w, name)[idx] = v       # (the row's assignment, without its view)
            else:
                masked(getattr(w, name)[idx], m, v)
        return put
    full = writer(_copy_where)
    full.vec_dst = (cls, name, idx, pre)
    return full, writer(_set_active)


def _copy_where(row, m, v):
    """``v`` (32 lanes or a scalar) into the lanes of ``m``."""
    np.copyto(row, v, where=m, casting="unsafe")


def _set_active(row, m, v):
    """``v`` (one value per lane of ``m``) into the lanes of ``m``."""
    row[m] = v


def _src(f, tag):
    f.vec_src = tag
    return f


_NOT = Post(np.invert, ("not",))


def _view(dt):
    return Post(lambda a: a.view(dt), ("view", dt.str))


def _astype(dt):
    return Post(lambda a: a.astype(dt), ("astype", dt.str))


def _astype_view(ut, dt):
    return Post(lambda a: a.astype(ut).view(dt), ("astype_view", ut.str, dt.str))


def _asarray_view(dt, ut):
    return Post(lambda v: np.asarray(v, dtype=dt).view(ut), ("asarray_view", dt.str, ut.str))
