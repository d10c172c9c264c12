"""Launch limits of the emulator's scheduler (:mod:`cutedsl.sim.machine.scheduler`): the default
instruction budget, wall-clock and progress limits (each overridable by its environment
variable, validated by :mod:`cutedsl.envvars`), the grid/block/cluster dimension check, and the
refusal of a grid too large to finish within the time limit (:class:`GridTooLarge`)."""
from __future__ import annotations

from ... import envvars
from ..frontend.errors import GridTooLarge, SimLaunchError

DEFAULT_BUDGET = 200_000_000
#: default wall-clock limit per launch in seconds (env CUTEDSL_SIM_TIME_LIMIT overrides): long
#: enough for a 4096^3 GEMM's worth of emulation on a laptop, short enough for interactive use
DEFAULT_TIME_LIMIT = 60.0
#: warp-instructions a launch may execute with no progress (synchronisation, warp exit, cluster
#: start) before it is a livelock (env CUTEDSL_SIM_PROGRESS_LIMIT overrides): a few seconds of
#: emulation; the project's kernels synchronise every few hundred instructions
DEFAULT_PROGRESS_LIMIT = 2_000_000
#: what a load/store at a repeated address adds to the no-progress stretch (its emulation cost
#: relative to a register instruction, measured with race checks on: ~20 us vs ~1 us)
STALE_WEIGHT = 16
#: lower bounds of what the emulator spends per CTA / per warp / per cluster cancelled by cluster
#: launch control, even for an empty kernel (measured 2026-11-28: ~90 us per one-warp CTA, ~47 us
#: per warp; the bounds leave ~10x for faster machines) -- the launch-size check's estimate
MIN_CTA_SECONDS, MIN_WARP_SECONDS, MIN_CANCELLED_SECONDS = 5e-6, 4e-6, 2e-7


def _env(name):
    try:
        return envvars.get(name)
    except envvars.EnvVarError as e:
        raise SimLaunchError(str(e)) from None


def default_time_limit():
    """``CUTEDSL_SIM_TIME_LIMIT`` (validated by :mod:`cutedsl.envvars`) or the default."""
    t = _env("CUTEDSL_SIM_TIME_LIMIT")
    return DEFAULT_TIME_LIMIT if t is None else t


def default_initcheck() -> bool:
    """``CUTEDSL_SIM_INITCHECK`` (a switch) or on."""
    v = _env("CUTEDSL_SIM_INITCHECK")
    return True if v is None else v


def default_progress_limit():
    """``CUTEDSL_SIM_PROGRESS_LIMIT`` or the default."""
    n = _env("CUTEDSL_SIM_PROGRESS_LIMIT")
    return DEFAULT_PROGRESS_LIMIT if n is None else n


def launch_dims(d, name):
    d = tuple(int(x) for x in (tuple(d) + (1, 1, 1))[:3]) if not isinstance(d, int) else (int(d), 1, 1)
    if any(x < 1 for x in d):
        raise SimLaunchError(f"{name} dimensions must be >= 1, got {d}")
    return d


def check_grid_fits(self, nthreads: int, ncl: int) -> None:
    """Refuse, for launch ``self`` (a :class:`~cutedsl.sim.machine.scheduler.Launch`), before anything runs, a grid the emulator cannot finish within ``time_limit``
    even if every CTA exited at once (its per-CTA cost has a floor; clusters that cluster
    launch control may cancel cost only their skipping)."""
    nctas = self.grid[0] * self.grid[1] * self.grid[2]
    if any(i.opcode.startswith("clusterlaunchcontrol") for i in self.program.code):
        floor, why = nctas // ncl * MIN_CANCELLED_SECONDS, "cancelled cluster"
    else:
        floor = nctas * (MIN_CTA_SECONDS + MIN_WARP_SECONDS * ((nthreads + 31) // 32))
        why = f"CTA of {nthreads} threads"
    if floor > self.time_limit:
        raise GridTooLarge(
            f"grid {self.grid} ({nctas} CTAs) of kernel {self.program.name!r} cannot finish within the "
            f"emulator's wall-clock limit of {self.time_limit:g} s: even an empty kernel takes at least "
            f"{floor:.3g} s at that size (>= {floor / nctas * 1e6:.2g} us per {why}); launch a smaller grid, "
            f"or raise the limit (SimBackend(time_limit=...) / CUTEDSL_SIM_TIME_LIMIT)")
