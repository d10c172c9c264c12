"""Helpers for the emulator tests: wrap PTX snippets into kernels and run them."""
from __future__ import annotations

import json
import pathlib

import numpy as np

from cutedsl.sim import Emulator, load_ptx

HERE = pathlib.Path(__file__).parent
PTX_DIR = HERE / "ptx"
HEADER = ".version 8.3\n.target sm_90a\n.address_size 64\n\n"
REGS = """\t.reg .pred %p<64>;
\t.reg .b16 %rs<64>;
\t.reg .b32 %r<160>;
\t.reg .f32 %f<64>;
\t.reg .b64 %rd<64>;
\t.reg .f64 %fd<32>;
"""


def mbarrier_wait(bar: str = "%r40", parity=0) -> str:
    """The blocking parity wait LLVM emits for ``nvgpu.mbarrier.try_wait.parity``: an inline-asm
    scope with a local predicate and local labels (repeated names in every expansion)."""
    return (f"\n\t{{\n\t.reg .pred P1;\n\tLAB_WAIT:\n\tmbarrier.try_wait.parity.shared.b64 P1, [{bar}], {parity};"
            f"\n\t@P1 bra.uni DONE;\n\tbra.uni LAB_WAIT;\n\tDONE:\n\t}}\n")


def kernel(body: str, params=("out",), name: str = "k", directives: str = "", decls: str = "",
           ptypes: dict | None = None) -> str:
    """PTX text of one entry ``name`` with ``.u64`` pointer params ``p_<name>`` (or the types
    given in ``ptypes``), the default register set, extra declarations and ``body``."""
    ptypes = ptypes or {}
    ps = ",\n".join(f"\t.param {ptypes.get(p, '.u64')} p_{p}" for p in params)
    return (f"{HEADER}.visible .entry {name}(\n{ps}\n)\n{directives}\n{{\n{REGS}{decls}\n{body}\n\tret;\n}}\n")


def fixture(name: str):
    """(ptx text, meta dict) of a committed PTX fixture."""
    return (PTX_DIR / f"{name}.ptx").read_text(), json.loads((PTX_DIR / f"{name}.json").read_text())


REG_OF = {8: "%rd", 4: "%r", 2: "%rs", 1: "%p"}
WIDTH = {"u8": 1, "s8": 1, "b8": 1, "u16": 2, "s16": 2, "b16": 2, "f16": 2, "bf16": 2, "u32": 4, "s32": 4,
         "b32": 4, "f32": 4, "u64": 8, "s64": 8, "b64": 8, "f64": 8, "pred": 1, "f16x2": 4, "bf16x2": 4}


def alu(instr: str, in_types, inputs, out_type, emu: Emulator | None = None):
    """Run ``instr`` (with ``{d}``, ``{a}``, ``{b}``, ``{c}`` placeholders) once per thread on
    ``inputs`` (numpy arrays of equal length <= 32, stored in 8-byte slots) and return the
    result values as ``out_type`` (numpy dtype)."""
    emu = emu or Emulator()
    n = len(inputs[0])
    names = "abc"
    loads, regs = [], {}
    for i, (t, v) in enumerate(zip(in_types, inputs)):
        w = WIDTH[t]
        if t == "pred":
            regs[names[i]] = f"%p{10 + i}"
            loads.append(f"ld.global.u8 %rs{20 + i}, [%rd{6 + i}];\n\tsetp.ne.b16 %p{10 + i}, %rs{20 + i}, 0;")
        else:
            regs[names[i]] = f"{REG_OF[max(w, 2)]}{10 + i}"
            loads.append(f"ld.global.b{8 * w if w > 1 else 8} {REG_OF[max(w, 2)]}{10 + i}, [%rd{6 + i}];")
    ow = WIDTH[out_type] if isinstance(out_type, str) else np.dtype(out_type).itemsize
    if out_type == "pred":
        regs["d"] = "%p20"
        store = "selp.u32 %r30, 1, 0, %p20;\n\tst.global.u32 [%rd9], %r30;"
    else:
        regs["d"] = f"{REG_OF[max(ow, 2)]}20"
        store = f"st.global.b{8 * ow if ow > 1 else 8} [%rd9], {regs['d']};"
    body = f"""
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_a];
\tld.param.u64 %rd3, [p_b];
\tld.param.u64 %rd4, [p_c];
\tmov.u32 %r100, %tid.x;
\tmul.wide.u32 %rd5, %r100, 8;
\tadd.s64 %rd6, %rd2, %rd5;
\tadd.s64 %rd7, %rd3, %rd5;
\tadd.s64 %rd8, %rd4, %rd5;
\tadd.s64 %rd9, %rd1, %rd5;
\t{chr(10).join(loads)}
\t{instr.format(**regs)};
\t{store}
"""
    ptx = kernel(body, params=("out", "a", "b", "c"))
    prog = load_ptx(ptx)
    bufs = []
    for i in range(3):
        slot = np.zeros((n, 8), np.uint8)
        if i < len(inputs):
            v = np.asarray(inputs[i])
            if in_types[i] == "pred":
                v = v.astype(np.uint8)
            raw = v.view(np.uint8).reshape(n, -1)
            slot[:, :raw.shape[1]] = raw
        bufs.append(emu.to_device(slot))
    out = emu.alloc(n * 8)
    emu.launch(prog, 1, n, [out] + bufs)
    raw = emu.to_host(out, (n, 8), np.uint8)
    if out_type == "pred":
        return raw[:, :4].copy().view(np.uint32)[:, 0].astype(bool)
    dt = np.dtype(out_type) if not isinstance(out_type, str) else None
    return raw[:, :ow].copy().view(dt)[:, 0]


#: Copies ``%r22`` bytes of shared memory at ``%r41`` to the global pointer ``%rd1``, 4 bytes
#: per thread per step with 128 threads (``%r1`` = tid.x); used to read back a TMA destination.
COPY_OUT = """
\tshl.b32 %r50, %r1, 2;
$L_copy:
\tsetp.ge.u32 %p5, %r50, %r22;
\t@%p5 bra $L_copied;
\tadd.s32 %r51, %r41, %r50;
\tld.shared.u32 %r52, [%r51];
\tcvt.u64.u32 %rd20, %r50;
\tadd.s64 %rd21, %rd1, %rd20;
\tst.global.u32 [%rd21], %r52;
\tadd.s32 %r50, %r50, 512;
\tbra.uni $L_copy;
$L_copied:
"""
