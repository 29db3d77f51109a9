"""A round trip through one cluster: create a topic, produce, consume, compare."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from streamplane.exceptions import KafkaError, LocalFleetError
from streamplane.kafka.admin import KafkaAdmin
from streamplane.kafka.clients import consume_available, make_consumer, make_producer


@dataclass(frozen=True)
class RoundTrip:
    cluster: str
    topic: str
    produced: int
    consumed: int
    seconds: float


def round_trip(cluster: str, bootstrap: str, records: int = 1000, partitions: int = 3) -> RoundTrip:
    """Produce ``records`` zstd-compressed records and read every one back."""
    started = time.monotonic()
    topic = f"sp.smoke.{uuid.uuid4().hex[:8]}"
    admin = KafkaAdmin(bootstrap)
    err = admin.create_topics([(topic, partitions, 1, {})])[topic]
    if err is not None:
        raise err
    try:
        producer = make_producer(bootstrap)
        sent = {f"{i}".encode() for i in range(records)}
        for value in sent:
            producer.produce(topic, value=value, key=value)
        if producer.flush(30) != 0:
            raise LocalFleetError(f"{cluster}: records still unsent after 30s")
        consumer = make_consumer(bootstrap, f"sp-smoke-{uuid.uuid4().hex[:8]}")
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(seen) < records and time.monotonic() < deadline:
            for msg in consume_available(consumer, 500, 0.5):
                if msg.error():
                    raise KafkaError(f"{cluster}: {msg.error()}")
                payload = msg.value()
                if payload is not None:
                    seen.add(payload)
        consumer.close()
        if seen != sent:
            raise LocalFleetError(f"{cluster}: sent {len(sent)} records, read back {len(seen)}")
        return RoundTrip(cluster, topic, len(sent), len(seen), time.monotonic() - started)
    finally:
        admin.delete_topics([topic])
