"""Per-partition acknowledgement state of a StreamConsumer.

One ``PartitionState`` per (cluster, topic, partition) a consumer reads. It knows
which offsets are settled (acked, or rejected and dead-lettered), how often each
unsettled record was attempted, the ingestion time of every unsettled record, and the
*low watermark* — the committed offset. It turns into a ``PartitionProgress`` for the
commit-log codec and back.

Not thread-safe by itself: the consumer holds its lock around every call.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamplane.core.commitlog import PartitionProgress
from streamplane.core.rangeset import RangeSet


@dataclass(frozen=True)
class PartitionKey:
    cluster: str
    topic: str
    partition: int


class PartitionState:
    __slots__ = (
        "attempts",
        "base",
        "dirty",
        "fetched",
        "fetched_at_report",
        "key",
        "lane",
        "next_fetch",
        "paused",
        "priority",
        "rejected",
        "restored_high",
        "restored_skips",
        "settled",
        "timestamps",
    )

    def __init__(self, key: PartitionKey, lane: str, priority: int) -> None:
        self.key = key
        self.lane = lane
        self.priority = priority
        self.base: int | None = None  # every offset below is settled (last low watermark)
        self.settled = RangeSet()  # settled offsets at or above base
        self.rejected = RangeSet()
        self.attempts: dict[int, int] = {}  # unsettled offset -> attempts so far
        self.timestamps: dict[int, int] = {}  # unsettled fetched offset -> ingestion ms
        self.next_fetch: int | None = None
        self.dirty = False
        self.fetched = 0  # records fetched (metrics; the Assigner's load, by difference)
        self.fetched_at_report = 0
        self.paused = False
        self.restored_skips = 0
        # Highest offset a commit had settled above its low watermark (-1: none). Only
        # fetched offsets up to it can have been settled before: others skip the lookup.
        self.restored_high = -1

    def restore(self, progress: PartitionProgress | None, committed_offset: int | None) -> None:
        """Start from a commit: skip what was settled, keep retry counts."""
        if progress is not None:
            self.base = progress.low_watermark
            self.settled = progress.settled.copy()
            self.rejected = progress.rejected.copy()
            self.attempts = dict(progress.retries)
            self.restored_high = progress.settled.highest or -1
        elif committed_offset is not None:
            self.base = committed_offset
        self.next_fetch = self.base

    def on_fetch(self, offset: int, timestamp_ms: int) -> bool:
        """Record a fetched record; False when it was settled before (skip it)."""
        if self.base is None:
            self.base = offset
        nxt = self.next_fetch
        if nxt is not None and offset > nxt:
            # Offsets that do not exist (compaction, transaction markers) are settled.
            self.settled.add_range(nxt, offset)
        elif nxt is not None and offset < nxt:
            return False  # a refetch of what we already hold
        self.next_fetch = offset + 1
        if offset < self.base or (offset <= self.restored_high and offset in self.settled):
            self.restored_skips += 1
            return False
        self.timestamps[offset] = timestamp_ms
        self.fetched += 1
        return True

    def settle(self, offset: int, rejected: bool = False) -> bool:
        """Mark ``offset`` settled; False if it already was (a duplicate ack)."""
        if self.base is not None and offset < self.base:
            return False
        if not self.settled.add(offset):
            return False
        if rejected:
            self.rejected.add(offset)
        self.timestamps.pop(offset, None)
        if self.attempts:
            self.attempts.pop(offset, None)
        self.dirty = True
        return True

    def bump_attempts(self, offset: int) -> int:
        n = self.attempts.get(offset, 0) + 1
        self.attempts[offset] = n
        self.dirty = True
        return n

    def unsettled(self) -> int:
        """Records fetched and not settled yet (handed out, buffered or awaiting retry)."""
        return len(self.timestamps)

    def progress(self, now_ms: int) -> PartitionProgress:
        """The state to commit now; advances ``base`` to the new low watermark."""
        assert self.base is not None
        progress = PartitionProgress.from_settled(
            self.base,
            self.settled,
            commit_time_ms=now_ms,
            rejected=self.rejected,
            retries=self.attempts,
            timestamp_for=self.timestamps.get,
        )
        self.base = progress.low_watermark
        self.settled.remove_below(self.base)
        self.rejected.remove_below(self.base)
        self.dirty = False
        return progress
