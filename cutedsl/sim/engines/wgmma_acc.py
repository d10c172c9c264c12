"""wgmma accumulator fragments: the f32 fragment <-> tile transposes, and the tiles a warpgroup
holds between chained MMAs.

``wgmma.mma_async`` chains on one accumulator (the k-loop issues 4-16 of them before a
``wait_group``) would each scatter the (64, N) result into the 128 threads' registers and
gather it back for the next one. In eager mode the emulator instead keeps the rounded f32 tile
(:class:`HeldTiles`) and writes the registers only when an instruction other than a wgmma names
one of them -- the scheduler checks ``Instr.rbits`` against ``Warp.lazy_bits`` before every
instruction, so every observer (including code that reads the accumulator before its
``wait_group``, which the race detector reports first) sees exactly what the eager register
writes would have produced.

The MMAs a warpgroup issues in one lockstep run (:mod:`cutedsl.sim.machine.lockstep`: the k-steps
of a stage, both m64 halves) are **chained** (:meth:`HeldTiles.queue`): their operands are
gathered at once and multiplied as one stack, then each is added to its accumulator and rounded
to f32 in issue order, as before -- bit for bit the per-instruction result (each slice of the
stacked ``matmul`` is the same BLAS product as the instruction's own). The chain runs before
anything could observe it: a register read of a held tile (``settle``), a shared-memory store
of the run, and the run's end.
"""
from __future__ import annotations

import numpy as np

from .wgmma_layout import load_operand, widen


def frag_to_tile(regs, n: int):
    """The (64, n) f32 tile held by f32 accumulator fragments ``regs`` (128 threads, n/2): thread
    t = 32 q + 4 g + j holds rows 16 q + g (+ 8 h) and columns 8 c + 2 j + e -- :func:`d_map`
    as a transpose: regs axes (q, g, j, c, h, e) -> tile axes (q, h, g, c, j, e). The pair
    (e = 0, 1) moves as one 8-byte element (a third of the cost of moving floats)."""
    pairs = np.ascontiguousarray(regs, np.float32).view(np.uint64)
    return pairs.reshape(4, 8, 4, n // 8, 2).transpose(0, 4, 1, 3, 2).reshape(64, n // 2).view(np.float32)


def tile_to_frag(tile, n: int):
    """Inverse of :func:`frag_to_tile`: (64, n) f32 -> (128 threads, n/2 registers)."""
    pairs = np.ascontiguousarray(tile, np.float32).view(np.uint64)
    return pairs.reshape(4, 2, 8, n // 8, 4).transpose(0, 2, 4, 3, 1).reshape(128, n // 4).view(np.float32)


def rounded(prod, sign: float, c):
    """The f32 tile ``fl32(sign * prod + c)`` of an MMA (``prod``: the float64 product A B, ``c``:
    the f32 accumulator tile or None): one rounding per instruction ("exact" mode, wgmma.py).
    Overflow to infinity raises no warning: a launch runs under ``np.errstate(all="ignore")``."""
    if sign != 1.0:
        prod = -prod
    if c is not None:
        prod += c
    return prod.astype(np.float32)


class MmaOp:
    """One queued ``wgmma.mma_async`` with an f32 accumulator: the D registers (``key``: their
    tuple, ``didx``, ``dbits``; ``rbits``: every register it names), N, scale-d, the product's sign,
    and its operands -- A as a float64 tile (from registers) or element indices in shared memory
    (``a_ei``, size ``ea``, type ``dta``), B as element indices (``b_ei``, ``eb``, ``dtb``)."""
    __slots__ = ("key", "didx", "dbits", "rbits", "n", "scale_d", "sign", "A", "a_ei", "ea", "dta", "b_ei", "eb",
                 "dtb")

    def __init__(self, key, didx, dbits, rbits, n, scale_d, sign, A, a_ei, ea, dta, b_ei, eb, dtb):
        self.key, self.didx, self.dbits, self.rbits, self.n = key, didx, dbits, rbits, n
        self.scale_d, self.sign, self.A, self.a_ei, self.ea, self.dta = scale_d, sign, A, a_ei, ea, dta
        self.b_ei, self.eb, self.dtb = b_ei, eb, dtb


_INDEX = {}         # id()s of a chain's operand index arrays -> (the arrays, their concatenation)


def _chain_index(arrays):
    """The concatenation of ``arrays`` (operand element indices, cached by operand_addrs), cached:
    a pipeline's stages repeat the same chains."""
    key = tuple(id(a) for a in arrays)
    hit = _INDEX.get(key)
    if hit is None:
        if len(_INDEX) > 256:
            _INDEX.clear()
        hit = _INDEX[key] = (arrays, np.concatenate([a.reshape(-1) for a in arrays]))   # keeps the ids alive
    return hit[1]


def products(cta, ops):
    """The float64 products A B (64, N) of ``ops`` in order: operands from shared memory of one
    8/16-bit float type and one shape are gathered with one index and multiplied as one stack."""
    o = ops[0]
    n = len(ops)
    same_b = n > 1 and np.dtype(o.dtb).kind not in "iu" and all(
        x.eb == o.eb and x.dtb is o.dtb and x.n == o.n and x.b_ei.shape == o.b_ei.shape for x in ops)
    if same_b and all(x.a_ei is not None and x.ea == o.eb and x.dta is o.dtb and x.a_ei.shape == o.a_ei.shape
                      for x in ops):
        k = o.a_ei.shape[1]
        v = widen(cta.sv[o.ea][_chain_index(tuple(x.a_ei for x in ops) + tuple(x.b_ei for x in ops))], o.dta)
        A = v[:n * 64 * k].reshape(n, 64, k)
        B = v[n * 64 * k:].reshape(n, o.n, k).transpose(0, 2, 1)
        return np.matmul(A, B)      # slice i: the same BLAS call as ops[i]'s own A @ B
    if same_b and all(x.A is not None and x.A.shape == o.A.shape for x in ops):
        # A from registers (FlashAttention's P V): the tiles stacked, B gathered with one index
        k = o.A.shape[1]
        B = widen(cta.sv[o.eb][_chain_index(tuple(x.b_ei for x in ops))], o.dtb).reshape(n, o.n, k)
        return np.matmul(np.stack([x.A for x in ops]), B.transpose(0, 2, 1))   # the same BLAS calls
    return [(x.A if x.A is not None else load_operand(cta, x.a_ei, x.ea, x.dta))
            @ load_operand(cta, x.b_ei, x.eb, x.dtb).T for x in ops]


class HeldTiles:
    """The f32 accumulator tiles warpgroup ``warps`` holds, by D-register tuple: (D register
    indices, (64, N) f32 tile, N, register bit mask); ``chain``: the MMAs queued for it."""
    __slots__ = ("cta", "warps", "tiles", "chain")

    def __init__(self, cta, warps):
        self.cta, self.warps, self.tiles, self.chain = cta, warps, {}, []

    def put(self, key, didx, tile, n, bits):
        self.tiles[key] = (didx, tile, n, bits)
        for w in self.warps:
            w.lazy_bits |= bits
            w.held = self

    def queue(self, op: MmaOp):
        """Queue ``op`` (module docstring); its D registers count as held from now on."""
        if not self.chain:
            self.cta.mma_chains.append(self)
        self.chain.append(op)
        for w in self.warps:
            w.lazy_bits |= op.dbits
            w.held = self

    def run_chain(self):
        """Compute the queued MMAs, in issue order."""
        ops, self.chain = self.chain, []
        self.cta.mma_chains.remove(self)
        lanes = slice(32 * self.warps[0].wid, 32 * self.warps[-1].wid + 32)
        for op, prod in zip(ops, products(self.cta, ops)):
            other = 0
            for k, t in self.tiles.items():
                if k != op.key:
                    other |= t[3]
            if other & op.rbits:        # registers another held tile owns: write it back first
                self.settle(other & op.rbits)
            c = None
            if op.scale_d:
                t = self.tiles.get(op.key)
                c = t[1] if t is not None else frag_to_tile(
                    self.cta.files["r"][op.didx, lanes].T.view(np.float32), op.n)
            self.put(op.key, op.didx, rounded(prod, op.sign, c), op.n, op.dbits)

    def settle(self, bits):
        """Write back (to the registers) every held tile using a register of ``bits``."""
        if self.chain:
            self.run_chain()
        lanes = slice(32 * self.warps[0].wid, 32 * self.warps[-1].wid + 32)
        rest = 0
        for key, (didx, tile, n, b) in list(self.tiles.items()):
            if b & bits:
                self.cta.files["r"][didx, lanes] = tile_to_frag(tile, n).view(np.uint32).T
                del self.tiles[key]
            else:
                rest |= b
        for w in self.warps:
            w.lazy_bits = rest
