"""The main job: ``python -m cutedsl gemm ...`` — compile (cached), run, check and report a GEMM."""
from __future__ import annotations

import argparse
import json
import sys
import time

TOLERANCE = {"f32": 2e-3, "f16": 4e-3, "bf16": 1.6e-2}   # max |D - ref| / max |ref|
MAX_I32 = 2 ** 31 - 1


# -- user mistakes: one line on stderr naming the option and what it accepts, exit status 2 ------
# Every subcommand uses these: ``ArgParser`` (argparse's own errors, ``type=``/``choices=``
# failures), the ``type=`` factories below, and ``UsageError`` for checks made after parsing.

class UsageError(Exception):
    """A user mistake found after parsing: ``option`` (e.g. ``"--tile"``) and what is wrong.
    :func:`main` prints ``<prog>: error: argument <option>: <message>`` and returns 2."""

    def __init__(self, option: str, message: str):
        super().__init__(f"argument {option}: {message}")
        self.option = option


class ArgParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line on stderr (no usage dump, no
    traceback) with exit status 2; its subparsers are ``ArgParser`` too."""

    #: set by :func:`main` for ``gemm --json``: errors are also one JSON object on stdout
    json_errors = False

    def error(self, message):
        if ArgParser.json_errors:
            print(json.dumps({"error": message}))
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _num(v: int) -> str:
    """``2147483647`` -> ``2^31-1`` (limits read better as powers of two)."""
    return f"2^{(v + 1).bit_length() - 1}-1" if v > 2 ** 20 and (v + 1) & v == 0 else str(v)


def int_in(lo: int, hi: int | None = None):
    """``type=`` for an integer in ``lo..hi`` (``hi=None``: no upper bound); the error names
    the accepted range."""
    span = f"{_num(lo)}..{_num(hi)}" if hi is not None else f">= {_num(lo)}"

    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"expected an integer {span if hi is None else 'in ' + span}, "
                                             f"got {text!r}")
        return v
    return parse


def stages_arg(text: str):
    """``type=`` for ``--stages``: ``auto`` or a pipeline depth the mainloops support (1..7)."""
    from .device.config import STAGES
    lo, hi = STAGES.start, STAGES.stop - 1
    if text == "auto":
        return text
    try:
        return int_in(lo, hi)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer in {lo}..{hi}, got {text!r}") from None


def tile_arg(text: str) -> tuple:
    """``type=`` for ``--tile``: ``BLOCK_MxBLOCK_NxBLOCK_K`` (the values are checked by GemmConfig)."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected BLOCK_MxBLOCK_NxBLOCK_K such as 128x128x64, got {text!r}")
    return tuple(int(p) for p in parts)


def cluster_arg(text: str) -> tuple:
    """``type=`` for ``--cluster``: ``MxN`` CTAs per cluster, one of ``GemmConfig``'s clusters
    (1x1, 2x1 or 1x2)."""
    from .device.config import CLUSTERS
    parts = text.lower().split("x")
    c = tuple(int(p) for p in parts) if len(parts) == 2 and all(p.isdigit() for p in parts) else ()
    if c not in CLUSTERS:
        names = [f"{m}x{n}" for m, n in CLUSTERS]
        raise argparse.ArgumentTypeError(f"expected {', '.join(names[:-1])} or {names[-1]} (cluster_m x cluster_n), "
                                         f"got {text!r}")
    return c


def config_options(args) -> tuple:
    """``((field, option), ...)``: the GemmConfig fields ``args`` sets, in field order; the
    option of field ``out_dtype`` is ``--out-dtype`` (a new config field with a same-named
    option is picked up without changes here)."""
    import attrs
    from .device import GemmConfig
    return tuple((f.name, "--" + f.name.replace("_", "-")) for f in attrs.fields(GemmConfig)
                 if hasattr(args, f.name))


def gemm_config(args):
    """The ``GemmConfig`` the ``gemm`` arguments describe, validated as a whole (so
    ``--stages 7 --schedule warp_specialized`` is accepted although 7 stages do not fit the
    default schedule). When it is invalid, the ``UsageError`` names the options responsible:
    those whose reset to the default makes the config valid (``--tile/--stages`` for a
    combination), else the first option, in field order, from which on the config fails."""
    import attrs
    from .device import GemmConfig
    from .errors import ConfigError

    def fails(**kw):
        try:
            return GemmConfig(**kw) and None
        except ConfigError as e:
            return e

    options = config_options(args)
    fields = {f: getattr(args, f) for f, _ in options}
    err = fails(**fields)
    if err is None:
        return GemmConfig(**fields)
    defaults = {f.name: f.default for f in attrs.fields(GemmConfig)}
    given = [(f, o) for f, o in options if fields[f] != defaults[f]]
    culprits = [o for f, o in given if fails(**{**fields, f: defaults[f]}) is None]
    if not culprits:                    # no single option to blame: where it starts to fail
        sofar = {}
        for f, o in options:
            sofar[f] = fields[f]
            if fails(**sofar) is not None:
                culprits = [o]
                break
    raise UsageError("/".join(culprits) or options[0][1], str(err))


def warn_ignored_options(cfg) -> None:
    """One line on stderr when ``--raster``/``--swizzle``/``--sm-count`` were set to something
    other than their default for a schedule without the persistent tile scheduler
    (``multistage``, ``single_tile``), which ignores them; the run goes on."""
    from .device.config import WARP_SPECIALIZED
    if cfg.schedule in WARP_SPECIALIZED:
        return
    set_ = [o for o, v, d in (("--raster", cfg.raster, "M"), ("--swizzle", cfg.swizzle, 1),
                              ("--sm-count", cfg.sm_count, None)) if v != d]
    if set_:
        print(f"python -m cutedsl gemm: warning: {'/'.join(set_)} ignored: schedule {cfg.schedule!r} has one "
              f"CTA per tile in launch order (only {', '.join(WARP_SPECIALIZED)} use them)", file=sys.stderr)


def _parser():
    p = ArgParser(prog="python -m cutedsl", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gemm", help="compile, run and report D = A @ B")
    size = int_in(1, MAX_I32)
    g.add_argument("--m", type=size, required=True, help=f"rows of A and D, 1..{MAX_I32}")
    g.add_argument("--n", type=size, required=True, help=f"columns of B and D, 1..{MAX_I32}")
    g.add_argument("--k", type=size, required=True, help=f"columns of A, rows of B, 1..{MAX_I32}")
    from .device.config import DTYPES, OUT_DTYPES      # what the atom and the epilogues implement
    g.add_argument("--dtype", choices=list(DTYPES), default="f16")
    g.add_argument("--out-dtype", choices=list(OUT_DTYPES), default="f32")
    g.add_argument("--tile", type=tile_arg, default=(128, 128, 64), help="BLOCK_MxBLOCK_NxBLOCK_K")
    from .device.config import STAGES
    g.add_argument("--stages", type=stages_arg, default="auto", help=f"auto or {STAGES.start}..{STAGES.stop - 1}")
    from .device.config import SCHEDULES       # the config's list: a new schedule is an option at once
    g.add_argument("--schedule", choices=list(SCHEDULES), default="multistage")
    g.add_argument("--cluster", type=cluster_arg, default=(1, 1), metavar="MxN",
                   help="CTAs per cluster, cluster_m x cluster_n: 1x1, 2x1 or 1x2 (warp-specialized schedules)")
    g.add_argument("--raster", choices=["M", "N"], default="M", help="the tile scheduler walks along M or N first")
    g.add_argument("--swizzle", type=int, choices=[1, 2, 4, 8], default=1, help="tiles per rasterization strip")
    g.add_argument("--sm-count", type=int_in(1, 4096), default=None,
                   help="SMs a persistent schedule fills, 1..4096 (default: the device's, else 132)")
    g.add_argument("--b-major", choices=["MN", "K", "N"], default="MN",
                   help="B's layout: MN (N-major, (K, N) row-major; N is accepted) or K (transposed)")
    from .arch import ARCHS
    g.add_argument("--arch", choices=list(ARCHS), default="sm_90a", help="target architecture")
    g.add_argument("--epilogue", choices=["tma", "global"], default="tma")
    g.add_argument("--backend", choices=["auto", "cuda", "sim", "none"], default="auto")
    g.add_argument("--check", action="store_true", help="compare with a float64 numpy reference")
    g.add_argument("--seed", type=int_in(0, 2 ** 64 - 1), default=0, help="input seed, 0..2^64-1")
    g.add_argument("--iters", type=int_in(1, 100_000), default=50,
                   help="timed launches on a GPU (median reported), 1..100000")
    g.add_argument("--dump", metavar="DIR", help="write IR before/after lowering, PTX, SASS there")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    c = sub.add_parser("cache", help="show or clear the compiled-kernel cache ($CUTEDSL_CACHE_DIR)")
    c.add_argument("action", choices=["info", "clear"])
    _add_bench_commands(sub)
    return p


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
    from .device import Gemm
    from .device.selection import resolve
    from .dtypes import dtype as _dtype
    from .errors import ArgumentError, CuteDSLError, DumpError, NoDeviceError

    cfg = gemm_config(args)
    warn_ignored_options(cfg)
    try:
        backend, why, no_device = *resolve(args.backend), None
    except NoDeviceError as e:                      # reported after the problem's own checks
        backend, why, no_device = None, "", e
    gemm = Gemm(cfg, backend if backend is not None else "none", dump_dir=args.dump)
    try:
        grid = gemm.grid(args.m, args.n, args.k)       # hardware grid limits, before anything runs
    except ArgumentError as e:
        raise UsageError("--m/--n/--k", str(e)) from None
    if no_device is not None:
        raise UsageError("--backend", str(no_device))
    t0 = time.perf_counter()
    try:
        kern = gemm.compiled
    except DumpError as e:
        raise UsageError("--dump", str(e)) from None
    compile_s = time.perf_counter() - t0
    r = kern.resources
    rep = {"backend": backend.name if backend is not None else "none", "arch": cfg.arch,
           "m": args.m, "n": args.n, "k": args.k,
           "dtype": args.dtype, "out_dtype": args.out_dtype, "tile": list(cfg.tile),
           "stages": cfg.resolved_stages(), "schedule": cfg.schedule, "b_major": cfg.b_major,
           "epilogue": cfg.epilogue, "cluster": list(cfg.cluster), "raster": cfg.raster, "swizzle": cfg.swizzle,
           "threads": kern.block[0], "grid": list(grid),
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
    launched = False
    try:
        launch, result = gemm.prepare(a, b)
        t = time.perf_counter()
        launched = True
        launch()
        d = result()
        first = time.perf_counter() - t
    except CuteDSLError as e:
        rep["error"] = f"{type(e).__name__}: {e}"
        rep["executed"] = launched              # failed before the launch: nothing executed
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
        seed = (getattr(backend, "last_launch", None) or {}).get("chaos")
        if seed is not None:
            rep["chaos"] = seed     # the emulator's adversarial-mode seed (replay with it)
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
      f"B {rep['b_major']}-major  epilogue {rep['epilogue']}"
      + (f"  cluster {rep['cluster'][0]}x{rep['cluster'][1]}" if rep.get("cluster", [1, 1]) != [1, 1] else ""))
    p(f"  kernel: {rep['threads']} threads x grid {tuple(rep['grid'])}, {rep['registers']} registers, "
      f"{rep['spills']} spill bytes, {rep['smem_bytes']} B shared memory")
    p(f"  compile: {rep['compile_s']:.3f} s ({'cache hit; cold compile took ' + format(rep['cold_compile_s'], '.3f') + ' s' if rep['cached'] else 'cold'})")
    keys = ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "BAR", "STG", "STS", "WARPGROUP", "USETMAXREG")
    p("  SASS: " + ", ".join(f"{k} {rep['sass'].get(k, 0)}" for k in keys)
      + f"  ({sum(rep['sass'].values())} instructions)")
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


def main(argv=None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    ArgParser.json_errors = bool(words) and words[0] == "gemm" and "--json" in words
    args = _parser().parse_args(argv)
    from .envvars import EnvVarError, check_all
    try:
        check_all()                 # every CUTEDSL_* variable, before anything is compiled
    except EnvVarError as e:
        if getattr(args, "json", None) is True:
            print(json.dumps({"error": str(e)}))
        print(f"python -m cutedsl {args.cmd}: error: environment: {e}", file=sys.stderr)
        return 2
    if args.cmd == "gemm" and args.check and args.backend == "none":
        msg = "argument --check/--backend: --check compares a result, and --backend none runs nothing"
        if args.json:
            print(json.dumps({"error": msg}))
        print(f"python -m cutedsl gemm: error: {msg}", file=sys.stderr)
        return 2
    if args.cmd == "cache":
        return run_cache(args.action)
    if args.cmd in ("bench", "bundle"):
        from .bench.cli import main as bench_main
        return bench_main(args)
    from .errors import CuteDSLError, NoDeviceError
    prog = f"python -m cutedsl {args.cmd}"
    try:
        rep, status = run_gemm(args)
    except (UsageError, CuteDSLError, MemoryError) as e:
        if isinstance(e, NoDeviceError):
            e = UsageError("--backend", str(e))
        elif isinstance(e, MemoryError):        # operands (or the emulator's copy) too big for this machine
            e = UsageError("--m/--n/--k", f"the problem does not fit in memory here: {e}")
        msg = str(e) if isinstance(e, UsageError) else f"{type(e).__name__}: {e}"
        msg = " ".join(msg.split("\n")[:1])        # one line; details stay in --json
        if args.json:
            print(json.dumps({"error": str(e) if isinstance(e, UsageError) else f"{type(e).__name__}: {e}"}))
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep))
    else:
        _print_text(rep)
    if "error" in rep:              # the one line on stderr every failure gets
        print(f"{prog}: error: {rep['error'].splitlines()[0]}", file=sys.stderr)
    return status
