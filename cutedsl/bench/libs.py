"""The array library a sweep keeps its inputs in, and the reference it compares with.

* :class:`TorchLib` — CUDA tensors from ``torch.randn``; reference ``torch.matmul`` (cuBLAS).
* :class:`CupyLib` — CUDA arrays from cupy's generator; reference ``cupy.matmul`` (cuBLAS).
* :class:`HostLib` — numpy host arrays (the emulator, or a GPU without torch/cupy); reference
  numpy in float64. It is what ``--backend sim`` uses: a test of the harness, not a benchmark.

cutedsl runs on the very arrays the reference reads (device arrays are used in place), and
writes into an output the library allocated, poisoned with NaN so that an element the kernel
never writes fails the comparison.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import dtype as _dtype


class HostLib:
    """numpy arrays on the host; ``cutedsl`` copies them to the backend once per input set."""

    name = "numpy"
    ref_name = "numpy float64 matmul (host; not cuBLAS, no timing)"
    device_resident = False
    times_reference = False
    #: a float64 host reference past this many multiply-adds takes too long: no check there
    check_max_macs = 2 ** 31

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def randn(self, shape, dt: str):
        return self.rng.standard_normal(shape, dtype=np.float32).astype(_dtype(dt).numpy)

    def empty(self, shape, dt: str):
        return None            # cutedsl allocates and returns a host copy

    def ref_out_dtype(self, out_dtype: str) -> str:
        return "f64"

    def matmul(self, a, b, out):
        return np.asarray(a).astype(np.float64) @ np.asarray(b).astype(np.float64)

    def transpose(self, x):
        return x.T

    def max_rel_diff(self, d, ref) -> float:
        d, ref = np.asarray(d, np.float64), np.asarray(ref, np.float64)
        if not np.all(np.isfinite(d)):
            return float("inf")
        return float(np.max(np.abs(d - ref)) / max(float(np.max(np.abs(ref))), 1e-30))

    def flusher(self, nbytes: int):
        return None

    def synchronize(self):
        pass

    def release(self):
        pass

    def info(self) -> dict:
        return {"array_library": f"numpy {np.__version__}"}


class TorchLib:
    """torch CUDA tensors; the reference is ``torch.matmul`` (cuBLAS), writing the input dtype."""

    name = "torch"
    device_resident = True
    times_reference = True
    check_max_macs = None

    def __init__(self, seed: int = 0):
        import torch
        self.torch = torch
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(seed)
        self.ref_name = f"cuBLAS via torch.matmul (torch {torch.__version__})"
        self._dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "tf32": torch.float32,
                    "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
        self._one = None

    @classmethod
    def available(cls) -> tuple:
        try:
            import torch
        except ImportError as e:
            return False, f"torch is not installed ({e})"
        if not torch.cuda.is_available():
            return False, "torch sees no CUDA device"
        return True, ""

    def randn(self, shape, dt: str):
        t = self.torch.randn(shape, generator=self.gen, device="cuda", dtype=self.torch.float32)
        return t.to(self._dt[dt])

    def empty(self, shape, dt: str):
        return self.torch.full(shape, float("nan"), device="cuda", dtype=self._dt[dt])

    def ref_out_dtype(self, out_dtype: str) -> str:
        return "same as inputs"

    def matmul(self, a, b, out):
        if a.element_size() == 1:        # fp8: cuBLAS through torch._scaled_mm (B column-major), bf16 out
            if self._one is None:
                self._one = self.torch.ones((), device="cuda", dtype=self.torch.float32)
            return self.torch._scaled_mm(a, b, scale_a=self._one, scale_b=self._one, out_dtype=self.torch.bfloat16,
                                         out=out)
        return self.torch.matmul(a, b, out=out)

    def transpose(self, x):
        return x.T

    def max_rel_diff(self, d, ref) -> float:
        d, ref = d.float(), ref.float()
        if not bool(self.torch.isfinite(d).all()):
            return float("inf")
        return float((d - ref).abs().max() / ref.abs().max().clamp_min(1e-30))

    def flusher(self, nbytes: int):
        buf = self.torch.empty(max(nbytes // 4, 1), dtype=self.torch.int32, device="cuda")
        return buf.zero_

    def synchronize(self):
        self.torch.cuda.synchronize()

    def release(self):
        self.torch.cuda.empty_cache()

    def info(self) -> dict:
        m = self.torch.backends.cuda.matmul
        return {"array_library": f"torch {self.torch.__version__}",
                "torch_allow_fp16_reduced_precision_reduction": bool(m.allow_fp16_reduced_precision_reduction),
                "torch_allow_tf32": bool(m.allow_tf32)}


class CupyLib:
    """cupy CUDA arrays; the reference is ``cupy.matmul`` (cuBLAS). No bfloat16."""

    name = "cupy"
    device_resident = True
    times_reference = True
    check_max_macs = None

    def __init__(self, seed: int = 0):
        import cupy
        self.cp = cupy
        self.rng = cupy.random.default_rng(seed)
        self.ref_name = f"cuBLAS via cupy.matmul (cupy {cupy.__version__})"

    @classmethod
    def available(cls) -> tuple:
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:   # noqa: BLE001 - ImportError, or CUDARuntimeError without a driver
            return False, f"cupy unusable ({type(e).__name__}: {e})"
        return True, ""

    def _np(self, dt):
        if dt in ("bf16", "e4m3", "e5m2"):
            from ..errors import ArgumentTypeError
            raise ArgumentTypeError(f"cupy has no {dt} arrays (nor a cuBLAS {dt} GEMM): benchmark {dt} with "
                                    f"torch installed")
        return _dtype(dt).numpy

    def randn(self, shape, dt: str):
        return self.rng.standard_normal(shape, dtype=self.cp.float32).astype(self._np(dt))

    def empty(self, shape, dt: str):
        return self.cp.full(shape, self.cp.nan, dtype=self._np(dt))

    def ref_out_dtype(self, out_dtype: str) -> str:
        return "same as inputs"

    def matmul(self, a, b, out):
        return self.cp.matmul(a, b, out=out)

    def transpose(self, x):
        return x.T

    def max_rel_diff(self, d, ref) -> float:
        d, ref = d.astype(self.cp.float32), ref.astype(self.cp.float32)
        if not bool(self.cp.isfinite(d).all()):
            return float("inf")
        return float(self.cp.abs(d - ref).max() / max(float(self.cp.abs(ref).max()), 1e-30))

    def flusher(self, nbytes: int):
        buf = self.cp.empty(max(nbytes // 4, 1), dtype=self.cp.int32)
        return lambda: buf.fill(0)

    def synchronize(self):
        self.cp.cuda.runtime.deviceSynchronize()

    def release(self):
        self.cp.get_default_memory_pool().free_all_blocks()

    def info(self) -> dict:
        return {"array_library": f"cupy {self.cp.__version__}"}


def pick(backend_name: str, want: str = "auto", seed: int = 0) -> tuple:
    """``(lib, note)``: torch where present, else cupy, on a GPU; numpy on the emulator.
    ``want``: ``auto`` | ``torch`` | ``cupy`` | ``numpy``."""
    if backend_name != "cuda" or want == "numpy":
        why = "" if backend_name != "cuda" else "--ref numpy: no cuBLAS comparison"
        return HostLib(seed), why
    notes = []
    for cls in (TorchLib, CupyLib):
        if want not in ("auto", cls.name):
            continue
        ok, why = cls.available()
        if ok:
            return cls(seed), "; ".join(notes)
        notes.append(f"{cls.name}: {why}")
    from ..errors import NoDeviceError
    raise NoDeviceError("no cuBLAS to compare with (" + "; ".join(notes) + "); install torch or cupy, "
                        "or pass --ref numpy")
