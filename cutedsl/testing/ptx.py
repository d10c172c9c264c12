"""PTX-snippet harnesses: wrap a few hand-written PTX instructions into a complete kernel and
run them on the emulator -- how to test what one instruction does (``run_alu``) or how the
emulator judges a short pattern (races, barrier phases, asynchronous proxies), independently of
the MLIR path. Needs no MLIR; :func:`run_alu` and kernels given to ``Emulator.load`` need only
numpy.

Register conventions of :func:`ptx_kernel`: the declared set :data:`REGS` (``%p0..63``,
``%rs0..63``, ``%r0..159``, ``%f0..63``, ``%rd0..63``, ``%fd0..31``); parameter ``name`` is
``p_<name>``.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError

#: the default module header: PTX ISA version 8.3 for sm_90a, 64-bit addresses
HEADER = ".version 8.3\n.target sm_90a\n.address_size 64\n\n"
#: the registers every :func:`ptx_kernel` declares
REGS = """\t.reg .pred %p<64>;
\t.reg .b16 %rs<64>;
\t.reg .b32 %r<160>;
\t.reg .f32 %f<64>;
\t.reg .b64 %rd<64>;
\t.reg .f64 %fd<32>;
"""


def header(target: str = "sm_90a", version: str = "8.3") -> str:
    """The ``.version`` / ``.target`` / ``.address_size 64`` lines of a module."""
    return f".version {version}\n.target {target}\n.address_size 64\n\n"


def ptx_kernel(body: str, params=("out",), name: str = "k", directives: str = "", decls: str = "",
               ptypes: dict | None = None, *, target: str = "sm_90a", version: str = "8.3") -> str:
    """PTX text of a module with one entry ``name``: parameters ``p_<param>`` (``.u64`` unless
    ``ptypes`` maps the name to another ``.param`` type, e.g. ``".u32"``), the entry
    ``directives`` (``.reqntid``, ``.maxnreg``, ...), the registers :data:`REGS`, the extra
    declarations ``decls`` (``.shared`` variables, more registers), ``body`` and a final
    ``ret``. ``target`` / ``version``: the module's ``.target`` and PTX ISA ``.version``."""
    ptypes = ptypes or {}
    ps = ",\n".join(f"\t.param {ptypes.get(p, '.u64')} p_{p}" for p in params)
    return (f"{header(target, version)}.visible .entry {name}(\n{ps}\n)\n{directives}\n{{\n{REGS}{decls}\n"
            f"{body}\n\tret;\n}}\n")


def mbarrier_wait(bar: str = "%r40", parity=0) -> str:
    """PTX of a blocking wait for phase ``parity`` of the mbarrier at shared address ``bar`` --
    the loop LLVM emits for ``nvgpu.mbarrier.try_wait.parity`` (PTX ISA, mbarrier.try_wait):
    an inline-asm scope with its own predicate and labels, so it may be repeated in a kernel."""
    return (f"\n\t{{\n\t.reg .pred P1;\n\tLAB_WAIT:\n\tmbarrier.try_wait.parity.shared.b64 P1, [{bar}], {parity};"
            f"\n\t@P1 bra.uni DONE;\n\tbra.uni LAB_WAIT;\n\tDONE:\n\t}}\n")


#: register prefix of each operand width in bytes
REG_OF = {8: "%rd", 4: "%r", 2: "%rs", 1: "%p"}
#: width in bytes of each PTX type :func:`run_alu` takes (sub-byte packed types excluded)
WIDTH = {"u8": 1, "s8": 1, "b8": 1, "u16": 2, "s16": 2, "b16": 2, "f16": 2, "bf16": 2, "u32": 4, "s32": 4,
         "b32": 4, "f32": 4, "u64": 8, "s64": 8, "b64": 8, "f64": 8, "pred": 1, "f16x2": 4, "bf16x2": 4}


def run_alu(instr: str, in_types, inputs, out_type, emu=None) -> np.ndarray:
    """Run one instruction per thread on the emulator and return its results.

    ``instr``: PTX with the placeholders ``{d}`` (result) and ``{a}``, ``{b}``, ``{c}``
    (operands), e.g. ``"add.rn.f32 {d}, {a}, {b}"``. ``in_types``: the PTX type of each operand
    (keys of :data:`WIDTH`; ``"pred"`` is a boolean array). ``inputs``: one numpy array per
    operand, all of the same length n (1..32 threads, thread i gets element i, bit patterns as
    given). ``out_type``: the numpy dtype of the result (its width picks the register:
    ``np.float32`` reads a ``.b32``), or ``"pred"`` for a predicate result (bools).
    Returns an array of n results of ``out_type``. Raises ``ArgumentError`` for
    more than three operands, a type it does not know, or inputs of unequal or bad length.
    """
    from ..sim import Emulator
    if not 1 <= len(inputs) <= 3 or len(in_types) != len(inputs):
        raise ArgumentError(f"run_alu takes 1..3 operands with one type each, got {len(inputs)} inputs "
                            f"and {len(in_types)} types")
    bad = [t for t in in_types if t not in WIDTH] + ([out_type] if isinstance(out_type, str)
                                                     and out_type != "pred" else [])
    if bad:
        raise ArgumentError(f"unknown operand type(s) {bad}: operands take one of {sorted(WIDTH)}, the "
                            f"result a numpy dtype or 'pred'")
    n = len(inputs[0])
    if not 1 <= n <= 32 or any(len(v) != n for v in inputs):
        raise ArgumentError(f"inputs must have equal lengths of 1..32 (one warp), got {[len(v) for v in inputs]}")
    emu = emu or Emulator()
    loads, regs = [], {}
    for i, t in enumerate(in_types):
        w = WIDTH[t]
        name = "abc"[i]
        if t == "pred":          # a byte 0/1 turned into a predicate
            regs[name] = f"%p{10 + i}"
            loads.append(f"ld.global.u8 %rs{20 + i}, [%rd{6 + i}];\n\tsetp.ne.b16 %p{10 + i}, %rs{20 + i}, 0;")
        else:
            regs[name] = f"{REG_OF[max(w, 2)]}{10 + i}"
            loads.append(f"ld.global.b{8 * w} {REG_OF[max(w, 2)]}{10 + i}, [%rd{6 + i}];")
    pred = isinstance(out_type, str)          # "pred" (anything else was refused above)
    ow = 1 if pred else np.dtype(out_type).itemsize
    if pred:
        regs["d"] = "%p20"
        store = "selp.u32 %r30, 1, 0, %p20;\n\tst.global.u32 [%rd9], %r30;"
    else:
        regs["d"] = f"{REG_OF[max(ow, 2)]}20"
        store = f"st.global.b{8 * ow} [%rd9], {regs['d']};"
    # each thread's operands and result sit in 8-byte slots at tid * 8
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
    prog = emu.load(ptx_kernel(body, params=("out", "a", "b", "c")))
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
    if pred:
        return raw[:, :4].copy().view(np.uint32)[:, 0].astype(bool)
    return raw[:, :ow].copy().view(np.dtype(out_type))[:, 0]
