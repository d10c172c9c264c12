"""Blackwell ``tcgen05.mma`` (sm_100a): instruction descriptor, sm_100 shared-memory
descriptors, the accumulator in tensor memory, and ``tcgen05.commit`` completion (issue 23).

``tcgen05.mma.cta_group::G.kind::K [d], a, b, idesc{, {mask}}, enable_input_d{, scale_input_d}``
is issued by **one thread** (each executing lane issues one MMA): ``D[M x N] (TMEM) = A[M x K]
x B[K x N] + (enable_input_d ? D * 2^-scale_input_d : 0)``. A is a shared-memory descriptor or
(``[a]``) a TMEM address, B a shared-memory descriptor, D a TMEM address. K is 32 bytes of the
input type (16 for f16/bf16, 8 for tf32, 32 for 8-bit types).

**Instruction descriptor** (32 bits; PTX ISA "Instruction descriptor" of tcgen05.mma, the same
fields as CUTLASS ``UMMA::InstrDescriptor``):

=======  ==================  ================================================================
bits     field               values
=======  ==================  ================================================================
0-1      sparsity selector   (sparse only)
2        sparsity            0 dense; 1 sparse (refused: ``.sp`` is not emulated)
3        saturate            kind::i8 only: clamp the s32 result
4-5      D format            0 f16, 1 f32, 2 s32
7-9      A format            kind::f16: 0 f16, 1 bf16; kind::tf32: 2; kind::f8f6f4: 0 e4m3,
                             1 e5m2, 3 e2m3, 4 e3m2, 5 e2m1; kind::i8: 0 u8, 1 s8
10-12    B format            as A
13, 14   negate A, B         float kinds only
15, 16   transpose A, B      0 K-major, 1 MN-major (not for the 6- and 4-bit types)
17-22    N >> 3              N = 8..256 (multiple of 8 for M = 64, of 16 for M = 128)
24-28    M >> 4              64 or 128 with cta_group::1; 256 with cta_group::2
30-31    max shift           ``.ws`` only (must be 0)
=======  ==================  ================================================================

**Shared-memory descriptor** (sm_100, 64 bits; PTX ISA "Shared memory descriptor" of tcgen05,
CUTLASS ``UMMA::SmemDescriptor``): start address bits 0-13, LBO 16-29, SBO 32-45 (all >> 4),
the fixed constant 0b001 at bits 46-48, base offset 49-51, LBO mode bit 52, swizzle at bits
61-63: 0 none, 2 128B, 4 64B, 6 32B (1, 128B with 32-byte atoms, is refused as not emulated;
3, 5, 7 are invalid). Element placement is the canonical layout of sm_90 (K-major or MN-major,
the swizzle XOR on the absolute shared address: :func:`cutedsl.sim.instructions.wgmma.operand_addrs`).

**D in TMEM** (f32 / s32, one 32-bit column per element; PTX ISA "Data path layout"): with
M = 128 row ``m`` is lane ``m``; with M = 64 rows 16q..16q+15 are lanes 32q..32q+15 (the first
half of each lane quarter); column ``n`` is the address's column + ``n``. The address's lane
field must be 0. A from TMEM (M = 128): row ``m`` at lane ``m``, K packed little-endian into
32-bit columns. ``{mask}`` (4 registers): bit ``i`` of register ``j`` keeps lane ``32j + i``
from being written. An f16 D, ``.ws`` and ``.sp`` are refused with ``UnsupportedInstruction`` /
``SimRuntimeError``. The 6- and 4-bit f8f6f4 inputs are read from shared memory in the padded
layout (:mod:`cutedsl.sim.engines.subbyte`); the block-scaled kinds: :mod:`cutedsl.sim.engines.tcgen05_scale`.

**CTA pairs** (``cta_group::2``, M = 256 or 128; CUTLASS ``SM100_MMA_*_2x1SM`` layouts): the even
CTA of a pair in the cluster issues; CTA ``r`` of the pair holds A's rows ``(M/2) r ..`` and B's
rows (N) ``N/2 r ..`` at the same shared offsets the descriptors name, and receives D's rows
``(M/2) r ..`` in its own tensor memory: M = 256 -- lanes 0..127, the same columns; M = 128 --
row ``i`` of its 64 at lane ``i`` for the first N/2 columns and at lane ``64 + i`` for the rest
(:func:`d_layout`). The 8 mask registers cover the two CTAs' lanes in order.

**Numerics** as for wgmma ("exact" mode): products and sum in float64, one f32 rounding per
instruction; integer kinds exact (wrapping, or saturating with bit 3).

**Completion.** An MMA is an asynchronous operation of its issuing thread's ``tcgen05`` agent
(clock = MMAs issued so far). Eager mode computes it at issue; the adversarial mode defers it to
a random later point. ``tcgen05.commit`` makes one arrive on its mbarrier(s) once every MMA
the thread issued before it has completed (in the adversarial mode, deferred behind them), and
releases their effects: a thread that observes the phase may read D (``tcgen05.ld``) and
overwrite the operands' shared memory. Race detection records the MMA's shared-memory operand
reads (async proxy) and its TMEM reads and writes (:class:`cutedsl.sim.instructions.tmem.TmemShadow`).
"""
from __future__ import annotations

import numpy as np

from ..engines.async_engine import defer
from ..frontend.errors import SimRuntimeError
from ..frontend.registry import subhandler
from ..machine.tensor_memory import COLUMNS, lane_value, tmem_of, tmem_order, tmem_shadow
from ..engines.subbyte import FORMATS as SUBBYTE, ROW_BYTES, unpack
from ..engines.tcgen05_scale import SCALED_KINDS, decode_idesc_scaled, read_scales, scale_vector, sf_cells, sf_shadow_cells
from ..engines.wgmma_layout import ETYPES, decode_desc_sm100, load_operand, operand_addrs

#: (format code -> element type) per kind; the D format each kind allows
KINDS = {
    "f16": ({0: "f16", 1: "bf16"}, {1: "f32"}),
    "tf32": ({2: "tf32"}, {1: "f32"}),
    "f8f6f4": ({0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}, {1: "f32"}),
    "i8": ({0: "u8", 1: "s8"}, {2: "s32"}),
}
D_FORMATS = {0: "f16", 1: "f32", 2: "s32"}


def decode_idesc(idesc: int, kind: str, group: int = 1) -> dict:
    """The fields of a kind::f16/tf32/f8f6f4/i8 instruction descriptor (see the module table) of a
    ``cta_group::group`` MMA; ``SimRuntimeError`` naming the field for a value the kind or the
    group does not allow."""
    d = int(idesc) & 0xFFFFFFFF
    f = {"sparse": d >> 2 & 1, "saturate": d >> 3 & 1, "d": d >> 4 & 3, "a": d >> 7 & 7, "b": d >> 10 & 7,
         "neg_a": d >> 13 & 1, "neg_b": d >> 14 & 1, "mn_a": d >> 15 & 1, "mn_b": d >> 16 & 1,
         "n": (d >> 17 & 0x3F) << 3, "m": (d >> 24 & 0x1F) << 4, "shift": d >> 30 & 3}
    formats, d_ok = KINDS[kind]
    where = f"instruction descriptor 0x{d:08x} (kind::{kind})"
    if f["sparse"]:
        raise SimRuntimeError(f"{where} sets the sparsity bit 2: sparse tcgen05.mma (.sp) is not emulated")
    if f["shift"]:
        raise SimRuntimeError(f"{where} sets max shift (bits 30-31), which only tcgen05.mma.ws takes")
    if f["d"] not in d_ok:
        what = D_FORMATS.get(f["d"], f"invalid code {f['d']}")
        raise SimRuntimeError(f"{where}: D format (bits 4-5) {what} is not "
                              f"{'/'.join(d_ok.values())}" + (" (an f16 accumulator is not emulated)"
                                                              if f["d"] == 0 and kind != "i8" else ""))
    for op, bits in (("a", "7-9"), ("b", "10-12")):
        if f[op] not in formats:
            raise SimRuntimeError(f"{where}: {op.upper()} format (bits {bits}) {f[op]} is none of "
                                  f"{', '.join(f'{k} {v}' for k, v in formats.items())}")
        t = formats[f[op]]
        if t in SUBBYTE and f["mn_" + op]:
            raise SimRuntimeError(f"{where}: {op.upper()} is {t}, which must be K-major (transpose bit "
                                  f"{15 if op == 'a' else 16} set)")
        f[op + "_type"] = t
    if f["saturate"] and kind != "i8":
        raise SimRuntimeError(f"{where}: saturate (bit 3) is for kind::i8 only")
    if (f["neg_a"] or f["neg_b"]) and kind == "i8":
        raise SimRuntimeError(f"{where}: negate (bits 13-14) is for the float kinds only")
    m, n = f["m"], f["n"]
    if group == 1 and m not in (64, 128):
        raise SimRuntimeError(f"{where}: M (bits 24-28) = {m}; cta_group::1 takes 64 or 128")
    if group == 2 and m not in (128, 256):
        raise SimRuntimeError(f"{where}: M (bits 24-28) = {m}; cta_group::2 takes 128 or 256")
    step = 8 if m == 64 else 16
    if not (step <= n <= 256 and n % step == 0):
        raise SimRuntimeError(f"{where}: N (bits 17-22) = {n}; M = {m} takes N = {step}..256 in steps of {step}")
    return f


def d_lanes(m: int) -> np.ndarray:
    """TMEM lane of each of the M rows of D (data path layout of cta_group::1)."""
    r = np.arange(m)
    return r if m == 128 else 32 * (r // 16) + r % 16


def d_layout(rows: int, n: int, group: int) -> tuple:
    """``(lane, column offset)``, each ``rows x n``, of D's element ``(row, col)`` in one CTA's
    tensor memory (PTX ISA "Data path layout"): 128 rows -- row ``r`` at lane ``r``; 64 rows
    of cta_group::1 (M = 64) -- rows ``16q + i`` at lanes ``32q + i``, the first half of each
    lane quarter; 64 rows of a pair (M = 128, cta_group::2) -- row ``r`` at lane ``r`` for the
    first half of the columns and at lane ``64 + r`` for the second, so the accumulator spans
    ``n / 2`` columns (CuTe's 2x1SM M = 128 accumulator layout: CuTe DSL's epilogue reads it
    so, ``tests/sim/test_cute_dsl_fixtures.py``)."""
    r, c = np.arange(rows)[:, None], np.arange(n)[None, :]
    if rows == 128:
        return np.broadcast_to(r, (rows, n)), np.broadcast_to(c, (rows, n))
    if group == 1:
        return np.broadcast_to(32 * (r // 16) + r % 16, (rows, n)), np.broadcast_to(c, (rows, n))
    half = n // 2
    return r + rows * (c // half), np.broadcast_to(c % half, (rows, n))


@subhandler("tcgen05", "mma")
def decode_mma(ctx, ins, mods, ops):
    kinds = [x[6:] for x in mods if x.startswith("kind::")]
    scaled = "block_scale" in mods
    vec_mods = [x for x in mods if x.startswith("scale_vec::") or x in ("block16", "block32")]
    other = [x for x in mods[1:] if not x.startswith(("kind::", "cta_group::", "collector::"))
             and x != "block_scale" and x not in vec_mods]
    if mods[0] != "mma" or other:
        ctx.unsupported(f"tcgen05.{'.'.join(mods)}: the dense and block-scaled tcgen05.mma are emulated (not "
                        f".ws/.sp)")
    if scaled and (len(kinds) != 1 or kinds[0] not in SCALED_KINDS):
        ctx.bad(f"block-scaled tcgen05.mma needs one of .kind::{', .kind::'.join(SCALED_KINDS)}")
    if not scaled and (len(kinds) != 1 or kinds[0] not in KINDS):
        ctx.bad(f"tcgen05.mma needs one of .kind::{', .kind::'.join(KINDS)}")
    if vec_mods and not scaled:
        ctx.bad(f".{vec_mods[0]} is for the block-scaled tcgen05.mma (.block_scale)")
    kind = kinds[0]
    vec = None
    if scaled:
        try:
            vec = scale_vector(kind, vec_mods)
        except ValueError as e:
            ctx.bad(str(e))
    group = 2 if "cta_group::2" in mods else 1
    if len(ops) < 5:
        ctx.bad("tcgen05.mma takes [d], a, b, idesc, {disable-output-lane,} enable-input-d{, scale-input-d}")
    d_addr = ctx.addr(ops[0])
    a_op = ctx.operand(ops[1])
    a_tmem = a_op.kind == "addr"
    ra = ctx.addr(a_op) if a_tmem else ctx.rd(a_op, "u64")
    rb = ctx.rd(ops[2], "u64")
    ridesc = ctx.rd(ops[3], "u32")
    rest = [ctx.operand(x) for x in ops[4:]]
    rsf = None
    if scaled:                                  # [scale-A-tmem], [scale-B-tmem]
        if len(rest) != 3 or rest[0].kind != "addr" or rest[1].kind != "addr":
            ctx.bad("block-scaled tcgen05.mma takes [d], a, b, idesc, [scale-A], [scale-B], enable-input-d")
        rsf = (ctx.addr(rest[0]), ctx.addr(rest[1]))
        rest = rest[2:]
    mask = None
    if rest and rest[0].kind == "vec":
        v = rest.pop(0)
        if len(v.items) != 4 * group:
            ctx.bad(f"disable-output-lane of cta_group::{group} is {4 * group} 32-bit registers")
        mask = [ctx.rd(x, "u32") for x in v.items]
    if not rest or len(rest) > 2:
        ctx.bad("tcgen05.mma needs enable-input-d (a predicate) and at most scale-input-d after it")
    en = rest[0]
    ren = ctx.rd(en, "pred") if en.kind == "reg" else (lambda w, v=bool(en.value): v)
    scale = 0
    if len(rest) == 2:
        if rest[1].kind != "imm" or not 0 <= rest[1].value <= 15 or kind not in ("f16", "tf32"):
            ctx.bad("scale-input-d is an immediate 0..15, for kind::f16 / kind::tf32 only")
        scale = rest[1].value
    K = SCALED_KINDS[kind][0] if scaled else {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32}[kind]

    def fn(w, g, m):
        for ln in w._lanes(m).tolist():     # a single-thread instruction: one MMA per lane
            issue(w, ln, lane_value(w, d_addr, ln), lane_value(w, ra, ln), lane_value(w, rb, ln),
                  lane_value(w, ridesc, ln), bool(lane_value(w, ren, ln)),
                  [lane_value(w, r, ln) for r in mask] if mask else None,
                  (lane_value(w, rsf[0], ln), lane_value(w, rsf[1], ln)) if rsf else None)

    def fail(msg):
        raise SimRuntimeError(f"tcgen05.mma: {msg}\n    at {ins.where()}")

    def issue(w, ln, d_a, a_v, b_desc, idesc, enable, dmask, sf=None):
        try:
            f = decode_idesc_scaled(idesc, kind, vec, group) if scaled else decode_idesc(idesc, kind, group)
        except SimRuntimeError as e:
            fail(str(e))
        M, N = f["m"], f["n"]
        (ea, ka, load_a), (eb, kb, load_b) = (operand_reader(f[x + "_type"], kind, K) for x in "ab")
        ctas = pair_of(w) if group == 2 else [w.cta]
        mc, nc = M // group, N // group         # A rows / B rows (N) each CTA holds
        if d_a >> 16:
            fail(f"D address 0x{d_a:08x} has lane {d_a >> 16}; the accumulator starts at lane 0")
        dcol = d_a & 0xFFFF
        lane_of, col_of = d_layout(mc, N, group)
        span = int(col_of.max()) + 1
        for c in ctas:
            t = tmem_of(c)
            if not t.covered(dcol, span):
                fail(f"D columns {dcol}..{dcol + span - 1} are not inside one tcgen05.alloc block of CTA {c.ctaid} "
                     f"(allocated: {sorted(t.blocks.items())})")
        try:
            _b, bw, b_ei, b_end = operand_addrs(b_desc, nc, kb, eb, bool(f["mn_b"]), decode_desc_sm100)
            if not a_tmem:
                _a, aw, a_ei, a_end = operand_addrs(a_v, mc, ka, ea, bool(f["mn_a"]), decode_desc_sm100)
        except SimRuntimeError as e:
            fail(str(e))
        words = [bw] if a_tmem else [bw, aw]
        for what, end in (("B", b_end),) + ((("A", a_end),) if not a_tmem else ()):
            if end > w.cta.smem_size:
                fail(f"{what} operand reaches byte {end} past shared memory ({w.cta.smem_size} B)")
        nbits = 32 * len(dmask) if dmask is not None else 0
        keep = np.ones((group, mc, N), bool)
        if dmask is not None:                   # bit i of register j: lane 32 j + i (per CTA in order)
            bits = np.array([(dmask[r // 32] >> (r % 32)) & 1 for r in range(nbits)], bool).reshape(group, -1)
            keep = ~bits[:, lane_of]
        cols = dcol + col_of
        d_cells = lane_of * COLUMNS + cols
        acol = None
        if a_tmem:
            if mc != 128:
                fail("A from tensor memory is emulated for 128 rows per CTA only")
            if f["mn_a"]:
                fail("A from tensor memory is K-major (instruction descriptor bit 15 must be 0)")
            if f["a_type"] in SUBBYTE:
                fail(f"A from tensor memory with {f['a_type']} elements is not emulated (only from shared memory)")
            acol, alane = a_v & 0xFFFF, a_v >> 16
            if alane:
                fail(f"A address 0x{a_v:08x} has lane {alane}; A in tensor memory starts at lane 0")
            for c in ctas:
                if not tmem_of(c).covered(acol, 8):
                    fail(f"A columns {acol}..{acol + 7} are not inside one tcgen05.alloc block of CTA {c.ctaid}")
        if sf is not None:
            for what, addr, rows in (("scale-A", sf[0], mc), ("scale-B", sf[1], N)):
                _l, sfc, lane = sf_cells(addr, rows)
                for c in ctas:
                    if lane or not tmem_of(c).covered(int(sfc.min()), int(sfc.max() - sfc.min()) + 1):
                        fail(f"{what} address 0x{addr:08x}: its {rows} rows' factors (lane 0.., columns "
                             f"{int(sfc.min())}..{int(sfc.max())}) are not inside one tcgen05.alloc block of CTA "
                             f"{c.ctaid}")
        cta = w.cta
        key = (cta.rank, w.wid, ln)
        hb = cta.cluster.hb
        clock = 0
        if hb is not None and cta.shadow is not None:
            ag = hb.agent(("tcgen05",) + key, "tcgen05", cta, w.wid, f"tcgen05 unit of thread {32 * w.wid + ln}")
            ag.n += 1
            clock = ag.n
            vc, pvc = hb.async_op([w], ag.idx, clock)
            tvc = tmem_order(w, hb, vc, ag.idx)
            for i, c in enumerate(ctas):        # each CTA's operand halves, accumulator rows
                for wd in words:
                    c.shadow.read(wd, ag.idx, clock, vc, pvc, ins.pc, True, "tcgen05.mma operand")
                ts = tmem_shadow(c)                 # tensor memory: ordered as the fences allow (tvc)
                if acol is not None:
                    a_cells = np.arange(128)[:, None] * COLUMNS + (acol + np.arange(8))[None, :]
                    ts.read(a_cells.reshape(-1), ag.idx, clock, tvc, pvc, ins.pc, False, "tcgen05.mma A")
                if sf is not None:
                    for addr, rows in ((sf[0], mc), (sf[1], N)):
                        ts.read(sf_shadow_cells(addr, rows), ag.idx, clock, tvc, pvc, ins.pc, False,
                                "tcgen05.mma scale factors")
                cells = d_cells[keep[i]].reshape(-1)
                if enable:
                    ts.read(cells, ag.idx, clock, tvc, pvc, ins.pc, False, "tcgen05.mma D")
                ts.write(cells, ag.idx, clock, tvc, ins.pc, False, "tcgen05.mma D")

        def perform():
            B = np.concatenate([load_b(c, b_ei) for c in ctas]).T        # (K, N)
            if acol is not None:
                A = np.concatenate([_load_operand_bytes(np.ascontiguousarray(tmem_of(c).data[:128, acol:acol + 8])
                                                        .view(np.uint8).reshape(128, 32), *ETYPES[f["a_type"]])
                                    for c in ctas])
            else:
                A = np.concatenate([load_a(c, a_ei) for c in ctas])       # (M, K)
            old = np.concatenate([tmem_of(c).data[lane_of, cols] for c in ctas])
            if sf is not None:                  # MX: each block of K/vec elements of a row times its factor
                rep, ue8m0 = K // f["vec"], bool(f["scale_fmt"])
                # A's rows' factors in their own CTA's tensor memory; B's (all N rows) in each
                # CTA's, read from the issuing one's (a pair keeps the same factors in both)
                sfa = np.concatenate([read_scales(tmem_of(c).data, sf[0], mc, f["a_sf"], f["vec"], ue8m0)
                                      for c in ctas])
                A = A * np.repeat(sfa, rep, axis=1)
                B = B * np.repeat(read_scales(tmem_of(ctas[0]).data, sf[1], N, f["b_sf"], f["vec"], ue8m0),
                                  rep, axis=1).T
            if kind == "i8":
                r = A.astype(np.int64) @ B.astype(np.int64)
                if enable:
                    r = r + old.view(np.int32).astype(np.int64)
                r = np.clip(r, -2 ** 31, 2 ** 31 - 1) if f["saturate"] else r
                out = r.astype(np.int64).astype(np.int32).view(np.uint32)
            else:
                r = A @ B
                if f["neg_a"] ^ f["neg_b"]:
                    r = -r
                if enable:
                    r = r + old.view(np.float32).astype(np.float64) * 2.0 ** -scale
                with np.errstate(over="ignore"):
                    out = r.astype(np.float32).view(np.uint32)
            for i, c in enumerate(ctas):
                part = out[i * mc:(i + 1) * mc]
                tmem_of(c).data[lane_of[keep[i]], cols[keep[i]]] = part[keep[i]]
        defer(w, perform, ("tcgen05", key, clock), ("tcgen05", key))

    def pair_of(w):
        """The CTA pair of a cta_group::2 MMA: the issuing (even-rank) CTA and its peer."""
        cl = w.cta.cluster
        r = w.cta.rank
        if r % 2 or r + 1 >= len(cl.ctas):
            fail(f"a cta_group::2 MMA is issued by the even CTA of a pair in a cluster of an even number of "
                 f"CTAs; this is rank {r} of {len(cl.ctas)}")
        return [w.cta, cl.ctas[r + 1]]

    return fn




def operand_reader(t: str, kind: str, k: int):
    """(element bytes and K extent for :func:`operand_addrs`, reader (cta, element indices) ->
    values (rows, ``k``)) of an operand of element type ``t``: the 6- and 4-bit types are
    addressed as 32 bytes per row and unpacked (:mod:`cutedsl.sim.engines.subbyte`; packed e2m1 for
    kind::mxf4 / mxf4nvf4)."""
    if t in SUBBYTE:
        packed = kind in ("mxf4", "mxf4nvf4")
        return 1, ROW_BYTES, lambda c, ei: unpack(c.sv[1][ei], t, packed)
    esize, dt = ETYPES[t]
    return esize, k, lambda c, ei: load_operand(c, ei, esize, dt)


def _load_operand_bytes(raw, esize, dt):
    """Elements of a K-major A read from TMEM as bytes (rows, 32) -> float64/int64 (rows, K)."""
    if esize == 4:
        v = raw.view(np.uint32)
        return (v & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)     # tf32
    v = raw.view(np.dtype(dt))
    return v.astype(np.int64) if np.dtype(dt).kind in "iu" else v.astype(np.float64)


__all__ = ["decode_idesc", "d_lanes", "decode_mma"]
