"""Static SASS loop analysis: instructions per iteration of a kernel's main loop.

A loop is a backward branch ``BRA `(.L_x_N)`` at address ``e`` to a label at ``s <= e``; its
body is every instruction in ``[s, e]``. ptxas moves the retry paths of blocking waits
(``mbarrier.try_wait`` loops) out of line, after the kernel's exit: they jump back into the
loop from behind it, so they form larger ranges; :func:`hot_loop` takes the *smallest* loop
that contains a given opcode (``HGMMA`` for a GEMM main loop), which is the steady-state
loop body, conditional refill code included (it is in the body, executed when taken).
"""
from __future__ import annotations

import collections
import re

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)(.*)$")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def parse(text: str) -> tuple:
    """``(instructions, labels)``: instructions as ``(address, opcode, full line)`` in order,
    labels as ``{name: address of the next instruction}``."""
    insns, labels, pending = [], {}, []
    for line in text.splitlines():
        s = line.strip()
        m = _LABEL.match(s)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSN.search(s)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            insns.append((addr, m.group(2), s))
    return insns, labels


def loops(text: str) -> list:
    """Every backward-branch range as ``(start, end, [opcodes])``, smallest first."""
    insns, labels = parse(text)
    out = []
    for addr, op, line in insns:
        if op != "BRA":
            continue
        t = _TARGET.search(line)
        if t and t.group(1) in labels and labels[t.group(1)] <= addr:
            start = labels[t.group(1)]
            out.append((start, addr, [o for a, o, _ in insns if start <= a <= addr]))
    return sorted(out, key=lambda r: len(r[2]))


def hot_loop(text: str, opcode: str = "HGMMA") -> dict:
    """The smallest loop containing ``opcode``: ``{"instructions": n, "histogram": {op: count},
    "start": addr, "end": addr}``. Raises ``ValueError`` when no loop contains it."""
    for start, end, ops in loops(text):
        if opcode in ops:
            return {"instructions": len(ops), "histogram": dict(sorted(collections.Counter(ops).items())),
                    "start": start, "end": end}
    raise ValueError(f"no loop in this SASS contains {opcode}")


def kernel_hot_loop(kernel, opcode: str = "HGMMA") -> dict:
    """:func:`hot_loop` of a ``CompiledKernel`` (disassembles its cubin with nvdisasm)."""
    from .toolchain import sass
    return hot_loop(sass(kernel.cubin), opcode)


__all__ = ["parse", "loops", "hot_loop", "kernel_hot_loop"]
