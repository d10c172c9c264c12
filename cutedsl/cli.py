"""The main job: ``python -m cutedsl gemm ...`` — compile (cached), run, check and report a GEMM."""
from __future__ import annotations

import argparse
import json
import sys
import time

TOLERANCE = {"f32": 2e-3, "f16": 4e-3, "bf16": 1.6e-2}   # max |D - ref| / max |ref|


def _parser():
    p = argparse.ArgumentParser(prog="python -m cutedsl", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gemm", help="compile, run and report D = A @ B")
    g.add_argument("--m", type=int, required=True)
    g.add_argument("--n", type=int, required=True)
    g.add_argument("--k", type=int, required=True)
    g.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    g.add_argument("--out-dtype", choices=["f32", "f16", "bf16"], default="f32")
    g.add_argument("--tile", default="128x128x64", help="BLOCK_MxBLOCK_NxBLOCK_K")
    g.add_argument("--stages", default="auto", help="auto or 1..7")
    g.add_argument("--schedule", choices=["multistage", "single_tile"], default="multistage")
    g.add_argument("--b-major", choices=["N", "K"], default="N")
    g.add_argument("--epilogue", choices=["tma", "global"], default="tma")
    g.add_argument("--backend", choices=["auto", "cuda", "sim", "none"], default="auto")
    g.add_argument("--check", action="store_true", help="compare with a float64 numpy reference")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--iters", type=int, default=50, help="timed launches on a GPU (median reported)")
    g.add_argument("--dump", metavar="DIR", help="write IR before/after lowering, PTX, SASS there")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    _add_bench_commands(sub)
    return p


def _add_bench_commands(sub):
    """``bench`` and ``bundle`` (owner: the benchmark harness, ``cutedsl/bench``)."""
    from .bench.cli import add_parsers
    add_parsers(sub)


def gemm_config(args):
    """The ``GemmConfig`` the ``gemm`` subcommand's arguments describe (``ConfigError`` if bad)."""
    from .device import GemmConfig
    stages = args.stages if args.stages == "auto" else int(args.stages)
    return GemmConfig(dtype=args.dtype, out_dtype=args.out_dtype, tile=GemmConfig.parse_tile(args.tile),
                      stages=stages, schedule=args.schedule, b_major=args.b_major, epilogue=args.epilogue)


def run_gemm(args) -> tuple:
    """Returns ``(report dict, exit status)``."""
    import numpy as np
    from .device import Gemm
    from .device.backends import resolve
    from .dtypes import dtype as _dtype
    from .errors import CuteDSLError

    cfg = gemm_config(args)
    backend, why = resolve(args.backend)
    gemm = Gemm(cfg, backend if backend is not None else "none", dump_dir=args.dump)
    t0 = time.perf_counter()
    kern = gemm.compiled
    compile_s = time.perf_counter() - t0
    r = kern.resources
    rep = {"backend": backend.name if backend is not None else "none", "m": args.m, "n": args.n, "k": args.k,
           "dtype": args.dtype, "out_dtype": args.out_dtype, "tile": list(cfg.tile),
           "stages": cfg.resolved_stages(), "schedule": cfg.schedule, "b_major": cfg.b_major,
           "epilogue": cfg.epilogue, "threads": kern.block[0], "grid": list(gemm.kernel.grid(args.m, args.n)),
           "registers": r.registers, "spills": r.spill_stores + r.spill_loads, "stack": r.stack,
           "smem_bytes": r.smem_bytes, "sass": r.sass, "ptxas_messages": list(r.ptxas_messages),
           "compile_s": round(compile_s, 4), "cold_compile_s": round(kern.compile_seconds, 4),
           "cached": bool(getattr(gemm.kernel, "last_cache_hit", False)), "executed": backend is not None}
    if backend is None:
        rep["note"] = why
        return rep, 0
    if why:
        rep["note"] = why
    rng = np.random.default_rng(args.seed)
    npd = _dtype(args.dtype).numpy
    a = rng.standard_normal((args.m, args.k), dtype=np.float32).astype(npd)
    b = rng.standard_normal((args.k, args.n), dtype=np.float32).astype(npd)
    try:
        launch, result = gemm.prepare(a, b)
        t = time.perf_counter()
        launch()
        d = result()
        first = time.perf_counter() - t
    except CuteDSLError as e:
        rep["error"] = f"{type(e).__name__}: {e}"
        return rep, 2
    flops = 2.0 * args.m * args.n * args.k
    if backend.name == "cuda":
        for _ in range(3):
            launch()
        backend.synchronize()
        times = sorted(backend.time_launches(launch, max(args.iters, 1)))
        ms = times[len(times) // 2]
    else:
        ms = first * 1e3
    rep["time_ms"] = round(ms, 4)
    rep["tflops"] = round(flops / (ms * 1e-3) / 1e12, 6)
    if args.check:
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.max(np.abs(d.astype(np.float64) - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
        tol = TOLERANCE[args.out_dtype]
        rep.update(max_rel_err=err, tolerance=tol, passed=bool(err <= tol and np.all(np.isfinite(d))))
        return rep, 0 if rep["passed"] else 1
    return rep, 0


def _print_text(rep):
    p = print
    p(f"cutedsl GEMM  M={rep['m']} N={rep['n']} K={rep['k']}  {rep['dtype']} -> {rep['out_dtype']}  "
      f"tile {'x'.join(map(str, rep['tile']))}  stages {rep['stages']}  {rep['schedule']}  "
      f"B {rep['b_major']}-major  epilogue {rep['epilogue']}")
    p(f"  kernel: {rep['threads']} threads x grid {tuple(rep['grid'])}, {rep['registers']} registers, "
      f"{rep['spills']} spill bytes, {rep['smem_bytes']} B shared memory")
    p(f"  compile: {rep['compile_s']:.3f} s ({'cache hit; cold compile took ' + format(rep['cold_compile_s'], '.3f') + ' s' if rep['cached'] else 'cold'})")
    keys = ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "BAR", "STG", "STS", "WARPGROUP")
    p("  SASS: " + ", ".join(f"{k} {rep['sass'].get(k, 0)}" for k in keys)
      + f"  ({sum(rep['sass'].values())} instructions)")
    for m in rep["ptxas_messages"]:
        p(f"  ptxas: {m}")
    if "note" in rep:
        p(f"  note: {rep['note']}")
    if not rep["executed"]:
        p("  nothing was executed (no GPU and no emulator available, or --backend none)")
        return
    if "error" in rep:
        p(f"  error: {rep['error']}")
        return
    what = "GPU time (median)" if rep["backend"] == "cuda" else "emulator wall time"
    p(f"  backend {rep['backend']}: {what} {rep['time_ms']:.3f} ms, {rep['tflops']:.4g} TFLOP/s")
    if "passed" in rep:
        p(f"  check vs float64 numpy: max rel err {rep['max_rel_err']:.3e} (tolerance {rep['tolerance']:.1e}) "
          f"-> {'PASS' if rep['passed'] else 'FAIL'}")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd in ("bench", "bundle"):
        from .bench.cli import main as bench_main
        return bench_main(args)
    from .errors import CuteDSLError
    try:
        rep, status = run_gemm(args)
    except CuteDSLError as e:
        if args.json:
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        else:
            print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep))
    else:
        _print_text(rep)
    return status
