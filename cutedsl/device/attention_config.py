"""``AttentionConfig``: what an attention forward is built for (head dimension, element type,
schedule, architecture), validated on construction by asking the kernel; no MLIR.

FlexAttention-style hooks are config fields: ``score_mod`` and ``mask_mod``, each a Python
callable (``score_mod(score, batch, head, q_idx, kv_idx)``, ``mask_mod(batch, head, q_idx,
kv_idx)``) or a :class:`~cutedsl.collective.attention_hooks.ScoreMod` /
:class:`~cutedsl.collective.attention_hooks.MaskMod` instance (the built-ins of
:mod:`cutedsl.collective.attention_hook_builtins`: ``Softcap``, ``Alibi``, ``Causal``,
``SlidingWindow``, ``DocumentMask``, ``and_masks``). A hook's declared parameters (tensors such
as ``alibi_slopes`` or ``doc_ids``, scalars) are keyword arguments of the ``Attention`` call.
They are code, so they are part of the config: its :meth:`identity` and the kernel's
``config()`` carry their code identity; :meth:`AttentionConfig.from_dict` cannot rebuild them.

The call options that change the generated code -- a causal/window band, softcap, packed
sequences -- are not config fields: :class:`~cutedsl.device.attention.Attention` builds the
kernel variant a call needs (FlashAttention's template flags ``Is_causal``/``Is_local``,
``Has_softcap``, ``Varlen`` are the same split).

It is the ``"attention"`` family of the config protocol (:mod:`cutedsl.device.config_protocol`):
``to_dict``/``from_dict``, ``identity``, ``describe`` and ``explain`` come from ``KernelConfig``.
"""
from __future__ import annotations

import attrs

from ..collective.attention_hooks import AttentionHooks
from ..errors import ConfigError, ConfigTypeError
from ..problem import AttentionProblem
from .config_protocol import KernelConfig, register_family

ARCHS = ("sm_90a", "sm_100a")
#: the ``Attention`` call's own keyword arguments: a hook parameter may not take these names
CALL_OPTIONS = ("softmax_scale", "causal", "window", "softcap", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                "max_seqlen_k")
HOOK_FIELDS = ("score_mod", "mask_mod")


def _kernel_cls(arch: str = "sm_90a", dtype: str = "bf16"):
    """The kernel class of ``arch``: FlashAttention-3-style on sm_90a (its fp8 variant for
    e4m3), -4-style on sm_100a."""
    if arch == "sm_100a":
        from ..kernel.attention_sm100 import AttentionFwdSm100Kernel
        return AttentionFwdSm100Kernel
    if dtype == "e4m3":
        from ..kernel.attention_fp8 import AttentionFwdFp8Kernel
        return AttentionFwdFp8Kernel
    from ..kernel.attention import AttentionFwdKernel
    return AttentionFwdKernel


@register_family
@attrs.frozen
class AttentionConfig(KernelConfig):
    """``head_dim`` (64, 96, 128 or 256 on sm_90a; Q/K and V alike), ``dtype`` (``"bf16"``/``"f16"``: Q, K, V and
    O; ``"e4m3"`` on sm_90a: fp8 Q, K, V with descales per tensor or per (batch, kv_head), bf16 O, head dims 64/128/256), ``overlap`` (FlashAttention-3's intra-warpgroup overlap of softmax and ``P V``),
    ``pingpong`` (the two MMA warpgroups take turns issuing GEMMs; needs ``overlap``), ``arch``
    (``"sm_90a"``), ``score_mod`` / ``mask_mod`` (FlexAttention hooks: callables or
    ``ScoreMod`` / ``MaskMod`` instances, see the module docstring), ``exp2_poly`` (sm_100a: how
    many of each row's 128 exponentials per KV block run as a polynomial on the FMA pipes instead
    of MUFU.EX2 -- FlashAttention-4's software exp2, :mod:`cutedsl.ir.fexp2`, relative error
    1.0e-4; an even int 0..128, 0 = all on MUFU; None: the kernel's default, 24 on sm_100a, 0 on
    sm_90a, which has no such path), ``cta_pair`` (sm_100a: one ``cta_group::2`` MMA of 256 rows
    issued for a cluster of two CTAs, each holding its query rows and half of every K and V block
    -- FlashAttention-4's 2-CTA forward; head dim 128, non-causal, no hooks, no varlen: a call
    with a band or packed sequences raises ``ConfigError``; :meth:`for_problem` picks it where the
    problem has more than one CTA's query rows). Raises ``ConfigTypeError``
    for a non-int head dimension or non-bool flag, ``ConfigError`` naming the field for values
    the kernel cannot build, ``HookError`` for a hook of the wrong kind or signature and
    ``ConfigError`` for a hook parameter named like a kernel parameter or a call option."""
    head_dim: int = 128
    dtype: str = "bf16"
    overlap: bool = True
    pingpong: bool = True
    arch: str = "sm_90a"
    score_mod: object = None
    mask_mod: object = None
    exp2_poly: int | None = None
    cta_pair: bool = False
    FAMILY = "attention"
    FRONT_END = "cutedsl.device.attention:Attention"

    def __attrs_post_init__(self):
        if isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int):
            raise ConfigTypeError(f"AttentionConfig head_dim must be an int, got {type(self.head_dim).__name__}")
        for name in ("overlap", "pingpong", "cta_pair"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigTypeError(f"AttentionConfig {name} must be a bool, got {getattr(self, name)!r}")
        e = self.exp2_poly
        if e is not None and (isinstance(e, bool) or not isinstance(e, int)):
            raise ConfigTypeError(f"AttentionConfig exp2_poly must be an int or None, got {type(e).__name__}")
        if self.arch not in ARCHS:
            raise ConfigError(f"AttentionConfig arch must be one of {ARCHS} (the attention kernels are built for "
                              f"Hopper's WGMMA and Blackwell's tcgen05), got {self.arch!r}")
        why = _kernel_cls(self.arch, self.dtype).reason(self.head_dim, self.dtype, self.overlap, self.pingpong)
        if why:
            raise ConfigError(f"AttentionConfig: {why}")
        if e:
            why = (f"exp2_poly={e}: the polynomial exp2 is built for sm_100a (the FlashAttention-4-style kernel), "
                   f"not {self.arch}: leave exp2_poly at None or 0") if self.arch != "sm_100a" else \
                _kernel_cls(self.arch).exp2_poly_reason(e)
            if why:
                raise ConfigError(f"AttentionConfig: {why}")
        from ..kernel.attention import hooks_reason
        why = hooks_reason(self.hooks(), CALL_OPTIONS)
        if why:
            raise ConfigError(f"AttentionConfig: {why}")
        if self.cta_pair:
            why = (f"cta_pair=True (a cta_group::2 MMA over two CTAs) is built for sm_100a, not {self.arch}"
                   if self.arch != "sm_100a" else _kernel_cls(self.arch).cta_pair_reason(self.head_dim,
                                                                                         hooks=self.hooks()))
            if why:
                raise ConfigError(f"AttentionConfig: {why}")

    def hooks(self) -> AttentionHooks:
        """The config's ``score_mod`` / ``mask_mod`` as an ``AttentionHooks`` (checked: ``HookError``
        for a wrong kind or signature)."""
        return AttentionHooks(self.score_mod, self.mask_mod)

    def to_dict(self) -> dict:
        """The fields as JSON; a hook is its code identity (``AttentionHooks.identity``), which
        :meth:`from_dict` cannot turn back into code."""
        out = KernelConfig.to_dict(attrs.evolve(self, score_mod=None, mask_mod=None))
        out = {k: v for k, v in out.items() if k not in HOOK_FIELDS and not (k == "exp2_poly" and v is None)
               and not (k == "cta_pair" and v is False)}     # identities of older configs unchanged
        out.update(self.hooks().identity())          # keys "score_mod" / "mask_mod", where set
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "AttentionConfig":
        """The config of ``d`` (:meth:`to_dict`'s output); ``ConfigError`` when it holds hooks
        (their code is not in a dict: build the config with the hook objects)."""
        if isinstance(d, dict) and any(d.get(k) is not None for k in HOOK_FIELDS):
            held = ", ".join(k for k in HOOK_FIELDS if d.get(k) is not None)
            raise ConfigError(f"AttentionConfig.from_dict: the dict holds {held} as code identities, not code: "
                              f"build AttentionConfig({held}=...) with the hook objects")
        return super().from_dict(d)

    @classmethod
    def for_problem(cls, problem: AttentionProblem, dtype: str = "bf16", *, local: bool = False,
                    varlen: bool = False, **fixed) -> "AttentionConfig":
        """The config for ``problem`` (an ``AttentionProblem`` of ints): its head dimension,
        ``dtype``, the FlashAttention-3 schedule (overlap and ping-pong); on sm_100a the CTA pair
        (``cta_pair``) for a dense non-causal call (``local``, ``varlen``: the call's band and
        packing) at head dim 128 with more than one CTA's query rows (FlashAttention-4's 2-CTA
        case; a smaller problem would leave a pair's second CTA idle); ``fixed`` fields are kept.
        ``ConfigError`` with :meth:`can_implement`'s reason when none fits."""
        arch = fixed.get("arch", "sm_90a")
        kern = _kernel_cls(arch, dtype)
        head_dim = problem.head_dim if problem.head_dim in kern.HEAD_DIMS else 128
        if arch == "sm_100a" and "cta_pair" not in fixed and not fixed.get("score_mod") \
                and not fixed.get("mask_mod") and problem.head_dim == head_dim:
            fixed["cta_pair"] = (problem.seqlen_q > kern.BLOCK_M
                                 and kern.cta_pair_reason(head_dim, local, varlen) is None)
        cfg = cls(**{"head_dim": head_dim, "dtype": dtype, **fixed})
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
            why = _kernel_cls(self.arch, self.dtype).reason(p.head_dim, self.dtype)
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

    def kernel(self, *, local=False, causal=False, softcap=False, varlen=False, kernel_cls=None):
        """The kernel variant for a call's band (``causal``: a band with no left edge, which the
        sm_90a kernel masks with the right edge only) / softcap / packed sequences."""
        cls = kernel_cls or _kernel_cls(self.arch, self.dtype)
        if self.arch == "sm_100a":
            pair = {"cta_pair": True} if self.cta_pair else {}
            return cls(self.head_dim, self.dtype, local=local, softcap=softcap, varlen=varlen, arch=self.arch,
                       hooks=self.hooks(), exp2_poly=self.exp2_poly, **pair)
        return cls(self.head_dim, self.dtype, local=local, causal=causal, softcap=softcap, varlen=varlen,
                   overlap=self.overlap, pingpong=self.pingpong, arch=self.arch, hooks=self.hooks())


__all__ = ["AttentionConfig"]
