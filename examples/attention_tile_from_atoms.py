"""One attention tile composed from atoms: ``O = softmax(Q K^T / sqrt(d)) V`` for 64 queries
and up to 128 keys, the shape of one step of a FlashAttention-3-style forward on Hopper.

1. TMA loads Q (64 x 64), K (128 x 64) and V (128 x 64) into 128-byte-swizzled shared buffers
   that declare their WGMMA operand layout (Q, K K-major; V MN-major: V row-major is N-major B).
2. ``S = Q K^T`` by the SS WGMMA (64 x 128 f32 accumulator in registers).
3. Columns at or past ``kv_len`` (a kernel argument) are masked to -inf; the softmax runs in
   registers: row max and row sum over the quad of lanes sharing a row (``shfl.sync.bfly``),
   ``exp2`` with the scale folded into one ``fma``, ``rcp.approx`` of the sum.
4. ``P`` (the exponentials) is re-packed in place as the A fragment of the next WGMMA
   (``cvt.rn.bf16x2.f32``, no data between threads) and ``O = P V`` runs with A from registers.
5. ``O / rowsum`` is stored by ``store_operand`` into a swizzled shared tile (the layout a
   128-byte-swizzled TMA box has) and TMA-stored; rows past ``q_len`` are clipped by TMA.

Runs on the emulator here (a GPU where present) and checks against numpy float64.
"""
import math

import ml_dtypes
import numpy as np
from mlir.dialects import gpu

from cutedsl.atom import MBarriers, TmaCopy, WarpgroupMMA, bulk_commit_group, bulk_wait_group, fence_proxy_async
from cutedsl.atom.fragment_rows import map_rows, row_max, row_sum
from cutedsl.atom.operand_store import store_operand
from cutedsl.atom.wgmma_rs import AFragment, WarpgroupMMARegA
from cutedsl.compiler import TensorMapSpec, compile_kernel
from cutedsl.runtime import get_backend, launch
from cutedsl.ir import If, KernelBuilder, Param, SmemPlan, fmath, select, thread_idx

DT = "bf16"
BM, BKV, D = 64, 128, 64            # queries, keys (two 64-key k-tiles of P V), head dimension
KT = BKV // 64
be = get_backend("auto")
rng = np.random.default_rng()

specs = {"q": TensorMapSpec("q", DT, (BM, D), swizzle=128), "k": TensorMapSpec("k", DT, (BKV, D), swizzle=128),
         "v": TensorMapSpec("v", DT, (64, D), swizzle=128), "o": TensorMapSpec("o", DT, (BM, D), swizzle=128)}
plan = SmemPlan()
plan.buffer("q", (BM, D), DT, swizzle=128, major="K")           # A of S = Q K^T
plan.buffer("k", (BKV, D), DT, swizzle=128, major="K")          # B of S: K rows are N, d contiguous
plan.buffer("v", (64, D), DT, stages=KT, swizzle=128, major="MN")   # B of O = P V, one k-tile per stage
plan.buffer("o", (BM, D), DT, swizzle=128, major="K")           # O as a K-major operand tile = the TMA box
plan.barriers("bar", 1)

params = [Param(n, "tensormap") for n in specs] + [Param("kv_len", "i32"), Param("scale", "f32")]
kb = KernelBuilder("attention_tile", params, block=(128,))
with kb.build() as args:
    tid = thread_idx()
    leader = tid.eq(0)
    smem = plan.bind()
    tma = {n: TmaCopy(s, getattr(args, n)) for n, s in specs.items()}
    bar = MBarriers(smem.barriers("bar"), 1)
    bar.init(0, 1, predicate=leader)
    bar.fence_init()
    gpu.barrier()
    with If(leader):
        bar.arrive_expect_tx(0, tma["q"].box_bytes + tma["k"].box_bytes + KT * tma["v"].box_bytes)
        tma["q"].load(smem["q"].tile(), bar, 0, (0, 0))
        tma["k"].load(smem["k"].tile(), bar, 0, (0, 0))           # rows past kv_len arrive as zeros
        for kt in range(KT):
            tma["v"].load(smem["v"].tile(kt), bar, 0, (64 * kt, 0))
    bar.wait(0, 0)

    qk = WarpgroupMMA(BM, BKV, DT, b_major="K")
    s = qk.mma(qk.undef(), smem["q"].tile(), smem["k"].tile(), accumulate=False)
    qk.wait(0)
    s = s.map(lambda x, r, c: select(c < args.kv_len, x, -math.inf))   # keys past kv_len do not exist
    log2_scale = args.scale * fmath.LOG2E
    mx = row_max(s)
    p = map_rows(s, lambda x, m: fmath.exp2(fmath.fma(x, log2_scale, -(m * log2_scale))), mx)
    inv_sum = [[fmath.rcp_approx(x) for x in blk] for blk in row_sum(p)]

    pv = WarpgroupMMARegA(BM, D, DT, b_major="MN")
    frag = AFragment.from_accumulator(p, DT)
    o = pv.undef()
    for kt in range(KT):
        o = pv.mma(o, frag, smem["v"].tile(kt), accumulate=kt > 0, k_tile=kt)
    pv.wait(0)
    o = map_rows(o, lambda x, r: x * r, inv_sum)

    store_operand(o, smem["o"].tile(), "A")         # swizzle and major from buffer 'o'
    fence_proxy_async()                             # generic writes -> the TMA store's async reads
    gpu.barrier()
    with If(leader):
        tma["o"].store(smem["o"].tile(), (0, 0))
        bulk_commit_group()
        bulk_wait_group(0)
ck = compile_kernel(kb, dynamic_smem=plan.dynamic_bytes, tensor_maps=list(specs.values()))
sass = ck.resources.sass
print(f"compiled: {ck.resources.registers} registers, {ck.resources.spill_stores} B spilled; SASS "
      f"{sass.get('HGMMA')} HGMMA, {sass.get('STSM')} STSM, {sass.get('SHFL')} SHFL, {sass.get('MUFU')} MUFU")

q_len, kv_len = 50, 100                             # neither a tile multiple
npdt = ml_dtypes.bfloat16
q, k, v = (rng.standard_normal(s).astype(npdt) for s in ((q_len, D), (kv_len, D), (kv_len, D)))
o = np.zeros((q_len, D), npdt)
scale = 1.0 / math.sqrt(D)
launch(ck, (1, 1, 1), q=q, k=k, v=v, o=o, kv_len=kv_len, scale=scale, backend=be)   # maps encoded, o copied back
got = o.astype(np.float64)

q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
logits = q64 @ k64.T * scale
w = np.exp(logits - logits.max(axis=1, keepdims=True))
want = (w / w.sum(axis=1, keepdims=True)) @ v64
err = np.abs(got - want).max() / np.abs(want).max()
# bf16 P (relative 2^-9) and a bf16 O (2^-9) bound the error; a layout slip gives O(1)
assert err < 1e-2, err
print(f"checked: attention tile q_len={q_len}, kv_len={kv_len}, d={D} ({DT}) on {be.name!r}: "
      f"max error {err:.1e} of max |O|")
