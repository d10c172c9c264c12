"""Register -> swizzled shared-memory store of a WGMMA operand (accumulator fragment in, WGMMA
A or B tile out), its address pattern derived from the buffer's declared layout.

A computed matrix that the next WGMMA reads from shared memory (FlashAttention's P when it goes
through shared memory, the backward pass' dS, a GEMM chain's intermediate) must land exactly in
the canonical layout the matrix descriptor describes: 128-byte rows, 16-byte chunks swizzled by
the row index, MN-major operands in boxes of 64 columns. Written by hand this is where a wrong
XOR gives a silently wrong product; here the tile (``SmemTile``) says its dtype, swizzle and major,
the atom checks them against what a WGMMA descriptor of that operand reads
(:class:`~cutedsl.atom.wgmma.SmemMatrix`, :class:`~cutedsl.atom.mma_traits.MmaTraits`) and refuses
a mismatch with ``LayoutError`` while the kernel is built.

Instruction: ``stmatrix.sync.aligned.m8n8.x4[.trans].shared.b16`` (PTX ISA "Warp-level matrix
store instruction: stmatrix"): one per 16 x 16 block of a warp's accumulator rows. Each lane addresses one 16-byte row of an
8 x 8 matrix -- one swizzle chunk, which the swizzle moves whole, so every address is the
swizzled address of its chunk (:func:`~cutedsl.ir.smem_tile.swizzle_offset`). Where the operand's
contiguous dimension is the accumulator's row dimension (A stored M-major, B stored K-major) the
``.trans`` form writes the transposed blocks.

Orientation: the accumulator holds the operand as the MMA multiplies it -- A is ``M x K``
(accumulator rows = M), B is ``K x N`` (accumulator rows = K). The tile receives one k-tile:
A: all ``64 * m_blocks`` rows, columns ``col0 .. col0 + 64``; B: the 64 rows (K), columns
``col0 .. col0 + N`` with N the tile's row count.
"""
from __future__ import annotations

from ..arch import DEFAULT
from ..errors import LayoutError
from ..ir._lazy import lazy
from .mma_traits import ATOM_M, CORE_ROWS, DEFAULT_SWIZZLE
from .wgmma import FRAG_PAIR, FRAG_WARP_ROWS, SmemMatrix

V = lazy("cutedsl.ir.values")
S = lazy("cutedsl.ir.smem_tile")
stm = lazy("cutedsl.atom.stmatrix")

BLOCK = 16          #: rows and columns of the accumulator one stmatrix.x4 stores (per warp)
X4 = 4              #: 8 x 8 matrices (registers) of one stmatrix.x4
ROLES = ("A", "B")


def _trans(role: str, major: str) -> bool:
    # the accumulator's columns are contiguous in A K-major (K) and B MN-major (N)
    return (role == "A") == (major == "MN")


def check_operand_tile(acc, tile, role: str, col0: int = 0) -> SmemMatrix:
    """The :class:`SmemMatrix` a WGMMA reads ``tile`` through as operand ``role``, after checking
    that the accumulator ``acc`` (its part from column ``col0``) can be stored there. Raises
    ``TypeError`` for a non-tile, ``ValueError`` for a role other than "A"/"B", ``LayoutError``
    naming the buffer for a layout a WGMMA descriptor cannot read or a shape that does not fit."""
    if not isinstance(tile, S.SmemTile):
        raise TypeError(f"store_operand needs a shared-memory tile (smem[name].tile(stage)), not "
                        f"{type(tile).__name__}: the swizzle and major come from the buffer's layout")
    if role not in ROLES:
        raise ValueError(f"store_operand role must be 'A' or 'B', got {role!r}")
    what = f"store_operand of a {acc.m_blocks * ATOM_M}x{acc.n} accumulator as WGMMA operand {role}"
    if tile.dtype not in stm.PACKED:
        raise LayoutError(f"{what}: shared {tile.describe()} must hold f16 or bf16 (stmatrix stores 16-bit "
                          f"elements), got {tile.dtype}")
    if tile.major is None:
        raise LayoutError(f"{what}: shared {tile.describe()} declares no major ('K' or 'MN'): declare the "
                          f"buffer with major= as the WGMMA that reads it needs")
    if tile.swizzle != DEFAULT_SWIZZLE:
        raise LayoutError(f"{what}: shared {tile.describe()} is no WGMMA operand layout: the descriptors read "
                          f"{DEFAULT_SWIZZLE}-byte swizzled operands; declare the buffer with swizzle="
                          f"{DEFAULT_SWIZZLE}")
    try:
        layout = SmemMatrix(tile.shape[0], tile.dtype, tile.major, tile.swizzle)
    except ValueError as e:
        raise LayoutError(f"{what}: shared {tile.describe()} is no WGMMA operand layout: {e}") from None
    t = layout.traits
    rows = tile.shape[0]                    # M or N of the operand (MN-major: boxes of mn_box stacked)
    if len(tile.shape) != 2 or tile.shape[1] != t.k_box or tile.nbytes != t.tile_bytes(rows):
        raise LayoutError(f"{what}: shared {tile.describe()} is not one k-tile [{rows} x {t.k_tile}] in rows of "
                          f"{t.row_bytes} B")
    acc_rows = acc.m_blocks * ATOM_M
    need_rows, cols = (rows, t.k_tile) if role == "A" else (t.k_tile, rows)
    if acc_rows != need_rows or col0 % BLOCK or not 0 <= col0 <= acc.n - cols:
        raise LayoutError(f"{what}: shared {tile.describe()} takes {need_rows} accumulator rows and columns "
                          f"col0 .. col0 + {cols}, col0 a multiple of {BLOCK}; got {acc_rows} rows, col0 {col0!r}")
    if rows % BLOCK:
        raise LayoutError(f"{what}: shared {tile.describe()} has {rows} rows, not a multiple of {BLOCK}")
    return layout


def store_operand(acc, tile, role: str, col0: int = 0, warpgroup_thread=None) -> None:
    """Round the f32 accumulator ``acc`` to the tile's dtype (``cvt.rn``) and store the part
    operand ``role`` takes (see the module docstring) into ``tile`` in the layout its buffer
    declares, with ``stmatrix``; afterwards ``tile`` is a valid ``role`` operand of a WGMMA
    (``WarpgroupMMA.mma``). All 128 threads of the warpgroup call it. Before a WGMMA (async
    proxy) reads the tile, every writing thread must ``fence_proxy_async()`` and the warpgroup
    pass a barrier (PTX ISA, memory consistency model: proxies).
    ``warpgroup_thread`` defaults to ``tid.x % 128``. Errors: see :func:`check_operand_tile`."""
    layout = check_operand_tile(acc, tile, role, col0)
    t = layout.traits
    trans = _trans(role, layout.major)
    a = DEFAULT
    wt = V.thread_idx() % a.warpgroup_threads if warpgroup_thread is None else warpgroup_thread
    lane = wt % a.warp_threads
    q, r8 = lane // CORE_ROWS, lane % CORE_ROWS
    # the chunk this lane addresses, relative to its warp's 16 x 16 block: rows, columns
    half_r, half_c = (q % 2) * CORE_ROWS, (q // 2) * CORE_ROWS
    d_r, d_c = (half_r, half_c + r8) if trans else (half_r + r8, half_c)
    warp_row = (wt // a.warp_threads) * FRAG_WARP_ROWS
    base = tile.address()
    eb = t.elem_bytes
    ncols = t.k_tile if role == "A" else tile.shape[0]
    for b in range(acc.m_blocks):
        for jj in range(col0 // BLOCK, (col0 + ncols) // BLOCK):
            ar, ac = warp_row + d_r + ATOM_M * b, d_c + BLOCK * jj - col0
            mn, k = (ar, ac) if role == "A" else (ac, ar)
            if layout.major == "K":
                row, cb = mn, k * eb
            else:                               # boxes of mn_box columns, k_tile rows each
                row, cb = (mn // t.mn_box) * t.k_tile + k, (mn % t.mn_box) * eb
            off = S.swizzle_offset(V.u32(row * t.row_bytes + cb), tile.swizzle)
            first = jj * (BLOCK // FRAG_PAIR)  # accumulator registers of columns 16 jj .. 16 jj + 15
            regs = [stm.pack_b16x2(acc.get(b, first + FRAG_PAIR * r), acc.get(b, first + FRAG_PAIR * r + 1),
                                   tile.dtype) for r in range(X4)]
            stm.stmatrix(base + V.to_type(off, "i64", signed=False), regs, trans=trans)


__all__ = ["store_operand", "check_operand_tile", "ROLES"]
