"""``consume_available`` against a real broker: a short batch comes back without waiting
out the timeout (``Consumer.consume(n, timeout)`` waits it whole when fewer than ``n``
records are queued)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

from streamplane.kafka.clients import consume_available
from streamplane.local.fleet import FleetDescriptor

TIMEOUT_S = 20.0  # far longer than a fetch on loopback: returning early is the behaviour


def test_a_short_batch_returns_without_waiting_out_the_timeout(
    fleet: FleetDescriptor,
    topic_factory: Callable[..., str],
    producer_factory: Callable[..., Any],
    consumer_factory: Callable[..., Any],
) -> None:
    bootstrap = fleet.bootstrap("local-a")
    topic = topic_factory("local-a", partitions=1)
    producer = producer_factory(bootstrap)
    for i in range(10):
        producer.produce(topic, str(i).encode())
    producer.flush(10)
    consumer = consumer_factory(bootstrap)
    consumer.assign([TopicPartition(topic, 0, 0)])

    got: list[Any] = []
    started = time.monotonic()
    while len(got) < 10 and time.monotonic() - started < TIMEOUT_S:
        got += consume_available(consumer, 1000, TIMEOUT_S)
    took = time.monotonic() - started
    assert [m.value() for m in got] == [str(i).encode() for i in range(10)]
    assert took < TIMEOUT_S / 2, f"waited {took:.1f}s for 10 queued records"
    # Nothing queued: it waits for the first record, up to the timeout.
    started = time.monotonic()
    assert consume_available(consumer, 1000, 0.5) == []
    assert time.monotonic() - started >= 0.4
