"""Output of a sweep: text table, JSON, CSV, plot, and the progress bar.

rich / tqdm / matplotlib are optional at import time (a GPU machine may lack them): the
table falls back to plain text, the progress bar to one line per step on stderr, and a
requested plot to a message saying matplotlib is missing.
"""
from __future__ import annotations

import csv
import io
import json
import sys

CSV_FIELDS = ("set", "m", "n", "k", "x", "config", "schedule", "tile", "stages", "dtype", "out_dtype", "ms",
              "ms_min", "ms_p90", "tflops", "ref_ms", "ref_tflops", "ratio", "max_rel_diff", "tolerance", "check",
              "n_sets", "iters", "wall_ms", "error", "batch", "seqlen", "heads", "head_dim", "causal", "flops",
              "cudnn_ms", "cudnn_tflops")


def _f(v, fmt):
    """``format(v, fmt)``, or a dash as wide as the field when there is no value."""
    if v is None:
        width = fmt.split(".")[0]
        return format("-", ">" + width) if width.isdigit() else "-"
    return format(v, fmt)


def text(result: dict) -> str:
    """The report as plain text: header, one table per set, geometric means."""
    out = io.StringIO()
    p = lambda s="": print(s, file=out)   # noqa: E731
    h = result["header"]
    p(f"cutedsl bench  {h['date_utc']}  backend {h['backend']}  device {h.get('device', '?')}")
    extra = {k: h[k] for k in ("driver_version", "sm_count", "l2_bytes", "max_sm_clock_khz", "array_library",
                               "timer", "iters", "warmup", "l2_flush_bytes") if k in h}
    p("  " + "  ".join(f"{k}={v}" for k, v in extra.items()))
    if "nvidia_smi" in h:
        p("  nvidia-smi: " + ", ".join(f"{k}={v}" for k, v in h["nvidia_smi"].items()))
    p(f"  reference: {h['reference']}")
    if "timings" in h:
        p(f"  TIMINGS: {h['timings']}")
    for n in h.get("notes", ()):
        p(f"  note: {n}")
    for s in result["sets"]:
        p()
        p(f"== {s['set']}  (x = {s['x_label']})")
        if s.get("kind") == "attention":
            _attention_table(s, p)
            continue
        p(f"{'M':>6} {'N':>6} {'K':>6}  {'config':<34} {'ms':>9} {'TFLOP/s':>8} {'ref ms':>9} "
          f"{'ref TF/s':>8} {'ratio':>6}  check")
        for r in s["rows"]:
            chk = r.get("check", "-")
            if r.get("max_rel_diff") is not None:
                chk += f" ({r['max_rel_diff']:.1e})"
            if r.get("error"):
                chk += f"  {r['error']}"
            p(f"{r['m']:>6} {r['n']:>6} {r['k']:>6}  {r['config']:<34} {_f(r.get('ms'), '9.4f')} "
              f"{_f(r.get('tflops'), '8.1f')} {_f(r.get('ref_ms'), '9.4f')} {_f(r.get('ref_tflops'), '8.1f')} "
              f"{_f(r.get('ratio'), '6.3f')}  {chk}")
        summ = s["summary"]
        for label, g in summ["configs"].items():
            p(f"  geomean {label:<34} {_f(g['geomean_tflops'], '8.1f')} TFLOP/s  ratio "
              f"{_f(g['geomean_ratio'], '.3f')}  failed checks {g['failed_checks']}/{g['problems']}")
        p(f"  geomean reference{'':<26} {_f(summ['reference_geomean_tflops'], '8.1f')} TFLOP/s")
        if s.get("model"):
            sms = s["model"][0]["sm_count"]
            p(f"  SM-utilisation model ({sms} SMs; k-iterations per cluster, fix-up not modelled):")
            p(f"  {'M':>6} {'N':>6} {'K':>6}  {'config':<34} {'mode':<14} {'clusters':>8} {'longest':>8} {'util':>6}")
            for r in s["model"]:
                p(f"  {r['m']:>6} {r['n']:>6} {r['k']:>6}  {r['config']:<34} {r['mode']:<14} {r['clusters']:>8} "
                  f"{r['busy_max']:>8} {100 * r['utilisation']:>5.1f}%")
    return out.getvalue()


def _check_text(r) -> str:
    chk = r.get("check", "-")
    if r.get("max_rel_diff") is not None:
        chk += f" ({r['max_rel_diff']:.1e})"
    if r.get("error"):
        chk += f"  {r['error']}"
    return chk


def _attention_table(s, p) -> None:
    """An attention set: per problem and config, cutedsl and each SDPA backend (ms, TFLOP/s as
    FlashAttention counts), the ratio to SDPA flash, the check."""
    refs = s.get("references", {})
    p(f"{'batch':>5} {'seqlen':>6} {'heads':>5} {'d':>4}  {'config':<36} {'ms':>9} {'TFLOP/s':>8} "
      + " ".join(f"{lab + ' ms':>15} {'TF/s':>6}" for lab in refs.values()) + f" {'ratio':>6}  check")
    for r in s["rows"]:
        ref_cols = " ".join(f"{_f(r.get(k + '_ms'), '15.4f')} {_f(r.get(k + '_tflops'), '6.1f')}" for k in refs)
        p(f"{r['batch']:>5} {r['seqlen']:>6} {r['heads']:>5} {r['head_dim']:>4}  {r['config']:<36} "
          f"{_f(r.get('ms'), '9.4f')} {_f(r.get('tflops'), '8.1f')} {ref_cols} {_f(r.get('ratio'), '6.3f')}  "
          f"{_check_text(r)}")
        for k, lab in refs.items():
            if r.get(k + "_error"):
                p(f"{'':>24}{lab}: {r[k + '_error']}")
    for lab, g in s["summary"]["configs"].items():
        p(f"  geomean {lab:<36} {_f(g['geomean_tflops'], '8.1f')} TFLOP/s  ratio to {refs.get('ref', 'reference')} "
          f"{_f(g['geomean_ratio'], '.3f')}  failed checks {g['failed_checks']}/{g['problems']}")


def to_json(result: dict) -> str:
    return json.dumps(result, indent=1, default=str)


def to_csv(result: dict) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for s in result["sets"]:
        for r in s["rows"]:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS})
    return buf.getvalue()


def write(path: str, data: str) -> None:
    """Write ``data`` to ``path`` (``-``: stdout)."""
    if path == "-":
        sys.stdout.write(data)
    else:
        with open(path, "w") as f:
            f.write(data)


def plot(result: dict, path: str) -> str | None:
    """TFLOP/s against the varied dimension, one line per config and one for the reference,
    one panel per set, into a PNG. Returns None, or why nothing was drawn."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no plot: matplotlib is not installed ({e})"
    sets = result["sets"]
    fig, axes = plt.subplots(len(sets), 1, figsize=(9, 4 * len(sets)), squeeze=False)
    timed = result["header"]["backend"] == "cuda"
    key = "tflops" if timed else "wall_ms"
    for ax, s in zip(axes[:, 0], sets):
        rows = s["rows"]
        by_cfg = {}
        for r in rows:
            by_cfg.setdefault(r["config"] if s["set"] != "stages" else r["config"].rsplit(" s", 1)[0], []).append(r)
        for label, rs in by_cfg.items():
            pts = sorted((r["x"], r.get(key)) for r in rs if r.get(key) is not None)
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
        if s.get("kind") == "attention":       # references per config (head dim, mask): one line each
            for label, rs in by_cfg.items():
                for k, lab, style in zip(s.get("references", {}), s.get("references", {}).values(), ("--", ":")):
                    pts = sorted((r["x"], r[k + "_tflops"]) for r in rs if r.get(k + "_tflops"))
                    if pts:
                        ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle=style, marker="s",
                                label=f"{lab} ({label.split(' ', 1)[1]})")
            ref = []
        else:
            ref = sorted({(r["x"], r["ref_tflops"]) for r in rows if r.get("ref_tflops")})
        if ref and s["set"] != "stages":
            ax.plot([x for x, _ in ref], [y for _, y in ref], "k--", marker="s", label="cuBLAS")
        elif ref:
            ax.axhline(ref[0][1], color="k", linestyle="--", label="cuBLAS")
        if s["set"] != "stages":
            ax.set_xscale("log", base=2)
        ax.set_xlabel(s["x_label"])
        ax.set_ylabel("TFLOP/s" if timed else "emulator wall ms (harness test, not a timing)")
        ax.set_title(f"{s['set']} — {result['header'].get('device', '')}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


class Progress:
    """A progress bar over ``total`` steps on stderr: rich if installed, else tqdm, else one line
    per step (also when stderr is not a terminal). Use as a context manager; call with a
    description to advance one step."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.enabled = total, enabled
        self.kind, self._bar, self._ctx, self._n = "plain", None, None, 0
        self.why = ""        # why the bar is plain lines, for the report's header

    def __enter__(self):
        if not self.enabled:
            self.kind = "off"
            return self
        if not sys.stderr.isatty():      # a log file: one line per step says where a run stopped
            self.why = "stderr is not a terminal"
            return self
        try:
            from rich.progress import Progress as RichProgress
            from rich.console import Console
            self._ctx = RichProgress(console=Console(stderr=True), transient=False)
            self._ctx.__enter__()
            self._bar = self._ctx.add_task("bench", total=self.total)
            self.kind = "rich"
        except ImportError:
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=self.total, file=sys.stderr)
                self.kind = "tqdm"
            except ImportError:
                self.why = "neither rich nor tqdm is installed"
                print("progress: neither rich nor tqdm is installed; printing one line per step",
                      file=sys.stderr)
        return self

    def __call__(self, desc: str = ""):
        self._n += 1
        if self.kind == "rich":
            self._ctx.update(self._bar, advance=1, description=desc[:60])
        elif self.kind == "tqdm":
            self._bar.set_description(desc[:60], refresh=False)
            self._bar.update(1)
        elif self.kind == "plain":
            print(f"[{self._n}/{self.total}] {desc}", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        if self.kind == "rich":
            self._ctx.__exit__(*exc)
        elif self.kind == "tqdm":
            self._bar.close()
        return False
