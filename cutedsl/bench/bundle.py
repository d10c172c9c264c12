"""The GPU bundle: every kernel a GPU run needs, compiled where MLIR is, into one directory
that a GPU machine with only numpy + cuda-python runs from (``scripts/gpu_run.sh``).

``DIR/cache/`` is a kernel cache (``CUTEDSL_CACHE_DIR``); ``DIR/export/main`` the main job's
GEMM exported with ``Gemm.save`` (the run loads it: ``gemm --load``); ``DIR/manifest.json`` records the
plan (the argument lists of each step of the run), the source hash the kernels were compiled
from, and every cache entry. What the run needs is derived from the same argument lists the
run uses, so a schedule ``GemmConfig`` accepts at bundle time is bundled without an edit:

* the ``bench`` sets and the ``--identity`` check: :func:`cutedsl.bench.cli.selected_configs`;
* the main job: :func:`cutedsl.cliargs.gemm_config`;
* the ``gpu``-marked tests: run under :mod:`.capture` (compile, stop at the first launch).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import CacheError, ConfigError

#: hard limit on the bundle (it travels with the checkout to the GPU machine)
MAX_BYTES = 30 * 1024 * 1024
EXPORT = "export/main"      #: the main job's GEMM, exported (``Gemm.save``)
ROOT = Path(__file__).resolve().parents[2]

PLANS = {
    "gpu": {
        "bench_args": ["--set", "all"],
        "identity_args": ["--set", "square"],
        "main_args": ["gemm", "--m", "1000", "--n", "1000", "--k", "1000", "--check"],
        "tests": ["tests/device/test_gpu.py"],
    },
    # a few kernels: what the dry-run test of the bundle and the runner builds
    "smoke": {
        "bench_args": ["--set", "square", "--schedule", "multistage", "--tile", "128x128x64", "--stages", "2"],
        "identity_args": ["--set", "square", "--schedule", "multistage", "--tile", "128x128x64", "--stages", "2"],
        "main_args": ["gemm", "--m", "300", "--n", "200", "--k", "160", "--schedule", "multistage", "--stages", "2",
                      "--out-dtype", "f16",
                      "--check"],
        "tests": [],
    },
}


def plan_for(plan_name: str, arch: str | None = None) -> dict:
    """Plan ``plan_name`` for architecture ``arch`` (None: the default, sm_90a): another
    architecture's bundle runs the same bench sets and main job with ``--arch`` added and the
    architecture's own default schedule (the smoke plan's ``--schedule multistage`` is sm_90a's),
    and no ``gpu`` tests (they drive the sm_90a CUDA backend). ``ConfigError`` for an unknown
    architecture."""
    from ..arch import ARCHS, DEFAULT
    from ..errors import one_of
    plan = dict(PLANS[plan_name])
    if arch is None or arch == DEFAULT.name:
        return plan
    if arch not in ARCHS:
        raise ConfigError(f"bundle --arch must be {one_of(tuple(ARCHS))}, got {arch!r}")

    def retarget(args):
        out, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a == "--schedule":
                skip = True             # the architecture's default schedule instead
            else:
                out.append(a)
        return out + ["--arch", arch]
    plan.update({key: retarget(plan[key]) for key in ("bench_args", "identity_args", "main_args")}, tests=[])
    return plan


def _parse(argv):
    """``argv`` as the CLI parses it (``bench ...`` or ``gemm ...``), from the shared parsers
    (``cliargs`` for ``gemm``, this package's for ``bench``): no import of ``cutedsl.cli``."""
    from ..cliargs import ArgParser, add_gemm_parser
    from .cli import add_parsers
    p = ArgParser(prog="python -m cutedsl")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_gemm_parser(sub)
    add_parsers(sub)
    return p.parse_args(argv)


def _bench_args(argv):
    return _parse(["bench", *argv])


def plan_configs(plan: dict, grouped: bool = False) -> list:
    """The ``GemmConfig`` s of the bench, identity and main-job steps of ``plan`` (unique);
    ``grouped``: those of the grouped sets instead (their kernels are ``GroupedGemm``'s)."""
    from ..cliargs import gemm_config
    from .cli import selected_configs, set_names
    from .shapes import GROUPED_SETS
    out = []
    for key in ("bench_args", "identity_args"):
        args = _bench_args(plan[key])
        for name in set_names(args):
            if (name in GROUPED_SETS) == grouped:
                out += selected_configs(args, name)
    if not grouped:
        out.append(gemm_config(_parse(plan["main_args"])))
    return list(dict.fromkeys(out))


def _cache_config(cfg, grouped: bool = False):
    """The cache key of a GemmConfig's kernel (what ``Kernel.compile`` looks up)."""
    from ..device.precompile import config_kernel
    return config_kernel(cfg, grouped).cache_key()[0]


def _entries(cache_dir: Path) -> set:
    return {p.name for p in cache_dir.iterdir() if p.is_dir()} if cache_dir.is_dir() else set()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(out: Path, plan_name: str = "gpu", log=print, arch: str | None = None) -> dict:
    """Compile every kernel of ``plan_name`` (for ``arch``: :func:`plan_for`) into
    ``out/cache``; write and return the manifest. Raises ``CacheError`` when the bundle would
    pass :data:`MAX_BYTES` or a kernel fails."""
    from ..compiler.cache import source_hash, toolchain_hash
    from ..compiler.toolchain import versions
    from .configs import accepted_schedules, label
    plan = plan_for(plan_name, arch)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CacheError(f"{out} exists and is not a folder: give --out a new path or a bundle folder")
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise CacheError(f"{out} exists, is not empty and holds no bundle manifest: refusing to overwrite it")
    shutil.rmtree(out / "cache", ignore_errors=True)
    cache_dir = out / "cache"
    try:
        cache_dir.mkdir(parents=True)
    except OSError as e:                # a path under a file, a read-only place: say so, no traceback
        raise CacheError(f"cannot create {cache_dir}: {e.strerror or e}") from None
    if toolchain_hash() is None:
        raise CacheError("building a bundle needs the MLIR toolchain (this machine has none)")
    os.environ["CUTEDSL_CACHE_DIR"] = str(cache_dir)     # the public way: Gemm compiles into the default cache
    cfgs, grouped = plan_configs(plan), plan_configs(plan, grouped=True)
    log(f"bundle {plan_name}{f' ({arch})' if arch else ''}: {len(cfgs)} configs + {len(grouped)} grouped (schedules: "
        f"{', '.join(accepted_schedules(arch))})")
    from ..device.precompile import compile_all

    def progress(done, total, r):
        log(f"  [{done}/{total}] {label(r.config)}  " + (f"FAILED: {r.error}" if r.error else f"{r.registers} regs"))
    results = compile_all(cfgs, cache_dir=cache_dir, progress=progress)      # a process pool
    if grouped:
        results += compile_all(grouped, cache_dir=cache_dir, progress=progress, grouped=True)
    bad = [r for r in results if r.error]
    if bad:
        raise CacheError(f"{len(bad)} kernels failed to compile; the first, {label(bad[0].config)}: {bad[0].error}")
    kernels = [{"config": label(r.config), "key": r.key} for r in results]
    tests = []
    for t in plan["tests"]:
        before = _entries(cache_dir)
        env = dict(os.environ, CUTEDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "cutedsl.bench.capture", "-p",
                            "no:cacheprovider", "-m", "gpu", t], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=3600)
        if r.returncode not in (0, 5):
            raise CacheError(f"compiling the kernels of {t} failed:\n{r.stdout[-4000:]}{r.stderr[-2000:]}")
        new = sorted(_entries(cache_dir) - before)
        tests.append({"file": t, "new_entries": new, "pytest": r.stdout.strip().splitlines()[-1:]})
        log(f"  {t}: {len(new)} more kernels ({tests[-1]['pytest'][0] if tests[-1]['pytest'] else ''})")
    # the main job also travels as an export (Gemm.save): the GPU run's main step loads it with
    # cutedsl.load (`gemm --load`), the path a user without MLIR takes
    from ..cliargs import gemm_config
    from ..device.gemm import Gemm
    Gemm(gemm_config(_parse(plan["main_args"])), "none").save(out / EXPORT)
    size = _size(cache_dir) + _size(out / EXPORT)
    manifest = {"plan": plan_name, "arch": arch or cfgs[0].arch, **plan, "export": EXPORT, "created_utc": datetime.datetime.now(datetime.timezone.utc)
                .isoformat(timespec="seconds"), "source_hash": source_hash(), "toolchain": versions(),
                "kernels": kernels, "tests_compiled": tests, "entries": sorted(_entries(cache_dir)),
                "size_bytes": size}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if size > MAX_BYTES:
        raise CacheError(f"bundle is {size / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB limit")
    log(f"bundle written to {out}: {len(manifest['entries'])} kernels, {size / 2**20:.2f} MiB")
    return manifest


def verify(out: Path, log=print) -> list:
    """Check, compiling nothing, that every kernel of the bundle loads from ``out/cache``:
    the plan's configs by lookup and every recorded entry by checksum. Returns the problems
    (empty: all there)."""
    from ..compiler.artifact import CompiledKernel
    from ..compiler.cache import KernelCache, source_hash
    from .configs import label
    out = Path(out)
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        log(f"  PROBLEM: no readable manifest in {out}: {e}")
        return [f"no readable manifest in {out}: {e}"]
    problems = []
    if manifest["source_hash"] != source_hash():
        problems.append(f"the bundle was compiled from sources {manifest['source_hash']}, this checkout is "
                        f"{source_hash()}: rebuild it from this checkout (python -m cutedsl bundle)")
    found = 0
    for grouped in (False, True):
        for cfg in plan_configs(manifest, grouped):
            if KernelCache(out / "cache").get(_cache_config(cfg, grouped)) is None:
                problems.append(f"missing from the cache: {label(cfg)}{' (grouped)' if grouped else ''}")
            else:
                found += 1
    for name in manifest["entries"]:
        d = out / "cache" / name
        subs = [p for p in d.iterdir() if (p / "kernel.json").is_file()] if d.is_dir() else []
        try:
            if not subs:
                raise CacheError("no kernel.json")
            CompiledKernel.load(subs[0])
        except (CacheError, OSError, ValueError) as e:
            problems.append(f"cache entry {name} does not load: {e}")
    if "export" in manifest:
        from ..device.export import load
        try:
            load(out / manifest["export"], backend="none")
        except CacheError as e:
            problems.append(f"the exported main job does not load: {e}")
    log(f"bundle {out}: plan {manifest['plan']}, {found} plan configs found, {len(manifest['entries'])} entries "
        f"checked, {manifest['size_bytes'] / 2**20:.2f} MiB, {len(problems)} problems")
    for p in problems:
        log(f"  PROBLEM: {p}")
    return problems


def main(args) -> int:
    out = Path(args.out)
    if args.print_key:
        try:
            v = json.loads((out / "manifest.json").read_text())[args.print_key]
        except (OSError, ValueError, KeyError) as e:    # one line, no traceback (shell use)
            print(f"error: no manifest entry {args.print_key!r} in {out}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(" ".join(v) if isinstance(v, list) else v)
        return 0
    if args.verify:
        return 1 if verify(out) else 0
    try:
        build(out, args.plan, arch=args.arch)
    except (CacheError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0 if not verify(out) else 1
