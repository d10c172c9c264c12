"""Global-memory access through ``!llvm.ptr<1>`` kernel parameters (``ld.global``/``st.global``)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import llvm

from .values import Scalar, mlir_type, to_type

_DYN = -2147483648   # llvm.getelementptr marker for a dynamic index


class GlobalPtr:
    """A typed view of a global pointer parameter: element ``dtype`` (cutedsl name)."""

    def __init__(self, ptr, dtype: str):
        from ..dtypes import dtype as _dt
        self.ptr = ptr
        self.dtype = _dt(dtype)
        self.elem = mlir_type(self.dtype.name)

    def address(self, idx) -> ir.Value:
        """``ptr + idx`` elements (``idx``: IR integer, promoted to i64)."""
        idx = to_type(idx, "i64") if isinstance(idx, ir.Value) else idx
        if isinstance(idx, int):
            from .values import i64
            idx = i64(idx)
        return llvm.getelementptr(self.ptr.type, self.ptr, [idx], [_DYN], self.elem, 0)

    def load(self, idx) -> Scalar:
        return Scalar(llvm.load(self.elem, self.address(idx)))

    def store(self, idx, value) -> None:
        if value.type != self.elem:
            raise TypeError(f"storing {value.type} into a {self.dtype.name} pointer; convert with .to()")
        llvm.store(value, self.address(idx))
