"""Decoder: a parsed PTX entry -> :class:`Program`, a flat list of :class:`Instr` (PC = index).

Every instruction is decoded **once** into a Python closure ``fn(warp, group, mask)``
specialised on its opcode, types and operand kinds. ``mask`` is ``None`` when all 32 lanes
of the warp execute, else a ``bool[32]`` array of executing lanes. The closure returns

* ``None``: fall through (PC += 1),
* ``JUMPED``: it set ``group.pc`` itself,
* ``BLOCKED``: the group waits (``group.blocked`` set; the instruction re-executes when ready),
* ``RESCHED``: lane groups changed (divergent branch, exit); the scheduler re-picks.
* ``YIELD``: the closure advanced the PC itself and the warp should let others run (polls).

Registers live per warp in one array per *register class* (declared width):
``p`` predicates ``bool[n, 32]``, ``h`` 8/16-bit ``uint16[n, 32]``, ``r`` 32-bit
``uint32[n, 32]``, ``d`` 64-bit ``uint64[n, 32]``; typed views (``s32``, ``f32``, ``bf16``...)
share the memory. Register names are resolved per brace scope (innermost first), so the
labels and ``.reg`` declarations that every inline-asm expansion repeats stay distinct.

An unknown opcode, modifier or operand form raises :class:`UnsupportedInstruction` here,
at load time, with the PTX line.
"""
from __future__ import annotations

import re

import numpy as np

from ..device.backend import SMEM_LIMIT
from .errors import PTXParseError, UnsupportedInstruction
from .limits import DEFAULT_LIMITS
from .parser import Var, parse_var, split_top
from .registry import BLOCKED, HANDLERS, JUMPED, RESCHED, YIELD  # noqa: F401  (re-exported)
from .ptxtypes import (CALLPARAM_BASE, CLASS_BITS, NP, REG_CLASS, SPECIAL, VIEW, Instr, Op, _F32_RE, _F64_RE,
                       _FLT_RE, _INT_RE, bits_of, imm_array, kind_of)


# -- decode context ----------------------------------------------------------------------

class Scope:
    __slots__ = ("id", "parent", "regs", "labels")

    def __init__(self, sid, parent):
        self.id, self.parent = sid, parent
        self.regs = {}
        self.labels = {}


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

    # lookups
    def lookup_reg(self, name: str):
        s = self.scope
        while s is not None:
            r = s.regs.get(name)
            if r is not None:
                return r
            s = s.parent
        return None

    def lookup_label(self, name: str) -> int:
        s = self.scope
        while s is not None:
            if name in s.labels:
                return s.labels[name]
            s = s.parent
        self.bad(f"unknown label {name!r}")

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
        """Closure ``w -> array[32] | scalar`` of numpy type ``NP[t]`` for a source operand."""
        if isinstance(op, str):
            op = self.operand(op)
        k = op.kind
        dt = NP[t]
        if k == "imm" or k == "fimm":
            v = imm_array(op.value, t)
            return lambda w: v
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
                return lambda w: ~w.p[idx]
            return lambda w: w.p[idx]
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
                return lambda w: getattr(w, name)[idx].view(dt)
            if name == "u32":
                return lambda w: w.u32[idx]
            if name == "u64":
                return lambda w: w.u64[idx]
            if name == "f32":
                return lambda w: w.f32[idx]
            if name == "s32":
                return lambda w: w.s32[idx]
            return lambda w: getattr(w, name)[idx]
        uname = VIEW[(cls, "u")]
        if tb < rbits:                                 # truncate
            ut = np.dtype(f"u{tb // 8}")
            if dt == ut:
                return lambda w: getattr(w, uname)[idx].astype(ut)
            return lambda w: getattr(w, uname)[idx].astype(ut).view(dt)
        # wider type than the register: extend
        if kd == "s":
            sname = VIEW[(cls, "s")]
            return lambda w: getattr(w, sname)[idx].astype(dt)
        if kd == "u":
            return lambda w: getattr(w, uname)[idx].astype(dt)
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
            elif tb == rb:
                name = VIEW[(cls, "u")]
                dt = NP[t]
                ut = np.dtype(f"u{rb // 8}")

                def full(w, m, v, name=name):
                    v = np.asarray(v, dtype=dt).view(ut)
                    row = getattr(w, name)[idx]
                    if m is None:
                        row[...] = v
                    else:
                        np.copyto(row, v, where=m, casting="unsafe")

                def comp(w, m, v, name=name):
                    v = np.asarray(v, dtype=dt).view(ut)
                    row = getattr(w, name)[idx]
                    if m is None:
                        row[...] = v
                    else:
                        row[m] = v
                return full, comp
            else:
                self.bad(f"cannot write .{t} into register {op.name}")

        def full(w, m, v):
            row = getattr(w, name)[idx]
            if m is None:
                row[...] = v
            else:
                np.copyto(row, v, where=m, casting="unsafe")

        def comp(w, m, v):
            row = getattr(w, name)[idx]
            if m is None:
                row[...] = v
            else:
                row[m] = v
        return full, comp

    def sym_addr(self, name: str):
        """Closure ``w -> address`` (uint64 scalar) of a symbol in its own state space."""
        sym = self.prog.symbols[name]
        space, val = sym
        if space == "shared_dyn":
            return lambda w: w.cta.dyn_base
        if space == "global":
            return lambda w: np.uint64(w.launch.global_addr(name))
        v = np.uint64(val)
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


# -- program -----------------------------------------------------------------------------

class Program:
    """A decoded entry.

    Attributes: ``name``; ``code`` (list of :class:`Instr`); ``nregs`` per class;
    ``params`` (parser ``Param`` list with offsets); ``param_size``; ``directives``;
    ``shared_vars`` (name -> (offset, size, align)); ``static_smem`` (bytes, before dynamic
    smem); ``dyn_align`` (alignment of the dynamic base); ``local_size`` (bytes per thread);
    ``globals`` (module ``.global``/``.const`` variables to materialise per memory);
    ``symbols`` (name -> (space, value)); ``key`` (sha256 of the PTX text).
    """

    DYN_ALIGN = 1024

    def __init__(self, module, entry, key=""):
        self.module = module
        self.entry = entry
        self.name = entry.name
        self.key = key
        self.params = entry.params
        self.param_size = entry.param_size
        self.directives = entry.directives
        self.code = []
        self.nregs = {"p": 0, "h": 0, "r": 0, "d": 0}
        self.symbols = {}
        self.shared_vars = {}
        self.local_vars = {}
        self.globals = [v for v in module.variables if v.space in ("global", "const")]
        self.static_smem = 0
        self.local_size = 0
        self.callparam_size = 0
        self.dyn_align = self.DYN_ALIGN
        self.lines = {}

    # symbol address in smem for diagnostics
    def smem_symbol(self, offset: int, dyn_base: int) -> str:
        best = None
        for name, (off, size, _a) in self.shared_vars.items():
            if off <= offset < off + max(size, 1):
                best = (name, off)
        if best is None and offset >= dyn_base:
            dyn = [n for n, s in self.symbols.items() if s[0] == "shared_dyn"]
            best = (dyn[0] if dyn else "<dynamic smem>", dyn_base)
        if best is None:
            return f"smem+{offset}"
        return f"{best[0]}+{offset - best[1]}" if offset != best[1] else best[0]


def _decl_regs(scope: Scope, text: str, nregs: dict, line: int, limit: int):
    m = re.match(r"\.reg\s+(?:\.v\d\s+)?\.(\w+)\s+(.*)$", text)
    if not m or m.group(1) not in REG_CLASS:
        raise UnsupportedInstruction("unsupported register declaration", line, text)
    cls = REG_CLASS[m.group(1)]
    for part in split_top(m.group(2)):
        mm = re.fullmatch(r"([%$\w]+)\s*<\s*(\d+)\s*>", part)
        if mm:
            base, n = mm.group(1), int(mm.group(2))
            if nregs[cls] + n > limit:      # checked before a single name is made
                raise PTXParseError(f"{nregs[cls] + n} .{m.group(1)} registers declared; the emulator's "
                                    f"limit is {limit} per register class (SimLimits.registers)", line, text)
            for i in range(n):
                scope.regs[f"{base}{i}"] = (cls, nregs[cls])
                nregs[cls] += 1
        else:
            scope.regs[part.strip()] = (cls, nregs[cls])
            nregs[cls] += 1


def _check_local(prog, v, used: int, limits, line: int, text: str) -> None:
    if used > limits.local_bytes:
        raise PTXParseError(f"{used} bytes of per-thread {v} memory declared; the emulator's limit is "
                            f"{limits.local_bytes} bytes (SimLimits.local_bytes)", line, text)


def decode_entry(module, entry, key="", limits=DEFAULT_LIMITS) -> Program:
    """Decode one parsed entry into a :class:`Program` (see module docstring). Declarations
    beyond ``limits`` (:class:`~cutedsl.sim.limits.SimLimits`) are a :class:`PTXParseError`."""
    prog = Program(module, entry, key)
    gvars = sum(v.size for v in module.variables if v.space in ("global", "const"))
    if gvars > limits.global_var_bytes:
        big = max((v for v in module.variables if v.space in ("global", "const")), key=lambda v: v.size)
        raise PTXParseError(f"module variables take {gvars} bytes (largest: {big.space} {big.name}, {big.size} "
                            f"bytes); the emulator's limit is {limits.global_var_bytes} bytes "
                            f"(SimLimits.global_var_bytes)")
    for v in module.variables:
        if v.space == "shared" and v.size > SMEM_LIMIT:
            raise PTXParseError(f".shared variable {v.name} is {v.size} bytes; a CTA has at most {SMEM_LIMIT}")
    # symbols: params, module variables
    for p in entry.params:
        prog.symbols[p.name] = ("param", p.offset)
    for v in module.variables:
        if v.space == "shared":
            _add_shared(prog, v)
        elif v.space in ("global", "const"):
            prog.symbols[v.name] = ("global", 0)
    # pass 1: scopes, labels, declarations, pcs
    scopes = []
    root = Scope(0, None)
    scopes.append(root)
    stack = [root]
    stmts = []
    for it in entry.items:
        sc = stack[-1]
        if it.kind == "open":
            ns = Scope(len(scopes), sc)
            scopes.append(ns)
            stack.append(ns)
        elif it.kind == "close":
            stack.pop()
            if not stack:
                raise PTXParseError("unbalanced '}'", it.line)
        elif it.kind == "label":
            sc.labels[it.name] = len(stmts)
        elif it.kind == "dir":
            t = it.text
            if t.startswith(".reg"):
                _decl_regs(sc, t, prog.nregs, it.line, limits.registers)
            elif t.startswith(".shared") or t.startswith(".extern .shared"):
                v = parse_var(t, it.line)
                if v.size > SMEM_LIMIT:
                    raise PTXParseError(f".shared variable {v.name} is {v.size} bytes; a CTA has at most "
                                        f"{SMEM_LIMIT}", it.line, t)
                _add_shared(prog, v)
            elif t.startswith(".local"):
                v = parse_var(t, it.line)
                off = (prog.local_size + v.align - 1) // v.align * v.align
                prog.local_vars[v.name] = (off, v.size)
                prog.symbols[v.name] = ("local", off)
                prog.local_size = off + v.size
                _check_local(prog, "local", prog.local_size + prog.callparam_size, limits, it.line, t)
            elif t.startswith((".pragma", ".loc", ".maxnreg")):
                pass
            elif t.startswith(".param"):
                # call-sequence parameters: a per-thread scratch area in param space
                v = parse_var(t, it.line, "param")
                off = (prog.callparam_size + v.align - 1) // v.align * v.align
                prog.symbols[v.name] = ("param", CALLPARAM_BASE + off)
                prog.callparam_size = off + v.size
                _check_local(prog, "call-parameter", prog.local_size + prog.callparam_size, limits, it.line, t)
            else:
                raise UnsupportedInstruction("unsupported directive in body", it.line, t)
        else:
            stmts.append((it, sc))
    # shared layout: static symbols in declaration order, then dynamic smem aligned to 1024
    prog.static_smem = 0
    for name, (off, size, align) in prog.shared_vars.items():
        prog.static_smem = max(prog.static_smem, off + size)
    # pass 2: decode
    ctx = DecodeCtx(prog)
    code = prog.code
    for pc, (it, sc) in enumerate(stmts):
        text = it.text
        guard = None
        if text.startswith("@"):
            g, text2 = text[1:].split(None, 1)
            guard = g
            text = text2
        parts = text.split(None, 1)
        opfull = parts[0]
        ops = split_top(parts[1]) if len(parts) > 1 else []
        ins = Instr(pc, it.line, it.text, opfull, sc.id)
        ctx.scope = sc
        ctx.ins = ins
        if guard is not None:
            neg = guard.startswith("!")
            gname = guard[1:] if neg else guard
            r = ctx.lookup_reg(gname)
            if r is None or r[0] != "p":
                raise PTXParseError(f"guard {guard} is not a predicate register", it.line, it.text)
            ins.guard, ins.neg = r[1], neg
        segs = opfull.split(".")
        h = HANDLERS.get(segs[0])
        if h is None:
            raise UnsupportedInstruction(f"unsupported instruction '{segs[0]}'", it.line, it.text)
        ins.fn = h(ctx, ins, segs[1:], ops)
        if segs[0] == "wgmma":
            ins.rbits = 0       # wgmma's own accumulator accesses are ordered by the hardware
        code.append(ins)
    # sentinel: falling off the end behaves like ret
    end = Instr(len(code), stmts[-1][0].line if stmts else entry.line, "<end of entry>", "ret", 0)
    ctx.ins = end
    end.fn = HANDLERS["ret"](ctx, end, [], [])
    code.append(end)
    return prog


def _add_shared(prog: Program, v: Var):
    # unsized extern arrays, and LLVM's demoted ``.shared .align 16 .b8 __dynamic_shmem__N;``
    # (declared as a scalar byte): both name the dynamic window, placed after all static smem
    if v.size == 0 or v.name.startswith("__dynamic_shmem__"):
        prog.symbols[v.name] = ("shared_dyn", 0)
        prog.dyn_align = max(prog.dyn_align, v.align)
        return
    off = 0
    for _n, (o, s, _a) in prog.shared_vars.items():
        off = max(off, o + s)
    off = (off + v.align - 1) // v.align * v.align
    prog.shared_vars[v.name] = (off, v.size, v.align)
    prog.symbols[v.name] = ("shared", off)
