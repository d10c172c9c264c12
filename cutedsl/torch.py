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

``cutedsl.torch.attention(q, k, v, *, causal=False, softmax_scale=None, window=None,
softcap=None, backend=None, arch=None) -> (out, lse)`` is the custom op ``torch.ops.cutedsl.attention``:
the FlashAttention-3-style forward on sm_90a, FlashAttention-4-style on sm_100a
(:class:`~cutedsl.Attention` with ``AttentionConfig.for_problem(..., arch=arch)``, ``flash_attn_func``'s
layout) on ``q`` (batch, seqlen_q, heads, head_dim), ``k``/``v`` (batch, seqlen_k, kv_heads, head_dim),
float16 or bfloat16 (head_dim 64, 96, 128 or 256; 64 or 128 on sm_100a), giving ``out`` like ``q`` (contiguous) and ``lse``
float32 (batch, heads, seqlen_q), natural log. ``backend``: ``"cuda"`` / ``"auto"`` run CUDA
tensors and refuse CPU ones, as ``gemm`` does; ``"sim"`` runs CPU tensors on the PTX emulator
(so ``torch.library.opcheck`` and ``torch.compile`` run without a GPU); None takes env
``CUTEDSL_BACKEND`` (default auto), read when the op runs. ``arch``: ``"sm_90a"`` or ``"sm_100a"``
(the kernel's target); None: the architecture of the CUDA device the tensors are on (compute
capability 9.0 -> sm_90a, 10.0 -> sm_100a), sm_90a for CPU and meta tensors. The CUDA backend drives
Hopper GPUs only, so sm_100a runs CPU tensors on the emulator (``backend="sim"``) and is refused on CUDA
tensors (``ArgumentError``, before anything is compiled). Its checks follow the rule above:
while tracing only options that cannot be passed to the op (``causal`` not a bool, ``window``
not a pair of ints, a non-number scale or softcap, a non-string backend or arch) are refused.

The op is differentiable (``torch.library.register_autograd``): its backward is the custom op
``torch.ops.cutedsl.attention_backward(dout, q, k, v, out, lse, softmax_scale, causal, window,
backend) -> (dq, dk, dv)`` on :class:`~cutedsl.AttentionBackward` (FlashAttention-3-style, same
backends). As in FlashAttention, ``lse`` carries no gradient (its grad is ignored); a forward
with ``softcap``, and an sm_100a forward (cutedsl has no sm_100a backward), have no backward
(``ArgumentError`` when one is asked for, rather than running another kernel's backward).
"""
from __future__ import annotations

import json
import threading
from typing import List, Optional, Tuple

import numpy as np
import torch

from .device.attention import NAMES as _ATTN_NAMES, _real, _window, check_call as _attention_check_call
from .device.attention_config import AttentionConfig
from .device.config import GemmConfig
from .dtypes import dtype as _dtype
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


# -- attention --------------------------------------------------------------------------------------------
_ATTENTIONS: dict = {}          #: (backend name, config) -> Attention (its kernels kept per variant)
_WHO = "cutedsl.torch.attention"


class _View:
    """What :func:`cutedsl.device.attention.check_call` reads of an operand (a torch tensor,
    fake or meta ones included): name, shape, cutedsl dtype and byte strides."""

    def __init__(self, name, t):
        self.name, self.shape, self.raw_dtype = name, tuple(int(d) for d in t.shape), t.dtype
        self.dtype = _dtype(_TO_NAME[t.dtype])
        self.strides = tuple(int(s) * t.element_size() for s in t.stride())


def _attention_backend(backend: str) -> str:
    """The backend name of a call: ``backend``, else env ``CUTEDSL_BACKEND``, else auto."""
    from . import envvars
    name = backend or envvars.get("CUTEDSL_BACKEND") or "auto"
    ok = envvars.TORCH_BACKENDS
    if name not in ok:
        raise ArgumentError(f"{_WHO}: backend must be one of {', '.join(map(repr, ok))} or None (env CUTEDSL_BACKEND), "
                            f"got {name!r}")
    return name


#: compute capability -> the attention kernels' target on that device (the ``a`` features: WGMMA, tcgen05)
_DEVICE_ARCHS = {(9, 0): "sm_90a", (10, 0): "sm_100a"}


def _attention_arch(arch: str, q) -> str:
    """The target of a call: ``arch``, else (``""``) the architecture of the CUDA device ``q`` is
    on, else sm_90a (CPU and meta tensors; a GPU with another compute capability, which the CUDA
    backend then refuses by name). ``ArgumentError`` for an architecture with no attention kernel."""
    from .arch import ARCHS, DEFAULT
    if not arch:
        if q.device.type == "cuda":
            return _DEVICE_ARCHS.get(tuple(torch.cuda.get_device_capability(q.device)), DEFAULT.name)
        return DEFAULT.name
    if arch not in ARCHS:
        raise ArgumentError(f"{_WHO}: arch must be one of {', '.join(map(repr, ARCHS))} or None (the CUDA device's "
                            f"own; sm_90a for CPU tensors), got {arch!r}")
    return arch


def _check_attention(q, k, v, softmax_scale, causal, window, softcap, backend, arch="") -> tuple:
    """Every check of an attention call (module docstring), before anything is compiled;
    returns ``(backend name, AttentionConfig)``. Meta and fake tensors pass the device rule
    (nothing runs)."""
    tensors = (q, k, v)
    for name, x in zip(_ATTN_NAMES, tensors):
        if not isinstance(x, torch.Tensor):
            raise ArgumentTypeError(f"{_WHO}: {name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in (torch.float16, torch.bfloat16):
            fp8 = (" (fp8 attention with descales is cutedsl.Attention(AttentionConfig(dtype='e4m3')) on numpy or "
                   "device arrays; this op has no descale arguments)") if "float8" in str(x.dtype) else ""
            raise ArgumentTypeError(f"{_WHO}: {name} has dtype {x.dtype}; the kernel takes torch.float16 or "
                                    f"torch.bfloat16{fp8}")
        if x.dim() != 4:
            raise ArgumentError(f"{_WHO}: {name} must be 4-D (batch, seqlen, heads, head_dim), got shape "
                                f"{tuple(x.shape)}")
    if len({x.device for x in tensors}) > 1:
        raise ArgumentError(f"{_WHO}: q, k, v must be on one device, got {', '.join(str(x.device) for x in tensors)}")
    name = _attention_backend(backend)
    dev = q.device.type
    if name == "sim" and dev not in ("cpu", "meta"):
        raise ArgumentError(f"{_WHO}: q is a {q.device} tensor but backend 'sim' runs CPU tensors (the emulator's "
                            f"memory is the host's): pass CPU tensors, or backend='cuda'")
    if name != "sim" and dev == "cpu":
        raise ArgumentError(f"{_WHO}: q is a CPU tensor; the kernel runs on CUDA tensors (use torch.nn.functional."
                            f"scaled_dot_product_attention on the CPU, pass backend='sim' or set CUTEDSL_BACKEND=sim "
                            f"to run it on the PTX emulator, or move the tensors with .cuda())")
    target = _attention_arch(arch, q)
    if target != "sm_90a" and dev == "cuda":
        from .runtime.selection import CUDA_ARCH
        raise ArgumentError(f"{_WHO}: arch {target!r} on a {q.device} tensor: the CUDA backend drives {CUDA_ARCH} "
                            f"(Hopper) GPUs only; run {target} on the PTX emulator with CPU tensors and "
                            f"backend='sim', or pass arch='{CUDA_ARCH}' on a Hopper GPU")
    problem, _, _ = _attention_check_call([_View(n, x) for n, x in zip(_ATTN_NAMES, tensors)], None, None, None,
                                          None)
    if softmax_scale is not None:
        _real("softmax_scale", softmax_scale)
    if softcap is not None and softcap != 0:
        _real("softcap", softcap, positive=True)
    band = _window(None if window is None else tuple(window), causal)
    # the config Attention(None) would pick, for this target: head_dim and dtype the kernel builds; on
    # sm_100a the CTA pair for a dense, unbanded call (for_problem's rule)
    cfg = AttentionConfig.for_problem(problem, _TO_NAME[q.dtype], local=band != (-1, -1), arch=target)
    return name, cfg


def _attention_for(name: str, cfg: AttentionConfig):
    from .device.attention import Attention
    with _LOCK:
        a = _ATTENTIONS.get((name, cfg))
        if a is None:
            a = _ATTENTIONS[(name, cfg)] = Attention(cfg, name)
        return a


def _host(t) -> np.ndarray:
    """A CPU tensor's memory as numpy (bfloat16 as ml_dtypes' bfloat16; numpy has no bf16 DLPack)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_host(a: np.ndarray, dtype) -> torch.Tensor:
    if dtype == torch.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


@torch.library.custom_op("cutedsl::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float], causal: bool,
                  window: Optional[List[int]], softcap: Optional[float], backend: str,
                  arch: str = "") -> Tuple[torch.Tensor, torch.Tensor]:
    name, cfg = _check_attention(q, k, v, softmax_scale, causal, window, softcap, backend, arch)
    opts = {"softmax_scale": softmax_scale, "causal": causal, "softcap": softcap,
            "window": None if window is None else tuple(window)}
    attn = _attention_for(name, cfg)
    if name == "sim":
        o, lse = attn(*(_host(x) for x in (q, k, v)), **opts)
        return _from_host(o, q.dtype), _from_host(lse, torch.float32)
    o, lse = attn(*(x.detach() for x in (q, k, v)), **opts)
    return o, lse


@_attention_op.register_fake
def _attention_fake(q, k, v, softmax_scale, causal, window, softcap, backend, arch=""):
    if not _traced(q, k, v):        # meta tensors outside tracing: the checks of a real call
        _check_attention(q, k, v, softmax_scale, causal, window, softcap, backend, arch)
    shape = tuple(q.shape) if q.dim() == 4 else (1, 1, 1, 1)   # traced: the shape the call has; a run refuses it
    return q.new_empty(shape), q.new_empty((shape[0], shape[2], shape[1]), dtype=torch.float32)


def _attention_args(softmax_scale, causal, window, softcap, backend, arch=None) -> tuple:
    """The op's arguments; ``ArgumentTypeError`` for a value the op's schema cannot take."""
    def number(name, x):
        if x is None:
            return None
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ArgumentTypeError(f"{_WHO}: {name} must be a real number or None, got {type(x).__name__}")
        return float(x)
    if not isinstance(causal, bool):
        raise ArgumentTypeError(f"{_WHO}: causal must be a bool, got {type(causal).__name__}")
    if window is not None and (not isinstance(window, (tuple, list)) or len(window) != 2 or not all(
            isinstance(w, int) and not isinstance(w, bool) for w in window)):
        raise ArgumentTypeError(f"{_WHO}: window must be a pair of ints (left, right), -1 for unbounded, got "
                                f"{window!r}")
    if backend is not None and not isinstance(backend, str):
        raise ArgumentTypeError(f"{_WHO}: backend must be 'auto', 'cuda', 'sim' or None, got {type(backend).__name__}")
    if arch is not None and not isinstance(arch, str):
        raise ArgumentTypeError(f"{_WHO}: arch must be 'sm_90a', 'sm_100a' or None, got {type(arch).__name__}")
    return (number("softmax_scale", softmax_scale), causal, None if window is None else list(window),
            number("softcap", softcap), backend or "", arch or "")


def attention(q, k, v, *, causal: bool = False, softmax_scale: float | None = None, window=None,
              softcap: float | None = None, backend: str | None = None, arch: str | None = None):
    """FlashAttention-3-style (sm_90a) / -4-style (sm_100a) forward, ``torch.ops.cutedsl.attention``
    (module docstring):
    ``(out, lse)``, ``out`` like ``q`` (batch, seqlen_q, heads, head_dim), ``lse`` float32
    (batch, heads, seqlen_q). ``causal`` aligned bottom-right, ``window=(left, right)`` (-1:
    unbounded), ``softcap`` (None/0: off), ``softmax_scale`` (default ``head_dim ** -0.5``),
    ``backend`` ``"auto"``/``"cuda"``/``"sim"`` (None: env ``CUTEDSL_BACKEND``), ``arch``
    ``"sm_90a"``/``"sm_100a"`` (None: the CUDA device's own, sm_90a for CPU tensors; sm_100a runs
    on the emulator only). Traceable by ``torch.compile`` (no graph break). ``ArgumentError`` /
    ``ArgumentTypeError`` naming the argument, ``ConfigError`` for a head dimension the
    target's kernel does not build (64, 96, 128, 256 on sm_90a; 64, 128 on sm_100a)."""
    args = _attention_args(softmax_scale, causal, window, softcap, backend, arch)
    if not torch.compiler.is_compiling():   # traced: the op checks when the graph runs (module docstring)
        _check_attention(q, k, v, *args)
    return torch.ops.cutedsl.attention(q, k, v, *args)


# -- attention backward (autograd) ----------------------------------------------------------------------
_BACKWARDS: dict = {}           #: backend name -> AttentionBackward


def _backward_for(name: str):
    from .device.attention_bwd import AttentionBackward
    with _LOCK:
        b = _BACKWARDS.get(name)
        if b is None:
            b = _BACKWARDS[name] = AttentionBackward(None, name)
        return b


@torch.library.custom_op("cutedsl::attention_backward", mutates_args=())
def _attention_bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                      lse: torch.Tensor, softmax_scale: Optional[float], causal: bool, window: Optional[List[int]],
                      backend: str) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    name, _ = _check_attention(q, k, v, softmax_scale, causal, window, None, backend, "sm_90a")
    opts = {"softmax_scale": softmax_scale, "causal": causal, "window": None if window is None else tuple(window)}
    bwd = _backward_for(name)
    args = (dout, q, k, v, out, lse)
    if name == "sim":
        grads = bwd(*(_host(x.contiguous()) for x in args), **opts)
        return tuple(_from_host(g, x.dtype) for g, x in zip(grads, (q, k, v)))
    return tuple(bwd(*(x.detach().contiguous() for x in args), **opts))


@_attention_bwd_op.register_fake
def _attention_bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, window, backend):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _attention_setup_context(ctx, inputs, output):
    q, k, v, softmax_scale, causal, window, softcap, backend, arch = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.options = (softmax_scale, causal, window, softcap, backend, _attention_arch(arch, q))


def _attention_backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    softmax_scale, causal, window, softcap, backend, arch = ctx.options
    if softcap is not None and softcap != 0:
        raise ArgumentError(f"{_WHO}: the backward of a softcapped attention is not implemented (its tanh "
                            f"derivative); call it with softcap=None to differentiate it")
    if arch != "sm_90a":                # the sm_90a backward is not the gradient of another target's kernel
        raise ArgumentError(f"{_WHO}: the backward of the {arch} forward is not implemented (cutedsl's attention "
                            f"backward is the FlashAttention-3-style sm_90a kernel): call the forward with "
                            f"arch='sm_90a' to differentiate it")
    if grad_out is None:                 # only lse was used: it carries no gradient (FlashAttention's)
        grad_out = torch.zeros_like(out)
    dq, dk, dv = torch.ops.cutedsl.attention_backward(grad_out, q, k, v, out, lse, softmax_scale, causal, window,
                                                      backend)
    return dq, dk, dv, None, None, None, None, None, None


torch.library.register_autograd("cutedsl::attention", _attention_backward, setup_context=_attention_setup_context)


__all__ = ["attention", "gemm"]
