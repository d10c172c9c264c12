"""One sweep: every (problem, config) of a shape set timed against the reference on the same
inputs.

Per problem, ``n_sets`` input sets (A, B, and an output poisoned with NaN) are drawn from
randn in the array library; together they exceed 3x L2, so rotating through them round-robin
means no launch finds its inputs in L2 (:func:`.timing.sets_needed`). Before each timed launch
an L2 flush (a memset of 2x L2) runs as well, which also keeps the GPU ahead of the host. Each
config and the reference get ``warmup`` untimed launches and ``iters`` timed ones (CUDA
events, one pair per launch); the median is reported, with TFLOP/s = 2MNK / median and the
ratio cutedsl / reference TFLOP/s. The first input set's output is compared with the
reference's (max |D - R| / max |R|), so a wrong kernel cannot post a time. cutedsl's launches
are repeated through the backend's prebuilt launcher (the launch cache's path), so host
overhead stays out of the events for short problems too.
"""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import time

from ..errors import CuteDSLError
from . import configs as _configs
from .shapes import shapes_for, x_label, x_value
from .timing import geomean, median, rotation, sets_needed, tflops

#: the reference's output type where it is not the input type (cuBLAS fp8 GEMMs write bf16)
REF_DTYPE = {"e4m3": "bf16", "e5m2": "bf16"}


def tolerance(dtype: str, out_dtype: str) -> float:
    """max |D - ref| / max |ref| accepted against the reference: the main job's tolerance of
    the looser of the output dtype and the type the reference writes (tf32: its truncated
    inputs against a float64 reference, 4e-3)."""
    from ..cliargs import TOLERANCE
    return max(TOLERANCE[out_dtype], TOLERANCE.get(REF_DTYPE.get(dtype, dtype), 4e-3))


def prebuilt_launcher(backend, gemm, launch):
    """The fastest way to repeat a prepared launch (``gemm.prepare(...)[0]``): the backend's
    ``launcher`` (parameter buffer built once, a few microseconds of host time, so the GPU
    stays ahead of the host even for problems of tens of microseconds), else ``launch`` itself."""
    packed = getattr(launch, "packed", None)
    if packed is None or not hasattr(backend, "launcher") or packed[3]:
        return launch
    handle, grid, params, _ = packed
    kern = launch.compiled      # the kernel the launch runs: a layout variant's, not gemm.compiled
    return backend.launcher(handle, grid, params, block=kern.block, cluster=kern.cluster, smem=kern.dynamic_smem)


class Sweep:
    """Times configs over shape sets. Collaborators are injected so the logic is testable
    without a GPU: ``backend`` (``.name``), ``lib`` (:mod:`.libs`), ``timer`` (:mod:`.timing`),
    ``make_gemm(config)`` -> an object with ``prepare(a, b, out=)`` -> ``(launch, result)``."""

    def __init__(self, backend, lib, timer, make_gemm, *, iters=30, warmup=5, l2_bytes=0,
                 budget_bytes=4 << 30, max_sets=8, flush=True, progress=None, make_grouped=None,
                 make_attention=None, make_attention_bwd=None):
        if iters < 1 or warmup < 0:
            raise ValueError(f"iters must be >= 1 and warmup >= 0, got {iters}, {warmup}")
        self.backend, self.lib, self.timer, self.make_gemm = backend, lib, timer, make_gemm
        self.iters, self.warmup, self.l2 = iters, warmup, l2_bytes
        self.budget, self.max_sets = budget_bytes, max_sets
        self.flush = lib.flusher(2 * l2_bytes) if flush and l2_bytes else None
        self.progress = progress
        self._gemms = {}
        self.make_grouped = make_grouped     #: config -> a GroupedGemm (grouped sets)
        self.make_attention = make_attention  #: AttentionConfig -> an Attention (attention sets)
        self.make_attention_bwd = make_attention_bwd  #: AttentionConfig -> an AttentionBackward (attention-bwd)
        self.timed = backend.name == "cuda"
        #: called with each config before it runs and with each row once it is recorded (the
        #: lease's journal: a GPU fault that kills the process names the config it was in)
        self.before_config = self.after_row = None

    # -- pieces -----------------------------------------------------------------------------
    def gemm(self, cfg):
        if cfg not in self._gemms:
            self._gemms[cfg] = self.make_gemm(cfg)
        return self._gemms[cfg]

    def grouped(self, cfg):
        key = ("grouped", cfg)
        if key not in self._gemms:
            self._gemms[key] = self.make_grouped(cfg)
        return self._gemms[key]

    def attention(self, cfg):
        key = ("attention", cfg)
        if key not in self._gemms:
            self._gemms[key] = self.make_attention(cfg)
        return self._gemms[key]

    def attention_backward(self, cfg):
        key = ("attention-bwd", cfg)
        if key not in self._gemms:
            self._gemms[key] = self.make_attention_bwd(cfg)
        return self._gemms[key]

    def _time(self, fns):
        """Warm-up then timed launches over the rotated input sets; returns the timed ms."""
        warm, timed = rotation(len(fns), self.warmup, self.iters)
        for i in warm:
            fns[i]()
        self.lib.synchronize()
        return self.timer.time([fns[i] for i in timed], between=self.flush)

    def _inputs(self, m, n, k, dt, out_dt, b_major, b_dt=None):
        from ..atom.mma_traits import MX_DTYPES
        if dt in MX_DTYPES:
            return self._mx_inputs(m, n, k, dt)
        from ..dtypes import dtype as _dtype
        lib = self.lib
        b_dt = b_dt or dt
        ref_dt = REF_DTYPE.get(dt, dt)       # what the reference writes (fp8: bf16)
        per_set = (m * k) * _dtype(dt).nbytes + k * n * _dtype(b_dt).nbytes + \
            m * n * (_dtype(out_dt).nbytes + _dtype(ref_dt).nbytes)
        n_sets = sets_needed(per_set, self.l2, self.budget, self.max_sets) if lib.device_resident else 1
        sets = []
        for _ in range(n_sets):
            a = lib.randn((m, k), dt)
            b = lib.randn((k, n), b_dt) if b_major == "MN" else lib.transpose(lib.randn((n, k), b_dt))
            sets.append({"a": a, "b": b, "out": lib.empty((m, n), out_dt), "ref": lib.empty((m, n), ref_dt)})
        return sets

    def _mx_inputs(self, m, n, k, dt):
        """One host input set of block-scaled ``dt`` (MXFP8 / MXFP4 / NVFP4): randn A (m x k)
        and B^T (n x k) quantized along K (:func:`cutedsl.device.mx.quantize`), the packed
        factors as the kernel's ``a_scales`` / ``b_scales``, and the reference: the dequantized
        product in float64 (no library has a reference for these on every machine; not timed)."""
        import numpy as np
        from ..device import mx
        rng = np.random.default_rng(m * 1_000_003 + n * 1009 + k)
        qa, sa = mx.quantize(rng.standard_normal((m, k)), dt)
        qb, sb = mx.quantize(rng.standard_normal((n, k)), dt)
        ref = mx.dequantize(qa, sa, dt) @ mx.dequantize(qb, sb, dt).T
        extra = {"a_scales": mx.pack_scales(sa, dt), "b_scales": mx.pack_scales(sb, dt)}
        return [{"a": qa, "b": qb.T, "out": None, "ref": None, "ref0": ref, "extra": extra}]

    def _reference(self, sets, m, n, k):
        """Run (and, on a GPU, time) the reference; returns (median ms or None, ref of set 0)."""
        if "ref0" in sets[0]:               # computed with the inputs (block-scaled)
            return None, sets[0]["ref0"]
        lib = self.lib
        if lib.times_reference:
            fns = [lambda s=s: lib.matmul(s["a"], s["b"], s["ref"]) for s in sets]
            ms = median(self._time(fns))
            return ms, sets[0]["ref"]
        if lib.check_max_macs is not None and m * n * k > lib.check_max_macs:
            return None, None
        return None, lib.matmul(sets[0]["a"], sets[0]["b"], None)

    def _launcher(self, gemm, launch):
        return prebuilt_launcher(self.backend, gemm, launch)

    def _one(self, cfg, sets, ref0, row):
        gemm = self.gemm(cfg)
        prepared = [gemm.prepare(s["a"], s["b"], out=s["out"], **s.get("extra", {})) for s in sets]
        times = self._time([self._launcher(gemm, p[0]) for p in prepared])
        d0 = prepared[0][1]()
        if ref0 is not None:
            err = self.lib.max_rel_diff(d0, ref0)
            tol = tolerance(cfg.dtype, cfg.out_dtype)
            row.update(max_rel_diff=err, tolerance=tol, check="pass" if err <= tol else "FAIL")
        else:
            row["check"] = "skipped"
        ms = median(times)
        srt = sorted(times)
        if self.timed:
            row.update(ms=ms, ms_min=srt[0], ms_p90=srt[min(len(srt) - 1, int(0.9 * len(srt)))],
                       tflops=tflops(row["m"], row["n"], row["k"], ms))
        else:
            row.update(ms=None, tflops=None, wall_ms=ms)

    # -- a set ---------------------------------------------------------------------------
    def run_set(self, set_name: str, cfgs: list) -> dict:
        from .shapes import ATTENTION_SETS, GROUPED_SETS
        if set_name in GROUPED_SETS:            # problems made of groups: one GroupedGemm launch each
            from .grouped import run_grouped_set
            return run_grouped_set(self, set_name, cfgs)
        if set_name in ATTENTION_SETS:          # AttentionConfigs against torch's SDPA backends
            from .attention import run_attention_set
            return run_attention_set(self, set_name, cfgs)
        rows = []
        for (m, n, k) in shapes_for(set_name, self.backend.name):
            rows += self.run_problem(set_name, m, n, k, cfgs)
        out = {"set": set_name, "x_label": x_label(set_name), "rows": rows, "summary": summarize(rows)}
        if set_name == "wave":          # the SM-utilisation model on the set's real shapes (any backend)
            sms = getattr(self.backend, "sm_count", None) if self.timed else None
            out["model"] = model_rows(cfgs, sms or 132)
        return out

    def run_problem(self, set_name: str, m: int, n: int, k: int, cfgs: list, deadline: float | None = None) -> list:
        """One row per config of ``cfgs`` on an ``m x n x k`` problem, the reference run (and
        timed) once per input type on the same inputs. ``deadline`` (``time.time()`` seconds):
        a config that would not finish by then (its predicted time: the previous config's) is
        not run; its row says ``check: "skipped"`` and why."""
        rows = []
        groups = {}
        for cfg in cfgs:
            groups.setdefault((cfg.dtype, cfg.out_dtype, cfg.b_major, cfg.b_dtype), []).append(cfg)
        last = 0.0
        for (dt, out_dt, b_major, b_dt), group in groups.items():
            if deadline is not None and time.time() >= deadline:
                rows += [self._skipped_row(set_name, m, n, k, cfg, deadline) for cfg in group]
                continue
            sets = self._inputs(m, n, k, dt, out_dt, b_major, b_dt)
            try:
                ref_ms, ref0 = self._reference(sets, m, n, k)
            except Exception as e:   # noqa: BLE001 - a reference failure must not end the sweep
                ref_ms, ref0 = None, None
                ref_err = f"{type(e).__name__}: {e}"
            else:
                ref_err = None
            for cfg in group:
                if deadline is not None and time.time() + last >= deadline:
                    rows.append(self._skipped_row(set_name, m, n, k, cfg, deadline))
                    continue
                t0 = time.time()
                if self.before_config is not None:
                    self.before_config(cfg)
                row = self._row(set_name, m, n, k, cfg, len(sets), ref_ms)
                if ref_err:
                    row["ref_error"] = ref_err
                try:
                    self._one(cfg, sets, ref0, row)
                except CuteDSLError as e:
                    row.update(error=f"{type(e).__name__}: {e}", ms=None, tflops=None, check="error")
                t, r = row.get("tflops"), row.get("ref_tflops")
                row["ratio"] = t / r if t and r else None
                rows.append(row)
                if self.after_row is not None:
                    self.after_row(row)
                last = time.time() - t0
                if self.progress is not None:
                    self.progress(f"{set_name} {m}x{n}x{k} {row['config']}")
            del sets
            self.lib.release()
        return rows

    def _row(self, set_name, m, n, k, cfg, n_sets, ref_ms) -> dict:
        return {"set": set_name, "m": m, "n": n, "k": k, "config": _configs.label(cfg), "schedule": cfg.schedule,
                "tile": "x".join(map(str, cfg.tile)), "stages": cfg.resolved_stages(), "dtype": cfg.dtype,
                "out_dtype": cfg.out_dtype, "x": x_value(set_name, m, n, k, cfg.resolved_stages()),
                "n_sets": n_sets, "iters": self.iters, "ref_ms": ref_ms,
                "ref_tflops": tflops(m, n, k, ref_ms) if self.timed else None}

    def _skipped_row(self, set_name, m, n, k, cfg, deadline) -> dict:
        row = self._row(set_name, m, n, k, cfg, 0, None)
        row.update(ms=None, tflops=None, ratio=None, check="skipped",
                   error=f"not run: the deadline was {max(0.0, deadline - time.time()):.0f} s away")
        return row


def make_sweep(backend, lib, *, iters=30, warmup=5, max_sets=8, flush=True, progress=None) -> tuple:
    """``(sweep, timer)`` for ``backend`` and ``lib``: CUDA events, the device's L2 size (rotation
    and flush) and ``iters`` / ``warmup`` on a GPU; on the emulator host wall time, no flush, at
    most 2 / 1 launches (it tests the harness). ``timer.close()`` when done."""
    from ..device import Gemm
    from ..device.attention import Attention
    from ..device.attention_bwd import AttentionBackward
    from ..device.grouped import GroupedGemm
    from .timing import EventTimer, WallTimer
    timed = backend.name == "cuda"
    timer = EventTimer(backend.drv) if timed else WallTimer(backend.synchronize)
    l2 = device_attrs(backend).get("l2_bytes", 0) if timed else 0
    if not timed:
        iters, warmup = min(iters, 2), min(warmup, 1)
    sweep = Sweep(backend, lib, timer, lambda c: Gemm(c, backend), iters=iters, warmup=warmup, l2_bytes=l2,
                  max_sets=max_sets, flush=flush, progress=progress, make_grouped=lambda c: GroupedGemm(c, backend),
                  make_attention=lambda c: Attention(c, backend),
                  make_attention_bwd=lambda c: AttentionBackward(c, backend))
    return sweep, timer


def model_rows(cfgs: list, sm_count: int) -> list:
    """The ``wave`` set's SM-utilisation model: per problem of the set and persistent config,
    the decomposition's mode, launched clusters, longest cluster (k-iterations) and utilisation."""
    from .shapes import SETS, utilisation_model
    rows = []
    for (m, n, k) in SETS["wave"]:
        for cfg in cfgs:
            u = utilisation_model(cfg, m, n, k, sm_count)
            if u is not None:
                rows.append({"m": m, "n": n, "k": k, "config": _configs.label(cfg), "sm_count": sm_count, **u})
    return rows


def _shape_key(row) -> tuple:
    """What identifies a row's problem: an attention row's ``problem`` list, else its M, N, K
    (a lease row's ``problem`` is the index of its problem in the plan, not a shape)."""
    p = row.get("problem")
    return tuple(p) if isinstance(p, (list, tuple)) else (row["m"], row["n"], row["k"])


def summarize(rows: list) -> dict:
    """Per config: geometric means of TFLOP/s and of the ratio to the reference, failures;
    and the reference's geometric-mean TFLOP/s (each problem counted once)."""
    out = {}
    for label in dict.fromkeys(r["config"] for r in rows):
        rs = [r for r in rows if r["config"] == label]
        out[label] = {"geomean_tflops": geomean(r.get("tflops") for r in rs),
                      "geomean_ratio": geomean(r.get("ratio") for r in rs),
                      "problems": len(rs),
                      "failed_checks": sum(r.get("check") in ("FAIL", "error") for r in rs)}
    ref = {(*_shape_key(r), r["dtype"]): r.get("ref_tflops") for r in rows}
    return {"configs": out, "reference_geomean_tflops": geomean(ref.values())}


def nvidia_smi() -> dict:
    """Current clocks, power and temperature from ``nvidia-smi`` (empty where it is absent)."""
    q = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,temperature.gpu,pstate"
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {}
    if r.returncode != 0 or not r.stdout.strip():
        return {}
    vals = [v.strip() for v in r.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(q.split(","), vals))


def device_attrs(backend) -> dict:
    """Name, driver version, SM count, L2 bytes, clocks of the CUDA device (driver API)."""
    if getattr(backend, "name", None) != "cuda":
        return {"device": f"{getattr(backend, 'name', '?')} backend (no GPU)"}
    drv, dev = backend.drv, backend.device
    A = drv.CUdevice_attribute
    out = {"device": backend.device_name(), "driver_version": backend.driver_version()}
    for key, attr in (("sm_count", "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
                      ("l2_bytes", "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
                      ("max_sm_clock_khz", "CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
                      ("max_mem_clock_khz", "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")):
        try:
            err, v = drv.cuDeviceGetAttribute(getattr(A, attr), dev)
            if err == drv.CUresult.CUDA_SUCCESS:
                out[key] = int(v)
        except (AttributeError, TypeError):   # attribute removed from this CUDA version
            pass
    return out


def header(backend, lib, timer, sweep: Sweep, notes=()) -> dict:
    from ..compiler.cache import source_hash
    h = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "host": platform.node(), "python": platform.python_version(), "backend": backend.name,
         "cutedsl_source_hash": source_hash(), "timer": timer.kind, "iters": sweep.iters,
         "warmup": sweep.warmup, "l2_flush_bytes": 2 * sweep.l2 if sweep.flush else 0,
         "reference": lib.ref_name, **lib.info(), **device_attrs(backend)}
    smi = nvidia_smi()
    if smi:
        h["nvidia_smi"] = smi
    if not sweep.timed:
        h["timings"] = ("none claimed: the emulator runs tiny shapes to test the harness; wall_ms is "
                        "host time of the emulator, not a kernel time")
    if os.environ.get("CUTEDSL_CACHE_DIR"):
        h["cache_dir"] = os.environ["CUTEDSL_CACHE_DIR"]
    if notes:
        h["notes"] = [n for n in notes if n]
    return h
