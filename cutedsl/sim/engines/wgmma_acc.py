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
"""
from __future__ import annotations

import numpy as np


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


class HeldTiles:
    """The f32 accumulator tiles warpgroup ``warps`` holds, by D-register tuple: (D register
    indices, (64, N) f32 tile, N, register bit mask)."""
    __slots__ = ("cta", "warps", "tiles")

    def __init__(self, cta, warps):
        self.cta, self.warps, self.tiles = cta, warps, {}

    def put(self, key, didx, tile, n, bits):
        self.tiles[key] = (didx, tile, n, bits)
        for w in self.warps:
            w.lazy_bits |= bits
            w.held = self

    def settle(self, bits):
        """Write back (to the registers) every held tile using a register of ``bits``."""
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
