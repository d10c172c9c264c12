"""Stream-K and split-K on the persistent schedules (CUTLASS ``PersistentTileSchedulerSm90StreamK``
with its ``DecompositionMode`` Heuristic / DataParallel / SplitK / StreamK, and its "fixup").

A persistent launch of ``P`` clusters divides the ``T`` work tiles (cluster tiles x batches)
of ``k_tiles`` k-iterations each:

* **data-parallel** -- tile ``t`` whole on cluster ``t mod P`` (the plain persistent schedule).
  When ``T`` is not a multiple of ``P`` the last wave leaves SMs idle (wave quantisation).
* **stream-k** -- the first ``dp_tiles`` tiles data-parallel (whole waves), the remaining
  ``sk_tiles`` (the partial wave plus one full wave, when there is one) as one iteration space
  of ``I = sk_tiles x k_tiles`` k-iterations cut into ``U = sk_units`` <= ``P`` contiguous
  ranges, one per cluster, whose lengths differ by at most one: ``q = I / U`` each, plus one
  for the first ``I mod U``. A range covers the tail
  of one tile, whole tiles, the head of another; the cluster runs the tiles it touches from
  the last to the first (so the piece another cluster waits for is computed first).
* **split-k** -- every tile's k-iterations cut into ``S = splits`` pieces (piece ``s`` of a
  tile: k-tiles ``[s k_tiles / S, (s + 1) k_tiles / S)``), piece ``u`` (of ``U = T x S``) on
  cluster ``u mod P``.
* **heuristic** -- stream-k when data-parallel waves would keep fewer than
  :data:`HEURISTIC_UTILISATION` of the SM-time busy and a tile has at least
  :data:`MIN_STREAM_K_TILES` k-tiles to share; data-parallel otherwise.

Pieces of one tile are reduced in a fixed order (by first k-iteration), so results are
bit-identical from run to run: :class:`PartialTileReduction` -- the piece starting at k-tile
0 writes its f32 accumulator fragment into the tile's workspace slot, each later piece waits
until the slot's semaphore says the pieces before it are in, adds them, and passes its sum
on; the piece ending the tile adds the sum into its fragment and runs the epilogue. The
semaphore holds the k-tile the reduction has reached (``ld.acquire.gpu`` spin by one thread,
named barrier, reads; writes, named barrier, ``st.release.gpu`` by one thread); the final
piece sets it back to 0, so the workspace is ready for the next launch without a memset.
Waiting on other CTAs needs them resident together: the launch never exceeds one persistent
wave (``sm_count``), and the dependencies run from later to earlier units only.

The decomposition is a host decision per problem (:func:`decompose`); the kernel reads it
from three i32 parameters (``dp_tiles``, ``sk_units``, ``splits``), so one compiled kernel
serves every mode and shape.
"""
from __future__ import annotations

import attrs

from ..compiler.artifact import ParamSpec as Param
from ..ir._lazy import lazy
from .tile_scheduler import DEFAULT_SM_COUNT, PersistentTileScheduler, WorkTile, ceil_div

cir = lazy("cutedsl.ir")
ir, llvm, vector = lazy("mlir.ir"), lazy("mlir.dialects.llvm"), lazy("mlir.dialects.vector")

#: CUTLASS's DecompositionMode names
DECOMPOSITIONS = ("heuristic", "data-parallel", "split-k", "stream-k")
#: heuristic: stream-K when data-parallel waves keep less than this share of the SM-time busy
HEURISTIC_UTILISATION = 0.9
#: heuristic: fewer k-tiles per tile than this are not worth sharing (the fix-up would dominate)
MIN_STREAM_K_TILES = 4
_I32 = 2 ** 31 - 1


@attrs.frozen
class Decomposition:
    """How one problem's tiles are divided (host ints; see the module docstring): ``mode``
    (resolved: data-parallel, split-k or stream-k), ``tiles`` work tiles, ``k_tiles`` per tile,
    ``clusters`` launched, the first ``dp_tiles`` tiles whole, ``sk_units`` ranges over the
    rest, ``splits`` (split-k: pieces per tile; 0 for stream-k ranges)."""
    mode: str
    tiles: int
    k_tiles: int
    clusters: int
    dp_tiles: int
    sk_units: int = 0
    splits: int = 0

    @property
    def sk_tiles(self) -> int:
        """Tiles whose K may be split (after the data-parallel ones)."""
        return self.tiles - self.dp_tiles if self.sk_units else 0

    def params(self) -> dict:
        """The kernel parameters the scheduler reads."""
        return {"dp_tiles": self.dp_tiles, "sk_units": self.sk_units, "splits": self.splits}

    def unit_range(self, u: int) -> tuple:
        """k-iterations ``[begin, end)`` of split unit ``u`` in the split tiles' iteration space."""
        if self.splits:             # pieces of one tile each
            t, s = divmod(u, self.splits)
            return t * self.k_tiles + s * self.k_tiles // self.splits, t * self.k_tiles + (s + 1) * self.k_tiles // self.splits
        q, r = divmod(self.sk_tiles * self.k_tiles, self.sk_units)
        return u * q + min(u, r), (u + 1) * q + min(u + 1, r)

    def cluster_work(self, c: int) -> list:
        """Host reference of the kernel's walk: cluster ``c``'s units of work in order, each
        ``(tile, k_begin, k_end)`` (``tile``: linear work-tile index; k in k-tiles of the tile)."""
        p, kt = self.clusters, self.k_tiles
        out = [(t, 0, kt) for t in range(c, self.dp_tiles, p)]
        if not self.sk_units:
            return out
        units = range(c, self.sk_units, p) if self.splits else ([c] if c < self.sk_units else [])
        for u in units:
            b, e = self.unit_range(u)
            for t in range((e - 1) // kt, b // kt - 1, -1):      # last tile first
                out.append((self.dp_tiles + t, max(b, t * kt) - t * kt, min(e, (t + 1) * kt) - t * kt))
        return out

    def busy(self) -> list:
        """k-iterations each cluster runs (the SM-utilisation model of the bench)."""
        return [sum(e - b for _, b, e in self.cluster_work(c)) for c in range(self.clusters)]

    def utilisation(self, sm_clusters: int | None = None) -> float:
        """Share of ``sm_clusters`` (default: the launched clusters) x the longest cluster's
        k-iterations spent computing: 1.0 is perfect balance (fix-up costs not modelled)."""
        busy = self.busy()
        return sum(busy) / (max(busy) * (sm_clusters or self.clusters)) if busy and max(busy) else 1.0


def decompose(mode: str, tiles: int, k_tiles: int, max_clusters: int, splits: int | None = None) -> Decomposition:
    """The :class:`Decomposition` of ``tiles`` work tiles of ``k_tiles`` k-tiles each over at most
    ``max_clusters`` persistent clusters, for ``mode`` in :data:`DECOMPOSITIONS` (``splits``: the
    split-k pieces per tile, capped at ``k_tiles``). ``ValueError`` for an unknown mode, a
    split-k without ``splits`` >= 2, or an iteration space past 2^31 - 1."""
    if mode not in DECOMPOSITIONS:
        raise ValueError(f"decomposition must be one of {', '.join(DECOMPOSITIONS)}, got {mode!r}")
    tiles, k_tiles, p = max(1, tiles), max(1, k_tiles), max(1, max_clusters)
    if tiles * k_tiles > _I32 or (mode == "split-k" and (splits or 1) * k_tiles > _I32):
        raise ValueError(f"{tiles} tiles x {k_tiles} k-tiles (x {splits} splits) exceed the kernel's 32-bit "
                         f"iteration count")
    if mode == "heuristic":
        waves = ceil_div(tiles, p)
        dp_busy = tiles / (waves * p)
        mode = "stream-k" if dp_busy < HEURISTIC_UTILISATION and k_tiles >= MIN_STREAM_K_TILES else "data-parallel"
    if mode == "split-k":
        if splits is None or splits < 2:
            raise ValueError(f"split-k needs splits >= 2, got {splits!r}")
        s = min(splits, k_tiles)
        if s > 1:
            return Decomposition("split-k", tiles, k_tiles, min(p, tiles * s), 0, tiles * s, s)
    elif mode == "stream-k" and tiles % p:
        sk_tiles = tiles % p + (p if tiles > p else 0)      # the partial wave and one full wave
        units = min(p, sk_tiles * k_tiles)
        dp = tiles - sk_tiles
        return Decomposition("stream-k", tiles, k_tiles, p if dp else units, dp, units, 0)
    return Decomposition("data-parallel", tiles, k_tiles, min(p, tiles), tiles)


class StreamKScheduler(PersistentTileScheduler):
    """The persistent scheduler with tiles split along K (see the module docstring):
    ``decomposition`` in :data:`DECOMPOSITIONS`, ``splits`` for split-k; the other arguments
    as :class:`PersistentTileScheduler` (``persistent`` must stay True). Work tiles carry
    ``k_total`` and the workspace ``slot`` of their tile."""

    def __init__(self, tile_m: int, tile_n: int, raster: str = "M", swizzle: int = 1, sm_count=None,
                 cluster=(1, 1), persistent: bool = True, ctas_per_sm: int = 1, *, decomposition: str = "stream-k",
                 splits: int | None = None, k_tile: int = 64):
        if not persistent:
            raise ValueError("stream-K and split-K need a persistent schedule (clusters wait on each other)")
        if decomposition not in DECOMPOSITIONS:
            raise ValueError(f"decomposition must be one of {', '.join(DECOMPOSITIONS)}, got {decomposition!r}")
        super().__init__(tile_m, tile_n, raster, swizzle, sm_count, cluster, True, ctas_per_sm)
        self.decomposition, self.splits = decomposition, splits
        self.k_tile = k_tile        #: K extent of a k-tile (elements): the host's k-tile count

    # -- host ----------------------------------------------------------------------
    def decompose(self, problem) -> Decomposition:
        """The :class:`Decomposition` for ``problem`` (a ``GemmProblem`` of ints) on this
        scheduler's SMs."""
        ctm, ctn = self.cluster_tiles(problem.m, problem.n)
        tiles = ctm * ctn * (problem.l if self.batched else 1)
        sms = self.sm_count or DEFAULT_SM_COUNT
        return decompose(self.decomposition, tiles, ceil_div(problem.k, self.k_tile),
                         max(1, sms * self.ctas_per_sm // self.cluster_size), self.splits)

    def grid(self, problem) -> tuple:
        return (self.decompose(problem).clusters * self.cluster_size, 1, 1)

    def kernel_params(self) -> list:
        return [Param("dp_tiles", "i32"), Param("sk_units", "i32"), Param("splits", "i32")]

    def param_values(self, problem) -> dict:
        return self.decompose(problem).params()

    def partial_tiles(self, problem) -> int:
        """Workspace slots: one per CTA tile of every split cluster tile."""
        return self.decompose(problem).sk_tiles * self.cluster_size

    # -- IR ------------------------------------------------------------------------
    def bind_params(self, args) -> None:
        """Emit this cluster's share: ``dp_count`` whole tiles, then its split pieces."""
        c, p, kt = self.cluster_id, self.n_clusters, self.k_tiles
        self.dp_tiles, self.sk_units, self.n_splits = (x.unsigned() for x in (args.dp_tiles, args.sk_units,
                                                                               args.splits))
        zero = cir.u32(0)
        self.dp_count = cir.select(c < self.dp_tiles, (self.dp_tiles + (p - 1) - c) // p, zero)
        stream = self.n_splits.eq(0)
        owns = c < self.sk_units
        # stream-k: unit c's k-iterations [b, e) of the split tiles, q each plus one for the first r
        units = cir.select(owns, self.sk_units, cir.u32(1))      # no division by 0 when there are none
        total = (self.total - self.dp_tiles) * kt
        q, r = total // units, total % units
        b = c * q + cir.select(c < r, c, r)
        e = b + q + cir.select(c < r, cir.u32(1), zero)
        self._b, self._e = b, e
        self._last = cir.select(e > 0, (e - 1) // kt, zero)
        pieces = cir.select(owns, self._last - b // kt + 1, zero)
        # split-k: units c, c + P, ... of tiles x splits, one piece each
        units_split = cir.select(owns, (self.sk_units + (p - 1) - c) // p, zero)
        self.count = self.dp_count + cir.select(stream, pieces, units_split)

    def work_count(self):
        return self.count

    def work_tile(self, i=0, k_tile_range=None) -> WorkTile:
        """The ``i``-th unit of this cluster: a whole tile, a stream-k piece or a split-k piece
        (``k_tile_range`` is not consulted: the decomposition owns K)."""
        c, p, kt = self.cluster_id, self.n_clusters, self.k_tiles
        i = cir.u32(i)
        dp = i < self.dp_count
        j = i - self.dp_count
        # stream-k: tiles last, last - 1, ... of the unit
        t_s = self._last - j
        base = t_s * kt
        kb_s = cir.select(self._b > base, self._b - base, cir.u32(0))
        ke_s = cir.select(self._e < base + kt, self._e - base, kt)
        # split-k: unit u = c + j P is piece u % S of tile u / S
        s = cir.select(self.n_splits.eq(0), cir.u32(1), self.n_splits)
        u = c + j * p
        t_k, piece = u // s, u % s
        kb_k = piece * kt // s
        ke_k = (piece + 1) * kt // s
        stream = self.n_splits.eq(0)
        rel = cir.select(stream, t_s, t_k)
        tile = cir.select(dp, c + i * p, self.dp_tiles + rel)
        kb = cir.select(dp, cir.u32(0), cir.select(stream, kb_s, kb_k))
        ke = cir.select(dp, kt, cir.select(stream, ke_s, ke_k))
        slot = rel * self.cluster_size + self.rank if self.cluster_size > 1 else rel
        m0, n0 = self.unit_origin(tile)
        return WorkTile(m0, n0, self.unit_batch(tile), kb, ke - kb, True, k_total=kt, slot=slot)


class PartialTileReduction:
    """The fix-up of tiles split along K (CUTLASS's stream-K ``fixup``; see the module
    docstring): ``tile_m x tile_n`` tiles whose rows ``split`` consumer warpgroups share
    (``tile_m / split`` rows each). Kernel parameters ``workspace`` (f32 partial tiles, one
    ``tile_m x tile_n`` slot per split tile, each warpgroup's part in its fragment order so
    every access is a coalesced 16-byte vector) and ``locks`` (one u32 semaphore per slot and
    warpgroup), both filled by the Device layer from a zeroed allocation it keeps. Named
    barriers :data:`BARRIER_ID` + the storing warpgroup's index order a warpgroup's threads
    around the one thread that waits and signals."""

    BARRIER_ID = 12     #: after the epilogue's (8..11)
    VEC = 4             #: f32 per workspace access (16 bytes)

    def __init__(self, tile_m: int, tile_n: int, split: int = 1, threads: int = 128):
        self.tile_m, self.tile_n, self.split, self.threads = tile_m, tile_n, split, threads

    @staticmethod
    def kernel_params() -> list:
        return [Param("workspace", "ptr", dtype="f32", workspace=True),
                Param("locks", "ptr", dtype="u32", workspace=True)]

    def workspace_bytes(self, slots: int) -> dict:
        """Bytes of each workspace parameter for ``slots`` split tiles."""
        return {"workspace": slots * self.tile_m * self.tile_n * 4, "locks": slots * self.split * 4}

    def reduce(self, acc, wt: WorkTile, part, barrier, args):
        """IR: reduce work tile ``wt``'s piece held in ``acc`` (the fragment of warpgroup
        ``part`` of the tile's ``split``; ``barrier``: index of the named barrier of this
        storing warpgroup). Returns ``(acc, final)``: the fragment to store (the whole tile's
        sum when ``final``, an IR i1) -- only the final piece stores."""
        from ..atom import Accumulator, NamedBarrier, wait_flag
        kb, ke = wt.k_first, wt.k_first + wt.k_count
        prev, final = cir.u32(kb).ne(0), cir.u32(ke).eq(wt.k_total)
        t = cir.thread_idx() % self.threads
        leader = t.eq(0)
        bar = NamedBarrier(self.BARRIER_ID + barrier, self.threads)
        lane = cir.u32(wt.slot) * self.split + part
        locks = cir.GlobalPtr(args.locks, "u32")
        ws = cir.GlobalPtr(args.workspace, "f32")
        regs = acc.m_blocks * acc.regs
        base = cir.i64(lane) * (self.tile_m // self.split * self.tile_n) + cir.i64(t) * self.VEC
        stride = self.threads * self.VEC

        def index(q):               # element index of this thread's q-th vector of 4 registers
            return base + q * stride
        types = [s.type for s in acc.structs]
        br = cir.If(prev, results=types)
        with br.then_():            # the pieces before this one are in the slot: add them
            with cir.If(leader):
                wait_flag(locks, lane, cir.u32(kb))
            bar.sync()
            out = list(acc.structs)
            for q in range(regs // self.VEC):
                vec = ws.load_vec(index(q), self.VEC)
                for x in range(self.VEC):
                    b, i = divmod(q * self.VEC + x, acc.regs)
                    v = cir.Scalar(llvm.extractelement(vec, cir.i32(x))) + acc.get(b, i)
                    out[b] = llvm.insertvalue(out[b], v, [i])
            with cir.If(leader & final):
                locks.store(lane, cir.u32(0))        # ready for the next launch
            br.yield_(*out)
        with br.else_():
            br.yield_(*acc.structs)
        acc = Accumulator(br.results, acc.n)
        with cir.If(~final):        # pass the sum on to the next piece
            v4 = ir.VectorType.get([self.VEC], ir.F32Type.get())
            for q in range(regs // self.VEC):
                vals = [acc.get(*divmod(q * self.VEC + x, acc.regs)) for x in range(self.VEC)]
                ws.store_vec(index(q), vector.from_elements(v4, vals))
            bar.sync()
            with cir.If(leader):
                locks.store_release(lane, cir.u32(ke))
        return acc, final


__all__ = ["DECOMPOSITIONS", "Decomposition", "decompose", "StreamKScheduler", "PartialTileReduction",
           "HEURISTIC_UTILISATION", "MIN_STREAM_K_TILES"]
