"""What a GPU lease runs (``scripts/gpu_run.sh``), as data: the problems timed against cuBLAS,
the configs timed per problem, the ``gpu`` tests, and the main job whose export is loaded.

A plan names problems, not configs: :func:`problem_configs` turns each into the configs the
run times -- the documented model's pick (``GemmConfig.for_problem``) first, then the
tuner's candidates (:func:`cutedsl.device.tune.candidates`) in the model's order, then any
study the problem asks for (the paper's stage study: the multistage kernel at 1..7 stages).
The bundle records the result per problem (``manifest["problems"]``), so the GPU machine runs
exactly what was compiled, and :func:`kernel_configs` adds the layout variants a call makes
(``raster="N"`` where a problem has more tile columns than rows), which ``Gemm`` would
otherwise compile on the GPU machine, where there is no compiler.
"""
from __future__ import annotations

#: the problems of a full lease: (set, M, N, K, dtype, out_dtype, study). Set names group the
#: rows of the report; dtypes are what the issue's comparison names (the paper's study in f16,
#: as the paper; fp8 against ``torch._scaled_mm``, which writes bf16).
LEASE_PROBLEMS = (
    ("square", 4096, 4096, 4096, "bf16", "bf16", None),
    ("square", 8192, 8192, 8192, "bf16", "bf16", None),
    ("paper", 7296, 256, 1024, "f16", "f16", "stages"),
    ("paper", 7296, 256, 4096, "f16", "f16", "stages"),
    ("paper", 7296, 256, 16384, "f16", "f16", "stages"),
    ("skinny", 256, 2112, 7168, "bf16", "bf16", None),
    ("skinny", 1024, 2112, 7168, "bf16", "bf16", None),
    ("fp8", 8192, 8192, 8192, "e4m3", "bf16", None),
)
#: the problems of an exploring lease (``--plan explore``): the full lease's, plus shapes between
#: them for the model's calibration; each times :func:`explore_configs` besides the tuner's list
EXPLORE_PROBLEMS = tuple(p[:6] + ("explore",) for p in LEASE_PROBLEMS) + (
    ("square", 2048, 2048, 2048, "bf16", "bf16", "explore"),
    ("wave", 4096, 4096, 1024, "bf16", "bf16", "explore"),
    ("wave", 16384, 1024, 4096, "bf16", "bf16", "explore"),
)
#: a smoke plan's problems: tiny, so the dry run on the emulator takes seconds
SMOKE_PROBLEMS = (
    ("square", 130, 70, 96, "f16", "f16", None),
    ("fp8", 64, 200, 128, "e4m3", "bf16", None),
)
#: the attention kernels of a lease (issue 43: the ``gpu`` tests' attention forward and the step against
#: SDPA), sm_90a bf16: ``(pass, head_dim, causal, varlen)`` -- the forward at head dims 128 and 64, causal
#: and not, dense, and one varlen; the backward at head dim 128, causal and not
LEASE_ATTENTION = (("forward", 128, False, False), ("forward", 128, True, False), ("forward", 64, False, False),
                   ("forward", 64, True, False), ("forward", 128, False, True), ("backward", 128, False, False),
                   ("backward", 128, True, False))
#: a smoke plan's: the forward kernels the attention step times (head dim 128, causal and not)
SMOKE_ATTENTION = LEASE_ATTENTION[:2]
#: the tile of the paper's stage study (NVDSL's multistage GEMM) and its stage counts
STAGE_STUDY_TILE = (128, 128, 64)
STAGE_STUDY = tuple(range(1, 8))
#: what a dry run (the emulator) runs instead of a problem: M >= N keeps (130, 70, 96), else
#: (64, 200, 128) -- tiny, no tile multiples, the same longer side as the real problem
DRY_SHAPES = ((130, 70, 96), (64, 200, 128))

PLANS = {
    "gpu": {
        "problems": LEASE_PROBLEMS,
        "candidates": 8,              # the tuner's candidates per problem, after the model's pick
        "tests": ["tests/device/test_gpu.py", "tests/device/test_gpu_families.py",
                  "tests/device/test_gpu_attention.py"],
        # what a dry run runs on the emulator (test_gpu.py's 1000^3 problems would take it hours)
        "dry_tests": ["tests/device/test_gpu_families.py", "tests/device/test_gpu_attention.py"],
        "main_args": ["gemm", "--m", "1000", "--n", "1000", "--k", "1000", "--check"],
        "attention": LEASE_ATTENTION,
    },
    # calibration: a wider grid of configs per problem (explore_configs), no tests, no attention
    "explore": {
        "problems": EXPLORE_PROBLEMS,
        "candidates": 8,
        "tests": [],
        "dry_tests": [],
        "main_args": ["gemm", "--m", "1000", "--n", "1000", "--k", "1000", "--check"],
        "attention": (),
    },
    # a few kernels: what the dry-run test of the bundle and the runner builds
    "smoke": {
        "problems": SMOKE_PROBLEMS,
        "candidates": 0,              # the model's pick only
        "tests": ["tests/device/test_gpu_families.py::test_family_bit_identical[multistage]"],
        "main_args": ["gemm", "--m", "300", "--n", "200", "--k", "160", "--schedule", "multistage", "--stages", "2",
                      "--out-dtype", "f16", "--check"],
        "attention": SMOKE_ATTENTION,
    },
}


def dry_shape(m: int, n: int, k: int) -> tuple:
    """The emulator's stand-in for an ``m x n x k`` problem (:data:`DRY_SHAPES`)."""
    return DRY_SHAPES[0] if m >= n else DRY_SHAPES[1]


def problem_configs(problem, candidates: int, arch: str | None = None) -> list:
    """The configs a lease times on ``problem`` (a :data:`LEASE_PROBLEMS` row): the model's pick,
    ``candidates`` of the tuner's, the study's; unique, in that order. On another architecture
    than sm_90a: the model's pick for it only (the tuner's candidates are sm_90a schedules)."""
    from ..device import GemmConfig, tune
    from ..errors import ConfigError
    _, m, n, k, dt, out_dt, study = problem
    fixed = {"out_dtype": out_dt}
    if arch not in (None, "sm_90a"):
        return [GemmConfig.for_problem(m, n, k, dt, arch=arch, **fixed)]
    out = [GemmConfig.for_problem(m, n, k, dt, **fixed)]
    if candidates:
        out += tune.candidates(m, n, k, dt, limit=candidates, **fixed)
    if study == "stages":
        for s in STAGE_STUDY:
            try:
                out.append(GemmConfig(dtype=dt, tile=STAGE_STUDY_TILE, stages=s, schedule="multistage", **fixed))
            except ConfigError:           # a depth that does not fit shared memory
                pass
    if study == "explore":
        out += explore_configs(m, n, k, dt, out_dt)
    return list(dict.fromkeys(out))


def explore_configs(m: int, n: int, k: int, dt: str, out_dt: str) -> list:
    """A calibration grid for the model (``--plan explore``): the persistent schedules at the
    two widest tiles with clusters 1x1 / 2x1 / 1x2 / 2x2, the cooperative 2x1 at every swizzle
    and both rasters, one stage fewer than fits, split-K at 2 / 3 / 4 pieces and stream-K on the
    128-wide tiles, and the multistage kernel at each tile's deepest two depths. Configs the
    library refuses (``ConfigError``) are left out."""
    from ..device import GemmConfig
    from ..errors import ConfigError
    from ..atom.mma_traits import mma_traits
    kt = mma_traits(dt).k_tile
    tiles = [(128, 256), (128, 128), (128, 64), (64, 128), (64, 64)]
    b_major = {"b_major": "K"} if dt in ("e4m3", "e5m2", "tf32") else {}
    grid = []

    def add(**f):
        try:
            grid.append(GemmConfig(dtype=dt, out_dtype=out_dt, **b_major, **f))
        except ConfigError:
            pass
    for bm, bn in tiles[:2]:
        for sched in ("cooperative", "pingpong", "warp_specialized"):
            for cl in ((1, 1), (2, 1), (1, 2), (2, 2)):
                add(tile=(bm, bn, kt), schedule=sched, cluster=cl)
    for bm, bn in tiles[:3]:
        for sw in (1, 2, 4, 8):
            for raster in ("M", "N"):
                add(tile=(bm, bn, kt), schedule="cooperative", cluster=(2, 1), swizzle=sw, raster=raster)
        deepest = GemmConfig(dtype=dt, out_dtype=out_dt, tile=(bm, bn, kt), schedule="cooperative",
                             **b_major).resolved_stages()
        add(tile=(bm, bn, kt), schedule="cooperative", cluster=(2, 1), stages=deepest - 1)
        for splits in (2, 3, 4):
            add(tile=(bm, bn, kt), schedule="cooperative", decomposition="split-k", splits=splits)
        add(tile=(bm, bn, kt), schedule="pingpong", decomposition="stream-k")
    for bm, bn in tiles:
        deepest = GemmConfig(dtype=dt, out_dtype=out_dt, tile=(bm, bn, kt), schedule="multistage",
                             **b_major).resolved_stages()
        for st in (deepest, deepest - 1):
            add(tile=(bm, bn, kt), schedule="multistage", stages=st)
    return grid


def call_config(cfg, m: int, n: int, k: int):
    """:func:`cutedsl.device.operands.call_config`: the config whose kernel a call on operands
    in ``cfg``'s own layouts runs."""
    from ..device.operands import call_config as _call_config
    return _call_config(cfg, m, n, k)


def kernel_configs(problems: list) -> list:
    """Every config whose kernel a lease needs for ``problems`` (manifest rows with ``shape``,
    ``dry_shape`` and ``configs``): each config as called on the real and on the dry shape."""
    from ..device import GemmConfig
    out = []
    for p in problems:
        for fields in p["configs"]:
            cfg = GemmConfig(**fields)
            out += [call_config(cfg, *p["shape"]), call_config(cfg, *p["dry_shape"])]
    return list(dict.fromkeys(out))


def manifest_problems(plan: dict, arch: str | None = None) -> list:
    """The plan's problems as the manifest records them: set, shape, dry shape, dtypes, study
    and the configs (``GemmConfig.fields()``, JSON-ready) in timing order."""
    import json
    rows = []
    for p in plan["problems"]:
        name, m, n, k, dt, out_dt, study = p
        cfgs = problem_configs(p, plan["candidates"], arch)
        rows.append({"set": name, "shape": [m, n, k], "dry_shape": list(dry_shape(m, n, k)), "dtype": dt,
                     "out_dtype": out_dt, "study": study,
                     "configs": [json.loads(json.dumps(c.fields(), default=list)) for c in cfgs]})
    return rows


def attention_kernels(spec) -> list:
    """The kernel objects (not compiled) an attention call of ``spec`` runs -- a
    :data:`LEASE_ATTENTION` row ``(pass, head_dim, causal, varlen)``, bf16 on sm_90a: the forward's
    one kernel (a causal call is a band with no left edge: ``local`` and ``causal``, as
    ``Attention`` builds it), or the backward's three (``AttentionBackward.kernels``)."""
    from ..device.attention_bwd import AttentionBackward
    from ..device.attention_config import AttentionConfig
    pas, head_dim, causal, varlen = spec
    cfg = AttentionConfig(head_dim=int(head_dim), dtype="bf16")
    if pas == "forward":
        return [cfg.kernel(local=bool(causal), causal=bool(causal), varlen=bool(varlen))]
    return list(AttentionBackward(cfg).kernels(cfg, local=bool(causal), varlen=bool(varlen)))


def attention_label(spec) -> str:
    """``attention forward d128 causal varlen``: what a missing kernel is called."""
    pas, d, causal, varlen = spec
    return f"attention {pas} d{d} {'causal' if causal else 'full'}{' varlen' if varlen else ''}"
