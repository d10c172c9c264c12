"""Which ``GemmConfig`` s a sweep times.

Schedules are discovered, not listed: every name in :data:`KNOWN_SCHEDULES` (and a
``GemmConfig.SCHEDULES`` attribute, if the config class grows one) that ``GemmConfig`` accepts
right now. A schedule added to the library is therefore benchmarked and bundled without an
edit here.
"""
from __future__ import annotations

from ..arch import DEFAULT
from ..device import GemmConfig
from ..errors import CuteDSLError
from .shapes import STAGE_STUDY, WAVE_DECOMPOSITIONS

#: every schedule name the project has used or announced (CUTLASS's kernel schedules)
KNOWN_SCHEDULES = ("multistage", "single_tile", "warp_specialized", "cooperative", "pingpong")

#: tiles a default sweep times (BLOCK_M x BLOCK_N x BLOCK_K)
DEFAULT_TILES = ((128, 128, 64), (128, 256, 64))


def accepted_schedules(arch: str | None = None) -> list:
    """Schedule names ``GemmConfig`` accepts (on ``arch``; None: the default architecture) with
    at least one of the default tiles, in a stable order."""
    names = list(KNOWN_SCHEDULES) + [s for s in getattr(GemmConfig, "SCHEDULES", ()) if s not in KNOWN_SCHEDULES]
    on = {"arch": arch} if arch else {}
    return [s for s in names if any(try_config(schedule=s, tile=t, **on) is not None for t in DEFAULT_TILES)]


def try_config(**kw):
    """``GemmConfig(**kw)`` or None when the library rejects the combination."""
    try:
        return GemmConfig(**kw)
    except CuteDSLError:
        return None


def parse_config(spec: str, base: dict | None = None) -> GemmConfig:
    """``"tile=128x256x64,stages=4,schedule=pingpong,cluster=2x1"`` -> ``GemmConfig`` (keys are
    ``GemmConfig`` fields; ``ConfigError`` for a bad value, ``ValueError`` for a bad key)."""
    kw = dict(base or {})
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, val = part.partition("=")
        if not sep:
            raise ValueError(f"--config item {part!r} must look like key=value")
        key = key.strip().replace("-", "_")
        if key not in attrs_fields():
            raise ValueError(f"--config key {key!r} is not a GemmConfig field ({', '.join(attrs_fields())})")
        if key == "tile":
            kw[key] = GemmConfig.parse_tile(val)
        elif key == "stages":
            kw[key] = val if val == "auto" else int(val)
        elif key in ("swizzle", "sm_count", "mma_sm", "splits"):
            kw[key] = int(val)
        elif key == "batched":
            kw[key] = val.strip().lower() in ("1", "true", "yes")
        elif key == "cluster":                          # 2x1, as the gemm CLI writes it
            kw[key] = tuple(int(x) for x in val.lower().split("x"))
        else:
            kw[key] = val
    return GemmConfig(**kw)


def attrs_fields() -> list:
    import attrs
    return [f.name for f in attrs.fields(GemmConfig) if f.init]


def sweep_configs(set_name: str, *, tiles=None, schedules=None, stages=None, base=None, rejected=None) -> list:
    """The configs a set is timed with: tiles x schedules x stages, skipping combinations the
    library rejects (e.g. single_tile with a 128x256 tile, 7 stages that do not fit); a list
    passed as ``rejected`` receives each rejection's ``CuteDSLError``.
    For ``stages`` the stage counts default to 1..7, otherwise to ``"auto"``; the ``wave``
    set times each persistent config once per decomposition of :data:`~.shapes.WAVE_DECOMPOSITIONS`
    (unless ``base`` fixes one)."""
    base = dict(base or {})
    if tiles is None:               # the default tiles with the dtype's BLOCK_K (one 128-B row)
        from ..atom.mma_traits import element_type, mma_traits
        kt = mma_traits(element_type(base.get("dtype", "f16"))).k_tile
        tiles = [(bm, bn, kt) for bm, bn, _ in DEFAULT_TILES]
    tiles = list(tiles)
    schedules = list(schedules or accepted_schedules())
    if stages is None:
        stages = list(STAGE_STUDY) if set_name == "stages" else ["auto"]
    if set_name == "moe":           # grouped problems: the architecture's grouped kernels' schedules
        from ..kernel.grouped import grouped_kernels
        schedules = [s for s in schedules if s in grouped_kernels(base.get("arch", DEFAULT.name))]
    decomps = [{}]
    if set_name == "wave" and "decomposition" not in base:
        decomps = [{"decomposition": d} for d in WAVE_DECOMPOSITIONS]
    out = []
    for sched in schedules:
        for tile in tiles:
            for st in stages:
                for dec in decomps:
                    if dec and dec["decomposition"] != "data-parallel" and sched not in ("cooperative", "pingpong"):
                        continue
                    try:
                        cfg = GemmConfig(**{**base, "tile": tuple(tile), "schedule": sched, "stages": st, **dec})
                    except CuteDSLError as e:
                        if rejected is not None:
                            rejected.append(e)
                        continue
                    if cfg not in out:
                        out.append(cfg)
    return out


def label(cfg: GemmConfig) -> str:
    """Short readable name: ``multistage 128x256x64 s4`` (types shown unless f16 -> f16)."""
    t = "x".join(map(str, cfg.tile))
    extra = "".join(f" {k}={getattr(cfg, k)}" for k, d in (("b_major", "MN"), ("epilogue", "tma"), ("raster", "auto"),
                                                         ("swizzle", 1), ("sm_count", None), ("mma_sm", 1),
                                                         ("tile_scheduler", "static"))
                    if getattr(cfg, k) != d)
    if cfg.cluster != (1, 1):
        extra += " cluster={}x{}".format(*cfg.cluster)
    if cfg.arch != DEFAULT.name:
        extra += f" {cfg.arch}"
    if cfg.decomposition != "data-parallel":
        extra += f" {cfg.decomposition}" + (f"/{cfg.splits}" if cfg.splits else "")
    if (cfg.dtype, cfg.out_dtype, cfg.b_dtype) != ("f16", "f16", None):   # the sweep's default types stay implicit
        ab = cfg.dtype if cfg.b_dtype in (None, cfg.dtype) else f"{cfg.dtype}x{cfg.b_dtype}"
        extra += f" {ab}->{cfg.out_dtype}"
    return f"{cfg.schedule} {t} s{cfg.resolved_stages()}{extra}"


def config_dict(cfg: GemmConfig) -> dict:
    """A record's config: the config protocol's report view (``describe()``) and
    the stage count used as ``resolved_stages``."""
    d = cfg.describe()
    d["resolved_stages"] = cfg.resolved_stages()
    return d
