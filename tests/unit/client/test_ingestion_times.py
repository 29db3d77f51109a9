from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamplane.client.ingestion_times import IngestionTimes
from streamplane.core.rangeset import RangeSet


def test_runs_of_consecutive_offsets_merge_and_gaps_start_new_runs() -> None:
    t = IngestionTimes()
    t.add_run(10, [100, 101, 102])
    t.add_run(13, [103])  # consecutive: same run
    t.add(20, 200)  # a gap (compaction, transaction markers)
    assert len(t) == 5
    assert [t.get(o) for o in (9, 10, 13, 14, 19, 20, 21)] == [
        None,
        100,
        103,
        None,
        None,
        200,
        None,
    ]
    t.drop_below(12)
    assert t.offsets() == [12, 13, 20]
    t.drop_below(15)
    assert t.offsets() == [20]
    assert len(t) == 1


def test_keep_unsettled_keeps_only_the_times_of_unsettled_offsets() -> None:
    t = IngestionTimes()
    t.add_run(0, list(range(1000, 1010)))
    t.add_run(20, list(range(2000, 2010)))
    t.keep_unsettled(RangeSet([(1, 5), (8, 22), (25, 26)]))
    assert t.offsets() == [0, 5, 6, 7, 22, 23, 24, 26, 27, 28, 29]
    assert t.get(22) == 2002
    assert len(t) == 11


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int]:
    """Fetched runs (first offset, length) going up with gaps, settled ranges, a floor."""
    runs = []
    offset = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 6))):
        offset += draw(st.integers(0, 4))  # gap (0: consecutive with the previous run)
        n = draw(st.integers(1, 8))
        runs.append((offset, n))
        offset += n
    settled = draw(st.lists(st.tuples(st.integers(0, offset + 3), st.integers(1, 6)), max_size=8))
    floor = draw(st.integers(0, offset + 3))
    return runs, [(s, s + n) for s, n in settled], floor


@given(histories())
def test_matches_a_dict_of_offset_to_time(
    history: tuple[list[tuple[int, int]], list[tuple[int, int]], int],
) -> None:
    runs, settled_ranges, floor = history
    t = IngestionTimes()
    model: dict[int, int] = {}
    for first, n in runs:
        t.add_run(first, [7 * (first + i) for i in range(n)])
        model.update({first + i: 7 * (first + i) for i in range(n)})
    settled = RangeSet(settled_ranges)
    t.keep_unsettled(settled)
    model = {o: v for o, v in model.items() if o not in settled}
    t.drop_below(floor)
    model = {o: v for o, v in model.items() if o >= floor}
    assert t.offsets() == sorted(model)
    assert len(t) == len(model)
    top = max((f + n for f, n in runs), default=0) + 2
    assert all(t.get(o) == model.get(o) for o in range(top))
