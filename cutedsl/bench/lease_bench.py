"""Step 2 of a GPU lease: the bundle's problems against cuBLAS, within a deadline.

For each problem of the bundle's manifest (:mod:`.plans`: bf16 squares, the paper's 7296 x 256
x K stage study, skinny shapes, fp8 against ``torch._scaled_mm``) the :class:`.runner.Sweep`
times cuBLAS (``torch.matmul``) and cutedsl on the same rotated randn inputs in one process
(CUDA events, median of ``iters`` >= 20 launches after ``warmup``, an L2 flush before each).
Pass 1 times every problem's first config, the model's pick (``GemmConfig.for_problem``); pass 2
the tuner's candidates and the study, while the deadline allows (cuBLAS is timed again there:
two samples of the reference). A config that would end past the deadline is recorded as
skipped, so a short lease still gives every problem its model-vs-cuBLAS ratio. The best
config per problem is the fastest that passed its check -- what ``cutedsl.tune`` would pick
from the same candidates.

``python -m cutedsl.bench.lease_bench --bundle DIR [--backend cuda|sim] [--deadline T]
--json FILE --csv FILE``; on ``sim`` each problem runs at its tiny dry shape (no timings).

A kernel that faults on the GPU (an illegal address, a trap) leaves the CUDA context unusable,
and the process with it. So the timing runs in a worker process that journals each config
before it runs and each row once recorded; when the worker dies, the config it was in gets a
row with ``check: "fault"`` and the worker's last error lines, and a new worker goes on from
the next config with the rows so far (at most :data:`MAX_RESTARTS` times). Seen on an H200,
2026-11-28: one config of a 782-row calibration plan faulted and the whole step's pass 2 was
lost. ``--crash-on LABEL`` (testing) makes the worker abort before that config, as a fault
would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .timing import geomean, lease_step_parser

#: worker processes started after one died in a config (each costs a process start and the
#: CUDA context: a second or two)
MAX_RESTARTS = 8


def _passes(problems: list) -> list:
    """``[(problem index, config indices)]``: every problem's first config, then the rest."""
    first = [(i, [0]) for i, p in enumerate(problems) if p["configs"]]
    rest = [(i, list(range(1, len(p["configs"])))) for i, p in enumerate(problems) if len(p["configs"]) > 1]
    return first + rest


def run(manifest: dict, backend, lib, *, deadline=None, iters=30, warmup=5, write=None, log=print,
        prior=(), journal=None, crash_on=None) -> dict:
    """Time the manifest's problems on ``backend`` against ``lib``'s reference (:mod:`.libs`);
    returns the result (``header``, ``sets`` as ``cutedsl bench`` writes them, ``problems``:
    per problem the model's pick and the best config with their ratios to the reference, and
    ``geomean``). ``write(result)`` is called after every problem of every pass. ``prior``:
    rows an earlier worker recorded (their configs are not run again); ``journal``: a text
    file that gets a JSON line before each config and one with each recorded row."""
    from ..device import GemmConfig
    from .configs import label
    from .runner import header, make_sweep
    from .shapes import x_label
    problems = manifest["problems"]
    timed = backend.name == "cuda"
    sweep, timer = make_sweep(backend, lib, iters=iters, warmup=warmup)
    notes = [] if timed else ["backend sim: dry shapes, harness test only, NO TIMINGS CLAIMED"]
    result = {"header": header(backend, lib, timer, sweep, notes), "sets": [], "problems": [], "geomean": {}}
    rows = [[] for _ in problems]
    for r in prior:
        rows[r["problem"]].append(r)
    done = {(r["problem"], r["config"]) for r in prior}
    now = {}

    def entry(**kw):
        journal.write(json.dumps(kw, default=str) + "\n")
        journal.flush()

    def before(cfg):
        lab = label(cfg)
        if journal is not None:
            entry(start=now["i"], config=lab)
        if lab == crash_on:
            os.abort()                      # --crash-on: what a GPU fault does to the process

    def after(row):
        if journal is not None:
            entry(row=dict(row, role="model" if row["config"] == now["model"] else "candidate",
                           problem=now["i"]))
    sweep.before_config, sweep.after_row = before, after
    try:
        for pas, (i, idx) in enumerate(_passes(problems)):
            p = problems[i]
            m, n, k = p["shape"] if timed else p["dry_shape"]
            cfgs = [GemmConfig(**_config(p["configs"][j])) for j in idx]
            keep = [(j, c) for j, c in zip(idx, cfgs) if (i, label(c)) not in done]
            if not keep:
                continue
            now.update(i=i, model=label(GemmConfig(**_config(p["configs"][0]))))
            new = sweep.run_problem(p["set"], m, n, k, [c for _, c in keep], deadline=deadline)
            for r, (j, _) in zip(new, keep):
                r.update(role="model" if j == 0 else "candidate", problem=i)
            rows[i] += new
            log(f"  {p['set']:<7} {m}x{n}x{k} {p['dtype']}: " + "; ".join(
                f"{r['config']} {_fmt(r.get('ratio'), '.3f')} x ref ({r['check']})" for r in new))
            _collect(result, problems, rows, x_label)
            if write is not None:
                write(result)
        _collect(result, problems, rows, x_label)     # also when every row came from ``prior``
    finally:
        timer.close()
    return result


def _config(fields: dict) -> dict:
    return {f: tuple(v) if isinstance(v, list) and f in ("tile", "cluster") else v for f, v in fields.items()}


def _fmt(v, spec):
    from .report import _f
    return _f(v, spec)


def _collect(result, problems, rows, x_label):
    from .runner import summarize
    by_set = {}
    for rs in rows:
        for r in rs:
            by_set.setdefault(r["set"], []).append(r)
    result["sets"] = [{"set": s, "x_label": x_label(s), "rows": rs, "summary": summarize(rs)}
                      for s, rs in by_set.items()]
    result["problems"] = [problem_summary(p, rs) for p, rs in zip(problems, rows)]
    result["geomean"] = {"model_ratio": geomean(s["model"].get("ratio") for s in result["problems"] if s["model"]),
                         "best_ratio": geomean(s["best"].get("ratio") for s in result["problems"] if s["best"])}


def problem_summary(problem: dict, rows: list) -> dict:
    """The model's pick and the fastest passing config of one problem, with the reference's
    TFLOP/s (the median of its samples) and the count of configs timed, skipped and failed."""
    ok = [r for r in rows if r.get("check") == "pass" and r.get("tflops")]
    model = next((r for r in rows if r.get("role") == "model"), None)
    best = max(ok, key=lambda r: r.get("tflops") or 0.0) if ok else None
    refs = sorted({r["ref_tflops"] for r in rows if r.get("ref_tflops")})

    def pick(r):
        return {} if r is None else {k: r.get(k) for k in ("config", "ms", "tflops", "ratio", "check")}
    return {"set": problem["set"], "shape": problem["shape"], "dtype": problem["dtype"],
            "out_dtype": problem["out_dtype"], "ref_tflops": refs[len(refs) // 2] if refs else None,
            "ref_tflops_samples": refs, "model": pick(model), "best": pick(best),
            "timed": sum(r.get("ms") is not None or r.get("wall_ms") is not None for r in rows),
            "skipped": sum(r.get("check") == "skipped" for r in rows),
            "failed": sum(r.get("check") in ("FAIL", "error", "fault") for r in rows),
            "configs": len(problem["configs"])}


def table(result: dict) -> str:
    """A short text table: per problem the reference, the model's pick and the best config."""
    lines = [f"{'problem':<24} {'dtype':<5} {'ref TF/s':>8} {'model TF/s':>10} {'ratio':>6} "
             f"{'best TF/s':>9} {'ratio':>6}  timed/skipped/failed  best config"]
    for s in result["problems"]:
        shape = "x".join(map(str, s["shape"]))
        lines.append(f"{s['set'] + ' ' + shape:<24} {s['dtype']:<5} {_fmt(s['ref_tflops'], '8.1f')} "
                     f"{_fmt(s['model'].get('tflops'), '10.1f')} {_fmt(s['model'].get('ratio'), '6.3f')} "
                     f"{_fmt(s['best'].get('tflops'), '9.1f')} {_fmt(s['best'].get('ratio'), '6.3f')}  "
                     f"{s['timed']}/{s['skipped']}/{s['failed']} of {s['configs']:<8} {s['best'].get('config', '-')}")
    g = result["geomean"]
    lines.append(f"geomean ratio to the reference: model {_fmt(g.get('model_ratio'), '.3f')}, "
                 f"best {_fmt(g.get('best_ratio'), '.3f')}")
    return "\n".join(lines)


def _parser():
    import argparse
    ap = lease_step_parser("python -m cutedsl.bench.lease_bench", __doc__.split("\n")[0],
                           "the bundle folder (its manifest.json names the problems)")
    ap.add_argument("--csv", required=True)
    ap.add_argument("--crash-on", metavar="LABEL", help="testing: the worker aborts before this config")
    ap.add_argument("--worker", metavar="STATE", help=argparse.SUPPRESS)      # the supervised process
    ap.add_argument("--journal", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.worker is None:
        return supervise(list(sys.argv[1:] if argv is None else argv), args)
    from ..runtime.selection import get_backend
    from . import libs, report
    manifest = json.loads((Path(args.bundle) / "manifest.json").read_text())
    backend = get_backend(args.backend)
    lib, note = libs.pick(backend.name, "auto")
    state = json.loads(Path(args.worker).read_text())

    def write(result):
        report.write(args.json, report.to_json(result))
        report.write(args.csv, report.to_csv(result))
    t0 = time.time()
    with open(args.journal, "a") as journal:
        result = run(manifest, backend, lib, deadline=args.deadline, iters=args.iters, warmup=args.warmup,
                     write=write, prior=state["rows"], journal=journal, crash_on=args.crash_on)
    if note:
        result["header"].setdefault("notes", []).append(note)
    result["header"]["wall_s"] = round(time.time() - t0, 1)
    write(result)
    print(table(result))
    bad = sum(s["failed"] for s in result["problems"])
    return 1 if bad else 0


def supervise(argv: list, args) -> int:
    """Run the timing in worker processes (see the module docstring); returns the last
    worker's exit status (0: every row passed, 1: some failed or faulted)."""
    manifest = json.loads((Path(args.bundle) / "manifest.json").read_text())
    with tempfile.TemporaryDirectory(prefix="cutedsl-lease-bench-") as tmp:
        state, journal, err = (Path(tmp) / n for n in ("state.json", "journal.jsonl", "stderr.txt"))
        rows, rc = [], 1
        for attempt in range(MAX_RESTARTS + 1):
            state.write_text(json.dumps({"rows": rows}, default=str))
            journal.write_text("")
            with open(err, "w") as ef:
                rc = subprocess.call([sys.executable, "-m", "cutedsl.bench.lease_bench", *argv, "--worker",
                                      str(state), "--journal", str(journal)], stderr=ef)
            tail = err.read_text(errors="replace")
            sys.stderr.write(tail)
            if rc in (0, 1):
                return rc
            events = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
            rows += [e["row"] for e in events if "row" in e]
            recorded = {(e["row"]["problem"], e["row"]["config"]) for e in events if "row" in e}
            open_ = [e for e in events if "start" in e and (e["start"], e["config"]) not in recorded]
            if not open_:
                print(f"lease bench: the worker exited with status {rc} outside any config", flush=True)
                return rc
            i, lab = open_[-1]["start"], open_[-1]["config"]
            if attempt == MAX_RESTARTS:
                print(f"lease bench: the worker died (status {rc}) in {lab} on problem {i}; "
                      f"{MAX_RESTARTS} restarts spent, giving up", flush=True)
                return rc
            why = " | ".join(x.strip() for x in tail.strip().splitlines()[-3:])[-400:]
            print(f"lease bench: the worker died (status {rc}) in {lab} on problem {i}: recorded as a fault, "
                  f"restarting ({attempt + 1} of {MAX_RESTARTS})", flush=True)
            rows.append(_fault_row(manifest, i, lab, rc, why))
        return rc


def _fault_row(manifest: dict, i: int, lab: str, rc: int, why: str) -> dict:
    """The row of a config during which the worker process died."""
    from ..device import GemmConfig
    from .configs import label
    from .shapes import x_value
    p = manifest["problems"][i]
    cfg = next(GemmConfig(**_config(f)) for f in p["configs"] if label(GemmConfig(**_config(f))) == lab)
    m, n, k = p["shape"]
    return {"set": p["set"], "m": m, "n": n, "k": k, "config": lab, "schedule": cfg.schedule,
            "tile": "x".join(map(str, cfg.tile)), "stages": cfg.resolved_stages(), "dtype": cfg.dtype,
            "out_dtype": cfg.out_dtype, "x": x_value(p["set"], m, n, k, cfg.resolved_stages()), "ms": None,
            "tflops": None, "ratio": None, "check": "fault", "problem": i,
            "role": "model" if lab == label(GemmConfig(**_config(p["configs"][0]))) else "candidate",
            "error": f"the process died (exit status {rc}) while this config ran: {why}"}


if __name__ == "__main__":
    sys.exit(main())
