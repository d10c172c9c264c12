"""``call`` of the ``vprintf`` builtin (what ``gpu.printf`` lowers to), the only call the emulator runs.

``call.uni (retval0), vprintf, (param0, param1);`` reads, per active lane in lane order, the
generic address of the NUL-terminated format string (param0) and of the packed argument
buffer (param1; each argument naturally aligned: 4-byte ints unless ``l``/``ll``, doubles for
floating conversions, 8-byte pointers for ``%s``/``%p``), formats like C ``printf``, appends
the text to ``launch.printf`` and writes it to ``sys.stdout``. ``retval0`` receives the
number of arguments. Calls to other functions are rejected at load time.
"""
from __future__ import annotations

import re
import struct
import sys

import numpy as np

from ..frontend.errors import SimRuntimeError
from ..frontend.registry import handler

_SPEC = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+))?(hh|h|ll|l|z|j|t)?([diouxXeEfFgGcspa%])")


def _read_cstring(w, addr, ins, lane=0, limit=4096):
    out = bytearray()
    while len(out) < limit:
        chunk = w.read_generic_bytes(addr + len(out), 1, ins, lane)
        if chunk == b"\0":
            return out.decode(errors="replace")
        out += chunk
    return out.decode(errors="replace")


def format_printf(w, fmt, args_addr, ins, lane=0):
    off = 0
    parts = []
    pos = 0
    nargs = 0
    for m in _SPEC.finditer(fmt):
        parts.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, length, conv = m.groups()
        if conv == "%":
            parts.append("%")
            continue
        if conv in "eEfFgGa":
            size, kind = 8, "d"
        elif conv in "sp" or length in ("l", "ll", "z", "j", "t"):
            size, kind = 8, ("q" if conv in "di" else "Q")
        else:
            size, kind = 4, ("i" if conv in "dic" else "I")
        off = (off + size - 1) // size * size
        raw = w.read_generic_bytes(args_addr + off, size, ins, lane)
        off += size
        nargs += 1
        val = struct.unpack("<" + kind, raw)[0]
        spec = "%" + flags + (width or "") + ("." + prec if prec else "")
        if conv == "s":
            parts.append((spec + "s") % _read_cstring(w, val, ins, lane))
        elif conv == "p":
            parts.append(f"0x{val:x}")
        elif conv == "c":
            parts.append((spec + "c") % chr(val & 0xFF))
        elif conv == "u":
            parts.append((spec + "d") % val)
        elif conv == "a":
            parts.append(float(val).hex())
        else:
            parts.append((spec + conv.replace("i", "d")) % val)
    parts.append(fmt[pos:])
    return "".join(parts), nargs


@handler("call")
def dec_call(ctx, ins, mods, ops):
    for x in mods:
        if x != "uni":
            ctx.unsupported(f"unsupported call modifier .{x}")
    if len(ops) == 3:
        ret, target, args = ops
    elif len(ops) == 2:
        ret, (target, args) = None, ops
    else:
        ctx.unsupported("unsupported call form")
    target = target.strip()
    if target != "vprintf":
        ctx.unsupported(f"calls are only supported for the vprintf builtin, not {target!r}")
    names = [x.strip() for x in args.strip().strip("()").split(",")]
    if len(names) != 2:
        ctx.bad("vprintf takes two parameters")
    p0 = ctx.addr(f"[{names[0]}]")
    p1 = ctx.addr(f"[{names[1]}]")
    wret = None
    if ret:
        rname = ret.strip().strip("()").strip()
        wret = ctx.addr(f"[{rname}]")

    def fn(w, g, m):
        lanes = np.flatnonzero(w.valid if m is None else m)
        for ln in lanes:
            lm = np.zeros(32, bool)
            lm[ln] = True
            a0 = np.full(32, p0(w), np.uint64)
            fmt_addr = int(w.load("param", a0, lm, 8, 1, np.uint64, ins)[0, 0])
            args_addr = int(w.load("param", np.full(32, p1(w), np.uint64), lm, 8, 1, np.uint64, ins)[0, 0])
            fmt = _read_cstring(w, fmt_addr, ins, int(ln))
            try:
                text, nargs = format_printf(w, fmt, args_addr, ins, int(ln))
            except (TypeError, ValueError, struct.error) as e:
                raise SimRuntimeError(f"vprintf: cannot format {fmt!r}: {e}\n    at {ins.where()}") from None
            w.launch.printf.append(text)
            sys.stdout.write(text)
            if wret is not None:
                w.store("param", np.full(32, wret(w), np.uint64), lm, 4, 1,
                        np.array([[nargs]], np.uint32), ins)
    return fn
