"""The warp-specialized kernel skeleton: thread roles, register budgets, plan then build, and one
``define()`` for every kernel family and architecture (CUTLASS 3.x's sm90 / sm100
warp-specialized kernels, FlashAttention-3's producer and consumer warpgroups).

A kernel built on it subclasses :class:`SkeletonKernel` and declares, with no IR (the *plan*):

* :meth:`~SkeletonKernel.roles` -- its :class:`Role` s in thread order: warps or warpgroups, each
  with a name, a count and an optional ``setmaxnreg`` register budget (read from the
  :class:`~cutedsl.arch.Arch`: ``producer_regs``, ``consumer_regs``); :meth:`~SkeletonKernel.layout`
  places them (a :class:`RoleLayout`: threads per CTA, each role's first warp) and checks them;
* :meth:`~SkeletonKernel.declare_smem` -- its shared-memory buffers and mbarriers for a stage
  count, so that :meth:`~SkeletonKernel.smem_plan` and :meth:`~SkeletonKernel.max_stages` are
  pure functions of them;
* :meth:`~SkeletonKernel.params`, :meth:`~SkeletonKernel.tensor_maps`, ``cluster_ctas``,
  ``launch_registers``.

and builds through hooks that :meth:`~SkeletonKernel.define` (written once, here) calls in order:

1. ``KernelBuilder(name, params(), threads, cluster, .maxnreg)``, the shared-memory plan bound;
2. :meth:`~SkeletonKernel.setup` -- barrier and collective initialisation by ``b.leader``,
   tensor-memory allocation, operand binding (TMA descriptors, prefetch);
3. :meth:`~SkeletonKernel.init_barrier` (the skeleton's) -- the mbarrier-init fence
   (``fence.mbarrier_init``) unless a collective emitted it, then a CTA barrier, or a cluster
   barrier when the kernel has a cluster (peers arrive on and multicast into this CTA's barriers);
   bracketed by ``tcgen05.fence::before/after_thread_sync`` when setup allocated tensor memory
   (the address travels through shared memory, PTX ISA "tcgen05 memory consistency");
4. :meth:`~SkeletonKernel.bind` -- problem / scheduler binding (after the barrier);
5. role dispatch, inside :meth:`~SkeletonKernel.roles_scope` (a context, none by default: a
   kernel whose work unit may be empty -- an attention query block past its sequence -- branches
   around every role there and computes what the roles share inside the branch): per role (in
   :attr:`~SkeletonKernel.dispatch_order`) a branch on the warp or warpgroup index that first
   sets the role's register budget (``setmaxnreg.dec`` below the launch budget, ``.inc`` above
   it; only where budgets differ) and then calls ``role_<name>(b, index)``; a role of ``count``
   warps or warpgroups runs one body, told its index among them (attention's two MMA
   warpgroups); a kernel with one role (the *single-role form*) runs its body unbranched on
   every thread;
6. :meth:`~SkeletonKernel.teardown` -- after every role: frees tensor memory when setup allocated it;

and returns ``(KernelBuilder, dynamic shared-memory bytes, tensor-map specs)``. Hooks share one
:class:`Build` (``b``): the kernel arguments, the bound shared memory, lazily emitted thread /
warp indices, and whatever setup stores on it for the roles (pipelines, operands).

A kernel family (GEMM, attention) is a subclass with its own problem, collectives and roles; it
never needs another family's fields. :mod:`cutedsl.kernel.scale_copy` is the smallest example.
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT
from ..errors import ConfigError
from .base import Kernel

#: how a role counts its threads: whole warps, whole warpgroups, or (single-role form only) threads
UNITS = ("warp", "warpgroup", "thread")
#: PTX ISA setmaxnreg: the register count is a multiple of 8 in 24..256
SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8


@attrs.frozen
class Role:
    """One thread role of a CTA: ``count`` warps or warpgroups (``unit``) that run the kernel's
    ``role_<name>`` body. ``regs``: the per-thread register budget the role sets with
    ``setmaxnreg`` (a multiple of 8 in 24..256; whole warpgroups only -- every warp of a
    warpgroup executes the same ``setmaxnreg``, PTX ISA ``setmaxnreg``), or None to keep the
    launch budget. Build with :meth:`warps` / :meth:`warpgroups` (or :meth:`threads` for a
    single-role kernel whose CTA is not a whole number of warps)."""
    name: str
    count: int = 1
    unit: str = "warpgroup"
    regs: int | None = None

    def __attrs_post_init__(self):
        if not self.name.isidentifier():
            raise ConfigError(f"role name must be a Python identifier (its body is role_<name>), got {self.name!r}")
        if self.unit not in UNITS:
            raise ConfigError(f"role {self.name!r}: unit must be one of {UNITS}, got {self.unit!r}")
        if not isinstance(self.count, int) or self.count < 1:
            raise ConfigError(f"role {self.name!r}: count must be a positive int, got {self.count!r}")
        r = self.regs
        if r is not None and (not isinstance(r, int) or r % SETMAXNREG_STEP
                              or not SETMAXNREG_MIN <= r <= SETMAXNREG_MAX):
            raise ConfigError(f"role {self.name!r}: regs {r!r} must be a multiple of {SETMAXNREG_STEP} in "
                              f"{SETMAXNREG_MIN}..{SETMAXNREG_MAX} (setmaxnreg), or None")
        if r is not None and self.unit != "warpgroup":
            raise ConfigError(f"role {self.name!r}: a register budget needs whole warpgroups (setmaxnreg is "
                              f"executed by all four warps of a warpgroup); declare it with Role.warpgroups")

    @classmethod
    def warps(cls, name: str, count: int = 1, regs=None) -> "Role":
        return cls(name, count, "warp", regs)

    @classmethod
    def warpgroups(cls, name: str, count: int = 1, regs=None) -> "Role":
        return cls(name, count, "warpgroup", regs)

    @classmethod
    def threads(cls, name: str, count: int) -> "Role":
        return cls(name, count, "thread")

    def thread_count(self, arch) -> int:
        per = {"warp": arch.warp_threads, "warpgroup": arch.warpgroup_threads, "thread": 1}[self.unit]
        return self.count * per


@attrs.frozen
class Placed:
    """A role placed in the CTA: its warps are ``first_warp .. first_warp + warps - 1``."""
    role: Role
    first_warp: int
    warps: int


class RoleLayout:
    """Where each role's threads lie (declaration order = thread order), the CTA's threads, and
    each role's ``setmaxnreg``. Pure (no IR). Raises ``ConfigError`` for duplicate names, more
    threads than a CTA may have, a budgeted role not on a warpgroup boundary, budgets without a
    launch budget, or budgets that need more registers than the SM has."""

    def __init__(self, roles, arch, launch_registers=None):
        roles = tuple(roles)
        if not roles:
            raise ConfigError("a kernel needs at least one role")
        names = [r.name for r in roles]
        if len(set(names)) != len(names):
            raise ConfigError(f"role names must differ, got {names}")
        if len(roles) > 1 and any(r.unit == "thread" for r in roles):
            raise ConfigError("roles counted in threads are for single-role kernels; use Role.warps / Role.warpgroups")
        self.roles, self.arch, self.launch_registers = roles, arch, launch_registers
        self.threads = sum(r.thread_count(arch) for r in roles)
        if self.threads > arch.max_threads_per_cta:
            raise ConfigError(f"roles {names} need {self.threads} threads, past the {arch.max_threads_per_cta} a CTA "
                              f"may have on {arch.name}")
        placed, warp = [], 0
        for r in roles:
            n = r.thread_count(arch) // arch.warp_threads
            if r.regs is not None and warp % arch.warps_per_warpgroup:
                raise ConfigError(f"role {r.name!r} sets registers but starts at warp {warp}, not on a warpgroup "
                                  f"boundary: put warpgroup roles with budgets first")
            placed.append(Placed(r, warp, n))
            warp += n
        self.placed = tuple(placed)
        #: the dispatch unit: warpgroups when every role is warpgroups, else warps
        self.unit = "warpgroup" if all(r.unit == "warpgroup" for r in roles) else "warp"
        budgets = {r.regs for r in roles}
        self.budgeted = len(budgets) > 1 or (budgets != {None} and budgets != {launch_registers})
        if self.budgeted:
            if launch_registers is None:
                raise ConfigError(f"roles set register budgets {sorted(b for b in budgets if b)} but the kernel has "
                                  f"no launch budget (launch_registers): setmaxnreg needs a .maxnreg start")
            need = sum(r.thread_count(arch) * (r.regs or launch_registers) for r in roles)
            if need > arch.regs_per_sm:
                raise ConfigError(f"role register budgets need {need} registers, past the {arch.regs_per_sm} of an "
                                  f"{arch.name} SM: lower a role's regs")

    def span(self, name: str) -> tuple:
        """``(first, count)`` of role ``name`` in dispatch units (warps or warpgroups)."""
        p = next(p for p in self.placed if p.role.name == name)
        if self.unit == "warpgroup":
            w = self.arch.warps_per_warpgroup
            return p.first_warp // w, p.warps // w
        return p.first_warp, p.warps

    def setmaxnreg(self, name: str):
        """``(count, increase)`` the role emits first, or None (no budget, or the launch one)."""
        r = next(r for r in self.roles if r.name == name)
        if not self.budgeted or r.regs is None or r.regs == self.launch_registers:
            return None
        return r.regs, r.regs > self.launch_registers


class Build:
    """What :meth:`SkeletonKernel.define` hands every hook: ``args`` (the kernel arguments by
    name), ``smem`` (the bound shared-memory plan), ``tid`` / ``leader`` (thread 0) / ``warp``
    (warp-uniform warp index, ``shfl.sync``) emitted on first use, and the flags a collective's
    initialisation sets: ``init_fenced`` (it emitted ``fence.mbarrier_init``, e.g.
    ``TmaPipeline.init``), ``init_synced`` (it also synchronised the CTA, e.g.
    ``MultistageMainloop.setup``), ``tmem`` (the :class:`~cutedsl.atom.tcgen05.TensorMemory` setup
    allocated, with ``tmem_owner``: the i1 of its warp). Hooks store their own values on it (``b.pipeline = ...``)."""

    def __init__(self, kernel, args, smem):
        self.kernel, self.args, self.smem = kernel, args, smem
        self.init_fenced = self.init_synced = False
        self.tmem = self.tmem_owner = None
        self._tid = self._leader = self._warp = None

    @property
    def tid(self):
        if self._tid is None:
            from ..ir import thread_idx
            self._tid = thread_idx()
        return self._tid

    @property
    def leader(self):
        if self._leader is None:
            self._leader = self.tid.eq(0)
        return self._leader

    @property
    def warp(self):
        if self._warp is None:
            from ..ir.values import warp_uniform
            self._warp = warp_uniform(self.tid // self.kernel.arch.warp_threads)
        return self._warp


class SkeletonKernel(Kernel):
    """Base of warp-specialized (and single-role) kernels; see the module docstring. Subclasses
    set ``arch`` (an :class:`~cutedsl.arch.Arch`) and ``name``, and implement :meth:`roles`,
    :meth:`declare_smem`, :meth:`params`, :meth:`tensor_maps`, the IR hooks and one
    ``role_<name>(b, index)`` per role: ``index`` is the IR index (i32) of the executing warp or
    warpgroup inside its role (the dispatch value itself when the role starts at 0), or None in
    the single-role form."""

    arch = DEFAULT
    #: role names in the order their branches are emitted (None: thread order)
    dispatch_order = None

    # -- plan (pure) ---------------------------------------------------------------------
    def roles(self) -> tuple:
        """The CTA's roles in thread order. Default: one warpgroup ``main`` (single-role form)."""
        return (Role.warpgroups("main"),)

    @property
    def cluster_ctas(self) -> int:
        """CTAs per cluster (1: no cluster; launched as ``(cluster_ctas, 1, 1)``)."""
        return 1

    @property
    def launch_registers(self):
        """``.maxnreg`` per thread at launch (None: ptxas chooses); where roles set budgets,
        ``setmaxnreg`` moves registers between roles from this starting point."""
        return None

    def layout(self) -> RoleLayout:
        return RoleLayout(self.roles(), self.arch, self.launch_registers)

    @property
    def threads(self) -> int:
        """Threads per CTA: the roles' sum."""
        return self.layout().threads

    def declare_smem(self, plan, stages=None) -> None:
        """Declare the kernel's shared-memory buffers and mbarrier groups in ``plan`` (an
        :class:`~cutedsl.ir.SmemPlan`) for ``stages`` ring stages (None: the kernel's own).
        Declarations only; none by default."""

    def smem_plan(self, stages=None):
        """The shared-memory plan (:meth:`declare_smem` into a plan limited to
        ``arch.smem_per_cta``). Pure; ``SharedMemoryError`` when it cannot fit."""
        from ..ir.smem import SmemPlan
        plan = SmemPlan(limit=self.arch.smem_per_cta)
        self.declare_smem(plan, stages)
        return plan

    def max_stages(self, candidates):
        """The most stages among ``candidates`` (ints) whose :meth:`smem_plan` fits, or None
        (CUTLASS's ``StageCountAutoCarveout``: the ring takes what the other buffers leave)."""
        from ..errors import SharedMemoryError
        for s in sorted(candidates, reverse=True):
            try:
                self.smem_plan(s)
                return s
            except SharedMemoryError:
                continue
        return None

    def params(self) -> list:
        """The kernel's parameters (``ParamSpec`` list, PTX order)."""
        raise NotImplementedError

    def tensor_maps(self) -> list:
        """The ``TensorMapSpec`` of every tensor-map parameter (none by default)."""
        return []

    # -- build (IR hooks) ------------------------------------------------------------------
    def setup(self, b: Build) -> None:
        """IR before the init barrier: initialise barriers and collectives (``b.leader``),
        allocate tensor memory (:meth:`alloc_tensor_memory`), bind operands."""

    def init_barrier(self, b: Build) -> None:
        """The barrier that makes setup's initialisation visible (see the module docstring)."""
        if b.init_synced:
            return
        from ..atom import MBarriers
        if not b.init_fenced:
            MBarriers.fence_init()
        if b.tmem is not None:
            from ..atom.tcgen05 import TensorMemory
            TensorMemory.fence_before()
        self._cta_or_cluster_barrier(self.cluster_ctas > 1)
        if b.tmem is not None:
            TensorMemory.fence_after()

    def bind(self, b: Build) -> None:
        """IR after the init barrier, before the roles: problem and scheduler binding."""

    def roles_scope(self, b: Build):
        """Hook: the context manager the role dispatch runs in, after :meth:`bind` (default: none).
        A kernel whose unit of work may hold nothing to do opens a branch on it here, so that no
        role starts (FlashAttention-3's forward: a query block past its sequence), and computes
        inside it, before yielding, the values every role reads (stored on ``b``)."""
        import contextlib
        return contextlib.nullcontext()

    def role_predicate(self, b: Build, role: Role, predicate):
        """Hook: the i1 guarding ``role``'s branch (default: its warps / warpgroups)."""
        return predicate

    def teardown(self, b: Build) -> None:
        """IR after every role: tensor memory is freed by the warp that allocated it once every
        warp is done with it (a cluster barrier for a CTA pair's ``cta_group::2`` columns, which
        the peer's MMAs write)."""
        if b.tmem is None:
            return
        from ..atom.tcgen05 import TensorMemory
        from ..ir import If
        TensorMemory.fence_before()
        self._cta_or_cluster_barrier(b.tmem.cta_group == 2)
        with If(b.tmem_owner):
            TensorMemory.fence_after()
            b.tmem.dealloc(b.tmem.address())

    def alloc_tensor_memory(self, b: Build, columns: int, warp: int = 0, cta_group: int = 1, owner=None):
        """IR (in :meth:`setup`): warp ``warp`` allocates ``columns`` TMEM columns (and
        relinquishes the permit); the address lives in a static shared word. ``owner``: the i1
        "this is warp ``warp``" if the kernel already has it. Returns the
        :class:`~cutedsl.atom.tcgen05.TensorMemory`; :meth:`init_barrier` and :meth:`teardown`
        then fence and free it."""
        from ..atom.tcgen05 import TensorMemory
        from ..ir import If
        from ..ir.smem_tile import static_word
        tmem = TensorMemory(static_word("tmem_address"), columns, cta_group=cta_group)
        owner = b.warp.eq(warp) if owner is None else owner
        with If(owner):
            tmem.alloc()
            tmem.relinquish()                   # this CTA allocates nothing more
        b.tmem, b.tmem_owner = tmem, owner
        return tmem

    @staticmethod
    def _cta_or_cluster_barrier(cluster: bool) -> None:
        if cluster:
            from ..atom.cluster import cluster_sync
            cluster_sync()
        else:
            from mlir.dialects import gpu
            gpu.barrier()

    def dispatch(self, b: Build, layout: RoleLayout) -> None:
        """Emit each role's branch (see the module docstring)."""
        from ..atom import setmaxnreg
        from ..ir import If
        if len(layout.roles) == 1:
            getattr(self, "role_" + layout.roles[0].name)(b, None)
            return
        unit = b.tid // self.arch.warpgroup_threads if layout.unit == "warpgroup" else b.warp
        units = sum(layout.span(r.name)[1] for r in layout.roles)
        by_name = {r.name: r for r in layout.roles}
        for name in self.dispatch_order or [r.name for r in layout.roles]:
            role = by_name[name]
            first, n = layout.span(name)
            if first == 0:
                pred = unit < n
            elif n == 1:
                pred = unit.eq(first)
            elif first + n == units:
                pred = unit >= first
            else:
                pred = (unit >= first) & (unit < first + n)
            with If(self.role_predicate(b, role, pred)):
                regs = layout.setmaxnreg(name)
                if regs is not None:
                    setmaxnreg(*regs)
                index = unit if first == 0 else unit - first
                if role.unit == "warpgroup" and layout.unit == "warp":
                    index = index // self.arch.warps_per_warpgroup
                getattr(self, "role_" + name)(b, index)

    def define(self):
        """Build the module (the order is the module docstring's). Returns ``(KernelBuilder,
        dynamic_smem_bytes, tensor_map_specs)``."""
        from ..ir import KernelBuilder
        layout = self.layout()
        plan = self.smem_plan()
        cs = self.cluster_ctas
        kb = KernelBuilder(self.name, self.params(), block=(layout.threads, 1, 1), arch=self.arch,
                           cluster=(cs, 1, 1) if cs > 1 else None, max_registers=self.launch_registers)
        with kb.build() as args:
            b = Build(self, args, plan.bind())
            self.setup(b)
            self.init_barrier(b)
            self.bind(b)
            with self.roles_scope(b):
                self.dispatch(b, layout)
            self.teardown(b)
        return kb, plan.dynamic_bytes, self.tensor_maps()


__all__ = ["Role", "RoleLayout", "Placed", "Build", "SkeletonKernel", "UNITS"]
