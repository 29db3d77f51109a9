"""Micro-batch planning for the Spark source: offsets, admission control, splits. Pure.

An offset of the source is a JSON dict ``{"epoch": N, "partitions": {key: offset}}``
where ``key`` is ``"cluster|topic|partition"`` and ``offset`` is the next offset to
read (everything below it is part of an earlier micro-batch). ``epoch`` is the routing
epoch the plan was made with (for humans and logs; planning never depends on it). A
query started at ``latest`` adds ``"queryStart": {"epoch": E, "timeMs": T}``, the
routing epoch and the time it started at, carried from offset to offset (so a restarted
driver knows them too): a partition it joins later is placed by them.

Rules kept by ``plan_end`` (the heart of ``latestOffset``):

- every key of ``start`` is in the end offset, never below its start (offsets only move
  forward, even for a segment that has left the routing table);
- a partition seen for the first time (a new segment after a failover, or a new
  query) joins at its *join offset* and contributes no rows to that micro-batch, so
  ``partitions(start, end)`` never needs anything but the two offsets;
- admission control serves lanes by priority: the highest lane takes what it needs
  first; a lower lane gets only what is left, spread evenly over its partitions (older
  segments first on ties), so ``realtime`` is never starved by ``bulk``. A byte budget
  is turned into rows lane by lane, at the bytes per record of the lane's topics
  (``RecordSizes``: what was sampled of each topic, a first guess before that).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamplane.exceptions import ConfigError

KEY_SEPARATOR = "|"


@dataclass(frozen=True, order=True)
class PartitionKey:
    cluster: str
    topic: str
    partition: int

    def encode(self) -> str:
        return f"{self.cluster}{KEY_SEPARATOR}{self.topic}{KEY_SEPARATOR}{self.partition}"

    @classmethod
    def decode(cls, text: str) -> PartitionKey:
        parts = text.split(KEY_SEPARATOR)
        if len(parts) != 3:
            raise ConfigError(f"malformed source offset key {text!r}: expected cluster|topic|p")
        try:
            return cls(parts[0], parts[1], int(parts[2]))
        except ValueError as exc:
            raise ConfigError(f"malformed source offset key {text!r}: {exc}") from exc


@dataclass(frozen=True)
class QueryStart:
    """Where a ``latest`` query started: the routing epoch and the time (epoch ms).

    A partition it joins later belongs to a segment of that routing (``segment_epoch``
    at most ``epoch``: it did not answer at the start) or to a newer one (a failover's
    new segment, all of whose records came after the start)."""

    epoch: int
    time_ms: int

    def predates(self, segment_epoch: int) -> bool:
        """Whether a segment of this epoch came after the query started."""
        return segment_epoch > self.epoch


@dataclass(frozen=True)
class SourceOffset:
    epoch: int
    partitions: Mapping[PartitionKey, int]
    query_start: QueryStart | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "epoch": self.epoch,
            "partitions": {k.encode(): v for k, v in sorted(self.partitions.items())},
        }
        if self.query_start is not None:
            doc["queryStart"] = {
                "epoch": self.query_start.epoch,
                "timeMs": self.query_start.time_ms,
            }
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SourceOffset:
        try:
            parts = doc.get("partitions") or {}
            started = doc.get("queryStart")
            return cls(
                int(doc.get("epoch", 0)),
                {PartitionKey.decode(k): int(v) for k, v in dict(parts).items()},
                None
                if started is None
                else QueryStart(int(started["epoch"]), int(started["timeMs"])),
            )
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise ConfigError(f"malformed source offset {doc!r}: {exc}") from exc


@dataclass(frozen=True)
class PartitionInfo:
    """What the planner knows of one readable partition at planning time."""

    key: PartitionKey
    lane: str
    priority: int  # 0 = highest lane
    segment_epoch: int
    join_offset: int  # where a first-seen partition starts
    end_offset: int  # the high watermark (next offset to be written)


@dataclass(frozen=True)
class Limit:
    """Admission control for one micro-batch: rows and bytes (None = unbounded)."""

    max_rows: int | None = None
    min_rows: int | None = None
    max_bytes: int | None = None


# The bytes a record is taken for before any record of the stream was sampled.
FIRST_GUESS_RECORD_BYTES = 512


class RecordSizes:
    """Bytes per record (key, value and headers) of each topic, from samples of its
    records: what turns a byte budget into rows.

    A topic's size is its latest sample's mean (records drift: the latest is the
    records the next micro-batch reads); a topic not sampled yet takes the mean of
    every topic sampled, and before any sample the first guess."""

    def __init__(self, first_guess: int = FIRST_GUESS_RECORD_BYTES) -> None:
        if first_guess < 1:
            raise ConfigError("the first guess of a record's bytes must be at least 1")
        self.first_guess = first_guess
        self._sampled: dict[str, tuple[int, int]] = {}  # topic -> (bytes, records)

    def observe(self, topic: str, total_bytes: int, records: int) -> None:
        """A sample of ``records`` records of ``topic`` holding ``total_bytes``."""
        if records > 0:
            self._sampled[topic] = (total_bytes, records)

    def per_record(self, topic: str) -> float:
        """The bytes a record of ``topic`` is taken for (at least 1)."""
        total_bytes, records = self._sampled.get(topic) or (
            sum(b for b, _ in self._sampled.values()),
            sum(n for _, n in self._sampled.values()),
        )
        if records == 0:
            return float(self.first_guess)
        return max(1.0, total_bytes / records)


def plan_end(
    start: SourceOffset,
    partitions: Sequence[PartitionInfo],
    limit: Limit,
    epoch: int,
    sizes: RecordSizes | None = None,
) -> SourceOffset:
    """The end offset of the next micro-batch (equal to ``start`` when nothing to read).

    A byte limit is met at ``sizes``' bytes per record (the first guess if none is
    given); it is soft, as Spark's are: a micro-batch with records to read takes one
    even when that record alone is over the limit."""
    sizes = sizes or RecordSizes()
    end: dict[PartitionKey, int] = dict(start.partitions)
    available: list[tuple[PartitionInfo, int, int]] = []  # (info, from, available rows)
    for info in partitions:
        if info.key not in end:
            end[info.key] = info.join_offset
            continue
        begin = end[info.key]
        if info.end_offset > begin:
            available.append((info, begin, info.end_offset - begin))
    total = sum(n for _, _, n in available)
    if limit.min_rows is not None and total < limit.min_rows and end == dict(start.partitions):
        return start
    budget = total if limit.max_rows is None else min(total, limit.max_rows)
    bytes_left = None if limit.max_bytes is None else float(limit.max_bytes)
    granted = 0
    for lane_items in _by_priority(available):
        if budget <= 0 or (bytes_left is not None and bytes_left <= 0):
            break
        wants = [n for _, _, n in lane_items]
        row_bytes = [sizes.per_record(info.key.topic) for info, _, _ in lane_items]
        lane_budget = budget
        if bytes_left is not None:
            lane_bytes = sum(n * b for n, b in zip(wants, row_bytes, strict=True))
            lane_budget = min(budget, int(bytes_left * sum(wants) / lane_bytes))
            if granted == 0:
                lane_budget = max(1, lane_budget)  # soft: one record moves the query
        grants = wants if sum(wants) <= lane_budget else water_fill(wants, lane_budget)
        for (info, begin, _), grant in zip(lane_items, grants, strict=True):
            end[info.key] = begin + grant
        budget -= sum(grants)
        granted += sum(grants)
        if bytes_left is not None:
            bytes_left -= sum(g * b for g, b in zip(grants, row_bytes, strict=True))
    if end == dict(start.partitions):
        return start
    return SourceOffset(epoch, end, start.query_start)


def _by_priority(
    items: Iterable[tuple[PartitionInfo, int, int]],
) -> list[list[tuple[PartitionInfo, int, int]]]:
    groups: dict[int, list[tuple[PartitionInfo, int, int]]] = {}
    for item in items:
        groups.setdefault(item[0].priority, []).append(item)
    out = []
    for priority in sorted(groups):
        out.append(sorted(groups[priority], key=lambda i: (i[0].segment_epoch, i[0].key)))
    return out


def water_fill(wants: Sequence[int], budget: int) -> list[int]:
    """Split ``budget`` over ``wants`` as evenly as possible, never above a want.

    Leftover units after the even split go to the first entries (older segments
    first, the caller's order), so the result is deterministic.
    """
    if budget < 0:
        raise ConfigError("budget must not be negative")
    grants = [0] * len(wants)
    open_idx = [i for i, w in enumerate(wants) if w > 0]
    remaining = budget
    while remaining > 0 and open_idx:
        share = remaining // len(open_idx)
        if share == 0:
            for i in open_idx[:remaining]:
                grants[i] += 1
            remaining = 0
            break
        still_open = []
        for i in open_idx:
            take = min(share, wants[i] - grants[i])
            grants[i] += take
            remaining -= take
            if grants[i] < wants[i]:
                still_open.append(i)
        open_idx = still_open
    return grants


@dataclass(frozen=True)
class Split:
    """One Spark input partition: offsets [start, end) of one Kafka partition."""

    key: PartitionKey
    start: int
    end: int


def plan_splits(start: SourceOffset, end: SourceOffset, max_records_per_split: int) -> list[Split]:
    """The ranges between two offsets, each cut into pieces of at most the given size.

    Keys missing from ``start`` joined in ``end`` and hold no rows (see ``plan_end``).
    """
    if max_records_per_split < 1:
        raise ConfigError("max records per split must be at least 1")
    splits: list[Split] = []
    for key, stop in sorted(end.partitions.items()):
        begin = start.partitions.get(key)
        if begin is None or stop <= begin:
            continue
        at = begin
        while at < stop:
            nxt = min(stop, at + max_records_per_split)
            splits.append(Split(key, at, nxt))
            at = nxt
    return splits


def rows_between(start: SourceOffset, end: SourceOffset) -> int:
    return sum(s.end - s.start for s in plan_splits(start, end, 1 << 62))
