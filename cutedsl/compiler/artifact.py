"""The compiled-kernel artifact: plain data that needs neither MLIR nor a GPU.

A :class:`CompiledKernel` holds the PTX text, the sm_90a cubin, the entry name, the
kernel-parameter layout, launch metadata (block/cluster dims, dynamic shared memory in
bytes), the TMA tensor-map specifications the host must encode per call, and the
resource report (registers, spills, shared memory, SASS histogram). It is saved as a
directory (``kernel.json`` + ``kernel.ptx`` + ``kernel.cubin``) with SHA-256 checksums of the
two files and of the metadata itself, so that a corrupt or edited entry is detected on load.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import attrs

from ..errors import ArgumentError, CacheError

#: kernel-parameter kinds and their (size, alignment) in bytes
PARAM_KINDS = {"tensormap": (128, 64), "ptr": (8, 8), "i32": (4, 4), "u32": (4, 4),
               "i64": (8, 8), "f32": (4, 4)}
SWIZZLES = (0, 32, 64, 128)
FORMAT = 2      #: kernel.json layout; 2 added the metadata checksum


def _meta_digest(meta: dict) -> str:
    """SHA-256 of the metadata (canonical JSON, without its own checksum)."""
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


@attrs.frozen
class ParamSpec:
    """One kernel parameter, in PTX ``.param`` order.

    ``kind`` is one of ``tensormap`` (128-byte ``CUtensorMap`` passed by value as a grid
    constant), ``ptr`` (64-bit global address), ``i32``/``u32``/``i64``/``f32`` (scalars).

    A ``ptr`` parameter may declare what it points to, so that the Device layer checks arrays
    passed for it like A and B: ``shape`` (numpy order; each entry an int, one of the problem
    sizes ``"m"``, ``"n"``, ``"k"``, ``"l"``, or a size the kernel names in ``param_dims``),
    ``dtype`` (cutedsl name, e.g. ``"f32"``), and ``output=True`` when the kernel writes there.
    Undeclared (None) means unchecked. Not part of the compiled artifact.
    """
    name: str
    kind: str = attrs.field(validator=attrs.validators.in_(PARAM_KINDS))
    shape: tuple = attrs.field(default=None, kw_only=True,
                               converter=attrs.converters.optional(tuple))
    dtype: str = attrs.field(default=None, kw_only=True)
    #: the kernel writes through this pointer (an epilogue's second output): a numpy array
    #: passed for it is filled after the launch
    output: bool = attrs.field(default=False, kw_only=True)
    #: scratch memory the Device layer provides (zeroed when allocated, kept by the ``Gemm``
    #: and reused; sized by ``kernel.workspace(problem)``): not an argument of the call
    workspace: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self):
        if self.workspace and self.kind != "ptr":
            raise ValueError(f"parameter {self.name!r}: a workspace is a ptr")
        if self.output and self.kind != "ptr":
            raise ValueError(f"parameter {self.name!r}: shape/dtype/output can only be declared for a ptr")
        if (self.shape is not None or self.dtype is not None) and self.kind not in ("ptr", "tensormap"):
            raise ValueError(f"parameter {self.name!r}: shape/dtype/output can only be declared for a ptr "
                             f"(or the array behind a tensor map)")
        for s in self.shape or ():
            if not ((isinstance(s, str) and s.isidentifier()) or (isinstance(s, int) and s > 0)):
                raise ValueError(f"parameter {self.name!r}: shape entries are positive ints or size names "
                                 f"('m', 'n', 'k', 'l', or a kernel's own from its param_dims), got {s!r}")

    @property
    def size(self) -> int:
        return PARAM_KINDS[self.kind][0]

    @property
    def align(self) -> int:
        return PARAM_KINDS[self.kind][1]

    def pack(self, value) -> bytes:
        """Encode ``value`` as the bytes the kernel reads for this parameter."""
        k = self.kind
        if k == "tensormap":
            b = bytes(value)
            if len(b) != 128:
                raise ArgumentError(f"parameter {self.name!r}: a tensor map is 128 bytes, got {len(b)}")
            return b
        try:
            if k == "ptr":
                return struct.pack("<Q", int(value))
            if k == "i32":
                return struct.pack("<i", int(value))
            if k == "u32":
                return struct.pack("<I", int(value))
            if k == "i64":
                return struct.pack("<q", int(value))
            return struct.pack("<f", float(value))
        except struct.error as e:
            raise ArgumentError(f"parameter {self.name!r} ({k}) cannot hold {value!r}: {e}") from None


@attrs.frozen
class TensorMapSpec:
    """Static part of a TMA tensor map (``CUtensorMap``, tiled mode).

    ``box`` is in elements, **outermost dimension first** (numpy order); the driver's
    innermost-first order is ``box[::-1]``. ``swizzle`` is the span in bytes (0, 32, 64,
    128), ``oob`` is ``"zero"`` or ``"nan"``, ``l2promo`` in bytes (0, 64, 128, 256).
    ``param`` names the kernel parameter that receives the encoded map. The global
    address, shape and strides are supplied per call.
    """
    param: str
    dtype: str
    box: tuple = attrs.field(converter=tuple)
    swizzle: int = attrs.field(default=0, validator=attrs.validators.in_(SWIZZLES))
    oob: str = attrs.field(default="zero", validator=attrs.validators.in_(("zero", "nan")))
    l2promo: int = attrs.field(default=0, validator=attrs.validators.in_((0, 64, 128, 256)))

    @property
    def rank(self) -> int:
        return len(self.box)

    @property
    def box_bytes(self) -> int:
        from ..dtypes import dtype
        n = dtype(self.dtype).nbytes
        for b in self.box:
            n *= b
        return n


@attrs.frozen
class KernelResources:
    """Resource report of one compiled kernel (from ``ptxas -v`` and ``nvdisasm``). ``sass`` is
    None until the SASS is disassembled (:attr:`CompiledKernel.resources` does it when read,
    where nvdisasm is installed: compiling does not wait for it)."""
    registers: int
    spill_stores: int            #: bytes
    spill_loads: int             #: bytes
    stack: int                   #: bytes of stack frame
    static_smem: int             #: bytes of static shared memory (e.g. mbarriers)
    dynamic_smem: int            #: bytes of dynamic shared memory requested at launch
    sass: dict | None = attrs.field(default=None, converter=attrs.converters.optional(dict))  #: SASS opcode -> count
    ptxas_messages: tuple = attrs.field(default=(), converter=tuple)  #: ptxas info/warning lines (C75xx)

    @property
    def smem_bytes(self) -> int:
        return self.static_smem + self.dynamic_smem


@attrs.frozen
class CompiledKernel:
    """A compiled kernel: everything needed to launch it, as plain data."""
    entry: str
    ptx: str
    cubin: bytes
    params: tuple = attrs.field(converter=tuple)        #: ParamSpec, in order
    block: tuple = attrs.field(converter=tuple)         #: threads (x, y, z)
    cluster: tuple = attrs.field(converter=tuple, default=(1, 1, 1))
    dynamic_smem: int = 0                               #: bytes
    tensor_maps: tuple = attrs.field(converter=tuple, default=())   #: TensorMapSpec
    _resources: KernelResources | None = attrs.field(default=None, alias="resources", eq=False)
    compile_seconds: float = 0.0
    key: str = ""
    meta: dict = attrs.field(factory=dict, converter=dict)

    @property
    def resources(self) -> KernelResources | None:
        """The resource report; its SASS histogram is disassembled from the cubin on first read
        (about 0.3 s; nvdisasm), so a compile does not wait for it. Where nvdisasm is not
        installed (a GPU box running cached kernels) ``sass`` stays None."""
        r = self._resources
        if r is not None and r.sass is None and self.cubin:
            from . import toolchain
            try:
                hist = toolchain.sass_histogram(toolchain.sass(self.cubin))
            except Exception:          # noqa: BLE001 - no nvdisasm here: the histogram stays unknown
                return r
            r = attrs.evolve(r, sass=hist)
            object.__setattr__(self, "_resources", r)
        return r

    def param(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def pack_params(self, values: dict) -> list:
        """Pack ``{param name: value}`` into one ``bytes`` per parameter, in order.

        Raises ``ArgumentError`` for a missing or extra name.
        """
        names = {p.name for p in self.params}
        extra = set(values) - names
        missing = names - set(values)
        if extra or missing:
            raise ArgumentError(f"kernel {self.entry!r}: missing parameters {sorted(missing)}, "
                                f"unknown parameters {sorted(extra)}")
        return [p.pack(values[p.name]) for p in self.params]

    # -- persistence ---------------------------------------------------------------
    def save(self, path) -> Path:
        """Write the artifact into directory ``path`` (created); returns the path."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        ptx = self.ptx.encode()
        meta = {
            "format": FORMAT, "entry": self.entry,
            "params": [[p.name, p.kind] for p in self.params],
            "block": list(self.block), "cluster": list(self.cluster),
            "dynamic_smem": self.dynamic_smem,
            "tensor_maps": [attrs.asdict(t) for t in self.tensor_maps],
            "resources": attrs.asdict(self._resources) if self._resources else None,   # as known: no disassembly
            "compile_seconds": self.compile_seconds, "key": self.key, "meta": self.meta,
            "sha256": {"kernel.ptx": hashlib.sha256(ptx).hexdigest(),
                       "kernel.cubin": hashlib.sha256(self.cubin).hexdigest()},
        }
        meta["meta_sha256"] = _meta_digest(json.loads(json.dumps(meta)))   # as load() will see it
        tmp = path / f".kernel.json.{os.getpid()}"
        (path / "kernel.ptx").write_bytes(ptx)
        (path / "kernel.cubin").write_bytes(self.cubin)
        tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
        os.replace(tmp, path / "kernel.json")   # the json is written last: it marks a complete entry
        return path

    @classmethod
    def load(cls, path) -> "CompiledKernel":
        """Read an artifact written by :meth:`save`.

        Raises ``CacheError`` when a file is missing, unparsable or fails its checksum.
        """
        path = Path(path)
        try:
            meta = json.loads((path / "kernel.json").read_text())
            ptx = (path / "kernel.ptx").read_bytes()
            cubin = (path / "kernel.cubin").read_bytes()
        except (OSError, ValueError) as e:
            raise CacheError(f"cannot read compiled kernel at {path}: {e}") from e
        try:
            if not isinstance(meta, dict):
                raise CacheError(f"{path}/kernel.json: expected an object, got {type(meta).__name__}")
            if meta.get("format") != FORMAT:
                raise CacheError(f"{path}: unknown artifact format {meta.get('format')!r}")
            if meta.pop("meta_sha256", None) != _meta_digest(meta):
                raise CacheError(f"{path}/kernel.json: checksum mismatch (corrupt or edited cache entry)")
            for name, data in (("kernel.ptx", ptx), ("kernel.cubin", cubin)):
                if hashlib.sha256(data).hexdigest() != meta["sha256"][name]:
                    raise CacheError(f"{path}/{name}: checksum mismatch (corrupt cache entry)")
            res = meta["resources"]
            return cls(
                entry=meta["entry"], ptx=ptx.decode(), cubin=cubin,
                params=[ParamSpec(n, k) for n, k in meta["params"]],
                block=meta["block"], cluster=meta["cluster"], dynamic_smem=meta["dynamic_smem"],
                tensor_maps=[TensorMapSpec(**t) for t in meta["tensor_maps"]],
                resources=KernelResources(**res) if res else None,
                compile_seconds=meta["compile_seconds"], key=meta["key"], meta=meta["meta"])
        except CacheError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise CacheError(f"{path}: malformed kernel.json ({type(e).__name__}: {e})") from e
