"""The stream-K / split-K decomposition on the host (no MLIR): every k-iteration of every tile
is computed exactly once, pieces of a tile are reduced in k order, the clusters' work is
balanced, the dependencies between clusters form no cycle (so a resident launch finishes),
and the heuristic follows its documented rule."""
import pytest
from hypothesis import given, settings, strategies as st

from cutedsl.collective.stream_k import (HEURISTIC_UTILISATION, MIN_STREAM_K_TILES, decompose)

MODES = ["data-parallel", "stream-k", "split-k", "heuristic"]


def pieces(d):
    return {c: d.cluster_work(c) for c in range(d.clusters)}


def check_cover(d):
    seen = {}
    for c, work in pieces(d).items():
        for t, b, e in work:
            assert 0 <= t < d.tiles and 0 <= b < e <= d.k_tiles, (c, t, b, e)
            seen.setdefault(t, []).append((b, e))
    assert sorted(seen) == list(range(d.tiles))
    for t, ranges in seen.items():          # the pieces of a tile tile its K exactly
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == d.k_tiles, (t, ranges)
        assert all(x[1] == y[0] for x, y in zip(ranges, ranges[1:])), (t, ranges)


def runs_to_completion(d) -> bool:
    """Each cluster walks its pieces in order; a piece starting at k-tile b > 0 waits until the
    piece of its tile ending at b is done (the semaphore). True when every cluster finishes."""
    work = pieces(d)
    pos = {c: 0 for c in work}
    done = set()
    progress = True
    while progress:
        progress = False
        for c, w in work.items():
            while pos[c] < len(w):
                t, b, e = w[pos[c]]
                if b and (t, b) not in done:
                    break
                done.add((t, e))
                pos[c] += 1
                progress = True
    return all(pos[c] == len(w) for c, w in work.items())


@settings(max_examples=300, deadline=None)
@given(tiles=st.integers(1, 300), k_tiles=st.integers(1, 40), p=st.integers(1, 132),
       mode=st.sampled_from(MODES), splits=st.integers(2, 9))
def test_every_iteration_once_and_no_deadlock(tiles, k_tiles, p, mode, splits):
    d = decompose(mode, tiles, k_tiles, p, splits if mode == "split-k" else None)
    assert 1 <= d.clusters <= p
    check_cover(d)
    assert runs_to_completion(d), d


@settings(max_examples=200, deadline=None)
@given(tiles=st.integers(1, 300), k_tiles=st.integers(1, 40), p=st.integers(1, 132))
def test_stream_k_balance(tiles, k_tiles, p):
    """Stream-K clusters run the same k-iterations to within one; data-parallel whole waves
    before them; with a remainder, the last full wave joins the partial one."""
    d = decompose("stream-k", tiles, k_tiles, p)
    busy = d.busy()
    if tiles % p == 0:
        assert d.mode == "data-parallel" and d.dp_tiles == tiles
        return
    assert d.mode == "stream-k"
    assert d.dp_tiles % p == 0 and d.sk_tiles == tiles % p + (p if tiles > p else 0)
    assert max(busy) - min(busy) <= 1, busy
    # one stream-K unit per cluster: no cluster touches more tiles than its range spans
    for c in range(d.clusters):
        sk = [w for w in d.cluster_work(c) if w[0] >= d.dp_tiles]
        assert [t for t, _, _ in sk] == sorted((t for t, _, _ in sk), reverse=True)   # last tile first


def test_hybrid_example():
    """2 waves + 2 tiles on 4 SMs, 8 k-tiles: one data-parallel wave (4 tiles), then 6 tiles'
    48 k-iterations as 12 per cluster -- against data-parallel's 3 waves (24 per cluster,
    only 10 of 12 wave slots used)."""
    d = decompose("stream-k", 10, 8, 4)
    assert (d.mode, d.dp_tiles, d.sk_tiles, d.sk_units, d.clusters) == ("stream-k", 4, 6, 4, 4)
    assert d.busy() == [20, 20, 20, 20]
    assert d.cluster_work(1) == [(1, 0, 8), (6, 0, 8), (5, 4, 8)]     # its range, last tile first
    dp = decompose("data-parallel", 10, 8, 4)
    assert dp.busy() == [24, 24, 16, 16] and dp.utilisation() == pytest.approx(80 / 96)
    assert d.utilisation() == 1.0


def test_split_k_pieces():
    d = decompose("split-k", 3, 7, 4, splits=3)
    assert (d.mode, d.sk_units, d.splits, d.clusters) == ("split-k", 9, 3, 4)
    assert d.cluster_work(0) == [(0, 0, 2), (1, 2, 4), (2, 4, 7)]
    capped = decompose("split-k", 2, 3, 8, splits=5)       # no more pieces than k-tiles
    assert capped.splits == 3 and capped.sk_units == 6
    assert decompose("split-k", 5, 1, 8, splits=4).mode == "data-parallel"   # one k-tile: nothing to split


def test_heuristic_rule():
    p = 132
    assert decompose("heuristic", 2 * p + 1, 16, p).mode == "stream-k"      # 3 waves, 67% busy
    assert decompose("heuristic", 3 * p, 16, p).mode == "data-parallel"     # full waves
    assert decompose("heuristic", 10 * p + 1, 16, p).mode == "data-parallel"   # >= 90% busy
    assert (10 * p + 1) / (11 * p) >= HEURISTIC_UTILISATION
    assert decompose("heuristic", p + 1, MIN_STREAM_K_TILES - 1, p).mode == "data-parallel"   # too little K
    assert decompose("heuristic", p + 1, MIN_STREAM_K_TILES, p).mode == "stream-k"


@pytest.mark.parametrize("args,msg", [
    (("streamk", 4, 4, 4), "decomposition must be one of heuristic, data-parallel, split-k, stream-k, got 'streamk'"),
    (("split-k", 4, 4, 4), "split-k needs splits >= 2, got None"),
    (("stream-k", 2 ** 20, 2 ** 12, 4), "exceed the kernel's 32-bit iteration count"),
])
def test_errors(args, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        decompose(*args)
