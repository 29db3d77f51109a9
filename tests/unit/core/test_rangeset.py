"""RangeSet: table tests for each operation, and a state machine checked against set()."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from streamplane.core.rangeset import RangeSet
from streamplane.exceptions import ConfigError


def rs(*ranges: tuple[int, int]) -> RangeSet:
    return RangeSet(ranges)


@pytest.mark.parametrize(
    ("initial", "offset", "expected", "new"),
    [
        ([], 5, [(5, 6)], True),
        ([(5, 6)], 6, [(5, 7)], True),  # extends the top range
        ([(5, 6)], 8, [(5, 6), (8, 9)], True),  # new top range
        ([(5, 6)], 4, [(4, 6)], True),  # touches from below
        ([(5, 6)], 2, [(2, 3), (5, 6)], True),  # new bottom range
        ([(1, 3), (4, 6)], 3, [(1, 6)], True),  # fills a one-offset hole: merge
        ([(1, 3), (6, 8)], 3, [(1, 4), (6, 8)], True),  # extends a middle range
        ([(1, 3), (6, 8)], 5, [(1, 3), (5, 8)], True),  # touches the next range
        ([(1, 3), (6, 8)], 4, [(1, 3), (4, 5), (6, 8)], True),  # alone in a gap
        ([(1, 3), (6, 8)], 2, [(1, 3), (6, 8)], False),  # already present
        ([(1, 3), (6, 8)], 7, [(1, 3), (6, 8)], False),
        ([], 0, [(0, 1)], True),
    ],
)
def test_add(
    initial: list[tuple[int, int]], offset: int, expected: list[tuple[int, int]], new: bool
) -> None:
    s = RangeSet(initial)
    assert s.add(offset) is new
    assert list(s.ranges()) == expected
    assert len(s) == sum(e - b for b, e in expected)


@pytest.mark.parametrize(
    ("initial", "start", "end", "expected", "added"),
    [
        ([], 3, 7, [(3, 7)], 4),
        ([(3, 7)], 7, 9, [(3, 9)], 2),
        ([(3, 7)], 0, 3, [(0, 7)], 3),
        ([(3, 7)], 8, 9, [(3, 7), (8, 9)], 1),
        ([(1, 2), (4, 5), (7, 8), (20, 30)], 2, 7, [(1, 8), (20, 30)], 4),
        ([(1, 2), (4, 5)], 0, 10, [(0, 10)], 8),
        ([(1, 5)], 2, 3, [(1, 5)], 0),
        ([(1, 5)], 4, 4, [(1, 5)], 0),
        ([(1, 3), (10, 12)], 5, 7, [(1, 3), (5, 7), (10, 12)], 2),
    ],
)
def test_add_range(
    initial: list[tuple[int, int]],
    start: int,
    end: int,
    expected: list[tuple[int, int]],
    added: int,
) -> None:
    s = RangeSet(initial)
    assert s.add_range(start, end) == added
    assert list(s.ranges()) == expected


@pytest.mark.parametrize(
    ("initial", "n", "expected", "removed"),
    [
        ([], 10, [], 0),
        ([(5, 10)], 0, [(5, 10)], 0),
        ([(5, 10)], 5, [(5, 10)], 0),
        ([(5, 10)], 7, [(7, 10)], 2),
        ([(5, 10)], 10, [], 5),
        ([(1, 3), (5, 10), (12, 13)], 6, [(6, 10), (12, 13)], 3),
        ([(1, 3), (5, 10), (12, 13)], 11, [(12, 13)], 7),
        ([(1, 3), (5, 10), (12, 13)], 100, [], 8),
    ],
)
def test_remove_below(
    initial: list[tuple[int, int]], n: int, expected: list[tuple[int, int]], removed: int
) -> None:
    s = RangeSet(initial)
    assert s.remove_below(n) == removed
    assert list(s.ranges()) == expected
    assert len(s) == sum(e - b for b, e in expected)


@pytest.mark.parametrize(
    ("initial", "offset", "expected", "present"),
    [
        ([(1, 2)], 1, [], True),
        ([(1, 5)], 1, [(2, 5)], True),
        ([(1, 5)], 4, [(1, 4)], True),
        ([(1, 5)], 2, [(1, 2), (3, 5)], True),
        ([(1, 5)], 5, [(1, 5)], False),
        ([], 0, [], False),
    ],
)
def test_discard(
    initial: list[tuple[int, int]], offset: int, expected: list[tuple[int, int]], present: bool
) -> None:
    s = RangeSet(initial)
    assert s.discard(offset) is present
    assert list(s.ranges()) == expected


@pytest.mark.parametrize(
    ("ranges", "start", "expected"),
    [
        ([], 0, 0),
        ([(0, 5)], 0, 5),
        ([(0, 5)], 3, 5),
        ([(0, 5), (6, 9)], 0, 5),
        ([(0, 5), (6, 9)], 6, 9),
        ([(3, 5)], 0, 0),
        ([(3, 5)], 5, 5),
        ([(3, 5)], 9, 9),
    ],
)
def test_first_missing(ranges: list[tuple[int, int]], start: int, expected: int) -> None:
    assert RangeSet(ranges).first_missing(start) == expected


def test_queries() -> None:
    s = rs((2, 5), (8, 9))
    assert 2 in s and 4 in s and 8 in s
    assert 5 not in s and 1 not in s and 9 not in s
    assert "2" not in s
    assert len(s) == 4 and bool(s) and not s.is_empty()
    assert s.range_count == 2
    assert s.lowest == 2 and s.highest == 8
    assert list(s) == [2, 3, 4, 8]
    assert s.count_below(0) == 0 and s.count_below(3) == 1 and s.count_below(100) == 4
    assert s.count_below(8) == 3 and s.count_below(9) == 4
    assert RangeSet().lowest is None and RangeSet().highest is None
    assert RangeSet().is_empty() and not RangeSet()
    assert repr(s) == "RangeSet([(2, 5), (8, 9)])"


def test_equality_copy_and_subset() -> None:
    a = rs((1, 4), (6, 7))
    b = RangeSet.from_offsets([6, 3, 1, 2, 2])
    assert a == b
    c = a.copy()
    c.add(4)
    assert c != a and a == b
    assert a.issubset(c) and not c.issubset(a)
    assert RangeSet().issubset(a)
    assert rs((2, 3)).issubset(a) and not rs((3, 5)).issubset(a)
    assert a != [(1, 4), (6, 7)]
    u = rs((1, 2))
    u.update(rs((2, 3), (10, 11)))
    assert u == rs((1, 3), (10, 11))
    u.clear()
    assert u.is_empty() and len(u) == 0


def test_bounds_roundtrip_and_validation() -> None:
    s = rs((1, 4), (6, 7))
    starts, ends = s.bounds()
    assert RangeSet.from_bounds(starts, ends) == s
    starts.append(100)  # a copy: the set is unaffected
    assert s.range_count == 2
    for bad_starts, bad_ends in [
        ([1, 4], [4, 6]),  # touching
        ([1, 3], [4, 6]),  # overlapping
        ([5], [5]),  # empty range
        ([-1], [2]),  # negative
        ([1], [2, 3]),  # length mismatch
    ]:
        with pytest.raises(ConfigError):
            RangeSet.from_bounds(bad_starts, bad_ends)


def test_rejects_negative_and_reversed() -> None:
    with pytest.raises(ConfigError):
        RangeSet().add(-1)
    with pytest.raises(ConfigError):
        rs((5, 6)).add(-3)
    with pytest.raises(ConfigError):
        RangeSet().add_range(-2, 3)
    with pytest.raises(ConfigError):
        RangeSet().add_range(5, 3)


@given(st.lists(st.integers(0, 300), max_size=200), st.integers(0, 320))
def test_matches_a_plain_set(offsets: list[int], probe: int) -> None:
    s = RangeSet()
    model: set[int] = set()
    for offset in offsets:
        assert s.add(offset) is (offset not in model)
        model.add(offset)
    assert list(s) == sorted(model)
    assert len(s) == len(model)
    assert (probe in s) is (probe in model)
    missing = probe
    while missing in model:
        missing += 1
    assert s.first_missing(probe) == missing
    _assert_canonical(s)


@pytest.mark.parametrize(
    ("initial", "offsets", "expected", "new"),
    [
        ([], [], [], 0),
        ([], [3, 4, 5], [(3, 6)], 3),  # one run: one add_range
        ([(0, 3)], [3, 4], [(0, 5)], 2),  # extends the top range
        ([], [1, 2, 4, 5, 9], [(1, 3), (4, 6), (9, 10)], 5),  # runs split at the gaps
        ([], [1, 1, 3], [(1, 2), (3, 4)], 2),  # a duplicate must not hide the gap at 2
        ([], [5, 5, 6, 6, 7], [(5, 8)], 3),
        ([(2, 4)], [1, 2, 3, 4], [(1, 5)], 2),  # partly present already
        ([(0, 10)], [3, 20, 30], [(0, 10), (20, 21), (30, 31)], 2),  # isolated offsets
        ([(5, 6), (9, 10)], [1, 3, 6, 7, 8, 12], [(1, 2), (3, 4), (5, 10), (12, 13)], 6),
        ([], [*range(40), 41, *range(43, 100)], [(0, 40), (41, 42), (43, 100)], 98),
    ],
)
def test_add_sorted(
    initial: list[tuple[int, int]], offsets: list[int], expected: list[tuple[int, int]], new: int
) -> None:
    s = RangeSet(initial)
    assert s.add_sorted(offsets) == new
    assert list(s.ranges()) == expected


@pytest.mark.parametrize(
    ("initial", "other", "expected"),
    [
        ([], [(3, 5)], [(3, 5)]),
        ([(0, 2)], [(5, 6), (8, 9)], [(0, 2), (5, 6), (8, 9)]),  # all above: appended
        ([(0, 2)], [(2, 4)], [(0, 4)]),  # touching the top range: merged
        ([(0, 100)], [(3, 4), (50, 51), (99, 100)], [(0, 100)]),  # a subset: unchanged
        ([(0, 2), (10, 12), (20, 22)], [(1, 11)], [(0, 12), (20, 22)]),  # bridges a gap
        ([(10, 12)], [(0, 1), (5, 9)], [(0, 1), (5, 9), (10, 12)]),  # all below
        ([(0, 2), (4, 6), (8, 10)], [(2, 4), (6, 8)], [(0, 10)]),  # fills every hole
    ],
)
def test_update_merges_ranges(
    initial: list[tuple[int, int]],
    other: list[tuple[int, int]],
    expected: list[tuple[int, int]],
) -> None:
    s = RangeSet(initial)
    s.update(RangeSet(other))
    assert list(s.ranges()) == expected
    assert len(s) == sum(end - start for start, end in expected)


@pytest.mark.parametrize(
    ("initial", "offsets", "expected"),
    [
        ([(0, 10)], [3, 7], [(0, 3), (4, 7), (8, 10)]),
        ([(0, 10)], [0, 9], [(1, 9)]),  # a range's first and last offsets
        ([(0, 10)], [4, 5, 6], [(0, 4), (7, 10)]),  # consecutive offsets
        ([(0, 1), (5, 6)], [0, 5], []),  # one-offset ranges vanish
        ([(2, 4), (8, 10)], [0, 5, 6, 12, 3], [(2, 3), (8, 10)]),  # non-members ignored
        ([(2, 4)], [], [(2, 4)]),
        ([], [1, 2], []),
    ],
)
def test_without(
    initial: list[tuple[int, int]], offsets: list[int], expected: list[tuple[int, int]]
) -> None:
    s = RangeSet(initial)
    smaller = s.without(offsets)
    assert list(smaller.ranges()) == expected
    assert len(smaller) == sum(end - start for start, end in expected)
    assert list(s.ranges()) == initial


def _assert_canonical(s: RangeSet) -> None:
    previous_end = -1
    for start, end in s.ranges():
        assert previous_end < start < end  # disjoint and never touching
        previous_end = end


class RangeSetMachine(RuleBasedStateMachine):
    """Random sequences of every mutating operation, checked against a set model."""

    def __init__(self) -> None:
        super().__init__()
        self.s = RangeSet()
        self.model: set[int] = set()

    @rule(offset=st.integers(0, 200))
    def add(self, offset: int) -> None:
        assert self.s.add(offset) is (offset not in self.model)
        self.model.add(offset)

    @rule(start=st.integers(0, 200), length=st.integers(0, 30))
    def add_range(self, start: int, length: int) -> None:
        new = set(range(start, start + length)) - self.model
        assert self.s.add_range(start, start + length) == len(new)
        self.model |= new

    @rule(offsets=st.lists(st.integers(0, 200), max_size=40))
    def add_sorted(self, offsets: list[int]) -> None:
        new = set(offsets) - self.model
        assert self.s.add_sorted(sorted(offsets)) == len(new)
        self.model |= new

    @rule(offsets=st.sets(st.integers(0, 200), max_size=40))
    def add_sorted_distinct(self, offsets: set[int]) -> None:
        new = offsets - self.model
        assert self.s.add_sorted(sorted(offsets), distinct=True) == len(new)
        self.model |= new

    @rule(offsets=st.sets(st.integers(0, 200), max_size=60))
    def update(self, offsets: set[int]) -> None:
        other = RangeSet.from_offsets(offsets)
        self.s.update(other)
        self.model |= offsets
        assert list(other) == sorted(offsets)  # left as it was

    @rule(offsets=st.lists(st.integers(0, 230), max_size=60))
    def without(self, offsets: list[int]) -> None:
        smaller = self.s.without(offsets)
        assert list(smaller) == sorted(self.model - set(offsets))
        assert len(smaller) == len(self.model - set(offsets))
        _assert_canonical(smaller)
        smaller.add(1000)
        assert 1000 not in self.s  # a new set: this one is left as it was

    @rule(offset=st.integers(0, 200))
    def discard(self, offset: int) -> None:
        assert self.s.discard(offset) is (offset in self.model)
        self.model.discard(offset)

    @precondition(lambda self: len(self.model) > 0)
    @rule(n=st.integers(0, 230))
    def remove_below(self, n: int) -> None:
        below = {x for x in self.model if x < n}
        assert self.s.remove_below(n) == len(below)
        self.model -= below

    @rule(n=st.integers(0, 230))
    def count_below(self, n: int) -> None:
        assert self.s.count_below(n) == sum(1 for x in self.model if x < n)

    @rule()
    def copy_is_equal_and_independent(self) -> None:
        c = self.s.copy()
        assert c == self.s
        c.add(1000)
        assert 1000 not in self.s

    @invariant()
    def agrees_with_model(self) -> None:
        assert len(self.s) == len(self.model)
        assert list(self.s) == sorted(self.model)
        _assert_canonical(self.s)


TestRangeSetMachine = RangeSetMachine.TestCase
TestRangeSetMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_many_in_order_adds_stay_one_range() -> None:
    s = RangeSet()
    for offset in range(100_000):
        s.add(offset)
    assert s.range_count == 1 and len(s) == 100_000
