"""Compiling many GEMM configs at once: a process pool filling the kernel cache
(``python -m cutedsl compile``, and the GPU bundle).

MLIR contexts are per process and the compile lock serialises one process, so parallelism
comes from worker processes (``spawn``: no state of the caller is inherited; each worker
imports the toolchain once and then compiles many configs). Every worker compiles into the
cache the caller names (``CUTEDSL_CACHE_DIR``), whose atomic publication makes concurrent
writers safe; a config another worker or an earlier run already compiled is a cache hit.
A config travels to a worker as its ``fields()`` and its family's name (the config protocol,
:mod:`cutedsl.device.config_protocol`), so any registered family compiles here.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time

import attrs


@attrs.frozen
class CompileResult:
    """One config's outcome: ``key`` (cache key) and ``seconds`` (wall time in the worker,
    cache hits included), ``hit`` (from the cache), or ``error`` (``"ExcType: message"``)."""
    config: object
    key: str | None = None
    seconds: float = 0.0
    hit: bool = False
    registers: int | None = None
    error: str | None = None


def config_kernel(cfg, grouped: bool = False):
    """The kernel object of ``cfg``: its schedule's, or (``grouped``) the schedule's grouped
    kernel (what ``GroupedGemm`` runs)."""
    if not grouped:
        return cfg.kernel()
    from ..kernel.grouped import grouped_kernels
    return cfg.kernel(kernel_cls=grouped_kernels(cfg.arch)[cfg.schedule])


#: the key of a worker's field dict that names the config family (no family has such a field)
FAMILY_KEY = "config_family"


def _compile_one(fields: dict, cache_dir: str | None, grouped: bool = False) -> tuple:
    if cache_dir is not None:
        os.environ["CUTEDSL_CACHE_DIR"] = cache_dir
    from .config_protocol import config_family
    t = time.perf_counter()
    try:
        fields = dict(fields)
        kern = config_kernel(config_family(fields.pop(FAMILY_KEY))(**fields), grouped)
        ck = kern.compile()
        return ck.key, time.perf_counter() - t, bool(kern.last_cache_hit), ck.resources.registers, None
    except Exception as e:       # noqa: BLE001 - reported per config, the others go on
        return None, time.perf_counter() - t, False, None, f"{type(e).__name__}: {e}"


def compile_all(configs, *, jobs: int | None = None, cache_dir=None, progress=None, grouped: bool = False) -> list:
    """Compile every config (``GemmConfig`` ...) in ``configs`` into the kernel cache (``cache_dir``, default
    ``$CUTEDSL_CACHE_DIR`` or ``~/.cache/cutedsl``) with ``jobs`` worker processes (default: the
    CPU count; 1 compiles in this process). ``progress(done, total, result)`` is called as each
    finishes. ``grouped``: compile each config's grouped kernel (``GroupedGemm``) instead.
    Returns one :class:`CompileResult` per config, in order; a failing config is a result
    with ``error``, never an exception that loses the others."""
    configs = list(configs)
    cache_dir = str(cache_dir) if cache_dir is not None else os.environ.get("CUTEDSL_CACHE_DIR")
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs) or 1))
    fields = [{**c.fields(), FAMILY_KEY: c.FAMILY} for c in configs]   # user epilogue nodes travel pickled
    results = [None] * len(configs)

    def done(i, out):
        results[i] = CompileResult(configs[i], *out)
        if progress is not None:
            progress(sum(r is not None for r in results), len(configs), results[i])

    if jobs == 1:
        for i, f in enumerate(fields):
            done(i, _compile_one(f, cache_dir, grouped))
        return results
    with cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        futs = {ex.submit(_compile_one, f, cache_dir, grouped): i for i, f in enumerate(fields)}
        for fut in cf.as_completed(futs):
            done(futs[fut], fut.result())
    return results


__all__ = ["compile_all", "CompileResult"]
