"""Built-in attention hooks (:mod:`cutedsl.collective.attention_hooks`).

=====================  ====================================================  ======================
hook                   keeps / computes                                      parameters
=====================  ====================================================  ======================
``Softcap(c)``         ``c * tanh(score / c)`` (Gemma 2 / Grok; FA3's          --
                       ``softcap``; ``tanh.approx.f32`` in the kernel)
``Alibi()``            ``score - slopes[h] * |q_idx + seqlen_k - seqlen_q      ``alibi_slopes`` f32
                       - kv_idx|``: FlashAttention's convention (bottom-right  ``(heads,)`` or
                       aligned; FlexAttention's ``score - slope * |q - kv|``   ``(batch, heads)``
                       when ``seqlen_q == seqlen_k``)
``Causal()``           ``kv_idx <= q_idx + seqlen_k - seqlen_q`` (FA's          --
                       bottom-right alignment; ``align="top_left"``:
                       ``kv_idx <= q_idx``, FlexAttention's ``causal_mask``)
``SlidingWindow(l,r)``  ``q' - l <= kv_idx <= q' + r``, ``q' = q_idx +          --
                       seqlen_k - seqlen_q`` (FA's ``window_size``; ``-1``:
                       unbounded on that side)
``DocumentMask()``     ``doc[b, q_idx] == doc[b, kv_idx]`` (packed sequences)  ``doc_ids`` i32
                                                                               ``(batch, seqlen_k)``
=====================  ====================================================  ======================

Each is an attrs frozen class (its fields enter the cache key through its repr) whose kernel
body also runs on numpy arrays, so it is its own float64 reference. Combine masks with
:func:`and_masks`.
"""
from __future__ import annotations

import attrs

from ..errors import ConfigError
from .attention_hook_ops import tanh
from .attention_hooks import MaskMod, Param, ScoreMod, as_mask_mod


def _shift(ctx):
    """``seqlen_k - seqlen_q``: FlashAttention aligns masks to the bottom-right corner."""
    return ctx.seqlen_k - ctx.seqlen_q


@attrs.frozen
class Softcap(ScoreMod):
    """``softcap * tanh(score / softcap)``; ``softcap`` > 0 (a compile-time constant)."""
    softcap: float

    def __attrs_post_init__(self):
        if not (isinstance(self.softcap, (int, float)) and self.softcap > 0):
            raise ConfigError(f"Softcap needs softcap > 0, got {self.softcap!r}")

    def score_mod(self, score, batch, head, q_idx, kv_idx):
        return tanh(score * (1.0 / self.softcap)) * float(self.softcap)


@attrs.frozen
class Alibi(ScoreMod):
    """ALiBi (Press et al.) with FlashAttention's convention: ``score - slope * |q_idx + seqlen_k
    - seqlen_q - kv_idx|``, ``slope = name[head]`` (``(heads,)`` f32) or ``name[batch, head]``
    (``per_batch=True``, ``(batch, heads)``), as ``flash_attn_func(alibi_slopes=...)``."""
    name: str = "alibi_slopes"
    per_batch: bool = False

    def params(self):
        return [Param(self.name, "ptr", shape=("batch", "heads") if self.per_batch else ("heads",), dtype="f32")]

    def score_mod(self, score, batch, head, q_idx, kv_idx, ctx):
        t = getattr(ctx, self.name)
        slope = t[batch, head] if self.per_batch else t[head]
        return score - slope * abs(q_idx + _shift(ctx) - kv_idx)


@attrs.frozen
class Causal(MaskMod):
    """Keep ``kv_idx <= q_idx + shift``: ``shift = seqlen_k - seqlen_q`` (``align="bottom_right"``,
    FlashAttention) or 0 (``"top_left"``, FlexAttention's ``causal_mask``)."""
    align: str = "bottom_right"

    def __attrs_post_init__(self):
        if self.align not in ("bottom_right", "top_left"):
            raise ConfigError(f"Causal align must be 'bottom_right' or 'top_left', got {self.align!r}")

    def mask_mod(self, batch, head, q_idx, kv_idx, ctx):
        return kv_idx <= (q_idx + _shift(ctx) if self.align == "bottom_right" else q_idx)


@attrs.frozen
class SlidingWindow(MaskMod):
    """Keep ``q' - left <= kv_idx <= q' + right`` with ``q' = q_idx + seqlen_k - seqlen_q``
    (FlashAttention's ``window_size=(left, right)``); ``-1`` leaves that side unbounded
    (``(left, 0)``: causal with a window)."""
    left: int = -1
    right: int = -1

    def __attrs_post_init__(self):
        for side in ("left", "right"):
            v = getattr(self, side)
            if not isinstance(v, int) or v < -1:
                raise ConfigError(f"SlidingWindow {side} must be an int >= -1 (-1: unbounded), got {v!r}")
        if self.left < 0 and self.right < 0:
            raise ConfigError("SlidingWindow(-1, -1) keeps everything: give left or right")

    def mask_mod(self, batch, head, q_idx, kv_idx, ctx):
        q = q_idx + _shift(ctx)
        lo = kv_idx >= q - self.left if self.left >= 0 else None
        hi = kv_idx <= q + self.right if self.right >= 0 else None
        return hi if lo is None else lo if hi is None else lo & hi


@attrs.frozen
class DocumentMask(MaskMod):
    """Packed sequences: keep a pair when its query and key belong to the same document,
    ``name[batch, q_idx] == name[batch, kv_idx]`` with ``name`` i32 ``(batch, seqlen_k)``
    (self-attention: query ``i`` is token ``i``). With ``q_name``, query documents are read from
    that ``(batch, seqlen_q)`` i32 tensor instead (cross-attention)."""
    name: str = "doc_ids"
    q_name: str = None

    def params(self):
        ps = [Param(self.name, "ptr", shape=("batch", "seqlen_k"), dtype="i32")]
        return ps + ([Param(self.q_name, "ptr", shape=("batch", "seqlen_q"), dtype="i32")] if self.q_name else [])

    def mask_mod(self, batch, head, q_idx, kv_idx, ctx):
        q_doc = getattr(ctx, self.q_name or self.name)[batch, q_idx]
        return q_doc == getattr(ctx, self.name)[batch, kv_idx]


@attrs.frozen
class AndMasks(MaskMod):
    """Keep a pair when every mask keeps it (FlexAttention's ``and_masks``)."""
    masks: tuple

    def params(self):
        return [p for m in self.masks for p in m.params()]

    def _all(self, args, ctx, host):
        out = None
        for m in self.masks:
            k = m.evaluate(args, ctx, host=host)
            out = k if out is None else out & k
        return out

    def mask_mod(self, batch, head, q_idx, kv_idx, ctx):
        return self._all((batch, head, q_idx, kv_idx), ctx, host=False)

    def reference(self, batch, head, q_idx, kv_idx, ctx):
        return self._all((batch, head, q_idx, kv_idx), ctx, host=True)

    def identity(self):
        """Each mask's own identity (a function mask's code is not in this repr)."""
        return {"hook": "and_masks", "masks": [m.identity() for m in self.masks]}


def and_masks(*masks) -> AndMasks:
    """One mask keeping what all ``masks`` (MaskMods or callables) keep."""
    if not masks:
        raise ConfigError("and_masks needs at least one mask")
    return AndMasks(tuple(as_mask_mod(m) for m in masks))


__all__ = ["Softcap", "Alibi", "Causal", "SlidingWindow", "DocumentMask", "AndMasks", "and_masks"]
