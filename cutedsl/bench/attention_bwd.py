"""The ``attention-bwd`` set: cutedsl's attention backward (:class:`cutedsl.AttentionBackward`)
against the backward of ``torch.nn.functional.scaled_dot_product_attention`` with its
FlashAttention and cuDNN backends, in the same run on the same inputs and dO -- FlashAttention-3's
backward benchmark, on the ``attention`` set's problems (:data:`.shapes.ATTENTION_SETS`).

The backward alone is timed: cutedsl's O and LSE come from an untimed forward and each launch
runs the prepared call's three kernels (``D = rowsum(dO * O)``, dK/dV, the dQ conversion) after
clearing the f32 dQ workspace -- a device fill (``runtime.arrays.zero_fill``: ``Backend.zero``,
``cuMemsetD32Async`` on a GPU, in launch order), which the time includes; SDPA's is ``torch.autograd.grad`` of its
output with ``retain_graph`` (FlashAttention's ``benchmark_backward``). TFLOP/s are counted as FlashAttention
counts the backward: 2.5x the forward's FLOPs (:data:`FLOPS`). The check: dQ, dK and dV of the
first input set against SDPA flash's (the row's ``max_rel_diff`` is the largest of the three); on
the emulator against :func:`~cutedsl.device.attention_reference.attention_backward_reference`
(a harness test, no timings). The machinery (rows, rotation, timer, summary) is
:func:`.attention.run_attention_set`'s; this module is the backward's pieces of it.
"""
from __future__ import annotations

from .attention import SDPA, configs as forward_configs, record_times, reference_for
from .timing import median

#: random operands per input set (q, k, v, dout) and the tensors of that size a set holds for
#: the rotation's bytes (those, o, dq, dk, dv, and the f32 dQ workspace as two)
OPERANDS, TENSORS = 4, 10
#: the backward's FLOPs as a fraction of the forward's (FlashAttention: 2.5)
FLOPS = (5, 2)
SUFFIX = " bwd"
GRADS = ("dq", "dk", "dv")


def configs(dtype: str, arch: str = "sm_90a") -> tuple:
    """``(AttentionConfigs, notes)`` as :func:`.attention.configs`, less the head dimensions the
    backward does not build (a note each); ``UsageError`` (``--arch``) for an architecture the
    backward's kernel has no MMA for (sm_100a: it is built on WGMMA)."""
    from ..arch import get_arch
    from ..cliargs import UsageError
    from ..errors import ConfigError
    from ..kernel.attention_bwd import AttentionBwdKernel
    try:
        get_arch(arch).require(AttentionBwdKernel.mma_atom, "the attention backward")
    except ConfigError as e:
        raise UsageError("--arch", f"the attention-bwd set: {e}; pass --arch sm_90a") from None
    cfgs, notes = forward_configs(dtype, arch)
    out = []
    for cfg in cfgs:
        why = AttentionBwdKernel.reason(cfg.head_dim, cfg.dtype)
        if why:
            notes.append(f"attention-bwd head_dim {cfg.head_dim} skipped: {why}")
        else:
            out.append(cfg)
    return out, notes


def label(cfg, causal: bool) -> str:
    return f"attention-bwd d{cfg.head_dim} {cfg.dtype} {'causal' if causal else 'full'}"


def _sdpa(sweep, sets, causal):
    """SDPA's backward per backend on the rotated sets: ``{prefix: (median ms, (dq, dk, dv) of
    set 0) or error}``."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    f = torch.nn.functional.scaled_dot_product_attention
    out = {}
    for prefix, name, _ in SDPA:
        graphs = []
        try:
            with sdpa_kernel(getattr(SDPBackend, name)):
                for s in sets:                     # (batch, heads, seqlen, d) views, leaves of their graphs
                    q, k, v = (x.detach().transpose(1, 2).requires_grad_() for x in s[:3])
                    graphs.append((f(q, k, v, is_causal=causal), (q, k, v), s[3].transpose(1, 2)))
                g0 = torch.autograd.grad(*graphs[0], retain_graph=True)
                ms = median(sweep._time([lambda g=g: torch.autograd.grad(*g, retain_graph=True) for g in graphs]))
            out[prefix] = (ms, tuple(x.transpose(1, 2) for x in g0))
        except (RuntimeError, AttributeError) as e:      # a backend this torch / GPU / shape lacks
            out[prefix] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        finally:
            graphs = None
    return out


def reference(sweep, sets, causal):
    """The backward's :func:`~.attention.reference_for`: SDPA's ``(dq, dk, dv)``, or the float64
    reference's."""
    from ..device.attention_reference import attention_backward_reference

    def host(s, c):
        q, k, v, do = s[0]
        return attention_backward_reference(do, q, k, v, causal=c)
    return reference_for(sweep, sets, causal, _sdpa, host)


def one(sweep, cfg, sets, causal, ref0, row):
    """cutedsl's backward on the rotated sets (O and LSE from its forward, untimed): the row's
    times, and per gradient ``dq_max_rel_diff`` ... against ``ref0``."""
    attn, bwd = sweep.attention(cfg), sweep.attention_backward(cfg)
    prepared = []
    try:
        for q, k, v, do in sets:
            o, lse = attn(q, k, v, causal=causal)
            prepared.append(bwd.prepare(do, q, k, v, o, lse, causal=causal))
        times = sweep._time([launch for launch, _ in prepared])
        grads = prepared[0][1]()
    finally:
        for launch, _ in prepared:
            launch.release()
    if ref0 is not None:
        diffs = {n: sweep.lib.max_rel_diff(g, r) for n, g, r in zip(GRADS, grads, ref0)}
        row.update({f"{n}_max_rel_diff": x for n, x in diffs.items()}, max_rel_diff=max(diffs.values()))
    else:
        row["check"] = "skipped"
    record_times(sweep, row, times)
