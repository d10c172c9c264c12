"""Thread-block-cluster atoms (PTX ISA "Cluster of Cooperative Thread Arrays", sm_90).

A cluster is up to 16 (portable: 8) CTAs launched together on one GPC; each CTA can address
the shared memory of the others (distributed shared memory, state space ``shared::cluster``)
and they synchronise through the cluster barrier.

* identity: :func:`cta_rank` (``%cluster_ctarank``, 0..size-1, x fastest), :func:`cta_id`
  (``%cluster_ctaid``, position in the cluster), :func:`cluster_id` (``%clusterid``, the
  cluster's position in the grid), :func:`cluster_shape` (``%cluster_nctaid``),
  :func:`cluster_size` (``%cluster_nctarank``);
* :func:`mapa` — ``mapa.shared::cluster``: the ``shared::cluster`` address of the same
  shared-memory offset in CTA ``rank`` (``!llvm.ptr<7>``; ``ld/st/mbarrier`` through it
  reach the peer);
* :func:`cluster_arrive` / :func:`cluster_wait` / :func:`cluster_sync` —
  ``barrier.cluster.arrive[.relaxed][.aligned]`` / ``barrier.cluster.wait[.aligned]``:
  every thread of every CTA of the cluster arrives; ``wait`` returns once all did. The
  default arrive has release and wait acquire semantics at cluster scope; ``relaxed``
  drops the release (CUTLASS uses it where only execution order matters);
* :func:`multicast_mask` — the 16-bit CTA mask of a TMA multicast to the CTAs of the
  cluster on one line through this CTA (see :meth:`cutedsl.atom.tma.TmaCopy.load`).

Remote mbarrier arrival is :meth:`cutedsl.atom.mbarrier.MBarriers.arrive_cluster`.
A kernel that uses these must be launched with a cluster (``KernelBuilder(cluster=...)``
sets ``.reqnctapercluster``).
"""
from __future__ import annotations

from ..ir._lazy import lazy

ir = lazy("mlir.ir")
nvvm = lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")

#: CTAs per cluster the hardware allows (8 portable, 16 with the non-portable opt-in)
MAX_CLUSTER_SIZE = 16
_DIMS = ("x", "y", "z")


def _sreg(name: str, dim: str | None = None):
    if dim is not None and dim not in _DIMS:
        raise ValueError(f"cluster dimension must be one of {_DIMS}, got {dim!r}")
    fn = getattr(nvvm, f"read_ptx_sreg_{name}" + (f"_{dim}" if dim else ""))
    return V.Scalar(fn(ir.IntegerType.get_signless(32)), signed=False)


def cta_rank():
    """``%cluster_ctarank``: this CTA's rank in its cluster (unsigned i32, 0..size-1; rank =
    x + y * shape.x + z * shape.x * shape.y)."""
    return _sreg("cluster_ctarank")


def cta_id(dim: str = "x"):
    """``%cluster_ctaid.<dim>``: this CTA's coordinate inside its cluster (unsigned i32)."""
    return _sreg("cluster_ctaid", dim)


def cluster_id(dim: str = "x"):
    """``%clusterid.<dim>``: the cluster's coordinate in the grid of clusters (unsigned i32)."""
    return _sreg("clusterid", dim)


def cluster_shape(dim: str = "x"):
    """``%cluster_nctaid.<dim>``: CTAs per cluster along ``dim`` (unsigned i32)."""
    return _sreg("cluster_nctaid", dim)


def cluster_size():
    """``%cluster_nctarank``: CTAs in the cluster (unsigned i32)."""
    return _sreg("cluster_nctarank")


def shared_pointer(address):
    """An ``!llvm.ptr<3>`` (``shared::cta``) from a 32-bit shared-window address (IR i32)."""
    from mlir.dialects import llvm
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), V.i32(address))


def mapa(pointer, rank):
    """``mapa.shared::cluster``: the ``shared::cluster`` address (``!llvm.ptr<7>``) of the
    shared-memory location ``pointer`` (``!llvm.ptr<3>``, or an i32 shared address) in the
    CTA of cluster rank ``rank`` (Python int or IR i32; it must name a CTA of the cluster —
    the hardware does not check)."""
    if isinstance(pointer, ir.Value) and not str(pointer.type).startswith("!llvm.ptr"):
        pointer = shared_pointer(pointer)
    if isinstance(rank, int) and not 0 <= rank < MAX_CLUSTER_SIZE:
        raise ValueError(f"cluster CTA rank {rank} outside 0..{MAX_CLUSTER_SIZE - 1}")
    return nvvm.mapa(ir.Type.parse("!llvm.ptr<7>"), pointer, V.i32(rank))


def cluster_arrive(relaxed: bool = False, aligned: bool = True) -> None:
    """``barrier.cluster.arrive[.relaxed][.aligned]``. ``aligned``: every thread of the warp
    executes it together (required by ``.aligned``); ``relaxed``: no release ordering."""
    unit = ir.UnitAttr.get() if aligned else None
    if relaxed:
        nvvm.cluster_arrive_relaxed(aligned=unit)
    else:
        nvvm.cluster_arrive(aligned=unit)


def cluster_wait(aligned: bool = True) -> None:
    """``barrier.cluster.wait[.aligned]``: wait until all threads of the cluster arrived
    (acquire at cluster scope)."""
    nvvm.cluster_wait(aligned=ir.UnitAttr.get() if aligned else None)


def cluster_sync() -> None:
    """``barrier.cluster.arrive.aligned`` + ``barrier.cluster.wait.aligned`` (CUTLASS
    ``cluster_sync``): e.g. after mbarrier initialisation, before any CTA signals a peer's
    barrier, and before exit so no CTA leaves while peers may still access its memory."""
    cluster_arrive()
    cluster_wait()


def multicast_mask(shape: tuple, along: str, position=None):
    """The ``ctaMask`` (i16) of the CTAs on the line of the cluster through this CTA along
    ``along`` ("x" or "y"): with cluster ``shape = (cx, cy)`` and this CTA at ``(x, y)``,
    along "x" the ranks ``y*cx + 0..cx-1``, along "y" the ranks ``x + cx*0..cy-1``.

    E.g. a GEMM whose grid x walks N: the CTAs along x of a cluster share A's rows (A is
    multicast along x), those along y share B's columns. ``position``: ``(x, y)`` IR i32
    (default ``%cluster_ctaid``). Raises ``ValueError`` for a shape with more than 16 CTAs
    or a bad axis."""
    cx, cy = shape
    if cx < 1 or cy < 1 or cx * cy > MAX_CLUSTER_SIZE:
        raise ValueError(f"cluster shape {shape} must have 1..{MAX_CLUSTER_SIZE} CTAs")
    if along not in ("x", "y"):
        raise ValueError(f"multicast axis must be 'x' or 'y', got {along!r}")
    x, y = position if position is not None else (cta_id("x"), cta_id("y"))
    if along == "x":
        line, shift = (1 << cx) - 1, V.u32(y) * cx
    else:
        line, shift = sum(1 << (cx * j) for j in range(cy)), V.u32(x)
    return (V.u32(line) << shift).to("i16")


__all__ = ["cta_rank", "cta_id", "cluster_id", "cluster_shape", "cluster_size", "shared_pointer", "mapa",
           "cluster_arrive", "cluster_wait", "cluster_sync", "multicast_mask", "MAX_CLUSTER_SIZE"]
