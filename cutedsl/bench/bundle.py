"""The GPU bundle: every kernel a GPU run needs, compiled where MLIR is, into one directory
that a GPU machine with only numpy + cuda-python runs from (``scripts/gpu_run.sh``).

``DIR/cache/`` is a kernel cache (``CUTEDSL_CACHE_DIR``); ``DIR/export/main`` the main job's
GEMM exported with ``Gemm.save`` (the run times loading it: ``cutedsl.load``); ``DIR/manifest.json``
records the plan (:mod:`.plans`: the problems timed against cuBLAS with the configs timed on
each, the ``gpu`` tests, the main job), the source hash the kernels were compiled from, and every
cache entry. What the run needs is derived from the same records the run reads:

* the problems' configs, each as called on the real and on the dry-run shape
  (:func:`.plans.kernel_configs`: layout variants such as ``raster="N"`` included);
* the main job: :func:`cutedsl.cliargs.gemm_config`;
* the attention kernels of the plan (:data:`.plans.LEASE_ATTENTION`: forward and backward, each as
  the call builds it, :func:`.plans.attention_kernels`), for the ``gpu`` tests and the attention step;
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
from .plans import PLANS

#: hard limit on the bundle (it travels with the checkout to the GPU machine: tree + carried
#: folders at most 64 MiB, see docs/gpu-lease.md)
MAX_BYTES = 30 * 1024 * 1024
EXPORT = "export/main"      #: the main job's GEMM, exported (``Gemm.save``)
ROOT = Path(__file__).resolve().parents[2]


def plan_for(plan_name: str, arch: str | None = None) -> dict:
    """Plan ``plan_name`` for architecture ``arch`` (None: the default, sm_90a): another
    architecture's bundle times the same problems with that architecture's model pick
    (:func:`.plans.problem_configs`), runs the main job with ``--arch`` added (the smoke plan's
    ``--schedule multistage`` dropped: it is sm_90a's), and no ``gpu`` tests (they drive the
    sm_90a CUDA backend), no attention kernels (likewise). ``ConfigError`` for an unknown architecture."""
    from ..arch import ARCHS, DEFAULT
    from ..errors import one_of
    plan = dict(PLANS[plan_name], arch=None)
    if arch is None or arch == DEFAULT.name:
        return plan
    if arch not in ARCHS:
        raise ConfigError(f"bundle --arch must be {one_of(tuple(ARCHS))}, got {arch!r}")
    args, skip = [], False
    for a in plan["main_args"]:
        if skip:
            skip = False
        elif a == "--schedule":
            skip = True             # the architecture's default schedule instead
        else:
            args.append(a)
    return dict(plan, main_args=args + ["--arch", arch], tests=[], arch=arch, attention=())


def _parse(argv):
    """``argv`` as the CLI parses it (``gemm ...``), from the shared parser (``cliargs``): no
    import of ``cutedsl.cli``."""
    from ..cliargs import ArgParser, add_gemm_parser
    p = ArgParser(prog="python -m cutedsl")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_gemm_parser(sub)
    return p.parse_args(argv)


def plan_configs(plan: dict) -> list:
    """The ``GemmConfig`` s whose kernels the plan's problems and main job need (unique);
    ``plan``: a manifest, or a plan (its problems are then worked out, :mod:`.plans`)."""
    from ..cliargs import gemm_config
    from .plans import kernel_configs, manifest_problems
    problems = plan["problems"] if plan["problems"] and isinstance(plan["problems"][0], dict) else \
        manifest_problems(plan, plan.get("arch"))
    return list(dict.fromkeys(kernel_configs(problems) + [gemm_config(_parse(plan["main_args"]))]))


def _cache_config(cfg):
    """The cache key of a GemmConfig's kernel (what ``Kernel.compile`` looks up)."""
    from ..device.precompile import config_kernel
    return config_kernel(cfg).cache_key()[0]


def _entries(cache_dir: Path) -> set:
    return {p.name for p in cache_dir.iterdir() if p.is_dir()} if cache_dir.is_dir() else set()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def compile_attention(specs, log=print) -> list:
    """Compile the attention kernels of ``specs`` (:data:`.plans.LEASE_ATTENTION` rows) into the
    default cache; returns ``[{"spec", "keys"}]``. ``CacheError`` naming the first that fails."""
    from .plans import attention_kernels, attention_label
    out = []
    for spec in specs:
        keys = []
        for kern in attention_kernels(spec):
            try:
                ck = kern.compile()
            except Exception as e:       # noqa: BLE001 - reported with the kernel's name
                raise CacheError(f"{attention_label(spec)} ({type(kern).__name__}) failed to compile: "
                                 f"{type(e).__name__}: {e}") from None
            keys.append(ck.key)
        out.append({"spec": list(spec), "keys": keys})
        log(f"  {attention_label(spec)}: {len(keys)} kernel(s)")
    return out


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
    from .plans import manifest_problems
    problems = manifest_problems(plan, arch)
    cfgs = plan_configs({**plan, "problems": problems})
    log(f"bundle {plan_name}{f' ({arch})' if arch else ''}: {len(problems)} problems, "
        f"{sum(len(p['configs']) for p in problems)} timed configs, {len(cfgs)} kernels (schedules: "
        f"{', '.join(accepted_schedules(arch))})")
    from ..device.precompile import compile_all

    def progress(done, total, r):
        log(f"  [{done}/{total}] {label(r.config)}  " + (f"FAILED: {r.error}" if r.error else f"{r.registers} regs"))
    results = compile_all(cfgs, cache_dir=cache_dir, progress=progress)      # a process pool
    bad = [r for r in results if r.error]
    if bad:
        raise CacheError(f"{len(bad)} kernels failed to compile; the first, {label(bad[0].config)}: {bad[0].error}")
    kernels = [{"config": label(r.config), "key": r.key} for r in results]
    attention = compile_attention(plan.get("attention", ()), log)      # before the tests: they reuse them
    tests = []
    for t in plan["tests"]:
        before = _entries(cache_dir)
        env = dict(os.environ, CUTEDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
        env.pop("CUTEDSL_TEST_GPU_ON_SIM", None)      # the capture replaces the CUDA backend itself
        env["CUTEDSL_TEST_SIM_SEEDS"] = "0"          # test ids as the GPU run names them (no chaos reruns)
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "cutedsl.bench.capture", "-p",
                            "no:cacheprovider", "-m", "gpu", t], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=3600)
        if r.returncode not in (0, 5):
            raise CacheError(f"compiling the kernels of {t} failed:\n{r.stdout[-4000:]}{r.stderr[-2000:]}")
        new = sorted(_entries(cache_dir) - before)
        tests.append({"file": t, "new_entries": new, "pytest": r.stdout.strip().splitlines()[-1:]})
        log(f"  {t}: {len(new)} more kernels ({tests[-1]['pytest'][0] if tests[-1]['pytest'] else ''})")
    # the main job also travels as an export (Gemm.save): the GPU run times loading it with
    # cutedsl.load, the path a user without MLIR takes
    from ..cliargs import gemm_config
    from ..device.gemm import Gemm
    Gemm(gemm_config(_parse(plan["main_args"])), "none").save(out / EXPORT)
    size = _size(cache_dir) + _size(out / EXPORT)
    manifest = {"plan": plan_name, **plan, "arch": arch or cfgs[0].arch, "problems": problems,
                "attention": [list(x) for x in plan.get("attention", ())], "attention_kernels": attention,
                "export": EXPORT, "created_utc": datetime.datetime.now(datetime.timezone.utc)
                .isoformat(timespec="seconds"), "source_hash": source_hash(), "toolchain": versions(),
                "kernels": kernels, "tests_compiled": tests, "entries": sorted(_entries(cache_dir)),
                "size_bytes": size}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if size > MAX_BYTES:
        raise CacheError(f"bundle is {size / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB limit")
    log(f"bundle written to {out}: {len(manifest['entries'])} kernels, {size / 2**20:.2f} MiB")
    return manifest


def _plan_drift(manifest: dict) -> list:
    """Where the bundle's plan differs from what this checkout's plan of that name is (the run
    reads the manifest, so a stale bundle would run an old plan)."""
    if manifest.get("plan") not in PLANS:
        return [f"the bundle's plan {manifest.get('plan')!r} is not one of this checkout's ({', '.join(PLANS)})"]
    want = plan_for(manifest["plan"], manifest.get("arch"))
    got_problems = [[p["set"], *p["shape"], p["dtype"], p["out_dtype"], p["study"]] for p in manifest["problems"]]
    bad = [key for key in ("tests", "dry_tests", "main_args", "candidates") if manifest.get(key) != want.get(key)]
    if manifest.get("attention", []) != [list(x) for x in want.get("attention", ())]:
        bad.append("attention")
    if got_problems != [list(x) for x in want["problems"]]:
        bad.append("problems")
    return [f"the bundle's plan {manifest['plan']!r} differs from this checkout's in {', '.join(bad)}: rebuild it "
            f"(python -m cutedsl bundle --plan {manifest['plan']})"] if bad else []


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
    problems += _plan_drift(manifest)
    found = 0
    for cfg in plan_configs(manifest):
        if KernelCache(out / "cache").get(_cache_config(cfg)) is None:
            problems.append(f"missing from the cache: {label(cfg)}")
        else:
            found += 1
    from .plans import attention_kernels, attention_label
    for spec in manifest.get("attention", []):
        kerns = attention_kernels(spec)
        missing = [type(k).__name__ for k in kerns if KernelCache(out / "cache").get(k.cache_key()[0]) is None]
        if missing:
            problems.append(f"missing from the cache: {attention_label(spec)} ({', '.join(missing)})")
        else:
            found += len(kerns)
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
    log(f"bundle {out}: plan {manifest['plan']}, {found} plan kernels found, {len(manifest['entries'])} entries "
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
