"""Deadlock and livelock reports of an emulator launch (:class:`cutedsl.sim.machine.scheduler.Launch`):
every blocked lane group of the live clusters with what it waits for, spinning loops with
their PTX lines, and how many clusters still wait to become resident."""
from __future__ import annotations

import numpy as np


def _lanes_text(mask):
    idx = np.flatnonzero(mask).tolist()
    if not idx:
        return "no lanes"
    runs, s, p = [], idx[0], idx[0]
    for x in idx[1:] + [None]:
        if x is not None and x == p + 1:
            p = x
            continue
        runs.append(f"{s}" if s == p else f"{s}-{p}")
        if x is not None:
            s = p = x
    return "lanes " + ",".join(runs)


def loop_of(launch, pc) -> set:
    """PCs of the innermost loop around ``pc`` (a later ``bra`` back to ``pc`` or before),
    for reports of warps that yield inside it (a spinning acquire load)."""
    for j in range(pc, min(len(launch.code), pc + 64)):
        t = getattr(launch.code[j], "info", None)
        if isinstance(t, int) and t <= pc and launch.code[j].text.lstrip("@%!p0123456789 ").startswith("bra"):
            return {t, j}
    return set()


def report(launch, live, livelock=False, head=True):
    """The blocked lane groups of the live clusters ``live`` (a list, or one cluster), and how
    many clusters of the launch are still waiting to become resident."""
    live = live if isinstance(live, list) else [live]
    text = ("livelock: the warps spin in loops that change neither memory nor barriers, and their "
            "state repeats" if livelock else
            "deadlock: no warp can make progress and no asynchronous operation is pending")
    where = (f"cluster {live[0].cid} ({len(live[0].ctas)} CTA{'s' if len(live[0].ctas) > 1 else ''})"
             if len(live) == 1 else f"clusters {', '.join(str(c.cid) for c in live)} (all resident)")
    lines = [f"{text} in kernel {launch.program.name!r}, {where}, after {launch.insts} warp-instructions"
             + launch._seed_note()] if head else []
    waiting = (getattr(launch, "clusters_total", 0) - getattr(launch, "clusters_started", 0)
               - len(getattr(launch, "cancelled", ())))
    if waiting > 0:
        lines.append(f"{waiting} more cluster(s) of the launch cannot become resident until one of these "
                     f"exits ({launch.resident} live at once: {launch.sm_count} SMs"
                     + (", capped by SimLimits.memory_bytes" if getattr(launch, "resident_limit", "") == "memory"
                        else "") + "): a wait on one of them never ends")
    for c in (c for cl in live for c in cl.ctas):
        blocked = [(w, g) for w in c.warps if not w.done for g in w.groups]
        if not blocked:
            continue
        lines.append(f"CTA {c.ctaid} (cluster rank {c.rank}):")
        for w, g in blocked:
            ins = launch.code[g.pc]
            lines.append(f"  warp {w.wid} {_lanes_text(g.mask)} at {ins.where()}")
            b = g.blocked
            if b is not None:
                lines.append(f"      waits for: {b.describe()}")
                bar = getattr(b, "bar", None)
                log = bar.history() if hasattr(bar, "history") else None
                if log:
                    lines.append("      barrier history: " + "; ".join(log[-6:]))
            elif livelock:
                pcs = sorted(w.spin_pcs | {g.pc} | loop_of(launch, g.pc))
                lo, hi = launch.code[pcs[0]], launch.code[pcs[-1]]
                srcs = sorted({launch.code[p].src for p in range(pcs[0], pcs[-1] + 1)} - {""})
                src = f"; {', '.join(srcs[:4])}{', ...' if len(srcs) > 4 else ''}" if srcs else ""
                lines.append(f"      spinning (PTX lines {lo.line}-{hi.line}{src})" if hi.line > lo.line
                             else f"      spinning{f' ({src[2:]})' if src else ''}")
        done = [w.wid for w in c.warps if w.done]
        if done:
            lines.append(f"  exited warps: {done}")
    return "\n".join(lines)
