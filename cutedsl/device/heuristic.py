"""Choosing a GEMM config for a problem shape: ``GemmConfig.for_problem`` (a documented model,
not a measured tuner; every choice carries its reason, ``GemmConfig.explain()``).

The model, for ``M x N x K`` on ``sm_count`` SMs (132 without a device):

1. **Tile** (BLOCK_M x BLOCK_N, BLOCK_K = the MMA traits' K tile). Every candidate the kernels
   implement is scored by ``wave efficiency x fill x intensity``: *wave efficiency* = tiles /
   (waves x SMs), the share of SM slots the last wave does not leave idle (wave quantisation);
   *fill* = (M x N) / (tiles x BLOCK_M x BLOCK_N), the share of the computed tile area inside
   the problem; *intensity* = the tile's FLOPs per byte loaded, ``BM*BN / (BM+BN)``, relative to
   the 128 x 256 tile's. The best score wins (ties: the larger tile).
2. **Schedule.** More tiles than SMs: a persistent schedule -- ``pingpong`` when the tile has
   at most 128 x 128 elements and K is short (<= 8 k-tiles: the epilogue is a large share of
   the work and ping-pong overlaps it with the other warpgroup's MMAs), else ``cooperative``
   (BLOCK_M 128; two consumer warpgroups split each tile). At most one wave: the
   ``multistage`` kernel at its deepest pipeline (one CTA per tile; on an H200 it ran 4-11 %
   ahead of the non-persistent ``warp_specialized`` one on every one-wave problem timed,
   docs/performance.md) -- unless a ``decomposition`` other than data-parallel is given
   (stream-K / split-K share tiles between persistent CTAs).
3. **Cluster.** ``2x1`` (B multicast to two CTAs along M) when the problem has at least two tile
   rows and at least one full wave of tiles, so the pairs have work; else ``1x1``.
4. **Raster and swizzle.** The persistent scheduler walks the longer tile dimension first
   (``raster="N"`` when there are more tile columns than rows); swizzle 2 when both dimensions
   have at least 8 tiles (neighbouring units then share A or B tiles in L2), else 1.
5. **Stages**: ``"auto"`` (as many as fit in shared memory beside the epilogue).

What the caller fixes (dtype, out_dtype, b_major, epilogue, arch, or any field passed to
``for_problem``) is kept. On sm_100a the schedule is its persistent warp-specialized kernel
(:data:`ARCH_FIXED`); tile, cluster, raster and swizzle follow the rules above. The model is
checked on a table of shapes in the tests; it has not been calibrated on a GPU yet (see
docs/performance.md once a GPU run exists).
"""
from __future__ import annotations

from ..atom.mma_traits import element_type, mma_traits
from ..collective.tile_scheduler import DEFAULT_SM_COUNT
from ..problem import GemmProblem

#: tile candidates (BLOCK_M, BLOCK_N) in the order ties are broken (larger first)
CANDIDATES = ((128, 256), (128, 128), (64, 256), (128, 64), (64, 128), (64, 64))
SHORT_K_TILES = 8           #: K at most this many k-tiles is "short" (ping-pong pays off)
SWIZZLE_MIN_TILES = 8       #: tiles along both dimensions before swizzle 2 helps
#: an architecture whose kernels are fewer than sm_90a's: the fields the model fixes there, why
ARCH_FIXED = {"sm_100a": ({"schedule": "warp_specialized", "epilogue": "global"},
                          "sm_100a's persistent tcgen05 kernel (TMA, MMA and epilogue warps; it stores D "
                          "from registers)")}


def score(m: int, n: int, bm: int, bn: int, sms: int, l: int = 1) -> tuple:
    """``(score, wave efficiency, fill, intensity)`` of a BM x BN tile over ``l`` batches (see
    module docstring)."""
    tm, tn = GemmProblem(m, n, 0).tiles(bm, bn)
    tiles = tm * tn * l
    waves = -(-tiles // sms)
    wave_eff = tiles / (waves * sms)
    fill = (m * n) / (tm * tn * bm * bn)
    intensity = (bm * bn / (bm + bn)) / (128 * 256 / (128 + 256))
    return wave_eff * fill * intensity, wave_eff, fill, intensity


def choose(config_cls, m: int, n: int, k: int, fixed: dict, sm_count=None, l: int = 1) -> tuple:
    """``(GemmConfig, reasons)``: the config the model picks for ``m x n x k`` with the fields in
    ``fixed`` kept; ``reasons`` maps each chosen field to why. Raises ``ConfigError`` when the
    fixed fields leave nothing valid."""
    from ..errors import ConfigError
    sms = sm_count or DEFAULT_SM_COUNT
    base = {f: v for f, v in fixed.items() if v is not None}
    k_tile = base["tile"][2] if "tile" in base else mma_traits(element_type(base.get("dtype", "f16"))).k_tile
    kt = -(-k // k_tile)
    tried = []
    # best score first; the sort is stable, so ties keep CANDIDATES' order (larger tiles first)
    cands = [tuple(base["tile"][:2])] if "tile" in base else sorted(CANDIDATES,
                                                                     key=lambda t: -score(m, n, *t, sms, l)[0])
    for bm, bn in cands:
        for fallback in (False, True):
            got = _try(config_cls, m, n, bm, bn, kt, k_tile, sms, sm_count, base, fallback, tried, l)
            if got is not None:
                return got
    raise ConfigError(f"no configuration fits M={m}, N={n}, K={k} with {base}: " + "; ".join(tried))


def _try(config_cls, m, n, bm, bn, kt, k_tile, sms, sm_count, base, fallback, tried, l=1):
    """The config for tile BM x BN (``fallback``: the multistage schedule, for fields the
    model's schedule cannot run, e.g. one stage) and its reasons, or None (why in ``tried``)."""
    from ..errors import ConfigError
    if fallback and "schedule" in base:
        return None
    tm, tn = GemmProblem(m, n, 0).tiles(bm, bn)
    tiles = tm * tn * l                     # every batch's tiles share the SMs
    s, wave_eff, fill, inten = score(m, n, bm, bn, sms, l)
    kw = dict(base)
    why = {}
    if "tile" not in base:
        kw["tile"] = (bm, bn, k_tile)
        why["tile"] = (f"{bm}x{bn}: score {s:.3f} = wave efficiency {wave_eff:.2f} ({tiles} tiles on {sms} SMs) "
                       f"x fill {fill:.2f} x intensity {inten:.2f}")
    if fallback:
        kw["schedule"] = "multistage"
        why["schedule"] = f"multistage: the warp-specialized schedules cannot run the given fields ({tried[-1]})"
    elif "schedule" not in base and base.get("arch") in ARCH_FIXED:
        fixed, reason = ARCH_FIXED[base["arch"]]
        for f, v in fixed.items():
            kw.setdefault(f, v)
        why["schedule"] = f"{kw['schedule']}: {reason}"
    elif "schedule" not in base:
        shared = base.get("decomposition", "data-parallel") != "data-parallel"   # needs a persistent schedule
        if tiles > sms or shared:
            pp = bm * bn <= 128 * 128 and kt <= SHORT_K_TILES
            kw["schedule"] = "pingpong" if pp or bm != 128 else "cooperative"
            why["schedule"] = (f"{kw['schedule']}: " + (f"{tiles} tiles > {sms} SMs (persistent); " if tiles > sms
                                                        else f"decomposition {base['decomposition']} (persistent); ")
                               + (f"K is short ({kt} k-tiles): overlap the epilogue" if pp
                                  else "BLOCK_M 64: ping-pong" if bm != 128 else
                                  f"{kt} k-tiles: two consumers split each tile"))
        else:
            # measured (H200, 2026-11-28, docs/performance.md): with one CTA per tile the
            # multistage kernel at its deepest pipeline ran 4-11 % ahead of warp_specialized on
            # every one-wave problem timed (7296 x 256 x K at three K, 256 x 2112 x 7168)
            kw["schedule"] = "multistage"
            why["schedule"] = (f"multistage: {tiles} tiles fit one wave of {sms} SMs (one CTA per tile: "
                               f"no persistent loop to feed; measured ahead of warp_specialized there)")
    ws = kw.get("schedule", "multistage") in ("warp_specialized", "cooperative", "pingpong")
    if "cluster" not in base and ws and base.get("mma_sm") == 2:
        kw["cluster"] = (2, 1)
        why["cluster"] = "2x1: mma_sm=2, a CTA pair along M shares each MMA"
    elif "cluster" not in base and ws:
        two = tm >= 2 and tiles >= sms
        kw["cluster"] = (2, 1) if two else (1, 1)
        why["cluster"] = (f"2x1: B multicast to CTA pairs along M ({tm} tile rows, {tiles} tiles)" if two
                          else "1x1: one tile row, no pair along M" if tm < 2
                          else f"1x1: fewer tiles ({tiles}) than SMs ({sms}): a pair would only add synchronisation")
    if ws and "raster" not in base:
        kw["raster"] = "N" if tn > tm else "M"
        why["raster"] = f"{kw['raster']}: {tm} tile rows x {tn} tile columns (walk the longer first)"
    if ws and "swizzle" not in base:
        kw["swizzle"] = 2 if min(tm, tn) >= SWIZZLE_MIN_TILES else 1
        why["swizzle"] = (f"{kw['swizzle']}: " + ("both dimensions have >= 8 tiles: strips share L2"
                                                  if kw["swizzle"] == 2 else "few tiles: no strips"))
    if ws and sm_count is not None and "sm_count" not in base:
        kw["sm_count"] = sm_count
    kw.setdefault("stages", "auto")
    try:
        cfg = config_cls(**kw)
    except ConfigError as e:
        tried.append(f"{bm}x{bn} {kw.get('schedule', 'multistage')}: {e}")
        return None
    why["stages"] = (f"{cfg.resolved_stages()} (auto: as many as fit in shared memory)" if kw["stages"] == "auto"
                     else f"{kw['stages']} (given)")
    reasons = {f: why.get(f, "given") for f in ("tile", "schedule", "cluster", "raster", "swizzle", "stages")
               if f in why or f in base}
    return cfg, reasons


def explain_text(reasons: dict) -> str:
    return "\n".join(f"{f}: {r}" for f, r in reasons.items())


__all__ = ["choose", "score", "CANDIDATES"]
