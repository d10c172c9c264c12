"""``python -m cutedsl bench`` and ``python -m cutedsl bundle`` (argument parsing and driving)."""
from __future__ import annotations

import json
import os
import sys

SET_NAMES = ("square", "skinny", "paper", "stages", "wave", "moe")
#: sets of the attention forward and backward (AttentionConfigs, not GemmConfigs: named on their own,
#: not in 'all')
ATTENTION_SET_NAMES = ("attention", "attention-bwd")


def _csv_list(text):
    return [t.strip() for t in text.split(",") if t.strip()]


def add_parsers(sub) -> None:
    """Add the ``bench`` and ``bundle`` subcommands to the main CLI's subparsers."""
    from ..cliargs import int_in
    b = sub.add_parser("bench", help="time GEMM configs against cuBLAS (attention: against torch SDPA) over shape sets",
                       description="Time cutedsl GEMM configs against cuBLAS, and the attention forward and backward against "
                                   "torch's SDPA (flash and cuDNN backends) (same process, same inputs; "
                                   "CUDA events, median of --iters launches, rotated inputs and L2 flush). "
                                   "On --backend sim: tiny shapes, a test of the harness, no timings.")
    b.add_argument("--set", default="square",
                   help="comma list of " + ", ".join(SET_NAMES + ATTENTION_SET_NAMES) + ", or 'all' (every GEMM "
                        "set; default square). attention, attention-bwd: FlashAttention-3's forward and backward "
                        "benchmarks, --dtype f16 or bf16 (attention also --arch sm_100a)")
    b.add_argument("--config", action="append", default=[], metavar="SPEC",
                   help="a config as key=value,... (GemmConfig fields, e.g. tile=128x256x64,stages=4); "
                        "repeatable; replaces --tile/--stages/--schedule")
    b.add_argument("--tile", default=None, help="comma list of tiles (default 128x128x64,128x256x64)")
    b.add_argument("--stages", default=None, help="comma list of stage counts or auto "
                                                  "(default auto; the stages set: 1..7)")
    b.add_argument("--schedule", default=None, help="comma list (default: every schedule GemmConfig accepts)")
    from ..device.config import DTYPES, OUT_DTYPES
    b.add_argument("--dtype", choices=list(DTYPES), default="f16",
                   help="operand type (fp8: the reference is torch._scaled_mm with unit scales)")
    b.add_argument("--b-dtype", choices=list(DTYPES), default=None, help="B's type when it differs (e4m3 x e5m2)")
    b.add_argument("--out-dtype", choices=list(OUT_DTYPES), default="f16",
                   help="output dtype (default f16, what cuBLAS writes for f16 inputs)")
    b.add_argument("--b-major", choices=["MN", "K", "N"], default=None,
                   help="B's layout (default: MN for 16-bit types, K for fp8/tf32)")
    from ..arch import ARCHS
    b.add_argument("--arch", choices=list(ARCHS), default="sm_90a",
                   help="target architecture of the configs (sm_100a: its kernels, on the emulator "
                        "unless a Blackwell GPU is driven)")
    b.add_argument("--backend", choices=["auto", "cuda", "sim"], default="auto")
    b.add_argument("--ref", choices=["auto", "torch", "cupy", "numpy"], default="auto",
                   help="array library and reference: torch.matmul, cupy.matmul (cuBLAS) or numpy")
    b.add_argument("--iters", type=int_in(1, 100_000), default=30,
                   help="timed launches per point, 1..100000 (>= 20 on a GPU)")
    b.add_argument("--warmup", type=int_in(0, 10_000), default=5, help="untimed launches first, 0..10000")
    b.add_argument("--max-sets", type=int_in(1, 64), default=8, help="most input sets rotated between launches")
    b.add_argument("--no-flush", action="store_true", help="no L2 flush between launches")
    b.add_argument("--seed", type=int_in(0, 2 ** 63 - 1), default=0, help="input seed, 0..2^63-1")
    b.add_argument("--json", metavar="FILE", help="write the full result as JSON ('-': stdout)")
    b.add_argument("--csv", metavar="FILE", help="write one row per point as CSV ('-': stdout)")
    b.add_argument("--plot", metavar="FILE.png", help="TFLOP/s vs shape, per config and cuBLAS (matplotlib)")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--identity", action="store_true",
                   help="instead: integer inputs, GPU result bit-identical with the emulator, per config")

    from .plans import PLANS
    u = sub.add_parser("bundle", help="compile every kernel a GPU run needs into a directory (no GPU needed)",
                       description="Compile into DIR/cache every kernel that scripts/gpu_run.sh runs, and "
                                   "write DIR/manifest.json; or --verify that DIR has them all (no MLIR needed).")
    u.add_argument("--out", required=True, metavar="DIR")
    u.add_argument("--plan", choices=list(PLANS), default="gpu",
                   help="gpu: what a GPU lease runs (cutedsl.bench.plans: the gpu tests, the problems timed "
                        "against cuBLAS with the model's and tuner's configs, the main job's export); explore: "
                        "a calibration grid of configs on more problems (no tests, no attention); smoke: a "
                        "small plan for testing the bundle and the dry run")
    u.add_argument("--arch", choices=list(ARCHS), default=None,
                   help="the target of the bundled kernels (default sm_90a); sm_100a bundles the plan's "
                        "problems (the model's pick) and main job for Blackwell, without the gpu tests (they "
                        "drive sm_90a)")
    u.add_argument("--verify", action="store_true", help="check that every kernel of DIR's manifest loads "
                                                          "from DIR/cache, compiling nothing")
    u.add_argument("--print", dest="print_key", metavar="KEY", help="print a manifest entry (shell use)")


def selected_configs(args, set_name: str) -> list:
    """The configs ``args`` select for ``set_name`` (``UsageError`` naming the option)."""
    import argparse

    from ..cliargs import UsageError, stages_arg, tile_arg
    from ..errors import ConfigError
    from . import configs as C
    if set_name in ATTENTION_SET_NAMES:
        raise UsageError("--set", f"{set_name!r} times AttentionConfigs, not GEMM configs: run it with bench "
                                  f"(its kernels compile on first use)")
    base = {"dtype": args.dtype, "out_dtype": args.out_dtype}
    if getattr(args, "arch", "sm_90a") != "sm_90a":
        base["arch"] = args.arch
    if args.b_major is not None:
        base["b_major"] = "MN" if args.b_major == "N" else args.b_major
    if args.b_dtype is not None:
        base["b_dtype"] = args.b_dtype
    if args.config:
        try:
            return [C.parse_config(s, base) for s in args.config]
        except (ConfigError, ValueError) as e:
            raise UsageError("--config", str(e)) from None
    try:
        tiles = [tile_arg(t) for t in _csv_list(args.tile)] if args.tile else None
    except argparse.ArgumentTypeError as e:
        raise UsageError("--tile", str(e)) from None
    try:
        stages = [stages_arg(s) for s in _csv_list(args.stages)] if args.stages else None
    except argparse.ArgumentTypeError as e:
        raise UsageError("--stages", str(e)) from None
    scheds = _csv_list(args.schedule) if args.schedule else None
    if scheds:
        ok = C.accepted_schedules(getattr(args, "arch", None))
        bad = [s for s in scheds if s not in ok]
        if bad:
            raise UsageError("--schedule", f"{', '.join(bad)} not accepted; choose from {', '.join(ok)}")
    rejected = []
    cfgs = C.sweep_configs(set_name, tiles=tiles, schedules=scheds, stages=stages, base=base, rejected=rejected)
    if not cfgs:
        raise UsageError("--tile/--stages/--schedule", f"no valid config for set {set_name!r} "
                         f"(GemmConfig rejects every combination; the first: {rejected[0]})")
    return cfgs


def set_names(args) -> list:
    from ..cliargs import UsageError
    names = list(SET_NAMES) if args.set == "all" else _csv_list(args.set)
    bad = [n for n in names if n not in SET_NAMES + ATTENTION_SET_NAMES]
    if bad or not names:
        raise UsageError("--set", f"{', '.join(bad) or '(empty)'} unknown; choose from "
                                  f"{', '.join(SET_NAMES + ATTENTION_SET_NAMES)} or all")
    if args.set == "all":           # the sets the architecture has kernels for
        names = [n for n in names if _has_configs(args, n)]
    return names


def _has_configs(args, set_name) -> bool:
    from ..cliargs import UsageError
    try:
        return bool(selected_configs(args, set_name))
    except UsageError:
        return False


def run_bench(args) -> int:
    from ..cliargs import UsageError
    from ..runtime.selection import get_backend
    from ..errors import NoDeviceError
    from . import libs, report
    from .runner import header, make_sweep
    from .shapes import shapes_for

    from . import attention, attention_bwd
    plan, notes = [], []
    for n in set_names(args):
        if n in ATTENTION_SET_NAMES:
            phase = attention_bwd if n == "attention-bwd" else attention
            cfgs, skipped = phase.configs(args.dtype, getattr(args, "arch", "sm_90a"))
            plan.append((n, cfgs))
            notes += skipped + [f"{n}: reference torch SDPA (flash, cuDNN backends) on a GPU with torch; on the "
                                f"emulator the float64 reference (cutedsl/device/attention_reference.py)"]
        else:
            plan.append((n, selected_configs(args, n)))
    check_output_paths(args)
    try:
        backend = get_backend(args.backend, getattr(args, "arch", None))
    except NoDeviceError as e:
        raise UsageError("--backend", str(e)) from None
    timed = backend.name == "cuda"
    if timed and args.iters < 20:
        raise UsageError("--iters", f"a GPU run takes the median of at least 20 launches, got {args.iters}")
    if args.identity:
        if any(n in ATTENTION_SET_NAMES for n, _ in plan):
            raise UsageError("--identity/--set", "the bit-identity check compares GEMMs; leave the attention set out")
        return run_identity(args, backend, plan)
    lib, note = libs.pick(backend.name, args.ref, args.seed)
    total = sum(len(cfgs) * len(shapes_for(n, backend.name)) for n, cfgs in plan)
    notes.insert(0, note)
    if not timed:
        notes.append("backend sim: tiny shapes, harness test only, NO TIMINGS CLAIMED")
    with report.Progress(total, enabled=not args.no_progress) as bar:
        sweep, timer = make_sweep(backend, lib, iters=args.iters, warmup=args.warmup, max_sets=args.max_sets,
                                  flush=not args.no_flush, progress=bar)
        if bar.kind == "plain":
            notes.append(f"plain progress lines: {bar.why}")
        result = {"header": header(backend, lib, timer, sweep, notes), "sets": []}
        for name, cfgs in plan:
            result["sets"].append(sweep.run_set(name, cfgs))
            _write_files(args, result, report)   # after each set: a run killed later keeps these
    timer.close()
    if args.plot:
        why = report.plot(result, args.plot)
        if why:
            result["header"].setdefault("notes", []).append(why)
            print(why, file=sys.stderr)
    _write_files(args, result, report)
    if args.json == "-":
        report.write("-", report.to_json(result))
    elif args.csv == "-":
        report.write("-", report.to_csv(result))
    else:
        print(report.text(result), end="")
    bad = sum(g["failed_checks"] for s in result["sets"] for g in s["summary"]["configs"].values())
    return 1 if bad else 0


def check_output_paths(args) -> None:
    """``UsageError`` before anything runs when ``--json``/``--csv``/``--plot`` name a file in a
    directory that is missing or not writable (not a traceback after the whole sweep)."""
    from ..cliargs import UsageError
    for option in ("--json", "--csv", "--plot"):
        path = getattr(args, option[2:], None)
        if path and path != "-":
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
                raise UsageError(option, f"cannot write {path!r}: directory {parent!r} "
                                         f"{'is not writable' if os.path.isdir(parent) else 'does not exist'}")


def _write_files(args, result, report):
    if args.json and args.json != "-":
        report.write(args.json, report.to_json(result))
    if args.csv and args.csv != "-":
        report.write(args.csv, report.to_csv(result))


def run_identity(args, backend, plan) -> int:
    from ..runtime.selection import get_backend
    from . import identity
    from .configs import config_dict  # noqa: F401 - keeps the config fields in one place
    cfgs = list(dict.fromkeys(c for _, cs in plan for c in cs))
    emu = get_backend("sim")
    rows = identity.check(cfgs, backend, emu, seed=args.seed)
    res = {"identity": rows, "backend": backend.name}
    if args.json:
        from . import report
        report.write(args.json, json.dumps(res, indent=1))
    bad = 0
    print(f"bit identity {backend.name} vs emulator, integer inputs {identity.SHAPE}:")
    for r in rows:
        ok = r["identical"] and r["exact"]
        bad += not ok
        print(f"  {r['config']:<40} {'PASS' if ok else 'FAIL'}  identical={r['identical']} exact={r['exact']}"
              + (f"  {r['error']}" if r.get("error") else ""))
    print(f"{len(rows) - bad} passed, {bad} failed")
    return 1 if bad else 0


def main(args) -> int:
    """Run ``bench`` or ``bundle``; a user mistake is one line on stderr and exit status 2."""
    from ..cliargs import UsageError
    try:
        if args.cmd == "bench":
            return run_bench(args)
        from . import bundle
        return bundle.main(args)
    except UsageError as e:
        print(f"python -m cutedsl {args.cmd}: error: {e}", file=sys.stderr)
        return 2
