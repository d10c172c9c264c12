"""``AttentionConfig``: what an attention forward is built for (head dimension, element type,
schedule, architecture), validated on construction by asking the kernel; no MLIR.

The call options that change the generated code -- a causal/window band, softcap, packed
sequences -- are not config fields: :class:`~cutedsl.device.attention.Attention` builds the
kernel variant a call needs (FlashAttention's template flags ``Is_causal``/``Is_local``,
``Has_softcap``, ``Varlen`` are the same split).

It is the ``"attention"`` family of the config protocol (:mod:`cutedsl.device.config_protocol`):
``to_dict``/``from_dict``, ``identity``, ``describe`` and ``explain`` come from ``KernelConfig``.
"""
from __future__ import annotations

import attrs

from ..errors import ConfigError, ConfigTypeError
from ..problem import AttentionProblem
from .config_protocol import KernelConfig, register_family

ARCHS = ("sm_90a",)


def _kernel_cls():
    from ..kernel.attention import AttentionFwdKernel
    return AttentionFwdKernel


@register_family
@attrs.frozen
class AttentionConfig(KernelConfig):
    """``head_dim`` (64 or 128; Q/K and V alike), ``dtype`` (``"bf16"``/``"f16"``: Q, K, V and
    O), ``overlap`` (FlashAttention-3's intra-warpgroup overlap of softmax and ``P V``),
    ``pingpong`` (the two MMA warpgroups take turns issuing GEMMs; needs ``overlap``), ``arch``
    (``"sm_90a"``). Raises ``ConfigTypeError`` for a non-int head dimension or non-bool flag and
    ``ConfigError`` naming the field for values the kernel cannot build."""
    head_dim: int = 128
    dtype: str = "bf16"
    overlap: bool = True
    pingpong: bool = True
    arch: str = "sm_90a"
    FAMILY = "attention"
    FRONT_END = "cutedsl.device.attention:Attention"

    def __attrs_post_init__(self):
        if isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int):
            raise ConfigTypeError(f"AttentionConfig head_dim must be an int, got {type(self.head_dim).__name__}")
        for name in ("overlap", "pingpong"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigTypeError(f"AttentionConfig {name} must be a bool, got {getattr(self, name)!r}")
        if self.arch not in ARCHS:
            raise ConfigError(f"AttentionConfig arch must be one of {ARCHS} (the attention kernel is built for "
                              f"Hopper's WGMMA), got {self.arch!r}")
        why = _kernel_cls().reason(self.head_dim, self.dtype, self.overlap, self.pingpong)
        if why:
            raise ConfigError(f"AttentionConfig: {why}")

    @classmethod
    def for_problem(cls, problem: AttentionProblem, dtype: str = "bf16", **fixed) -> "AttentionConfig":
        """The config for ``problem`` (an ``AttentionProblem`` of ints): its head dimension,
        ``dtype``, the FlashAttention-3 schedule (overlap and ping-pong); ``fixed`` fields are
        kept. ``ConfigError`` with :meth:`can_implement`'s reason when none fits."""
        cfg = cls(**{"head_dim": problem.head_dim if problem.head_dim in _kernel_cls().HEAD_DIMS else 128,
                     "dtype": dtype, **fixed})
        why = cfg.can_implement(problem)
        if why:
            raise ConfigError(f"AttentionConfig.for_problem: {why}")
        return cfg

    def can_implement(self, problem: AttentionProblem = None) -> str | None:
        """Why this config cannot run ``problem`` (an ``AttentionProblem`` of ints), or None
        (None without a problem: construction checked the config itself)."""
        p = problem
        if p is None:
            return None
        if p.head_dim != self.head_dim:
            from ..kernel.attention import head_dim_reason
            why = head_dim_reason(p.head_dim)
            return why or (f"head_dim {p.head_dim} differs from the config's {self.head_dim}: use "
                           f"AttentionConfig(head_dim={p.head_dim})")
        if p.head_dim_v != p.head_dim:
            return f"head_dim_v {p.head_dim_v} must equal head_dim {p.head_dim} (V and Q/K rows of one width)"
        if p.kv_heads < 1 or p.heads % p.kv_heads:
            return (f"heads {p.heads} must be a multiple of kv_heads {p.kv_heads} (GQA/MQA: each K/V head serves "
                    f"heads / kv_heads query heads)")
        if p.batch < 1 or p.heads < 1:
            return f"batch and heads must be >= 1, got batch {p.batch}, heads {p.heads}"
        if p.seqlen_q + p.seqlen_k >= 2 ** 30:
            return (f"seqlen_q + seqlen_k = {p.seqlen_q + p.seqlen_k} must stay below 2^30 (the kernel's 32-bit "
                    f"band arithmetic)")
        return None

    def kernel(self, *, local=False, softcap=False, varlen=False, kernel_cls=None):
        """The kernel variant for a call's band / softcap / packed sequences."""
        cls = kernel_cls or _kernel_cls()
        return cls(self.head_dim, self.dtype, local=local, softcap=softcap, varlen=varlen, overlap=self.overlap,
                   pingpong=self.pingpong, arch=self.arch)


__all__ = ["AttentionConfig"]
