"""How a GEMM call's A and B fit its ``GemmConfig``: the operand checks made before anything is
compiled, allocated or launched (:func:`check_operands`), and the config fields the operands'
rank and memory order ask for (:func:`layout_changes`; ``Gemm`` then runs the matching
variant). Used by :class:`cutedsl.device.gemm.Gemm`."""
from __future__ import annotations

from ..atom.mma_traits import element_type, mma_traits
from ..dtypes import dtype as _dtype, same_storage
from ..errors import ArgumentError, ArgumentTypeError
from ..problem import GemmProblem
from .config import _MAX_I32


def check_operands(cfg, va, vb):
    """``(m, n, k, l, la, lb)`` of the operand views ``va``, ``vb`` (``arrays.TensorView``),
    checked: 2-D, or (a batched config) 3-D ``(L, rows, cols)`` with batch extents ``la``,
    ``lb`` each ``l`` or 1 (that operand is shared by every batch)."""
    shapes = {}
    ranks = (2, 3) if cfg.batched else (2,)
    for name, v, want in (("a", va, element_type(cfg.dtype)),
                          ("b", vb, element_type(cfg.b_dtype or cfg.dtype))):
        shape, d, dt = v.shape, v.dtype, v.raw_dtype
        if len(shape) not in ranks:
            raise ArgumentError(f"{name} must be 2-D (or 3-D: (L, rows, cols) for a batch), got shape {tuple(shape)}")
        if d is None or not same_storage(d.name, want):
            field = "dtype" if name == "a" or cfg.b_dtype is None else "b_dtype"
            raise ArgumentTypeError(f"{name} has dtype {dt}, the config expects {want} "
                                    f"(GemmConfig.{field}; numpy: {_dtype(want).numpy})")
        if 0 in shape:
            raise ArgumentError(f"{name} has a zero-size dimension: shape {tuple(shape)}")
        shapes[name] = tuple(shape)
    (m, k), (k2, n) = shapes["a"][-2:], shapes["b"][-2:]
    if k != k2:
        packed = [f"{x} is {v.raw_dtype} device storage (K = 2 x its bytes; mx.to_device pads an odd K by one "
                  f"zero element)" for x, v in (("a", va), ("b", vb)) if v.packed > 1]
        raise ArgumentError(f"a.shape[-1] ({k}) != b.shape[-2] ({k2}): inner dimensions must match"
                            + (f" ({'; '.join(packed)})" if packed else ""))
    la, lb = (shapes[x][0] if len(shapes[x]) == 3 else 1 for x in ("a", "b"))
    l = max(la, lb)
    if la not in (1, l) or lb not in (1, l):
        raise ArgumentError(f"batch sizes differ: a has {la}, b has {lb} (each must be L or 1, "
                            f"an operand shared by every batch)")
    for nm, v in (("M", m), ("N", n), ("K", k), ("L", l)):
        if v > _MAX_I32:
            raise ArgumentError(f"{nm} = {v} exceeds the kernel's 32-bit size limit {_MAX_I32}")
    return m, n, k, l, la, lb

def layout_changes(cfg, va, vb) -> dict:
    """Config fields a call's operands need changed: ``batched`` for a 3-D operand,
    ``raster="N"`` for ``raster="auto"`` on a problem with more tile columns than rows, and the
    majors their memory order has (device arrays: strides; numpy: its order, so no
    transposing copy) where it differs from the config's and the MMA can read it."""
    from .config import WARP_SPECIALIZED
    out = {}
    if not cfg.batched and 3 in (len(va.shape), len(vb.shape)):
        out["batched"] = True
    if cfg.raster == "auto" and cfg.schedule in WARP_SPECIALIZED and len(va.shape) >= 2 and len(vb.shape) >= 2:
        tm, tn = GemmProblem(va.shape[-2], vb.shape[-1], 0).tiles(*cfg.tile[:2])
        if tn > tm:                # more tile columns than rows: walk along N (the auto rule)
            out["raster"] = "N"
    for field, v, dt, inner, outer in (("a_major", va, element_type(cfg.dtype), "K", "MN"),
                                       ("b_major", vb, element_type(cfg.b_dtype or cfg.dtype), "MN", "K")):
        if v.dtype is None or len(v.shape) < 2:
            continue
        e, st = v.dtype.nbytes, v.strides
        got = inner if st[-1] == e and st[-2] != e else outer if st[-2] == e and st[-1] != e else None
        majors = mma_traits(dt).majors_a if field == "a_major" else mma_traits(dt).majors_b
        if got is not None and got != getattr(cfg, field) and got in majors:
            out[field] = got
    return out



def call_config(cfg, m: int, n: int, k: int):
    """The config whose kernel ``Gemm(cfg)`` runs for an ``m x n x k`` call on operands in the
    config's own layouts (a row-major A, B as :meth:`GemmConfig.example_operands` lays it out):
    ``cfg`` with the fields :func:`layout_changes` changes (e.g. ``raster="N"`` for
    ``raster="auto"`` on a wide problem). What a bundle must hold, and what a report should
    describe, for such a call."""
    import attrs

    from ..runtime.tensor_view import TensorView
    da, db = _dtype(element_type(cfg.dtype)), _dtype(element_type(cfg.b_dtype or cfg.dtype))
    ea, eb = da.nbytes, db.nbytes
    a_strides = (k * ea, ea) if cfg.a_major == "K" else (ea, m * ea)
    b_strides = (n * eb, eb) if cfg.b_major == "MN" else (eb, k * eb)
    va = TensorView("a", (m, k), da, da.name, None, None, 0, a_strides, "layout")
    vb = TensorView("b", (k, n), db, db.name, None, None, 0, b_strides, "layout")
    changes = layout_changes(cfg, va, vb)
    return attrs.evolve(cfg, **changes) if changes else cfg


__all__ = ["call_config", "check_operands", "layout_changes"]
