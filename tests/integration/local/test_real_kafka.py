"""The local fleet runs real Apache Kafka: exercise features only a real broker has."""

from __future__ import annotations

import glob
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.fleet import FleetDescriptor
from tests.waiting import wait_for

ZSTD_CODEC = 4


def _consume_all(consumer: Consumer, expected: int, timeout_s: float = 30.0) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=0.5):
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None, msg
            out.append(value)
    return out


def test_two_clusters_are_distinct_kafka_clusters(fleet: FleetDescriptor) -> None:
    ids = {KafkaAdmin(c.bootstrap).metadata().cluster_id for c in fleet.clusters.values()}
    assert len(ids) == 2
    assert fleet.kafka_version.startswith("4.")


def test_six_partitions_zstd_round_trip(
    fleet: FleetDescriptor,
    topic_factory: Callable[..., str],
    producer_factory: Callable[..., Producer],
    consumer_factory: Callable[..., Consumer],
) -> None:
    bootstrap = fleet.bootstrap("local-a")
    topic = topic_factory("local-a", partitions=6)
    md = KafkaAdmin(bootstrap).metadata()
    assert sorted(md.topics[topic].partitions) == [0, 1, 2, 3, 4, 5]

    producer = producer_factory(bootstrap, **{"compression.type": "zstd", "linger.ms": 20})
    values = [f"record-{i}-".encode() * 20 for i in range(3000)]
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % 6)
    assert producer.flush(30) == 0

    consumer = consumer_factory(bootstrap)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
    assert sorted(_consume_all(consumer, len(values))) == sorted(values)

    # The batches on disk are really zstd-compressed: read the record-batch attributes
    # (offset 21 of a v2 batch header: baseOffset 8, length 4, epoch 4, magic 1, crc 4).
    log_dir = fleet.cluster("local-a").brokers[0].log_dir
    segment = sorted(glob.glob(f"{log_dir}/{topic}-0/*.log"))[0]
    header = Path(segment).read_bytes()[:23]
    magic = header[16]
    (attributes,) = struct.unpack(">h", header[21:23])
    assert magic == 2
    assert attributes & 0x7 == ZSTD_CODEC


def test_commit_with_3000_byte_metadata_reads_back(
    fleet: FleetDescriptor,
    topic_factory: Callable[..., str],
    consumer_factory: Callable[..., Consumer],
) -> None:
    bootstrap = fleet.bootstrap("local-b")
    topic = topic_factory("local-b", partitions=2)
    group = f"g.{uuid.uuid4().hex[:8]}"
    metadata = ("sp1:" + "x" * 3000)[:3000]
    consumer = consumer_factory(bootstrap, group)

    def commit() -> bool:
        # A group coordinator still loading ``__consumer_offsets`` (a fleet just started
        # on a busy machine) answers COORDINATOR_LOAD_IN_PROGRESS: retriable, as any
        # client does.
        try:
            consumer.commit(
                offsets=[TopicPartition(topic, 1, 42, metadata=metadata)], asynchronous=False
            )
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            return False
        return True

    wait_for("the commit taken", commit, 60, every=0.5)

    committed = consumer.committed([TopicPartition(topic, 1)], timeout=10)
    assert committed[0].offset == 42
    assert committed[0].metadata == metadata

    # The admin API (ListConsumerGroupOffsets) sees the same commit.
    admin = KafkaAdmin(bootstrap).raw()
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    listed = {(tp.topic, tp.partition): tp for tp in fut.result(10).topic_partitions}
    assert listed[(topic, 1)].offset == 42
    assert listed[(topic, 1)].metadata == metadata


def test_create_partitions_and_describe_configs(
    fleet: FleetDescriptor, topic_factory: Callable[..., str]
) -> None:
    bootstrap = fleet.bootstrap("local-a")
    topic = topic_factory("local-a", partitions=6, config={"retention.ms": "3600000"})
    admin = KafkaAdmin(bootstrap)
    assert admin.create_partitions(topic, 9)[topic] is None
    # Returned only once every partition's leader answers for it: no polling here.
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # confluent-kafka leaves OffsetSpec.latest() unannotated
    offsets = admin.raw().list_offsets(
        {TopicPartition(topic, p): latest for p in range(9)}, request_timeout=10
    )
    assert sorted(tp.partition for tp, f in offsets.items() if f.result(15).offset == 0) == [
        *range(9)
    ]

    assert admin.describe_topic_configs(topic)["retention.ms"] == "3600000"
    broker = admin.describe_broker_configs(fleet.cluster("local-a").brokers[0].node_id)
    assert broker["offsets.retention.minutes"] == "10080"
    assert broker["auto.create.topics.enable"] == "false"
    assert broker["offset.metadata.max.bytes"] == "4096"


def test_no_automatic_topic_creation(
    fleet: FleetDescriptor, producer_factory: Callable[..., Producer]
) -> None:
    bootstrap = fleet.bootstrap("local-a")
    producer = producer_factory(bootstrap, **{"message.timeout.ms": 2000})
    errors: list[object] = []
    producer.produce(
        f"missing.{uuid.uuid4().hex[:6]}", b"x", on_delivery=lambda e, m: errors.append(e)
    )
    producer.flush(10)
    assert errors and errors[0] is not None


def test_consumer_group_through_kafka_coordinator_and_offsets_topic(
    fleet: FleetDescriptor,
    topic_factory: Callable[..., str],
    producer_factory: Callable[..., Producer],
    consumer_factory: Callable[..., Consumer],
) -> None:
    bootstrap = fleet.bootstrap("local-b")
    topic = topic_factory("local-b", partitions=3)
    producer = producer_factory(bootstrap)
    for i in range(30):
        producer.produce(topic, value=str(i).encode(), partition=i % 3)
    assert producer.flush(10) == 0

    group = f"g.{uuid.uuid4().hex[:8]}"
    consumer = consumer_factory(bootstrap, group)
    consumer.subscribe([topic])
    got = _consume_all(consumer, 30)
    assert len(got) == 30
    assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
    consumer.commit(asynchronous=False)

    admin = KafkaAdmin(bootstrap).raw()
    groups = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in groups.valid}

    # The commit is a record in __consumer_offsets, keyed by (group, topic, partition).
    reader = consumer_factory(bootstrap)
    parts = KafkaAdmin(bootstrap).metadata().topics["__consumer_offsets"].partitions
    reader.assign([TopicPartition("__consumer_offsets", p, 0) for p in parts])
    found: set[int] = set()
    deadline = time.monotonic() + 20
    needle = group.encode()
    while len(found) < 3 and time.monotonic() < deadline:
        for msg in reader.consume(500, timeout=0.5):
            key = msg.key()
            if msg.error() or key is None or needle not in key:
                continue
            (version,) = struct.unpack_from(">h", key, 0)
            if version in (0, 1):
                off = 2
                (glen,) = struct.unpack_from(">h", key, off)
                off += 2 + glen
                (tlen,) = struct.unpack_from(">h", key, off)
                t = key[off + 2 : off + 2 + tlen].decode()
                off += 2 + tlen
                (partition,) = struct.unpack_from(">i", key, off)
                if t == topic:
                    found.add(partition)
    assert found == {0, 1, 2}
