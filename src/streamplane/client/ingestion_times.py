"""Ingestion times of a partition's fetched records, from about the low watermark on.

Every commit carries the ingestion time of the record at the low watermark, so a
consumer remembers the time of each fetched record until the low watermark passes it.
Fetches come in runs of consecutive offsets, so times are kept in runs: the run's first
offset and an ``array`` of times. A run of a thousand records costs one ``fromlist``
and no per-record offset: the offset of a time is its run's first offset plus its
index. Arrays also keep the garbage collector away (a full collection walks every
element of a list of ints, not of an array).

Pure bookkeeping: not thread-safe (the consumer holds its lock).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

from streamplane.core.rangeset import RangeSet


class IngestionTimes:
    __slots__ = ("_count", "_firsts", "_times")

    def __init__(self) -> None:
        self._firsts: list[int] = []  # ascending; run i covers _firsts[i] + range(len(_times[i]))
        self._times: list[array[int]] = []
        self._count = 0

    def __len__(self) -> int:
        """How many times are kept."""
        return self._count

    def add_run(self, first: int, times: list[int]) -> None:
        """Times of the consecutive offsets ``first, first + 1, ...`` (above any kept)."""
        if not times:
            return
        firsts = self._firsts
        if firsts and firsts[-1] + len(self._times[-1]) == first:
            self._times[-1].fromlist(times)
        else:
            firsts.append(first)
            self._times.append(array("q", times))
        self._count += len(times)

    def add(self, offset: int, time_ms: int) -> None:
        """The time of one offset (above any kept)."""
        self.add_run(offset, [time_ms])

    def get(self, offset: int) -> int | None:
        """The time of ``offset``, or None when it is not kept."""
        i = bisect_right(self._firsts, offset) - 1
        if i < 0:
            return None
        times = self._times[i]
        k = offset - self._firsts[i]
        return times[k] if k < len(times) else None

    def offsets(self) -> list[int]:
        """Every kept offset, ascending (for tests and introspection)."""
        return [
            o for f, t in zip(self._firsts, self._times, strict=True) for o in range(f, f + len(t))
        ]

    def drop_below(self, offset: int) -> None:
        """Forget the times of offsets below ``offset`` (the low watermark moved)."""
        firsts = self._firsts
        times = self._times
        i = bisect_right(firsts, offset) - 1
        if i < 0:
            return
        dropped = sum(len(t) for t in times[:i])
        del firsts[:i]
        del times[:i]
        k = offset - firsts[0]
        if k >= len(times[0]):
            dropped += len(times[0])
            del firsts[0]
            del times[0]
        elif k > 0:
            dropped += k
            firsts[0] = offset
            times[0] = times[0][k:]
        self._count -= dropped

    def keep_unsettled(self, settled: RangeSet) -> None:
        """Forget the times of settled offsets (a stuck record with acks flowing past
        it: memory then follows the records in flight). One slice per unsettled stretch
        of a run; no per-record Python work."""
        starts, ends = settled.bounds()
        n = len(starts)
        firsts: list[int] = []
        kept: list[array[int]] = []
        count = 0
        for first, times in zip(self._firsts, self._times, strict=True):
            end = first + len(times)
            pos = first  # the first offset of this run not looked at yet
            k = bisect_right(ends, first)  # the first settled range ending past ``first``
            while k < n and starts[k] < end:
                start = starts[k]
                if start > pos:  # pos up to start is unsettled
                    firsts.append(pos)
                    kept.append(times[pos - first : start - first])
                    count += start - pos
                pos = ends[k]
                k += 1
            if pos < end:
                firsts.append(pos)
                kept.append(times[pos - first :])
                count += end - pos
        self._firsts = firsts
        self._times = kept
        self._count = count
