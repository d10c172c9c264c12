"""The lease plan (cutedsl.bench.plans): which configs each problem is timed with, and which
kernels the bundle must hold so the GPU machine never compiles (layout variants included)."""
import json

import pytest

from cutedsl import GemmConfig
from cutedsl.bench import plans
from cutedsl.bench.configs import label
from cutedsl.device import tune
from cutedsl.errors import ConfigError

PAPER = ("paper", 7296, 256, 4096, "f16", "f16", "stages")
SKINNY = ("skinny", 256, 2112, 7168, "bf16", "bf16", None)


def test_model_pick_first_then_the_tuner_then_the_stage_study():
    cfgs = plans.problem_configs(PAPER, 4)
    assert cfgs[0] == GemmConfig.for_problem(7296, 256, 4096, "f16", out_dtype="f16")
    assert cfgs[1:5] == tune.candidates(7296, 256, 4096, "f16", limit=4, out_dtype="f16")
    fits = []
    for s in plans.STAGE_STUDY:
        try:
            fits.append(GemmConfig(tile=(128, 128, 64), stages=s, schedule="multistage", out_dtype="f16"))
        except ConfigError:
            pass
    assert cfgs[5:] == fits and [c.stages for c in fits] == [1, 2, 3, 4, 5, 6]    # 7 stages do not fit
    assert len(set(cfgs)) == len(cfgs)
    assert plans.problem_configs(SKINNY, 0) == [GemmConfig.for_problem(256, 2112, 7168, "bf16", out_dtype="bf16")]


def test_call_config_is_the_kernel_the_call_runs():
    auto = GemmConfig(schedule="pingpong", tile=(128, 128, 64))            # raster "auto"
    assert plans.call_config(auto, 256, 2112, 7168).raster == "N"           # 2 tile rows, 17 columns
    assert plans.call_config(auto, 7296, 256, 1024) == auto                 # more rows: M, as compiled
    ms = GemmConfig(schedule="multistage")
    assert plans.call_config(ms, 256, 2112, 7168) == ms                     # no raster on multistage
    fp8 = GemmConfig(dtype="e4m3", out_dtype="bf16", schedule="cooperative")
    assert fp8.b_major == "K" and plans.call_config(fp8, 8192, 8192, 8192) == fp8   # laid out as configured


def test_kernel_configs_cover_real_and_dry_shapes():
    rows = plans.manifest_problems({"problems": [SKINNY], "candidates": 3})
    assert rows[0]["shape"] == [256, 2112, 7168] and rows[0]["dry_shape"] == [64, 200, 128]
    cfgs = [GemmConfig(**{**f, "tile": tuple(f["tile"]), "cluster": tuple(f["cluster"])}) for f in rows[0]["configs"]]
    assert cfgs == plans.problem_configs(SKINNY, 3)
    json.dumps(rows)                                                         # the manifest takes them as is
    kernels = plans.kernel_configs(rows)
    want = {plans.call_config(c, *s) for c in cfgs for s in ((256, 2112, 7168), (64, 200, 128))}
    assert set(kernels) == want and len(kernels) == len(want)
    assert any(k.raster == "N" and k.schedule == "pingpong" for k in kernels), [label(k) for k in kernels]


@pytest.mark.parametrize("shape,dry", [((8192, 8192, 8192), (130, 70, 96)), ((256, 2112, 7168), (64, 200, 128)),
                                       ((7296, 256, 16384), (130, 70, 96))])
def test_dry_shapes_keep_the_longer_side(shape, dry):
    assert plans.dry_shape(*shape) == dry


def test_lease_attention_kernels():
    """Issue 43's attention kernels: the forward (bf16, sm_90a) at head dims 128 and 64, causal and
    not, dense and one varlen; the backward at 128; the smoke plan's are the ones the attention step
    times. Another architecture's bundle has none (the CUDA backend drives sm_90a)."""
    from cutedsl.bench.bundle import plan_for
    from cutedsl.bench.plans import LEASE_ATTENTION, PLANS, attention_kernels, attention_label
    fwd = {(d, c, v) for p, d, c, v in LEASE_ATTENTION if p == "forward"}
    assert fwd == {(128, False, False), (128, True, False), (64, False, False), (64, True, False),
                   (128, False, True)}
    assert {(d, c) for p, d, c, v in LEASE_ATTENTION if p == "backward"} == {(128, False), (128, True)}
    assert PLANS["gpu"]["attention"] == LEASE_ATTENTION and PLANS["smoke"]["attention"] == (
        ("forward", 128, False, False), ("forward", 128, True, False))
    assert plan_for("gpu", "sm_100a")["attention"] == () and "tests/device/test_gpu_attention.py" in \
        PLANS["gpu"]["tests"] and "tests/device/test_gpu_attention.py" in PLANS["gpu"]["dry_tests"]
    k, = attention_kernels(("forward", 64, True, True))
    assert (k.head_dim, k.local, k.causal, k.varlen, k.dtype) == (64, True, True, True, "bf16")
    assert [type(x).__name__ for x in attention_kernels(("backward", 128, True, False))] == [
        "AttentionBwdPreprocessKernel", "AttentionBwdKernel", "AttentionBwdPostprocessKernel"]
    assert attention_label(("forward", 128, False, True)) == "attention forward d128 full varlen"


def test_explore_plan_grid():
    """``--plan explore``: each problem's model pick and tuner list, then the calibration grid --
    cluster shapes, swizzles and rasters, split-K at 2/3/4 pieces, stream-K, the multistage
    kernel's deepest two depths -- every config one the library accepts, no duplicates; no gpu
    tests and no attention kernels in the plan."""
    plan = plans.PLANS["explore"]
    assert plan["tests"] == [] and plan["attention"] == ()
    for p in plan["problems"]:
        assert p[6] == "explore"
    cfgs = plans.problem_configs(("skinny", 256, 2112, 7168, "bf16", "bf16", "explore"), 8)
    assert cfgs[0] == GemmConfig.for_problem(256, 2112, 7168, "bf16", out_dtype="bf16")
    assert len(cfgs) == len(set(cfgs))
    got = {(c.schedule, c.tile[:2], c.cluster, c.swizzle, c.raster, c.decomposition, c.splits) for c in cfgs}
    assert ("cooperative", (128, 64), (1, 1), 1, "auto", "split-k", 4) in got
    assert ("cooperative", (128, 256), (2, 1), 8, "N", "data-parallel", None) in got
    assert ("pingpong", (128, 128), (2, 2), 1, "auto", "data-parallel", None) in got
    assert {c.resolved_stages() for c in cfgs if c.schedule == "multistage" and c.tile[:2] == (64, 64)} >= {6, 7}
    fp8 = plans.explore_configs(8192, 8192, 8192, "e4m3", "bf16")
    assert fp8 and all(c.b_major == "K" and c.tile[2] == 128 for c in fp8)
