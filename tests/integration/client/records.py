"""Numbered records in and dead letters out, for the client integration tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import read_provenance


def produce_numbers(
    client: ControlPlaneClient, stream: str, total: int, key_of: Callable[[int], int] = int
) -> None:
    """Records 0 .. total - 1 into ``stream``: each value is its number, each key
    ``key_of(number)``; flushed (leaving the producer's block flushes)."""
    with StreamProducer(stream, client) as producer:
        for i in range(total):
            producer.send(str(i).encode(), key=str(key_of(i)).encode())


def consume_until(
    consumer: StreamConsumer,
    done: Callable[[], bool],
    handle: Callable[[StreamMessage], None],
    timeout_s: float = 120.0,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None:
            handle(msg)
    assert done(), "timed out"


def read_dead_letters(
    client: ControlPlaneClient, stream: str, count: int
) -> dict[int, dict[str, str]]:
    """The provenance of ``stream``'s first ``count`` dead letters (read by a new
    group), by the number in the record's value."""
    dead: dict[int, dict[str, str]] = {}
    with StreamConsumer(stream, f"dlq-{uuid.uuid4().hex[:6]}", client, lanes=["dlq"]) as reader:

        def read(msg: StreamMessage) -> None:
            dead[int(msg.value or b"-1")] = read_provenance(msg.headers)
            msg.ack()

        consume_until(reader, lambda: len(dead) >= count, read)
    return dead
