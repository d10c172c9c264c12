#!/usr/bin/env python3
"""Side-by-side timing: the cutedsl PTX emulator against Triton's CPU interpreter.

**GEMM.** Both run one f16 GEMM ``D = A @ B`` (f32 accumulate) of the same size on the same
inputs (small random integers, so both results are exact and compared with numpy):

* **cutedsl**: the default ``GemmConfig()`` kernel compiled to PTX and run by ``cutedsl.sim``
  with race checks on (the emulator's default): every warp, TMA copy, mbarrier and wgmma.
* **Triton**: a blocked matmul (BLOCK_M = BLOCK_N = 128, BLOCK_K = 64, like the tutorial) run
  with ``TRITON_INTERPRET=1``: Triton's interpreter evaluates each program's block operations
  with numpy (no warps, no asynchronous copies, no swizzle).

**Attention** (``--seqlen``, 0 skips it). Both run one f16 attention forward ``O = softmax(Q K^T /
sqrt(d)) V`` (batch 1, 2 heads, head dim 128, no mask) on the same standard-normal inputs, each
compared with a float64 reference (max error below 4e-3, the 16-bit rounding of P and O):

* **cutedsl**: ``cutedsl.Attention`` (the FlashAttention-3-style kernel: TMA, wgmma with register
  A for P V, online softmax with shuffles and ``ex2``, ping-pong warpgroups) on the emulator,
  race checks on.
* **Triton**: the forward of Triton's fused-attention tutorial (BLOCK_M = 128, BLOCK_N = 64,
  online softmax in base 2 with the scale folded into ``qk_scale``, P cast to f16 for ``P V``)
  under ``TRITON_INTERPRET=1``.

Each side is warmed up once (compilation, decoding) and then timed ``--repeat`` times; the
median wall time (``time.perf_counter``) and the median CPU time (``time.process_time``, all threads of
the process) are reported. The ratios use CPU seconds: on a shared machine the wall clock also counts the
time a process waits for a core, which depends on the other load, not on the side being timed. Both
sides run on one thread: ``--blas-threads`` (default 1) caps numpy's OpenBLAS pool and
``--triton-threads`` torch's. Triton's interpreter evaluates ``tl.dot`` as an f32 ``np.matmul``, which
OpenBLAS splits over its threads; on the 2-core machine at load 2 its default pool of 2 made the
attention forward 5-7x slower (wall and CPU alike) than with one thread, so a figure with several BLAS
threads measures the contention, not the interpreter. The thread counts used are printed and written
to the JSON. Triton (and torch, which its interpreter needs) are optional: without them
only the cutedsl figures are printed, unless ``--require-triton``.

    python scripts/emulator_vs_triton.py --size 1024 --seqlen 1024   # the figures in docs/emulator.md
    python scripts/emulator_vs_triton.py --size 256,256,512 --seqlen 256 --json out.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")      # before triton is imported

import numpy as np  # noqa: E402


def parse_size(text: str):
    """``"1024"`` -> (1024, 1024, 1024); ``"256,256,512"`` -> (256, 256, 512)."""
    parts = [int(x) for x in text.split(",")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"--size wants N or M,N,K with positive integers, got {text!r}")
    return tuple(parts)


def operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (m, k)).astype(np.float16)
    b = rng.integers(-2, 3, (k, n)).astype(np.float16)
    return a, b


def _openblas():
    """numpy's OpenBLAS as a ctypes library and its symbol prefix, or None (another BLAS, not Linux)."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.split()[-1].lower()})
    except OSError:
        return None
    for path in paths:
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                if hasattr(lib, f"{prefix}_get_num_threads{suffix}"):
                    return lib, prefix, suffix
    return None


def blas_threads(n=None):
    """Set numpy's OpenBLAS thread count to ``n`` (if given); return the count in force, or None when
    numpy's BLAS is not an OpenBLAS this can reach."""
    found = _openblas()
    if found is None:
        return None
    lib, prefix, suffix = found
    if n is not None:
        getattr(lib, f"{prefix}_set_num_threads{suffix}")(int(n))
    return int(getattr(lib, f"{prefix}_get_num_threads{suffix}")())


def os_threads():
    """Threads of this process now (Linux), or None."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


class Timing:
    """Median wall and CPU seconds of ``repeat`` runs after one warm-up, and the per-run figures."""

    def __init__(self, fn, repeat):
        fn()                                # warm-up: compile / decode / JIT caches
        self.wall, self.cpu = [], []
        for _ in range(repeat):
            w, c = time.perf_counter(), time.process_time()
            fn()
            self.wall.append(time.perf_counter() - w)
            self.cpu.append(time.process_time() - c)
        self.threads = os_threads()         # after the runs: any pool a run started is counted

    @property
    def wall_s(self):
        return statistics.median(self.wall)

    @property
    def cpu_s(self):
        return statistics.median(self.cpu)

    def record(self, res, key):
        """``res[key + "_s"]`` (CPU, the figure ratios use), ``_wall_s``, the runs and the thread count."""
        res[key + "_s"], res[key + "_wall_s"] = self.cpu_s, self.wall_s
        res[key + "_runs"], res[key + "_wall_runs"], res[key + "_os_threads"] = self.cpu, self.wall, self.threads

    def text(self, repeat):
        return (f"{self.cpu_s:.3f} CPU s, {self.wall_s:.3f} wall s (medians of {repeat}; "
                f"{self.threads} OS threads)")


def time_cutedsl(a, b, repeat):
    from cutedsl import Gemm, GemmConfig

    gemm = Gemm(GemmConfig())
    want = a.astype(np.float64) @ b.astype(np.float64)
    out = {}

    def run():
        out["d"] = gemm(a, b)
    timing = Timing(run, repeat)
    if not np.array_equal(np.asarray(out["d"], np.float64), want):
        raise SystemExit("cutedsl result differs from numpy")
    info = dict(gemm.backend.last_launch) if hasattr(gemm, "backend") else {}
    return timing, info


def triton_available():
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as e:      # ImportError, or a broken install
        return f"{type(e).__name__}: {e}"
    return None


def time_triton(a, b, repeat):
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ka = k0 + rk
            x = tl.load(a_ptr + rm[:, None] * sam + ka[None, :] * sak,
                        mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(b_ptr + ka[:, None] * sbk + rn[None, :] * sbn,
                        mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(x, y)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    m, k = a.shape
    n = b.shape[1]
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tc = torch.empty((m, n), dtype=torch.float32)
    bm, bn, bk = 128, 128, 64
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))

    def run():
        matmul[grid](ta, tb, tc, m, n, k, ta.stride(0), ta.stride(1), tb.stride(0), tb.stride(1),
                     tc.stride(0), tc.stride(1), BM=bm, BN=bn, BK=bk)
    timing = Timing(run, repeat)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if not np.array_equal(tc.numpy().astype(np.float64), want):
        raise SystemExit("Triton result differs from numpy")
    return timing


ATT_HEADS, ATT_DIM = 2, 128
#: max |O - reference| for f16 attention (P and O are rounded to f16; tests/kernel/test_attention_fwd.py)
ATT_TOL = 4e-3


def attention_operands(seqlen, seed=0):
    """Q, K, V of shape (1, seqlen, 2 heads, 128) f16, standard normal."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, seqlen, ATT_HEADS, ATT_DIM)).astype(np.float16) for _ in range(3))


def attention_reference(q, k, v):
    """float64 softmax(Q K^T / sqrt(d)) V, (1, seqlen, heads, d)."""
    qq, kk, vv = (x[0].astype(np.float64).transpose(1, 0, 2) for x in (q, k, v))      # (heads, s, d)
    s = qq @ kk.transpose(0, 2, 1) / np.sqrt(ATT_DIM)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ vv).transpose(1, 0, 2)[None]


def _check_attention(name, o, want):
    err = float(np.abs(np.asarray(o, np.float64) - want).max())
    if not err < ATT_TOL:
        raise SystemExit(f"{name} attention differs from the float64 reference by {err:g} (> {ATT_TOL:g})")
    return err


def time_cutedsl_attention(q, k, v, repeat):
    from cutedsl import Attention, AttentionConfig

    attn = Attention(AttentionConfig(head_dim=ATT_DIM, dtype="f16"))
    out = {}

    def run():
        out["o"] = attn(q, k, v)[0]
    timing = Timing(run, repeat)
    err = _check_attention("cutedsl", out["o"], attention_reference(q, k, v))
    info = dict(attn.backend.last_launch) if hasattr(attn.backend, "last_launch") else {}
    return timing, info, err


def time_triton_attention(q, k, v, repeat):
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def attn_fwd(Q, K, V, O, sm_scale, S, s_seq, s_head,
                 BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
        # one program: BM query rows of one head; the KV loop keeps the running max m_i and sum
        # l_i in base 2 (the tutorial's exp2 with log2(e) folded into qk_scale)
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        head = tl.program_id(1) * s_head
        cols = tl.arange(0, BN)
        dims = tl.arange(0, D)
        qb = tl.load(Q + head + rows[:, None] * s_seq + dims[None, :], mask=rows[:, None] < S, other=0.0)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.full([BM], 1.0, tl.float32)
        acc = tl.zeros([BM, D], dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504
        for n0 in range(0, S, BN):
            keys = n0 + cols
            kt = tl.load(K + head + keys[None, :] * s_seq + dims[:, None], mask=keys[None, :] < S, other=0.0)
            qk = tl.dot(qb, kt)
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            vb = tl.load(V + head + keys[:, None] * s_seq + dims[None, :], mask=keys[:, None] < S, other=0.0)
            acc = tl.dot(p.to(tl.float16), vb, acc * alpha[:, None])
            m_i = m_new
        tl.store(O + head + rows[:, None] * s_seq + dims[None, :], (acc / l_i[:, None]).to(tl.float16),
                 mask=rows[:, None] < S)

    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v))
    to = torch.empty_like(tq)
    seqlen = q.shape[1]
    bm, bn = 128, 64
    grid = (triton.cdiv(seqlen, bm), ATT_HEADS)

    def run():
        attn_fwd[grid](tq, tk, tv, to, ATT_DIM ** -0.5, seqlen, tq.stride(1), tq.stride(2),
                       BM=bm, BN=bn, D=ATT_DIM)
    timing = Timing(run, repeat)
    err = _check_attention("Triton", to.numpy(), attention_reference(q, k, v))
    return timing, err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=parse_size, default=(1024, 1024, 1024), help="N or M,N,K (default 1024)")
    ap.add_argument("--seqlen", type=int, default=1024,
                    help="attention sequence length (batch 1, 2 heads, head dim 128; 0 skips it; default 1024)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side (median; default 3)")
    ap.add_argument("--require-triton", action="store_true", help="fail when Triton/torch are missing")
    ap.add_argument("--triton-threads", type=int, default=1,
                    help="torch intra-op threads for Triton's interpreter (default 1, like the emulator; "
                         "more threads only add contention on a loaded machine)")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="numpy's OpenBLAS threads for both sides (default 1: the emulator runs on one thread, and "
                         "Triton's interpreter multiplies its blocks with np.matmul, slowed 5-7x by a pool of 2 "
                         "on a loaded 2-core machine)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if args.seqlen < 0:
        ap.error("--seqlen must be >= 0 (0 skips the attention comparison)")
    if args.blas_threads < 1 or args.triton_threads < 1:
        ap.error("--blas-threads and --triton-threads must be >= 1")
    m, n, k = args.size
    a, b = operands(m, n, k)
    res = {"size": [m, n, k], "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
           "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
           "blas_threads": blas_threads(args.blas_threads)}
    print(f"numpy BLAS threads: {res['blas_threads']}; load average {res['load_average']}; "
          f"{res['cpus']} CPUs; ratios in CPU seconds")
    timing, info = time_cutedsl(a, b, args.repeat)
    timing.record(res, "cutedsl")
    if info.get("instructions"):
        res["warp_instructions"] = int(info["instructions"])
        res["us_per_warp_instruction"] = 1e6 * timing.cpu_s / int(info["instructions"])
    print(f"cutedsl emulator  {m}x{n}x{k}: {timing.text(args.repeat)}; race checks on"
          + (f", {res['warp_instructions']} warp-instructions, "
             f"{res['us_per_warp_instruction']:.2f} CPU us each" if "warp_instructions" in res else ""))
    why = triton_available()
    if why is None:
        import torch
        torch.set_num_threads(args.triton_threads)
        res["triton_torch_threads"] = torch.get_num_threads()
        ttiming = time_triton(a, b, args.repeat)
        ttiming.record(res, "triton")
        res["ratio_cutedsl_over_triton"] = timing.cpu_s / ttiming.cpu_s
        res["ratio_wall_cutedsl_over_triton"] = timing.wall_s / ttiming.wall_s
        print(f"Triton interpreter {m}x{n}x{k}: {ttiming.text(args.repeat)}; TRITON_INTERPRET=1, "
              f"128x128x64 blocks, {res['triton_torch_threads']} torch threads")
        print(f"cutedsl / Triton: {res['ratio_cutedsl_over_triton']:.2f} (CPU), "
              f"{res['ratio_wall_cutedsl_over_triton']:.2f} (wall)")
    elif args.require_triton:
        raise SystemExit(f"Triton interpreter unavailable ({why})")
    else:
        print(f"Triton interpreter: not measured ({why})")
    if args.seqlen:
        attention_side_by_side(args.seqlen, args.repeat, why is None, res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


def attention_side_by_side(seqlen, repeat, with_triton, res):
    """Time the attention forward on both sides (see the module docstring); figures into ``res``."""
    q, k, v = attention_operands(seqlen)
    shape = f"batch 1, {ATT_HEADS} heads, seqlen {seqlen}, head dim {ATT_DIM}"
    timing, info, err = time_cutedsl_attention(q, k, v, repeat)
    timing.record(res, "attention_cutedsl")
    res.update(seqlen=seqlen, attention_cutedsl_err=err)
    extra = ""
    if info.get("instructions"):
        res["attention_warp_instructions"] = int(info["instructions"])
        extra = f", {int(info['instructions'])} warp-instructions"
    print(f"cutedsl emulator  attention ({shape}): {timing.text(repeat)}; race checks on{extra}")
    if not with_triton:
        return
    ttiming, terr = time_triton_attention(q, k, v, repeat)
    ttiming.record(res, "attention_triton")
    res.update(attention_triton_err=terr, attention_ratio_cutedsl_over_triton=timing.cpu_s / ttiming.cpu_s,
               attention_ratio_wall_cutedsl_over_triton=timing.wall_s / ttiming.wall_s)
    print(f"Triton interpreter attention ({shape}): {ttiming.text(repeat)}; fused-attention tutorial forward, "
          f"128x64 blocks")
    print(f"attention cutedsl / Triton: {res['attention_ratio_cutedsl_over_triton']:.2f} (CPU), "
          f"{res['attention_ratio_wall_cutedsl_over_triton']:.2f} (wall)")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
