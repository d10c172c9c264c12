"""Work units: what a scheduler hands out, for any problem (CUTLASS ``TileScheduler`` /
``WorkTileInfo``; FlashAttention's tile schedulers with their ``initial`` / ``advance`` work).

**The protocol.** A problem's *unit space* numbers its units of work ``0 .. count - 1`` and maps
a linear unit index to the unit's coordinates, which belong to the problem: a GEMM's output tile
``(m0, n0, l)`` and k-tile range (:class:`~cutedsl.collective.tile_scheduler.WorkTile`), an
attention unit's ``(q block, head, batch, split)`` (:class:`AttentionUnit`). A unit record is any
record with a ``valid`` field (False: nothing to do). A :class:`UnitSpace` has

* host: :meth:`~UnitSpace.host_count` ``(problem)`` -- the units of a problem of Python ints;
* IR: :meth:`~UnitSpace.bind` ``(problem)`` once per kernel (the problem's fields as IR i32), then
  :attr:`~UnitSpace.count` (IR) and :meth:`~UnitSpace.unit` ``(index)`` -> the record.

A *scheduler* decides which linear units a CTA runs and in which order, the same way for every
problem:

* host: ``grid(problem)`` -- the CTAs to launch;
* IR: ``bind(problem)`` once, then every role walks the same units with ``work_loop(carry,
  body, issuer)`` (``body(i, carried) -> carried``) and asks ``work_unit(i)`` for unit ``i``'s
  record (a scheduler that fetches units at run time -- cluster launch control -- hands the body
  the unit itself; ``issuer`` is the role that fetches them, the producer, which runs ahead);
  ``work_count()`` is the loop's trip count where it is known up front.

:class:`UnitScheduler` runs one unit per CTA; :class:`PersistentScheduler` runs a persistent
grid (``min(units, SMs x CTAs per SM / cluster size)`` clusters, cluster ``c`` walking units
``c, c + clusters, ...``). The GEMM schedulers (``tile_scheduler``, ``stream_k``, ``grouped``,
``clc_scheduler``) are their GEMM instances: the rasterization of output tiles (swizzled strips
of a 2-D grid, clusters of tiles, the batch) is the GEMM's unit space, folded into
``PersistentTileScheduler``; stream-K's K ranges and the grouped GEMM's group table are GEMM
notions on top.
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT_SM_COUNT
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")


class UnitSpace:
    """The units of one problem (see the module docstring); subclasses give :meth:`host_count`,
    :meth:`bind` (sets :attr:`count`) and :meth:`unit`."""

    count = None        #: IR i32 after :meth:`bind`: the problem's units

    def host_count(self, problem) -> int:
        raise NotImplementedError

    def bind(self, problem) -> None:
        raise NotImplementedError

    def unit(self, index, valid=True):
        raise NotImplementedError

    def config(self) -> dict:
        """What the generated code depends on."""
        return {}


@attrs.frozen
class AttentionUnit:
    """One unit of an attention problem (FlashAttention's work tile): query block ``q_block``
    (rows ``q_block * block_m ..``), query head ``head``, sequence ``batch``, and ``split`` (a
    slice of the keys, for split-KV decoding; 0 otherwise); ``valid``. IR i32 values or ints."""
    q_block: object
    head: object
    batch: object
    split: object = 0
    valid: object = True


class AttentionUnits(UnitSpace):
    """The units of an :class:`~cutedsl.problem.AttentionProblem`: one per (query block of
    ``block_m`` rows, head, sequence, split), ``ceil(seqlen_q / block_m) x heads x batch x
    splits`` in all. Linear order: split fastest, then head, then sequence, then query block, so
    consecutive units share a query block index (similar work) and spread over heads.
    ``longest_first`` (for a causal mask, FlashAttention's LPT order): query blocks from the
    last -- which sees the most keys -- to the first, so the longest units start first and the
    short ones fill the tail of a persistent grid. The *grid form* (:meth:`grid`, :meth:`grid_unit`)
    launches the unit space itself, one CTA per unit. Raises ``ValueError`` for a bad block or
    split count."""

    def __init__(self, block_m: int, longest_first: bool = False, splits: int = 1):
        if not isinstance(block_m, int) or block_m < 1:
            raise ValueError(f"block_m must be a positive int, got {block_m!r}")
        if not isinstance(splits, int) or splits < 1:
            raise ValueError(f"splits must be a positive int, got {splits!r}")
        self.block_m, self.longest_first, self.splits = block_m, longest_first, splits

    def config(self) -> dict:
        return {"block_m": self.block_m, "longest_first": self.longest_first, "splits": self.splits}

    # -- host ----------------------------------------------------------------------
    def host_count(self, problem) -> int:
        return problem.q_blocks(self.block_m) * problem.heads * problem.batch * self.splits

    def host_unit(self, index: int, problem) -> tuple:
        """``(q_block, head, batch, split)`` of linear unit ``index`` (host reference of :meth:`unit`)."""
        index, split = divmod(index, self.splits)
        qb, r = divmod(index, problem.heads * problem.batch)
        if self.longest_first:
            qb = problem.q_blocks(self.block_m) - 1 - qb
        batch, head = divmod(r, problem.heads)
        return qb, head, batch, split

    # -- IR ------------------------------------------------------------------------
    def bind(self, problem) -> None:
        """IR: the unit counts of ``problem`` (an ``AttentionProblem`` of IR i32 fields)."""
        self.heads = cir.u32(problem.heads)
        self.q_blocks = (cir.u32(problem.seqlen_q) + (self.block_m - 1)) // self.block_m
        self.per_block = self.heads * cir.u32(problem.batch)
        self.count = self.q_blocks * self.per_block * self.splits if self.splits > 1 else self.q_blocks * self.per_block

    # -- the grid form: one CTA per unit, the launch grid is the unit space ---------------------
    def _grid_form(self) -> None:
        if self.longest_first or self.splits > 1:
            raise ValueError(f"the grid form runs units in launch order with no split: longest_first="
                             f"{self.longest_first}, splits={self.splits} need a scheduler's linear walk")

    def grid(self, problem) -> tuple:
        """Host: the launch grid whose CTA ``(x, y, z)`` runs unit ``(q_block, head, batch)``:
        ``(max(1, q blocks), heads, batch)`` (:meth:`grid_unit`). One unit per CTA with no
        linear index to decompose -- no division on the device; ``ValueError`` for
        ``longest_first`` or splits (orders and slices that need :class:`UnitScheduler` /
        :class:`PersistentScheduler`'s walk)."""
        self._grid_form()
        return (max(1, problem.q_blocks(self.block_m)), problem.heads, problem.batch)

    def grid_unit(self) -> AttentionUnit:
        """IR: this CTA's :class:`AttentionUnit` on the :meth:`grid` launch: ``blockIdx.x, .y, .z``
        (i32) as query block, head and sequence."""
        self._grid_form()
        return AttentionUnit(*(cir.i32(cir.block_idx(d)) for d in ("x", "y", "z")))

    def unit(self, index, valid=True) -> AttentionUnit:
        """IR: the :class:`AttentionUnit` of linear unit ``index`` (IR i32)."""
        index = cir.u32(index)
        split = 0
        if self.splits > 1:
            index, split = index // self.splits, index % self.splits
        qb, r = index // self.per_block, index % self.per_block
        if self.longest_first:
            qb = self.q_blocks - 1 - qb
        return AttentionUnit(qb, r % self.heads, r // self.heads, split, valid)


class UnitScheduler:
    """One unit per CTA: unit ``blockIdx.x`` of ``units`` (a :class:`UnitSpace`); grid ``(count,
    1, 1)``. The base of every scheduler: :meth:`work_loop` (the walk every role runs), the
    shared-memory hooks :meth:`plan` / :meth:`init` and the kernel-parameter hooks."""

    def __init__(self, units: UnitSpace | None = None):
        self.units = units

    # -- host ----------------------------------------------------------------------
    def host_count(self, problem) -> int:
        """Units of ``problem`` (Python ints)."""
        return self.units.host_count(problem)

    def grid(self, problem) -> tuple:
        return (max(1, self.host_count(problem)), 1, 1)

    def kernel_params(self) -> list:
        """Kernel parameters this scheduler reads (``ParamSpec``; none here)."""
        return []

    def param_values(self, problem) -> dict:
        """Host: the values of :meth:`kernel_params` for ``problem``, by parameter name."""
        return {}

    def config(self) -> dict:
        return self.units.config() if self.units is not None else {}

    # -- IR ------------------------------------------------------------------------
    def bind(self, problem, *_) -> None:
        """Once per kernel: bind the unit space to ``problem`` (IR i32 fields)."""
        self.units.bind(problem)

    def bind_params(self, args) -> None:
        """Once per kernel, after :meth:`bind`: read :meth:`kernel_params` (nothing here)."""

    def plan(self, plan) -> None:
        """Declare the scheduler's shared memory and barriers in a ``SmemPlan`` (none here)."""

    def init(self, smem, leader) -> None:
        """IR: bind and initialise what :meth:`plan` declared (nothing here)."""

    def work_count(self):
        """Units this CTA runs (IR i32 or int): one."""
        return 1

    def work_loop(self, carry, body, issuer=None) -> list:
        """IR: ``body(i, carried) -> next carried`` for each of this CTA's :meth:`work_count`
        units ``i`` (a loop carrying ``carry``); returns the last carried values. ``issuer``
        is for schedulers that fetch their units at run time; unused here."""
        loop = cir.Loop(0, self.work_count(), carry=carry)
        for i, carried in loop:
            loop.next(*body(i, list(carried)))
        return list(loop.results)

    def unit_index(self, i=0):
        """IR: the linear unit index of this CTA's ``i``-th unit."""
        return cir.block_idx()

    def work_unit(self, i=0):
        """IR: the record of this CTA's ``i``-th unit (the unit space's)."""
        return self.units.unit(self.unit_index(i))


class PersistentScheduler(UnitScheduler):
    """A persistent grid over ``units``: ``sm_count`` SMs (None: :data:`DEFAULT_SM_COUNT`) x
    ``ctas_per_sm`` CTAs, in clusters of ``cluster_size`` CTAs that walk units together (each
    CTA of a cluster gets the cluster's unit: a GEMM cluster tile's CTAs then take their own tile
    of it); cluster ``c`` of ``P`` runs units ``c, c + P, ...``. ``persistent=False``: one
    cluster per unit. Raises ``ValueError`` for a non-positive SM count."""

    def __init__(self, units: UnitSpace | None = None, sm_count=None, cluster_size: int = 1,
                 persistent: bool = True, ctas_per_sm: int = 1):
        if sm_count is not None and (not isinstance(sm_count, int) or sm_count < 1):
            raise ValueError(f"sm_count must be a positive int, got {sm_count!r}")
        UnitScheduler.__init__(self, units)       # not super(): a GEMM subclass mixes in TileScheduler
        self.sm_count, self._cluster_size = sm_count, cluster_size
        self.persistent, self.ctas_per_sm = persistent, ctas_per_sm

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster."""
        return self._cluster_size

    def config(self) -> dict:
        return {**super().config(), "cluster_size": self.cluster_size, "persistent": self.persistent}

    # -- host ----------------------------------------------------------------------
    def clusters_for(self, units: int) -> int:
        """Clusters launched for ``units`` work units: one per unit when not persistent, else at
        most what ``sm_count`` SMs hold at once."""
        if not self.persistent:
            return units
        sms = self.sm_count or DEFAULT_SM_COUNT
        return max(1, min(units, sms * self.ctas_per_sm // self.cluster_size))

    def grid(self, problem) -> tuple:
        return (self.clusters_for(self.host_count(problem)) * self.cluster_size, 1, 1)

    def cta_units(self, cta: int, problem) -> list:
        """Host reference of the walk: the linear units CTA ``cta`` runs, in order."""
        total = self.host_count(problem)
        cid, ncl = cta // self.cluster_size, self.clusters_for(total)
        return list(range(cid, total, ncl)) if self.persistent else [cid]

    # -- IR ------------------------------------------------------------------------
    def bind(self, problem, *_) -> None:
        """Once per kernel: this CTA's cluster coordinates, then the unit space."""
        self.bind_cluster()
        self.units.bind(problem)
        self.total = self.units.count

    def bind_cluster(self) -> None:
        """IR: :attr:`rank` in the cluster, :attr:`cluster_id`, :attr:`n_clusters` (unsigned i32)."""
        cs = self.cluster_size
        bid = cir.block_idx()
        self.rank = bid % cs if cs > 1 else 0
        self.cluster_id = bid // cs if cs > 1 else bid
        self.n_clusters = cir.grid_dim() // cs if cs > 1 else cir.grid_dim()

    def work_count(self):
        """Units this CTA runs (IR i32): ``ceil((total - cluster) / clusters)``."""
        if not self.persistent:
            return cir.i32(1)
        return (self.total - self.cluster_id + (self.n_clusters - 1)) // self.n_clusters

    def unit_index(self, i=0):
        return self.cluster_id + i * self.n_clusters if self.persistent else self.cluster_id

    def _unit(self, i):
        return self.unit_index(i)


__all__ = ["UnitSpace", "AttentionUnit", "AttentionUnits", "UnitScheduler", "PersistentScheduler"]
