"""A mixture-of-experts layer with one grouped GEMM: T tokens are routed (top-1) to E experts,
and every expert multiplies its own tokens by its own weights -- E GEMMs of different M (some
experts get no token at all) in one persistent launch.

    h[tokens of expert e] = x[tokens of expert e] @ W_up[e]          (M_e x d_model @ d_model x d_ff)

``GroupedGemm`` takes the per-expert operands as lists; its persistent CTAs walk the tiles of
all experts together, so a few busy experts and many idle ones still fill the machine.
"""
import math

import numpy as np

from cutedsl import GemmConfig, GroupedGemm

tokens, experts, d_model, d_ff = 300, 6, 128, 192
rng = np.random.default_rng()
x = rng.standard_normal((tokens, d_model), dtype=np.float32).astype(np.float16)
w_up = rng.standard_normal((experts, d_model, d_ff), dtype=np.float32).astype(np.float16)
# a skewed router: expert 5 gets nothing, expert 0 most of the tokens
route = rng.choice(experts - 1, size=tokens, p=[0.4, 0.3, 0.15, 0.1, 0.05])
order = np.argsort(route, kind="stable")                 # tokens grouped by expert
counts = np.bincount(route, minlength=experts)
starts = np.concatenate([[0], np.cumsum(counts)])

gg = GroupedGemm(GemmConfig(schedule="cooperative", tile=(128, 64, 64), epilogue=["gelu"], out_dtype="f16"))
xs = [np.ascontiguousarray(x[order[starts[e]:starts[e + 1]]]) for e in range(experts)]
hs = gg(xs, list(w_up))                                  # one launch, E problems

h = np.empty((tokens, d_ff), np.float16)
for e in range(experts):
    h[order[starts[e]:starts[e + 1]]] = hs[e]
ref = x.astype(np.float64)[:, None, :] @ w_up.astype(np.float64)[route]
ref = ref[:, 0, :]
ref = 0.5 * ref * (1 + np.vectorize(math.erf)(ref / np.sqrt(2)))        # GELU (erf)
err = np.max(np.abs(h - ref)) / np.max(np.abs(ref))
assert err < 4e-3, err
print(f"checked: {tokens} tokens over {experts} experts (tokens per expert {counts.tolist()}) in one grouped "
      f"launch, GELU fused; max rel err {err:.1e}")
