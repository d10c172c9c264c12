"""``ldmatrix`` / ``stmatrix`` (m8n8, .b16; PTX ISA 9.7.14.5.15 / 9.7.14.5.16): warp-collective
moves of 8x8 matrices of 16-bit elements between shared memory and registers, each thread giving one
row address. A lockstep batch of warps runs them in one gather or scatter, in the order the scheduler
steps the warps (``registry.each_warp``).
"""
from __future__ import annotations

import sys

import numpy as np

from ..frontend.errors import SimRuntimeError
from ..frontend.registry import BLOCKED, each_warp, handler
from ..machine.convergence import Converge
from ..machine.memory import OFF_MASK_U64, RANK_SHIFT_U64


_MATRIX_TABLES = {}


def _matrix_tables(nmat, trans):
    """(index of the row-address lane, byte offset) per (thread, matrix, half) for stmatrix/ldmatrix
    m8n8.b16 (PTX ISA 9.7.14.5.15 ldmatrix / 9.7.14.5.16 stmatrix: thread ``8 j + r`` gives row ``r``
    of matrix ``j``; without .trans thread ``t`` holds row ``t // 4``, columns ``2 (t % 4)`` and
    ``+1``; with .trans column ``t // 4`` of rows ``2 (t % 4)`` and ``+1``): the byte addresses are
    ``row_address[index] + offset``."""
    key = (nmat, trans)
    tab = _MATRIX_TABLES.get(key)
    if tab is None:
        t = np.arange(32)[:, None, None]
        j = np.arange(nmat)[None, :, None]
        h = np.arange(2)[None, None, :]
        if trans:
            row, off = 8 * j + 2 * (t % 4) + h, 2 * (t // 4) + 0 * h
        else:
            row, off = 8 * j + t // 4 + 0 * h, 4 * (t % 4) + 2 * h
        tab = _MATRIX_TABLES[key] = (np.broadcast_to(row, (32, nmat, 2)), np.broadcast_to(off, (32, nmat, 2)))
    return tab


def _dec_matrix(ctx, ins, mods, ops, store):
    nmat, trans = None, False
    for x in mods:
        if x in ("x1", "x2", "x4"):
            nmat = int(x[1])
        elif x == "trans":
            trans = True
        elif x in ("sync", "aligned", "m8n8", "shared", "shared::cta", "b16"):
            pass
        else:
            ctx.unsupported(f"unsupported {'stmatrix' if store else 'ldmatrix'} modifier .{x}")
    if nmat is None or "m8n8" not in mods:
        ctx.unsupported("only .m8n8 with .x1/.x2/.x4")
    aop, rop = (ops[0], ops[1]) if store else (ops[1], ops[0])
    addr = ctx.addr(aop)
    regs = ctx.operand(rop)
    if regs.kind != "vec" or len(regs.items) != nmat:
        ctx.bad(f"needs {nmat} registers in braces")
    if store:
        readers = [ctx.rd(x, "b32") for x in regs.items]
    else:
        writers = [ctx.wr(x, "b32")[0] for x in regs.items]

    row, offt = _matrix_tables(nmat, trans)
    little = sys.byteorder == "little"

    def fn(w, g, m):
        if m is not g.m or g.count != 32:
            if g.count != w.nlive:
                g.blocked = Converge(ins, w)
                return BLOCKED
            raise SimRuntimeError(f"{ins.opcode} needs all 32 lanes\n    at {ins.where()}")
        p = addr(w)
        if type(p) is not np.ndarray or p.shape != (32,) or p.dtype != np.uint64:
            p = np.broadcast_to(np.asarray(p, np.uint64), (32,))
        cta = w.cta
        if np.count_nonzero((p >> RANK_SHIFT_U64) != cta.rank):
            raise SimRuntimeError(f"{ins.opcode} address is not a shared::cta address of this CTA\n    at {ins.where()}")
        off = (p & OFF_MASK_U64).astype(np.int64)
        ad = off[row] + offt                # _matrix_addrs: (thread, matrix, half) byte addresses
        # every row address 16-byte aligned (its low bits are p's) makes every ad even and >= 0
        if int(np.bitwise_or.reduce(off)) & 15 or int(ad.max()) + 2 > cta.smem_size:
            raise SimRuntimeError(f"{ins.opcode} row address out of shared memory or not 16-byte aligned\n"
                                  f"    at {ins.where()}")
        v16 = cta.sv[2]
        if store:
            # one scatter, in the order matrix, half, thread (a repeated address keeps the last);
            # a register's low half is its first uint16 on a little-endian host
            val = np.empty((nmat, 32), np.uint32)
            for j, r in enumerate(readers):
                val[j] = r(w)
            if little:
                halves = val.view(np.uint16).reshape(nmat, 32, 2).transpose(0, 2, 1)
            else:
                halves = np.stack([val & 0xFFFF, val >> 16], axis=1).astype(np.uint16)  # (nmat, 2, 32)
            v16[ad.transpose(1, 2, 0).reshape(-1) >> 1] = halves.reshape(-1)
            if cta.shadow is not None:
                cta.race_access(ad.reshape(-1), 2, w, ins, True, "stmatrix")
        else:
            if cta.shadow is not None:
                cta.race_access(ad.reshape(-1), 2, w, ins, False, "ldmatrix")
            if little:                      # (lo, hi) uint16 pairs are the uint32 lo | hi << 16
                v32 = v16[ad >> 1].view(np.uint32).reshape(32, nmat)
                for j, wr in enumerate(writers):
                    wr(w, m, v32[:, j])
            else:
                for j, wr in enumerate(writers):
                    lo = v16[ad[:, j, 0] // 2].astype(np.uint32)
                    hi = v16[ad[:, j, 1] // 2].astype(np.uint32)
                    wr(w, m, lo | (hi << 16))

    def batch(b):
        # a lockstep batch, every address valid: one gather or scatter (in the stepping order: a
        # repeated address keeps the last warp's value) and each warp's race check in that order
        # (checks never read the bytes); else each warp's own run in turn, so an address error
        # and any race before it read exactly as when stepped
        ws = b.members()
        p = addr(b)
        k = 32 * len(ws)
        if type(p) is not np.ndarray or p.shape != (k,) or p.dtype != np.uint64:
            p = np.broadcast_to(np.asarray(p, np.uint64), (k,))
        cta = b.cta
        off = (p & OFF_MASK_U64).astype(np.int64)
        ad = off.reshape(-1, 32)[:, row] + offt          # (warp, thread, matrix, half)
        if (np.count_nonzero((p >> RANK_SHIFT_U64) != cta.rank) or int(np.bitwise_or.reduce(off)) & 15
                or int(ad.max()) + 2 > cta.smem_size or not little):
            for x in ws:
                fn(x, x.groups[0], None)
            return None
        v16 = cta.sv[2]
        lo = b.lo
        order = [x.wid - lo for x in ws]
        if store:
            val = np.empty((nmat, k), np.uint32)
            for j, r in enumerate(readers):
                val[j] = r(b)
            halves = val.view(np.uint16).reshape(nmat, -1, 32, 2).transpose(1, 0, 3, 2)[order]
            v16[ad[order].transpose(0, 2, 3, 1).reshape(-1) >> 1] = halves.reshape(-1)
        if cta.shadow is not None:
            what = "stmatrix" if store else "ldmatrix"
            for x, i in zip(ws, order):
                cta.race_access(ad[i].reshape(-1), 2, x, ins, store, what)
        if not store:
            v32 = np.ascontiguousarray(v16[ad >> 1]).view(np.uint32).reshape(k, nmat)
            for j, wr in enumerate(writers):
                wr(b, None, v32[:, j])
        return None

    # warp-collective (.sync.aligned, PTX ISA 9.7.14.5.15/16): a lockstep batch runs it for its
    # warps as the scheduler would have stepped them (registry.each_warp; every lane is at the PC)
    return each_warp(fn, batch)


@handler("stmatrix")
def dec_stmatrix(ctx, ins, mods, ops):
    return _dec_matrix(ctx, ins, mods, ops, True)


@handler("ldmatrix")
def dec_ldmatrix(ctx, ins, mods, ops):
    return _dec_matrix(ctx, ins, mods, ops, False)
