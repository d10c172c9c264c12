"""mbarrier group atom (PTX ISA "Parallel synchronization: mbarrier").

An mbarrier is an 8-byte shared-memory object with a phase, a pending-arrival count and a
transaction-byte count. A phase completes when all expected arrivals happened and the
transaction count is back to zero; ``try_wait(i, parity)`` returns once the phase with that
parity completed (after ``init``, parity 0 waits for the first completion and parity 1
passes at once).
"""
from __future__ import annotations

from ..ir._lazy import lazy

ir = lazy("mlir.ir")
nvgpu, nvvm = lazy("mlir.dialects.nvgpu"), lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")


class MBarriers:
    """A group of ``count`` mbarriers (``!nvgpu.mbarrier.group``; from ``BoundSmem.barriers``).

    Barrier indices may be Python ints or IR integers; arrival counts are threads; ``tx`` in
    bytes (the TMA transaction count).
    """

    def __init__(self, group, count: int):
        self.group = group
        self.count = count

    def _idx(self, i):
        if isinstance(i, int) and not 0 <= i < self.count:
            raise IndexError(f"mbarrier index {i} out of range 0..{self.count - 1}")
        return V.index(i)

    def init(self, i, arrivals: int, predicate=None) -> None:
        """``mbarrier.init``: expect ``arrivals`` arrivals per phase (1..2^20-1)."""
        if not 1 <= arrivals < 2 ** 20:
            raise ValueError(f"mbarrier arrival count {arrivals} outside 1..2^20-1")
        nvgpu.mbarrier_init(self.group, V.index(arrivals), self._idx(i), predicate=predicate)

    def init_all(self, arrivals: int, predicate=None) -> None:
        for i in range(self.count):
            self.init(i, arrivals, predicate)

    @staticmethod
    def fence_init() -> None:
        """``fence.mbarrier_init.release.cluster``: make inits visible to the async proxy (TMA)
        and to other CTAs of the cluster. Follow it by a CTA barrier."""
        nvvm.fence_mbarrier_init()

    def arrive(self, i):
        """``mbarrier.arrive`` by each executing thread; returns the state token (i64)."""
        return nvgpu.mbarrier_arrive(self.group, self._idx(i))

    def address(self, i):
        """The 32-bit shared-window address of barrier ``i`` (unsigned i32)."""
        return V.Scalar(nvgpu.mbarrier_get(ir.IntegerType.get_signless(32), self.group, self._idx(i)),
                        signed=False)

    def arrive_cluster(self, i, cta_rank, predicate=None, scope: str = "cluster") -> None:
        """Arrive on barrier ``i`` of the CTA of cluster rank ``cta_rank`` (int or IR i32; may
        be this CTA): ``mapa.shared::cluster`` + ``mbarrier.arrive.release.cluster.
        shared::cluster.b64`` (CUTLASS ``ClusterBarrier::arrive(cta_id, pred)``). Release at
        cluster scope: this thread's prior accesses are ordered before the peer's wait returns.
        One arrival per executing thread.

        ``predicate`` (IR i1, per thread): arrive only where it holds, as a predicated
        instruction (``@p``; the ``mapa`` too, so the ranks of threads that do not arrive are
        never used) rather than a branch — e.g. lane ``r`` of a consumer warp signals CTA ``r``
        of the cluster — so a consumer loop stays free of divergent branches (which would cost
        ptxas' uniform datapath).

        ``scope="cta"``: ``mbarrier.arrive.shared::cluster.b64`` (the ISA's default
        ``.release.cta``), the form CUTLASS's and CuTe DSL's Hopper pipelines release operand
        stages with. For that use only: the accesses the arrival must order are the
        consumer's ``wgmma`` reads of its own CTA's shared memory, which ``wgmma.wait_group``
        completed before it (PTX ISA "wgmma.wait_group"), and a completed read cannot observe
        the peer's later TMA write; nothing is published to the peer. ptxas emits two
        ``MEMBAR`` + ``ERRBAR`` + ``CGAERRBAR`` per ``.release.cluster`` arrival: in a GEMM
        main loop that cost 30-70 % of an H200's throughput (docs/performance.md). Writes a
        peer reads after its wait need ``scope="cluster"`` (PTX ISA memory consistency model:
        a release synchronizes only with acquires inside its scope)."""
        from .cluster import mapa
        if scope not in ("cta", "cluster"):
            raise ValueError(f"scope must be 'cta' or 'cluster', got {scope!r}")
        if predicate is None:
            remote = mapa(self.address(i), cta_rank)
            nvvm.mbarrier_arrive(None, remote, scope=ir.Attribute.parse(f"#nvvm.mem_scope<{scope}>"))
            return
        from mlir.dialects import llvm
        p = V.Scalar(predicate).to("i32", signed=False)
        llvm.inline_asm(None, [self.address(i), V.i32(cta_rank), p],
                        "{\n\t.reg .pred p;\n\t.reg .b32 remote;\n\tsetp.ne.b32 p, $2, 0;\n\t"
                        "@p mapa.shared::cluster.u32 remote, $0, $1;\n\t"
                        f"@p mbarrier.arrive{'.release.cluster' if scope == 'cluster' else ''}"
                        ".shared::cluster.b64 _, [remote];\n\t}",
                        "r,r,r", has_side_effects=True)

    def arrive_expect_tx(self, i, tx_bytes, predicate=None) -> None:
        """``mbarrier.arrive.expect_tx``: add ``tx_bytes`` expected transaction bytes and arrive,
        where ``predicate`` (IR i1, or a :class:`~cutedsl.atom.sync.ElectEach`) holds."""
        tx = V.index(tx_bytes)
        from .sync import ElectEach, elected, operand_predicate
        if isinstance(predicate, ElectEach) and predicate.shared is None:
            with elected(predicate):
                nvgpu.mbarrier_arrive_expect_tx(self.group, tx, self._idx(i))
            return
        nvgpu.mbarrier_arrive_expect_tx(self.group, tx, self._idx(i), predicate=operand_predicate(predicate))

    def wait(self, i, parity, ticks: int = 10_000_000) -> None:
        """Block until the phase of parity ``parity`` (0/1; int or IR i1/i32) of barrier ``i``
        completed (``mbarrier.try_wait.parity`` in a loop; ``ticks`` is a suspend-time hint)."""
        if isinstance(parity, int):
            p = V.const(parity & 1, "i1")
        elif str(parity.type) == "i1":
            p = parity
        else:
            p = V.Scalar(parity).to("i1")
        nvgpu.mbarrier_try_wait_parity(self.group, p, V.index(ticks), self._idx(i))


#: clears the lowest rank bit of a shared address (bit 24): the even CTA of a CTA pair
PEER_BIT_MASK = 0xFEFFFFFF


class PairLeaderBarriers(MBarriers):
    """The same barriers, as the CTA pair's even CTA has them: :meth:`address` is that CTA's
    (``address & 0xFEFFFFFF``: shared addresses carry the cluster rank at bit 24; CUTLASS's
    ``Sm100MmaPeerBitMask``). TMA loads given these (``TmaCopy.load``) are issued with
    ``.cta_group::2`` and complete on the even CTA's barrier -- how both CTAs of a 2-SM MMA feed
    one pipeline. Waits and inits act on the executing CTA's own barriers."""

    cta_group = 2

    def address(self, i):
        return super().address(i) & PEER_BIT_MASK


class PairLeaderArrivals(MBarriers):
    """Barriers the threads of both CTAs of a pair arrive on in the pair's even CTA (a 2-SM MMA's
    issuer waits there for the softmax and correction threads of both CTAs; the same idea as the
    GEMM's accumulator releases): :meth:`arrive` is ``mapa`` + ``mbarrier.arrive.release.cluster``
    on the even CTA's barrier (:meth:`MBarriers.arrive_cluster`, the even CTA's own threads
    included); waits, inits and :meth:`address` act on the executing CTA's own barriers."""

    def arrive(self, i):
        from .cluster import cta_rank
        self.arrive_cluster(i, cta_rank() & ~1)
