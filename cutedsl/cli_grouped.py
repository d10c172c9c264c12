"""``python -m cutedsl gemm --groups MxNxK,...``: a grouped GEMM as the main job -- compile,
run every group in one launch, check each against float64 numpy, one report line per group."""
from __future__ import annotations

import time

from .cliargs import TOLERANCE, UsageError, gemm_config


def grouped_config(args):
    """The ``GemmConfig`` of a grouped run: the options given; ``--schedule auto`` means the
    architecture's first grouped schedule (sm_90a: ``cooperative``, the persistent schedule with
    the larger tiles; sm_100a: ``warp_specialized``, its persistent tcgen05 kernel)."""
    if args.schedule == "auto":
        from .kernel.grouped import grouped_kernels
        args.schedule = next(iter(grouped_kernels(args.arch)), "cooperative")
    for name in ("m", "n", "k", "batch"):
        if getattr(args, name) is not None:
            raise UsageError("--groups", f"give the problems either as --groups or as --m/--n/--k "
                             f"(and --batch), not both (--{name} was given)")
    return gemm_config(args)


def run_grouped(args) -> tuple:
    """Returns ``(report dict, exit status)`` for ``args.groups``."""
    import numpy as np
    from .collective import fusion
    from .device.grouped import GroupedGemm
    from .runtime.selection import resolve
    from .dtypes import tensor_core_value
    from .errors import CuteDSLError, NoDeviceError
    if args.load is not None:
        raise UsageError("--load/--groups", "an exported GEMM runs one problem; --groups compiles its own kernel")
    cfg = grouped_config(args)
    try:
        backend, why = resolve(args.backend)
    except NoDeviceError as e:
        raise UsageError("--backend", str(e)) from None
    gg = GroupedGemm(cfg, backend if backend is not None else "none")
    t0 = time.perf_counter()
    kern = gg.compiled
    r = kern.resources
    rep = {"backend": backend.name if backend is not None else "none", "arch": cfg.arch,
           "groups": [{"m": m, "n": n, "k": k} for m, n, k in args.groups], "dtype": cfg.dtype,
           "out_dtype": cfg.out_dtype, "tile": list(cfg.tile), "stages": cfg.resolved_stages(),
           "schedule": cfg.schedule, "epilogue": cfg.epilogue, "cluster": list(cfg.cluster),
           "fusion": list(cfg.fields()["fusion"]), "threads": kern.block[0], "registers": r.registers,
           "spills": r.spill_stores + r.spill_loads, "smem_bytes": r.smem_bytes, "sass": r.sass,
           "compile_s": round(time.perf_counter() - t0, 4), "executed": backend is not None}
    if backend is None:
        rep["note"] = why
        return rep, 0
    rng = np.random.default_rng(args.seed)
    ops = [cfg.example_operands(m, n, k, rng) if m and n and k else
           (np.zeros((m, k), cfg.example_operands(1, 1, 1, rng)[0].dtype),
            np.zeros((k, n), cfg.example_operands(1, 1, 1, rng)[1].dtype)) for m, n, k in args.groups]
    extra = fusion.random_args(gg.kernel.epilogue.kernel_params(), 1, 1, rng)
    for name in ("alpha", "beta"):
        if name in extra:
            extra[name] = getattr(args, name)
    t = time.perf_counter()
    try:
        ds = gg([a for a, _ in ops], [b for _, b in ops], **extra)
    except CuteDSLError as e:
        rep["error"] = f"{type(e).__name__}: {e}"
        return rep, 2
    rep["time_ms"] = round((time.perf_counter() - t) * 1e3, 4)
    if not args.check:
        return rep, 0
    tol, passed = TOLERANCE[cfg.out_dtype], True
    for g, ((a, b), d) in enumerate(zip(ops, ds)):
        acc = tensor_core_value(a, cfg.dtype) @ tensor_core_value(b, cfg.b_dtype or cfg.dtype)
        ref = fusion.reference(cfg.fusion, acc, dict(extra), cfg.out_dtype)
        big = float(np.max(np.abs(ref))) if ref.size else 0.0
        err = float(np.max(np.abs(np.asarray(d, np.float64) - ref)) / max(big, 1e-30)) if ref.size else 0.0
        ok = d.shape == ref.shape and err <= tol and bool(np.all(np.isfinite(d)))
        rep["groups"][g].update(max_rel_err=err, passed=ok)
        passed &= ok
    rep.update(tolerance=tol, passed=passed)
    return rep, 0 if passed else 1


def print_grouped(rep) -> None:
    p = print
    p(f"cutedsl grouped GEMM  {len(rep['groups'])} groups  {rep['dtype']} -> {rep['out_dtype']}  tile "
      f"{'x'.join(map(str, rep['tile']))}  stages {rep['stages']}  {rep['schedule']}  epilogue {rep['epilogue']}"
      + "".join(" + " + str(x) for x in rep["fusion"])
      + (f"  cluster {rep['cluster'][0]}x{rep['cluster'][1]}" if rep["cluster"] != [1, 1] else ""))
    p(f"  kernel: {rep['threads']} threads, {rep['registers']} registers, {rep['spills']} spill bytes, "
      f"{rep['smem_bytes']} B shared memory; compile {rep['compile_s']:.3f} s")
    for g, grp in enumerate(rep["groups"]):
        chk = (f"  max rel err {grp['max_rel_err']:.3e} -> {'PASS' if grp['passed'] else 'FAIL'}"
               if "passed" in grp else "")
        p(f"  group {g}: M={grp['m']} N={grp['n']} K={grp['k']}{chk}")
    if "error" in rep:
        p(f"  error: {rep['error']}")
    elif rep.get("executed"):
        p(f"  backend {rep['backend']}: {rep['time_ms']:.3f} ms wall (one launch)"
          + (f"; all groups {'PASS' if rep['passed'] else 'FAIL'} (tolerance {rep['tolerance']:.1e})"
             if "passed" in rep else ""))
    else:
        p(f"  not run: {rep.get('note', '')}")
