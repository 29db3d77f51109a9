"""A three-broker cluster with racks: racks in metadata, broker kill and restart."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer, TopicPartition

from streamplane.kafka.admin import KafkaAdmin
from streamplane.kafka.clients import make_consumer, make_producer
from streamplane.local.fleet import ClusterInfo, LocalFleet, cluster_status
from tests.waiting import wait_for


def test_racks_in_metadata(rack_cluster: ClusterInfo) -> None:
    described = KafkaAdmin(rack_cluster.bootstrap).describe_cluster()
    assert {b.node_id: b.rack for b in described.brokers.values()} == {1: "a", 2: "b", 3: "c"}


def _produce(producer: Producer, topic: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(30) == 0


def test_rf3_topic_survives_broker_kill_and_restart(
    rack_local_fleet: LocalFleet, rack_cluster: ClusterInfo
) -> None:
    admin = KafkaAdmin(rack_cluster.bootstrap)
    topic = f"rf3.{uuid.uuid4().hex[:8]}"
    assert admin.create_topics([(topic, 3, 3, {"min.insync.replicas": "2"})])[topic] is None
    producer = make_producer(rack_cluster.bootstrap)
    _produce(producer, topic, 0, 300)

    rack_local_fleet.kill_broker("racked", 2)
    assert cluster_status(rack_local_fleet.descriptor().cluster("racked")).brokers_up == 2
    _produce(producer, topic, 300, 300)  # acks=all with min ISR 2 still succeeds

    rack_local_fleet.start_broker("racked", 2)

    def isr_full() -> bool:
        md = admin.raw().list_topics(topic, timeout=5)
        return all(len(p.isrs) == 3 for p in md.topics[topic].partitions.values())

    wait_for("the ISR back to 3 replicas after the broker restarted", isr_full, 60, every=0.5)

    consumer = make_consumer(rack_cluster.bootstrap, f"g.{uuid.uuid4().hex[:6]}")
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 600 and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=0.5):
            assert msg.error() is None
            value = msg.value()
            assert value is not None, msg
            seen.add(value)
    consumer.close()
    assert seen == {str(i).encode() for i in range(600)}
