"""The ``attention`` set: cutedsl's attention forward against ``torch.nn.functional.
scaled_dot_product_attention`` with its FlashAttention and cuDNN backends
(``torch.nn.attention.sdpa_kernel``), in the same run on the same inputs -- FlashAttention-3's
forward benchmark (16k tokens, hidden 2048, seqlen 512..16k, head dims 64/128/256 where the
kernel builds them, causal and not; :data:`.shapes.ATTENTION_SETS`).

The sweep's machinery is reused: its timer (CUDA events, median), warm-up, rotated input sets
(together more than 3x L2) and L2 flush (:meth:`.runner.Sweep._time`), its summary, report and
plot. TFLOP/s are counted as FlashAttention counts them (:func:`cutedsl.problem.attention_flops`:
4 * seqlen_q * seqlen_k * head_dim * heads * batch, times the fraction of (query, key) pairs a
causal mask keeps). cutedsl's output of the first input set is compared with SDPA-flash's (max
|O - R| / max |R|), so a wrong kernel cannot post a time. On the emulator (array library numpy)
the set runs :data:`.shapes.TINY_ATTENTION` against the float64 reference: a test of the harness,
no timings. The ``attention-bwd`` set times the backward the same way (:mod:`.attention_bwd`).
"""
from __future__ import annotations

from types import SimpleNamespace

from ..errors import CuteDSLError
from .shapes import ATTENTION_HEAD_DIMS, shapes_for, x_label
from .timing import median, sets_needed

#: torch's SDPA backends timed beside cutedsl: (row key prefix, SDPBackend name, label)
SDPA = (("ref", "FLASH_ATTENTION", "SDPA flash"), ("cudnn", "CUDNN_ATTENTION", "SDPA cuDNN"))


def configs(dtype: str, arch: str = "sm_90a") -> tuple:
    """``(AttentionConfigs, notes)``: one config per head dimension of the set the kernel of
    ``arch`` builds (its default schedule: FlashAttention-3's on sm_90a, -4's on sm_100a); a
    note names each head dimension skipped and why. ``UsageError`` (``--dtype``, ``--arch``)
    for a dtype or an architecture the attention kernels do not take, and for fp8 (SDPA, the
    set's baseline, has none)."""
    from ..cliargs import UsageError
    from ..device.attention_config import ARCHS, AttentionConfig
    from ..errors import ConfigError
    if arch not in ARCHS:
        raise UsageError("--arch", f"the attention set: the attention kernels are built for {', '.join(ARCHS)}, "
                                   f"got {arch}")
    if dtype in ("e4m3", "e5m2"):
        # the set's baseline is torch SDPA on the same tensors, which has no fp8 path: a ratio against
        # it would compare an fp8 kernel with a 16-bit one
        raise UsageError("--dtype", f"the attention set times bf16/f16 against torch SDPA, which has no {dtype} "
                                    f"path; time the fp8 forward with `python -m cutedsl attention --dtype e4m3`")
    out, notes = [], []
    for d in ATTENTION_HEAD_DIMS:
        try:
            out.append(AttentionConfig(head_dim=d, dtype=dtype, arch=arch))
        except ConfigError as e:
            if "dtype" in str(e):
                raise UsageError("--dtype", f"the attention set: {e}") from None
            notes.append(f"attention head_dim {d} skipped: {e}")
    return out, notes


def label(cfg, causal: bool) -> str:
    """``attention d128 bf16 causal pingpong``: head dim, dtype, mask, the schedule (sm_100a: the arch,
    whose one FlashAttention-4 schedule has no knobs)."""
    sched = cfg.arch if cfg.arch != "sm_90a" else "pingpong" if cfg.pingpong else "overlap" if cfg.overlap \
        else "simple"
    return f"attention d{cfg.head_dim} {cfg.dtype} {'causal' if causal else 'full'} {sched}"


def inputs(sweep, batch, seqlen, heads, d, dt, operands=3, tensors=4):
    """The rotated input sets: ``operands`` random ``(batch, seqlen, heads, d)`` arrays each
    (q, k, v[, dout]); a set counts as ``tensors`` such arrays (outputs, workspace) for the
    rotation's bytes."""
    lib = sweep.lib
    from ..dtypes import dtype as _dtype
    per_set = tensors * batch * seqlen * heads * d * _dtype(dt).nbytes
    n = sets_needed(per_set, sweep.l2, sweep.budget, sweep.max_sets) if lib.device_resident else 1
    return [tuple(lib.randn((batch, seqlen, heads, d), dt) for _ in range(operands)) for _ in range(n)]


def _sdpa(sweep, sets, causal):
    """SDPA per backend on the rotated sets: ``{prefix: (median ms, output of set 0) or error}``."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    f = torch.nn.functional.scaled_dot_product_attention
    t = [tuple(x.transpose(1, 2) for x in s) for s in sets]       # (batch, heads, seqlen, d) views
    out = {}
    for prefix, name, _ in SDPA:
        try:
            with sdpa_kernel(getattr(SDPBackend, name)):
                ref0 = f(*t[0], is_causal=causal).transpose(1, 2)
                ms = median(sweep._time([lambda s=s: f(*s, is_causal=causal) for s in t]))
            out[prefix] = (ms, ref0)
        except (RuntimeError, AttributeError) as e:      # a backend this torch / GPU / shape lacks
            out[prefix] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return out


def reference_for(sweep, sets, causal, sdpa, host):
    """``(refs per SDPA prefix, output to check against or None)`` of a forward or backward set:
    ``sdpa(sweep, sets, causal)`` with torch (its ``"ref"`` entry's output is checked against);
    ``host(sets, causal)``, the float64 reference, on the host (numpy); nothing with another
    library (cupy)."""
    lib = sweep.lib
    if lib.name == "torch":
        refs = sdpa(sweep, sets, causal)
        first = refs.get("ref")
        return refs, first[1] if isinstance(first, tuple) else None
    if lib.device_resident:
        return {p: "torch is needed for SDPA" for p, _, _ in SDPA}, None
    return {}, host(sets, causal)


def _reference(sweep, sets, causal):
    """The forward's :func:`reference_for`: SDPA's O, or the float64 reference's."""
    from ..device.attention_reference import attention_reference
    return reference_for(sweep, sets, causal, _sdpa, lambda s, c: attention_reference(*s[0], causal=c)[0])


def run_attention_set(sweep, set_name: str, cfgs: list, shapes=None) -> dict:
    """The rows of an attention set; ``sweep`` is the :class:`~.runner.Sweep` (library, timer,
    backend, ``make_attention``; ``make_attention_bwd`` for ``attention-bwd``). ``shapes``: the
    ``(batch, seqlen, hidden, causal)`` problems to run instead of the set's (a subset of it)."""
    from ..problem import attention_flops
    from .runner import summarize, tolerance
    from .shapes import BACKWARD_SETS
    if set_name in BACKWARD_SETS:
        from . import attention_bwd as phase
    else:
        phase = FORWARD
    rows = []
    for batch, seqlen, hidden, causal in shapes if shapes is not None else shapes_for(set_name, sweep.backend.name):
        for cfg in cfgs:
            heads, d = hidden // cfg.head_dim, cfg.head_dim
            if heads == 0:                       # a head wider than the hidden size (the emulator's tiny shapes)
                continue
            flops = batch * attention_flops(seqlen, seqlen, heads, d, causal=causal) * phase.FLOPS[0] // \
                phase.FLOPS[1]
            row = {"set": set_name, "problem": [batch, seqlen, heads, d, causal], "batch": batch, "seqlen": seqlen,
                   "heads": heads, "head_dim": d, "causal": causal, "config": phase.label(cfg, causal),
                   "dtype": cfg.dtype, "out_dtype": cfg.dtype, "x": seqlen, "flops": flops, "iters": sweep.iters}
            sets = inputs(sweep, batch, seqlen, heads, d, cfg.dtype, phase.OPERANDS, phase.TENSORS)
            row["n_sets"] = len(sets)
            refs, ref0 = phase.reference(sweep, sets, causal)
            for prefix, _, _ in SDPA:
                got = refs.get(prefix)
                ms = got[0] if isinstance(got, tuple) else None
                row[f"{prefix}_ms"] = ms
                row[f"{prefix}_tflops"] = flops / (ms * 1e-3) / 1e12 if ms and sweep.timed else None
                if isinstance(got, str):
                    row[f"{prefix}_error"] = got
            try:
                phase.one(sweep, cfg, sets, causal, ref0, row)
            except CuteDSLError as e:
                row.update(error=f"{type(e).__name__}: {e}", ms=None, tflops=None, check="error")
            if "max_rel_diff" in row:
                row["check"] = "pass" if row["max_rel_diff"] <= tolerance(cfg.dtype, cfg.dtype) else "FAIL"
                row["tolerance"] = tolerance(cfg.dtype, cfg.dtype)
            t, r = row.get("tflops"), row.get("ref_tflops")
            row["ratio"] = t / r if t and r else None
            rows.append(row)
            if sweep.progress is not None:
                sweep.progress(f"{set_name} b{batch} s{seqlen} h{heads} {row['config']}")
            sets = ref0 = refs = None            # freed before the next problem's inputs
            sweep.lib.release()
    return {"set": set_name, "kind": "attention", "x_label": x_label(set_name), "rows": rows,
            "summary": summarize(rows), "references": {p: lab + phase.SUFFIX for p, _, lab in SDPA}}


def _one(sweep, cfg, sets, causal, ref0, row):
    attn = sweep.attention(cfg)
    prepared = [attn.prepare(*s, causal=causal) for s in sets]
    try:
        times = sweep._time([launch for launch, _ in prepared])
        o0 = prepared[0][1]()[0]
    finally:
        for launch, _ in prepared:
            launch.release()
    if ref0 is not None:
        row["max_rel_diff"] = sweep.lib.max_rel_diff(o0, ref0)
    else:
        row["check"] = "skipped"
    record_times(sweep, row, times)


def record_times(sweep, row, times) -> None:
    """The row's ``ms`` (median) and ``tflops`` on a GPU; on the emulator ``wall_ms`` only."""
    ms = median(times)
    if sweep.timed:
        row.update(ms=ms, tflops=row["flops"] / (ms * 1e-3) / 1e12)
    else:
        row.update(ms=None, tflops=None, wall_ms=ms)


#: the forward's pieces of :func:`run_attention_set` (:mod:`.attention_bwd` has the backward's):
#: random operands and tensors per input set, FLOPs as a fraction of the forward's, reference
#: label suffix, the reference and the timed run
FORWARD = SimpleNamespace(OPERANDS=3, TENSORS=4, FLOPS=(1, 1), SUFFIX="", label=label, reference=_reference,
                          one=_one)
