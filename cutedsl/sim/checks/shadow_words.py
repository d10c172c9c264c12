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
