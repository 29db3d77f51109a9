"""Mistakes an application makes with the client, on the real fleet: each one told
clearly, none losing a record (found by a first-time user of the library)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from streamplane.client.consumer import StreamConsumer
from streamplane.client.dlq import list_dead_letters, replay_dead_letters
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import NotFound, ProduceError, RecordTooLarge
from streamplane.kafka.clients import producer_config
from streamplane.local.fleet import FleetDescriptor
from tests.waiting import wait_for


def test_a_str_counts_its_utf8_bytes_against_the_bound(
    control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    """``send("é" * 900)`` is 1,800 bytes: it was taken against a 1,000-byte bound (the
    topic allows 64 KiB more), and a consumer that rejected it could never dead-letter
    it (handed out again every second, holding the low watermark)."""
    stream = stream_factory("local-a", partitions=1, max_record_bytes=1000)
    with StreamProducer(stream, control_plane.client()) as producer:
        with pytest.raises(RecordTooLarge, match="1800 bytes"):
            producer.send("é" * 900)
        with pytest.raises(RecordTooLarge, match="1800 bytes"):
            producer.send(b"", key="é" * 900)
        sent = producer.send_batch([("é" * 900, None, None), ("é" * 400, "k", None)])
        assert sent.too_large == [0]
        producer.send("é" * 400)  # 800 bytes: within the bound
        producer.flush()


def test_a_foreign_record_over_the_bound_is_dead_lettered_with_its_provenance_alone(
    control_plane: Any, fleet: FleetDescriptor, stream_factory: Callable[..., str]
) -> None:
    """Another producer wrote a record over the stream's bound to the lane (its topic
    takes 64 KiB more). Rejected, its dead letter keeps only the provenance, so it
    settles (it was handed out every second forever, holding the low watermark);
    ``replay`` replays the rest and names it, left in the dlq lane."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1, max_record_bytes=1000)
    client = control_plane.client()
    topic = client.routing(stream).active("realtime").topic
    raw = Producer(producer_config(fleet.bootstrap("local-a")))
    for value in (b"small-0", b"x" * 5000, b"small-2"):
        raw.produce(topic, value, key=b"k")
    assert raw.flush(30) == 0
    with StreamConsumer(stream, "rejects-all", client, max_attempts=1) as consumer:

        def all_rejected() -> bool:
            for msg in consumer.poll_batch(10, 0.2):
                msg.reject("bad record")
            states = consumer.partition_states()  # none until the Assigner grants it
            return bool(states and states[0]["low_watermark"] == 3)

        wait_for("all three records settled", all_rejected, 30)
        assert consumer.stats["dlq"] == 3
    letters = sorted(
        list_dead_letters(client, stream).letters, key=lambda d: d.provenance["offset"]
    )
    assert [(d.value, d.key) for d in letters] == [
        (b"small-0", b"k"),
        (None, None),
        (b"small-2", b"k"),
    ]
    stub = letters[1].provenance
    assert (stub["offset"], stub["dropped"], stub["error"]) == ("1", "5001", "bad record")
    with pytest.raises(
        RecordTooLarge, match=r"replayed 2 records, but not 1 dead letter.*@1 on local-a"
    ):
        replay_dead_letters(client, stream)
    with pytest.raises(RecordTooLarge, match="replayed 0 records, but not 1 dead letter"):
        replay_dead_letters(client, stream)  # named again, the others not replayed twice


def test_a_deleted_stream_refuses_sends(
    control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    """Producers went on taking records for a deleted stream (failing only at flush),
    and the routing watch logged "unknown stream" every 2 s, forever."""
    stream = stream_factory("local-a", partitions=1)
    client = control_plane.client()
    producer = StreamProducer(stream, client)
    producer.send(b"before")
    producer.flush()
    client.delete_stream(stream)
    deleted = time.monotonic()
    accepted = 0  # sent before the producer heard of the deletion: they fail at flush

    def refused() -> bool:
        nonlocal accepted
        try:
            producer.send(b"after")
        except NotFound as exc:
            assert "was deleted" in str(exc)
            return True
        accepted += 1
        return False

    wait_for("sends to the deleted stream refused", refused, 60, every=0.2)
    print(f"refused {time.monotonic() - deleted:.2f} s after the deletion")
    thread = producer._watcher._thread
    assert thread is not None
    wait_for("the watch ended", lambda: not thread.is_alive(), 10)
    with pytest.raises(NotFound, match="was deleted"):
        producer.send(b"again")
    if accepted:
        with pytest.raises(ProduceError, match=f"{accepted} records? .*undelivered"):
            producer.close(1.0)
    else:
        producer.close(1.0)


def test_lanes_are_served_in_the_streams_order_whatever_order_they_are_named_in(
    control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    """``lanes=["bulk", "realtime"]`` served bulk first (the docs say the stream's
    order), and two members naming the same lanes in two orders were refused as
    reading different lanes (HTTP 400)."""
    stream = stream_factory("local-a", partitions=1)
    client = control_plane.client()
    with StreamProducer(stream, client) as producer:
        for i in range(2000):
            producer.send(b"b%d" % i, lane="bulk")
        producer.flush()
        for i in range(5):
            producer.send(b"r%d" % i, lane="realtime")
        producer.flush()
    group = f"g-{time.monotonic_ns()}"
    first = StreamConsumer(stream, group, client, lanes=["bulk", "realtime"])
    second = StreamConsumer(stream, group, client, lanes=["realtime", "bulk"])
    try:
        first.open()
        second.open()  # the same lanes: the same group reading
        assert first._lanes == ["realtime", "bulk"] == second._lanes
        seen: list[str] = []

        def realtime_done() -> bool:
            for consumer in (first, second):
                for msg in consumer.poll_batch(100, 0.1):
                    seen.append(msg.lane)
                    msg.ack()
            return seen.count("realtime") == 5

        wait_for("the 5 realtime records", realtime_done, 60, every=0.01)
        # The realtime records were not left behind the 2,000 bulk ones.
        assert seen.count("bulk") < 1000, seen.count("bulk")
    finally:
        first.close()
        second.close()
