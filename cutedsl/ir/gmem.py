"""Global-memory access through ``!llvm.ptr<1>`` kernel parameters (``ld.global``/``st.global``,
vector loads/stores, reductions ``red.global.add``, and the GPU-scope acquire/release accesses
of flags and semaphores shared between CTAs)."""
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

    def load_vec(self, idx, lanes: int) -> ir.Value:
        """``vector<lanes x dtype>`` of elements ``idx .. idx + lanes - 1`` (one
        ``ld.global.v{lanes}``; the address must be aligned to the vector's bytes)."""
        vt = ir.VectorType.get([lanes], self.elem)
        return llvm.load(vt, self.address(idx), alignment=lanes * self.dtype.nbytes)

    def store_vec(self, idx, vec) -> None:
        """Store ``vec`` (a ``vector<lanes x dtype>``) at elements ``idx ..`` (one ``st.global.v{lanes}``)."""
        lanes = ir.VectorType(vec.type).shape[0]
        llvm.store(vec, self.address(idx), alignment=lanes * self.dtype.nbytes)

    def _b32(self, what: str) -> None:
        if self.dtype.name not in ("u32", "i32"):
            raise TypeError(f"{what} works on u32/i32 pointers (a 32-bit flag), not {self.dtype.name}")

    def load_acquire(self, idx) -> Scalar:
        """``ld.acquire.gpu.global.b32`` of element ``idx`` (u32/i32 pointer): a load that, once
        it reads a value another CTA's release wrote, makes that CTA's earlier writes visible
        to this thread (PTX ISA memory consistency model: release/acquire patterns)."""
        self._b32("load_acquire")
        i32t = ir.IntegerType.get_signless(32)
        v = llvm.inline_asm(i32t, [self.address(idx)], "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l",
                            has_side_effects=True)
        return Scalar(v, signed=False)

    def store_release(self, idx, value) -> None:
        """``st.release.gpu.global.b32`` of i32 ``value`` to element ``idx`` (u32/i32 pointer):
        this thread's earlier writes, and those ordered before them (e.g. through a barrier),
        are visible to a thread whose acquire load reads ``value``."""
        self._b32("store_release")
        llvm.inline_asm(None, [self.address(idx), value], "st.release.gpu.global.b32 [$0], $1;", "l,r",
                        has_side_effects=True)

    #: element dtype -> (PTX reduction, inline-asm constraint of the value, values per op)
    _RED = {"f32": ("red.global.add.f32", "f", 1),
            "f16": ("red.global.add.noftz.f16x2", "r", 2),
            "bf16": ("red.global.add.noftz.bf16x2", "r", 2)}

    def atomic_add(self, idx, value) -> None:
        """Atomically add ``value`` to element ``idx`` (PTX ``red.global.add``, relaxed, GPU
        scope; no result is returned, so it is a reduction, not an ``atom``).

        * f32 pointer: ``value`` is an f32 scalar -> ``red.global.add.f32``; or a tuple of 2 or 4
          f32 scalars added to elements ``idx ..`` -> ``red.global.add.v2.f32`` / ``.v4.f32``
          (PTX ISA 9.7.13.6, sm_90 and PTX ISA 8.1; ``idx`` aligned to the vector: a
          misaligned vector faults).
        * f16 / bf16 pointer: ``value`` is a pair — a ``vector<2xf16|bf16>`` or a tuple of two
          scalars of the element type — added to elements ``idx`` and ``idx + 1``
          (``red.global.add.noftz.f16x2`` / ``.bf16x2``, sm_90 for bf16). ``idx`` must be even
          (the pair is one 4-byte access).

        Raises ``TypeError`` for other dtypes or a value of the wrong type, ``ValueError`` for a
        Python-int ``idx`` that is odd on an f16/bf16 pointer.
        """
        from mlir.dialects import vector
        name = self.dtype.name
        if name not in self._RED:
            raise TypeError(f"atomic_add supports f32, f16 and bf16 pointers, not {name}")
        op, con, lanes = self._RED[name]
        if name == "f32" and isinstance(value, (tuple, list)):
            n = len(value)
            if n not in (2, 4) or any(x.type != self.elem for x in value):
                raise TypeError(f"atomic_add on an f32 pointer takes one f32 or a tuple of 2 or 4, got "
                                f"{[str(x.type) for x in value]}")
            if isinstance(idx, int) and idx % n:
                raise ValueError(f"atomic_add of {n} f32 needs an index aligned to {n}, got {idx}")
            regs = ", ".join(f"${j + 1}" for j in range(n))
            llvm.inline_asm(None, [self.address(idx), *value], f"red.global.add.v{n}.f32 [$0], {{{regs}}};",
                            "l," + ",".join("f" * n), has_side_effects=True)
            return
        if lanes == 2:
            if isinstance(idx, int) and idx % 2:        # a known odd index: a misaligned 4-byte access
                raise ValueError(f"atomic_add on a {name} pointer adds a pair at an even index, got {idx}")
            vt = ir.VectorType.get([2], self.elem)
            if isinstance(value, (tuple, list)):
                lo, hi = value
                if lo.type != self.elem or hi.type != self.elem:
                    raise TypeError(f"atomic_add on a {name} pointer takes two {name} values, got "
                                    f"{lo.type} and {hi.type}")
                value = vector.from_elements(vt, [lo, hi])
            if value.type != vt:
                raise TypeError(f"atomic_add on a {name} pointer takes a vector<2x{name}> pair, got {value.type}")
            value = llvm.bitcast(ir.IntegerType.get_signless(32), value)
        elif value.type != self.elem:
            raise TypeError(f"atomic_add of {value.type} into a {name} pointer; convert with .to()")
        llvm.inline_asm(None, [self.address(idx), value], f"{op} [$0], $1;", f"l,{con}",
                        has_side_effects=True)
