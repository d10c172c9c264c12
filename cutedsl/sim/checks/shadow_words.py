"""Word sets of the shared-memory race shadow (:mod:`cutedsl.sim.checks.hb`): 4-byte word ids of an
access, contiguous runs as slices (a TMA box, a bulk copy) so shadow updates touch views, and
the 1 KiB blocks the shadow keeps per-block summaries for."""
from __future__ import annotations

import numpy as np

#: log2 of the words per block of the shadow's per-block summaries (256 words = 1 KiB)
BLOCK_SHIFT = 8
_BLK = BLOCK_SHIFT


def blocks_of(words):
    """Index of the 1 KiB blocks of ``words`` (a slice, or word ids with repeats)."""
    if isinstance(words, slice):
        return slice(words.start >> _BLK, ((words.stop - 1) >> _BLK) + 1)
    return words >> _BLK


def word_set(words, shift=0):
    """Sorted unique word ids ``words`` + ``shift`` as the shadow takes them: a slice when they
    are contiguous (a TMA box, a bulk copy), so its updates touch views instead of gathering."""
    n = len(words)
    if n and int(words[-1]) - int(words[0]) + 1 == n:
        lo = int(words[0]) + shift
        return slice(lo, lo + n)
    return words + shift


def word_ids(words):
    """The word ids of ``words`` (an array, or a slice from :func:`word_set`)."""
    return np.arange(words.start, words.stop) if isinstance(words, slice) else words


def words_of(off, nb):
    """4-byte word indices touched by accesses of ``nb`` bytes at byte offsets ``off``."""
    off = np.asarray(off, np.int64)
    if nb <= 4:
        return (off >> 2).reshape(-1)
    return ((off.reshape(-1, 1) + np.arange(0, nb, 4)) >> 2).reshape(-1)


# -- the equal-value exemption (a write that leaves the bytes as they were) ----------------------

def _equal_bytes(mem_u8, off, nb: int, vals):
    """``(eq, pos)``: per lane and byte of a store of ``nb`` bytes at byte offsets ``off`` with
    ``vals`` ((lanes, n) unsigned ints of ``nb / n`` bytes), whether the byte it writes equals the
    one in ``mem_u8``, and the byte's offset. Called before the store lands."""
    off = np.asarray(off, np.int64).reshape(-1)
    new = np.ascontiguousarray(vals).view(np.uint8).reshape(len(off), nb)
    pos = off[:, None] + np.arange(nb)
    return mem_u8[pos] == new, pos


def same_words(mem_u8, off, nb: int, vals):
    """For the shared-memory shadow (:meth:`cutedsl.sim.checks.hb.Shadow.write`): a callable
    ``ids -> bool mask``, True for each 4-byte word id the store leaves byte-for-byte unchanged
    (every byte it writes there equals the byte already there). The exemption is decided per
    word: a warp store of which some lanes rewrite bytes another warp wrote unordered with the
    same values, while other lanes write new bytes elsewhere, is benign exactly on those words."""
    def same(ids):
        eq, pos = _equal_bytes(mem_u8, off, nb, vals)
        changed = np.unique(pos[~eq] >> 2)
        return ~np.isin(np.asarray(ids), changed)
    return same


def same_elements(mem_u8, off, nb: int, vals):
    """For the global-memory shadow (:meth:`cutedsl.sim.checks.global_hb.GlobalHB.access`): a
    callable ``() -> bool mask`` over the entries of its word list (one per lane and 4-byte word,
    or one per lane for a sub-word store: per element), True where the store leaves the bytes
    unchanged."""
    def same():
        eq, _ = _equal_bytes(mem_u8, off, nb, vals)
        if nb >= 4:
            return eq.reshape(len(eq), nb // 4, 4).all(axis=2).reshape(-1)
        return eq.all(axis=1)
    return same
