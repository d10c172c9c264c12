"""Happens-before race detection in global memory, between the clusters of one launch.

The shared-memory detector (:mod:`cutedsl.sim.checks.hb`) orders warps inside a cluster; this one
orders *clusters* (one agent each: everything a cluster's warps do shares its clock, so the
barriers inside a cluster need no modelling here) through the edges the PTX memory model
gives between CTAs that share no barrier:

* a **release** -- ``st.release``, ``atom``/``red`` with ``.release``/``.acq_rel``, or a
  ``fence.sc``/``fence.acq_rel`` (``membar.gl``/``.sys``) followed by a strong (``.relaxed``,
  ``.volatile`` or atomic) store or RMW -- at ``.gpu``/``.sys`` scope attaches the cluster's
  knowledge to the location written (an RMW joins, a store replaces);
* an **acquire** -- ``ld.acquire``, ``atom`` with ``.acquire``/``.acq_rel``, or a strong load
  or RMW followed by such a fence -- joins the knowledge attached to the location it read;
* the kernel boundary: every launch starts with nothing recorded (earlier launches are done).

Weak (plain) global loads and stores are checked, per 4-byte word of the allocation (and the
bytes of it they touch), against the last weak write and the last weak read by another cluster: unordered conflicting pairs
raise :class:`RaceError` naming both instructions and clusters. Strong accesses are
morally strong with each other (never a race) and are not recorded; a weak write storing
the bytes already there is benign (as in shared memory), decided per word of the store (per
element for sub-word stores): its other words are still checked. Limits (docs/emulator.md): one
agent per cluster (a missing ``bar.sync`` between the warp that acquired and the warps that
read is not seen), the last reader per word only. The async proxy: TMA stores and bulk copies
to global memory are writes in flight until their ``wait_group``; a TMA load of bytes a
generic write of this launch stored needs that write ordered before it and a
``fence.proxy.async`` between them (:meth:`GlobalHB.async_read`); TMA loads are not recorded
as reads. A ``cp.reduce.async.bulk`` is atomic per element (not recorded) but in flight until its
``wait_group``: a weak access of its words before then races (:meth:`GlobalHB.async_reduce`).
"""
from __future__ import annotations

import weakref

import numpy as np

from .rules import raise_unless_allowed

#: modifiers that make a global access strong (a memory-model synchronising candidate)
STRONG = {"relaxed", "acquire", "release", "volatile", "acq_rel"}
#: scopes whose release/acquire orders different clusters
WIDE = {"gpu", "sys"}


def classify(mods) -> tuple:
    """``(strong, release, acquire, wide)`` of a memory instruction's modifiers (an atomic is
    strong whatever its modifiers say; callers add that)."""
    ms = set(mods)
    strong = bool(ms & STRONG)
    wide = not (ms & {"cta", "cluster"})            # no scope: .gpu for atomics/strong accesses
    return strong, bool(ms & {"release", "acq_rel"}), bool(ms & {"acquire", "acq_rel"}), wide


_GBLK = 6      # log2 of the words per block of _Shadow.touched (64 words = 256 B: one f16 row of a 128-wide tile)

#: write clock of a word an async-proxy store has not completed yet: no knowledge covers it
PENDING = np.iinfo(np.int32).max


class _Shadow:
    """Per-word last weak write and last weak read of one allocation (a write still in flight
    in the async proxy has clock :data:`PENDING` and its issuing bulk group in ``a_pc``)."""

    def __init__(self, nbytes: int):
        n = nbytes // 4 + 2
        self.pending = np.zeros(n, bool)
        self.w_mask = np.zeros(n, np.uint8)     # bytes of the word the last write covered
        self.r_mask = np.zeros(n, np.uint8)
        self.w_agent = np.full(n, -1, np.int32)
        self.w_clock = np.zeros(n, np.int32)
        self.w_pc = np.zeros(n, np.int32)
        self.r_agent = np.full(n, -1, np.int32)
        self.r_clock = np.zeros(n, np.int32)
        self.r_pc = np.zeros(n, np.int32)
        self.written = False                    # a generic write was recorded (async_read)
        self.reducing = None                    # per word: async reductions in flight (async_reduce)
        self.red_pc = None                      # per word: the last one's instruction
        self.touched = np.zeros((n >> _GBLK) + 1, bool)    # per 256-byte block (_GBLK): any access recorded


class Rows:
    """The whole 4-byte words ``start + r * pitch + j`` (``r < rows``, ``j < n``) of an allocation: a
    box's rows in global memory (a TMA store), read and written as 2-D views of a shadow's arrays."""
    __slots__ = ("start", "rows", "pitch", "n")

    def __init__(self, start, rows, pitch, n):
        self.start, self.rows, self.pitch, self.n = start, rows, pitch, n

    def view(self, a):
        end = self.start + self.rows * self.pitch
        if end <= len(a):
            return a[self.start:end].reshape(self.rows, self.pitch)[:, :self.n]
        # the last row ends before its pitch would (a box at the end of the allocation)
        return np.ndarray((self.rows, self.n), a.dtype, a, self.start * a.itemsize,
                          (self.pitch * a.itemsize, a.itemsize))

    def end(self):
        """One past the last word."""
        return self.start + (self.rows - 1) * self.pitch + self.n

    def ids(self):
        """The word ids, in box order."""
        return (self.start + self.pitch * np.arange(self.rows)[:, None] + np.arange(self.n)).reshape(-1)


class GlobalHB:
    """The launch's cluster clocks, knowledge, released locations and word shadows."""

    def __init__(self, launch, seed=None):
        self._launch, self.seed = weakref.ref(launch), seed    # no cycle: the launch holds this
        self.clock = {}         # cluster id -> its current clock (from 1)
        self.know = {}          # cluster id -> {cluster id: clock it knows complete}
        self.sync = {}          # global address -> knowledge released there
        self.fenced = {}        # cluster id -> knowledge of its last release fence
        self.pending = {}       # cluster id -> knowledge read by strong loads since its last fence
        self.shadows = {}       # allocation base -> _Shadow
        self.inflight = {}      # (cluster, CTA rank, warp) -> [(bulk group, shadow, words, is a reduction)]

    @property
    def launch(self):
        return self._launch()

    # -- knowledge ---------------------------------------------------------------------------
    def _me(self, w):
        c = w.cta.cluster.cid
        if c not in self.clock:
            self.clock[c], self.know[c] = 1, {}
        return c

    @staticmethod
    def _join(a: dict, b: dict | None) -> dict:
        if b:
            for k, v in b.items():
                if a.get(k, 0) < v:
                    a[k] = v
        return a

    def _snapshot(self, c) -> dict:
        snap = dict(self.know[c])
        snap[c] = self.clock[c]
        self.clock[c] += 1      # later accesses are after this release
        return snap

    def release(self, w, addr: int, rmw: bool) -> None:
        c = self._me(w)
        snap = self._snapshot(c)
        self.sync[addr] = self._join(dict(self.sync.get(addr) or {}), snap) if rmw else snap

    def strong_write(self, w, addr: int, rmw: bool) -> None:
        """A relaxed store/RMW: it carries the cluster's last release fence, if any."""
        c = self._me(w)
        f = self.fenced.get(c)
        if f is not None:
            self.sync[addr] = self._join(dict(self.sync.get(addr) or {}), f) if rmw else dict(f)

    def acquire(self, w, addr: int) -> None:
        c = self._me(w)
        self._join(self.know[c], self.sync.get(addr))

    def strong_read(self, w, addr: int) -> None:
        """A relaxed load/RMW: what it read is acquired by the cluster's next fence."""
        c = self._me(w)
        s = self.sync.get(addr)
        if s:
            self.pending[c] = self._join(self.pending.get(c, {}), s)

    def fence(self, w) -> None:
        """``fence.sc``/``fence.acq_rel`` at gpu/sys scope: acquire what strong loads read,
        release everything before it to the strong stores after it."""
        c = self._me(w)
        self._join(self.know[c], self.pending.pop(c, None))
        self.fenced[c] = self._snapshot(c)

    # -- the async proxy ------------------------------------------------------------------------
    def fence_proxy(self, w) -> None:
        """``fence.proxy.async`` (or ``.global``) by a warp of cluster ``c``: what ``c`` knows of
        generic global writes -- its own so far, and the others' it acquired -- becomes visible
        to its later async-proxy accesses, and travels with its releases (keys ``("p", a)``)."""
        c = self._me(w)
        k = self.know[c]
        for a, v in list(k.items()):
            if not isinstance(a, tuple) and k.get(("p", a), 0) < v:
                k[("p", a)] = v
        k[("p", c)] = self.clock[c]
        self.clock[c] += 1          # generic writes after the fence are not covered

    def written(self, alloc) -> bool:
        """Whether a generic write to ``alloc`` was recorded in this launch (cheap: callers skip
        computing the offsets of a TMA load otherwise)."""
        sh = self.shadows.get(alloc.base)
        return sh is not None and sh.written

    def async_read(self, w, alloc, off, nb: int, ins) -> None:
        """A TMA load by cluster ``c`` of ``nb``-byte elements at byte offsets ``off`` of
        ``alloc``: every generic write of those bytes in this launch must be ordered before it
        (release -> acquire across clusters) and made visible to the async proxy by a
        ``fence.proxy.async`` -- by the writer before its release, or by the reader after its
        acquire (PTX ISA: Memory Consistency Model, proxies; membar/fence)."""
        sh = self.shadows.get(alloc.base)
        if sh is None or not sh.written:
            return
        c = self._me(w)
        sh, words, mask = self._words(alloc, off, nb)
        ag = sh.w_agent[words]
        hit = (ag >= 0) & ((sh.w_mask[words] & mask) != 0) & ~sh.pending[words]
        if not hit.any():
            return
        know = self.know[c]
        clk = sh.w_clock[words]
        for i in np.flatnonzero(hit):
            a, k = int(ag[i]), int(clk[i])
            if a != c and know.get(a, 0) < k:
                why = ("are not ordered by synchronisation; missing: a release by the writing cluster after "
                       "its write that the loading cluster acquires before the TMA load (PTX ISA: Memory "
                       "Consistency Model, release and acquire patterns), and a fence.proxy.async")
            elif know.get(("p", a), 0) < k:
                why = ("are in different proxies with no proxy fence between them; missing: "
                       "fence.proxy.async (or fence.proxy.async.global) after the generic write -- by the "
                       "writer before its release, or by the loading thread after its acquire -- and "
                       "before the TMA load (PTX ISA: membar/fence, proxy fences; Memory Consistency "
                       "Model, proxies)")
            else:
                continue
            word = int(words[i])
            rid = "global-release-acquire" if a != c and know.get(a, 0) < k else "proxy-fence"
            if rid in self.allow:
                continue
            raise_unless_allowed(self.allow, rid,
                f"data race on global memory {alloc.base + 4 * word:#x} (allocation {alloc.tag or hex(alloc.base)}, "
                f"byte offset {4 * word}):\n"
                f"    generic write by cluster {a} at {self._where(int(sh.w_pc[word]))}\n"
                f"    TMA load (async proxy) by cluster {c} (CTA {self._ctas_of(c)}) at {self._where(ins.pc)}\n"
                f"    {why}" + self._seed())

    # -- async-proxy writes (TMA stores, bulk copies to global) ---------------------------------
    def async_write(self, w, alloc, off, nb: int, ins) -> None:
        """Warp ``w`` issued an async-proxy write of ``nb``-byte elements at byte offsets ``off``
        of ``alloc`` in its current bulk group: checked as a write now, complete (its clock the
        cluster's then) only when a ``cp.async.bulk.wait_group`` (not ``.read``) covers the group."""
        sh, words, mask = self._words(alloc, off, nb)
        self.access(w, alloc, off, nb, True, ins, words=(sh, words, mask))
        sh.w_clock[words], sh.pending[words] = PENDING, True
        key = (w.cta.cluster.cid, w.cta.rank, w.wid)
        self.inflight.setdefault(key, []).append((w.bulk_commits, sh, words, False))

    def async_write_rows(self, w, alloc, rows: Rows, ins) -> None:
        """:meth:`async_write` of the whole words ``rows``, through 2-D views: when no word holds an
        in-flight write, a reduction or another cluster's access (nothing to check), it is recorded
        as the per-word path would record it; otherwise the per-word path judges (and reports) it."""
        sh = self.shadows.get(alloc.base)
        if sh is None:
            sh = self.shadows[alloc.base] = _Shadow(alloc.nbytes)
        c = self._me(w)
        v = rows.view
        if rows.end() > len(sh.pending):
            self.async_write(w, alloc, 4 * rows.ids(), 4, ins)
            return
        # no access recorded in any word (the usual case: each output word is stored once; an
        # in-flight write has its writer in w_agent): nothing to check, else the full test
        if not (int(v(sh.w_agent).max()) < 0 and int(v(sh.r_agent).max()) < 0 and sh.reducing is None) and (
                v(sh.pending).any() or (sh.reducing is not None and v(sh.reducing).any())
                or ((v(sh.w_agent) >= 0) & (v(sh.w_agent) != c) & (v(sh.w_mask) != 0)).any()
                or ((v(sh.r_agent) >= 0) & (v(sh.r_agent) != c) & (v(sh.r_mask) != 0)).any()):
            self.async_write(w, alloc, 4 * rows.ids(), 4, ins)
            return
        if not rows.pitch & ((1 << _GBLK) - 1):     # every row's 256-byte blocks (_GBLK) at one step
            step, b = rows.pitch >> _GBLK, rows.start >> _GBLK
            for k in range((((rows.start & ((1 << _GBLK) - 1)) + rows.n - 1) >> _GBLK) + 1):
                sh.touched[b + k:b + k + rows.rows * step:step] = True
        else:
            first = rows.start + rows.pitch * np.arange(rows.rows)      # the blocks of each row
            b0, b1 = first >> _GBLK, (first + rows.n - 1) >> _GBLK
            for k in range(int((b1 - b0).max()) + 1):
                sh.touched[np.minimum(b0 + k, b1)] = True
        v(sh.w_agent)[...] = c
        v(sh.w_clock)[...] = PENDING
        v(sh.w_pc)[...] = ins.pc
        v(sh.w_mask)[...] = 15
        v(sh.pending)[...] = True
        sh.written = True
        key = (w.cta.cluster.cid, w.cta.rank, w.wid)
        self.inflight.setdefault(key, []).append((w.bulk_commits, sh, rows, False))

    def async_reduce(self, w, alloc, off, nb: int, ins) -> None:
        """Warp ``w`` issued a ``cp.reduce.async.bulk`` into ``nb``-byte words at byte offsets
        ``off`` of ``alloc``: each element's reduction is a relaxed.gpu atomic (PTX ISA
        9.7.9.25.4.2), so it races with no other atomic and is not recorded as a weak write; until
        a ``wait_group`` (not ``.read``) covers its bulk group it is in flight, and a weak access
        of those words by any thread races with it."""
        sh, words, _mask = self._words(alloc, off, nb)
        if sh.reducing is None:
            sh.reducing, sh.red_pc = np.zeros(len(sh.pending), np.int32), np.zeros(len(sh.pending), np.int32)
        sh.reducing[words] += 1
        sh.red_pc[words] = ins.pc
        sh.touched[words >> _GBLK] = True
        key = (w.cta.cluster.cid, w.cta.rank, w.wid)
        self.inflight.setdefault(key, []).append((w.bulk_commits, sh, words, True))

    def async_complete(self, w, done: int) -> None:
        """``cp.async.bulk.wait_group`` by ``w``: its bulk groups below ``done`` wrote."""
        key = (w.cta.cluster.cid, w.cta.rank, w.wid)
        left = []
        for group, sh, words, red in self.inflight.get(key, ()):
            if group < done and red:
                sh.reducing[words] -= 1
            elif group < done and isinstance(words, Rows):
                v = words.view
                mine = v(sh.pending) & (v(sh.w_agent) == key[0])
                v(sh.w_clock)[mine] = self.clock[self._me(w)]
                v(sh.pending)[mine] = False
            elif group < done:
                mine = sh.pending[words] & (sh.w_agent[words] == key[0])
                sh.w_clock[words[mine]] = self.clock[self._me(w)]
                sh.pending[words[mine]] = False
            else:
                left.append((group, sh, words, red))
        self.inflight[key] = left

    # -- weak accesses -------------------------------------------------------------------------
    def _words(self, alloc, off, nb):
        sh = self.shadows.get(alloc.base)
        if sh is None:
            sh = self.shadows[alloc.base] = _Shadow(alloc.nbytes)
        off = np.asarray(off, np.int64).reshape(-1)
        if nb >= 4:
            words = ((off.reshape(-1, 1) + np.arange(0, nb, 4)) >> 2).reshape(-1)
            return sh, words, np.full(len(words), 15, np.uint8)
        # a sub-word access: only the bytes it touches conflict (f16 / fp8 outputs share words)
        return sh, off >> 2, (((1 << nb) - 1) << (off & 3)).astype(np.uint8)

    def access(self, w, alloc, off, nb: int, write: bool, ins, same=None, words=None) -> None:
        """Check and record a weak access of ``nb`` bytes at byte offsets ``off`` of ``alloc``
        (``words``: their ``_words`` when the caller has them)."""
        c = self._me(w)
        sh, words, mask = words or self._words(alloc, off, nb)
        know, clock = self.know[c], self.clock[c]
        blocks = words >> _GBLK
        if sh.touched[blocks].any():        # else nothing recorded there yet: nothing to check
            if sh.pending[words].any() and (sh.w_mask[words][sh.pending[words]] & mask[sh.pending[words]]).any():
                # an async-proxy store of these bytes is still in flight
                self._inflight_race(sh, words, c, alloc, ins, "write" if write else "read")
            if sh.reducing is not None and sh.reducing[words].any():
                self._reduce_race(sh, words, c, alloc, ins, "write" if write else "read")
            self._check(sh, words, mask, c, know, "w", alloc, ins, "write" if write else "read", same if write else None)
            if write:
                self._check(sh, words, mask, c, know, "r", alloc, ins, "write", same)
        sh.touched[blocks] = True
        if write:
            sh.w_agent[words], sh.w_clock[words], sh.w_pc[words], sh.w_mask[words] = c, clock, ins.pc, mask
            sh.written = True
        else:
            sh.r_agent[words], sh.r_clock[words], sh.r_pc[words], sh.r_mask[words] = c, clock, ins.pc, mask

    @property
    def allow(self) -> frozenset:
        """Rule ids the launch opts out of (``SimBackend(allow=...)``, :mod:`cutedsl.sim.checks.rules`)."""
        return getattr(self.launch, "allow", frozenset())

    def _inflight_race(self, sh, words, c, alloc, ins, mode):
        i = int(np.flatnonzero(sh.pending[words])[0])
        word, prev = int(words[i]), int(sh.w_agent[words[i]])
        raise_unless_allowed(self.allow, "bulk-wait", 
            f"data race on global memory {alloc.base + 4 * word:#x} (allocation {alloc.tag or hex(alloc.base)}, "
            f"byte offset {4 * word}):\n"
            f"    async-proxy write (TMA store / bulk copy) by cluster {prev} at {self._where(int(sh.w_pc[word]))}\n"
            f"    {mode} by cluster {c} at {self._where(ins.pc)}\n"
            f"    while the write may still be in flight; missing: cp.async.bulk.wait_group (not .read) covering "
            f"its bulk group by the issuing thread, then a barrier or a release to the accessing thread "
            f"(PTX ISA: cp.async.bulk.wait_group; Memory Consistency Model, async proxy)" + self._seed())

    def _reduce_race(self, sh, words, c, alloc, ins, mode):
        word = int(words[int(np.flatnonzero(sh.reducing[words])[0])])
        raise_unless_allowed(self.allow, "bulk-wait",
            f"data race on global memory {alloc.base + 4 * word:#x} (allocation {alloc.tag or hex(alloc.base)}, "
            f"byte offset {4 * word}):\n"
            f"    async-proxy reduction (cp.reduce.async.bulk) at {self._where(int(sh.red_pc[word]))}\n"
            f"    weak {mode} by cluster {c} at {self._where(ins.pc)}\n"
            f"    while the reduction may still be in flight; missing: cp.async.bulk.wait_group (not .read) "
            f"covering its bulk group by the issuing thread, then a barrier or a release to the accessing "
            f"thread (PTX ISA 9.7.9.25.4.2 cp.reduce.async.bulk; cp.async.bulk.wait_group)" + self._seed())

    def _ctas_of(self, cid) -> str:
        """The CTA ids of cluster ``cid`` (for the report)."""
        for cl in getattr(self.launch, "live", ()):
            if cl.cid == cid:
                return ", ".join(str(ct.ctaid) for ct in cl.ctas)
        return "?"

    def _where(self, pc):
        code = self.launch.code
        return code[pc].where() if 0 <= pc < len(code) else "?"

    def _seed(self):
        return (f"\n    (adversarial mode, seed {self.seed}; replay with CUTEDSL_SIM_CHAOS={self.seed})"
                if self.seed is not None else "")

    def _check(self, sh, words, mask, c, know, kind, alloc, ins, mode, same):
        ag = sh.w_agent[words] if kind == "w" else sh.r_agent[words]
        prev_mask = sh.w_mask[words] if kind == "w" else sh.r_mask[words]
        other = (ag >= 0) & (ag != c) & ((prev_mask & mask) != 0)
        if not other.any():
            return
        clk = (sh.w_clock if kind == "w" else sh.r_clock)[words]
        known = np.array([know.get(int(a), 0) for a in ag[other]], np.int64)
        bad = clk[other] > known
        if not bad.any():
            return
        idx = np.flatnonzero(other)[bad]
        if same is not None:            # per word (per element of a sub-word store): see same_elements
            idx = idx[~same()[idx]]
            if not len(idx):
                return
        i = int(idx[0])
        word, prev = int(words[i]), int(ag[i])
        ppc = int((sh.w_pc if kind == "w" else sh.r_pc)[word])
        where, seed = self._where, self._seed()
        first = "write" if kind == "w" else "read"
        raise_unless_allowed(self.allow, "global-release-acquire", 
            f"data race on global memory {alloc.base + 4 * word:#x} (allocation {alloc.tag or hex(alloc.base)}, "
            f"byte offset {4 * word}):\n"
            f"    {first} by cluster {prev} at {where(ppc)}\n"
            f"    {mode} by cluster {c} (CTA {self._ctas_of(c)}) at {where(ins.pc)}\n"
            f"    are not ordered by synchronisation; missing: a release by the first cluster after its "
            f"access (st.release / red.release / atom.release, or fence.acq_rel then a relaxed store, at .gpu "
            f"scope) that the second cluster's acquire (ld.acquire / atom.acquire, or a relaxed load then "
            f"fence.acq_rel) reads before its access (PTX ISA: Memory Consistency Model, release and acquire "
            f"patterns)" + seed)


__all__ = ["GlobalHB", "classify", "STRONG"]
