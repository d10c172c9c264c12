"""``Gemm("auto")``: a config per call shape (the documented model, or a ``cutedsl.tune`` winner
stored for this device), one compiled :class:`~cutedsl.device.gemm.Gemm` per chosen config."""
from __future__ import annotations

import threading

from ..atom.mma_traits import ELEMENT_BYTES
from ..errors import ArgumentError, ArgumentTypeError, CuteDSLError, checked_arguments, one_of
from ..runtime import arrays
from .config import GemmConfig
from .gemm import Gemm
from ..runtime.selection import check_backend_arg


class AutoGemm:
    """``Gemm("auto", backend, ...)``: each call's shape (and A's dtype) picks a config with
    :meth:`GemmConfig.for_problem` (on the backend's SM count); one :class:`Gemm`, so one compiled
    kernel, per chosen config, kept for later calls. ``fixed``: config fields to keep (e.g.
    ``out_dtype="bf16"``, ``epilogue="global"``); ``epilogue``/``cache``/``dump_dir`` as for
    :class:`Gemm`. ``last_config`` is the config of the latest call (``explain()`` says why)."""

    @checked_arguments()
    def __init__(self, backend="auto", *, epilogue=None, cache=None, dump_dir=None, **fixed):
        check_backend_arg(backend)
        self._backend_arg = backend
        self._opts = {"epilogue": epilogue, "cache": cache, "dump_dir": dump_dir}
        self._fixed = fixed
        GemmConfig.for_problem(128, 128, 64, **{"dtype": "f16", **fixed})    # bad fields: now, not at the call
        self._gemms = {}
        self._lock = threading.Lock()
        self.last_config = None

    def config_for(self, a, b) -> GemmConfig:
        """The config a call with operands ``a`` ([L x] M x K) and ``b`` ([L x] K x N) runs."""
        va, vb = arrays.TensorView.of(a, "a"), arrays.TensorView.of(b, "b")
        if len(va.shape) not in (2, 3) or len(vb.shape) not in (2, 3):
            raise ArgumentError(f"a and b must be 2-D or 3-D (L, rows, cols), got shapes {va.shape} and {vb.shape}")
        (m, k), (_, n) = va.shape[-2:], vb.shape[-2:]
        l = max(va.shape[0] if len(va.shape) == 3 else 1, vb.shape[0] if len(vb.shape) == 3 else 1)
        for v in (va, vb):          # (a fixed dtype, e.g. "mxfp4", says itself which operands it takes)
            if v.dtype is None or ("dtype" not in self._fixed and v.dtype.name not in ELEMENT_BYTES):
                raise ArgumentTypeError(f"{v.name} has dtype {v.dtype.name if v.dtype else v.raw_dtype}: Gemm('auto') "
                                        f"takes operands of {one_of(ELEMENT_BYTES)} (convert it, e.g. "
                                        f"{v.name}.astype(np.float16))")
        dt = va.dtype.name
        sms = None
        be = self._backend_arg if not isinstance(self._backend_arg, str) else None
        if be is not None:
            sms = getattr(be, "sm_count", None)
        batched = {"batched": True} if 3 in (len(va.shape), len(vb.shape)) else {}
        tuned = self._tuned(m, n, k, max(l, 1), dt, batched)
        if tuned is not None:
            return tuned
        return GemmConfig.for_problem(max(m, 1), max(n, 1), max(k, 1), **{"dtype": dt, **batched, **self._fixed},
                                      sm_count=sms, l=max(l, 1))

    def _tuned(self, m, n, k, l, dt, batched):
        """The winner ``cutedsl.tune`` stored for this problem on this device, if any (the
        backend is resolved only when a tuning record exists)."""
        from .tune import _path, tuned_config
        cache = self._opts["cache"] or None
        if not _path(cache).is_file():
            return None
        be = self._backend_arg
        if isinstance(be, str):
            from ..runtime.selection import get_backend
            try:
                be = get_backend(be)
            except CuteDSLError:
                return None
        fixed = {f: v for f, v in self._fixed.items() if f != "batched"}
        return tuned_config(m, n, k, dt, backend=be, l=l, cache=cache, **fixed)

    def gemm_for(self, cfg: GemmConfig) -> "Gemm":
        with self._lock:
            g = self._gemms.get(cfg)
            if g is None:
                g = self._gemms[cfg] = Gemm(cfg, self._backend_arg, **self._opts)
            return g

    def __call__(self, a, b, out=None, **extra):
        cfg = self.config_for(a, b)
        self.last_config = cfg
        return self.gemm_for(cfg)(a, b, out=out, **extra)

    def run(self, a, b, out=None, **extra):
        cfg = self.config_for(a, b)
        self.last_config = cfg
        return self.gemm_for(cfg).run(a, b, out=out, **extra)


__all__ = ["AutoGemm"]
