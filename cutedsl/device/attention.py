"""``Attention``: the attention forward front end (``flash_attn_func`` / ``flash_attn_varlen_func``
layouts and options), on the FlashAttention-3-style kernel (:mod:`cutedsl.kernel.attention`).

::

    attn = cutedsl.Attention(cutedsl.AttentionConfig(head_dim=128, dtype="bf16"))
    o, lse = attn(q, k, v, causal=True)               # q (batch, seqlen_q, heads, 128) bf16
    o, lse = attn(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck)    # packed (total, heads, 128)
    attn = cutedsl.Attention(cutedsl.AttentionConfig(head_dim=64, score_mod=Alibi(), mask_mod=DocumentMask()))
    o, lse = attn(q, k, v, alibi_slopes=slopes, doc_ids=docs)   # the hooks' parameters by name

Every mistake is refused before anything is compiled or launched, with the library's errors
naming the argument, the rule and the fix (:func:`check_call`).
"""
from __future__ import annotations

import math
import threading

import time

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, ConfigError
from ..problem import AttentionProblem
from ..runtime import arrays
from ..runtime.binding import Binding
from ..runtime.dlpack import wrap_like
from ..runtime.tensor_view import TensorView
from .attention_config import CALL_OPTIONS, AttentionConfig
from .attention_hook_args import BlockMaskCache, check_hook_args, host_hook_args

DTYPES = ("bf16", "f16", "e4m3")
FP8 = ("e4m3",)
NAMES = ("q", "k", "v")
DESCALES = ("q_descale", "k_descale", "v_descale")


def _real(name, x, *, positive=False):
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"{name} must be a real number, got {type(x).__name__}")
    x = float(x)
    if not math.isfinite(x) or (positive and x <= 0):
        raise ArgumentError(f"{name} must be a finite{' positive' if positive else ''} number, got {x}")
    return x


def _window(window, causal) -> tuple:
    """``(left, right)`` of the band (``-1``: unbounded), from FlashAttention's ``window_size``
    and ``causal`` (which fixes ``right = 0``)."""
    if not isinstance(causal, (bool, np.bool_)):
        raise ArgumentTypeError(f"causal must be a bool, got {type(causal).__name__}")
    if window is None:
        return (-1, 0) if causal else (-1, -1)
    if (not isinstance(window, (tuple, list)) or len(window) != 2
            or not all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in window)):
        raise ArgumentTypeError(f"window must be a pair of ints (left, right), -1 for unbounded, got {window!r}")
    left, right = (int(w) for w in window)
    if left < -1 or right < -1:
        raise ArgumentError(f"window (left, right) = {(left, right)}: each must be >= 0, or -1 for unbounded")
    if causal:
        if right > 0:
            raise ArgumentError(f"causal=True keeps keys up to the diagonal (right = 0) but window has right = "
                                f"{right}: pass window=({left}, 0), or causal=False for a two-sided window")
        right = 0
    return left, right


def _cu_seqlens(name, cu, rows, batch=None) -> np.ndarray:
    """``cu`` as a host int32 array of ``batch + 1`` monotone offsets within ``rows``."""
    dev = arrays.describe(cu, name)
    if dev is not None:
        if dev[3].name != "i32":
            raise ArgumentTypeError(f"{name} must be int32 (FlashAttention's cu_seqlens), got {dev[3].name}")
        cu = arrays.to_host(arrays.DeviceArray(dev[0], tuple(dev[1]), tuple(dev[2]), dev[3], None, cu))
    h = arrays.host_array(cu)
    if h.dtype != np.int32:
        raise ArgumentTypeError(f"{name} must be int32 (FlashAttention's cu_seqlens), got {h.dtype}: "
                                f"pass np.asarray({name}, np.int32)")
    if h.ndim != 1 or h.shape[0] < 2:
        raise ArgumentError(f"{name} must be 1-D with batch + 1 >= 2 offsets, got shape {h.shape}")
    if batch is not None and h.shape[0] != batch + 1:
        raise ArgumentError(f"{name} has {h.shape[0]} offsets but cu_seqlens_q has {batch + 1}: one per sequence "
                            f"+ 1 in both")
    if h[0] < 0 or np.any(np.diff(h.astype(np.int64)) < 0) or h[-1] > rows:
        raise ArgumentError(f"{name} must be monotone (non-decreasing) offsets from >= 0 to at most {rows} (the "
                            f"packed rows), got {h.tolist()}")
    return h


def check_descales(dtype: str, descales, batch: int = 1, kv_heads: int = 1) -> tuple:
    """``(q, k, v)`` descale factors of a call (FlashAttention-3's ``q_descale`` / ``k_descale`` /
    ``v_descale``: what each fp8 tensor is multiplied by to give its true values): each None
    (1.0), a positive finite real, an array of one such value (per tensor) or an array of shape
    ``(batch, kv_heads)`` (per sequence and K/V head, as FlashAttention-3's; query head ``h`` takes
    K/V head ``h // (heads / kv_heads)``'s), numpy or device, float. Returns floats and float64
    ``(batch, kv_heads)`` arrays. Raises ``ArgumentError`` for descales with 16-bit inputs, a
    non-positive or non-finite value or another shape, ``ArgumentTypeError`` for another type."""
    if dtype not in FP8:
        given = [n for n, d in zip(DESCALES, descales) if d is not None]
        if given:
            raise ArgumentError(f"{', '.join(given)}: descale factors are for fp8 (e4m3) inputs; q, k, v are "
                                f"{dtype} -- drop them")
        return 1.0, 1.0, 1.0
    out = []
    for name, d in zip(DESCALES, descales):
        if d is None:
            out.append(1.0)
            continue
        if not isinstance(d, (int, float, np.integer, np.floating)) or isinstance(d, bool):
            dev = arrays.describe(d, name)
            h = arrays.to_host(arrays.DeviceArray(dev[0], tuple(dev[1]), tuple(dev[2]), dev[3], None, d)) \
                if dev is not None else np.asarray(d)
            if h.dtype.kind != "f":
                raise ArgumentTypeError(f"{name} must be a float (or a float32 array of one value or of shape "
                                        f"(batch, kv_heads)), got {h.dtype}")
            if h.size != 1:
                if h.shape != (batch, kv_heads):
                    raise ArgumentError(f"{name} must hold one value (per tensor) or have shape (batch, kv_heads) "
                                        f"= {(batch, kv_heads)} (per sequence and K/V head), got shape {h.shape}")
                h = h.astype(np.float64)
                bad = ~(np.isfinite(h) & (h > 0))
                if bad.any():
                    at = tuple(int(i) for i in np.argwhere(bad)[0])
                    raise ArgumentError(f"{name} must hold finite positive numbers, got {float(h[at])!r} at {at}")
                out.append(h)
                continue
            d = float(h.reshape(()))
        out.append(_real(name, d, positive=True))
    return tuple(out)


def check_call(views, cu_q, cu_k, max_q, max_k) -> tuple:
    """Validate ``q, k, v`` (``TensorView``) and the varlen arguments; returns ``(problem,
    host cu_seqlens_q, cu_seqlens_k or None)``. ``ArgumentTypeError``/``ArgumentError`` name
    the argument and the fix."""
    q, k, v = views
    for x in views:
        if x.dtype is None or x.dtype.name not in DTYPES:
            raise ArgumentTypeError(f"{x.name} must be bf16, f16 or e4m3 (float8_e4m3fn), got {x.raw_dtype}")
    if not q.dtype.name == k.dtype.name == v.dtype.name:
        raise ArgumentTypeError(f"q, k, v must share one dtype, got {q.dtype.name}, {k.dtype.name}, {v.dtype.name}")
    varlen = cu_q is not None or cu_k is not None
    if varlen and (cu_q is None or cu_k is None):
        raise ArgumentError("cu_seqlens_q and cu_seqlens_k go together: pass both or neither")
    rank = 3 if varlen else 4
    layout = "(total_tokens, heads, head_dim)" if varlen else "(batch, seqlen, heads, head_dim)"
    for x in views:
        if len(x.shape) != rank:
            raise ArgumentError(f"{x.name} must be {layout}{' with cu_seqlens' if varlen else ''}, got shape {x.shape}")
        if 0 not in x.shape and x.strides[-1] != x.dtype.nbytes:     # (an empty array has no layout)
            raise ArgumentError(f"{x.name}: the last dimension (head_dim) must be contiguous (stride "
                                f"{x.dtype.nbytes} B), got {x.strides[-1]} B: pass a contiguous array")
    if k.shape[:-1] != v.shape[:-1]:
        raise ArgumentError(f"k and v must agree in all but head_dim, got {k.shape} and {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ArgumentError(f"q and k head_dim differ: {q.shape[-1]} vs {k.shape[-1]}")
    if v.shape[-1] != q.shape[-1]:
        raise ArgumentError(f"v head_dim {v.shape[-1]} must equal q's {q.shape[-1]} (head_dim_v != head_dim is not "
                            f"implemented)")
    heads, kv_heads = q.shape[-2], k.shape[-2]
    if kv_heads < 1 or heads % kv_heads:
        raise ArgumentError(f"heads {heads} (q) must be a multiple of kv_heads {kv_heads} (k, v) for GQA/MQA")
    if not varlen:
        if q.shape[0] != k.shape[0]:
            raise ArgumentError(f"q and k batch differ: {q.shape[0]} vs {k.shape[0]}")
        return AttentionProblem(q.shape[0], q.shape[1], k.shape[1], heads, kv_heads, q.shape[-1]), None, None
    cq = _cu_seqlens("cu_seqlens_q", cu_q, q.shape[0])
    ck = _cu_seqlens("cu_seqlens_k", cu_k, k.shape[0], batch=cq.shape[0] - 1)
    lens = []
    for name, cu, given in (("max_seqlen_q", cq, max_q), ("max_seqlen_k", ck, max_k)):
        longest = int(np.diff(cu).max())
        if given is not None:
            if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < longest:
                raise ArgumentError(f"{name} must be an int >= the longest sequence ({longest}), got {given!r}")
            longest = int(given)
        lens.append(longest)
    return AttentionProblem(cq.shape[0] - 1, lens[0], lens[1], heads, kv_heads, q.shape[-1]), cq, ck


class Attention:
    """The attention forward on ``backend`` (``"auto"``: a Hopper GPU, else the emulator).
    ``config``: an :class:`AttentionConfig`, or None / ``"auto"`` to take
    :meth:`AttentionConfig.for_problem` per call (no hooks). ``kernel_cls``: an
    ``AttentionFwdKernel`` subclass. Hooks are the config's ``score_mod`` / ``mask_mod``; their
    parameters are keyword arguments of the call. ``dump_dir``: write each compile's IR, PTX and
    SASS there (as ``Gemm(dump_dir=)``; such compiles bypass the kernel cache)."""

    def __init__(self, config: AttentionConfig | str | None = None, backend="auto", *, kernel_cls=None,
                 dump_dir=None):
        from ..runtime.selection import check_backend_arg
        if config not in (None, "auto") and not isinstance(config, AttentionConfig):
            raise ArgumentTypeError(f"config must be an AttentionConfig or 'auto', got {type(config).__name__}")
        check_backend_arg(backend)
        self.config = None if config in (None, "auto") else config
        self._backend_arg, self._backend = backend, None
        self._kernel_cls, self._dump = kernel_cls, dump_dir
        self._kernels, self._lock = {}, threading.Lock()
        self._block_masks = BlockMaskCache()

    @property
    def backend(self):
        if self._backend is None:
            from ..runtime.selection import get_backend
            b = self._backend_arg
            self._backend = get_backend(b) if isinstance(b, str) else b
        return self._backend

    def _config(self, problem, dtype, local=False, varlen=False) -> AttentionConfig:
        cfg = self.config or AttentionConfig.for_problem(problem, dtype, local=local, varlen=varlen)
        if cfg.dtype != dtype:
            raise ArgumentTypeError(f"q, k, v are {dtype} but the config was built for {cfg.dtype}: use "
                                    f"AttentionConfig(dtype={dtype!r})")
        why = cfg.can_implement(problem)
        if why:
            raise ArgumentError(f"q, k, v: {why}")
        return cfg

    def _kernel(self, cfg, **variant):
        key = (cfg, tuple(sorted(variant.items())))
        with self._lock:
            kern = self._kernels.get(key)
            if kern is None:
                kern = self._kernels[key] = cfg.kernel(kernel_cls=self._kernel_cls, **variant)
            return kern

    def __call__(self, q, k, v, *, softmax_scale=None, causal=False, window=None, softcap=None, cu_seqlens_q=None,
                 cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, q_descale=None, k_descale=None,
                 v_descale=None, **hook_args):
        """``(o, lse)``: ``o`` of ``q``'s shape (dense (batch, seqlen_q, heads, head_dim), varlen
        (total_q, heads, head_dim)) and dtype (bf16 for e4m3 inputs, as FlashAttention-3), ``lse``
        f32 (batch, heads, seqlen_q) / (heads, total_q), natural log; numpy in -> numpy out,
        device arrays in -> device arrays out. ``q_descale`` / ``k_descale`` / ``v_descale``
        (e4m3 only; :func:`check_descales`: per tensor or ``(batch, kv_heads)``): the true Q is
        ``q * q_descale`` etc.
        ``softmax_scale`` (default ``head_dim ** -0.5``), ``causal`` (bottom-right aligned),
        ``window = (left, right)`` (-1: unbounded), ``softcap`` (None/0: off); ``hook_args``:
        the parameters the config's score_mod / mask_mod declare, by name (e.g.
        ``alibi_slopes=``, ``doc_ids=``; arrays of the declared dtype and shape). With a mask_mod
        the call builds the block mask on the host (cached per problem shape when the mask reads
        no tensor). Raises ``ArgumentTypeError``/``ArgumentError`` before anything is compiled
        (see :func:`check_call`, :func:`~cutedsl.device.attention_hook_args.check_hook_args`;
        hooks with ``cu_seqlens`` are refused)."""
        launch, result = self.prepare(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                                      softcap=softcap, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                      max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, q_descale=q_descale,
                                      k_descale=k_descale, v_descale=v_descale, **hook_args)
        try:
            launch()
            return result()
        finally:
            launch.release()

    def prepare(self, q, k, v, *, softmax_scale=None, causal=False, window=None, softcap=None, cu_seqlens_q=None,
                cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, q_descale=None, k_descale=None,
                v_descale=None, **hook_args):
        """Validate, compile, copy host inputs and encode the tensor maps of one call (options
        as :meth:`__call__`); returns ``(launch, result)``: ``launch()`` runs the kernel (again
        on each call: what a benchmark times), ``result()`` waits and returns ``(o, lse)``.
        ``launch.compiled`` is the ``CompiledKernel`` (None when nothing needs a launch: no
        query or no key), ``launch.compile_seconds`` the time its compile (or cache load) took,
        ``launch.cache_hit`` whether it came from the kernel cache;
        ``launch.release()`` frees what the call allocated (a host result is copied out first
        by ``result()``). Raises as :meth:`__call__`, before anything is launched."""
        views = [TensorView.of(x, n) for x, n in zip((q, k, v), NAMES)]
        problem, cq, ck = check_call(views, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        scale = problem.head_dim ** -0.5 if softmax_scale is None else _real("softmax_scale", softmax_scale)
        cap = None if softcap is None or softcap == 0 else _real("softcap", softcap, positive=True)
        left, right = _window(window, causal)
        descales = check_descales(views[0].dtype.name, (q_descale, k_descale, v_descale), problem.batch,
                                  problem.kv_heads)
        local = (left, right) != (-1, -1)
        cfg = self._config(problem, views[0].dtype.name, local=local, varlen=cq is not None)
        hooks = cfg.hooks()
        if hooks.hooks() and cq is not None:
            raise ArgumentError("score_mod / mask_mod with cu_seqlens_q / cu_seqlens_k (varlen) are not supported: "
                                "a hook's tensors are shaped by one seqlen_q / seqlen_k and its block mask is built "
                                "for one problem; pad the sequences to (batch, seqlen, heads, head_dim), or drop the "
                                "hooks")
        check_hook_args(hooks, hook_args, problem, CALL_OPTIONS)
        for x, n in zip((q, k, v), NAMES):
            arrays.check_backend_of(x, self.backend, n)
        q = views[0]
        o_shape = q.shape
        lse_shape = (q.shape[1], q.shape[0]) if cq is not None else (q.shape[0], q.shape[2], q.shape[1])
        o_dtype = "bf16" if q.dtype.name in FP8 else q.dtype.name
        if 0 in q.shape or 0 in views[1].shape:          # no query, or no key: O = 0, LSE = +inf, no launch
            return _empty_call(self.backend, q, o_shape, lse_shape, o_dtype)
        kern = self._kernel(cfg, local=local, causal=local and left == -1, softcap=cap is not None,
                            varlen=cq is not None)
        t0 = time.perf_counter()
        compiled = kern.compile(dump_dir=self._dump)
        spent = time.perf_counter() - t0
        launch, result = self._prepare(kern, compiled, views, problem, cq, ck, scale, cap, (left, right), o_shape,
                                       lse_shape, hook_args, descales)
        launch.compiled, launch.compile_seconds = compiled, spent
        launch.cache_hit = bool(getattr(kern, "last_cache_hit", False))
        return launch, result

    def reference(self, q, k, v, **options):
        """The float64 reference (:func:`~cutedsl.device.attention_reference.attention_reference`)
        of the same call, the config's hooks run on numpy: ``(o, lse)`` for ``--check``-style
        comparisons. ``options``: the call's keyword arguments, hook arguments included."""
        from .attention_reference import attention_reference
        hooks = self.config.hooks() if self.config is not None else None
        names = {p.name for p in hooks.kernel_params()} if hooks is not None else set()
        own = {n: v for n, v in options.items() if n not in names}
        host = {n: v for n, v in options.items() if n in names}
        if hooks is not None:
            host = host_hook_args([p for p in hooks.kernel_params() if p.name in host], host)
        sm, mm = (self.config.score_mod, self.config.mask_mod) if self.config is not None else (None, None)
        return attention_reference(*(arrays.host_array(x) for x in (q, k, v)), score_mod=sm, mask_mod=mm,
                                   hook_args=host, **own)

    def _prepare(self, kern, compiled, views, problem, cq, ck, scale, cap, window, o_shape, lse_shape, hook_args,
                 descales=(1.0, 1.0, 1.0)):
        be, (q, k, v) = self.backend, views
        on_host = q.on_host
        dt = getattr(kern, "o_dtype", None) or q.dtype
        bind = Binding(be, compiled)
        try:
            devs = []
            for x in views:
                if x.on_host:
                    arr = bind.own(arrays.to_device(be, np.ascontiguousarray(x.host), pitch_align=16))
                else:
                    arr = arrays.DeviceArray(x.ptr, x.shape, x.strides, x.dtype, be, x.owner)
                bind.tensor_map(x.name, arr, kern.tensor_map_extent(arr.shape, arr.strides))
                devs.append(arr)
            do = arrays.empty(be, o_shape, dt, label="Attention output o")
            dl = arrays.empty(be, lse_shape, "f32", label="Attention output lse")
            if on_host:
                bind.own(do)
                bind.own(dl)
            if any(p.name == "o" and p.kind == "tensormap" for p in kern.params()):   # O stored by TMA
                bind.tensor_map("o", do, kern.tensor_map_extent(do.shape, do.strides))
            else:
                bind.pointer("o", do)
            bind.pointer("lse", dl)
            bind.values.update(kern.scalar_values(problem, scale, cap, window))
            if q.dtype.name in FP8:
                bind.pointer("descale", bind.own(arrays.to_device(be, kern.descale_table(problem, descales))))
            if cq is not None:
                cqd, ckd = (bind.own(arrays.to_device(be, c)) for c in (cq, ck))
                bind.pointer("cu_seqlens_q", cqd)
                bind.pointer("cu_seqlens_k", ckd)
                bind.values["total_q"] = q.shape[0]
            self._bind_hooks(bind, kern, problem, window, hook_args)
            bind.keep += devs + [do, dl]
            launch = bind.launcher(kern.grid(problem))
        except BaseException:
            bind.release()              # nothing leaks from a call that fails before launch
            raise

        def result():
            bind.finish()
            if on_host:
                return arrays.to_host(do), arrays.to_host(dl)
            return wrap_like(do, q.framework), wrap_like(dl, q.framework)
        result.keep, result.release = launch.keep, launch.release
        return launch, result

    def _bind_hooks(self, bind, kern, problem, window, hook_args) -> None:
        """The hooks' arguments and, for a block-sparse kernel, its block mask's arrays."""
        from .attention_hook_args import problem_dims
        dims = problem_dims(problem)
        for p in kern.hooks.kernel_params():
            bind.argument(p, hook_args[p.name], dims)
        if kern.block_sparse:
            from ..compiler.artifact import ParamSpec
            for name, val in self._block_masks.get(kern, problem, window, hook_args).values().items():
                if isinstance(val, np.ndarray):
                    bind.argument(ParamSpec(name, "ptr", dtype="i32"), val)
                else:
                    bind.values[name] = val


def _empty_call(be, q, o_shape, lse_shape, o_dtype):
    """``(launch, result)`` of a call with no query or no key: nothing to launch; ``O = 0``,
    ``LSE = +inf`` (FlashAttention's value for a row with no key)."""
    from ..dtypes import dtype as _dtype
    o = np.zeros(o_shape, _dtype(o_dtype).numpy)
    lse = np.full(lse_shape, np.inf, np.float32)

    def launch():
        pass

    def result():
        if q.on_host:
            return o.copy(), lse.copy()
        return wrap_like(arrays.to_device(be, o), q.framework), wrap_like(arrays.to_device(be, lse), q.framework)
    launch.release, launch.compiled, launch.compile_seconds, launch.cache_hit = (lambda: None), None, 0.0, False
    return launch, result


def attention(q, k, v, config: AttentionConfig | None = None, backend="auto", **options):
    """One-shot :class:`Attention` call: ``(o, lse)``."""
    return Attention(config, backend)(q, k, v, **options)


__all__ = ["Attention", "AttentionConfig", "attention", "check_call"]
