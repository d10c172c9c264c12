"""Command-line argument helpers shared by every subcommand (``cutedsl.cli``, the bench
harness's ``bench``/``bundle``): one-line usage errors, typed ``type=`` factories, the ``gemm``
options and the ``GemmConfig`` they describe. Below both the CLI and the harness (neither
imports the other's internals through it)."""
from __future__ import annotations

import argparse
import json

MAX_I32 = 2 ** 31 - 1
#: --check: max |D - ref| / max |ref| (fp8: half an ulp of 3 / 2 mantissa bits at the top value)
TOLERANCE = {"f32": 2e-3, "f16": 4e-3, "bf16": 1.6e-2, "e4m3": 6.3e-2, "e5m2": 1.25e-1}
#: the fused-epilogue options, in the order their nodes apply: D = act(alpha acc scales + beta C + bias)
FUSION_OPTIONS = ("--scale", "--alpha", "--beta", "--bias", "--aux", "--act")


# -- user mistakes: one line on stderr naming the option and what it accepts, exit status 2 ------
# Every subcommand uses these: ``ArgParser`` (argparse's own errors, ``type=``/``choices=``
# failures), the ``type=`` factories below, and ``UsageError`` for checks made after parsing.

class UsageError(Exception):
    """A user mistake found after parsing: ``option`` (e.g. ``"--tile"``) and what is wrong.
    :func:`main` prints ``<prog>: error: argument <option>: <message>`` and returns 2."""

    def __init__(self, option: str, message: str):
        super().__init__(f"argument {option}: {message}")
        self.option = option


class ArgParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line on stderr (no usage dump, no
    traceback) with exit status 2; its subparsers are ``ArgParser`` too."""

    #: set by :func:`main` for ``gemm --json``: errors are also one JSON object on stdout
    json_errors = False

    def error(self, message):
        if ArgParser.json_errors:
            print(json.dumps({"error": message}))
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _num(v: int) -> str:
    """``2147483647`` -> ``2^31-1`` (limits read better as powers of two)."""
    return f"2^{(v + 1).bit_length() - 1}-1" if v > 2 ** 20 and (v + 1) & v == 0 else str(v)


def int_in(lo: int, hi: int | None = None):
    """``type=`` for an integer in ``lo..hi`` (``hi=None``: no upper bound); the error names
    the accepted range."""
    span = f"{_num(lo)}..{_num(hi)}" if hi is not None else f">= {_num(lo)}"

    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"expected an integer {span if hi is None else 'in ' + span}, "
                                             f"got {text!r}")
        return v
    return parse


def f32_arg(text: str) -> float:
    """``type=`` for a scalar the kernel takes as an f32 (``--alpha``, ``--beta``): a finite
    number with |v| <= 3.4028235e38 (a NaN or Inf scalar makes every result element
    non-finite; larger values do not fit the parameter)."""
    top = 3.4028234663852886e38              # float32's largest finite value
    try:
        v = float(text)
    except ValueError:
        v = None
    if v is None or not abs(v) <= top:
        raise argparse.ArgumentTypeError(f"expected a finite number with |value| <= {top:.8g} (an f32 kernel "
                                         f"parameter), got {text!r}")
    return v


def stages_arg(text: str):
    """``type=`` for ``--stages``: ``auto`` or a pipeline depth the mainloops support (1..7)."""
    from .device.config import STAGES
    lo, hi = STAGES.start, STAGES.stop - 1
    if text == "auto":
        return text
    try:
        return int_in(lo, hi)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer in {lo}..{hi}, got {text!r}") from None


def tile_arg(text: str) -> tuple:
    """``type=`` for ``--tile``: ``BLOCK_MxBLOCK_NxBLOCK_K`` (the values are checked by GemmConfig)."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected BLOCK_MxBLOCK_NxBLOCK_K such as 128x128x64, got {text!r}")
    return tuple(int(p) for p in parts)


def groups_arg(text: str) -> list:
    """``type=`` for ``--groups``: comma-separated ``MxNxK`` problems (each extent 0..2^31-1)."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            dims = tuple(int(x) for x in part.lower().split("x"))
        except ValueError:
            dims = ()
        if len(dims) != 3 or not all(0 <= d <= MAX_I32 for d in dims):
            raise argparse.ArgumentTypeError(f"expected MxNxK,MxNxK,... (extents 0..{MAX_I32}), got {part!r}")
        out.append(dims)
    if not out:
        raise argparse.ArgumentTypeError(f"expected MxNxK,MxNxK,..., got {text!r}")
    return out


def cluster_arg(text: str) -> tuple:
    """``type=`` for ``--cluster``: ``MxN`` CTAs per cluster, one of ``GemmConfig``'s clusters
    (1x1, 2x1, 1x2, 2x2, 4x1, 1x4)."""
    from .device.config import CLUSTERS
    parts = text.lower().split("x")
    c = tuple(int(p) for p in parts) if len(parts) == 2 and all(p.isdigit() for p in parts) else ()
    if c not in CLUSTERS:
        names = [f"{m}x{n}" for m, n in CLUSTERS]
        raise argparse.ArgumentTypeError(f"expected {', '.join(names[:-1])} or {names[-1]} (cluster_m x cluster_n), "
                                         f"got {text!r}")
    return c


def config_options(args) -> tuple:
    """``((field, option), ...)``: the GemmConfig fields ``args`` sets, in field order; the
    option of field ``out_dtype`` is ``--out-dtype`` (a new config field with a same-named
    option is picked up without changes here)."""
    import attrs
    from .device import GemmConfig
    given = "/".join(o for o in FUSION_OPTIONS if getattr(args, o[2:], None) not in (None, False))
    named = {"fusion": given or "--act", "batched": "--batch"}
    return tuple((f.name, named.get(f.name, "--" + f.name.replace("_", "-")))
                 for f in attrs.fields(GemmConfig) if hasattr(args, f.name))


def fusion_nodes(args) -> tuple | None:
    """The fused epilogue node specs the ``gemm`` options ask for (None: none), in the order
    they apply: scales, alpha, beta * C, bias, aux (the pre-activation), activation."""
    nodes = []
    if args.scale == "tensor":
        nodes += ["scale_a", "scale_b"]
    elif args.scale == "rowcol":
        nodes += ["scale_a:row", "scale_b:col"]
    if args.alpha is not None:
        nodes.append("alpha")
    if args.beta is not None:
        nodes.append("beta")
    if args.bias:
        nodes.append(f"bias:{args.bias}")
    if args.aux:
        nodes.append("aux")
    if args.act:
        nodes.append(args.act)
    return tuple(nodes) or None


def gemm_config(args):
    """The ``GemmConfig`` the ``gemm`` arguments describe, validated as a whole (so
    ``--stages 7 --schedule warp_specialized`` is accepted although 7 stages do not fit the
    default schedule). When it is invalid, the ``UsageError`` names the options responsible:
    those whose reset to the default makes the config valid (``--tile/--stages`` for a
    combination), else the first option, in field order, from which on the config fails."""
    from .device import GemmConfig
    from .errors import ConfigError

    def fails(**kw):
        try:
            return GemmConfig(**kw) and None
        except ConfigError as e:
            return e

    if hasattr(args, "act") and not hasattr(args, "fusion"):
        args.fusion = fusion_nodes(args)
    if getattr(args, "a_major", None) == "M":
        args.a_major = "MN"
    if hasattr(args, "batch") and not hasattr(args, "batched"):
        args.batched = True if args.batch is not None else None
    options = config_options(args)
    fields = {f: getattr(args, f) for f, _ in options}
    if fields.get("schedule") == "auto":     # the model picks what the user left open
        fixed = {f: v for f, v in fields.items() if f != "schedule" and v is not None and v != "auto"}
        try:
            return GemmConfig.for_problem(args.m, args.n, args.k, l=getattr(args, "batch", None) or 1, **fixed)
        except ConfigError as e:
            given = [o for f, o in options if f in fixed and f not in ("dtype", "b_dtype", "out_dtype", "b_major", "arch")]
            raise UsageError("/".join(given) or "--schedule", str(e)) from None
    options = tuple((f, o) for f, o in options if fields[f] is not None)    # None: the config's default
    fields = {f: v for f, v in fields.items() if v is not None}
    err = fails(**fields)
    if err is None:
        return GemmConfig(**fields)
    # leaving an option out gives its default (some depend on others: BLOCK_K on the dtype)
    culprits = [o for f, o in options if fails(**{g: v for g, v in fields.items() if g != f}) is None]
    if not culprits:                    # no single option to blame: where it starts to fail
        sofar = {}
        for f, o in options:
            sofar[f] = fields[f]
            if fails(**sofar) is not None:
                culprits = [o]
                break
    raise UsageError("/".join(culprits) or options[0][1], str(err))


def add_gemm_parser(sub):
    """The ``gemm`` subcommand's options (also parsed by the bundle for its main-job step).
    Choices come from the layers that implement them (config, atom, epilogue, scheduler)."""
    from .arch import ARCHS
    from .collective.tile_scheduler import RASTERS, SWIZZLES
    from .collective.stream_k import DECOMPOSITIONS
    from .device.config import DTYPES, EPILOGUE_KINDS, MAX_SPLITS, OUT_DTYPES, SCHEDULES, STAGES
    g = sub.add_parser("gemm", help="compile, run and report D = A @ B")
    size = int_in(1, MAX_I32)
    g.add_argument("--m", type=size, default=None, help=f"rows of A and D, 1..{MAX_I32} (required without --groups)")
    g.add_argument("--n", type=size, default=None, help=f"columns of B and D, 1..{MAX_I32} (required without --groups)")
    g.add_argument("--k", type=size, default=None, help=f"columns of A, rows of B, 1..{MAX_I32} (required without "
                                                       f"--groups)")
    g.add_argument("--groups", type=groups_arg, default=None, metavar="MxNxK,...",
                   help="a grouped GEMM: one persistent launch over these problems (each MxNxK; 0 allowed), "
                        "schedule cooperative or pingpong (sm_90a), warp_specialized (sm_100a); one report line per group")
    g.add_argument("--batch", type=int_in(1, 65535), default=None, metavar="L",
                   help="a batch of L GEMMs: A (L, M, K), B (L, K, N), D (L, M, N); 1..65535")
    g.add_argument("--dtype", choices=list(DTYPES), default="f16")
    g.add_argument("--b-dtype", choices=list(DTYPES), default=None,
                   help="B's type when it differs from A's (e4m3 and e5m2 mix); default: --dtype")
    g.add_argument("--out-dtype", choices=list(OUT_DTYPES), default="f32")
    # tile, cluster, raster and swizzle default to None: with --schedule auto the model picks
    # them, else GemmConfig's defaults (128x128x64, 1x1, M, 1) apply
    g.add_argument("--tile", type=tile_arg, default=None, help="BLOCK_MxBLOCK_NxBLOCK_K (default: 128x128x64, 128x128x128 "
                                                              "for fp8, or chosen with --schedule auto)")
    g.add_argument("--stages", type=stages_arg, default="auto", help=f"auto or {STAGES.start}..{STAGES.stop - 1}")
    g.add_argument("--schedule", choices=["auto", *SCHEDULES], default="auto",
                   help="auto (default): schedule, tile, cluster, raster and swizzle chosen for the problem "
                        "(GemmConfig.for_problem; options given are kept)")
    g.add_argument("--cluster", type=cluster_arg, default=None, metavar="MxN",
                   help="CTAs per cluster, cluster_m x cluster_n: 1x1, 2x1, 1x2, 2x2, 4x1 or 1x4 (warp-specialized "
                        "schedules)")
    g.add_argument("--mma-sm", type=int, choices=[1, 2], default=None,
                   help="sm_100a: 2 = CUTLASS's 2SM kernel, a CTA pair along M sharing one tcgen05.mma "
                        "of 256 rows (--tile 128x...) or 128 (--tile 64x...); default 1")
    g.add_argument("--tile-scheduler", choices=["static", "clc"], default=None,
                   help="sm_100a persistent kernel: static (default; each CTA walks fixed tiles) or clc (cluster "
                        "launch control: one CTA per tile, the running ones cancel the waiting ones and take "
                        "their tiles)")
    g.add_argument("--raster", choices=[*RASTERS, "auto"], default=None,
                   help="the tile scheduler walks along M or N first; auto (default): along the dimension with "
                        "more tiles")
    g.add_argument("--swizzle", type=int, choices=list(SWIZZLES), default=None, help="tiles per rasterization strip")
    g.add_argument("--sm-count", type=int_in(1, 4096), default=None,
                   help="SMs a persistent schedule fills, 1..4096 (default: the device's, else 132)")
    g.add_argument("--decomposition", choices=list(DECOMPOSITIONS), default=None,
                   help="how a persistent schedule divides the work (CUTLASS's DecompositionMode): data-parallel "
                        "(default), stream-k, split-k (with --splits) or heuristic (stream-k where waves leave "
                        "SMs idle)")
    g.add_argument("--splits", type=int_in(2, MAX_SPLITS), default=None,
                   help=f"pieces of each tile's K for --decomposition split-k, 2..{MAX_SPLITS}")
    g.add_argument("--a-major", choices=["K", "MN", "M"], default=None,
                   help="A's layout: K (row-major (M, K), default) or MN (M-major: the run's A is the "
                        "transpose of a (K, M) array; M is accepted); 16-bit types")
    g.add_argument("--b-major", choices=["MN", "K", "N"], default=None,
                   help="B's layout: MN (N-major, (K, N) row-major; N is accepted) or K (transposed); "
                        "default MN for 16-bit types, K for fp8")
    g.add_argument("--arch", choices=list(ARCHS), default="sm_90a", help="target architecture")
    g.add_argument("--epilogue", choices=list(EPILOGUE_KINDS), default=None,
                   help="how D is stored: tma (registers -> smem -> TMA store) or global (from registers); "
                        "default: tma on sm_90a, global on sm_100a")
    f = g.add_argument_group("fused epilogue", "D = act(alpha * acc * scales + beta * C + bias); the "
                             "vectors and C are random inputs of the run, the scalars as given")
    f.add_argument("--scale", choices=["tensor", "rowcol"], default=None,
                   help="tensor: scalar scale_a, scale_b; rowcol: scale_a per row (M,), scale_b per column (N,)")
    f.add_argument("--alpha", type=f32_arg, default=None, help="multiply the accumulator by ALPHA")
    f.add_argument("--beta", type=f32_arg, default=None, help="add BETA * C (C: an M x N input in the out dtype)")
    f.add_argument("--bias", choices=["row", "col"], default=None, help="add an f32 bias per row (M,) or column (N,)")
    f.add_argument("--aux", action="store_true", help="also store the pre-activation (a second M x N output)")
    f.add_argument("--act", default=None, metavar="ACT",
                   help="relu, gelu, gelu_tanh, silu or clamp:LO:HI")
    g.add_argument("--backend", choices=["auto", "cuda", "sim", "none"], default="auto")
    g.add_argument("--check", action="store_true", help="compare with a float64 numpy reference")
    g.add_argument("--seed", type=int_in(0, 2 ** 64 - 1), default=0, help="input seed, 0..2^64-1")
    g.add_argument("--iters", type=int_in(1, 100_000), default=50,
                   help="timed launches on a GPU (median reported), 1..100000")
    g.add_argument("--dump", metavar="DIR", help="write IR before/after lowering, PTX, SASS there")
    g.add_argument("--load", metavar="DIR", default=None,
                   help="run a GEMM exported with Gemm.save / cutedsl.load (its config and kernel; the config "
                        "options are ignored; no MLIR needed)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    return g


def sass_summary(sass, extra=()) -> str:
    """The report's one-line SASS summary of a kernel's opcode histogram (``None``: no nvdisasm
    here): the tensor-core opcode, which names the operand width -- HGMMA (16-bit, tf32), QGMMA
    (fp8) on sm_90a; the tcgen05 family (UTCHMMA, UTCQMMA ...), its commit (UTCBAR) and TMEM
    loads (LDTM) on sm_100a -- then TMA, barriers, stores, the opcodes in ``extra`` (e.g. MUFU and
    SHFL for attention's softmax), and the total."""
    if sass is None:
        return "not available here (no nvdisasm)"
    tc = sorted(k for k in sass if k.startswith("UTC") and k.endswith("MMA"))
    if tc:
        keys = (*tc, "UTCBAR", "UTCCP", "LDTM", "UTMALDG", "UTMASTG", "SYNCS", "BAR", "STG", "STS", *extra)
    else:
        mma = "QGMMA" if sass.get("QGMMA") else "HGMMA"
        keys = (mma, "UTMALDG", "UTMASTG", "SYNCS", "BAR", "STG", "STS", "WARPGROUP", "USETMAXREG", *extra)
    return ", ".join(f"{k} {sass.get(k, 0)}" for k in keys) + f"  ({sum(sass.values())} instructions)"


def launch_ms(backend, launch, first_s: float, iters: int, rep: dict) -> float:
    """Milliseconds of one launch of ``launch`` (already run once, taking ``first_s`` seconds of
    host wall time): on a GPU the median of ``iters`` launches by CUDA events after 3 warm-up
    launches; on the emulator the first run's wall time, and its adversarial seed (if any) in
    ``rep["chaos"]`` so the run can be replayed."""
    if backend.name == "cuda":
        for _ in range(3):
            launch()
        backend.synchronize()
        times = sorted(backend.time_launches(launch, max(iters, 1)))
        return times[len(times) // 2]
    seed = (getattr(backend, "last_launch", None) or {}).get("chaos")
    if seed is not None:
        rep["chaos"] = seed         # the emulator's adversarial-mode seed (replay with it)
    return first_s * 1e3
