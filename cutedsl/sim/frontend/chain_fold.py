"""Chain folding: the register instructions between the ``wgmma.mma_async`` of one chain run
before the chain, as one fused plan, so a lockstep batch issues the chain's MMAs back to back.

A GEMM k-tile issues its MMAs as a run like ``setp.ne.b32 p, 1, 0; wgmma ... p; add.s64 d1, d0,
2; add.s64 e1, e0, 128; setp.ne.b32 p, 1, 0; wgmma ...`` (each MMA in an inline-asm scope that
sets its scale-d predicate; the descriptors of the next MMA advanced between them). Each of
those register instructions is one closure call of a lockstep batch, and fused blocks
(:mod:`cutedsl.sim.frontend.fusion`) cannot merge them across the MMAs. A :class:`ChainFold` at
the run's first instruction lists them; :mod:`cutedsl.sim.machine.lockstep` runs its plan once
and then only the MMAs (every instruction still counts as executed, in program order).

**Exactness.** Register instructions have no effect but their destination register (PTX ISA
9.7: no memory, no control flow, no clock), so running one earlier is unobservable unless an MMA
between its old and new place reads or writes a register it writes, or writes one it reads. The
fold is built only when no such MMA exists, with one exception: an instruction of constant
sources only (``setp.ne.b32 p, 1, 0``) that repeats an earlier one of the run (same operation,
constants and destination, no write of that register in between) rewrites the value the
register already holds, so it is dropped from the plan instead of moved. The MMAs read their
operands at issue (PTX ISA 9.7.15.5.2, wgmma.mma_async) and therefore see exactly the values the
program order gives them. The fold's registers are disjoint from every register its MMAs name,
so the lockstep batch's accumulator-ownership check (an unretired wgmma writing one of them) is
decided once at the start, as it would have been at each instruction.
"""
from __future__ import annotations

import numpy as np

from .fusion import MIN_SAVED, _plan, _regs


class ChainFold:
    """Instructions ``pc .. pc + n - 1``: ``steps`` (the register instructions' plan, callables of
    a lockstep batch), ``regpcs`` (the PCs of those register instructions: the batch steps over
    them), ``rbits`` (the 32-bit registers they name, for the ownership check)."""
    __slots__ = ("n", "steps", "regpcs", "rbits")

    def __init__(self, n, steps, regpcs, rbits):
        self.n, self.steps, self.regpcs, self.rbits = n, steps, regpcs, rbits

    def run(self, b):
        for s in self.steps:
            s(b)


def fold_chains(code, label_pcs, batch_regs, batch_wgmma):
    """Attach a :class:`ChainFold` to the first instruction of every run of unguarded register
    instructions (``batch_regs`` with a VecForm) and unguarded wgmmas (``batch_wgmma`` with
    ``Instr.regs``) that no label splits, holds at least two wgmmas and may be folded (see the
    module docstring); the run ends at its last wgmma."""
    n = len(code)
    pc = 0
    while pc < n:
        start = pc
        while pc < n and _member(code[pc], batch_regs, batch_wgmma) and (pc == start or pc not in label_pcs):
            pc += 1
        if pc == start:
            pc += 1
            continue
        end = pc
        while end > start and code[end - 1].batch != batch_wgmma:
            end -= 1                # the run ends at its last wgmma
        first = start
        while True:
            # the fold starts after the last register instruction that names one of the MMAs'
            # 32-bit registers (e.g. the zeroing of the accumulators before a tile's first MMA)
            bits = _mma_bits(code[first:end], batch_wgmma)
            c = next((k for k in range(end - 1, first - 1, -1)
                      if code[k].batch != batch_wgmma and code[k].rbits & bits), None)
            if c is None:
                break
            first = c + 1
        run = code[first:end]
        if sum(1 for i in run if i.batch == batch_wgmma) >= 2:
            fold = _fold(run, batch_wgmma)
            if fold is not None:
                code[first].fold = fold


def _member(ins, batch_regs, batch_wgmma) -> bool:
    if ins.guard >= 0:
        return False
    if ins.batch == batch_regs:
        return ins.vec is not None
    return ins.batch == batch_wgmma and ins.regs is not None


def _fold(run, batch_wgmma):
    """The ChainFold of ``run`` (register instructions and wgmmas), or None when an MMA orders a
    register instruction (or too little is saved)."""
    mma_bits = _mma_bits(run, batch_wgmma)
    kept, regpcs = [], []
    read = set()                    # registers the MMAs so far read
    last = {}                       # register -> VecForm key of its latest write, when constant
    rbits = 0
    for ins in run:
        if ins.batch == batch_wgmma:
            read |= ins.regs[0]
            for r in ins.regs[1]:
                last[r] = None
            continue
        regpcs.append(ins.pc)
        rbits |= ins.rbits
        if ins.rbits & mma_bits:
            return None             # names an accumulator or register-A operand
        wr = _regs(ins.vec)[1]
        const = all(s[0] == "c" for s in ins.vec.srcs)
        if const and last.get(wr) == ins.vec.key:
            continue                # rewrites the value its register holds: dropped
        if wr in read:
            return None             # an earlier MMA reads what it writes
        last[wr] = ins.vec.key if const else None
        kept.append(ins)
    steps = _plan(kept, _key) if kept else []
    if len(regpcs) - len(steps) < MIN_SAVED:
        return None
    return ChainFold(len(run), steps, frozenset(regpcs), rbits)


#: integer add / sub without .sat / .cc wrap modulo 2^n element by element (PTX ISA 9.7.1.1,
#: 9.7.1.2): one numpy call over rows with different constants gives each row its own result
_STACKABLE = {f"{op}.{t}" for op in ("add", "sub") for t in ("s16", "u16", "s32", "u32", "s64", "u64")}


def _key(v):
    """The plan's grouping key: :attr:`VecForm.key`, with the constants' values left out for
    :data:`_STACKABLE` operations (a descriptor advance ``add.s64 d, s, 514`` groups with
    ``add.s64 e, t, 128``)."""
    k = v.key
    if k[0] not in _STACKABLE:
        return k
    return k[:3] + (tuple(("c", np.asarray(s[1]).dtype.str) if s[0] == "c" else ks
                          for s, ks in zip(v.srcs, k[3])),)


def _mma_bits(run, batch_wgmma) -> int:
    """The 32-bit registers any MMA of ``run`` names (``Instr.rbits`` of a wgmma is 0)."""
    bits = 0
    for ins in run:
        if ins.batch == batch_wgmma:
            for cls, i in ins.regs[0] | ins.regs[1]:
                if cls == "r":
                    bits |= 1 << i
    return bits
