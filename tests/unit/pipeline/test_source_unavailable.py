"""The Spark source's planning when some partitions of a cluster do not answer (a broker
of the cluster is down, a leader is moving), with a stand-in for the driver's Kafka
consumer: no Spark, no broker. A dead cluster's planning on a real fleet is
``tests/integration/failover/test_sick_cluster_readers.py``."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, TopicPartition

from streamplane.core.routing import RoutingTable, Segment, SegmentState
from streamplane.pipeline.options import parse_read_options
from streamplane.pipeline.planning import Limit, PartitionKey, SourceOffset, plan_end
from streamplane.pipeline.source import StreamplaneStreamReader

TOPIC = "sp.s.events.e1"
TABLE = RoutingTable(
    "s", 1, ("events",), (Segment("events", "local-a", TOPIC, 3, SegmentState.ACTIVE, 1),)
)
KEYS = [PartitionKey("local-a", TOPIC, p) for p in range(3)]
SOURCE_LOG = "streamplane.pipeline.source"


class StandInConsumer:
    """The driver's consumer of one cluster: watermarks per partition, or an error."""

    def __init__(self, high: dict[int, int]) -> None:
        self.high = high
        self.failing: dict[int, int] = {}  # partition -> KafkaError code
        self.asked: list[tuple[int, float]] = []

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]:
        self.asked.append((tp.partition, timeout))
        code = self.failing.get(tp.partition)
        if code is not None:
            raise KafkaException(RawKafkaError(code))
        return 0, self.high[tp.partition]

    def close(self) -> None:
        pass


def reader_with(consumer: StandInConsumer) -> StreamplaneStreamReader:
    options = {"stream": "s", "group": "g", "controlPlane": "http://127.0.0.1:1"}
    reader = StreamplaneStreamReader(parse_read_options(options))
    reader._bootstraps["local-a"] = "127.0.0.1:1"
    reader._consumers["local-a"] = consumer  # type: ignore[assignment]
    return reader


def planned(reader: StreamplaneStreamReader) -> set[PartitionKey]:
    return {i.key for i in reader._partition_infos(TABLE, "earliest")}


@pytest.mark.parametrize("failing", [0, 1, 2])
@pytest.mark.parametrize("code", [RawKafkaError._UNKNOWN_PARTITION, RawKafkaError._TIMED_OUT])
def test_one_failing_partition_leaves_the_others_planned(failing: int, code: int) -> None:
    consumer = StandInConsumer({0: 100, 1: 200, 2: 300})
    consumer.failing[failing] = code
    reader = reader_with(consumer)
    healthy = {k for k in KEYS if k.partition != failing}
    # A timeout on the first partition asked cannot tell a dead broker from a dead
    # cluster: that batch skips the cluster; the next asks the others first.
    if code == RawKafkaError._TIMED_OUT and failing == 0:
        assert planned(reader) == set()
    assert planned(reader) == healthy
    assert planned(reader) == healthy
    # The failing partition gets the short probe once it failed, the others the full wait.
    last = consumer.asked[-3:]
    assert sorted(last) == sorted((p, 1.0 if p == failing else 10.0) for p in range(3))


def test_the_failing_partitions_offset_is_held_and_it_joins_when_it_answers() -> None:
    consumer = StandInConsumer({0: 100, 1: 200, 2: 300})
    reader = reader_with(consumer)
    start = SourceOffset(1, {k: 0 for k in KEYS})
    consumer.failing[1] = RawKafkaError._UNKNOWN_PARTITION
    end = plan_end(start, reader._partition_infos(TABLE, "earliest", KEYS), Limit(), 1)
    assert end.partitions == {KEYS[0]: 100, KEYS[1]: 0, KEYS[2]: 300}
    consumer.failing.clear()
    consumer.high = {0: 150, 1: 250, 2: 300}
    later = plan_end(end, reader._partition_infos(TABLE, "earliest", KEYS), Limit(), 1)
    assert later.partitions == {KEYS[0]: 150, KEYS[1]: 250, KEYS[2]: 300}


def test_a_new_query_joins_a_partition_that_did_not_answer_at_its_beginning() -> None:
    consumer = StandInConsumer({0: 100, 1: 200, 2: 300})
    consumer.failing[0] = RawKafkaError._UNKNOWN_PARTITION
    reader = reader_with(consumer)
    first = SourceOffset(
        1, {i.key: i.join_offset for i in reader._partition_infos(TABLE, "earliest")}
    )
    assert first.partitions == {KEYS[1]: 0, KEYS[2]: 0}
    consumer.failing.clear()
    end = plan_end(first, reader._partition_infos(TABLE, "earliest", list(first.partitions)),
                   Limit(), 1)  # fmt: skip
    assert end.partitions == {KEYS[0]: 0, KEYS[1]: 200, KEYS[2]: 300}


def test_a_cluster_that_does_not_answer_is_asked_once_per_batch() -> None:
    consumer = StandInConsumer({0: 100, 1: 200, 2: 300})
    consumer.failing = dict.fromkeys(range(3), RawKafkaError._TRANSPORT)
    reader = reader_with(consumer)
    for _ in range(3):
        assert planned(reader) == set()
    # One query each (the short probe once it failed), the partition asked first taking
    # turns: a timeout on one partition of a live cluster does not hide the others.
    assert consumer.asked == [(0, 10.0), (1, 1.0), (2, 1.0)]
    consumer.failing.clear()
    assert planned(reader) == set(KEYS)


def test_a_partition_is_named_once_per_cause_and_its_recovery_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = StandInConsumer({0: 100, 1: 200, 2: 300})
    reader = reader_with(consumer)
    planned(reader)
    consumer.failing[0] = RawKafkaError._UNKNOWN_PARTITION
    with caplog.at_level(logging.WARNING, logger=SOURCE_LOG):
        for _ in range(5):
            planned(reader)
        consumer.failing[0] = RawKafkaError._TIMED_OUT
        for _ in range(5):
            planned(reader)
        consumer.failing.clear()
        planned(reader)
        planned(reader)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "watermarks of local-a/sp.s.events.e1[0] unavailable (_UNKNOWN_PARTITION: Local: "
        "Unknown partition): that partition is left out of the micro-batches, its offset "
        "held, until it answers (the rest of local-a is read)",
        "watermarks of local-a/sp.s.events.e1[0] unavailable (_TIMED_OUT: Local: Timed out): "
        "that partition is left out of the micro-batches, its offset held, until it answers "
        "(the rest of local-a is read)",
        "local-a/sp.s.events.e1[0] answers again: back in the micro-batches",
    ]


def test_a_cluster_that_does_not_answer_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    consumer = StandInConsumer({0: 100, 1: 200, 2: 300})
    consumer.failing = dict.fromkeys(range(3), RawKafkaError._TRANSPORT)
    reader = reader_with(consumer)
    with caplog.at_level(logging.WARNING, logger=SOURCE_LOG):
        for _ in range(4):
            planned(reader)
        consumer.failing.clear()
        planned(reader)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "cluster local-a does not answer (_TRANSPORT: Local: Broker transport failure on "
        "local-a/sp.s.events.e1[0]): its partitions are left out of the micro-batches, their "
        "offsets held, until it does",
        "cluster local-a answers again",
    ]
