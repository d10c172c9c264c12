"""Generate the CuTe DSL sm_100a fixtures of ``tests/sim/test_cute_dsl_fixtures.py`` (no GPU).

Run in the CuTe DSL venv of ``scripts/cute_dsl_anchor.py`` (nvidia-cutlass-dsl 4.8.1 and
quack-kernels 0.6.5; this project is not imported)::

    /tmp/cdv/bin/python tests/sim/cute_dsl_ptx/generate_fixtures.py

Each fixture is quack's ``GemmSm100`` (a persistent warp-specialized tcgen05 GEMM written in
CuTe DSL) compiled for sm_100a through quack's tensor-free path, with K-major A and B (batch
first: ``(L, M, K)`` / ``(L, N, K)``) and a row-major f32 D (``(L, M, N)``): ``<name>.ptx`` as
CuTe DSL emitted it, and ``<name>.json`` with what its host launcher does, read from the
compiled module's host function (``CUTE_DSL_KEEP=ir``): block and cluster shape, and each TMA
atom's box (its first two modes, innermost first) and shared-memory swizzle in launch order.
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
    # block-scaled: e4m3 A and B with E8M0 factors per 32 K-elements, bf16 D
    "cute_dsl_gemm_sm100_mxfp8": ("mxfp8", (128, 128), (1, 1, 1), "static"),
    # packed e2m1 (two per byte) with UE4M3 factors per 16 K-elements (NVFP4), bf16 D
    "cute_dsl_gemm_sm100_nvfp4": ("nvfp4", (128, 128), (1, 1, 1), "static"),
    # block-scaled on a CTA pair (cta_group::2, 128 rows each): MXFP8, 256 x 128 MMA tile
    "cute_dsl_gemm_sm100_mxfp8_2sm": ("mxfp8", (256, 128), (2, 1, 1), "static"),
}


def host_facts(ir: str) -> dict:
    host = ir[ir.index("func.func @cutlass"):]
    launch = re.search(r"blockDim = \((%c(\d+)_i32), %c1_i32, %c1_i32\)", host)
    cluster = re.search(r"cuda.launch_cfg.cluster_dim\[%\d+\] \(%c(\d+)_i32, %c(\d+)_i32, %c(\d+)_i32\)", host)
    args = host[host.index("cuda.launch_ex"):]
    # each TMA atom's box: (inner, outer) of a 2-D tile box "(i,o,1):..."; None for the
    # block-scale factor atoms (their 4-D boxes are one 512-byte atom: the test builds them)
    gbases = re.findall(r'tma_gbasis = <"([^"]*)">', args)
    boxes = [[int(m.group(1)), int(m.group(2))] if (m := re.match(r"\((\d+),(\d+),1\)", g)) else None
             for g in gbases]
    # each TMA atom's shared-memory swizzle (S<B,4,3>: 16 << B bytes; a plain layout: none), in
    # the order the host makes them (A, B, then the factors' and D's as this kernel orders them)
    swizzles = {}
    for line in host.splitlines():
        if "make_non_exec_tiled_tma_" in line:
            name = re.match(r"\s*(%non_exec_atom\w*),", line).group(1)
            sw = re.search(r'!cute\.composed_layout<"S<(\d),4,3>', line.split("->")[0])
            swizzles[name] = 16 << int(sw.group(1)) if sw else 0
    order = re.findall(r"%non_exec_atom\w*", args)
    return {"block": [int(launch.group(2)), 1, 1], "cluster": [int(c) for c in cluster.groups()],
            "boxes": boxes, "gbasis": gbases, "swizzles": [swizzles[a] for a in order if a in swizzles]}


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
