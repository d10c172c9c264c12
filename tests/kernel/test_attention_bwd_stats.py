"""The attention backward's preprocess (cutedsl/kernel/attention_bwd_prepost.py) on the emulator: the
padded stats workspace the dK/dV kernel's producer copies one 512-byte slab of per query block --
LSE * log2 e then D = rowsum(dO * O), 0 on the rows past the sequence, one slab per (head, query
block of a sequence) at the slab the dK/dV kernel and the postprocess compute, nothing else
written -- for dense and packed (varlen, with an empty sequence) problems that are not block
multiples; and the bulk-load atom's refusal of a size the ISA forbids."""
import math

import ml_dtypes
import numpy as np
import pytest

from cutedsl.runtime import arrays
from cutedsl.runtime.binding import Binding
from cutedsl.kernel.attention_bwd_prepost import AttentionBwdPreprocessKernel

BM = 64
LOG2E = np.float32(1.0 / math.log(2.0))


def _run(sim, kern, grid, **values):
    ck = kern.compile()
    b = Binding(sim, ck)
    out = None
    for name, val in values.items():
        if isinstance(val, np.ndarray):
            dev = b.own(arrays.to_device(sim, val))
            b.pointer(name, dev)
            if name == "stats":
                out = dev
        else:
            b.values[name] = val
    try:
        b.launcher(grid)()
        b.finish()
        return arrays.to_host(out)
    finally:
        b.release()


def _expect(stats, o, do, lse_rows, h, slab, rows):
    """Slab ``slab`` of head ``h`` against float64: ``rows`` valid tokens (their O, dO, LSE)."""
    got = stats[h, slab]
    d = (o.astype(np.float64) * do.astype(np.float64)).sum(-1)
    np.testing.assert_array_equal(got[:rows], lse_rows * LOG2E)            # one f32 multiply, rounded once
    np.testing.assert_allclose(got[BM:BM + rows], d, rtol=1e-5, atol=1e-5)
    assert not got[rows:BM].any() and not got[BM + rows:].any()           # padding rows: 0, not NaN


@pytest.mark.parametrize("d", [64, 128])
def test_dense_stats(d, rng, sim):
    batch, sq, heads = 2, 77, 3
    o, do = (rng.standard_normal((batch, sq, heads, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    lse = rng.standard_normal((batch, heads, sq)).astype(np.float32) * 4
    blocks = -(-sq // BM)
    stats = np.full((heads, batch * blocks, 2 * BM), np.nan, np.float32)
    got = _run(sim, AttentionBwdPreprocessKernel(d, "bf16"), (blocks, heads, batch), o=o, do=do, lse=lse,
               stats=stats, seqlen_q=sq, heads=heads, dq_blocks=batch * blocks)
    for b in range(batch):
        for h in range(heads):
            for m in range(blocks):
                t = slice(m * BM, min(sq, (m + 1) * BM))
                _expect(got, o[b, t, h], do[b, t, h], lse[b, h, t], h, b * blocks + m, t.stop - t.start)


def test_varlen_stats_only_own_slabs(rng, sim):
    """Packed sequences of 1, 0, 77 and 130 tokens: sequence b's block m at slab cu[b] // 64 + b + m;
    the slabs between sequences are never written (the dK/dV kernel never reads them)."""
    lens, heads, d = [1, 0, 77, 130], 2, 64
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    total = int(cu[-1])
    o, do = (rng.standard_normal((total, heads, d)).astype(np.float16) for _ in range(2))
    lse = rng.standard_normal((heads, total)).astype(np.float32) * 4
    slabs = total // BM + len(lens)
    stats = np.full((heads, slabs, 2 * BM), np.nan, np.float32)
    got = _run(sim, AttentionBwdPreprocessKernel(d, "f16", varlen=True), (-(-max(lens) // BM), heads, len(lens)),
               o=o, do=do, lse=lse, stats=stats, seqlen_q=max(lens), heads=heads, dq_blocks=slabs, cu_seqlens_q=cu,
               total_q=total)
    written = np.zeros(slabs, bool)
    for b, n in enumerate(lens):
        for m in range(-(-n // BM)):
            slab = cu[b] // BM + b + m
            written[slab] = True
            t = slice(cu[b] + m * BM, cu[b] + min(n, (m + 1) * BM))
            for h in range(heads):
                _expect(got, o[t, h], do[t, h], lse[h, t], h, slab, t.stop - t.start)
    assert np.isnan(got[:, ~written]).all() and (~written).any()


def test_bulk_load_size_refused():
    from cutedsl.atom.tma import bulk_load
    with pytest.raises(ValueError, match="size must be a positive multiple of 16 bytes, got 500"):
        bulk_load(None, None, 500, None, 0)
