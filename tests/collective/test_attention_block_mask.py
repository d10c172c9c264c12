"""Block masks from mask_mods (issue 41): the host builder against a brute-force classification of
every block, FlexAttention's count/index arrays against per-row loops, the broadcast over batch
and heads, and the device reader on the emulator; and the hooks' code in the kernel cache key."""
import importlib
import sys
import textwrap

import numpy as np
import pytest

from cutedsl.collective.attention_block_mask import (FULL, PARTIAL, SKIP, BlockMaskView, block_mask_params,
                                                     build_block_mask)
from cutedsl.collective.attention_hook_builtins import Alibi, Causal, DocumentMask, SlidingWindow, and_masks
from cutedsl.collective.attention_hooks import AttentionHooks
from cutedsl.compiler.identity import kernel_key
from cutedsl.errors import ArgumentError, HookError

PROBLEM = dict(batch=2, heads=3, seqlen_q=77, seqlen_k=101)       # no tile multiple
BM, BN = 16, 24


def head_band(batch, head, q_idx, kv_idx):
    return abs(q_idx - kv_idx) <= 8 * (head + 1)


def dense(mask_mod, args, p=PROBLEM):
    """(batch, heads, seqlen_q, seqlen_k) bool, one (b, h) at a time with scalar b, h."""
    _, mm = AttentionHooks(mask_mod=mask_mod).reference_mods(args, p)
    q, k = np.arange(p["seqlen_q"])[:, None], np.arange(p["seqlen_k"])[None, :]
    return np.array([[np.broadcast_to(mm(b, h, q, k), (p["seqlen_q"], p["seqlen_k"])) for h in range(p["heads"])]
                     for b in range(p["batch"])])


def brute_kind(keep, bm=BM, bn=BN):
    B, H, SQ, SK = keep.shape
    out = np.zeros((B, H, -(-SQ // bm), -(-SK // bn)), np.int32)
    for idx in np.ndindex(out.shape):
        b, h, i, j = idx
        blk = keep[b, h, i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]      # only pairs inside the problem
        out[idx] = FULL if blk.all() else PARTIAL if blk.any() else SKIP
    return out


def _docs(rng):
    """Two documents per sequence, split at a random token >= 48: then q block 2 (queries 32..47)
    x KV block 0 (keys 0..23) lies in document 0 below the diagonal, a FULL block for sure."""
    cut = rng.integers(48, 90, (PROBLEM["batch"], 1))
    return (np.arange(PROBLEM["seqlen_k"])[None, :] >= cut).astype(np.int32)


@pytest.mark.parametrize("name", ["causal", "window", "doc_causal", "head_band"])
@pytest.mark.parametrize("max_elements", [1 << 24, 3000])         # one evaluation, or many q-block chunks
def test_builder_matches_brute_force(name, max_elements, rng):
    args = {}
    mask = {"causal": Causal(), "window": SlidingWindow(60, 10), "head_band": head_band,
            "doc_causal": and_masks(DocumentMask(), Causal("top_left"))}[name]
    if name == "doc_causal":
        args["doc_ids"] = _docs(rng)
    bmask = build_block_mask(mask, PROBLEM, BM, BN, args, max_elements=max_elements)
    want = brute_kind(dense(mask, args))
    bm_, hm_ = bmask.shape[:2]
    # the mask's result broadcasts over what it ignores: causal/window over batch and heads
    assert (bm_, hm_) == {"causal": (1, 1), "window": (1, 1), "doc_causal": (2, 1), "head_band": (1, 3)}[name]
    assert np.array_equal(np.broadcast_to(bmask.kind, want.shape), want)
    assert {SKIP, PARTIAL, FULL} <= set(np.unique(want).tolist())
    for b, h, i in np.ndindex(want.shape[:3]):             # FlexAttention's arrays, row by row
        row = want[b, h, i]
        for kind, num, ind in ((PARTIAL, bmask.kv_num_blocks, bmask.kv_indices),
                               (FULL, bmask.full_kv_num_blocks, bmask.full_kv_indices)):
            blocks = np.nonzero(row == kind)[0]
            bb, hh = min(b, bm_ - 1), min(h, hm_ - 1)
            assert num[bb, hh, i] == len(blocks)
            assert list(ind[bb, hh, i]) == list(blocks) + [0] * (want.shape[3] - len(blocks))
            assert all(bmask.block_kind(b, h, i, int(j)) == kind for j in blocks)
    for arr in (bmask.kv_num_blocks, bmask.kv_indices, bmask.full_kv_indices):
        assert arr.dtype == np.int32 and arr.flags.c_contiguous


def test_block_skippable_and_checks():
    bmask = build_block_mask(Causal("top_left"), PROBLEM, BM, BN)
    assert bmask.shape == (1, 1, 5, 5)
    assert bmask.block_skippable(1, 2, range(0, 1), range(1, 5))      # queries 0..15 see keys < 16 only
    assert not bmask.block_skippable(1, 2, range(0, 2), range(1, 5))  # queries 16..31 see key 24
    assert bmask.block_skippable(0, 0, (0, 3), (4, 5))                 # keys 96.. after queries < 48
    bmask.check(BM, BN, PROBLEM)
    hooks = AttentionHooks(Alibi(), Causal("top_left"))     # from the hooks: the slopes are not needed
    assert np.array_equal(build_block_mask(hooks, PROBLEM, BM, BN).kind, bmask.kind)
    with pytest.raises(ArgumentError, match=r"built for \(block_m, block_n, seqlen_q, seqlen_k\) = "
                                            r"\(16, 24, 77, 101\), the kernel runs \(64, 24, 77, 101\)"):
        bmask.check(64, BN, PROBLEM)
    docs = build_block_mask(DocumentMask(), PROBLEM, BM, BN, {"doc_ids": np.zeros((2, 101), np.int32)})
    with pytest.raises(ArgumentError, match=r"covers \(batch, heads\) = \(2, 1\); the problem has \(3, 3\)"):
        docs.check(BM, BN, dict(PROBLEM, batch=3))
    with pytest.raises(ArgumentError, match=r"block_n must be a positive int \(the kernel's tile\), got 0"):
        build_block_mask(Causal(), PROBLEM, BM, 0)
    with pytest.raises(HookError, match=r"mask_mod .*<lambda> .* returned ndarray int64: a mask_mod returns a "
                                        r"predicate"):
        build_block_mask(lambda b, h, q, k: q - k, PROBLEM, BM, BN)


def test_device_reader_on_the_emulator(sim):
    """Each thread reads one (batch, head, q block) row through BlockMaskView: counts and indices
    equal the host arrays, for a mask broadcast over heads (strides 0 along heads)."""
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import GlobalPtr, If, KernelBuilder, Param, thread_idx
    from cutedsl.runtime import arrays, launch
    docs = np.sort(np.random.default_rng(3).integers(0, 4, (2, 101)), axis=1).astype(np.int32)
    bmask = build_block_mask(and_masks(DocumentMask(), Causal()), PROBLEM, BM, BN, {"doc_ids": docs})
    B, H, QB, KB = PROBLEM["batch"], PROBLEM["heads"], *bmask.shape[2:]
    assert bmask.shape[:2] == (2, 1) and bmask.strides() == (QB, 0)
    rows = B * H * QB
    kb = KernelBuilder("block_mask_reader", [Param("out", "ptr")] + block_mask_params(), block=(rows,))
    with kb.build() as a:
        t = thread_idx().signed_()
        b, h, qb = t // (H * QB), (t // QB) % H, t % QB
        view, out = BlockMaskView(a), GlobalPtr(a.out, "i32")
        r = view.row(b, h, qb)
        base = t * (2 + 2 * KB)
        for k, full in enumerate((False, True)):
            out.store(base + k, view.count(r, full))
            for i in range(KB):
                with If(view.count(r, full) > i):
                    out.store(base + 2 + k * KB + i, view.index(r, i, full))
    out = arrays.to_device(sim, np.full(rows * (2 + 2 * KB), -7, np.int32))
    launch(compile_kernel(kb), (1, 1, 1), out=out, backend=sim, **bmask.values())
    got = arrays.to_host(out).reshape(B, H, QB, 2 + 2 * KB)
    for idx in np.ndindex(B, H, QB):
        b, _, q = idx
        n, nf = bmask.kv_num_blocks[b, 0, q], bmask.full_kv_num_blocks[b, 0, q]
        assert list(got[idx][:2]) == [n, nf]
        assert list(got[idx][2:2 + n]) == list(bmask.kv_indices[b, 0, q, :n])
        assert list(got[idx][2 + KB:2 + KB + nf]) == list(bmask.full_kv_indices[b, 0, q, :nf])
        assert np.all(got[idx][2 + n:2 + KB] == -7)          # nothing read past the count


# -- the hooks' code in the cache key --------------------------------------------------------

def _key(score_mod=None, mask_mod=None):
    return kernel_key("attention", {"hooks": AttentionHooks(score_mod, mask_mod).identity()})[0]


def test_editing_a_hook_function_changes_the_key(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    src = textwrap.dedent("""
        def bias(score, batch, head, q_idx, kv_idx):
            return score + (q_idx - kv_idx) * {c}

        class Band:
            pass
        """)
    keys = []
    for c in ("0.5", "0.5", "0.25"):
        (tmp_path / "user_hooks.py").write_text(src.format(c=c))
        monkeypatch.delitem(sys.modules, "user_hooks", raising=False)
        importlib.invalidate_caches()
        keys.append(_key(importlib.import_module("user_hooks").bias))
    assert keys[0] == keys[1] != keys[2]


def test_file_less_hooks_closures_and_fields_change_the_key():
    def exec_fn(body):
        ns = {}
        exec(f"def m(batch, head, q_idx, kv_idx):\n    return {body}\n", ns)     # no source file
        return ns["m"]
    assert _key(mask_mod=exec_fn("q_idx >= kv_idx")) == _key(mask_mod=exec_fn("q_idx >= kv_idx"))
    assert _key(mask_mod=exec_fn("q_idx >= kv_idx")) != _key(mask_mod=exec_fn("q_idx > kv_idx"))

    def window(w):
        def mask(batch, head, q_idx, kv_idx):
            return abs(q_idx - kv_idx) <= w
        return mask
    assert _key(mask_mod=window(64)) == _key(mask_mod=window(64))
    assert _key(mask_mod=window(64)) != _key(mask_mod=window(65))            # a closure constant
    assert _key(mask_mod=SlidingWindow(3, 0)) != _key(mask_mod=SlidingWindow(4, 0))   # a built-in's field
    assert _key(mask_mod=and_masks(window(8), Causal())) != _key(mask_mod=and_masks(window(9), Causal()))
    assert _key(mask_mod=Causal()) != _key(mask_mod=Causal("top_left"))
    assert _key(mask_mod=Causal()) != _key(mask_mod=Causal(), score_mod=lambda s, b, h, q, k: s * 2)


def test_editing_a_hook_class_changes_the_key(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    src = textwrap.dedent("""
        from cutedsl.collective.attention_hooks import ScoreMod

        class Scale(ScoreMod):
            def __init__(self, k):
                self.k = k

            def score_mod(self, score, batch, head, q_idx, kv_idx):
                return score * self.k + {c}
        """)
    keys = []
    for c, k in (("1.0", 2.0), ("1.0", 3.0), ("2.0", 2.0)):
        (tmp_path / "user_cls_hooks.py").write_text(src.format(c=c))
        monkeypatch.delitem(sys.modules, "user_cls_hooks", raising=False)
        importlib.invalidate_caches()
        keys.append(_key(importlib.import_module("user_cls_hooks").Scale(k)))
    assert len(set(keys)) == 3              # the instance's state and the class's source both count
