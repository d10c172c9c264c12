"""Figures of docs/performance.md from GPU-lease result folders (bench.csv of scripts/gpu_run.sh).

    python scripts/plot_lease_runs.py BEFORE_DIR AFTER_DIR OUT_PREFIX

Writes OUT_PREFIX-cluster.png (each cluster=2x1 config's TFLOP/s before and after a change, beside
its 1x1 twin from AFTER_DIR) and OUT_PREFIX-stages.png (AFTER_DIR's multistage stage study per K,
cuBLAS dashed).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(folder):
    with open(f"{folder}/bench.csv") as f:
        return [r for r in csv.DictReader(f) if r["tflops"]]


def cluster_figure(before, after, path):
    tf = lambda rs: {(r["m"], r["n"], r["k"], r["config"]): float(r["tflops"]) for r in rs}  # noqa: E731
    b, a = tf(before), tf(after)
    pairs = [(key, (*key[:3], key[3].replace(" cluster=2x1", ""))) for key in a if " cluster=2x1" in key[3]]
    pairs = [(c2, c1) for c2, c1 in pairs if c1 in a and c2 in b]
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(pairs) + 1.5))
    ys = range(len(pairs))
    h = 0.27
    ax.barh([y - h for y in ys], [a[c1] for _, c1 in pairs], h, label="cluster 1x1")
    ax.barh(list(ys), [b[c2] for c2, _ in pairs], h, label="cluster 2x1, .release.cluster arrivals (before)")
    ax.barh([y + h for y in ys], [a[c2] for c2, _ in pairs], h, label="cluster 2x1, .release.cta arrivals (after)")
    ax.set_yticks(list(ys), [f"{c2[0]}x{c2[1]}x{c2[2]} {c2[3].replace(' cluster=2x1', '')}" for c2, _ in pairs],
                  fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("TFLOP/s (NVIDIA H200, 2026-11-28)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.4, -0.06), ncol=3)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def stage_figure(after, path):
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in sorted({r["k"] for r in after if r["set"] == "paper"}, key=int):
        pts = sorted((int(r["stages"]), float(r["tflops"])) for r in after
                     if r["set"] == "paper" and r["k"] == k and r["schedule"] == "multistage")
        line = ax.plot([s for s, _ in pts], [t for _, t in pts], marker="o", label=f"K = {k}")
        ref = [float(r["ref_tflops"]) for r in after if r["set"] == "paper" and r["k"] == k and r["ref_tflops"]]
        ax.axhline(sorted(ref)[len(ref) // 2], color=line[0].get_color(), linestyle="--", linewidth=0.8)
    ax.set_xlabel("stages (multistage 128x128x64, f16, 7296 x 256 x K)")
    ax.set_ylabel("TFLOP/s (dashed: cuBLAS)")
    ax.set_title("Stage study, NVIDIA H200, 2026-11-28")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    before, after, prefix = sys.argv[1:4]
    cluster_figure(rows(before), rows(after), f"{prefix}-cluster.png")
    stage_figure(rows(after), f"{prefix}-stages.png")
