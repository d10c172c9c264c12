"""``SimBackend``: the Device-layer backend that runs compiled kernels on the PTX emulator,
and :class:`Emulator`, a convenience API for tests (PTX text in, numpy arrays out).

Global memory is synthetic (see :mod:`cutedsl.sim.machine.memory`): 256-byte aligned allocations
separated by unmapped guard gaps, so out-of-bounds accesses raise
:class:`~cutedsl.sim.frontend.errors.MemoryAccessError`. Tensor maps are validated with
:func:`cutedsl.runtime.backend.check_tensor_map` (same rules and messages as the CUDA
backend) and encoded as a 128-byte blob naming an entry of the emulator's registry.
Launches run synchronously; ``synchronize`` is a no-op.
"""
from __future__ import annotations

import functools
import os
import struct
import sys
import threading
import time

import numpy as np

from cutedsl.runtime.backend import Backend, DeviceBuffer, check_launch, check_memset, check_nbytes, check_tensor_map
from ..errors import ArgumentError, ArgumentTypeError, checked_arguments
from .frontend.errors import MemoryAccessError, SimLaunchError
from .frontend.limits import DEFAULT_LIMITS, SimLimits
from .machine.memory import GlobalMemory
from .frontend.loader import load_ptx
from .frontend.program import Program
from .machine.scheduler import DEFAULT_BUDGET, DEFAULT_SM_COUNT, Launch
from .machine.chaos import env_seed
from .checks.rules import check_allow
from .engines import tensormap as _tma
from .engines.tensormap import register_tensor_map


def _locked(method):
    """Run a SimBackend method under the backend's lock: global memory, the tensor-map registry
    and launches are shared by every thread using the backend (the emulator is GIL-bound, so
    serialising costs no parallelism)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


class SimModule:
    """Handle returned by :meth:`SimBackend.load`: the decoded program (+ the kernel)."""

    def __init__(self, program: Program, kernel=None):
        self.program = program
        self.kernel = kernel
        self.global_syms = {}

    def __repr__(self):
        return f"SimModule({self.program.name!r}, {len(self.program.code)} instructions)"


class SimBackend(Backend):
    """Backend running PTX on the CPU emulator.

    Options (keyword-only): ``budget`` - maximum warp-instructions per launch (default 200M,
    raises :class:`InstructionBudgetExceeded`); ``race_check`` - the happens-before race
    detector (default True, raises :class:`RaceError`; docs/emulator.md lists its rules);
    ``dyn_smem_offset`` - extra bytes added to the 1024-aligned dynamic shared-memory base
    (placement stress test; default 0); ``chaos`` - an integer seed for the adversarial mode
    (random interleavings, late asynchronous completion; default: ``CUTEDSL_SIM_CHAOS`` if set,
    else off); ``time_limit`` - wall-clock seconds per launch (default:
    ``CUTEDSL_SIM_TIME_LIMIT`` if set, else 60; raises :class:`TimeLimitExceeded`, and
    :class:`GridTooLarge` before starting a grid that cannot finish within it);
    ``initcheck`` - reads of memory nothing wrote raise :class:`UninitializedReadError`
    (shared memory and the tensor core's tensor-memory reads, with ``race_check``; device reads
    of global memory no host copy or device write defined since :meth:`alloc`;
    default: ``CUTEDSL_SIM_INITCHECK`` if set, else on; docs/emulator.md, Initcheck);
    ``progress_limit`` - warp-instructions a launch may execute with no synchronisation, warp
    exit or cluster start before it is a livelock (default: ``CUTEDSL_SIM_PROGRESS_LIMIT`` if
    set, else 2,000,000; raises :class:`LivelockError`);
    ``limits`` - a :class:`~cutedsl.sim.frontend.limits.SimLimits` bounding what a launch may allocate
    (checked before allocating: :class:`SimLaunchError`); ``sm_count`` - the SMs of the
    modelled GPU (default 132): the CTAs that fit on them at once run together (residency,
    ``cutedsl.sim.machine.scheduler``), and persistent GEMM schedules size their grid from it;
    ``strict_tcgen05_fences`` - order a thread's tcgen05 operations' tensor-memory accesses after
    a thread synchronisation only through ``tcgen05.fence::after_thread_sync`` (the PTX ISA's
    rule; off by default because CUTLASS's, CuTe DSL's and Triton's sm_100 GEMMs omit the fence:
    docs/emulator.md); ``allow`` - race rules to opt out of, by id (``("tcgen05-ld-without-wait",)``:
    the rules of :mod:`cutedsl.sim.checks.rules`, each a PTX ISA rule that some shipped code breaks;
    every other rule still reports; an unknown id is an :class:`ArgumentError` listing them).
    After each launch ``last_launch`` holds ``{"instructions", "seconds", "ctas", "printf", "chaos",
    "resident_clusters", "clusters_started", "clusters_cancelled"}`` (``printf``: the lines
    ``vprintf`` produced, also written to stdout; the last two: clusters that ran, and clusters
    that cluster launch control cancelled before they started).
    """

    name = "sim"

    @checked_arguments()
    def __init__(self, *, budget: int = DEFAULT_BUDGET, race_check: bool = True, dyn_smem_offset: int = 0,
                 chaos: int | None = None, time_limit: float | None = None, limits: SimLimits | None = None,
                 sm_count: int = DEFAULT_SM_COUNT, strict_tcgen05_fences: bool = False, allow=(),
                 progress_limit: int | None = None, initcheck: bool | None = None):
        self.gmem = GlobalMemory()
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget <= 0:
            raise ArgumentError(f"budget must be a positive int number of warp-instructions, got {budget!r}")
        if limits is not None and not isinstance(limits, SimLimits):
            raise ArgumentTypeError(f"limits must be a cutedsl.sim.SimLimits, got {type(limits).__name__}")
        self.limits = limits or DEFAULT_LIMITS
        self.budget = budget
        self.race_check = race_check
        self.dyn_smem_offset = dyn_smem_offset
        if chaos is not None and (isinstance(chaos, bool) or not isinstance(chaos, (int, np.integer))):
            raise ArgumentError(f"chaos must be an integer seed or None, got {chaos!r}")
        if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
            raise ArgumentError(f"time_limit must be a positive number of seconds or None, got {time_limit!r}")
        if progress_limit is not None and (isinstance(progress_limit, bool) or not isinstance(
                progress_limit, (int, np.integer)) or progress_limit <= 0):
            raise ArgumentError(f"progress_limit must be a positive int number of warp-instructions or None, "
                                f"got {progress_limit!r}")
        self.progress_limit = progress_limit
        if initcheck is not None and not isinstance(initcheck, (bool, np.bool_)):
            raise ArgumentTypeError(f"initcheck must be True, False or None, got {initcheck!r}")
        self.initcheck = initcheck
        self.chaos = chaos
        self.time_limit = time_limit
        if isinstance(sm_count, bool) or not isinstance(sm_count, (int, np.integer)) or not 1 <= sm_count <= 4096:
            raise ArgumentError(f"sm_count must be an int in 1..4096 (the SMs resident CTAs spread over), "
                                f"got {sm_count!r}")
        self.sm_count = int(sm_count)
        self.strict_tcgen05_fences = bool(strict_tcgen05_fences)
        try:
            self.allow = check_allow(allow)
        except (TypeError, ValueError) as e:
            raise ArgumentError(f"{e} (SimBackend(allow=...) takes a tuple of rule ids)") from None
        self.last_launch = {}
        self._lock = threading.RLock()   # reentrant: a finalizer may free memory inside a locked call
        self._tmaps = set()              # ids of the tensor maps this backend registered

    @classmethod
    def available(cls) -> tuple:
        return True, ""

    # -- memory ------------------------------------------------------------------------
    @_locked
    def alloc(self, nbytes: int) -> DeviceBuffer:
        """``nbytes`` of device memory, undefined until written (as ``cuMemAlloc`` leaves it): a
        device read of a byte no host copy or device write defined is an initcheck report naming
        the Python line that allocated it (docs/emulator.md, Initcheck)."""
        check_nbytes(nbytes)
        a = self.gmem.alloc(int(nbytes), defined=False, origin=allocation_site())
        return DeviceBuffer(a.base, int(nbytes), self)

    @_locked
    def label(self, buf: DeviceBuffer, text: str) -> None:
        """Name what ``buf`` holds (e.g. ``"Gemm output d"``) in the emulator's reports."""
        al = self.gmem.allocs.get(int(buf.ptr))
        if al is not None:
            al.origin = f"{text}, {al.origin}" if al.origin else text

    @_locked
    def free(self, buf: DeviceBuffer) -> None:
        self.gmem.free(buf.ptr)

    def live_allocations(self) -> int:
        return len(self.gmem.allocs)

    def _span(self, buf, offset, n):
        al = self.gmem.allocs.get(int(buf.ptr))
        if al is None:
            raise MemoryAccessError(f"buffer at 0x{int(buf.ptr):x} is not allocated (freed?)")
        if offset < 0 or offset + n > al.nbytes:
            raise ArgumentError(f"copy of {n} B at offset {offset} exceeds the {al.nbytes}-byte buffer")
        return al

    @_locked
    def copy_to_device(self, dst: DeviceBuffer, src, offset: int = 0) -> None:
        a = np.ascontiguousarray(src)
        raw = a.reshape(-1).view(np.uint8)
        al = self._span(dst, offset, raw.size)
        al.data[offset:offset + raw.size] = raw
        al.define_span(offset, offset + raw.size)

    @_locked
    def memset(self, dst: DeviceBuffer, value: int, nbytes: int, offset: int = 0, *, width: int = 1) -> None:
        """:meth:`Backend.memset`: a numpy fill of the allocation's bytes (defined for initcheck,
        as ``cuMemsetD8`` / ``cuMemsetD32`` define them on a GPU)."""
        check_memset(dst, value, nbytes, offset, width)
        al = self._span(dst, offset, nbytes)
        if width == 1:
            al.data[offset:offset + nbytes] = value
        else:
            al.data[offset:offset + nbytes].view("<u4")[...] = value
        al.define_span(offset, offset + nbytes)

    @_locked
    def copy_to_host(self, dst, src: DeviceBuffer, offset: int = 0) -> None:
        if not (isinstance(dst, np.ndarray) and dst.flags.c_contiguous):
            raise ArgumentError("copy_to_host needs a C-contiguous numpy array")
        raw = dst.reshape(-1).view(np.uint8)
        al = self._span(src, offset, raw.size)
        raw[...] = al.data[offset:offset + raw.size]

    # -- tensor maps ----------------------------------------------------------------------
    @_locked
    def encode_tensor_map(self, spec, address: int, shape, strides) -> bytes:
        enc = check_tensor_map(spec, int(address), shape, strides)
        blob = register_tensor_map(enc)
        self._tmaps.add(_tma.decode_blob(blob).id)
        return blob

    @_locked
    def release_tensor_map(self, blob: bytes) -> None:
        tm = _tma.decode_blob(bytes(blob))
        if tm is not None and tm.id in self._tmaps:
            self._tmaps.discard(tm.id)
            _tma._REGISTRY.pop(tm.id, None)   # the registry is process-wide; drop this backend's entry

    def live_tensor_maps(self) -> int:
        """Tensor maps encoded by this backend and not yet released."""
        return len(self._tmaps)

    # -- modules and launches ---------------------------------------------------------------
    def load(self, kernel) -> SimModule:
        prog = load_ptx(kernel.ptx, getattr(kernel, "entry", None), limits=self.limits)
        specs = getattr(kernel, "params", None)
        if specs is not None:
            if len(specs) != len(prog.params):
                raise SimLaunchError(f"kernel {prog.name!r}: CompiledKernel lists {len(specs)} parameters, "
                                     f"the PTX entry has {len(prog.params)}")
            for s, p in zip(specs, prog.params):
                if s.size != p.size:
                    raise SimLaunchError(f"kernel {prog.name!r}: parameter {s.name!r} is {s.size} B ({s.kind}) "
                                         f"but PTX parameter {p.name} is {p.size} B")
        return SimModule(prog, kernel)

    @_locked
    def launch(self, handle, grid: tuple, params: list, *, block: tuple, cluster: tuple = (1, 1, 1),
               smem: int = 0, stream=None) -> None:
        check_launch(grid, block, cluster, smem)      # refuse what a GPU's driver refuses
        if isinstance(handle, Program):
            handle = SimModule(handle)
        t = time.perf_counter()
        ln = Launch(handle.program, self.gmem, grid, block, params, cluster=cluster, smem=smem,
                    budget=self.budget, race_check=self.race_check, dyn_smem_offset=self.dyn_smem_offset,
                    global_syms=handle.global_syms, time_limit=self.time_limit,
                    chaos=self.chaos if self.chaos is not None else env_seed(), limits=self.limits,
                    sm_count=self.sm_count, progress_limit=self.progress_limit, initcheck=self.initcheck)
        ln.strict_tcgen05_fences = self.strict_tcgen05_fences
        ln.allow = self.allow
        ln.run()
        self.last_launch = {"instructions": ln.insts, "seconds": time.perf_counter() - t,
                            "ctas": ln.grid[0] * ln.grid[1] * ln.grid[2], "printf": ln.printf,
                            "chaos": ln.seed, "resident_clusters": ln.resident,
                            "clusters_started": ln.clusters_started, "clusters_cancelled": len(ln.cancelled)}

    def synchronize(self) -> None:
        return None


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))       # the cutedsl package
_QUIET = (os.path.join(_PKG, "sim", ""), os.path.join(_PKG, "runtime", "arrays.py"))


def allocation_site() -> str:
    """Who is allocating, for initcheck reports: the innermost Python line outside the emulator
    and ``runtime/arrays.py`` (the library call, e.g. a front end's output) and, when that is
    inside cutedsl, the first caller outside it (the user's line)."""
    f = sys._getframe(1)
    lib = user = None
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if lib is None and not fn.startswith(_QUIET):
            lib = f
        if lib is not None and not fn.startswith(_PKG + os.sep):
            user = f
            break
        f = f.f_back
    if lib is None:
        return ""
    text = f"allocated at {_line(lib)} ({lib.f_code.co_name})"
    if user is not None and user is not lib:
        text += f", called from {_line(user)}"
    return text


def _line(f) -> str:
    fn = f.f_code.co_filename
    try:
        rel = os.path.relpath(fn)
        fn = rel if not rel.startswith("..") else fn
    except ValueError:
        pass
    return f"{fn}:{f.f_lineno}"


def pack_arg(param, value) -> bytes:
    """Pack a Python value for a PTX ``.param`` (by its declared type and size)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, DeviceBuffer):
        value = value.ptr
    if isinstance(value, np.ndarray):
        return value.tobytes()
    t = param.type
    if param.size != {"b8": 1, "u8": 1, "s8": 1}.get(t, 0) and param.size > 8:
        raise SimLaunchError(f"parameter {param.name} ({param.size} B) needs a bytes value")
    fmt = {"u8": "<B", "s8": "<b", "b8": "<B", "u16": "<H", "s16": "<h", "b16": "<H", "u32": "<I", "b32": "<I",
           "s32": "<i", "u64": "<Q", "b64": "<Q", "s64": "<q", "f32": "<f", "f64": "<d"}.get(t)
    if fmt is None:
        raise SimLaunchError(f"cannot pack a value for parameter {param.name} of type .{t}")
    if fmt[-1] in "fd":
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not ok:
        want = "a float" if fmt[-1] in "fd" else "an int (or a DeviceBuffer for a pointer)"
        raise ArgumentTypeError(f"parameter {param.name} (.{t}) needs {want}, got {type(value).__name__} {value!r:.40}")
    if fmt[-1] in "BHIQ" and value < 0:
        value = int(value) & ((1 << (8 * struct.calcsize(fmt))) - 1)
    try:
        return struct.pack(fmt, value)
    except (struct.error, OverflowError) as e:
        raise ArgumentError(f"parameter {param.name} (.{t}): {value!r} does not fit ({e})") from None


class Emulator:
    """Convenience API over a :class:`SimBackend` for tests and experiments.

    >>> emu = Emulator()
    >>> prog = emu.load(ptx_text)                    # Program (decoded once, cached)
    >>> x = emu.to_device(np.arange(32, dtype=np.float32))
    >>> emu.launch(prog, grid=1, block=32, args=[x, 32])
    >>> emu.to_host(x, (32,), np.float32)

    ``args`` are Python values packed by the PTX parameter types: DeviceBuffer or int for
    pointers, int/float for scalars, bytes for byval arrays (tensor maps from
    :meth:`tensor_map`). Keyword options are passed to :class:`SimBackend`.
    """

    def __init__(self, backend: SimBackend | None = None, **opts):
        self.backend = backend or SimBackend(**opts)

    def load(self, ptx: str, entry: str | None = None) -> Program:
        """Decode PTX text (``str``, or UTF-8 ``bytes``) with this backend's limits.
        :class:`PTXParseError` for anything that is not PTX the emulator can run."""
        return load_ptx(ptx, entry, limits=self.backend.limits)

    def alloc(self, nbytes):
        return self.backend.alloc(nbytes)

    def to_device(self, arr) -> DeviceBuffer:
        arr = np.ascontiguousarray(arr)
        buf = self.backend.alloc(arr.nbytes)
        self.backend.copy_to_device(buf, arr)
        return buf

    def to_host(self, buf, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype)
        self.backend.copy_to_host(out, buf)
        return out

    def tensor_map(self, buf, array_shape, dtype, box, swizzle=0, oob="zero", strides=None) -> bytes:
        """Encode a tiled tensor map over a row-major tensor at ``buf`` (numpy-order shape/box;
        ``dtype`` a cutedsl dtype or a packed TMA type of ``cutedsl.dtypes.PACKED_TMA``, e.g.
        ``"16u4_align8b"``: shape in elements, rows packed)."""
        from ..compiler.artifact import TensorMapSpec
        from ..dtypes import PACKED_TMA, dtype as _dt
        packed = PACKED_TMA.get(dtype) if isinstance(dtype, str) else None
        name = packed.name if packed else _dt(dtype).name
        if strides is None:             # row-major; a packed type's rows are its packed bytes
            strides, s = [], _dt(dtype).nbytes if not packed else 0
            for i, n in enumerate(reversed(array_shape)):
                strides.append(s)
                s = (n * packed.bits // 8) if packed and i == 0 else s * n
            strides = strides[::-1]
        spec = TensorMapSpec("tmap", name, tuple(box), swizzle, oob)
        ptr = buf.ptr if isinstance(buf, DeviceBuffer) else int(buf)
        return self.backend.encode_tensor_map(spec, ptr, array_shape, strides)

    def launch(self, program: Program, grid=1, block=32, args=(), *, cluster=(1, 1, 1), smem=0):
        params = [pack_arg(p, v) for p, v in zip(program.params, args)]
        if len(args) != len(program.params):
            raise SimLaunchError(f"kernel {program.name!r} takes {len(program.params)} arguments, got {len(args)}")
        self.backend.launch(SimModule(program), grid, params, block=block, cluster=cluster, smem=smem)
        return self.backend.last_launch
