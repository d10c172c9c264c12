"""The end-of-run table of a GPU lease, from the files it left in its output folder
(``summary.json``, ``gpu_tests.xml``, ``bench.json``, ``attention.json``, ``startup.json``): what
the device tool's reply shows, and what ``python -m cutedsl.bench.lease_report OUT`` prints again from the files
brought back (docs/gpu-lease.md: writing docs/performance.md from them)."""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def junit(path: Path) -> dict | None:
    """Counts of a pytest junit report (``tests``, ``passed``, ``failed``, ``errors``,
    ``skipped``) and the ids of the failing tests; None when there is no readable report."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    bad = [f"{c.get('classname', '')}::{c.get('name', '')}" for s in suites for c in s.iter("testcase")
           if c.find("failure") is not None or c.find("error") is not None]
    return {"tests": n["tests"], "passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"],
            "failed": n["failures"], "errors": n["errors"], "skipped": n["skipped"], "failing": bad}


def _verbose_counts(out: Path) -> list:
    """``[(outcome, count)]`` of the ``pytest -v`` result lines in the log's tests step."""
    import re
    try:
        log = (out / "gpu_run.log").read_text()
    except OSError:
        return []
    part = log[log.find(" step tests "):]
    part = part[:part.find("=== step tests:")]
    found = re.findall(r"^tests/\S+::.* (PASSED|FAILED|ERROR|SKIPPED)", part, re.M)
    return [(w, found.count(w)) for w in ("PASSED", "FAILED", "ERROR", "SKIPPED")]


def _note(step: str, out: Path) -> str:
    """One line on what a step produced."""
    if step == "env":           # the bundle's --verify line
        log = (out / "gpu_run.log").read_text() if (out / "gpu_run.log").is_file() else ""
        found = [ln.split(": ", 1)[1] for ln in log.splitlines() if ln.startswith("bundle ") and " problems" in ln]
        return found[-1] if found else ""
    if step == "tests":
        j = junit(out / "gpu_tests.xml")
        if j is None:               # killed before pytest wrote its report: count the -v lines
            return "no junit report; the log shows " + ", ".join(f"{n} {w.lower()}" for w, n in _verbose_counts(out))
        return f"{j['passed']} passed, {j['failed']} failed, {j['errors']} errors, {j['skipped']} skipped"
    if step == "bench":
        b = _load(out / "bench.json")
        if not b:
            return "no bench.json"
        ps, g = b.get("problems", []), b.get("geomean", {})
        f = lambda v: "-" if v is None else f"{v:.3f}"     # noqa: E731
        return (f"{len(ps)} problems, {sum(p['timed'] for p in ps)} timed, {sum(p['skipped'] for p in ps)} skipped, "
                f"{sum(p['failed'] for p in ps)} failed; geomean/ref model {f(g.get('model_ratio'))} "
                f"best {f(g.get('best_ratio'))}")
    if step == "attention":
        a = _load(out / "attention.json")
        if not a:
            return "no attention.json"
        s = a.get("summary", {})
        f = lambda v: "-" if v is None else f"{v:.3f}"     # noqa: E731
        return (f"{s.get('problems', 0)} problems, {s.get('timed', 0)} timed, {s.get('skipped', 0)} skipped, "
                f"{s.get('failed', 0)} failed; geomean/SDPA flash {f(s.get('geomean_ratio_flash'))} "
                f"cuDNN {f(s.get('geomean_ratio_cudnn'))}")
    if step == "startup":
        s = _load(out / "startup.json")
        if not s:
            return "no startup.json"
        ln = s.get("launch", {})
        us = ln.get("gemm_call_us")
        note = f" ({s['note']})" if s.get("note") else ""
        return "launch " + ("failed" if us is None else f"{us:.1f} us/call") + note
    return ""


def report(out) -> str:
    """The table: device and clocks, one line per step, then the bench and startup tables and
    the failing tests."""
    out = Path(out)
    s = _load(out / "summary.json") or {}
    smi0, smi1 = s.get("nvidia_smi_before") or {}, s.get("nvidia_smi_after") or {}
    lines = [f"--- gpu run {s.get('date_utc', '?')}{' (DRY RUN: emulator, no measurement)' if s.get('dry_run') else ''}"
             f": budget {s.get('budget_s', '?')} s, used {s.get('used_s', '?')} s",
             f"device {smi0.get('name', '-')}, driver {smi0.get('driver_version', '-')}, SM clock "
             f"{smi0.get('clocks.sm', '-')} before / {smi1.get('clocks.sm', '-')} after (max "
             f"{smi0.get('clocks.max.sm', '-')}), memory clock {smi0.get('clocks.mem', '-')}",
             f"{'step':<10} {'status':<8} {'seconds':>7} {'limit':>6} {'left':>6}  note"]
    for r in s.get("steps", []):
        note = r.get("why") or _note(r["step"], out)
        lines.append(f"{r['step']:<10} {r['status']:<8} {r.get('seconds', '-'):>7} {r.get('limit_s', '-'):>6} "
                     f"{r.get('left_s', '-'):>6}  {note}")
    b = _load(out / "bench.json")
    if b and b.get("problems"):
        from .lease_bench import table
        lines += ["--- cuBLAS side by side (TFLOP/s; ratio = cutedsl / reference)", table(b)]
    a = _load(out / "attention.json")
    if a and a.get("rows"):
        from .attention_bench import table as attention_table
        lines += ["--- attention forward vs SDPA (TFLOP/s as FlashAttention counts; ratio = cutedsl / SDPA)",
                  attention_table(a)]
    st = _load(out / "startup.json")
    if st:
        from .startup import table
        lines += ["--- launch overhead and cold start", table(st)]
    j = junit(out / "gpu_tests.xml")
    if j and j["failing"]:
        lines += ["--- failing gpu tests"] + [f"  {t}" for t in j["failing"][:30]]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m cutedsl.bench.lease_report OUT")
    print(report(sys.argv[1]))
