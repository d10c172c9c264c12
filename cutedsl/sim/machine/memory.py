"""Byte-addressed memories and the generic address map.

Address map (all addresses are 64-bit integers):

================================  =====================================================
global allocations                ``GLOBAL_BASE`` (0x7000_0000_0000) upwards, 256-B aligned,
                                  separated by ``GUARD`` (64 KiB) unmapped gaps
generic window of shared::cluster ``SHARED_WIN + a`` where ``a`` is a shared::cluster address
generic window of param space     ``PARAM_WIN + offset`` into the kernel-parameter buffer
generic window of local space     ``LOCAL_WIN + offset`` (per thread)
================================  =====================================================

Shared addresses carry the CTA's cluster rank, as on the hardware: the shared address of byte
``offset`` of the CTA with cluster rank ``r`` is ``(r << 24) | offset`` -- its own ``.shared::cta``
addresses (a shared symbol, the dynamic shared memory) and, in ``.shared::cluster``, the address
other CTAs reach it by (what ``mapa`` returns). Without a cluster every CTA is rank 0. So code
that derives a peer's address by bit operations (2-CTA kernels clear bit 24 to name the even CTA
of the pair: ``address & 0xFEFFFFF8``) works as on the GPU; a ``.shared::cta`` access with
another CTA's rank is an error.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..frontend.errors import MemoryAccessError

GLOBAL_BASE = 0x7000_0000_0000
GUARD = 1 << 16
ALIGN = 256
SHARED_WIN = 0x5E00_0000_0000
PARAM_WIN = 0x5A00_0000_0000
LOCAL_WIN = 0x5C00_0000_0000
WIN_SIZE = 1 << 32
RANK_SHIFT = 24
OFF_MASK = (1 << RANK_SHIFT) - 1
RANK_SHIFT_U64 = np.uint64(RANK_SHIFT)     #: the same, as numpy scalars for address arrays
OFF_MASK_U64 = np.uint64(OFF_MASK)
#: state spaces naming the executing CTA's own shared memory
CTA_SHARED = ("shared", "shared::cta")
#: log2 of an element size in bytes (word index = byte offset >> ELEM_SHIFT[size])
ELEM_SHIFT = {1: 0, 2: 1, 4: 2, 8: 3}


def as_unsigned(vals, esize: int):
    """``vals`` as unsigned ``esize``-byte integers: a view of same-size data, else a cast."""
    vals = np.asarray(vals)
    return vals.view(f"u{esize}") if vals.dtype.itemsize == esize else vals.astype(f"u{esize}")


def element_index(off, esize: int, n: int):
    """Index into an ``esize``-byte view of ``n`` consecutive elements at byte offsets ``off``:
    ``(k,)`` for ``n == 1``, else ``(k, n)``."""
    idx = off >> ELEM_SHIFT[esize]
    return idx if n == 1 else idx[:, None] + np.arange(n)


def write_noting_change(launch, arr, ix, vals) -> None:
    """``arr[ix] = vals``, setting ``launch.changed`` when that changes memory (the livelock
    detector's notion of progress: storing the value already there is none)."""
    if not launch.changed and not np.array_equal(arr[ix], vals):
        launch.changed = True
    arr[ix] = vals


def views(data: np.ndarray) -> dict:
    """Typed views of a uint8 buffer whose length is a multiple of 16: {nbytes: view}; 16: raw
    16-byte chunks (TMA boxes copied chunk by chunk, :mod:`cutedsl.sim.instructions.tma`)."""
    return {1: data, 2: data.view(np.uint16), 4: data.view(np.uint32), 8: data.view(np.uint64),
            16: data.view("V16")}


#: a fully defined element of each size in :attr:`Allocation.defined` (one 0x01 per byte)
DEFINED = {1: np.uint8(1), 2: np.uint16(0x0101), 4: np.uint32(0x0101_0101), 8: np.uint64(0x0101_0101_0101_0101)}


def unit_of(off, nb: int) -> int:
    """The widest element size (1, 2, 4 or 8 bytes) that tiles an access of ``nb`` bytes at every
    byte offset of ``off`` (a scalar or an int64 array): the typed view that marks or checks it
    with one index per element."""
    u = min(nb & -nb, 8)
    if u > 1:
        low = int(np.bitwise_or.reduce(off)) if np.ndim(off) else int(off)
        while u > 1 and low & (u - 1):
            u >>= 1
    return u


class Allocation:
    """One global allocation: ``base`` address, ``nbytes`` size, ``data`` (uint8, padded).

    ``defined`` is initcheck's bitmap (:mod:`cutedsl.sim.checks.initcheck`): None when every byte
    is defined (host-filled, a module variable), else a uint8 array with 1 for each byte a write
    (a host copy, a store, an atomic, a TMA store, a bulk copy) defined -- device memory the host
    allocated starts undefined, as ``cuMemAlloc`` leaves it; ``origin`` says who allocated it."""
    __slots__ = ("base", "nbytes", "data", "v", "end", "tag", "defined", "dv", "origin", "dirty")

    def __init__(self, base: int, nbytes: int, tag: str = "", defined: bool = True, origin: str = ""):
        self.base = base
        self.nbytes = nbytes
        self.end = base + nbytes
        self.data = np.zeros((nbytes + 15) // 16 * 16 or 16, np.uint8)
        self.v = views(self.data)
        self.tag = tag
        self.origin = origin
        self.defined = self.dv = None
        self.dirty = False          # defined bytes since the last settle()
        if not defined:
            self.defined = np.zeros(len(self.data), np.uint8)
            self.dv = views(self.defined)

    def define(self, off, nb: int) -> None:
        """Bytes ``off + [0, nb)`` (``off``: byte offsets, scalar or int64 array) are written."""
        if self.dv is not None:
            off = np.atleast_1d(np.asarray(off, np.int64))
            u = unit_of(off, nb)
            self.dv[u][element_index(off, u, nb // u)] = DEFINED[u]
            self.dirty = True

    def define_elements(self, idx, esize: int) -> None:
        """The ``esize``-byte elements at element indices ``idx`` are written (a TMA box)."""
        if self.dv is not None:
            self.dv[esize][idx] = DEFINED[esize]
            self.dirty = True

    def define_box(self, first: int, esize: int, box, strides) -> None:
        """A whole in-bounds TMA box is written: ``box`` elements of ``esize`` bytes (innermost
        first) from element ``first`` with byte ``strides`` -- one strided slice of the bitmap,
        which mirrors the data byte for byte."""
        if self.dv is not None:
            last = first * esize + sum((b - 1) * s for b, s in zip(box, strides)) + esize
            if first < 0 or last > len(self.defined):      # the caller checked; a strided view must not overrun
                raise MemoryAccessError(f"TMA box of {box} elements from byte {first * esize} overruns the "
                                        f"{self.nbytes}-byte allocation at 0x{self.base:x}")
            # (a strided view through the ndarray constructor: np.lib.stride_tricks.as_strided costs
            # a few microseconds more per call, and the constructor checks the extent too)
            np.ndarray(tuple(box[::-1]), self.dv[esize].dtype, self.defined, first * esize,
                       tuple(strides[::-1]))[...] = DEFINED[esize]
            self.dirty = True

    def define_span(self, lo: int, hi: int) -> None:
        """Bytes ``lo .. hi - 1`` are written (a host copy); all of them: the bitmap goes."""
        if self.defined is not None:
            self.defined[lo:hi] = 1
            if lo <= 0 and hi >= self.nbytes:
                self.settle(force=True)

    def undefined(self, off, nb: int):
        """The first byte offset of ``off + [0, nb)`` no write defined, or None."""
        if self.dv is None:
            return None
        off = np.atleast_1d(np.asarray(off, np.int64))
        u = unit_of(off, nb)
        n = nb // u
        bad = self.dv[u][element_index(off, u, n)] != DEFINED[u]
        if not bad.any():
            return None
        first = int(np.flatnonzero(bad.reshape(-1))[0])
        lo = int(off[first // n]) + (first % n) * u
        return lo + int(np.flatnonzero(self.defined[lo:lo + u] == 0)[0])

    def settle(self, force: bool = False) -> None:
        """Drop the bitmap once every byte is defined (later reads cost nothing)."""
        if self.defined is not None and (force or self.defined[:self.nbytes].all()):
            self.defined = self.dv = None
        self.dirty = False


class GlobalMemory:
    """Synthetic global address space of the emulator."""

    def __init__(self):
        self.allocs = {}
        self._bases = []
        self._next = GLOBAL_BASE

    def alloc(self, nbytes: int, tag: str = "", defined: bool = True, origin: str = "") -> Allocation:
        """A new allocation of ``nbytes`` bytes; ``defined=False``: its bytes are undefined until
        written (:class:`Allocation`), ``origin`` naming who allocated it in initcheck reports."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError("negative allocation size")
        base = self._next
        self._next = (base + max(nbytes, 1) + GUARD + ALIGN - 1) // ALIGN * ALIGN
        a = Allocation(base, nbytes, tag, defined, origin)
        self.allocs[base] = a
        bisect.insort(self._bases, base)
        return a

    def settle(self) -> None:
        """After a launch: drop the initcheck bitmaps its writes completed (:meth:`Allocation.settle`)."""
        for a in self.allocs.values():
            if a.dirty:
                a.settle()

    def free(self, base: int):
        a = self.allocs.pop(int(base), None)
        if a is None:
            raise MemoryAccessError(f"free of unknown address 0x{int(base):x}")
        self._bases.remove(a.base)

    def find(self, addr: int):
        i = bisect.bisect_right(self._bases, addr) - 1
        if i < 0:
            return None
        a = self.allocs[self._bases[i]]
        return a if addr < max(a.end, a.base + 1) else None

    def describe(self, addr: int) -> str:
        """Human text locating ``addr`` relative to the nearest allocation."""
        if not self._bases:
            return "no allocations exist"
        i = bisect.bisect_right(self._bases, addr) - 1
        parts = []
        if i >= 0:
            a = self.allocs[self._bases[i]]
            if addr < a.end:
                parts.append(f"inside allocation 0x{a.base:x} ({a.nbytes} B) at offset {addr - a.base}")
            else:
                parts.append(f"{addr - a.end} B past the end of allocation 0x{a.base:x} ({a.nbytes} B{', ' + a.tag if a.tag else ''})")
        if i + 1 < len(self._bases):
            b = self.allocs[self._bases[i + 1]]
            parts.append(f"{b.base - addr} B before allocation 0x{b.base:x} ({b.nbytes} B)")
        return "; ".join(parts) or "below every allocation"

    def region(self, addrs, nbytes: int):
        """Allocation holding all of ``addrs`` (array/scalar) ``+ nbytes``, or None."""
        a = np.asarray(addrs)
        lo = int(a.min()) if a.ndim else int(a)
        hi = int(a.max()) if a.ndim else lo
        al = self.find(lo)
        if al is None or hi + nbytes > al.end:
            return None
        return al

    def read_bytes(self, addr: int, n: int) -> bytes:
        al = self.region(addr, n)
        if al is None:
            raise MemoryAccessError(f"read of {n} B at 0x{addr:x}: {self.describe(addr)}")
        o = addr - al.base
        return al.data[o:o + n].tobytes()
