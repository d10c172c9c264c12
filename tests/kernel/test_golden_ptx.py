"""Golden PTX: the PTX (and launch metadata) of every configuration the README lists, recorded
before the foundation refactor (issue 19) and compared after every change to the atom,
collective and kernel layers. A difference fails with a diff; when a change is meant to alter
code generation, regenerate the records and explain each difference in the commit:

    python tests/kernel/test_golden_ptx.py --regen      # rewrites tests/kernel/golden/*.ptx.gz

Only IR construction and the MLIR lowering run here (no ptxas), about 0.3 s per config. The PTX's
line tables (``.loc`` / ``.file``: the Python line that built each instruction) are left out of the
records and the comparison: they move with every edit of the library's source."""
import difflib
import gzip
import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"

# (name, GemmConfig fields): every schedule x tile x cluster x dtype x epilogue row of the README
CONFIGS = [
    ("ms_64x64_f16", dict(tile=(64, 64, 64))),
    ("ms_64x128_f16", dict(tile=(64, 128, 64))),
    ("ms_128x64_f16", dict(tile=(128, 64, 64))),
    ("ms_128x128_f16", dict(tile=(128, 128, 64))),
    ("ms_128x256_f16", dict(tile=(128, 256, 64))),
    ("ms_128x128_bf16_kmajor_bf16out", dict(dtype="bf16", b_major="K", out_dtype="bf16")),
    ("ms_64x64_f16_global_s2", dict(tile=(64, 64, 64), epilogue="global", stages=2)),
    ("ms_128x128_f16_f16out_s1", dict(out_dtype="f16", stages=1)),
    ("st_64x64_f16", dict(schedule="single_tile", tile=(64, 64, 64))),
    ("st_128x128_bf16_kmajor_global", dict(schedule="single_tile", dtype="bf16", b_major="K", epilogue="global")),
    ("ws_128x128_f16", dict(schedule="warp_specialized")),
    ("ws_128x128_f16_2x1", dict(schedule="warp_specialized", cluster=(2, 1))),
    ("ws_128x128_f16_1x2", dict(schedule="warp_specialized", cluster=(1, 2))),
    ("ws_128x256_f16", dict(schedule="warp_specialized", tile=(128, 256, 64))),
    ("ws_64x128_bf16_bf16out", dict(schedule="warp_specialized", tile=(64, 128, 64), dtype="bf16", out_dtype="bf16")),
    ("ws_128x128_f16_global_kmajor", dict(schedule="warp_specialized", epilogue="global", b_major="K")),
    ("coop_128x128_f16", dict(schedule="cooperative")),
    ("coop_128x256_f16_1x2", dict(schedule="cooperative", tile=(128, 256, 64), cluster=(1, 2))),
    ("coop_128x128_f16_2x1_rasterN", dict(schedule="cooperative", cluster=(2, 1), raster="N", swizzle=2)),
    ("coop_128x128_bf16_global_f16out", dict(schedule="cooperative", dtype="bf16", epilogue="global", out_dtype="f16")),
    ("pp_128x128_f16", dict(schedule="pingpong")),
    ("pp_128x128_f16_2x1", dict(schedule="pingpong", cluster=(2, 1))),
    ("pp_64x256_f16", dict(schedule="pingpong", tile=(64, 256, 64))),
    ("pp_128x128_bf16_kmajor_global", dict(schedule="pingpong", dtype="bf16", b_major="K", epilogue="global")),
    ("pp_64x128_f16_1x2_sm8", dict(schedule="pingpong", tile=(64, 128, 64), cluster=(1, 2), sm_count=8)),
    ("coop_128x128_f16_2x2", dict(schedule="cooperative", cluster=(2, 2))),
    ("pp_64x64_f16_4x1", dict(schedule="pingpong", tile=(64, 64, 64), cluster=(4, 1))),
    ("ws_128x128_f16_1x4", dict(schedule="warp_specialized", cluster=(1, 4))),
]


def _kernels():
    from cutedsl import GemmConfig
    from cutedsl.kernel import SaxpyKernel, TmaSaxpyKernel
    for name, kw in CONFIGS:
        yield name, lambda kw=kw: GemmConfig(**kw).kernel()
    yield "saxpy", SaxpyKernel
    yield "tma_saxpy", TmaSaxpyKernel


def generate(make) -> tuple:
    """``(ptx, metadata)`` of the kernel ``make()`` builds: IR construction + lowering only."""
    from cutedsl.compiler.compile import COMPILE_LOCK
    from cutedsl.compiler.locations import without_line_tables
    from cutedsl.compiler.lowering import lower_to_ptx
    import attrs
    with COMPILE_LOCK:
        kern = make()
        kb, smem, tmaps = kern.define()
        byval = [i for i, p in enumerate(kb.params) if p.kind == "tensormap"]
        ptx = without_line_tables(lower_to_ptx(kb.module, byval)["ptx"])
    meta = {"entry": kb.name, "block": list(kb.block), "cluster": list(kb.cluster or (1, 1, 1)),
            "dynamic_smem": smem, "params": [[p.name, p.kind] for p in kb.param_specs],
            "tensor_maps": [attrs.asdict(t) for t in tmaps]}
    return ptx, json.loads(json.dumps(meta))     # as the record stores it (tuples -> lists)


NAMES = [n for n, _ in CONFIGS] + ["saxpy", "tma_saxpy"]


@pytest.mark.parametrize("name", NAMES)
def test_ptx_matches_the_golden_record(name):
    make = dict(_kernels())[name]
    ptx, meta = generate(make)
    want_ptx = gzip.decompress((GOLDEN / f"{name}.ptx.gz").read_bytes()).decode()
    want_meta = json.loads((GOLDEN / f"{name}.json").read_text())
    assert meta == want_meta, f"{name}: launch metadata changed: {meta} != {want_meta}"
    if ptx != want_ptx:
        diff = "".join(list(difflib.unified_diff(want_ptx.splitlines(True), ptx.splitlines(True),
                                                 "golden", "now", n=2))[:80])
        pytest.fail(f"{name}: the PTX differs from tests/kernel/golden/{name}.ptx.gz (regenerate with "
                    f"`python tests/kernel/test_golden_ptx.py --regen` only if the change is meant, and "
                    f"explain it in the commit):\n{diff}")


def test_every_schedule_and_cluster_is_recorded():
    from cutedsl.device.config import CLUSTERS, SCHEDULES
    assert {kw.get("schedule", "multistage") for _, kw in CONFIGS} == set(SCHEDULES)
    assert {kw.get("cluster", (1, 1)) for _, kw in CONFIGS} == set(CLUSTERS)
    assert {p.name.removesuffix(".ptx.gz") for p in GOLDEN.glob("*.ptx.gz")} == set(NAMES)


if __name__ == "__main__" and sys.argv[1:] == ["--regen"]:
    GOLDEN.mkdir(exist_ok=True)
    for name, make in _kernels():
        ptx, meta = generate(make)
        (GOLDEN / f"{name}.ptx.gz").write_bytes(gzip.compress(ptx.encode(), mtime=0))
        (GOLDEN / f"{name}.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(ptx.splitlines())} lines")
