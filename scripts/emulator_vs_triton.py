#!/usr/bin/env python3
"""Side-by-side timing: the cutedsl PTX emulator against Triton's CPU interpreter.

Both run one f16 GEMM ``D = A @ B`` (f32 accumulate) of the same size on the same inputs
(small random integers, so both results are exact and compared with numpy):

* **cutedsl**: the default ``GemmConfig()`` kernel compiled to PTX and run by ``cutedsl.sim``
  with race checks on (the emulator's default): every warp, TMA copy, mbarrier and wgmma.
* **Triton**: a blocked matmul (BLOCK_M = BLOCK_N = 128, BLOCK_K = 64, like the tutorial) run
  with ``TRITON_INTERPRET=1``: Triton's interpreter evaluates each program's block operations
  with numpy (no warps, no asynchronous copies, no swizzle).

Each side is warmed up once (compilation, decoding) and then timed ``--repeat`` times; the
median is reported. Triton (and torch, which its interpreter needs) are optional: without them
only the cutedsl figure is printed, unless ``--require-triton``.

    python scripts/emulator_vs_triton.py --size 1024            # the figure in docs/emulator.md
    python scripts/emulator_vs_triton.py --size 256,256,512 --json out.json
"""
from __future__ import annotations

import argparse
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


def median_time(fn, repeat):
    fn()                                    # warm-up: compile / decode / JIT caches
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def time_cutedsl(a, b, repeat):
    from cutedsl import Gemm, GemmConfig

    gemm = Gemm(GemmConfig())
    want = a.astype(np.float64) @ b.astype(np.float64)
    out = {}

    def run():
        out["d"] = gemm(a, b)
    med, times = median_time(run, repeat)
    if not np.array_equal(np.asarray(out["d"], np.float64), want):
        raise SystemExit("cutedsl result differs from numpy")
    info = dict(gemm.backend.last_launch) if hasattr(gemm, "backend") else {}
    return med, times, info


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
    med, times = median_time(run, repeat)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if not np.array_equal(tc.numpy().astype(np.float64), want):
        raise SystemExit("Triton result differs from numpy")
    return med, times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=parse_size, default=(1024, 1024, 1024), help="N or M,N,K (default 1024)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side (median; default 3)")
    ap.add_argument("--require-triton", action="store_true", help="fail when Triton/torch are missing")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    m, n, k = args.size
    a, b = operands(m, n, k)
    res = {"size": [m, n, k], "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}
    med, times, info = time_cutedsl(a, b, args.repeat)
    res["cutedsl_s"], res["cutedsl_runs"] = med, times
    if info.get("instructions"):
        res["warp_instructions"] = int(info["instructions"])
        res["us_per_warp_instruction"] = 1e6 * med / int(info["instructions"])
    print(f"cutedsl emulator  {m}x{n}x{k}: {med:.3f} s (median of {args.repeat}; race checks on)"
          + (f", {res['warp_instructions']} warp-instructions, "
             f"{res['us_per_warp_instruction']:.2f} us each" if "warp_instructions" in res else ""))
    why = triton_available()
    if why is None:
        tmed, ttimes = time_triton(a, b, args.repeat)
        res["triton_s"], res["triton_runs"] = tmed, ttimes
        res["ratio_cutedsl_over_triton"] = med / tmed
        print(f"Triton interpreter {m}x{n}x{k}: {tmed:.3f} s (median of {args.repeat}; "
              f"TRITON_INTERPRET=1, 128x128x64 blocks)")
        print(f"cutedsl / Triton: {med / tmed:.2f}")
    elif args.require_triton:
        raise SystemExit(f"Triton interpreter unavailable ({why})")
    else:
        print(f"Triton interpreter: not measured ({why})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
