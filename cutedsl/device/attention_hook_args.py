"""The ``Attention`` call's hook arguments: the keyword arguments that fill the parameters a
config's ``score_mod`` / ``mask_mod`` declare (FlexAttention's captured tensors, passed by name
as a GEMM epilogue's extras are), checked before anything is compiled, and the block masks the
call's mask_mod gives, cached where that is sound.

A hook parameter is a ``ParamSpec``: a ``ptr`` with ``dtype`` and a ``shape`` in ``batch``,
``heads``, ``seqlen_q``, ``seqlen_k`` and ints, or an ``f32`` / ``i32`` scalar
(:mod:`cutedsl.collective.attention_hooks`).
"""
from __future__ import annotations

import collections
import threading

import numpy as np

from ..errors import ArgumentError
from ..runtime import arrays
from ..runtime.params import check_array, scalar


def problem_dims(problem) -> dict:
    """The sizes a hook parameter's shape may name, from an ``AttentionProblem``."""
    return {"batch": problem.batch, "heads": problem.heads, "seqlen_q": problem.seqlen_q,
            "seqlen_k": problem.seqlen_k}


def _spell(p) -> str:
    if p.kind != "ptr":
        return p.kind
    return f"{p.dtype} array of shape ({', '.join(map(str, p.shape))}{',' if len(p.shape) == 1 else ''})"


def check_hook_args(hooks, hook_args: dict, problem, options=()) -> None:
    """Check the call's keyword arguments ``hook_args`` against the parameters ``hooks`` (an
    ``AttentionHooks``) declare, for ``problem``: ``ArgumentError`` for an unknown keyword
    (listing what the call accepts: ``options`` and the hooks' parameters) or a missing one
    (naming the hook that reads it), ``ArgumentError`` / ``ArgumentTypeError`` naming the
    parameter for an array of the wrong shape or dtype, or a scalar out of range. Copies
    nothing."""
    owners = {p.name: (h, p) for h in hooks.hooks() for p in h.params()}
    unknown = sorted(set(hook_args) - set(owners))
    if unknown:
        own = ", ".join(owners) if owners else "none (the config's hooks declare no parameters)"
        raise ArgumentError(f"unknown keyword argument(s) {', '.join(map(repr, unknown))}; this Attention accepts "
                            f"q, k, v, {', '.join(options)} and the hooks' parameters: {own}")
    dims = problem_dims(problem)
    for name, (h, p) in owners.items():
        if name not in hook_args:
            raise ArgumentError(f"missing hook argument {name!r} ({_spell(p)}) that {h.describe()} reads: pass "
                                f"{name}=... to the Attention call")
        if p.kind == "ptr":
            check_array(p, hook_args[name], dims)
        else:
            scalar(p, hook_args[name])


def host_hook_args(params, hook_args: dict) -> dict:
    """numpy values of the parameters ``params`` (``ParamSpec`` list) from ``hook_args``: device
    arrays are copied to the host (the block mask is built there)."""
    out = {}
    for p in params:
        v = hook_args[p.name]
        if p.kind == "ptr":
            dev = arrays.describe(v, p.name)
            if dev is not None:
                v = arrays.to_host(arrays.DeviceArray(dev[0], tuple(dev[1]), tuple(dev[2]), dev[3], None, v))
            v = np.asarray(v)
        out[p.name] = v
    return out


class BlockMaskCache:
    """Block masks of one ``Attention`` front end, at most ``size`` (least recently used go).
    A mask is cached by (kernel, problem sizes, window, the mask_mod's scalar arguments) only
    when the mask_mod reads no tensor: a tensor's contents (a document id array) change from
    call to call behind the same shape, so such masks are rebuilt each call."""

    def __init__(self, size: int = 32):
        self.size, self._masks, self._lock = size, collections.OrderedDict(), threading.Lock()
        self.built = 0          #: masks built (a test's window on the cache)

    def get(self, kern, problem, window, hook_args: dict):
        """The kernel's ``block_mask`` for this call (``hook_args``: the call's hook arguments)."""
        params = kern.hooks.mask_mod.params()
        host = host_hook_args(params, hook_args)
        sound = all(p.kind != "ptr" for p in params)
        key = (kern, tuple(problem_dims(problem).values()), tuple(window),
               tuple((p.name, float(host[p.name])) for p in params)) if sound else None
        with self._lock:
            if key is not None and key in self._masks:
                self._masks.move_to_end(key)
                return self._masks[key]
        bm = kern.block_mask(problem, window, host)
        with self._lock:
            self.built += 1
            if key is not None:
                self._masks[key] = bm
                while len(self._masks) > self.size:
                    self._masks.popitem(last=False)
        return bm


__all__ = ["check_hook_args", "host_hook_args", "problem_dims", "BlockMaskCache"]
