"""FlexAttention-style hooks on the FlashAttention-3-style kernel: a score_mod written as a plain
Python function and a mask_mod built from the built-ins, given to the config.

The same hook bodies run three ways: as IR inside the kernel (per element of S, between
``Q K^T`` and the softmax), on numpy for the float64 reference, and on numpy on the host to
build the block mask that lets the kernel skip whole KV blocks. The document ids the mask reads
are a keyword argument of the call, as a GEMM epilogue's bias is.
"""
import ml_dtypes
import numpy as np

from cutedsl import Attention, AttentionConfig
from cutedsl.collective.attention_hook_builtins import Causal, DocumentMask, and_masks
from cutedsl.collective.attention_hook_ops import minimum
from cutedsl.problem import AttentionProblem


def distance_bias(score, batch, head, q_idx, kv_idx):
    """ALiBi-like: a per-head penalty on the query-key distance, clamped at 128 tokens."""
    return score - minimum(abs(q_idx - kv_idx), 128) * (0.02 * (head + 1))


rng = np.random.default_rng(0)
batch, seqlen, heads, d = 2, 300, 2, 64
q, k, v = (rng.standard_normal((batch, seqlen, heads, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
# two documents packed into each sequence: a token attends earlier tokens of its own document
doc_ids = np.repeat(np.arange(2), [260, 40])[None].repeat(batch, 0).astype(np.int32)

cfg = AttentionConfig(head_dim=d, score_mod=distance_bias, mask_mod=and_masks(DocumentMask(), Causal()))
attn = Attention(cfg)                       # a Hopper GPU if present, else the PTX emulator
o, lse = attn(q, k, v, doc_ids=doc_ids)
ref_o, ref_lse = attn.reference(q, k, v, doc_ids=doc_ids)     # float64, the same hooks on numpy
err = np.abs(o.astype(np.float64) - ref_o).max()
assert err < 2e-2 and np.abs(lse - ref_lse).max() < 1e-4, err

# the kernel's block mask for this call: per (batch, head, query block), each KV block 0 (skipped),
# 1 (masked per element) or 2 (run unmasked)
problem = AttentionProblem(batch, seqlen, seqlen, heads, heads, d)
kinds = cfg.kernel().block_mask(problem, args={"doc_ids": doc_ids}).kind
print(f"checked document mask + causal + distance bias, {batch}x{seqlen}x{heads}x{d} bf16: max |O - ref| "
      f"{err:.1e}; KV blocks per query block skipped {np.mean(kinds == 0):.0%}, run unmasked "
      f"{np.mean(kinds == 2):.0%}")
