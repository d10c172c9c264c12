"""torch integration: ``cutedsl.torch.gemm(a, b, *, config=None, out=None)`` and the custom ops
``torch.ops.cutedsl.gemm`` / ``torch.ops.cutedsl.gemm_out`` (``torch.library.custom_op``).

``a`` (M, K) and ``b`` (K, N) are CUDA tensors of one dtype (float16 or bfloat16; B row-major,
or a transposed view of an (N, K) tensor with ``config.b_major == "K"``), used in place. The
result is a new (M, N) CUDA tensor of the config's output dtype (float32 by default), or
``out``, filled. ``config``: a :class:`~cutedsl.GemmConfig`, or None for the one
``GemmConfig.for_problem`` picks for the shape. One compiled kernel per config, kept for later
calls.

Each op has a fake (meta) implementation giving the output's shape, dtype and strides without
running anything, so ``torch.compile`` traces calls into the graph (no graph break). The
result's rows are padded to 16 bytes (TMA's pitch rule): its strides are ``(pitch, 1)``.

Errors before anything runs: CPU tensors (the kernels run on CUDA memory only; use
``torch.matmul`` on the CPU), other dtypes, shapes that do not multiply, a config whose dtypes
torch cannot hold -- ``ArgumentError`` / ``ArgumentTypeError`` naming the argument.

Under ``torch.compile`` those checks run when the compiled graph runs (in the op's own
implementation, before any launch), not while Dynamo traces: an exception raised during tracing
reaches the caller as Dynamo's own error (``Unsupported: Observed exception`` from Python code
under ``fullgraph=True``, ``TorchRuntimeError`` from a fake implementation), hiding the
library's type. So the fake implementations never refuse fake (traced) tensors; they give the
shape the call would have, and the library's error is raised, as is, by the first run. Only a
``config`` that is not a ``GemmConfig`` is refused while tracing (it cannot be passed to the op).
"""
from __future__ import annotations

import json
import threading

import torch

from .device.config import GemmConfig
from .errors import ArgumentError, ArgumentTypeError

_TO_NAME = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
_FROM_NAME = {v: k for k, v in _TO_NAME.items()}
_PITCH = 16                 #: bytes: TMA's row-stride rule for the result
_GEMMS: dict = {}
_LOCK = threading.Lock()


def _check(a, b, who: str = "cutedsl.torch.gemm") -> tuple:
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, torch.Tensor):
            raise ArgumentTypeError(f"{who}: {name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 2:
            raise ArgumentError(f"{who}: {name} must be 2-D, got shape {tuple(x.shape)}")
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise ArgumentTypeError(f"{who}: {name} has dtype {x.dtype}; the kernels take torch.float16 or "
                                    f"torch.bfloat16")
    if a.dtype != b.dtype:
        raise ArgumentTypeError(f"{who}: a is {a.dtype} but b is {b.dtype}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ArgumentError(f"{who}: a.shape[1] ({k}) != b.shape[0] ({k2})")
    for name, x in (("a", a), ("b", b)):
        if x.device.type == "cpu":
            raise ArgumentError(f"{who}: {name} is a CPU tensor; the kernels run on CUDA tensors (use "
                                f"torch.matmul on the CPU, or move the tensors with .cuda())")
    return int(m), int(n), int(k)


def _check_call(a, b, config: GemmConfig | None, out) -> tuple:
    """Every check of a call (module docstring); returns ``(m, n, k)``."""
    m, n, k = _check(a, b)
    if config is not None:
        if _FROM_NAME.get(config.dtype) != a.dtype:
            raise ArgumentTypeError(f"cutedsl.torch.gemm: a is {a.dtype} but the config's dtype is {config.dtype}")
        if config.out_dtype not in _FROM_NAME:
            raise ArgumentTypeError(f"cutedsl.torch.gemm: the config's out_dtype {config.out_dtype!r} has no torch "
                                    f"dtype here; use {', '.join(map(repr, _FROM_NAME))}")
    if out is not None and (not isinstance(out, torch.Tensor) or tuple(out.shape) != (m, n)):
        raise ArgumentError(f"cutedsl.torch.gemm: out must be a ({m}, {n}) tensor")
    return m, n, k


def _traced(*tensors) -> bool:
    """Whether these are Dynamo's / AOT's fake tensors (tracing, nothing runs)."""
    from torch._subclasses.fake_tensor import FakeTensor
    return any(isinstance(t, FakeTensor) for t in tensors)


def _config_of(config_json: str):
    return GemmConfig.from_dict(json.loads(config_json)) if config_json else None


def _config(config_json: str, m: int, n: int, k: int, dtype) -> GemmConfig:
    if not config_json:
        return GemmConfig.for_problem(m, n, k, _TO_NAME[dtype])
    return GemmConfig.from_dict(json.loads(config_json))


def _result_like(a, m: int, n: int, out_dtype: str):
    dt = _FROM_NAME[out_dtype]
    es = torch.empty((), dtype=dt).element_size()
    pitch = -(-max(n, 1) * es // _PITCH) * _PITCH // es
    return torch.empty_strided((m, n), (pitch, 1), dtype=dt, device=a.device)


def _gemm_for(cfg: GemmConfig):
    from .device.gemm import Gemm
    with _LOCK:
        g = _GEMMS.get(cfg)
        if g is None:
            g = _GEMMS[cfg] = Gemm(cfg, "cuda")
        return g


@torch.library.custom_op("cutedsl::gemm", mutates_args=())
def _gemm_op(a: torch.Tensor, b: torch.Tensor, config: str) -> torch.Tensor:
    m, n, k = _check_call(a, b, _config_of(config), None)
    cfg = _config(config, m, n, k, a.dtype)
    out = _result_like(a, m, n, cfg.out_dtype)
    _gemm_for(cfg)(a, b, out=out)
    return out


@_gemm_op.register_fake
def _gemm_fake(a, b, config):
    if not _traced(a, b):           # meta tensors outside tracing: the checks of a real call
        _check_call(a, b, _config_of(config), None)
    m = a.shape[0] if a.dim() else 1        # traced: the shape the call has; a run refuses it
    n = b.shape[-1] if b.dim() else 1
    out_dtype = json.loads(config).get("out_dtype", "f32") if config else "f32"
    return _result_like(a, m, n, out_dtype if out_dtype in _FROM_NAME else "f32")


@torch.library.custom_op("cutedsl::gemm_out", mutates_args=("out",))
def _gemm_out_op(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: str) -> None:
    m, n, k = _check_call(a, b, _config_of(config), out)
    cfg = _config(config, m, n, k, a.dtype)
    _gemm_for(cfg)(a, b, out=out)


@_gemm_out_op.register_fake
def _gemm_out_fake(a, b, out, config):
    if not _traced(a, b, out):
        _check_call(a, b, _config_of(config), out)


def _config_json(config) -> str:
    if config is None:
        return ""
    if not isinstance(config, GemmConfig):
        raise ArgumentTypeError(f"cutedsl.torch.gemm: config must be a GemmConfig or None, got {type(config).__name__}")
    return json.dumps(config.to_dict(), sort_keys=True)     # the config protocol's JSON form


def gemm(a, b, *, config: GemmConfig | None = None, out=None):
    """``a @ b`` on CUDA tensors with cutedsl's kernels (see module docstring); returns the
    result, or ``out`` filled. Traceable by ``torch.compile`` (its checks then run with the
    compiled graph, raising the library's own errors). ``ArgumentError`` /
    ``ArgumentTypeError`` naming the argument."""
    cj = _config_json(config)
    if not torch.compiler.is_compiling():   # traced: the op checks when the graph runs (module docstring)
        _check_call(a, b, config, out)
    if out is None:
        return torch.ops.cutedsl.gemm(a, b, cj)
    torch.ops.cutedsl.gemm_out(a, b, out, cj)
    return out


__all__ = ["gemm"]
