"""Synchronisation and register atoms for warp-specialized kernels.

* :func:`setmaxnreg` / :func:`warpgroup_reg_alloc` / :func:`warpgroup_reg_dealloc` — PTX
  ``setmaxnreg.{inc,dec}.sync.aligned.u32 N``: warpgroup register reconfiguration (CUTLASS
  ``cutlass::arch::warpgroup_reg_alloc/dealloc``). All four warps of a warpgroup execute it
  together; a producer warpgroup gives registers back (``dec`` to e.g. 40) so that consumer
  warpgroups can take them (``inc`` to e.g. 232). The kernel's launch budget
  (``.maxnreg`` / ptxas' per-thread count) is the starting point for every warp.
* :class:`NamedBarrier` — PTX ``barrier.sync id, count`` / ``barrier.arrive id, count``: one
  of the CTA's 16 hardware barriers shared by a subset of ``count`` threads (whole warps).
  Barrier 0 is the CTA-wide one ``gpu.barrier`` (``bar.sync 0``) uses; give sub-group barriers
  ids 1..15 (CUTLASS reserves low ids for itself the same way, ``NamedBarrier``).
* :func:`fence_proxy_async` — PTX ``fence.proxy.async.shared::cta``: orders this thread's
  generic-proxy shared-memory writes before later async-proxy accesses (TMA store reading
  the tile, WGMMA reading operands), and async-proxy writes before later generic reads.
* :func:`elect_one` — PTX ``elect.sync``: true in exactly one active lane of the warp.
* :func:`wait_flag` — spin on ``ld.acquire.gpu`` until a global flag holds a value (CUTLASS
  ``GenericBarrier::wait_eq``): how a CTA waits for another CTA's release through global memory.
"""
from __future__ import annotations

from ..arch import DEFAULT
from ..errors import ConfigError
from ..ir._lazy import lazy

ir = lazy("mlir.ir")
nvvm = lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")

#: PTX ISA: setmaxnreg takes a multiple of 8 in [24, 256]
MIN_REGS, MAX_REGS = 24, 256
#: hardware named barriers per CTA (ids 0..15)
NUM_BARRIERS = 16


def _check_regs(count: int) -> None:
    if not isinstance(count, int) or isinstance(count, bool):
        raise TypeError(f"setmaxnreg register count must be a Python int, got {type(count).__name__}")
    if count % 8 or not MIN_REGS <= count <= MAX_REGS:
        raise ValueError(f"setmaxnreg register count {count} must be a multiple of 8 in "
                         f"[{MIN_REGS}, {MAX_REGS}]")


def setmaxnreg(count: int, increase: bool) -> None:
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 count``: set the per-thread register budget of
    the executing warpgroup to ``count`` (Python int, multiple of 8 in 24..256). ``increase``
    selects ``.inc`` (blocks until enough registers are free in the SM's pool) or ``.dec``
    (releases registers). All threads of the warpgroup must execute it (``.sync.aligned``).

    Raises ``ValueError`` for a count outside the PTX range, ``TypeError`` for a non-int."""
    _check_regs(count)
    action = ir.Attribute.parse("#nvvm<action increase>" if increase else "#nvvm<action decrease>")
    nvvm.setmaxregister(count, action)


def warpgroup_reg_alloc(count: int) -> None:
    """Raise this warpgroup's register budget to ``count`` (``setmaxnreg.inc``); CUTLASS
    ``warpgroup_reg_alloc<count>``. Consumer (MMA) warpgroups call it first thing."""
    setmaxnreg(count, True)


def warpgroup_reg_dealloc(count: int) -> None:
    """Lower this warpgroup's register budget to ``count`` (``setmaxnreg.dec``); CUTLASS
    ``warpgroup_reg_dealloc<count>``. Producer (TMA) warpgroups call it first thing."""
    setmaxnreg(count, False)


class NamedBarrier:
    """One of the CTA's 16 named barriers, shared by ``threads`` threads (PTX ISA 9.7.13.1
    ``bar``/``barrier``: ``barrier.sync id, threads`` / ``barrier.arrive id, threads``, the
    ``.aligned`` forms ``bar.sync``/``bar.arrive``).

    ``barrier_id``: 0..15 (Python int, or an IR i32 chosen at run time, e.g. per warpgroup);
    ``threads``: participating threads, a multiple of the warp size (32) in 32..1024 (Python
    int): the ISA counts whole warps. A phase completes when ``threads`` threads arrived
    through :meth:`sync` or :meth:`arrive`; :meth:`sync` also waits for that completion,
    :meth:`arrive` does not (producer side of a producer/consumer hand-off, CUTLASS
    ``NamedBarrier::arrive``). Memory ordering: writes before ``arrive``/``sync`` are visible
    to the threads that return from ``sync``. Barrier 0 is the CTA-wide one ``gpu.barrier``
    uses; give sub-group barriers ids 1..15.

    Raises ``ConfigError`` (a ``ValueError``) naming the argument for an id outside 0..15 or
    a thread count that is not a multiple of 32 in 32..1024; :meth:`sync`/:meth:`arrive`
    raise it when ``threads`` exceeds the threads of the CTA being built (the barrier could
    never complete: a hang, refused at build time).
    """

    def __init__(self, barrier_id, threads: int):
        if isinstance(barrier_id, bool) or isinstance(barrier_id, int) and not 0 <= barrier_id < NUM_BARRIERS:
            raise ConfigError(f"NamedBarrier barrier_id: named barrier id {barrier_id!r} outside "
                              f"0..{NUM_BARRIERS - 1} (the CTA has {NUM_BARRIERS}; 0 is the CTA-wide "
                              f"gpu.barrier): pick 1..{NUM_BARRIERS - 1}")
        warp, most = DEFAULT.warp_threads, DEFAULT.max_threads_per_cta
        if not isinstance(threads, int) or isinstance(threads, bool) or threads % warp or not warp <= threads <= most:
            raise ConfigError(f"NamedBarrier threads: named barrier thread count {threads!r} must be a multiple "
                              f"of {warp} (the warp size; the barrier counts whole warps) in {warp}..{most}")
        self.barrier_id = barrier_id
        self.threads = threads

    def __repr__(self) -> str:
        return f"NamedBarrier({self.barrier_id!r}, {self.threads})"

    def _operands(self):
        from ..ir.kernel import current_cta_threads
        cta = current_cta_threads()
        if cta is not None and self.threads > cta:
            raise ConfigError(f"{self!r} waits for {self.threads} threads but the kernel's CTA has {cta}: it "
                              f"would never complete; use threads <= {cta}")
        return V.i32(self.barrier_id), V.i32(self.threads)

    def sync(self) -> None:
        """``barrier.sync id, threads`` (CUTLASS ``NamedBarrier::sync``): arrive and wait."""
        bid, n = self._operands()
        nvvm.barrier(None, barrier_id=bid, number_of_threads=n)

    def arrive(self) -> None:
        """``barrier.arrive id, threads`` (CUTLASS ``NamedBarrier::arrive``): arrive, no wait."""
        bid, n = self._operands()
        nvvm.barrier_arrive(n, barrier_id=bid)


def fence_proxy_async() -> None:
    """``fence.proxy.async.shared::cta``: order this thread's generic shared-memory accesses
    with respect to later async-proxy ones (TMA, WGMMA) and vice versa. A TMA store of data
    written by ``st.shared``/``stmatrix`` needs it in every writing thread, followed by a
    barrier over the writers, before the one thread issues the store."""
    nvvm.fence_proxy(ir.Attribute.parse("#nvvm.proxy_kind<async.shared>"),
                     space=ir.Attribute.parse("#nvvm.shared_space<cta>"))


def elect_one():
    """``elect.sync _|p, 0xffffffff``: an i1 that is true in exactly one active lane of the
    warp (the lowest); all lanes of the warp must execute it."""
    return V.Scalar(nvvm.elect_sync(ir.IntegerType.get_signless(1)), signed=False)


class ElectEach:
    """A predicate for atoms issued by one lane of a warp that runs the issuing code together:
    each instruction issued in a branch gets its own ``elect.sync`` (CUTLASS's
    ``elect_one_sync()`` around every TMA load, UMMA, copy and commit). ptxas recognises the
    pattern and issues the instruction once from uniform registers with no branch or
    reconvergence (BSSY/BSYNC) around it, which one elected predicate shared by several
    branches does not get. ``shared`` (IR i1 from :func:`elect_one`, or None): the predicate
    of instructions that take one as an operand (an expect-tx arrive): a predicated
    instruction needs no branch, and one ``elect.sync`` before the loop serves them all."""

    def __init__(self, shared=None):
        self.shared = shared

    def __repr__(self) -> str:
        return "ElectEach()" if self.shared is None else "ElectEach(shared)"


#: :class:`ElectEach` without a shared predicate
ELECT_EACH = ElectEach()


def elected(predicate):
    """The context an instruction issued under ``predicate`` is emitted in: None -- none (the
    caller is already the issuing thread); an :class:`ElectEach` -- ``If(elect.sync)``; an IR
    i1 -- ``If(predicate)``."""
    if predicate is None:
        from contextlib import nullcontext
        return nullcontext()
    from ..ir.control import If
    return If(elect_one() if isinstance(predicate, ElectEach) else predicate)


def operand_predicate(predicate):
    """``predicate`` as an instruction's predicate operand (IR i1 or None): an
    :class:`ElectEach`'s shared predicate; None where it has none (then see :func:`elected`)."""
    return predicate.shared if isinstance(predicate, ElectEach) else predicate


def wait_flag(ptr, idx, value) -> None:
    """Spin until element ``idx`` of ``ptr`` (a u32 ``GlobalPtr``) equals ``value`` (IR i32),
    each read an ``ld.acquire.gpu`` (``scf.while``): the writes the setting CTA made before its
    release are then visible to this thread. Only CTAs resident together may wait on each
    other this way (a persistent launch's)."""
    from ..ir.control import While
    While([], cond=lambda: ptr.load_acquire(idx).ne(value), body=lambda: ())


__all__ = ["wait_flag", "setmaxnreg", "warpgroup_reg_alloc", "warpgroup_reg_dealloc", "NamedBarrier",
           "fence_proxy_async", "elect_one", "ElectEach", "ELECT_EACH", "elected", "operand_predicate", "MIN_REGS", "MAX_REGS", "NUM_BARRIERS"]
