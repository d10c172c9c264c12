"""One operand of a GEMM call, described once (:class:`TensorView`): numpy or device memory,
shape in elements, strides in bytes, and for packed sub-byte storage (``e2m1x2``) its elements
per byte. Every later step (operand checks, layout choice, the copy to the device) reads it."""
from __future__ import annotations

import attrs

from ..dtypes import PACKED_STORAGE, dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError
from . import arrays      # late-bound: arrays.describe is the one way a device array is described


@attrs.frozen
class TensorView:
    """One operand of a call, described once (issue 20: every later step reads this record):
    ``host`` -- the numpy array for a host operand (else None); for a device operand ``ptr``
    (address), ``strides`` (bytes) and ``framework`` (``"cutedsl"``, ``"torch"``, ``"dlpack:jax"``,
    ...); ``shape`` (elements, numpy order) and ``dtype`` (a ``DType``, or None when cutedsl has
    no name for it: ``raw_dtype`` then says what it was); ``owner`` the caller's object (keeps
    device memory alive while the view is used)."""
    name: str
    shape: tuple
    dtype: object
    raw_dtype: object
    owner: object = attrs.field(repr=False)
    host: object = attrs.field(default=None, repr=False)
    ptr: int = 0
    strides: tuple = ()
    framework: str = "numpy"
    #: elements per byte along the contiguous axis of a packed device operand (``e2m1x2``: 2;
    #: ``dtypes.PACKED_STORAGE``); ``shape`` then counts elements, ``strides`` stay the storage's
    packed: int = 1

    @classmethod
    def of(cls, x, name: str) -> "TensorView":
        """Describe ``x`` (numpy, a DeviceArray, torch/cupy CUDA, any DLPack array, or anything
        ``np.asarray`` takes). ``ArgumentTypeError`` for no array at all; ``ArgumentError`` for a
        packed device array (``e2m1x2``) whose bytes are not contiguous along one of its last two
        axes."""
        dev = arrays.describe(x, name)
        if dev is not None:
            ptr, shape, strides, dt, fw = dev
            if dt.name in PACKED_STORAGE:
                return cls._packed(name, x, ptr, tuple(shape), tuple(strides), dt, fw)
            return cls(name, tuple(shape), dt, dt.name, x, None, ptr, tuple(strides), fw)
        h = arrays.host_array(x)
        try:
            dt = _dtype(h.dtype)
        except ArgumentTypeError:
            dt = None
        return cls(name, tuple(h.shape), dt, h.dtype, x, h, 0, tuple(h.strides), "numpy")

    @classmethod
    def _packed(cls, name, x, ptr, shape, strides, dt, fw) -> "TensorView":
        """A device array of packed storage read as its elements: the axis whose byte stride is
        1 (the last or the second-last) counts ``per_byte`` elements per stored byte."""
        elem, per_byte = PACKED_STORAGE[dt.name]
        axis = next((ax for ax in (-1, -2) if len(shape) >= -ax and strides[ax] == 1), None)
        if axis is None:
            raise ArgumentError(f"{name}: a {dt.name} array ({per_byte} {elem} per byte) must be contiguous along "
                                f"its last or second-last axis (byte stride 1), got strides {strides} B")
        shape = list(shape)
        shape[axis] *= per_byte
        return cls(name, tuple(shape), _dtype(elem), dt.name, x, None, ptr, strides, fw, per_byte)

    @property
    def on_host(self) -> bool:
        return self.host is not None


__all__ = ["TensorView"]
