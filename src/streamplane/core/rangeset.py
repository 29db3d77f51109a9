"""A set of non-negative integers kept as sorted, disjoint, half-open ranges.

``RangeSet`` is how a consumer remembers which offsets of a partition are settled.
Two parallel lists hold the range bounds: ``_starts[i]`` and ``_ends[i]`` describe
``[start, end)``. Invariants, true after every public call:

- ``0 <= _starts[i] < _ends[i]``;
- ``_ends[i] < _starts[i + 1]``: ranges never overlap and never touch (touching ranges
  are merged, so there is exactly one representation of every set);
- ``_count`` is the number of integers in the set.

Lookups are a ``bisect`` over ``_starts`` (O(log n) in the number of ranges). ``add``
is on the hot path of a consumer acknowledging ~100k records/s: acknowledgements mostly
arrive near the top of the set, so appending to or extending the last range is checked
first and costs no bisect at all.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat

from streamplane.exceptions import ConfigError

__all__ = ["RangeSet"]

_plus_one = (1).__add__


class RangeSet:
    """A mutable set of non-negative ints stored as sorted disjoint ranges ``[start, end)``."""

    __slots__ = ("_count", "_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._count = 0
        for start, end in ranges:
            self.add_range(start, end)

    # -- construction -------------------------------------------------------------

    @classmethod
    def from_offsets(cls, offsets: Iterable[int]) -> RangeSet:
        """A set holding ``offsets`` (any order, duplicates allowed)."""
        result = cls()
        add = result.add
        for offset in sorted(offsets):
            add(offset)
        return result

    @classmethod
    def from_bounds(cls, starts: Sequence[int], ends: Sequence[int]) -> RangeSet:
        """A set from already-normalised bounds, checked in one pass.

        ``starts`` and ``ends`` must be the same length, sorted, with
        ``0 <= starts[i] < ends[i] < starts[i + 1]``; otherwise ``ConfigError``.
        """
        if len(starts) != len(ends):
            raise ConfigError("RangeSet bounds: starts and ends differ in length")
        # pairwise checks run in C (map over operator.lt): decoders call this on
        # tens of thousands of ranges
        if not (
            all(map(operator.lt, starts, ends))
            and all(map(operator.lt, ends, starts[1:]))
            and (not starts or starts[0] >= 0)
        ):
            raise ConfigError("RangeSet bounds are not sorted, disjoint, non-adjacent, >= 0")
        result = cls()
        result._starts = list(starts)
        result._ends = list(ends)
        result._count = sum(ends) - sum(starts)
        return result

    def copy(self) -> RangeSet:
        """An independent copy."""
        result = RangeSet()
        result._starts = self._starts.copy()
        result._ends = self._ends.copy()
        result._count = self._count
        return result

    # -- mutation -----------------------------------------------------------------

    def add(self, offset: int) -> bool:
        """Add one integer; True when it was not already present.

        Merges with the neighbouring ranges when ``offset`` touches them.
        """
        # One method body on purpose: a helper call costs more than the bisect.
        ends = self._ends
        if ends:
            last = ends[-1]
            if offset == last:  # in-order acknowledgement: extend the top range
                ends[-1] = last + 1
                self._count += 1
                return True
            if offset > last:  # above everything, not touching: a new top range
                self._starts.append(offset)
                ends.append(offset + 1)
                self._count += 1
                return True
        if offset < 0:
            raise ConfigError(f"RangeSet holds non-negative integers only, got {offset}")
        starts = self._starts
        i = bisect_right(starts, offset)  # starts[i - 1] <= offset < starts[i]
        if i:
            previous_end = ends[i - 1]
            if offset < previous_end:
                return False
            if offset == previous_end:
                if i < len(starts) and starts[i] == offset + 1:  # fills a one-offset hole
                    ends[i - 1] = ends[i]
                    del starts[i]
                    del ends[i]
                else:
                    ends[i - 1] = offset + 1
                self._count += 1
                return True
        if i < len(starts) and starts[i] == offset + 1:
            starts[i] = offset
        else:
            starts.insert(i, offset)
            ends.insert(i, offset + 1)
        self._count += 1
        return True

    def add_range(self, start: int, end: int) -> int:
        """Add every integer of ``[start, end)``; returns how many were new."""
        if end <= start:
            if end == start:
                return 0
            raise ConfigError(f"RangeSet.add_range: end {end} is below start {start}")
        if start < 0:
            raise ConfigError(f"RangeSet holds non-negative integers only, got {start}")
        starts = self._starts
        ends = self._ends
        if not ends or start > ends[-1]:
            starts.append(start)
            ends.append(end)
            self._count += end - start
            return end - start
        i = bisect_left(ends, start)  # first range that overlaps or touches [start, ...
        j = bisect_right(starts, end)  # ranges [i, j) overlap or touch [start, end)
        if i == j:
            starts.insert(i, start)
            ends.insert(i, end)
            self._count += end - start
            return end - start
        new_start = min(start, starts[i])
        new_end = max(end, ends[j - 1])
        covered = 0
        for k in range(i, j):
            covered += ends[k] - starts[k]
        starts[i:j] = [new_start]
        ends[i:j] = [new_end]
        added = (new_end - new_start) - covered
        self._count += added
        return added

    def add_sorted(self, offsets: list[int], *, distinct: bool = False) -> int:
        """Add ascending integers; returns how many were new. Duplicates are allowed
        unless the caller passes ``distinct=True`` (it removed them already).

        A consumer folds its queued acknowledgements through here, a few hundred at a
        time, mostly one run of consecutive offsets (one ``add_range``); its commits
        fold rejected offsets, mostly isolated ones. The Python work is per run, not per
        integer: without duplicates a slice ``[i, j)`` is one run exactly when
        ``offsets[j - 1] - offsets[i] == j - 1 - i``, so the end of each run is found by
        galloping (one probe past an isolated offset, a bisection over a long run), and
        the runs join the set in one merge.
        """
        n = len(offsets)
        if not n:
            return 0
        if not distinct:
            unique = set(offsets)
            if len(unique) != n:
                offsets = sorted(unique)
                n = len(offsets)
        if offsets[-1] - offsets[0] == n - 1:  # one run (the usual case)
            return self.add_range(offsets[0], offsets[-1] + 1)
        if offsets[0] < 0:
            raise ConfigError(f"RangeSet holds non-negative integers only, got {offsets[0]}")
        run_starts: list[int] = []
        run_ends: list[int] = []
        i = 0
        while i < n:
            first = offsets[i]
            if offsets[-1] - first == n - 1 - i:  # the rest is one run
                run_starts.append(first)
                run_ends.append(offsets[-1] + 1)
                break
            # gallop: offsets[lo] is in the run, offsets[hi] is not (or hi == n)
            lo, hi, step = i, i + 1, 1
            while hi < n and offsets[hi] - first == hi - i:
                lo = hi
                step += step
                hi = lo + step
            if hi > n:
                hi = n
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if offsets[mid] - first == mid - i:
                    lo = mid
                else:
                    hi = mid
            run_starts.append(first)
            run_ends.append(offsets[lo] + 1)
            i = lo + 1
        return self._merge(run_starts, run_ends)

    def update(self, other: RangeSet) -> None:
        """Add every integer of ``other`` (one linear merge of the two sets' ranges)."""
        self._merge(other._starts, other._ends)

    def _merge(self, starts: list[int], ends: list[int]) -> int:
        """Add the normalised ranges ``[starts[i], ends[i])``; how many integers were
        new. Only this set's ranges that overlap or touch their span take part."""
        if not starts:
            return 0
        own_starts = self._starts
        own_ends = self._ends
        total = sum(ends) - sum(starts)
        if not own_ends or starts[0] > own_ends[-1]:  # all above: append
            own_starts += starts
            own_ends += ends
            self._count += total
            return total
        i = bisect_left(own_ends, starts[0])  # first range that overlaps or touches
        j = bisect_right(own_starts, ends[-1])  # ranges [i, j) may overlap or touch
        window_starts = own_starts[i:j]
        window_ends = own_ends[i:j]
        before = sum(window_ends) - sum(window_starts)
        # both lists are sorted: the sort merges two runs in C
        pairs = sorted(zip(window_starts + starts, window_ends + ends, strict=True))
        merged_starts: list[int] = []
        merged_ends: list[int] = []
        current_start, current_end = pairs[0]
        for start, end in pairs:
            if start > current_end:
                merged_starts.append(current_start)
                merged_ends.append(current_end)
                current_start = start
                current_end = end
            elif end > current_end:
                current_end = end
        merged_starts.append(current_start)
        merged_ends.append(current_end)
        own_starts[i:j] = merged_starts
        own_ends[i:j] = merged_ends
        added = sum(merged_ends) - sum(merged_starts) - before
        self._count += added
        return added

    def without(self, offsets: Iterable[int]) -> RangeSet:
        """A new set: this one minus ``offsets`` (any order; those not in it ignored).

        A consumer's commit leaves its parked records out of the settled set this way:
        a few C-level passes over the offsets (bisect, compare, compress), no Python
        step per offset. Removing offset ``p`` from a range ``[s, e)`` ends a range at
        ``p`` and starts one at ``p + 1``; sorting the old bounds together with the new
        ones pairs them up, and the empty ranges that removing a range's first or last
        offset leaves are dropped.
        """
        starts = self._starts
        ends = self._ends
        removed = sorted(set(offsets)) if starts else []
        if removed:
            removed = list(compress(removed, self.contains_each(removed)))
        if not removed:
            return self.copy()
        result = RangeSet()
        new_starts = sorted([*starts, *map(_plus_one, removed)])
        new_ends = sorted([*ends, *removed])
        non_empty = list(map(operator.lt, new_starts, new_ends))
        result._starts = list(compress(new_starts, non_empty))
        result._ends = list(compress(new_ends, non_empty))
        result._count = self._count - len(removed)
        return result

    def discard(self, offset: int) -> bool:
        """Remove one integer; True when it was present."""
        starts = self._starts
        ends = self._ends
        i = bisect_right(starts, offset) - 1
        if i < 0 or offset >= ends[i]:
            return False
        start = starts[i]
        end = ends[i]
        if start == offset:
            if end == offset + 1:
                del starts[i]
                del ends[i]
            else:
                starts[i] = offset + 1
        elif end == offset + 1:
            ends[i] = offset
        else:  # split [start, end) into [start, offset) and [offset + 1, end)
            ends[i] = offset
            starts.insert(i + 1, offset + 1)
            ends.insert(i + 1, end)
        self._count -= 1
        return True

    def remove_below(self, n: int) -> int:
        """Remove every integer ``< n``; returns how many were removed."""
        starts = self._starts
        ends = self._ends
        if not starts or n <= starts[0]:
            return 0
        i = bisect_right(ends, n)  # ranges [0, i) lie entirely below n
        removed = sum(ends[:i]) - sum(starts[:i])
        del starts[:i]
        del ends[:i]
        if starts and starts[0] < n:
            removed += n - starts[0]
            starts[0] = n
        self._count -= removed
        return removed

    def clear(self) -> None:
        """Remove everything."""
        self._starts.clear()
        self._ends.clear()
        self._count = 0

    # -- queries ------------------------------------------------------------------

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        i = bisect_right(self._starts, offset)
        return i > 0 and offset < self._ends[i - 1]

    def contains_each(self, offsets: Sequence[int]) -> list[bool]:
        """``[offset in self for offset in offsets]``, in C-level passes (bisect,
        compare): for checks of hundreds of offsets at a time."""
        # offset p is in range k - 1 when starts[k - 1] <= p (k = bisect_right) and
        # p < ends[k - 1]; padded_ends[k] is ends[k - 1], and -1 for k = 0
        padded_ends = [-1, *self._ends]
        containing = map(bisect_right, repeat(self._starts), offsets)
        return list(map(operator.lt, offsets, map(padded_ends.__getitem__, containing)))

    def __len__(self) -> int:
        """How many integers the set holds (not how many ranges)."""
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def is_empty(self) -> bool:
        """True when the set holds nothing."""
        return self._count == 0

    @property
    def range_count(self) -> int:
        """How many disjoint ranges the set is made of."""
        return len(self._starts)

    @property
    def lowest(self) -> int | None:
        """The smallest integer in the set, None when empty."""
        return self._starts[0] if self._starts else None

    @property
    def highest(self) -> int | None:
        """The largest integer in the set, None when empty."""
        return self._ends[-1] - 1 if self._ends else None

    def first_missing(self, from_offset: int) -> int:
        """The lowest integer ``>= from_offset`` that is not in the set."""
        i = bisect_right(self._starts, from_offset)
        if i and from_offset < self._ends[i - 1]:
            return self._ends[i - 1]  # ranges never touch, so the end is missing
        return from_offset

    def count_below(self, n: int) -> int:
        """How many integers of the set are ``< n``."""
        starts = self._starts
        ends = self._ends
        i = bisect_right(starts, n)
        count = sum(ends[:i]) - sum(starts[:i])
        if i and ends[i - 1] > n:
            count -= ends[i - 1] - n
        return count

    def issubset(self, other: RangeSet) -> bool:
        """True when every integer of this set is in ``other``."""
        other_starts = other._starts
        other_ends = other._ends
        for start, end in zip(self._starts, self._ends, strict=True):
            i = bisect_right(other_starts, start) - 1
            if i < 0 or end > other_ends[i]:
                return False
        return True

    def ranges(self) -> Iterator[tuple[int, int]]:
        """The ranges ``(start, end)``, ascending; ``end`` is exclusive."""
        return zip(self._starts, self._ends, strict=True)

    def bounds(self) -> tuple[list[int], list[int]]:
        """Copies of the range starts and ends (parallel lists), for bulk encoders."""
        return self._starts.copy(), self._ends.copy()

    def __iter__(self) -> Iterator[int]:
        for start, end in zip(self._starts, self._ends, strict=True):
            yield from range(start, end)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RangeSet):
            return NotImplemented
        return self._starts == other._starts and self._ends == other._ends

    def __repr__(self) -> str:
        return f"RangeSet({list(self.ranges())!r})"
