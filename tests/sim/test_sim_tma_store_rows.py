"""The global side of a TMA store recorded as row ranges (GlobalHB.async_write_rows, a box's rows at
one pitch as 2-D views of the word shadow) against the per-word path (GlobalHB.async_write with the
box's word offsets): the same shadow state, the same completion at wait_group, and the same race
reports -- a conflict makes the row path hand the store to the per-word path, which judges it."""
import numpy as np
import pytest

from cutedsl.sim.checks.global_hb import GlobalHB, Rows
from cutedsl.sim.engines.tma_box import box_chunks, box_rows
from cutedsl.sim.frontend.errors import RaceError


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Launch:
    allow = frozenset()
    live = ()
    code = [_Obj(where=lambda: "PTX line 7: cp.async.bulk.tensor (test)"),
            _Obj(where=lambda: "PTX line 9: st.global (test)")]


def _warp(cluster):
    return _Obj(cta=_Obj(cluster=_Obj(cid=cluster), rank=0), wid=0, bulk_commits=0)


def _state(ghb, alloc):
    sh = ghb.shadows[alloc.base]
    return [getattr(sh, k).copy() for k in ("w_agent", "w_clock", "w_pc", "w_mask", "pending", "touched",
                                            "r_agent")] + [sh.written]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


BOX, STRIDES, ESIZE = (32, 8), (4, 4 * 80), 4       # 8 rows of 32 f32 in an 80-wide f32 matrix


def test_box_rows_describe_the_chunk_words_in_box_order():
    rows, pitch, n = box_rows(BOX, STRIDES, ESIZE)
    assert (rows, pitch, n) == (8, 80, 32)
    g = box_chunks(BOX, STRIDES, ESIZE, 0, 0)[0]
    words = (4 * (g + 5)[:, None] + np.arange(4)).reshape(-1)        # a box whose first chunk is chunk 5
    assert np.array_equal(Rows(20, rows, pitch, n).ids(), words)
    # a 3-D box whose planes are not a whole number of rows apart: no single pitch
    assert box_rows((32, 2, 2), (4, 4 * 80, 4 * 80 * 3 + 16), 4) is None


@pytest.mark.parametrize("start", [0, 20, 4 * 80 * 2 + 8, 80 * 8 + 48])      # (the last: the allocation's last rows)
def test_row_path_records_what_the_per_word_path_records(start):
    alloc = _Obj(base=0x1000, nbytes=4 * 80 * 16, tag="out")
    rows = Rows(start, *box_rows(BOX, STRIDES, ESIZE))
    states = []
    launch = _Launch()          # (GlobalHB keeps a weak reference)
    for use_rows in (True, False):
        ghb = GlobalHB(launch)
        w = _warp(0)
        if use_rows:
            ghb.async_write_rows(w, alloc, rows, _Obj(pc=0))
        else:
            ghb.async_write(w, alloc, 4 * rows.ids(), 4, _Obj(pc=0))
        before = _state(ghb, alloc)
        ghb.clock[0] = 5
        ghb.async_complete(w, 1)
        states.append((before, _state(ghb, alloc)))
    assert _same(states[0][0], states[1][0]) and _same(states[0][1], states[1][1])
    sh_pending = states[0][0][4]
    assert sh_pending.sum() == 8 * 32 and not states[0][1][4].any()     # in flight, then complete
    assert (states[0][1][1][rows.ids()] == 5).all()


def test_a_conflict_is_judged_by_the_per_word_path():
    """Cluster 1 stores (st.global) a word of the box; cluster 0's unordered TMA store of the box
    then races with it: the row path finds the other cluster's write and the per-word path reports."""
    alloc = _Obj(base=0x1000, nbytes=4 * 80 * 16, tag="out")
    launch = _Launch()
    ghb = GlobalHB(launch)
    rows = Rows(20, *box_rows(BOX, STRIDES, ESIZE))
    word = int(rows.ids()[37])
    ghb.access(_warp(1), alloc, np.array([4 * word]), 4, True, _Obj(pc=1))
    with pytest.raises(RaceError, match=rf"(?s)global memory 0x{0x1000 + 4 * word:x} .*write by cluster 1 at "
                                        r"PTX line 9.*write by cluster 0 .*PTX line 7"):
        ghb.async_write_rows(_warp(0), alloc, rows, _Obj(pc=0))
    # and a generic read of a word still in flight from the row path races with the store
    ghb2 = GlobalHB(launch)
    ghb2.async_write_rows(_warp(0), alloc, rows, _Obj(pc=0))
    with pytest.raises(RaceError, match=r"async-proxy write \(TMA store / bulk copy\) by cluster 0 at PTX line 7"):
        ghb2.access(_warp(0), alloc, np.array([4 * word]), 4, False, _Obj(pc=1))


@pytest.mark.parametrize("start", [0, 32, 48, 128 * 3 + 60])
def test_rows_at_a_pitch_of_whole_blocks_record_what_the_per_word_path_records(start):
    """Rows 512 bytes apart (whole 256-byte blocks of ``touched``: marked as strided slices), one or
    two blocks per row; then a second store of the same cluster over part of the first, after its
    wait_group (words with its own complete write: the full test, which passes)."""
    box, strides = (32, 8), (4, 4 * 128)
    alloc = _Obj(base=0x1000, nbytes=4 * 128 * 16, tag="out")
    rows = Rows(start, *box_rows(box, strides, 4))
    again = Rows(start + 128 + 16, *box_rows(box, strides, 4))
    assert rows.pitch == 128
    states = []
    launch = _Launch()
    for use_rows in (True, False):
        ghb = GlobalHB(launch)
        w = _warp(0)
        seq = []
        for r in (rows, again):
            if use_rows:
                ghb.async_write_rows(w, alloc, r, _Obj(pc=0))
            else:
                ghb.async_write(w, alloc, 4 * r.ids(), 4, _Obj(pc=0))
            seq.append(_state(ghb, alloc))
            w.bulk_commits += 1
            ghb.clock[0] += 1
            ghb.async_complete(w, w.bulk_commits)
            seq.append(_state(ghb, alloc))
        states.append(seq)
    assert all(_same(a, b) for a, b in zip(*states))
    touched = states[0][0][5]
    assert touched.sum() == 8 * (1 + ((start % 64) + 31) // 64)


@pytest.mark.parametrize("prior", ["write", "read", "reduce"])
@pytest.mark.parametrize("pitch_words", [80, 128])
def test_a_prior_access_in_the_box_makes_the_row_path_report_what_the_per_word_path_reports(prior, pitch_words):
    """One earlier access by cluster 1 of one word of the box -- a weak write, a weak read, or a
    reduction still in flight -- marks its block touched: the row path checks the box (at a pitch of
    whole 256-byte blocks or not) and reports the race the per-word path reports, word for word."""
    alloc = _Obj(base=0x1000, nbytes=4 * pitch_words * 16, tag="out")
    launch = _Launch()
    rows = Rows(20, 8, pitch_words, 32)
    word = int(rows.ids()[200])
    reports = []
    for path in ("rows", "words"):
        ghb = GlobalHB(launch)
        ghb.access(_warp(0), alloc, np.array([4 * int(rows.ids()[3])]), 4, True, _Obj(pc=1))   # own word: no race
        if prior == "reduce":
            ghb.async_reduce(_warp(1), alloc, np.array([4 * word]), 4, _Obj(pc=0))
        else:
            ghb.access(_warp(1), alloc, np.array([4 * word]), 4, prior == "write", _Obj(pc=1))
        with pytest.raises(RaceError) as e:
            if path == "rows":
                ghb.async_write_rows(_warp(0), alloc, rows, _Obj(pc=0))
            else:
                ghb.async_write(_warp(0), alloc, 4 * rows.ids(), 4, _Obj(pc=0))
        reports.append(str(e.value))
    assert reports[0] == reports[1]
    assert f"global memory 0x{0x1000 + 4 * word:x} " in reports[0]
