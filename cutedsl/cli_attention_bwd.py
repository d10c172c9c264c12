"""``python -m cutedsl attention --backward``: after the forward, the backward
(:class:`cutedsl.AttentionBackward`, FlashAttention-3-style on sm_90a) on a random dO and the
forward's O and LSE -- its refusals, run, ``--check`` of dQ, dK, dV against the float64
reference and its part of the report (the JSON key ``backward``)."""
from __future__ import annotations

import time

from .cliargs import TOLERANCE, UsageError, launch_ms

#: FlashAttention counts the backward as 2.5 forwards (five matrix products of the forward's
#: size for two: S, dP, dV, dK, dQ against S and O), FLOPs x 5 / 2
BWD_FLOPS_NUM, BWD_FLOPS_DEN = 5, 2
GRADS = ("dq", "dk", "dv")


def add_backward_options(a) -> None:
    a.add_argument("--backward", action="store_true",
                   help="then run the backward on a random dO (dQ, dK, dV; sm_90a, no softcap); --check compares "
                        "them with the float64 reference")
    a.add_argument("--deterministic", action="store_true",
                   help="with --backward: dQ summed in a fixed order (same bits every run)")


def check_backward_options(args) -> None:
    """``UsageError`` naming the option the backward does not support (before anything is
    compiled): an architecture without WGMMA, softcap, a head dimension or dtype its kernel
    does not build; ``--deterministic`` without ``--backward``."""
    from .arch import get_arch
    from .errors import ConfigError
    from .kernel.attention_bwd import AttentionBwdKernel
    if not args.backward:
        if args.deterministic:
            raise UsageError("--deterministic", "orders the backward's dQ sums: add --backward")
        return
    try:
        get_arch(args.arch).require(AttentionBwdKernel.mma_atom, "the attention backward")
    except ConfigError as e:
        raise UsageError("--arch/--backward", f"{e}: its kernel is built for sm_90a; pass --arch sm_90a or drop "
                                              f"--backward") from None
    if args.softcap is not None:
        raise UsageError("--softcap/--backward", "the attention backward does not implement the softcap (its tanh "
                                                 "derivative): drop --softcap or --backward")
    why = AttentionBwdKernel.reason(args.head_dim, args.dtype)
    if why:
        raise UsageError(("--head-dim" if "head_dim" in why else "--dtype") + "/--backward", why)


def _resources(compiled, compile_s, cached) -> dict:
    """The report's keys for the dK/dV kernel's ``CompiledKernel`` (the three kernels' compile time)."""
    r = compiled.resources
    return {"threads": compiled.block[0], "registers": r.registers, "spills": r.spill_stores + r.spill_loads,
            "smem_bytes": r.smem_bytes, "sass": r.sass, "ptxas_messages": list(r.ptxas_messages),
            "compile_s": round(compile_s, 4), "cached": bool(cached)}


def run_backward(args, cfg, backend, problem, varlen, local, inputs, opts, extra, fwd_flops) -> tuple:
    """The ``backward`` report and its status (0, 1: ``--check`` failed, 2: an error).
    ``inputs``: ``(q, k, v, o, lse)`` (host arrays; ``o``, ``lse`` None with ``--backend none``:
    then the three kernels are compiled and reported, nothing runs); ``local``: the call has a
    causal/window band; ``opts``/``extra``: the forward's call options and varlen offsets."""
    import numpy as np
    from .device.attention_bwd import AttentionBackward
    from .errors import CuteDSLError
    q, k, v, o, lse = inputs
    bwd = AttentionBackward(cfg, backend if backend is not None else "auto", deterministic=args.deterministic,
                            dump_dir=args.dump)
    rep = {"deterministic": bwd.deterministic, "executed": backend is not None}
    try:
        kernels = bwd.kernels(cfg, local=local, varlen=varlen)
        rep["grid"] = list(kernels[1].grid(problem))
        if backend is None:
            t0 = time.perf_counter()
            compiled = [x.compile(dump_dir=args.dump) for x in kernels]
            rep.update(_resources(compiled[1], time.perf_counter() - t0,
                                  all(getattr(x, "last_cache_hit", False) for x in kernels)))
            return rep, 0
    except CuteDSLError as e:
        rep.update(error=f"{type(e).__name__}: {e}", executed=False)
        return rep, 2
    rng = np.random.default_rng((args.seed, 1))        # dO: its own stream, Q/K/V as without --backward
    do = rng.standard_normal(o.shape, dtype=np.float32).astype(o.dtype)
    bwd_opts = {key: val for key, val in opts.items() if key != "softcap"}
    launch = None
    try:
        launch, result = bwd.prepare(do, q, k, v, o, lse, **bwd_opts, **extra)
        if launch.compiled is not None:
            rep.update(_resources(launch.compiled, launch.compile_seconds, launch.cache_hit))
        t = time.perf_counter()
        launch()
        grads = result()
        first = time.perf_counter() - t
        ms = launch_ms(backend, launch, first, args.iters, {})
    except CuteDSLError as e:
        rep.update(error=f"{type(e).__name__}: {e}")
        return rep, 2
    finally:
        if launch is not None:
            launch.release()
    flops = fwd_flops * BWD_FLOPS_NUM // BWD_FLOPS_DEN
    rep.update(time_ms=round(ms, 4), flops=flops, tflops=round(flops / (ms * 1e-3) / 1e12, 6))
    if not args.check:
        return rep, 0
    cu = {key: extra[key] for key in ("cu_seqlens_q", "cu_seqlens_k") if key in extra}
    from .device.attention_reference import attention_backward_reference
    refs = attention_backward_reference(do, q, k, v, **bwd_opts, **cu)
    errs, finite = {}, True
    for name, got, ref in zip(GRADS, grads, refs):
        got = np.asarray(got, np.float64)
        finite &= bool(np.all(np.isfinite(got)))
        errs[name] = float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30)) if ref.size else 0.0
    tol = TOLERANCE[cfg.dtype]
    passed = finite and all(e <= tol for e in errs.values())
    rep.update(max_rel_err=errs, tolerance=tol, passed=passed)
    return rep, 0 if passed else 1


def print_backward(b, backend: str) -> None:
    """The backward's lines of the text report (``b``: the report's ``backward``; ``backend``:
    the report's)."""
    p = print
    if "registers" in b:
        how = "cache hit" if b["cached"] else "cold"
        p(f"  backward{' (deterministic)' if b['deterministic'] else ''}: dK/dV kernel {b['threads']} threads x "
          f"grid {tuple(b['grid'])}, {b['registers']} registers, {b['spills']} spill bytes, {b['smem_bytes']} B "
          f"shared memory; 3 kernels compiled in {b['compile_s']:.3f} s ({how})")
        for m in b["ptxas_messages"]:
            p(f"  ptxas (backward): {m}")
    if "error" in b:
        p(f"  backward error: {b['error']}")
        return
    if "time_ms" in b:
        what = "GPU time (median)" if backend == "cuda" else "emulator wall time"
        p(f"  backward on {backend}: {what} {b['time_ms']:.3f} ms, {b['tflops']:.4g} TFLOP/s ({b['flops']:.4g} "
          f"FLOPs: 2.5x the forward's, as FlashAttention counts)")
    if "passed" in b:
        errs = ", ".join(f"{n[0]}{n[1].upper()} {b['max_rel_err'][n]:.3e}" for n in GRADS)
        p(f"  check backward vs float64 numpy: max rel err {errs} (tolerance {b['tolerance']:.1e}) -> "
          f"{'PASS' if b['passed'] else 'FAIL'}")
