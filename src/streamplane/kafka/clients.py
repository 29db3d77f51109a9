"""Configuration builders for confluent-kafka producers and consumers.

One place decides the settings streamplane relies on (idempotence, acks, quiet logs);
callers pass ``extra`` for anything else, in librdkafka's dotted keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer

from streamplane.kafka.admin import QUIET


def producer_config(bootstrap: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "zstd",
        **QUIET,
        **(extra or {}),
    }


def consumer_config(
    bootstrap: str, group: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        **QUIET,
        **(extra or {}),
    }


def make_producer(bootstrap: str, extra: Mapping[str, Any] | None = None) -> Producer:
    return Producer(producer_config(bootstrap, extra))


def make_consumer(bootstrap: str, group: str, extra: Mapping[str, Any] | None = None) -> Consumer:
    return Consumer(consumer_config(bootstrap, group, extra))
