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
at load time, with the PTX line. Operand decoding (registers per scope, labels, symbols,
immediates, addresses) is :class:`~cutedsl.sim.frontend.decode_ctx.DecodeCtx`'s.
"""
from __future__ import annotations

import re

from ...runtime.backend import SMEM_LIMIT
from .decode_ctx import DecodeCtx, Scope
from .errors import PTXParseError, UnsupportedInstruction
from .chain_fold import fold_chains
from .fusion import fuse
from .limits import DEFAULT_LIMITS
from .ptxmodule import Var, parse_var, split_top
from .ptxtypes import CALLPARAM_BASE, REG_CLASS, Instr
from .registry import BLOCKED, HANDLERS, JUMPED, RESCHED, YIELD  # noqa: F401  (re-exported)
from .registry import BATCH_BRANCH, BATCH_EACH, BATCH_REGS, BATCH_STORE, BATCH_WGMMA, NO_BATCH


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
        self.shared_lines = {}      #: shared variable name -> PTX line of its declaration
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


#: component names of a vector register (PTX ISA "Vectors": .x .y .z .w, or .r .g .b .a)
VECTOR_COMPONENTS = (("x", "r"), ("y", "g"), ("z", "b"), ("w", "a"))


def _decl_regs(scope: Scope, text: str, nregs: dict, line: int, limit: int):
    m = re.match(r"\.reg\s+(?:\.v(\d)\s+)?\.(\w+)\s+(.*)$", text)
    if m and m.group(2) == "b128" and not m.group(1):
        _decl_b128(scope, m.group(3), nregs, line, text)
        return
    if not m or m.group(2) not in REG_CLASS:
        raise UnsupportedInstruction("unsupported register declaration", line, text)
    cls = REG_CLASS[m.group(2)]
    if m.group(1):
        _decl_vectors(scope, int(m.group(1)), cls, m.group(3), nregs, line, text)
        return
    for part in split_top(m.group(3)):
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


def _decl_vectors(scope: Scope, n: int, cls: str, names: str, nregs: dict, line: int, text: str) -> None:
    """``.reg .v2/.v4 .type a, b;``: each name is ``n`` registers, its components ``a.x`` ..
    (or ``a.r`` ..), and the bare name the brace list of them (``st.v4 [p], a``)."""
    if n not in (2, 4):
        raise UnsupportedInstruction(f"vector registers have 2 or 4 components, not {n}", line, text)
    for part in split_top(names):
        name = part.strip()
        if not re.fullmatch(r"[%$\w]+", name):
            raise UnsupportedInstruction("vector register arrays are not supported", line, text)
        for comp in VECTOR_COMPONENTS[:n]:
            for alias in comp:
                scope.regs[f"{name}.{alias}"] = (cls, nregs[cls])
            nregs[cls] += 1
        scope.vectors[name] = [f"{name}.{c[0]}" for c in VECTOR_COMPONENTS[:n]]


def _decl_b128(scope: Scope, names: str, nregs: dict, line: int, text: str) -> None:
    """``.reg .b128 h;`` (sm_90+): a 128-bit register held as two 64-bit halves, low first --
    the operand the ``.b128`` instructions (``mov.b128 h, {lo, hi}``, the cluster launch control
    queries) read as a pair."""
    for part in split_top(names):
        name = part.strip()
        if not re.fullmatch(r"[%$\w]+", name):
            raise UnsupportedInstruction(".b128 register arrays are not supported", line, text)
        halves = [f"{name}#lo", f"{name}#hi"]
        for h in halves:
            scope.regs[h] = ("d", nregs["d"])
            nregs["d"] += 1
        scope.vectors[name] = halves


def _decl_branchtargets(scope: Scope, text: str, label_item, pc: int, line: int) -> None:
    """``tlist: .branchtargets L0, L1, ...;`` (PTX ISA 9.7.12.4, the list a ``brx.idx`` indexes):
    recorded under its label, resolved when a ``brx.idx`` names it."""
    names = [n.strip() for n in text[len(".branchtargets"):].split(",")]
    if label_item is None or label_item.kind != "label" or not names or not all(names):
        raise PTXParseError(".branchtargets needs a label and a list of labels (tlist: .branchtargets L0, L1;)",
                            line, text)
    scope.branchtargets[label_item.name] = (pc, names)


def _check_local(prog, v, used: int, limits, line: int, text: str) -> None:
    if used > limits.local_bytes:
        raise PTXParseError(f"{used} bytes of per-thread {v} memory declared; the emulator's limit is "
                            f"{limits.local_bytes} bytes (SimLimits.local_bytes)", line, text)


def decode_entry(module, entry, key="", limits=DEFAULT_LIMITS) -> Program:
    """Decode one parsed entry into a :class:`Program` (see module docstring). Declarations
    beyond ``limits`` (:class:`~cutedsl.sim.frontend.limits.SimLimits`) are a :class:`PTXParseError`."""
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
    prog.scopes = scopes        # by Instr.scope id: register names for diagnostics
    stack = [root]
    stmts = []
    prev = None
    for it in entry.items:
        sc = stack[-1]
        prev, last = it, prev
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
            elif t.startswith(".branchtargets"):
                _decl_branchtargets(sc, t, last, len(stmts), it.line)
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
    srcs = {}           # .loc -> "path:line" (one string per distinct location)
    for pc, (it, sc) in enumerate(stmts):
        src = srcs.get(it.loc)
        if src is None:
            src = srcs[it.loc] = module.source(it.loc)
        try:
            code.append(_decode(ctx, pc, it, sc, src))
        except PTXParseError as e:
            e.add_source(src if e.line == it.line else "")
            raise
    labels = set()
    for sc in scopes:
        labels.update(sc.labels.values())
    fuse(code, labels, BATCH_REGS)
    fold_chains(code, labels, BATCH_REGS, BATCH_WGMMA)
    # sentinel: falling off the end behaves like ret
    end = Instr(len(code), stmts[-1][0].line if stmts else entry.line, "<end of entry>", "ret", 0)
    ctx.ins = end
    end.fn = HANDLERS["ret"](ctx, end, [], [])
    code.append(end)
    return prog


def _decode(ctx, pc: int, it, sc, src: str) -> Instr:
    """One statement -> its :class:`Instr` (closure, guard, lockstep kind)."""
    text = it.text
    guard = None
    if text.startswith("@"):
        g, text2 = text[1:].split(None, 1)
        guard = g
        text = text2
    parts = text.split(None, 1)
    opfull = parts[0]
    ops = split_top(parts[1]) if len(parts) > 1 else []
    ins = Instr(pc, it.line, it.text, opfull, sc.id, src)
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
    # a handler marks its warp-uniform synchronisation instructions (registry.each_warp)
    ins.batch = BATCH_EACH if getattr(ins.fn, "each_warp", False) else _batchable(ctx, segs[0], segs[1:], ops)
    if segs[0] == "wgmma":
        ins.rbits = 0       # wgmma's own accumulator accesses are ordered by the hardware
    return ins


#: instructions that only compute on registers: one closure call may serve a batch of warps
_BATCH_OPS = frozenset((
    "add", "sub", "mul", "mad", "fma", "div", "rem", "abs", "neg", "min", "max", "and", "or", "xor",
    "not", "cnot", "shl", "shr", "bfe", "bfi", "prmt", "popc", "clz", "brev", "bfind", "copysign",
    "testp", "setp", "selp", "slct", "mov", "cvt", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos",
    "tanh", "cvta"))
#: special registers whose value is computed at the read (the virtual clock)
_TIMED_SREGS = frozenset(("%clock", "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"))


def _batchable(ctx, opcode, mods, ops) -> int:
    """The ``Instr.batch`` kind (registry): the instruction reads and writes registers only (no
    memory, no control flow, no clock), is a store to the CTA's shared memory
    (``warpbatch.WarpBatch.store``) or a wgmma issue -- running it for several warps at once is
    then indistinguishable from running it for each in turn -- or none of these."""
    store = opcode == "st" and ("shared" in mods or "shared::cta" in mods)
    if opcode == "shfl":
        # warp-synchronous, but a batch's warps have every lane at the PC: the closure shuffles
        # within each warp of the batch (warpops.py); ``d|p`` names two registers
        opcode = "mov"
        ops = [x for o in ops for x in o.split("|")]
    if opcode == "wgmma" and mods[:1] == ["mma_async"]:
        return BATCH_WGMMA      # whole warpgroups of a batch issue at once (wgmma.py)
    if opcode == "bra":
        return BATCH_BRANCH     # a uniform branch: the batch's PC moves (lockstep.py)
    if opcode not in _BATCH_OPS and not store:
        return NO_BATCH
    for s in ops:
        o = ctx.operand(s)
        items = o.items if o.kind == "vec" else (o,)
        for x in items:
            if x.kind in ("reg", "imm", "fimm", "sink", "sym") or (store and x.kind == "addr"):
                continue
            if x.kind == "sreg" and x.name not in _TIMED_SREGS:
                continue
            return NO_BATCH
    return BATCH_STORE if store else BATCH_REGS


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
    prog.shared_lines[v.name] = v.line
    prog.symbols[v.name] = ("shared", off)
