"""Benchmark harness and GPU bundle (a Device-level tool: imports ``cutedsl.device``; nothing in
the library imports it).

* :mod:`.shapes` — the problem sets (``square``, ``skinny``, ``paper``, ``stages``, ``tiny``).
* :mod:`.configs` — the configs a sweep times (every schedule ``GemmConfig`` accepts).
* :mod:`.timing` — CUDA-event and wall-clock timers, medians, geometric means.
* :mod:`.libs` — the array library that holds the inputs and runs cuBLAS (torch, cupy) or the
  host reference (emulator).
* :mod:`.runner` — one sweep: same inputs for cutedsl and cuBLAS, rotation, L2 flush.
* :mod:`.report` — text table, JSON, CSV, plot, progress bar.
* :mod:`.bundle` — compile every kernel a GPU run needs into a cache directory; verify it.
* :mod:`.plans` — what a GPU lease runs: problems, the configs timed on each, tests, main job.
* :mod:`.lease` — the lease driver behind ``scripts/gpu_run.sh`` (one deadline, steps, summary);
  :mod:`.lease_bench` (problems vs cuBLAS), :mod:`.startup` (launch overhead, cold start),
  :mod:`.lease_report` (the end-of-run table).
* :mod:`.identity` — integer inputs: GPU result bit-identical with the emulator.
* :mod:`.capture` — compile-only backend + pytest plugin: the kernels the gpu tests need.
* :mod:`.overhead` — host overhead of ``Gemm.__call__`` measured over a null CUDA driver.

Entry points: ``python -m cutedsl bench ...``, ``python -m cutedsl bundle ...`` and
``scripts/gpu_run.sh`` (``python -m cutedsl.bench.lease``).
"""
