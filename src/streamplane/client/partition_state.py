"""Per-partition acknowledgement state of a StreamConsumer.

One ``PartitionState`` per (cluster, topic, partition) a consumer reads. It knows
which offsets are settled (acked, or rejected and dead-lettered), how often each
unsettled record was attempted, the ingestion time of the fetched records, and the
*low watermark* — the committed offset. It turns into a ``PartitionProgress`` for the
commit-log codec and back.

Acks are the hot path (one per record), so they take no lock: ``ack`` appends the
offset to a list (``list.append`` is one step under the GIL) and ``apply_acks`` takes
the queued offsets with a slice and a ``del`` of that slice (an ack appended between
the two lands after it and is kept), then folds them into the settled set through
``RangeSet.add_sorted`` (mostly one ``add_range``: acks come in runs).
Everything that reads the settled state (``unsettled``, ``progress``) applies the
queue first. A nacked record is *parked* (and so is one rejected to the dlq lane
until its dead letter is acked: ``park``): ``nack`` queues its offset to be folded in
with the acks (a retried record does not split the run of acks around it) and
``parked`` remembers that it is not settled, so ``settled_now`` (what commits see)
leaves it out and ``in_flight`` counts it until its retry is acked or ``settle``
marks it rejected. A retry's ack has a queue of its own, ``retry_acks`` (the
consumer hands retries out as messages whose ``ack`` appends there), so the acks of
first deliveries are never checked against the parked set or the retry counts.
Ingestion times are kept in runs of consecutive offsets (``IngestionTimes``), looked
up by bisection and trimmed as the low watermark passes; ``settle`` need not touch
them.

Apart from ``ack`` and ``ack_retry``, not thread-safe by itself: the consumer holds
its lock around every other call.

``handed`` and ``returned`` count the records handed to the application and those it
gave back (acked, nacked, rejected, or never started by ``run``), a batch at a time;
a record handed back unseen is taken off ``handed``. Their difference (``in_hands``)
is what a unit being released waits for. ``handed`` is only changed under the
consumer's polling lock, ``returned`` under its lock (``apply_acks`` counts the acks
it drains; the consumer counts the rest).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from streamplane.client.ingestion_times import IngestionTimes
from streamplane.core.commitlog import PartitionProgress
from streamplane.core.rangeset import RangeSet

_plus_one = (1).__add__


@dataclass(frozen=True)
class PartitionKey:
    cluster: str
    topic: str
    partition: int


class PartitionState:
    __slots__ = (
        "acked",
        "acked_at_report",
        "acks",
        "attempts",
        "base",
        "dirty",
        "fetched",
        "fetched_at_report",
        "gaps_settled",
        "handed",
        "in_flight",
        "key",
        "lane",
        "nacks",
        "next_fetch",
        "parked",
        "parking",
        "paused",
        "priority",
        "rejected",
        "rejecting",
        "restored_high",
        "restored_skips",
        "retry_acks",
        "returned",
        "revoked",
        "settled",
        "throughput",
        "times",
        "watermarks",
    )

    def __init__(self, key: PartitionKey, lane: str, priority: int) -> None:
        self.key = key
        self.lane = lane
        self.priority = priority
        self.base: int | None = None  # every offset below is settled (last low watermark)
        self.settled = RangeSet()  # settled offsets at or above base
        self.rejected = RangeSet()  # as of the last ``progress``: see ``rejecting``
        self.rejecting: list[int] = []  # rejected since, folded in by ``progress``
        # Acked offsets not applied to ``settled`` yet. Never replaced (drained by slice
        # and del): the consumer's fetch runs hold this list to append to.
        self.acks: list[int] = []
        # Acked redelivered records (they are parked), queued like ``acks``: the first
        # deliveries' acks need no check against the parked set.
        self.retry_acks: list[int] = []
        # Records nacked and not counted yet (the consumer's messages), queued like
        # ``acks`` (never replaced): the consumer counts them with ``nack`` a partition
        # at a time, and schedules their retries.
        self.nacks: list[Any] = []
        self.acked = 0  # acks applied so far (metrics, read by difference)
        self.acked_at_report = 0
        self.attempts: dict[int, int] = {}  # unsettled offset -> attempts so far
        # Nacked records waiting for a retry or their dead letter. Their offsets join
        # ``settled`` at once, so the acks around a retried record still fold as one
        # run (no split per poison pill), but they are not settled: commits leave them
        # out (``settled_now``) and ``in_flight`` counts them until they really settle.
        self.parked: set[int] = set()
        self.parking: list[int] = []  # parked offsets not folded into ``settled`` yet
        # Ingestion times of fetched records from about the low watermark on: the one
        # of the record at the low watermark goes into every commit.
        self.times = IngestionTimes()
        self.in_flight = 0  # fetched and not settled
        # Records handed to the application, and those it gave back (``in_hands``).
        self.handed = 0
        self.returned = 0
        self.next_fetch: int | None = None
        self.gaps_settled = 0  # offsets skipped over by fetches (compaction, markers)
        self.dirty = False
        self.fetched = 0  # records fetched (metrics; the Assigner's load, by difference)
        self.fetched_at_report = 0
        self.throughput: float | None = None  # records/s, smoothed (the Assigner's weight)
        # (log start, end) as the fetching client's statistics last gave them; (-1, -1)
        # before: the backlog reported to the Assigner.
        self.watermarks = (-1, -1)
        self.paused = False
        self.revoked = False  # this member gave the partition up (its retries are dropped)
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
            self.rejecting = []
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
            self.gaps_settled += offset - nxt
        elif nxt is not None and offset < nxt:
            return False  # a refetch of what we already hold
        self.next_fetch = offset + 1
        if offset < self.base or (offset <= self.restored_high and offset in self.settled):
            self.restored_skips += 1
            return False
        self.times.add(offset, timestamp_ms)
        self.in_flight += 1
        self.fetched += 1
        return True

    def on_fetch_run(self, first: int, timestamps: list[int]) -> bool:
        """Record a run of consecutive offsets ``first, first + 1, ...`` (one per
        timestamp) in one step, when it is the common case: right after the previous
        fetch, none of it settled by a restored commit. False: nothing was recorded,
        call ``on_fetch`` per record instead."""
        if self.base is None:
            self.base = first
        nxt = self.next_fetch
        if (nxt is None or nxt == first) and first >= self.base and first > self.restored_high:
            n = len(timestamps)
            self.next_fetch = first + n
            self.times.add_run(first, timestamps)
            self.in_flight += n
            self.fetched += n
            return True
        return False

    def in_hands(self) -> int:
        """Records handed to the application and not given back yet (not acked,
        nacked or rejected; acks counted as of the last ``apply_acks``)."""
        return self.handed - self.returned

    def ack(self, offset: int) -> None:
        """Settle ``offset`` later, at the next ``apply_acks`` (no lock needed)."""
        self.acks.append(offset)

    def ack_retry(self, offset: int) -> None:
        """Settle a redelivered (parked) ``offset`` later, like ``ack``."""
        self.retry_acks.append(offset)

    def apply_acks(self) -> int:
        """Fold the queued acks (and newly parked offsets) into the settled set, and
        settle the redelivered records acked; the number of records newly settled."""
        acks = self.acks
        n = len(acks)
        parking = self.parking
        newly_settled = 0
        self.returned += n
        if n or parking:
            offsets = acks[:n]
            del acks[:n]  # one step each under the GIL: an ack appended meanwhile is kept
            unique = set(offsets)
            if parking:
                self.parking = []
                offsets += parking
                unique.update(parking)
            if len(unique) == len(offsets):
                offsets.sort()
            else:  # the same record acked twice (from two threads)
                offsets = sorted(unique)
            base = self.base
            if base is not None and offsets[0] < base:  # settled by an earlier commit
                offsets = offsets[bisect_left(offsets, base) :]
            # Parked offsets are never settled yet, so each of them counts in ``added``.
            newly_settled = self.settled.add_sorted(offsets, distinct=True) - len(parking)
        if self.retry_acks:
            newly_settled += self._apply_retry_acks()
        if newly_settled:
            self.in_flight -= newly_settled
            self.acked += newly_settled
            self.dirty = True
        return newly_settled

    def _apply_retry_acks(self) -> int:
        """Redelivered records acked: parked, so in ``settled`` already; now settled
        for real, and their retry counts are forgotten."""
        retry_acks = self.retry_acks
        n = len(retry_acks)
        acked = self.parked.intersection(retry_acks[:n])  # a duplicate ack counts once
        del retry_acks[:n]
        self.returned += n
        self.parked -= acked
        attempts = self.attempts
        for offset in acked:
            attempts.pop(offset, None)
        return len(acked)

    def settle(self, offsets: list[int], *, rejected: bool = False) -> int:
        """Mark ``offsets`` settled now (rejected: dead-lettered, or given up without a
        dead letter); how many were not settled before (duplicates are skipped). The
        consumer settles each partition's acked dead letters in one call."""
        unique = set(offsets)
        base = self.base
        if base is not None and min(unique, default=base) < base:
            unique = {offset for offset in unique if offset >= base}
        parked = self.parked
        newly = unique & parked  # in ``settled`` (or ``parking``) already
        if newly:
            parked -= newly
        add = self.settled.add
        for offset in unique - newly:  # not parked: settled now unless it was before
            if add(offset):
                newly.add(offset)
        n = len(newly)
        if not n:
            return 0
        if rejected:
            self.rejecting += newly
        self.in_flight -= n
        attempts = self.attempts
        if attempts:
            for offset in newly.intersection(attempts):
                del attempts[offset]
        self.dirty = True
        return n

    def nack(self, offsets: list[int]) -> list[int]:
        """Count an attempt of each of ``offsets`` (distinct) and park them until they
        settle; the attempts so far, in the same order."""
        attempts = self.attempts
        counts = list(map(_plus_one, map(attempts.get, offsets, repeat(0))))
        attempts.update(zip(offsets, counts, strict=True))
        self.park(offsets)
        self.dirty = True
        return counts

    def park(self, offsets: Iterable[int]) -> None:
        """Park ``offsets`` until they settle (``nack`` counts an attempt first; a record
        rejected to the dlq lane is parked until its dead letter is acked). Offsets
        parked already are left as they are (a retry nacked again)."""
        fresh = set(offsets) - self.parked
        if fresh:
            self.parked |= fresh
            self.parking += fresh
            self.dirty = True

    def settled_now(self) -> RangeSet:
        """The settled offsets at or above the low watermark, parked ones left out."""
        self.apply_acks()
        if not self.parked:
            return self.settled
        return self.settled.without(self.parked)

    def unsettled(self) -> int:
        """Records fetched and not settled yet (handed out, buffered or awaiting retry)."""
        self.apply_acks()
        return self.in_flight

    def timestamp_of(self, offset: int) -> int | None:
        """Ingestion time of a fetched record at or above the low watermark (else None)."""
        return self.times.get(offset)

    def progress(self, now_ms: int) -> PartitionProgress:
        """The state to commit now; advances ``base`` to the new low watermark."""
        assert self.base is not None
        settled = self.settled_now()
        if self.rejecting:  # each offset once: ``settle`` marks only what it settles
            # Marks below the new low watermark are dropped by the commit: most of them
            # when poison pills flow (each one's mark would be a range of its own).
            low = settled.first_missing(self.base)
            self.rejected.add_sorted(sorted(o for o in self.rejecting if o >= low), distinct=True)
            self.rejecting = []
        progress = PartitionProgress.from_settled(
            self.base,
            settled,
            commit_time_ms=now_ms,
            rejected=self.rejected,
            retries=self.attempts,
            timestamp_for=self.timestamp_of,
        )
        base = self.base = progress.low_watermark
        if len(self.attempts) != len(progress.retries):
            # counts restored from a commit whose records were acked since (their first
            # delivery here: acked through ``acks``, not checked against the counts)
            self.attempts = dict(progress.retries)
        self.settled.remove_below(base)
        self.rejected.remove_below(base)
        self._trim_fetched(base, settled)
        self.dirty = False
        return progress

    def _trim_fetched(self, base: int, settled: RangeSet) -> None:
        """Drop ingestion times below the low watermark; when settled records above it
        make up most of what is left (a stuck record with acks flowing past it), keep
        only the unsettled ones, so memory follows the in-flight window."""
        self.times.drop_below(base)
        if len(self.times) > 2 * self.in_flight + 1024:
            self.times.keep_unsettled(settled)
