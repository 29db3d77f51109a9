"""Helpers for the lag tests: raw commits with metadata, unique names."""

from __future__ import annotations

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
