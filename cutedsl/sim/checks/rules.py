"""The race detectors' rules: each verdict comes from one rule of the PTX ISA, named in the report
with its section, and each rule has a narrow opt-out (``SimBackend(allow=("rule-id", ...))``) for
code that ships breaking it (docs/emulator.md, "Rules and opt-outs"). ``race_check=False`` stays
the blunt switch that turns every rule off.

Section numbers follow the PTX ISA 8.8 / 9.0 document (chapter 8 is the memory consistency
model; 9.7.13 parallel synchronisation, 9.7.15 wgmma, 9.7.16 tcgen05).
"""
from __future__ import annotations

from ..frontend.errors import RaceError


class Rule:
    __slots__ = ("id", "isa", "missing")

    def __init__(self, rid: str, isa: str, missing: str):
        self.id, self.isa, self.missing = rid, isa, missing


_R = [
    Rule("barrier", "8.8 Release and Acquire Patterns; 9.7.13.1 bar, barrier; 9.7.13.15.16 mbarrier.test_wait/"
         "try_wait; 9.7.13.3 barrier.cluster",
         "a barrier between the two threads: bar.sync/barrier.sync (count), mbarrier arrive -> try_wait, "
         "or barrier.cluster"),
    Rule("proxy-fence", "8.6 Proxies; 9.7.13.4 membar/fence (fence.proxy.async); 9.7.15.4 Async Proxy",
         "a fence.proxy.async after the generic-proxy write (by the writer, or by a thread that observed it "
         "through a barrier) and before the async-proxy read"),
    Rule("wgmma-warpgroup-barrier", "9.7.15.5.2 wgmma.mma_async (.sync waits for the threads of one warp only; "
         ".aligned is a requirement, not a synchronisation); 8.6 Proxies",
         "a barrier across the warpgroup (e.g. bar.sync id, 128) after every writing warp's fence.proxy.async "
         "and before the wgmma.mma_async: each issuing warp must be ordered after the write -- here only some "
         "of them are"),
    Rule("tma-complete", "9.7.9.27 (bulk and tensor copies) cp.async.bulk.tensor (complete_tx::bytes); 9.7.13.15.16 mbarrier.test_wait/"
         "try_wait",
         "an mbarrier try_wait/test_wait observing the phase that this TMA load's complete_tx completes, "
         "before the access"),
    Rule("async-store-complete", "9.7.9 (data movement) st.async; 9.7.13 clusterlaunchcontrol.try_cancel; 9.7.13.15.16 mbarrier.test_wait/"
         "try_wait",
         "an mbarrier try_wait/test_wait observing the phase that this write's complete_tx completes, "
         "before the access"),
    Rule("wgmma-wait", "9.7.15.7.3 wgmma.wait_group; 9.7.15.5.2 wgmma.mma_async",
         "a wgmma.wait_group covering that wgmma group (in any warp of the warpgroup), then a release -> "
         "acquire (mbarrier arrive -> wait, or a barrier) to the writer"),
    Rule("bulk-wait", "9.7.9.27.2.2 cp.async.bulk.wait_group",
         "a cp.async.bulk.wait_group.read covering that bulk group by the issuing thread, then a release -> "
         "acquire to the writer"),
    Rule("cp-async-wait", "9.7.9 (data movement) cp.async.wait_group / cp.async.wait_all; 9.7.13.15 "
         "cp.async.mbarrier.arrive",
         "cp.async.wait_group / wait_all (or cp.async.mbarrier.arrive) by the issuing thread, then a barrier"),
    Rule("tcgen05-commit", "9.7.16.6.4.2 / 9.7.16.6.4.4 tcgen05 memory consistency (non-pipelined "
         "instructions); tcgen05.commit",
         "a tcgen05.commit by the thread that issued the tcgen05 operation, and a wait on its mbarrier "
         "observing the phase the commit completes, before the access"),
    Rule("tcgen05-ld-without-wait", "9.7.16.6.4.2 / 9.7.16.6.4.4 tcgen05 memory consistency (non-pipelined "
         "instructions); 9.7.16.8.5 tcgen05.wait",
         "a tcgen05.wait::ld by the loading warp after its tcgen05.ld, then a release -> acquire (e.g. "
         "mbarrier arrive -> wait) to the other access (in the same warp: the wait before it) -- with strict "
         "tcgen05 fences, and a tcgen05.fence::after_thread_sync after that acquire when the other access is a "
         "tcgen05 operation"),
    Rule("tcgen05-st-without-wait", "9.7.16.6.4.2 / 9.7.16.6.4.4 tcgen05 memory consistency (non-pipelined "
         "instructions); 9.7.16.8.5 tcgen05.wait",
         "a tcgen05.wait::st by the storing warp after its tcgen05.st, then a release -> acquire to the other "
         "access (in the same warp: the wait before it)"),
    Rule("mbarrier-init", "9.7.13.15.9 mbarrier.init; 9.7.13.4 membar/fence (fence.mbarrier_init)",
         "fence.mbarrier_init (or a release) and a barrier between the init and other threads' uses"),
    Rule("same-instruction-lanes", "8 Memory Consistency Model (two writes of one instruction to one location: "
         "which one lands is undefined)", "one lane per location"),
    Rule("global-release-acquire", "8.8 Release and Acquire Patterns; 8.7 Morally strong operations",
         "a release by the first cluster after its access (st.release / red.release / atom.release, or "
         "fence.acq_rel then a relaxed store, at .gpu scope) that the second cluster's acquire (ld.acquire / "
         "atom.acquire, or a relaxed load then fence.acq_rel) reads before its access"),
]
RULES = {r.id: r for r in _R}

#: the happens-before edge a report names (hb.Shadow) -> its rule
EDGE_RULE = {"warp": "barrier", "proxy": "proxy-fence", "tma": "tma-complete", "asyncst": "async-store-complete",
             "wgmma": "wgmma-wait", "bulk": "bulk-wait", "cpasync": "cp-async-wait", "tcgen05": "tcgen05-commit",
             "tcgen05ld": "tcgen05-ld-without-wait", "tcgen05st": "tcgen05-st-without-wait",
             "wgmma-warpgroup": "wgmma-warpgroup-barrier"}


def check_allow(allow) -> frozenset:
    """``allow`` (an iterable of rule ids) as a frozenset; ``ValueError`` naming the ids for an
    unknown one (the backend turns it into its ArgumentError)."""
    if allow is None:
        return frozenset()
    if isinstance(allow, str):
        allow = (allow,)
    out = frozenset(allow)
    bad = sorted(str(a) for a in out if a not in RULES)
    if bad:
        raise ValueError(f"allow: unknown race rule {bad[0]!r}; the rules are {', '.join(RULES)}")
    return out


def cite(rid: str) -> str:
    """The report's last line: the rule, its ISA sections and its opt-out."""
    r = RULES[rid]
    return (f"\n    rule {r.id} (PTX ISA {r.isa}); code that ships this pattern can opt out of this rule "
            f"alone with SimBackend(allow=({r.id!r},))")


def raise_unless_allowed(allow, rid: str, message: str) -> None:
    """Raise ``RaceError(message + cite(rid))`` unless rule ``rid`` is in ``allow``."""
    if rid not in allow:
        raise RaceError(message + cite(rid))


__all__ = ["RULES", "EDGE_RULE", "Rule", "check_allow", "cite", "raise_unless_allowed"]
