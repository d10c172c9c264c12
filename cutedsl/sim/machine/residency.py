"""How many clusters of a launch the emulator keeps live at once (as the GPU keeps every CTA
that fits resident), and the emulator memory one cluster needs (checked before allocating).
:mod:`cutedsl.sim.machine.scheduler` admits clusters in launch order up to this count."""
from __future__ import annotations

from ..frontend.errors import SimLaunchError
from ..frontend.limits import fmt_bytes, warp_bytes

#: per-SM resources of sm_90 (CUDA occupancy rules): CTAs, threads, shared memory, registers
SM_CTAS, SM_THREADS, SM_SMEM, SMEM_RESERVED, SM_REGS = 32, 2048, 233472, 1024, 65536
#: emulator bytes per shared-memory byte of a CTA with race checks (shared memory + its shadow)
_SHADOW_FACTOR = 13


def cluster_bytes(program, nthreads: int, ncl: int, smem_total: int, race_check: bool, memory_bytes: int) -> int:
    """Emulator memory of one cluster's live CTAs (register files, local memory, shared memory
    and its race-check shadow), in bytes; ``SimLaunchError`` when it exceeds ``memory_bytes``
    (``SimLimits.memory_bytes``), before anything is allocated."""
    p = program
    per_warp = warp_bytes(p.nregs, p.local_size, getattr(p, "callparam_size", 0))
    per_cta = -(-nthreads // 32) * per_warp + smem_total * (1 + (_SHADOW_FACTOR if race_check else 0))
    need = ncl * per_cta
    if need > memory_bytes:
        raise SimLaunchError(
            f"kernel {p.name!r}: {ncl} CTA(s) of {nthreads} threads would need {fmt_bytes(need)} of emulator "
            f"memory ({sum(p.nregs.values())} registers, {p.local_size} local bytes per thread, "
            f"{smem_total} shared bytes per CTA); the limit is {fmt_bytes(memory_bytes)} "
            f"(SimLimits.memory_bytes)")
    return need


def resident_clusters(program, nthreads: int, ncl: int, smem_total: int, sm_count: int, per_cluster: int,
                      memory_bytes: int) -> tuple:
    """``(clusters live at once, "hardware" | "memory")``: what ``sm_count`` SMs hold (CTAs,
    threads, shared memory with 1 KiB reserved per CTA, registers at ``.maxnreg``), capped by
    ``memory_bytes`` for ``per_cluster`` bytes each; at least one."""
    per_sm = min(SM_CTAS, SM_THREADS // max(nthreads, 1), SM_SMEM // (smem_total + SMEM_RESERVED))
    mx = program.directives.get("maxnreg")
    if mx:
        per_sm = min(per_sm, SM_REGS // (int(mx[0] if isinstance(mx, (tuple, list)) else mx) * nthreads))
    hw = max(1, sm_count * max(per_sm, 1) // ncl)
    limit = "hardware" if hw * per_cluster <= memory_bytes else "memory"
    return max(1, min(hw, memory_bytes // max(per_cluster, 1))), limit
