"""``python -m cutedsl attention ...``: compile (cached), run, check and report one attention
forward (:class:`cutedsl.Attention`, FlashAttention-3-style on sm_90a, -4-style on sm_100a) -- the
``gemm`` main job's report and JSON keys, plus the problem's; with ``--backward`` the backward too
(:mod:`cutedsl.cli_attention_bwd`, the JSON key ``backward``)."""
from __future__ import annotations

import argparse
import math
import time

from .cli_attention_bwd import add_backward_options, check_backward_options, print_backward, run_backward
from .cliargs import MAX_I32, TOLERANCE, UsageError, int_in, launch_ms, sass_summary

#: --check: max |LSE - ref| (natural log); the kernel's LSE is f32 from f32 scores
LSE_TOLERANCE = 1e-3
#: the forward's input types (e4m3: the fp8 kernel, kernel/attention_fp8.py)
FWD_DTYPES = ("bf16", "f16", "e4m3")


def window_arg(text: str) -> tuple:
    """``type=`` for ``--window``: ``L,R`` (ints >= -1; -1: unbounded on that side)."""
    parts = text.split(",")
    try:
        w = tuple(int(p, 10) for p in parts)
    except ValueError:
        w = ()
    if len(w) != 2 or min(w) < -1:
        raise argparse.ArgumentTypeError(f"expected LEFT,RIGHT (ints >= -1; -1: unbounded) such as 128,0, got {text!r}")
    return w


def softcap_arg(text: str) -> float:
    """``type=`` for ``--softcap``: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        v = None
    if v is None or not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0 (scores become cap * tanh(s / cap)), "
                                         f"got {text!r}")
    return v


def varlen_arg(text: str) -> list:
    """``type=`` for ``--varlen``: ``SQ1,SQ2,...`` (keys as many as queries) or ``SQ:SK`` items."""
    out = []
    for part in text.split(","):
        a, _, b = part.strip().partition(":")
        try:
            sq = int(a, 10)
            sk = int(b, 10) if b else sq
        except ValueError:
            sq = sk = -1
        if sq < 0 or sk < 0 or sq > MAX_I32 or sk > MAX_I32:
            raise argparse.ArgumentTypeError(f"expected SQ1,SQ2,... or SQ:SK,... (lengths 0..{MAX_I32}), got {part!r}")
        out.append((sq, sk))
    return out


def add_attention_parser(sub):
    """The ``attention`` subcommand's options (choices from the layers that implement them)."""
    from .device.attention_config import ARCHS
    a = sub.add_parser("attention", help="compile, run and report an attention forward (O, LSE)")
    grid = int_in(1, 65535)                  # batch and heads are grid dimensions y and z
    a.add_argument("--batch", type=grid, default=None, metavar="B", help="sequences, 1..65535 (required without "
                                                                       "--varlen)")
    a.add_argument("--heads", type=grid, required=True, metavar="H", help="query heads, 1..65535")
    a.add_argument("--kv-heads", type=grid, default=None, metavar="HKV",
                   help="K/V heads (GQA/MQA: a divisor of --heads; default --heads)")
    size = int_in(1, MAX_I32)
    a.add_argument("--seqlen-q", type=size, default=None, metavar="SQ", help="queries per sequence (required "
                                                                           "without --varlen)")
    a.add_argument("--seqlen-k", type=size, default=None, metavar="SK", help="keys per sequence (default --seqlen-q)")
    a.add_argument("--head-dim", type=size, required=True, metavar="D", help="Q/K/V row width (64, 96, 128 or 256; sm_100a: 64 or 128)")
    a.add_argument("--dtype", default="bf16", metavar="DTYPE", help=f"{', '.join(FWD_DTYPES)} (e4m3: fp8 Q, K, V, bf16 O, "
                                                                 f"sm_90a, head dim 64, 128 or 256)")
    a.add_argument("--causal", action="store_true", help="causal mask, aligned bottom-right")
    a.add_argument("--window", type=window_arg, default=None, metavar="L,R",
                   help="sliding window: keys i-L..i+R (-1: unbounded, written --window=-1,R; with --causal R must be "
                        "0 or -1)")
    a.add_argument("--softcap", type=softcap_arg, default=None, metavar="X", help="scores -> X * tanh(s / X)")
    a.add_argument("--varlen", type=varlen_arg, default=None, metavar="SQ1,SQ2,...",
                   help="packed sequences of these query lengths (SQ:SK for other key lengths); --batch and "
                        "--seqlen-q/-k, if given, must cover them")
    a.add_argument("--arch", choices=list(ARCHS), default=ARCHS[0], help="target architecture")
    a.add_argument("--backend", choices=["auto", "cuda", "sim", "none"], default="auto")
    a.add_argument("--check", action="store_true", help="compare O and LSE (and dQ, dK, dV with --backward) with the "
                                                        "float64 numpy reference")
    add_backward_options(a)
    a.add_argument("--seed", type=int_in(0, 2 ** 64 - 1), default=0, help="input seed, 0..2^64-1")
    a.add_argument("--iters", type=int_in(1, 100_000), default=50, help="timed launches on a GPU (median)")
    a.add_argument("--dump", metavar="DIR", help="write IR before/after lowering, PTX, SASS there")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    return a


def _problem(args):
    """``(AttentionProblem, [(sq, sk) per sequence], varlen?)`` from the options (``UsageError``)."""
    from .problem import AttentionProblem
    kv = args.kv_heads or args.heads
    if args.heads % kv:
        raise UsageError("--kv-heads", f"--heads {args.heads} must be a multiple of --kv-heads {kv} (GQA/MQA)")
    if args.varlen is not None:
        lens = args.varlen
        if args.batch is not None and args.batch != len(lens):
            raise UsageError("--batch/--varlen", f"--batch {args.batch} but --varlen gives {len(lens)} sequences")
        if not any(sq and sk for sq, sk in lens):
            raise UsageError("--varlen", "no sequence has both queries and keys: nothing would run")
        longest = []
        for i, opt in ((0, "--seqlen-q"), (1, "--seqlen-k")):
            top, given = max(x[i] for x in lens), getattr(args, opt[2:].replace("-", "_"))
            if given is not None and given < top:
                raise UsageError(f"{opt}/--varlen", f"{opt} {given} is shorter than the longest sequence ({top})")
            longest.append(given or top)
        return AttentionProblem(len(lens), longest[0], longest[1], args.heads, kv, args.head_dim), lens, True
    for opt, v in (("--batch", args.batch), ("--seqlen-q", args.seqlen_q)):
        if v is None:
            raise UsageError(opt, "required (or --varlen SQ1,SQ2,... for packed sequences)")
    sk = args.seqlen_k or args.seqlen_q
    return (AttentionProblem(args.batch, args.seqlen_q, sk, args.heads, kv, args.head_dim),
            [(args.seqlen_q, sk)] * args.batch, False)


def _config(args, problem):
    from .device.attention_config import AttentionConfig
    from .errors import ConfigError
    from .kernel.attention import DTYPES
    try:
        cfg = AttentionConfig(head_dim=args.head_dim, dtype=args.dtype, arch=args.arch)
    except ConfigError as e:
        bad_dtype = args.dtype not in DTYPES + FWD_DTYPES or (args.dtype in FWD_DTYPES and "dtype" in str(e))
        raise UsageError("--dtype" if bad_dtype else "--head-dim", str(e)) from None
    why = cfg.can_implement(problem)
    if why:
        raise UsageError("--seqlen-q/--seqlen-k", why)
    return cfg


def _inputs(args, problem, lens, varlen, npdt):
    """Random Q, K, V (standard normal, rounded to the dtype) and the varlen offsets."""
    import numpy as np
    rng = np.random.default_rng(args.seed)
    h, hk, d = problem.heads, problem.kv_heads, problem.head_dim
    if varlen:
        tq, tk = sum(x[0] for x in lens), sum(x[1] for x in lens)
        shapes = ((tq, h, d), (tk, hk, d), (tk, hk, d))
        cu = [np.concatenate([[0], np.cumsum([x[i] for x in lens])]).astype(np.int32) for i in (0, 1)]
        extra = {"cu_seqlens_q": cu[0], "cu_seqlens_k": cu[1], "max_seqlen_q": problem.seqlen_q,
                 "max_seqlen_k": problem.seqlen_k}
    else:
        b, sq, sk = problem.batch, problem.seqlen_q, problem.seqlen_k
        shapes = ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))
        extra = {}
    q, k, v = (rng.standard_normal(s, dtype=np.float32).astype(npdt) for s in shapes)
    return q, k, v, extra


def run_attention(args) -> tuple:
    """Returns ``(report dict, exit status)``: 0, 1 (``--check`` failed) or 2 (an error)."""
    import numpy as np
    from .device.attention import Attention, _window
    from .device.attention_reference import attention_reference
    from .dtypes import dtype as _dtype
    from .errors import ArgumentError, CuteDSLError, DumpError, NoDeviceError
    from .problem import attention_flops
    from .runtime.selection import resolve

    problem, lens, varlen = _problem(args)
    check_backward_options(args)
    cfg = _config(args, problem)
    try:
        window = _window(args.window, args.causal)
    except ArgumentError as e:
        raise UsageError("--causal/--window", str(e)) from None
    try:
        backend, why = resolve(args.backend, cfg.arch)
    except NoDeviceError as e:
        raise UsageError("--backend", str(e)) from None
    kern = cfg.kernel(local=window != (-1, -1), softcap=args.softcap is not None, varlen=varlen)
    rep = {"backend": backend.name if backend is not None else "none", "arch": cfg.arch, "dtype": cfg.dtype,
           "batch": problem.batch, "heads": problem.heads, "kv_heads": problem.kv_heads,
           "seqlen_q": problem.seqlen_q, "seqlen_k": problem.seqlen_k, "head_dim": problem.head_dim,
           "causal": args.causal, "window": list(args.window) if args.window else None, "softcap": args.softcap,
           "varlen": [list(x) for x in lens] if varlen else None, "overlap": cfg.overlap, "pingpong": cfg.pingpong,
           "grid": list(kern.grid(problem))}
    opts = {"causal": args.causal, "window": args.window, "softcap": args.softcap}
    q, k, v, extra = _inputs(args, problem, lens, varlen, _dtype(cfg.dtype).numpy)
    launch, launched = None, False
    try:
        if backend is None:                  # compile and report only
            t0 = time.perf_counter()
            compiled, hit = kern.compile(dump_dir=args.dump), bool(getattr(kern, "last_cache_hit", False))
            compile_s = time.perf_counter() - t0
        else:
            launch, result = Attention(cfg, backend, dump_dir=args.dump).prepare(q, k, v, **opts, **extra)
            compiled, hit, compile_s = launch.compiled, launch.cache_hit, launch.compile_seconds
    except DumpError as e:
        raise UsageError("--dump", str(e)) from None
    except CuteDSLError as e:
        rep.update(error=f"{type(e).__name__}: {e}", executed=False)
        return rep, 2
    r = compiled.resources
    rep.update(threads=compiled.block[0], registers=r.registers, spills=r.spill_stores + r.spill_loads,
               smem_bytes=r.smem_bytes, sass=r.sass, ptxas_messages=list(r.ptxas_messages),
               compile_s=round(compile_s, 4), cold_compile_s=round(compiled.compile_seconds, 4), cached=hit,
               executed=backend is not None)
    local = window != (-1, -1)

    def with_backward(status, o=None, lse=None):
        """The forward's ``(rep, status)``, then the backward's part where --backward asks."""
        if not args.backward or status == 2:
            return rep, status
        rep["backward"], st = run_backward(args, cfg, backend, problem, varlen, local, (q, k, v, o, lse), opts,
                                           extra, rep.get("flops", 0))
        if "passed" in rep["backward"]:        # "passed": both passes; "forward_passed": O and LSE
            rep["forward_passed"] = rep["passed"]
            rep["passed"] = rep["passed"] and rep["backward"]["passed"]
        return rep, max(status, st)
    if backend is None:
        rep["note"] = why
        return with_backward(0)
    if why:
        rep["note"] = why
    try:
        t = time.perf_counter()
        launched = True
        launch()
        o, lse = result()
        first = time.perf_counter() - t
        ms = launch_ms(backend, launch, first, args.iters, rep)
    except CuteDSLError as e:
        rep.update(error=f"{type(e).__name__}: {e}", executed=launched)
        return rep, 2
    finally:
        launch.release()
    flops = sum(attention_flops(sq, sk, problem.heads, problem.head_dim, causal=args.causal, window=args.window)
                for sq, sk in lens)
    rep.update(time_ms=round(ms, 4), flops=flops, tflops=round(flops / (ms * 1e-3) / 1e12, 6))
    if not args.check:
        return with_backward(0, o, lse)
    cu = {key: extra[key] for key in ("cu_seqlens_q", "cu_seqlens_k") if key in extra}
    ro, rl = attention_reference(q, k, v, **opts, **cu)
    got = np.asarray(o, np.float64)
    err = float(np.max(np.abs(got - ro)) / max(float(np.max(np.abs(ro))), 1e-30)) if ro.size else 0.0
    live = np.isfinite(rl)
    lse_err = float(np.max(np.abs(lse[live] - rl[live]))) if live.any() else 0.0
    tol = TOLERANCE[cfg.dtype]
    passed = (err <= tol and lse_err <= LSE_TOLERANCE and bool(np.all(np.isfinite(got)))
              and bool(np.array_equal(np.isposinf(lse), ~live)))
    rep.update(max_rel_err=err, tolerance=tol, lse_max_abs_err=lse_err, lse_tolerance=LSE_TOLERANCE,
               masked_rows=int((~live).sum()), passed=passed)
    return with_backward(0 if passed else 1, o, lse)


def print_attention(rep) -> None:
    _print_forward(rep)
    if "backward" in rep:
        print_backward(rep["backward"], rep["backend"])


def _print_forward(rep) -> None:
    p = print
    shape = (f"batch={rep['batch']} heads={rep['heads']}" + (f" kv_heads={rep['kv_heads']}"
             if rep["kv_heads"] != rep["heads"] else "") + f" seqlen_q={rep['seqlen_q']} seqlen_k={rep['seqlen_k']} "
             f"head_dim={rep['head_dim']}")
    mask = ("  causal" if rep["causal"] else "") + (f"  window {tuple(rep['window'])}" if rep["window"] else "")
    p(f"cutedsl attention  {shape}  {rep['dtype']}{mask}" + (f"  softcap {rep['softcap']:g}" if rep["softcap"] else "")
      + (f"  varlen {len(rep['varlen'])} sequences" if rep["varlen"] else "")
      + f"  {'ping-pong' if rep['pingpong'] else 'overlap' if rep['overlap'] else 'simple'}  {rep['arch']}")
    if "registers" in rep:
        p(f"  kernel: {rep['threads']} threads x grid {tuple(rep['grid'])}, {rep['registers']} registers, "
          f"{rep['spills']} spill bytes, {rep['smem_bytes']} B shared memory")
        how = f"cache hit; cold compile took {rep['cold_compile_s']:.3f} s" if rep["cached"] else "cold"
        p(f"  compile: {rep['compile_s']:.3f} s ({how})")
        p("  SASS: " + sass_summary(rep["sass"], extra=("MUFU", "SHFL")))
        for m in rep["ptxas_messages"]:
            p(f"  ptxas: {m}")
    if "note" in rep:
        p(f"  note: {rep['note']}")
    if "error" in rep:
        p(f"  error: {rep['error']}")
        return
    if not rep["executed"]:
        return
    what = "GPU time (median)" if rep["backend"] == "cuda" else "emulator wall time"
    p(f"  backend {rep['backend']}: {what} {rep['time_ms']:.3f} ms, {rep['tflops']:.4g} TFLOP/s "
      f"({rep['flops']:.4g} FLOPs as FlashAttention counts)")
    if rep.get("chaos") is not None:
        p(f"  emulator: adversarial mode, seed {rep['chaos']} (CUTEDSL_SIM_CHAOS={rep['chaos']})")
    if "passed" in rep:
        p(f"  check vs float64 numpy: O max rel err {rep['max_rel_err']:.3e} (tolerance {rep['tolerance']:.1e}), "
          f"LSE max abs err {rep['lse_max_abs_err']:.3e} (tolerance {rep['lse_tolerance']:.0e}), "
          f"{rep['masked_rows']} rows with no key -> {'PASS' if rep.get('forward_passed', rep['passed']) else 'FAIL'}")
