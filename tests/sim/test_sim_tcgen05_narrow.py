"""6- and 4-bit tcgen05.mma inputs in the emulator (issue 23): kind::f8f6f4 with e2m3 / e3m2 / e2m1
in the padded shared-memory layout (16 elements per 16-byte chunk), the block-scaled kind::mxf8f6f4
with them, and kind::mxf4 / mxf4nvf4 on packed e2m1 with 2 or 4 scale factors per instruction
(UE8M0 or UE4M3); each a hand-written sm_100a kernel assembled by the pinned ptxas and checked
exactly against numpy. Host images are packed here bit by bit, independently of the emulator."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.sim import Emulator, SimRuntimeError, load_ptx
from cutedsl.sim.engines.tcgen05_scale import decode_idesc_scaled, scale_vector
import tc05kit as kit

NPT = {"e2m3": ml_dtypes.float6_e2m3fn, "e3m2": ml_dtypes.float6_e3m2fn, "e2m1": ml_dtypes.float4_e2m1fn,
       "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
CODE = {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5}
BITS = {"e2m3": 6, "e3m2": 6, "e2m1": 4, "e4m3": 8, "e5m2": 8}


def values(rng, shape, t):
    """Random finite values of type ``t`` (every code of the 6- and 4-bit types; e4m3 / e5m2: small
    integers), as float64."""
    if BITS[t] == 8:
        return rng.integers(-3, 4, shape).astype(np.float64)
    codes = rng.integers(0, 1 << BITS[t], shape).astype(np.uint8)
    return codes.view(NPT[t]).astype(np.float64)


def codes_of(x, t):
    return np.asarray(x).astype(NPT[t]).view(np.uint8).astype(np.int64) & ((1 << BITS[t]) - 1)


def pack_bits(codes, bits, nbytes):
    """Little-endian bit packing of each row of ``codes`` into ``nbytes`` bytes."""
    out = np.zeros((codes.shape[0], nbytes), np.uint8)
    for r, row in enumerate(codes):
        word = sum(int(c) << (bits * i) for i, c in enumerate(row))
        out[r] = np.frombuffer(word.to_bytes(nbytes, "little"), np.uint8)
    return out


def smem_bytes(x, t, packed=False):
    """(rows, K bytes) uint8 of a K-major operand: 8-bit types as they are; packed e2m1 two per
    byte; else 16-element chunks, each packed into the first 12 / 8 bytes of 16."""
    if BITS[t] == 8:
        return np.ascontiguousarray(x.astype(NPT[t])).view(np.uint8)
    c = codes_of(x, t)
    rows, k = c.shape
    if packed:
        return pack_bits(c, 4, k // 2)
    chunks = [pack_bits(c[:, i:i + 16], BITS[t], 16) for i in range(0, k, 16)]
    return np.concatenate(chunks, axis=1)


def launch(text, a_bytes, b_bytes, idesc, n, ksteps, span, extra=b"", seed=None):
    """Run the one-tile kernel on K-major byte images (``span``-byte swizzle) of A (128 rows) and B
    (``n`` rows), ``extra`` bytes (scale atoms) appended after B's image; D as float64 (128 x n)."""
    a_img, alo, aso, astep = kit.kmajor_image(a_bytes, span)
    b_img, blo, bso, bstep = kit.kmajor_image(b_bytes, span)
    b_all = kit.pad(np.concatenate([b_img, np.frombuffer(extra, np.uint8)]))
    emu = Emulator(chaos=seed)
    bufs = [emu.to_device(x) for x in (a_img, b_all, np.zeros(16, np.uint8))]
    out = emu.to_device(np.zeros(128 * n, np.uint32))
    emu.launch(load_ptx(text), 1, 128, bufs + [out, len(a_img), len(b_all), idesc, kit.smem_desc(alo, aso, span),
                                               kit.smem_desc(blo, bso, span), ksteps, astep >> 4, bstep >> 4, n])
    return emu.to_host(out, (128, n), np.uint32).view(np.float32).astype(np.float64), len(b_img)


def per_step(a, b, k_step, sa=None, sb=None, block=None):
    """D in float64 with one f32 rounding per instruction (K step), as the emulator's exact mode;
    ``sa``/``sb``: per-``block`` factors (rows, K / block)."""
    if sa is not None:
        a = a * np.repeat(sa, block, axis=1)
        b = b * np.repeat(sb, block, axis=1)
    d = np.zeros((a.shape[0], b.shape[0]))
    for k in range(0, a.shape[1], k_step):
        d = (d + a[:, k:k + k_step] @ b[:, k:k + k_step].T).astype(np.float32).astype(np.float64)
    return d


@pytest.mark.parametrize("at,bt", [("e2m1", "e2m1"), ("e2m3", "e3m2"), ("e3m2", "e4m3"), ("e5m2", "e2m1")])
def test_f8f6f4_padded_six_and_four_bit_inputs(at, bt):
    """kind::f8f6f4, 4 MMAs over K = 128 (128-byte swizzle rows of the padded layout), the types
    mixed freely as the ISA allows; exact."""
    rng = np.random.default_rng(BITS[at] * 10 + BITS[bt])
    n = 48
    a, b = values(rng, (128, 128), at), values(rng, (n, 128), bt)
    idesc = kit.idesc(128, n, a=CODE[at], b=CODE[bt])
    got, _ = launch(kit.mma_ptx("f8f6f4"), smem_bytes(a, at), smem_bytes(b, bt), idesc, n, 4, 128)
    assert np.array_equal(got, per_step(a, b, 32))


def ue8m0(rng, shape):
    return rng.integers(122, 132, shape).astype(np.uint8)


def e8m0_values(s):
    return np.ldexp(1.0, s.astype(np.int64) - 127)


@pytest.mark.parametrize("at,bt,seed", [("e2m1", "e2m3", None), ("e3m2", "e2m1", 5)])
def test_mxf8f6f4_block_scaled_with_narrow_inputs(at, bt, seed):
    """kind::mxf8f6f4.block_scale on padded 6- / 4-bit inputs: one UE8M0 factor per 32 K, scale
    byte j for k-step j."""
    rng = np.random.default_rng(23)
    n = 32
    a, b = values(rng, (128, 128), at), values(rng, (n, 128), bt)
    sa, sb = ue8m0(rng, (128, 4)), ue8m0(rng, (n, 4))
    b_len = len(kit.kmajor_image(smem_bytes(b, bt), 128)[0])
    text = kit.mx_ptx("mxf8f6f4.block_scale", b_len, b_len + 512)
    idesc = 1 << 23 | CODE[at] << 7 | CODE[bt] << 10 | (n >> 3) << 17 | (128 >> 4) << 24
    got, _ = launch(text, smem_bytes(a, at), smem_bytes(b, bt), idesc, n, 4, 128,
                    kit.sf_atom(sa).tobytes() + kit.sf_atom(sb).tobytes(), seed)
    assert np.array_equal(got, per_step(a, b, 32, e8m0_values(sa), e8m0_values(sb), 32))


@pytest.mark.parametrize("kind,vec,fmt,span", [("mxf4", "", "ue8m0", 64),
                                               ("mxf4nvf4", ".scale_vec::2X", "ue8m0", 64),
                                               ("mxf4nvf4", ".scale_vec::4X", "ue4m3", 32),
                                               ("mxf4nvf4", ".block16", "ue8m0", 32)])
def test_mxf4_packed_e2m1(kind, vec, fmt, span):
    """kind::mxf4 / mxf4nvf4: packed e2m1 (two per byte), K = 64 per MMA, 2 factors per row and
    MMA (blocks of 32; scale ids 0 and 2 for the two MMAs of a 64-byte row) or 4 (blocks of 16,
    UE8M0 or UE4M3, one MMA per 32-byte row); exact."""
    rng = np.random.default_rng(len(kind) + span)
    n, k = 64, 2 * span
    nvec = 4 if vec in (".scale_vec::4X", ".block16") else 2
    block = 64 // nvec
    a, b = values(rng, (128, k), "e2m1"), values(rng, (n, k), "e2m1")
    if fmt == "ue4m3":                       # positive e4m3 factors 0.25 .. 4
        sa = rng.choice(np.array([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]), (128, k // block))
        sb = rng.choice(np.array([0.5, 1.0, 2.0, 0.75]), (n, k // block))
        ra, rb = sa.astype(ml_dtypes.float8_e4m3fn).view(np.uint8), sb.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    else:
        ra, rb = ue8m0(rng, (128, k // block)), ue8m0(rng, (n, k // block))
        sa, sb = e8m0_values(ra), e8m0_values(rb)
    b_len = len(kit.kmajor_image(smem_bytes(b, "e2m1", True), span)[0])
    text = kit.mx_ptx(f"{kind}.block_scale{vec}", b_len, b_len + 512, sf_per_step=nvec, version="9.0")
    idesc = (1 if fmt == "ue8m0" else 0) << 23 | 1 << 7 | 1 << 10 | (n >> 3) << 17 | (128 >> 4) << 24
    got, _ = launch(text, smem_bytes(a, "e2m1", True), smem_bytes(b, "e2m1", True), idesc, n, span // 32, span,
                    kit.sf_atom(ra).tobytes() + kit.sf_atom(rb).tobytes())
    assert np.array_equal(got, per_step(a, b, 64, sa, sb, block))


def test_scale_vector_of_each_kind():
    assert scale_vector("mxf8f6f4", []) == 1 and scale_vector("mxf4", ["block32"]) == 2
    assert scale_vector("mxf4nvf4", ["block16"]) == 4 and scale_vector("mxf4nvf4", ["scale_vec::2X"]) == 2
    with pytest.raises(ValueError, match=r"kind::mxf4nvf4 takes one of \.scale_vec::2X \(\.block32\), "
                                         r"\.scale_vec::4X \(\.block16\)"):
        scale_vector("mxf4nvf4", [])
    with pytest.raises(ValueError, match=r"kind::mxf4 \(K = 64\) takes scale vector 2X .* not 4X"):
        scale_vector("mxf4", ["scale_vec::4X"])


@pytest.mark.parametrize("word,kind,vec,match", [
    (1 << 23 | 1 << 7 | 1 << 10 | 8 << 17 | 8 << 24 | 1 << 29, "mxf4", 2,
     r"A's scale-factor id 1 \(bits 29-30\); 2X takes 0, 2"),
    (1 << 7 | 1 << 10 | 8 << 17 | 8 << 24, "mxf4nvf4", 2, r"UE4M3 factors need kind::mxf4nvf4 with scale_vec::4X"),
    (1 << 23 | 5 << 7 | 1 << 10 | 8 << 17 | 8 << 24, "mxf4", 2, r"A format \(bits 7-9\) 5 is none of 1 e2m1"),
    (1 << 23 | 1 << 7 | 1 << 10 | 1 << 13 | 8 << 17 | 8 << 24, "mxf4", 2, r"negate .* kind::mxf8f6f4 only"),
    (1 << 23 | 1 << 7 | 1 << 10 | 1 << 16 | 8 << 17 | 8 << 24, "mxf4", 2, r"B is e2m1, which must be K-major"),
    (1 << 23 | 1 << 7 | 1 << 10 | 8 << 17 | 8 << 24 | 1 << 31, "mxf4", 2, r"K size bit 31 = 1 \(K = 96"),
])
def test_block_scaled_descriptor_errors(word, kind, vec, match):
    with pytest.raises(SimRuntimeError, match=match):
        decode_idesc_scaled(word, kind, vec)


def test_missing_scale_vector_is_refused_at_load():
    """ptxas refuses kind::mxf4nvf4 without a vector size; the emulator's loader says which."""
    text = kit.mx_ptx("mxf4nvf4.block_scale.scale_vec::4X", 0, 512, version="9.0")
    with pytest.raises(Exception, match=r"kind::mxf4nvf4 takes one of \.scale_vec::2X"):
        load_ptx(text.replace("mxf4nvf4.block_scale.scale_vec::4X", "mxf4nvf4.block_scale"))
