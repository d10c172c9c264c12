"""Cluster launch control atom (sm_100; PTX ISA ``clusterlaunchcontrol.try_cancel`` /
``clusterlaunchcontrol.query_cancel``).

:func:`try_cancel` asks the hardware to cancel the launch of a cluster that has not started
yet; its 16-byte response is written asynchronously to shared memory and completes 16
transaction bytes on an mbarrier (``.multicast::cluster::all``: into the same offsets of every
CTA of the requesting cluster). :func:`query_cancel` reads a response after that barrier's wait:
whether the request succeeded, and the first CTA id (x) of the cancelled cluster.
"""
from __future__ import annotations

from ..ir._lazy import lazy
from .cluster import shared_pointer

ir, llvm, nvvm = lazy("mlir.ir"), lazy("mlir.dialects.llvm"), lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")

RESPONSE_BYTES = 16         #: a try_cancel response: a 16-byte aligned .b128 in shared memory


def try_cancel(response, mbarrier, multicast: bool = False) -> None:
    """``clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes
    [.multicast::cluster::all].b128 [response], [mbarrier]``, by the executing thread(s):
    ``response`` and ``mbarrier`` are 32-bit shared addresses (IR i32; the barrier armed with
    :data:`RESPONSE_BYTES` transaction bytes)."""
    nvvm.clusterlaunchcontrol_try_cancel(shared_pointer(response), shared_pointer(mbarrier),
                                         multicast=ir.UnitAttr.get() if multicast else None)


def query_cancel(response) -> tuple:
    """IR ``(canceled i1, first ctaid.x u32)`` of the response at shared address ``response``
    (IR i32; read after the wait that its completion ends): ``ld.shared`` of the 16 bytes, then
    ``query_cancel.is_canceled`` and ``.get_first_ctaid::x`` (undefined when not canceled)."""
    resp = llvm.load(ir.IntegerType.get_signless(RESPONSE_BYTES * 8), shared_pointer(response))
    t = nvvm.ClusterLaunchControlQueryType
    ok = nvvm.clusterlaunchcontrol_query_cancel(ir.IntegerType.get_signless(1), t.IS_CANCELED, resp)
    x = nvvm.clusterlaunchcontrol_query_cancel(ir.IntegerType.get_signless(32), t.GET_FIRST_CTA_ID_X, resp)
    return V.Scalar(ok), V.Scalar(x, signed=False)


__all__ = ["try_cancel", "query_cancel", "RESPONSE_BYTES"]
