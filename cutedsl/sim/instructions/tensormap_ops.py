"""Device-side tensor-map instructions (PTX ISA: ``tensormap.replace``, ``tensormap.cp_fenceproxy``).

``tensormap.replace.tile.<field>[.global|.shared::cta].b1024.<b32|b64> [addr], [ord,] new_val``
rewrites one field of the 128-byte object at ``addr`` (a generic write, in the emulator's
field layout: :mod:`cutedsl.sim.engines.tensormap`); a host-encoded map is first expanded into that
layout, so "copy a host map, patch its address" (grouped GEMM) works as well as "zero the
object and set every field" (Triton). ``tensormap.cp_fenceproxy.global.shared::cta.
tensormap::generic.release.<scope>.sync.aligned [dst], [src], 128`` copies the object from
shared to global memory; its fence half, like ``fence.proxy.tensormap::generic`` (decoded
with the other fences), needs no action in this eager, sequentially consistent emulator.
Objects must be 64-byte aligned; a TMA that uses a broken map is reported at its PTX line.
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import SimRuntimeError
from ..frontend.registry import handler
from ..engines.tensormap import FIELDS, SIZE, fields_of

# -- memory access of the 128-byte object ----------------------------------------------------

def _space(mods):
    return next((m for m in mods if m in ("global", "shared::cta")), "generic")


def _lane_mask(lane):
    m = np.zeros(32, bool)
    m[lane] = True
    return m


def read_object(w, space, addr, lane, ins, init=True) -> bytes:
    """The 128-byte object at ``addr``; ``init=False``: not judged by initcheck (``tensormap.replace``
    writes one field; the emulator reads the rest only to rewrite it)."""
    if addr % 64:
        raise SimRuntimeError(f"tensor-map object at 0x{addr:x} is not 64-byte aligned\n    at {ins.where()}")
    m, a = _lane_mask(lane), np.full(32, addr, np.uint64)
    return b"".join(w.load(space, a + np.uint64(16 * i), m, 1, 16, np.uint8, ins, init=init)[0].tobytes()
                    for i in range(8))


def write_object(w, space, addr, lane, blob: bytes, ins):
    if addr % 64:
        raise SimRuntimeError(f"tensor-map object at 0x{addr:x} is not 64-byte aligned\n    at {ins.where()}")
    m, a = _lane_mask(lane), np.full(32, addr, np.uint64)
    raw = np.frombuffer(blob, np.uint8)
    for i in range(8):
        w.store(space, a + np.uint64(16 * i), m, 1, 16, raw[None, 16 * i:16 * i + 16], ins)


def _lanes(w, m):
    return np.flatnonzero(w.valid if m is None else m)


def _per_lane(v, lanes):
    return np.broadcast_to(np.asarray(v), (32,))[lanes]


@handler("tensormap")
def dec_tensormap(ctx, ins, mods, ops):
    if mods[:2] == ["replace", "tile"]:
        return _dec_replace(ctx, ins, mods[2:], ops)
    if mods and mods[0] == "cp_fenceproxy":
        return _dec_cp_fenceproxy(ctx, ins, mods[1:], ops)
    ctx.unsupported("unsupported tensormap instruction (expected .replace.tile or .cp_fenceproxy)")


def _dec_replace(ctx, ins, mods, ops):
    if not mods or mods[0] not in FIELDS:
        ctx.unsupported(f"unsupported tensormap.replace field .{mods[0] if mods else ''}")
    field = mods[0]
    rtype, has_ord, nord = FIELDS[field]
    rest = mods[1:]
    space = _space(rest)
    for mm in rest:
        if mm not in ("global", "shared::cta", "b1024", "b32", "b64"):
            ctx.unsupported(f"unsupported tensormap.replace modifier .{mm}")
    if "b1024" not in rest or rtype not in rest:
        ctx.bad(f"tensormap.replace.tile.{field} needs .b1024.{rtype}")
    if len(ops) != (3 if has_ord else 2):
        ctx.bad(f"tensormap.replace.tile.{field} takes {'[addr], ord, new_val' if has_ord else '[addr], new_val'}")
    addr = ctx.addr(ops[0])
    ordinal = 0
    if has_ord:
        o = ctx.operand(ops[1])
        if o.kind != "imm" or not 0 <= o.value < nord:
            ctx.bad(f"ordinal of .{field} must be an immediate in 0..{nord - 1}")
        ordinal = o.value
    val = ctx.rd(ops[-1], "u64" if rtype == "b64" else "u32")

    def fn(w, g, m):
        lanes = _lanes(w, m)
        for lane, a, v in zip(lanes, _per_lane(addr(w), lanes), _per_lane(val(w), lanes)):
            f = fields_of(read_object(w, space, int(a), int(lane), ins, init=False))
            if has_ord:
                getattr(f, field)[ordinal] = int(v)
            elif field == "global_address" or int(v) <= 0xFF:
                setattr(f, field, int(v))
            else:
                raise SimRuntimeError(f"tensormap.replace .{field} value {int(v)} does not fit the field "
                                      f"(0..255)\n    at {ins.where()}")
            write_object(w, space, int(a), int(lane), f.pack(), ins)
    return fn


def _dec_cp_fenceproxy(ctx, ins, mods, ops):
    spaces = [mm for mm in mods if mm in ("global", "shared::cta")]
    if spaces != ["global", "shared::cta"] or "tensormap::generic" not in mods or "release" not in mods:
        ctx.unsupported("tensormap.cp_fenceproxy needs .global.shared::cta.tensormap::generic.release")
    for mm in mods:
        if mm not in ("global", "shared::cta", "tensormap::generic", "release", "cta", "cluster", "gpu", "sys",
                      "sync", "aligned"):
            ctx.unsupported(f"unsupported tensormap.cp_fenceproxy modifier .{mm}")
    if len(ops) != 3:
        ctx.bad("tensormap.cp_fenceproxy takes [dst], [src], size")
    dst, src = ctx.addr(ops[0]), ctx.addr(ops[1])
    size = ctx.operand(ops[2])
    if size.kind != "imm" or size.value != SIZE:
        ctx.bad("tensormap.cp_fenceproxy size must be the immediate 128")

    def fn(w, g, m):
        lanes = _lanes(w, m)
        done = set()
        for lane, d, s in zip(lanes, _per_lane(dst(w), lanes), _per_lane(src(w), lanes)):
            if (int(d), int(s)) in done:        # a warp-wide copy of one object happens once
                continue
            done.add((int(d), int(s)))
            write_object(w, "global", int(d), int(lane), read_object(w, "shared::cta", int(s), int(lane), ins), ins)
    return fn
