"""wgmma operand layouts: element types, the sm_90 and sm_100 shared-memory descriptors, the byte addresses
of an operand in shared memory (all swizzles, both majors; shared with tcgen05's sm_100
descriptors), the accumulator and register-A fragment maps, and operand loads as float64.
hopper-semantics.md section 2.3 gives the layouts."""
from __future__ import annotations

from functools import lru_cache

import ml_dtypes
import numpy as np

from ..frontend.errors import SimRuntimeError
from ..checks.shadow_words import BLOCK_SHIFT
from .tma_box import swizzle

ETYPES = {"f16": (2, np.float16), "bf16": (2, ml_dtypes.bfloat16), "tf32": (4, np.uint32),
          "e4m3": (1, ml_dtypes.float8_e4m3fn), "e5m2": (1, ml_dtypes.float8_e5m2),
          "s8": (1, np.int8), "u8": (1, np.uint8)}
SPAN = {0: 0, 1: 128, 2: 64, 3: 32}


def decode_desc(d: int):
    """Return (start, lbo, sbo, base_offset, span) of a wgmma shared-memory descriptor."""
    d = int(d)
    return ((d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4,
            (d >> 49) & 7, SPAN[(d >> 62) & 3])


#: the "span" sm_100's 128B_BASE32B descriptors decode to (layout type 1): 128-byte MN rows in
#: 4-row K atoms, 32-byte granules swizzled by the row (CuTe ``Swizzle<2,5,2>``, CUTLASS's
#: ``Layout_MN_SW128_32B_Atom``: ((8, n), (4, k)) 16-byte units; MN-major only)
SW128_BASE32B = -128


@lru_cache(maxsize=1024)
def operand_addrs(desc: int, rows: int, kelems: int, esize: int, mn_major: bool, decode=decode_desc):
    """(byte addresses (rows, kelems), sorted 4-B word ids, element indices, end byte) of an operand
    whose shared-memory descriptor ``decode`` (sm_90's by default, or sm_100's) splits into
    (start, LBO, SBO, base_offset, swizzle span); the canonical layouts are the same on both."""
    start, lbo, sbo, base_off, span = decode(desc)
    if base_off:
        raise SimRuntimeError(f"shared-memory descriptor 0x{desc:x} has base_offset {base_off}; only 0 is "
                              f"supported")
    T = 16 // esize
    r = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(kelems, dtype=np.int64)[None, :]
    if span == SW128_BASE32B:
        if not mn_major:
            raise SimRuntimeError(f"shared-memory descriptor 0x{desc:x}: the 128B_BASE32B swizzle is for MN-major "
                                  f"operands only (CUTLASS: invalid for Major-K)")
        re_, rc, rm = r % T, (r // T) % 8, r // (T * 8)
        a = start + re_ * esize + rc * 16 + rm * lbo + (k % 4) * 128 + (k // 4) * sbo
        a = a ^ (((a >> 7) & 3) << 5)
        return _finish(a, esize)
    if not mn_major:
        kc, ke = k // T, k % T
        if span:
            off = (r % 8) * span + (r // 8) * sbo + kc * 16 + ke * esize
        else:
            off = (r % 8) * 16 + (r // 8) * sbo + kc * lbo + ke * esize
    else:
        W = span // 16 if span else 1
        re_, rc, rm = r % T, (r // T) % W, r // (T * W)
        kr, kg = k % 8, k // 8
        if span:
            off = re_ * esize + rc * 16 + rm * lbo + kr * span + kg * sbo
        else:
            off = re_ * esize + rm * sbo + kr * 16 + kg * lbo
    return _finish(swizzle(start + off, span), esize)


def _finish(a, esize):
    a.flags.writeable = False
    words = np.unique(a >> 2)
    words.flags.writeable = False
    ei = a // esize
    ei.flags.writeable = False
    return a, words, ei, int(a.max()) + esize


@lru_cache(maxsize=1024)
def operand_words(b_desc, n, k, eb, trans_b, a_desc=None, ea=0, trans_a=False):
    """The shared-memory words the operands of one wgmma read (B's, then A's unless ``a_desc`` is
    None: A from registers; one race check) and the 1 KiB blocks they lie in."""
    w = operand_addrs(b_desc, n, k, eb, trans_b)[1]
    if a_desc is not None:
        w = np.concatenate([w, operand_addrs(a_desc, 64, k, ea, trans_a)[1]])
    w.flags.writeable = False
    blocks = np.unique(w >> BLOCK_SHIFT)        # the race detector's blocks
    blocks.flags.writeable = False
    return w, blocks


@lru_cache(maxsize=64)
def d_map(n: int):
    """Flat index row*N + col (128, N/2) of each (thread, f32-accumulator register)."""
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (t % 4) + (i % 2)
    return row * n + col


@lru_cache(maxsize=8)
def a_reg_map(esize: int = 2):
    """(row, k) of each (thread, value v) of a register A fragment: 16-bit types (``esize`` 2,
    m64nNk16, values v 0..7, two per register) or 8-bit types (``esize`` 1, m64nNk32, values v
    0..15, four per register, v % 4 the byte). PTX ISA 9.7.15.5.1.1 "Register Fragments", matrix
    fragments of A for wgmma .m64nNk16 / .m64nNk32 (CUTLASS ``ALayout_64x16`` / ``ALayout_64x32``):
    rows ``16*warp + lane//4 (+ 8)``; 16-bit columns ``8*(v//4) + 2*(lane%4) + v%2``, 8-bit
    columns ``16*(v//8) + 4*(lane%4) + v%4`` (four consecutive K values per register)."""
    t = np.arange(128)[:, None]
    if esize == 1:
        v = np.arange(16)[None, :]
        m = 16 * (t // 32) + (t % 32) // 4 + 8 * ((v >> 2) & 1)
        k = 16 * (v >> 3) + 4 * (t % 4) + (v & 3)
        return m, k
    v = np.arange(8)[None, :]
    m = 16 * (t // 32) + (t % 32) // 4 + 8 * ((v >> 1) & 1)
    k = 8 * (v >> 2) + 2 * (t % 4) + (v & 1)
    return m, k


@lru_cache(maxsize=8)
def a_reg_gather(esize: int = 2):
    """For each element of the register-A tile (64 x 16 for 16-bit ``esize`` 2, 64 x 32 for 8-bit)
    in row-major order, its index in the warpgroup's A registers as one (4 registers x 128
    threads) block of 32-bit words split into ``esize``-byte values, little-endian (a register's
    low half / lowest byte is its first value): :func:`a_reg_map` inverted."""
    mm, kk = a_reg_map(esize)       # (thread, value v) -> (row, k); v: register v // per, part v % per
    k = 32 // esize
    per = 4 // esize
    t = np.arange(128)[:, None]
    v = np.arange(mm.shape[1])[None, :]
    inv = np.empty(64 * k, np.intp)
    inv[(mm * k + kk).reshape(-1)] = ((v // per) * (128 * per) + t * per + v % per).reshape(-1)
    inv.flags.writeable = False
    return inv


def a_reg_index(aidx, lo: int, width: int, esize: int):
    """For each element of the register-A tile in row-major order (:func:`a_reg_gather`), its
    index in a (registers, ``width`` lanes) file of 32-bit words split into ``esize``-byte
    values, when the A registers are ``aidx`` (4) and the warpgroup's threads lanes ``lo`` ..
    ``lo`` + 127: one gather from the whole file."""
    per = 4 // esize
    q, rest = np.divmod(a_reg_gather(esize), 128 * per)
    ix = np.asarray(aidx, np.intp)[q] * (width * per) + lo * per + rest
    ix.flags.writeable = False
    return ix


_V16 = np.dtype("V16")


def gather_plan(parts, esize: int):
    """How to gather the elements of size ``esize`` at element indices ``parts`` (1-D arrays,
    in order) from shared memory: ``[(chunked, indices)]``. A part whose indices run in aligned
    16-byte chunks -- what the canonical layouts keep contiguous: the 8 (16-bit) or 16 (8-bit)
    elements along K of a K-major operand, along M/N of an MN-major one; the swizzles move
    whole chunks -- is gathered by chunk (``chunked``: the chunk indices; 8x fewer to gather
    for 16-bit types), the others element by element; consecutive parts of a kind are joined."""
    c = 16 // esize
    run = np.arange(c)
    plan = []
    for ix in parts:
        rows = ix.reshape(-1, c) if len(ix) % c == 0 else None
        chunked = rows is not None and bool((rows == rows[:, :1] + run).all() and not (rows[:, 0] % c).any())
        seg = (chunked, rows[:, 0] // c if chunked else ix)
        if plan and plan[-1][0] == chunked:
            plan[-1] = (chunked, np.concatenate([plan[-1][1], seg[1]]))
        else:
            plan.append(seg)
    for _c, ix in plan:
        ix.flags.writeable = False
    return plan


def gather(sv, plan):
    """The elements of ``sv`` (shared memory as one element type) that :func:`gather_plan`'s
    ``plan`` names, in order: the same array as ``np.take(sv, indices)`` of all its parts (a
    chunk is its elements' bytes, copied as they are)."""
    out = []
    for chunked, ix in plan:
        if chunked:
            n = len(sv) - len(sv) % (16 // sv.itemsize)
            out.append(np.take(sv[:n].view(_V16), ix).view(sv.dtype))
        else:
            out.append(np.take(sv, ix))
    return out[0] if len(out) == 1 else np.concatenate(out)


@lru_cache(maxsize=16)
def to_f64(dt):
    """Table: every bit pattern of 8-/16-bit float type ``dt`` -> its float64 value."""
    bits = np.dtype(dt).itemsize * 8
    with np.errstate(invalid="ignore"):         # ml_dtypes' NaNs warn as they are cast
        t = np.arange(1 << bits, dtype=np.dtype(f"u{bits // 8}")).view(dt).astype(np.float64)
    t.flags.writeable = False
    return t


def load_operand(cta, eidx, esize, dt):
    v = cta.sv[esize][eidx]
    if dt == np.uint32:          # tf32: drop 13 low mantissa bits
        return (v & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if np.dtype(dt).kind in "iu":
        return v.view(dt).astype(np.int64)
    return widen(v, dt)


def widen(v, dt):
    """The float64 values of the raw 8-/16-bit patterns ``v`` of float type ``dt`` (exact: every
    value of these types is a float64), by the type's cast or by a look-up in :func:`to_f64`'s
    table, which is that same cast: the same bits either way. numpy's f16 -> f64 cast branches on
    a zero exponent (zeros, subnormals): on GEMM operands with a fifth of zeros it takes 36 us per
    16,384 values, the look-up 16 us; without such values the cast takes 15 us, and the look-up
    more once the 512 KiB table is out of the cache (values of many exponents) -- so f16 operands
    of 4,096 values or more with a zero exponent among every 64th value go to the table (on a
    register-A tile of 1,024 values that check would cost more than the cast). bf16 casts by a
    shift (6 us)."""
    if v.itemsize == 2:
        if dt is np.float16 and v.size >= 4096 and not (v.reshape(-1)[::64] & 0x7C00).all():
            return np.take(to_f64(dt), v)
        return v.view(dt).astype(np.float64)
    return np.take(to_f64(dt), v)


#: swizzle span (bytes) per sm_100 descriptor layout field (bits 61-63)
SPAN_SM100 = {0: 0, 2: 128, 4: 64, 6: 32, 1: SW128_BASE32B}


def decode_desc_sm100(desc: int):
    """(start, LBO, SBO, base_offset, swizzle span in bytes) of an sm_100 shared-memory descriptor;
    ``SimRuntimeError`` for a wrong fixed field, LBO mode 1 or an unknown / unemulated layout."""
    d = int(desc)
    fixed, lbo_mode, layout = d >> 46 & 7, d >> 52 & 1, d >> 61 & 7
    if fixed != 1:
        raise SimRuntimeError(f"shared-memory descriptor 0x{d:016x}: bits 46-48 must hold the constant 0b001 "
                              f"of sm_100 descriptors, not {fixed:#05b} (an sm_90 wgmma descriptor?)")
    if lbo_mode:
        raise SimRuntimeError(f"shared-memory descriptor 0x{d:016x}: LBO mode 1 (bit 52) is not emulated")
    if layout not in SPAN_SM100:
        raise SimRuntimeError(f"shared-memory descriptor 0x{d:016x}: swizzle field (bits 61-63) {layout} is "
                              f"invalid (0 none, 1 128B with 32-byte atoms, 2 128B, 4 64B, 6 32B)")
    return ((d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4, d >> 49 & 7, SPAN_SM100[layout])
