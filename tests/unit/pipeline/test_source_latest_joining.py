"""startingOffsets=latest: where a partition that joins after the query started begins.

One of the starting segments that did not answer at the start joins where ``latest``
would have put it (the first offset appended since the start); a failover's segment
newer than the start joins at its beginning (all its records are new). Stand-ins for
the control plane and the driver's consumer; the same on a real fleet is
``tests/integration/pipeline/test_source_latest_joining.py``."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, TopicPartition

from streamplane.core.routing import RoutingTable, Segment, SegmentState
from streamplane.pipeline.options import parse_read_options
from streamplane.pipeline.planning import PartitionKey, QueryStart, SourceOffset
from streamplane.pipeline.source import StreamplaneStreamReader
from tests.unit.pipeline.test_source_unavailable import KEYS, SOURCE_LOG, TABLE, StandInConsumer

NEW_TOPIC = "sp.s.events.e2"
FAILED_OVER = RoutingTable(
    "s",
    2,
    ("events",),
    (
        Segment("events", "local-a", KEYS[0].topic, 3, SegmentState.DRAINING, 1),
        Segment("events", "local-b", NEW_TOPIC, 1, SegmentState.ACTIVE, 2),
    ),
)
NEW = PartitionKey("local-b", NEW_TOPIC, 0)


class TimedConsumer(StandInConsumer):
    """A driver's consumer that also answers offsets by time: ``since[p]`` is the first
    offset of partition p appended at or after the time asked (-1: none)."""

    def __init__(self, high: dict[int, int]) -> None:
        super().__init__(high)
        self.since: dict[int, int] = {}
        self.times_asked: list[tuple[int, int]] = []  # (partition, time ms)
        self.times_failing: int | None = None  # a KafkaError code

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[Any]:
        self.times_asked += [(tp.partition, tp.offset) for tp in tps]
        if self.times_failing is not None:
            raise KafkaException(RawKafkaError(self.times_failing))
        return [TopicPartition(tp.topic, tp.partition, self.since[tp.partition]) for tp in tps]


class StandInControlPlane:
    def __init__(self, table: RoutingTable) -> None:
        self.table = table

    def routing(self, stream: str) -> RoutingTable:
        return self.table


def latest_reader(**consumers: TimedConsumer) -> tuple[StreamplaneStreamReader, Any]:
    options = {
        "stream": "s",
        "group": "g",
        "controlPlane": "http://127.0.0.1:1",
        "startingOffsets": "latest",
        "commitToKafka": "false",
    }
    reader = StreamplaneStreamReader(parse_read_options(options))
    control_plane = StandInControlPlane(TABLE)
    reader._client = control_plane  # type: ignore[assignment]
    for cluster, consumer in consumers.items():
        name = cluster.replace("_", "-")
        reader._bootstraps[name] = "127.0.0.1:1"
        reader._consumers[name] = consumer  # type: ignore[assignment]
    return reader, control_plane


def next_offsets(reader: StreamplaneStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    return reader.latestOffset(start, reader.getDefaultReadLimit())


def partitions(offset: dict[str, Any]) -> dict[PartitionKey, int]:
    return dict(SourceOffset.from_json(offset).partitions)


def test_a_partition_unavailable_at_the_start_joins_where_latest_would_have_put_it() -> None:
    consumer = TimedConsumer({0: 100, 1: 200, 2: 300})
    consumer.failing[1] = RawKafkaError._UNKNOWN_PARTITION
    reader, _ = latest_reader(local_a=consumer)
    initial = reader.initialOffset()
    started = SourceOffset.from_json(initial).query_start
    assert started is not None and started.epoch == 1
    assert reader.initialOffset() == initial  # Spark asks twice: the same start
    assert partitions(initial) == {KEYS[0]: 100, KEYS[2]: 300}
    consumer.failing.clear()
    consumer.high = {0: 110, 1: 230, 2: 300}
    consumer.since = {1: 200}  # 200 records were there before the start, 30 came after
    joined = next_offsets(reader, initial)
    assert partitions(joined) == {KEYS[0]: 110, KEYS[1]: 200, KEYS[2]: 300}
    assert consumer.times_asked == [(1, started.time_ms)]
    assert partitions(next_offsets(reader, joined))[KEYS[1]] == 230  # the 30 new ones


def test_with_nothing_appended_since_the_start_it_joins_at_its_end() -> None:
    consumer = TimedConsumer({0: 100, 1: 200, 2: 300})
    consumer.failing[1] = RawKafkaError._UNKNOWN_PARTITION
    reader, _ = latest_reader(local_a=consumer)
    initial = reader.initialOffset()
    consumer.failing.clear()
    consumer.since = {1: -1}
    assert partitions(next_offsets(reader, initial))[KEYS[1]] == 200


def test_a_failover_segment_newer_than_the_start_joins_at_its_beginning() -> None:
    old, new = TimedConsumer({0: 100, 1: 200, 2: 300}), TimedConsumer({0: 40})
    reader, control_plane = latest_reader(local_a=old, local_b=new)
    initial = reader.initialOffset()
    control_plane.table = FAILED_OVER
    joined = next_offsets(reader, initial)
    assert partitions(joined)[NEW] == 0
    assert new.times_asked == [] and old.times_asked == []
    assert partitions(next_offsets(reader, joined))[NEW] == 40


def test_an_offset_without_the_start_joins_it_at_its_beginning() -> None:
    """An offset written before the start was kept (an older checkpoint): where latest
    was cannot be known."""
    consumer = TimedConsumer({0: 100, 1: 200, 2: 300})
    reader, _ = latest_reader(local_a=consumer)
    older = SourceOffset(1, {KEYS[0]: 100, KEYS[2]: 300}).to_json()
    assert partitions(next_offsets(reader, older))[KEYS[1]] == 0
    assert consumer.times_asked == []


def test_while_its_offset_by_time_is_unreadable_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = TimedConsumer({0: 100, 1: 200, 2: 300})
    reader, _ = latest_reader(local_a=consumer)
    begin = SourceOffset(1, {KEYS[0]: 100, KEYS[2]: 300}, QueryStart(1, 1_700_000_000_000))
    consumer.times_failing = RawKafkaError._TIMED_OUT
    with caplog.at_level(logging.WARNING, logger=SOURCE_LOG):
        for _ in range(3):
            assert KEYS[1] not in partitions(next_offsets(reader, begin.to_json()))
    consumer.times_failing = None
    consumer.since = {1: 150}
    assert partitions(next_offsets(reader, begin.to_json()))[KEYS[1]] == 150
    assert [r.getMessage() for r in caplog.records] == [
        "offsets by time on local-a unreadable (_TIMED_OUT: Local: Timed out): its partitions "
        "that join after the query started at latest wait for a later micro-batch"
    ]


def test_the_start_is_carried_from_offset_to_offset() -> None:
    begin = SourceOffset(1, {KEYS[0]: 0}, QueryStart(1, 1_700_000_000_000))
    doc = begin.to_json()
    assert doc["queryStart"] == {"epoch": 1, "timeMs": 1_700_000_000_000}
    assert SourceOffset.from_json(doc) == begin
    consumer = TimedConsumer({0: 100, 1: 200, 2: 300})
    reader, _ = latest_reader(local_a=consumer)
    consumer.since = {1: 0, 2: 0}
    joined = SourceOffset.from_json(next_offsets(reader, doc))
    assert joined.partitions == {KEYS[0]: 100, KEYS[1]: 0, KEYS[2]: 0}
    assert joined.query_start == begin.query_start
