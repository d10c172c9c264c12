"""The grouped shape sets (``moe``): each problem is a list of groups (an expert layer), timed
as one ``GroupedGemm`` launch against the reference library's GEMM per group, back to back
(cuBLAS through torch/cupy: one ``matmul`` per expert). One input set per problem (an expert
layer's operands are large; the L2 flush still runs between launches); the check compares
every group's result with the reference's (the worst group's error is reported)."""
from __future__ import annotations

from ..errors import CuteDSLError
from . import configs as _configs
from .shapes import shapes_for, x_label, x_value
from .timing import median, tflops


def run_grouped_set(sweep, set_name: str, cfgs: list) -> dict:
    """The rows of a grouped set; ``sweep`` is the :class:`~.runner.Sweep` (its library, timer,
    backend and ``make_grouped``)."""
    from .runner import REF_DTYPE, summarize, tolerance
    lib, rows = sweep.lib, []
    for groups in shapes_for(set_name, sweep.backend.name):
        m, (n, k) = sum(g[0] for g in groups), groups[0][1:]
        for cfg in cfgs:
            dt, b_dt = cfg.dtype, cfg.b_dtype or cfg.dtype
            a = [lib.randn((gm, gk), dt) for gm, _, gk in groups]
            b = [lib.randn((gk, gn), b_dt) if cfg.b_major == "MN" else lib.transpose(lib.randn((gn, gk), b_dt))
                 for _, gn, gk in groups]
            refs = [lib.empty((gm, gn), REF_DTYPE.get(dt, dt)) for gm, gn, _ in groups]
            row = {"set": set_name, "m": m, "n": n, "k": k, "groups": len(groups), "config": _configs.label(cfg),
                   "schedule": cfg.schedule, "tile": "x".join(map(str, cfg.tile)), "stages": cfg.resolved_stages(),
                   "dtype": dt, "out_dtype": cfg.out_dtype, "x": x_value(set_name, m, n, k, 0), "n_sets": 1,
                   "iters": sweep.iters, "ref_ms": None, "ref_tflops": None}
            if lib.times_reference:
                def ref_run():
                    for x, y, r in zip(a, b, refs):
                        lib.matmul(x, y, r)
                row["ref_ms"] = median(sweep._time([ref_run]))
                row["ref_tflops"] = tflops(m, n, k, row["ref_ms"])
                ref0 = refs
            else:
                ref0 = [lib.matmul(x, y, None) for x, y in zip(a, b)]
            try:
                gg = sweep.grouped(cfg)
                launch, result = gg.prepare(a, b)
                try:
                    times = sweep._time([launch])
                    ds = result()
                finally:
                    launch.release()
                err = max((lib.max_rel_diff(d, r) for (gm, gn, _), d, r in zip(groups, ds, ref0) if gm and gn),
                          default=0.0)
                tol = tolerance(dt, cfg.out_dtype)
                row.update(max_rel_diff=err, tolerance=tol, check="pass" if err <= tol else "FAIL")
                ms = median(times)
                if sweep.timed:
                    row.update(ms=ms, tflops=tflops(m, n, k, ms))
                else:
                    row.update(ms=None, tflops=None, wall_ms=ms)
            except CuteDSLError as e:
                row.update(error=f"{type(e).__name__}: {e}", ms=None, tflops=None, check="error")
            t, r = row.get("tflops"), row.get("ref_tflops")
            row["ratio"] = t / r if t and r else None
            rows.append(row)
            if sweep.progress is not None:
                sweep.progress(f"{set_name} {len(groups)} groups {row['config']}")
            a = b = refs = ref0 = None        # freed before the next config's inputs
            lib.release()
    return {"set": set_name, "x_label": x_label(set_name), "rows": rows, "summary": summarize(rows)}
