"""The runtime's backend interface, and the tensor-map rules every backend applies.

A backend owns device memory, tensor-map encoding, module loading, launch and timing.
``cutedsl.runtime.cuda.CudaBackend`` drives a GPU through cuda-python's driver API;
``cutedsl.sim.SimBackend`` runs the same compiled kernels on the PTX emulator. Both
validate tensor maps with :func:`check_tensor_map` and launches with :func:`check_launch`
so that the same bad inputs are rejected with the same messages before anything is launched.

Backends are shared by threads (one object per backend name, see ``runtime.selection``): their
methods are thread-safe. Memory from :meth:`Backend.alloc` is freed by whoever allocated it,
once, with :meth:`Backend.free`; :meth:`Backend.live_allocations` counts what is still live.
"""
from __future__ import annotations

import abc
import operator

import attrs
import numpy as np

from ..compiler.artifact import CompiledKernel, TensorMapSpec
from ..dtypes import dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError, LaunchError, TensorMapError
from ..ir.smem import SMEM_LIMIT  # re-exported: the per-CTA opt-in limit (bytes)

#: sm_90 launch limits (CUDA programming guide, "Features and Technical Specifications"):
#: gridDim x/y/z, blockDim x/y/z, and threads per CTA.
MAX_GRID = (2 ** 31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_CTA = 1024


@attrs.frozen
class DeviceBuffer:
    """A device allocation: ``ptr`` is the device address, ``nbytes`` its size in bytes."""
    ptr: int
    nbytes: int
    backend: object = attrs.field(eq=False, repr=False, default=None)


@attrs.frozen
class EncodedTensorMap:
    """Driver-order (innermost first) fields of a tiled tensor map, already validated."""
    spec: TensorMapSpec
    address: int
    dims: tuple          #: globalDim[i], elements, innermost first
    strides: tuple       #: globalStrides[i] for i in 1..rank-1, bytes (driver's rank-1 entries)
    box: tuple           #: boxDim[i], innermost first
    elem_strides: tuple  #: elementStrides[i], all 1


def check_tensor_map(spec: TensorMapSpec, address: int, shape, strides) -> EncodedTensorMap:
    """Validate a tiled tensor map like ``cuTensorMapEncodeTiled`` and return its fields.

    ``shape`` (elements) and ``strides`` (bytes) are in numpy order, outermost first; the
    innermost stride must equal the element size. Rules (CUDA driver API, tensor memory
    access): rank 1..5; address 16-B aligned; each dim 1..2^32; strides multiples of 16 B and
    < 2^40 B -- in any order, as the driver takes them (an outer dimension may step less than an
    inner one spans: the block-scale factor maps of CUTLASS and CuTe DSL nest a 512-byte K atom
    inside a larger row-block stride); box dims 1..256 and within the swizzle span; innermost box
    bytes a multiple of 16.

    Raises ``TensorMapError`` naming the parameter, the dimension and the limit.
    """
    name = spec.param
    from ..dtypes import PACKED_TMA
    if spec.dtype in PACKED_TMA:
        return _check_packed(spec, address, shape, strides, PACKED_TMA[spec.dtype])
    dt = _dtype(spec.dtype)
    if dt.tma_code < 0:
        raise TensorMapError(f"tensor map {name!r}: dtype {dt.name} cannot be moved by TMA")
    e = dt.nbytes
    shape = tuple(int(s) for s in shape)
    strides = tuple(int(s) for s in strides)
    rank = len(shape)
    if not 1 <= rank <= 5:
        raise TensorMapError(f"tensor map {name!r}: rank {rank} is outside TMA's 1..5")
    if rank != spec.rank:
        raise TensorMapError(f"tensor map {name!r}: tensor has rank {rank} but the box has rank {spec.rank}")
    if len(strides) != rank:
        raise TensorMapError(f"tensor map {name!r}: {len(strides)} strides for rank {rank}")
    if address % 16:
        raise TensorMapError(f"tensor map {name!r}: global address 0x{address:x} is not 16-byte aligned")
    for i, s in enumerate(shape):
        if not 1 <= s <= 2 ** 32:
            raise TensorMapError(f"tensor map {name!r}: dimension {i} has size {s}, TMA allows 1..2^32")
    if strides[-1] != e:
        raise TensorMapError(f"tensor map {name!r}: innermost dimension must be contiguous "
                             f"(stride {strides[-1]} B, element size {e} B)")
    dims = shape[::-1]
    gstr = strides[::-1][1:]          # driver order, dims 1..rank-1
    for i, s in enumerate(gstr, start=1):
        if s % 16:
            raise TensorMapError(f"tensor map {name!r}: stride of dimension {rank - 1 - i} is {s} B, "
                                 f"TMA needs a multiple of 16 B")
        if s >= 2 ** 40:
            raise TensorMapError(f"tensor map {name!r}: stride {s} B is past TMA's limit 2^40 B")
    box = spec.box[::-1]
    for i, b in enumerate(box):
        if not 1 <= b <= 256:
            raise TensorMapError(f"tensor map {name!r}: box dimension {rank - 1 - i} is {b}, TMA allows 1..256")
    if (box[0] * e) % 16:
        raise TensorMapError(f"tensor map {name!r}: innermost box is {box[0] * e} B, TMA needs a multiple of 16 B")
    if spec.swizzle and box[0] * e > spec.swizzle:
        raise TensorMapError(f"tensor map {name!r}: innermost box is {box[0] * e} B, larger than the "
                             f"{spec.swizzle}-byte swizzle span")
    if spec.oob == "nan" and dt.kind != "float":
        raise TensorMapError(f"tensor map {name!r}: NaN out-of-bounds fill needs a float dtype")
    return EncodedTensorMap(spec, address, dims, gstr, box, (1,) * rank)


def _check_packed(spec: TensorMapSpec, address: int, shape, strides, t) -> EncodedTensorMap:
    """:func:`check_tensor_map` of a packed sub-byte type ``t`` (``dtypes.PACKED_TMA``), with the
    driver's extra rules (cuda.h, cuTensorMapEncodeTiled): the innermost dimension in elements, a
    multiple of 2 (16U4_ALIGN8B) or 128 (the ALIGN16B types, whose box's innermost dimension is
    128 and whose address and strides are multiples of 32 B); ``strides`` in bytes with the
    innermost one 0 (packed elements have no byte stride)."""
    name = spec.param
    shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
    rank = len(shape)
    if not 1 <= rank <= 5 or rank != spec.rank or len(strides) != rank:
        raise TensorMapError(f"tensor map {name!r}: rank {rank} (box rank {spec.rank}, {len(strides)} strides) "
                             f"must agree and be 1..5")
    wide = t.smem_group_bytes == 16         # the ALIGN16B types
    align = 32 if wide else 16
    if address % align:
        raise TensorMapError(f"tensor map {name!r}: global address 0x{address:x} is not {align}-byte aligned "
                             f"({t.name})")
    dims = shape[::-1]
    if not all(1 <= d <= 2 ** 32 for d in dims):
        raise TensorMapError(f"tensor map {name!r}: dimension sizes {shape} must be 1..2^32")
    if dims[0] % (128 if wide else 2):
        raise TensorMapError(f"tensor map {name!r}: innermost dimension {dims[0]} must be a multiple of "
                             f"{128 if wide else 2} for {t.name}")
    if strides[-1] != 0:
        raise TensorMapError(f"tensor map {name!r}: packed {t.name} elements have no byte stride: pass 0 as "
                             f"the innermost stride, got {strides[-1]}")
    gstr = strides[::-1][1:]
    for i, s in enumerate(gstr, start=1):
        if s % align or not 0 < s < 2 ** 40:
            raise TensorMapError(f"tensor map {name!r}: stride of dimension {rank - 1 - i} is {s} B, TMA needs "
                                 f"a multiple of {align} B below 2^40 for {t.name}")
    box = spec.box[::-1]
    if not all(1 <= b <= 256 for b in box):
        raise TensorMapError(f"tensor map {name!r}: box {spec.box} dimensions must be 1..256")
    smem_row = box[0] // 16 * t.smem_group_bytes
    if (wide and box[0] != 128) or (not wide and (box[0] * t.bits) % 128):
        raise TensorMapError(f"tensor map {name!r}: innermost box {box[0]} must be "
                             + ("128 elements" if wide else "a multiple of 16 bytes (32 elements)") + f" for {t.name}")
    if spec.swizzle and smem_row > spec.swizzle:
        raise TensorMapError(f"tensor map {name!r}: innermost box is {smem_row} B in shared memory, larger than "
                             f"the {spec.swizzle}-byte swizzle span")
    if spec.oob == "nan":
        raise TensorMapError(f"tensor map {name!r}: NaN out-of-bounds fill needs a float dtype")
    return EncodedTensorMap(spec, address, dims, gstr, box, (1,) * rank)


def _dim3(v, what) -> tuple:
    try:
        v = tuple(operator.index(x) for x in (v if hasattr(v, "__len__") else (v,)))
    except TypeError:
        raise LaunchError(f"launch refused: {what} must be 1 to 3 integers, got {v!r}") from None
    if not 1 <= len(v) <= 3:
        raise LaunchError(f"launch refused: {what} must be 1 to 3 integers, got {v!r}")
    return v + (1,) * (3 - len(v))


def check_nbytes(nbytes) -> None:
    """``Backend.alloc``'s argument: ``ArgumentTypeError`` unless an int, ``ArgumentError`` if negative."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) and not hasattr(nbytes, "__index__"):
        raise ArgumentTypeError(f"alloc(nbytes): nbytes must be an int number of bytes, got {type(nbytes).__name__}")
    if int(nbytes) < 0:
        raise ArgumentError(f"alloc(nbytes): nbytes must be >= 0, got {int(nbytes)}")


#: the fill widths :meth:`Backend.memset` takes (bytes): the driver's ``cuMemsetD8`` / ``cuMemsetD32``
MEMSET_WIDTHS = (1, 4)


def check_memset(dst, value, nbytes, offset, width) -> None:
    """:meth:`Backend.memset`'s arguments: ``ArgumentTypeError`` for a non-int, ``ArgumentError``
    naming the argument for a width other than 1 / 4, a value that does not fit ``width`` bytes, a
    negative size or offset, or (width 4) a size or an address ``dst.ptr + offset`` that is not a
    multiple of 4 (``cuMemsetD32`` needs a 4-byte aligned address)."""
    for name, v in (("value", value), ("nbytes", nbytes), ("offset", offset), ("width", width)):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise ArgumentTypeError(f"memset: {name} must be an int, got {type(v).__name__}")
    if width not in MEMSET_WIDTHS:
        raise ArgumentError(f"memset: width must be 1 (bytes) or 4 (32-bit words), got {width}")
    if not 0 <= value < 1 << (8 * width):
        raise ArgumentError(f"memset: value {value} does not fit {width} byte(s) (0..{(1 << (8 * width)) - 1}); "
                            f"pass the bit pattern, e.g. 0x3F800000 for 1.0f with width=4")
    if nbytes < 0 or offset < 0:
        raise ArgumentError(f"memset: nbytes and offset must be >= 0, got {nbytes} and {offset}")
    if width == 4 and (nbytes % 4 or (int(dst.ptr) + offset) % 4):
        raise ArgumentError(f"memset: width=4 fills whole aligned 32-bit words: nbytes {nbytes} and address "
                            f"0x{int(dst.ptr) + offset:x} must be multiples of 4; use width=1 for a byte fill")


def check_launch(grid, block, cluster=(1, 1, 1), smem: int = 0) -> None:
    """Refuse a launch the hardware would refuse (``cuLaunchKernel`` returns
    ``CUDA_ERROR_INVALID_VALUE``): gridDim.x 1..2^31-1, gridDim.y/z 1..65535, blockDim
    x/y 1..1024 and z 1..64 with at most 1024 threads, cluster dims >= 1 dividing the grid,
    dynamic shared memory 0..``SMEM_LIMIT`` bytes. Every backend calls it before launching, so
    the emulator rejects what a GPU rejects. Raises ``LaunchError`` naming the dimension and limit.
    """
    grid, block, cluster = _dim3(grid, "grid"), _dim3(block, "block"), _dim3(cluster, "cluster")
    for name, v, lim in (("gridDim", grid, MAX_GRID), ("blockDim", block, MAX_BLOCK)):
        for axis, x, hi in zip("xyz", v, lim):
            if not 1 <= x <= hi:
                raise LaunchError(f"launch refused: {name}.{axis} = {x} is outside the hardware range "
                                  f"1..{hi} (a GPU returns CUDA_ERROR_INVALID_VALUE)")
    if block[0] * block[1] * block[2] > MAX_THREADS_PER_CTA:
        raise LaunchError(f"launch refused: block {block} has {block[0] * block[1] * block[2]} threads, "
                          f"the limit is {MAX_THREADS_PER_CTA} per CTA")
    for axis, g, c in zip("xyz", grid, cluster):
        if c < 1 or g % c:
            raise LaunchError(f"launch refused: clusterDim.{axis} = {c} must be >= 1 and divide "
                              f"gridDim.{axis} = {g}")
    if not 0 <= smem <= SMEM_LIMIT:
        raise LaunchError(f"launch refused: {smem} B of dynamic shared memory, the sm_90 limit is "
                          f"0..{SMEM_LIMIT} B per CTA")


class Backend(abc.ABC):
    """Interface every device backend implements (all sizes in bytes, dims as (x, y, z))."""

    name: str = "?"

    @classmethod
    @abc.abstractmethod
    def available(cls) -> tuple:
        """Return ``(ok, reason)``: whether this backend can run here, and why not."""

    @abc.abstractmethod
    def alloc(self, nbytes: int) -> DeviceBuffer: ...

    @abc.abstractmethod
    def free(self, buf: DeviceBuffer) -> None:
        """Release an allocation from :meth:`alloc` (once; a second free raises)."""

    @abc.abstractmethod
    def live_allocations(self) -> int:
        """Number of allocations made by :meth:`alloc` and not yet freed (leak checks)."""

    def label(self, buf: DeviceBuffer, text: str) -> None:
        """Name what an allocation holds (``"Gemm output d"``) for the backend's diagnostics: the
        emulator's initcheck names it in a report of a read of bytes nothing wrote. A no-op
        here."""

    def release_tensor_map(self, blob: bytes) -> None:
        """Forget a tensor map from :meth:`encode_tensor_map` once no launch will use it.
        A no-op where the 128 bytes are self-contained (a GPU); the emulator drops its entry."""

    @abc.abstractmethod
    def copy_to_device(self, dst: DeviceBuffer, src, offset: int = 0) -> None:
        """Copy a C-contiguous numpy array into ``dst`` at byte ``offset``."""

    @abc.abstractmethod
    def copy_to_host(self, dst, src: DeviceBuffer, offset: int = 0) -> None:
        """Copy from ``src`` at byte ``offset`` into a C-contiguous numpy array."""

    def memset(self, dst: DeviceBuffer, value: int, nbytes: int, offset: int = 0, *, width: int = 1) -> None:
        """Fill ``nbytes`` bytes of ``dst`` from byte ``offset`` with ``value``, a ``width``-byte
        (1 or 4) little-endian pattern -- the driver's ``cuMemsetD8`` / ``cuMemsetD32``: on a GPU
        it runs on the device in launch order, with no host copy. Raises as :func:`check_memset`.
        Here: a host copy of the pattern (what a backend without a device fill does)."""
        check_memset(dst, value, nbytes, offset, width)
        if nbytes:
            self.copy_to_device(dst, np.full(nbytes // width, value, np.dtype(f"<u{width}")), offset)

    def zero(self, dst: DeviceBuffer, nbytes: int | None = None, offset: int = 0) -> None:
        """Zero ``nbytes`` bytes of ``dst`` from ``offset`` (default: the rest of the buffer):
        :meth:`memset` with 32-bit words where the address and size allow, else bytes."""
        nbytes = int(dst.nbytes) - offset if nbytes is None else nbytes
        wide = not isinstance(nbytes, bool) and hasattr(nbytes, "__index__") and hasattr(offset, "__index__") \
            and nbytes % 4 == 0 and (int(dst.ptr) + offset) % 4 == 0
        self.memset(dst, 0, nbytes, offset, width=4 if wide else 1)

    @abc.abstractmethod
    def encode_tensor_map(self, spec: TensorMapSpec, address: int, shape, strides) -> bytes:
        """Validate with :func:`check_tensor_map` and return the 128-byte ``CUtensorMap``."""

    @abc.abstractmethod
    def load(self, kernel: CompiledKernel):
        """Load the kernel's module; returns an opaque handle for :meth:`launch`."""

    @abc.abstractmethod
    def launch(self, handle, grid: tuple, params: list, *, block: tuple, cluster: tuple = (1, 1, 1),
               smem: int = 0, stream=None) -> None:
        """Launch ``grid`` CTAs of ``block`` threads; ``params`` is one ``bytes`` per kernel
        parameter (``CompiledKernel.pack_params``); ``smem`` is dynamic shared memory in bytes.
        Implementations call :func:`check_launch` first (``LaunchError`` past hardware limits)."""

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    def time_launches(self, fn, iters: int) -> list:
        """Run ``fn()`` ``iters`` times; return per-run milliseconds (events where available)."""
        import time
        out = []
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            self.synchronize()
            out.append((time.perf_counter() - t) * 1e3)
        return out
