"""The main job: ``python -m cutedsl gemm ...`` — compile (cached), run, check and report a GEMM
(``attention ...``: the same for an attention forward, :mod:`cutedsl.cli_attention`)."""
from __future__ import annotations

import json
import os
import sys
import time

# the argument helpers live below the CLI and the bench harness (both use them)
from .cliargs import (MAX_I32, TOLERANCE, ArgParser, UsageError, add_gemm_parser, cluster_arg,  # noqa: F401
                      config_options, gemm_config, int_in, launch_ms, sass_summary, stages_arg, tile_arg)


def warn_ignored_options(cfg) -> None:
    """One line on stderr when ``--raster``/``--swizzle``/``--sm-count`` were set to something
    other than their default for a schedule without the persistent tile scheduler
    (``multistage``, ``single_tile``), which ignores them; the run goes on."""
    from .device.config import WARP_SPECIALIZED
    if cfg.schedule in WARP_SPECIALIZED:
        return
    set_ = [o for o, v, d in (("--raster", cfg.raster, ("auto", "M")), ("--swizzle", cfg.swizzle, (1,)),
                              ("--sm-count", cfg.sm_count, (None,))) if v not in d]
    if set_:
        print(f"python -m cutedsl gemm: warning: {'/'.join(set_)} ignored: schedule {cfg.schedule!r} has one "
              f"CTA per tile in launch order (only {', '.join(WARP_SPECIALIZED)} use them)", file=sys.stderr)


def _parser():
    from . import __version__
    p = ArgParser(prog="python -m cutedsl", description=__doc__)
    p.add_argument("--version", action="version", version=f"cutedsl {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_gemm_parser(sub)
    from .cli_attention import add_attention_parser
    add_attention_parser(sub)
    c = sub.add_parser("compile", help="compile many GEMM configs into the kernel cache with a process pool")
    c.add_argument("--config", action="append", default=[], metavar="SPEC",
                   help="a config as key=value,... (GemmConfig fields, e.g. schedule=pingpong,tile=64x128x64); "
                        "repeatable")
    c.add_argument("--set", default=None, help="every config of the bench set(s): square, skinny, paper, stages or all")
    c.add_argument("--jobs", type=int_in(1, 256), default=None, help="worker processes (default: CPU count)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    i = sub.add_parser("info", help="versions, GPU and driver, cache, and which backends are usable (and why not)")
    i.add_argument("--json", action="store_true", help="print one JSON object")
    c = sub.add_parser("cache", help="show or clear the compiled-kernel cache ($CUTEDSL_CACHE_DIR)")
    c.add_argument("action", choices=["info", "clear"])
    from .device.config import DTYPES, OUT_DTYPES
    t = sub.add_parser("tune", help="time candidate configs for a shape on the device; the winner is kept "
                                    "for Gemm('auto') (cutedsl.tune)")
    size = int_in(1, MAX_I32)
    for dim in ("m", "n", "k"):
        t.add_argument(f"--{dim}", type=size, required=True)
    t.add_argument("--batch", type=int_in(1, 65535), default=1, metavar="L")
    t.add_argument("--dtype", choices=list(DTYPES), default="f16")
    t.add_argument("--out-dtype", choices=list(OUT_DTYPES), default=None)
    t.add_argument("--backend", choices=["auto", "cuda", "sim"], default="auto")
    t.add_argument("--limit", type=int_in(1, 64), default=12, help="candidates timed (best model score first)")
    t.add_argument("--iters", type=int_in(1, 10_000), default=20, help="timed launches per candidate (median)")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    _add_bench_commands(sub)
    return p


def run_compile(args) -> int:
    """``compile``: the configs of ``--config`` and/or ``--set``, compiled by a process pool into
    the cache; one line per config (or ``--json``); exit 1 when any failed."""
    from .bench.cli import add_parsers, selected_configs, set_names
    from .device.precompile import compile_all
    if not args.config and not args.set:
        raise UsageError("--config/--set", "name at least one config (--config SPEC) or bench set (--set NAME)")
    p = ArgParser(prog="python -m cutedsl")
    add_parsers(p.add_subparsers(dest="cmd"))
    bench = p.parse_args(["bench", "--set", args.set or "square"] + [x for c in args.config for x in ("--config", c)])
    cfgs = []
    for name in (set_names(bench) if args.set else ["square"]):
        cfgs += selected_configs(bench, name)
    cfgs = list(dict.fromkeys(cfgs))
    from .bench.configs import label
    t0 = time.perf_counter()

    def progress(done, total, r):
        if not args.json:
            state = f"error {r.error}" if r.error else \
                ("cached" if r.hit else f"{r.seconds:.2f} s") + f", {r.registers} regs"
            print(f"[{done}/{total}] {label(r.config)}: {state}", flush=True)
    res = compile_all(cfgs, jobs=args.jobs, progress=progress)
    wall = time.perf_counter() - t0
    failed = [r for r in res if r.error]
    if args.json:
        print(json.dumps({"configs": [{"config": label(r.config), "key": r.key, "seconds": round(r.seconds, 3),
                                       "cached": r.hit, "error": r.error} for r in res],
                          "wall_s": round(wall, 3), "failed": len(failed)}))
    else:
        print(f"compiled {len(res) - len(failed)} of {len(res)} configs in {wall:.1f} s "
              f"({sum(r.hit for r in res)} from the cache)")
    return 1 if failed else 0


def run_cache(action: str) -> int:
    """``cache info``: location, entries, size, what the key covers, what is not an entry;
    ``cache clear``: delete the entries (only in a directory carrying the cache's marker)."""
    from .compiler.cache import KernelCache
    cache = KernelCache()
    if action == "clear":
        r = cache.clear()
        if r.refused:
            print(f"error: {r.refused}", file=sys.stderr)
            return 1
        print(f"removed {r.removed} entries from {cache.root}")
        if r.kept:
            print(f"left {len(r.kept)} paths that are not cache entries: {', '.join(r.kept[:10])}"
                  + (" ..." if len(r.kept) > 10 else ""))
        return 0
    i = cache.info()
    print(f"cache: {i['root']}{'' if i['enabled'] else '  (disabled: CUTEDSL_CACHE=off)'}"
          + (f"  (cannot be written: {i['unwritable']}; kernels are kept in memory per process)"
             if i["unwritable"] else ""))
    print(f"entries: {i['entries']}, {i['bytes'] / 1e6:.2f} MB")
    if i["not_entries"]:
        print(f"not cache entries (left untouched by clear): {len(i['not_entries'])}")
        for path in i["not_entries"][:20]:
            print(f"  {path}")
    print(f"key covers: {i['key_covers']}")
    tc = i["toolchain_versions"]
    print(f"library sources: {i['library_hash']}, toolchain: {i['toolchain_hash'] or 'none (no MLIR here)'}"
          + (f" ({', '.join(f'{k} {v}' for k, v in tc.items())})" if tc else ""))
    for e in i["list"]:
        user = f"  user code: {', '.join(e['user_modules'])}" if e["user_modules"] else ""
        print(f"  {e['key']}/{e['toolchain']}  {e['kernel']}  {e['bytes'] / 1e3:.1f} kB  {json.dumps(e['config'])}{user}")
    return 0


def _add_bench_commands(sub):
    """``bench`` and ``bundle`` (owner: the benchmark harness, ``cutedsl/bench``)."""
    from .bench.cli import add_parsers
    add_parsers(sub)


def run_gemm(args) -> tuple:
    """Returns ``(report dict, exit status)``."""
    import numpy as np
    from .atom.mma_traits import MX_DTYPES
    from .collective import fusion
    from .device import Gemm, mx
    from .runtime.selection import resolve
    from .dtypes import tensor_core_value
    from .errors import ArgumentError, CuteDSLError, DumpError, NoDeviceError

    if getattr(args, "groups", None) is not None:        # one launch over several problems
        from .cli_grouped import run_grouped
        return run_grouped(args)
    if None in (args.m, args.n, args.k):
        raise UsageError("--m/--n/--k", "the problem size is required (or --groups MxNxK,... for a grouped GEMM)")
    if args.load is None:
        cfg = gemm_config(args)
        warn_ignored_options(cfg)
    try:
        backend, why, no_device = *resolve(args.backend, cfg.arch if args.load is None else None), None
    except NoDeviceError as e:                      # reported after the problem's own checks
        backend, why, no_device = None, "", e
    if args.load is not None:                       # an exported GEMM: its config, its kernel, no compiler
        from .device.export import load
        from .errors import CacheError
        try:
            gemm = load(args.load, backend if backend is not None else "none")
        except CacheError as e:
            raise UsageError("--load", str(e)) from None
        cfg = gemm.config
    else:
        gemm = Gemm(cfg, backend if backend is not None else "none", dump_dir=args.dump)
        if not args.batch:
            # the kernel this call runs (its operands' layouts may ask for a variant of the config,
            # e.g. raster N on a wide problem): compile and report that one, not the config's own
            from .device.operands import call_config
            run_cfg = call_config(cfg, args.m, args.n, args.k)
            if run_cfg.raster != cfg.raster:      # the only field 2-D operands in its own layouts change
                gemm = gemm.variant(raster=run_cfg.raster)
                cfg = gemm.config
    try:
        grid = gemm.grid(args.m, args.n, args.k, args.batch or 1)   # hardware grid limits, before anything runs
    except ArgumentError as e:
        raise UsageError("--m/--n/--k", str(e)) from None
    if no_device is not None:
        raise UsageError("--backend", str(no_device))
    t0 = time.perf_counter()
    try:
        kern = gemm.compiled
    except DumpError as e:
        if args.dump is None:                       # the directory came from the environment
            from .envvars import EnvVarError
            raise EnvVarError("CUTEDSL_DUMP_DIR", os.environ.get("CUTEDSL_DUMP_DIR", ""),
                              f"cannot be used: {e} (set it to a writable folder, or unset it)") from None
        raise UsageError("--dump", str(e)) from None
    compile_s = time.perf_counter() - t0
    r = kern.resources
    # the config's own report view (the config protocol's describe(): fields, resolved stages and
    # B type, and "chosen" -- why each field has its value -- after --schedule auto)
    rep = {"backend": backend.name if backend is not None else "none", "arch": cfg.arch,
           "m": args.m, "n": args.n, "k": args.k, "l": args.batch or 1, **cfg.describe(),
           "threads": kern.block[0], "grid": list(grid), **_decomposition(gemm, args),
           "registers": r.registers, "spills": r.spill_stores + r.spill_loads, "stack": r.stack,
           "smem_bytes": r.smem_bytes, "sass": r.sass, "ptxas_messages": list(r.ptxas_messages),
           "compile_s": round(compile_s, 4), "cold_compile_s": round(kern.compile_seconds, 4),
           "cached": bool(getattr(gemm.kernel, "last_cache_hit", False)), "executed": backend is not None,
           "loaded": args.load}
    if backend is None:
        rep["note"] = why
        return rep, 0
    if why:
        rep["note"] = why
    rng = np.random.default_rng(args.seed)
    # laid out in the config's majors: the operands' memory order picks the kernel (Gemm.variant)
    a, b = cfg.example_operands(args.m, args.n, args.k, rng, args.batch or 1)
    # the epilogue's arrays (C, aux, vectors) in the shapes it declares for this problem, batch included
    extra = fusion.random_args(gemm.kernel.epilogue.kernel_params(), args.m, args.n, rng, args.batch or 1)
    for name in ("alpha", "beta"):             # the scalars as given on the command line
        if name in extra:
            extra[name] = getattr(args, name)
    scales = None
    if cfg.dtype in MX_DTYPES:                 # block-scaled: random factors near 1 per 32 (NVFP4: 16) K-elements
        scales = [mx.random_scales(rng, r, args.k, cfg.dtype) for r in (args.m, args.n)]
        extra.update(a_scales=mx.pack_scales(scales[0], cfg.dtype), b_scales=mx.pack_scales(scales[1], cfg.dtype))
    launched = False
    try:
        launch, result = gemm.prepare(a, b, **extra)
        t = time.perf_counter()
        launched = True
        launch()
        d = result()
        first = time.perf_counter() - t
    except CuteDSLError as e:
        rep["error"] = f"{type(e).__name__}: {e}"
        rep["executed"] = launched              # failed before the launch: nothing executed
        return rep, 2
    flops = 2.0 * args.m * args.n * args.k * (args.batch or 1)
    ms = launch_ms(backend, launch, first, args.iters, rep)
    rep["time_ms"] = round(ms, 4)
    rep["tflops"] = round(flops / (ms * 1e-3) / 1e12, 6)
    if args.check:
        model = dict(extra)
        if scales is not None:
            acc = mx.dequantize(a, scales[0], cfg.dtype) @ mx.dequantize(np.asarray(b).T, scales[1], cfg.dtype).T
        else:
            acc = tensor_core_value(a, cfg.dtype) @ tensor_core_value(b, cfg.b_dtype or cfg.dtype)
        ref = fusion.reference(cfg.fusion, acc, model, cfg.out_dtype)
        err = _rel_err(d, ref, cfg.out_dtype)
        if "_aux" in model:                    # the second output: the value before the activation
            err = max(err, _rel_err(extra["aux"], model["_aux"], cfg.out_dtype))
        tol = TOLERANCE[cfg.out_dtype]
        rep.update(max_rel_err=err, tolerance=tol, passed=bool(err <= tol and np.all(np.isfinite(d))))
        return rep, 0 if rep["passed"] else 1
    return rep, 0


def _decomposition(gemm, args) -> dict:
    """The report's ``decomposition``: how a stream-K / split-K launch divides this problem
    (mode, data-parallel and shared tiles, units, the SM-utilisation model), else nothing."""
    sched = getattr(gemm.kernel, "scheduler", None)
    if not hasattr(sched, "decompose"):
        return {}
    from .problem import GemmProblem
    d = sched.decompose(GemmProblem(args.m, args.n, args.k, args.batch or 1))
    return {"decomposition": {"asked": gemm.config.decomposition, "mode": d.mode, "tiles": d.tiles,
                              "k_tiles": d.k_tiles, "clusters": d.clusters, "dp_tiles": d.dp_tiles,
                              "split_tiles": d.sk_tiles, "units": d.sk_units, "splits": d.splits,
                              "utilisation": round(d.utilisation(), 4)}}


def _rel_err(got, ref, out_dtype) -> float:
    """max |got - ref| / max |ref|, with ``ref`` saturated as an fp8 output saturates."""
    import numpy as np
    from .dtypes import dtype as _dtype
    npd = _dtype(out_dtype).numpy
    if out_dtype in ("e4m3", "e5m2"):
        import ml_dtypes
        top = float(ml_dtypes.finfo(npd).max)
        ref = np.clip(ref, -top, top)
    got = np.asarray(got).astype(np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def _print_text(rep):
    p = print
    ab = rep["dtype"] if rep["b_dtype"] == rep["dtype"] else f"{rep['dtype']} x {rep['b_dtype']}"
    lb = f" L={rep['l']}" if rep.get("l", 1) > 1 else ""
    p(f"cutedsl GEMM  M={rep['m']} N={rep['n']} K={rep['k']}{lb}  {ab} -> {rep['out_dtype']}  "
      f"tile {'x'.join(map(str, rep['tile']))}  stages {rep['stages']}  {rep['schedule']}  "
      f"{'A M-major  ' if rep.get('a_major') == 'MN' else ''}B {rep['b_major']}-major  epilogue {rep['epilogue']}{''.join(' + ' + str(x) for x in rep['fusion'])}"
      + (f"  cluster {rep['cluster'][0]}x{rep['cluster'][1]}" if rep.get("cluster", [1, 1]) != [1, 1] else "")
      + ("  mma 2SM (cta_group::2)" if rep.get("mma_sm", 1) == 2 else "")
      + ("  cluster launch control" if rep.get("tile_scheduler") == "clc" else "")
      + (f"  {rep['arch']}" if rep.get("arch", "sm_90a") != "sm_90a" else ""))
    for field, why in rep.get("chosen", {}).items():
        p(f"  chosen {field}: {why}")
    dec = rep.get("decomposition")
    if dec:
        p(f"  decomposition: {dec['mode']} ({dec['asked']} asked): {dec['tiles']} tiles x {dec['k_tiles']} k-tiles "
          f"on {dec['clusters']} clusters; {dec['dp_tiles']} whole, {dec['split_tiles']} split into "
          f"{dec['units']} units; model utilisation {100 * dec['utilisation']:.1f}%")
    p(f"  kernel: {rep['threads']} threads x grid {tuple(rep['grid'])}, {rep['registers']} registers, "
      f"{rep['spills']} spill bytes, {rep['smem_bytes']} B shared memory")
    if rep.get("loaded"):
        p(f"  kernel: loaded from the export {rep['loaded']} ({rep['compile_s']:.3f} s; no compiler)")
    else:
        p(f"  compile: {rep['compile_s']:.3f} s ({'cache hit; cold compile took ' + format(rep['cold_compile_s'], '.3f') + ' s' if rep['cached'] else 'cold'})")
    p("  SASS: " + sass_summary(rep["sass"]))
    for m in rep["ptxas_messages"]:
        p(f"  ptxas: {m}")
    if "note" in rep:               # when nothing ran, the note says why (one line)
        p(f"  note: {rep['note']}")
    if "error" in rep:
        p(f"  error: {rep['error']}")
        return
    if not rep["executed"]:
        return
    what = "GPU time (median)" if rep["backend"] == "cuda" else "emulator wall time"
    p(f"  backend {rep['backend']}: {what} {rep['time_ms']:.3f} ms, {rep['tflops']:.4g} TFLOP/s")
    if rep.get("chaos") is not None:
        p(f"  emulator: adversarial mode, seed {rep['chaos']} (CUTEDSL_SIM_CHAOS={rep['chaos']})")
    if "passed" in rep:
        p(f"  check vs float64 numpy: max rel err {rep['max_rel_err']:.3e} (tolerance {rep['tolerance']:.1e}) "
          f"-> {'PASS' if rep['passed'] else 'FAIL'}")


def run_tune(args) -> int:
    """``tune``: :func:`cutedsl.tune` on the chosen backend; prints the table (or JSON)."""
    from .device.tune import tune
    from .errors import CuteDSLError
    fixed = {"out_dtype": args.out_dtype} if args.out_dtype else {}
    try:
        r = tune(args.m, args.n, args.k, args.dtype, l=args.batch, backend=args.backend, limit=args.limit,
                 iters=args.iters, warmup=0 if args.backend == "sim" else 3, **fixed)
    except CuteDSLError as e:
        _json_error(args, f"{type(e).__name__}: {e}")
        print(f"python -m cutedsl tune: error: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"device": r.device, "emulated": r.emulated, "best": r.config.to_dict(), "ms": r.ms,
                          "table": [[c.to_dict(), ms] for c, ms in r.table]}))
    else:
        print(r.report())
    return 0


#: the subcommands whose --json prints one JSON object (every failure included)
JSON_COMMANDS = ("gemm", "attention", "compile", "tune", "info")


def _json_error(args, message: str) -> None:
    if getattr(args, "json", None) is True:
        print(json.dumps({"error": message}))


def main(argv=None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # under --json every failure is also one JSON object on stdout (bench's --json names a file)
    ArgParser.json_errors = bool(words) and words[0] in JSON_COMMANDS and "--json" in words
    args = _parser().parse_args(argv)
    from .envvars import EnvVarError, check_all
    try:
        check_all()                 # every CUTEDSL_* variable, before anything is compiled
    except EnvVarError as e:
        _json_error(args, str(e))
        print(f"python -m cutedsl {args.cmd}: error: environment: {e}", file=sys.stderr)
        return 2
    if args.cmd in ("gemm", "attention") and args.check and args.backend == "none":
        msg = "argument --check/--backend: --check compares a result, and --backend none runs nothing"
        _json_error(args, msg)
        print(f"python -m cutedsl {args.cmd}: error: {msg}", file=sys.stderr)
        return 2
    if args.cmd == "cache":
        return run_cache(args.action)
    if args.cmd == "compile":
        try:
            return run_compile(args)
        except UsageError as e:
            _json_error(args, str(e))
            print(f"python -m cutedsl compile: error: {e}", file=sys.stderr)
            return 2
    if args.cmd == "info":
        from .info import collect, print_report
        rep = collect()
        if args.json:
            print(json.dumps(rep))
        else:
            print_report(rep)
        return 0
    if args.cmd == "tune":
        return run_tune(args)
    if args.cmd in ("bench", "bundle"):
        from .bench.cli import main as bench_main
        return bench_main(args)
    from .errors import CuteDSLError, NoDeviceError
    prog = f"python -m cutedsl {args.cmd}"
    from .cli_attention import print_attention, run_attention
    try:
        rep, status = run_attention(args) if args.cmd == "attention" else run_gemm(args)
    except (UsageError, CuteDSLError, MemoryError) as e:
        if isinstance(e, NoDeviceError):
            e = UsageError("--backend", str(e))
        elif isinstance(e, MemoryError):        # operands (or the emulator's copy) too big for this machine
            e = UsageError("--batch/--seqlen-q/--seqlen-k" if args.cmd == "attention" else "--m/--n/--k",
                           f"the problem does not fit in memory here: {e}")
        msg = str(e) if isinstance(e, UsageError) else f"{type(e).__name__}: {e}"
        msg = " ".join(msg.split("\n")[:1])        # one line; details stay in --json
        if args.json:
            print(json.dumps({"error": str(e) if isinstance(e, UsageError) else f"{type(e).__name__}: {e}"}))
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep))
    elif args.cmd == "attention":
        print_attention(rep)
    elif getattr(args, "groups", None) is not None:
        from .cli_grouped import print_grouped
        print_grouped(rep)
    else:
        _print_text(rep)
    if "error" in rep:              # the one line on stderr every failure gets
        print(f"{prog}: error: {rep['error'].splitlines()[0]}", file=sys.stderr)
    return status
