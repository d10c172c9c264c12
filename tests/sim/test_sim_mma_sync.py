"""Warp-level mma.sync (the Ampere tensor-core path Triton uses for small tiles on sm_90):
fragment placement against the PTX ISA's fragment tables, numerics, and load-time errors."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.sim import Emulator, UnsupportedInstruction, load_ptx
from simkit import kernel

# PTX ISA "Matrix fragments for mma.m16n8kK": element e of a lane (g = lane / 4, c = lane % 4)
# sits at (g + dr, mult * c + dc); tables list (dr, dc) per element, in register order.
A_F16_K16 = [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
B_F16_K16 = [(0, 0), (1, 0), (8, 0), (9, 0)]                 # (dk, dn): k = 2c + dk, n = g
A_TF32_K8 = [(0, 0), (8, 0), (0, 4), (8, 4)]
B_TF32_K8 = [(0, 0), (4, 0)]
A_S8_K32 = [(0, j) for j in range(4)] + [(8, j) for j in range(4)] + [(0, 16 + j) for j in range(4)] + \
    [(8, 16 + j) for j in range(4)]
B_S8_K32 = [(j, 0) for j in range(4)] + [(16 + j, 0) for j in range(4)]
C_TABLE = [(0, 0), (0, 1), (8, 0), (8, 1)]                   # (g + dr, 2c + dc)

CASES = {  # name: (ptx types, K, numpy operand dtype, bytes, A table, B table, mult)
    "f16": ("f32.f16.f16.f32", 16, np.float16, 2, A_F16_K16, B_F16_K16, 2),
    "bf16": ("f32.bf16.bf16.f32", 16, ml_dtypes.bfloat16, 2, A_F16_K16, B_F16_K16, 2),
    "tf32": ("f32.tf32.tf32.f32", 8, np.float32, 4, A_TF32_K8, B_TF32_K8, 1),
    "s8": ("s32.s8.s8.s32", 32, np.int8, 1, A_S8_K32, B_S8_K32, 4),
    "s8sat": ("satfinite.s32.s8.s8.s32", 32, np.int8, 1, A_S8_K32, B_S8_K32, 4),
    "e4m3": ("f32.e4m3.e4m3.f32", 32, ml_dtypes.float8_e4m3fn, 1, A_S8_K32, B_S8_K32, 4),
    "e5m2": ("f32.e5m2.e5m2.f32", 32, ml_dtypes.float8_e5m2, 1, A_S8_K32, B_S8_K32, 4),
}


def pack(mat, table, mult, dt, esize, b_operand=False):
    """(32 lanes, registers) uint32 fragment of ``mat`` following an ISA table."""
    regs = np.zeros((32, len(table) * esize // 4), np.uint32)
    raw = regs.view(np.uint8).reshape(32, -1)
    for lane in range(32):
        g, c = lane // 4, lane % 4
        for e, (d0, d1) in enumerate(table):
            v = mat[mult * c + d0, g] if b_operand else mat[g + d0, mult * c + d1]
            raw[lane, e * esize:(e + 1) * esize] = np.frombuffer(np.array(v, dt).tobytes(), np.uint8)
    return regs


def mma_kernel(types, na, nb, nc=4, nd=4, shape="m16n8k16"):
    loads, regs = [], {}
    for name, n, base in (("a", na, 10), ("b", nb, 20), ("c", nc, 30)):
        regs[name] = [f"%r{base + i}" for i in range(n)]
        loads += [f"\tld.global.u32 {r}, [%rd{ {'a': 2, 'b': 3, 'c': 4}[name] }+{4 * i}];"
                  for i, r in enumerate(regs[name])]
    d = [f"%r{40 + i}" for i in range(nd)]
    body = f"""
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd12, [p_a];
\tld.param.u64 %rd13, [p_b];
\tld.param.u64 %rd14, [p_c];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd5, %r1, {4 * na};
\tadd.s64 %rd2, %rd12, %rd5;
\tmul.wide.u32 %rd5, %r1, {4 * nb};
\tadd.s64 %rd3, %rd13, %rd5;
\tmul.wide.u32 %rd5, %r1, {4 * nc};
\tadd.s64 %rd4, %rd14, %rd5;
\tmul.wide.u32 %rd5, %r1, {4 * nd};
\tadd.s64 %rd1, %rd1, %rd5;
{chr(10).join(loads)}
\tmma.sync.aligned.{shape}.row.col.{types} {{{", ".join(d)}}}, {{{", ".join(regs["a"])}}}, {{{", ".join(regs["b"])}}}, {{{", ".join(regs["c"])}}};
""" + "".join(f"\tst.global.u32 [%rd1+{4 * i}], {r};\n" for i, r in enumerate(d))
    return kernel(body, params=("out", "a", "b", "c"))


@pytest.mark.parametrize("case", list(CASES))
def test_fragments_and_numerics_match_the_isa_tables(case, rng):
    types, k, dt, esize, at, bt, mult = CASES[case]
    a = rng.integers(-8, 9, (16, k)).astype(dt)
    b = rng.integers(-8, 9, (k, 8)).astype(dt)
    acc = np.int32 if case.startswith("s8") else np.float32
    c = rng.integers(-100, 100, (16, 8)).astype(acc)
    emu = Emulator()
    fa = pack(a, at, mult, dt, esize)
    fb = pack(b, bt, mult, dt, esize, b_operand=True)
    fc = pack(c, C_TABLE, 2, acc, 4)
    out = emu.alloc(32 * 16)
    prog = load_ptx(mma_kernel(types, fa.shape[1], fb.shape[1], shape=f"m16n8k{k}"))
    emu.launch(prog, 1, 32, [out, emu.to_device(fa), emu.to_device(fb), emu.to_device(fc)])
    got = emu.to_host(out, (32, 4), np.uint32).view(acc)
    ref = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(got, pack(ref.astype(acc), C_TABLE, 2, acc, 4).view(acc)), f"seed {rng.seed_value}"


def test_f16_accumulator_packs_pairs(rng):
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (16, 8)).astype(np.float16)
    c = rng.integers(-50, 50, (16, 8)).astype(np.float16)
    emu = Emulator()
    fc = pack(c, C_TABLE, 2, np.float16, 2)                   # 2 registers of f16x2
    out = emu.alloc(32 * 8)
    prog = load_ptx(mma_kernel("f16.f16.f16.f16", 4, 2, nc=2, nd=2))
    emu.launch(prog, 1, 32, [out, emu.to_device(pack(a, A_F16_K16, 2, np.float16, 2)),
                             emu.to_device(pack(b, B_F16_K16, 2, np.float16, 2, True)), emu.to_device(fc)])
    ref = (c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    assert np.array_equal(emu.to_host(out, (32, 2), np.uint32), pack(ref, C_TABLE, 2, np.float16, 2)), \
        f"seed {rng.seed_value}"


@pytest.mark.parametrize("instr,msg", [
    ("mma.sync.aligned.m16n8k16.row.row.f32.f16.f16.f32", "row.col"),
    ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", "shape"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32", "must match"),
    ("mma.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f16", "accumulator"),
])
def test_unsupported_forms_fail_at_load(instr, msg):
    body = f"\t{instr} {{%r1, %r2, %r3, %r4}}, {{%r5, %r6, %r7, %r8}}, {{%r9, %r10}}, {{%r1, %r2, %r3, %r4}};"
    with pytest.raises(UnsupportedInstruction, match=msg):
        load_ptx(kernel(body))
