"""Step 4 of a GPU lease: the attention forward against ``torch.nn.functional.
scaled_dot_product_attention`` (issue 43 step 3), from the bundle's kernels, within a deadline.

FlashAttention-3's forward problems (16k tokens: batch = 16384 / seqlen, hidden 2048: 16 heads of
128) at seqlen 4k and 16k, causal and not, bf16, head dim 128: cutedsl's forward and SDPA with its
FlashAttention and cuDNN backends (``torch.nn.attention.sdpa_kernel``) in the same process on the
same rotated randn inputs, each timed with CUDA events (``warmup`` launches, then the median of
``iters`` >= 20, an L2 flush before each: the sweep's timer, :meth:`.runner.Sweep._time`).
cutedsl's O on the first input set is checked against SDPA flash's before its time counts. The
machinery is :func:`.attention.run_attention_set`'s; this module picks the problems, keeps the
deadline (a problem that would end past it, predicted by the previous one's time, is recorded as
skipped), counts FLOPs as
FlashAttention's benchmarks do (:func:`flash_flops`) and writes ``attention.json``.

On the emulator (``--backend sim``, the dry run) the problems are the tiny ones of
:data:`.shapes.TINY_ATTENTION` against the float64 reference: a test of the step, no timings.

``python -m cutedsl.bench.attention_bench --bundle DIR [--backend cuda|sim] [--deadline T] --json FILE``
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .timing import geomean, lease_step_parser

#: the lease's problems: ``(batch, seqlen, hidden, causal)`` (FA3's benchmark at 4k and 16k)
LEASE_SHAPES = tuple((16384 // s, s, 2048, c) for c in (False, True) for s in (4096, 16384))
HEAD_DIM = 128
#: SDPA's backends beside cutedsl: the row's key prefix and the result's name
REFERENCES = (("ref", "flash"), ("cudnn", "cudnn"))


def flash_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int, causal: bool) -> int:
    """FLOPs of a forward as FlashAttention's benchmarks count them: ``4 * b * h * sq * sk * d``
    (two GEMMs), halved for a causal mask (the exact share of kept pairs, ``(s + 1) / 2s`` for
    ``sq = sk = s``, differs by ``1 / 2s``: 0.01 % at 4k)."""
    f = 4 * batch * heads * seqlen_q * seqlen_k * head_dim
    return f // 2 if causal else f


def _recount(row: dict) -> None:
    """The row's TFLOP/s from :func:`flash_flops` (the set's exact count kept as ``flops_exact``),
    and its ratio to each SDPA backend."""
    row["flops_exact"] = row["flops"]
    row["flops"] = flash_flops(row["batch"], row["heads"], row["seqlen"], row["seqlen"], row["head_dim"],
                               row["causal"])
    tf = lambda ms: row["flops"] / (ms * 1e-3) / 1e12 if ms else None      # noqa: E731
    if row.get("tflops") is not None:
        row["tflops"] = tf(row["ms"])
    for prefix, name in REFERENCES:
        if row.get(f"{prefix}_tflops") is not None:
            row[f"{prefix}_tflops"] = tf(row[f"{prefix}_ms"])
        t, r = row.get("tflops"), row.get(f"{prefix}_tflops")
        row[f"ratio_{name}"] = t / r if t and r else None
    row["ratio"] = row["ratio_flash"]


def _skipped(shape, cfg, deadline) -> dict:
    from .attention import label
    batch, seqlen, hidden, causal = shape
    return {"set": "attention", "problem": [batch, seqlen, hidden // cfg.head_dim, cfg.head_dim, causal],
            "batch": batch, "seqlen": seqlen, "heads": hidden // cfg.head_dim, "head_dim": cfg.head_dim,
            "causal": causal, "config": label(cfg, causal), "dtype": cfg.dtype, "ms": None, "tflops": None,
            "ratio": None, "check": "skipped",
            "error": f"not run: the deadline was {max(0.0, deadline - time.time()):.0f} s away"}


def summary(rows: list) -> dict:
    """Geometric means of cutedsl / SDPA flash and / SDPA cuDNN over the rows that passed their
    check, and the counts of rows timed, skipped and failed."""
    ok = [r for r in rows if r.get("check") == "pass"]
    return {"geomean_ratio_flash": geomean(r.get("ratio_flash") for r in ok),
            "geomean_ratio_cudnn": geomean(r.get("ratio_cudnn") for r in ok),
            "timed": sum(r.get("ms") is not None or r.get("wall_ms") is not None for r in rows),
            "skipped": sum(r.get("check") == "skipped" for r in rows),
            "failed": sum(r.get("check") in ("FAIL", "error") for r in rows), "problems": len(rows)}


def run(backend, lib, *, deadline=None, iters=30, warmup=5, write=None, log=print) -> dict:
    """Time the lease's problems (:data:`LEASE_SHAPES`; on the emulator :data:`.shapes.TINY_ATTENTION`)
    on ``backend`` against ``lib``'s references (:mod:`.libs`: SDPA with torch); returns
    ``{"header", "rows", "summary"}``, handed to ``write(result)`` after every problem."""
    from ..device.attention_config import AttentionConfig
    from .attention import run_attention_set
    from .runner import header, make_sweep
    from .shapes import TINY_ATTENTION
    timed = backend.name == "cuda"
    cfg = AttentionConfig(head_dim=HEAD_DIM, dtype="bf16")
    sweep, timer = make_sweep(backend, lib, iters=iters, warmup=warmup)
    notes = ["FLOPs as FlashAttention counts them: 4 * b * h * sq * sk * d, halved for causal"]
    if not timed:
        notes.append("backend sim: tiny shapes against the float64 reference, harness test only, NO TIMINGS CLAIMED")
    result = {"header": header(backend, lib, timer, sweep, notes), "rows": [], "summary": {}}
    last = 0.0                      # the previous problem's seconds: what the next one is predicted to take
    try:
        for shape in (LEASE_SHAPES if timed else TINY_ATTENTION):
            if deadline is not None and time.time() + last >= deadline:
                rows = [_skipped(shape, cfg, deadline)]
            else:
                t0 = time.time()
                rows = run_attention_set(sweep, "attention", [cfg], shapes=[shape])["rows"]
                last = time.time() - t0
                for r in rows:
                    _recount(r)
            result["rows"] += rows
            result["summary"] = summary(result["rows"])
            for r in rows:
                log(line(r))
            if write is not None:
                write(result)
    finally:
        timer.close()
    return result


def _f(v, spec):
    """``v`` formatted by ``spec``; ``-`` as wide as the spec's width for None."""
    return "-".rjust(int(spec.split(".")[0] or 0)) if v is None else format(v, spec)


def line(r: dict) -> str:
    """One problem: cutedsl's and each SDPA backend's TFLOP/s, the ratios, the check."""
    return (f"b{r['batch']:<2} s{r['seqlen']:<6} {'causal' if r['causal'] else 'full':<6} "
            f"{_f(r.get('tflops'), '7.1f')} {_f(r.get('ref_tflops'), '8.1f')} {_f(r.get('ratio_flash'), '6.3f')} "
            f"{_f(r.get('cudnn_tflops'), '8.1f')} {_f(r.get('ratio_cudnn'), '6.3f')}  {r.get('check', '-')}"
            + (f" ({r['error']})" if r.get("error") else ""))


def table(result: dict) -> str:
    """The rows under a header, then the geometric means."""
    s = result.get("summary", {})
    head = f"{'problem':<18} {'TF/s':>7} {'flash':>8} {'ratio':>6} {'cuDNN':>8} {'ratio':>6}  check"
    return "\n".join([head] + [line(r) for r in result.get("rows", [])] + [
        f"geomean ratio to SDPA: flash {_f(s.get('geomean_ratio_flash'), '.3f')}, cuDNN "
        f"{_f(s.get('geomean_ratio_cudnn'), '.3f')} ({s.get('timed', 0)} timed, {s.get('skipped', 0)} skipped, "
        f"{s.get('failed', 0)} failed)"])


def main(argv=None) -> int:
    ap = lease_step_parser("python -m cutedsl.bench.attention_bench", __doc__.split("\n")[0],
                           "the bundle folder (its manifest names the attention kernels)")
    args = ap.parse_args(argv)
    if args.iters < 20 and args.backend == "cuda":
        ap.error("--iters: the median of at least 20 launches (issue 43)")
    manifest = json.loads((Path(args.bundle) / "manifest.json").read_text())
    if not any(spec[0] == "forward" and spec[1] == HEAD_DIM and not spec[3] for spec in manifest.get("attention", [])):
        ap.error(f"--bundle: {args.bundle} holds no dense head-dim-{HEAD_DIM} attention forward (plan "
                 f"{manifest.get('plan')!r}); rebuild it: python -m cutedsl bundle")
    from ..runtime.selection import get_backend
    from . import libs, report
    backend = get_backend(args.backend)
    lib, note = libs.pick(backend.name, "auto")

    def write(result):
        report.write(args.json, report.to_json(result))
    t0 = time.time()
    result = run(backend, lib, deadline=args.deadline, iters=args.iters, warmup=args.warmup, write=write)
    if note:
        result["header"].setdefault("notes", []).append(note)
    result["header"]["wall_s"] = round(time.time() - t0, 1)
    write(result)
    print(table(result))
    return 1 if result["summary"].get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
