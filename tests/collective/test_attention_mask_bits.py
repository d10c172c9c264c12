"""The per-row keep masks of the attention kernel's element mask (cutedsl/collective/attention_mask.py,
cutedsl/atom/fragment_rows.py), run on the emulator and checked against the WGMMA accumulator
fragment's columns (PTX ISA 9.7.15.5.1, D matrix): bit p of a row's mask is the element at row position
p, column 8*(p//2) + p%2 past the thread's base column; ``bits_below(row_columns_below(L))`` keeps
exactly the columns below L, ``bits_from(row_columns_below(L))`` exactly those at or past L, for limits
of any sign, past the block and at every residue mod 8."""
import numpy as np

from cutedsl.atom.fragment_rows import ROW_HALVES, row_half, row_position
from cutedsl.atom.wgmma import WgmmaFragment

COLS = [8 * (p // 2) + p % 2 for p in range(32)]       # row position -> column past the thread's base


def test_row_position_follows_the_fragment_columns():
    """Row position p of either row half holds column COLS[p] (128-column accumulator: 32 per row)."""
    for h in range(ROW_HALVES):
        regs = [i for i in range(64) if row_half(i) == h]
        assert sorted(row_position(i) for i in regs) == list(range(32))
        for i in regs:
            assert WgmmaFragment.offset(0, i)[1] == COLS[row_position(i)]
            assert WgmmaFragment.offset(0, i)[0] == 8 * h


def test_row_keep_bits_on_the_emulator():
    from cutedsl import ir as cir
    from cutedsl.atom.fragment_rows import row_columns_below
    from cutedsl.collective.attention_mask import bits_below, bits_from
    from cutedsl.testing.atoms import build_kernel, run_kernel

    def body(args, smem):
        t = cir.thread_idx()
        lim = cir.GlobalPtr(args.limits, "i32").load(cir.i64(t))
        n = row_columns_below(lim)
        for k, v in enumerate((n, bits_below(n), bits_from(n))):
            cir.GlobalPtr(args.out, "i32").store(cir.i64(t) * 3 + k, v)
    kern = build_kernel(body, params=[("limits", "ptr"), ("out", "ptr")], block=(256, 1, 1))
    limits = np.arange(-40, 216, dtype=np.int32)          # one limit per thread: both signs, past the block
    out = np.zeros((256, 3), np.int32)
    run_kernel(kern, [limits, out])
    for lim, (n, below, above) in zip(limits.tolist(), out.tolist()):
        want_below = sum(1 << p for p, c in enumerate(COLS) if c < lim)
        assert below & 0xFFFFFFFF == want_below, (lim, hex(below))
        assert above & 0xFFFFFFFF == (~want_below) & 0xFFFFFFFF, (lim, hex(above))
        assert max(0, min(n, 32)) == sum(c < lim for c in COLS), (lim, n)
