"""Blackwell's dynamic persistent scheduling: cluster launch control (CUTLASS's sm100 default).

One CTA is launched per 128 x 128 tile. A running CTA's producer warp asks the hardware to cancel
a CTA that has not started yet (clusterlaunchcontrol.try_cancel) and, when that succeeds, every
warp of the CTA runs the cancelled CTA's tile next -- so the tiles go to whichever SMs are free,
however many there are. Here the emulator plays a GPU with 2 SMs: most CTAs never start, their
tiles done by the ones that did; the result is the same bit for bit as the static schedule's.

Without a Blackwell GPU the sm_100a kernel runs on the PTX emulator."""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.sim import SimBackend

rng = np.random.default_rng()
m, n, k = 700, 500, 256                      # 6 x 4 tiles, ragged at both edges
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
emu = SimBackend(sm_count=2)                 # a 2-SM GPU: 24 CTAs launched, few run at once
clc = Gemm(GemmConfig(arch="sm_100a", tile=(128, 128, 64), tile_scheduler="clc"), emu)
d = clc(a, b)
run = emu.last_launch
static = Gemm(GemmConfig(arch="sm_100a", tile=(128, 128, 64), sm_count=2), emu)(a, b)
assert np.array_equal(d, static)             # the same tiles, the same arithmetic
err = np.max(np.abs(d - a.astype(np.float64) @ b.astype(np.float64))) / np.max(np.abs(d))
assert err < 1e-5, err
print(f"checked: sm_100a GEMM {m}x{n}x{k} with cluster launch control on a 2-SM emulator: "
      f"{run['clusters_started']} CTAs started, {run['clusters_cancelled']} cancelled and their tiles taken over; "
      f"max rel err {err:.1e}")
