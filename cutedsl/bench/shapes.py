"""Problem sets of the sweep: ``(M, N, K)`` lists, plus the set that varies pipeline stages,
the grouped (MoE) sets and the attention set."""
from __future__ import annotations

#: (M, N, K) per set. ``stages`` is one problem timed once per stage count 1..7.
SETS = {
    "square": [(s, s, s) for s in (2048, 3072, 4096, 6144, 8192, 12288, 16384)],
    "skinny": [(m, 2112, 7168) for m in (128, 256, 512, 1024, 2048, 4096, 8192)],
    "paper": [(7296, 256, k) for k in (1024, 2048, 4096, 8192, 16384)],
    "stages": [(7296, 256, 8192)],
    # few output tiles, long K (with 128 x 128 tiles on 132 SMs: 0.5 to 2.9 waves): wave
    # quantisation leaves SMs idle, what stream-K is for
    "wave": [(1024, 1024, 16384), (1536, 1536, 16384), (2048, 1536, 8192), (3072, 2048, 8192),
             (4096, 1664, 8192)],
}

def _experts(tokens: int, experts: int, idle: int) -> list:
    """Rows per expert of a skewed top-k routing of ``tokens`` assignments: weights 1 / (e + 4),
    the last ``idle`` experts get none (integers summing to ``tokens``)."""
    w = [1 / (e + 4) if e < experts - idle else 0 for e in range(experts)]
    rows = [int(tokens * x / sum(w)) for x in w]
    rows[0] += tokens - sum(rows)
    return rows


#: grouped sets: per problem, the groups' (M, N, K) -- an expert layer: every expert shares N
#: and K, M is the tokens routed to it (some get none)
GROUPED_SETS = {
    "moe": [
        # 8 experts, 4096 tokens top-2 (8192 rows), d_model 4096 -> d_ff 14336 (up), and back (down)
        [(m, 14336, 4096) for m in _experts(8192, 8, 0)],
        [(m, 4096, 14336) for m in _experts(8192, 8, 0)],
        # 64 fine-grained experts, 8192 tokens top-6, d_model 2048 -> 1408, four experts idle
        [(m, 1408, 2048) for m in _experts(49152, 64, 4)],
    ],
}
#: what the emulator runs instead of a grouped set (an idle group, a partial tile)
TINY_GROUPS = [[(130, 70, 96), (0, 70, 96), (33, 70, 96)]]

#: attention sets, FlashAttention-3's forward benchmark (paper section 4.1): 16k tokens in total
#: (batch = 16384 / seqlen), hidden dimension 2048 (heads = 2048 / head_dim), causal and not.
#: Per problem ``(batch, seqlen, hidden, causal)``; the head dims are the configs'.
ATTENTION_SETS = {
    "attention": [(16384 // s, s, 2048, c) for c in (False, True) for s in (512, 1024, 2048, 4096, 8192, 16384)],
}
#: the backward on the same problems (FlashAttention-3's backward benchmark, paper section 4.1)
ATTENTION_SETS["attention-bwd"] = list(ATTENTION_SETS["attention"])
#: the attention sets that time the backward
BACKWARD_SETS = ("attention-bwd",)
#: the head dimensions FA3's benchmark times (those the kernel does not build are skipped by name)
ATTENTION_HEAD_DIMS = (64, 128, 256)
#: what the emulator runs instead (not multiples of the 128 x 128 blocks; 128 wide: 2 heads of 64, 1 of 128)
TINY_ATTENTION = [(1, 130, 128, False), (2, 70, 128, True)]

#: what the emulator runs instead of any set: it tests the harness, it is not a benchmark.
#: Neither is a tile multiple.
TINY = [(130, 70, 96), (64, 200, 128)]

#: the decompositions the ``wave`` set times on the persistent schedules
WAVE_DECOMPOSITIONS = ("data-parallel", "stream-k")

#: the stage counts of the ``stages`` set (the paper's stage study)
STAGE_STUDY = tuple(range(1, 8))


def shapes_for(set_name: str, backend_name: str) -> list:
    """The problems of ``set_name``; on the emulator always :data:`TINY`."""
    if set_name in GROUPED_SETS:
        return list(TINY_GROUPS) if backend_name == "sim" else list(GROUPED_SETS[set_name])
    if set_name in ATTENTION_SETS:
        return list(TINY_ATTENTION) if backend_name == "sim" else list(ATTENTION_SETS[set_name])
    if set_name not in SETS:
        raise ValueError(f"unknown shape set {set_name!r}; choose from {sorted(SETS) + sorted(GROUPED_SETS)}")
    return list(TINY) if backend_name == "sim" else list(SETS[set_name])


def x_label(set_name: str) -> str:
    """What varies along a set (the plot's x axis)."""
    return {"square": "M = N = K", "skinny": "M (N=2112, K=7168)", "paper": "K (M=7296, N=256)",
            "stages": "stages (7296 x 256 x 8192)", "wave": "M (N and K vary: few tiles, long K)",
            "moe": "total M of the experts (N, K shared)", "fp8": "M = N = K (e4m3 -> bf16)",
            "attention": "seqlen (batch = 16k tokens / seqlen, heads = 2048 / head_dim)",
            "attention-bwd": "seqlen (backward; batch = 16k tokens / seqlen, heads = 2048 / head_dim)"}[set_name]


def x_value(set_name: str, m: int, n: int, k: int, stages: int) -> int:
    return {"square": m, "skinny": m, "paper": k, "stages": stages, "wave": m, "moe": m, "fp8": m}[set_name]


def utilisation_model(cfg, m: int, n: int, k: int, sm_count: int = 132) -> dict | None:
    """The SM-utilisation model of ``cfg`` on an ``m x n x k`` problem over ``sm_count`` SMs:
    ``{"mode", "clusters", "busy_max", "utilisation"}`` -- k-iterations per cluster from the
    decomposition (``cutedsl.collective.stream_k``), utilisation = all k-iterations / (SM
    clusters x the longest cluster's); fix-up costs are not modelled. None for a
    non-persistent schedule."""
    d = cfg.decomposition_for(m, n, k, sm_count=sm_count)
    if d is None:
        return None
    clusters = max(1, sm_count // (cfg.cluster[0] * cfg.cluster[1]))
    return {"mode": d.mode, "clusters": d.clusters, "busy_max": max(d.busy()),
            "utilisation": d.utilisation(clusters)}
