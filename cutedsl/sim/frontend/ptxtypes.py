"""PTX value types for the emulator's decoder: numpy dtypes per PTX type, register classes
and their typed views, special registers, immediates, and the decoded :class:`Instr` / :class:`Op`
records (split out of :mod:`cutedsl.sim.frontend.program` so that the decoder reads in one go)."""
from __future__ import annotations

import re
import struct

import ml_dtypes
import numpy as np

from .ptxmodule import TYPE_SIZES

#: param-space offset of call-sequence parameters (per thread, for vprintf)
CALLPARAM_BASE = 1 << 20

#: numpy dtype of each PTX type
NP = {"b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16,
      "s16": np.int16, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "b32": np.uint32,
      "u32": np.uint32, "s32": np.int32, "f32": np.float32, "f16x2": np.uint32,
      "bf16x2": np.uint32, "f32x2": np.uint64, "tf32": np.uint32, "b64": np.uint64, "u64": np.uint64,
      "s64": np.int64, "f64": np.float64, "pred": np.bool_, "e4m3x2": np.uint16,
      "e5m2x2": np.uint16}
NP = {k: np.dtype(v) for k, v in NP.items()}

#: register class of each declared register type
REG_CLASS = {"pred": "p", "b8": "h", "u8": "h", "s8": "h", "b16": "h", "u16": "h", "s16": "h",
             "f16": "h", "bf16": "h", "b32": "r", "u32": "r", "s32": "r", "f32": "r",
             "f16x2": "r", "bf16x2": "r", "f32x2": "d", "b64": "d", "u64": "d", "s64": "d", "f64": "d"}
CLASS_BITS = {"p": 1, "h": 16, "r": 32, "d": 64}

#: typed register-file views: (class, kind) -> attribute name on the warp
VIEW = {("h", "u"): "u16", ("h", "s"): "s16", ("h", "f"): "f16", ("h", "bf"): "bf16",
        ("r", "u"): "u32", ("r", "s"): "s32", ("r", "f"): "f32",
        ("d", "u"): "u64", ("d", "s"): "s64", ("d", "f"): "f64", ("p", "p"): "p"}

SPECIAL = re.compile(r"%(tid|ntid|ctaid|nctaid|cluster_ctaid|cluster_nctaid|clusterid|nclusterid)"
                     r"\.(x|y|z)$|%(laneid|warpid|nwarpid|smid|nsmid|gridid|cluster_ctarank|"
                     r"cluster_nctarank|is_explicit_cluster|dynamic_smem_size|total_smem_size|"
                     r"lanemask_eq|lanemask_le|lanemask_lt|lanemask_ge|lanemask_gt|clock|clock64|"
                     r"globaltimer|globaltimer_lo|globaltimer_hi|aggr_smem_size)$")


def kind_of(t: str) -> str:
    if t in ("f16", "f32", "f64"):
        return "f"
    if t == "bf16":
        return "bf"
    if t == "pred":
        return "p"
    return "s" if t[0] == "s" else "u"


def bits_of(t: str) -> int:
    return 1 if t == "pred" else TYPE_SIZES[t] * 8


class Instr:
    """One decoded instruction. ``src``: the source line the PTX's line table names for it
    (``path:line``, from the ``.loc`` in force; "" without one) -- for this project's kernels
    the Python line that built the instruction."""
    __slots__ = ("pc", "line", "text", "opcode", "guard", "neg", "fn", "scope", "info", "rbits", "batch", "src",
                 "vec", "fused", "regs", "fold")

    def __init__(self, pc, line, text, opcode, scope, src=""):
        self.pc, self.line, self.text, self.opcode, self.scope = pc, line, text, opcode, scope
        self.src = src
        self.guard, self.neg, self.fn, self.info = -1, False, None, None
        #: bit i set when the instruction names 32-bit register i (wgmma accumulator checks)
        self.rbits = 0
        #: registry.NO_BATCH / BATCH_*: whether warps at this PC may run it together (lockstep.py)
        self.batch = 0
        #: fusion.VecForm (the instruction as an elementwise operation) and fusion.FusedBlock
        #: (the fused run that starts here), or None
        self.vec = self.fused = None
        #: (registers read, registers written) as (class, index) pairs, for instructions outside
        #: VecForm whose decoder knows them (wgmma: chain_fold.py); chain_fold.ChainFold that starts here
        self.regs = self.fold = None

    def at(self) -> str:
        """``PTX line N`` and, where the line table names one, ``(path:line)``."""
        return f"PTX line {self.line} ({self.src})" if self.src else f"PTX line {self.line}"

    def where(self) -> str:
        """:meth:`at` and the instruction's text: what every error names the instruction by."""
        return f"{self.at()}: {self.text}"


# -- operands ----------------------------------------------------------------------------

class Op:
    """A parsed operand. kind in reg, sreg, imm, fimm, sym, vec, addr, sink, label."""
    __slots__ = ("kind", "cls", "idx", "name", "value", "items", "base", "offset", "neg", "coords")

    def __init__(self, kind, **kw):
        self.kind = kind
        self.cls = self.idx = self.name = self.value = self.items = self.base = None
        self.offset = 0
        self.neg = False
        self.coords = None
        for k, v in kw.items():
            setattr(self, k, v)


_INT_RE = re.compile(r"-?(0[xX][0-9a-fA-F]+|\d+)[Uu]?$")
_F32_RE = re.compile(r"0[fF]([0-9a-fA-F]{8})$")
_F64_RE = re.compile(r"0[dD]([0-9a-fA-F]{16})$")
_FLT_RE = re.compile(r"-?\d+\.\d*([eE][-+]?\d+)?$|-?\d+[eE][-+]?\d+$")


def imm_array(value, t: str):
    """Immediate ``value`` (int, or ('f32'|'f64', bits), or float) as a numpy scalar of PTX type t."""
    dt = NP[t]
    if isinstance(value, tuple):
        kind, bits = value
        f = struct.unpack("<f", struct.pack("<I", bits))[0] if kind == "f32" else \
            struct.unpack("<d", struct.pack("<Q", bits))[0]
        if dt.kind == "f" or t == "bf16":
            return np.array(f, dtype=np.float64).astype(dt)[()]
        # bit pattern used with an integer type (e.g. mov.b32 %r, 0f3F800000)
        return np.array(bits & ((1 << (dt.itemsize * 8)) - 1), dtype=f"u{dt.itemsize}").view(dt)[()]
    if isinstance(value, float):
        return np.array(value, dtype=np.float64).astype(dt)[()]
    if dt.kind == "f" or t == "bf16":
        return np.array(float(value), dtype=np.float64).astype(dt)[()]
    if t == "pred":
        return np.bool_(value != 0)
    nb = dt.itemsize * 8
    return np.array(value & ((1 << nb) - 1), dtype=f"u{dt.itemsize}").view(dt)[()]
