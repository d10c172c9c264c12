"""Stream-K: when the output tiles do not fill whole waves of SMs, share K between the CTAs.

12 output tiles of 128 x 128 on 5 SMs are 3 waves data-parallel, the last one 2/5 full.
``decomposition="stream-k"`` runs one wave data-parallel and divides the k-iterations of the
other 7 tiles evenly over all 5 CTAs; the pieces of a split tile are added in a fixed order
through a workspace the ``Gemm`` keeps (so two runs give the same bits), and the CTA holding
a tile's last piece runs the epilogue. On a machine without a GPU this runs the compiled
kernel on the emulator, every CTA resident at once (they wait on each other).
"""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.collective.stream_k import decompose
from cutedsl.problem import GemmProblem

m, n, k = 400, 300, 64 * 24 + 5            # 4 x 3 tiles, 25 k-tiles (the last partial)
rng = np.random.default_rng()
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)

for decomposition in ("data-parallel", "stream-k"):
    cfg = GemmConfig(schedule="cooperative", tile=(128, 128, 64), sm_count=5, decomposition=decomposition)
    gemm = Gemm(cfg)
    # the data-parallel schedule walks whole tiles: the same model, mode data-parallel
    plan = (gemm.kernel.scheduler.decompose(GemmProblem(m, n, k)) if decomposition != "data-parallel"
            else decompose("data-parallel", 12, 25, 5))
    d = gemm(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
    assert err < 2e-5, err
    if plan.mode == "data-parallel":
        print(f"data-parallel: {plan.tiles} tiles on 5 SMs, busiest SM runs {max(plan.busy())} k-iterations "
              f"(model utilisation {plan.utilisation():.0%}); checked: max rel err {err:.1e}")
        continue
    assert np.array_equal(d, gemm(a, b))  # the reduction order is fixed: same bits every run
    print(f"stream-k: {plan.dp_tiles} tiles whole, {plan.sk_tiles} split into {plan.sk_units} even ranges; "
          f"busiest SM runs {max(plan.busy())} k-iterations (model utilisation {plan.utilisation():.0%}); "
          f"checked: max rel err {err:.1e}, bit-identical on a second run")
