"""The shared-memory operands of an MMA atom read through matrix descriptors: the layout checks
both ``WarpgroupMMA`` (wgmma, sm_90) and ``Umma`` (tcgen05.mma, sm_100) make of an ``SmemTile``
before building its descriptor (the canonical layouts are the same on both)."""
from __future__ import annotations

from ..errors import LayoutError
from ..ir._lazy import lazy
from .mma_traits import mma_traits
from .wgmma_descriptor import Descriptor, SmemMatrix, descriptor_lo

S = lazy("cutedsl.ir.smem_tile")


class SmemOperands:
    """Shared-memory operand checks of an MMA atom whose A (``m`` rows) and B (``n`` rows) are
    read through matrix descriptors (wgmma on sm_90, tcgen05.mma on sm_100: the same canonical
    layouts). Needs ``m``, ``n``, ``dtype``, ``b_dtype``, ``a_major``, ``b_major``, ``traits``,
    ``label`` (the instruction, for messages) and ``descriptor_cls``."""

    descriptor_cls = None

    @property
    def a_rows(self) -> int:
        """Rows of A in this CTA's shared memory (``m``; half of it for a CTA-pair MMA)."""
        return self.m

    @property
    def b_rows(self) -> int:
        """Rows (N) of B in this CTA's shared memory (``n``; half of it for a CTA-pair MMA)."""
        return self.n

    def operand_layout(self, tile, role: str) -> SmemMatrix:
        """The descriptor layout of operand ``role`` (``"A"``: ``m x 64`` K-major; ``"B"``:
        ``n x 64``, K- or MN-major) read from ``tile`` (an ``SmemTile``). Raises ``TypeError``
        for a non-tile, ``LayoutError`` when the buffer's layout does not fit."""
        if not isinstance(tile, S.SmemTile):
            raise TypeError(f"{type(self).__name__} operand {role} must be a shared-memory tile "
                            f"(smem[name].tile(stage)), not {type(tile).__name__}: the descriptor's "
                            f"swizzle, LBO and SBO come from the buffer's layout")
        rows = self.a_rows if role == "A" else self.b_rows
        want = self.a_major if role == "A" else self.b_major
        dt = self.dtype if role == "A" else self.b_dtype
        tr = self.traits
        bad = []
        held = mma_traits(dt)                   # a packed type's buffers hold bytes (u8)
        if tile.dtype != held.storage:
            bad.append(f"dtype {tile.dtype} != {held.storage}" + (f" (the bytes of packed {dt})" if held.packed else ""))
        elif tile.major is not None and tile.major not in (tr.majors_a if role == "A" else tr.majors_b):
            bad.append(f"{tile.major}-major {dt} cannot be read (8-bit operands are K-major only)")
        if tile.major is None:
            bad.append("the buffer declares no major ('K' or 'MN')")
        elif want is not None and tile.major != want:
            bad.append(f"{tile.major}-major, needs {want}-major")
        if tile.swizzle != tr.swizzle:
            bad.append(f"swizzle {tile.swizzle} B, these descriptors need {tr.swizzle} B "
                       f"(one {tr.k_tile}-element K row)")
        last = tr.mn_box if tile.major == "MN" else tr.k_box
        if tile.shape[-1] != last or tile.nbytes != tr.tile_bytes(rows):
            bad.append(f"tile {list(tile.shape)} is not {rows} x {tr.k_tile} elements in rows of {tr.k_tile}")
        if bad:
            raise LayoutError(f"{self.label} {dt} operand {role} "
                              f"({rows} x {tr.k_tile}, {tr.swizzle}-B swizzle) does not match shared "
                              f"{tile.describe()}: {'; '.join(bad)}")
        return SmemMatrix(rows, dt, tile.major, tile.swizzle)

    def descriptor(self, tile, role: str) -> Descriptor:
        """The ``Descriptor`` of operand ``role`` (``"A"``/``"B"``) at ``tile`` (an
        ``SmemTile``; layout checked by :meth:`operand_layout`)."""
        layout = self.operand_layout(tile, role)
        return self.descriptor_cls(descriptor_lo(tile.address(), layout), layout)


__all__ = ["SmemOperands"]
