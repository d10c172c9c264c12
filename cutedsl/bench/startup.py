"""Step 4 of a GPU lease: host launch overhead per call, and cold-start / load times of the
bundle, on the backend the run drives.

* Cold start (:func:`cold_start`, a fresh interpreter each): ``import cutedsl``; the backend
  (CUDA: driver init and context); ``cutedsl.load`` of the bundle's exported main job (no
  compiler: the saved cubin); its first call (module load, tensor maps, launch, synchronize) and
  second; and the same config through ``Gemm`` and the bundle's cache (key lookup, load).
* Launch overhead (:func:`launch_overhead`), on a tiny problem whose GPU time is a few
  microseconds: ``Gemm.__call__`` on device arrays (the launch cache's path, one synchronize
  per call), the prebuilt launcher without synchronizing (host time per launch, or the GPU's
  when that is longer), and ``torch.matmul`` the same two ways where torch has CUDA; plus the
  Python share measured over a null driver (:mod:`.overhead`), for comparison with the GPU-less
  figure in docs/measurements.md.

On the emulator (a dry run) the same code runs with few calls: it tests the step, it measures
nothing about a GPU. ``python -m cutedsl.bench.startup --bundle DIR [--backend cuda|sim] --json FILE``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

#: the launch-overhead problem: small enough that the GPU's time is a few microseconds (one
#: CTA of the ``gpu`` plan's main job, whose tiles are 128 x 64)
TINY = (128, 64, 64)


def _main_config(manifest: dict, bundle: Path):
    from ..device.config import GemmConfig
    return GemmConfig(**json.loads((bundle / manifest["export"] / "cutedsl.json").read_text())["config"])


def _job_shape(manifest: dict) -> tuple:
    a = manifest["main_args"]
    return tuple(int(a[a.index(f"--{d}") + 1]) for d in "mnk")


def _child(bundle: Path, backend_name: str) -> dict:
    """Run in a fresh interpreter: the cold-start timings, in seconds."""
    t = time.perf_counter()
    import numpy as np

    import cutedsl
    from cutedsl.runtime import arrays
    from cutedsl.runtime.selection import get_backend
    out = {"import_s": time.perf_counter() - t}
    t = time.perf_counter()
    be = get_backend(backend_name)
    out["backend_s"] = time.perf_counter() - t
    manifest = json.loads((bundle / "manifest.json").read_text())
    t = time.perf_counter()
    g = cutedsl.load(bundle / manifest["export"], backend=be)
    out["load_export_s"] = time.perf_counter() - t
    m, n, k = _job_shape(manifest) if backend_name == "cuda" else TINY
    a, b = g.config.example_operands(m, n, k, np.random.default_rng(0))
    da, db = arrays.to_device(be, a, pitch_align=16), arrays.to_device(be, b, pitch_align=16)
    dd = arrays.empty(be, (m, n), g.config.out_dtype, pitch_align=16)
    for key, gemm in (("export", g), ("cache", cutedsl.Gemm(g.config, be))):
        for call in ("first", "second"):
            t = time.perf_counter()
            gemm(da, db, out=dd)
            out[f"{key}_{call}_call_s"] = time.perf_counter() - t
    out["shape"] = [m, n, k]
    return out


def cold_start(bundle: Path, backend_name: str, python: str = sys.executable, timeout: float = 120) -> dict:
    """The cold-start timings of a fresh interpreter (:func:`_child`), plus its wall time from
    process start to exit (``process_s``). ``{"error": ...}`` when the child fails."""
    t = time.perf_counter()
    r = subprocess.run([python, "-m", "cutedsl.bench.startup", "--child", "--bundle", str(bundle), "--backend",
                        backend_name], capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        return {"error": (r.stdout + r.stderr)[-2000:], "process_s": wall}
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "process_s": wall}


def _per_call_us(fn, calls: int, sync) -> float:
    sync()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t) / calls * 1e6


def launch_overhead(bundle: Path, backend, calls: int = 2000, repeats: int = 5) -> dict:
    """Microseconds per call on :data:`TINY` (best of ``repeats`` runs of ``calls``):
    ``gemm_call_us`` (``Gemm.__call__``, synchronizing), ``launcher_us`` (prebuilt launcher,
    one synchronize at the end), ``torch_matmul_sync_us`` / ``torch_matmul_us`` where torch
    has CUDA (skipped on the emulator)."""
    import numpy as np

    from ..device import Gemm
    from ..runtime import arrays
    from .runner import prebuilt_launcher
    manifest = json.loads((bundle / "manifest.json").read_text())
    cfg = _main_config(manifest, bundle)
    m, n, k = TINY
    g = Gemm(cfg, backend)
    a, b = cfg.example_operands(m, n, k, np.random.default_rng(0))
    da, db = arrays.to_device(backend, a, pitch_align=16), arrays.to_device(backend, b, pitch_align=16)
    dd = arrays.empty(backend, (m, n), cfg.out_dtype, pitch_align=16)
    sync = backend.synchronize
    call = lambda: g(da, db, out=dd)      # noqa: E731
    launch, _ = g.prepare(da, db, out=dd)
    fast = prebuilt_launcher(backend, g, launch)
    call()
    fast()
    out = {"shape": [m, n, k], "config": str(cfg), "calls": calls, "repeats": repeats,
           "gemm_call_us": min(_per_call_us(call, calls, sync) for _ in range(repeats)),
           "launcher_us": min(_per_call_us(fast, calls, sync) for _ in range(repeats))}
    launch.release()
    if backend.name == "cuda":
        out.update(_torch_matmul(m, n, k, calls, repeats))
    return out


def _torch_matmul(m, n, k, calls, repeats) -> dict:
    try:
        import torch
        if not torch.cuda.is_available():
            return {"torch": "torch sees no CUDA device"}
    except ImportError as e:
        return {"torch": f"no torch ({e})"}
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
    sync = torch.cuda.synchronize
    mm = lambda: torch.matmul(a, b, out=d)        # noqa: E731
    mm_sync = lambda: (mm(), sync())              # noqa: E731
    mm()
    return {"torch_matmul_sync_us": min(_per_call_us(mm_sync, calls, sync) for _ in range(repeats)),
            "torch_matmul_us": min(_per_call_us(mm, calls, sync) for _ in range(repeats))}


def run(bundle: Path, backend_name: str) -> dict:
    """Every measurement of the step (see module docstring); each part that fails is an
    ``error`` entry, the others still run."""
    from ..runtime.selection import get_backend
    bundle = Path(bundle)
    dry = backend_name != "cuda"
    res = {"backend": backend_name, "cold_start": [cold_start(bundle, backend_name) for _ in range(1 if dry else 2)]}
    if dry:
        res["note"] = "emulator: a test of the step, no measurement"
    try:
        res["launch"] = launch_overhead(bundle, get_backend(backend_name), calls=3 if dry else 2000,
                                        repeats=1 if dry else 5)
    except Exception as e:     # noqa: BLE001 - reported, the null-driver figure still comes
        res["launch"] = {"error": f"{type(e).__name__}: {e}"}
    from . import overhead     # last: it installs a null driver in this process
    manifest = json.loads((bundle / "manifest.json").read_text())
    res["null_driver"] = overhead.measure(config=_main_config(manifest, bundle), shape=TINY,
                                          calls=50 if dry else 2000, repeats=1 if dry else 5)
    return res


def table(res: dict) -> str:
    def f(v, spec=".1f"):
        return "-" if v is None else format(v, spec)
    lines = []
    for i, c in enumerate(res["cold_start"]):
        if "error" in c:
            lines.append(f"cold start {i + 1}: FAILED {c['error'].splitlines()[-1] if c['error'] else ''}")
            continue
        lines.append(f"cold start {i + 1}: process {f(c['process_s'], '.2f')} s, import {f(c['import_s'], '.2f')} s, "
                     f"backend {f(c['backend_s'], '.2f')} s, load export {f(c['load_export_s'] * 1e3)} ms, "
                     f"first call {f(c['export_first_call_s'] * 1e3)} ms (second {f(c['export_second_call_s'] * 1e3)}"
                     f" ms), via cache first {f(c['cache_first_call_s'] * 1e3)} ms")
    ln = res.get("launch", {})
    if "error" in ln:
        lines.append(f"launch overhead: FAILED {ln['error']}")
    else:
        lines.append(f"per call ({'x'.join(map(str, ln['shape']))}): Gemm.__call__ {f(ln['gemm_call_us'])} us, "
                     f"launcher {f(ln['launcher_us'])} us, torch.matmul {f(ln.get('torch_matmul_sync_us'))} us "
                     f"synchronized / {f(ln.get('torch_matmul_us'))} us not")
    nd = res["null_driver"]
    lines.append(f"null driver: {f(nd['python_us'])} us of Python per call")
    if res.get("note"):
        lines.append(f"note: {res['note']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cutedsl.bench.startup", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--backend", choices=["cuda", "sim"], default="cuda")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(Path(args.bundle), args.backend)))
        return 0
    res = run(Path(args.bundle), args.backend)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    print(table(res))
    return 1 if any("error" in c for c in res["cold_start"]) or "error" in res.get("launch", {}) else 0


if __name__ == "__main__":
    sys.exit(main())
