"""Generate the CuTe DSL sm_100a fixtures of ``tests/sim/test_cute_dsl_fixtures.py`` (no GPU).

Run in the CuTe DSL venv of ``scripts/cute_dsl_anchor.py`` (nvidia-cutlass-dsl 4.8.1 and
quack-kernels 0.6.5; this project is not imported)::

    /tmp/cdv/bin/python tests/sim/cute_dsl_ptx/generate_fixtures.py

Each fixture is quack's ``GemmSm100`` (a persistent warp-specialized tcgen05 GEMM written in
CuTe DSL) compiled for sm_100a through quack's tensor-free path, with K-major A and B (batch
first: ``(L, M, K)`` / ``(L, N, K)``) and a row-major f32 D (``(L, M, N)``): ``<name>.ptx`` as
CuTe DSL emitted it, and ``<name>.json`` with what its host launcher does, read from the
compiled module's host function (``CUTE_DSL_KEEP=ir``): block and cluster shape, the CTA and
cluster tile the static scheduler divides the problem by, and each TMA atom's box in launch
order (innermost dimension first).
"""
import glob
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
ANCHOR = HERE.parents[2] / "scripts" / "cute_dsl_anchor.py"
#: name: (A/B element kind, MMA tile (M, N), cluster (M, N, K), scheduler)
FIXTURES = {
    "cute_dsl_gemm_sm100_1sm": ("f16", (128, 128), (1, 1, 1), "static"),     # 1 CTA per MMA, 128 x 128
    "cute_dsl_gemm_sm100_2sm": ("f16", (256, 256), (2, 1, 1), "static"),     # CTA pair, 128 rows each
    "cute_dsl_gemm_sm100_pair_m128": ("f16", (128, 128), (2, 1, 1), "static"),  # CTA pair, 64 rows each
    # cluster launch control: a CTA per tile is launched; running ones cancel unstarted ones
    "cute_dsl_gemm_sm100_clc": ("f16", (128, 128), (1, 1, 1), "clc"),
}


def host_facts(ir: str) -> dict:
    host = ir[ir.index("func.func @cutlass"):]
    launch = re.search(r"blockDim = \((%c(\d+)_i32), %c1_i32, %c1_i32\)", host)
    cluster = re.search(r"cuda.launch_cfg.cluster_dim\[%\d+\] \(%c(\d+)_i32, %c(\d+)_i32, %c(\d+)_i32\)", host)
    # the first four ceil_divs: M by the CTA's tile M, N by the tile N, then those counts by the
    # cluster's M and N (a "1:0" tile is 1)
    tile = {m.group(1): int(m.group(2)) for m in
            re.finditer(r'(%tile\w*) = cute.make_tile\(\) : \(\) -> !cute.tile<"(\d+):\d+">', host)}
    divs = re.findall(r"cute.ceil_div\(%\w+, (%tile\w*)\)", host)[:4]
    cta_m, tile_n, cm, cn = (tile[t] for t in divs)
    args = host[host.index("cuda.launch_ex"):]
    boxes = [[int(x) for x in g.split(",")] for g in re.findall(r'tma_gbasis = <"\((\d+,\d+),1\)', args)]
    return {"block": [int(launch.group(2)), 1, 1], "cluster": [int(c) for c in cluster.groups()],
            "cta_tile_m": cta_m, "tile_n": tile_n, "cluster_tiles": [cm, cn], "boxes": boxes}


def main() -> None:
    from importlib.metadata import version
    for name, (kind, tile, cluster, scheduler) in FIXTURES.items():
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, CUTE_DSL_KEEP="ir", CUTE_DSL_DUMP_DIR=tmp)
            subprocess.run([sys.executable, str(ANCHOR), "--compile-one", kind, "x".join(map(str, tile)),
                            "x".join(map(str, cluster)), tmp] + (["clc"] if scheduler == "clc" else []),
                           check=True, env=env, capture_output=True)
            ptx = open(glob.glob(f"{tmp}/*.ptx")[0]).read()
            ir = open(glob.glob(f"{tmp}/*_clean.mlir")[0]).read()
        meta = {"entry": re.search(r"\.visible \.entry (\w+)\(", ptx).group(1), "kind": kind, "scheduler": scheduler,
                "mma_tile": list(tile), **host_facts(ir),
                "cute_dsl_version": version("nvidia-cutlass-dsl"), "quack_version": version("quack-kernels"),
                "generated_by": "tests/sim/cute_dsl_ptx/generate_fixtures.py"}
        (HERE / f"{name}.ptx").write_text(ptx)
        (HERE / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(name, meta["block"], meta["cluster"], meta["boxes"])


if __name__ == "__main__":
    main()
