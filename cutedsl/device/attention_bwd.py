"""``AttentionBackward``: the attention backward front end, in the shape of FlashAttention's
``_flash_attn_backward(dout, q, k, v, out, softmax_lse, ...) -> dq, dk, dv``, on three kernels:
``D = rowsum(dO * O)`` (:class:`~cutedsl.kernel.attention_bwd_prepost.AttentionBwdPreprocessKernel`),
the FlashAttention-3-style dK/dV kernel adding dQ into an f32 workspace
(:mod:`cutedsl.kernel.attention_bwd`), and the dQ conversion
(:class:`~cutedsl.kernel.attention_bwd_prepost.AttentionBwdPostprocessKernel`).

::

    attn = cutedsl.Attention(cutedsl.AttentionConfig(head_dim=128))
    o, lse = attn(q, k, v, causal=True)
    dq, dk, dv = cutedsl.AttentionBackward(cutedsl.AttentionConfig(head_dim=128))(do, q, k, v, o, lse, causal=True)

Every mistake is refused before anything is compiled or launched, naming the argument.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError
from ..runtime import arrays
from ..runtime.binding import Binding
from ..runtime.dlpack import wrap_like
from ..runtime.tensor_view import TensorView
from .attention import NAMES, _real, _window, check_call
from .attention_config import AttentionConfig


def _bwd_kernel_cls():
    from ..kernel.attention_bwd import AttentionBwdKernel
    return AttentionBwdKernel


def check_backward(views, problem, varlen) -> None:
    """``dout`` and ``out`` like ``q``, ``softmax_lse`` f32 of the forward's LSE shape
    (``ArgumentTypeError`` / ``ArgumentError`` naming the argument)."""
    q, k, v, do, o, lse = views
    for x in (do, o):
        if x.dtype is None or x.dtype.name != q.dtype.name:
            raise ArgumentTypeError(f"{x.name} must have q's dtype {q.dtype.name}, got {x.raw_dtype}")
        if tuple(x.shape) != tuple(q.shape):
            raise ArgumentError(f"{x.name} must have o's shape {tuple(q.shape)} (head_dim_v = head_dim), got "
                                f"{tuple(x.shape)}")
    want = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    if lse.dtype is None or lse.dtype.name != "f32":
        raise ArgumentTypeError(f"softmax_lse must be float32 (the forward's LSE), got {lse.raw_dtype}")
    if tuple(lse.shape) != want:
        raise ArgumentError(f"softmax_lse must be {'(heads, total_q)' if varlen else '(batch, heads, seqlen_q)'} "
                            f"= {want}, got {tuple(lse.shape)}")
    why = _bwd_kernel_cls().reason(problem.head_dim, q.dtype.name)
    if why:
        raise ArgumentError(f"q, k, v: {why}")


class AttentionBackward:
    """The attention backward on ``backend`` (``"auto"``: a Hopper GPU, else the emulator).
    ``config``: an :class:`AttentionConfig` (its head dimension and dtype; the forward's
    schedule knobs do not apply), or None / ``"auto"``. ``deterministic``: dQ is summed in a
    fixed order (bit-identical results from run to run; FlashAttention's ``deterministic``).
    ``dump_dir``: write each compile's IR, PTX and SASS there (as ``Attention(dump_dir=)``;
    such compiles bypass the kernel cache)."""

    def __init__(self, config: AttentionConfig | str | None = None, backend="auto", *, deterministic: bool = False,
                 dump_dir=None):
        from ..runtime.selection import check_backend_arg
        if config not in (None, "auto") and not isinstance(config, AttentionConfig):
            raise ArgumentTypeError(f"config must be an AttentionConfig or 'auto', got {type(config).__name__}")
        if not isinstance(deterministic, (bool, np.bool_)):
            raise ArgumentTypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
        check_backend_arg(backend)
        self.config = None if config in (None, "auto") else config
        self.deterministic = bool(deterministic)
        self._backend_arg, self._backend = backend, None
        self._kernels, self._lock, self._dump = {}, threading.Lock(), dump_dir

    @property
    def backend(self):
        if self._backend is None:
            from ..runtime.selection import get_backend
            b = self._backend_arg
            self._backend = get_backend(b) if isinstance(b, str) else b
        return self._backend

    def _kernel(self, key, make):
        with self._lock:
            k = self._kernels.get(key)
            if k is None:
                k = self._kernels[key] = make()
            return k

    def __call__(self, dout, q, k, v, out, softmax_lse, **options):
        """``(dq, dk, dv)`` shaped and typed like ``q``, ``k``, ``v`` (numpy in -> numpy out,
        device arrays in -> device arrays out). ``dout``, ``out``: like ``q``; ``softmax_lse``:
        the forward's LSE (f32, (batch, heads, seqlen_q) or varlen (heads, total_q)); options as
        :meth:`Attention.__call__ <cutedsl.device.attention.Attention.__call__>` (``softcap``
        is refused: not implemented). Raises ``ArgumentTypeError`` / ``ArgumentError`` before
        any launch."""
        launch, result = self.prepare(dout, q, k, v, out, softmax_lse, **options)
        try:
            launch()
            return result()
        finally:
            launch.release()

    def prepare(self, dout, q, k, v, out, softmax_lse, *, softmax_scale=None, causal=False, window=None,
                softcap=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None):
        """Validate, compile the three kernels, copy host inputs, allocate the outputs and the
        f32 dQ workspace and bind every launch of one call (arguments as :meth:`__call__`);
        returns ``(launch, result)``: ``launch()`` runs the preprocessing, dK/dV and dQ
        kernels (again on each call, the dQ workspace cleared first: what a benchmark times),
        ``result()`` waits and returns ``(dq, dk, dv)``. ``launch.compiled`` is the dK/dV
        kernel's ``CompiledKernel`` (None when nothing needs a launch: no query or no key),
        ``launch.compile_seconds`` the time the three compiles (or cache loads) took,
        ``launch.cache_hit`` whether all three came from the kernel cache; ``launch.release()``
        frees what the call allocated (device results handed out by ``result()`` stay the
        caller's). Raises as :meth:`__call__`, before anything is launched."""
        names = NAMES + ("dout", "out", "softmax_lse")
        views = [TensorView.of(x, n) for x, n in zip((q, k, v, dout, out, softmax_lse), names)]
        problem, cq, ck = check_call(views[:3], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        check_backward(views, problem, cq is not None)
        if softcap not in (None, 0):
            raise ArgumentError("softcap: the attention backward does not implement the softcap (its tanh "
                                "derivative); pass softcap=None")
        scale = problem.head_dim ** -0.5 if softmax_scale is None else _real("softmax_scale", softmax_scale)
        left, right = _window(window, causal)
        dt = views[0].dtype.name
        cfg = self.config or AttentionConfig.for_problem(problem, dt)
        if cfg.dtype != dt or cfg.head_dim != problem.head_dim:
            raise ArgumentTypeError(f"q, k, v are {dt} with head_dim {problem.head_dim} but the config was built "
                                    f"for {cfg.dtype}, {cfg.head_dim}: use AttentionConfig(head_dim="
                                    f"{problem.head_dim}, dtype={dt!r})")
        why = cfg.can_implement(problem)
        if why:
            raise ArgumentError(f"q, k, v: {why}")
        for x, n in zip((q, k, v, dout, out, softmax_lse), names):
            arrays.check_backend_of(x, self.backend, n)
        if 0 in views[0].shape or 0 in views[1].shape:      # no query or no key: zero gradients, no launch
            return _empty_call(self.backend, views[:3])
        kernels = self.kernels(cfg, local=(left, right) != (-1, -1), varlen=cq is not None)
        t0 = time.perf_counter()
        compiled = [x.compile(dump_dir=self._dump) for x in kernels]
        spent = time.perf_counter() - t0
        launch, result = self._prepare(kernels, compiled, views, problem, cq, ck, scale, (left, right))
        launch.compiled, launch.compile_seconds = compiled[1], spent
        launch.cache_hit = all(getattr(x, "last_cache_hit", False) for x in kernels)
        return launch, result

    def kernels(self, config: AttentionConfig, *, local: bool = False, varlen: bool = False) -> tuple:
        """The three kernels of a call's variant (built once per backward object, not compiled):
        ``(preprocess D = rowsum(dO * O), dK/dV kernel, dQ conversion)``. ``config``: head
        dimension, dtype and arch; ``local``: a causal or window band; ``varlen``: packed
        sequences. ``ConfigError`` for what the dK/dV kernel cannot build (e.g. an arch without
        WGMMA)."""
        from ..kernel.attention_bwd_prepost import AttentionBwdPostprocessKernel, AttentionBwdPreprocessKernel
        d, dt = config.head_dim, config.dtype
        variant = dict(local=bool(local), varlen=bool(varlen), deterministic=self.deterministic)
        kern = self._kernel(("bwd", d, dt, config.arch, tuple(sorted(variant.items()))),
                            lambda: _bwd_kernel_cls()(d, dt, arch=config.arch, **variant))
        return (self._kernel(("pre", d, dt, bool(varlen)),
                             lambda: AttentionBwdPreprocessKernel(d, dt, varlen=bool(varlen))),
                kern,
                self._kernel(("post", d, dt, bool(varlen)),
                             lambda: AttentionBwdPostprocessKernel(d, dt, varlen=bool(varlen))))

    def _prepare(self, kernels, compiled, views, problem, cq, ck, scale, window):
        """``(launch, result)`` over three bindings; the main binding owns every array the call
        allocates except device results (handed to the caller by ``result()``)."""
        (pre, kern, post), be = kernels, self.backend
        q, k, v, do, o, lse = views
        dt = q.dtype.name
        binds = [Binding(be, c) for c in compiled]
        main = binds[1]

        def release():
            for b in binds:
                b.release()

        def dev(x, pitch_align=1):
            if x.on_host:
                return main.own(arrays.to_device(be, np.ascontiguousarray(x.host), pitch_align=pitch_align))
            return arrays.DeviceArray(x.ptr, x.shape, x.strides, x.dtype, be, x.owner)

        def new(shape, dtype, label, owned=True):
            arr = arrays.empty(be, shape, dtype, label=f"AttentionBackward {label}")
            return main.own(arr) if owned else arr
        results = []                # dq, dk, dv
        try:
            d_o, d_do, d_lse = dev(o), dev(do), dev(lse)
            for arr, x in ((d_o, o), (d_do, do), (d_lse, lse)):
                if not arr.is_c_contiguous():
                    raise ArgumentError(f"{x.name} must be C-contiguous (a pointer operand of the backward)")
            total_q = q.shape[0] if cq is not None else None
            stats = new(kern.stats_shape(problem, total_q), "f32", "stats")
            pre_args = dict(o=d_o, do=d_do, lse=d_lse, stats=stats, seqlen_q=problem.seqlen_q, heads=problem.heads,
                            dq_blocks=kern.dq_accum_blocks(problem, total_q))
            if cq is not None:
                d_cq = dev(TensorView.of(cq, "cu_seqlens_q"))
                pre_args.update(cu_seqlens_q=d_cq, total_q=total_q)
            launches = [self._bind(binds[0], pre.grid(problem), **pre_args)]
            results += [new(x.shape, dt, n, owned=q.on_host) for x, n in ((q, "dq"), (k, "dk"), (v, "dv"))]
            dq_acc = new(kern.dq_accum_shape(problem, total_q), "f32", "dq_accum")
            dk, dv = results[1], results[2]
            devs = []
            for x, name in ((q, "q"), (k, "k"), (v, "v"), (do, "do")):
                arr = dev(x, pitch_align=16)
                main.tensor_map(name, arr, kern.tensor_map_extent(arr.shape, arr.strides))
                devs.append(arr)
            for name, arr in (("dk", dk), ("dv", dv), ("dq_accum", dq_acc), ("stats", stats)):
                main.pointer(name, arr)
            main.values.update(kern.scalar_values(problem, scale, window, total_q))
            zero = [dq_acc]
            if cq is not None:
                main.pointer("cu_seqlens_q", d_cq)
                main.pointer("cu_seqlens_k", dev(TensorView.of(ck, "cu_seqlens_k")))
                main.values["total_q"] = q.shape[0]
            if kern.deterministic:
                sems = new((problem.batch * problem.heads * kern.query_blocks(problem),), "u32", "semaphores")
                main.pointer("semaphores", sems)
                zero.append(sems)
            launches.append(main.launcher(kern.grid(problem), zero_fill=zero))
            post_args = dict(dq_accum=dq_acc, dq=results[0], seqlen_q=problem.seqlen_q, heads=problem.heads,
                             dq_blocks=main.values["dq_blocks"], scale=scale)
            if cq is not None:
                post_args["cu_seqlens_q"] = d_cq
            launches.append(self._bind(binds[2], post.grid(problem), **post_args))
            main.keep += devs + [d_o, d_do, d_lse] + results
        except BaseException:
            if not q.on_host:          # device results not handed out yet
                for arr in results:
                    arr.free()
            release()               # nothing leaks from a call that fails before launch
            raise

        def launch():
            for fn in launches:
                fn()

        def result():
            main.finish()
            if q.on_host:
                return tuple(arrays.to_host(x) for x in results)
            return tuple(wrap_like(x, q.framework) for x in results)
        launch.release, launch.keep = release, main.keep
        result.release, result.keep = release, main.keep
        return launch, result

    @staticmethod
    def _bind(bind, grid, **values):
        """``bind``'s launcher of ``grid`` with pointer (device array) and scalar ``values``."""
        for name, val in values.items():
            if isinstance(val, arrays.DeviceArray):
                bind.pointer(name, val)
            else:
                bind.values[name] = val
        return bind.launcher(grid)


def _empty_call(be, views):
    """``(launch, result)`` of a call with no query or no key: nothing to launch, zero gradients."""
    outs = [np.zeros(x.shape, x.dtype.numpy) for x in views]

    def launch():
        pass

    def result():
        if views[0].on_host:
            return tuple(o.copy() for o in outs)
        return tuple(wrap_like(arrays.to_device(be, o), views[0].framework) for o in outs)
    launch.release, launch.compiled, launch.compile_seconds, launch.cache_hit = (lambda: None), None, 0.0, False
    return launch, result


def attention_backward(dout, q, k, v, out, softmax_lse, config: AttentionConfig | None = None, backend="auto",
                       deterministic: bool = False, **options):
    """One-shot :class:`AttentionBackward` call: ``(dq, dk, dv)``."""
    return AttentionBackward(config, backend, deterministic=deterministic)(dout, q, k, v, out, softmax_lse,
                                                                           **options)


__all__ = ["AttentionBackward", "attention_backward", "check_backward"]
