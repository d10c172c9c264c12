"""The target architecture: the one place for per-architecture numbers (no MLIR imported).

An :class:`Arch` owns the toolchain target (MLIR ``nvvm-attach-target`` chip and PTX features,
``ptxas -arch``), the per-CTA shared-memory capacity, register budgets, the warp and warpgroup
sizes, cluster limits and which atom families exist. Configs name it (``"sm_90a"``), kernels and
collectives receive the object and read these numbers from it instead of writing them down.
Adding an architecture is a new :class:`Arch` value plus the atoms it lists (sm_100a: tcgen05
and tensor memory instead of wgmma).

Sources: CUDA C++ Programming Guide, "Compute Capabilities" (sm_90: 227 KiB of shared memory
per CTA opt-in, 64 K 32-bit registers per SM, 255 per thread, 1024 threads per CTA, portable
cluster size 8, 16 with the non-portable opt-in); PTX ISA "setmaxnreg" (24..256, multiples of
8); CUTLASS 3.x sm90 warp-specialized kernels (producer 40 / consumer 232 registers);
FlashAttention-3's sm_90a forward (producer 24 / MMA warpgroups 240); flash-attn-4's sm_100a forward (setmaxnreg 184 softmax / 80 correction / 64 other).
"""
from __future__ import annotations

import attrs

from .errors import ConfigError


@attrs.frozen
class Arch:
    """Numbers and capabilities of one target (see the module docstring). Sizes in bytes,
    threads or 32-bit registers."""
    name: str                       #: config spelling, e.g. ``"sm_90a"``
    chip: str                       #: MLIR nvvm-attach-target chip and ``ptxas -arch``
    ptx_features: str               #: MLIR nvvm-attach-target features (PTX ISA version)
    smem_per_cta: int               #: opt-in dynamic shared memory per CTA
    regs_per_sm: int                #: 32-bit registers per SM
    max_regs_per_thread: int        #: what ptxas may give one thread
    max_threads_per_cta: int
    warp_threads: int
    warpgroup_threads: int          #: threads of the warpgroup an MMA atom is issued by
    max_cluster_ctas: int           #: portable cluster size
    producer_regs: int              #: ``setmaxnreg.dec`` target of a TMA producer warpgroup
    consumer_regs: int              #: ``setmaxnreg.inc`` target of an MMA consumer warpgroup
    atoms: frozenset                #: atom families the target has
    #: ``setmaxnreg`` targets of a tensor-memory attention forward's roles: (softmax, correction,
    #: other) warpgroups -- FlashAttention-4's sm_100a budgets; None where no such kernel exists
    attention_regs: tuple | None = None
    #: ``setmaxnreg`` targets of a WGMMA attention's roles: (MMA warpgroups, producer warpgroup) --
    #: FlashAttention-3's sm_90a budgets (two 64-row MMA warpgroups hold S, P and O in registers);
    #: None where the target has no WGMMA
    attention_wgmma_regs: tuple | None = None

    @property
    def warps_per_warpgroup(self) -> int:
        return self.warpgroup_threads // self.warp_threads

    def launch_regs(self, threads: int) -> int:
        """Registers per thread (``.maxnreg``) that lets one CTA of ``threads`` threads be
        resident: ``regs_per_sm // threads``, at most :attr:`max_regs_per_thread`, rounded down
        to the allocation unit of 8. The clamp matters at 256 threads and fewer: 65536 / 256 is
        256, past ptxas' per-thread ceiling of 255, and ptxas ignores such a ``.maxnreg``
        altogether ("Too many maxnreg specified ... will be ignored"); 255 rounds down to 248."""
        return min(self.regs_per_sm // threads, self.max_regs_per_thread) // 8 * 8

    def require(self, atom: str, who: str = "this kernel") -> None:
        """``ConfigError`` unless the target has atom family ``atom``."""
        if atom not in self.atoms:
            raise ConfigError(f"{who} needs {atom}, which {self.name} does not have "
                              f"(it has {', '.join(sorted(self.atoms))})")


SM90A = Arch(name="sm_90a", chip="sm_90a", ptx_features="+ptx83", smem_per_cta=232448, regs_per_sm=65536,
             max_regs_per_thread=255, max_threads_per_cta=1024, warp_threads=32, warpgroup_threads=128,
             max_cluster_ctas=8, producer_regs=40, consumer_regs=232,
             atoms=frozenset({"tma", "tma_multicast", "mbarrier", "wgmma", "stmatrix", "setmaxnreg", "cluster",
                              "named_barrier", "red_f16x2"}),
             attention_wgmma_regs=(240, 24))

#: Blackwell (B200/GB200): no wgmma; tcgen05 MMAs with the accumulator in tensor memory (128 lanes x
#: 512 columns of 32 bits per CTA); the same 227 KiB of shared memory and 64 K registers per SM.
#: PTX ISA 8.6 is the first with tcgen05 (LLVM 22's NVVM lowering needs it for sm_100a); 8.8 for
#: the block-scaled MMA's ``.block16`` vector (NVFP4), which LLVM 22 cannot select below it.
SM100A = Arch(name="sm_100a", chip="sm_100a", ptx_features="+ptx88", smem_per_cta=232448, regs_per_sm=65536,
              max_regs_per_thread=255, max_threads_per_cta=1024, warp_threads=32, warpgroup_threads=128,
              max_cluster_ctas=8, producer_regs=40, consumer_regs=232,
              atoms=frozenset({"tma", "tma_multicast", "mbarrier", "tcgen05", "tmem", "stmatrix", "setmaxnreg",
                               "cluster", "named_barrier", "red_f16x2"}),
              attention_regs=(184, 80, 64))

#: SMs assumed when no device reports its count (H100 SXM): persistent grids, the emulator's residency
DEFAULT_SM_COUNT = 132

ARCHS = {a.name: a for a in (SM90A, SM100A)}
DEFAULT = SM90A


def get_arch(arch) -> Arch:
    """The :class:`Arch` named ``arch`` (or ``arch`` itself); ``ConfigError`` naming the known ones."""
    if isinstance(arch, Arch):
        return arch
    a = ARCHS.get(arch)
    if a is None:
        raise ConfigError(f"arch must be one of {', '.join(map(repr, ARCHS))}, got {arch!r}")
    return a
