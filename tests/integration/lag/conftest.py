"""Helpers for the lag tests: raw commits with metadata, unique names, metric values."""

from __future__ import annotations

import re
import uuid

from confluent_kafka import Consumer, TopicPartition

from streamplane.kafka.clients import consumer_config


def commit(
    bootstrap: str,
    group: str,
    topic: str,
    partition: int,
    offset: int,
    metadata: str | None = None,
) -> None:
    """Commit one offset (with metadata) for ``group``, as any Kafka client would."""
    consumer = Consumer(consumer_config(bootstrap, group))
    try:
        tp = (
            TopicPartition(topic, partition, offset)
            if metadata is None
            else TopicPartition(topic, partition, offset, metadata=metadata)
        )
        consumer.commit(offsets=[tp], asynchronous=False)
    finally:
        consumer.close()


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of the Prometheus sample ``name`` with these labels in ``text``."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None
