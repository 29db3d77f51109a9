"""startingOffsets=latest on the real fleet: where partitions missing from the query's
first offsets join later (the driver side, no Spark).

- a failover's new segment (created after the query started) is read from its start:
  all its records are new;
- a partition of the starting segments that did not answer at the start joins where
  ``latest`` would have put it: the records appended before the start are not read
  (it joined at its beginning, reading them all, before).

The partition that does not answer is staged by failing its watermark query the way
librdkafka fails it when the partition has no leader; everything else is the real
broker (the offset by time included) and the real control plane."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, Producer, TopicPartition

from streamplane.client.producer import StreamProducer
from streamplane.kafka.clients import producer_config
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from streamplane.pipeline.options import parse_read_options
from streamplane.pipeline.planning import PartitionKey, SourceOffset
from streamplane.pipeline.source import StreamplaneStreamReader


class WithoutLeader:
    """The driver's consumer of a cluster, whose watermark query of one partition fails
    as it does while that partition has no leader."""

    def __init__(self, consumer: Any, partition: int) -> None:
        self.consumer = consumer
        self.partition = partition

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> Any:
        if tp.partition == self.partition:
            raise KafkaException(RawKafkaError(RawKafkaError._UNKNOWN_PARTITION))
        return self.consumer.get_watermark_offsets(tp, timeout=timeout, cached=cached)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def latest_reader(control_plane: ControlPlaneProcess, stream: str) -> StreamplaneStreamReader:
    options = {
        "stream": stream,
        "group": f"g-{uuid.uuid4().hex[:8]}",
        "controlPlane": control_plane.url,
        "startingOffsets": "latest",
        "commitToKafka": "false",
    }
    return StreamplaneStreamReader(parse_read_options(options))


def next_offsets(reader: StreamplaneStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    return reader.latestOffset(start, reader.getDefaultReadLimit())


def partitions(offset: dict[str, Any]) -> dict[PartitionKey, int]:
    return dict(SourceOffset.from_json(offset).partitions)


def test_a_failover_segment_made_after_the_start_is_read_from_its_start(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", partitions=1, lanes=("realtime",))
    with control_plane.client() as client, StreamProducer(stream, client) as producer:
        for i in range(50):
            producer.send(f"before-{i}")
    reader = latest_reader(control_plane, stream)
    try:
        initial = reader.initialOffset()
        ((old, at),) = partitions(initial).items()
        assert at == 50  # latest: the records already there are not read
        with control_plane.client() as client:
            client.failover(stream, "local-b")
            new_topic = client.routing(stream).active("realtime").topic
            with StreamProducer(stream, client) as producer:
                for i in range(30):
                    producer.send(f"after-{i}")
        new = PartitionKey("local-b", new_topic, 0)
        joined = next_offsets(reader, initial)
        assert partitions(joined) == {old: 50, new: 0}
        assert partitions(next_offsets(reader, joined)) == {old: 50, new: 30}
    finally:
        reader.stop()


def test_a_partition_without_a_leader_at_the_start_joins_where_latest_was(
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    fleet: FleetDescriptor,
) -> None:
    stream = stream_factory("local-a", partitions=2, lanes=("realtime",))
    with control_plane.client() as client:
        topic = client.routing(stream).active("realtime").topic
    producer = Producer(producer_config(fleet.bootstrap("local-a")))

    def produce(partition: int, count: int) -> None:
        for i in range(count):
            producer.produce(topic, b"r%d" % i, partition=partition)
        assert producer.flush(30) == 0

    produce(0, 100)
    produce(1, 100)
    first, second = (PartitionKey("local-a", topic, p) for p in range(2))
    reader = latest_reader(control_plane, stream)
    try:
        planning = reader._consumer("local-a")
        reader._consumers["local-a"] = WithoutLeader(planning, 1)  # type: ignore[assignment]
        initial = reader.initialOffset()
        assert partitions(initial) == {first: 100}
        reader._consumers["local-a"] = planning  # the partition has a leader again
        produce(0, 5)
        produce(1, 10)
        joined = next_offsets(reader, initial)
        assert partitions(joined) == {first: 105, second: 100}, "not at 0: latest was 100"
        assert partitions(next_offsets(reader, joined)) == {first: 105, second: 110}
    finally:
        reader.stop()
