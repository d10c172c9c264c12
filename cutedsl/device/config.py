"""``GemmConfig``: a validated GEMM configuration (schedule, tile, stages, cluster, dtypes), the
``"gemm"`` family of the config protocol (:mod:`cutedsl.device.config_protocol`);
``GemmConfig.kernel()`` builds the kernel it names. Each field's ``metadata`` says which kernel
constructor keywords it gives (``kernel_args``); the kernel class lists those it takes
(``CONFIG_FIELDS``). Imports no MLIR."""
from __future__ import annotations

import attrs
import numpy as np

from ..arch import get_arch
from ..atom.mma_traits import ELEMENT_BYTES
from ..collective import fusion as _fusion
from ..collective.epilogue import Epilogue
from ..collective.clc_scheduler import TILE_SCHEDULERS
from ..collective.tile_scheduler import RASTERS, SWIZZLES
from ..atom.mma_traits import DTYPE_SCALES, MX_DTYPES, element_type
from . import config_build as _build
from .config_protocol import KernelConfig, always, if_set, if_taken, kernel_args, register_family
from .kernels import DEFAULT_EPILOGUE, DEFAULT_SCHEDULE, kernel_classes
from ..collective.tma_wgmma import CLUSTERS   # what the mainloop supports: one list
from ..errors import ConfigError, ConfigTypeError, checked_arguments, one_of
from .config_fields import STAGES  # noqa: F401  (re-exported: the pipeline depths, for the CLI)
from .config_fields import (default_b_major as _default_b_major, is_int as _is_int, k_tile as _k_tile,
                            problem_sizes as _problem, stages as _stages, tile as _tile)

_MAX_I32 = 2 ** 31 - 1
#: the schedules a ``GemmConfig`` can name; the last three are warp-specialized
SCHEDULES = ("multistage", "single_tile", "warp_specialized", "cooperative", "pingpong")
WARP_SPECIALIZED = SCHEDULES[2:]
PERSISTENT = SCHEDULES[3:]                      #: the persistent schedules (stream-K / split-K run on them)
MAX_SPLITS = 256                                #: split-k pieces per tile at most
#: operand types: the MMA atom's, and the block-scaled MX inputs (sm_100a) named by their elements
DTYPES = tuple(ELEMENT_BYTES) + tuple(MX_DTYPES)
OUT_DTYPES = Epilogue.OUT_DTYPES                #: what the epilogues write
EPILOGUE_KINDS = Epilogue.KINDS
B_MAJORS = ("MN", "K")                          #: B's layouts (CuTe terms); "N" is read as "MN"


def _sm100_only(asked):
    """The refusal of a field only sm_100a's warp-specialized kernel takes: ``asked(cfg)`` names
    the value asked for."""
    return lambda cfg: (f"{asked(cfg)} needs arch='sm_100a' and schedule='warp_specialized', got {cfg.arch} "
                        f"{cfg.schedule!r}")


def _b_dtype(cfg):
    """B's element type for the kernel when it differs from A's, else None (one type)."""
    return element_type(cfg.b_dtype) if cfg.b_dtype not in (None, cfg.dtype) else None


def _block_scaled(cfg):
    """The block-scale kind of an MX dtype (``"mx"`` / ``"nv"``), else False."""
    return DTYPE_SCALES[cfg.dtype].name if cfg.dtype in MX_DTYPES else False


@register_family
@attrs.frozen
class GemmConfig(KernelConfig):
    """A GEMM configuration, validated on construction (``ConfigError``).

    * ``dtype``: A's element type (and B's unless ``b_dtype`` is given): ``"f16"``, ``"bf16"``,
      ``"e4m3"`` or ``"e5m2"`` (fp8: B must be K-major, ``b_major="K"``); accumulation is f32.
    * ``b_dtype``: B's element type when it differs from A's: e4m3 and e5m2 may mix (None:
      ``dtype``).
    * ``out_dtype``: ``"f32"`` (default), ``"f16"`` or ``"bf16"``.
    * ``tile``: ``(BLOCK_M, BLOCK_N, BLOCK_K)`` (default ``(128, 128, BLOCK_K)``) with BLOCK_M in {64, 128}, BLOCK_N in
      {64, 128, 256}, BLOCK_K = one 128-byte row of K: 64 (16-bit types) or 128 (fp8). A 128 x 256
      tile uses two consumer warpgroups.
    * ``stages``: shared-memory pipeline stages 1..7 (2..7 for the warp-specialized
      schedules), or ``"auto"`` (as many as fit beside the epilogue in 227 KiB).
    * ``schedule``: ``"multistage"`` (pipelined, one warpgroup issues TMA and WGMMA),
      ``"single_tile"`` (unpipelined, atoms only), ``"warp_specialized"`` (a producer and
      consumer warpgroups, NVDSL chapter 5), ``"cooperative"`` (persistent, two consumer
      warpgroups split each tile along M; BLOCK_M 128) or ``"pingpong"`` (persistent, two
      consumer warpgroups on alternate tiles; chapter 6). See the README's schedule table.
      On sm_100a: ``"single_tile"`` (the talk's kernel) or ``"warp_specialized"`` (persistent: TMA,
      MMA and epilogue warps, the accumulator double-buffered in tensor memory). Default:
      ``"multistage"`` on sm_90a, ``"warp_specialized"`` on sm_100a.
    * ``cluster``: ``(cluster_m, cluster_n)`` CTAs per cluster, ``(1, 1)``, ``(2, 1)``, ``(1, 2)``,
      ``(2, 2)``, ``(4, 1)`` or ``(1, 4)`` (warp-specialized schedules); A is multicast along the
      cluster's N, B along M (both with 2x2).
    * ``raster``: ``"M"`` or ``"N"``, the direction the tile scheduler walks first, or
      ``"auto"`` (default): per call, along N when the problem has more tile columns than tile
      rows, else along M (CUTLASS's heuristic raster order; ``Gemm`` runs the kernel of that
      order, compiling the second one when a shape first needs it);
      ``swizzle``: 1, 2, 4 or 8 tiles per strip across it (warp-specialized schedules).
    * ``sm_count``: SMs a persistent schedule fills (None: the device's, else 132).
    * ``arch``: the target architecture (:mod:`cutedsl.arch`): ``"sm_90a"`` (Hopper, wgmma; every
      schedule) or ``"sm_100a"`` (Blackwell, tcgen05 with the accumulator in tensor memory;
      ``schedule="single_tile"`` with ``epilogue="global"`` so far). On a machine without that
      GPU a kernel runs on the emulator.
    * ``b_major``: ``"MN"`` (B is (K, N) row-major: N-major, CuTe's MN-major; ``"N"`` is accepted
      and stored as ``"MN"``) or ``"K"`` (B stored transposed, K-major). Default: ``"MN"`` for
      16-bit types, ``"K"`` for fp8 (the only layout WGMMA reads for 8-bit operands).
    * ``epilogue``: ``"tma"`` (registers -> smem -> TMA store; the default on sm_90a) or
      ``"global"`` (bounds-checked stores from registers; the default on sm_100a); or a list
      of fused nodes with an optional kind, e.g.
      ``["scale_a:row", "scale_b:col", "bias:col", "gelu", "global"]`` (sets ``fusion``).
    * ``a_major``: ``"K"`` (A is (M, K) row-major, default) or ``"MN"`` (M-major: A stored as
      (K, M) row-major, i.e. ``a`` is the transpose of a contiguous array; 16-bit types only).
    * ``batched``: the kernel takes (L, rows, cols) operands (rank-3 tensor maps; the batch in
      grid z or in the persistent tile index). ``Gemm`` switches to it by itself for 3-D
      operands, so this is rarely set by hand.
    * ``decomposition``: how a persistent schedule (cooperative, pingpong) divides the work
      (CUTLASS's DecompositionMode, :mod:`cutedsl.collective.stream_k`): ``"data-parallel"``
      (default: whole tiles), ``"stream-k"`` (the last waves' k-iterations shared evenly by all
      CTAs, partial tiles reduced in a fixed order through a workspace), ``"split-k"`` (every
      tile's K cut into ``splits`` pieces, reduced the same way) or ``"heuristic"`` (stream-k
      where data-parallel waves would leave SMs idle). ``splits``: pieces per tile for
      split-k (2..256; capped at the problem's k-tiles).
    * ``mma_sm``: 1, or 2 for CUTLASS's 2SM kernel on sm_100a (``schedule="warp_specialized"``,
      ``cluster=(2, 1)``): each CTA pair along M shares one ``tcgen05.mma`` (``cta_group::2``)
      of 2 x BLOCK_M rows (BLOCK_M 128 or 64), each CTA loading its BLOCK_M rows of A and half of B.
    * ``tile_scheduler``: ``"static"`` (persistent CTAs, as many as the SMs hold, each walking
      fixed tiles) or ``"clc"`` on sm_100a's persistent kernel: one CTA per tile, the running
      clusters cancel waiting ones by cluster launch control and take their tiles (CUTLASS's
      ``PersistentTileSchedulerSm100``; any cluster, CTA pairs too; data-parallel).
    * ``fusion``: fused epilogue nodes (:mod:`cutedsl.collective.fusion`: alpha, scale_a[:row],
      scale_b[:col], beta[:DTYPE], bias:row|col, aux, relu, gelu, gelu_tanh, silu, clamp:LO:HI,
      or ``EpilogueNode`` objects), applied in order: ``D = act(alpha * acc * scales + beta * C
      + bias)``. Their arguments are keyword arguments of the call (``alpha=``, ``bias=`` ...).
    """
    # kernel_args: the kernel keywords each field gives (config_protocol; the builder adds the
    # epilogue class and stages)
    dtype: str = attrs.field(default="f16", metadata=kernel_args(
        always("dtype", lambda c: element_type(c.dtype)),
        if_set("block_scaled", False, _block_scaled,
               _sm100_only(lambda c: f"dtype {c.dtype!r} (block-scaled MX inputs)"))))
    out_dtype: str = attrs.field(default="f32", metadata=kernel_args(always("out_dtype")))
    tile: tuple = attrs.field(default=attrs.Factory(lambda self: (128, 128, _k_tile(self.dtype)), takes_self=True),
                              converter=_tile, metadata=kernel_args(always("tile_m", lambda c: c.tile[0]),
                                                                    always("tile_n", lambda c: c.tile[1])))
    stages: object = attrs.field(default="auto", converter=_stages)
    schedule: object = attrs.field(default=None)
    b_major: str = attrs.field(default=attrs.Factory(lambda self: _default_b_major(self.dtype), takes_self=True),
                               converter=lambda v: "MN" if v == "N" else v, metadata=kernel_args(always("b_major")))
    epilogue: object = attrs.field(default=None)
    cluster: tuple = attrs.field(default=(1, 1), converter=tuple, metadata=kernel_args(if_taken("cluster")))
    raster: str = attrs.field(default="auto", metadata=kernel_args(
        if_taken("raster", lambda c: c.raster if c.raster != "auto" else "M")))   # Gemm picks per call
    swizzle: int = attrs.field(default=1, metadata=kernel_args(if_taken("swizzle")))
    sm_count: object = attrs.field(default=None, metadata=kernel_args(if_taken("sm_count")))
    arch: str = attrs.field(default="sm_90a", metadata=kernel_args(if_taken("arch")))
    b_dtype: object = attrs.field(default=None, metadata=kernel_args(if_set("b_dtype", None, _b_dtype)))
    fusion: tuple = attrs.field(default=(), converter=lambda v: v if isinstance(v, tuple) and all(
        isinstance(x, _fusion.EpilogueNode) for x in v) else _fusion.parse_nodes(v),
        metadata=kernel_args(if_set("fusion", ())))
    batched: bool = attrs.field(default=False, metadata=kernel_args(if_set("batched", False)))
    a_major: str = attrs.field(default="K", metadata=kernel_args(if_set("a_major", "K")))
    decomposition: str = attrs.field(default="data-parallel", metadata=kernel_args(
        if_set("decomposition", "data-parallel")))
    splits: object = attrs.field(default=None, metadata=kernel_args(if_set("splits", None)))
    mma_sm: int = attrs.field(default=1, metadata=kernel_args(
        if_set("mma_sm", 1, refusal=_sm100_only(lambda c: f"mma_sm={c.mma_sm} (a CTA-pair MMA)"))))
    tile_scheduler: str = attrs.field(default="static", metadata=kernel_args(
        if_set("tile_scheduler", "static",
               refusal=_sm100_only(lambda c: f"tile_scheduler={c.tile_scheduler!r} (cluster launch control)"))))
    #: why each field has its value, when the config was chosen by :meth:`for_problem`
    reasons: object = attrs.field(default=None, init=False, eq=False, repr=False, hash=False)
    FAMILY = "gemm"
    FRONT_END = "cutedsl.device.gemm:Gemm"

    def __attrs_post_init__(self):
        if self.schedule is None:                       # the architecture's default schedule
            object.__setattr__(self, "schedule", DEFAULT_SCHEDULE.get(self.arch, "multistage"))
        if not isinstance(self.schedule, str):
            raise ConfigError(f"schedule must be a string, got {self.schedule!r} ({type(self.schedule).__name__})")
        if self.epilogue is None:                       # the architecture's store: TMA on sm_90a
            object.__setattr__(self, "epilogue", DEFAULT_EPILOGUE.get(self.arch, "tma"))
        if not isinstance(self.epilogue, (str, list, tuple)):
            raise ConfigError(f"epilogue must be a string (or a list of fused nodes and a kind), got "
                              f"{self.epilogue!r} ({type(self.epilogue).__name__})")
        if isinstance(self.epilogue, (list, tuple)):    # epilogue=[nodes..., optional kind]
            self._split_epilogue_list()
        for f in attrs.fields(type(self)):      # every field annotated ``str`` must be one
            v = getattr(self, f.name)
            if f.type in ("str", str) and not isinstance(v, str):
                raise ConfigError(f"{f.name} must be a string, got {v!r} ({type(v).__name__})")
        # the values come from the layers that implement them (the MMA atom's operand types, the
        # epilogue's output types, the kernel's tiles and schedule rules): no copies here
        get_arch(self.arch)                              # ConfigError naming the known ones
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be {one_of(DTYPES)}, got {self.dtype!r}")
        if not isinstance(self.batched, (bool, np.bool_)):
            raise ConfigError(f"batched must be True or False, got {self.batched!r}")
        object.__setattr__(self, "batched", bool(self.batched))
        if self.b_dtype is not None and self.b_dtype not in DTYPES:
            raise ConfigError(f"b_dtype must be None or {one_of(DTYPES)}, got {self.b_dtype!r}")
        if self.out_dtype not in OUT_DTYPES:
            raise ConfigError(f"out_dtype must be {one_of(OUT_DTYPES)}, got {self.out_dtype!r}")
        if len(self.tile) != 3:
            raise ConfigError(f"tile must be (BLOCK_M, BLOCK_N, BLOCK_K), got {self.tile!r}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {', '.join(map(repr, SCHEDULES))}, got {self.schedule!r}")
        self._kernel_cls()                               # the architecture has this schedule
        self._check_schedule_fields()
        if self.a_major not in ("K", "MN"):
            raise ConfigError(f"a_major must be 'K' or 'MN' (M-major), got {self.a_major!r}")
        if self.b_major not in B_MAJORS:
            raise ConfigError(f"b_major must be 'MN' (or 'N') or 'K', got {self.b_major!r}")
        if not isinstance(self.epilogue, str) or self.epilogue not in EPILOGUE_KINDS:
            raise ConfigError(f"epilogue must be {one_of(EPILOGUE_KINDS)}, got {self.epilogue!r}")
        why = self._kernel_cls().can_implement(self)     # the schedule's own rules, all at once
        if why:
            raise ConfigError(why)
        self.kernel()   # fails now (SharedMemoryError) when explicit stages cannot fit

    def _split_epilogue_list(self):
        """``epilogue=["bias:col", "gelu", "global"]``: the kind (default: the architecture's,
        ``"tma"`` on sm_90a) and the fused nodes."""
        items = list(self.epilogue)
        kinds = [x for x in items if isinstance(x, str) and x in EPILOGUE_KINDS]
        if len(kinds) > 1:
            raise ConfigError(f"epilogue list names more than one store kind: {kinds}")
        if self.fusion:
            raise ConfigError("give the fused nodes either in epilogue=[...] or in fusion=..., not both")
        object.__setattr__(self, "epilogue", kinds[0] if kinds else DEFAULT_EPILOGUE.get(self.arch, "tma"))
        object.__setattr__(self, "fusion", _fusion.parse_nodes([x for x in items if x not in kinds]))

    def _check_schedule_fields(self):
        if self.cluster not in CLUSTERS or not all(_is_int(c) for c in self.cluster):
            raise ConfigError(f"cluster must be one of {', '.join(map(str, CLUSTERS))} (cluster_m, cluster_n), "
                              f"got {self.cluster!r}")
        if self.cluster != (1, 1) and self.schedule not in WARP_SPECIALIZED:
            raise ConfigError(f"cluster {self.cluster} needs a warp-specialized schedule "
                              f"({', '.join(WARP_SPECIALIZED)}), not {self.schedule!r}")
        if self.raster not in RASTERS + ("auto",):
            raise ConfigError(f"raster must be {one_of(RASTERS + ('auto',))}, got {self.raster!r}")
        if not _is_int(self.swizzle) or self.swizzle not in SWIZZLES:      # 2.0 is refused
            raise ConfigError(f"swizzle must be {one_of(SWIZZLES, quote=False)}, got {self.swizzle!r}")
        # numpy integers become plain ints (the kernels mix them with IR values)
        object.__setattr__(self, "cluster", tuple(int(c) for c in self.cluster))
        object.__setattr__(self, "swizzle", int(self.swizzle))
        if self.sm_count is not None and (not _is_int(self.sm_count) or not 1 <= self.sm_count <= 4096):
            raise ConfigError(f"sm_count must be None or an int in 1..4096, got {self.sm_count!r}")
        if self.sm_count is not None:
            object.__setattr__(self, "sm_count", int(self.sm_count))
        self._check_decomposition()
        if not _is_int(self.mma_sm) or self.mma_sm not in (1, 2):
            raise ConfigError(f"mma_sm must be 1 or 2 (CTAs sharing one MMA), got {self.mma_sm!r}")
        object.__setattr__(self, "mma_sm", int(self.mma_sm))
        if self.tile_scheduler not in TILE_SCHEDULERS:
            raise ConfigError(f"tile_scheduler must be {one_of(TILE_SCHEDULERS)}, got {self.tile_scheduler!r}")

    def _check_decomposition(self):
        from ..collective.stream_k import DECOMPOSITIONS
        d, s = self.decomposition, self.splits
        if d not in DECOMPOSITIONS:
            raise ConfigError(f"decomposition must be {one_of(DECOMPOSITIONS)}, got {d!r}")
        kinds = kernel_classes(self.arch)
        if d != "data-parallel" and not getattr(kinds.get(self.schedule), "persistent", False):
            names = [name for name, cls in kinds.items() if getattr(cls, "persistent", False)]
            raise ConfigError(f"decomposition {d!r} needs a persistent schedule ({', '.join(names)} on {self.arch}): "
                              f"its CTAs share tiles, got schedule {self.schedule!r}")
        if d == "split-k":
            if s is None or not _is_int(s) or not 2 <= s <= MAX_SPLITS:
                raise ConfigError(f"decomposition 'split-k' needs splits, an int in 2..{MAX_SPLITS} (pieces of "
                                  f"each tile's K), got {s!r}")
            object.__setattr__(self, "splits", int(s))
        elif s is not None:
            raise ConfigError(f"splits={s!r} is for decomposition 'split-k', got decomposition {d!r}")

    @classmethod
    def for_problem(cls, m, n: int = None, k: int = None, dtype: str = "f16", *, sm_count=None, l: int = 1,
                    **fixed) -> "GemmConfig":
        """The config the documented model (:mod:`cutedsl.device.heuristic`) picks for an
        ``m x n x k`` problem (or a :class:`~cutedsl.problem.GemmProblem` as ``m``, its ``l``
        included) on ``sm_count`` SMs (None: 132): tile by wave efficiency, fill and
        intensity; persistent schedule past one wave (ping-pong for short K), multistage within
        one; 2x1 cluster with
        enough tiles; raster along the longer side; stages ``"auto"``. Fields in ``fixed``
        (``out_dtype``, ``b_major``, ``epilogue``, ``tile``, ``schedule``, ...) are kept.
        :meth:`explain` says why each field has its value. ``ConfigError`` when nothing fits."""
        from .heuristic import choose
        m, n, k, l = _problem(m, n, k, l, "for_problem")
        if l > 1:
            fixed = {"batched": True, **fixed}
        if fixed.get("tile") is not None:     # the model divides by it: checked before it is used
            t = _tile(fixed["tile"])
            if len(t) != 3 or min(t) < 1:
                raise ConfigError(f"tile must be three positive ints (BLOCK_M, BLOCK_N, BLOCK_K), got {fixed['tile']!r}")
            fixed = {**fixed, "tile": t}
        cfg, reasons = choose(cls, m, n, k, {"dtype": dtype, **fixed}, sm_count, l)
        object.__setattr__(cfg, "reasons", reasons)
        return cfg

    def can_implement(self, problem=None) -> str | None:
        """Why this config cannot run, or None: its kernel class's rules (which construction
        already enforced) and, for ``problem`` (a ``GemmProblem`` or ``(m, n, k[, l])``), the
        hardware's grid limits for its tiles (what ``Gemm.grid`` raises before a launch; with
        ``l > 1``, those of the batched variant)."""
        why = self._kernel_cls().can_implement(self)
        if why or problem is None:
            return why
        from ..problem import GemmProblem
        from .gemm import grid_reason
        try:
            m, n, k, l = _problem(problem if isinstance(problem, GemmProblem) else GemmProblem(*problem),
                                  None, None, None, "can_implement")
        except ConfigError as e:
            return str(e)
        # a batch runs the batched variant (Gemm switches to it for 3-D operands)
        cfg = self if l == 1 or self.batched else attrs.evolve(self, batched=True)
        return grid_reason(cfg.kernel(), GemmProblem(m, n, k, l), self.tile)

    def fields(self) -> dict:
        """The constructor fields and their values (``GemmConfig(**cfg.fields()) == cfg``): what
        a worker process carries; fused nodes by their string spec where they have one."""
        out = super().fields()
        out["fusion"] = [_fusion.spell(nd) for nd in self.fusion]    # strings where a node has one
        return out

    def to_dict(self) -> dict:
        """:meth:`fields` as JSON (the export manifest, tuning records, ``--json``). ``ConfigError``
        for a user ``EpilogueNode`` without a string spec: it is code, which a dict cannot carry."""
        user = [nd for nd in self.fusion if not isinstance(_fusion.spell(nd), str)]
        if user:
            raise ConfigError(f"a user EpilogueNode ({type(user[0]).__name__}, no string spec) is code, which "
                              f"GemmConfig.to_dict (an export, a tuning record) does not carry")
        return super().to_dict()

    def describe(self) -> dict:
        """The report's view (``python -m cutedsl gemm --json``, bench records): the fields as
        JSON with B's type resolved (``b_dtype``: ``dtype`` when unset) and the stage count used
        (``stages``), ``chosen`` (field -> reason) when :meth:`for_problem` picked them;
        ``decomposition``/``splits`` only when not data-parallel (the front end reports how a
        persistent kernel divides a given problem)."""
        out = super().describe()
        out.update(b_dtype=self.b_dtype or self.dtype, stages=self.resolved_stages())
        if self.decomposition == "data-parallel":
            del out["decomposition"], out["splits"]
        return out

    def example_operands(self, m: int, n: int, k: int, rng, l: int = 1) -> tuple:
        """Host ``(a, b)``: standard-normal ``a`` ([L x] M x K) and ``b`` ([L x] K x N) in this
        config's dtypes, laid out in its majors (M-major A / K-major B are transposes of
        contiguous arrays), so a ``Gemm`` of this config runs them without a layout variant.
        For the CLI's main job and the tuner."""
        from ..dtypes import dtype as _dtype
        lead = (l,) if l > 1 else ()
        a = rng.standard_normal(lead + (m, k), dtype=np.float32).astype(_dtype(element_type(self.dtype)).numpy)
        b = rng.standard_normal(lead + (k, n), dtype=np.float32).astype(
            _dtype(element_type(self.b_dtype or self.dtype)).numpy)
        if self.a_major == "MN":
            a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
        if self.b_major == "K":
            b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
        return a, b

    def decomposition_for(self, m: int, n: int, k: int, l: int = 1, sm_count=None, mode=None):
        """The :class:`~cutedsl.collective.stream_k.Decomposition` this config's persistent
        kernel makes of an ``m x n x k`` problem (``l`` batches) on ``sm_count`` SMs (None: 132),
        with ``mode`` (default: the config's ``decomposition``); None for a schedule that is not
        persistent. Host arithmetic only (the bench's utilisation model, the tuner)."""
        if self.schedule not in PERSISTENT:
            return None
        from ..collective.stream_k import decompose
        from ..collective.tile_scheduler import DEFAULT_SM_COUNT, ceil_div
        from ..problem import GemmProblem
        (bm, bn, bk), (cm, cn) = self.tile, self.cluster
        tm, tn = GemmProblem(m, n, k).tiles(bm, bn)
        tiles = ceil_div(tm, cm) * ceil_div(tn, cn) * l
        clusters = max(1, (sm_count or DEFAULT_SM_COUNT) // (cm * cn))
        return decompose(mode or self.decomposition, tiles, ceil_div(k, bk), clusters, self.splits)

    @classmethod
    def parse_tile(cls, text: str) -> tuple:
        """``"128x128x64"`` -> ``(128, 128, 64)``."""
        try:
            t = tuple(int(x) for x in text.lower().split("x"))
        except ValueError:
            raise ConfigError(f"tile must look like 128x128x64, got {text!r}") from None
        return t

    def resolved_stages(self, kernel_cls=None, epilogue_cls=None) -> int:
        """The stage count used: explicit, or the most (<= 7) that fit in shared memory
        (with ``kernel_cls``'s shared-memory plan, default the schedule's kernel)."""
        return _build.resolved_stages(self, kernel_cls, epilogue_cls)

    def _kernel_cls(self):
        """The kernel class of ``schedule`` on ``arch`` (``ConfigError`` if it has none)."""
        return _build.kernel_class(self)

    def kernel(self, epilogue_cls=None, kernel_cls=None):
        """The ``Kernel`` object this config builds (``SharedMemoryError`` if it cannot fit).

        ``kernel_cls``: any ``GemmKernel`` subclass (it then decides the schedule; it gets
        ``stages`` when its constructor takes them); ``epilogue_cls``: an ``Epilogue`` subclass
        of the config's kind (``ConfigError`` otherwise). See :mod:`cutedsl.device.config_build`."""
        return _build.build_kernel(self, epilogue_cls, kernel_cls)


# an unknown field name or too many values is a ConfigTypeError naming the fields (attrs' own
# __init__ raises a bare TypeError)
GemmConfig.__init__ = checked_arguments(ConfigTypeError)(GemmConfig.__init__)
