"""Measured tuning: ``cutedsl.tune(m, n, k, dtype)`` times candidate configs on the device and
keeps the fastest, per device, in the kernel cache (``<cache>/tuning.json``).

The documented model (:func:`GemmConfig.for_problem`) picks a config without running anything;
the tuner measures. Candidates: the model's tiles x the schedules x cluster 1x1 / 2x1 that
``GemmConfig`` accepts with the fields you fix, ordered by the model's score, at most
``limit`` of them; a persistent candidate on a shape whose waves leave SMs idle is followed by
its stream-K variant (``decomposition="stream-k"``). Each is compiled (or loaded from the cache), then launched ``warmup`` times
and timed ``iters`` times on fresh ``randn`` inputs (CUDA events on a GPU; the median counts).
The winner is stored under the device (name and SM count) and the problem (M, N, K, L, dtype
and the fixed fields); ``Gemm("auto")`` and :func:`tuned_config` use it from then on, on that
device only. ``python -m cutedsl cache clear`` removes the record with the kernels.

On the emulator the timings are the emulator's wall time -- the mechanism runs, the numbers
mean nothing about a GPU (``TuneResult.emulated`` says so).
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
from pathlib import Path

import attrs
import numpy as np

from ..errors import ArgumentError, ConfigError
from ..runtime import arrays

TUNING_FORMAT = 1


@attrs.frozen
class TuneResult:
    """``config``: the fastest ``GemmConfig``; ``ms``: its median time; ``table``: ``(config,
    median ms)`` of every candidate, fastest first; ``device``: the key the winner is stored
    under; ``emulated``: True when timed on the emulator (not a GPU measurement)."""
    config: object
    ms: float
    table: tuple
    device: str
    emulated: bool

    def report(self) -> str:
        lines = [f"tuned on {self.device}" + (" (emulator: timings are not GPU times)" if self.emulated else "")]
        lines += [f"  {ms:9.4f} ms  {_label(cfg)}" for cfg, ms in self.table]
        return "\n".join(lines)


def _label(cfg) -> str:
    """``pingpong 64x128x64 s7 cluster=2x1``: what tells candidates apart."""
    cl = "" if cfg.cluster == (1, 1) else " cluster={}x{}".format(*cfg.cluster)
    dec = "" if cfg.decomposition == "data-parallel" else f" {cfg.decomposition}"
    return f"{cfg.schedule} {'x'.join(map(str, cfg.tile))} s{cfg.resolved_stages()}{cl}{dec}"


def device_key(backend) -> str:
    """``"cuda:NVIDIA H100 80GB HBM3:132"``-style key of the device a backend runs on."""
    name = getattr(backend, "name", type(backend).__name__)
    dev = backend.device_name() if hasattr(backend, "device_name") else name
    return f"{name}:{dev}:{getattr(backend, 'sm_count', None) or '-'}"


def problem_key(m: int, n: int, k: int, l: int, dtype: str, fixed: dict) -> str:
    extra = ",".join(f"{f}={fixed[f]}" for f in sorted(fixed))
    return f"{dtype}:{m}x{n}x{k}x{l}" + (f":{extra}" if extra else "")


def candidates(m: int, n: int, k: int, dtype: str = "f16", *, l: int = 1, sm_count=None, limit: int = 12,
               **fixed) -> list:
    """The configs :func:`tune` times (see the module docstring), best model score first."""
    from .config import GemmConfig
    from .heuristic import CANDIDATES, score
    from ..atom.mma_traits import mma_traits
    sms = sm_count or 132
    kt = mma_traits(dtype).k_tile
    tiles = [tuple(fixed.pop("tile")[:2])] if "tile" in fixed else sorted(
        CANDIDATES, key=lambda t: -score(m, n, *t, sms, l)[0])
    schedules = [fixed.pop("schedule")] if "schedule" in fixed else ["pingpong", "cooperative", "warp_specialized",
                                                                      "multistage"]
    clusters = [fixed.pop("cluster")] if "cluster" in fixed else [(1, 1), (2, 1)]
    out = []
    for bm, bn in tiles:
        for sched in schedules:
            for cl in clusters:
                if cl != (1, 1) and sched == "multistage":
                    continue
                try:
                    cfg = GemmConfig(dtype=dtype, tile=(bm, bn, kt), schedule=sched, cluster=cl,
                                     batched=l > 1 or fixed.get("batched", False),
                                     **{f: v for f, v in fixed.items() if f != "batched"},
                                     **({"sm_count": sm_count} if sm_count and sched != "multistage" else {}))
                except ConfigError:
                    continue
                for c in (cfg, _stream_k_variant(cfg, m, n, k, l, sm_count)):
                    if c is not None and c not in out:
                        out.append(c)
                if len(out) >= limit:
                    return out[:limit]
    return out


def _stream_k_variant(cfg, m, n, k, l, sm_count):
    """``cfg`` with ``decomposition="stream-k"`` when it is a persistent data-parallel config and
    the decomposition heuristic would share K on this shape (waves leave SMs idle), else None:
    the tuner measures whether the fix-up pays."""
    if cfg.decomposition != "data-parallel":
        return None
    d = cfg.decomposition_for(m, n, k, l, sm_count, mode="heuristic")
    if d is None or d.mode != "stream-k":
        return None
    return type(cfg)(**{**cfg.fields(), "decomposition": "stream-k"})


def tune(m: int, n: int, k: int, dtype: str = "f16", *, l: int = 1, backend="auto", configs=None, limit: int = 12,
         iters: int = 20, warmup: int = 3, store: bool = True, cache=None, seed: int = 0, **fixed) -> TuneResult:
    """Time candidate configs for an ``m x n x k`` (``l`` batches) problem of ``dtype`` on
    ``backend`` and return the fastest (:class:`TuneResult`); ``store`` keeps it in the cache
    (``cache``: a ``KernelCache``, default the user's) for ``Gemm("auto")``. ``configs``:
    your own candidates (``GemmConfig`` list) instead of :func:`candidates`; ``fixed``: config
    fields every candidate keeps (``out_dtype``, ``epilogue`` ...; fused epilogues need their
    call arguments: fix only fields without them). ``ArgumentError`` for sizes, ``iters`` or
    ``limit`` < 1 (or ``warmup`` < 0), ``ConfigError`` when no candidate is valid."""
    from .gemm import Gemm
    from ..runtime.selection import get_backend
    for name, v in (("m", m), ("n", n), ("k", k), ("l", l), ("iters", iters), ("limit", limit)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ArgumentError(f"tune: {name} must be a positive int, got {v!r}")
    if not isinstance(warmup, (int, np.integer)) or isinstance(warmup, bool) or warmup < 0:
        raise ArgumentError(f"tune: warmup must be an int >= 0, got {warmup!r}")
    be = get_backend(backend) if isinstance(backend, str) else backend
    sms = getattr(be, "sm_count", None)
    cands = list(configs) if configs is not None else candidates(m, n, k, dtype, l=l, sm_count=sms, limit=limit,
                                                                  **fixed)
    if not cands:
        raise ConfigError(f"tune: no valid candidate config for M={m}, N={n}, K={k}, {dtype} with {fixed}")
    rng = np.random.default_rng(seed)
    table = []
    for cfg in cands:
        g = Gemm(cfg, be, cache=cache)
        a, b = cfg.example_operands(m, n, k, rng, l)
        da, db = arrays.to_device(be, a, pitch_align=16), arrays.to_device(be, b, pitch_align=16)
        launch, result = g.prepare(da, db)
        try:
            for _ in range(warmup):
                launch()
            be.synchronize()
            ms = statistics.median(be.time_launches(launch, iters))
        finally:
            launch.release()
            da.free()
            db.free()
        table.append((cfg, float(ms)))
    table.sort(key=lambda r: r[1])
    res = TuneResult(table[0][0], table[0][1], tuple(table), device_key(be), getattr(be, "name", "") == "sim")
    if store:
        _store(cache, res.device, problem_key(m, n, k, l, dtype, fixed), res)
    return res


def _path(cache) -> Path:
    from ..compiler.cache import default_cache
    from ..compiler.cache_layout import TUNING
    return (cache or default_cache()).root / TUNING


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("format") == TUNING_FORMAT else {}


def _store(cache, device: str, key: str, res: TuneResult) -> None:
    from ..compiler.cache_layout import write_marker
    path = _path(cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_marker(path.parent)              # the record lives in a cutedsl cache (clear removes it)
    data = _read(path) or {"format": TUNING_FORMAT, "devices": {}}
    data["devices"].setdefault(device, {})[key] = {
        "family": res.config.FAMILY, "config": res.config.to_dict(), "ms": res.ms, "candidates": len(res.table),
        "date": datetime.date.today().isoformat(), "emulated": res.emulated}
    tmp = path.parent / f".cutedsl-tmp-tuning-{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=list) + "\n")
    os.replace(tmp, path)                  # readers see the old or the new record, never half


def tuned_config(m: int, n: int, k: int, dtype: str = "f16", *, backend, l: int = 1, cache=None, **fixed):
    """The stored winner of :func:`tune` for this problem on ``backend``'s device, or None."""
    from .config_protocol import config_family
    rec = _read(_path(cache)).get("devices", {}).get(device_key(backend), {}).get(
        problem_key(m, n, k, l, dtype, fixed))
    if not rec:
        return None
    try:                                   # a record without a family predates them: a GEMM's
        return config_family(rec.get("family", "gemm")).from_dict(rec["config"])
    except (ConfigError, TypeError):
        return None                        # a record from an older cutedsl: ignore it


__all__ = ["tune", "tuned_config", "candidates", "TuneResult", "device_key"]
