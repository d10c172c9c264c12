"""The attention backward's dQ staging (collective/attention_bwd_dq.py): the fragment-order
permutation is a bijection whose inverse matches the WGMMA D fragment, each warp's vector stores
cover one contiguous 512-byte run per register group (no bank conflicts), and on the emulator the
kernel without the staging buffer's ``wait_group.read`` is reported as a race (planted bug)."""
import numpy as np
import pytest

from cutedsl.atom.wgmma import fragment_coords
from cutedsl.collective.attention_bwd_dq import VEC, DqStaging


@pytest.mark.parametrize("d", [64, 128])
def test_slot_of_inverts_the_fragment(d):
    st = DqStaging.for_kernel(d, 64, "bf16")
    seen = np.zeros(64 * d, int)
    for c in range(st.chunks):
        for t in range(st.threads):
            for i in range(st.groups * VEC):
                r, col = fragment_coords(t, i)
                slot = st.slot(t, i, c)
                assert st.slot_of(r, col + c * st.chunk_cols) == slot
                seen[slot] += 1
    assert (seen == 1).all()                       # every element of the block exactly once
    assert st.nbytes == 64 * d * 4 and st.nbytes % 16 == 0


def test_each_warp_store_is_one_contiguous_run():
    """Lane l of warp w stores 16 bytes at 16 l past a common base for every (chunk, group):
    32 lanes x 16 B = one 512-byte run, every bank used equally (conflict-free)."""
    st = DqStaging.for_kernel(128, 64, "bf16")
    for c in range(st.chunks):
        for g in range(st.groups):
            for w in range(4):
                starts = [st.slot(32 * w + lane, g * VEC, c) * 4 for lane in range(32)]
                assert starts == list(range(starts[0], starts[0] + 512, 16))


def test_bad_chunk_is_refused():
    with pytest.raises(ValueError, match="head_dim 96 must be a multiple of the chunk width 64"):
        DqStaging(96, 64, 64, 128, 32)


@pytest.mark.sim_kernel
def test_missing_wait_before_restaging_is_a_race(rng, monkeypatch):
    """Planted bug: without the dQ writer's ``cp.async.bulk.wait_group.read`` before it hands the
    staging buffer back to the MMA warpgroup, the next block's ``st.shared.v4.f32`` races with the
    bulk reduction's read of it (reported in an eager run)."""
    import ml_dtypes
    from cutedsl import AttentionBackward, AttentionConfig
    from cutedsl.collective import attention_bwd_mainloop as ml
    from cutedsl.device.attention_reference import attention_reference
    from cutedsl.sim import Emulator, RaceError
    import sys
    real = ml.bulk_wait_group

    def skip_in_loop(n=0, read=True):
        if sys._getframe(1).f_code.co_name != "write_dq":      # the writer's per-block wait only
            real(n, read)
    monkeypatch.setattr(ml, "bulk_wait_group", skip_in_loop)
    monkeypatch.setenv("CUTEDSL_CACHE", "off")     # the cache keys source, not a patched function
    bf = ml_dtypes.bfloat16
    q, k, v, do = (rng.standard_normal(s).astype(bf) for s in ((1, 130, 1, 64), (1, 40, 1, 64), (1, 40, 1, 64),
                                                                (1, 130, 1, 64)))
    o, lse = attention_reference(q, k, v)
    bw = AttentionBackward(AttentionConfig(head_dim=64), Emulator().backend)
    with pytest.raises(RaceError, match=r"(?s)data race on shared memory.*cp\.reduce\.async\.bulk.*st\.shared\.v4\.f32"):
        bw(do, q, k, v, o.astype(bf), lse.astype(np.float32))
