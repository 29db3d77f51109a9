"""Time lag by interpolation: the kafka-lag-exporter baseline.

kafka-lag-exporter does not know when a record was ingested. It polls the log-end
offset of each partition periodically and keeps a table of (end offset, observation
time) points; the time lag of a group is ``now - t`` where ``t`` is the estimated time
at which the log-end offset equalled the group's committed offset, found by linear
interpolation between the two points that bracket the committed offset, or by
extrapolation along the table's overall trend when no two points do. streamplane
computes time lag exactly (see ``streamplane.core.lag``); this module exists so the
two can be compared side by side on the same data.

Table rules (``EndOffsetTable.add``), as in kafka-lag-exporter's ``LookupTable``:

- a point not newer than the newest point is dropped (out of order);
- a point whose offset is lower than the newest point's is dropped (not monotonic);
- a flat line is compressed: when the newest two points and the new one share the
  same offset, the new point replaces the newest one (the plateau keeps its start
  and its latest end);
- the table is a sliding window of at most ``limit`` points (oldest dropped first).

Lookup rules (``EndOffsetTable.lookup``):

- no points -> ``TOO_FEW_POINTS``; committed offset >= newest end offset ->
  ``CAUGHT_UP`` (kafka-lag-exporter only checks equality; beyond the newest
  observation nothing is pending either);
- one point -> ``TOO_FEW_POINTS``;
- otherwise, with ``o_1 <= ... <= o_n`` the table offsets: if some ``o_i <= c < o_i+1``
  use the segment (i, i+1) -- on a plateau this picks its last point, the latest time
  the log end still equalled ``c`` -- and interpolate: ``INTERPOLATED``;
- if ``c < o_1``: extrapolate backwards along the line through the oldest and newest
  points, ``EXTRAPOLATED``; when that line is flat (``o_1 == o_n``) the record is
  older than the whole table and only a lower bound is known: ``t = t_1``,
  ``LOWER_BOUND``.

Bias, for the comparison: the record at the committed offset ``c`` is the first one
not yet processed; it was appended when the end offset went from ``c`` to ``c + 1``,
not when the end offset was ``c``. The estimate is therefore early by up to one
inter-arrival gap (negligible on busy partitions, large on quiet ones), besides the
error of assuming a constant production rate between polls.
"""

from __future__ import annotations

import enum
from array import array
from bisect import bisect_right
from dataclasses import dataclass

from streamplane.exceptions import ConfigError

__all__ = ["EndOffsetTable", "InterpolatedLag", "LagEstimate", "LagEstimateKind"]


class LagEstimateKind(enum.Enum):
    CAUGHT_UP = "caught_up"
    INTERPOLATED = "interpolated"
    EXTRAPOLATED = "extrapolated"
    LOWER_BOUND = "lower_bound"
    TOO_FEW_POINTS = "too_few_points"


@dataclass(frozen=True, slots=True)
class LagEstimate:
    """When the log-end offset was (estimated to be) the committed offset.

    ``time_ms`` is None for ``CAUGHT_UP`` and ``TOO_FEW_POINTS``.
    """

    kind: LagEstimateKind
    time_ms: float | None

    def time_lag_s(self, now_ms: int) -> float | None:
        """Seconds between the estimate and ``now_ms`` (0 when caught up, never negative)."""
        if self.kind is LagEstimateKind.CAUGHT_UP:
            return 0.0
        if self.time_ms is None:
            return None
        return max(0.0, (now_ms - self.time_ms) / 1000.0)


_CAUGHT_UP = LagEstimate(LagEstimateKind.CAUGHT_UP, None)
_TOO_FEW = LagEstimate(LagEstimateKind.TOO_FEW_POINTS, None)


class EndOffsetTable:
    """A sliding window of (end offset, observation time) points for one partition.

    Stored in two ``array('q')`` columns (about 16 bytes a point).
    """

    __slots__ = ("_limit", "_offsets", "_times")

    def __init__(self, limit: int = 60) -> None:
        if limit < 2:
            raise ConfigError(f"an interpolation table needs at least 2 points, not {limit}")
        self._limit = limit
        self._offsets = array("q")
        self._times = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    def points(self) -> list[tuple[int, int]]:
        """The (end offset, time ms) points, oldest first."""
        return list(zip(self._offsets, self._times, strict=True))

    def add(self, end_offset: int, observed_ms: int) -> None:
        """Add an observation of the log-end offset (see the module docstring)."""
        offsets, times = self._offsets, self._times
        n = len(offsets)
        if n:
            if times[-1] >= observed_ms or offsets[-1] > end_offset:
                return
            if n > 1 and offsets[-1] == end_offset and offsets[-2] == end_offset:
                times[-1] = observed_ms
                return
            if n == self._limit:
                del offsets[0]
                del times[0]
        offsets.append(end_offset)
        times.append(observed_ms)

    def lookup(self, committed_offset: int) -> LagEstimate:
        """Estimate when the log-end offset was ``committed_offset``."""
        offsets, times = self._offsets, self._times
        n = len(offsets)
        if n and committed_offset >= offsets[-1]:
            return _CAUGHT_UP
        if n < 2:
            return _TOO_FEW
        i = bisect_right(offsets, committed_offset)  # offsets[i-1] <= c < offsets[i]
        if i > 0:
            left, right = i - 1, i
            kind = LagEstimateKind.INTERPOLATED
        else:
            left, right = 0, n - 1
            if offsets[0] == offsets[-1]:
                return LagEstimate(LagEstimateKind.LOWER_BOUND, float(times[0]))
            kind = LagEstimateKind.EXTRAPOLATED
        o_l, o_r = offsets[left], offsets[right]
        t_l, t_r = times[left], times[right]
        return LagEstimate(kind, t_r - (o_r - committed_offset) * (t_r - t_l) / (o_r - o_l))

    def time_lag_s(self, committed_offset: int, now_ms: int) -> float | None:
        """Estimated time lag in seconds, or None with fewer than two points."""
        return self.lookup(committed_offset).time_lag_s(now_ms)


class InterpolatedLag:
    """One ``EndOffsetTable`` per (topic, partition): the baseline, ready to compare."""

    __slots__ = ("_limit", "_tables")

    def __init__(self, limit: int = 60) -> None:
        EndOffsetTable(limit)  # validates limit
        self._limit = limit
        self._tables: dict[tuple[str, int], EndOffsetTable] = {}

    def observe_end_offset(
        self, topic: str, partition: int, end_offset: int, observed_ms: int
    ) -> None:
        table = self._tables.get((topic, partition))
        if table is None:
            table = self._tables[(topic, partition)] = EndOffsetTable(self._limit)
        table.add(end_offset, observed_ms)

    def table(self, topic: str, partition: int) -> EndOffsetTable | None:
        return self._tables.get((topic, partition))

    def estimate(self, topic: str, partition: int, committed_offset: int) -> LagEstimate:
        table = self._tables.get((topic, partition))
        if table is None:
            return _TOO_FEW
        return table.lookup(committed_offset)

    def time_lag_s(
        self, topic: str, partition: int, committed_offset: int, now_ms: int
    ) -> float | None:
        return self.estimate(topic, partition, committed_offset).time_lag_s(now_ms)
