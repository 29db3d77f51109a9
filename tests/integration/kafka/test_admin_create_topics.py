"""KafkaAdmin.create_topics against a real broker: a topic it reports created is
writable at once. Before it waited for the partitions' leaders, an idempotent
producer writing the moment the topic existed could have its first batch to a
partition acknowledged (without an offset) and not written: one record in ~1,000 of
the failover test's repartition was lost that way."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, Message, TopicPartition
from confluent_kafka.admin import OffsetSpec

from streamplane.kafka.admin import KafkaAdmin
from streamplane.kafka.clients import consume_available, make_producer
from streamplane.local.fleet import FleetDescriptor

PARTITIONS = 48
ROUNDS = 8


def test_every_partition_answers_and_keeps_every_record_written_at_once(
    fleet: FleetDescriptor, consumer_factory: Callable[..., Any]
) -> None:
    bootstrap = fleet.bootstrap("local-b")
    admin = KafkaAdmin(bootstrap)
    acked: dict[bytes, tuple[str, int, int | None]] = {}

    def report(err: RawKafkaError | None, msg: Message) -> None:
        assert err is None, err
        acked[msg.value() or b""] = (msg.topic() or "", msg.partition() or 0, msg.offset())

    producer = make_producer(bootstrap, {"on_delivery": report})
    producer.list_topics(timeout=10)  # connected (and its producer id known) beforehand
    topics = [f"t.writable.{uuid.uuid4().hex[:8]}" for _ in range(ROUNDS)]
    try:
        for topic in topics:
            assert admin.create_topics([(topic, PARTITIONS, 1, {})])[topic] is None
            # Every leader already answers for its partition: no retry needed.
            latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # confluent-kafka leaves OffsetSpec.latest() unannotated
            offsets = admin.raw().list_offsets(
                {TopicPartition(topic, p): latest for p in range(PARTITIONS)},
                request_timeout=10,
            )
            assert all(f.result(timeout=15).offset == 0 for f in offsets.values())
            for i in range(4 * PARTITIONS):  # several batches per partition
                producer.produce(topic, f"{topic}/{i}".encode(), key=str(i).encode())
                producer.poll(0)
        assert producer.flush(30) == 0
        assert len(acked) == ROUNDS * 4 * PARTITIONS
        assert all(offset is not None for _, _, offset in acked.values())

        consumer = consumer_factory(bootstrap)
        consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
        found: dict[bytes, tuple[str, int, int | None]] = {}
        while len(found) < len(acked):
            batch = consume_available(consumer, 1000, 10.0)
            assert batch, f"{len(acked) - len(found)} acknowledged records not in Kafka"
            for m in batch:
                found[m.value() or b""] = (m.topic() or "", m.partition() or 0, m.offset())
        assert found == acked
    finally:
        admin.delete_topics(topics)


def test_a_topic_asked_for_before_it_exists_is_writable_once_created(
    fleet: FleetDescriptor,
) -> None:
    """Asking a topic's offsets before it exists (a lag monitor or a control plane
    may) leaves librdkafka's admin client with the topic cached as unknown. Without
    refreshing a new topic's metadata before asking its leaders, ListOffsets then
    answered "no leaders found" for 20 s and more: 39 of 40 topics were reported not
    created with a 10 s timeout; with the refresh, 0 of 40 (worst 0.19 s)."""
    admin = KafkaAdmin(fleet.bootstrap("local-b"))
    topics = [f"t.asked-before.{uuid.uuid4().hex[:8]}" for _ in range(5)]
    try:
        for topic in topics:
            latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # confluent-kafka leaves OffsetSpec.latest() unannotated
            before = admin.raw().list_offsets({TopicPartition(topic, 0): latest}, request_timeout=5)
            for future in before.values():
                with pytest.raises(KafkaException):
                    future.result(timeout=6)  # unknown topic
            assert admin.create_topics([(topic, 12, 1, {})], timeout=5.0) == {topic: None}
    finally:
        admin.delete_topics(topics)
