"""The CuTe DSL anchor of the sm_100a SASS comparison (docs/measurements.md, issue 24).

Compiles the Blackwell GEMM of quack-kernels (``quack.gemm_sm100.GemmSm100``: a persistent
warp-specialized tcgen05 GEMM written in NVIDIA's CuTe DSL, derived from CUTLASS's CuTe DSL
``dense_gemm_persistent`` / ``dense_blockscaled_gemm_persistent`` examples, which are not in the
CuTe DSL wheels) for sm_100a **without a GPU**, through quack's tensor-free compile path with
``CUTE_DSL_ARCH=sm_100a``; keeps its PTX; assembles it with this project's pinned ptxas and
prints the MMA-warp and producer-warp loops per k-tile next to ours (the same
:func:`cutedsl.compiler.sass_loops.hot_loop` count).

CuTe DSL needs torch, so it lives in a venv of its own (not a dependency of this project)::

    python3.11 -m venv /tmp/cdv
    /tmp/cdv/bin/pip install nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-cu12==4.8.1 \\
        einops==0.8.2 "apache-tvm-ffi==0.1.15.post2" torch-c-dlpack-ext==0.1.5
    /tmp/cdv/bin/pip install torch==2.13.0 triton==3.8.0    # the CPU torch this machine kind keeps
    /tmp/cdv/bin/pip install --no-deps quack-kernels==0.6.5
    .venv/bin/python scripts/cute_dsl_anchor.py --cute-python /tmp/cdv/bin/python

``--keep DIR`` leaves the PTX (one directory per configuration) for the emulator fixtures.
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

#: name: (A/B element, tile (M, N), cluster (M, N, K), our GemmConfig keywords, our MMA opcode)
CONFIGS = {
    "f16_128x256": ("f16", (128, 256), (1, 1, 1), dict(tile=(128, 256, 64), b_major="K"), "UTCHMMA"),
    "f16_128x128": ("f16", (128, 128), (1, 1, 1), dict(tile=(128, 128, 64), b_major="K"), "UTCHMMA"),
    # CuTe DSL: a CTA-pair M = 128 MMA (64 rows per CTA); ours: one CTA per MMA, B multicast
    "f16_128x128_2x1": ("f16", (128, 128), (2, 1, 1), dict(tile=(128, 128, 64), b_major="K", cluster=(2, 1)),
                        "UTCHMMA"),
    "f16_256x256_2sm": ("f16", (256, 256), (2, 1, 1), dict(tile=(128, 256, 64), b_major="K", cluster=(2, 1),
                                                             mma_sm=2), "UTCHMMA"),
    # both a CTA-pair M = 128 MMA (ours: 64 rows per CTA, mma_sm=2)
    "f16_128x128_2x1_pair": ("f16", (128, 128), (2, 1, 1), dict(tile=(64, 128, 64), b_major="K", cluster=(2, 1),
                                                                  mma_sm=2), "UTCHMMA"),
    "mxfp8": ("mxfp8", (128, 128), (1, 1, 1), dict(dtype="mxfp8"), "UTCQMMA"),
    "mxfp8_256x128_2sm": ("mxfp8", (256, 128), (2, 1, 1), dict(dtype="mxfp8", cluster=(2, 1), mma_sm=2), "UTCQMMA"),
    "mxfp4_256x128_2sm": ("mxfp4", (256, 128), (2, 1, 1), dict(dtype="mxfp4", cluster=(2, 1), mma_sm=2), "UTCOMMA"),
    "nvfp4_256x128_2sm": ("nvfp4", (256, 128), (2, 1, 1), dict(dtype="nvfp4", cluster=(2, 1), mma_sm=2), "UTCOMMA"),
    "mxfp4": ("mxfp4", (128, 128), (1, 1, 1), dict(dtype="mxfp4"), "UTCOMMA"),
    "nvfp4": ("nvfp4", (128, 128), (1, 1, 1), dict(dtype="nvfp4"), "UTCOMMA"),
}
#: TMA boxes per k-tile of the producer loop (ours; CuTe DSL's the same: A, B, and the factors)
BOXES = {"f16": 2, "mxfp8": 4, "mxfp4": 4, "nvfp4": 4}


def compile_one(kind: str, tile, cluster, out: str, dynamic: bool = False) -> None:
    """Runs in the CuTe DSL venv: compile quack's sm100 GEMM (K-major A and B, persistent; the
    static scheduler, or with ``dynamic`` cluster launch control) and keep its PTX in ``out``."""
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
    os.environ["QUACK_CACHE_ENABLED"] = "0"
    os.environ["CUTE_DSL_NO_CACHE"] = "1"
    import cutlass
    import cutlass.cute as cute
    import quack.gemm_tvm_ffi_utils as tvm_utils
    from quack.gemm import _compile_gemm
    os.makedirs(out, exist_ok=True)
    compile_ = cute.compile

    def keeping(*a, options="", **k):
        return compile_(*a, options=f"{options} --keep-ptx --dump-dir={out}", **k)
    tvm_utils.cute.compile = keeping
    f32, e8m0 = cutlass.Float32, cutlass.Float8E8M0FNU
    ab, sf, vec = {"f16": (cutlass.Float16, None, None), "mxfp8": (cutlass.Float8E4M3FN, e8m0, 32),
                   "mxfp4": (cutlass.Float4E2M1FN, e8m0, 32),
                   "nvfp4": (cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, 16)}[kind]
    d = f32 if kind == "f16" else cutlass.BFloat16
    # quack.gemm._compile_gemm's positional flags: no C, persistent, no epilogue extras
    _compile_gemm(ab, ab, d, None, "k", "k", "n", None, tuple(tile), tuple(cluster),
                  False, True, dynamic, None, None, 0, 0, 0, False, None, False, False, False, False, False,
                  (10, 0), None, 0, None, sf_dtype=sf, sf_vec_size=vec)


def loops(ptx: str, mma_op: str, boxes: int) -> dict:
    """MMA and producer loop instructions per k-tile of ``ptx`` assembled here for sm_100a."""
    from cutedsl.arch import SM100A
    from cutedsl.compiler.toolchain import ptxas, sass
    cubin, info, _, _ = ptxas(ptx, arch=SM100A)
    return summarize(sass(cubin), mma_op, boxes, info)


def summarize(text: str, mma_op: str, boxes: int, info: dict) -> dict:
    from cutedsl.compiler.sass_loops import hot_loop
    m, p = hot_loop(text, mma_op), hot_loop(text, "UTMALDG")
    return {"mma": m["instructions"], "producer": p["instructions"] / (p["histogram"]["UTMALDG"] / boxes),
            "registers": info["registers"], "spills": info["spill_stores"]}


def ours(kw: dict, mma_op: str, boxes: int) -> dict:
    from cutedsl import GemmConfig
    from cutedsl.compiler.toolchain import sass
    k = GemmConfig(arch="sm_100a", stages=4, **kw).kernel().compile()
    r = k.resources
    return summarize(sass(k.cubin), mma_op, boxes, {"registers": r.registers, "spill_stores": r.spill_stores})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cute-python", help="python of the CuTe DSL venv (see the module docstring)")
    ap.add_argument("--keep", help="directory to keep CuTe DSL's PTX in (one sub-directory per configuration)")
    ap.add_argument("--only", nargs="*", choices=sorted(CONFIGS), help="configurations (default: all)")
    ap.add_argument("--compile-one", nargs="+", metavar="KIND TILE CLUSTER OUT [clc]", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.compile_one:
        kind, tile, cluster, out = a.compile_one[:4]
        compile_one(kind, [int(x) for x in tile.split("x")], [int(x) for x in cluster.split("x")], out,
                    dynamic=a.compile_one[4:] == ["clc"])
        return
    if not a.cute_python:
        ap.error("--cute-python is required (the CuTe DSL venv's python; see the module docstring)")
    root = a.keep or tempfile.mkdtemp(prefix="cute_dsl_anchor_")
    print("| configuration | CuTe DSL MMA / producer | ours MMA / producer | CuTe DSL / ours registers |")
    print("|---|---|---|---|")
    for name in a.only or CONFIGS:
        kind, tile, cluster, kw, op = CONFIGS[name]
        out = os.path.join(root, name)
        r = subprocess.run([a.cute_python, __file__, "--compile-one", kind, "x".join(map(str, tile)),
                            "x".join(map(str, cluster)), out], capture_output=True, text=True)
        ptx = glob.glob(os.path.join(out, "*.ptx"))
        if r.returncode or not ptx:
            sys.exit(f"CuTe DSL compile of {name} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
        theirs, mine = loops(open(ptx[0]).read(), op, BOXES[kind]), ours(kw, op, BOXES[kind])
        print(f"| {name} | {theirs['mma']} / {theirs['producer']:.0f} | {mine['mma']} / {mine['producer']:.0f} | "
              f"{theirs['registers']} / {mine['registers']} |")
    if a.keep:
        print(f"PTX kept in {root}")


if __name__ == "__main__":
    main()
